"""Hypothesis strategy for OctEx cases: small indexes, every parameter, the awkward corners.

A case is a dataset, a query batch and a configuration.  Datasets come in *kinds* (drawn from a
Hypothesis-chosen NumPy seed, so a case stays fast to generate and replays exactly):

- ``gaussian``: i.i.d. N(0, s^2);
- ``clustered``: a few Gaussian blobs (the shape ANN indexes are built for, and where capped
  cells overflow);
- ``negative``: Gaussian data shifted far below zero -- every projected coordinate negative, the
  place where ``int()`` truncation and ``floor`` disagree;
- ``integers`` / ``grid``: small integers or multiples of 0.5 -- exact distance ties, exact
  centre-distance ties, points on cell boundaries;
- then a share of rows replaced by **duplicates** of earlier rows (zero distances, ties broken by
  id), and queries that copy stored vectors (exactly or with a little noise).

Configurations cover both metrics and all storages, rerank on/off, ``w = null`` (one cell) in
about one case in six, ``w`` scaled to the data's projected spread otherwise, ``P`` up to
``2m + 1``, ``C`` from 1 to more than a cell holds, ``R`` and ``k`` past ``n`` (``n < R + 1``,
``k > n``), ``T = 0`` (no expansion), and ``inserted`` vectors in a third of the cases.

Sizes: ``n <= 200`` stored vectors (small ones favoured), ``D <= 32``, ``q <= 16``; values are
bounded (|x| <~ 1e3) with |x| < 1e-6 flushed to 0 so the quant codec's domain holds.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

MAX_VECTORS = 200
MAX_DIM = 32
MAX_QUERIES = 16
DATA_KINDS = ("gaussian", "clustered", "clustered", "negative", "integers", "grid")
FLUSH_BELOW = 1e-6


def _finish(x: np.ndarray) -> np.ndarray:
    out = np.asarray(x, dtype=np.float64).astype(np.float32)
    out[np.abs(out) < FLUSH_BELOW] = 0.0
    return out


def dataset(kind: str, rows: int, dim: int, scale: float, rng: np.random.Generator,
            centres: np.ndarray) -> np.ndarray:
    """``rows`` vectors of the given kind (float64, before rounding to float32)."""
    if kind == "clustered":
        which = rng.integers(0, centres.shape[0], rows)
        return centres[which] + 0.15 * scale * rng.standard_normal((rows, dim))
    if kind == "negative":
        return -6.0 * scale + scale * rng.standard_normal((rows, dim))
    if kind == "integers":
        return rng.integers(-3, 4, (rows, dim)).astype(np.float64)
    if kind == "grid":
        return 0.5 * rng.integers(-4, 5, (rows, dim)).astype(np.float64)
    return scale * rng.standard_normal((rows, dim))


def _with_duplicates(x: np.ndarray, share: float, rng: np.random.Generator) -> np.ndarray:
    x = x.copy()
    for i in range(1, x.shape[0]):
        if rng.random() < share:
            x[i] = x[rng.integers(0, i)]
    return x


def _queries(x: np.ndarray, count: int, kind: str, scale: float, rng: np.random.Generator,
             centres: np.ndarray, copy_share: float) -> np.ndarray:
    q = dataset(kind, count, x.shape[1], scale, rng, centres)
    for i in range(count):
        r = rng.random()
        if r < copy_share:
            q[i] = x[rng.integers(0, x.shape[0])]
        elif r < 2 * copy_share:
            q[i] = x[rng.integers(0, x.shape[0])] + 0.01 * scale * rng.standard_normal(x.shape[1])
    return q


@st.composite
def _inputs(draw: Callable[[Any], Any]) -> dict[str, Any]:
    kind = draw(st.sampled_from(DATA_KINDS))
    dim = draw(st.one_of(st.integers(1, 8), st.integers(1, MAX_DIM)))
    n = draw(st.one_of(st.integers(1, 12), st.integers(1, 64), st.integers(1, MAX_VECTORS)))
    n_inserted = draw(st.sampled_from([0, 0, 0, 0, 1, 3])) if n > 1 else 0
    n_inserted = min(n_inserted * draw(st.integers(1, 6)), n - 1)
    q = draw(st.integers(1, MAX_QUERIES))
    scale = 10.0 ** draw(st.integers(-2, 2))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    centres = 3.0 * scale * rng.standard_normal((int(rng.integers(1, 6)), dim))
    x = _with_duplicates(dataset(kind, n, dim, scale, rng, centres),
                         draw(st.sampled_from([0.0, 0.0, 0.1, 0.5])), rng)
    queries = _queries(x, q, kind, scale, rng, centres, draw(st.sampled_from([0.0, 0.2, 0.4])))

    m = draw(st.integers(1, 4))
    spread = (scale if kind not in ("integers", "grid") else 2.0) * math.sqrt(dim / m)
    w = None if draw(st.integers(0, 5)) == 0 else float(
        np.float32(spread * draw(st.sampled_from([0.1, 0.3, 1.0, 3.0]))))
    k = draw(st.one_of(st.integers(1, 10), st.integers(1, n + 3)))
    return {
        "vectors": _finish(x[:n - n_inserted]),
        "inserted": _finish(x[n - n_inserted:]),
        "queries": _finish(queries),
        "L": draw(st.integers(1, 4)),
        "m": m,
        "w": w,
        "C": draw(st.one_of(st.sampled_from([1, 2, 3, 5, 8, 16]), st.integers(1, n + 2))),
        "R": draw(st.one_of(st.integers(1, 8), st.integers(1, min(16, n + 2)))),
        "E": draw(st.integers(1, 8)),
        "T": draw(st.integers(0, 4)),
        "P": draw(st.integers(1, 2 * m + 1)),
        "k": min(k, 16),
        "seed": draw(st.integers(0, 2**63 - 1)),
        "metric": draw(st.sampled_from(["l2", "l2", "ip"])),
        "storage": draw(st.sampled_from(["float32", "float32", "turbo8", "turbo16"])),
        "rerank": draw(st.booleans()),
    }


def inputs() -> st.SearchStrategy[dict[str, Any]]:
    """The target's strategy (a zero-argument callable, as :class:`fuzzkit.Target` wants)."""
    return _inputs()
