"""The attention_index target: NumPy indexer vs the float64 loop reference, oracle and relations."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from fuzzkit.registry import get_target
from fuzzkit.target import Target
from fuzzkit.targets.attention_index import checks, index, model, properties, reference, strategies


def make_case(seed: int = 0, s: int = 40, t: int = 8, h: int = 3, d: int = 8,
              **changes: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    case = {
        "q": rng.standard_normal((t, h, d)).astype(np.float32),
        "w": rng.random((t, h)).astype(np.float32),
        "k": rng.standard_normal((s, d)).astype(np.float32),
        "topk": 5, "method": "attention_index", "block": 4, "top_m": 3, "groups": 5,
        "iters": 2, "chunk": 16, "top_g": 2, "sink": 2, "local": 3, "seed": 1,
    }
    case.update(changes)
    return case


@pytest.fixture(scope="module")
def target() -> Target:
    return get_target("attention_index")


def test_registered_with_both_implementations(target: Target) -> None:
    assert set(target.implementations) == {"numpy", "triton"}
    assert len([m for m in target.mutants if m.implementation == "numpy"]) >= 7


@pytest.mark.parametrize("method", model.METHODS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_agrees_with_reference(method: str, seed: int) -> None:
    case = make_case(seed, method=method)
    assert checks.validate(case) is None
    expected, actual = reference.run(case), index.run(case)
    assert checks.oracle(case, expected, actual) is None
    np.testing.assert_array_equal(actual["ids"], expected["ids"])
    np.testing.assert_array_equal(actual["candidates"], expected["candidates"])
    if method == "attention_index":
        np.testing.assert_array_equal(actual["assignment"], expected["assignment"])
        assert actual["group_sizes"].sum() == case["k"].shape[0]


def test_reference_indexer_is_the_formula() -> None:
    q = np.array([[[1.0, -1.0], [2.0, 0.0]]], np.float32)
    w = np.array([[0.5, 2.0]], np.float32)
    x = np.array([1.0, 3.0], np.float32)
    # head 0: dot -2 -> ReLU 0; head 1: dot 2 -> 2 * 2 = 4; / sqrt(2)
    assert reference.indexer(q[0], w[0], x) == pytest.approx(4 / np.sqrt(2))


def test_relu_zeros_give_all_tied_scores_and_ids_ascending() -> None:
    k = np.abs(np.random.default_rng(0).standard_normal((12, 4))).astype(np.float32)
    q = -np.ones((3, 2, 4), np.float32)
    case = make_case(q=q, w=np.ones((3, 2), np.float32), k=k, method="dense", topk=4)
    out = index.run(case)
    assert np.all(out["scores"] == 0)
    np.testing.assert_array_equal(out["ids"][0], [0, 1, 2, 3])
    assert checks.oracle(case, reference.run(case), out) is None


def test_padding_when_fewer_causal_keys_than_topk() -> None:
    case = make_case(s=6, t=6, method="dense", topk=4)
    out = index.run(case)
    assert out["ids"][0].tolist() == [0, -1, -1, -1]
    assert np.isneginf(out["scores"][0, 1:]).all()
    assert checks.oracle(case, reference.run(case), out) is None


def test_every_group_probed_is_dense() -> None:
    case = make_case(top_g=50, sink=0, local=0)
    dense = index.run({**case, "method": "dense"})
    out = index.run(case)
    np.testing.assert_array_equal(out["ids"], dense["ids"])
    hisa = index.run({**case, "method": "hisa", "top_m": 50})
    np.testing.assert_array_equal(hisa["ids"], dense["ids"])


def test_groups_reduced_to_first_chunk() -> None:
    case = make_case(groups=9, chunk=4)
    out = index.run(case)
    assert out["centroids"].shape[0] == 4
    assert checks.oracle(case, reference.run(case), out) is None


def test_oracle_rejects_future_key_and_wrong_score() -> None:
    case = make_case(method="dense", s=20, t=20)
    expected = reference.run(case)
    out = index.run(case)
    bad = dict(out, ids=out["ids"].copy())
    bad["ids"][0, 0] = 5
    assert checks.oracle(case, expected, bad).signature.startswith("mismatch:attention_index")
    bad = dict(out, scores=out["scores"].copy())
    bad["scores"][10, 0] *= np.float32(1.001)
    assert checks.oracle(case, expected, bad).signature == "mismatch:attention_index:score"


def test_validate_rejects_bad_inputs() -> None:
    assert checks.validate(make_case(method="nope")) is not None
    assert checks.validate(make_case(t=50, s=10)) is not None
    assert checks.validate(make_case(topk=0)) is not None


@pytest.mark.parametrize("prop", properties.PROPERTIES, ids=lambda p: p.name)
def test_properties_hold_on_fixed_cases(prop: Any) -> None:
    for method in model.METHODS:
        assert prop.check(index.run, make_case(3, method=method)) is None


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(strategies.inputs())
def test_generated_cases_are_valid_and_pass(inputs: dict[str, Any]) -> None:
    assert checks.validate(inputs) is None
    assert checks.oracle(inputs, reference.run(inputs), index.run(inputs)) is None
