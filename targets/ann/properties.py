"""Metamorphic relations of OctEx: what must hold between runs of *one* implementation.

Each relation reruns the implementation on a transformed case and compares the runs exactly
where the model makes them exact.  "Recall" here is tie-aware recall@k against float64 brute
force (:mod:`fuzzkit.targets.ann.brute`).

Why the candidate-set relations run with ``T = 0`` and ``k = n``: with ``T = 0`` the visited set
*is* the candidate set, and with ``k = n`` (and a rerank pool of ``max(k, E) = n``) the result
lists all of it, so nesting of candidate sets can be checked as nesting of id sets -- no
sampling, no tolerance.  With ``T > 0`` a bigger candidate set changes the beam, and nothing
nests.

Why recall is only compared with float32 storage and no rerank: there the result is the ``k``
best of the visited set by (a float32 rounding of) the exact distance, so a superset can only
improve it; turbo ranks by an estimate, so a newly visited vector with a good estimate but a bad
exact distance may push a true neighbour out, and a rerank pool has the same problem.  Even with
float32 a drop is possible when two distances lie within their float32 slack: such a drop is
excused when the id that pushed a lost hit out is within the slack of it.

Runs go through :func:`fuzzkit.targets.ann.runs.run`: a variant several relations share (the case
itself, or its ``T = 0, k = n`` form) runs once per case; ``deterministic`` compares that run
with a fresh one.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import numpy as np

import fuzzkit.oracles
from fuzzkit.failure import Failure
from fuzzkit.target import Property
from fuzzkit.oracles.topk import topk
from fuzzkit.oracles.recall import recall
from fuzzkit.targets.ann import bounds, brute, checks, reference, runs
from fuzzkit.targets.ann.model import Params

Impl = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def _invariant(name: str, message: str, **details: Any) -> Failure:
    return Failure("invariant", f"{name}: {message}", f"invariant:ann:{name}", details)


def _ids(out: Mapping[str, Any]) -> np.ndarray:
    return np.asarray(out["ids"]).astype(np.int64)


def _id_sets(out: Mapping[str, Any]) -> list[set[int]]:
    return [set(row[row >= 0].tolist()) for row in _ids(out)]


def _all_candidates(inputs: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """``T = 0`` and ``k = n``: the result is the whole candidate set."""
    n = reference.all_vectors(inputs).shape[0]
    return {**inputs, **changes, "T": 0, "k": n}


def _recall_drop(inputs: Mapping[str, Any], small: Mapping[str, Any], large: Mapping[str, Any],
                 k: int) -> Optional[tuple[int, float, float]]:
    """The first query whose recall@k falls from ``small`` to ``large`` (both results listing
    their whole visited set, best first) beyond what float32 rounding explains, or None."""
    x = reference.all_vectors(inputs)
    q = np.asarray(inputs["queries"], dtype=np.float32)
    metric = str(inputs["metric"])
    exact = brute.distances(x, q, metric)
    slack = bounds.exact_slack(x, q, metric)
    top_small, top_large = _ids(small)[:, :k], _ids(large)[:, :k]
    before = brute.recall(exact, top_small, k)
    after = brute.recall(exact, top_large, k)
    for i in np.flatnonzero(after < before).tolist():
        lost = set(top_small[i][top_small[i] >= 0].tolist()) - set(top_large[i].tolist())
        gained = set(top_large[i][top_large[i] >= 0].tolist()) - set(top_small[i].tolist())
        explained = any(abs(exact[i, a] - exact[i, b]) <= slack[i, a] + slack[i, b]
                        for a in lost for b in gained)
        if not explained:
            return i, float(before[i]), float(after[i])
    return None


def _nesting(name: str, inputs: Mapping[str, Any], small_changes: Mapping[str, Any],
             large_changes: Mapping[str, Any], impl: Impl) -> Optional[Failure]:
    """Candidate sets of ``small`` within those of ``large`` (exact), and with float32 storage
    the recall@k at ``T = 0`` not lower per query."""
    small = runs.run(impl, _all_candidates(inputs, **small_changes))
    large = runs.run(impl, _all_candidates(inputs, **large_changes))
    for i, (a, b) in enumerate(zip(_id_sets(small), _id_sets(large))):
        if not a <= b:
            return _invariant(name, f"query {i}: candidates {sorted(a - b)} of {small_changes} "
                              f"are missing with {large_changes}", query=i,
                              missing=sorted(a - b), small=dict(small_changes),
                              large=dict(large_changes))
    if inputs["storage"] == "float32":
        drop = _recall_drop(inputs, small, large, int(inputs["k"]))
        if drop is not None:
            i, before, after = drop
            return _invariant(name, f"query {i}: recall@k fell from {before:.3f} to {after:.3f} "
                              f"going from {small_changes} to {large_changes} at T = 0",
                              query=i, before=before, after=after)
    return None


# ----------------------------------------------------------------------------------- relations


def t_monotone(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """One more round (``T + 1``) visits a superset: visited count not lower, each rank's
    returned distance not larger (the first ``T`` rounds are the same computation), and with
    float32 storage recall@k not lower per query.  Rank-wise distances are not compared with a
    rerank (its pool is cut by the estimate)."""
    base = runs.run(impl, inputs)
    more = runs.run(impl, {**inputs, "T": int(inputs["T"]) + 1})
    v0, v1 = np.asarray(base["visited_count"]), np.asarray(more["visited_count"])
    if np.any(v1 < v0):
        i = int(np.flatnonzero(v1 < v0)[0])
        return _invariant("t-monotone", f"query {i} visited {int(v0[i])} vectors with T = "
                          f"{inputs['T']} but {int(v1[i])} with one more round", query=i)
    rerank = bool(inputs["rerank"]) and inputs["storage"] != "float32"
    if not rerank:
        d0 = np.asarray(base["distances"], dtype=np.float64)
        d1 = np.asarray(more["distances"], dtype=np.float64)
        worse = d1 > d0
        if worse.any():
            i, r = (int(v) for v in np.argwhere(worse)[0])
            return _invariant("t-monotone", f"query {i}: the rank-{r} distance grew from "
                              f"{d0[i, r]!r} to {d1[i, r]!r} with one more round", query=i,
                              rank=r)
    if inputs["storage"] == "float32":
        drop = _recall_drop(inputs, base, more, int(inputs["k"]))
        if drop is not None:
            i, before, after = drop
            return _invariant("t-monotone", f"query {i}: recall@k fell from {before:.3f} to "
                              f"{after:.3f} with one more round", query=i)
    return None


def l_prefix(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """The first L tables of L + 1 are the same tables: candidates nest."""
    L = int(inputs["L"])
    return _nesting("l-prefix", inputs, {"L": L}, {"L": L + 1}, impl)


def c_nesting(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """A cell's list under capacity C is a prefix of its list under 2C: candidates nest."""
    C = int(inputs["C"])
    return _nesting("c-nesting", inputs, {"C": C}, {"C": 2 * C}, impl)


