"""The ``elementwise`` op family (``targets/compiler/graphs/ops_elementwise.py``): float ops beyond
the core, with the parts ``tests/test_graph_ops.py`` checks for every op, and here what is special
to the discontinuous ones -- the compiler oracle decides an *exact* input exactly (a wrong
compiled decision at a tie or a jump is caught), but does not raise a false alarm where the
input's error interval reaches the jump (any side of it is a legitimate result) -- plus a few
real Inductor runs of one-node graphs."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

torch = pytest.importorskip("torch")

from fuzzkit.targets.compiler import checks  # noqa: E402
from fuzzkit.targets.compiler.graphs import bound, build, generate, ops  # noqa: E402
from fuzzkit.targets.compiler.graphs import ops_elementwise as ew  # noqa: E402
from fuzzkit.targets.compiler.graphs.ops import OPS  # noqa: E402

NAMES = [r.name for r in ew.RECORDS]


def test_the_family_adds_at_least_thirty_complete_float_ops() -> None:
    assert len(NAMES) >= 30 and len(set(NAMES)) == len(NAMES)
    for r in ew.RECORDS:
        assert OPS[r.name] is r and ops.missing_parts(r) == [], r.name
        # the torch function is this module's function of the op's name (its fx import path)
        assert r.torch_fn.__module__ == ew.__name__ and r.torch_fn.__name__ == r.name
        assert ops.op_of(r.torch_fn) == r.name and r.fusing is None
        assert r.dtype_rule(["float32"] * r.arity, {}) == "float32"


@pytest.mark.parametrize("op", NAMES)
def test_attribute_grids_are_valid_and_reach_their_edges(op: str) -> None:
    """Every drawn attribute set is one the record's declarations accept, and the draws reach
    more than one value of every attribute (edge values are drawn, not just the default)."""
    spec = OPS[op]
    rng = np.random.default_rng(0)
    seen: dict[str, set] = {k: set() for k in spec.attributes}
    for _ in range(200):
        attrs = spec.sample_attrs(rng, [2] * spec.arity)
        assert spec.attrs_problem(attrs) is None, (op, attrs)
        spec.out_shape([[3, 4]] * spec.arity, attrs)  # well formed
        for k, v in attrs.items():
            seen[k].add(v)
    assert all(len(v) > 1 for v in seen.values()), seen


def test_attributes_from_a_file_are_checked() -> None:
    assert "must be in" in OPS["round"].attrs_problem({"decimals": 9})
    assert "must be finite" in OPS["threshold"].attrs_problem(
        {"threshold": math.inf, "value": 0.0})
    assert OPS["nan_to_num"].attrs_problem({"nan": 0.0, "posinf": math.inf, "neginf": -4.0})
    # no dtype-dependent default: float64 and the run's dtype would disagree (a campaign finding)
    assert OPS["nan_to_num"].attrs_problem({"nan": 0.0, "posinf": 4.0, "neginf": None})
    with pytest.raises(ops.SpecError, match="nonzero beta"):
        OPS["softplus"].out_shape([[2]], {"beta": 0.0, "threshold": 20.0})
    with pytest.raises(ops.SpecError, match="min_val <= max_val"):
        OPS["hardtanh"].out_shape([[2]], {"min_val": 1.0, "max_val": -1.0})


# ---------------------------------------------------------------------------------------------
# discontinuous ops: decided exactly at exact inputs, no false alarm where the error interval
# reaches a jump


def _graph(op: str, attrs: dict, arity: int, perturbed: bool, n: int) -> dict:
    """A one-node graph of ``op`` on graph inputs (exact), or with its first operand made by
    ``add(x0, z)`` first (``perturbed``: an error interval of a float32 rounding around it)."""
    inputs = [{"name": f"x{i}", "shape": [n]} for i in range(arity + perturbed)]
    nodes = []
    args = [f"x{i}" for i in range(arity)]
    if perturbed:
        nodes.append({"name": "p", "op": "add", "args": ["x0", f"x{arity}"], "attrs": {},
                      "shape": [n]})
        args[0] = "p"
    nodes.append({"name": "y", "op": op, "args": args, "attrs": attrs, "shape": [n]})
    graph = {"inputs": inputs, "nodes": nodes, "outputs": ["y"]}
    assert build.validate_graph(graph) is None
    return graph


def _verdict(op: str, attrs: dict, operands: list[list[float]], actual: list[float],
             perturbed: bool = False, dtype: str = "float32") -> dict | None:
    """The oracle's divergence of a fake compiled output ``actual`` for ``op`` on ``operands``."""
    n = len(operands[0])
    values = [np.array(v, dtype=np.float32) for v in operands]
    if perturbed:
        values.append(np.zeros(n, dtype=np.float32))
    graph = _graph(op, attrs, len(operands), perturbed, n)
    ref = build.run_reference(graph, values)
    inputs = {"graph": graph, "dtype": dtype, "values": values}
    expected = {"outputs": [ref["y"]], "intermediates": ref}
    return checks.divergence(inputs, expected, {"outputs": [np.array(actual, np.float64)]})


