"""The ann target (OctEx): the model read literally, the NumPy index against it, the oracle's
layers (structure, validity, equality, recall), brute force, IVF-flat and input validation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from fuzzkit.registry import get_target
from fuzzkit.runner import check_case
from fuzzkit.target import Target
from fuzzkit.targets.ann import brute, checks, index, ivf, model, reference, strategies


def make_case(seed: int = 0, n: int = 60, dim: int = 8, q: int = 8, inserted: int = 0,
              **params: Any) -> dict[str, Any]:
    """A clustered case with a sensible configuration; ``params`` override it."""
    rng = np.random.default_rng(seed)
    centres = 3.0 * rng.standard_normal((4, dim))
    x = (centres[rng.integers(0, 4, n)] + rng.standard_normal((n, dim))).astype(np.float32)
    queries = (centres[rng.integers(0, 4, q)] + rng.standard_normal((q, dim))).astype(np.float32)
    inputs: dict[str, Any] = {
        "vectors": x[:n - inserted], "inserted": x[n - inserted:], "queries": queries,
        "L": 3, "m": 2, "w": 2.0, "C": 6, "R": 6, "E": 6, "T": 2, "P": 3, "k": 5, "seed": 7,
        "metric": "l2", "storage": "float32", "rerank": False,
    }
    inputs.update(params)
    return inputs


@pytest.fixture(scope="module")
def ann() -> Target:
    return get_target("ann")


def test_registered_with_both_implementations(ann: Target) -> None:
    info = ann.describe()
    assert {i["name"] for i in info["implementations"]} == {"numpy", "triton", "faiss-ivf",
                                                             "faiss-hnsw"}
    assert len([m for m in ann.mutants if m.implementation == "numpy"]) >= 7
    assert {"t-monotone", "l-prefix", "all-covering", "id-permutation",
            "recall-claim"} <= set(info["properties"])


# ------------------------------------------------------------------------------------ model


def test_tables_are_a_seeded_prefix_and_distinct() -> None:
    small = model.tables(model.Params(2, 3, 1.0, 4, 4, 4, 1, 1, 3, seed=11), 5)
    large = model.tables(model.Params(3, 3, 1.0, 4, 4, 4, 1, 1, 3, seed=11), 5)
    assert np.array_equal(small[0], large[0][:2]) and np.array_equal(small[1], large[1][:2])
    assert not np.array_equal(large[0][0], large[0][1])
    assert np.all((large[1] >= 0) & (large[1] < 1))


def test_cells_use_a_true_floor_below_zero() -> None:
    coords = model.cell_coords(np.array([-0.25, -1.0, 0.5]), np.zeros(3), 1.0)
    assert coords.tolist() == [-1, -1, 0]
    centre = model.cell_centre(np.array([-1]), np.array([0.25]), 2.0)
    assert centre.tolist() == [(-1 + 0.5 - 0.25) * 2.0]


def test_distance_is_batch_independent_in_float32() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 17)).astype(np.float32)
    q = rng.standard_normal((6, 17)).astype(np.float32)
    whole = model.distance(x[None], q[:, None], "l2", np.float32)
    rows = np.stack([model.distance(x, q[i], "l2", np.float32) for i in range(6)])
    assert np.array_equal(whole, rows)


# ------------------------------------------------------------------------------- agreement


@pytest.mark.parametrize("storage", ["float32", "turbo8", "turbo16"])
@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("rerank", [False, True])
def test_numpy_index_makes_the_reference_decisions(storage: str, metric: str,
                                                   rerank: bool) -> None:
    inputs = make_case(storage=storage, metric=metric, rerank=rerank, inserted=5)
    expected, actual = reference.run(inputs), index.run(inputs)
    for key in ("cell_table", "cell_coords", "cell_offsets", "cell_members", "graph"):
        assert np.array_equal(expected[key], actual[key]), key
    clear = ~expected["aux"]["ambiguous"]
    assert np.array_equal(expected["ids"][clear], actual["ids"][clear])
    assert np.array_equal(expected["visited_count"], actual["visited_count"])
    assert checks.oracle(inputs, expected, actual) is None


def test_insert_gives_the_index_of_a_build_over_everything() -> None:
    grown = index.index_from_inputs(make_case(inserted=20))
    built = index.build(np.concatenate([make_case()["vectors"]]), grown.params)
    for key in ("graph", "cell_table", "cell_coords", "cell_offsets", "cell_members"):
        assert np.array_equal(getattr(grown, key), getattr(built, key)), key


def test_one_cell_holding_everything_is_brute_force() -> None:
    inputs = make_case(w=None, C=60, T=0)
    out = index.run(inputs)
    want, _ = brute.knn(reference.all_vectors(inputs), inputs["queries"], 5, "l2")
    assert np.array_equal(out["ids"], want)


def test_edge_shapes_pad_with_minus_one_and_inf() -> None:
    inputs = make_case(n=3, k=6, R=5, C=8, w=None)
    out = index.run(inputs)
    assert out["graph"].shape == (3, 5) and np.all(out["graph"][:, 2:] == -1)
    assert np.all(out["ids"][:, 3:] == -1) and np.all(np.isinf(out["distances"][:, 3:]))
    assert checks.oracle(inputs, reference.run(inputs), out) is None


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(inputs=strategies.inputs())
def test_generated_cases_are_valid_and_pass(inputs: dict[str, Any]) -> None:
    assert checks.validate(inputs) is None
    ann = get_target("ann")
    verdict = check_case(ann, ann.implementation("numpy"), inputs, confirm=False)
    assert verdict.failure is None, verdict.failure


# ---------------------------------------------------------------------------------- oracle


@pytest.fixture(scope="module")
def judged() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    inputs = make_case(n=40, q=4)
    return inputs, reference.run(inputs), index.run(inputs)


def _tampered(actual: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = {k: np.array(v, copy=True) for k, v in actual.items()}
    out.update(changes)
    return out


def _signature(judged: Any, **changes: Any) -> str:
    inputs, expected, actual = judged
    failure = checks.oracle(inputs, expected, _tampered(actual, **changes))
    assert failure is not None
    return failure.signature


def test_oracle_catches_a_wrong_distance(judged: Any) -> None:
    d = np.array(judged[2]["distances"], copy=True)
    d[0, 0] = np.nextafter(d[0, 0], np.float32(np.inf), dtype=np.float32) * np.float32(1.001)
    assert _signature(judged, distances=d) in ("mismatch:ann:results:distance",
                                               "mismatch:ann:results:order")


def test_oracle_catches_duplicates_order_and_padding(judged: Any) -> None:
    ids, d = np.array(judged[2]["ids"]), np.array(judged[2]["distances"])
    dup = ids.copy()
    dup[0, 1] = dup[0, 0]
    assert _signature(judged, ids=dup).startswith("mismatch:ann:results")
    swapped_ids, swapped_d = ids.copy(), d.copy()
    swapped_ids[0, [0, 1]] = ids[0, [1, 0]]
    swapped_d[0, [0, 1]] = d[0, [1, 0]]
    assert _signature(judged, ids=swapped_ids, distances=swapped_d) == "mismatch:ann:results:order"
    padded_ids, padded_d = ids.copy(), d.copy()
    padded_ids[0, 0], padded_d[0, 0] = -1, np.inf
    assert _signature(judged, ids=padded_ids, distances=padded_d) == \
        "mismatch:ann:results:padding"


def test_oracle_catches_a_missed_neighbour_and_a_wrong_visit_count(judged: Any) -> None:
    inputs, expected, actual = judged
    counts = np.array(actual["visited_count"]) + np.array([1, 0, 0, 0])
    assert _signature(judged, visited_count=counts) == "mismatch:ann:visited-count"


def test_oracle_catches_structure_errors(judged: Any) -> None:
    graph = np.array(judged[2]["graph"])
    graph[0, [0, 1]] = graph[0, [1, 0]]
    assert _signature(judged, graph=graph) == "mismatch:ann:graph:order"
    members = np.array(judged[2]["cell_members"])
    members[[0, -1]] = members[[-1, 0]]
    assert _signature(judged, cell_members=members).startswith("mismatch:ann:cells")


def test_structure_oracle_accepts_a_tie_broken_otherwise() -> None:
    x = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [5, 5]], dtype=np.float32)
    inputs = make_case(R=1, C=5, w=None, T=1, k=2)
    inputs.update(vectors=x, inserted=np.zeros((0, 2), np.float32),
                  queries=np.array([[0.1, 0.0]], np.float32))
    expected, actual = reference.run(inputs), index.run(inputs)
    assert expected["graph"][0, 0] == 1  # ids 1, 2, 3 tie at distance 1: smallest id
    graph = np.array(actual["graph"])
    graph[0, 0] = 3
    assert checks.check_graph(model.Params.from_inputs(inputs), expected, graph) is None


def test_validate_rejects_bad_inputs() -> None:
    good = make_case()
    assert checks.validate(good) is None
    bad = [({"P": 6}, "P must be"), ({"w": 0.0}, "w must be"), ({"metric": "cos"}, "metric"),
           ({"seed": -1}, "seed"), ({"rerank": 1}, "rerank"),
           ({"queries": good["queries"][:, :3]}, "dimension"),
           ({"vectors": good["vectors"].astype(np.float64)}, "float32"),
           ({"w": 1e-30}, "too small")]
    for change, words in bad:
        message = checks.validate({**good, **change})
        assert message is not None and words in message, (change, message)


# ---------------------------------------------------------------------------------- recall


def test_brute_force_recall_is_tie_aware() -> None:
    exact = np.array([[0.0, 1.0, 1.0, 2.0]])
    assert brute.recall(exact, np.array([[0, 2]]), 2).tolist() == [1.0]
    assert brute.recall(exact, np.array([[0, 3]]), 2).tolist() == [0.5]


def test_recall_claim_applies_only_where_meaningful() -> None:
    p = model.Params.from_inputs(make_case())
    assert checks.recall_claim(p, covered=True) == checks.RECALL_BOUND
    assert checks.recall_claim(p, covered=False) is None
    ip = model.Params.from_inputs(make_case(metric="ip"))
    assert checks.recall_claim(ip, covered=True) is None


# ------------------------------------------------------------------------------------- IVF


def test_ivf_flat_recall_grows_with_nprobe_and_is_exact_when_probing_all() -> None:
    rng = np.random.default_rng(5)
    centres = 4.0 * rng.standard_normal((8, 16))
    x = (centres[rng.integers(0, 8, 2000)] + rng.standard_normal((2000, 16))).astype(np.float32)
    q = (centres[rng.integers(0, 8, 100)] + rng.standard_normal((100, 16))).astype(np.float32)
    coarse = ivf.build(x, nlist=32, seed=1)
    assert sorted(coarse.members.tolist()) == list(range(2000))
    truth, _ = brute.knn(x, q, 10, "l2")
    recalls = []
    for nprobe in (1, 4, 32):
        found, _ = ivf.search(coarse, q, 10, nprobe)
        recalls.append(np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)]))
    assert recalls[0] <= recalls[1] <= recalls[2] == 1.0
    assert recalls[1] >= 0.8
