"""Statistical oracles for approximate search: recall with a stated confidence.

An approximate index is allowed to miss neighbours, so a single query proves nothing; the claim
is about the *mean* recall over the query distribution.  We test it with Hoeffding's inequality,
which needs only that per-query recalls lie in a bounded range and that queries are drawn
independently (from the caller's seeded generator): the oracle fails only when the data make it
``confidence``-sure that the claim is false, so a correct index raises a false alarm with
probability at most ``1 - confidence`` per check -- and, given the seed, never flakes: the
verdict is a deterministic function of the inputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fuzzkit.failure import Failure


def recall_at_k(
    true_ids: Any,
    found_ids: Any,
    k: int,
    *,
    ref_scores: Any = None,
    largest: bool = True,
) -> np.ndarray:
    """Per-query recall@k: ``|found[:k] ∩ true[:k]| / min(k, |true|)``, as float64 of shape (Q,).

    ``true_ids`` and ``found_ids`` are ``(Q, *)`` integer arrays (or 1-D for one query) with
    ``-1`` as padding; duplicates in ``found_ids`` count once.  With ``ref_scores`` (the
    reference's ``(Q, n)`` scores, better = larger unless ``largest=False``) a found id whose
    reference score reaches the k-th best score is also a hit, so that ties broken differently
    from the brute-force reference are not misses; then ``true_ids`` may be None and ``|true|``
    is the number of candidates (scores that are neither NaN nor the worst infinity, as in
    :func:`fuzzkit.oracles.topk.topk`).  A query with nothing to find has recall 1.
    """
    found = _rows(found_ids)[:, :k]
    if true_ids is None and ref_scores is None:
        raise ValueError("recall_at_k needs true_ids, ref_scores, or both")
    q = found.shape[0]
    if true_ids is not None:
        true = _rows(true_ids)[:, :k]
        if true.shape[0] != q:
            raise ValueError(f"true_ids has {true.shape[0]} queries, found_ids has {q}")
    else:
        true = np.full((q, 0), -1, dtype=np.int64)

    # Deduplicate found ids per row: keep the first occurrence, replace repeats by -1.
    perm = np.argsort(found, axis=1, kind="stable")
    ordered = np.take_along_axis(found, perm, axis=1)
    repeat = np.zeros(found.shape, dtype=bool)
    repeat[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    duplicate = np.zeros_like(repeat)
    np.put_along_axis(duplicate, perm, repeat, axis=1)
    found = np.where(duplicate, -1, found)

    # Membership of found in true, per row, via ids offset by row.
    span = int(max(found.max(initial=-1), true.max(initial=-1))) + 2
    rows = np.arange(q, dtype=np.int64)[:, None] * span
    hit = (found >= 0) & np.isin(found + rows, np.where(true >= 0, true + rows, -1))
    denom = np.minimum(k, (true >= 0).sum(axis=1))

    if ref_scores is not None:
        scores = _rows(ref_scores, np.float64)
        if scores.shape[0] != q:
            raise ValueError(f"ref_scores has {scores.shape[0]} queries, found_ids has {q}")
        better = scores if largest else -scores
        candidate = ~np.isnan(better) & (better != -np.inf)
        better = np.where(candidate, better, -np.inf)
        slots = np.minimum(k, candidate.sum(axis=1))
        descending = -np.sort(-better, axis=1)
        threshold = np.where(slots > 0, descending[np.arange(q), np.maximum(slots - 1, 0)], np.inf)
        in_range = (found >= 0) & (found < scores.shape[1])
        got = np.take_along_axis(better, np.where(in_range, found, 0), axis=1)
        hit |= in_range & (got >= threshold[:, None])
        if true_ids is None:
            denom = slots
    hits = hit.sum(axis=1)
    return np.where(denom > 0, np.minimum(hits, denom) / np.maximum(denom, 1), 1.0)


def hoeffding_radius(count: int, confidence: float, value_range: float = 1.0) -> float:
    """One-sided Hoeffding deviation ``range * sqrt(ln(1/(1-confidence)) / (2 count))``: the
    sample mean of ``count`` independent values in an interval of width ``range`` exceeds the
    true mean by more than this with probability at most ``1 - confidence``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return value_range * math.sqrt(math.log(1.0 / (1.0 - confidence)) / (2.0 * count))


def recall(
    per_query_recall: Any,
    *,
    bound: float,
    confidence: float = 0.99,
    name: str = "recall",
) -> Failure | None:
    """Fail only when we are ``confidence``-sure that the true mean recall is below ``bound``:
    ``mean + hoeffding_radius(Q, confidence) < bound``.  With few queries the radius is wide
    and a low sample mean is not enough evidence; an empty sample never fails."""
    values = _unit_values(per_query_recall, "per_query_recall", (0.0, 1.0))
    count = values.size
    if count == 0:
        return None
    mean = float(values.mean())
    upper = mean + hoeffding_radius(count, confidence)
    if upper >= bound:
        return None
    return Failure(
        "mismatch",
        f"{name}: mean recall {mean:.4f} over {count} queries is below {bound} with confidence "
        f"{confidence} (upper bound {upper:.4f})",
        f"mismatch:recall:{name}",
        {
            "mean": mean,
            "queries": count,
            "upper_bound": upper,
            "bound": float(bound),
            "confidence": float(confidence),
        },
    )


def compare_recall(
    a: Any,
    b: Any,
    *,
    confidence: float = 0.99,
    margin: float = 0.0,
    name: str = "compare_recall",
) -> Failure | None:
    """Check the claim ``mean(a) >= mean(b) - margin`` on paired per-query recalls (the same
    queries, e.g. turbo16 vs turbo8).  The differences lie in [-1, 1], so Hoeffding with range 2:
    fail only when ``mean(a - b) + hoeffding_radius(Q, confidence, 2) < -margin``."""
    va = _unit_values(a, "a", (0.0, 1.0))
    vb = _unit_values(b, "b", (0.0, 1.0))
    if va.shape != vb.shape:
        raise ValueError(f"compare_recall needs paired samples, got {va.size} and {vb.size}")
    count = va.size
    if count == 0:
        return None
    diff = va - vb
    mean_diff = float(diff.mean())
    upper = mean_diff + hoeffding_radius(count, confidence, 2.0)
    if upper >= -margin:
        return None
    return Failure(
        "mismatch",
        f"{name}: mean {float(va.mean()):.4f} is below {float(vb.mean()):.4f}"
        f"{f' - {margin}' if margin else ''} over {count} paired queries with confidence "
        f"{confidence} (upper bound of the difference {upper:.4f})",
        f"mismatch:recall:{name}",
        {
            "mean_a": float(va.mean()),
            "mean_b": float(vb.mean()),
            "mean_difference": mean_diff,
            "queries": count,
            "upper_bound": upper,
            "margin": float(margin),
            "confidence": float(confidence),
        },
    )


def _rows(x: Any, dtype: Any = np.int64) -> np.ndarray:
    array = np.asarray(x)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2:
        raise ValueError(f"expected a 1-D or 2-D array, got shape {array.shape}")
    return array.astype(dtype)


def _unit_values(x: Any, what: str, interval: tuple[float, float]) -> np.ndarray:
    values = np.asarray(x, dtype=np.float64).reshape(-1)
    lo, hi = interval
    if values.size and not (np.all(values >= lo) and np.all(values <= hi)):
        raise ValueError(f"{what} must lie in [{lo}, {hi}] (NaN is not allowed)")
    return values


__all__ = ["compare_recall", "hoeffding_radius", "recall", "recall_at_k"]
