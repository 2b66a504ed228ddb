"""The ann target's oracle and input validation.

The oracle judges an implementation's outputs against the float64 reference in four layers, each
exact where the model is exact and bounded where float32 is allowed:

1. **Index structure** (the model's build is deterministic, so these are exact; tie-aware):
   the occupied cells are exactly the model's, in (table, coords) order; every cell list holds
   only members of that cell, the ``C`` nearest its centre by the model's projected distance,
   sorted by (distance, id) -- an id tied with the ``C``-th may stand in for it; every graph row
   holds the ``R`` nearest other ids by (distance, id) (ties at the ``R``-th accepted), -1
   padded when ``n - 1 < R``.  With turbo storage the codes must lie in the quant reference's
   rounding band and the scales within the quant oracle's bound.  A legitimately different build
   (a tie broken otherwise, a code inside its band) is then searched by the reference itself, so
   the search is judged on the implementation's own index.
2. **Result validity**: ids in range, unique, sorted by (distance, id) by the returned distances,
   ``-1`` / ``+inf`` padding only at the end; every returned distance within the float32 slack
   (:mod:`fuzzkit.targets.ann.bounds`) of the model's distance for that id -- the exact metric, or with
   turbo storage and no rerank the float64 asymmetric estimate.
3. **Equality with the reference**: the search is deterministic, so on every query where no
   beam cut was ambiguous (the reference's ``aux["ambiguous"]``) the visited count is equal and
   the ids are a top-k of the reference's final pool up to ties within the slack (which
   includes exact ties); the pool size must match (padding count).
4. **Recall** against float64 brute force (tie-aware): no worse than the reference's, with
   Hoeffding confidence (:func:`check_recall`); the absolute claim of :func:`recall_claim` is
   checked by the ``recall-claim`` property, which draws its own seeded queries.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

import fuzzkit.oracles
from fuzzkit.failure import Failure
from fuzzkit.oracles.recall import compare_recall
from fuzzkit.targets.ann import brute, model, reference
from fuzzkit.targets.ann.model import Params
from fuzzkit.targets.quant import checks as quant_checks

OUTPUT_KEYS = ("ids", "distances", "visited_count", "cell_table", "cell_coords", "cell_offsets",
               "cell_members", "graph")
#: Input domain: |x| <= MAX_ABS keeps float32 squared distances far from overflow; n, D bounded
#: so the reference's loops stay affordable.
MAX_ABS, MAX_VECTORS, MAX_DIM = 1e4, 4096, 1024
#: Cell coordinates must stay exactly representable (|y / w| well inside 2**52).
MAX_CELL_COORD = 2.0**40
#: Recall: the confidence of every statistical claim, the absolute claim's bound and how many
#: seeded in-distribution queries it draws (Hoeffding radius 0.19 at 64 queries).
RECALL_CONFIDENCE = 0.99
RECALL_BOUND = 0.8
RECALL_QUERIES = 64
#: In-distribution query noise, relative to min(the source's nearest-neighbour distance, w).
RECALL_NOISE = 0.05


# ---------------------------------------------------------------------------------- validation


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def validate(inputs: Mapping[str, Any]) -> Optional[str]:
    """One line saying what is wrong with a case's inputs, or None."""
    for key in model.PARAM_KEYS + ("vectors", "queries"):
        if key not in inputs:
            return f"ann inputs need key {key!r}"
    for key, low in (("L", 1), ("m", 1), ("C", 1), ("R", 1), ("E", 1), ("T", 0), ("P", 1),
                     ("k", 1)):
        if not _is_int(inputs[key]) or inputs[key] < low:
            return f"{key} must be an integer >= {low}, got {inputs[key]!r}"
    if inputs["P"] > 2 * inputs["m"] + 1:
        return f"P must be in 1..2m+1 = {2 * inputs['m'] + 1}, got {inputs['P']}"
    if not _is_int(inputs["seed"]) or not 0 <= inputs["seed"] < 2**63:
        return f"seed must be an integer in [0, 2**63), got {inputs['seed']!r}"
    w = inputs["w"]
    if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float))
                          or not np.isfinite(w) or w <= 0):
        return f"w must be a finite number > 0 or null, got {w!r}"
    if inputs["metric"] not in model.METRICS:
        return f"metric must be one of {model.METRICS}, got {inputs['metric']!r}"
    if inputs["storage"] not in model.STORAGES:
        return f"storage must be one of {model.STORAGES}, got {inputs['storage']!r}"
    if not isinstance(inputs["rerank"], bool):
        return f"rerank must be true or false, got {inputs['rerank']!r}"
    arrays = {key: inputs[key] for key in ("vectors", "queries", "inserted")
              if inputs.get(key) is not None}
    for key, array in arrays.items():
        if not isinstance(array, np.ndarray) or array.dtype != np.float32 or array.ndim != 2:
            return f"{key} must be a 2-D float32 array"
        if not np.all(np.isfinite(array)) or (array.size and np.abs(array).max() > MAX_ABS):
            return f"{key} must be finite with |values| <= {MAX_ABS:g}"
    dims = {a.shape[1] for a in arrays.values()}
    if len(dims) != 1 or not 1 <= min(dims) <= MAX_DIM:
        return f"vectors, queries and inserted need one dimension in 1..{MAX_DIM}, got {dims}"
    x = reference.all_vectors(inputs)
    if not 1 <= x.shape[0] <= MAX_VECTORS:
        return f"need 1..{MAX_VECTORS} stored vectors, got {x.shape[0]}"
    if w is not None and x.size:
        reach = float(np.abs(np.concatenate([x, inputs["queries"]])).max()) * x.shape[1] * 8.0
        if reach / w > MAX_CELL_COORD:
            return f"w = {w!r} is too small for |x| up to {reach:g}: cell coordinates overflow"
    if inputs["storage"] != "float32":
        p = Params.from_inputs(inputs)
        problem = quant_checks.validate(reference.quant_inputs(x, inputs["queries"], p))
        if problem:
            return f"turbo storage: {problem}"
    return None


