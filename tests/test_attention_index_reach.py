"""Reach of the ``attention_index`` strategy: every declared threshold crossed (kernel tiles as
launched in each mode, the shared build / search / property thresholds), the value domain
covered, every drawn case inside the contract, and the oracle's bound and the properties right
at the extremes the domain now reaches (huge values, tiny and subnormal ones, signed zeros)."""

from __future__ import annotations

import collections
from typing import Any, Callable
from unittest import mock

import numpy as np
import pytest

from fuzzkit import reach, triton_support
from fuzzkit.registry import get_target
from fuzzkit.target import Target
from fuzzkit.targets.attention_index import (checks, index, model, properties, reference, strategies,
                                     thresholds, tiles)

FLT_MAX = float(np.finfo(np.float32).max)
TINY = float(np.finfo(np.float32).tiny)


@pytest.fixture(scope="module")
def target() -> Target:
    return get_target("attention_index")


def _impl(target: Target, name: str) -> Any:
    impl = target.implementation(name)
    reason = impl.unavailable()
    if reason:  # pragma: no cover - torch and triton are dev dependencies
        pytest.skip(reason)
    return impl


def _cases(strategy: Any, count: int, check: Callable[[dict[str, Any]], None],
           at: int = 3) -> None:
    """Run ``check`` on ``count`` generated cases: seeded, no database, and without Hypothesis's
    pool of constants from loaded modules (:func:`reach.without_local_constants`), so what is
    generated does not depend on the machine or on which tests ran before in this process."""
    for case in reach.generated(strategy, count, seed=at):
        check(case)


# ============================================================================ thresholds


@pytest.mark.parametrize("name", ["numpy", "triton"])
def test_every_threshold_is_crossed(target: Target, name: str) -> None:
    """t-1, t, t+1 and 2t±1 (or above) of every tile, build step and cut-off in 300 cases.

    Deterministic on any machine and in any test order: :func:`reach.crossings` fixes the seed,
    uses no example database and turns off Hypothesis's pool of constants from loaded modules,
    and the sizes are drawn before any float arithmetic.  Robust, not lucky: every boundary is
    drawn in about 15 or more of 300 cases on average (measured over 3000), and seeds 0-9 cross
    every threshold for numpy and all but one for triton (one boundary missed at one seed:
    Hypothesis spends most of a run on mutations of earlier cases, so hits cluster).  A strategy
    change that stops drawing a boundary fails here."""
    reach.assert_crossed(target, _impl(target, name), cases=300)


def test_thresholds_are_declared_per_mode(target: Target) -> None:
    """The triton implementation declares its tiles as launched in this process's mode; the
    kernels launch exactly those; each mode's declaration names the right tiles."""
    _impl(target, "triton")
    from fuzzkit.targets.attention_index import kernels

    launched = tiles.current()
    assert launched == (tiles.INTERPRETED if triton_support.interpreted() else tiles.GPU)
    assert (kernels.SCORE_BLOCK_T_INTERPRETED, kernels.SCORE_BLOCK_G_INTERPRETED,
            kernels.SCORE_BLOCK_D_INTERPRETED, kernels.TOPK_ROWS_INTERPRETED) == (
        tiles.INTERPRETED.score_t, tiles.INTERPRETED.score_g, tiles.INTERPRETED.score_d,
        tiles.INTERPRETED.topk_rows)
    assert (kernels.SCORE_BLOCK_T_GPU, kernels.SCORE_BLOCK_G_GPU, kernels.SCORE_BLOCK_D_GPU,
            kernels.TOPK_ROWS_GPU, kernels.WIDE_BLOCK_M) == (
        tiles.GPU.score_t, tiles.GPU.score_g, tiles.GPU.score_d, tiles.GPU.topk_rows,
        tiles.GPU.wide_m)
    declared = set(target.implementation("triton").thresholds())
    assert declared == set(tiles.declared(launched))
    for mode in (tiles.INTERPRETED, tiles.GPU):
        got = collections.defaultdict(set)
        for t in tiles.declared(mode):
            got[t.size].add(t.value)
        assert got["t"] == {mode.score_t, mode.topk_rows}
        assert got["g"] == {mode.score_g} and got["d"] == {mode.score_d}
        assert mode.score_g in got["m"]
    assert {t.value for t in tiles.declared(tiles.GPU) if t.size == "m"} == {64, 1024}
    names = {t.size for t in target.thresholds_for(None)}
    assert names == set(target.sizes)
    assert target.implementation("triton").sources == (
        "fuzzkit.targets.attention_index.triton_impl", "fuzzkit.targets.attention_index.kernels",
        "fuzzkit.targets.attention_index.index")
    assert target.implementation("numpy").sources == ("fuzzkit.targets.attention_index.index",)
    assert target.sources == ("fuzzkit.targets.attention_index.model",)


