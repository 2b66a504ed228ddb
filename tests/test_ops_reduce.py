"""The ``reduce`` op family (``targets/compiler/graphs/ops_reduce.py``): reductions, scans,
norms, linear algebra, attention and sorting.

What the generic per-op tests (``tests/test_graph_ops.py``) cannot say on one drawn case:

* every op's concrete and z3 shape rules accept a well-formed node and refuse a malformed one
  (one line), and agree with torch's meta kernels on the accepted one;
* sdpa's composed bound (scores' matmul rule, softmax rule, ``P V`` matmul rule) holds against
  eager float16 and float32 on random causal and non-causal, square and non-square cases, and
  an output one element off by four times the bound is caught by the oracle;
* the bounds are tight enough to catch plausible wrong implementations (a var with the other
  correction, a non-causal attention for a causal node, swapped alpha/beta, the upper median,
  ...), while the correct one passes;
* sort and topk values at ties: exact inputs give a zero bound (selections), so ties are
  decided exactly and a one-ulp difference is a finding;
* the work limit refuses an oversized addmm / sdpa / einsum graph from a file in one line, and
  every matmul-like op states its work;
* two real Inductor runs of one-node cases pass.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

torch = pytest.importorskip("torch")
z3 = pytest.importorskip("z3")

from fuzzkit import limits  # noqa: E402
from fuzzkit.targets.compiler import checks, reference  # noqa: E402
from fuzzkit.targets.compiler import limits as compiler_limits  # noqa: E402
from fuzzkit.targets.compiler.graphs import bound, build, ops, ops_reduce  # noqa: E402
from fuzzkit.targets.compiler.graphs.ops import OPS, SpecError  # noqa: E402
from fuzzkit.targets.compiler.graphs.values import round_to_dtype  # noqa: E402

FAMILY = [r.name for r in ops_reduce.RECORDS]


def node(name: str, op: str, args: list[str], out: list[int], **attrs: Any) -> dict:
    return {"name": name, "op": op, "args": list(args), "attrs": attrs, "shape": list(out)}


def one_node(op: str, shapes: list[list[int]], attrs: dict) -> dict:
    names = [f"x{k}" for k in range(len(shapes))]
    out = OPS[op].out_shape(shapes, attrs)
    return {"inputs": [{"name": n, "shape": list(s)} for n, s in zip(names, shapes)],
            "nodes": [node("y", op, names, out, **attrs)], "outputs": ["y"]}


def values_for(graph: dict, seed: int, low: float = -2.0, high: float = 2.0,
               integers: bool = False) -> list[np.ndarray]:
    """Input values exact in every dtype (bfloat16-rounded; small integers for ties)."""
    rng = np.random.default_rng(seed)
    out = []
    for x in graph["inputs"]:
        if integers:
            out.append(rng.integers(-2, 3, x["shape"]).astype(np.float64))
        else:
            out.append(round_to_dtype(rng.uniform(low, high, x["shape"]), "bfloat16"))
    return out


def case(graph: dict, values: list[np.ndarray], dtype: str) -> dict:
    return {"graph": graph, "dtype": dtype, "dynamic": False,
            "values": [round_to_dtype(v, dtype).astype(np.float32) for v in values]}


def run_as(fn: Callable[..., Any], inputs: dict, attrs: dict) -> dict:
    """``fn`` (a torch function, right or wrong) run eagerly in the case dtype, as an
    implementation's outputs."""
    dtype = getattr(torch, inputs["dtype"])
    ts = [torch.as_tensor(np.asarray(v)).to(dtype) for v in inputs["values"]]
    out = fn(*ts, **attrs)
    return {"outputs": [out.detach().to(torch.float64).numpy()]}


# ---------------------------------------------------------------------------------------------
# shape rules: a well-formed node (torch agrees) and a malformed one, concrete and z3