# ------------------------------------------------------------------------------------ failures


def _fail(check: str, message: str, **details: Any) -> Failure:
    return Failure("mismatch", f"ann {check}: {message}", f"mismatch:ann:{check}", details)


def _check_outputs(inputs: Mapping[str, Any], actual: Mapping[str, Any]) -> Optional[Failure]:
    missing = [k for k in OUTPUT_KEYS if k not in actual]
    p = Params.from_inputs(inputs)
    if p.bits is not None:
        missing += [k for k in ("codes", "scales") if k not in actual]
    if missing:
        return _fail("missing-output", f"outputs lack {missing}", missing=missing)
    q = np.asarray(inputs["queries"]).shape[0]
    n = reference.all_vectors(inputs).shape[0]
    want = {"ids": (q, p.k), "distances": (q, p.k), "visited_count": (q,), "graph": (n, p.R)}
    for key, shape in want.items():
        if np.shape(actual[key]) != shape:
            return _fail("shape", f"{key} has shape {np.shape(actual[key])}, expected {shape}",
                         output=key, expected=list(shape), actual=list(np.shape(actual[key])))
    return None


# ----------------------------------------------------------------------------------- structure


def check_cells(p: Params, expected: Mapping[str, Any],
                actual: Mapping[str, Any]) -> Optional[Failure]:
    """Occupied cells exactly the model's; each list the ``C`` nearest its centre (tie-aware)."""
    for key in ("cell_table", "cell_coords"):
        want, got = np.asarray(expected[key]), np.asarray(actual[key])
        if want.shape != got.shape or not np.array_equal(want, got):
            rows = min(len(want), len(got))
            diff = np.flatnonzero([not np.array_equal(want[i], got[i]) for i in range(rows)])
            at = int(diff[0]) if diff.size else rows
            return _fail("cells:occupied",
                         f"{key}: the occupied cells differ from the model's from cell row {at} "
                         f"(expected {len(want)} cells, got {len(got)})",
                         row=at, expected_cells=len(want), actual_cells=len(got))
    offsets = np.asarray(actual["cell_offsets"])
    members = np.asarray(actual["cell_members"])
    cells = len(expected["cell_table"])
    if (offsets.shape != (cells + 1,) or offsets[0] != 0 or np.any(np.diff(offsets) < 0)
            or offsets[-1] != members.size):
        return _fail("cells:offsets", f"cell_offsets {offsets.tolist()[:8]}... is not a CSR over "
                     f"{cells} cells and {members.size} members")
    aux = expected["aux"]
    cell_of, centre = aux["cell_of"], aux["centre_distance"]
    n = cell_of.shape[1]
    table = np.asarray(actual["cell_table"]).astype(np.int64)
    coords = np.asarray(actual["cell_coords"])
    members = members.astype(np.int64)
    sizes = np.diff(offsets)
    home = _true_cells(cell_of, table)  # (L, n): the row of each id's cell, per table
    population = np.bincount(home.ravel(), minlength=cells)[:cells]
    # every listed id, with its cell and that cell's table
    cell = np.repeat(np.arange(cells), sizes)
    l_of = table[cell]
    in_range = (members >= 0) & (members < n)
    j = np.where(in_range, members, 0)
    by_cell = np.lexsort((members, cell))
    repeat = np.zeros(members.size, dtype=bool)
    repeat[by_cell[1:]] = ((cell[by_cell][1:] == cell[by_cell][:-1])
                           & (members[by_cell][1:] == members[by_cell][:-1]))
    bad_members = _per_cell(~in_range | repeat, cell, cells)
    stranger = in_range & (home[l_of, j] != cell)
    strangers = _per_cell(stranger, cell, cells)
    capacity = sizes != np.minimum(p.C, population)
    d = centre[l_of, j]
    same = cell[1:] == cell[:-1]
    step = same & ((d[1:] < d[:-1]) | ((d[1:] == d[:-1]) & (members[1:] <= members[:-1])))
    unordered = _per_cell(np.concatenate([[False], step]), cell, cells)
    listed_home = np.zeros(cell_of.shape[:2], dtype=bool)
    listed_home[l_of[~stranger & in_range], j[~stranger & in_range]] = True
    farthest = np.full(cells, -np.inf)
    np.maximum.at(farthest, cell, d)
    nearest_left = np.full(cells, np.inf)
    np.minimum.at(nearest_left, home[~listed_home], centre[~listed_home])
    too_far = (sizes > 0) & (nearest_left < farthest)
    failing = bad_members | strangers | capacity | unordered | too_far
    if not failing.any():
        return None
    i = int(np.argmax(failing))
    listed = members[offsets[i]:offsets[i + 1]]
    t, c = int(table[i]), coords[i]
    where = {"cell": i, "table": t, "coords": c.tolist(), "members": listed.tolist()}
    true = np.flatnonzero(home[t] == i)
    if bad_members[i]:
        return _fail("cells:members", f"cell {t}:{c.tolist()} lists ids {listed.tolist()}: "
                     "out of range or repeated", **where)
    if strangers[i]:
        return _fail("cells:members", f"cell {t}:{c.tolist()} lists "
                     f"{np.setdiff1d(listed, true).tolist()}, which fall in other cells",
                     **where)
    if capacity[i]:
        return _fail("cells:capacity", f"cell {t}:{c.tolist()} lists {listed.size} ids, "
                     f"expected min(C={p.C}, {true.size} members)", **where)
    d = centre[t, listed]
    if unordered[i]:
        return _fail("cells:order", f"cell {t}:{c.tolist()}: list {listed.tolist()} is not "
                     f"sorted by (distance to centre, id): {d.tolist()}", **where)
    left_out = np.setdiff1d(true, listed)
    k = int(left_out[np.argmin(centre[t, left_out])])
    return _fail("cells:nearest", f"cell {t}:{c.tolist()} keeps {listed.tolist()} "
                 f"(farthest {d.max()!r}) but leaves out id {k} at {centre[t, k]!r} "
                 "from the centre", left_out=k, **where)


