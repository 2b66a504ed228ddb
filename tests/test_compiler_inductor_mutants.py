"""Miscompile mutants of real Inductor, and the two oracle rules they depend on.

Issue 23 (item 3): a ``>`` compiled as ``>=`` inside real Inductor once passed every triggering
case, because (a) the comparison rule called ``|a-b| <= e_a+e_b`` uncertain even where both
operands are exact and equal (``0 <= 0``), and (b) one possibly-overflowing element switched off
judgement of its whole node and everything downstream, so special-value cases (which almost
always hold +-largest-finite) hardly judged NaN/Inf at all.  The rules now decide exact ties
exactly and mark possible overflow per element (:mod:`fuzzkit.targets.compiler.graphs.bound`);
the tests here pin both at the level of the oracle, with a deliberately wrong compiled output
(caught) next to a legitimate one (passed), and then show each Inductor mutant caught on its
triggering case, not on the same graph without the trigger, and leaving nothing behind.

Inductor compiles cost seconds each here, so only the last two tests compile (a handful of
one-node graphs); the oracle tests build the "compiled" output by hand.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np
import pytest

import fuzzkit.targets.compiler as tc
from fuzzkit.registry import get_target
from fuzzkit.targets.compiler import checks
from fuzzkit.targets.compiler.graphs import bound
from fuzzkit.targets.compiler.mutants import INDUCTOR_MUTANTS, MUTANTS

F32_MAX = float(np.finfo(np.float32).max)


def node(name: str, op: str, args: list[str], shape: list[int], **attrs: Any) -> dict:
    return {"name": name, "op": op, "args": args, "shape": shape, "attrs": attrs}


def _case(graph: dict, values: list[np.ndarray], dtype: str = "float32",
          special: bool = False) -> dict:
    return {"graph": graph, "dtype": dtype, "dynamic": False, "values": values,
            "special": special}


def _oracle(inputs: dict, outputs: list[np.ndarray]) -> Any:
    return checks.oracle(inputs, tc.reference(inputs), {"outputs": outputs})


# ============================================================================ rule: exact ties


TIE = {"inputs": [{"name": "a", "shape": [6]}, {"name": "b", "shape": [6]},
                  {"name": "c", "shape": [6]}, {"name": "d", "shape": [6]}],
       "nodes": [node("e", "exp", ["a"], [6]),
                 node("w", "where_gt", ["a", "b", "c", "d"], [6]),
                 node("s", "where_gt", ["e", "e", "c", "d"], [6])],
       "outputs": ["w", "s"]}


def _tie_values() -> list[np.ndarray]:
    a = np.array([1.0, -2.0, 0.0, 3.5, -0.0, 2.0], np.float32)
    b = np.array([1.0, -2.0, -0.0, 3.0, 0.0, 2.5], np.float32)  # ties at 0, 1, 2, 4
    return [a, b, np.full(6, 5.0, np.float32), np.full(6, -5.0, np.float32)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_exact_tie_resolved_as_ge_is_caught(dtype: str) -> None:
    """Graph inputs are exact, so ``a > b`` at ``a == b`` is decided (false): an output that
    picked ``c`` at one tie -- what ``>`` compiled as ``>=`` gives -- fails with class
    ``value``; the same for a computed value compared with itself.  The right output passes."""
    inputs = _case(TIE, _tie_values(), dtype)
    ref = tc.reference(inputs)
    right = [np.asarray(o, np.float64) for o in ref["outputs"]]
    assert checks.oracle(inputs, ref, {"outputs": right}) is None
    for k, index in ((0, 2), (1, 5)):  # the tie 0 == -0 of the inputs; exp(2) > exp(2)
        wrong = [o.copy() for o in right]
        wrong[k][index] = 5.0
        failure = checks.oracle(inputs, ref, {"outputs": wrong})
        assert failure is not None and failure.signature == f"mismatch:where_gt:{dtype}:value"


def test_near_tie_of_inexact_operands_stays_open() -> None:
    """Where a compared operand carries rounding error and the two are within it, either
    branch is legitimate: ``exp(a) > b`` with ``b`` the float32 rounding of ``exp(a)``."""
    graph = {"inputs": [{"name": "a", "shape": [2]}, {"name": "b", "shape": [2]},
                        {"name": "c", "shape": [2]}, {"name": "d", "shape": [2]}],
             "nodes": [node("e", "exp", ["a"], [2]),
                       node("w", "where_gt", ["e", "b", "c", "d"], [2])],
             "outputs": ["w"]}
    a = np.array([0.3, 1.0], np.float32)
    b = np.exp(a).astype(np.float32)
    inputs = _case(graph, [a, b, np.full(2, 5.0, np.float32), np.full(2, -5.0, np.float32)])
    assert _oracle(inputs, [np.array([5.0, -5.0])]) is None
    assert _oracle(inputs, [np.array([-5.0, 5.0])]) is None


# ============================================================================ rule: overflow


OVERFLOW = {"inputs": [{"name": "x", "shape": [2, 8]}, {"name": "y", "shape": [2, 8]}],
            "nodes": [node("m", "mul", ["x", "y"], [2, 8]),
                      node("x2", "maximum", ["m", "y"], [2, 8]),
                      node("s", "sum", ["x2"], [2], dim=1, keepdim=False),
                      node("n", "neg", ["x2"], [2, 8])],
            "outputs": ["s", "n"]}


def _overflow_values() -> list[np.ndarray]:
    """A special-value case: one element near the largest float32 (times 2: may overflow), a
    NaN and an Inf elsewhere, finite values around them."""
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, (2, 8)).astype(np.float32)
    y = rng.uniform(-2, 2, (2, 8)).astype(np.float32)
    x[0, 1] = np.float32(0.9 * F32_MAX)
    y[0, 1] = 2.0
    x[1, 6] = np.nan
    y[1, 3] = np.inf
    x[1, 3] = 1.0
    return [x, y]


def test_one_overflowing_element_leaves_the_others_judged() -> None:
    """Only the element that may overflow (and what reads it: its row of the sum) is
    unjudged; every other element of the same node and of the nodes downstream keeps its
    bound, so a NaN made up anywhere else -- or a lost NaN/Inf -- is caught."""
    inputs = _case(OVERFLOW, _overflow_values(), special=True)
    ref = tc.reference(inputs)
    bounds = bound.error_bounds(OVERFLOW, ref["intermediates"], "float32")
    assert np.argwhere(np.isnan(bounds["m"])).tolist() == [[0, 1]]
    assert np.argwhere(np.isnan(bounds["n"])).tolist() == [[0, 1]]
    assert np.isnan(bounds["s"]).tolist() == [True, False]
    right = [np.asarray(o, np.float64) for o in ref["outputs"]]
    assert checks.oracle(inputs, ref, {"outputs": right}) is None
    # the overflowing element itself, and its row of the sum, may be anything
    free = [o.copy() for o in right]
    free[1][0, 1], free[0][0] = np.nan, np.inf
    assert checks.oracle(inputs, ref, {"outputs": free}) is None
    # a NaN far from it -- same node, same row -- is caught, and so is a lost NaN / Inf
    for k, index, value, cls in ((1, (0, 6), np.nan, "nan"), (1, (1, 0), np.nan, "nan"),
                                 (1, (1, 6), 0.0, "nan"), (1, (1, 3), 1.0, "inf"),
                                 (0, (1,), 0.0, "nan")):
        wrong = [o.copy() for o in right]
        wrong[k][index] = value
        failure = checks.oracle(inputs, ref, {"outputs": wrong})
        op = "sum" if k == 0 else "neg"
        assert failure is not None and failure.signature == f"mismatch:{op}:float32:{cls}", (
            index, failure)


# ============================================================================ real Inductor


def _reach_case(name: str) -> tuple[dict, dict]:
    """(trigger, miss): the one-node case where the mutant's miscompile shows, and the same
    graph on values where it cannot."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    two = [{"name": "a", "shape": [16]}, {"name": "b", "shape": [16]}]
    if name == "inductor-gt-as-ge":  # graph inputs that tie: where(a > b, 3, b)
        graph = {"inputs": two + [{"name": "c", "shape": [16]}],
                 "nodes": [node("w", "where_gt", ["a", "b", "c", "b"], [16])],
                 "outputs": ["w"]}
        tied = b.copy()
        tied[::3] = a[::3]
        untied = np.where(a == b, b + 1, b).astype(np.float32)
        c = np.full(16, 3.0, np.float32)
        return _case(graph, [a, tied, c]), _case(graph, [a, untied, c])
    if name == "inductor-maximum-drops-nan":  # a NaN in one operand only
        graph = {"inputs": two, "nodes": [node("m", "maximum", ["a", "b"], [16])],
                 "outputs": ["m"]}
        one, both = a.copy(), a.copy()
        one[5] = np.nan
        both[5] = np.nan
        twin = b.copy()
        twin[5] = np.nan  # NaN on both sides: fmax keeps it
        return _case(graph, [one, b], special=True), _case(graph, [both, twin], special=True)
    if name == "inductor-clamp-min-drops-nan":  # a NaN reaching a clamp with a lower bound
        graph = {"inputs": two, "nodes": [node("c", "clamp", ["a"], [16], min=-0.5, max=1.0),
                                          node("u", "clamp", ["b"], [16], min=None, max=1.0)],
                 "outputs": ["c", "u"]}
        lower, upper = a.copy(), b.copy()
        lower[7] = np.nan
        upper[7] = np.nan  # a clamp without a lower bound keeps NaN
        return _case(graph, [lower, b], special=True), _case(graph, [a, upper], special=True)
    raise KeyError(name)


