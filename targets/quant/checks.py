"""The quant target's oracle, properties and input validation.

The oracle never cries wolf
---------------------------
A float32 implementation cannot reproduce every code of a float64 reference: a rotated,
rescaled coordinate that lies within rounding distance of a codebook boundary may land in
either neighbouring cell.  So codes are exact *except* inside the band
``[z - dz, z + dz]`` that :func:`fuzzkit.targets.quant.reference.z_error_bound` derives from the
rotation's rounding count, the rescale and the reference's own float64 error; a code outside the
range of cells that band touches is a bug.  When codes differ inside the band, the expected
scales and scores are recomputed in float64 *from the implementation's codes*, so a legitimate
code difference is never blamed on a score.

Float outputs use :func:`fuzzkit.oracles.close` with error bounds built from the computation:

- ``rotated_*``: a staged Hadamard rotation, ``|dy_d| <= min(g_L m_d, E2)`` (see
  ``z_error_bound``); reduction length ``L`` = rounding steps on a path through the butterflies;
- ``scales``: two norms of ``D`` squares, a square root each, the divide and the float32 storage:
  reduction length ``2D + 6``;
- ``scores``: the ``D``-term dot product with float32 centroids plus the relative error of the
  scale: ``3D + 10`` against ``scale_j |Rq_i| . |c_j|``, plus the query's rotation error
  ``min(g_L scale_j m_q . |c_j|, E2(q) ||v_j||)`` (``scale ||c|| = ||v||``);
- ``symmetric_scores``: one dot product and two scales: ``5D + 16`` against
  ``scale_j scale_k |c_j| . |c_k|``.

Scales and scores are judged in float32 whatever the precision: the stored scale is float32.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional

import numpy as np

import fuzzkit.oracles
from fuzzkit.failure import Failure
from fuzzkit.oracles.close import ROUNDING_SLACK
from fuzzkit.targets.quant import reference

Impl = Callable[[Mapping[str, Any]], Mapping[str, Any]]

OUTPUT_KEYS = (
    "codes", "scales", "rotated_vectors", "rotated_queries", "scores", "symmetric_scores",
    "encoded_bytes",
)
#: Input domain: non-zero |x| in [MIN_ABS, MAX_ABS] keeps every square and every sum of squares
#: inside float32's normal range; D <= MAX_DIM keeps the dense float64 reference affordable.
MIN_ABS, MAX_ABS, MAX_DIM = 1e-12, 1e12, 1024


# ---------------------------------------------------------------------------------- validation


def validate(inputs: Mapping[str, Any]) -> Optional[str]:
    """One line saying what is wrong with a case's inputs, or None."""
    for key in ("bits", "codebook", "rotation_seed", "vectors", "queries"):
        if key not in inputs:
            return f"quant inputs need key {key!r}"
    if inputs["bits"] not in reference.BITS:
        return f"bits must be one of {reference.BITS}, got {inputs['bits']!r}"
    if inputs["codebook"] not in reference.CODEBOOKS:
        return f"codebook must be one of {reference.CODEBOOKS}, got {inputs['codebook']!r}"
    seed = inputs["rotation_seed"]
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        return f"rotation_seed must be an integer in [0, 2**64), got {seed!r}"
    if inputs.get("precision", "float32") not in ("float32", "float64"):
        return f"precision must be 'float32' or 'float64', got {inputs['precision']!r}"
    dims = set()
    for key in ("vectors", "queries"):
        array = inputs[key]
        if not isinstance(array, np.ndarray) or array.dtype != np.float32 or array.ndim != 2:
            return f"{key} must be a 2-D float32 array"
        if not np.all(np.isfinite(array)):
            return f"{key} must be finite (no NaN or Inf)"
        magnitude = np.abs(array[array != 0])
        if magnitude.size and (magnitude.min() < MIN_ABS or magnitude.max() > MAX_ABS):
            return f"{key}: non-zero |values| must lie in [{MIN_ABS:g}, {MAX_ABS:g}]"
        dims.add(array.shape[1])
    if len(dims) != 1:
        return f"vectors and queries must have the same dimension, got {sorted(dims)}"
    (dim,) = dims
    if not 1 <= dim <= MAX_DIM:
        return f"dimension must be in 1..{MAX_DIM}, got {dim}"
    return None


# -------------------------------------------------------------------------------------- oracle


def _gamma(n: int, u: float) -> float:
    return n * u / (1.0 - n * u)


def _as_magnitude(absolute: np.ndarray, reduction_length: int, dtype: str) -> np.ndarray:
    """Express an absolute error bound as the magnitude ``close`` multiplies by its gamma."""
    u = fuzzkit.oracles.unit_roundoff(dtype)
    return np.asarray(absolute) / _gamma(reduction_length + ROUNDING_SLACK, u)


