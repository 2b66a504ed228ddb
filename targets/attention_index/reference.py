"""The float64 reference: the model of :mod:`fuzzkit.targets.attention_index` read literally, in loops
(the indexer's float64 scores as a table made with :func:`indexer`'s very operations, in its order).

Outputs as the implementations' plus ``"aux"`` for the oracle: per query the float64 scores of
every representative (``rep_scores`` (T, G), -inf when ineligible) with their float32 rounding
bounds (``rep_bound``), each key's owner (block or group, ``owner`` (S,)), the forced (sink /
local) keys (``forced`` (T, S) bool) and the exact scores of every causal key (``all_scores``
(T, S), -inf for future keys) with their bounds (``all_bound``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from fuzzkit.targets.attention_index import model


def indexer(q: np.ndarray, w: np.ndarray, x: np.ndarray) -> float:
    """I(t, x) for one query (q (H, d), w (H,)), float64, one head at a time."""
    total = 0.0
    for h in range(q.shape[0]):
        dot = 0.0
        for i in range(q.shape[1]):
            dot += float(q[h, i]) * float(x[i])
        total += float(w[h]) * max(dot, 0.0)
    return total / math.sqrt(q.shape[1])


def indexer_table(q: np.ndarray, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``indexer(q[t], w[t], x[j])`` for every query ``t`` and row ``j`` of ``x``: (T, N).

    The same float64 operations in the same order, elementwise over the table: per head the
    dot product summed coordinate by coordinate from 0.0, then ``w * max(dot, 0)`` added head by
    head from 0.0, then the division -- so every entry is bit for bit :func:`indexer`'s value,
    at the cost of ``H d`` array operations instead of ``T N H d`` Python ones."""
    q64 = np.asarray(q, np.float64)
    w64 = np.asarray(w, np.float64)
    x64 = np.asarray(x, np.float64)
    t_count, heads, d = q64.shape
    total = np.zeros((t_count, x64.shape[0]))
    for h in range(heads):
        dot = np.zeros((t_count, x64.shape[0]))
        for i in range(d):
            dot = dot + q64[:, h, i][:, None] * x64[:, i][None, :]
        total = total + w64[:, h][:, None] * np.maximum(dot, 0.0)
    return total / math.sqrt(d)


def _top(scored: list[tuple[float, int]], k: int) -> list[tuple[float, int]]:
    return sorted(scored, key=lambda e: (-e[0], e[1]))[:k]


def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    q = np.asarray(inputs["q"], np.float32)
    w = np.asarray(inputs["w"], np.float32)
    keys = np.asarray(inputs["k"], np.float32)
    p = model.params(inputs)
    t_count, s = q.shape[0], keys.shape[0]
    k = p["topk"]
    pos = model.positions(t_count, s)
    out: dict[str, Any] = {}
    reps = None
    if p["method"] == "hisa":
        nb = -(-s // p["block"])
        owner = np.arange(s) // p["block"]
        reps = np.stack([keys[b * p["block"]:(b + 1) * p["block"]].astype(np.float64).mean(0)
                         for b in range(nb)])
        first = np.arange(nb) * p["block"]
        count = p["top_m"]
    elif p["method"] == "attention_index":
        owner, reps = model.chunked_kmeans(keys, p)
        first = np.array([int(np.flatnonzero(owner == g).min()) if np.any(owner == g) else s
                          for g in range(reps.shape[0])])
        count = p["top_g"]
        out["assignment"] = owner
        out["group_sizes"] = np.bincount(owner, minlength=reps.shape[0]).astype(np.int64)
        out["centroids"] = reps
    else:
        owner = np.zeros(s, np.int64)
    ids = np.full((t_count, k), -1, np.int64)
    scores = np.full((t_count, k), -np.inf)
    cands = np.zeros(t_count, np.int64)
    forced = np.zeros((t_count, s), bool)
    rep_scores = np.full((t_count, 0 if reps is None else reps.shape[0]), -np.inf)
    rep_table = None if reps is None else indexer_table(q, w, reps)
    key_table = indexer_table(q, w, keys)
    for t in range(t_count):
        if reps is None:
            chosen = {0}
        else:
            eligible = []
            for g in range(reps.shape[0]):
                if first[g] <= pos[t]:
                    rep_scores[t, g] = rep_table[t, g]  # indexer(q[t], w[t], reps[g])
                    eligible.append((rep_scores[t, g], g))
            chosen = {g for _, g in _top(eligible, count)}
        members = set()
        for x in range(s):
            if x <= pos[t] and owner[x] in chosen:
                members.add(x)
            if p["method"] == "attention_index" and x <= pos[t] and (
                    x < p["sink"] or x > pos[t] - p["local"]):
                forced[t, x] = True
                members.add(x)
        cands[t] = len(members)
        # indexer(q[t], w[t], keys[x]) for each member, from the table
        best = _top([(float(key_table[t, x]), x) for x in members], k)
        for j, (score, x) in enumerate(best):
            ids[t, j] = x
            scores[t, j] = score
    causal = np.arange(s)[None, :] <= pos[:, None]
    all_scores = np.where(causal, model.scores64(q, w, keys), -np.inf)
    aux = {"owner": owner, "forced": forced, "rep_scores": rep_scores,
           "rep_bound": (np.zeros_like(rep_scores) if reps is None
                         else model.score_bound(q, w, reps)),
           "all_scores": all_scores, "all_bound": model.score_bound(q, w, keys)}
    out.update(ids=ids, scores=scores, candidates=cands, aux=aux)
    return out
