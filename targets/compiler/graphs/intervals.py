"""The per-op value-range rules the generator's guards rely on, named by each op's record in
:mod:`.ops`.

A rule is ``(attrs, ivals, in_shapes, out_shape) -> (lo, hi)``: a conservative interval of the
op's output given intervals of its inputs (may be infinite).  :func:`.generate.value_intervals`
runs them over a graph; the guards (``abs`` + ``add_scalar`` before a positive-domain argument,
``clamp`` before operands of an op whose output could grow too large) are inserted from them.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from .common import reduced_dims

Interval = tuple[float, float]
#: ``(attrs, input intervals, input shapes, output shape) -> output interval``
IntervalRule = Callable[
    [dict, Sequence[Interval], Sequence[Sequence[int]], Sequence[int]], Interval
]

_INF = math.inf


def _gelu(x: float) -> float:
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def _safe_exp(x: float) -> float:
    return math.exp(min(x, 700.0))


def same(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    """The input's range: layout ops, means and extremes take values of their input."""
    return ivals[0]


def absolute(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))


def neg(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    return (-hi, -lo)


def exp(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    return (_safe_exp(lo), _safe_exp(hi))


def log(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    return (math.log(lo) if lo > 0 else -_INF, math.log(hi) if hi > 0 else -_INF)


def sqrt(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    return (math.sqrt(max(lo, 0.0)), math.sqrt(max(hi, 0.0)))


def rsqrt(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    return (1 / math.sqrt(hi) if hi > 0 else _INF, 1 / math.sqrt(lo) if lo > 0 else _INF)


def tanh(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    return (math.tanh(lo), math.tanh(hi))


def sigmoid(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    return (1 / (1 + _safe_exp(-lo)), 1 / (1 + _safe_exp(-hi)))


def relu(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    return (max(lo, 0.0), max(hi, 0.0))


def gelu(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    return (-0.17 if lo < 0 else _gelu(lo), max(hi, 0.0))


def unit(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    """sin, cos."""
    return (-1.0, 1.0)


def reciprocal(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    if lo > 0 or hi < 0:
        return (1 / hi, 1 / lo)
    return (-_INF, _INF)


def power(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    m = max(abs(lo), abs(hi))
    e = float(attrs["exponent"])
    if e == 2.0:
        return (0.0 if lo <= 0 <= hi else min(lo * lo, hi * hi), m * m)
    if e == 3.0:
        return (lo**3, hi**3)
    if e == 0.0:
        return (1.0, 1.0)
    if e == 1.0:
        return (lo, hi)
    if lo < 0 or (e < 0 and lo <= 0):
        return (-_INF, _INF)  # invalid domain (guards prevent this)
    return (min(lo**e, hi**e), max(lo**e, hi**e))


def clamp(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    a = -_INF if attrs.get("min") is None else attrs["min"]
    b = _INF if attrs.get("max") is None else attrs["max"]
    return (min(max(lo, a), b), min(max(hi, a), b))


def add_scalar(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    return (lo + attrs["value"], hi + attrs["value"])


def add(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    (lo, hi), (lo2, hi2) = ivals
    return (lo + lo2, hi + hi2)


def sub(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    (lo, hi), (lo2, hi2) = ivals
    return (lo - hi2, hi - lo2)


def maximum(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    (lo, hi), (lo2, hi2) = ivals
    return (max(lo, lo2), max(hi, hi2))


def minimum(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    (lo, hi), (lo2, hi2) = ivals
    return (min(lo, lo2), min(hi, hi2))


def _products(lo: float, hi: float, lo2: float, hi2: float) -> Interval:
    prods = [lo * lo2, lo * hi2, hi * lo2, hi * hi2]
    prods = [0.0 if math.isnan(p) else p for p in prods]
    return (min(prods), max(prods))


def mul(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    (lo, hi), (lo2, hi2) = ivals
    return _products(lo, hi, lo2, hi2)


def div(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    (lo, hi), (lo2, hi2) = ivals
    if not (lo2 > 0 or hi2 < 0):
        return (-_INF, _INF)
    return _products(lo, hi, 1 / hi2, 1 / lo2)


def where(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    """where_gt: either branch."""
    return (min(ivals[2][0], ivals[3][0]), max(ivals[2][1], ivals[3][1]))


def matmul(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    """matmul, bmm: ``k`` products of the largest magnitudes."""
    k = in_shapes[0][-1]
    m = max(abs(ivals[0][0]), abs(ivals[0][1]))
    m2 = max(abs(ivals[1][0]), abs(ivals[1][1]))
    b = k * m * m2
    return (-b, b)


def softmax(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    return (0.0, 1.0)


def log_softmax(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    n = in_shapes[0][attrs["dim"]]
    return (-(hi - lo) - math.log(n), 0.0)


def layer_norm(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    n = in_shapes[0][attrs["dim"]]
    b = math.sqrt(max(n - 1, 1))
    return (-b, b)


def total(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    """sum: ``n`` terms."""
    lo, hi = ivals[0]
    n = math.prod(in_shapes[0][d] for d in reduced_dims(attrs["dim"], len(in_shapes[0])))
    return (min(n * lo, lo), max(n * hi, hi))


def cumsum(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    lo, hi = ivals[0]
    n = in_shapes[0][attrs["dim"]]
    return (min(n * lo, lo), max(n * hi, hi))


def cat(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    return (min(ivals[0][0], ivals[1][0]), max(ivals[0][1], ivals[1][1]))


# typed ops (:mod:`.ops_typed`): bools are 0 / 1, ints their integer range


def boolean(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    """Comparisons, logical ops, any / all: a bool."""
    return (0.0, 1.0)


def cast(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    """to_dtype: the same range, truncated for an integer target (the generator's guard keeps a
    float cast to an integer inside ``+-MAGNITUDE_LIMIT``), 0 / 1 for bool."""
    lo, hi = ivals[0]
    target = attrs.get("dtype")
    if target == "bool":
        return (0.0, 1.0)
    if target in ("int32", "int64"):
        return (float(math.trunc(lo)) if math.isfinite(lo) else lo,
                float(math.trunc(hi)) if math.isfinite(hi) else hi)
    return (lo, hi)


def where_cond(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    """where(cond, a, b): either branch."""
    return (min(ivals[1][0], ivals[2][0]), max(ivals[1][1], ivals[2][1]))


def masked_fill(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any
                ) -> Interval:
    v = float(attrs["value"])
    return (min(ivals[0][0], v), max(ivals[0][1], v))


def index(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    """argmax / argmin: an index along ``dim``."""
    shape = in_shapes[0]
    n = shape[int(attrs["dim"]) % len(shape)] if shape else 1
    return (0.0, float(max(n - 1, 0)))


def bitwise(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any) -> Interval:
    """and / or / xor of integers: within the next power of two of the largest magnitude."""
    m = max(max(abs(lo), abs(hi)) for lo, hi in ivals)
    if not math.isfinite(m):
        return (-_INF, _INF)
    p = 2.0 ** math.ceil(math.log2(m + 1))
    lo = 0.0 if all(lo >= 0 for lo, _ in ivals) else -p
    return (lo, p)


def floor_divide(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any
                 ) -> Interval:
    lo, hi = ivals[0]
    d = float(attrs["divisor"])
    ends = sorted((lo / d, hi / d))
    return (math.floor(ends[0]) if math.isfinite(ends[0]) else ends[0],
            math.floor(ends[1]) if math.isfinite(ends[1]) else ends[1])


def remainder(attrs: dict, ivals: Sequence[Interval], in_shapes: Any, out_shape: Any
              ) -> Interval:
    """Python's (and torch's) remainder takes the divisor's sign."""
    d = float(attrs["divisor"])
    return (0.0, abs(d) - 1) if d > 0 else (-(abs(d) - 1), 0.0)