def p_nesting(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """The first P probes are a prefix of the first P + 1: candidates nest."""
    P, m = int(inputs["P"]), int(inputs["m"])
    small, large = (P, P + 1) if P < 2 * m + 1 else (P - 1, P)
    if small < 1:
        return None
    return _nesting("p-nesting", inputs, {"P": small}, {"P": large}, impl)


def all_covering(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """One cell holding everything (``w = null``, ``C >= n``) makes every vector a candidate:
    the result is brute force's top-k (tie-aware within the float32 slack) with exact distances.
    turbo storage runs with a rerank over every vector (``E = n``), which makes it exact too,
    and with ``T = 0``: every vector is visited by the probe already, so expansion rounds add
    nothing -- but with ``E = n`` each would gather and deduplicate ``n * R`` positions per
    query, seconds per round for the Triton kernel under the interpreter at a few hundred
    vectors."""
    x = reference.all_vectors(inputs)
    n = x.shape[0]
    changes: dict[str, Any] = {"w": None, "C": n}
    if inputs["storage"] != "float32":
        changes.update(rerank=True, E=n, T=0)
    out = runs.run(impl, {**inputs, **changes})
    q = np.asarray(inputs["queries"], dtype=np.float32)
    metric = str(inputs["metric"])
    exact = brute.distances(x, q, metric)
    slack = bounds.exact_slack(x, q, metric)
    failure = topk(exact, _ids(out), k=int(inputs["k"]), largest=False,
                   tolerance=2.0 * slack.max(axis=1, initial=0.0), name="all-covering",
                   actual_scores=np.asarray(out["distances"], dtype=np.float64),
                   score_tolerance=float(slack.max(initial=0.0)))
    if failure is None:
        return None
    return _invariant("all-covering", "one cell holding every vector is not brute force: "
                      + failure.message, **failure.details)


def batch_invariant(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """Splitting the query batch in two changes no query's ids, distances or visited count,
    bit for bit (a query's search depends on nothing but that query)."""
    q = np.asarray(inputs["queries"])
    if q.shape[0] < 2:
        return None
    cut = q.shape[0] // 2
    whole = runs.run(impl, inputs)
    parts = [runs.run(impl, {**inputs, "queries": part}) for part in (q[:cut], q[cut:])]
    for key in ("ids", "distances", "visited_count"):
        joined = np.concatenate([np.asarray(p[key]) for p in parts])
        if not np.array_equal(joined, np.asarray(whole[key])):
            rows = np.flatnonzero(np.any((joined != np.asarray(whole[key])).reshape(
                q.shape[0], -1), axis=1))
            return _invariant("batch-invariant", f"{key} of query {int(rows[0])} changes when "
                              f"the batch is split at {cut}", output=key, query=int(rows[0]))
    return None


def _exact_ties(inputs: Mapping[str, Any]) -> Optional[str]:
    """Why a relabelling may legitimately change the result, or None: duplicate vectors, or
    exact ties among the float64 model values the build breaks by id (graph distances,
    centre distances within a cell)."""
    x = reference.all_vectors(inputs)
    if np.unique(x, axis=0).shape[0] < x.shape[0]:
        return "duplicate vectors"
    p = Params.from_inputs(inputs)
    pairs = np.array(brute.distances(x, x, p.metric))
    np.fill_diagonal(pairs, np.nan)  # itself: sorts last, equals nothing
    rows = np.sort(pairs, axis=1)
    tied = np.any(rows[:, 1:] == rows[:, :-1], axis=1)
    if tied.any():
        return f"tied graph distances in row {int(np.argmax(tied))}"
    coords, key = reference.cell_assignment(x, p)
    for l in range(p.L):
        order = np.lexsort((key[l],) + tuple(coords[l][:, j] for j in range(p.m)))
        same_cell = np.all(coords[l][order][1:] == coords[l][order][:-1], axis=1)
        if np.any(same_cell & (key[l][order][1:] == key[l][order][:-1])):
            return f"tied centre distances in table {l}"
    return None


def id_permutation(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """Permuting the stored vectors (build-time and inserted ones each among themselves)
    relabels the result: ids map through the permutation, distances and visited counts stay.

    The model breaks exact ties by id, so the relation holds only where no decision meets an
    exact tie; it is skipped on inputs with duplicate vectors or tied float64 graph or centre
    distances (:func:`_exact_ties`), and it runs with ``k = n`` and no rerank so that every
    visited id comes back with the distance the search ranked it by: if two of those are
    exactly equal (float32 can tie where float64 does not), a beam cut may have met the tie,
    and the relation is skipped too.
    """
    if _exact_ties(inputs):
        return None
    n1 = np.asarray(inputs["vectors"]).shape[0]
    n = reference.all_vectors(inputs).shape[0]
    rng = np.random.default_rng([int(inputs["seed"]) % 2**32, n])
    perm = np.r_[rng.permutation(n1), n1 + rng.permutation(n - n1)]  # new row r = old perm[r]
    old_to_new = np.empty(n, dtype=np.int64)
    old_to_new[perm] = np.arange(n)
    inserted = inputs.get("inserted")
    changed = {**inputs, "k": n, "rerank": False,
               "vectors": np.asarray(inputs["vectors"])[perm[:n1]]}
    if inserted is not None:
        changed["inserted"] = np.asarray(inserted)[perm[n1:] - n1]
    base = runs.run(impl, {**inputs, "k": n, "rerank": False})
    moved = runs.run(impl, changed)
    for out in (base, moved):
        d = np.asarray(out["distances"])
        if np.any((d[:, 1:] == d[:, :-1]) & np.isfinite(d[:, 1:])):
            return None
    ids = _ids(base)
    mapped = np.where(ids >= 0, old_to_new[np.maximum(ids, 0)], -1)
    for key, want, got in (("ids", mapped, _ids(moved)),
                           ("distances", np.asarray(base["distances"]),
                            np.asarray(moved["distances"])),
                           ("visited_count", np.asarray(base["visited_count"]),
                            np.asarray(moved["visited_count"]))):
        if not np.array_equal(want, got):
            i = int(np.flatnonzero(np.any((want != got).reshape(want.shape[0], -1), axis=1))[0])
            return _invariant("id-permutation", f"query {i}: {key} after permuting the stored "
                              f"vectors is not the relabelled {key}", output=key, query=i,
                              permutation=perm.tolist())
    return None


def insert_equals_build(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """Inserting vectors after the build gives the index (and results) of building over all of
    them at once."""
    inserted = inputs.get("inserted")
    if inserted is None or np.asarray(inserted).shape[0] == 0:
        return None
    built = runs.run(impl, {**inputs, "vectors": reference.all_vectors(inputs),
                  "inserted": np.zeros((0, np.asarray(inserted).shape[1]), np.float32)})
    grown = runs.run(impl, inputs)
    for key in ("graph", "cell_table", "cell_coords", "cell_offsets", "cell_members", "ids",
                "distances", "visited_count"):
        a, b = np.asarray(built[key]), np.asarray(grown[key])
        if a.shape != b.shape or not np.array_equal(a, b):
            return _invariant("insert-equals-build", f"{key} after inserting "
                              f"{np.asarray(inserted).shape[0]} vectors differs from a build "
                              "over all of them", output=key)
    return None


def in_distribution_queries(x: np.ndarray, count: int, seed: int, noise: float,
                            w: Optional[float]) -> np.ndarray:
    """``count`` i.i.d. queries: a uniformly drawn stored vector plus Gaussian noise of norm
    about ``noise`` times the smaller of its distance to the nearest *different* stored vector
    and the cell width (a near-copy stays a near-copy, and stays in its source's cell most of
    the time).  Seeded, so the recall verdict is a function of the case."""
    rng = np.random.default_rng([seed % 2**63, 0xA11])
    pairs = np.sqrt(np.maximum(brute.distances(x, x, "l2"), 0.0))
    pairs[pairs == 0] = np.inf
    nearest = pairs.min(axis=1)
    nearest[~np.isfinite(nearest)] = 0.0
    if w is not None:
        nearest = np.minimum(nearest, w)
    source = rng.integers(0, x.shape[0], count)
    jitter = rng.standard_normal((count, x.shape[1])) / np.sqrt(x.shape[1])
    return (x[source] + noise * nearest[source, None] * jitter).astype(np.float32)


def recall_claim(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """Where :func:`fuzzkit.targets.ann.checks.recall_claim` states a bound, the mean recall@k on
    ``RECALL_QUERIES`` seeded in-distribution queries reaches it with ``RECALL_CONFIDENCE``
    (Hoeffding: the queries are i.i.d. draws, so the verdict fails a correct index with
    probability at most 1 %, and -- seeded -- never flakes).  Recall is tie-aware up to float32
    resolution: on subnormal data every squared distance underflows to 0, and no float32 search
    can rank the neighbours -- that is arithmetic, not a recall the index lost."""
    p = Params.from_inputs(inputs)
    if checks.recall_claim(p, True) is None:  # no claim whatever the cells cover
        return None
    x = reference.all_vectors(inputs)
    out = runs.run(impl, inputs)
    covered = np.unique(np.asarray(out["cell_members"])).size == x.shape[0]
    bound = checks.recall_claim(p, covered)
    if bound is None:
        return None
    queries = in_distribution_queries(x, checks.RECALL_QUERIES, p.seed, checks.RECALL_NOISE,
                                      p.w)
    found = runs.run(impl, {**inputs, "queries": queries})
    got = brute.recall(brute.distances(x, queries, p.metric), _ids(found), p.k,
                       bounds.exact_slack(x, queries, p.metric))
    failure = recall(got, bound=bound, confidence=checks.RECALL_CONFIDENCE, name="ann-recall")
    if failure is None:
        return None
    return Failure("mismatch", failure.message + " (in-distribution queries)",
                   "mismatch:ann:recall-claim", failure.details)


def deterministic(impl: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    """The same case twice gives bit-identical outputs (``fuzzkit.relations.deterministic``):
    the run the other relations compared against (:func:`runs.run`, already made) and a fresh
    one."""
    earlier = runs.run(impl, inputs)
    failure = fuzzkit.oracles.exact(dict(earlier), dict(impl(inputs)), name="rerun")
    return (None if failure is None
            else failure.with_kind("nondeterministic", "two runs of the same case differ: "))


PROPERTIES = (
    Property("t-monotone", t_monotone, "T + 1 rounds: more visited, no rank worse, recall kept"),
    Property("l-prefix", l_prefix, "L + 1 tables: candidates nest (T = 0), recall kept"),
    Property("c-nesting", c_nesting, "capacity 2C: candidates nest (T = 0), recall kept"),
    Property("p-nesting", p_nesting, "P + 1 probes: candidates nest (T = 0), recall kept"),
    Property("all-covering", all_covering, "w = null, C >= n: brute force"),
    Property("batch-invariant", batch_invariant, "splitting the query batch changes nothing"),
    Property("id-permutation", id_permutation, "permuting stored vectors relabels the result"),
    Property("insert-equals-build", insert_equals_build, "insert after build == build over all"),
    Property("recall-claim", recall_claim,
             "mean recall@k >= RECALL_BOUND on seeded near-copy queries (Hoeffding, 99 %)"),
    Property("deterministic", deterministic, "the same case twice: identical outputs"),
)

__all__ = ["PROPERTIES"]
