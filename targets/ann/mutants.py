"""Realistic bugs in OctEx-style indexes, each a patch of the NumPy index.

Each mutant replaces one module-level step of :mod:`fuzzkit.targets.ann.index` (the reference, which
reads :mod:`fuzzkit.targets.ann.model` directly, is untouched).  ``tests/test_ann_mutants.py`` shows each
one caught on a small case; ``fuzzkit mutants ann`` finds them from scratch.  The Triton kernels'
own mutants live in :mod:`fuzzkit.targets.ann.kernel_mutants`.

The last four live only past an edge: ``graph-block-offset`` past the graph build's first
GRAPH_BLOCK-row block, ``fast-floor`` on a projection exactly on a negative grid line,
``norm-epsilon`` at norms below 1e-6, ``full-cell-insert`` in an insert into a cell that was
full at build (``tests/test_ann_mutants.py`` shows each absent below its edge).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from fuzzkit.mutants import device_mutants, patch
from fuzzkit.target import Mutant
from fuzzkit.targets.ann import index, model, reference
from fuzzkit.targets.ann.model import Params

_ORIGINAL_EXPAND = index.expand
_ORIGINAL_PROBE_ORDER = index.probe_order
_ORIGINAL_QUERY_DISTANCE = index.query_distance
_ORIGINAL_ENCODE = index.encode
_ORIGINAL_INSERT = index.insert


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


def _knn_graph_block_offset(x: np.ndarray, r: int, metric: str,
                            rows: Optional[np.ndarray] = None) -> np.ndarray:
    """``index.knn_graph`` with the self column of each block computed without the block's
    offset (``rows[0] + local`` instead of ``rows[start + local]``): right in the first
    GRAPH_BLOCK rows, wrong in every later block."""
    n = x.shape[0]
    rows = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64)
    graph = np.full((rows.size, r), -1, dtype=np.int32)
    width = min(r, n - 1)
    if width <= 0:
        return graph
    ids = np.arange(n)
    for start in range(0, rows.size, index.GRAPH_BLOCK):
        block = rows[start:start + index.GRAPH_BLOCK]
        dist = model.distance(x[None, :, :], x[block, None, :], metric)
        own = rows[0] + np.arange(block.size)  # the bug: `start` is missing
        dist[np.arange(block.size), own] = np.inf
        key = np.where(ids[None, :] == own[:, None], n, ids[None, :])
        order = np.lexsort((key, dist), axis=-1)
        graph[start:start + block.size, :width] = order[:, :width]
    return graph


def _fast_floor_coords(y: np.ndarray, u: np.ndarray, w: float) -> np.ndarray:
    """The "fast floor" ``int(z) - (z < 0)``: a floor everywhere except at negative integers,
    where it is one too low (``-2.0 -> -3``)."""
    z = y / w + u
    return z.astype(np.int64) - (z < 0)


def _encode_norm_eps(x: np.ndarray, params: Params) -> Optional[index.QuantStore]:
    """turbo codes whose stored norm is ``sqrt(||x||^2 + 1e-12)``: an epsilon that is
    invisible for ordinary vectors and swallows the norm of tiny ones (and of zero ones)."""
    store = _ORIGINAL_ENCODE(x, params)
    if store is None:
        return None
    norms = np.sqrt(model.squared_norm(x) + 1e-12).astype(np.float32)
    return dataclasses.replace(store, norms=norms)


def _insert_skipping_full_cells(idx: index.Index, new: np.ndarray) -> index.Index:
    """An insert that only adds newcomers to cells with a free slot: a cell that was full at
    build keeps its old list even when a newcomer lies nearer its centre."""
    grown = _ORIGINAL_INSERT(idx, new)
    before = reference.cells_from_csr(index.outputs(idx, _NO_RESULT))
    after = reference.cells_from_csr(index.outputs(grown, _NO_RESULT))
    cap = idx.params.C
    kept = {key: (before[key] if len(before.get(key, ())) >= cap else ids)
            for key, ids in after.items()}
    sizes = [len(ids) for ids in kept.values()]
    return dataclasses.replace(
        grown, cell_offsets=np.r_[0, np.cumsum(sizes)].astype(np.int64),
        cell_members=np.array([i for ids in kept.values() for i in ids], dtype=np.int32))


_NO_RESULT = index.Result(np.zeros((0, 1), np.int64), np.zeros((0, 1), np.float32),
                          np.zeros(0, np.int64))


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "floor-truncation", "numpy",
        "off-by-one cell at negative coordinates: int() truncation instead of floor",
        "E2LSH / grid-hashing code (Datar et al. 2004, h(v) = floor((a.v + b) / w)): C casts "
        "and Python int() truncate toward zero, merging cells -1 and 0",
        patch(index, cell_coords=_truncating_coords),
    ),
    Mutant(
        "centre-without-offset", "numpy",
        "cell centre computed without the random offset u",
        "shifted-grid LSH: the centre of cell c is (c + 1/2 - u) w once the grid is shifted "
        "by u; forgetting the shift ranks cell members by distance to the wrong point",
        patch(index, cell_centre=_centre_without_offset),
    ),
    Mutant(
        "centre-without-half", "numpy",
        "cell centre at the cell's corner: the +1/2 missing",
        "off-by-half-cell errors in grid quantizers (corner vs centre of a cell)",
        patch(index, cell_centre=_centre_without_half),
    ),
    Mutant(
        "seed-reused", "numpy",
        "projection seed reused across tables: L identical tables",
        "multi-table LSH (FALCONN, E2LSH): seeding every table's RNG with the same seed "
        "silently turns L tables into one, and recall stops growing with L",
        patch(index, tables=_tables_one_seed),
    ),
    Mutant(
        "frontier-returned", "numpy",
        "the final beam returned instead of the best ever visited",
        "beam / greedy graph search (HNSW search_layer, DiskANN, CAGRA) must return the best "
        "candidates seen, not the last frontier",
        patch(index, result_pool=_last_beam),
    ),
    Mutant(
        "visited-not-updated", "numpy",
        "visited set not updated after an expansion",
        "graph-search visited-list bugs (hnswlib VisitedList reset/marking): nodes re-expanded "
        "and returned twice",
        patch(index, expand=_expand_without_marking),
    ),
    Mutant(
        "ip-sign-flipped", "numpy",
        "inner product used as a distance without negation",
        "similarity/distance convention mix-ups (FAISS METRIC_INNER_PRODUCT vs L2 ordering; "
        "max-heap vs min-heap): maximum inner product search returns the least similar",
        patch(index, query_distance=_ip_unnegated),
    ),
    Mutant(
        "stale-neighbours-after-insert", "numpy",
        "stale neighbour list after an insert: existing rows not updated",
        "incremental graph indexes (hnswlib addPoint, DiskANN inserts) must add back-links and "
        "prune existing neighbour lists; skipping it leaves old rows stale",
        patch(index, merge_rows=_stale_rows),
    ),
    Mutant(
        "probe-wrong-direction", "numpy",
        "multi-probe towards the far face: costs f and 1 - f swapped",
        "multi-probe LSH (Lv et al., VLDB 2007): the perturbation cost is the distance to the "
        "face moved across; swapping it probes the least likely neighbours first",
        patch(index, probe_order=_probe_mirrored),
    ),
    Mutant(
        "cell-cap-by-arrival", "numpy",
        "capped cell keeps its first C members by id, not the C nearest its centre",
        "bucket-capacity eviction in LSH tables (FIFO/first-come instead of by distance)",
        patch(index, centre_key=_cell_rank_by_id),
    ),
    Mutant(
        "rerank-with-estimates", "numpy",
        "rerank uses the quantized estimates instead of exact distances",
        "quantized search with refinement (FAISS IndexRefine, Qdrant rescore with "
        "original vectors): a rescore that reads the quantized store changes nothing",
        patch(index, exact_distances=_rerank_by_estimate),
    ),
    # -- bugs that live only past an edge the old strategy never reached ----------------------
    Mutant(
        "graph-block-offset", "numpy",
        "blocked kNN-graph build masks the self pair without the block's row offset: from the "
        "second GRAPH_BLOCK (n or inserted > GRAPH_BLOCK) a row lists itself and loses a neighbour",
        "blocked all-pairs distance / kNN-graph builds (FAISS knn with self-exclusion, cuML / "
        "RAFT brute-force kNN-graph 'remove self' on a tiled distance matrix): the diagonal of "
        "block b sits at column b * BLOCK + i, not i",
        patch(index, knn_graph=_knn_graph_block_offset),
    ),
    Mutant(
        "fast-floor", "numpy",
        "cell coordinates by the 'fast floor' int(z) - (z < 0): one cell too low exactly on a "
        "negative grid line",
        "fastfloor(x) = x > 0 ? (int)x : (int)x - 1 in grid hashing / noise code (Perlin, "
        "simplex, E2LSH ports) is wrong at negative integers; only a projection landing "
        "exactly on a grid line shows it",
        patch(index, cell_coords=_fast_floor_coords),
    ),
    Mutant(
        "norm-epsilon", "numpy",
        "turbo storage keeps sqrt(||x||^2 + 1e-12) as the norm: l2 estimates of tiny (and "
        "zero) vectors are off by 1e-12",
        "epsilon guards that swallow small values (LayerNorm rsqrt(var + eps), F.normalize "
        "eps=1e-12; RaBitQ / TurboQuant-style stored norms): invisible unless a norm is "
        "below ~1e-6",
        patch(index, encode=_encode_norm_eps),
    ),
    Mutant(
        "full-cell-insert", "numpy",
        "insert after the build drops newcomers into a full cell instead of evicting its "
        "farthest member",
        "bounded-bucket inserts (LSH buckets, IVF list caps, hnswlib/DiskANN pruning on "
        "insert): a capacity check before the insert keeps first-come members; needs a cell "
        "full at build and a nearer newcomer -- an insert sequence",
        patch(index, insert=_insert_skipping_full_cells),
    ),
)


#: The Triton kernels' mutants, on the ``triton`` implementation.
DEVICE_MUTANTS: list[Mutant] = device_mutants("fuzzkit.targets.ann.kernel_mutants")
