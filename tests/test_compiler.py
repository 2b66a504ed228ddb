"""Target ``compiler``: the oracle (classes, divergence signature), validation, registration and
one torch.compile smoke check."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest.importorskip("torch")

import targets.compiler as tc  # noqa: E402
from fuzzkit.registry import get_target  # noqa: E402
from targets.compiler import checks  # noqa: E402


def node(name, op, args, shape, **attrs):
    return {"name": name, "op": op, "args": list(args), "attrs": attrs, "shape": list(shape)}


GRAPH = {
    "inputs": [{"name": "x0", "shape": [3, 5]}, {"name": "x1", "shape": [5]}],
    "nodes": [
        node("n0", "mul", ["x0", "x1"], [3, 5]),
        node("n1", "exp", ["n0"], [3, 5]),
        node("n2", "sum", ["n1"], [3], dim=1, keepdim=False),
        node("n3", "sub", ["n0", "x0"], [3, 5]),
    ],
    "outputs": ["n3", "n2"],
}


def case(dtype: str = "float32") -> dict:
    rng = np.random.default_rng(1)
    return {"graph": GRAPH, "dtype": dtype, "dynamic": False,
            "values": [rng.uniform(-1, 1, (3, 5)).astype(np.float32),
                       rng.uniform(-1, 1, (5,)).astype(np.float32)]}


def rounded(expected: dict, dtype: str = "float32") -> dict:
    import torch

    t = tc.torch_dtype(dtype)
    return {"outputs": [torch.from_numpy(o).to(t).double().numpy() for o in expected["outputs"]]}


def test_oracle_passes_rounded_reference() -> None:
    for dtype in ("float32", "float16", "bfloat16"):
        inputs = case(dtype)
        expected = tc.reference(inputs)
        assert set(expected["intermediates"]) == {"x0", "x1", "n0", "n1", "n2", "n3"}
        assert checks.oracle(inputs, expected, rounded(expected, dtype)) is None
        assert checks.divergence(inputs, expected, rounded(expected, dtype)) is None


@pytest.mark.parametrize("poison, error_class", [(1e-2, "value"), (np.nan, "nan"),
                                                 (np.inf, "inf")])
def test_oracle_classes_and_signature(poison: float, error_class: str) -> None:
    inputs = case()
    expected = tc.reference(inputs)
    actual = rounded(expected)
    out = actual["outputs"][1].copy()  # n2 (sum)
    out[1] = out[1] + poison if error_class == "value" else poison
    actual["outputs"][1] = out
    failure = checks.oracle(inputs, expected, actual)
    assert failure is not None
    assert failure.signature == f"mismatch:sum:float32:{error_class}"
    assert failure.details["node"] == "n2" and failure.details["op"] == "sum"
    assert failure.details["error_class"] == error_class
    assert failure.details["worst"]["index"] == [1]


def test_signature_names_first_diverging_output_in_topological_order() -> None:
    inputs = case()
    expected = tc.reference(inputs)
    actual = rounded(expected)
    actual["outputs"] = [o + 1.0 for o in actual["outputs"]]  # both n3 (sub) and n2 (sum) wrong
    failure = checks.oracle(inputs, expected, actual)
    assert failure is not None and failure.signature == "mismatch:sum:float32:value"


def test_oracle_nonfinite_reference_positions() -> None:
    inputs = case()
    expected = tc.reference(inputs)
    expected["outputs"][0] = expected["outputs"][0].copy()
    expected["outputs"][0][0, 0] = np.nan
    expected["outputs"][0][0, 1] = np.inf
    actual = rounded(expected)
    assert checks.oracle(inputs, expected, actual) is None  # same NaN / Inf: fine
    actual["outputs"][0][0, 0] = 0.0
    assert checks.oracle(inputs, expected, actual).signature == "mismatch:sub:float32:nan"
    actual = rounded(expected)
    actual["outputs"][0][0, 1] = -np.inf
    assert checks.oracle(inputs, expected, actual).signature == "mismatch:sub:float32:inf"


def test_oracle_shape() -> None:
    inputs = case()
    expected = tc.reference(inputs)
    actual = rounded(expected)
    actual["outputs"][0] = actual["outputs"][0][:2]
    failure = checks.oracle(inputs, expected, actual)
    assert failure.signature == "mismatch:sub:float32:shape"


def test_validate() -> None:
    good = case()
    assert checks.validate(good) is None
    assert "dtype" in checks.validate({**good, "dtype": "int8"})
    assert "values" in checks.validate({"graph": GRAPH, "dtype": "float32"})
    assert "shape" in checks.validate({**good, "values": [np.zeros((3, 4), np.float32),
                                                          good["values"][1]]})
    bad = {**GRAPH, "nodes": [node("n0", "frobnicate", ["x0"], [3, 5])], "outputs": ["n0"]}
    assert "op" in checks.validate({**good, "graph": bad})
    bad = {**GRAPH, "nodes": [node("n0", "neg", ["zz"], [3, 5])], "outputs": ["n0"]}
    assert "zz" in checks.validate({**good, "graph": bad})


def test_target_registered() -> None:
    target = get_target("compiler")
    assert set(target.implementations) == {"fusing", "inductor"}
    assert len(target.mutants) >= 10
    assert all(m.implementation == "fusing" for m in target.mutants)
    assert target.validate is checks.validate
    assert target.implementation("inductor").unavailable() is None


def test_strategy_draws_valid_cases() -> None:
    from hypothesis import HealthCheck, given, settings

    seen = []

    @settings(max_examples=5, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(get_target("compiler").strategy())
    def draw(inputs: dict) -> None:
        assert checks.validate(inputs) is None
        seen.append(inputs["dtype"])

    draw()
    assert seen


def test_inductor_smoke() -> None:
    """One torch.compile of a tiny graph (seconds): compiled, counted, within bounds."""
    inputs = case()
    before = tc.compile_calls()
    actual = tc._inductor_run(inputs)
    assert tc.compile_calls() == before + 1
    assert checks.oracle(inputs, tc.reference(inputs), actual) is None
    from targets.compiler import inductor

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == inductor.cache_dir()
    assert str(os.getpid()) in inductor.cache_dir()
