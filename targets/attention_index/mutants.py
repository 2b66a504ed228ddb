"""Realistic bugs in sparse-attention indexers, each a context manager patching the NumPy index.

Each mutant replaces one module-level step of :mod:`targets.attention_index.index` (the reference
is untouched).  ``tests/test_attention_index_mutants.py`` shows each one caught on a fixed case;
``fuzzkit mutants attention_index`` finds them from scratch.  The Triton kernels' own mutants
live in :mod:`targets.attention_index.kernel_mutants` (wired in below when present).
"""

from __future__ import annotations

from typing import Any, Callable
from unittest import mock

import numpy as np

from fuzzkit.kernel_mutation import device_mutants
from fuzzkit.target import Mutant
from targets.attention_index import index, model

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


def _patch(name: str, replacement: Callable[..., Any]) -> Callable[[], Any]:
    return lambda: mock.patch.object(index, name, replacement)


def _patch_many(**replacements: Callable[..., Any]) -> Callable[[], Any]:
    return lambda: mock.patch.multiple(index, **replacements)


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "causal-group-level-only", "numpy",
        "causal mask applied at group level only: future members of a probed group scored",
        "block/cluster sparse attention (NSA, MoBA, Quest) must mask keys inside a selected "
        "block that lie after the query; masking only whole blocks leaks future keys",
        _patch("candidate_mask", _group_level_causal),
    ),
    Mutant(
        "relu-dropped", "numpy",
        "ReLU dropped from the lightning indexer score",
        "DeepSeek-V3.2 lightning indexer I = sum_h w ReLU(q.k): negative head terms must not "
        "subtract; kernels fusing the weighted sum sometimes lose the activation",
        _patch("relu", _no_relu),
    ),
    Mutant(
        "head-weights-ignored", "numpy",
        "head weights w[t,h] not applied (plain sum over heads)",
        "DeepSeek-V3.2 indexer head weights (weights_proj): forgetting the per-token weights",
        _patch_many(score_representatives=_reps_unweighted, score_members=_members_unweighted),
    ),
    Mutant(
        "centroid-not-updated", "numpy",
        "centroid not updated when chunked prefill keys join a group",
        "online / streaming k-means (mini-batch k-means, RetrievalAttention / ClusterKV "
        "incremental clustering): new members must move the running mean",
        _patch("absorb", _absorb_frozen),
    ),
    Mutant(
        "key-in-two-groups", "numpy",
        "a key listed in two groups' member lists",
        "cluster-based KV retrieval (ClusterKV, RetroInfer): a non-exclusive assignment makes "
        "keys scored twice and groups overlap",
        _patch("owner_lists", _two_owners),
    ),
    Mutant(
        "topk-off-by-one", "numpy",
        "top-k returns k - 1 entries (exclusive bound)",
        "top-k kernels (torch.topk wrappers, radix select) with an off-by-one slice",
        _patch("select_topk", _topk_short),
    ),
    Mutant(
        "sink-dropped", "numpy",
        "attention-sink tokens not forced into the candidate set",
        "StreamingLLM (Xiao et al. 2023) attention sinks: sparse selectors must always keep the "
        "first tokens",
        _patch("forced_mask", _no_sink),
    ),
    Mutant(
        "block-rep-first-key", "numpy",
        "HiSA block represented by its first key, not the mean of its keys",
        "block-sparse retrieval (Quest min/max, HiSA / NSA compressed blocks): a representative "
        "that summarises only part of the block misranks blocks",
        _patch("block_means", _first_key_reps),
    ),
    Mutant(
        "local-window-off-by-one", "numpy",
        "local window shifted by one: the query's own position not forced",
        "sliding-window / local attention masks (StreamingLLM, Longformer) off by one at the "
        "diagonal",
        _patch("forced_mask", _local_off_by_one),
    ),
)


#: The Triton kernels' mutants, on the ``triton`` implementation.
DEVICE_MUTANTS: list[Mutant] = device_mutants("targets.attention_index.kernel_mutants")
