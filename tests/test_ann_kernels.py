"""The ``ann`` Triton kernels (candidate distances, one expansion round) against float64 NumPy
references of the hook semantics (``targets/ann/index.py``), their mutants, and the ``triton``
implementation end to end.

Natively on a GPU, under ``TRITON_INTERPRET=1`` without one (``kernels`` calls
``triton_support.prepare`` before Triton is imported).  Shapes are small and hit ragged tiles:
``M`` and ``D`` not multiples of the block, several ``D`` steps (tests pass ``block_m`` /
``block_d`` to force many tiles under the interpreter too).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import pytest

import fuzzkit.oracles
from fuzzkit import triton_support
from fuzzkit.testing import first_failure

pytestmark = pytest.mark.kernel

if triton_support.unavailable():  # pragma: no cover - torch/triton are dev dependencies
    pytest.skip(triton_support.unavailable() or "", allow_module_level=True)

import torch  # noqa: E402

from fuzzkit.targets.ann import kernel_mutants, kernels  # noqa: E402
from fuzzkit.targets.ann.bounds import reference_distances  # noqa: E402


# ============================================================================ float64 references


def reference_expand(frontier: np.ndarray, graph: np.ndarray, visited: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Plain loops: new ids at their first position (frontier-major) and the updated visited."""
    q, e = frontier.shape
    r = graph.shape[1]
    out = np.full((q, e * r), -1, dtype=np.int32)
    visited = visited.copy()
    for i in range(q):
        for a in range(e):
            node = int(frontier[i, a])
            if node < 0:
                continue
            for b in range(r):
                nb = int(graph[node, b])
                if nb >= 0 and not visited[i, nb]:
                    visited[i, nb] = 1
                    out[i, a * r + b] = nb
    return out, visited


# ============================================================================ helpers


def _turbo_case(rng: np.random.Generator, n: int, q: int, dim: int, bits: int
                ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    from fuzzkit.targets.quant import reference

    book = reference.codebook("lloyd_max", bits)
    codes = rng.integers(0, 1 << bits, (n, dim)).astype(reference.codes_dtype(bits))
    if bits == 16:
        codes[0, :] = 65535  # high codes: widened without sign extension
    scales = rng.uniform(0.2, 2.0, n).astype(np.float32)
    norms = (scales * np.sqrt((book.centroids[codes.astype(np.int64)] ** 2).sum(1))
             ).astype(np.float32)
    qnorms = rng.uniform(0.5, 3.0, q).astype(np.float32)
    return codes, {"centroids": book.centroids.astype(np.float32), "scales": scales,
                   "norms": norms, "query_norms2": qnorms}


def _device_turbo(turbo: dict[str, np.ndarray]) -> kernels.Turbo:
    dev = triton_support.device()
    return kernels.Turbo(**{k: torch.from_numpy(np.ascontiguousarray(v)).to(dev)
                            for k, v in turbo.items()})


def _operands(queries: np.ndarray, stored: np.ndarray,
              turbo: Optional[dict[str, np.ndarray]]) -> tuple[Any, Any, Any]:
    q_t = kernels.guarded(queries, torch.float32)
    if turbo is None:
        return q_t, kernels.guarded(stored, torch.float32), None
    return q_t, kernels.code_tensor(stored), _device_turbo(turbo)


def _ids(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int32)).to(
        triton_support.device())


def run_distances(queries: np.ndarray, stored: np.ndarray, ids: np.ndarray, metric: str,
                  turbo: Optional[dict[str, np.ndarray]] = None, **blocks: int) -> np.ndarray:
    q_t, s_t, t_t = _operands(queries, stored, turbo)
    return kernels.distances(q_t, s_t, _ids(ids), metric=metric, turbo=t_t,
                             **blocks).cpu().numpy()


def distance_failure(queries: np.ndarray, stored: np.ndarray, ids: np.ndarray, metric: str,
                     turbo: Optional[dict[str, np.ndarray]] = None, **blocks: int) -> Any:
    got = run_distances(queries, stored, ids, metric, turbo, **blocks)
    want, magnitude, length = reference_distances(queries, stored, ids, metric, turbo)
    return fuzzkit.oracles.close(want, got, dtype="float32", reduction_length=length,
                         magnitude=magnitude, name="candidate_distances")


