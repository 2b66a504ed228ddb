"""Reach of the ``scute`` strategy: every declared threshold crossed, the value domains covered,
every drawn case inside the contract (and at its range edge when it is drawn huge), and the
oracle's bound right at the extremes that the domains now reach."""

from __future__ import annotations

import collections
from typing import Any
from unittest import mock

import numpy as np
import pytest

from fuzzkit import reach
from fuzzkit.registry import get_target
from fuzzkit.target import Target
from fuzzkit.oracles.close import gamma
from fuzzkit.targets.scute import checks, fit, properties, ranges, reference, sizes, slots, strategies

torch = pytest.importorskip("torch")
from fuzzkit.targets.scute import torch_impl  # noqa: E402


@pytest.fixture(scope="module")
def target() -> Target:
    return get_target("scute")


def _impl(target: Target, name: str) -> Any:
    impl = target.implementation(name)
    reason = impl.unavailable()
    if reason:  # pragma: no cover - torch and triton are dev dependencies
        pytest.skip(reason)
    return impl


# ============================================================================ thresholds


@pytest.mark.parametrize("name", ["triton", "torch"])
def test_every_threshold_is_crossed(target: Target, name: str) -> None:
    """t-1, t, t+1 and 2t±1 (or above) of every tile, capacity and cut-off in 300 cases."""
    reach.assert_crossed(target, _impl(target, name), cases=300)


def test_thresholds_are_declared_per_mode(target: Target) -> None:
    from fuzzkit.targets.scute import kernels, tiles

    interpreted = tiles.interpreted()
    table = tiles.CONFIGS_INTERPRETED if interpreted else tiles.CONFIGS_GPU
    assert kernels.configs("decode") == table["decode"]
    assert kernels.configs("prefill") == table["prefill"]
    assert kernels.block_r(3) == tiles.block_r_min() and kernels.block_r(17) == 32
    for mode, native in ((True, False), (False, True)):
        with mock.patch.object(tiles, "interpreted", lambda m=mode: m):
            got = {t.size: t.value for t in tiles.thresholds()}
        configs = tiles.CONFIGS_GPU if native else tiles.CONFIGS_INTERPRETED
        assert got["k"] == got["span"] == configs["decode"][2]
        assert got["nout"] == configs["decode"][1]
        assert got["decode_slot_tokens"] == configs["decode"][0]
        assert got["prefill_slot_tokens"] == configs["prefill"][0]
        assert got["rank"] == (tiles.BLOCK_R_MIN_GPU if native else tiles.BLOCK_R_MIN_INTERPRETED)
    names = {t.size for t in target.thresholds_for(None)}
    assert names <= set(target.sizes) and {"k", "nout", "slots", "base_tokens"} <= names
    assert set(target.implementation("triton").sources) >= {"fuzzkit.targets.scute.kernels",
                                                            "fuzzkit.targets.scute.batching"}
    assert target.sources == ("fuzzkit.targets.scute.slots",)


# ============================================================================ values


def _draw(target: Target, impl: Any, cases: int, check: Any) -> None:
    for case in reach.generated(target.strategy_for(impl), cases, seed=3):
        check(case)


def test_drawn_cases_are_legal_and_cover_the_value_domain(target: Target) -> None:
    """Every case passes validate without a rejection, and the kinds of the contract all occur:
    zero rows, subnormals, huge values at the range edge, tiny norms, ties, base-only batches."""
    seen: collections.Counter = collections.Counter()

    def check(case: dict[str, Any]) -> None:
        assert checks.validate(case) is None
        x = np.abs(case["x"])
        w = np.abs(case["w0"]).astype(np.float64)
        dtype = case["dtype"]
        seen[dtype] += 1
        seen[case["mode"]] += 1
        seen.update(a["method"] for a in case["adapters"])
        seen["zero x row"] += bool(np.any(np.all(x == 0, axis=1)))
        tiny = values_smallest_normal(dtype)
        seen["subnormal x"] += bool(np.any((x > 0) & (x < tiny)))
        seen["tiny W0 row norm"] += bool(np.any(np.sqrt((w ** 2).sum(axis=1)) < 1e-7))
        seen["repeated x values"] += bool(x.size > len(np.unique(x)) + 1)
        seen["base only"] += not case["adapters"]
        packed = slots.pack(case)
        top = max(float(np.max(v, initial=0.0)) / (ranges.LIMIT_STORE[dtype] if name in
                                                   ("xT", "out") else ranges.LIMIT_ACC)
                  for name, v in ranges.intermediates(packed).items() if name != "bias")
        seen["at the range edge"] += top > 0.25
        seen["exact and neumann"] += any(a.get("cayley") == "neumann" for a in case["adapters"])

    with mock.patch.object(strategies, "reject", side_effect=AssertionError("fit() failed")):
        _draw(target, _impl(target, "torch"), 250, check)
    for kind in ("float32", "float16", "bfloat16", "decode", "prefill", *reference.METHODS,
                 "zero x row", "subnormal x", "tiny W0 row norm", "repeated x values",
                 "base only", "at the range edge", "exact and neumann"):
        assert seen[kind] >= 2, (kind, dict(seen))