def _true_cells(cell_of: np.ndarray, table: np.ndarray) -> np.ndarray:
    """(L, n): the row of the occupied cell each id falls in, per table.  The rows are the
    model's occupied cells in (table, coords) order (checked before), so a table's cells are
    its distinct coords in lexicographic order, starting at the table's first row."""
    tables, n, m = cell_of.shape
    home = np.zeros((tables, n), dtype=np.int64)
    for t in range(tables):
        order = np.lexsort(tuple(cell_of[t][:, k] for k in reversed(range(m))))
        ranked = cell_of[t][order]
        new = np.ones(n, dtype=bool)
        new[1:] = np.any(ranked[1:] != ranked[:-1], axis=1)
        home[t, order] = np.searchsorted(table, t) + np.cumsum(new) - 1
    return home


def _per_cell(flags: np.ndarray, cell: np.ndarray, cells: int) -> np.ndarray:
    """Whether any listed entry of each cell is flagged."""
    return np.bincount(cell[flags], minlength=cells)[:cells] > 0


def check_graph(p: Params, expected: Mapping[str, Any], graph: np.ndarray) -> Optional[Failure]:
    """Each row: the ``R`` nearest other ids by (distance, id), tie-aware, -1 padded.  Every
    row is judged at once; the first failing row is reported, with the first of its checks
    that fails (row shape, repeats, order, nearest)."""
    dist = expected["aux"]["pair_distance"]
    n = dist.shape[0]
    width = min(p.R, n - 1)
    graph = np.asarray(graph).astype(np.int64)
    if graph.shape != (n, p.R):  # pragma: no cover - defensive: _check_outputs checked it
        return _fail("graph:row", f"graph has shape {graph.shape}, expected {(n, p.R)}")
    live = graph[:, :width]
    own = np.arange(n)[:, None]
    bad_row = (np.any(graph[:, width:] != -1, axis=1)
               | np.any((live < 0) | (live >= n) | (live == own), axis=1))
    safe = np.where(bad_row[:, None], 0, live)
    ordered = np.sort(safe, axis=1)
    repeats = ~bad_row & np.any(ordered[:, 1:] == ordered[:, :-1], axis=1)
    d = np.take_along_axis(dist, safe, axis=1)
    unordered = ~bad_row & ~repeats & np.any(
        (d[:, 1:] < d[:, :-1]) | ((d[:, 1:] == d[:, :-1]) & (safe[:, 1:] <= safe[:, :-1])),
        axis=1)
    listed = np.zeros((n, n), dtype=bool)
    np.put_along_axis(listed, safe, True, axis=1)
    listed[np.arange(n), np.arange(n)] = True
    others = np.where(listed, np.inf, dist)
    nearest_other = others.min(axis=1, initial=np.inf)
    farthest = d.max(axis=1, initial=-np.inf)
    missing = (~bad_row & ~repeats & ~unordered & (width > 0)
               & (nearest_other < farthest))
    failing = bad_row | repeats | unordered | missing
    if not failing.any():
        return None
    i = int(np.argmax(failing))
    row = graph[i]
    where = {"row": i, "neighbours": row.tolist()}
    if bad_row[i]:
        return _fail("graph:row", f"graph row {i} = {row.tolist()}: expected {width} ids of "
                     f"other vectors, then -1 padding", **where)
    if repeats[i]:
        return _fail("graph:row", f"graph row {i} = {row.tolist()} repeats an id", **where)
    if unordered[i]:
        return _fail("graph:order", f"graph row {i} = {row.tolist()} is not sorted by "
                     f"(distance, id): {d[i].tolist()}", **where)
    j = int(np.argmin(others[i]))
    return _fail("graph:nearest", f"graph row {i} = {row.tolist()} (farthest "
                 f"{d[i].max()!r}) misses id {j} at distance {dist[i, j]!r}", missed=j,
                 **where)