def _candidates(rng: np.random.Generator, q: int, m: int, n: int, pad: float = 0.2
                ) -> np.ndarray:
    ids = rng.integers(0, n, (q, m)).astype(np.int32)
    ids[rng.random((q, m)) < pad] = -1
    return ids


# ============================================================================ distances

SHAPES = [  # (q, M, n, D): ragged M and D; D spans several 16-wide (and 64-wide) steps
    (1, 1, 1, 1), (3, 5, 9, 7), (5, 70, 40, 37), (17, 33, 50, 80), (4, 64, 64, 64),
    (2, 130, 30, 129),
]


@pytest.mark.parametrize("q, m, n, dim", SHAPES)
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_distances_float32_match_float64(q: int, m: int, n: int, dim: int, metric: str) -> None:
    rng = np.random.default_rng(q * 1000 + m + dim)
    queries = rng.standard_normal((q, dim)).astype(np.float32)
    base = rng.standard_normal((n, dim)).astype(np.float32)
    ids = _candidates(rng, q, m, n)
    failure = distance_failure(queries, base, ids, metric)
    assert failure is None, failure.message


@pytest.mark.parametrize("block_m, block_d", [(8, 16), (16, 32), (4, 128)])
def test_distances_with_many_tiles(block_m: int, block_d: int) -> None:
    """Forced small blocks: many M tiles and D steps, the last of each partial."""
    rng = np.random.default_rng(block_m + block_d)
    q, m, n, dim = 6, 3 * block_m + 5, 40, 2 * block_d + 3
    queries = rng.standard_normal((q, dim)).astype(np.float32)
    base = rng.standard_normal((n, dim)).astype(np.float32)
    for metric in ("l2", "ip"):
        failure = distance_failure(queries, base, _candidates(rng, q, m, n), metric,
                                   block_m=block_m, block_d=block_d)
        assert failure is None, failure.message


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("q, m, n, dim", [(3, 5, 9, 7), (5, 70, 40, 37), (2, 19, 20, 80)])
def test_distances_turbo_match_float64(bits: int, metric: str, q: int, m: int, n: int,
                                       dim: int) -> None:
    rng = np.random.default_rng(bits + q * m + dim)
    queries = rng.standard_normal((q, dim)).astype(np.float32)
    codes, turbo = _turbo_case(rng, n, q, dim, bits)
    ids = _candidates(rng, q, m, n)
    ids[0, 0] = 0  # the high-code row for turbo16
    failure = distance_failure(queries, codes, ids, metric, turbo)
    assert failure is None, failure.message


def test_distances_padding_rows_and_empty_shapes() -> None:
    rng = np.random.default_rng(1)
    queries = rng.standard_normal((3, 5)).astype(np.float32)
    base = rng.standard_normal((4, 5)).astype(np.float32)
    ids = np.full((3, 7), -1, dtype=np.int32)
    ids[1, 6] = 3
    got = run_distances(queries, base, ids, "l2")
    assert np.isinf(got[ids < 0]).all() and (got[ids < 0] > 0).all()
    assert math.isclose(got[1, 6], float(((base[3] - queries[1]) ** 2).sum()), rel_tol=1e-5)
    assert run_distances(queries, base, np.zeros((3, 0), np.int32), "ip").shape == (3, 0)
    assert run_distances(queries[:0], base, np.zeros((0, 4), np.int32), "ip").shape == (0, 4)


def test_distances_validate_arguments() -> None:
    dev = triton_support.device()
    queries = torch.zeros((2, 3), dtype=torch.float32, device=dev)
    base = torch.zeros((4, 3), dtype=torch.float32, device=dev)
    ids = torch.zeros((2, 5), dtype=torch.int32, device=dev)
    bad = {
        "metric must be one of": dict(metric="cos"),
        "queries must be float32": dict(queries=queries.double()),
        "stored D=": dict(stored=torch.zeros((4, 2), dtype=torch.float32, device=dev)),
        "ids must be int32": dict(ids=ids.long()),
        "ids must be contiguous": dict(ids=torch.zeros((5, 2), dtype=torch.int32,
                                                      device=dev).t()),
        "ids has 3 rows": dict(ids=torch.zeros((3, 5), dtype=torch.int32, device=dev)),
        r"ids must hold ids in \[-1, 4\)": dict(ids=ids + 4),
        "stored codes must be": dict(turbo=_device_turbo({
            "centroids": np.zeros(256, np.float32), "scales": np.ones(4, np.float32),
            "norms": np.ones(4, np.float32), "query_norms2": np.ones(2, np.float32)})),
    }
    for message, change in bad.items():
        args = dict(queries=queries, stored=base, ids=ids, metric="l2", turbo=None)
        args.update(change)
        with pytest.raises(ValueError, match=message):
            kernels.distances(args.pop("queries"), args.pop("stored"), args.pop("ids"), **args)
    codes = torch.zeros((4, 3), dtype=torch.uint8, device=dev)
    short = _device_turbo({"centroids": np.zeros(16, np.float32), "scales": np.ones(4, np.float32),
                           "norms": np.ones(4, np.float32),
                           "query_norms2": np.ones(2, np.float32)})
    with pytest.raises(ValueError, match="turbo.centroids must be"):
        kernels.distances(queries, codes, ids, metric="ip", turbo=short)


