"""Metamorphic relations of the lightning indexers: what must hold between runs of one impl.

* ``probe-nesting``: probing one more group / block (``top_g + 1`` / ``top_m + 1``) with
  ``topk = S`` (the result lists the whole candidate set) gives a superset -- the float32 group
  scores are the same in both runs, so the candidate sets nest *exactly*; and with the case's own
  ``topk`` the per-query recall@k against dense (tie-aware, float64 scores) does not fall (a
  drop is excused only when the lost and the new key are within their float32 bounds).
* ``all-groups-dense``: ``top_g = G`` / ``top_m = #blocks`` returns dense top-k (same scores).
* ``causal``: dense: changing keys after pos(0) leaves query 0's result unchanged (the change
  keeps the case inside the contract: :func:`future_changed`); every method: nothing after
  pos(t) is scored (candidates <= pos(t) + 1).
* ``deterministic``: the same case twice, identical outputs.
* ``recall-claim`` (AttentionIndex, S >= 32): on non-negative head weights and in-distribution
  queries (keys plus noise), the mean recall@k is at least the mean share of causal keys it
  scores ("no worse than a random candidate set of the same size"), checked with Hoeffding at
  99 % (:func:`fuzzkit.oracles.recall.compare_recall`).  A stated heuristic claim, not a theorem: its
  measured false-alarm rate is reported in the README.  Not claimed for HiSA: block means of
  keys in random order can do worse than random (calibration margin down to -0.17, one firing
  in 1000 cases).  The claim is scale-free (queries relative to the keys' size, moved by a power
  of two into float32's range: :func:`claim_queries`) and recall forgives keys within float32
  rounding of the k-th best (:func:`rounded_recall`): with keys of every magnitude (tiny,
  subnormal, huge) in one case, a float32 index cannot order scores closer than their rounding.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional

import numpy as np

from fuzzkit import relations
from fuzzkit.failure import Failure
from fuzzkit.target import Property
from fuzzkit.oracles.recall import compare_recall, recall_at_k
from fuzzkit.targets.attention_index import model

Impl = Callable[[Mapping[str, Any]], Mapping[str, Any]]

RECALL_QUERIES = 512
RECALL_CONFIDENCE = 0.99
RECALL_NOISE = 0.5
#: Smaller contexts need too many T = S batches for 512 queries (slow under the interpreter).
CLAIM_MIN_KEYS = 32


def _invariant(name: str, message: str, **details: Any) -> Failure:
    return Failure("invariant", f"{name}: {message}", f"invariant:attention_index:{name}",
                   details)


def _exact(inputs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    q, w, k = (np.asarray(inputs[x]) for x in ("q", "w", "k"))
    pos = model.positions(q.shape[0], k.shape[0])
    causal = np.arange(k.shape[0])[None, :] <= pos[:, None]
    return (np.where(causal, model.scores64(q, w, k), -np.inf), model.score_bound(q, w, k))


def _probe_key(inputs: Mapping[str, Any]) -> Optional[str]:
    return {"hisa": "top_m", "attention_index": "top_g"}.get(inputs["method"])


def _recall(inputs: Mapping[str, Any], ids: np.ndarray, exact: np.ndarray, k: int) -> np.ndarray:
    return recall_at_k(None, ids, k, ref_scores=exact)


def probe_nesting(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    key = _probe_key(inputs)
    if key is None:
        return None
    s = np.asarray(inputs["k"]).shape[0]
    small = model.params(inputs)[key]
    a = impl({**inputs, "topk": s})
    b = impl({**inputs, "topk": s, key: small + 1})
    for t, (ra, rb) in enumerate(zip(np.asarray(a["ids"]), np.asarray(b["ids"]))):
        lost = set(ra[ra >= 0].tolist()) - set(rb[rb >= 0].tolist())
        if lost:
            return _invariant("probe-nesting", f"query {t}: {key}={small + 1} scores fewer keys "
                              f"than {key}={small} (key {min(lost)} dropped)", row=t)
    k = model.params(inputs)["topk"]
    exact, bound = _exact(inputs)
    sa, sb = impl(inputs), impl({**inputs, key: small + 1})
    ia, ib = np.asarray(sa["ids"]), np.asarray(sb["ids"])
    ra, rb = _recall(inputs, ia, exact, k), _recall(inputs, ib, exact, k)
    for t in np.flatnonzero(rb < ra - 1e-12):
        lost = [x for x in ia[t] if x >= 0 and x not in ib[t]]
        new = [x for x in ib[t] if x >= 0 and x not in ia[t]]
        slack = any(exact[t, x] <= exact[t, y] + bound[t, x] + bound[t, y]
                    for x in lost for y in new)
        if not slack:
            return _invariant("probe-nesting", f"query {t}: recall@{k} fell from {ra[t]:.3f} "
                              f"to {rb[t]:.3f} when {key} grew to {small + 1}", row=int(t))
    return None


def all_groups_dense(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    key = _probe_key(inputs)
    if key is None:
        return None
    s = np.asarray(inputs["k"]).shape[0]
    every = s  # at least as many as there are groups / blocks
    a = impl({**inputs, key: every})
    d = impl({**inputs, "method": "dense"})
    sa, sd = np.asarray(a["scores"], np.float64), np.asarray(d["scores"], np.float64)
    _, bound = _exact(inputs)
    same_pad = np.array_equal(np.isinf(sa), np.isinf(sd))
    tol = 2 * bound.max(initial=0.0)
    finite = np.isfinite(sa) & np.isfinite(sd)
    if not same_pad or np.any(np.abs(sa[finite] - sd[finite]) > tol):
        return _invariant("all-groups-dense", f"{key}={every} (every group) differs from dense "
                          "top-k")
    return None


def causal(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    q, k = np.asarray(inputs["q"]), np.asarray(inputs["k"])
    pos = model.positions(q.shape[0], k.shape[0])
    out = impl(inputs)
    if np.any(np.asarray(out["candidates"]) > pos + 1):
        t = int(np.argmax(np.asarray(out["candidates"]) > pos + 1))
        return _invariant("causal", f"query {t} at position {int(pos[t])} scored "
                          f"{int(np.asarray(out['candidates'])[t])} keys", row=t)
    if inputs["method"] != "dense" or pos[0] + 1 >= k.shape[0]:
        return None
    other = impl({**inputs, "k": future_changed(k, int(pos[0]))})
    if not (np.array_equal(np.asarray(out["ids"])[0], np.asarray(other["ids"])[0])
            and np.array_equal(np.asarray(out["scores"])[0], np.asarray(other["scores"])[0])):
        return _invariant("causal", "changing keys after query 0's position changed its result")
    return None


def future_changed(k: np.ndarray, last: int) -> np.ndarray:
    """``k`` with every key after position ``last`` changed and the case kept in the contract:
    the future keys reversed, negated and halved (magnitudes never grow, so no score can start
    to overflow); a future key that comes out unchanged (a zero key, a mirrored pair) becomes a
    copy of key 0 (a copy raises no coordinate's largest magnitude)."""
    changed = np.array(k, copy=True)
    future = changed[last + 1:][::-1] * np.float32(-0.5)
    same = np.all(future == changed[last + 1:], axis=1)
    future[same] = changed[0]
    changed[last + 1:] = future
    return changed


def claim_queries(k: np.ndarray, h: int, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` in-distribution queries (T = S batches stacked): each head = a random key plus
    N(0, RECALL_NOISE^2 * mean key norm^2 / d) noise; head weights uniform in [0, 1).

    Scale-free: the noise is relative to the keys' size, and the queries are then multiplied by
    one power of two that puts the largest dot product near 2^64 (queries at most 2^120), so
    keys of any magnitude -- tiny, subnormal, huge -- give queries inside the contract
    whose float32 scores neither overflow nor needlessly underflow.  The indexer is positively
    homogeneous in ``q`` (ReLU and the weighted sum are), so the power of two changes no ranking."""
    rng = np.random.default_rng([seed, 7])
    s, d = k.shape
    k64 = k.astype(np.float64)
    rms = float(np.sqrt(np.mean(np.sum(k64 ** 2, 1)) / d))
    scale = RECALL_NOISE * rms if rms > 0 else 1.0
    q = k64[rng.integers(0, s, (count, h))] + scale * rng.standard_normal((count, h, d))
    w = rng.random((count, h)).astype(np.float32)
    dots, _ = model.overflow_parts(q, np.ones((count, h)), k64)
    top = float(np.abs(q).max(initial=0.0))
    if dots > 0 and top > 0:
        exponent = min(64 - math.log2(dots), 120 - math.log2(top))
        q = np.ldexp(q, math.floor(exponent))
    return q.astype(np.float32), w


def rounded_recall(ids: np.ndarray, exact: np.ndarray, bound: np.ndarray, k: int) -> np.ndarray:
    """Per-query recall@k against the float64 scores, tie- *and rounding*-aware: a returned key
    is a hit when its score is within float32 rounding of reaching the k-th best (``exact[x] +
    bound[x] >= v_k - b_k``); a float32 index cannot tell such keys apart, so missing one for
    another is not a recall loss.  ``exact`` is -inf for non-causal keys.

    All queries at once (the claim asks 512 per case): per row the k-th best live score
    ``v_k``, the largest bound ``b_k`` among the keys tied at it, and the distinct returned ids
    (a boolean row: a key returned twice counts once) that reach ``v_k - b_k``."""
    rows, width = exact.shape
    live = exact > -np.inf
    slots = np.minimum(k, live.sum(axis=1))
    descending = -np.sort(-exact, axis=1)
    kth = descending[np.arange(rows), np.maximum(slots - 1, 0)]
    slack = np.max(np.where(live & (exact == kth[:, None]), bound, -np.inf), axis=1,
                   initial=-np.inf)
    returned = np.asarray(ids)[:, :k]
    valid = (returned >= 0) & (returned < width)
    found = np.zeros((rows, width), dtype=bool)
    found[np.nonzero(valid)[0], returned[valid]] = True
    with np.errstate(invalid="ignore"):
        reaching = exact + bound >= (kth - slack)[:, None]
    hits = np.sum(found & reaching, axis=1)
    return np.where(slots == 0, 1.0, np.minimum(hits, slots) / np.maximum(slots, 1))


def recall_pairs(impl: Impl, inputs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(per-query recall@k, per-query share of causal keys scored) over RECALL_QUERIES queries."""
    k = np.asarray(inputs["k"], np.float32)
    s = k.shape[0]
    h = np.asarray(inputs["q"]).shape[1]
    topk = model.params(inputs)["topk"]
    batches = -(-RECALL_QUERIES // s)
    q_all, w_all = claim_queries(k, h, batches * s, model.params(inputs)["seed"])
    # The float64 scores and bounds of every batch at once: both are per query, and every
    # batch has T = S (query t at position t), so the causal mask repeats batch after batch.
    causal = np.tile(np.arange(s)[None, :] <= np.arange(s)[:, None], (batches, 1))
    exact_all = np.where(causal, model.scores64(q_all, w_all, k), -np.inf)
    bound_all = model.score_bound(q_all, w_all, k)
    recalls, shares = [], []
    for b in range(batches):
        rows = slice(b * s, (b + 1) * s)
        out = impl({**inputs, "q": q_all[rows], "w": w_all[rows]})
        recalls.append(rounded_recall(np.asarray(out["ids"]), exact_all[rows], bound_all[rows],
                                      topk))
        shares.append(np.asarray(out["candidates"]) / (np.arange(s) + 1.0))
    return np.concatenate(recalls), np.minimum(np.concatenate(shares), 1.0)


def recall_claim(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    if (inputs["method"] != "attention_index"
            or np.asarray(inputs["k"]).shape[0] < CLAIM_MIN_KEYS):
        return None
    got, share = recall_pairs(impl, inputs)
    failure = compare_recall(got, share, confidence=RECALL_CONFIDENCE,
                             name="attention_index-recall")
    if failure is None:
        return None
    return Failure("mismatch", failure.message + " (recall@k vs share of keys scored)",
                   "mismatch:attention_index:recall-claim", failure.details)


PROPERTIES = (
    Property("probe-nesting", probe_nesting,
             "top_g / top_m + 1: candidate sets nest exactly, recall@k kept"),
    Property("all-groups-dense", all_groups_dense, "probing every group/block == dense top-k"),
    Property("causal", causal, "no future key scored; dense ignores future keys"),
    Property("deterministic", relations.deterministic, "the same case twice: identical outputs"),
    Property("recall-claim", recall_claim,
             "recall@k >= share of keys scored (Hoeffding, 99 %), in-distribution queries"),
)
