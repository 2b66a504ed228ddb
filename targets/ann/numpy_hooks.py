"""The ``numpy`` implementation's two query-time hooks (and the distances they gather).

:func:`fuzzkit.targets.ann.index.search` runs every step of a query -- probing, the ``T`` rounds,
every top-E / top-k selection, rerank -- and delegates two of them to hooks: the candidates'
distances and one expansion round.  These are the NumPy hooks, the ``numpy`` implementation's
own code; the ``triton`` implementation replaces exactly these two with kernels
(:mod:`fuzzkit.targets.ann.kernels`), so the rest of :mod:`fuzzkit.targets.ann.index` is the driver both run
through.  They live in a module of their own so that coverage can tell the two apart.

:mod:`fuzzkit.targets.ann.index` imports them as the search's defaults, and the query distance they
use is looked up there at call time (``index.query_distance``), so a mutant that patches a name
on :mod:`fuzzkit.targets.ann.index` changes these hooks too.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from fuzzkit.targets.ann import model
from fuzzkit.targets.ann.model import squared_norm

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from fuzzkit.targets.ann.index import Index


def _index_module() -> ModuleType:
    """:mod:`fuzzkit.targets.ann.index`, looked up at call time (it imports this module)."""
    from fuzzkit.targets.ann import index

    return index


def gathered_distances(index: "Index", q_vectors: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """float32 distances (q, M) from query i to ``ids[i]`` (-1 padded -> +inf): the exact metric
    on float32 vectors, or with turbo storage the asymmetric estimate
    ``-s`` (ip) / ``||q||^2 + ||v||^2 - 2 s`` (l2) with ``s = scale <R q, c>``."""
    ids = np.asarray(ids)
    valid = ids >= 0
    safe = np.where(valid, ids, 0)
    q32 = np.asarray(q_vectors, dtype=np.float32)
    if index.quant is None:
        dist = _index_module().query_distance(index.base[safe], q32[:, None, :],
                                              index.params.metric)
    else:
        dist = estimated_distances(index, q32, safe)
    return np.where(valid, dist, np.float32(np.inf)).astype(np.float32)


def estimated_distances(index: "Index", q32: np.ndarray, safe: np.ndarray) -> np.ndarray:
    """The turbo asymmetric estimate for ids ``safe`` (q, M), float32."""
    store = index.quant
    assert store is not None
    rq = _rotated(index, q32)
    decoded = store.centroids[store.codes[safe].astype(np.intp)]
    s = -model.distance(decoded, rq[:, None, :], "ip", np.float32) * store.scales[safe]
    if index.params.metric == "ip":
        return -s
    q_norm2 = squared_norm(q32, np.float32)
    return q_norm2[:, None] + store.norms[safe] * store.norms[safe] - np.float32(2) * s


#: The last rotation: ``(rotate function, plan, the queries' shape and bytes, R q)``.  A search
#: asks for the same queries' rotation once per round.
_last_rotation: list = [None, None, None, None]


def _rotated(index: "Index", q32: np.ndarray) -> np.ndarray:
    """``index.rotated_queries(index, q32)``, reused while the search asks for the same
    queries under the same rotation plan (and the same function: a mutant may patch it)."""
    rotate = _index_module().rotated_queries
    plan = index.quant.plan if index.quant is not None else None
    key = (q32.dtype.str, q32.shape, np.ascontiguousarray(q32).tobytes())
    fn, held_plan, held_key, rq = _last_rotation
    if fn is rotate and held_plan is plan and held_key == key:
        return rq
    rq = rotate(index, q32)
    _last_rotation[:] = [rotate, plan, key, rq]
    return rq


def candidate_distances(index: "Index", q_vectors: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Hook 1: ``cand`` int32 (q, M), -1 padded -> float32 (q, M), +inf at padding."""
    return gathered_distances(index, q_vectors, cand)


def first_occurrences(ids: np.ndarray) -> np.ndarray:
    """Mask of the first occurrence of each id >= 0 in each row."""
    perm = np.argsort(ids, axis=1, kind="stable")
    ordered = np.take_along_axis(ids, perm, axis=1)
    repeat = np.zeros(ids.shape, dtype=bool)
    repeat[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    first = np.zeros(ids.shape, dtype=bool)
    np.put_along_axis(first, perm, ~repeat, axis=1)
    return first & (ids >= 0)


def expand(index: "Index", q_vectors: np.ndarray, frontier: np.ndarray,
           visited: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hook 2: one expansion round.  ``frontier`` int32 (q, E) (-1 pad); ``visited`` bool (q, n)
    is updated in place.  Returns ``(new_ids int32 (q, E*R), new_dist float32 (q, E*R))``: the
    graph neighbours of the frontier not visited before, each once per row, frontier-major and
    neighbour-minor, -1 / +inf elsewhere."""
    q, e = frontier.shape
    r = index.graph.shape[1]
    rows = np.arange(q)[:, None]
    live = frontier >= 0
    neighbours = np.where(live[:, :, None], index.graph[np.where(live, frontier, 0)], -1)
    neighbours = neighbours.reshape(q, e * r).astype(np.int64)
    fresh = (neighbours >= 0) & ~visited[rows, np.maximum(neighbours, 0)]
    keep = first_occurrences(np.where(fresh, neighbours, -1))
    new_ids = np.where(keep, neighbours, -1).astype(np.int32)
    qi, col = np.nonzero(keep)
    visited[qi, neighbours[qi, col]] = True
    return new_ids, gathered_distances(index, q_vectors, new_ids)
