"""The OctEx reference: the model read literally, one vector and one query at a time, float64.

It builds over ``vectors ++ inserted`` in one go (an insert must leave the index a build would
have made), with Python dictionaries for cells, sorted lists of ``(distance, id)`` pairs for cell
lists and graph rows, and Python sets for the visited set.  The arithmetic behind its decisions is
:mod:`fuzzkit.targets.ann.model`'s, so that an optimized build that makes the same decisions matches it
bit for bit (see that module for why).

Besides the outputs an implementation returns, :func:`run` returns ``"aux"`` for the oracle:
the visited set, the distances the search ranked by and their float32 slacks, the candidate
pool of a rerank, the quant codes' rounding band, and per query whether a cut was *ambiguous*
(:mod:`fuzzkit.targets.ann.bounds`).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from fuzzkit.targets.ann import bounds, brute, model
from fuzzkit.targets.ann.model import Params
from fuzzkit.targets.quant import reference as quant_reference

Cells = dict[tuple[int, tuple[int, ...]], list[int]]


def all_vectors(inputs: Mapping[str, Any]) -> np.ndarray:
    """The stored vectors, build-time ones first, then the inserted ones (float32)."""
    vectors = np.asarray(inputs["vectors"], dtype=np.float32)
    inserted = inputs.get("inserted")
    if inserted is None:
        return vectors
    inserted = np.asarray(inserted, dtype=np.float32).reshape(-1, vectors.shape[1])
    return np.concatenate([vectors, inserted])


# ------------------------------------------------------------------------------------ build


def cell_assignment(x: np.ndarray, p: Params) -> tuple[np.ndarray, np.ndarray]:
    """Every vector's cell coords (L, n, m) and squared distance to that cell's centre in
    projected space (L, n); with ``w = None`` the one cell (coords 0) and ``||y||^2``.  The
    model's functions work row by row, so applying them to all rows at once is applying them
    to each."""
    n = x.shape[0]
    coords = np.zeros((p.L, n, p.m), dtype=np.int64)
    key = np.zeros((p.L, n))
    for l in range(p.L):
        a, u = model.table(p.seed, l, p.m, x.shape[1])
        y = model.project(x, a)
        if p.w is None:
            key[l] = model.squared_norm(y)
        else:
            coords[l] = model.cell_coords(y, u, p.w)
            key[l] = model.squared_norm(y - model.cell_centre(coords[l], u, p.w))
    return coords, key


def build_cells(coords: np.ndarray, key: np.ndarray, p: Params) -> Cells:
    """``{(table, coords): ids}`` from :func:`cell_assignment`: each cell keeps its ``C``
    members nearest the centre, in (distance, id) order; cells in (table, coords) order."""
    cells: Cells = {}
    for l in range(p.L):
        buckets: dict[tuple[int, ...], list[tuple[float, int]]] = {}
        for i in range(coords.shape[1]):
            buckets.setdefault(tuple(coords[l, i].tolist()), []).append((float(key[l, i]), i))
        for c in sorted(buckets):
            cells[(l, c)] = [i for _, i in sorted(buckets[c])[:p.C]]
    return cells


def cells_from_csr(outputs: Mapping[str, Any]) -> Cells:
    """An implementation's cell arrays as ``{(table, coords): ids}``."""
    off = np.asarray(outputs["cell_offsets"])
    members = np.asarray(outputs["cell_members"]).tolist()
    return {(int(t), tuple(int(v) for v in c)): members[off[i]:off[i + 1]]
            for i, (t, c) in enumerate(zip(np.asarray(outputs["cell_table"]).tolist(),
                                           np.asarray(outputs["cell_coords"]).tolist()))}


def build_graph(x: np.ndarray, p: Params, pair_distance: Optional[np.ndarray] = None
                ) -> np.ndarray:
    """Row ``i``: the ``R`` nearest other ids by (distance, id), -1 padded.  ``pair_distance``
    is the (n, n) matrix of model distances (computed here when not given): each row is
    ranked by (distance, id) in full, itself excluded."""
    n = x.shape[0]
    graph = np.full((n, p.R), -1, dtype=np.int64)
    width = min(p.R, n - 1)
    if width <= 0:
        return graph
    dist = brute.distances(x, x, p.metric) if pair_distance is None else pair_distance
    ids = np.broadcast_to(np.arange(n), (n, n))
    own = ids == np.arange(n)[:, None]
    order = np.lexsort((ids, np.where(own, np.inf, dist), own), axis=-1)
    graph[:, :width] = order[:, :width]
    return graph