#: op -> (attrs, shapes torch accepts, shapes the rule refuses)
SHAPES: dict[str, tuple[dict, list[list[int]], list[list[int]]]] = {
    "prod": ({"dim": [0, 2], "keepdim": False}, [[3, 4, 5]], [[3, 4]]),
    "var": ({"dim": [1], "correction": 1, "keepdim": True}, [[3, 4]], [[3]]),
    "std": ({"dim": [1], "correction": 0, "keepdim": False}, [[3, 4]], [[3]]),
    "logsumexp": ({"dim": [0, 1], "keepdim": True}, [[2, 3, 4]], [[2]]),
    "nansum": ({"dim": 0, "keepdim": False}, [[2, 3]], [[]]),
    "norm": ({"p": math.inf, "dim": [0], "keepdim": False}, [[2, 3]], [[0, 3]]),
    "max_dim_values": ({"dim": 1, "keepdim": False}, [[2, 3]], [[2, 0]]),
    "min_dim_values": ({"dim": 0, "keepdim": True}, [[2, 3]], [[]]),
    "median_values": ({"dim": 1, "keepdim": False}, [[2, 4]], [[2]]),
    "kthvalue_values": ({"k": 3, "dim": 1, "keepdim": False}, [[2, 3]], [[2, 2]]),
    "sort_values": ({"dim": 1, "descending": True}, [[2, 3]], [[2]]),
    "topk_values": ({"k": 2, "dim": 0, "largest": False}, [[3, 3]], [[1, 3]]),
    "cumprod": ({"dim": 1}, [[2, 3]], [[2]]),
    "cummax_values": ({"dim": 0}, [[2, 3]], [[]]),
    "cummin_values": ({"dim": 2}, [[2, 3, 4]], [[2, 3]]),
    "logcumsumexp": ({"dim": 0}, [[5]], [[]]),
    "addmm": ({"beta": 0.5, "alpha": 2.0}, [[1, 4], [3, 5], [5, 4]], [[3, 4], [3, 5], [4, 4]]),
    "baddbmm": ({"beta": 1.0, "alpha": 0.0}, [[3, 1], [2, 3, 5], [2, 5, 4]],
                [[2, 3, 3], [2, 3, 5], [2, 5, 4]]),
    "linear": ({}, [[2, 3, 4], [5, 4], [5]], [[2, 3, 4], [5, 4], [4]]),
    "einsum": ({"form": 4}, [[2, 3, 4], [2, 5, 4]], [[2, 3, 4], [2, 5, 3]]),
    "sdpa": ({"is_causal": True, "scale": None}, [[2, 3, 4], [2, 5, 4], [2, 5, 6]],
             [[2, 3, 4], [2, 5, 4], [2, 6, 6]]),
    "rms_norm": ({"dim": 1, "eps": 1e-5}, [[2, 3, 4]], [[2]]),
}


def test_every_op_of_the_family_has_a_shape_case() -> None:
    assert sorted(SHAPES) == sorted(FAMILY) and len(FAMILY) >= 18


def _z3_sat(op: str, attrs: dict, shapes: list[list[int]]) -> bool:
    """The op's z3 rule on these concrete dims (as z3 integers): satisfiable or not."""
    ops.reset_z3(z3.Context())
    ctx = ops._Z3_STATE["ctx"]
    try:
        private = dict(attrs)
        if op == "topk_values":  # the generator's private k mode: k free, below the dim
            private["_k"] = "any"
        cons, out = OPS[op].shape_rule([[ops.int_val(d) for d in s] for s in shapes], private)
        solver = z3.Solver(ctx=ctx)
        solver.add(*cons)
        return solver.check() == z3.sat
    finally:
        ops.reset_z3(None)


@pytest.mark.parametrize("op", FAMILY)
def test_shape_rules_accept_the_well_formed_and_refuse_the_malformed(op: str) -> None:
    attrs, good, bad = SHAPES[op]
    spec = OPS[op]
    out = spec.out_shape(good, attrs)
    assert ops.eval_shape(op, attrs, good) == out  # torch's meta kernels agree
    with pytest.raises(SpecError) as info:
        spec.out_shape(bad, attrs)
    assert "\n" not in str(info.value)
    # k beyond the dim, an empty dim: value-level refusals of the concrete rule only
    if op not in ("kthvalue_values", "topk_values", "norm", "max_dim_values"):
        if all(len(b) == len(g) for b, g in zip(bad, good)):
            assert _z3_sat(op, attrs, good) and not _z3_sat(op, attrs, bad), op