def _e2(norms: np.ndarray, dim: int, u: float) -> np.ndarray:
    """2-norm bound on a staged rotation's error: ``ROUNDS g_k sqrt(c_max) ||x||``."""
    c_max = max(reference.hadamard_chunks(dim))
    return reference.ROUNDS * _gamma(c_max.bit_length() + 1, u) * math.sqrt(c_max) * norms


def _rotation_bound(x: np.ndarray, magnitude: np.ndarray, u: float) -> np.ndarray:
    dim = x.shape[1]
    g_l = _gamma(reference.rotation_roundings(dim), u)
    norms = np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    return np.minimum(g_l * magnitude, _e2(norms, dim, u))


def _check_codes(expected: Mapping[str, Any], actual: Any) -> Optional[Failure]:
    codes = np.asarray(actual)
    want = expected["codes"]
    if codes.dtype != want.dtype:
        return Failure(
            "mismatch", f"codes: expected storage dtype {want.dtype}, got {codes.dtype}",
            "mismatch:quant:codes:dtype", {"expected": str(want.dtype), "actual": str(codes.dtype)},
        )
    if codes.shape != want.shape:
        return Failure(
            "mismatch", f"codes: expected shape {want.shape}, got {codes.shape}",
            "mismatch:quant:codes:shape",
            {"expected_shape": list(want.shape), "actual_shape": list(codes.shape)},
        )
    aux = expected["aux"]
    got = codes.astype(np.int64)
    bad = (got < aux["codes_low"]) | (got > aux["codes_high"])
    if not bad.any():
        return None
    j, d = (int(i) for i in np.argwhere(bad)[0])
    z, dz = float(aux["z"][j, d]), float(aux["z_error"][j, d])
    return Failure(
        "mismatch",
        f"codes[{j}, {d}]: expected {int(want[j, d])}, got {int(got[j, d])}; the float64 "
        f"coordinate z = {z:.17g} allows codes {int(aux['codes_low'][j, d])}.."
        f"{int(aux['codes_high'][j, d])} within its rounding band +-{dz:.3g} "
        f"({int(bad.sum())} of {bad.size} codes outside their band)",
        "mismatch:quant:codes",
        {"index": [j, d], "expected": int(want[j, d]), "actual": int(got[j, d]), "z": z,
         "z_error": dz, "allowed": [int(aux["codes_low"][j, d]), int(aux["codes_high"][j, d])],
         "count": int(bad.sum())},
    )


def oracle(inputs: Mapping[str, Any], expected: Mapping[str, Any],
           actual: Mapping[str, Any]) -> Optional[Failure]:
    """Compare an implementation's outputs with the reference's (see the module docstring)."""
    missing = [k for k in OUTPUT_KEYS if k not in actual]
    if missing:
        return Failure("mismatch", f"outputs lack {missing}", "mismatch:quant:missing-output",
                       {"missing": missing})
    vectors = np.asarray(inputs["vectors"], dtype=np.float64)
    queries = np.asarray(inputs["queries"], dtype=np.float64)
    dim = vectors.shape[1]
    precision = str(inputs.get("precision", "float32"))
    u = fuzzkit.oracles.unit_roundoff(precision)
    aux = expected["aux"]
    rot_len = aux["rotation_roundings"]

    failure = fuzzkit.oracles.exact(expected["encoded_bytes"], actual["encoded_bytes"],
                            name="encoded_bytes")
    for key, x in (("rotated_vectors", vectors), ("rotated_queries", queries)):
        if failure is None:
            bound = _rotation_bound(x, aux[f"{key}_magnitude"], u)
            bound = bound + _gamma(4 * dim, 2.0**-53) * aux[f"{key}_magnitude"]  # reference's own
            failure = fuzzkit.oracles.close(
                expected[key], actual[key], dtype=precision, reduction_length=rot_len,
                magnitude=_as_magnitude(bound, rot_len, precision), name=key,
            )
    if failure is None:
        failure = _check_codes(expected, actual["codes"])
    if failure is not None:
        return failure

    codes = np.asarray(actual["codes"]).astype(np.int64)
    if np.array_equal(codes, expected["codes"]):
        derived = {key: expected[key] for key in ("scales", "scores", "symmetric_scores")}
        derived.update({key: aux[key] for key in (
            "scores_magnitude", "scores_rotation_magnitude", "symmetric_magnitude")})
    else:  # codes differ only inside their rounding bands: judge the rest by these codes
        derived = reference.scores_from_codes(inputs, codes)
    scales = np.asarray(derived["scales"])
    failure = fuzzkit.oracles.close(derived["scales"], actual["scales"], dtype="float32",
                            reduction_length=2 * dim + 6, magnitude=scales, name="scales")
    if failure is not None:
        return failure

    n_scores = 3 * dim + 10
    q_norms = np.linalg.norm(queries, axis=1)[:, None]
    v_norms = np.linalg.norm(vectors, axis=1)[None, :]
    dot_magnitude = derived["scores_magnitude"]
    rotation_error = np.minimum(_gamma(rot_len, u) * derived["scores_rotation_magnitude"],
                                _e2(q_norms, dim, u) * v_norms)
    failure = fuzzkit.oracles.close(
        derived["scores"], actual["scores"], dtype="float32", reduction_length=n_scores,
        magnitude=dot_magnitude + _as_magnitude(rotation_error, n_scores, "float32"),
        name="scores",
    )
    if failure is not None:
        return failure
    return fuzzkit.oracles.close(
        derived["symmetric_scores"], actual["symmetric_scores"], dtype="float32",
        reduction_length=5 * dim + 16, magnitude=derived["symmetric_magnitude"],
        name="symmetric_scores",
    )