def test_claim_threshold_is_the_property_gate() -> None:
    claim = [t for t in thresholds.SHARED if t.size == "s"]
    assert [t.value for t in claim] == [properties.CLAIM_MIN_KEYS]


def test_native_thresholds_give_cheap_valid_cases() -> None:
    """With the GPU's tiles (d = 65, M = 1025, ...) the strategy still draws valid cases, large
    ones with few queries and heads (the reference's loops stay short)."""
    shared = (*thresholds.SHARED, *tiles.declared(tiles.GPU))
    seen = {"d": 0, "s": 0}

    def check(case: dict[str, Any]) -> None:
        assert checks.validate(case) is None
        t, h, d = case["q"].shape
        s = case["k"].shape[0]
        seen["d"] = max(seen["d"], d)
        seen["s"] = max(seen["s"], s)
        if s > strategies.LARGE_KEYS:
            assert t <= 4 and h <= 2

    _cases(strategies.inputs(shared), 200, check)
    assert seen["d"] > 64 and seen["s"] > 1024


# ============================================================================ values


def _kinds(case: dict[str, Any]) -> set[str]:
    out = set()
    for name in ("q", "w", "k"):
        x = np.asarray(case[name])
        if np.any(x == 0) and np.any(np.signbit(x[x == 0])):
            out.add("negative zero")
        if np.any((x != 0) & (np.abs(x) < TINY)):
            out.add("subnormal")
        if np.any(np.abs(x) > 1e30):
            out.add("huge")
        if np.any((np.abs(x) < 1e-7) & (x != 0)):
            out.add("tiny")
        if x.size and np.all(x == 0):
            out.add("all zero")
    k = np.asarray(case["k"])
    if k.shape[0] > 1 and np.all(k == k[0]):
        out.add("all keys equal")
    if len({row.tobytes() for row in k}) < k.shape[0]:
        out.add("duplicate keys")
    return out


def test_values_cover_the_contract_and_stay_inside_it(target: Target) -> None:
    """Every case valid (finite, no float32 overflow); zeros of both signs, subnormals, tiny and
    huge values, all-zero arrays, equal and duplicate keys all drawn."""
    seen: collections.Counter[str] = collections.Counter()
    factors = []

    def check(case: dict[str, Any]) -> None:
        assert checks.validate(case) is None, checks.validate(case)
        for key in ("q", "w", "k"):
            assert case[key].dtype == np.float32 and case[key].flags["C_CONTIGUOUS"]
        seen.update(_kinds(case))
        factors.append(model.overflow_factor(case["q"], case["w"], case["k"]))

    _cases(target.strategy_for(target.implementation("numpy")), 400, check)
    for kind in ("negative zero", "subnormal", "huge", "tiny", "all zero", "all keys equal",
                 "duplicate keys"):
        assert seen[kind] >= 3, (kind, seen)
    # cases reach the edge of the contract: float32 intermediates near the top of the range
    assert max(factors) > 2.0 ** 100


