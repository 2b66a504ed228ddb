"""Realistic bugs in sparse-attention indexers, each a patch of the NumPy index.

Each mutant replaces one module-level step of :mod:`fuzzkit.targets.attention_index.index` (the reference
is untouched).  ``tests/test_attention_index_mutants.py`` shows each one caught on a fixed case;
``fuzzkit mutants attention_index`` finds them from scratch.  The Triton kernels' own mutants
live in :mod:`fuzzkit.targets.attention_index.kernel_mutants` (wired in below when present).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fuzzkit.mutants import device_mutants, patch
from fuzzkit.target import Mutant
from fuzzkit.targets.attention_index import index, model

_ORIGINAL_SELECT = index.select_topk
_ORIGINAL_REPS = index.score_representatives
_ORIGINAL_MEMBERS = index.score_members
_ORIGINAL_FORCED = index.forced_mask


def _group_level_causal(selected: np.ndarray, owners: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Causality only through group eligibility: every member of a probed group is a
    candidate, including keys after pos(t)."""
    hit = np.zeros((selected.shape[0], owners.shape[0]), bool)
    for r in range(owners.shape[1]):
        col = owners[:, r]
        hit |= selected[:, np.maximum(col, 0)] & (col >= 0)[None, :]
    return hit


def _no_relu(x: np.ndarray) -> np.ndarray:
    return x


def _reps_unweighted(q: np.ndarray, w: np.ndarray, reps: np.ndarray) -> np.ndarray:
    return _ORIGINAL_REPS(q, np.ones_like(w), reps)


def _members_unweighted(q: np.ndarray, w: np.ndarray, keys: np.ndarray, cand: np.ndarray,
                        positions: np.ndarray) -> np.ndarray:
    return _ORIGINAL_MEMBERS(q, np.ones_like(w), keys, cand, positions)


def _absorb_frozen(sums: np.ndarray, counts: np.ndarray, group: int, x: np.ndarray) -> None:
    """A chunked key joins its group's list but the centroid keeps its first-chunk value."""