# ============================================================================ expansion


def run_expand(frontier: np.ndarray, graph: np.ndarray, visited: np.ndarray,
               queries: np.ndarray, stored: np.ndarray, metric: str,
               turbo: Optional[dict[str, np.ndarray]] = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q_t, s_t, t_t = _operands(queries, stored, turbo)
    v_t = torch.from_numpy(visited.copy()).to(triton_support.device())
    ids, dist = kernels.expand(_ids(frontier), _ids(graph), v_t, q_t, s_t, metric=metric,
                               turbo=t_t)
    return ids.cpu().numpy(), dist.cpu().numpy(), v_t.cpu().numpy()


def expand_failure(frontier: np.ndarray, graph: np.ndarray, visited: np.ndarray,
                   queries: np.ndarray, stored: np.ndarray, metric: str,
                   turbo: Optional[dict[str, np.ndarray]] = None) -> Optional[str]:
    """None when ids and visited match the reference exactly and distances within bound."""
    got_ids, got_dist, got_visited = run_expand(frontier, graph, visited, queries, stored,
                                                metric, turbo)
    want_ids, want_visited = reference_expand(frontier, graph, visited)
    if not np.array_equal(got_ids, want_ids):
        rows, cols = np.nonzero(got_ids != want_ids)
        return (f"new ids differ at ({rows[0]}, {cols[0]}): got {got_ids[rows[0], cols[0]]}, "
                f"want {want_ids[rows[0], cols[0]]}")
    if not np.array_equal(got_visited, want_visited):
        return "visited differs"
    want, magnitude, length = reference_distances(queries, stored, want_ids, metric, turbo)
    failure = fuzzkit.oracles.close(want, got_dist, dtype="float32", reduction_length=length,
                            magnitude=magnitude, name="expand_distances")
    return None if failure is None else failure.message


def _expand_case(rng: np.random.Generator, q: int, e: int, n: int, r: int, dim: int,
                 seen: float = 0.3) -> tuple[np.ndarray, ...]:
    """Duplicates everywhere: frontier ids repeat, graph rows share neighbours and repeat
    them, ``-1`` padding in both."""
    graph = rng.integers(0, max(2, n // 3), (n, r)).astype(np.int32) % n
    graph[rng.random((n, r)) < 0.15] = -1
    frontier = rng.integers(0, n, (q, e)).astype(np.int32)
    frontier[rng.random((q, e)) < 0.2] = -1
    if e > 1:
        frontier[0, 1] = frontier[0, 0]  # a duplicated frontier node
    visited = (rng.random((q, n)) < seen).astype(np.uint8)
    queries = rng.standard_normal((q, dim)).astype(np.float32)
    base = rng.standard_normal((n, dim)).astype(np.float32)
    return frontier, graph, visited, queries, base


@pytest.mark.parametrize("q, e, n, r, dim", [
    (1, 1, 2, 1, 3), (3, 4, 30, 5, 7), (6, 8, 60, 12, 37), (17, 3, 25, 7, 20),
    (2, 16, 100, 20, 33),
])
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_expand_matches_reference(q: int, e: int, n: int, r: int, dim: int, metric: str) -> None:
    rng = np.random.default_rng(q * e * n + r)
    failure = expand_failure(*_expand_case(rng, q, e, n, r, dim), metric)
    assert failure is None, failure


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_expand_turbo_matches_reference(bits: int, metric: str) -> None:
    rng = np.random.default_rng(bits)
    frontier, graph, visited, queries, _ = _expand_case(rng, 4, 5, 40, 6, 21)
    codes, turbo = _turbo_case(rng, 40, 4, 21, bits)
    failure = expand_failure(frontier, graph, visited, queries, codes, metric, turbo)
    assert failure is None, failure


def test_expand_padding_and_nothing_new() -> None:
    rng = np.random.default_rng(7)
    frontier, graph, visited, queries, base = _expand_case(rng, 4, 3, 12, 4, 5)
    frontier[1] = -1                 # an all-padding frontier row
    visited[2] = 1                   # everything already visited: nothing new
    graph[frontier[3, 0]] = -1       # an all-padding graph row
    ids, dist, after = run_expand(frontier, graph, visited, queries, base, "l2")
    assert (ids[1] == -1).all() and (ids[2] == -1).all()
    assert np.isinf(dist[ids < 0]).all()
    np.testing.assert_array_equal(after[1], visited[1])
    np.testing.assert_array_equal(after[2], visited[2])
    assert expand_failure(frontier, graph, visited, queries, base, "l2") is None
    # all padding everywhere, and E * R == 0
    empty = np.full((2, 3), -1, np.int32)
    ids, dist, after = run_expand(empty, graph, visited[:2], queries[:2], base, "ip")
    assert (ids == -1).all() and np.isinf(dist).all()
    np.testing.assert_array_equal(after, visited[:2])
    ids, dist, _ = run_expand(np.zeros((2, 0), np.int32), graph, visited[:2], queries[:2],
                              base, "ip")
    assert ids.shape == (2, 0) and dist.shape == (2, 0)


def test_expand_keeps_the_first_occurrence() -> None:
    """Id 5 is reached at positions 1, 2 (graph row repeats it) and 3 (second frontier node,
    which the third frontier slot repeats): it is written once, at position 1, on every run."""
    graph = np.array([[4, 5, 5], [5, 6, -1], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0],
                      [0, 0, 0]], dtype=np.int32)
    frontier = np.array([[0, 1, 0]], dtype=np.int32)
    visited = np.zeros((1, 7), np.uint8)
    visited[0, 4] = 1
    queries = np.zeros((1, 2), np.float32)
    base = np.arange(14, dtype=np.float32).reshape(7, 2)
    for _ in range(3):
        ids, dist, after = run_expand(frontier, graph, visited, queries, base, "l2")
        np.testing.assert_array_equal(ids[0], [-1, 5, -1, -1, 6, -1, -1, -1, -1])
        np.testing.assert_array_equal(after[0], [0, 0, 0, 0, 1, 1, 1])
        assert dist[0, 1] == 10.0 ** 2 + 11.0 ** 2


def test_expand_validates_arguments() -> None:
    dev = triton_support.device()
    rng = np.random.default_rng(0)
    frontier, graph, visited, queries, base = _expand_case(rng, 2, 3, 10, 4, 5)
    f_t, g_t = _ids(frontier), _ids(graph)
    v_t = torch.from_numpy(visited).to(dev)
    q_t, s_t = kernels.guarded(queries, torch.float32), kernels.guarded(base, torch.float32)
    cases = [
        ("visited must be uint8", (f_t, g_t, v_t.bool(), q_t, s_t)),
        (r"visited must be \[2, 10\]", (f_t, g_t, v_t[:, :9].contiguous(), q_t, s_t)),
        (r"graph must hold ids in \[-1, 10\)", (f_t, g_t + 10, v_t, q_t, s_t)),
        (r"frontier must hold ids in \[-1, 10\)", (f_t - 2, g_t, v_t, q_t, s_t)),
        ("graph has 10 rows, stored 9", (f_t, g_t, v_t, q_t, s_t[:9])),
        ("frontier has 2 rows, queries 1", (f_t, g_t, v_t, q_t[:1], s_t)),
    ]
    for message, args in cases:
        with pytest.raises(ValueError, match=message):
            kernels.expand(*args, metric="l2")


# ============================================================================ mutants


def test_every_kernel_mutant_is_listed_with_a_citation() -> None:
    assert len(kernel_mutants.KERNEL_MUTANTS) >= 2
    for name, (cm, bug_class, citation) in kernel_mutants.KERNEL_MUTANTS.items():
        assert callable(cm) and bug_class and citation, name


def test_partial_tile_mask_mutant_is_caught_only_on_a_partial_tile() -> None:
    rng = np.random.default_rng(3)
    q, m, n = 4, 21, 30
    for dim, shows in ((37, True), (16, False), (32, False), (5, True)):
        queries = rng.standard_normal((q, dim)).astype(np.float32)
        base = rng.standard_normal((n, dim)).astype(np.float32)
        ids = _candidates(rng, q, m, n)
        with kernel_mutants.partial_tile_mask():
            failure = distance_failure(queries, base, ids, "l2", block_d=16)
        assert (failure is not None) == shows, (dim, failure)
    assert distance_failure(queries, base, ids, "l2", block_d=16) is None  # restored


def test_dedup_race_mutant_is_caught() -> None:
    rng = np.random.default_rng(4)
    case = _expand_case(rng, 3, 4, 30, 5, 7)
    with kernel_mutants.dedup_race():
        failure = expand_failure(*case, "l2")
    assert failure is not None and "new ids differ" in failure
    assert expand_failure(*case, "l2") is None  # restored


def test_turbo_scale_dropped_mutant_is_caught() -> None:
    rng = np.random.default_rng(5)
    queries = rng.standard_normal((3, 9)).astype(np.float32)
    codes, turbo = _turbo_case(rng, 12, 3, 9, 8)
    ids = _candidates(rng, 3, 10, 12)
    base = rng.standard_normal((12, 9)).astype(np.float32)
    with kernel_mutants.turbo_scale_dropped():
        assert distance_failure(queries, codes, ids, "ip", turbo) is not None
        assert distance_failure(queries, base, ids, "ip") is None  # float32 storage unaffected
    assert distance_failure(queries, codes, ids, "ip", turbo) is None


def test_chunk_verdict_mutant_is_caught_only_past_the_chunk() -> None:
    """Rows no wider than one dedup chunk are deduplicated right even when each chunk's verdict
    overwrites the last; one chunk more and a duplicate of an earlier chunk is emitted twice."""
    from fuzzkit.targets.ann import tiles

    chunk = tiles.current().chunk
    rng = np.random.default_rng(6)
    # frontier (..., 0, 1, 1): node 1's neighbours come twice -- within one chunk, or repeated
    # in the second chunk from the first
    for e, r, shows in ((2, chunk // 2, False), (3, chunk // 2 + 1, True)):
        _, graph, visited, queries, base = _expand_case(rng, 3, e, 40, r, 5, seen=0.0)
        graph[0], graph[1] = 10 + np.arange(r), 20 + np.arange(r)
        frontier = np.tile(np.r_[np.zeros(e - 2), np.ones(2)], (3, 1)).astype(np.int32)
        case = (frontier, graph, visited, queries, base)
        with kernel_mutants.chunk_verdict_overwritten():
            failure = expand_failure(*case, "l2")
        assert (failure is not None) == shows, (e, r, failure)
        assert expand_failure(*case, "l2") is None  # restored


def test_qnorm_local_row_mutant_is_caught_only_past_the_row_tile() -> None:
    """turbo l2 reads ||q||^2 per row: a launch of BLOCK_Q rows is one program and right; one
    more row starts a second program, whose rows read the first program's norms."""
    from fuzzkit.targets.ann import tiles

    rows = tiles.current().dist_q
    rng = np.random.default_rng(8)
    codes, turbo = _turbo_case(rng, 12, rows + 1, 9, 8)
    turbo["query_norms2"] = np.arange(1, rows + 2, dtype=np.float32)  # all different
    queries = rng.standard_normal((rows + 1, 9)).astype(np.float32)
    ids = _candidates(rng, rows + 1, 10, 12, pad=0.0)
    short = {**turbo, "query_norms2": turbo["query_norms2"][:rows]}
    with kernel_mutants.qnorm_local_row():
        assert distance_failure(queries[:rows], codes, ids[:rows], "l2", short) is None
        assert distance_failure(queries, codes, ids, "l2", turbo) is not None
        assert distance_failure(queries, codes, ids, "ip", turbo) is None  # ip reads no norm
    assert distance_failure(queries, codes, ids, "l2", turbo) is None


# ============================================================================ the implementation


def _inputs(storage: str, metric: str, seed: int = 0, rerank: bool = False,
            inserted: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    n, dim, q = 120, 19, 6
    inputs: dict[str, Any] = dict(
        vectors=rng.standard_normal((n, dim)).astype(np.float32),
        queries=rng.standard_normal((q, dim)).astype(np.float32),
        L=2, m=3, w=1.5, C=8, R=6, E=4, T=3, P=3, k=10, seed=seed + 5, metric=metric,
        storage=storage, rerank=rerank)
    if inserted:
        inputs["inserted"] = rng.standard_normal((inserted, dim)).astype(np.float32)
    return inputs


@pytest.mark.parametrize("storage, metric, rerank, inserted", [
    ("float32", "l2", False, 0), ("float32", "ip", False, 7), ("turbo8", "l2", False, 0),
    ("turbo8", "ip", True, 0), ("turbo16", "l2", True, 3), ("turbo16", "ip", False, 0),
])
@pytest.mark.parametrize("mirror", [False, True])
def test_triton_search_matches_numpy_search(storage: str, metric: str, rerank: bool,
                                            inserted: int, mirror: bool) -> None:
    """Same index, same shared NumPy selection: the kernel hooks give the NumPy hooks' ids and
    visited counts (float32 distances of continuous random data: no near ties) -- with the
    visited array shared (interpreter) and mirrored on the device (the GPU path)."""
    from fuzzkit.targets.ann import index as ann_index
    from fuzzkit.targets.ann import triton_impl

    inputs = _inputs(storage, metric, seed=len(storage) + inserted, rerank=rerank,
                     inserted=inserted)
    index = ann_index.index_from_inputs(inputs)
    hooks = triton_impl.KernelHooks()
    hooks.mirror = mirror
    want = ann_index.search(index, inputs["queries"])
    got = ann_index.search(index, inputs["queries"], candidate_distances=hooks.candidate_distances,
                           expand=hooks.expand)
    np.testing.assert_array_equal(got.ids, want.ids)
    np.testing.assert_array_equal(got.visited_count, want.visited_count)
    finite = np.isfinite(want.distances)
    np.testing.assert_array_equal(np.isfinite(got.distances), finite)
    np.testing.assert_allclose(got.distances[finite], want.distances[finite], rtol=1e-5,
                               atol=1e-5)
    out = triton_impl.run(inputs)
    np.testing.assert_array_equal(out["ids"], want.ids)


@pytest.mark.parametrize("name, storage", [("partial-tile-mask", "float32"),
                                           ("dedup-race", "float32"),
                                           ("turbo-scale-dropped", "turbo8")])
def test_kernel_mutants_change_the_search(name: str, storage: str) -> None:
    """Through the whole implementation: each mutant changes the returned ids or distances
    (duplicate ids for ``dedup-race``) on a small case, and the clean kernels are restored."""
    from fuzzkit.targets.ann import index as ann_index
    from fuzzkit.targets.ann import triton_impl

    inputs = _inputs(storage, "l2", seed=11)
    inputs.update(E=6, R=8, T=3)  # a wide beam: frontier nodes share neighbours
    want = ann_index.run(inputs)
    with kernel_mutants.KERNEL_MUTANTS[name][0]():
        got = triton_impl.run(inputs)
    duplicates = any(len(set(r[r >= 0].tolist())) < int((r >= 0).sum()) for r in got["ids"])
    differs = (not np.array_equal(got["ids"], want["ids"])
               or not np.allclose(got["distances"], want["distances"], rtol=1e-4))
    assert duplicates or differs, name
    if name == "dedup-race":
        assert duplicates
    np.testing.assert_array_equal(triton_impl.run(inputs)["ids"], want["ids"])


# ============================================================================ through the target


@pytest.fixture(scope="module")
def ann() -> Any:
    from fuzzkit.targets.ann import target as make_target

    target = make_target()
    reason = target.implementation("triton").unavailable()
    if reason:
        pytest.skip(reason)
    return target


def test_triton_passes_the_oracle_on_generated_cases(ann: Any) -> None:
    failure = first_failure(ann, ann.implementation("triton"), max_examples=12, seed=0)
    assert failure is None, f"{failure.signature}: {failure.message}"


@pytest.mark.parametrize("name", sorted(kernel_mutants.KERNEL_MUTANTS))
def test_kernel_mutant_is_caught_through_the_target(ann: Any, name: str) -> None:
    """Each kernel mutant is listed on the ``triton`` implementation and fails the target's
    oracle within a bounded number of generated cases."""
    mutant = next(m for m in ann.mutants if m.name.endswith(name))
    assert mutant.implementation == "triton"
    with mutant.applied():
        failure = first_failure(ann, ann.implementation("triton"), max_examples=120, seed=1,
                                properties=False)
    assert failure is not None, f"{mutant.name} escaped 120 generated cases"