def values_smallest_normal(dtype: str) -> float:
    from fuzzkit import values

    return values.SMALLEST_NORMAL[dtype]


# ============================================================================ fit and ranges


def _case(dtype: str = "float32") -> dict[str, Any]:
    return strategies.build(1, k=16, nout=8, ntok=6, dtype=dtype, mode="decode",
                            methods=["lora", "oft"])


def test_validate_rejects_overflow_of_every_format() -> None:
    for dtype in ("float32", "bfloat16"):  # every product fits, the K-term sums do not
        case = _case(dtype=dtype)
        case["x"] = checks.round_to(case["x"] * np.float32(2.0 ** 64), dtype)
        case["w0"] = checks.round_to(case["w0"] * np.float32(2.0 ** 64), dtype)
        assert "overflow float32" in (checks.validate(case) or ""), dtype
    fp16 = _case(dtype="float16")
    fp16["x"] = checks.round_to(fp16["x"] * np.float32(2.0 ** 12), "float16")
    assert "overflow float16" in (checks.validate(fp16) or "")
    vera = strategies.build(2, k=16, nout=8, ntok=6, dtype="float32", mode="decode",
                            methods=["vera"])
    vera["adapters"][0]["lambda_b"] = np.full(8, 3.0e38, np.float32)
    assert "slot parameter o" in (checks.validate(vera) or "")


def test_fit_lands_at_the_edge_and_keeps_the_kinds() -> None:
    case = _case()
    x = case["x"].copy()
    x[0] = 0.0
    x[1] = np.float32(3.0e38)  # a huge row: x·W0ᵀ overflows float32
    case["x"] = x
    case["w0"] = (case["w0"] * np.float32(2.0 ** 100)).astype(np.float32)
    assert "overflow" in (checks.validate(case) or "")
    fitted = fit.fit(case)
    assert checks.validate(fitted) is None
    assert np.all(fitted["x"][0] == 0.0)  # zeros stay zeros
    excess = ranges.token_excess(slots.pack(fitted))
    assert 0.5 < excess[1] <= 1.0  # the smallest power of two: right at the edge
    np.testing.assert_array_equal(fitted["w0"], case["w0"])  # only the culprits move


def test_fit_turns_a_dora_over_a_zero_norm_into_its_lora() -> None:
    case = strategies.build(3, k=8, nout=4, ntok=4, dtype="float32", mode="decode",
                            methods=["dora"])
    case["w0"] = case["w0"].copy()
    case["w0"][2] = 0.0
    case["adapters"][0]["B"] = np.zeros_like(case["adapters"][0]["B"])
    assert checks.validate(case) is not None  # magnitude / 0: PEFT divides by it too
    fitted = fit.fit(case)
    assert fitted["adapters"][0]["method"] == "lora" and checks.validate(fitted) is None


# ============================================================================ the bound at extremes


def _relative_part(packed: slots.Packed, ref: np.ndarray) -> np.ndarray:
    """The bound without its absolute floor (what it was before underflow was derived)."""
    k, r = packed.w0.shape[1], packed.A.shape[1]
    u_s = checks.U_STORE[packed.dtype]
    kinds = np.asarray(packed.t_kind)
    c = np.array([0 if s < 0 else min(int(kinds[s]), 2) for s in packed.token_slot])[:, None]
    return ((gamma(2 * k + r + 8, checks.U_ACC) + c * u_s) * checks.magnitude(packed)
            + u_s * np.abs(ref))


def test_bound_covers_slot_parameters_that_underflow_float32() -> None:
    """A DoRA whose ``g`` (1e-57) and ``o`` (1e-40) underflow float32 -- a huge B and alpha make
    the merged row norm 1e56: legal, and the error it causes is an absolute one, beyond the
    relative bound (found by the fuzzer, one token and three columns of it kept)."""
    x = np.array([[-0.008937895, 0.010501274]], np.float32)
    w0 = np.array([[-0.66043204, -0.36982775], [0.064370334, 0.2900992],
                   [0.4154346, 0.017477317]], np.float32)
    b0 = np.array([-2.6843809e-24, -8.3854740e-23, -3.8568669e-23], np.float32)
    dora = {"method": "dora", "A": np.array([[-5.1885433, 14.199112]], np.float32),
            "B": np.array([[3.4028235e+38], [-2.3594533e+38], [3.0]], np.float32),
            "alpha": 4.979664539877376e+16, "rslora": True,
            "magnitude": np.array([0.79283756, 0.28801107, 0.268932], np.float32)}
    case = {"dtype": "float32", "mode": "decode", "x": x, "w0": w0, "b0": b0,
            "token_adapter": np.array([0], np.int64), "adapters": [dora]}
    assert checks.validate(case) is None
    packed = slots.pack(case)
    assert 0 < np.abs(packed.s[0]).min() < 1e-45  # g is below float32's subnormals
    ref = reference.run(case)
    out = torch_impl.run(case)
    assert checks.oracle(case, ref, out) is None
    assert np.any(np.abs(out["y"] - ref["y"]) > _relative_part(packed, ref["y"]))


