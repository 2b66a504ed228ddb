"""Hypothesis strategy for turbo8 / turbo16 inputs: every size edge, every value the contract has.

Sizes
-----
The three sizes ``n`` (stored vectors), ``m`` (queries) and ``D`` (dimension) are drawn with
:func:`fuzzkit.reach.size` against the thresholds the fuzzed implementation declares (the shared
encoder's Walsh--Hadamard block edge, and for the Triton implementation the scoring kernel's tiles
as launched in this mode, :mod:`fuzzkit.targets.quant.tiles`): about half the draws are the cheap usual
sizes (which lean on the thresholds' cheap edges too, see :func:`_usual`), the rest sit on
``t-1, t, t+1, 2t±1`` of a threshold or a little above.  ``n`` and ``m`` may be 0 (the contract
allows an empty side; the launcher must not launch then).

Values
------
Each row gets one *kind* (weights in :data:`ROW_KINDS`):

- ``values``: a row from the shared :mod:`fuzzkit.values` domain -- Gaussian at several scales,
  small integers (ties), repeated values, all-zero with signed zeros, sparse, tiny, huge (at the
  contract's ``1e12`` and at its square root), Hypothesis-drawn elements, elementwise mixtures;
- ``tiny``: a row whose entries lie between the contract's smallest magnitude ``1e-12`` and
  ``1e-7`` (norms far below any ``eps`` a normalisation might add);
- ``duplicate`` / ``scaled``: a copy of an earlier row, or ``alpha`` times one (``alpha`` in
  :data:`SCALE_FACTORS`) -- exact ties in scores, the codes-of-``alpha v`` relation; query rows copy
  *stored* vectors, so query/vector ties appear too;
- ``sparse``: one or two non-zero coordinates of simple values (many exact zeros and exact
  cancellations after the first Hadamard rounds);
- ``concentrated``: ``R^T (c e_k)`` -- the vector the rotation maps onto one axis, so one
  rescaled coordinate is ``~sqrt(D)``: it saturates the codebook's outer cell, the adversarial
  case for a rotation-based quantizer.

The validator accepts non-zero magnitudes in ``[1e-12, 1e12]`` (as float32); :func:`_into_contract`
maps what a kind draws outside it onto it: below the smallest magnitude to that magnitude (so a tiny
row stays tiny, never silently zero), above the largest to the largest -- except rounding noise of
a ``concentrated`` row (entries that are zero in exact arithmetic), which is flushed to zero.
``precision`` is ``float64`` in a fifth of the cases (where a 16-bit code is checked to the last
cell) and absent -- the documented default, float32 -- in another fifth; ``rotation_seed`` spans
the whole ``[0, 2**64)`` the contract allows, its edges included.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from hypothesis import strategies as st

from fuzzkit import reach, values
from fuzzkit.targets.quant import checks, reference

#: The usual sizes (the ``base`` of :func:`reach.size`): cheap cases, most of the run.
BASE_VECTORS = 40
BASE_QUERIES = 6
BASE_DIM = 80
INTERESTING_DIMS = (1, 2, 3, 4, 5, 7, 8, 12, 16, 31, 32, 33, 40, 48, 63, 64, 65, 72, 80)
#: Float32 edges of the validator's range of non-zero magnitudes.
MIN_ABS = np.float32(checks.MIN_ABS)
MAX_ABS = np.float32(checks.MAX_ABS)
DOMAIN = values.Domain("float32", max_abs=float(MAX_ABS), subnormal=False)
#: (kind, weight); the first is the shrink target.
ROW_KINDS: tuple[tuple[str, int], ...] = (
    ("values", 12), ("tiny", 2), ("duplicate", 2), ("scaled", 3), ("sparse", 2),
    ("concentrated", 3),
)
SCALE_FACTORS = (0.5, 2.0, 3.0, 0.1, 1e-3, 7.25, -1.0, 1e-9, 1e6)
SEEDS = st.one_of(
    st.integers(0, 2**32 - 1),
    st.sampled_from([0, 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]),
    st.integers(0, 2**64 - 1),
)


def _into_contract(row: np.ndarray, flush_below: float = 0.0) -> np.ndarray:
    """``row`` as float32 with every non-zero magnitude inside the validator's range: magnitudes
    at most ``flush_below`` become (signed) zero, the other ones outside the range are clamped
    to its edges with their sign."""
    out = np.asarray(row, dtype=np.float64).astype(np.float32)
    magnitude = np.abs(out)
    out = np.where(magnitude <= flush_below, np.copysign(np.float32(0), out), out)
    magnitude = np.abs(out)
    out = np.where((magnitude > 0) & (magnitude < MIN_ABS), np.copysign(MIN_ABS, out), out)
    return np.where(magnitude > MAX_ABS, np.copysign(MAX_ABS, out), out).astype(np.float32)


def _row(draw: Callable[[Any], Any], kind: str, dim: int, seed: int,
         sources: Sequence[np.ndarray]) -> np.ndarray:
    if kind == "tiny":
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        exponent = draw(st.floats(-12.0, -7.0))
        return _into_contract(rng.standard_normal(dim) * 10.0**exponent)
    if kind in ("duplicate", "scaled") and sources:
        source = sources[draw(st.integers(0, len(sources) - 1))]
        alpha = 1.0 if kind == "duplicate" else draw(st.sampled_from(SCALE_FACTORS))
        return _into_contract(np.asarray(source, dtype=np.float64) * alpha)
    if kind == "sparse":
        row = np.zeros(dim)
        for _ in range(draw(st.integers(1, 2))):
            row[draw(st.integers(0, dim - 1))] = draw(st.sampled_from([1.0, -1.0, 2.0, 0.5, 3.0]))
        return _into_contract(row)
    if kind == "concentrated":
        axis = draw(st.integers(0, dim - 1))
        size = draw(st.sampled_from([1.0, 10.0, 0.01, -3.0, 1e-9]))
        direction = reference.rotation_matrix(dim, seed)[axis]  # row k of R = R^T e_k
        # entries that are zero in exact arithmetic come out as ~1e-16 rounding noise
        return _into_contract(direction * size, flush_below=abs(size) * 1e-9)
    # "values", or a copy with nothing to copy from
    return _into_contract(values.array(draw, (dim,), DOMAIN))


def _rows(draw: Callable[[Any], Any], count: int, dim: int, seed: int,
          stored: Sequence[np.ndarray] = ()) -> np.ndarray:
    rows: list[np.ndarray] = []
    for _ in range(count):
        kind = values.choose(draw, ROW_KINDS)
        rows.append(_row(draw, kind, dim, seed, [*stored, *rows]))
    return np.stack(rows).astype(np.float32) if rows else np.zeros((0, dim), np.float32)


@st.composite
def _row_count(draw: Callable[[Any], Any], hi: int) -> int:
    """``1..hi`` rows, and in about one draw in twenty none -- an empty side is legal (the
    launcher must not launch, the scores are empty).  None is also the *simplest* count: the
    case Hypothesis tries first in every chunk of a run, and what a failing case shrinks a side
    to when the bug does not need it."""
    return 0 if draw(st.integers(0, 19)) == 0 else draw(st.integers(1, hi))


def _edges(name: str, thresholds: Sequence[reach.Threshold], lo: int, hi: int) -> list[int]:
    """The boundary values (``t-1, t, t+1, 2t±1``) of ``name``'s thresholds inside ``[lo, hi]``."""
    return sorted({v for t in reach.of_size(thresholds, name) for v in t.boundaries(lo, hi)})


