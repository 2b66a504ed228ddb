"""Hypothesis strategy for turbo8 / turbo16 inputs.

Random Gaussian data alone almost never reaches the places where quantizers break, so each row
is drawn from a mix of *kinds*:

- ``gaussian``: i.i.d. N(0, 1) scaled by ``10**k`` (``k`` in -3..2) -- the typical embedding;
- ``values``: Hypothesis-drawn float32 values over a constant fill (0, +-1, 0.5): shrinks well;
- ``zero``: the zero vector (no direction: no NaN allowed);
- ``duplicate`` / ``scaled``: a copy of an earlier row, or ``alpha`` times one (``alpha`` in
  {0.5, 2, 3, 0.1, 1e-3, 7.25, -1}) -- exact ties in scores, the codes-of-``alpha v`` relation;
  query rows copy *stored* vectors, so query/vector ties appear too;
- ``sparse``: one or two non-zero coordinates (many exact zeros after the first rounds);
- ``integers``: small integers in [-3, 3] (ties and exact arithmetic);
- ``concentrated``: ``R^T (c e_k)`` -- the vector the rotation maps onto one axis, so one
  rescaled coordinate is ``~sqrt(D)``: it saturates the codebook's outer cell, the adversarial
  case for a rotation-based quantizer.

Sizes stay small (``n <= 40`` stored vectors, ``m <= 6`` queries, ``D <= 80`` with
non-powers-of-two favoured) so that the float64 reference and the Triton interpreter stay fast.
Values are bounded (|x| <= ~1e3) and any |x| < 1e-6 is flushed to 0, keeping every square well
inside float32's normal range.  ``precision`` is ``float64`` in a quarter of the cases: that is
where a 16-bit code can be checked to the last cell.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from targets.quant import reference

MAX_VECTORS = 40
MAX_QUERIES = 6
MAX_DIM = 80
INTERESTING_DIMS = (1, 2, 3, 4, 5, 7, 8, 12, 16, 31, 32, 33, 40, 48, 63, 64, 65, 72, 80)
ROW_KINDS = (
    ("gaussian",) * 6
    + ("values", "values", "zero", "duplicate", "scaled", "scaled", "sparse", "integers")
    + ("concentrated",) * 2
)
SCALE_FACTORS = (0.5, 2.0, 3.0, 0.1, 1e-3, 7.25, -1.0)
FLUSH_BELOW = 1e-6


def _sanitize(row: np.ndarray) -> np.ndarray:
    out = np.asarray(row, dtype=np.float64).astype(np.float32)
    out[np.abs(out) < FLUSH_BELOW] = 0.0
    return out


def _row(draw: Callable[[Any], Any], kind: str, dim: int, seed: int,
         sources: list[np.ndarray]) -> np.ndarray:
    if kind == "gaussian":
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        return rng.standard_normal(dim) * 10.0 ** draw(st.integers(-3, 2))
    if kind == "values":
        return draw(hnp.arrays(
            np.float32, dim,
            elements=st.floats(-64, 64, width=32, allow_subnormal=False),
            fill=st.sampled_from([0.0, 1.0, -1.0, 0.5]),
        ))
    if kind in ("duplicate", "scaled") and sources:
        source = sources[draw(st.integers(0, len(sources) - 1))]
        alpha = 1.0 if kind == "duplicate" else draw(st.sampled_from(SCALE_FACTORS))
        return np.asarray(source, dtype=np.float64) * alpha
    if kind == "sparse":
        row = np.zeros(dim)
        for _ in range(draw(st.integers(1, 2))):
            row[draw(st.integers(0, dim - 1))] = draw(st.sampled_from([1.0, -1.0, 2.0, 0.5, 3.0]))
        return row
    if kind == "integers":
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        return rng.integers(-3, 4, dim).astype(np.float64)
    if kind == "concentrated":
        axis = draw(st.integers(0, dim - 1))
        size = draw(st.sampled_from([1.0, 10.0, 0.01, -3.0]))
        return reference.rotation_matrix(dim, seed)[axis] * size  # row k of R = R^T e_k
    return np.zeros(dim)  # "zero", or a copy with nothing to copy from


@st.composite
def _rows(draw: Callable[[Any], Any], count: int, dim: int, seed: int,
          stored: tuple[np.ndarray, ...]) -> np.ndarray:
    rows: list[np.ndarray] = []
    for _ in range(count):
        kind = draw(st.sampled_from(ROW_KINDS))
        sources = list(stored) + rows if stored else rows
        rows.append(_sanitize(_row(draw, kind, dim, seed, sources)))
    return np.stack(rows).astype(np.float32) if rows else np.zeros((0, dim), np.float32)


@st.composite
def _inputs(draw: Callable[[Any], Any]) -> dict[str, Any]:
    bits = draw(st.sampled_from(reference.BITS))
    book = draw(st.sampled_from(reference.CODEBOOKS))
    seed = draw(st.integers(0, 2**32 - 1))
    precision = draw(st.sampled_from(["float32", "float32", "float32", "float64"]))
    dim = draw(st.one_of(st.sampled_from(INTERESTING_DIMS), st.integers(1, MAX_DIM)))
    n = draw(st.integers(1, MAX_VECTORS))
    m = draw(st.integers(1, MAX_QUERIES))
    vectors = draw(_rows(n, dim, seed, ()))
    queries = draw(_rows(m, dim, seed, tuple(vectors)))
    return {
        "bits": bits,
        "codebook": book,
        "rotation_seed": seed,
        "precision": precision,
        "vectors": vectors,
        "queries": queries,
    }


def inputs() -> st.SearchStrategy[dict[str, Any]]:
    """The target's strategy (a zero-argument callable, as :class:`fuzzkit.Target` wants)."""
    return _inputs()
