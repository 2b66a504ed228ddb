"""Tie-aware top-k: accept every valid answer, not just the reference's.

When several candidates share the k-th best score, any of them completes a correct top-k, and
which one a kernel picks depends on its reduction order.  Comparing ids with the reference's ids
would alarm on correct kernels, so this oracle checks the *definition* instead: per row, ids are
unique, in range, as many as there are slots, and each one's reference score reaches the k-th
best reference score (minus ``tolerance``).

Masked candidates: a reference score of NaN, or the worst infinity (``-inf`` when ``largest``,
``+inf`` otherwise), marks an entry that is not a candidate (causal masks, deleted vectors).  A
row with fewer than ``k`` candidates must return all of them and pad with ``-1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fuzzkit.failure import Failure

_CHECKS = ("out_of_range", "duplicate", "count", "not_topk", "order", "score")


def topk(
    ref_scores: Any,
    ids: Any,
    *,
    k: int,
    largest: bool = True,
    tolerance: Any = 0.0,
    name: str = "topk",
    require_sorted: bool = False,
    actual_scores: Any = None,
    score_tolerance: float = 0.0,
) -> Failure | None:
    """Return None when ``ids`` is a valid top-``k`` of ``ref_scores`` in every row.

    ref_scores: float64 reference scores, shape ``(rows, n)`` or ``(n,)`` for one query.
    ids:        the implementation's ids, shape ``(rows, w)`` or ``(w,)``; ``-1`` is padding.
    tolerance:  slack on the score threshold, a scalar or one value per row.  An implementation
                that ranks by its own scores, each within ``e`` of the reference, can return an
                id up to ``2 e`` below the k-th best reference score: pass ``2 e``.
    require_sorted: the returned ids must be best-first (non-increasing reference score within
                ``tolerance``), with padding only at the end.
    actual_scores: the implementation's scores for its ids (same shape as ``ids``); each must be
                within ``score_tolerance`` of the reference score at that id.

    The first failing row is reported (row, position, id, its score, threshold) with the
    signature ``mismatch:topk:<name>:<check>`` for check in out_of_range, duplicate, count,
    not_topk, order, score; ``details['rows_failing']`` counts all failing rows.
    """
    scores = np.asarray(ref_scores, dtype=np.float64)
    got_ids = np.asarray(ids)
    if scores.ndim == 1:
        scores = scores[None, :]
        got_ids = got_ids.reshape(1, -1)
        if actual_scores is not None:
            actual_scores = np.asarray(actual_scores).reshape(1, -1)
    if scores.ndim != 2 or got_ids.ndim != 2 or got_ids.shape[0] != scores.shape[0]:
        return Failure(
            "mismatch",
            f"{name}: ids of shape {np.shape(ids)} do not match scores of shape "
            f"{np.shape(ref_scores)}",
            f"mismatch:topk:{name}:shape",
            {"ids_shape": list(np.shape(ids)), "scores_shape": list(np.shape(ref_scores))},
        )
    if got_ids.dtype.kind not in "iu":
        if got_ids.size and not np.array_equal(got_ids, np.round(got_ids)):
            return Failure(
                "mismatch",
                f"{name}: ids are not integers (dtype {got_ids.dtype})",
                f"mismatch:topk:{name}:dtype",
                {"dtype": str(got_ids.dtype)},
            )
    got_ids = got_ids.astype(np.int64)
    rows, n = scores.shape
    width = got_ids.shape[1]
    tol = np.broadcast_to(np.asarray(tolerance, dtype=np.float64).reshape(-1), (rows,))[:, None]

    # "Larger is better" view; non-candidates become -inf.
    better = scores if largest else -scores
    candidate = ~np.isnan(better) & (better != -np.inf)
    better = np.where(candidate, better, -np.inf)
    slots = np.minimum(int(k), candidate.sum(axis=1))

    valid = got_ids >= 0
    out_of_range = (got_ids < -1) | (got_ids >= n)
    safe = np.where(valid & ~out_of_range, got_ids, 0)
    got = np.where(valid & ~out_of_range, np.take_along_axis(better, safe, axis=1), -np.inf)

    # Mark every occurrence of an id after its first (a stable sort keeps them in order).
    perm = np.argsort(got_ids, axis=1, kind="stable")
    ordered = np.take_along_axis(got_ids, perm, axis=1)
    repeat = np.zeros_like(valid)
    repeat[:, 1:] = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    duplicate = np.zeros_like(valid)
    np.put_along_axis(duplicate, perm, repeat, axis=1)

    count = valid.sum(axis=1)
    descending = -np.sort(-better, axis=1)
    threshold = np.where(slots > 0, descending[np.arange(rows), np.maximum(slots - 1, 0)], -np.inf)[
        :, None
    ]
    not_topk = valid & ~out_of_range & (got < threshold - tol)

    order = np.zeros_like(valid)
    if require_sorted and width > 1:
        order[:, 1:] = valid[:, 1:] & (got[:, 1:] > got[:, :-1] + tol)

    score_bad = np.zeros_like(valid)
    if actual_scores is not None:
        act = np.asarray(actual_scores, dtype=np.float64)
        if act.shape != got_ids.shape:
            return Failure(
                "mismatch",
                f"{name}: scores of shape {act.shape} do not match ids of shape {got_ids.shape}",
                f"mismatch:topk:{name}:shape",
                {"ids_shape": list(got_ids.shape), "scores_shape": list(act.shape)},
            )
        ref_at = np.take_along_axis(scores, safe, axis=1)
        with np.errstate(invalid="ignore"):
            agree = (act == ref_at) | (np.abs(act - ref_at) <= score_tolerance)
        score_bad = valid & ~out_of_range & ~agree

    per_check = {
        "out_of_range": out_of_range,
        "duplicate": duplicate,
        "count": (count != slots)[:, None] & np.ones((1, max(width, 1)), dtype=bool),
        "not_topk": not_topk,
        "order": order,
        "score": score_bad,
    }
    row_bad = np.zeros(rows, dtype=bool)
    for mask in per_check.values():
        row_bad |= mask.any(axis=1)
    if not row_bad.any():
        return None

    r = int(np.argmax(row_bad))
    check = next(c for c in _CHECKS if per_check[c][r].any())
    pos = int(np.argmax(per_check[check][r]))
    sign = 1.0 if largest else -1.0
    thr = float(sign * threshold[r, 0]) if slots[r] > 0 else None
    details: dict[str, Any] = {
        "check": check,
        "row": r,
        "k": int(k),
        "candidates": int(candidate[r].sum()),
        "returned": int(count[r]),
        "threshold": thr,
        "tolerance": float(tol[r, 0]),
        "rows_failing": int(row_bad.sum()),
    }
    if check == "count":
        message = f"returned {int(count[r])} ids, expected {int(slots[r])}"
        details["expected_count"] = int(slots[r])
    else:
        bad_id = int(got_ids[r, pos])
        details.update(position=pos, id=bad_id)
        if check == "out_of_range":
            message = f"id {bad_id} at position {pos} is outside [0, {n})"
        elif check == "duplicate":
            first = int(np.argmax(got_ids[r] == bad_id))
            details["first_position"] = first
            message = f"id {bad_id} returned twice (positions {first} and {pos})"
        else:
            score = float(scores[r, bad_id])
            details["score"] = score
            if check == "not_topk":
                message = (
                    f"id {bad_id} at position {pos} has reference score {score!r}, worse than "
                    f"the k-th best {thr!r} (tolerance {float(tol[r, 0])!r})"
                )
            elif check == "order":
                prev = float(scores[r, got_ids[r, pos - 1]]) if got_ids[r, pos - 1] >= 0 else None
                details["previous_score"] = prev
                message = (
                    f"id {bad_id} at position {pos} (score {score!r}) ranks above the previous "
                    f"entry (score {prev!r}); expected best-first order"
                )
            else:
                act_score = float(
                    np.asarray(actual_scores, dtype=np.float64).reshape(rows, -1)[r, pos]
                )
                details["actual_score"] = act_score
                message = (
                    f"id {bad_id} at position {pos} reported score {act!r}, reference {score!r} "
                    f"(score tolerance {score_tolerance!r})"
                )
    return Failure(
        "mismatch",
        f"{name} row {r}: {message}"
        + (f" ({int(row_bad.sum())} of {rows} rows fail)" if rows > 1 else ""),
        f"mismatch:topk:{name}:{check}",
        details,
    )


__all__ = ["topk"]
