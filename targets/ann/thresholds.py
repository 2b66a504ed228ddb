"""Where the ``ann`` implementations change path, as :class:`fuzzkit.reach.Threshold` data, and
how to find each named size in a case (:data:`SIZES`, ``Target.sizes``).

Two kinds of edges.  *Fixed* ones are constants of the code: the graph build's row block
(``index.GRAPH_BLOCK``) and the Triton kernels' tiles (:mod:`fuzzkit.targets.ann.tiles`, which differ
under the interpreter and on a GPU, so :func:`kernel_thresholds` reads the mode).  *Relative*
ones are where a parameter meets the data: a graph row of degree ``R`` over ``n - 1`` other ids
(``-1`` padding below, a cut above), a cell of capacity ``C`` over its population (free slots
below, evictions above), a frontier of ``E`` over a query's candidates, ``k`` over ``n``, the
rerank pool ``max(k, E)``, ``P - 1`` probes over ``2m`` adjacent cells.  A threshold is one fixed
number, so each relative edge is declared on a *fill* size that puts it at 1:
``fill = have - capacity + 1`` -- 0 is one slot short (padding), 1 exactly full, 2 one over (a
cut, where ties at the cut matter).  The strategy draws the fill with ``reach.size`` and derives
the parameter from it (``R = n - fill``, ``C = population - fill + 1``, ...).

``index.py`` runs under both implementations (the Triton one replaces only its two query-time
hooks), so its thresholds are the target's; the kernels' belong to the ``triton``
implementation.  ``ivf.py`` (``BLOCK = 4096`` rows) is the benchmark's baseline, not an
implementation under test: nothing is declared for it.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Hashable, Iterable, Mapping, Optional

import numpy as np

from fuzzkit.reach import Size, Threshold
from fuzzkit.targets.ann import index, model, reference, runs, tiles
from fuzzkit.targets.ann.model import Params

#: Largest n (and inserted count) worth drawing past the graph block: n = 560 builds, searches
#: and judges in about a second on one core (the float64 kNN graph and its check are O(n^2)).
GRAPH_CAP = 560
#: Fill sizes are drawn up to this far past "one over": a cell or row well past its capacity.
FILL_CAP = 24
#: Largest query batch, dimension and E * R worth drawing for the kernels (one
#: case about a second under the interpreter; a GPU run crosses its own, larger tiles below).
QUERY_CAP, D_CAP, WIDTH_CAP = 40, 160, 600

INDEX_THRESHOLDS: tuple[Threshold, ...] = (
    Threshold("n", index.GRAPH_BLOCK,
              "knn_graph: GRAPH_BLOCK rows of the distance matrix per block; n = GRAPH_BLOCK "
              "+ 1 stored vectors take a second block (self exclusion, row offsets)",
              cap=GRAPH_CAP),
    Threshold("inserted", index.GRAPH_BLOCK,
              "insert: the new rows' kNN rows in GRAPH_BLOCK blocks; GRAPH_BLOCK + 1 inserted "
              "vectors take a second block", cap=GRAPH_CAP),
    Threshold("graph_fill", 1,
              "graph row of degree R over n - 1 other ids, fill = n - R: 0 one -1 pad, 1 exactly "
              "full, 2 one id cut (at build over the first vectors and after an insert, "
              "merge_rows)", cap=FILL_CAP),
    Threshold("cell_fill", 1,
              "cell capacity C, fill = population - C + 1 per cell: 0 one free slot, 1 exactly "
              "full, 2 one member evicted (at build and after an insert)", cap=FILL_CAP),
    Threshold("beam_fill", 1,
              "frontier of E, fill = candidates - E + 1 per query: 0 the frontier is -1 padded "
              "(best() pads its columns), 2 one candidate cut", cap=FILL_CAP),
    Threshold("k_fill", 1,
              "result of k, fill = n - k + 1: 0 means k > n, -1 / +inf padded results",
              cap=FILL_CAP),
    Threshold("rerank_pool", 1,
              "turbo rerank pool max(k, E), fill = k - E + 1: 0 the pool is E > k, 2 it is k",
              cap=FILL_CAP),
    Threshold("probe_fill", 1,
              "multi-probe, fill = 2m - P + 2: 1 every adjacent cell probed (no cut), 2 one "
              "face left out", cap=FILL_CAP),
)


def kernel_thresholds(t: Optional[tiles.Tiles] = None) -> tuple[Threshold, ...]:
    """The Triton kernels' tile edges as launched in the current mode (interpreter or GPU; or
    for the given tiles): every size at which a launch gains a second program or step, or a
    tile grows."""
    t = t or tiles.current()
    mode = "interpreter" if t is tiles.INTERPRETED else "GPU"
    out = [
        Threshold("q", t.dist_q,
                  f"distance kernel ({mode}): BLOCK_Q = {t.dist_q} query rows per program; one "
                  "more query takes a second row of programs", cap=QUERY_CAP),
        Threshold("M", t.dist_m,
                  f"distance kernel ({mode}): BLOCK_M = {t.dist_m} columns per program (candidate "
                  "lists, and E * R expansion outputs); one more takes a second program",
                  cap=max(4 * t.dist_m, 160)),
        Threshold("D", t.dist_d,
                  f"distance kernel ({mode}): BLOCK_D = {t.dist_d} dims per loop step; one more "
                  "dim takes a second, ragged step", cap=min(D_CAP, 4 * t.dist_d)),
        Threshold("width", t.chunk,
                  f"expansion dedup ({mode}): chunks of BLOCK_J = {t.chunk} earlier positions; "
                  "E * R one wider takes a second chunk", cap=max(4 * t.chunk, 128)),
        Threshold("q", t.rows(2 * t.chunk),
                  f"expansion ({mode}): {t.rows(2 * t.chunk)} rows of BLOCK_P = "
                  f"{tiles.block_p(2 * t.chunk)} per program (E * R in {t.chunk + 1}.."
                  f"{2 * t.chunk}); one more query takes a second program", cap=QUERY_CAP),
    ]
    wide = t.expand_lanes
    if tiles.expand_config(1, wide + 1, t)[2] < tiles.expand_config(1, wide, t)[2]:
        out.append(Threshold("width", wide,
                             f"expansion ({mode}): past E * R = {wide} a row exceeds the "
                             f"{wide}-lane budget: one row per program, and the comparison "
                             f"chunk shrinks below {t.chunk} ({t.expand_compares} // BLOCK_P)",
                             cap=min(WIDTH_CAP, 2 * wide + 12)))
    return tuple(out)


# ------------------------------------------------------------------------------------ measuring


def _n(inputs: Mapping[str, Any]) -> int:
    return int(reference.all_vectors(inputs).shape[0])


def _n_inserted(inputs: Mapping[str, Any]) -> int:
    inserted = inputs.get("inserted")
    return 0 if inserted is None else int(np.asarray(inserted).shape[0])


def cell_populations(x: np.ndarray, p: Params) -> list[int]:
    """The population of every occupied cell of every table over the vectors ``x`` (before the
    cap): the model's projection and floor, as the build computes them.  A pure function of
    the contents: the strategy and the reach counter ask it for the same case."""
    key = ("populations", runs.content_key(np.asarray(x)), p.L, p.m, p.w, p.seed)
    return list(_remembered(key, lambda: _populations(np.asarray(x), p)))


def _populations(x: np.ndarray, p: Params) -> list[int]:
    out: list[int] = []
    for table in range(p.L):
        if p.w is None:
            out.append(int(x.shape[0]))
            continue
        a, u = model.table(p.seed, table, p.m, x.shape[1])
        coords = model.cell_coords(model.project(x, a), u, p.w)
        order = np.lexsort(coords.T[::-1])
        ranked = coords[order]
        starts = np.flatnonzero(np.r_[True, np.any(ranked[1:] != ranked[:-1], axis=1)])
        out.extend(np.diff(np.r_[starts, ranked.shape[0]]).tolist())
    return out


def candidate_counts(x: np.ndarray, queries: np.ndarray, p: Params) -> list[int]:
    """Per query, how many candidates its probed cells hold (the search's first distance launch
    is as wide as the largest), with the index a build over ``x`` makes."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    queries = np.asarray(queries, dtype=np.float32)
    key = ("candidates", runs.content_key(x), runs.content_key(queries), p.L, p.m, p.w, p.seed,
           p.C, p.P)
    return list(_remembered(key, lambda: _candidate_counts(x, queries, p)))


