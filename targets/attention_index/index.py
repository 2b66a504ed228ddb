"""The vectorized NumPy lightning indexer: dense, HiSA and AttentionIndex (the ``numpy`` impl).

The chunked k-means build uses the model's float64 arithmetic (:mod:`.model`), so it makes the
reference's decisions exactly.  Query-time scoring is float32 and goes through three module-level
*hooks* that the Triton implementation replaces with kernels:

* :func:`score_representatives` -- I(t, rep_g) for block means / centroids, float32 (T, G);
* :func:`score_members` -- I(t, keys[cand]) for padded candidate lists, -inf where masked;
* :func:`select_topk` -- the k best of a padded (scores, ids) list by (score desc, id asc).

Group/block selection uses :func:`select_topk` too (ids = group ids, ineligible groups -inf).
:func:`search` looks its default hooks up at call time, so mutants patching this module's
attributes take effect.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional

import numpy as np

from fuzzkit.targets.attention_index import model


# ------------------------------------------------------------------------------------ hooks


def score_representatives(q: np.ndarray, w: np.ndarray, reps: np.ndarray) -> np.ndarray:
    """float32 (T, G): I(t, reps[g])."""
    q = np.asarray(q, np.float32)
    dots = np.einsum("thd,gd->thg", q, np.asarray(reps, np.float32))
    out = np.einsum("th,thg->tg", np.asarray(w, np.float32), relu(dots))
    return (out / np.float32(math.sqrt(q.shape[-1]))).astype(np.float32)


def score_members(q: np.ndarray, w: np.ndarray, keys: np.ndarray, cand: np.ndarray,
                  positions: np.ndarray) -> np.ndarray:
    """float32 (T, M): I(t, keys[cand]) where 0 <= cand <= pos(t), else -inf."""
    q = np.asarray(q, np.float32)
    cand = np.asarray(cand, np.int64)
    valid = (cand >= 0) & (cand <= np.asarray(positions)[:, None])
    gathered = np.asarray(keys, np.float32)[np.where(valid, cand, 0)]        # (T, M, d)
    dots = np.einsum("thd,tmd->thm", q, gathered)
    out = np.einsum("th,thm->tm", np.asarray(w, np.float32), relu(dots))
    out = (out / np.float32(math.sqrt(q.shape[-1]))).astype(np.float32)
    return np.where(valid, out, np.float32(-np.inf)).astype(np.float32)


def select_topk(scores: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids int64 (T,k), scores float32 (T,k)) best first by (score desc, id asc); -inf and -1
    entries never selected; -1 / -inf padded."""
    scores = np.asarray(scores, np.float32)
    cand = np.asarray(cand, np.int64)
    t, m = scores.shape
    valid = (cand >= 0) & (scores > -np.inf)
    primary = np.where(valid, -scores.astype(np.float64), np.inf)
    secondary = np.where(valid, cand, np.iinfo(np.int64).max)
    order = np.lexsort((secondary, primary), axis=-1)[:, :k]
    ids = np.full((t, k), -1, np.int64)
    out = np.full((t, k), -np.inf, np.float32)
    width = order.shape[1]
    take_valid = np.take_along_axis(valid, order, axis=1)
    ids[:, :width] = np.where(take_valid, np.take_along_axis(cand, order, axis=1), -1)
    out[:, :width] = np.where(take_valid, np.take_along_axis(scores, order, axis=1), -np.inf)
    return ids, out


# ------------------------------------------------------------------------- building blocks


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0.0))


#: How a chunked key joins its group (a mutant hook; the reference uses ``model.absorb``).
absorb = model.absorb


def member_groups(assignment: np.ndarray) -> list[np.ndarray]:
    """Per group its member positions (ascending); each key in exactly one list."""
    g = int(assignment.max()) + 1 if assignment.size else 0
    order = np.argsort(assignment, kind="stable")
    bounds = np.searchsorted(assignment[order], np.arange(g + 1))
    return [order[bounds[i]:bounds[i + 1]] for i in range(g)]