def _usual(plain: st.SearchStrategy[int], edges: Sequence[int]) -> st.SearchStrategy[int]:
    """The usual sizes: ``plain``, and as often one of the declared thresholds' edges.

    :func:`reach.size` already puts a share of its draws on the edges; but Hypothesis runs each
    new case's choices again with a few values copied around, so a few hundred cases hold only a
    few dozen independent size draws -- leaning the usual sizes on the edges too is what makes
    every edge show up early in a run, not just eventually."""
    return st.one_of(plain, st.sampled_from(list(edges))) if edges else plain


@st.composite
def _inputs(draw: Callable[[Any], Any], thresholds: tuple[reach.Threshold, ...]) -> dict[str, Any]:
    bits = draw(st.sampled_from(reference.BITS))
    book = draw(st.sampled_from(reference.CODEBOOKS))
    seed = draw(SEEDS)
    precision = draw(st.sampled_from(["float32", "float32", "float32", "float64", None]))
    # the dense float64 reference makes large D dear: only D's cheap edges are usual
    dim = reach.size(draw, "D", thresholds, lo=1,
                     hi=min(checks.MAX_DIM, reach.largest(thresholds, "D", BASE_DIM)),
                     base=_usual(st.one_of(st.integers(1, BASE_DIM),
                                           st.sampled_from(INTERESTING_DIMS)),
                                 _edges("D", thresholds, 1, BASE_DIM)))
    n_hi = reach.largest(thresholds, "n", BASE_VECTORS)
    n = reach.size(draw, "n", thresholds, lo=0, hi=n_hi,
                   base=_usual(_row_count(BASE_VECTORS), _edges("n", thresholds, 0, n_hi)))
    m_hi = reach.largest(thresholds, "m", BASE_QUERIES)
    m = reach.size(draw, "m", thresholds, lo=0, hi=m_hi,
                   base=_usual(_row_count(BASE_QUERIES), _edges("m", thresholds, 0, m_hi)))
    vectors = _rows(draw, n, dim, seed)
    queries = _rows(draw, m, dim, seed, tuple(vectors))
    inputs = {
        "bits": bits,
        "codebook": book,
        "rotation_seed": seed,
        "vectors": vectors,
        "queries": queries,
    }
    if precision is not None:
        inputs["precision"] = precision
    return inputs


def inputs(thresholds: tuple[reach.Threshold, ...] = ()) -> st.SearchStrategy[dict[str, Any]]:
    """The target's strategy; ``thresholds`` are the fuzzed implementation's and the shared
    encoder's (:meth:`fuzzkit.target.Target.thresholds_for` passes them)."""
    return _inputs(tuple(thresholds))

