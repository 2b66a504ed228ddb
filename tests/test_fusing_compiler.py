"""The fusing compiler's generated Triton kernels against eager float64 (``pytest -m kernel``):
partitioning, broadcasting, permuted inputs, reductions with tails, every dtype, and every
miscompile mutant caught on a fixed graph."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest.importorskip("torch")
pytest.importorskip("triton")

from fuzzkit import triton_support  # noqa: E402

triton_support.prepare()

import torch  # noqa: E402

from fuzzkit.graphs import build  # noqa: E402
import targets.compiler as tc  # noqa: E402
from targets.compiler import checks  # noqa: E402
from targets.compiler.fusing import codegen, runtime  # noqa: E402
from targets.compiler.mutants import FUSION_ONLY, MUTANTS  # noqa: E402

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


@pytest.mark.parametrize("mutant", [m.name for m in MUTANTS])
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
