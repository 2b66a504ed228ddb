"""Target ``compiler``: the oracle (classes, divergence signature), validation, registration and
one torch.compile smoke check."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest.importorskip("torch")

import fuzzkit.targets.compiler as tc  # noqa: E402
from fuzzkit.registry import get_target  # noqa: E402
from fuzzkit.targets.compiler import checks  # noqa: E402


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
    assert all(m.implementation in ("fusing", "inductor") for m in target.mutants)
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
    from fuzzkit.targets.compiler import inductor

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == inductor.cache_dir()
    assert str(os.getpid()) in inductor.cache_dir()


def test_cpp_driver_maps_a_c_driver_to_its_cpp_sibling(monkeypatch) -> None:
    from fuzzkit.targets.compiler import inductor

    installed = {"g++", "/usr/bin/g++", "c++", "clang++-14", "x86_64-linux-gnu-g++-12"}
    monkeypatch.setattr(inductor.shutil, "which", lambda name: name if name in installed else None)
    assert inductor.cpp_driver("gcc") == "g++"
    assert inductor.cpp_driver("/usr/bin/gcc") == "/usr/bin/g++"
    assert inductor.cpp_driver("cc") == "c++"
    assert inductor.cpp_driver("clang-14") == "clang++-14"
    assert inductor.cpp_driver("x86_64-linux-gnu-gcc-12") == "x86_64-linux-gnu-g++-12"
    assert inductor.cpp_driver("clang") == "clang"  # no clang++ installed: left as it is
    for cpp in ("g++", "clang++", "/opt/bin/icpx", "ccache"):
        assert inductor.cpp_driver(cpp) == cpp


@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("g++")), reason="needs gcc and g++")
def test_inductor_builds_loadable_kernels_when_cxx_names_a_c_driver(tmp_path) -> None:
    """``CXX=gcc`` (a CI image's setting) linked Inductor's kernels without libstdc++: a kernel
    whose bindings build an error message (integer-division check) failed to load with an
    undefined ``basic_ostringstream`` symbol, and every such graph was a false alarm."""
    script = (
        "import torch\n"
        "from fuzzkit.targets.compiler import inductor\n"
        "inductor.configure()\n"
        "f = torch.compile(lambda a, b: torch.floor_divide(a, b), backend='inductor')\n"
        "print(f(torch.tensor([7.0, -7.0]), torch.tensor([2.0, 2.0])).tolist())\n"
    )
    env = dict(os.environ, CXX="gcc", OMP_NUM_THREADS="1",
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "[3.0, -4.0]"


def test_inductor_reuses_a_compiled_graph_only_for_value_only_variants() -> None:
    """A case that differs only in its values runs the graph compiled for an earlier case (no
    compile) and gives that case's own results; any change of structure, dtype or dynamic
    compiles anew."""
    import copy

    graph = copy.deepcopy(GRAPH)
    graph["nodes"].append(node("n4", "clamp", ["n3"], [3, 5], min=-0.25, max=0.75))
    graph["outputs"] = ["n4", "n2"]
    first = {**case("bfloat16"), "graph": graph}
    before = tc.compile_calls()
    tc._inductor_run(first)
    assert tc.compile_calls() == before + 1
    rng = np.random.default_rng(7)
    again = {**first, "graph": copy.deepcopy(graph),
             "values": [rng.uniform(-2, 2, (3, 5)).astype(np.float32),
                        rng.uniform(-2, 2, (5,)).astype(np.float32)]}
    actual = tc._inductor_run(again)
    assert tc.compile_calls() == before + 1  # reused
    assert checks.oracle(again, tc.reference(again), actual) is None
    eager = tc.reference({**again, "values": first["values"]})
    assert not np.allclose(actual["outputs"][0], eager["outputs"][0])  # not the old results
    moved = copy.deepcopy(graph)
    moved["nodes"][-1]["attrs"]["max"] = 0.5
    for variant in ({**again, "graph": moved}, {**again, "dtype": "float16"},
                    {**again, "dynamic": True}):
        calls = tc.compile_calls()
        actual = tc._inductor_run(variant)
        assert tc.compile_calls() == calls + 1
        assert checks.oracle(variant, tc.reference(variant), actual) is None


def test_structure_key_keeps_every_attribute_bit_and_type() -> None:
    from fuzzkit.targets.compiler.inductor import structure_key

    def key(**attrs):
        graph = {"inputs": [{"name": "x0", "shape": [4]}],
                 "nodes": [node("n0", "clamp", ["x0"], [4], **attrs)], "outputs": ["n0"]}
        return structure_key(graph, "float32", "cpu", dynamic=False)

    assert key(min=0.5) == key(min=0.5)
    distinct = [key(min=0.5), key(min=0.5000000000000001), key(min=1), key(min=1.0),
                key(min=True), key(min=-0.0), key(min=0.0), key(min=np.float32(0.5)),
                key(min=[1]), key(min=(1,)), key(max=0.5)]
    assert len(set(distinct)) == len(distinct)
    graph = {"inputs": [{"name": "x0", "shape": [4]}], "nodes": [], "outputs": ["x0"]}
    assert len({structure_key(graph, d, "cpu", dynamic=y)
                for d in ("float32", "float16") for y in (False, True)}) == 4


# ---------------------------------------------------------------------------------------------
# reach: thresholds, sizes, value shares


@pytest.mark.parametrize("impl", ["fusing", "inductor"])
def test_every_threshold_is_crossed(impl: str) -> None:
    """The first 600 generated cases reach t-1, t, t+1 and 2t+-1 (or beyond) of every threshold
    the implementation declares (generation only: nothing is compiled)."""
    from fuzzkit import reach

    target = get_target("compiler")
    reach.assert_crossed(target, target.implementation(impl), cases=600)


def test_thresholds_follow_the_launched_tiles_and_sources_are_declared() -> None:
    from fuzzkit import triton_support
    from fuzzkit.targets.compiler import thresholds as th

    target = get_target("compiler")
    fusing = target.implementation("fusing")
    declared = target.thresholds_for(fusing)
    assert {t.size for t in target.thresholds_for(None)} <= set(target.sizes)
    triton_support.prepare()
    from fuzzkit.targets.compiler.fusing import codegen

    assert [t.value for t in declared if t.size == "numel"] == [codegen.MAX_BLOCK]
    assert codegen.MAX_BLOCK == (4096 if triton_support.interpreted() else 1024)
    assert "fuzzkit.targets.compiler.fusing" in target.coverage_sources(fusing)
    assert "fuzzkit.targets.compiler.inductor" in target.coverage_sources(
        target.implementation("inductor"))
    graph = {"inputs": [{"name": "x", "shape": [3, 5000]}],
             "nodes": [node("a", "sum", ["x"], [3], dim=1, keepdim=False),
                       node("b", "amax", ["x"], [5000], dim=[0], keepdim=False),
                       node("c", "exp", ["a"], [3])],
             "outputs": ["b", "c"]}
    inputs = {"graph": graph}
    assert list(th.rows(inputs)) == [5000] and list(th.cells(inputs)) == [3 * 8192]
    assert list(th.reductions(inputs)) == [5000, 3] and list(th.numels(inputs)) == [3]
    assert sorted(th.fanouts(inputs)) == [1, 1, 1]  # a feeds c; b and c are outputs


def _cases(n: int, impl: str = "fusing", seed: int = 0) -> list[dict]:
    from fuzzkit import reach

    target = get_target("compiler")
    return reach.generated(target.strategy_for(target.implementation(impl)), n, seed=seed)


def test_long_reductions_are_drawn() -> None:
    """Some fused rows are tens of thousands of elements long (low-precision accumulation
    errors outgrow the float32 bound there; 400 cases: with 173 ops fewer graphs reduce), and
    every case stays under the element cap."""
    from fuzzkit.targets.compiler import strategies
    from fuzzkit.targets.compiler import thresholds as th

    rows = [n for case in _cases(400) for n in th.rows(case)]
    assert max(rows) >= 16384
    assert sum(n > 4096 for n in rows) >= 5
    for case in _cases(50):
        for shape in [i["shape"] for i in case["graph"]["inputs"]]:
            assert int(np.prod(shape)) <= strategies.MAX_ELEMENTS


#: Stated shares (per comparing node over generated cases; see targets/compiler/strategies.py):
#: a comparison's operands tie exactly at some element in at least TIE_SHARE of the nodes
#: (relu: an exact zero; amax/amin/argmax/max_dim_values: a tied extreme; clamp: an element
#: exactly at a bound, in at least CLAMP_TIE_SHARE -- the generator's magnitude guards are
#: clamps at +-8, +-2, +-1 that ordinary values rarely hit), and NaN reaches them in at least
#: NAN_SHARE.  The NaN share is a property of the value plan (graphs/values.py: in a special
#: case every input that reaches a comparing op holds a NaN), not of lucky draws.
TIE_SHARE = 0.15
CLAMP_TIE_SHARE = 0.05
NAN_SHARE = 0.08
#: The comparing ops in three groups, each judged as one pool.  With 173 ops a single
#: comparison is in ~5-15 of the ~170 distinct graphs of 300 cases (Hypothesis mutates a
#: graph's values several times in a row: those runs count once here), too few for a per-op
#: share with a margin; a group is in 40 or more.
COMPARING_GROUPS: dict[str, tuple[str, ...]] = {
    "binary": ("maximum", "minimum", "where_gt", "gt", "ge", "lt", "le", "eq", "ne"),
    "bounds": ("clamp", "relu"),
    "extremes": ("amax", "amin", "argmax", "argmin", "max_dim_values", "min_dim_values"),
}


def _tie_and_nan(op: str, attrs: dict, xs: list) -> tuple[bool, bool]:
    """Whether a comparing node's operands tie at some element, and whether one holds NaN."""
    from fuzzkit.targets.compiler.graphs.ops import reduced_dims

    xs = [np.asarray(x, dtype=np.float64) for x in xs]
    if len(xs) >= 2:  # where_gt: a > b picks c or d
        a, b = np.broadcast_arrays(xs[0], xs[1])
        return bool(np.any(a == b)), bool(np.isnan(a).any() or np.isnan(b).any())
    x = xs[0]
    nan = bool(np.isnan(x).any())
    if op == "relu":
        return bool(np.any(x == 0)), nan
    if op == "clamp":
        return any(bool(np.any(x == attrs[k])) for k in ("min", "max")
                   if attrs[k] is not None), nan
    if op in ("amax", "amin"):
        dims = reduced_dims(attrs["dim"], x.ndim)
    else:
        dims = tuple(range(x.ndim)) if attrs["dim"] is None else (int(attrs["dim"]),)
    if not x.ndim or x.size == 0:
        return False, nan
    with np.errstate(invalid="ignore"):
        top = (np.max(x, axis=dims, keepdims=True) if op in ("amax", "argmax", "max_dim_values")
               else np.min(x, axis=dims, keepdims=True))
    return bool(np.any(np.sum(x == top, axis=dims) >= 2)), nan


def test_comparisons_see_ties_and_nan_in_the_stated_shares() -> None:
    import json

    from fuzzkit.targets.compiler.graphs import build

    group_of = {op: g for g, ops in COMPARING_GROUPS.items() for op in ops}
    seen: dict[str, int] = {}
    tied: dict[str, int] = {}
    nans: dict[str, int] = {}
    done: set[tuple[str, bool]] = set()
    for case in _cases(300):
        graph = case["graph"]
        key = (json.dumps(graph, sort_keys=True), bool(case["special"]))
        if key in done:  # a run of value mutants of one graph: one sample
            continue
        done.add(key)
        ref = build.run_reference(graph, case["values"])
        for n in graph["nodes"]:
            group = group_of.get(n["op"])
            if group is None:
                continue
            tie, nan = _tie_and_nan(n["op"], n["attrs"], [ref[a] for a in n["args"]])
            seen[group] = seen.get(group, 0) + 1
            tied[group] = tied.get(group, 0) + tie
            nans[group] = nans.get(group, 0) + nan
    for group in COMPARING_GROUPS:
        assert seen.get(group, 0) >= 40, (group, seen)
        share = CLAMP_TIE_SHARE if group == "bounds" else TIE_SHARE
        assert tied[group] >= share * seen[group], (group, tied[group], seen[group])
        assert nans[group] >= NAN_SHARE * seen[group], (group, nans[group], seen[group])


def test_special_cases_put_a_nan_where_a_comparison_reads() -> None:
    """The value plan behind the NaN share: in a special case every input that reaches a
    comparing op holds a NaN; an ordinary case holds none."""
    from fuzzkit.targets.compiler.graphs import values

    graph = {"inputs": [{"name": "x0", "shape": [3, 4]}, {"name": "x1", "shape": [4]},
                        {"name": "x2", "shape": [4]}],
             "nodes": [node("a", "exp", ["x1"], [4]),
                       node("b", "maximum", ["x0", "a"], [3, 4]),
                       node("c", "neg", ["x2"], [4])],
             "outputs": ["b", "c"]}
    assert values.compared_inputs(graph) == [0, 1]
    from hypothesis import strategies as st

    from fuzzkit import reach

    @st.composite
    def drawn(draw: object, special: bool) -> list:
        return values.draw_values(draw, graph, "float16", special=special)

    for got in reach.generated(drawn(True), 30):
        assert np.isnan(got[0]).any() and np.isnan(got[1]).any()
    for got in reach.generated(drawn(False), 30):
        assert not any(np.isnan(v).any() for v in got)


def test_the_oracle_judges_a_bool_output_in_its_own_dtype() -> None:
    """checks: an input's declared dtype must be the case dtype, and a comparison's bool output
    is judged as a bool (:func:`.graphs.build.infer_dtypes`): an exact tie flipped is a finding
    in every case dtype."""
    graph = {"inputs": [{"name": "a", "shape": [4], "dtype": "float16"},
                        {"name": "b", "shape": [4], "dtype": "float16"}],
             "nodes": [dict(node("g", "gt", ["a", "b"], [4]), dtype="bool")],
             "outputs": ["g"]}
    values = [np.array([1, 2, 3, 4], np.float32), np.array([1, 1, 4, 4], np.float32)]
    inputs = {"graph": graph, "dtype": "float16", "dynamic": False, "values": values}
    assert checks.validate(inputs) is None
    assert "dtype float16, but the case runs in float32" in checks.validate(
        {**inputs, "dtype": "float32"})
    expected = tc.reference(inputs)
    right = np.array([0.0, 1.0, 0.0, 0.0])
    assert checks.oracle(inputs, expected, {"outputs": [right]}) is None
    ge = np.array([1.0, 1.0, 0.0, 1.0])  # ``>`` compiled as ``>=``: the ties flip
    failure = checks.oracle(inputs, expected, {"outputs": [ge]})
    assert failure is not None and failure.signature == "mismatch:gt:float16:value"


def test_a_tie_resolved_the_wrong_way_is_caught() -> None:
    """``where(a > b, c, d)`` on exact inputs with a == b somewhere: the compiled result taking
    ``c`` there (``>`` evaluated as ``>=``) is a value mismatch, in every dtype."""
    graph = {"inputs": [{"name": k, "shape": [6]} for k in "abcd"],
             "nodes": [node("w", "where_gt", ["a", "b", "c", "d"], [6])], "outputs": ["w"]}
    a = np.array([1, 2, 3, 0, -1, 2], np.float32)
    b = np.array([1, 1, 4, -0.0, -1, 3], np.float32)
    for dtype in ("float32", "float16", "bfloat16"):
        inputs = {"graph": graph, "dtype": dtype, "dynamic": False,
                  "values": [a, b, np.full(6, 0.5, np.float32), np.full(6, -0.5, np.float32)]}
        expected = tc.reference(inputs)
        assert checks.oracle(inputs, expected, rounded(expected, dtype)) is None
        ge = np.where(a >= b, 0.5, -0.5)
        failure = checks.oracle(inputs, expected, {"outputs": [ge]})
        assert failure is not None and failure.signature == f"mismatch:where_gt:{dtype}:value"
