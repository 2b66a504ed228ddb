"""Every op's z3 shape rule has a satisfiable and an unsatisfiable instance, and agrees with the
op's concrete rule (``infer``) on both.

The generator trusts the z3 rule (it keeps an op only when the solver says ``sat``) and the
validator of files trusts the concrete rule, so the two must say the same thing:

* **sat**: operand ranks and rank-level attributes drawn as the generator draws them, symbolic
  operand dims, the rule's constraints solved with small dims; the model's output shape is what
  ``infer`` computes on the model's operand shapes (once ``finalize`` has filled the
  shape-dependent attributes).
* **unsat**: one operand dim of that instance grown by 1 or 2 (the output kept), or one output
  dim grown (the operands kept).  Wherever the concrete rule refuses such a node (attributes the
  generator fills from solved shapes filled again for the new ones), the z3 rule with those
  operand and output dims must be unsatisfiable -- a rule that forgot a constraint (a matmul
  without ``a[1] == b[0]``, a broadcast that accepts 5 against 4) is sat there and fails.

Growing (never shrinking) keeps attribute values that were drawn for the solved shapes (indices,
slice bounds) valid, so the concrete rule's refusals come from the shapes alone.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
z3 = pytest.importorskip("z3")
pytest.importorskip("torch")

from fuzzkit.targets.compiler.graphs import ops  # noqa: E402
from fuzzkit.targets.compiler.graphs.ops import OPS, SpecError  # noqa: E402

ALL_OPS = sorted(OPS)
SEEDS = 80
#: Ops whose z3 rule constrains nothing, by design, with the reason: no shape of theirs is
#: unsatisfiable.  The test checks that their rule indeed returns no constraint (so a rule that
#: gains one must leave this list) and that the concrete rule accepts every probe.
UNCONSTRAINED = {
    "as_strided": "strides of 0 make a view of any size from one element: every output shape "
    "of the drawn rank is some as_strided view of any operand",
}  # instances tried per op until both a sat and an unsat one are seen
DIM_MAX = 9


def _z3_dims(shape: list[Any]) -> list[Any]:
    return [d for d in shape if isinstance(d, z3.ExprRef)]


def _instance(op: str, rng: np.random.Generator, ctx: Any) -> dict | None:
    """One solved instance of ``op``'s rule, or None where the drawn ranks do not apply."""
    spec = OPS[op]
    rank = int(rng.integers(0, 4))
    ranks = [rank if rng.random() < 0.6 else int(rng.integers(0, 4)) for _ in range(spec.arity)]
    attrs = spec.sample_attrs(rng, ranks)
    if attrs is None:
        return None
    ops.reset_z3(ctx)
    ins = [[ops.fresh_dim("x") for _ in range(r)] for r in ranks]
    try:
        cons, out = spec.shape_rule(ins, attrs)
    except (IndexError, KeyError, ValueError):  # a rule may refuse ranks it was not drawn for
        return None
    solver = z3.Solver(ctx=ctx)
    for d in {str(d): d for s in ins + [out] for d in _z3_dims(list(s))}.values():
        solver.add(d >= 1, d <= DIM_MAX)
    solver.add(*cons)
    if solver.check() != z3.sat:
        return None
    model = solver.model()

    def concrete(shape: list[Any]) -> list[int]:
        return [int(model.eval(d, model_completion=True).as_long())
                if isinstance(d, z3.ExprRef) else int(d) for d in shape]

    in_shapes = [concrete(s) for s in ins]
    out_shape = concrete(list(out))
    public = ops.finalize_attrs(op, attrs, in_shapes, out_shape, rng)
    return {"attrs": attrs, "public": public, "ins": ins, "cons": cons, "out": list(out),
            "in_shapes": in_shapes, "out_shape": out_shape}


def _unsat_with(inst: dict, in_shapes: list[list[int]], out_shape: list[int], ctx: Any) -> bool:
    solver = z3.Solver(ctx=ctx)
    solver.add(*inst["cons"])
    for sym, val in zip(inst["ins"], in_shapes):
        for d, v in zip(sym, val):
            solver.add(d == v)
    for d, v in zip(inst["out"], out_shape):
        solver.add(d == v)
    return solver.check() == z3.unsat


