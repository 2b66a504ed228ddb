"""False alarms of the typed and reduce families' error rules (review ``reduce_typed`` A1-A3).

Each test builds a small graph, bounds it with :func:`.bound.error_bounds` against the float64
reference and checks eager torch in the graph's dtype (the witness) with :func:`.checks.compare`,
as the oracle does: eager must lie within the bound, or the element must be unjudged (NaN bound).

* A1: a comparison of an int with a float16 / bfloat16 (float32 past ``2^24``) value rounds the
  int to the float dtype first, so an exact int next to an exact float is not a certain result.
* A2: ``addmm`` with ``alpha = 0`` ignores ``A @ B`` in float64 / float32 (BLAS) but gives NaN in
  float16 / bfloat16 where a row of A or a column of B holds an Inf or a NaN.
* A3: ``rms_norm`` with ``eps = 0`` on a row of tiny values: the float32 mean square underflows to
  0, so every float32 implementation gives inf (and NaN at zeros) where the reference is finite.

A2 and A3 go through a bounded op (``sin``, ``tanh``) after the node: its bound is finite however
large its input's error, so only an unjudged input keeps eager's NaN from being a finding."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

torch = pytest.importorskip("torch")

from fuzzkit.targets.compiler import checks  # noqa: E402
from fuzzkit.targets.compiler.graphs import bound, build, values  # noqa: E402
from fuzzkit.targets.compiler.graphs.ops import OPS  # noqa: E402


def _node(name: str, op: str, args: list[str], shape: list[int], **attrs) -> dict:
    return {"name": name, "op": op, "args": args, "attrs": attrs, "shape": shape}


def _graph(inputs: dict[str, list[int]], nodes: list[dict]) -> dict:
    return {"inputs": [{"name": k, "shape": v} for k, v in inputs.items()], "nodes": nodes,
            "outputs": [nodes[-1]["name"]]}


def _exact(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.asarray(values.round_to_dtype(np.asarray(x, np.float64), dtype), np.float64)


def _run(graph: dict, xs: list[np.ndarray], dtype: str
         ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The float64 reference, eager torch in ``dtype`` and the bounds of every value."""
    xs = [_exact(x, dtype) for x in xs]
    assert build.validate_graph(graph, dtype) is None
    ref = build.run_reference(graph, xs)
    eager = build.run_eager(graph, xs, dtype)
    return ref, eager, bound.error_bounds(graph, ref, dtype)


def _verdict(graph: dict, ref: dict, actual: np.ndarray, bounds: dict, dtype: str,
             out: str | None = None) -> dict | None:
    """checks.compare of ``actual`` for the output ``out`` (default the last node)."""
    out = out or graph["nodes"][-1]["name"]
    vd = build.value_dtypes(graph, dtype)[out]
    return checks.compare(out, ref[out], np.asarray(actual, np.float64), bounds[out], dtype,
                          value_dtype=vd)


# ---------------------------------------------------------------------------------------------
# A1: an int compared with a float value is rounded to the float dtype first

#: Per dtype, a base ``B`` from which ints are not all values of the dtype (its spacing is 2
#: there): the int operands ``[B+1, 300, B+3, B+2]`` (sums of exact inputs) against the floats
#: ``[B, 300, B+4, B+2]``.  ``B+1`` rounds to ``B`` and ``B+3`` to ``B+4`` (ties to even): every
#: comparison flips at one of them; ``300`` and ``B+2`` are values of the dtype (exact ties).
_BASE = {"bfloat16": 256.0, "float16": 2048.0, "float32": 2.0**24}


def _int_compare_graph(op: str, swap: bool) -> dict:
    nodes = [_node("c", "to_dtype", ["x0"], [4, 2], dtype="int64"),
             _node("s", "sum_int", ["c"], [4], dim=[1], keepdim=False)]
    args = ["x1", "s"] if swap else ["s", "x1"]
    nodes.append(_node("n0", op, args, [4]))
    return _graph({"x0": [4, 2], "x1": [4]}, nodes)