#: (op, attrs, operands at exact decided points, the reference there, a wrong decision there,
#: a value the op legitimately takes just across the jump)
DISCONTINUOUS = [
    ("floor", {}, [[3.0, -2.0, -0.5]], [3.0, -2.0, -1.0], [2.0, -3.0, 0.0], [2.0, -3.0, -1.0]),
    ("ceil", {}, [[3.0, -2.0, 0.5]], [3.0, -2.0, 1.0], [4.0, -1.0, 0.0], [4.0, -1.0, 1.0]),
    ("trunc", {}, [[3.0, -2.0, -0.5]], [3.0, -2.0, -0.0], [2.0, -1.0, -1.0], [2.0, -1.0, 0.0]),
    # half to even; a half-away-from-zero compiler is wrong at every tie
    ("round", {"decimals": 0}, [[2.5, -0.5, 3.5]], [2.0, -0.0, 4.0], [3.0, -1.0, 3.0],
     [3.0, -1.0, 3.0]),
    ("round", {"decimals": 1}, [[0.25, -0.75, 1.5]], [0.2, -0.8, 1.5], [0.3, -0.7, 1.6],
     [0.3, -0.7, 1.5]),
    ("frac", {}, [[3.0, -2.0, 1.5]], [0.0, -0.0, 0.5], [1.0, -1.0, 0.5], [1.0, -1.0, 0.5]),
    ("sign", {}, [[0.0, 2.0, -3.0]], [0.0, 1.0, -1.0], [1.0, 0.0, 0.0], [1.0, 1.0, -1.0]),
    ("sgn", {}, [[0.0, -0.0, 1.0]], [0.0, 0.0, 1.0], [-1.0, 1.0, 0.0], [-1.0, 1.0, 1.0]),
    # x > threshold keeps x: the tie x == threshold gives value
    ("threshold", {"threshold": 1.0, "value": -1.0}, [[1.0, 2.0, 1.0]], [-1.0, 2.0, -1.0],
     [1.0, -1.0, 1.0], [1.0, 2.0, 1.0]),
    ("hardshrink", {"lambd": 0.5}, [[0.5, -0.5, 1.0]], [0.0, 0.0, 1.0], [0.5, -0.5, 0.0],
     [0.5, -0.5, 1.0]),
    ("fmod", {}, [[3.0, -3.0, 2.0], [1.5, 1.5, -1.0]], [0.0, -0.0, 0.0], [1.5, -1.5, 1.0],
     [1.5, -1.5, 1.0]),
    ("remainder_tensor", {}, [[3.0, -3.0, 2.0], [1.5, 1.5, -1.0]], [0.0, 0.0, -0.0],
     [1.5, 1.5, -1.0], [1.5, 0.0, -1.0]),
    ("floor_divide_tensor", {}, [[3.0, -3.0, 2.0], [1.5, 1.5, -1.0]], [2.0, -2.0, -2.0],
     [1.0, -3.0, -3.0], [1.0, -3.0, -3.0]),
    ("heaviside", {}, [[0.0, -0.0, 0.0], [0.5, 0.5, 0.5]], [0.5, 0.5, 0.5], [1.0, 0.0, 0.0],
     [1.0, 0.0, 0.5]),
    ("copysign", {}, [[2.0, 2.0, 3.0], [1.0, -1.0, -2.0]], [2.0, -2.0, -3.0], [-2.0, 2.0, 3.0],
     None),
    ("atan2", {}, [[1.0, -1.0, 0.5], [-1.0, -1.0, -2.0]], None, "negate", None),
    ("softplus", {"beta": 1.0, "threshold": 1.0}, [[1.0, 2.0, 0.5]], None, None, None),
]