def _candidate_counts(x: np.ndarray, queries: np.ndarray, p: Params) -> list[int]:
    projections, offsets = model.tables(p, x.shape[1])
    cells = index.build_cells(x, projections, offsets, p)
    idx = index.Index(params=p, base=x, graph=np.zeros((x.shape[0], 0), np.int32),
                      projections=projections, offsets=offsets,
                      cell_keys=index._cell_keys(cells["cell_table"], cells["cell_coords"]),
                      **cells)
    return [int(c.size) for c in index.probe(idx, queries)]


_MEMORY: collections.OrderedDict[Hashable, list[int]] = collections.OrderedDict()


def _remembered(key: Hashable, compute: Callable[[], list[int]]) -> list[int]:
    """``compute()``, kept for the last few keys."""
    if key not in _MEMORY:
        _MEMORY[key] = compute()
        if len(_MEMORY) > 16:
            _MEMORY.popitem(last=False)
    return _MEMORY[key]


#: ``[inputs, counts]`` of the last case measured: "M" and "beam_fill" both need its candidate
#: counts, and building the cells is the costly part of measuring a case (every case of a run).
_last_counts: list[Any] = [None, []]


def _case_candidate_counts(inputs: Mapping[str, Any]) -> list[int]:
    if _last_counts[0] is not inputs:
        counts = candidate_counts(reference.all_vectors(inputs), inputs["queries"],
                                  Params.from_inputs(inputs))
        _last_counts[:] = [inputs, counts]
    return list(_last_counts[1])