def _int_compare_values(dtype: str) -> list[np.ndarray]:
    b = _BASE[dtype]
    x0 = np.array([[b, 1.0], [256.0, 44.0], [b, 3.0], [b, 2.0]])
    x1 = np.array([b, 300.0, b + 4, b + 2])
    return [x0, x1]


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("op", ["gt", "ge", "lt", "le", "eq", "ne"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_an_int_compared_with_a_float_is_rounded_to_the_float_dtype(
        dtype: str, op: str, swap: bool) -> None:
    g = _int_compare_graph(op, swap)
    ref, eager, bounds = _run(g, _int_compare_values(dtype), dtype)
    assert ref["s"].tolist() == [_BASE[dtype] + 1, 300, _BASE[dtype] + 3, _BASE[dtype] + 2]
    # eager really differs from the reference at a rounded int (the witness is not vacuous)
    assert (eager["n0"] != ref["n0"]).any()
    assert _verdict(g, ref, eager["n0"], bounds, dtype) is None
    # ints that are values of the dtype stay exact: their ties are decided strictly
    assert bounds["n0"].tolist() == [1, 0, 1, 0]
    wrong = ref["n0"].copy()
    wrong[[1, 3]] = 1 - wrong[[1, 3]]  # e.g. gt evaluated as ge on the exact ties
    bad = _verdict(g, ref, wrong, bounds, dtype)
    assert bad is not None and bad["error_class"] == "value" and bad["count"] == 2


def test_a_small_int_or_bool_against_a_float_stays_exact() -> None:
    """Ints within the dtype's exact range (and bools) need no rounding: bound 0 throughout."""
    nodes = [_node("c", "to_dtype", ["x0"], [6], dtype="int64"),
             _node("n0", "gt", ["c", "x1"], [6])]
    g = _graph({"x0": [6], "x1": [6]}, nodes)
    x0 = np.array([1.0, 2.0, -3.0, 255.0, 256.0, 0.0])
    x1 = np.array([1.0, 1.5, -3.0, 255.0, 257.0, -0.5])
    ref, eager, bounds = _run(g, [x0, _exact(x1, "bfloat16")], "bfloat16")
    assert bounds["n0"].tolist() == [0] * 6
    assert _verdict(g, ref, eager["n0"], bounds, "bfloat16") is None
    nodes = [_node("c", "to_dtype", ["x0"], [6], dtype="bool"),
             _node("n0", "ge", ["c", "x1"], [6])]
    g = _graph({"x0": [6], "x1": [6]}, nodes)
    ref, eager, bounds = _run(g, [x0, x1], "float16")
    assert bounds["n0"].tolist() == [0] * 6


# ---------------------------------------------------------------------------------------------
# A2: addmm with alpha = 0 and an Inf or NaN in A or B


def _addmm_graph(alpha: float, after: str = "tanh") -> dict:
    nodes = [_node("t0", "addmm", ["x0", "x1", "x2"], [4, 6], beta=1.0, alpha=alpha),
             _node("n0", after, ["t0"], [4, 6])]
    return _graph({"x0": [6], "x1": [4, 5], "x2": [5, 6]}, nodes)


def _addmm_values(special: float, where: str) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    c = rng.uniform(-1, 1, 6)
    a = rng.uniform(-1, 1, (4, 5))
    b = rng.uniform(-1, 1, (5, 6))
    if where == "A":
        a[1, 2] = special  # row 1 of the result
    else:
        b[3, 4] = special  # column 4 of the result
    return [c, a, b]


@pytest.mark.parametrize("where", ["A", "B"])
@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_addmm_with_alpha_zero_leaves_what_reads_an_inf_or_nan_unjudged(
        dtype: str, special: float, where: str) -> None:
    g = _addmm_graph(0.0)
    ref, eager, bounds = _run(g, _addmm_values(special, where), dtype)
    assert np.isfinite(ref["t0"]).all()  # the reference ignores A @ B (beta C)
    assert _verdict(g, ref, eager["n0"], bounds, dtype) is None
    assert _verdict(g, ref, eager["t0"], bounds, dtype, out="t0") is None
    hit = np.zeros((4, 6), dtype=bool)
    if where == "A":
        hit[1, :] = True
    else:
        hit[:, 4] = True
    if dtype != "float32":  # the witness: eager float16 / bfloat16 multiplies out, NaN there
        assert np.isnan(eager["t0"][hit]).all() and np.isfinite(eager["t0"][~hit]).all()
    # exactly the elements that read the special value are unjudged; the rest keep a bound
    assert (np.isnan(bounds["t0"]) == hit).all() and (np.isnan(bounds["n0"]) == hit).all()
    assert np.isfinite(bounds["t0"][~hit]).all()


def test_addmm_with_alpha_nonzero_or_finite_operands_marks_nothing() -> None:
    und = OPS["addmm"].undefined
    c, a, b = _addmm_values(np.inf, "A")
    assert not np.any(und([c, a, b], {"beta": 1.0, "alpha": 0.5}, ("float16",) * 3))
    assert not np.any(und([c, a, b], {"beta": 1.0, "alpha": -1.0}, ("float16",) * 3))
    c, a, b = _addmm_values(0.5, "A")
    assert not np.any(und([c, a, b], {"beta": 1.0, "alpha": 0.0}, ("float16",) * 3))
    c[2] = np.nan  # C's NaN is the reference's too (beta 1): not alpha's business
    assert not np.any(und([c, a, b], {"beta": 1.0, "alpha": 0.0}, ("float16",) * 3))


def test_baddbmm_with_alpha_zero_is_nan_in_every_dtype_and_needs_no_hook() -> None:
    """torch's baddbmm multiplies out even in float64: the reference is NaN there too."""
    c, a, b = (torch.tensor(x)[None] for x in _addmm_values(np.inf, "A"))
    for dt in (torch.float64, torch.float32, torch.bfloat16):
        y = torch.baddbmm(c.to(dt), a.to(dt), b.to(dt), beta=1.0, alpha=0.0)
        assert torch.isnan(y[0, 1]).all() and not torch.isnan(y[0, 0]).any()
    assert OPS["baddbmm"].undefined is None


# ---------------------------------------------------------------------------------------------
# A3: rms_norm with eps = 0 on a row of tiny values


def _rms_graph(eps: float, after: str) -> dict:
    nodes = [_node("t0", "rms_norm", ["x0"], [3, 8], dim=1, eps=eps),
             _node("n0", after, ["t0"], [3, 8])]
    return _graph({"x0": [3, 8]}, nodes)


def _rms_values() -> np.ndarray:
    tiny = np.array([1e-25, -2e-25, 3e-25, 0.0, 1e-25, -1e-25, 2e-25, 5e-26])
    small = np.full(8, 1e-17) * np.array([1, -2, 3, 1, 1, -1, 2, 0.5])  # squares stay normal
    ones = np.array([1.0, -2.0, 3.0, 0.5, 1.0, -1.0, 2.0, 0.25])
    return np.stack([tiny, small, ones])


@pytest.mark.parametrize("after", ["sin", "tanh"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_rms_norm_with_eps_zero_leaves_a_row_whose_mean_square_underflows_unjudged(
        dtype: str, after: str) -> None:
    g = _rms_graph(0.0, after)
    ref, eager, bounds = _run(g, [_rms_values()], dtype)
    assert np.isfinite(ref["t0"]).all()
    # the witness: eager's mean square is 0 on the tiny row (inf there, 0 * inf = NaN at its 0)
    assert not np.isfinite(eager["t0"][0]).any()
    assert np.isfinite(eager["t0"][1:]).all()
    assert _verdict(g, ref, eager["n0"], bounds, dtype) is None
    assert _verdict(g, ref, eager["t0"], bounds, dtype, out="t0") is None
    assert np.isnan(bounds["t0"][0]).all() and np.isnan(bounds["n0"][0]).all()
    # rows whose squares stay float32 normals keep a finite bound
    assert np.isfinite(bounds["t0"][1:]).all() and np.isfinite(bounds["n0"][1:]).all()


def test_rms_norm_marks_nothing_with_an_eps_that_keeps_the_mean_square_nonzero() -> None:
    und = OPS["rms_norm"].undefined
    x = _rms_values()
    for eps in (1e-6, 1e-5, 1e-3, 2.0**-126):
        assert not np.any(und([x], {"dim": 1, "eps": eps}, ("float32",)))
    marked = np.asarray(und([x], {"dim": 1, "eps": 0.0}, ("float32",)))
    assert marked[0].all() and not marked[1:].any()  # the tiny row only, all of it
    # eps below float32's smallest normal may be flushed (or round to 0): it does not help
    assert np.asarray(und([x], {"dim": 1, "eps": 1e-40}, ("float32",)))[0].all()
    # dim 0 normalizes the whole tensor: the normal rows keep its mean square far from 0
    assert not np.any(und([x], {"dim": 0, "eps": 0.0}, ("float32",)))


@pytest.mark.parametrize("flush", [False, True])
@pytest.mark.parametrize("n", [1, 8, 64])
def test_rms_norm_marks_every_row_where_eager_float32_gives_inf_or_nan(n: int, flush: bool
                                                                      ) -> None:
    """Sweep the row magnitude across the underflow edge, with and without flush-to-zero
    (denormals-are-zero kernels): wherever eager's mean square is 0, the row is unjudged."""
    und = OPS["rms_norm"].undefined
    mags = 10.0 ** np.arange(-30.0, -14.0, 0.25)
    rng = np.random.default_rng(n)
    x = mags[:, None] * rng.uniform(0.5, 2.0, (len(mags), n)) * rng.choice([-1, 1], n)
    x = _exact(x, "float32")
    marked = np.asarray(und([x], {"dim": 1, "eps": 0.0}, ("float32",)))[:, 0]
    if flush and not torch.set_flush_denormal(True):
        pytest.skip("no flush-to-zero on this CPU")
    try:
        for dt in (torch.float32, torch.bfloat16):
            y = torch.nn.functional.rms_norm(torch.tensor(x).to(dt), (n,), eps=0.0)
            broken = ~torch.isfinite(y).all(dim=1).numpy()
            assert broken.any() and not (broken & ~marked).any()
    finally:
        torch.set_flush_denormal(False)
    assert not marked[mags >= 1e-17].any()  # far above the edge: judged


# ---------------------------------------------------------------------------------------------
# a value compared with itself where an evaluation may be NaN at a finite reference


@pytest.mark.parametrize("op", ["eq", "ge", "le", "ne", "gt", "lt"])
def test_a_value_compared_with_itself_is_decided_only_where_it_cannot_be_nan(op: str) -> None:
    """``q = m / m`` with ``m = x * y`` underflowing in float32 (reference ``1e-60``): the
    reference of q is 1, float32 evaluates ``0 / 0`` = NaN, and q's bound is infinite (the
    denominator's interval reaches 0).  ``q == q`` is then True in the reference and False in
    eager: not decided (``gt`` / ``lt`` of a value with itself are false either way)."""
    nodes = [_node("m", "mul", ["x0", "x1"], [4]), _node("q", "div", ["m", "m"], [4]),
             _node("n0", op, ["q", "q"], [4])]
    graph = _graph({"x0": [4], "x1": [4]}, nodes)
    x = np.array([1e-30, 2.0, 1e-30, -3.0])
    ref, eager, bounds = _run(graph, [x, x], "float32")
    assert np.isfinite(ref["q"]).all() and np.isnan(eager["q"][[0, 2]]).all()
    assert _verdict(graph, ref, eager["n0"], bounds, "float32") is None
    if op in ("gt", "lt"):
        assert (bounds["n0"] == 0).all()  # false in every evaluation: still decided
    else:
        assert (bounds["n0"][[1, 3]] == 0).all()  # a finite error: still decided there
