"""Float comparison with a bound derived from the dtype and the reduction length.

A hand-picked ``atol``/``rtol`` is either so loose that real bugs pass or so tight that correct
kernels alarm.  Instead we use the classical forward-error bound for sums of products
(Higham, *Accuracy and Stability of Numerical Algorithms*, ch. 3): computing
``y = sum_i a_i b_i`` over ``n`` terms in a format with unit roundoff ``u``, in *any* order,

    |y_hat - y| <= gamma_n * sum_i |a_i b_i|,      gamma_n = n u / (1 - n u).

The caller supplies the reduction length and the magnitude ``sum_i |a_i b_i|`` (for a matmul,
``abs(A) @ abs(B)`` computed by the float64 reference); the bound then holds however much the
sum cancels, and a bug that drops a term, reads a wrong row or transposes an operand produces
an error far above it.  The reference is float64, whose own error is negligible next to ``u``
of the compared dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fuzzkit.failure import Failure

#: Extra rounding steps added to the reduction length: rounding each of the two operands to the
#: compute dtype (a kernel that casts its float32 inputs to bfloat16, say) and rounding the
#: result to the output dtype.  With inputs that are already representable the bound is merely
#: three ``u`` looser than necessary.
ROUNDING_SLACK = 3

# name -> (unit roundoff u, minimum normal exponent emin); smallest normal is 2**emin.
_FORMATS: dict[str, tuple[float, int]] = {
    "float64": (2.0**-53, -1022),
    "float32": (2.0**-24, -126),
    "tfloat32": (2.0**-11, -126),
    "float16": (2.0**-11, -14),
    "bfloat16": (2.0**-8, -126),
    "float8_e4m3fn": (2.0**-4, -6),
    "float8_e4m3fnuz": (2.0**-4, -7),
    "float8_e5m2": (2.0**-3, -14),
    "float8_e5m2fnuz": (2.0**-3, -15),
}
_ALIASES = {
    "double": "float64",
    "fp64": "float64",
    "f64": "float64",
    "single": "float32",
    "fp32": "float32",
    "f32": "float32",
    "tf32": "tfloat32",
    "half": "float16",
    "fp16": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "fp8_e4m3": "float8_e4m3fn",
    "e4m3": "float8_e4m3fn",
    "float8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "e5m2": "float8_e5m2",
}

DTypeLike = Any  # numpy dtype or type, a name such as "float32"/"bf16", or a torch dtype


def format_name(dtype: DTypeLike) -> str:
    """Canonical name of a floating format: numpy/torch dtypes, names and aliases."""
    if isinstance(dtype, str):
        text = dtype
    else:
        try:
            text = np.dtype(dtype).name
        except TypeError:
            text = str(dtype)  # torch.float32 -> "torch.float32"
    key = text.strip().lower()
    for prefix in ("torch.", "numpy.", "np."):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    key = _ALIASES.get(key, key)
    if key not in _FORMATS:
        try:
            key = np.dtype(key).name
        except TypeError:
            pass
    if key not in _FORMATS:
        raise ValueError(
            f"unknown floating dtype {dtype!r}; expected one of {sorted(_FORMATS)} "
            f"(or an alias such as 'fp32', 'bf16', 'half')"
        )
    return key


def unit_roundoff(dtype: DTypeLike) -> float:
    """Unit roundoff ``u`` (half the spacing just above 1): float64 2**-53, float32 2**-24,
    float16 2**-11, bfloat16 2**-8; also tf32 and the float8 formats."""
    return _FORMATS[format_name(dtype)][0]


def smallest_normal(dtype: DTypeLike) -> float:
    """The smallest positive normal number of ``dtype``."""
    return 2.0 ** _FORMATS[format_name(dtype)][1]


def ulp(x: Any, dtype: DTypeLike) -> float | np.ndarray:
    """Spacing of ``dtype`` at ``|x|``: ``2**floor(log2|x|) * 2u``, floored at the spacing of
    the smallest normal (so zero and subnormals get the subnormal spacing)."""
    u, emin = _FORMATS[format_name(dtype)]
    values = np.abs(np.asarray(x, dtype=np.float64))
    _, exponent = np.frexp(values)  # values = m * 2**exponent with m in [0.5, 1); 0 -> 0
    exponent = np.where(values > 0, np.maximum(exponent - 1, emin), emin)
    spacing = np.where(np.isfinite(values), np.ldexp(2.0 * u, exponent), np.nan)
    return float(spacing) if np.ndim(spacing) == 0 else spacing


def gamma(n: int, u: float) -> float:
    """``gamma_n = n u / (1 - n u)``; raises when ``n u >= 1`` (the bound says nothing)."""
    if n * u >= 1.0:
        raise ValueError(
            f"error bound is vacuous: {n} rounding steps at unit roundoff {u:g} (n*u >= 1); "
            f"if the kernel accumulates in a wider format, pass accumulate='float32'"
        )
    return n * u / (1.0 - n * u)


def error_bound(
    dtype: DTypeLike,
    reduction_length: int,
    magnitude: Any,
    *,
    accumulate: DTypeLike | None = None,
) -> float | np.ndarray:
    """Worst-case absolute error of a length-``reduction_length`` sum of products computed in
    ``dtype``: ``gamma_{n + ROUNDING_SLACK}(u) * magnitude + floor``.

    ``accumulate`` names a wider accumulator (bfloat16 inputs and output with a float32
    accumulator, as tensor-core kernels do): the relative factor is then
    ``g_r + g_n + g_r g_n`` with ``g_r = gamma_SLACK(u_dtype)`` for the roundings in ``dtype``
    and ``g_n = gamma_n(u_accumulate)`` for the sum -- without it, bfloat16 reductions longer
    than ~250 terms would have no bound at all.

    The absolute floor ``(n + SLACK) * smallest_normal`` covers underflow, including hardware
    that flushes subnormals to zero.  ``reduction_length`` 0 means an elementwise operation.
    """
    n = int(reduction_length)
    if n < 0:
        raise ValueError(f"reduction_length must be >= 0, got {reduction_length}")
    u = unit_roundoff(dtype)
    tiny = smallest_normal(dtype)
    if accumulate is None:
        relative = gamma(n + ROUNDING_SLACK, u)
    else:
        g_r = gamma(ROUNDING_SLACK, u)
        g_n = gamma(n, unit_roundoff(accumulate))
        relative = g_r + g_n + g_r * g_n
        tiny = max(tiny, smallest_normal(accumulate))
    floor = (n + ROUNDING_SLACK) * tiny
    bound = relative * np.abs(np.asarray(magnitude, dtype=np.float64)) + floor
    return float(bound) if np.ndim(bound) == 0 else bound


def close(
    expected: Any,
    actual: Any,
    *,
    dtype: DTypeLike,
    reduction_length: int,
    magnitude: Any = None,
    name: str = "output",
    factor: float = 1.0,
    accumulate: DTypeLike | None = None,
) -> Failure | None:
    """Return None when every element of ``actual`` is within the error bound of ``expected``.

    ``expected`` is the float64 reference; ``magnitude`` the elementwise ``|A||B|``-style
    quantity from the reference (default ``|expected|``, right only when nothing cancels);
    ``factor`` scales the bound for operations whose analysis adds a constant (softmax, exp).
    Equal non-finite values pass; a NaN or Inf that the reference does not have (or a finite
    value where the reference has one) fails as ``mismatch:close:<name>:nonfinite``.  A finite
    reference value that overflows the compared dtype is reported the same way: keep generated
    inputs inside the dtype's range.
    """
    e = np.asarray(expected, dtype=np.float64)
    a = np.asarray(actual)
    if a.dtype.kind not in "fiub":
        return Failure(
            "mismatch",
            f"{name}: expected real numbers, got dtype {a.dtype}",
            f"mismatch:close:{name}:dtype",
            {"dtype": str(a.dtype)},
        )
    a = a.astype(np.float64)
    if e.shape != a.shape:
        return Failure(
            "mismatch",
            f"{name}: expected shape {e.shape}, got {a.shape}",
            f"mismatch:close:{name}:shape",
            {"expected_shape": list(e.shape), "actual_shape": list(a.shape)},
        )
    mag = (
        np.abs(e)
        if magnitude is None
        else np.broadcast_to(np.asarray(magnitude, dtype=np.float64), e.shape)
    )

    finite = np.isfinite(e)
    same_nonfinite = (e == a) | (np.isnan(e) & np.isnan(a))
    bad_nonfinite = (~finite & ~same_nonfinite) | (finite & ~np.isfinite(a))
    if bad_nonfinite.any():
        index = tuple(int(i) for i in np.argwhere(bad_nonfinite)[0])
        count = int(bad_nonfinite.sum())
        ev, av = float(e[index]), float(a[index])
        return Failure(
            "mismatch",
            f"{_where(name, index)}: expected {ev!r}, got {av!r} "
            f"({count} of {e.size} elements have non-finite disagreements)",
            f"mismatch:close:{name}:nonfinite",
            {"index": list(index), "expected": ev, "actual": av, "count": count},
        )

    bound = factor * np.broadcast_to(
        error_bound(dtype, reduction_length, mag, accumulate=accumulate), e.shape
    )
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        bound = np.where(finite, bound, np.inf)
        error = np.where(finite, np.abs(a - e), 0.0)
        over = error > bound
        if not over.any():
            return None
        ratio = np.where(over, error / bound, 0.0)
        ulps = np.where(finite, error / ulp(np.where(finite, e, 0.0), dtype), 0.0)
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), e.shape))
    count = int(over.sum())
    worst = {
        "index": list(index),
        "expected": float(e[index]),
        "actual": float(a[index]),
        "error": float(error[index]),
        "bound": float(bound[index]),
        "ratio": float(ratio[index]),
        "ulps": float(ulps[index]),
    }
    max_ulps = float(ulps.max())
    dtype_name = format_name(dtype)
    message = (
        f"{name}: {count} of {e.size} elements exceed the {dtype_name} error bound "
        f"(reduction length {reduction_length}); worst {_where(name, index)}: "
        f"expected {worst['expected']:.17g}, got {worst['actual']:.9g}, "
        f"error {worst['error']:.3g} = {worst['ratio']:.3g} x bound {worst['bound']:.3g}; "
        f"max error {max_ulps:.3g} ulp"
    )
    details = {
        "count": count,
        "size": int(e.size),
        "dtype": dtype_name,
        "reduction_length": int(reduction_length),
        "factor": float(factor),
        "worst": worst,
        "max_ulps": max_ulps,
    }
    return Failure("mismatch", message, f"mismatch:close:{name}", details)


def _where(name: str, index: tuple) -> str:
    return f"{name}{list(index)}" if index else name


__all__ = [
    "ROUNDING_SLACK",
    "close",
    "error_bound",
    "format_name",
    "gamma",
    "smallest_normal",
    "ulp",
    "unit_roundoff",
]