def test_attribute_values_a_file_may_not_give_are_refused() -> None:
    """Attrs from files: p outside {1, 2, inf}, an einsum form past the table, k of 0, an
    infinite sdpa scale, a correction of 2."""
    refusals = [
        ("norm", {"p": 3.0, "dim": 0, "keepdim": False}, [[2, 3]], "p 1, 2 or inf"),
        ("einsum", {"form": len(ops_reduce.EINSUM_FORMS)}, [[2, 2], [2, 2]], "form"),
        ("topk_values", {"k": 0, "dim": 0, "largest": True}, [[2, 3]], "'k'"),
        ("sdpa", {"is_causal": False, "scale": math.inf}, [[1, 2, 2]] * 3, "'scale'"),
        ("var", {"dim": 0, "correction": 2, "keepdim": False}, [[2, 3]], "'correction'"),
        ("sdpa", {"is_causal": False, "scale": None}, [[1, 2, 0], [1, 2, 0], [1, 2, 3]],
         "1/sqrt(E)"),
    ]
    for op, attrs, shapes, words in refusals:
        with pytest.raises(SpecError, match=words.replace("(", r"\(").replace(")", r"\)")):
            OPS[op].out_shape(shapes, attrs)


# ---------------------------------------------------------------------------------------------
# sdpa: the composed bound against eager float16 / float32, and what it catches

SDPA_CASES = [
    # (q, k, v shapes, is_causal, scale)
    ([2, 5, 8], [2, 5, 8], [2, 5, 4], True, None),
    ([2, 5, 8], [2, 7, 8], [2, 7, 3], True, None),  # causal, more keys than queries
    ([1, 9, 4], [1, 3, 4], [1, 3, 6], True, 0.5),  # causal, fewer keys: late rows see all
    ([2, 3, 6, 8], [2, 3, 6, 8], [2, 3, 6, 8], False, None),
    ([1, 2, 16, 32], [1, 2, 33, 32], [1, 2, 33, 16], False, 4.0),  # peaked softmax
    ([3, 4, 4], [3, 4, 4], [3, 4, 5], False, 0.0),  # uniform attention
]


@pytest.mark.parametrize("shapes_causal_scale", SDPA_CASES)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_the_sdpa_bound_holds_against_eager_and_catches_an_element_off_by_4x(
    shapes_causal_scale: tuple, dtype: str
) -> None:
    *shapes, causal, scale = shapes_causal_scale
    graph = one_node("sdpa", shapes, {"is_causal": causal, "scale": scale})
    for seed in range(3):
        values = values_for(graph, seed)
        inputs = case(graph, values, dtype)
        expected = reference(inputs)
        eager = build.run_eager(graph, inputs["values"], dtype)["y"]
        bounds = bound.error_bounds(graph, expected["intermediates"], dtype)["y"]
        assert np.all(np.isfinite(bounds)) and np.all(bounds > 0)
        err = np.abs(eager - expected["outputs"][0])
        assert np.all(err <= bounds), float(np.max(err / bounds))
        # not vacuous: a small fraction of |V| (the output is a convex combination of V) --
        # except for scores of hundreds in float16, which a math-path evaluation rounds to
        # the dtype (an error of a quarter in an exponent)
        if dtype == "float32" or scale != 4.0:
            assert float(np.max(bounds)) < 0.05 * float(np.max(np.abs(values[2])))
        assert checks.divergence(inputs, expected, {"outputs": [eager]}) is None
        # one element off by 4x its bound: caught, and named by the op and dtype
        off = eager.copy()
        index = tuple(int(i) for i in np.unravel_index(seed * 7 % off.size, off.shape))
        off[index] = expected["outputs"][0][index] + 4 * bounds[index]
        div = checks.divergence(inputs, expected, {"outputs": [off]})
        assert div is not None and (div["op"], div["dtype"], div["error_class"]) == (
            "sdpa", dtype, "value") and tuple(div["worst"]["index"]) == index


def test_the_sdpa_bound_takes_input_errors_through_all_three_steps() -> None:
    """After an inexact op (exp of the inputs), the bound grows with the propagated errors of
    q, k and v -- each alone makes it larger than exact inputs do."""
    graph = one_node("sdpa", [[1, 4, 8], [1, 6, 8], [1, 6, 5]], {"is_causal": True,
                                                                 "scale": None})
    values = values_for(graph, 0)
    ref = build.run_reference(graph, values)
    exact = bound.error_bounds(graph, ref, "float16")["y"]
    spec = OPS["sdpa"]
    xs = [ref[f"x{k}"] for k in range(3)]
    for k in range(3):
        es = [np.zeros_like(x) for x in xs]
        es[k] = 1e-3 * np.abs(xs[k])
        grown = bound.node_bound("sdpa", graph["nodes"][0]["attrs"], xs, es, ref["y"],
                                 "float16")
        assert np.all(grown >= exact) and np.any(grown > exact), k
    assert spec.partial is not None and spec.reads is ops_reduce.reads_sdpa


