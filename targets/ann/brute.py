"""Exact k-nearest neighbours in float64: the ground truth every recall figure is measured against.

Distances are the model's (:func:`fuzzkit.targets.ann.model.distance`); the k best are taken by
(distance, id).  Recall is tie-aware: a returned id whose exact distance equals the k-th best
counts as a hit, whichever of the tied ids brute force happened to list -- and, given the float32
slacks, so does one a float32 search cannot tell from the k-th best.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable
from typing import Optional

import numpy as np

from fuzzkit.oracles.recall import recall_at_k
from fuzzkit.targets.ann import model, runs

#: How many distance matrices :func:`distances` keeps: a case asks for the same ones many times
#: (the reference, the oracle's second search, five properties) and a case uses a handful.
CACHED = 8
_cache: collections.OrderedDict[Hashable, np.ndarray] = collections.OrderedDict()


def distances(x: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    """(q, n) float64 model distances from every query to every stored vector.

    A pure function of the contents, so the last few results are kept (read-only) and
    returned again for inputs of the same content."""
    x, q = np.asarray(x), np.asarray(q)
    key = (runs.content_key(x), runs.content_key(q), metric)
    found = _cache.get(key)
    if found is not None:
        _cache.move_to_end(key)
        return found
    out = model.distance(x[None, :, :], q[:, None, :], metric)
    out.setflags(write=False)
    _cache[key] = out
    if len(_cache) > CACHED:
        _cache.popitem(last=False)
    return out


def knn(x: np.ndarray, q: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """The exact ``k`` nearest ids (q, k) by (distance, id) and their float64 distances;
    -1 / +inf padded when ``k > n``."""
    dist = distances(x, q, metric)
    n = dist.shape[1]
    ids = np.full((dist.shape[0], k), -1, dtype=np.int64)
    out = np.full((dist.shape[0], k), np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(n), dist.shape), dist), axis=-1)[:, :k]
    ids[:, :order.shape[1]] = order
    out[:, :order.shape[1]] = np.take_along_axis(dist, order, axis=1)
    return ids, out


def recall(exact: np.ndarray, found_ids: np.ndarray, k: int,
           slack: Optional[np.ndarray] = None) -> np.ndarray:
    """Per-query tie-aware recall@k of ``found_ids`` (q, k) given the (q, n) exact distances.

    With ``slack`` (q, n) -- the float32 bound of :func:`fuzzkit.targets.ann.bounds.exact_slack` -- the
    ties are taken up to float32 resolution: an id whose distance interval ``exact +- slack``
    reaches the k-th best's counts as a hit.  A float32 search cannot tell such distances
    apart (below ~1e-38 squared distances underflow to 0 and *every* candidate ties), so
    ranking one before the other is not a recall loss."""
    exact = np.asarray(exact, dtype=np.float64)
    if slack is not None and exact.size:
        kk = min(k, exact.shape[1])
        kth = np.sort(exact, axis=1)[:, kk - 1][:, None]
        kth_slack = np.max(np.where(exact == kth, slack, 0.0), axis=1, keepdims=True)
        near = (exact > kth) & (exact - slack <= kth + kth_slack)
        exact = np.where(near, kth, exact)
    return recall_at_k(None, np.asarray(found_ids), k, ref_scores=exact, largest=False)
