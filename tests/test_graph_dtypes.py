"""Per-value dtypes of compiler graphs and the typed op family (issue 23).

Every value of a graph has a dtype (:data:`ops.VALUE_DTYPES`): the ops' ``dtype_rule`` infers it,
the generator draws only operands an op takes, the float64 reference keeps ints and bools exact,
and the bound treats a bool / int result as certain (compared exactly) or uncertain (off by at
most its uncertainty).  Each rule is shown to catch a deliberately wrong result and to let a
legitimate one pass."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("z3")

from fuzzkit import case as casefile  # noqa: E402
from fuzzkit.targets.compiler import checks  # noqa: E402
from fuzzkit.targets.compiler.graphs import (  # noqa: E402
    bound,
    build,
    generate,
    ops,
    ops_typed,
    values,
)

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "compiler"
TYPED = [r.name for r in ops_typed.RECORDS]


def _node(name: str, op: str, args: list[str], shape: list[int], **attrs) -> dict:
    return {"name": name, "op": op, "args": args, "attrs": attrs, "shape": shape}


def _graph(inputs: dict[str, list[int]], nodes: list[dict], outputs: list[str]) -> dict:
    return {"inputs": [{"name": k, "shape": v} for k, v in inputs.items()], "nodes": nodes,
            "outputs": outputs}


def _verdict(graph: dict, vals: list, actual: np.ndarray, dtype: str, out: str | None = None):
    """checks.compare of ``actual`` (the output ``out``, default the last node) against the
    reference under the bound -- what the oracle does for that output."""
    out = out or graph["nodes"][-1]["name"]
    ref = build.run_reference(graph, vals)
    bounds = bound.error_bounds(graph, ref, dtype)
    vd = build.value_dtypes(graph, dtype)[out]
    return checks.compare(out, ref[out], np.asarray(actual, np.float64), bounds[out], dtype,
                          value_dtype=vd)


# ---------------------------------------------------------------------------------------------
# the catalogue


def test_the_typed_family_has_its_ops_and_every_record_is_complete() -> None:
    assert len(TYPED) >= 18
    for name in TYPED:
        assert ops.missing_parts(ops.OPS[name]) == [], name
        assert ops.OPS[name].fusing is None  # eager in the fusing compiler


def test_the_default_dtype_rule_takes_floats_and_promotes() -> None:
    add = ops.OPS["add"].dtype_rule
    assert add(["float16", "float16"], {}) == "float16"
    assert add(["float16", "bfloat16"], {}) == "float32"  # torch.promote_types
    assert add(["float16", "float32"], {}) == "float32"
    assert add(["int32", "float16"], {}) is None and add(["bool", "bool"], {}) is None
    # layout ops copy any one dtype
    assert ops.OPS["permute"].dtype_rule(["bool"], {}) == "bool"
    assert ops.OPS["cat"].dtype_rule(["int64", "int64"], {}) == "int64"
    assert ops.OPS["cat"].dtype_rule(["float16", "float32"], {}) is None  # would round
    assert ops.OPS["gt"].dtype_rule(["float16", "int64"], {}) == "bool"
    assert ops.OPS["where"].dtype_rule(["bool", "int64", "float16"], {}) == "float16"
    assert ops.OPS["where"].dtype_rule(["float16", "float16", "float16"], {}) is None
    assert ops.OPS["argmax"].dtype_rule(["bfloat16"], {}) == "int64"
    assert ops.OPS["sum_int"].dtype_rule(["bool"], {}) == "int64"
    assert ops.OPS["sum_int"].dtype_rule(["float32"], {}) is None


# ---------------------------------------------------------------------------------------------
# validation: old graphs load unchanged, dtype keys are checked


def test_checked_in_graphs_without_dtype_keys_still_validate_as_all_float() -> None:
    paths = sorted((CORPUS / "regressions").glob("*.json"))
    assert paths
    for path in paths:
        case = casefile.load(path)
        graph = case.inputs["graph"]
        assert "dtype" not in json.dumps(graph["nodes"])
        assert build.validate_graph(graph, case.inputs["dtype"]) is None, path
        dts = build.value_dtypes(graph, case.inputs["dtype"])
        assert set(dts.values()) == {case.inputs["dtype"]}, path


def test_dtype_keys_must_match_what_the_rules_infer() -> None:
    g = _graph({"x0": [3]}, [_node("n0", "gt", ["x0", "x0"], [3]),
                             _node("n1", "logical_not", ["n0"], [3])], ["n1"])
    assert build.validate_graph(g) is None
    assert build.value_dtypes(g, "float16") == {"x0": "float16", "n0": "bool", "n1": "bool"}
    g["nodes"][1]["dtype"] = "bool"
    g["inputs"][0]["dtype"] = "float16"
    assert build.validate_graph(g, "float16") is None
    assert build.validate_graph(g, "float32") == (
        "input 'x0': dtype float16, but the case runs in float32")
    g["nodes"][1]["dtype"] = "int64"
    assert build.validate_graph(g) == "node 'n1': dtype 'int64' but logical_not makes bool"
    g["nodes"][1]["dtype"] = "bool"
    g["inputs"][0]["dtype"] = "int64"  # graph inputs are floating
    assert "input 'x0': dtype must be one of" in build.validate_graph(g)
    g["inputs"][0]["dtype"] = "float16"
    # an op whose rule refuses its operands: one line
    g["nodes"].append(_node("n2", "exp", ["n1"], [3]))
    g["outputs"] = ["n2"]
    assert build.validate_graph(g) == "node 'n2': exp does not take operands of dtype bool"
    g["nodes"][-1] = _node("n2", "to_dtype", ["n1"], [3], dtype="complex64")
    assert "must be one of" in build.validate_graph(g)


def test_a_subgraph_cut_keeps_the_producers_of_bool_and_int_values() -> None:
    """Graph inputs are floats: a cut through a bool keeps the comparison that made it (and a
    cut through an int its cast), so every window of a typed graph is a valid graph."""
    nodes = [_node("t0", "exp", ["x0"], [6]), _node("c", "gt", ["t0", "x1"], [6]),
             _node("i", "to_dtype", ["c"], [6], dtype="int32"),
             _node("n0", "bitwise_xor", ["i", "i"], [6])]
    g = _graph({"x0": [6], "x1": [6]}, nodes, ["n0"])
    sub = build.subgraph(g, ["n0"], ["n0"])
    assert [n["name"] for n in sub["nodes"]] == ["c", "i", "n0"]
    assert [i["name"] for i in sub["inputs"]] == ["t0", "x1"]
    assert build.validate_graph(sub) is None
    for seed in range(10):
        g = generate.generate(np.random.default_rng(seed), 8, dtype="float16")
        names = [n["name"] for n in g["nodes"]]
        for k in range(len(names)):
            sub = build.subgraph(g, names[k:], [names[-1]])
            assert all("dtype" not in n for n in sub["nodes"])  # inferred again
            assert build.validate_graph(sub, "float16") is None, (seed, k)


# ---------------------------------------------------------------------------------------------
# generation


def test_generated_graphs_carry_dtypes_the_rules_agree_with_and_mix_them() -> None:
    seen: set[str] = set()
    for seed in range(25):
        g = generate.generate(np.random.default_rng(seed), 10, dtype="bfloat16")
        assert all(i["dtype"] == "bfloat16" for i in g["inputs"])
        assert build.validate_graph(g, "bfloat16") is None, seed
        seen |= {n["dtype"] for n in g["nodes"]}
        again = generate.generate(np.random.default_rng(seed), 10, dtype="bfloat16")
        assert again == g  # deterministic
    assert {"bool", "int64", "bfloat16"} <= seen


@pytest.mark.parametrize("op", ["logical_and", "where", "masked_fill", "sum_int",
                                "bitwise_xor", "remainder_int"])
def test_the_generator_makes_the_operands_a_typed_op_needs(op: str) -> None:
    g = generate.generate(np.random.default_rng(0), 1, [op], keep=8)
    node = next(n for n in g["nodes"] if n["op"] == op)
    dts = build.value_dtypes(g)
    assert ops.OPS[op].dtype_rule([dts[a] for a in node["args"]], node["attrs"]) is not None


def test_a_float_cast_to_an_integer_is_clamped_into_range_first() -> None:
    casts = 0
    for seed in range(40):
        g = generate.generate(np.random.default_rng(seed), 8, ["exp", "mul", "to_dtype"])
        dts = build.value_dtypes(g)
        ranges = generate.value_intervals(g)
        for n in g["nodes"]:
            if n["op"] == "to_dtype" and n["attrs"]["dtype"] in ops.INT_DTYPES and \
                    ops.is_float_dtype(dts[n["args"][0]]):
                casts += 1  # the magnitude guard keeps the truncated value in range
                lo, hi = ranges[n["name"]]
                assert max(abs(lo), abs(hi)) <= generate.MAGNITUDE_LIMIT, (seed, n)
    assert casts >= 5


# ---------------------------------------------------------------------------------------------
# the reference


def test_the_reference_keeps_float_casts_exact_and_truncates_to_int() -> None:
    g = _graph({"x0": [4]}, [_node("n0", "to_dtype", ["x0"], [4], dtype="float16"),
                             _node("n1", "to_dtype", ["x0"], [4], dtype="int32"),
                             _node("n2", "to_dtype", ["n1"], [4], dtype="bfloat16")],
               ["n0", "n2"])
    x = np.array([0.1, -2.7, 2.7, 1e-3])
    ref = build.run_reference(g, [x])
    assert np.array_equal(ref["n0"], x)  # identity: the rounding is the bound's
    assert np.array_equal(ref["n1"], [0, -2, 2, 0])  # trunc
    eager = build.run_eager(g, [x], "float32")
    assert eager["n0"][0] != x[0]  # the real run rounds to float16
    bounds = bound.error_bounds(g, ref, "float32")
    assert np.all(np.abs(eager["n0"] - ref["n0"]) <= bounds["n0"])
    assert bounds["n0"][0] > 0 and bounds["n2"].tolist() == [0, 0, 0, 0]


# ---------------------------------------------------------------------------------------------
# the bound and compare: strict where certain, tolerant where uncertain


def _tie_graph(op: str = "gt", through: str | None = None) -> dict:
    nodes, a, b = [], "x0", "x1"
    if through:
        nodes += [_node("t0", through, ["x0"], [6]), _node("t1", through, ["x1"], [6])]
        a, b = "t0", "t1"
    nodes.append(_node("n0", op, [a, b], [6]))
    return _graph({"x0": [6], "x1": [6]}, nodes, ["n0"])


_X0 = np.array([1.0, 2.0, -3.0, 0.5, 4.0, -1.0])
_X1 = np.array([1.0, 3.0, -3.0, 0.25, 4.0, 2.0])  # ties at 0, 2, 4


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_gt_evaluated_as_ge_on_exact_ties_is_caught(dtype: str) -> None:
    g = _tie_graph("gt")
    right = (_X0 > _X1).astype(np.float64)
    wrong = (_X0 >= _X1).astype(np.float64)  # the miscompile issue 23 tried inside Inductor
    assert _verdict(g, [_X0, _X1], right, dtype) is None
    bad = _verdict(g, [_X0, _X1], wrong, dtype)
    assert bad is not None and bad["error_class"] == "value" and bad["count"] == 3


def test_an_uncertain_tie_is_not_a_false_alarm_but_a_separated_flip_is_caught() -> None:
    g = _tie_graph("gt", through="exp")  # exp rounds: e > 0, the ties are uncertain
    ref = build.run_reference(g, [_X0, _X1])
    b = bound.error_bounds(g, ref, "float16")["n0"]
    assert b.tolist() == [1, 0, 1, 0, 1, 0]
    ge = (np.exp(_X0) >= np.exp(_X1)).astype(np.float64)
    assert _verdict(g, [_X0, _X1], ge, "float16") is None  # either outcome of a tie is fine
    flipped = ge.copy()
    flipped[3] = 1 - flipped[3]  # exp(0.5) vs exp(0.25): separated, decided
    assert _verdict(g, [_X0, _X1], flipped, "float16")["error_class"] == "value"


def test_one_value_compared_with_itself_is_decided_even_with_error() -> None:
    g = _graph({"x0": [6]}, [_node("t0", "exp", ["x0"], [6]),
                             _node("n0", "gt", ["t0", "t0"], [6])], ["n0"])
    assert _verdict(g, [_X0], np.zeros(6), "float16") is None
    assert _verdict(g, [_X0], np.ones(6), "float16")["count"] == 6  # exp(x) > exp(x)


def test_where_on_an_uncertain_condition_covers_either_branch_only_there() -> None:
    nodes = [_node("t0", "exp", ["x0"], [6]), _node("t1", "exp", ["x1"], [6]),
             _node("c", "gt", ["t0", "t1"], [6]), _node("n0", "where", ["c", "x0", "x2"], [6])]
    g = _graph({"x0": [6], "x1": [6], "x2": [6]}, nodes, ["n0"])
    x2 = np.array([7.0, -7.0, 7.0, -7.0, 7.0, -7.0])
    right = np.where(np.exp(_X0) > np.exp(_X1), _X0, x2)
    other = np.where(np.exp(_X0) >= np.exp(_X1), _X0, x2)  # the other branch at the ties
    assert _verdict(g, [_X0, _X1, x2], right, "float16") is None
    assert _verdict(g, [_X0, _X1, x2], other, "float16") is None
    wrong = right.copy()
    wrong[1] = _X0[1]  # a decided condition took the wrong branch
    assert _verdict(g, [_X0, _X1, x2], wrong, "float16")["error_class"] == "value"


def test_a_float_to_int_cast_is_exact_away_from_integer_boundaries() -> None:
    g = _graph({"x0": [4], "x1": [4]}, [_node("t0", "mul", ["x0", "x1"], [4]),
                                        _node("n0", "to_dtype", ["t0"], [4], dtype="int32")],
               ["n0"])
    x0 = np.array([0.1, 3.0, 0.3, 1.5])
    x1 = np.array([10.0, 0.5, 3.0, 1.5])  # 1.0000000149, 1.5, 0.9000000358, 2.25
    x0 = values.round_to_dtype(x0, "float32").astype(np.float64)
    ref = build.run_reference(g, [x0, x1])
    b = bound.error_bounds(g, ref, "float32")["n0"]
    assert b[1] == 0 and b[3] == 0  # far from a boundary: exact
    assert b[0] == 1  # 0.1f * 10 is within one rounding of 1.0: trunc may be 0 or 1
    assert _verdict(g, [x0, x1], [0, 1, 0, 2], "float32") is None
    assert _verdict(g, [x0, x1], [1, 1, 0, 2], "float32") is None  # the other side of 1.0
    assert _verdict(g, [x0, x1], [1, 2, 0, 2], "float32")["error_class"] == "value"


def test_nan_cast_to_int_is_unjudged_never_a_finding() -> None:
    g = _graph({"x0": [3]}, [_node("n0", "to_dtype", ["x0"], [3], dtype="int64")], ["n0"])
    x = np.array([np.nan, np.inf, 2.5])
    ref = build.run_reference(g, [x])
    b = bound.error_bounds(g, ref, "float32")["n0"]
    assert np.isnan(b[:2]).all() and b[2] == 0
    assert _verdict(g, [x], [123, -9, 2], "float32") is None
    assert _verdict(g, [x], [123, -9, 3], "float32")["error_class"] == "value"


def test_argmax_of_an_exact_tie_is_the_first_index_and_of_an_uncertain_one_any() -> None:
    exact = _graph({"x0": [2, 4]}, [_node("n0", "argmax", ["x0"], [2], dim=1, keepdim=False)],
                   ["n0"])
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, -1.0, 2.0, 2.0]])
    assert _verdict(exact, [x], [1, 0], "float16") is None
    assert _verdict(exact, [x], [2, 0], "float16")["error_class"] == "value"  # last of a tie
    near = _graph({"x0": [2, 4]}, [_node("t0", "exp", ["x0"], [2, 4]),
                                   _node("n0", "argmax", ["t0"], [2], dim=1, keepdim=False)],
                  ["n0"])
    assert _verdict(near, [x], [2, 3], "float16") is None  # exp rounds: a tie may go any way
    # row 0 may only give 1 or 2 (the 3s): index 3 is off by more than the candidates' spread
    assert _verdict(near, [x], [3, 1], "float16")["error_class"] == "value"


def test_logical_ops_propagate_certainty() -> None:
    nodes = [_node("t0", "exp", ["x0"], [6]), _node("t1", "exp", ["x1"], [6]),
             _node("u", "gt", ["t0", "t1"], [6]),  # uncertain at the ties
             _node("c", "lt", ["x0", "x1"], [6]),  # exact: false at the ties
             _node("n0", "logical_and", ["u", "c"], [6]),
             _node("n1", "logical_or", ["u", "c"], [6])]
    g = _graph({"x0": [6], "x1": [6]}, nodes, ["n0", "n1"])
    ref = build.run_reference(g, [_X0, _X1])
    b = bound.error_bounds(g, ref, "float16")
    assert b["n0"].tolist() == [0] * 6  # and with a certain False is decided
    assert b["n1"].tolist() == [1, 0, 1, 0, 1, 0]


def test_compare_is_exact_for_ints_and_names_a_dtype_mismatch() -> None:
    e = np.array([0.0, 1.0, 5.0])
    assert checks.compare("n", e, e, np.zeros(3), "float16", value_dtype="int64") is None
    off = e + np.array([0, 0, 1e-5])  # below a float16 output's subnormal floor, not an int's
    assert checks.compare("n", e, off, np.zeros(3), "float16") is None
    assert checks.compare("n", e, off, np.zeros(3), "float16", value_dtype="int64") is not None
    bad = checks.compare("n", e, e, np.zeros(3), "float16", value_dtype="bool",
                         actual_dtype="torch.float16")
    assert bad == {"error_class": "dtype", "expected_dtype": "bool", "actual_dtype": "float16"}
    assert checks.compare("n", e, e, np.zeros(3), "float16", value_dtype="int64",
                          actual_dtype="int64") is None


# ---------------------------------------------------------------------------------------------
# soundness on generated graphs: eager runs in each dtype stay within the bounds


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_eager_runs_of_generated_typed_graphs_stay_within_their_bounds(dtype: str) -> None:
    typed = [n for n in TYPED] + ["exp", "mul", "add", "sum", "amax", "permute", "cat"]
    judged = 0
    for seed in range(30):
        g = generate.generate(np.random.default_rng(seed), 8, typed, dtype=dtype)
        kind = ("ints", "repeated", "mixed")[seed % 3]  # small ints and repeats: ties
        vals = [values.make_array(kind, i["shape"], seed + k, dtype)
                for k, i in enumerate(g["inputs"])]
        ref = build.run_reference(g, vals)
        eager = build.run_eager(g, vals, dtype)
        bounds = bound.error_bounds(g, ref, dtype)
        dts = build.value_dtypes(g, dtype)
        for out in g["outputs"]:
            verdict = checks.compare(out, ref[out], eager[out], bounds[out], dtype,
                                     value_dtype=dts[out])
            assert verdict is None, (seed, out, verdict)
            judged += int(np.sum(bounds[out] == 0))
    assert judged > 100  # many elements are certain, so compared exactly


# ---------------------------------------------------------------------------------------------
# the fusing compiler leaves int / bool values to eager torch and keeps each value's dtype


def test_fusing_groups_stop_at_non_float_values_and_keep_result_dtypes() -> None:
    pytest.importorskip("triton")
    from fuzzkit.targets.compiler.fusing import runtime

    nodes = [_node("t0", "to_dtype", ["x0"], [4, 8], dtype="float32"),
             _node("t1", "exp", ["t0"], [4, 8]),
             _node("t2", "mul", ["t1", "x1"], [4, 8]),  # float32 x float16: float32
             _node("c", "gt", ["t2", "x1"], [4, 8]),
             _node("n0", "where", ["c", "t2", "x1"], [4, 8])]
    g = _graph({"x0": [4, 8], "x1": [4, 8]}, nodes, ["t2", "n0"])
    xs = [torch.linspace(-2, 2, 32).reshape(4, 8).half(), torch.ones(4, 8).half()]
    program = runtime.FusedProgram(build.to_graph_module(g), xs)
    fused = {n.name for grp in program.groups for n in grp.nodes}
    assert {"t1", "t2"} <= fused and not fused & {"c", "n0"}
    outs = program(*xs)
    assert [o.dtype for o in outs] == [torch.float32, torch.float32]
    eager = build.run_eager(g, xs, "float16")
    assert np.allclose(outs[0].double().numpy(), eager["t2"], rtol=1e-6)


@pytest.mark.parametrize("op", TYPED)
def test_a_wrong_value_at_a_certain_element_of_each_typed_op_is_caught(op: str) -> None:
    """Each typed op's rule both ways: the eager float16 run passes, and the same result with
    one element the bound calls certain (0) changed by one -- a flipped bool, an index or count
    off by one -- fails."""
    rng = np.random.default_rng(1)
    for seed in range(40):
        g = generate.generate(rng, 1, [op], keep=8, dtype="float16")
        node = next((n for n in g["nodes"] if n["op"] == op), None)
        if node is None or not np.prod(node["shape"]):
            continue
        g = build.prefix(g, g["nodes"].index(node))
        g["outputs"] = [node["name"]]
        vals = [values.make_array("ints", i["shape"], seed + k, "float16")
                for k, i in enumerate(g["inputs"])]
        ref = build.run_reference(g, vals)[node["name"]]
        b = bound.error_bounds(g, build.run_reference(g, vals), "float16")[node["name"]]
        certain = np.argwhere((b == 0) & np.isfinite(ref))
        if not len(certain):
            continue
        eager = build.run_eager(g, vals, "float16")[node["name"]]
        assert _verdict(g, vals, eager, "float16") is None
        wrong = np.array(eager, dtype=np.float64, copy=True)
        at = tuple(certain[0])
        wrong[at] = 1 - wrong[at] if node["dtype"] == "bool" else wrong[at] + 1
        assert _verdict(g, vals, wrong, "float16")["error_class"] == "value"
        return
    raise AssertionError(f"no {op} case with a certain element")  # pragma: no cover


# ---------------------------------------------------------------------------------------------
# real Inductor: the miscompile issue 23 tried by hand is caught now


def test_inductor_gt_compiled_as_ge_on_exact_ties_is_caught_and_the_real_one_passes() -> None:
    """Two Inductor compiles (C++ on CPU): the graph as is passes the oracle; the same graph
    with its ``gt`` swapped for ``ge`` before compiling (a ``>`` lowered as ``>=``) fails it at
    the exact ties, on the bool output and through the ``where`` it feeds."""
    from fuzzkit.targets.compiler import inductor

    nodes = [_node("c", "gt", ["x0", "x1"], [6]), _node("n0", "where", ["c", "x0", "x2"], [6])]
    g = _graph({"x0": [6], "x1": [6], "x2": [6]}, nodes, ["c", "n0"])
    x2 = np.full(6, -7.0)
    vals = [_X0, _X1, x2]
    xs = [torch.tensor(v, dtype=torch.float16) for v in vals]
    ref = build.run_reference(g, vals)
    bounds = bound.error_bounds(g, ref, "float16")
    dts = build.value_dtypes(g, "float16")

    def verdicts(swap: bool) -> list:
        gm = build.to_graph_module(g)
        if swap:
            for n in gm.graph.nodes:
                if n.target is ops_typed.gt:
                    n.target = ops_typed.ge
            gm.recompile()
        outs = inductor.compile_fx(gm, xs)(*xs)
        assert [o.dtype for o in outs] == [torch.bool, torch.float16]
        return [checks.compare(k, ref[k], o.double().numpy(), bounds[k], "float16",
                               value_dtype=dts[k], actual_dtype=str(o.dtype))
                for k, o in zip(g["outputs"], outs)]

    assert verdicts(swap=False) == [None, None]
    caught = verdicts(swap=True)
    assert [v["error_class"] for v in caught] == ["value", "value"]
    assert caught[0]["count"] == 3  # the three exact ties


def test_a_generated_graph_is_valid_in_every_case_dtype() -> None:
    """The strategy may run one graph in any float dtype: a float32 cast next to the inputs is
    float32 against float16 inputs in one case and against float32 ones in another, and ops
    like matmul take one dtype only -- the generator keeps an op only where every case works."""
    for seed in range(30):
        g = generate.generate(np.random.default_rng(seed), 12, ["to_dtype", "matmul", "bmm",
                                                                 "add", "cat", "where", "gt"])
        for dtype in ("float32", "float16", "bfloat16"):
            assert build.value_dtypes(g, dtype, keys=False), (seed, dtype)


@pytest.mark.parametrize("op", ["layer_norm", "softmax", "log_softmax", "argmax"])
def test_a_zero_size_row_of_a_shape_variant_has_an_empty_bound_not_a_crash(op: str) -> None:
    """Dynamic-shape variants run a graph on 0-sized dims too; the row rules' max over an empty
    dim used to raise inside the oracle (found by a short Inductor campaign)."""
    attrs = {"dim": 0} if op != "argmax" else {"dim": 1, "keepdim": False}
    out = [0, 3] if op != "argmax" else [3]
    shape = [0, 3] if op != "argmax" else [3, 0]
    g = _graph({"x0": shape}, [_node("n0", op, ["x0"], out, **attrs)], ["n0"])
    x = np.zeros(shape)
    ref = {"x0": x, "n0": np.zeros(out)}
    with np.errstate(all="ignore"), __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore")
        b = bound.error_bounds(g, ref, "float16")["n0"]
    assert b.shape == tuple(out) and not np.isnan(b).any()