# ------------------------------------------------------------------------------------ query


def probes(q: np.ndarray, p: Params, dim: int) -> list[tuple[int, tuple[int, ...]]]:
    """The cells a query reads: per table its own cell and the ``P - 1`` cheapest neighbours
    (one coordinate +-1, cost = distance to that face, ties by (j, down before up))."""
    cells = []
    for l in range(p.L):
        if p.w is None:
            cells.append((l, (0,) * p.m))
            continue
        a, u = model.table(p.seed, l, p.m, dim)
        y = model.project(q, a)
        c = model.cell_coords(y, u, p.w)
        f = model.face_fraction(y, u, p.w, c)
        own = tuple(int(t) for t in c)
        cells.append((l, own))
        options = sorted([(float(f[j]), j, 0) for j in range(p.m)]
                         + [(float(1.0 - f[j]), j, 1) for j in range(p.m)])
        for _, j, up in options[:p.P - 1]:
            moved = list(own)
            moved[j] += 1 if up else -1
            cells.append((l, tuple(moved)))
    return cells


def ambiguous_cut(ranked: list[int], count: int, dist: np.ndarray, slack: np.ndarray,
                  x: np.ndarray) -> bool:
    """Could a float32 implementation choose a different ``count`` best from ``ranked`` (sorted
    by (dist, id))?  Yes when an id inside and one outside are within their slacks, unless the
    two vectors are identical (then every implementation computes the same distance and
    falls back to the id, like this reference)."""
    inside, outside = ranked[:count], ranked[count:]
    if not inside or not outside:
        return False
    worst_in = max(dist[i] + slack[i] for i in inside)
    for j in outside:
        if dist[j] - slack[j] <= worst_in:
            for i in inside:
                if dist[i] + slack[i] >= dist[j] - slack[j] and not np.array_equal(x[i], x[j]):
                    return True
    return False


def search_one(q: np.ndarray, x: np.ndarray, p: Params, cells: Cells, graph: np.ndarray,
               dist: np.ndarray, slack: np.ndarray) -> tuple[list[int], set[int], bool]:
    """One query: probe, ``T`` rounds of beam expansion.  ``dist`` is what the search ranks by
    (exact distance, or the turbo estimate).  Returns (everything visited in (dist, id) order,
    the visited set, whether a beam cut was ambiguous)."""
    def ranked(ids: Any) -> list[int]:
        return sorted(ids, key=lambda j: (dist[j], j))

    candidates: set[int] = set()
    for cell in probes(q, p, x.shape[1]):
        candidates.update(cells.get(cell, []))
    visited = set(candidates)
    order = ranked(candidates)
    ambiguous = ambiguous_cut(order, p.E, dist, slack, x)
    frontier = order[:p.E]
    for _ in range(p.T):
        new: list[int] = []
        for f in frontier:
            for j in graph[f]:
                if j >= 0 and j not in visited and j not in new:
                    new.append(int(j))
        visited.update(new)
        order = ranked(new)
        ambiguous |= ambiguous_cut(order, p.E, dist, slack, x)
        frontier = order[:p.E]
    return ranked(visited), visited, ambiguous


# ------------------------------------------------------------------------------------- turbo


def quant_inputs(x: np.ndarray, q: np.ndarray, p: Params) -> dict[str, Any]:
    """The quant target's inputs for this index's storage."""
    return {"bits": p.bits, "codebook": model.CODEBOOK, "rotation_seed": p.seed,
            "precision": "float32", "vectors": x, "queries": q}


def estimates(x: np.ndarray, q: np.ndarray, p: Params, derived: Mapping[str, Any]) -> np.ndarray:
    """(q, n) float64 turbo distances from the asymmetric score ``s``: ``-s`` (ip) or
    ``||q||^2 + ||v||^2 - 2 s`` (l2)."""
    s = np.asarray(derived["scores"], dtype=np.float64)
    if p.metric == "ip":
        return -s
    return (model.squared_norm(q.astype(np.float64))[:, None]
            + model.squared_norm(x.astype(np.float64))[None, :] - 2.0 * s)