@contextlib.contextmanager
def _inductor_state() -> Iterator[tuple[Any, Any]]:
    """What an Inductor mutant must leave as it found it: the lowering table, the two cache
    switches and the driver's compiled-graph table."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    import torch._inductor.graph as inductor_graph

    from fuzzkit.targets.compiler import inductor

    def snapshot() -> tuple[Any, ...]:
        return (inductor_graph.lowerings, inductor_config.fx_graph_cache,
                functorch_config.enable_autograd_cache, inductor.COMPILED,
                inductor_config.get_hash())

    before = snapshot()
    yield before, snapshot
    assert snapshot()[:4] == before[:4] and snapshot()[0] is before[0]
    assert snapshot()[4] == before[4]


def test_inductor_mutants_are_shipped_on_the_inductor_implementation() -> None:
    names = {m.name for m in MUTANTS}
    assert {m.name for m in INDUCTOR_MUTANTS} <= names
    assert {m.name for m in INDUCTOR_MUTANTS} == {
        "inductor-gt-as-ge", "inductor-maximum-drops-nan", "inductor-clamp-min-drops-nan"}
    assert all(m.implementation == "inductor" for m in INDUCTOR_MUTANTS)
    target = get_target("compiler")
    assert [m.name for m in INDUCTOR_MUTANTS] == [
        m.name for m in target.mutants if m.implementation == "inductor"]


def test_inductor_mutant_patch_changes_one_lowering_and_restores_everything() -> None:
    """Applying a mutant swaps in a *copy* of the lowering table with exactly the mutated ops
    changed (the real table is never written), switches the caches off, gives the driver an
    empty compiled-graph table -- and puts every one of them back."""
    import torch

    aten = torch.ops.aten
    expected = {"inductor-gt-as-ge": {aten.gt.Tensor, aten.gt.Scalar},
                "inductor-maximum-drops-nan": {aten.maximum.default},
                "inductor-clamp-min-drops-nan": {aten.clamp_min.default}}
    for m in INDUCTOR_MUTANTS:
        with _inductor_state() as (before, now):
            real = dict(before[0])
            with m.applied():
                during = now()
                changed = {k for k in during[0] if during[0][k] is not before[0].get(k)}
                assert expected[m.name] <= changed, m.name
                assert {str(k).split(".")[1] for k in changed} == {
                    str(k).split(".")[1] for k in expected[m.name]}, changed
                assert during[1:3] == (False, False)
                assert during[3] is not before[3] and not during[3].table
            assert dict(before[0]) == real  # the real table was never written


def test_inductor_mutants_caught_on_their_trigger_and_not_elsewhere() -> None:
    """Each mutant, on real Inductor: the clean compile passes its triggering case; under the
    mutant the trigger fails with the mutated op's signature -- even though the clean compile
    of the same graph was made (and cached) just before -- while the same graph without the
    trigger passes; afterwards the clean compiler passes again (no mutant compile was left in a
    cache)."""
    signatures = {"inductor-gt-as-ge": "mismatch:where_gt:float32:value",
                  "inductor-maximum-drops-nan": "mismatch:maximum:float32:nan",
                  "inductor-clamp-min-drops-nan": "mismatch:clamp:float32:nan"}
    for m in INDUCTOR_MUTANTS:
        hit, miss = _reach_case(m.name)
        ref_hit, ref_miss = tc.reference(hit), tc.reference(miss)
        assert checks.oracle(hit, ref_hit, tc._inductor_run(hit)) is None, m.name
        with _inductor_state():
            with m.applied():
                failure = checks.oracle(hit, ref_hit, tc._inductor_run(hit))
                assert failure is not None and failure.signature == signatures[m.name], (
                    m.name, failure)
                assert checks.oracle(miss, ref_miss, tc._inductor_run(miss)) is None, m.name
        assert checks.oracle(hit, ref_hit, tc._inductor_run(hit)) is None, m.name
