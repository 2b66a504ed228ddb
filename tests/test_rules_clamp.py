"""clamp's error rule: where the input is beyond a bound by more than its own error, the
result is the bound, with no error carried through.

Before, clamp passed its input's error on everywhere (the rule of abs and relu): a clamp to
+-1 of a product near 10^4 (error ~5 in float16) carried an error of 5, a cumprod of 64 of them
grew it past float16's range, and the whole output was left unjudged (NaN bounds) -- a check
silently switched off, found when the generator started keeping matmul / attention / scan chains
behind the magnitude guards (which are clamps)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

torch = pytest.importorskip("torch")

from fuzzkit.targets.compiler.graphs import bound, build, error_rules as er  # noqa: E402
from fuzzkit.targets.compiler.graphs.ops import OPS  # noqa: E402

U16 = 2.0**-11


def _operands(x: list[float], e: list[float], attrs: dict) -> er.Operands:
    xs = np.array(x, np.float64)
    y = np.clip(xs, attrs.get("min"), attrs.get("max"))
    return er.Operands(xs=[xs], es=[np.array(e, np.float64)], y=y, ay=np.abs(y), u=U16,
                       attrs=attrs, same_operands=False, fn=torch.clamp, out_dtype="float16")


def test_clamp_uses_its_own_rule() -> None:
    assert OPS["clamp"].error is er.clamped


def test_a_saturated_element_carries_only_the_bounds_rounding() -> None:
    prop, comp = er.clamped(_operands([-1145.9, 3.0, 8.5, 100.0, np.nan],
                                      [30.0, 0.5, 1.0, 1e6, 0.1], {"min": -8.0, "max": 8.0}))
    assert prop[0] == 0.0 and comp[0] == 0.0  # certainly -8, which float16 holds exactly
    assert prop[1] == 0.5 and comp[1] == 0.0  # certainly inside: the input's error, exactly
    assert prop[2] == 1.0  # 8.5 +- 1 may or may not be clamped
    assert prop[3] == 16.0  # never more than the interval's width
    assert prop[4] == 0.1  # a NaN input: its error, as before


def test_one_sided_and_infinite_bounds() -> None:
    prop, comp = er.clamped(_operands([5.0, -5.0], [1.0, 1.0], {"min": None, "max": 0.1}))
    rounding = abs(float(np.float16(0.1)) - 0.1)  # a bound float16 does not hold: its rounding
    assert prop.tolist() == [0.0, 1.0] and comp[0] == rounding and comp[1] == 0.0
    prop, comp = er.clamped(_operands([5.0], [1.0], {"min": -np.inf, "max": np.inf}))
    assert prop.tolist() == [1.0] and comp.tolist() == [0.0]
    # "no guarantee" (an infinite error) may be a NaN, which clamp passes on: never capped
    prop, _ = er.clamped(_operands([0.5], [np.inf], {"min": -1.0, "max": 1.0}))
    assert prop.tolist() == [np.inf]


def test_a_scan_after_a_saturating_clamp_stays_judged_and_sound() -> None:
    """float16 ``cumprod(clamp(x*x, -1, 1))`` over 64 elements: a finite bound everywhere, and
    eager float16 within it."""
    x = np.resize(np.array([97.0, -101.5, 99.25, 100.0]), 64)
    g = {"inputs": [{"name": "x0", "shape": [64]}],
         "nodes": [{"name": "n0", "op": "mul", "args": ["x0", "x0"], "attrs": {}, "shape": [64]},
                   {"name": "n1", "op": "clamp", "args": ["n0"],
                    "attrs": {"min": -1.0, "max": 1.0}, "shape": [64]},
                   {"name": "n2", "op": "cumprod", "args": ["n1"], "attrs": {"dim": 0},
                    "shape": [64]}],
         "outputs": ["n2"]}
    ref = build.run_reference(g, [x])
    b = bound.error_bounds(g, ref, "float16")
    assert np.isfinite(b["n2"]).all() and (b["n2"] < 1e-1).all(), b["n2"]
    t = torch.tensor(x, dtype=torch.float16)
    eager = torch.cumprod(torch.clamp(t * t, -1.0, 1.0), dim=0).double().numpy()
    assert (np.abs(eager - ref["n2"]) <= b["n2"]).all()
