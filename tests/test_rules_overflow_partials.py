"""Overflow of partial results and dtype rules in the ``elementwise`` and ``layout`` families
(review ``elementwise_layout`` A1-A4, B1).

An element whose evaluation may overflow float32 on the way (a partial result such as round's
``x * 10^d``, fmod's quotient, addcmul's ``value * t1``) while the float64 reference stays finite
must be *unjudged* (a NaN bound), or eager torch -- which overflows there too -- is a false
alarm.  Each test runs one node through :func:`.bound.error_bounds` and checks eager torch in the
graph's dtype (the witness, vectorized: at least 16 elements) with :func:`.checks.compare`, as
the oracle does."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

torch = pytest.importorskip("torch")

from fuzzkit.targets.compiler import checks  # noqa: E402
from fuzzkit.targets.compiler.graphs import bound, build, values  # noqa: E402
from fuzzkit.targets.compiler.graphs.ops import OPS  # noqa: E402

_TD = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _exact(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.asarray(values.round_to_dtype(np.asarray(x, np.float64), dtype), np.float64)


def _tile(x: float | list[float], n: int = 20) -> np.ndarray:
    """``n`` elements (the vectorized kernels), the values of ``x`` repeated."""
    return np.resize(np.asarray(x, np.float64), n)


def _eager_verdict(op: str, attrs: dict, xs: list[np.ndarray], dtype: str,
                   upcast: bool = False):
    """Eager torch in ``dtype`` (``upcast``: in float32 on the dtype's values, rounded to the
    dtype at the end, as Inductor's fused kernels compute) against the float64 reference under
    the bound of a one-node graph: the verdict (None: no finding), the bound, eager's result."""
    xs = [_exact(x, dtype) for x in xs]
    spec = OPS[op]
    y = spec.torch_fn(*[torch.tensor(x) for x in xs], **attrs)
    g = {"inputs": [{"name": f"x{i}", "shape": list(x.shape)} for i, x in enumerate(xs)],
         "nodes": [{"name": "n0", "op": op, "args": [f"x{i}" for i in range(len(xs))],
                    "attrs": attrs, "shape": list(y.shape)}],
         "outputs": ["n0"]}
    ref = build.run_reference(g, xs)
    b = bound.error_bounds(g, ref, dtype)["n0"]
    if upcast:
        low = spec.torch_fn(*[torch.tensor(x, dtype=torch.float32) for x in xs], **attrs)
        low = low.to(_TD[dtype])
    else:
        low = spec.torch_fn(*[torch.tensor(x, dtype=_TD[dtype]) for x in xs], **attrs)
    actual = low.double().numpy()
    vd = build.value_dtypes(g, dtype)["n0"]
    return checks.compare("n0", ref["n0"], actual, b, dtype, value_dtype=vd), b, actual


# ---------------------------------------------------------------------------------------------
# A1: round with decimals > 0


@pytest.mark.parametrize("dtype,x,d", [("float32", -1.382e38, 2), ("float32", 1.0e38, 1),
                                       ("bfloat16", 1.635e38, 1)])
def test_round_with_decimals_of_a_huge_value_overflowing_is_unjudged(dtype, x, d) -> None:
    xs = [_tile([x, 1.25, -2.5, 0.125])]
    bad, b, actual = _eager_verdict("round", {"decimals": d}, xs, dtype)
    assert np.isinf(actual[0])  # eager's x * 10^d overflowed
    assert bad is None, bad
    assert np.isnan(b[0]) and np.isfinite(b[1:4]).all()  # only the huge one is unjudged


# ---------------------------------------------------------------------------------------------
# A2: fmod and remainder with a quotient beyond float32's range


@pytest.mark.parametrize("op", ["fmod", "remainder_tensor"])
@pytest.mark.parametrize("dtype,a,b", [("float32", 2.8558e38, 0.69265),
                                       ("bfloat16", -3.1769e38, 0.78125)])
def test_fmod_and_remainder_of_an_overflowing_quotient_are_unjudged(op, dtype, a, b) -> None:
    """float32: eager's vectorized Sleef fmod; bfloat16: the float32 kernel Inductor fuses
    (eager bfloat16 takes another path, exact here)."""
    xs = [_tile([a, 7.5, -3.25, 1.0]), _tile([b, 2.0, 0.75, 3.0])]
    bad, bnd, actual = _eager_verdict(op, {}, xs, dtype, upcast=dtype != "float32")
    assert np.isnan(actual[0])  # Sleef's vectorized fmod: NaN where |a / b| > FLT_MAX
    assert bad is None, bad
    assert np.isnan(bnd[0]) and np.isfinite(bnd[1:4]).all()


# ---------------------------------------------------------------------------------------------
# A3: addcmul / addcdiv, the product value * t1 of eager's (value * t1) * t2


@pytest.mark.parametrize("dtype,xs", [
    ("float32", [-3.03e19, -2.107e38, -0.2777]),
    ("bfloat16", [1.0, -2.107e38, 0.0]),
])
def test_addcmul_with_value_times_t1_overflowing_is_unjudged(dtype, xs) -> None:
    args = [_tile([v, 1.0]) for v in xs]
    bad, b, actual = _eager_verdict("addcmul", {"value": 2.0}, args, dtype)
    assert not np.isfinite(actual[0])  # 2 * t1 = inf first
    assert bad is None, bad
    assert np.isnan(b[0]) and np.isfinite(b[1])


@pytest.mark.parametrize("xs", [[-0.0, -3.197e38, 2.179e38], [np.inf, -3.197e38, 2.179e38]])
def test_addcdiv_with_value_times_t1_overflowing_is_unjudged(xs) -> None:
    args = [_tile([v, 1.0]) for v in xs]
    bad, b, actual = _eager_verdict("addcdiv", {"value": 2.0}, args, "float32")
    assert not np.isfinite(actual[0])
    assert bad is None, bad
    assert np.isnan(b[0]) and np.isfinite(b[1])


# ---------------------------------------------------------------------------------------------
# A4: inplace_index_put_moved's value range counts the values sent along b's first dim


def test_index_put_moved_range_counts_the_moved_operands_first_dim() -> None:
    attrs = {"dim": 1, "index": [0] * 40, "accumulate": True}
    ivals = [(0.0, 0.0), (-1000.0, 1000.0)]
    lo, hi = OPS["inplace_index_put_moved"].interval(attrs, ivals, [[2, 40], [40, 2]], [2, 40])
    assert lo <= -40000.0 and hi >= 40000.0  # all 40 rows of b may land on one destination
    # index_put (b in the same frame, dim 0) and the copy (accumulate=False) are unchanged
    assert OPS["index_put"].interval({"index": [0] * 40, "accumulate": True}, ivals,
                                     [[40, 2], [40, 2]], [40, 2]) == (-40000.0, 40000.0)
    assert OPS["inplace_index_put_moved"].interval(
        dict(attrs, accumulate=False), ivals, [[2, 40], [40, 2]], [2, 40]) == (-1000.0, 1000.0)


def test_index_put_moved_overflowing_sum_is_unjudged() -> None:
    attrs = {"dim": 1, "index": [0] * 70, "accumulate": True}
    xs = [np.zeros((2, 70)), np.full((70, 2), 1000.0)]
    bad, b, actual = _eager_verdict("inplace_index_put_moved", attrs, xs, "float16")
    assert np.isinf(actual[:, 0]).all()  # 70000 > 65504
    assert bad is None, bad
    assert np.isnan(b[:, 0]).all()


# ---------------------------------------------------------------------------------------------
# B1: lerp_scalar takes operands of one float dtype only


def test_lerp_scalar_refuses_mixed_float_dtypes_as_torch_does() -> None:
    rule = OPS["lerp_scalar"].dtype_rule
    with pytest.raises(RuntimeError):
        torch.lerp(torch.ones(2, dtype=torch.float16), torch.ones(2, dtype=torch.bfloat16), 0.5)
    assert rule(["float16", "bfloat16"], {"weight": 0.5}) is None
    assert rule(["float32", "float16"], {"weight": 0.5}) is None
    assert rule(["bfloat16", "bfloat16"], {"weight": 0.5}) == "bfloat16"
