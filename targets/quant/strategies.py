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
Each row gets one *kind* (weights in :data:`ROW_KINDS`; a ``values`` row's value kind is drawn
in the same choice, :data:`ROW_TABLE`):

- ``values``: a row from the shared :mod:`fuzzkit.values` domain -- Gaussian at several scales,
  small integers (ties), repeated values, all-zero with signed zeros, sparse, tiny, huge (at the
  contract's ``1e12`` and at its square root), Hypothesis-drawn elements (at most
  :data:`DRAWN_ELEMENTS` per row), elementwise mixtures;
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

Cost: a Hypothesis choice costs the engine tens of microseconds, so a row is one choice (its
kind) plus what its structure needs (a copy's source and factor, a sparse row's positions, a
concentrated row's axis and size, a tiny row's exponent); the bulk values of a side come from one
NumPy generator seeded by a Hypothesis draw (as :func:`fuzzkit.values.array` seeds one per
array), and every strategy object is built once.

The validator accepts non-zero magnitudes in ``[1e-12, 1e12]`` (as float32); :func:`_into_contract`
maps what a kind draws outside it onto it: below the smallest magnitude to that magnitude (so a tiny
row stays tiny, never silently zero), above the largest to the largest -- except rounding noise of
a ``concentrated`` row (entries that are zero in exact arithmetic), which is flushed to zero.
``precision`` is ``float64`` in a fifth of the cases (where a 16-bit code is checked to the last
cell) and absent -- the documented default, float32 -- in another fifth; ``rotation_seed`` spans
the whole ``[0, 2**64)`` the contract allows, its edges included.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
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
#: A row's kind and, for a ``values`` row, its value kind (:data:`DOMAIN`'s kinds) as *one*
#: weighted choice: ``(row kind, value kind or None)`` with the product of the two weights, so
#: the distribution is exactly "row kind, then value kind" at one Hypothesis choice per row
#: (every choice costs the engine tens of microseconds, and a case has dozens of rows).  The
#: first entry, ``values`` / ``normal``, stays the shrink target.
_VALUE_KINDS = DOMAIN.allowed()
_VALUE_TOTAL = sum(w for _, w in _VALUE_KINDS)
ROW_TABLE: tuple[tuple[tuple[str, str | None], int], ...] = tuple(
    item
    for kind, weight in ROW_KINDS
    for item in (
        [((kind, value), weight * w) for value, w in _VALUE_KINDS] if kind == "values"
        else [((kind, None), weight * _VALUE_TOTAL)]
    )
)
_ROW_CUMULATIVE = tuple(itertools.accumulate(w for _, w in ROW_TABLE))
_ROW_INDEX = st.integers(0, _ROW_CUMULATIVE[-1] - 1)
#: Most elements of a ``drawn`` row that Hypothesis draws one by one (two choices each).  A row
#: of up to this many coordinates is drawn whole, as :func:`fuzzkit.values.array` draws it; a
#: longer one is a ``mixed`` row with this many Hypothesis-drawn elements at rng-chosen
#: coordinates -- the drawn values (and their shrinking) stay in every such row, at a bounded
#: cost: drawn whole, a 129-wide row alone cost more choices than the rest of its case.
DRAWN_ELEMENTS = 8
SCALE_FACTORS = (0.5, 2.0, 3.0, 0.1, 1e-3, 7.25, -1.0, 1e-9, 1e6)
SPARSE_VALUES = (1.0, -1.0, 2.0, 0.5, 3.0)
CONCENTRATED_SIZES = (1.0, 10.0, 0.01, -3.0, 1e-9)
SEEDS = st.one_of(
    st.integers(0, 2**32 - 1),
    st.sampled_from([0, 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]),
    st.integers(0, 2**64 - 1),
)
# Strategies built once: a strategy object built per draw costs more than the draw.
_RNG_SEEDS = st.integers(0, 2**32 - 1)
_BITS = st.sampled_from(reference.BITS)
_BOOKS = st.sampled_from(reference.CODEBOOKS)
_PRECISIONS = st.sampled_from(["float32", "float32", "float32", "float64", None])
_TINY_EXPONENTS = st.floats(-12.0, -7.0)
_SCALES = st.sampled_from(SCALE_FACTORS)
_SPARSE_COUNTS = st.integers(1, 2)
_SPARSE_VALUES = st.sampled_from(SPARSE_VALUES)
_CONCENTRATED_SIZES = st.sampled_from(CONCENTRATED_SIZES)
_ELEMENT = values.element(DOMAIN)
#: Float32 edge of the domain (what :func:`fuzzkit.values.array` clamps overflowing values to).
_DOMAIN_EDGE = values.largest_at_most(DOMAIN.largest, DOMAIN.dtype)
_SMALLEST_NORMAL = values.SMALLEST_NORMAL[DOMAIN.dtype]