# ---------------------------------------------------------------------------------------------
# the bounds catch plausible wrong implementations; the right one passes

F = torch.nn.functional


def _wrong_sdpa(q, k, v, is_causal, scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=not is_causal, scale=scale)


def _upper_median(a, dim, keepdim):
    return torch.sort(a, dim=dim).values.select(dim, a.shape[dim] // 2)


WRONG = [
    # (op, attrs, shapes, a wrong implementation, values: "real" or "int")
    ("var", {"dim": [0, 1], "correction": 1, "keepdim": False}, [[4, 6, 3]],
     lambda a, dim, correction, keepdim: torch.var(a, dim=dim, correction=0, keepdim=keepdim)),
    ("std", {"dim": 2, "correction": 0, "keepdim": True}, [[4, 6, 3]],
     lambda a, dim, correction, keepdim: torch.std(a, dim=dim, correction=1, keepdim=keepdim)),
    ("prod", {"dim": 1, "keepdim": False}, [[3, 7]],
     lambda a, dim, keepdim: torch.prod(a[:, :-1], dim=dim)),  # last factor dropped
    ("logsumexp", {"dim": [1], "keepdim": False}, [[3, 9]],
     lambda a, dim, keepdim: torch.amax(a, dim=dim)),  # the max alone
    ("norm", {"p": 2.0, "dim": None, "keepdim": False}, [[3, 5]],
     lambda a, p, dim, keepdim: torch.linalg.vector_norm(a, ord=1.0)),
    ("median_values", {"dim": 1, "keepdim": False}, [[5, 8]],
     lambda a, dim, keepdim: _upper_median(a, dim, keepdim)),
    ("kthvalue_values", {"k": 2, "dim": 0, "keepdim": False}, [[6, 5]],
     lambda a, k, dim, keepdim: torch.kthvalue(a, k + 1, dim=dim).values),
    ("topk_values", {"k": 3, "dim": 1, "largest": True}, [[4, 9]],
     lambda a, k, dim, largest: torch.topk(a, k, dim=dim, largest=False).values),
    ("sort_values", {"dim": 0, "descending": True}, [[7, 3]],
     lambda a, dim, descending: torch.sort(a, dim=dim).values),
    ("cumprod", {"dim": 1}, [[3, 6]], lambda a, dim: torch.cumprod(a.flip(dim), dim).flip(dim)),
    ("cummax_values", {"dim": 1}, [[3, 6]], lambda a, dim: torch.cummin(a, dim=dim).values),
    ("logcumsumexp", {"dim": 0}, [[9, 2]],
     lambda a, dim: torch.cumsum(a.exp(), dim=dim).log1p()),
    ("addmm", {"beta": 0.5, "alpha": 2.0}, [[4], [3, 5], [5, 4]],
     lambda c, a, b, beta, alpha: torch.addmm(c, a, b, beta=alpha, alpha=beta)),
    ("baddbmm", {"beta": 1.0, "alpha": -1.0}, [[2, 3, 4], [2, 3, 5], [2, 5, 4]],
     lambda c, a, b, beta, alpha: torch.baddbmm(c, a, b)),
    ("linear", {}, [[2, 3, 4], [5, 4], [5]], lambda x, w, b: F.linear(x, w, b * 0)),
    ("einsum", {"form": 1}, [[3, 4], [3, 4]],
     lambda a, b, form: torch.einsum("ij,kj->ki", a, b)),
    ("sdpa", {"is_causal": True, "scale": None}, [[2, 6, 8], [2, 6, 8], [2, 6, 4]],
     _wrong_sdpa),
    ("rms_norm", {"dim": 1, "eps": 1e-5}, [[2, 3, 4]],
     lambda a, dim, eps: F.rms_norm(a, (a.shape[-1],), eps=eps)),  # the last dim only
    ("nansum", {"dim": 0, "keepdim": False}, [[5, 3]],
     lambda a, dim, keepdim: torch.nansum(a[1:], dim=dim)),
    ("max_dim_values", {"dim": 1, "keepdim": True}, [[4, 5]],
     lambda a, dim, keepdim: torch.max(a[:, 1:], dim=dim, keepdim=keepdim).values),
    ("min_dim_values", {"dim": 0, "keepdim": False}, [[4, 5]],
     lambda a, dim, keepdim: torch.amax(a, dim=dim)),
    ("cummin_values", {"dim": 0}, [[6, 2]],
     lambda a, dim: torch.cummin(a.flip(0), dim=0).values.flip(0)),
]


def test_every_op_of_the_family_has_a_wrong_implementation_to_catch() -> None:
    assert sorted({w[0] for w in WRONG}) == sorted(FAMILY)


@pytest.mark.parametrize("op,attrs,shapes,wrong", WRONG, ids=[w[0] for w in WRONG])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_wrong_implementation_is_caught_and_the_right_one_passes(
    op: str, attrs: dict, shapes: list, wrong: Callable[..., Any], dtype: str
) -> None:
    graph = one_node(op, shapes, attrs)
    # positive values for the products (a drop of one factor of magnitude ~1 still shows)
    low = 0.5 if op in ("prod", "cumprod") else -2.0
    inputs = case(graph, values_for(graph, 1, low=low), dtype)
    expected = reference(inputs)
    right = run_as(OPS[op].torch_fn, inputs, attrs)
    assert checks.divergence(inputs, expected, right) is None
    div = checks.divergence(inputs, expected, run_as(wrong, inputs, attrs))
    assert div is not None and div["op"] == op and div["dtype"] == dtype, div


# ---------------------------------------------------------------------------------------------
# sort / topk values at ties


@pytest.mark.parametrize("op,attrs", [
    ("sort_values", {"dim": 1, "descending": False}),
    ("sort_values", {"dim": 0, "descending": True}),
    ("topk_values", {"k": 4, "dim": 1, "largest": True}),
    ("topk_values", {"k": 1, "dim": 0, "largest": False}),
    ("topk_values", {"k": 9, "dim": 1, "largest": False}),  # k = n: the whole row, sorted
    ("kthvalue_values", {"k": 5, "dim": 1, "keepdim": False}),
    ("median_values", {"dim": 1, "keepdim": True}),
    ("cummax_values", {"dim": 1}),
])
def test_selections_at_ties_are_exact_and_a_one_ulp_slip_is_caught(op: str, attrs: dict) -> None:
    """Small integers make ties in every row: whichever tied index an implementation picks,
    the values are the same, so the bound of exact inputs is exactly 0 -- and a result one
    ulp off (a wrong pick between values that are not tied) is a finding."""
    graph = one_node(op, [[6, 9]], attrs)
    values = values_for(graph, 0, integers=True)
    assert any(len(set(row)) < len(row) for row in values[0])  # ties
    inputs = case(graph, values, "float16")
    expected = reference(inputs)
    bounds = bound.error_bounds(graph, expected["intermediates"], "float16")["y"]
    assert np.all(bounds == 0)
    eager = run_as(OPS[op].torch_fn, inputs, attrs)
    assert checks.divergence(inputs, expected, eager) is None
    slipped = eager["outputs"][0].copy()
    slipped.flat[0] = np.nextafter(np.float16(slipped.flat[0]), np.float16(np.inf))
    div = checks.divergence(inputs, expected, {"outputs": [slipped]})
    assert div is not None and div["error_class"] == "value" and div["op"] == op


def test_selections_of_inexact_values_move_by_the_largest_error_of_the_row() -> None:
    """sort / topk of values with errors: the bound is the row's largest input error (the j-th
    order statistic is 1-Lipschitz in the max norm), not the element's own."""
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    e = np.array([[0.0, 0.5, 0.0], [0.0, 0.0, 0.25]])
    for op, attrs in (("sort_values", {"dim": 1, "descending": True}),
                      ("topk_values", {"k": 2, "dim": 1, "largest": False})):
        y = OPS[op].torch_fn(torch.from_numpy(x), **attrs).numpy()
        prop, comp = OPS[op].error(ops_reduce.er.Operands(
            [x], [e], y, np.abs(y), 2.0**-11, attrs, False, OPS[op].torch_fn))
        assert np.all(prop == np.array([[0.5], [0.25]])) and not np.any(comp)


# ---------------------------------------------------------------------------------------------
# resource limits: the work of matmul-like ops


def test_every_matmul_like_op_states_its_work() -> None:
    table = compiler_limits.work_functions()
    for name, spec in OPS.items():
        if spec.kind in ("matmul", "attention"):
            assert name in table, name


@pytest.mark.parametrize("op,shapes,attrs", [
    ("addmm", [[1024], [1024, 1024], [1024, 1024]], {"beta": 1.0, "alpha": 1.0}),
    ("baddbmm", [[1], [64, 128, 128], [64, 128, 128]], {"beta": 0.0, "alpha": 1.0}),
    ("sdpa", [[8, 512, 64], [8, 2048, 64], [8, 2048, 64]], {"is_causal": True,
                                                             "scale": None}),
    ("einsum", [[1024, 1024], [1024, 1024]], {"form": 2}),
    ("linear", [[1024, 1024], [1024, 1024], [1024]], {}),
])
def test_the_work_limit_refuses_an_oversized_graph_from_a_file(
    op: str, shapes: list, attrs: dict
) -> None:
    """A few bytes of JSON asking for a billion multiply-adds (every tensor within the element
    limits): refused in one line naming the limit, before anything is allocated; raising the
    limit lets it through."""
    inputs = {"graph": one_node(op, shapes, attrs), "dtype": "float32", "values": []}
    work = compiler_limits.matmul_work(inputs)
    default = next(lim.default for lim in compiler_limits.LIMITS if lim.name == "matmul_work")
    assert work > default
    problem = limits.check("compiler", compiler_limits.LIMITS, inputs)
    assert problem is not None and "matmul_work=" in problem and "\n" not in problem, problem
    assert limits.check("compiler", compiler_limits.LIMITS, inputs, {"matmul_work": work}) is None


def test_the_work_of_a_small_graph_is_counted_exactly() -> None:
    graph = one_node("sdpa", [[2, 3, 4], [2, 5, 4], [2, 5, 6]], {"is_causal": False,
                                                                 "scale": 1.0})
    assert compiler_limits.matmul_work({"graph": graph}) == 2 * 3 * 5 * (4 + 6)
    graph = one_node("einsum", [[2, 3, 4], [2, 3, 4]], {"form": 6})  # bij,bij->bj
    assert compiler_limits.matmul_work({"graph": graph}) == 2 * 3 * 4
    graph = one_node("addmm", [[1], [3, 5], [5, 4]], {"beta": 1.0, "alpha": 1.0})
    assert compiler_limits.matmul_work({"graph": graph}) == 3 * 5 * 4


# ---------------------------------------------------------------------------------------------
# real Inductor runs (two small compiles)


@pytest.mark.parametrize("op,shapes,attrs,dtype", [
    ("sdpa", [[2, 5, 8], [2, 7, 8], [2, 7, 4]], {"is_causal": True, "scale": None},
     "float16"),
    ("addmm", [[4], [3, 5], [5, 4]], {"beta": 0.0, "alpha": 2.0}, "float32"),
])
def test_inductor_runs_a_one_node_case_within_the_bound(
    op: str, shapes: list, attrs: dict, dtype: str
) -> None:
    from fuzzkit.runner import check_case
    from fuzzkit.targets.compiler import target as compiler_target

    graph = one_node(op, shapes, attrs)
    values = values_for(graph, 2)
    if op == "addmm":  # beta 0: NaN and Inf in the bias are ignored, by the reference too
        values[0][0] = np.nan
        values[0][1] = np.inf
    target = compiler_target()
    inputs = case(graph, values, dtype)
    assert checks.validate(inputs) is None
    verdict = check_case(target, target.implementation("inductor"), inputs,
                         properties=False, confirm=False)
    assert verdict.failure is None, verdict.failure.message
    assert np.all(np.isfinite(verdict.expected["outputs"][0]))


def test_generated_attention_keeps_its_scores_small() -> None:
    """sdpa's value range includes its scores (an intermediate), so the generator's magnitude
    guards clamp q and k until ``|scale| E |q| |k|`` is within the magnitude limit: a math-path
    float16 evaluation never sees its scores overflow the dtype."""
    from fuzzkit.targets.compiler.graphs import generate

    seen = 0
    for seed in range(40):
        graph = generate.random_graph(seed, 5, ["mul", "exp", "sdpa"])
        ivals = generate.value_intervals(graph)
        shapes = build.shapes_of(graph)
        for n in graph["nodes"]:
            if n["op"] != "sdpa":
                continue
            seen += 1
            q, k = (ivals[a] for a in n["args"][:2])
            e = shapes[n["args"][0]][-1]
            scale = n["attrs"]["scale"]
            sc = abs(scale) if scale is not None else 1 / math.sqrt(e)
            scores = sc * e * max(map(abs, q)) * max(map(abs, k))
            assert scores <= generate.MAGNITUDE_LIMIT, (seed, n)
    assert seen >= 5
