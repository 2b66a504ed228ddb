"""One record per graph op (``targets/compiler/graphs/ops.py``): every op has every part, and its
parts agree with each other on a small input -- the shape rules with torch, the float64
reference with the torch function run in a low precision within the error rule's bound, the
value-range rule with the values, the dependency rule with the output, and the fusing compiler's
template -- which is the record's own -- (for every op the record says it fuses, every form of an
attr-built one) with the reference.  A record that lacks a part, or a template that computes
something else, fails here."""

from __future__ import annotations

import dataclasses
import math
import os
import sys

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest.importorskip("torch")

from fuzzkit import triton_support

# before triton is imported: Triton picks interpreter or native mode when it is imported
triton_support.prepare()

import torch  # noqa: E402

from fuzzkit.runner import check_case  # noqa: E402
from fuzzkit.targets.compiler.graphs import bound, build, error_rules, generate, intervals, ops  # noqa: E402
from fuzzkit.targets.compiler.graphs.ops import OPS, missing_parts  # noqa: E402
from fuzzkit.targets.compiler.graphs.values import round_to_dtype  # noqa: E402

ALL_OPS = list(OPS)
FUSED = [name for name, spec in OPS.items() if spec.fusing is not None]


# ---------------------------------------------------------------------------------------------
# every record has every part


@pytest.mark.parametrize("op", ALL_OPS)
def test_every_op_has_every_part(op: str) -> None:
    spec = OPS[op]
    assert spec.name == op and missing_parts(spec) == []
    # the torch function is this module's function of the op's name (stable fx import path)
    # a core op's function lives in ops, a family op's in its family module (its fx import path)
    assert spec.torch_fn.__module__ in (ops.__name__, *ops.FAMILIES)
    assert spec.torch_fn.__name__ == op
    assert ops.op_of(spec.torch_fn) == op
    assert spec.domain is None or spec.domain_args(_attrs(op))  # a declared domain has positions


@pytest.mark.parametrize("op", ALL_OPS)
def test_the_fusing_lowering_of_every_record_is_in_the_record(op: str) -> None:
    """The record holds its lowering's template -- an expression (or a builder and its forms)
    for an elementwise op, body lines for a reduction, nothing for an op run eagerly -- and
    codegen writes an expression from it for the attrs the generator draws."""
    codegen = pytest.importorskip("fuzzkit.targets.compiler.fusing.codegen")
    spec = OPS[op]
    parts = {"template": spec.template is not None, "builder": spec.builder is not None,
             "cases": bool(spec.cases), "reduction_body": bool(spec.reduction_body)}
    if spec.fusing == "elementwise":
        assert parts["template"] != parts["builder"] == parts["cases"], parts
        assert codegen.supported(op, _attrs(op))
    elif spec.fusing == "reduction":
        assert [p for p, there in parts.items() if there] == ["reduction_body"]
    else:
        assert not any(parts.values()) and not codegen.supported(op, _attrs(op))
    # every exponent the generator draws has its form (an undrawn one would never be checked)
    if op == "pow":
        drawn = ops._INT_EXPONENTS + ops._FRAC_EXPONENTS + ops._EDGE_EXPONENTS
        assert sorted(spec.cases) == sorted(drawn)