def build_groups(keys: np.ndarray, p: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Chunked k-means: (assignment int64 (S,), centroids float64 (G, d))."""
    return model.chunked_kmeans(keys, p, absorb)


def owner_lists(assignment: np.ndarray, centroids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(S, R) int64, -1 padded: the groups whose member list holds key s.  A partition: R = 1,
    the key's own group."""
    return np.asarray(assignment, np.int64)[:, None]


def candidate_mask(selected: np.ndarray, owners: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """(T, S) bool: key s is a candidate when a group/block holding it (``owners[s]``, -1
    padded) is selected and s <= pos(t) (member-level causal mask)."""
    s = owners.shape[0]
    hit = np.zeros((selected.shape[0], s), bool)
    for r in range(owners.shape[1]):
        col = owners[:, r]
        hit |= selected[:, np.maximum(col, 0)] & (col >= 0)[None, :]
    return hit & (np.arange(s)[None, :] <= pos[:, None])


def block_means(keys: np.ndarray, block: int) -> np.ndarray:
    """float64 (blocks, d): each block's representative, the mean of all its keys."""
    nb = -(-keys.shape[0] // block)
    return np.stack([keys[b * block:(b + 1) * block].astype(np.float64).mean(0)
                     for b in range(nb)])


def forced_mask(t: int, s: int, pos: np.ndarray, sink: int, local: int) -> np.ndarray:
    """(T, S) bool: sink positions 0..sink-1 and local positions pos-local+1..pos (causal)."""
    idx = np.arange(s)[None, :]
    causal = idx <= pos[:, None]
    return causal & ((idx < sink) | (idx > pos[:, None] - local))


def padded(mask: np.ndarray) -> np.ndarray:
    """(T, M) int32 ids of each row's True entries, ascending, -1 padded."""
    t, s = mask.shape
    m = max(1, int(mask.sum(axis=1).max()) if t else 1)
    order = np.argsort(~mask, axis=1, kind="stable")[:, :m]
    keep = np.take_along_axis(mask, order, axis=1)
    return np.where(keep, order, -1).astype(np.int32)


def select_groups(rep_scores: np.ndarray, eligible: np.ndarray, count: int,
                  hook: Callable[..., Any]) -> np.ndarray:
    """(T, G) bool: the ``count`` best eligible groups per row (via the top-k hook)."""
    t, g = rep_scores.shape
    masked = np.where(eligible, rep_scores, np.float32(-np.inf)).astype(np.float32)
    ids = np.tile(np.arange(g, dtype=np.int32), (t, 1))
    chosen, _ = hook(masked, ids, min(count, g))
    selected = np.zeros((t, g), bool)
    rows = np.repeat(np.arange(t), chosen.shape[1])
    flat = chosen.reshape(-1)
    selected[rows[flat >= 0], flat[flat >= 0]] = True
    return selected


def search(inputs: Mapping[str, Any], *,
           score_representatives: Optional[Callable[..., Any]] = None,
           score_members: Optional[Callable[..., Any]] = None,
           select_topk: Optional[Callable[..., Any]] = None) -> dict[str, Any]:
    """Run the indexer named by ``inputs['method']``; hooks default to this module's."""
    import sys
    me = sys.modules[__name__]
    rep_hook = score_representatives or me.score_representatives
    mem_hook = score_members or me.score_members
    top_hook = select_topk or me.select_topk
    q = np.asarray(inputs["q"], np.float32)
    w = np.asarray(inputs["w"], np.float32)
    keys = np.asarray(inputs["k"], np.float32)
    p = model.params(inputs)
    t, s = q.shape[0], keys.shape[0]
    pos = model.positions(t, s)
    out: dict[str, Any] = {}
    if p["method"] == "dense":
        mask = np.arange(s)[None, :] <= pos[:, None]
    elif p["method"] == "hisa":
        nb = -(-s // p["block"])
        owner = np.arange(s) // p["block"]
        reps = me.block_means(keys, p["block"])
        rep_scores = rep_hook(q, w, reps.astype(np.float32))
        eligible = (np.arange(nb) * p["block"])[None, :] <= pos[:, None]
        selected = select_groups(rep_scores, eligible, p["top_m"], top_hook)
        mask = me.candidate_mask(selected, owner[:, None], pos)
    elif p["method"] == "attention_index":
        assignment, centroids = me.build_groups(keys, p)
        g = centroids.shape[0]
        first = np.full(g, s, np.int64)
        np.minimum.at(first, assignment, np.arange(s))
        rep_scores = rep_hook(q, w, centroids.astype(np.float32))
        eligible = first[None, :] <= pos[:, None]
        selected = select_groups(rep_scores, eligible, p["top_g"], top_hook)
        owners = me.owner_lists(assignment, centroids, keys)
        mask = me.candidate_mask(selected, owners, pos) | me.forced_mask(
            t, s, pos, p["sink"], p["local"])
        out["assignment"] = assignment
        out["group_sizes"] = np.bincount(owners[owners >= 0], minlength=g).astype(np.int64)
        out["centroids"] = centroids.astype(np.float32)
    else:  # pragma: no cover - defensive: validate() rejects any other method
        raise ValueError(f"unknown method {p['method']!r}")
    cand = me.padded(mask)
    scores = mem_hook(q, w, keys, cand, pos)
    ids, top = top_hook(scores, cand, p["topk"])
    out.update(ids=np.asarray(ids, np.int64), scores=np.asarray(top, np.float32),
               candidates=(np.asarray(cand) >= 0).sum(axis=1).astype(np.int64))
    return out


def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``numpy`` implementation."""
    return search(inputs)