@pytest.mark.parametrize("op,attrs,operands,ref,wrong,across", DISCONTINUOUS,
                         ids=[f"{c[0]}-{c[1]}" for c in DISCONTINUOUS])
def test_a_wrong_decision_at_an_exact_input_is_caught(op, attrs, operands, ref, wrong, across
                                                      ) -> None:
    spec = OPS[op]
    y = build.run_reference(_graph(op, attrs, len(operands), False, len(operands[0])),
                            [np.array(v, np.float32) for v in operands])["y"]
    if ref is not None:
        np.testing.assert_array_equal(y, ref)  # the reference decides as stated
    assert _verdict(op, attrs, operands, list(y)) is None  # the right answer passes
    if wrong == "negate":  # atan2 off the branch cut: the other side's angle
        wrong = list(-y)
    elif wrong is None:  # softplus: the other branch (x at the tie beta x == threshold)
        wrong = [x if x <= 1.0 else math.log1p(math.exp(x)) for x in operands[0]]
    div = _verdict(op, attrs, operands, wrong)
    assert div is not None and div["op"] == op and div["error_class"] == "value", div
    assert spec.error is not None


@pytest.mark.parametrize("op,attrs,operands,ref,wrong,across",
                         [c for c in DISCONTINUOUS if c[5] is not None],
                         ids=[f"{c[0]}-{c[1]}" for c in DISCONTINUOUS if c[5] is not None])
def test_an_error_interval_that_reaches_the_jump_is_no_false_alarm(
        op, attrs, operands, ref, wrong, across) -> None:
    """With the first operand made by an ``add`` (so known only within a rounding), the value
    just across the jump is a legitimate result: not flagged.  The same value from exact inputs
    is (previous test), so the straddle is what excuses it."""
    assert _verdict(op, attrs, operands, across, perturbed=True) is None
    assert _verdict(op, attrs, operands, across, perturbed=False) is not None


def test_a_zero_sign_is_never_taken_as_certain() -> None:
    """copysign by a zero and atan2 on its branch cut: a selection op upstream may return
    ``-0.0`` where the reference has ``+0.0``, so either sign passes; a nonzero sign does not."""
    assert _verdict("copysign", {}, [[2.0, 2.0], [0.0, -0.0]], [-2.0, 2.0]) is None
    assert _verdict("copysign", {}, [[2.0], [1.0]], [-2.0]) is not None
    assert _verdict("atan2", {}, [[0.0, -0.0], [-1.0, -1.0]], [-math.pi, math.pi]) is None
    assert _verdict("atan2", {}, [[1e-3], [-1.0]], [-math.pi]) is not None


def test_floor_bound_is_one_plus_the_error_where_it_straddles() -> None:
    """The documented size of a straddling floor's bound: the jump of 1 (no more than the
    interval's integers), and nothing at exact inputs."""
    x = np.array([3.0, 3.5])
    e = np.array([1e-7, 1e-7])
    o = ops.OPS["floor"]
    from fuzzkit.targets.compiler.graphs.error_rules import Operands

    prop, comp = o.error(Operands([x], [e], np.floor(x), np.floor(x), 2.0**-24, {}, False,
                                  o.torch_fn))
    np.testing.assert_array_equal(prop, [1.0, 0.0])
    prop0, _ = o.error(Operands([x], [np.zeros(2)], np.floor(x), np.floor(x), 2.0**-24, {}, False,
                                o.torch_fn))
    np.testing.assert_array_equal(prop0, [0.0, 0.0])
    assert np.all(comp == 0)


# ---------------------------------------------------------------------------------------------
# error rules against eager runs on edge values (ties, thresholds, large and tiny values)