def test_codegen_reads_the_record_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Codegen takes an op's lowering from ``ops.OPS`` when it writes the kernel, not from a
    copy of its own: a record swapped in (as the miscompile mutants do) changes the kernel."""
    codegen = pytest.importorskip("fuzzkit.targets.compiler.fusing.codegen")
    group = codegen.GroupSpec(nodes=[("n0", "sub", ["x", "y"], {}), ("n1", "sum", ["n0"], {})],
                              leaves=["x", "y"], leaf_shapes=[(3, 4), (3, 4)], shape=(3, 4),
                              reduction="sum")
    clean = codegen.kernel_source(group)[0]
    assert "t0 = (x0 - x1)" in clean and "acc = tl.sum(tl.where(mask, t0, 0.0), axis=1)" in clean
    records = dict(OPS, sub=dataclasses.replace(OPS["sub"], template="({b} - {a})"),
                   sum=dataclasses.replace(OPS["sum"], reduction_body=("acc = tl.max({src})",)))
    monkeypatch.setattr(ops, "OPS", records)
    swapped = codegen.kernel_source(group)[0]
    assert "t0 = (x1 - x0)" in swapped and "    acc = tl.max(t0)" in swapped


def test_a_mutant_of_a_record_keeps_the_torch_functions() -> None:
    """A miscompile mutant that edits a template swaps in a private copy of the records; its
    torch functions stay the module's own, so graphs built before it compile under it."""
    from fuzzkit.targets.compiler import mutants

    (mutant,) = [m for m in mutants.MUTANTS if m.name == "sub-operands-swapped"]
    with mutant.applied():
        swapped = ops.OPS
        assert swapped is not OPS and swapped["sub"].template == "({b} - {a})"
        assert all(swapped[n].torch_fn is OPS[n].torch_fn for n in OPS)
        copy = sys.modules[type(swapped["sub"]).__module__]  # its own classes, its own check
        assert copy is not ops and all(copy.missing_parts(s) == [] for s in swapped.values())
    assert ops.OPS is OPS


def test_a_record_that_lacks_a_part_is_named() -> None:
    exp = OPS["exp"]
    assert missing_parts(dataclasses.replace(exp, error=None)) == ["error is not callable"]
    assert missing_parts(dataclasses.replace(exp, interval="exp")) == [
        "interval is not callable"
    ]
    assert "unknown fusing 'fused'" in missing_parts(dataclasses.replace(exp, fusing="fused"))
    assert "cannot be fused" in missing_parts(dataclasses.replace(exp, fusing="reduction"))[0]
    # the fusing lowering: its template present, no other lowering's, fields it may name
    assert missing_parts(dataclasses.replace(exp, template=None)) == [
        "fused as elementwise without a template (or a builder and its cases)"
    ]
    assert missing_parts(dataclasses.replace(OPS["sum"], reduction_body=())) == [
        "reduction_body is missing"
    ]
    assert missing_parts(dataclasses.replace(exp, fusing=None)) == [
        "template does not belong to this op that is not fused"
    ]
    assert missing_parts(dataclasses.replace(exp, reduction_body=("acc = {src}",))) == [
        "reduction_body does not belong to this elementwise lowering"
    ]
    assert missing_parts(dataclasses.replace(OPS["pow"], cases={})) == ["cases is missing"]
    assert missing_parts(dataclasses.replace(exp, template="tl.exp({b})")) == [
        "template 'tl.exp({b})' names 'b', no operand or attribute"
    ]
    assert missing_parts(dataclasses.replace(exp, template="tl.exp({a)")) == [
        "template 'tl.exp({a)' is not a format string"
    ]
    assert missing_parts(dataclasses.replace(OPS["pow"], builder="pow")) == [
        "builder is neither None nor callable"
    ]
    assert "move with its values" in missing_parts(
        dataclasses.replace(OPS["reshape"], error=error_rules.selected)
    )[0]
    with pytest.raises(TypeError, match="error"):  # the builder has no default error rule
        ops._spec("exp", 1, "elementwise", ops._rule_same, ops._attrs_none,
                  reads=error_rules.reads_elementwise, interval=intervals.exp, fusing=None)


# ---------------------------------------------------------------------------------------------
# the parts of a record agree on a small input


def _attrs(op: str) -> dict:
    """Attrs of ``op`` drawn for rank-2 operands (rank 3 where the op needs it)."""
    spec = OPS[op]
    rng = np.random.default_rng(0)
    for ranks in ([2] * spec.arity, [3] * spec.arity):
        for _ in range(20):
            attrs = spec.sample_attrs(rng, ranks)
            if attrs is not None:
                return spec.public_attrs(attrs)
    raise AssertionError(f"no attrs for {op}")  # pragma: no cover


