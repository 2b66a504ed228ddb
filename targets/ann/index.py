"""The vectorized NumPy OctEx index: build, insert, probe and search (the ``numpy`` implementation).

The build (tables, cells, the kNN graph, turbo codes) is whole-array NumPy; its discrete
decisions use the model's arithmetic from :mod:`fuzzkit.targets.ann.model`, so it makes exactly the
reference's decisions.  The search computes float32 distances.  Its two query-time steps are
module-level *hooks* (NumPy ones in :mod:`fuzzkit.targets.ann.numpy_hooks`, imported here) that the
Triton implementation replaces with kernels:

* :func:`candidate_distances` -- distances from each query to its (padded) candidate ids;
* :func:`expand` -- one round of neighbour expansion: the graph rows of the frontier, minus what
  was visited, deduplicated, marked visited, with their distances.

Everything else (frontier selection, the final ranking by (distance, id), rerank) is done here
for every implementation, so two implementations differ only in those two steps.  :func:`search`
looks its default hooks up at call time, so a mutant that patches a module attribute here takes
effect.

Edges of this code (declared in :mod:`fuzzkit.targets.ann.thresholds`, where the strategy aims): the
graph is built in blocks of ``GRAPH_BLOCK`` rows (a second block from 65 vectors, or 65
inserted ones); a graph row meets ``n - 1 < R`` (-1 padding), a cell its capacity ``C``, the
frontier a query's candidate count, the result ``k > n``, the rerank pool ``max(k, E)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import numpy as np

from fuzzkit.oracles.close import ROUNDING_SLACK, gamma
from fuzzkit.targets.ann import model
from fuzzkit.targets.ann.model import (Params, cell_centre, cell_coords, face_fraction, project,
                               squared_norm, tables)
# The NumPy query-time hooks (the ``numpy`` implementation's own code; the Triton one replaces
# them), imported as the search's defaults -- mutants and the benchmark address them here.
from fuzzkit.targets.ann.numpy_hooks import (  # noqa: F401
    candidate_distances, estimated_distances, expand, first_occurrences, gathered_distances)
from fuzzkit.targets.quant import numpy_impl as quant_numpy
from fuzzkit.targets.quant import reference as quant_reference

CandidateDistances = Callable[["Index", np.ndarray, np.ndarray], np.ndarray]
Expand = Callable[["Index", np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
GraphBuilder = Callable[[np.ndarray, int, str], np.ndarray]

#: Rows of the distance matrix screened at once when building the graph.  Small enough that the
#: second block -- its own row offsets and self exclusion -- is reached by cases of 65 vectors
#: (every relation rebuilds the graph, so the size of the cases reaching it sets the run's
#: pace).
GRAPH_BLOCK = 64


@dataclasses.dataclass
class QuantStore:
    """turbo storage: the quant codec's codes and float32 scales, plus what the asymmetric
    estimate needs (float32 centroids, stored norms ``||v||`` and the rotation plan)."""

    codes: np.ndarray        # uint8 | uint16 (n, D)
    scales: np.ndarray       # float32 (n,)
    centroids: np.ndarray    # float32 (levels,)
    norms: np.ndarray        # float32 (n,)
    plan: Any                # quant rotation plan for (D, seed)
    bits: int


@dataclasses.dataclass
class Index:
    """A built OctEx index.  Cells are a CSR over the occupied cells in (table, coords) order;
    ``cell_keys`` maps ``(table, *coords)`` to the cell's row (for probing)."""

    params: Params
    base: np.ndarray               # float32 (n, D)
    graph: np.ndarray              # int32 (n, R), -1 padded
    cell_offsets: np.ndarray       # int64 (cells + 1,)
    cell_members: np.ndarray       # int32
    cell_table: np.ndarray         # int64 (cells,)
    cell_coords: np.ndarray        # int64 (cells, m)
    projections: np.ndarray        # float64 (L, m, D)
    offsets: np.ndarray            # float64 (L, m)
    quant: Optional[QuantStore] = None
    cell_keys: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return int(self.base.shape[0])

    @property
    def dim(self) -> int:
        return int(self.base.shape[1])


@dataclasses.dataclass
class Result:
    ids: np.ndarray            # int64 (q, k), -1 padded
    distances: np.ndarray      # float32 (q, k), +inf padded
    visited_count: np.ndarray  # int64 (q,)


# ------------------------------------------------------------------------------------ build


