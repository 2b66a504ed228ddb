"""Realistic bugs in OctEx-style indexes, each a context manager patching the NumPy index.

Each mutant replaces one module-level step of :mod:`targets.ann.index` (the reference, which
reads :mod:`targets.ann.model` directly, is untouched).  ``tests/test_ann_mutants.py`` shows each
one caught on a small case; ``fuzzkit mutants ann`` finds them from scratch.  The Triton kernels'
own mutants live in :mod:`targets.ann.kernel_mutants`.
"""

from __future__ import annotations

from typing import Any, Callable
from unittest import mock

import numpy as np

from fuzzkit.kernel_mutation import device_mutants
from fuzzkit.target import Mutant
from targets.ann import index, model
from targets.ann.model import Params

_ORIGINAL_EXPAND = index.expand
_ORIGINAL_PROBE_ORDER = index.probe_order
_ORIGINAL_QUERY_DISTANCE = index.query_distance


def _truncating_coords(y: np.ndarray, u: np.ndarray, w: float) -> np.ndarray:
    """``int(y / w + u)``: truncation toward zero, one cell off below zero."""
    return (y / w + u).astype(np.int64)


def _centre_without_offset(coords: np.ndarray, u: np.ndarray, w: float) -> np.ndarray:
    return (coords + 0.5) * w


def _centre_without_half(coords: np.ndarray, u: np.ndarray, w: float) -> np.ndarray:
    return (coords - u) * w


def _tables_one_seed(params: Params, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Every table drawn from ``default_rng([seed, 0])``: L copies of one table."""
    a, u = model.table(params.seed, 0, params.m, dim)
    return np.stack([a] * params.L), np.stack([u] * params.L)


def _last_beam(seen_ids: list[np.ndarray],
               seen_dist: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The result taken from the last round only (the final beam), not everything visited."""
    return seen_ids[-1], seen_dist[-1]


def _expand_without_marking(idx: index.Index, q: np.ndarray, frontier: np.ndarray,
                            visited: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expansion that never records what it visited: later rounds re-expand old vectors."""
    return _ORIGINAL_EXPAND(idx, q, frontier, visited.copy())


def _ip_unnegated(x: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    """Inner product used as a distance as is: the most similar vector ranks last."""
    d = _ORIGINAL_QUERY_DISTANCE(x, q, metric)
    return -d if metric == "ip" else d


def _stale_rows(x: np.ndarray, rows: np.ndarray, candidates: np.ndarray, r: int,
                metric: str) -> np.ndarray:
    """An insert that links new vectors to their neighbours but never updates the neighbours'
    own rows (no back-links): old rows keep their pre-insert neighbours."""
    return candidates[:, :r].astype(np.int32)


def _probe_mirrored(fraction: np.ndarray, count: int) -> np.ndarray:
    """Face costs swapped: the far face of each coordinate probed first."""
    return _ORIGINAL_PROBE_ORDER(1.0 - fraction, count)


def _cell_rank_by_id(y: np.ndarray, coords: np.ndarray, u: np.ndarray,
                     w: Any) -> np.ndarray:
    """A cell keeps its first ``C`` members by id (arrival order), not the ``C`` nearest."""
    return np.zeros(y.shape[0])


def _rerank_by_estimate(idx: index.Index, q: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Rerank that reuses the quantized estimates instead of reading the original vectors."""
    return index.gathered_distances(idx, q, ids)


def _patch(name: str, replacement: Callable[..., Any]) -> Callable[[], Any]:
    return lambda: mock.patch.object(index, name, replacement)


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "floor-truncation", "numpy",
        "off-by-one cell at negative coordinates: int() truncation instead of floor",
        "E2LSH / grid-hashing code (Datar et al. 2004, h(v) = floor((a.v + b) / w)): C casts "
        "and Python int() truncate toward zero, merging cells -1 and 0",
        _patch("cell_coords", _truncating_coords),
    ),
    Mutant(
        "centre-without-offset", "numpy",
        "cell centre computed without the random offset u",
        "shifted-grid LSH: the centre of cell c is (c + 1/2 - u) w once the grid is shifted "
        "by u; forgetting the shift ranks cell members by distance to the wrong point",
        _patch("cell_centre", _centre_without_offset),
    ),
    Mutant(
        "centre-without-half", "numpy",
        "cell centre at the cell's corner: the +1/2 missing",
        "off-by-half-cell errors in grid quantizers (corner vs centre of a cell)",
        _patch("cell_centre", _centre_without_half),
    ),
    Mutant(
        "seed-reused", "numpy",
        "projection seed reused across tables: L identical tables",
        "multi-table LSH (FALCONN, E2LSH): seeding every table's RNG with the same seed "
        "silently turns L tables into one, and recall stops growing with L",
        _patch("tables", _tables_one_seed),
    ),
    Mutant(
        "frontier-returned", "numpy",
        "the final beam returned instead of the best ever visited",
        "beam / greedy graph search (HNSW search_layer, DiskANN, CAGRA) must return the best "
        "candidates seen, not the last frontier",
        _patch("result_pool", _last_beam),
    ),
    Mutant(
        "visited-not-updated", "numpy",
        "visited set not updated after an expansion",
        "graph-search visited-list bugs (hnswlib VisitedList reset/marking): nodes re-expanded "
        "and returned twice",
        _patch("expand", _expand_without_marking),
    ),
    Mutant(
        "ip-sign-flipped", "numpy",
        "inner product used as a distance without negation",
        "similarity/distance convention mix-ups (FAISS METRIC_INNER_PRODUCT vs L2 ordering; "
        "max-heap vs min-heap): maximum inner product search returns the least similar",
        _patch("query_distance", _ip_unnegated),
    ),
    Mutant(
        "stale-neighbours-after-insert", "numpy",
        "stale neighbour list after an insert: existing rows not updated",
        "incremental graph indexes (hnswlib addPoint, DiskANN inserts) must add back-links and "
        "prune existing neighbour lists; skipping it leaves old rows stale",
        _patch("merge_rows", _stale_rows),
    ),
    Mutant(
        "probe-wrong-direction", "numpy",
        "multi-probe towards the far face: costs f and 1 - f swapped",
        "multi-probe LSH (Lv et al., VLDB 2007): the perturbation cost is the distance to the "
        "face moved across; swapping it probes the least likely neighbours first",
        _patch("probe_order", _probe_mirrored),
    ),
    Mutant(
        "cell-cap-by-arrival", "numpy",
        "capped cell keeps its first C members by id, not the C nearest its centre",
        "bucket-capacity eviction in LSH tables (FIFO/first-come instead of by distance)",
        _patch("centre_key", _cell_rank_by_id),
    ),
    Mutant(
        "rerank-with-estimates", "numpy",
        "rerank uses the quantized estimates instead of exact distances",
        "quantized search with refinement (FAISS IndexRefine, Qdrant rescore with "
        "original vectors): a rescore that reads the quantized store changes nothing",
        _patch("exact_distances", _rerank_by_estimate),
    ),
)


#: The Triton kernels' mutants, on the ``triton`` implementation.
DEVICE_MUTANTS: list[Mutant] = device_mutants("targets.ann.kernel_mutants")