def one_node_case(op: str, seed: int = 0, attrs: dict | None = None
                  ) -> tuple[dict, list[np.ndarray]]:
    """A one-node graph of ``op`` from the generator (its shape rules, attribute draws and
    finalizers), its operands as graph inputs with values inside the op's domain.  A reduction
    reduces the last dim (the one the fusing compiler fuses); ``attrs`` replace the drawn ones
    (shape-preserving attrs only)."""
    spec = OPS[op]
    rng = np.random.default_rng(seed)
    for attempt in range(200):
        graph = generate.generate(ops.RngChooser(rng), 1, [op], keep=8)  # guards + op
        node = next((n for n in graph["nodes"] if n["op"] == op), None)
        shapes = build.shapes_of(graph)
        # distinct operands of at least 2 along every dim when the generator gives them (sub(x,
        # x) hides swapped operands, a row of one element leaves layer_norm without any
        # guarantee), else any non-empty ones
        picky = attempt < 100
        if node is None or any(min(shapes[a], default=2) < 1 + picky for a in node["args"]):
            continue
        if picky and len(set(node["args"])) < len(node["args"]):
            continue
        if spec.fusing == "reduction":
            rank = len(shapes[node["args"][0]])
            if rank == 0:
                continue
            node["attrs"] = {"dim": rank - 1, "keepdim": False}
            node["shape"] = spec.out_shape([shapes[node["args"][0]]], node["attrs"])
        if math.prod(node["shape"]) == 0:
            continue
        if attrs is not None:
            node["attrs"] = dict(attrs)
        # (operands that are not floats keep the nodes that made them: the op's node is last)
        sub = build.subgraph(graph, [node["name"]], [node["name"]])
        domain = set(spec.domain_args(node["attrs"]))
        values = []
        for x in sub["inputs"]:
            magnitude = rng.uniform(0.5, 2.0, x["shape"])
            if spec.domain == "positive" and any(node["args"][p] == x["name"] for p in domain):
                values.append(magnitude)
            elif spec.domain == "nonzero" and any(node["args"][p] == x["name"] for p in domain):
                values.append(magnitude * rng.choice([-1.0, 1.0], x["shape"]))
            else:
                values.append(rng.uniform(-2.0, 2.0, x["shape"]))
        return sub, [round_to_dtype(v, "bfloat16") for v in values]  # exact in every dtype
    raise AssertionError(f"the generator made no one-node {op} graph")  # pragma: no cover


@pytest.mark.parametrize("op", ALL_OPS)
def test_shape_rules_torch_and_reference_agree(op: str) -> None:
    graph, values = one_node_case(op)
    node = graph["nodes"][-1]  # after the producers of non-float operands, if any
    spec = OPS[op]
    in_shapes = [build.shapes_of(graph)[a] for a in node["args"]]
    assert build.validate_graph(graph) is None
    ref = build.run_reference(graph, values)[node["name"]]
    assert spec.out_shape(in_shapes, node["attrs"]) == node["shape"]
    assert ops.eval_shape(op, node["attrs"], in_shapes) == node["shape"] == list(ref.shape)


@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_error_rule_bounds_an_eager_run(op: str, dtype: str) -> None:
    """The torch function run eagerly in ``dtype`` stays within the error rule's bound of the
    float64 reference (the torch function is what the reference runs)."""
    graph, values = one_node_case(op)
    name = graph["nodes"][-1]["name"]
    ref = build.run_reference(graph, values)
    eager = build.run_eager(graph, values, dtype)[name]
    bounds = bound.error_bounds(graph, ref, dtype)[name]
    assert bounds.shape == ref[name].shape and np.all(np.isfinite(bounds)), (op, graph)
    assert np.all(np.abs(eager - ref[name]) <= bounds), (op, np.max(np.abs(eager - ref[name])))