@functools.cache
def _integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


@functools.cache
def _drawn_elements(count: int) -> st.SearchStrategy[list[float]]:
    return st.lists(_ELEMENT, min_size=count, max_size=count)


def _rotation_row(dim: int, seed: int, axis: int) -> np.ndarray:
    """Row ``axis`` of the rotation ``R = M_3 M_2 M_1`` of ``(dim, seed)``, i.e. ``R^T e_axis``:
    ``e_axis^T M_3``, then times ``M_2`` and ``M_1`` -- two vector-matrix products instead of
    the dense ``D x D`` rotation (every case brings its own seed).  The stage matrices are the
    reference's (cached: the reference of the same case finds them built)."""
    last, *earlier = reversed(reference.rotation_stages(dim, seed))
    row = np.array(last[axis], dtype=np.float64)
    for stage in earlier:
        row = row @ stage
    return row


def _into_contract(row: np.ndarray, flush_below: Any = 0.0) -> np.ndarray:
    """``row`` as float32 with every non-zero magnitude inside the validator's range: magnitudes
    at most ``flush_below`` become (signed) zero, the other ones outside the range are clamped
    to its edges with their sign.  Elementwise: ``row`` may be a block of rows, ``flush_below``
    one threshold per row (a column)."""
    out = np.asarray(row, dtype=np.float64).astype(np.float32)
    magnitude = np.abs(out)
    out = np.where(magnitude <= flush_below, np.copysign(np.float32(0), out), out)
    magnitude = np.abs(out)
    out = np.where((magnitude > 0) & (magnitude < MIN_ABS), np.copysign(MIN_ABS, out), out)
    return np.where(magnitude > MAX_ABS, np.copysign(MAX_ABS, out), out).astype(np.float32)


def _into_domain(raw: np.ndarray) -> np.ndarray:
    """What :func:`fuzzkit.values.array` makes of :func:`fuzzkit.values.fill`'s raw values in
    :data:`DOMAIN` -- clipped, rounded to float32, subnormals flushed to signed zero --
    elementwise, so for a whole block of rows at once."""
    top = DOMAIN.largest
    with np.errstate(invalid="ignore"):
        raw = np.where(np.isfinite(raw), np.clip(raw, -top, top), raw)
    out = values.round_to(raw, DOMAIN.dtype)
    with np.errstate(invalid="ignore"):
        out = np.where(np.isfinite(out) & (np.abs(out) > top), np.copysign(_DOMAIN_EDGE, out),
                       out).astype(np.float32)
    return np.where(np.abs(out) < _SMALLEST_NORMAL, np.copysign(0.0, out), out).astype(np.float32)


@dataclasses.dataclass
class _Block:
    """The rows of one side under construction: every non-copy row's raw float64 values (and
    the threshold below which :func:`_into_contract` flushes them), which rows are ``values``
    rows (they go through the value domain first), and the copies to make afterwards."""

    raw: np.ndarray
    flush: np.ndarray
    domain: np.ndarray
    copies: list[tuple[int, int, float]]  # (row, source row in the sources, alpha)


def _row_kind(draw: Callable[[Any], Any]) -> tuple[str, str | None]:
    """:func:`fuzzkit.values.choose` of :data:`ROW_TABLE` (the same single integer draw, the
    same item for it) with the cumulative weights computed once."""
    return ROW_TABLE[bisect.bisect_right(_ROW_CUMULATIVE, draw(_ROW_INDEX))][0]


def _drawn_row(draw: Callable[[Any], Any], dim: int, rng: np.random.Generator) -> np.ndarray:
    """A ``drawn`` row (see :data:`DRAWN_ELEMENTS`)."""
    count = min(dim, DRAWN_ELEMENTS)
    drawn = np.array(draw(_drawn_elements(count)), dtype=np.float64)
    if count == dim:
        return drawn
    row = values.fill("mixed", (dim,), DOMAIN, int(rng.integers(0, 2**32 - 1)))
    row[rng.choice(dim, size=count, replace=False)] = drawn
    return row


def _base_row(draw: Callable[[Any], Any], block: _Block, i: int, kind: str, value: str | None,
              dim: int, seed: int, rng: np.random.Generator) -> None:
    """Row ``i`` of a non-copy kind: its raw values from the side's ``rng``, its structural
    choices (exponent, positions, axis, size) from Hypothesis."""
    if kind == "tiny":
        exponent = draw(_TINY_EXPONENTS)
        block.raw[i] = rng.standard_normal(dim) * 10.0**exponent
    elif kind == "sparse":
        for _ in range(draw(_SPARSE_COUNTS)):
            block.raw[i, draw(_integers(0, dim - 1))] = draw(_SPARSE_VALUES)
    elif kind == "concentrated":
        axis = draw(_integers(0, dim - 1))
        size = draw(_CONCENTRATED_SIZES)
        # row k of R = R^T e_k; entries that are zero in exact arithmetic come out as ~1e-16
        # rounding noise
        block.raw[i] = _rotation_row(dim, seed, axis) * size
        block.flush[i] = abs(size) * 1e-9
    else:  # "values", or a copy with nothing to copy from
        value = value or values.kind(draw, DOMAIN)
        block.domain[i] = True
        if value == "drawn":
            block.raw[i] = _drawn_row(draw, dim, rng)
        else:
            block.raw[i] = values.fill(value, (dim,), DOMAIN, int(rng.integers(0, 2**32 - 1)))


