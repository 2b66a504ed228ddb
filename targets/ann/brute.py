"""Exact k-nearest neighbours in float64: the ground truth every recall figure is measured against.

Distances are the model's (:func:`targets.ann.model.distance`); the k best are taken by
(distance, id).  Recall is tie-aware: a returned id whose exact distance equals the k-th best
counts as a hit, whichever of the tied ids brute force happened to list.
"""

from __future__ import annotations

import numpy as np

from oracles.recall import recall_at_k
from targets.ann import model


def distances(x: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    """(q, n) float64 model distances from every query to every stored vector."""
    return model.distance(np.asarray(x)[None, :, :], np.asarray(q)[:, None, :], metric)


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


def recall(exact: np.ndarray, found_ids: np.ndarray, k: int) -> np.ndarray:
    """Per-query tie-aware recall@k of ``found_ids`` (q, k) given the (q, n) exact distances."""
    return recall_at_k(None, np.asarray(found_ids), k, ref_scores=exact, largest=False)
