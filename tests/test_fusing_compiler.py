"""The fusing compiler's generated Triton kernels against eager float64 (``pytest -m kernel``):
partitioning, broadcasting, permuted inputs, reductions with tails, every dtype, and every
miscompile mutant caught on a fixed graph."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest.importorskip("torch")

from fuzzkit import triton_support  # noqa: E402

# before triton is imported: Triton picks interpreter or native mode when it is imported
triton_support.prepare()
pytest.importorskip("triton")

import torch  # noqa: E402

from fuzzkit.targets.compiler.graphs import build  # noqa: E402
import fuzzkit.targets.compiler as tc  # noqa: E402
from fuzzkit.targets.compiler import checks  # noqa: E402
from fuzzkit.targets.compiler.fusing import codegen, runtime  # noqa: E402
from fuzzkit.targets.compiler.mutants import FUSION_ONLY, MUTANTS, REACH  # noqa: E402

pytestmark = pytest.mark.kernel


def node(name, op, args, shape, **attrs):
    return {"name": name, "op": op, "args": list(args), "attrs": attrs, "shape": list(shape)}


#: sub -> mul -> exp -> sum(last dim) fuse into one reduction kernel; transpose runs eagerly and
#: hands a permuted tensor to the div -> clamp kernel; x1 [5, 1] broadcasts along the last dim.
MAIN = {
    "inputs": [{"name": "x0", "shape": [5, 7]}, {"name": "x1", "shape": [5, 1]},
               {"name": "x2", "shape": [7, 5]}, {"name": "x3", "shape": [5, 7]}],
    "nodes": [
        node("n0", "sub", ["x0", "x1"], [5, 7]),
        node("n1", "mul", ["n0", "x3"], [5, 7]),
        node("n2", "exp", ["n1"], [5, 7]),
        node("n3", "sum", ["n2"], [5], dim=1, keepdim=False),
        node("n4", "transpose", ["x2"], [5, 7], dim0=0, dim1=1),
        node("n5", "div", ["n4", "x0"], [5, 7]),
        node("n6", "clamp", ["n5"], [5, 7], min=-0.5, max=0.5),
    ],
    "outputs": ["n3", "n6"],
}


def main_values(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(1 + rng.random((5, 7))).astype(np.float32),
            rng.standard_normal((5, 1)).astype(np.float32),
            (2 * rng.standard_normal((7, 5))).astype(np.float32),
            rng.standard_normal((5, 7)).astype(np.float32)]


#: 3-d broadcasting both ways ([4, 1, 7] with [5, 1]) through maximum / where_gt / minimum.
BROADCAST = {
    "inputs": [{"name": "a", "shape": [4, 1, 7]}, {"name": "b", "shape": [5, 1]},
               {"name": "c", "shape": [7]}],
    "nodes": [
        node("m0", "maximum", ["a", "b"], [4, 5, 7]),
        node("m1", "where_gt", ["m0", "c", "a", "b"], [4, 5, 7]),
        node("m2", "minimum", ["m1", "c"], [4, 5, 7]),
        node("m3", "amax", ["m2"], [4, 5, 1], dim=2, keepdim=True),
    ],
    "outputs": ["m2", "m3"],
}

#: a permuted 3-d input into transcendental ops, then a mean over a 129-long row (tail of a
#: 256 block) and amin over 63.
PERMUTED = {
    "inputs": [{"name": "p", "shape": [3, 129, 2]}, {"name": "q", "shape": [63, 4]}],
    "nodes": [
        node("k0", "permute", ["p"], [2, 3, 129], perm=[2, 0, 1]),
        node("k1", "gelu", ["k0"], [2, 3, 129]),
        node("k2", "sigmoid", ["k1"], [2, 3, 129]),
        node("k3", "mean", ["k2"], [2, 3], dim=2, keepdim=False),
        node("k4", "transpose", ["q"], [4, 63], dim0=0, dim1=1),
        node("k5", "abs", ["k4"], [4, 63]),
        node("k6", "add_scalar", ["k5"], [4, 63], value=0.5),
        node("k7", "log", ["k6"], [4, 63]),
        node("k8", "pow", ["k6"], [4, 63], exponent=1.5),
        node("k9", "add", ["k7", "k8"], [4, 63]),
        node("k10", "amin", ["k9"], [4], dim=1, keepdim=False),
        node("k11", "rsqrt", ["k6"], [4, 63]),
    ],
    "outputs": ["k3", "k10", "k11"],
}


def _values(graph: dict, seed: int, scale: float = 2.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-scale, scale, size=i["shape"]).astype(np.float32)
            for i in graph["inputs"]]


def _case(graph: dict, values: list[np.ndarray], dtype: str) -> dict:
    rounded = [torch.from_numpy(v).to(tc.torch_dtype(dtype)).float().numpy() for v in values]
    return {"graph": graph, "dtype": dtype, "dynamic": False, "values": rounded}


def _program(graph: dict) -> runtime.FusedProgram:
    gm = build.to_graph_module(graph)
    xs = [torch.zeros(i["shape"]) for i in graph["inputs"]]
    return runtime.FusedProgram(gm, xs)


def test_partition_groups_main_graph() -> None:
    prog = _program(MAIN)
    groups = [[n.name for n in g.nodes] for g in prog.groups]
    assert groups == [["n0", "n1", "n2", "n3"], ["n5", "n6"]]
    assert [g.reduction for g in prog.groups] == ["sum", None]


def test_partition_respects_outside_consumers() -> None:
    """A value that is also a graph output (or feeds two ops) ends its group."""
    graph = {**MAIN, "outputs": ["n0", "n3", "n6"]}
    groups = [[n.name for n in g.nodes] for g in _program(graph).groups]
    assert groups == [["n0"], ["n1", "n2", "n3"], ["n5", "n6"]]
    groups = [[n.name for n in g.nodes] for g in _program(BROADCAST).groups]
    assert groups == [["m0", "m1", "m2"], ["m3"]]  # m2 is an output: amax gets its own kernel
    groups = [[n.name for n in g.nodes] for g in _program(PERMUTED).groups]
    # k6 feeds log, pow and rsqrt: a group boundary; log + pow + add + amin fold into one tree
    assert groups == [["k1", "k2", "k3"], ["k5", "k6"], ["k7", "k8", "k9", "k10"], ["k11"]]


def test_kernel_source_is_a_hashed_file() -> None:
    prog = _program(MAIN)
    source = prog.sources[0]
    assert "tl.sum(" in source and "tl.exp(" in source
    files = list(codegen.cache_dir().glob("fk_*.py"))
    assert any(f.read_text() == source for f in files)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", ["main", "broadcast", "permuted"])
def test_fused_matches_float64(name: str, dtype: str) -> None:
    graph = {"main": MAIN, "broadcast": BROADCAST, "permuted": PERMUTED}[name]
    values = main_values() if name == "main" else _values(graph, seed=len(name))
    inputs = _case(graph, values, dtype)
    failure = checks.oracle(inputs, tc.reference(inputs), tc._fusing_run(inputs))
    assert failure is None, failure.message


def test_fused_handles_non_contiguous_and_broadcast_leaves_directly() -> None:
    """Leaves are read in place at their real strides (stride 0 for broadcast dims)."""
    gm = build.to_graph_module(BROADCAST)
    a = torch.randn(4, 1, 7)
    b = torch.randn(1, 5).t()  # [5, 1] view with stride (1, 5)
    c = torch.randn(14)[::2]  # stride 2
    prog = runtime.FusedProgram(gm, [a, b, c])
    got = prog(a, b, c)
    want = gm(a.double(), b.double(), c.double())
    for g, w in zip(got, want):
        assert torch.allclose(g.double(), w, atol=1e-6)


def _reach_case(name: str) -> tuple[dict, dict]:
    """(a case that triggers reach mutant ``name``, the same case just short of its threshold
    or without its value): the first must fail under the mutant, the second must not."""
    block = codegen.MAX_BLOCK
    rng = np.random.default_rng(7)
    if name == "where-gt-as-ge":  # one value compared with itself: a tie everywhere
        graph = {"inputs": [{"name": "a", "shape": [4, 8]}, {"name": "b", "shape": [4, 8]}],
                 "nodes": [node("w", "where_gt", ["a", "a", "b", "a"], [4, 8])],
                 "outputs": ["w"]}
        vals = [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2)]
        untied = {**graph, "nodes": [node("w", "where_gt", ["a", "b", "b", "a"], [4, 8])]}
        return _case(graph, vals, "float32"), _case(untied, [vals[0], vals[0] + 1], "float32")
    if name in ("maximum-drops-nan", "clamp-min-drops-nan"):
        op, attrs = (("maximum", {}) if name == "maximum-drops-nan"
                     else ("clamp", {"min": -1.0, "max": 1.0}))
        args = ["a", "b"] if op == "maximum" else ["a"]
        graph = {"inputs": [{"name": "a", "shape": [16]}, {"name": "b", "shape": [16]}],
                 "nodes": [node("m", op, args, [16], **attrs), node("e", "exp", ["b"], [16])],
                 "outputs": ["m", "e"]}
        vals = [rng.standard_normal(16).astype(np.float32) for _ in range(2)]
        nan = vals[0].copy()
        nan[3] = np.nan
        return _case(graph, [nan, vals[1]], "float32"), _case(graph, vals, "float32")
    if name == "elementwise-grid-floor":  # one element past the block
        def neg(n: int) -> tuple[dict, list[np.ndarray]]:
            graph = {"inputs": [{"name": "a", "shape": [n]}],
                     "nodes": [node("m", "neg", ["a"], [n])], "outputs": ["m"]}
            return graph, [(1 + rng.random(n)).astype(np.float32)]
        return _case(*neg(block + 1), "float32"), _case(*neg(block), "float32")
    if name == "long-row-truncated":  # one column past the block
        def row(n: int) -> tuple[dict, list[np.ndarray]]:
            graph = {"inputs": [{"name": "a", "shape": [2, n]}],
                     "nodes": [node("s", "sum", ["a"], [2], dim=1, keepdim=False)],
                     "outputs": ["s"]}
            return graph, [(1 + rng.random((2, n))).astype(np.float32)]
        return _case(*row(block + 1), "float32"), _case(*row(block), "float32")
    if name == "reduction-store-drops-program-offset":  # one row past a program's ROWS
        def rows(r: int) -> tuple[dict, list[np.ndarray]]:
            graph = {"inputs": [{"name": "a", "shape": [r, 16]}],
                     "nodes": [node("s", "amax", ["a"], [r], dim=1, keepdim=False)],
                     "outputs": ["s"]}
            return graph, [rng.standard_normal((r, 16)).astype(np.float32)]
        return _case(*rows(block // 16 + 1), "float32"), _case(*rows(block // 16), "float32")
    raise KeyError(name)


REACH_MUTANTS = REACH


@pytest.mark.parametrize("mutant", REACH_MUTANTS)
def test_reach_mutant_needs_its_threshold_or_value(mutant: str) -> None:
    """Each reach mutant fails its triggering case (a tie, a NaN, one element / column / row
    past a tile) and passes the same case just short of it -- and the fixed MAIN graph, where
    every classic mutant shows, does not reveal it."""
    hit, miss = _reach_case(mutant)
    m = next(m for m in MUTANTS if m.name == mutant)
    for inputs in (hit, miss):
        assert checks.oracle(inputs, tc.reference(inputs), tc._fusing_run(inputs)) is None
    main = _case(MAIN, main_values(), "float32")
    with m.applied():
        failure = checks.oracle(hit, tc.reference(hit), tc._fusing_run(hit))
        assert failure is not None, f"{mutant} not caught past its threshold"
        assert checks.oracle(miss, tc.reference(miss), tc._fusing_run(miss)) is None
        assert checks.oracle(main, tc.reference(main), tc._fusing_run(main)) is None


@pytest.mark.parametrize(
    "mutant", [m.name for m in MUTANTS if m.implementation == "fusing" and m.name not in REACH_MUTANTS]
)
def test_mutant_caught_on_fixed_graph(mutant: str) -> None:
    inputs = _case(MAIN, main_values(), "float32")
    expected = tc.reference(inputs)
    assert checks.oracle(inputs, expected, tc._fusing_run(inputs)) is None
    m = next(m for m in MUTANTS if m.name == mutant)
    with m.applied():
        failure = checks.oracle(inputs, expected, tc._fusing_run(inputs))
    assert failure is not None, f"{mutant} not caught"
    assert failure.signature.startswith("mismatch:") and ":float32:" in failure.signature


@pytest.mark.parametrize("mutant", FUSION_ONLY)
def test_fusion_only_mutants_vanish_without_fusion(mutant: str) -> None:
    """Make the sub (and the exp feeding the sum) graph outputs: no two of sub/mul/exp/sum share
    a kernel any more, and the fusion-only miscompiles disappear."""
    graph = {**MAIN, "outputs": ["n0", "n1", "n2", "n3", "n6"]}
    inputs = _case(graph, main_values(), "float32")
    expected = tc.reference(inputs)
    with next(m for m in MUTANTS if m.name == mutant).applied():
        assert checks.oracle(inputs, expected, tc._fusing_run(inputs)) is None


def test_compile_counter_counts_fusing_compiles() -> None:
    before = tc.compile_calls()
    tc._fusing_run(_case(MAIN, main_values(), "float32"))
    assert tc.compile_calls() == before + 1


def test_pow_zero_is_one_for_nan_and_inf() -> None:
    """x**0 is 1 for every x (torch, IEEE pow): the template once computed x*0 + 1, NaN for NaN
    and Inf inputs -- found once the generator drew exponent 0 and special values together."""
    graph = {"inputs": [{"name": "x", "shape": [5]}],
             "nodes": [node("p", "pow", ["x"], [5], exponent=0.0),
                       node("q", "neg", ["p"], [5])],
             "outputs": ["q"]}
    values = [np.array([np.nan, np.inf, -np.inf, 0.0, -2.0], np.float32)]
    for dtype in ("float32", "float16", "bfloat16"):
        inputs = _case(graph, values, dtype)
        assert checks.oracle(inputs, tc.reference(inputs), tc._fusing_run(inputs)) is None