def check_codes(inputs: Mapping[str, Any], expected: Mapping[str, Any],
                actual: Mapping[str, Any]) -> Optional[Failure]:
    """turbo codes inside the quant reference's rounding band (the quant oracle's check)."""
    aux = expected["aux"]
    failure = quant_checks._check_codes({"codes": aux["quant_codes"], "aux": aux["quant"]},
                                        actual["codes"])
    if failure is None:
        return None
    return Failure(failure.kind, "ann turbo storage: " + failure.message,
                   "mismatch:ann:" + failure.signature.split(":", 1)[1], failure.details)


def check_scales(inputs: Mapping[str, Any], expected: Mapping[str, Any],
                 actual: Mapping[str, Any]) -> Optional[Failure]:
    """float32 scales within the quant oracle's ``2D + 6`` bound of the float64 ones."""
    dim = np.asarray(inputs["queries"]).shape[1]
    want = expected["aux"]["derived_scales"]
    failure = fuzzkit.oracles.close(want, np.asarray(actual["scales"]), dtype="float32",
                            reduction_length=2 * dim + 6, magnitude=want, name="scales")
    return None if failure is None else Failure(
        failure.kind, "ann turbo storage: " + failure.message, "mismatch:ann:scales",
        failure.details)


def _same_structure(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    return all(np.array_equal(np.asarray(expected[k]), np.asarray(actual[k]))
               for k in ("cell_table", "cell_coords", "cell_offsets", "cell_members", "graph"))


# ------------------------------------------------------------------------------------- results


def check_valid(expected: Mapping[str, Any], ids: np.ndarray,
                dist: np.ndarray) -> Optional[Failure]:
    """Ids in range and unique; (distance, id) order; padding only at the end; every returned
    distance within its slack of the model's distance for that id."""
    aux = expected["aux"]
    rank, slack = aux["rank"], aux["rank_slack"]
    n = rank.shape[1]
    valid = ids >= 0
    checks = []
    bad_range = (ids < -1) | (ids >= n)
    checks.append(("results:range", bad_range, "id out of range"))
    pad_early = np.zeros_like(valid)
    pad_early[:, 1:] = valid[:, 1:] & ~valid[:, :-1]
    checks.append(("results:padding", pad_early | (valid & ~np.isfinite(dist))
                   | (~valid & (dist != np.inf)), "padding (-1 / +inf) not only at the end"))
    perm = np.argsort(ids, axis=1, kind="stable")
    ordered = np.take_along_axis(ids, perm, axis=1)
    repeat = np.zeros_like(valid)
    repeat[:, 1:] = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    duplicate = np.zeros_like(valid)
    np.put_along_axis(duplicate, perm, repeat, axis=1)
    checks.append(("results:duplicate", duplicate, "id returned twice"))
    order = np.zeros_like(valid)
    order[:, 1:] = valid[:, 1:] & ((dist[:, 1:] < dist[:, :-1])
                                   | ((dist[:, 1:] == dist[:, :-1]) & (ids[:, 1:] < ids[:, :-1])))
    checks.append(("results:order", order, "not sorted by (distance, id)"))
    safe = np.where(valid & ~bad_range, ids, 0)
    want = np.take_along_axis(rank, safe, axis=1)
    allowed = np.take_along_axis(slack, safe, axis=1)
    with np.errstate(invalid="ignore"):
        wrong = valid & ~bad_range & ~(np.abs(dist - want) <= allowed)
    checks.append(("results:distance", wrong, "returned distance is not the model's"))
    for check, mask, what in checks:
        if mask.any():
            r, c = (int(v) for v in np.argwhere(mask)[0])
            details = {"query": r, "position": c, "ids": ids[r].tolist(),
                       "distances": dist[r].tolist(), "rows_failing": int(mask.any(1).sum())}
            extra = ""
            if check == "results:distance":
                details.update(model_distance=float(want[r, c]), slack=float(allowed[r, c]))
                extra = (f"; id {int(ids[r, c])}: got {dist[r, c]!r}, model {want[r, c]!r} "
                         f"(slack {allowed[r, c]:.3g})")
            return _fail(check, f"query {r} position {c}: {what}{extra}; ids {ids[r].tolist()}",
                         **details)
    return None


def check_against_reference(expected: Mapping[str, Any], ids: np.ndarray,
                            visited_count: np.ndarray) -> Optional[Failure]:
    """On unambiguous queries: the same visited count and a tie-aware top-k of the reference's
    final pool (the visited set, or a rerank's pool)."""
    aux = expected["aux"]
    rows = np.flatnonzero(~aux["ambiguous"])
    if rows.size == 0:
        return None
    want_count = np.asarray(expected["visited_count"])[rows]
    got_count = np.asarray(visited_count)[rows]
    if not np.array_equal(want_count, got_count):
        j = int(np.flatnonzero(want_count != got_count)[0])
        return _fail("visited-count", f"query {int(rows[j])} visited {int(got_count[j])} "
                     f"vectors, the reference {int(want_count[j])}", query=int(rows[j]),
                     expected=int(want_count[j]), actual=int(got_count[j]))
    eligible = aux["eligible"][rows]
    scores = np.where(eligible, aux["rank"][rows], np.inf)
    tolerance = 2.0 * np.max(np.where(eligible, aux["rank_slack"][rows], 0.0), axis=1,
                             initial=0.0)
    failure = fuzzkit.oracles.topk(scores, ids[rows], k=ids.shape[1], largest=False,
                           tolerance=tolerance, name="results")
    if failure is None:
        return None
    query = int(rows[failure.details.get("row", 0)])
    return Failure("mismatch", f"ann results (query {query}, compared with the reference's "
                   f"pool {np.flatnonzero(eligible[failure.details.get('row', 0)]).tolist()[:24]}"
                   f"): {failure.message}",
                   "mismatch:ann:" + failure.signature.split(":", 2)[2],
                   {**failure.details, "query": query,
                    "expected_ids": np.asarray(expected["ids"])[query].tolist()})


# -------------------------------------------------------------------------------------- recall


def recall_claim(p: Params, covered: bool) -> Optional[float]:
    """The mean recall@k OctEx claims on in-distribution queries (stored vectors plus a little
    noise, :func:`fuzzkit.targets.ann.properties.recall_claim`), or None where it claims nothing.

    The claim is made where the model makes it plausible for *any* data: l2 (a near-copy of
    ``x`` has ``x`` as its nearest neighbour; under ``ip`` it need not), every stored vector
    listed in some cell (``covered``: so the query's own cell holds its source vector), at
    least one expansion round from a beam that holds it (``T >= 1``) over graph rows as long
    as the result (``R >= k``), and distances accurate enough to rank near neighbours (float32,
    turbo16, or a rerank).  ``scripts/ann_recall_calibration.py`` measures the false-alarm
    rate on the target's own strategy.
    """
    if (p.metric == "l2" and covered and p.T >= 1 and p.R >= p.k
            and (p.storage in ("float32", "turbo16") or p.rerank)):
        return RECALL_BOUND
    return None


def check_recall(inputs: Mapping[str, Any], expected: Mapping[str, Any],
                 ids: np.ndarray) -> Optional[Failure]:
    """The implementation loses no recall@k against the reference (float64 brute force,
    tie-aware up to float32 resolution, :func:`brute.recall`): ``compare_recall`` at
    RECALL_CONFIDENCE on the paired per-query recalls.  The absolute claim needs its own
    queries and lives in the ``recall-claim`` property."""
    p = Params.from_inputs(inputs)
    exact, slack = expected["aux"]["exact"], expected["aux"]["exact_slack"]
    got = brute.recall(exact, ids, p.k, slack)
    want = brute.recall(exact, np.asarray(expected["ids"]), p.k, slack)
    return compare_recall(got, want, confidence=RECALL_CONFIDENCE, name="ann-vs-reference")


# -------------------------------------------------------------------------------------- oracle


def oracle(inputs: Mapping[str, Any], expected: Mapping[str, Any],
           actual: Mapping[str, Any]) -> Optional[Failure]:
    """Compare an implementation's outputs with the reference's (see the module docstring)."""
    failure = _check_outputs(inputs, actual)
    if failure is not None:
        return failure
    p = Params.from_inputs(inputs)
    failure = check_cells(p, expected, actual) or check_graph(p, expected, actual["graph"])
    if failure is None and p.bits is not None:
        failure = check_codes(inputs, expected, actual)
    if failure is not None:
        return failure
    codes_differ = p.bits is not None and not np.array_equal(
        np.asarray(actual["codes"]), np.asarray(expected["codes"]))
    if codes_differ or not _same_structure(expected, actual):
        expected = reference.run(inputs, codes=np.asarray(actual["codes"]) if codes_differ
                                 else None, structure=actual)
    if p.bits is not None:
        failure = check_scales(inputs, expected, actual)
        if failure is not None:
            return failure
    ids = np.asarray(actual["ids"]).astype(np.int64)
    dist = np.asarray(actual["distances"]).astype(np.float64)
    return (check_valid(expected, ids, dist)
            or check_against_reference(expected, ids, np.asarray(actual["visited_count"]))
            or check_recall(inputs, expected, ids))