# ---------------------------------------------------------------------------------- properties
#
# Each property runs the implementation itself (a property sees only ``impl`` and ``inputs``),
# needs no reference, and is cheap enough to run on every generated case; the ones that only
# read the case's own outputs take the run the runner has just judged (``uses_output``) and run
# the implementation themselves only when called without it.

ORTHOGONALITY_TOLERANCE = 1e-12
#: Power-of-two factor for the scaling relation: multiplying by 4 is exact in binary floating
#: point, so a homogeneous implementation gives *identical* codes and exactly 4x the scale --
#: no rounding band needed, and no false alarm possible.
ALPHA = 4.0


def _invariant(name: str, message: str, **details: Any) -> Failure:
    return Failure("invariant", f"{name}: {message}", f"invariant:quant:{name}", details)


def rotation_orthogonal(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """The implementation's rotation preserves norms and inner products (~1e-12, float64 run).

    Runs the case with ``precision = "float64"`` and compares the Gram matrices of the inputs
    (vectors and queries together) and of the returned rotated rows, relative to
    ``||x_i|| ||x_j||``.  An implementation that ignores the precision knob is judged at its
    own dtype instead: ``g_(L + 2D)`` of that dtype.
    """
    out = impl({**inputs, "precision": "float64"})
    x = np.concatenate([inputs["vectors"], inputs["queries"]]).astype(np.float64)
    y_parts = [np.asarray(out["rotated_vectors"]), np.asarray(out["rotated_queries"])]
    if any(p.shape[1:] != x.shape[1:] for p in y_parts):
        return _invariant("rotation-orthogonal", f"rotated rows have shape "
                          f"{[p.shape for p in y_parts]}, inputs {x.shape}")
    y = np.concatenate(y_parts)
    dim = x.shape[1]
    tolerance = ORTHOGONALITY_TOLERANCE
    if y.dtype != np.float64:
        u = fuzzkit.oracles.unit_roundoff(y.dtype)
        tolerance = _gamma(reference.rotation_roundings(dim) + 2 * dim, u) * 2.0
    y = y.astype(np.float64)
    norms = np.linalg.norm(x, axis=1)
    scale = np.outer(norms, norms)
    error = np.abs(y @ y.T - x @ x.T)
    bad = error > tolerance * scale + 1e-300
    if not bad.any():
        return None
    i, j = (int(t) for t in np.argwhere(bad)[0])
    what = "norm" if i == j else "inner product"
    return _invariant(
        "rotation-orthogonal",
        f"{what} of rows {i}, {j} changed by {error[i, j]:.3g} (relative "
        f"{error[i, j] / scale[i, j]:.3g} > {tolerance:g}); D = {dim}",
        rows=[i, j], error=float(error[i, j]), relative=float(error[i, j] / scale[i, j]),
        dimension=dim,
    )


def scale_equivariant(impl: Impl, inputs: Mapping[str, Any],
                      output: Optional[Mapping[str, Any]] = None) -> Optional[Failure]:
    """``codes(alpha v) == codes(v)`` and ``scale(alpha v) == alpha scale(v)`` for alpha = 4."""
    base = impl(inputs) if output is None else output
    scaled = impl({**inputs, "vectors": (inputs["vectors"] * np.float32(ALPHA))})
    c0, c1 = np.asarray(base["codes"]), np.asarray(scaled["codes"])
    if c0.shape != c1.shape or not np.array_equal(c0, c1):
        where = np.argwhere(c0 != c1)[0].tolist() if c0.shape == c1.shape else None
        return _invariant("scale-equivariant",
                          f"codes of {ALPHA:g} v differ from codes of v at {where}",
                          index=where)
    s0 = np.asarray(base["scales"], dtype=np.float64)
    s1 = np.asarray(scaled["scales"], dtype=np.float64)
    u = fuzzkit.oracles.unit_roundoff(np.asarray(base["scales"]).dtype)
    bad = np.abs(s1 - ALPHA * s0) > 2.0 * u * ALPHA * np.abs(s0)
    if bad.any():
        j = int(np.argwhere(bad)[0][0])
        return _invariant("scale-equivariant",
                          f"scale of {ALPHA:g} v[{j}] is {s1[j]:.9g}, expected "
                          f"{ALPHA:g} x {s0[j]:.9g}", index=j)
    return None


def self_score(impl: Impl, inputs: Mapping[str, Any],
               output: Optional[Mapping[str, Any]] = None) -> Optional[Failure]:
    """The symmetric self-score ``scale^2 ||c||^2`` equals ``||v||^2`` (float32 error bound:
    the same ``5D + 16`` as the symmetric scores)."""
    out = impl(inputs) if output is None else output
    vectors = np.asarray(inputs["vectors"], dtype=np.float64)
    sym = np.asarray(out["symmetric_scores"])
    if sym.shape != (vectors.shape[0],) * 2:
        return _invariant("self-score", f"symmetric_scores has shape {sym.shape}")
    norms2 = np.sum(vectors * vectors, axis=1)
    failure = fuzzkit.oracles.close(norms2, np.diagonal(sym), dtype="float32",
                            reduction_length=5 * vectors.shape[1] + 16, magnitude=norms2,
                            name="self_score")
    if failure is None:
        return None
    return Failure("invariant", "symmetric self-score is not ||v||^2: " + failure.message,
                   "invariant:quant:self-score", failure.details)


def zero_vector(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """A zero stored vector (appended to the case) gives finite outputs everywhere, the zero code
    ``levels // 2`` in every coordinate, scale 0, and zero scores against everything."""
    vectors = np.asarray(inputs["vectors"])
    zero = np.zeros((1, vectors.shape[1]), dtype=vectors.dtype)
    out = impl({**inputs, "vectors": np.concatenate([vectors, zero])})
    for key in ("scales", "rotated_vectors", "rotated_queries", "scores", "symmetric_scores"):
        if not np.all(np.isfinite(np.asarray(out[key], dtype=np.float64))):
            return _invariant("zero-vector", f"{key} has NaN or Inf with a zero vector stored",
                              output=key)
    book = reference.codebook(str(inputs["codebook"]), int(inputs["bits"]))
    rows = np.flatnonzero(~np.any(np.concatenate([vectors, zero]) != 0, axis=1))
    codes = np.asarray(out["codes"]).astype(np.int64)
    for j in rows.tolist():
        checks = (
            ("codes", np.all(codes[j] == book.zero_code)),
            ("scales", np.asarray(out["scales"])[j] == 0),
            ("scores", np.all(np.asarray(out["scores"])[:, j] == 0)),
            ("symmetric_scores", np.all(np.asarray(out["symmetric_scores"])[j] == 0)
             and np.all(np.asarray(out["symmetric_scores"])[:, j] == 0)),
        )
        for key, ok in checks:
            if not ok:
                return _invariant("zero-vector", f"zero vector {j}: {key} wrong (codes must be "
                                  f"{book.zero_code}, scale and scores 0)", output=key, row=j)
    return None


def encoded_size(impl: Impl, inputs: Mapping[str, Any],
                 output: Optional[Mapping[str, Any]] = None) -> Optional[Failure]:
    """``encoded_bytes == D * bits / 8 + 4`` and codes come in a ``bits``-wide dtype."""
    out = impl(inputs) if output is None else output
    dim, bits = np.asarray(inputs["vectors"]).shape[1], int(inputs["bits"])
    want = reference.encoded_bytes(dim, bits)
    if out["encoded_bytes"] != want:
        return _invariant("encoded-size", f"{out['encoded_bytes']} bytes per vector, expected "
                          f"D*bits/8 + {reference.SCALE_BYTES} = {want}",
                          expected=want, actual=out["encoded_bytes"])
    width = np.asarray(out["codes"]).dtype.itemsize * 8
    if width != bits:
        return _invariant("encoded-size", f"codes are {width}-bit, expected {bits}-bit",
                          expected=bits, actual=width)
    return None