def test_validate_rejects_overflowing_scores_only() -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 2, 4)).astype(np.float32)
    w = rng.random((2, 2)).astype(np.float32)
    k = rng.standard_normal((6, 4)).astype(np.float32)
    case = dict(q=q, w=w, k=k, topk=2, method="dense")
    assert checks.validate(case) is None
    huge = np.float32(3e38)
    assert checks.validate({**case, "k": k * np.float32(1e37),
                            "q": q * np.float32(100)}) is not None  # q.k overflows
    assert checks.validate({**case, "w": w * huge}) is not None  # w * q.k overflows
    # huge keys with tiny queries: inside the contract
    assert checks.validate({**case, "k": k * np.float32(1e37),
                            "q": q * np.float32(1e-30)}) is None
    # a huge query coordinate where every key is zero cannot overflow
    k0 = k.copy()
    k0[:, 0] = 0
    q0 = q.copy()
    q0[:, :, 0] = huge
    assert checks.validate({**case, "k": k0, "q": q0}) is None


# ============================================================================ the bound


def _numpy_error(q: np.ndarray, w: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t, s = q.shape[0], k.shape[0]
    pos = np.full(t, s - 1)
    cand = np.tile(np.arange(s, dtype=np.int32), (t, 1))
    got = index.score_members(q, w, k, cand, pos).astype(np.float64)
    return np.abs(got - model.scores64(q, w, k)), model.score_bound(q, w, k)


def test_bound_covers_underflow_under_huge_weights() -> None:
    """Tiny dot products (subnormal in float32) under huge head weights: the float32 error is
    far above any fixed absolute constant, and within the derived underflow term."""
    rng = np.random.default_rng(1)
    q = (rng.standard_normal((3, 2, 5)) * 1e-22).astype(np.float32)
    k = (rng.standard_normal((7, 5)) * 1e-22).astype(np.float32)
    w = np.full((3, 2), 1e30, np.float32)
    err, bound = _numpy_error(q, w, k)
    assert np.all(err <= bound)
    assert err.max() > 1e-20  # the old fixed 1e-37 * (d + h) would have cried wolf
    # and the bound is not loose: within a few hundred ulps of the subnormal grid, scaled
    assert bound.max() < 1e-12


def test_bound_at_huge_and_signed_zero_values() -> None:
    rng = np.random.default_rng(2)
    q = (rng.standard_normal((2, 3, 6)) * 1e18).astype(np.float32)
    k = (rng.standard_normal((9, 6)) * 1e18).astype(np.float32)
    w = rng.standard_normal((2, 3)).astype(np.float32)
    assert model.overflow_factor(q, w, k) <= model.OVERFLOW_LIMIT
    err, bound = _numpy_error(q, w, k)
    assert np.all(err <= bound)
    z = np.zeros((4, 6), np.float32)
    z[1::2] = -0.0
    err, bound = _numpy_error(q, w, z)
    assert np.all(err == 0)


def test_bound_covers_rounded_representatives() -> None:
    """float64 block means / centroids in the subnormal range, cast to float32 under huge
    queries: covered by the operand-rounding term."""
    rng = np.random.default_rng(3)
    q = (rng.standard_normal((2, 2, 4)) * 1e30).astype(np.float32)
    reps = rng.standard_normal((5, 4)) * 1e-41
    w = rng.random((2, 2)).astype(np.float32)
    got = index.score_representatives(q, w, reps.astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(got - model.scores64(q, w, reps)) <= model.score_bound(q, w, reps))


# ============================================================================ properties


def test_causal_change_stays_in_the_contract() -> None:
    k = np.array([[3e37, 1.0], [0.0, -0.0], [2.0, 2.0], [0.0, 0.0]], np.float32)
    q = np.full((2, 1, 2), 2.0, np.float32)
    w = np.ones((2, 1), np.float32)
    changed = properties.future_changed(k, 1)
    np.testing.assert_array_equal(changed[:2], k[:2])
    assert not np.any(np.all(changed[2:] == k[2:], axis=1))
    assert np.all(np.abs(changed).max(axis=0) <= np.abs(k).max(axis=0))
    assert checks.validate(dict(q=q, w=w, k=changed, topk=1, method="dense")) is None


@pytest.mark.parametrize("scale", [1e-40, 1e-20, 1.0, 1e30, 3e38])
def test_claim_queries_are_valid_at_any_key_scale(scale: float) -> None:
    """Queries of the recall claim stay inside the contract and keep their shape when the keys
    are scaled by any factor (the claim is scale-free)."""
    rng = np.random.default_rng(4)
    base = rng.standard_normal((40, 6))
    k = (base / np.abs(base).max() * scale).astype(np.float32)
    q, w = properties.claim_queries(k, 3, 80, seed=5)
    case = dict(q=q[:40], w=w[:40], k=k, topk=4, method="dense")
    assert checks.validate(case) is None
    assert np.all(np.isfinite(q)) and np.abs(q).max() > 0
    if scale >= 1e-20:
        ref, _ = properties.claim_queries(
            (base / np.abs(base).max()).astype(np.float32), 3, 80, seed=5)
        ratio = q.astype(np.float64) / ref.astype(np.float64)
        nz = ref != 0
        assert np.allclose(ratio[nz], ratio[nz].flat[0], rtol=1e-5)  # one power of two


def test_rounded_recall_forgives_only_ties_within_rounding() -> None:
    exact = np.array([[3.0, 2.0, 1.0, 1e-30, -np.inf]])
    bound = np.full_like(exact, 1e-6)
    assert properties.rounded_recall(np.array([[0, 1]]), exact, bound, 2)[0] == 1.0
    assert properties.rounded_recall(np.array([[0, 2]]), exact, bound, 2)[0] == 0.5
    tied = np.array([[3.0, 1e-40, 2e-40, 0.0, -np.inf]])
    assert properties.rounded_recall(np.array([[0, 3]]), tied, bound, 2)[0] == 1.0


def test_generated_extreme_cases_pass_oracle_and_properties(target: Target) -> None:
    """The NumPy indexer passes the oracle and every relation on generated cases, extreme
    values included (the recall claim, the causal change and the bound at the contract's
    edges)."""
    impl = target.implementation("numpy")

    def check(case: dict[str, Any]) -> None:
        assert checks.oracle(case, reference.run(case), index.run(case)) is None
        for prop in properties.PROPERTIES:
            failure = prop.check(index.run, case)
            assert failure is None, (prop.name, failure.message)

    _cases(target.strategy_for(impl), 150, check, at=11)


def test_measured_sizes_match_the_case() -> None:
    case = dict(q=np.zeros((3, 2, 5), np.float32), w=np.zeros((3, 2), np.float32),
                k=np.zeros((20, 5), np.float32), topk=19, method="attention_index", groups=9,
                chunk=8, top_g=9, sink=18, local=0, iters=2)
    got = {name: list(size.measure(case)) for name, size in thresholds.SIZES.items()}
    assert got["s"] == [20] and got["t"] == [3] and got["d"] == [5]
    assert got["g"] == [8] and got["m"] == [20]  # top_g >= G: every causal key scored
    assert got["absorbed"] == [12] and got["groups_over_chunk"] == [2]
    assert got["probe_over_groups"] == [2] and got["topk_over_row0"] == [2]
    assert got["sink_over_row0"] == [1] and got["local_over_row0"] == [-17]
    hisa = {**case, "method": "hisa", "block": 6, "top_m": 1}
    assert list(thresholds.SIZES["g"].measure(hisa)) == [4]
    assert list(thresholds.SIZES["m"].measure(hisa)) == []
    assert list(thresholds.SIZES["absorbed"].measure(hisa)) == []
    with mock.patch.dict(case, method="dense"):
        assert list(thresholds.SIZES["m"].measure(case)) == [20]