# --------------------------------------------------------------------------------------- run


def run(inputs: Mapping[str, Any], *, codes: Optional[np.ndarray] = None,
        structure: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The reference outputs plus ``"aux"``.

    The oracle may search another index than the one built here: ``codes`` replaces the quant
    reference's codes (an implementation's, different only inside their rounding band) and
    ``structure`` the cells and graph (an implementation's, different only in how exact ties
    were broken), so that a legitimate difference in the build is not blamed on the search.
    """
    p = Params.from_inputs(inputs)
    x = all_vectors(inputs)
    queries = np.asarray(inputs["queries"], dtype=np.float32)
    n, dim = x.shape
    assignment = cell_assignment(x, p)
    cells = build_cells(*assignment, p) if structure is None else cells_from_csr(structure)
    pair_distance = brute.distances(x, x, p.metric)
    graph = (build_graph(x, p, pair_distance) if structure is None
             else np.asarray(structure["graph"]))

    exact = brute.distances(x, queries, p.metric)
    exact_slack = bounds.exact_slack(x, queries, p.metric)
    aux: dict[str, Any] = {"exact": exact, "exact_slack": exact_slack,
                           "cell_of": assignment[0], "centre_distance": assignment[1],
                           "pair_distance": pair_distance}
    out: dict[str, Any] = {}
    rank, rank_slack = exact, exact_slack
    if p.bits is not None:
        q_in = quant_inputs(x, queries, p)
        encoded = quant_reference.run(q_in)
        codes = encoded["codes"] if codes is None else np.asarray(codes)
        derived = quant_reference.scores_from_codes(q_in, codes)
        rank = estimates(x, queries, p, derived)
        rank_slack = bounds.estimate_slack(x, queries, derived, p.metric)
        out.update(codes=codes.astype(quant_reference.codes_dtype(p.bits)),
                   scales=np.asarray(derived["scales"]))
        aux.update(estimate=rank, estimate_slack=rank_slack, quant=encoded["aux"],
                   quant_codes=encoded["codes"], derived_scales=np.asarray(derived["scales"]))

    k = p.k
    ids = np.full((queries.shape[0], k), -1, dtype=np.int64)
    dists = np.full((queries.shape[0], k), np.inf)
    visited_count = np.zeros(queries.shape[0], dtype=np.int64)
    visited_mask = np.zeros((queries.shape[0], n), dtype=bool)
    eligible = np.zeros((queries.shape[0], n), dtype=bool)  # what the final top-k is taken from
    ambiguous = np.zeros(queries.shape[0], dtype=bool)
    for i in range(queries.shape[0]):
        order, visited, amb = search_one(queries[i], x, p, cells, graph, rank[i], rank_slack[i])
        if p.bits is not None and p.rerank:
            pool_size = max(k, p.E)
            amb |= ambiguous_cut(order, pool_size, rank[i], rank_slack[i], x)
            pool = order[:pool_size]
            best = sorted(pool, key=lambda j: (exact[i, j], j))[:k]
            eligible[i, pool] = True
            returned = exact[i]
        else:
            best = order[:k]
            eligible[i, list(visited)] = True
            returned = rank[i]
        ids[i, :len(best)] = best
        dists[i, :len(best)] = [returned[j] for j in best]
        visited_count[i] = len(visited)
        visited_mask[i, list(visited)] = True
        ambiguous[i] = amb

    keys = list(cells)
    sizes = [len(cells[key]) for key in keys]
    out.update(
        ids=ids, distances=dists, visited_count=visited_count,
        cell_table=np.array([t for t, _ in keys], dtype=np.int64),
        cell_coords=np.array([c for _, c in keys], dtype=np.int64).reshape(len(keys), p.m),
        cell_offsets=np.array([0] + list(np.cumsum(sizes)), dtype=np.int64),
        cell_members=np.array([j for key in keys for j in cells[key]], dtype=np.int64),
        graph=graph,
    )
    final_uses_exact = p.bits is None or p.rerank
    aux.update(visited=visited_mask, eligible=eligible, ambiguous=ambiguous,
               rank=exact if final_uses_exact else rank,
               rank_slack=exact_slack if final_uses_exact else rank_slack)
    out["aux"] = aux
    return out


__all__ = ["all_vectors", "build_cells", "build_graph", "cell_assignment", "probes", "run",
           "search_one"]