def _candidate_widths(inputs: Mapping[str, Any]) -> Iterable[int]:
    p = Params.from_inputs(inputs)
    counts = _case_candidate_counts(inputs)
    yield max(counts + [1])  # pad_rows: the launch is as wide as the longest list, at least 1
    if p.T >= 1:
        yield p.E * p.R


def _width(inputs: Mapping[str, Any]) -> Iterable[int]:
    if int(inputs["T"]) >= 1:
        yield int(inputs["E"]) * int(inputs["R"])


def _graph_fill(inputs: Mapping[str, Any]) -> Iterable[int]:
    n, r = _n(inputs), int(inputs["R"])
    yield n - r
    if _n_inserted(inputs):
        yield int(np.asarray(inputs["vectors"]).shape[0]) - r


def _cell_fill(inputs: Mapping[str, Any]) -> Iterable[int]:
    p = Params.from_inputs(inputs)
    x = reference.all_vectors(inputs)
    sets = [x]
    if _n_inserted(inputs):
        sets.append(np.asarray(inputs["vectors"], dtype=np.float32))
    for part in sets:
        for population in set(cell_populations(part, p)):
            yield population - p.C + 1


def _beam_fill(inputs: Mapping[str, Any]) -> Iterable[int]:
    p = Params.from_inputs(inputs)
    for count in set(_case_candidate_counts(inputs)):
        yield count - p.E + 1


def _rerank_pool(inputs: Mapping[str, Any]) -> Iterable[int]:
    if inputs["storage"] != "float32" and inputs["rerank"]:
        yield int(inputs["k"]) - int(inputs["E"]) + 1


def _probe_fill(inputs: Mapping[str, Any]) -> Iterable[int]:
    if inputs["w"] is not None:
        yield 2 * int(inputs["m"]) - int(inputs["P"]) + 2


SIZES: dict[str, Size] = {
    "n": Size(lambda i: [_n(i)], lo=1),
    "inserted": Size(lambda i: [_n_inserted(i)], lo=0),
    "q": Size(lambda i: [int(np.asarray(i["queries"]).shape[0])], lo=1),
    "D": Size(lambda i: [int(np.asarray(i["queries"]).shape[1])], lo=1),
    "M": Size(_candidate_widths, lo=1),
    "width": Size(_width, lo=1),
    "graph_fill": Size(_graph_fill, lo=0),
    "cell_fill": Size(_cell_fill, lo=0),
    "beam_fill": Size(_beam_fill, lo=0),
    "k_fill": Size(lambda i: [_n(i) - int(i["k"]) + 1], lo=0),
    "rerank_pool": Size(_rerank_pool, lo=0),
    "probe_fill": Size(_probe_fill, lo=1),
}