def knn_graph(x: np.ndarray, r: int, metric: str,
              rows: Optional[np.ndarray] = None) -> np.ndarray:
    """The exact kNN graph: per id the ``r`` nearest *other* ids by (float64 model distance,
    id), -1 padded when fewer exist.  ``rows`` restricts it to those ids' rows (an insert's new
    vectors).  Blocked over rows to bound memory; each block is screened with a float64 matrix
    product and decided by the model's own distances (:func:`nearest_rows`)."""
    n = x.shape[0]
    rows = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64)
    graph = np.full((rows.size, r), -1, dtype=np.int32)
    width = min(r, n - 1)
    if width <= 0:
        return graph
    screen = Screen(x, metric)
    for start in range(0, rows.size, GRAPH_BLOCK):
        block = rows[start:start + GRAPH_BLOCK]
        graph[start:start + block.size, :width] = nearest_rows(screen, block, width)
    return graph


#: The matrix-product screen's error bound, relative to its magnitude (see :class:`Screen`):
#: twice gamma_(D + 2) at float64's unit roundoff, once more for the norms it is scaled by.
SCREEN_FACTOR = 4.0


@dataclasses.dataclass
class Screen:
    """Approximate float64 distances from one matrix product (``|a|^2 + |b|^2 - 2 a.b``, or
    ``-a.b``) with a bound on how far each is from the model's distance, whatever BLAS kernel
    computed the product.

    The bound: the vectors are float32, so in float64 every product ``a_d b_d`` and square is
    exact (no rounding, no underflow: the smallest is 2**-298) and the only errors are the
    sums'.  Any summation order, with or without FMA, keeps a length-D dot product within
    ``gamma_D sum |a_d b_d| <= gamma_D |a| |b|`` of the true one, and the norms within
    ``gamma_D |a|^2``; the expansion's two final roundings make ``gamma_(D+2) (|a| + |b|)^2``
    for l2 (``gamma_D |a| |b|`` for ip).  The model's left-to-right distance is within the
    same of the true one (a rounded difference, square and D - 1 additions of non-negative
    terms).  So ``|screen - model| <= 2 gamma_(D+2) m`` with ``m = (|a| + |b|)^2`` (l2) or
    ``|a| |b|`` (ip); ``SCREEN_FACTOR`` doubles that for the rounding of the norms ``m`` is
    computed from.  Every decision is then taken on the model's own distances, computed for
    the ids whose screened interval reaches the cut: the result is what the float64 model
    gives, bit for bit, not what the BLAS kernel happened to round."""

    x: np.ndarray          # float32 (n, D)
    metric: str
    x64: np.ndarray = dataclasses.field(init=False)
    norm2: np.ndarray = dataclasses.field(init=False)
    norm: np.ndarray = dataclasses.field(init=False)
    relative: float = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.x64 = np.asarray(self.x, dtype=np.float64)
        self.norm2 = np.einsum("ij,ij->i", self.x64, self.x64)
        self.norm = np.sqrt(self.norm2)
        self.relative = SCREEN_FACTOR * gamma(self.x64.shape[1] + 2 + ROUNDING_SLACK, 2.0**-53)

    def distances(self, block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(approximate distances from the rows ``block`` to every vector, one bound per row
        that holds for all of that row's distances: the bound above at the largest norm)."""
        dot = self.x64[block] @ self.x64.T
        top = self.norm.max(initial=0.0)
        if self.metric == "ip":
            np.negative(dot, out=dot)
            return dot, self.relative * self.norm[block] * top
        dot *= -2.0
        dot += self.norm2[block, None]
        dot += self.norm2[None, :]
        return dot, self.relative * (self.norm[block] + top) ** 2


def nearest_rows(screen: Screen, block: np.ndarray, width: int) -> np.ndarray:
    """For each id of ``block``, the ``width`` nearest other ids by (model distance, id).

    With ``t`` the ``width``-th smallest upper bound of a row, at least ``width`` ids lie at
    most ``t`` away, so an id whose lower bound exceeds ``t`` is strictly farther than the
    ``width``-th nearest and cannot be among them: only the others (ties and near ties of the
    cut included) get the model's exact distance, and the row is ranked on it."""
    n = screen.x.shape[0]
    approx, bound = screen.distances(block)
    local = np.arange(block.size)
    approx[local, block] = np.inf
    # upper bounds approx + bound: the cut is the width-th smallest approx plus the row's bound
    cut = np.partition(approx, width - 1, axis=1)[:, width - 1] + 2.0 * bound
    candidate = approx <= cut[:, None]
    counts = candidate.sum(axis=1)
    widest = int(counts.max())
    if 2 * widest >= n:  # ties everywhere: rank whole rows
        cols = np.broadcast_to(np.arange(n), (block.size, n))
        live = np.ones((block.size, n), dtype=bool)
        live[local, block] = False
        exact = model.distance(screen.x[None, :, :], screen.x[block, None, :], screen.metric)
    else:
        row_of, col_of = np.nonzero(candidate)
        slot = np.arange(row_of.size) - np.repeat(np.cumsum(counts) - counts, counts)
        cols = np.zeros((block.size, widest), dtype=np.int64)
        live = np.zeros((block.size, widest), dtype=bool)
        cols[row_of, slot] = col_of
        live[row_of, slot] = True
        exact = model.distance(screen.x[cols], screen.x[block, None, :], screen.metric)
    exact = np.where(live, exact, np.inf)
    key = np.where(live, cols, n)
    order = np.lexsort((key, exact), axis=-1)[:, :width]
    return np.take_along_axis(cols, order, axis=1)


def centre_key(y: np.ndarray, coords: np.ndarray, u: np.ndarray,
               w: Optional[float]) -> np.ndarray:
    """What a cell ranks its members by: squared projected distance to the cell's centre
    (``||y||^2`` for the one cell of ``w = None``)."""
    return squared_norm(y if w is None else y - cell_centre(coords, u, w))


def _cells_of_table(x: np.ndarray, ids: np.ndarray, a: np.ndarray, u: np.ndarray,
                    w: Optional[float], cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One table's cells over the vectors ``ids``: (coords (cells, m), sizes (cells,), members)
    with cells in coords order and members by (distance to the centre, id), at most ``cap``."""
    y = project(x[ids], a)
    coords = np.zeros(y.shape, dtype=np.int64) if w is None else cell_coords(y, u, w)
    key = centre_key(y, coords, u, w)
    order = np.lexsort((ids, key) + tuple(coords[:, j] for j in reversed(range(coords.shape[1]))))
    coords, ids = coords[order], ids[order]
    new = np.ones(ids.size, dtype=bool)
    new[1:] = np.any(coords[1:] != coords[:-1], axis=1)
    starts = np.flatnonzero(new)
    population = np.diff(np.append(starts, ids.size))
    rank = np.arange(ids.size) - np.repeat(starts, population)
    return coords[starts], np.minimum(population, cap), ids[rank < cap]


def build_cells(x: np.ndarray, projections: np.ndarray, offsets: np.ndarray, params: Params,
                members: Optional[list[np.ndarray]] = None) -> dict[str, np.ndarray]:
    """The CSR cell arrays over all tables.  ``members[l]`` restricts table ``l`` to those ids
    (an insert passes the current members plus the new ids); default: every vector."""
    tables, coords, sizes, lists = [], [], [], []
    for l in range(params.L):
        ids = np.arange(x.shape[0]) if members is None else np.asarray(members[l])
        c, s, mem = _cells_of_table(x, ids.astype(np.int64), projections[l], offsets[l],
                                    params.w, params.C)
        tables.append(np.full(s.size, l, dtype=np.int64))
        coords.append(c)
        sizes.append(s)
        lists.append(mem)
    sizes_all = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
    return {
        "cell_table": np.concatenate(tables) if tables else np.zeros(0, np.int64),
        "cell_coords": (np.concatenate(coords) if coords
                        else np.zeros((0, params.m), np.int64)).astype(np.int64),
        "cell_offsets": np.concatenate([[0], np.cumsum(sizes_all)]).astype(np.int64),
        "cell_members": (np.concatenate(lists) if lists else np.zeros(0)).astype(np.int32),
    }


def _cell_keys(cell_table: np.ndarray, cell_coords: np.ndarray) -> dict:
    return {(int(t),) + tuple(c): i for i, (t, c) in
            enumerate(zip(cell_table.tolist(), cell_coords.tolist()))}


def encode(x: np.ndarray, params: Params) -> Optional[QuantStore]:
    """turbo codes through the quant codec (rotation seed = ``params.seed``, Lloyd--Max
    codebook, float32 encoder, packed storage layout); None for float32 storage."""
    bits = params.bits
    if bits is None:
        return None
    dim = x.shape[1]
    plan = quant_reference.rotation_plan(dim, params.seed)
    book = quant_reference.codebook(model.CODEBOOK, bits)
    packed, _, _ = quant_numpy.encode(x, plan, book, np.dtype(np.float32))
    codes, scales = quant_numpy.unpack(packed, dim, bits)
    norms = np.sqrt(model.squared_norm(x)).astype(np.float32)
    return QuantStore(codes, scales, book.centroids.astype(np.float32), norms, plan, bits)


def build(x: np.ndarray, params: Params, *,
          graph_builder: Optional[GraphBuilder] = None) -> Index:
    """Build the index over ``x`` (float32 (n, D)).  ``graph_builder`` replaces the exact float64
    graph (the benchmark passes a chunked float32 matmul one for 100k vectors)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    projections, offsets = tables(params, x.shape[1])
    cells = build_cells(x, projections, offsets, params)
    graph = (graph_builder or knn_graph)(x, params.R, params.metric)
    return Index(params=params, base=x, graph=np.asarray(graph, dtype=np.int32),
                 projections=projections, offsets=offsets, quant=encode(x, params),
                 cell_keys=_cell_keys(cells["cell_table"], cells["cell_coords"]), **cells)


def merge_rows(x: np.ndarray, rows: np.ndarray, candidates: np.ndarray, r: int,
               metric: str) -> np.ndarray:
    """Per row ``i`` the ``r`` best of ``candidates[i]`` (-1 padded, no repeats) by (model
    distance to ``x[rows[i]]``, id)."""
    valid = candidates >= 0
    safe = np.where(valid, candidates, 0)
    dist = np.where(valid, model.distance(x[safe], x[rows, None, :], metric), np.inf)
    key = np.where(valid, candidates, np.iinfo(np.int64).max)
    order = np.lexsort((key, dist), axis=-1)[:, :r]
    best = np.take_along_axis(candidates, order, axis=1)
    return np.where(np.take_along_axis(valid, order, axis=1), best, -1).astype(np.int32)


def table_members(index: Index, table: int) -> np.ndarray:
    """Every id listed in a cell of ``table`` (cells are grouped by table in the CSR)."""
    rows = np.flatnonzero(index.cell_table == table)
    if rows.size == 0:  # pragma: no cover - defensive: n >= 1 (validate) gives every table a cell
        return np.zeros(0, np.int64)
    return index.cell_members[index.cell_offsets[rows[0]]:index.cell_offsets[rows[-1] + 1]]\
        .astype(np.int64)


def insert(index: Index, new: np.ndarray) -> Index:
    """Append vectors after the build; ids continue from ``n``.  The result equals a build over
    all vectors: a cell keeps the ``C`` best of its old list and the newcomers, and every graph
    row -- old ones too -- the ``R`` best of its old row and the new ids (both keep their best
    because inserting only adds candidates)."""
    new = np.ascontiguousarray(new, dtype=np.float32)
    if new.shape[0] == 0:  # pragma: no cover - defensive: index_from_inputs inserts only rows
        return index
    p = index.params
    n_old = index.n
    x = np.concatenate([index.base, new])
    new_ids = np.arange(n_old, x.shape[0])
    members = [np.concatenate([table_members(index, l), new_ids]) for l in range(p.L)]
    cells = build_cells(x, index.projections, index.offsets, p, members)

    fresh = knn_graph(x, p.R, p.metric, rows=new_ids)
    old_candidates = np.concatenate(
        [index.graph.astype(np.int64), np.broadcast_to(new_ids, (n_old, new_ids.size))], axis=1)
    updated = merge_rows(x, np.arange(n_old), old_candidates, p.R, p.metric)
    quant = index.quant
    if quant is not None:
        extra = encode(new, p)
        quant = dataclasses.replace(
            quant, codes=np.concatenate([quant.codes, extra.codes]),
            scales=np.concatenate([quant.scales, extra.scales]),
            norms=np.concatenate([quant.norms, extra.norms]))
    return dataclasses.replace(
        index, base=x, graph=np.concatenate([updated, fresh]).astype(np.int32), quant=quant,
        cell_keys=_cell_keys(cells["cell_table"], cells["cell_coords"]), **cells)


def index_from_inputs(inputs: Mapping[str, Any], **build_options: Any) -> Index:
    """Build over ``inputs["vectors"]``, then insert ``inputs["inserted"]`` (if any)."""
    index = build(np.asarray(inputs["vectors"]), Params.from_inputs(inputs), **build_options)
    inserted = inputs.get("inserted")
    if inserted is not None and np.asarray(inserted).shape[0]:
        index = insert(index, np.asarray(inserted))
    return index


# ------------------------------------------------------------------------------------ query


def probe_order(fraction: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` adjacent cells to probe: per query row of ``fraction`` (q, m) the options
    ``2 j`` (coordinate j down, cost ``f_j``) and ``2 j + 1`` (up, cost ``1 - f_j``) ordered by
    (cost, j, down before up).  Returns option numbers (q, count)."""
    q, m = fraction.shape
    cost = np.stack([fraction, 1.0 - fraction], axis=2).reshape(q, 2 * m)
    option = np.broadcast_to(np.arange(2 * m), (q, 2 * m))
    return np.lexsort((option, cost), axis=-1)[:, :count]


def probed_cells(index: Index, q_vectors: np.ndarray) -> list[list[int]]:
    """Per query, the rows of the occupied cells it probes (over all tables)."""
    p = index.params
    q = q_vectors.shape[0]
    found: list[list[int]] = [[] for _ in range(q)]
    for l in range(p.L):
        if p.w is None:
            cell = index.cell_keys.get((l,) + (0,) * p.m)
            for row in found:
                if cell is not None:  # pragma: no branch - the one cell exists: n >= 1 (validate)
                    row.append(cell)
            continue
        y = project(q_vectors, index.projections[l])
        coords = cell_coords(y, index.offsets[l], p.w)
        fraction = face_fraction(y, index.offsets[l], p.w, coords)
        options = probe_order(fraction, p.P - 1)
        keys = index.cell_keys
        for i, (own, moves) in enumerate(zip(coords.tolist(), options.tolist())):
            for c in [own] + [_moved(own, option) for option in moves]:
                cell = keys.get((l, *c))
                if cell is not None:
                    found[i].append(cell)
    return found


def _moved(coords: list[int], option: int) -> list[int]:
    """The adjacent cell of probe option ``option``: coordinate ``option // 2`` one down
    (even) or up (odd)."""
    moved = list(coords)
    moved[option // 2] += 1 if option % 2 else -1
    return moved


def probe(index: Index, q_vectors: np.ndarray) -> list[np.ndarray]:
    """Per query: the candidate ids (int32, sorted, unique) -- the union of its probed cells."""
    off, mem = index.cell_offsets, index.cell_members
    found = probed_cells(index, q_vectors)
    cells = np.fromiter((c for row in found for c in row), dtype=np.int64)
    owner = np.repeat(np.arange(len(found)), [len(row) for row in found])
    lengths = (off[cells + 1] - off[cells]).astype(np.int64)
    first = np.cumsum(lengths) - lengths  # where each probed cell's members start
    at = np.arange(int(lengths.sum())) + np.repeat(off[cells] - first, lengths)
    ids = mem[at].astype(np.int64)
    query = np.repeat(owner, lengths)
    order = np.lexsort((ids, query))
    ids, query = ids[order], query[order]
    keep = np.ones(ids.size, dtype=bool)
    keep[1:] = (ids[1:] != ids[:-1]) | (query[1:] != query[:-1])
    ids, query = ids[keep], query[keep]
    bounds = np.searchsorted(query, np.arange(len(found) + 1))
    return [ids[bounds[i]:bounds[i + 1]].astype(np.int32) for i in range(len(found))]


def query_distance(x: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    """The exact metric in float32 (the model's order of summation, batch-independent)."""
    return model.distance(x, q, metric, np.float32)


def rotated_queries(index: Index, q_vectors: np.ndarray) -> np.ndarray:
    """``R q`` in float32 for turbo storage (queries are rotated, not quantized)."""
    assert index.quant is not None
    return quant_numpy.prepare_queries(np.asarray(q_vectors), index.quant.plan,
                                       np.dtype(np.float32))


def exact_distances(index: Index, q_vectors: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """float32 exact-metric distances from the original vectors (rerank), +inf at padding."""
    ids = np.asarray(ids)
    valid = ids >= 0
    safe = np.where(valid, ids, 0)
    q32 = np.asarray(q_vectors, dtype=np.float32)
    dist = query_distance(index.base[safe], q32[:, None, :], index.params.metric)
    return np.where(valid, dist, np.float32(np.inf)).astype(np.float32)


def best(ids: np.ndarray, dist: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row the ``count`` best (distance, id) entries, padding (-1 / +inf) last."""
    ids = np.asarray(ids)
    valid = ids >= 0
    key = np.where(valid, ids, np.iinfo(np.int64).max)
    d = np.where(valid, dist, np.inf)
    order = np.lexsort((key, d), axis=-1)[:, :count]
    out_ids = np.where(np.take_along_axis(valid, order, axis=1),
                       np.take_along_axis(ids, order, axis=1), -1)
    out_d = np.take_along_axis(np.asarray(dist), order, axis=1)
    out_d = np.where(out_ids >= 0, out_d, np.inf)
    q = ids.shape[0]
    if out_ids.shape[1] < count:  # fewer columns than slots: pad
        pad = count - out_ids.shape[1]
        out_ids = np.concatenate([out_ids, np.full((q, pad), -1)], axis=1)
        out_d = np.concatenate([out_d, np.full((q, pad), np.inf)], axis=1)
    return out_ids.astype(np.int64), out_d.astype(np.asarray(dist).dtype)


def pad_rows(rows: list[np.ndarray]) -> np.ndarray:
    """A list of 1-D id arrays as an int32 (q, max(1, longest)) matrix, -1 padded."""
    width = max([r.size for r in rows] + [1])
    out = np.full((len(rows), width), -1, dtype=np.int32)
    for i, r in enumerate(rows):
        out[i, :r.size] = r
    return out


def result_pool(seen_ids: list[np.ndarray],
                seen_dist: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """What the result is taken from: everything visited ("best ever", not the last beam)."""
    return np.concatenate(seen_ids, axis=1), np.concatenate(seen_dist, axis=1)


def search(index: Index, q_vectors: np.ndarray, *,
           candidate_distances: Optional[CandidateDistances] = None,
           expand: Optional[Expand] = None) -> Result:
    """Probe, then ``T`` rounds of beam expansion; the ``k`` best of everything visited.  Hooks
    default to this module's (looked up at call time)."""
    hook_distances = candidate_distances or globals()["candidate_distances"]
    hook_expand = expand or globals()["expand"]
    p = index.params
    q_vectors = np.ascontiguousarray(q_vectors, dtype=np.float32)
    q = q_vectors.shape[0]
    cand = pad_rows(probe(index, q_vectors))
    dist = np.asarray(hook_distances(index, q_vectors, cand), dtype=np.float32)
    visited = np.zeros((q, index.n), dtype=bool)
    qi, col = np.nonzero(cand >= 0)
    visited[qi, cand[qi, col]] = True
    seen_ids, seen_dist = [cand.astype(np.int64)], [dist]
    frontier = best(cand, dist, p.E)[0].astype(np.int32)
    for _ in range(p.T):
        new_ids, new_dist = hook_expand(index, q_vectors, frontier, visited)
        seen_ids.append(np.asarray(new_ids, dtype=np.int64))
        seen_dist.append(np.asarray(new_dist, dtype=np.float32))
        frontier = best(np.asarray(new_ids), np.asarray(new_dist), p.E)[0].astype(np.int32)
    all_ids, all_dist = result_pool(seen_ids, seen_dist)
    if index.quant is not None and p.rerank:
        pool = best(all_ids, all_dist, max(p.k, p.E))[0]
        ids, dists = best(pool, exact_distances(index, q_vectors, pool), p.k)
    else:
        ids, dists = best(all_ids, all_dist, p.k)
    return Result(ids, dists.astype(np.float32), visited.sum(axis=1).astype(np.int64))


def outputs(index: Index, result: Result) -> dict[str, Any]:
    """The output record (schema in :mod:`fuzzkit.targets.ann`)."""
    out = {
        "ids": result.ids.astype(np.int64),
        "distances": result.distances,
        "visited_count": result.visited_count.astype(np.int64),
        "cell_table": index.cell_table.astype(np.int64),
        "cell_coords": index.cell_coords.astype(np.int64),
        "cell_offsets": index.cell_offsets.astype(np.int64),
        "cell_members": index.cell_members.astype(np.int64),
        "graph": index.graph.astype(np.int64),
    }
    if index.quant is not None:
        out["codes"] = index.quant.codes
        out["scales"] = index.quant.scales
    return out


def run(inputs: Mapping[str, Any], *, candidate_distances: Optional[CandidateDistances] = None,
        expand: Optional[Expand] = None) -> dict[str, Any]:
    """The ``numpy`` implementation ``inputs -> outputs``; the Triton implementation calls it
    with its kernels as the two hooks."""
    index = index_from_inputs(inputs)
    result = search(index, np.asarray(inputs["queries"]),
                    candidate_distances=candidate_distances, expand=expand)
    return outputs(index, result)