EDGE = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.5, -2.5, 3.0, -3.0, 4.0, -4.0, 0.25,
        -0.25, 1e-3, -1e-3, 1e-6, 2.0, -2.0, 0.125, 3.5, -3.5, 0.75, -0.75, 20.0, -20.0, 7.0]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_eager_runs_on_edge_values_stay_within_the_bounds(dtype: str) -> None:
    """Every op of the family, every attribute draw of a few, eager in ``dtype`` on edge values
    (ties at halves, integers, the attribute grids' points, tiny values) and random ones: the
    oracle finds no divergence."""
    from fuzzkit.values import round_to

    rng = np.random.default_rng(7)
    for r in ew.RECORDS:
        for _ in range(3):
            attrs = r.public_attrs(r.sample_attrs(rng, [1] * r.arity))
            n = 64
            dom = set(r.domain_args(attrs))
            values = []
            for i in range(r.arity):
                v = rng.permutation(np.concatenate([EDGE, rng.uniform(-6, 6, n - len(EDGE))]))
                if r.domain and i in dom:
                    v = (np.abs(v) + 0.5) * (1 if r.domain == "positive" or i % 2 else -1)
                values.append(np.asarray(round_to(v, dtype), np.float32))
            graph = {"inputs": [{"name": f"x{i}", "shape": [n]} for i in range(r.arity)],
                     "nodes": [{"name": "y", "op": r.name, "args": [f"x{i}" for i in
                                                                    range(r.arity)],
                                "attrs": attrs, "shape": [n]}], "outputs": ["y"]}
            ref = build.run_reference(graph, values)
            eager = build.run_eager(graph, values, dtype)["y"]
            div = checks.divergence({"graph": graph, "dtype": dtype, "values": values},
                                    {"outputs": [ref["y"]], "intermediates": ref},
                                    {"outputs": [eager]})
            assert div is None, (r.name, attrs, div)


def test_partial_results_that_overflow_leave_the_element_unjudged() -> None:
    """addcmul with ``value = 0``: ``b c`` overflows float32 (inf * 0 = NaN) where the float64
    reference is a clean ``a``: that element is not judged; its neighbour is."""
    graph = _graph("addcmul", {"value": 0.0}, 3, False, 2)
    values = [np.array([1.0, 1.0], np.float32), np.array([3e38, 1.0], np.float32),
              np.array([3e38, 1.0], np.float32)]
    ref = build.run_reference(graph, values)
    b = bound.error_bounds(graph, ref, "float32")["y"]
    assert np.isnan(b[0]) and np.isfinite(b[1])


def test_value_ranges_contain_the_values_of_a_generated_graph() -> None:
    """The interval rules (the generator's guards rely on them) hold on graphs of these ops."""
    rng = np.random.default_rng(3)
    from fuzzkit.targets.compiler.graphs.values import random_values

    for seed in range(6):
        graph = generate.generate(ops.RngChooser(rng), 6, NAMES)
        values = random_values(graph, seed)
        ref = build.run_reference(graph, values)
        ivals = generate.value_intervals(graph)
        for n in graph["nodes"]:
            y = ref[n["name"]]
            lo, hi = ivals[n["name"]]
            finite = y[np.isfinite(y)]
            assert np.all(finite >= lo - 1e-9 * (1 + abs(lo))), (n, lo, finite.min())
            assert np.all(finite <= hi + 1e-9 * (1 + abs(hi))), (n, hi, finite.max())


# ---------------------------------------------------------------------------------------------
# the real Inductor implementation (three compiles in all)


@pytest.mark.parametrize("op,attrs,operands", [
    ("round", {"decimals": 0}, [[2.5, -0.5, 3.5, 0.5, -1.5, 1.25, -2.75, 4.0]]),
    ("fmod", {}, [[3.0, -3.0, 2.0, 7.5, -0.25, 1.0, 4.0, -4.0],
                  [1.5, 1.5, -1.0, 2.0, 0.5, -3.0, 0.75, 1.5]]),
    ("threshold", {"threshold": 1.0, "value": -1.0},
     [[1.0, 2.0, 0.5, -3.0, 1.0, 4.0, 0.0, 1.5]]),
])
def test_inductor_agrees_on_a_one_node_case(op: str, attrs: dict, operands: list) -> None:
    pytest.importorskip("torch._inductor")
    from fuzzkit.runner import check_case
    from fuzzkit.targets.compiler import target as compiler_target

    target = compiler_target()
    impl = target.implementation("inductor")
    graph = _graph(op, attrs, len(operands), False, len(operands[0]))
    inputs = {"graph": graph, "dtype": "float32", "dynamic": False,
              "values": [np.array(v, np.float32) for v in operands]}
    verdict = check_case(target, impl, inputs, properties=False, confirm=False)
    assert verdict.failure is None, verdict.failure.message