@pytest.mark.parametrize("op", ALL_OPS)
def test_interval_dependency_and_partial_rules_hold(op: str) -> None:
    graph, values = one_node_case(op)
    node = graph["nodes"][-1]
    spec = OPS[op]
    ref = build.run_reference(graph, values)
    y = ref[node["name"]]
    xs = [ref[a] for a in node["args"]]
    # the value-range rule contains the values (input intervals: the inputs' own ranges)
    ivals = [(float(x.min()), float(x.max())) for x in xs]
    shapes = [list(x.shape) for x in xs]
    lo, hi = generate.interval(op, node["attrs"], ivals, shapes, node["shape"])
    assert lo - 1e-9 * (1 + abs(lo)) <= y.min() and y.max() <= hi + 1e-9 * (1 + abs(hi)), op
    # every output element reads some input element; none reads an unmasked one
    masks = [np.ones(x.shape, dtype=bool) for x in xs]
    assert np.all(bound.dependents(op, node["attrs"], masks, xs, y))
    masks = [np.zeros(x.shape, dtype=bool) for x in xs]
    assert not np.any(bound.dependents(op, node["attrs"], masks, xs, y))
    # partial results: as large as the values they make, for sums, means, scans and products
    partial = bound._partial_magnitude(op, node["attrs"], xs, y)
    assert partial.shape == y.shape and np.all(partial >= 0)
    if spec.partial is not None and spec.kind != "normalization":
        assert np.all(partial >= np.abs(y) * (1 - 1e-12)), op


# ---------------------------------------------------------------------------------------------
# the fusing compiler's template agrees with the torch function and the reference


def _fused_check(op: str, dtype: str = "float32", attrs: dict | None = None):
    """The compiler target, its fusing implementation and the one-node case of ``op`` (with
    ``attrs``, if given), once the fusing compiler is seen to put that node into a generated
    kernel of its own."""
    pytest.importorskip("triton")
    from fuzzkit.targets.compiler import target as compiler_target
    from fuzzkit.targets.compiler.fusing import runtime

    graph, values = one_node_case(op, attrs=attrs)
    gm = build.to_graph_module(graph)
    program = runtime.FusedProgram(gm, [torch.zeros(x["shape"]) for x in graph["inputs"]])
    assert [[n.name for n in g.nodes] for g in program.groups] == [[graph["nodes"][0]["name"]]]
    target = compiler_target()
    impl = target.implementation("fusing")
    inputs = {"graph": graph, "dtype": dtype, "dynamic": False,
              "values": [round_to_dtype(v, dtype) for v in values]}
    return target, impl, inputs


@pytest.mark.kernel
@pytest.mark.parametrize("op", FUSED)
def test_the_fusing_template_agrees_with_the_reference(op: str) -> None:
    target, impl, inputs = _fused_check(op)
    verdict = check_case(target, impl, inputs, properties=False, confirm=False)
    assert verdict.failure is None, verdict.failure.message


#: attrs reaching every form of the attr-built lowerings: each pow exponent, clamp with each
#: bound alone and both
FORMS = [("pow", {"exponent": e}) for e in sorted(OPS["pow"].cases)] + [
    ("clamp", {"min": -0.5, "max": None}),
    ("clamp", {"min": None, "max": 0.5}),
    ("clamp", {"min": -math.inf, "max": 1.0}),
]


@pytest.mark.kernel
@pytest.mark.parametrize("op,attrs", FORMS, ids=[f"{op}-{a}" for op, a in FORMS])
def test_every_form_of_an_attr_built_template_agrees_with_the_reference(
    op: str, attrs: dict
) -> None:
    target, impl, inputs = _fused_check(op, attrs=attrs)
    assert inputs["graph"]["nodes"][0]["attrs"] == attrs
    verdict = check_case(target, impl, inputs, properties=False, confirm=False)
    assert verdict.failure is None, verdict.failure.message


@pytest.mark.kernel
def test_a_wrong_template_is_caught() -> None:
    """The agreement check fails on a template that computes something else (the
    operand-swapping miscompile of ``sub``)."""
    target, impl, inputs = _fused_check("sub")
    with target.mutant("sub-operands-swapped").applied():
        verdict = check_case(target, impl, inputs, properties=False, confirm=False)
    assert verdict.failure is not None and verdict.failure.signature.startswith("mismatch:sub:")