def test_bound_covers_bfloat16_subnormals() -> None:
    """bf16 W0 rows below the smallest normal under a DoRA g of 1e38: the Triton interpreter
    mis-converts bf16 subnormals (and a GPU may flush them), which the floor allows for."""
    from fuzzkit import triton_support

    if triton_support.unavailable():  # pragma: no cover - triton is a dev dependency
        pytest.skip("needs triton")
    from fuzzkit.targets.scute import triton_impl

    case = strategies.build(5, k=16, nout=4, ntok=6, dtype="bfloat16", mode="decode",
                            methods=["dora"])
    rng = np.random.default_rng(1)
    case["x"] = rng.integers(-3, 4, (6, 16)).astype(np.float32)
    case["w0"] = checks.round_to(rng.uniform(0.93, 0.99, (4, 16)) * 1.1754944e-38
                                 * rng.choice([-1.0, 1.0], (4, 16)), "bfloat16")
    case["adapters"][0].update(B=np.zeros_like(case["adapters"][0]["B"]), alpha=1.0,
                               rslora=False, magnitude=np.full(4, 2.0, np.float32))
    case["token_adapter"] = np.array([0, 0, -1, 0, 0, -1], np.int64)
    assert checks.validate(case) is None
    ref = reference.run(case)
    for run in (torch_impl.run, triton_impl.run):
        assert checks.oracle(case, ref, run(case)) is None, run
    if triton_support.interpreted():  # the interpreter's bf16 conversion is what needs it
        out = triton_impl.run(case)["y"]
        assert np.any(np.abs(out - ref["y"]) > _relative_part(slots.pack(case), ref["y"]))


def test_cayley_tolerance_follows_the_conditioning() -> None:
    q = np.zeros((2, 4, 4))
    assert properties.cayley_tolerance(q, 8) == pytest.approx(2 * 1e-10 * 8, rel=1e-6)
    q[0, 0, 1], q[0, 1, 0] = 1e20, -1e20
    assert properties.cayley_tolerance(q, 8) > 1e10
    boft = np.zeros((3, 2, 4, 4))
    assert properties.cayley_tolerance(boft, 8) == pytest.approx(6 * 1e-10 * 8, rel=1e-6)


def test_zero_init_allows_for_the_float32_magnitude() -> None:
    """DoRA's zero initialisation stores the row norms in float32: over a W0 row of float32
    subnormals g = fl(‖W0‖)/‖W0‖ is off by a part in a thousand, which the property allows."""
    case = strategies.build(6, k=8, nout=4, ntok=4, dtype="float32", mode="decode",
                            methods=["dora"])
    case["w0"] = case["w0"].copy()
    case["w0"][1] = np.float32(3.3e-41) * np.arange(1, 9, dtype=np.float32)
    case["token_adapter"] = np.zeros(4, np.int64)
    offset = properties._zero_init_offset({**case, "adapters": [
        properties.zero_adapter(case["adapters"][0], case["w0"])]})
    assert offset[:, 1].max() > 0 and offset[:, 0].max() < 1e-6
    assert properties.zero_init_is_base(torch_impl.run, case) is None


def test_sizes_measure_what_the_kernel_sees() -> None:
    case = strategies.build(7, k=16, nout=8, ntok=10, dtype="float32", mode="prefill",
                            methods=["boft", "lora", "oft"])
    case["token_adapter"] = np.array([-1, 0, 0, 1, 1, 1, 2, 2, 2, 2], np.int64)
    measured = {name: list(size.measure(case)) for name, size in sizes.SIZES.items()}
    assert measured["prefill_slot_tokens"] == [1, 2, 3, 4] and measured["decode_slot_tokens"] == []
    assert measured["base_tokens"] == [1] and measured["slots"] == [3]
    assert measured["k"] == [16] and measured["nout"] == [8]
    assert measured["rank"] == [np.asarray(case["adapters"][1]["A"]).shape[0]]
    assert measured["span"][1] == case["adapters"][2]["block_size"]


def test_strategy_draws_the_same_cases_under_a_mutant(target: Target) -> None:
    """The strategy fits cases with an unpatched copy of the slot conversion: a mutant of
    ``slots`` changes neither the drawn cases nor their legality (a regression found under it
    must be a legal case of the real contract)."""
    impl = _impl(target, "torch")

    def draw_all() -> list[dict[str, Any]]:
        cases: list[dict[str, Any]] = []
        _draw(target, impl, 40, cases.append)
        return cases

    plain = draw_all()
    with target.mutant("alpha-applied-twice").applied():
        mutated = draw_all()
    assert len(plain) == len(mutated)
    for a, b in zip(plain, mutated):
        np.testing.assert_array_equal(a["x"], b["x"])
        assert [ad["method"] for ad in a["adapters"]] == [ad["method"] for ad in b["adapters"]]