def _rows(draw: Callable[[Any], Any], count: int, dim: int, seed: int,
          stored: np.ndarray | None = None) -> np.ndarray:
    """``count`` rows, one kind each (:data:`ROW_TABLE`); ``duplicate`` / ``scaled`` rows copy
    an earlier row of this side or one of ``stored``.  The bulk values come from one NumPy
    generator per side, seeded by a Hypothesis draw (as :func:`fuzzkit.values.array` seeds one
    per array), and are fitted to the contract as one block."""
    n_stored = 0 if stored is None else stored.shape[0]
    if count == 0:
        return np.zeros((0, dim), np.float32)
    rng = np.random.default_rng(draw(_RNG_SEEDS))
    block = _Block(np.zeros((count, dim)), np.zeros((count, 1)), np.zeros(count, bool), [])
    for i in range(count):
        kind, value = _row_kind(draw)
        if kind in ("duplicate", "scaled") and n_stored + i:
            source = draw(_integers(0, n_stored + i - 1))
            alpha = 1.0 if kind == "duplicate" else draw(_SCALES)
            block.copies.append((i, source, alpha))
        else:
            _base_row(draw, block, i, kind, value, dim, seed, rng)
    if block.domain.any():
        block.raw[block.domain] = _into_domain(block.raw[block.domain])
    out = _into_contract(block.raw, block.flush)
    for i, source, alpha in block.copies:
        row = stored[source] if source < n_stored else out[source - n_stored]
        out[i] = _into_contract(np.asarray(row, dtype=np.float64) * alpha)
    return out


@st.composite
def _row_count(draw: Callable[[Any], Any], hi: int) -> int:
    """``1..hi`` rows, and in about one draw in twenty none -- an empty side is legal (the
    launcher must not launch, the scores are empty).  None is also the *simplest* count: the
    case Hypothesis tries first in every chunk of a run, and what a failing case shrinks a side
    to when the bug does not need it."""
    return 0 if draw(_integers(0, 19)) == 0 else draw(_integers(1, hi))


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


@dataclasses.dataclass(frozen=True)
class _Sizes:
    """The size strategies for one set of thresholds, built once (:func:`_sizes`)."""

    dim_hi: int
    dim_base: st.SearchStrategy[int]
    n_hi: int
    n_base: st.SearchStrategy[int]
    m_hi: int
    m_base: st.SearchStrategy[int]


@functools.cache
def _sizes(thresholds: tuple[reach.Threshold, ...]) -> _Sizes:
    # the dense float64 reference makes large D dear: only D's cheap edges are usual
    dim_hi = min(checks.MAX_DIM, reach.largest(thresholds, "D", BASE_DIM))
    n_hi = reach.largest(thresholds, "n", BASE_VECTORS)
    m_hi = reach.largest(thresholds, "m", BASE_QUERIES)
    return _Sizes(
        dim_hi,
        _usual(st.one_of(st.integers(1, BASE_DIM), st.sampled_from(INTERESTING_DIMS)),
               _edges("D", thresholds, 1, BASE_DIM)),
        n_hi, _usual(_row_count(BASE_VECTORS), _edges("n", thresholds, 0, n_hi)),
        m_hi, _usual(_row_count(BASE_QUERIES), _edges("m", thresholds, 0, m_hi)),
    )


@st.composite
def _inputs(draw: Callable[[Any], Any], thresholds: tuple[reach.Threshold, ...]) -> dict[str, Any]:
    sizes = _sizes(thresholds)
    bits = draw(_BITS)
    book = draw(_BOOKS)
    seed = draw(SEEDS)
    precision = draw(_PRECISIONS)
    dim = reach.size(draw, "D", thresholds, lo=1, hi=sizes.dim_hi, base=sizes.dim_base)
    n = reach.size(draw, "n", thresholds, lo=0, hi=sizes.n_hi, base=sizes.n_base)
    m = reach.size(draw, "m", thresholds, lo=0, hi=sizes.m_hi, base=sizes.m_base)
    vectors = _rows(draw, n, dim, seed)
    queries = _rows(draw, m, dim, seed, vectors)
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
