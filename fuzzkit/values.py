"""Value domains that cover a contract, shared by every target.

Random normal values never reach where numeric code breaks: an exact zero (a norm of 0, a division
by it), a norm below 1e-7 (an epsilon that swallows it), subnormals (flushed to zero on some paths),
the largest finite value (an overflow in a square or a running sum), exact ties and repeated values
(a ``>`` compiled as ``>=``, a sort that is not stable, a tie-break on the wrong key), ``-0.0``
(sign bits), NaN and ±Inf (a ``max`` that drops NaN).  A target states its contract once, as a
:class:`Domain` (the dtype whose values are exactly representable, and whether NaN, ±Inf and
subnormals are inputs it must handle), and draws arrays with :func:`array` / :func:`rows`.

Each array (or row) gets one *kind*, drawn with the stated weights of :data:`KINDS` (the order is
the shrink order: Hypothesis shrinks a failing case towards ``normal``), then its values come from
a NumPy generator seeded by a Hypothesis draw (fast for big arrays; Hypothesis shrinks the kind,
the seed and the shape) -- except ``drawn``, whose elements Hypothesis draws one by one (small
arrays: values shrink too).  Every value is rounded to the domain's dtype, so a float16/bfloat16
case holds exactly what the kernel will see.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Sequence

import numpy as np
from hypothesis import strategies as st

#: float16 / bfloat16 / float32 / float64: largest finite, smallest normal, smallest subnormal.
LARGEST = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float32": 3.4028234663852886e38,
    "float64": 1.7976931348623157e308,
}
SMALLEST_NORMAL = {
    "float16": 6.103515625e-05,
    "bfloat16": 1.1754943508222875e-38,
    "float32": 1.1754943508222875e-38,
    "float64": 2.2250738585072014e-308,
}
SMALLEST_SUBNORMAL = {
    "float16": 5.960464477539063e-08,
    "bfloat16": 9.183549615799121e-41,
    "float32": 1.401298464324817e-45,
    "float64": 5e-324,
}
DTYPES = tuple(LARGEST)

#: (kind, weight): the stated share of arrays of each kind (specials only where the contract
#: has them).  ``normal`` first: the shrink target.
KINDS: tuple[tuple[str, int], ...] = (
    ("normal", 28),  # N(0, 1) * 10**k, k in -3..2: the typical activation / embedding
    ("ints", 12),  # small integers in [-3, 3]: ties, exact arithmetic, repeated values
    ("repeated", 8),  # one to three distinct values repeated: ties everywhere
    ("zero", 4),  # all zero, signs of zero mixed
    ("sparse", 6),  # mostly exact zeros, a few non-zeros
    ("tiny", 8),  # norms below 1e-7 (down to the dtype's smallest normal)
    ("subnormal", 4),  # subnormals of the dtype (and zeros)
    ("huge", 8),  # magnitudes near the contract's largest (overflow in squares and sums)
    ("drawn", 8),  # elements drawn one by one by Hypothesis (small arrays; values shrink)
    ("mixed", 8),  # elementwise mixture of all of the above
    ("special", 8),  # NaN and +-Inf among normal values (only if the contract allows them)
)


@dataclasses.dataclass(frozen=True)
class Domain:
    """The values a target's contract accepts for one floating-point input.

    ``dtype``      values are exactly representable in it (arrays are float32, or float64 for
                   ``float64``);
    ``nan``/``inf`` the contract defines NaN / ±Inf inputs (drawn only then);
    ``max_abs``    the largest magnitude the contract accepts (None: the dtype's largest finite);
    ``subnormal``  subnormal inputs are part of the contract;
    ``kinds``      restrict the kinds drawn (None: all that the contract allows).
    """

    dtype: str = "float32"
    nan: bool = False
    inf: bool = False
    max_abs: float | None = None
    subnormal: bool = True
    kinds: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.dtype not in LARGEST:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {DTYPES}")
        if self.kinds is not None:
            unknown = set(self.kinds) - {k for k, _ in KINDS}
            if unknown:
                raise ValueError(f"unknown value kinds {sorted(unknown)}")

    @property
    def largest(self) -> float:
        top = LARGEST[self.dtype]
        return top if self.max_abs is None else min(float(self.max_abs), top)

    @property
    def storage(self) -> type:
        return np.float64 if self.dtype == "float64" else np.float32

    def allowed(self) -> tuple[tuple[str, int], ...]:
        out = []
        for kind, weight in KINDS:
            if kind == "special" and not (self.nan or self.inf):
                continue
            if kind == "subnormal" and not self.subnormal:
                continue
            if self.kinds is not None and kind not in self.kinds:
                continue
            out.append((kind, weight))
        if not out:
            raise ValueError("the domain allows no value kind")
        return tuple(out)


def round_to(x: Any, dtype: str) -> np.ndarray:
    """``x`` rounded to nearest-even in ``dtype``, stored as float32 (float64 for ``float64``).

    bfloat16 is rounded on the float32 bit pattern (NumPy has no bfloat16), NaN kept as NaN.
    """
    if dtype == "float64":
        return np.asarray(x, dtype=np.float64).copy()
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.asarray(x, dtype=np.float64).astype(np.float32)
    if dtype == "float32":
        return a
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return a.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        bits = a.view(np.uint32).astype(np.uint64)
        rounding = ((bits >> 16) & 1) + 0x7FFF
        out = ((bits + rounding) & 0xFFFF0000).astype(np.uint32).view(np.float32)
        return np.where(np.isnan(a), np.float32(np.nan), out).astype(np.float32)
    raise ValueError(f"unknown dtype {dtype!r}")


def largest_at_most(top: float, dtype: str) -> float:
    """The largest value of ``dtype`` not above ``top`` (rounding ``top`` may round it up)."""
    value = float(round_to(np.array([top]), dtype)[0])
    if value <= top:
        return value
    if dtype in ("float64", "float32", "float16"):
        kind = np.dtype(dtype).type
        return float(np.nextafter(kind(value), kind(0)))
    bits = np.array([value], dtype=np.float32).view(np.uint32) - np.uint32(0x10000)
    return float(bits.view(np.float32)[0])  # bfloat16: one unit down in the upper 16 bits


def choose(draw: Callable[[Any], Any], table: Sequence[tuple[Any, int]]) -> Any:
    """A weighted choice by one integer draw (``one_of`` does not weight); shrinks to the first.
    The integer strategy is built once per total (strategies draw hundreds of choices a case)."""
    total = sum(w for _, w in table)
    k = draw(_indices(total))
    for item, weight in table:
        if k < weight:
            return item
        k -= weight
    return table[-1][0]  # pragma: no cover - unreachable: k < total


@functools.lru_cache(maxsize=1024)
def _indices(total: int) -> st.SearchStrategy[int]:
    return st.integers(0, total - 1)


def kind(draw: Callable[[Any], Any], domain: Domain) -> str:
    return str(choose(draw, domain.allowed()))


def _normal(rng: np.random.Generator, shape: tuple[int, ...], domain: Domain) -> np.ndarray:
    scale = 10.0 ** int(rng.integers(-3, 3))
    return np.clip(rng.standard_normal(shape) * scale, -domain.largest, domain.largest)


def fill(kind_name: str, shape: Sequence[int], domain: Domain, seed: int) -> np.ndarray:
    """An array of ``kind_name`` values (unrounded float64) from ``seed``; :func:`array` clips
    them into the domain's range and rounds them to its dtype."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in shape)
    top = domain.largest
    if kind_name == "normal":
        return _normal(rng, shape, domain)
    if kind_name == "ints":
        return rng.integers(-3, 4, shape).astype(np.float64)
    if kind_name == "repeated":
        choices = rng.choice(
            np.array([0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 0.1, 7.25]),
            size=int(rng.integers(1, 4)),
            replace=False,
        )
        return choices[rng.integers(0, len(choices), shape)]
    if kind_name == "zero":
        return np.where(rng.random(shape) < 0.5, 0.0, -0.0)
    if kind_name == "sparse":
        values = _normal(rng, shape, domain)
        return np.where(rng.random(shape) < 0.15, values, 0.0)
    if kind_name == "tiny":
        # norms from 1e-7 down to the smallest normal: eps-guards and rsqrt of tiny sums
        low = math.log10(SMALLEST_NORMAL[domain.dtype]) + 1
        exponent = rng.uniform(low, -7.5) if low < -7.5 else low
        return rng.standard_normal(shape) * 10.0**exponent
    if kind_name == "subnormal":
        sub = SMALLEST_SUBNORMAL[domain.dtype]
        span = SMALLEST_NORMAL[domain.dtype] / sub
        values = sub * np.floor(rng.uniform(1, span, shape)) * rng.choice([-1.0, 1.0], shape)
        return np.where(rng.random(shape) < 0.2, 0.0, values)
    if kind_name == "huge":
        magnitude = top * rng.uniform(0.25, 1.0, shape)
        # a quarter of the huge arrays sit at sqrt(largest): squares and dot products overflow
        if rng.random() < 0.25:
            magnitude = np.sqrt(top) * rng.uniform(0.5, 2.0, shape)
        return np.clip(magnitude * rng.choice([-1.0, 1.0], shape), -top, top)
    if kind_name == "special":
        values = _normal(rng, shape, domain)
        specials = ([math.nan] if domain.nan else []) + (
            [math.inf, -math.inf] if domain.inf else []
        )
        mask = rng.random(shape) < rng.choice([0.05, 0.3, 1.0])
        return np.where(mask, np.array(specials)[rng.integers(0, len(specials), shape)], values)
    if kind_name == "mixed":
        parts = [k for k, _ in domain.allowed() if k not in ("mixed", "drawn")]
        stack = (
            np.stack([fill(k, shape, domain, int(rng.integers(0, 2**32 - 1))) for k in parts])
            if shape
            else None
        )
        if stack is None:
            return fill(
                parts[int(rng.integers(0, len(parts)))],
                shape,
                domain,
                int(rng.integers(0, 2**32 - 1)),
            )
        pick = rng.integers(0, len(parts), shape)
        return np.take_along_axis(stack, pick[None, ...], axis=0)[0]
    raise ValueError(f"unknown value kind {kind_name!r}")


@functools.lru_cache(maxsize=512)
def element(domain: Domain) -> st.SearchStrategy[float]:
    """Hypothesis floats of the domain, with its edges (ties come from small integers).  Built
    once per domain: an array drawn element by element asks for it on every draw."""
    top = domain.largest
    width = 64 if domain.dtype == "float64" else 32
    bound = largest_at_most(top, "float64" if width == 64 else "float32")
    edge = largest_at_most(top, domain.dtype)
    finite = st.floats(
        -bound,
        bound,
        allow_nan=False,
        allow_infinity=False,
        allow_subnormal=domain.subnormal,
        width=width,  # type: ignore[arg-type]  # 16, 32 or 64: the domain's float width
    )
    options = [
        st.integers(-3, 3).map(lambda v: float(min(max(v, -top), top))),
        finite,
        st.sampled_from([0.0, -0.0, edge, -edge, SMALLEST_NORMAL[domain.dtype]]),
    ]
    if domain.nan:
        options.append(st.just(math.nan))
    if domain.inf:
        options.append(st.sampled_from([math.inf, -math.inf]))
    return st.one_of(*options)


def array(
    draw: Callable[[Any], Any], shape: Sequence[int], domain: Domain, kind_name: str | None = None
) -> np.ndarray:
    """One array of ``shape`` in ``domain`` (see the module docstring)."""
    kind_name = kind_name or kind(draw, domain)
    shape = tuple(int(d) for d in shape)
    size = math.prod(shape)
    if kind_name == "drawn" and size <= 256:
        values = np.array(
            draw(st.lists(element(domain), min_size=size, max_size=size)), dtype=np.float64
        ).reshape(shape)
    else:
        if kind_name == "drawn":
            kind_name = "mixed"
        values = fill(kind_name, shape, domain, draw(st.integers(0, 2**32 - 1)))
    top = domain.largest
    with np.errstate(invalid="ignore"):
        values = np.where(np.isfinite(values), np.clip(values, -top, top), values)
    out = round_to(values, domain.dtype)
    edge = largest_at_most(top, domain.dtype)
    with np.errstate(invalid="ignore"):
        out = np.where(np.isfinite(out) & (np.abs(out) > top), np.copysign(edge, out), out).astype(
            domain.storage
        )
    if not domain.subnormal:
        tiny = SMALLEST_NORMAL[domain.dtype]
        out = np.where(np.abs(out) < tiny, np.copysign(0.0, out), out).astype(domain.storage)
    return out


def arrays(shape: Sequence[int], domain: Domain) -> st.SearchStrategy[np.ndarray]:
    """:func:`array` as a strategy."""

    @st.composite
    def _array(draw: Callable[[Any], Any]) -> np.ndarray:
        return array(draw, shape, domain)

    return _array()


def rows(draw: Callable[[Any], Any], count: int, width: int, domain: Domain) -> np.ndarray:
    """``count x width`` with one kind per row: a batch where one vector is zero, one tiny,
    one huge, the others normal (norm-dependent paths differ row by row)."""
    out: np.ndarray = np.zeros((count, width), dtype=domain.storage)
    for i in range(count):
        out[i] = array(draw, (width,), domain)
    return out