def _probes(inst: dict) -> list[tuple[list[list[int]], list[int]]]:
    """Operand and output shapes one dim away from the solved instance: one operand dim grown
    by 1 or 2 (the output kept), or one output dim grown by 1 or 2 (the operands kept)."""
    out = []
    for i, shape in enumerate(inst["in_shapes"]):
        for k in range(len(shape)):
            for grow in (1, 2):
                grown = [list(s) for s in inst["in_shapes"]]
                grown[i][k] += grow
                out.append((grown, list(inst["out_shape"])))
    for k in range(len(inst["out_shape"])):
        for grow in (1, 2):
            grown_out = list(inst["out_shape"])
            grown_out[k] += grow
            out.append(([list(s) for s in inst["in_shapes"]], grown_out))
    return out


def _concrete_accepts(op: str, inst: dict, in_shapes: list[list[int]], out_shape: list[int],
                      rng: np.random.Generator) -> bool:
    """Whether the concrete rule accepts a node of ``op`` from ``in_shapes`` to ``out_shape``.
    Attributes the generator fills from the solved shapes (``finalize``: an index list, a
    target shape) are filled again for these shapes, as the generator would have."""
    spec = OPS[op]
    public = inst["public"]
    if spec.finalize is not None:
        try:
            public = ops.finalize_attrs(op, inst["attrs"], in_shapes, out_shape, rng)
        except Exception:  # no attributes exist for these shapes
            return False
    try:
        return spec.out_shape(in_shapes, public) == out_shape
    except SpecError:
        return False


@pytest.mark.parametrize("op", ALL_OPS)
def test_shape_rule_has_sat_and_unsat_instances_that_agree_with_infer(op: str) -> None:
    spec = OPS[op]
    sat_seen = unsat_seen = 0
    for seed in range(SEEDS):
        rng = np.random.default_rng(seed)
        ctx = z3.Context()
        inst = _instance(op, rng, ctx)
        if inst is None:
            continue
        # sat: the concrete rule accepts the model's shapes and gives the model's output
        assert spec.out_shape(inst["in_shapes"], inst["public"]) == inst["out_shape"], (
            op, inst["in_shapes"], inst["public"])
        sat_seen += 1
        if op in UNCONSTRAINED:
            assert not inst["cons"], f"{op} has constraints now: remove it from UNCONSTRAINED"
        for in_shapes, out_shape in _probes(inst):
            if _concrete_accepts(op, inst, in_shapes, out_shape, rng):
                continue
            assert op not in UNCONSTRAINED, (op, in_shapes, out_shape)
            # unsat: the z3 rule must refuse what the concrete rule refuses
            assert _unsat_with(inst, in_shapes, out_shape, ctx), (
                f"{op}: the z3 rule accepts operand shapes {in_shapes} with output "
                f"{out_shape}, which the concrete rule refuses")
            unsat_seen += 1
        if sat_seen >= 3 and unsat_seen >= 3:
            break
    ops.reset_z3(None)
    assert sat_seen, f"{op}: no satisfiable instance of its shape rule in {SEEDS} draws"
    assert unsat_seen or op in UNCONSTRAINED, (
        f"{op}: no unsatisfiable instance (a grown dim) in {SEEDS} draws")


def test_a_rule_that_forgets_a_constraint_fails_here() -> None:
    """The unsat half is not vacuous: matmul without its inner-dim constraint is caught."""
    import dataclasses

    original = OPS["matmul"]
    OPS["matmul"] = dataclasses.replace(original, shape_rule=lambda s, a: ([], [s[0][0], s[1][1]]))
    try:
        with pytest.raises(AssertionError, match="accepts operand shapes"):
            test_shape_rule_has_sat_and_unsat_instances_that_agree_with_infer("matmul")
    finally:
        OPS["matmul"] = original