def _two_owners(assignment: np.ndarray, centroids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Each key listed in its nearest and its second-nearest group (soft assignment leak)."""
    dist = model.sq_distances(keys, centroids)
    order = np.argsort(dist, axis=1, kind="stable")
    second = order[:, 1] if centroids.shape[0] > 1 else np.full(keys.shape[0], -1)
    second = np.where(second == assignment, order[:, 0], second)
    return np.stack([assignment, second], axis=1).astype(np.int64)


def _topk_short(scores: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-(k-1) padded to k: the classic exclusive upper bound."""
    ids, top = _ORIGINAL_SELECT(scores, cand, max(k - 1, 0))
    pad = k - ids.shape[1]
    return (np.pad(ids, ((0, 0), (0, pad)), constant_values=-1),
            np.pad(top, ((0, 0), (0, pad)), constant_values=-np.inf).astype(np.float32))


def _no_sink(t: int, s: int, pos: np.ndarray, sink: int, local: int) -> np.ndarray:
    return _ORIGINAL_FORCED(t, s, pos, 0, local)


def _first_key_reps(keys: np.ndarray, block: int) -> np.ndarray:
    """Each block represented by its first key instead of the mean of its keys."""
    return np.asarray(keys[::block], np.float64)


def _local_off_by_one(t: int, s: int, pos: np.ndarray, sink: int, local: int) -> np.ndarray:
    """Local window pos-local .. pos-1: the query's own position left out."""
    return _ORIGINAL_FORCED(t, s, pos - 1, sink, local) & (
        np.arange(s)[None, :] <= pos[:, None])


#: The "very negative" constant of the finite-mask mutant (a mask value many kernels use).
FINITE_MASK = np.float32(-1e30)


def _select_groups_finite_mask(rep_scores: np.ndarray, eligible: np.ndarray, count: int,
                               hook: Callable[..., Any]) -> np.ndarray:
    """Ineligible groups masked with -1e30 instead of -inf: a legitimate group whose score is
    below -1e30 (huge magnitudes, negative head weights) loses its probe to a group that starts
    after the query -- whose members the causal mask then drops."""
    t, g = rep_scores.shape
    masked = np.where(eligible, rep_scores, FINITE_MASK).astype(np.float32)
    ids = np.tile(np.arange(g, dtype=np.int32), (t, 1))
    chosen, _ = hook(masked, ids, min(count, g))
    selected = np.zeros((t, g), bool)
    rows = np.repeat(np.arange(t), chosen.shape[1])
    flat = chosen.reshape(-1)
    selected[rows[flat >= 0], flat[flat >= 0]] = True
    return selected


def _flushed(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.float32(0.0), x).astype(np.float32)


def _members_ftz(q: np.ndarray, w: np.ndarray, keys: np.ndarray, cand: np.ndarray,
                 positions: np.ndarray) -> np.ndarray:
    """Member scoring as a fast-math build runs it: subnormal inputs read as zero (DAZ) and
    subnormal results flushed to zero (FTZ)."""
    return _flushed(_ORIGINAL_MEMBERS(_flushed(q), _flushed(w), _flushed(keys), cand, positions))


def _build_batched_absorb(keys: np.ndarray, p: Any) -> tuple[np.ndarray, np.ndarray]:
    """Chunked k-means with the keys after the first chunk assigned in one batch against the
    first chunk's means, then folded in -- instead of one by one against running means.  The
    first absorbed key sees the same centroids; a later one differs once an earlier joiner has
    moved its centroid across the boundary."""
    x = np.asarray(keys, np.float64)
    s = x.shape[0]
    n0 = min(p["chunk"], s)
    assign0, cent0 = model.chunked_kmeans(x[:n0], {**p, "chunk": n0})
    later = model.nearest(x[n0:], cent0) if n0 < s else np.zeros(0, np.int64)
    assignment = np.concatenate([assign0, later]).astype(np.int64)
    sums, counts = model.means(x, assignment, cent0)
    return assignment, model.centroids_of(sums, counts, cent0)


def _zero_empty_groups(sums: np.ndarray, counts: np.ndarray, old: np.ndarray) -> np.ndarray:
    return sums / np.maximum(counts, 1)[:, None]


def _build_empty_zeroed(keys: np.ndarray, p: Any) -> tuple[np.ndarray, np.ndarray]:
    """Chunked k-means whose empty groups get a zero centroid (sum / max(count, 1)) instead of
    keeping their previous one."""
    with patch(model, centroids_of=_zero_empty_groups)():
        return model.chunked_kmeans(keys, p, index.absorb)


def _padded_block_means(keys: np.ndarray, block: int) -> np.ndarray:
    """Block means over zero-padded blocks: the last, partial block divided by ``block``."""
    s, d = keys.shape
    nb = -(-s // block)
    padded = np.zeros((nb * block, d), np.float64)
    padded[:s] = keys
    return padded.reshape(nb, block, d).mean(axis=1)


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "causal-group-level-only", "numpy",
        "causal mask applied at group level only: future members of a probed group scored",
        "block/cluster sparse attention (NSA, MoBA, Quest) must mask keys inside a selected "
        "block that lie after the query; masking only whole blocks leaks future keys",
        patch(index, candidate_mask=_group_level_causal),
    ),
    Mutant(
        "relu-dropped", "numpy",
        "ReLU dropped from the lightning indexer score",
        "DeepSeek-V3.2 lightning indexer I = sum_h w ReLU(q.k): negative head terms must not "
        "subtract; kernels fusing the weighted sum sometimes lose the activation",
        patch(index, relu=_no_relu),
    ),
    Mutant(
        "head-weights-ignored", "numpy",
        "head weights w[t,h] not applied (plain sum over heads)",
        "DeepSeek-V3.2 indexer head weights (weights_proj): forgetting the per-token weights",
        patch(index, score_representatives=_reps_unweighted, score_members=_members_unweighted),
    ),
    Mutant(
        "centroid-not-updated", "numpy",
        "centroid not updated when chunked prefill keys join a group",
        "online / streaming k-means (mini-batch k-means, RetrievalAttention / ClusterKV "
        "incremental clustering): new members must move the running mean",
        patch(index, absorb=_absorb_frozen),
    ),
    Mutant(
        "key-in-two-groups", "numpy",
        "a key listed in two groups' member lists",
        "cluster-based KV retrieval (ClusterKV, RetroInfer): a non-exclusive assignment makes "
        "keys scored twice and groups overlap",
        patch(index, owner_lists=_two_owners),
    ),
    Mutant(
        "topk-off-by-one", "numpy",
        "top-k returns k - 1 entries (exclusive bound)",
        "top-k kernels (torch.topk wrappers, radix select) with an off-by-one slice",
        patch(index, select_topk=_topk_short),
    ),
    Mutant(
        "sink-dropped", "numpy",
        "attention-sink tokens not forced into the candidate set",
        "StreamingLLM (Xiao et al. 2023) attention sinks: sparse selectors must always keep the "
        "first tokens",
        patch(index, forced_mask=_no_sink),
    ),
    Mutant(
        "block-rep-first-key", "numpy",
        "HiSA block represented by its first key, not the mean of its keys",
        "block-sparse retrieval (Quest min/max, HiSA / NSA compressed blocks): a representative "
        "that summarises only part of the block misranks blocks",
        patch(index, block_means=_first_key_reps),
    ),
    Mutant(
        "local-window-off-by-one", "numpy",
        "local window shifted by one: the query's own position not forced",
        "sliding-window / local attention masks (StreamingLLM, Longformer) off by one at the "
        "diagonal",
        patch(index, forced_mask=_local_off_by_one),
    ),
    Mutant(
        "group-mask-finite", "numpy",
        "ineligible groups masked with -1e30 instead of -inf before group selection: a "
        "legitimate group scoring below -1e30 loses its probe (huge scores, negative weights)",
        "attention masks with a finite 'very negative' constant (-1e9 / -1e30 / finfo.min "
        "additive masks in HF transformers and vLLM) that real scores can undercut",
        patch(index, select_groups=_select_groups_finite_mask),
    ),
    Mutant(
        "scores-flush-subnormal", "numpy",
        "member scoring with denormals flushed (DAZ inputs, FTZ results): subnormal scores "
        "and products of tiny values become zero",
        "fast-math / flush-to-zero builds of scoring kernels (CUDA --use_fast_math, "
        "torch.set_flush_denormal, Triton's ftz libdevice) silently losing subnormal values",
        patch(index, score_members=_members_ftz),
    ),
    Mutant(
        "absorb-batched", "numpy",
        "keys after the first chunk assigned in one batch against the first chunk's means, not "
        "one by one against running means (shows from the second absorbed key)",
        "streaming / incremental k-means for KV clustering (ClusterKV, RetroInfer, mini-batch "
        "k-means): batching a sequential update changes which centroid a later key joins",
        patch(index, build_groups=_build_batched_absorb),
    ),
    Mutant(
        "empty-group-zeroed", "numpy",
        "an empty k-means group gets a zero centroid (sum / max(count, 1)) instead of keeping "
        "its previous one (needs tied keys or tied initial centroids)",
        "empty clusters in Lloyd's k-means (FAISS re-seeds them; naive sum / count code "
        "produces zero or NaN centroids that then attract keys near the origin)",
        patch(index, build_groups=_build_empty_zeroed),
    ),
    Mutant(
        "block-mean-padded", "numpy",
        "HiSA block mean taken over a zero-padded block: the last, partial block's mean is "
        "divided by the block size, not its key count (S % block != 0)",
        "block summaries over padded KV pages (Quest / NSA / HiSA block representatives, paged "
        "KV with a partially filled last page)",
        patch(index, block_means=_padded_block_means),
    ),
)


#: The Triton kernels' mutants, on the ``triton`` implementation.
DEVICE_MUTANTS: list[Mutant] = device_mutants("fuzzkit.targets.attention_index.kernel_mutants")
