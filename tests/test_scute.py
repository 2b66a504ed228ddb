"""The ``scute`` target: reference vs slot form, validation, oracle bound, localization and the
properties (on the ``torch`` implementation; the Triton kernel has tests/test_scute_kernels.py)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

from fuzzkit.registry import get_target
from fuzzkit.targets.scute import checks, properties, reference, slots, strategies

torch = pytest.importorskip("torch")
from fuzzkit.targets.scute import torch_impl  # noqa: E402

ALL_METHODS = ["identity", "lora", "dora", "vera", "oft", "boft", "ia3-kv", "ia3-ff"]


def forward64(packed: slots.Packed) -> np.ndarray:
    """The slot form evaluated in float64 (Ntok, Nout), straight from the packed parameters.

    A test helper (it lived in ``slots``, whose every line the implementations run): the slot
    conversion is checked against the native forms through it."""
    x = np.asarray(packed.x, np.float64)
    w0 = np.asarray(packed.w0, np.float64)
    y = x @ w0.T + np.asarray(packed.b0, np.float64)
    for t, s in enumerate(np.asarray(packed.token_slot)):
        if s < 0:
            continue
        xt = (x[t] * packed.t_diag[s]) @ packed.t_mat[s]
        low = packed.B[s] @ ((packed.A[s] @ x[t]) * packed.m[s])
        y[t] = (w0 @ xt) * packed.s[s] + packed.b[s] + low * packed.o[s]
    return y


def make_case(methods: list[str], *, seed: int = 0, k: int = 16, nout: int = 12, ntok: int = 16,
              dtype: str = "float32", mode: str = "decode", **changes: Any) -> dict[str, Any]:
    case = strategies.build(seed, k=k, nout=nout, ntok=ntok, dtype=dtype, mode=mode,
                            methods=methods)
    case.update(changes)
    return case


def covering_case(methods: list[str], **kw: Any) -> dict[str, Any]:
    """A case in which every slot and -1 have tokens (decode order, interleaved)."""
    case = make_case(methods, **kw)
    n = len(case["x"])
    case["token_adapter"] = np.array([(i % (len(methods) + 1)) - 1 for i in range(n)], np.int64)
    return case


@pytest.mark.parametrize("method", ALL_METHODS)
@pytest.mark.parametrize("dtype", strategies.DTYPES)
def test_slot_form_equals_native_reference(method: str, dtype: str) -> None:
    for seed in range(4):
        case = covering_case([method, method], seed=seed, dtype=dtype, k=16)
        assert checks.validate(case) is None
        ref = reference.run(case)["y"]
        slot = forward64(slots.pack(case))
        np.testing.assert_allclose(slot, ref, rtol=1e-12, atol=1e-12)


def test_boft_butterfly_factors_and_neumann_variant() -> None:
    rng = np.random.default_rng(3)
    for m in (1, 2, 3):
        u = np.triu(0.3 * rng.standard_normal((m, 4, 4, 4)), 1).astype(np.float32)
        q = u - np.swapaxes(u, -1, -2)
        for cayley in ("exact", "neumann"):
            ad = {"method": "boft", "block_size": 4, "factors": m, "Q": q, "cayley": cayley,
                  "neumann_terms": 4, "boft_s": np.ones(8, np.float32)}
            case = covering_case(["lora"], seed=m, k=16, nout=8)
            case["adapters"] = [ad]
            assert checks.validate(case) is None
            np.testing.assert_allclose(forward64(slots.pack(case)),
                                       reference.run(case)["y"], rtol=1e-12, atol=1e-12)
            if m > 1:  # the butterfly permutations are not the identity
                assert not np.array_equal(reference.butterfly_perm(16, 2, 2, m - 1),
                                          np.arange(16))


def test_neumann_approximates_the_transposed_cayley() -> None:
    rng = np.random.default_rng(0)
    u = np.triu(0.05 * rng.standard_normal((3, 4, 4)), 1)
    q = u - np.swapaxes(u, -1, -2)
    exact = reference.cayley_exact(q)
    neumann = reference.cayley_neumann(q, 30)
    assert np.abs(neumann - np.swapaxes(exact, -1, -2)).max() < 1e-12
    assert np.abs(neumann - exact).max() > 1e-3
    # PEFT's loop quirk: 3 terms == 4 terms
    np.testing.assert_array_equal(reference.cayley_neumann(q, 3), reference.cayley_neumann(q, 4))


@pytest.mark.parametrize("change, fragment", [
    (lambda c: c.update(dtype="float64"), "dtype"),
    (lambda c: c.update(token_adapter=np.full(len(c["x"]), 7, np.int64)), "token_adapter"),
    (lambda c: c["adapters"].append({"method": "prefix"}), "method"),
    (lambda c: c.update(x=c["x"] + np.float32(1e-4)), "representable"),
    (lambda c: c["adapters"][0].update(Q=np.ones_like(c["adapters"][0]["Q"])), "skew"),
    (lambda c: c["adapters"][0].update(block_size=3), "block_size"),
    (lambda c: c["adapters"][1].update(A=c["adapters"][1]["A"][:, :4]), "A must"),
    (lambda c: c["adapters"][2].update(lambda_b=np.full(3, np.nan, np.float32)), "lambda_b"),
    (lambda c: c.update(x=c["x"][:, :8]), "shapes"),
])
def test_validate_rejects(change: Any, fragment: str) -> None:
    case = make_case(["oft", "lora", "vera"], dtype="float16")
    assert checks.validate(case) is None
    change(case)
    err = checks.validate(case)
    assert err is not None and fragment in err


def test_validate_rejects_fp16_overflow() -> None:
    case = make_case(["lora"], dtype="float16")
    case["x"] = (case["x"] * np.float32(4096)).astype(np.float32)
    assert "overflow" in (checks.validate(case) or "")


def test_oracle_passes_clean_and_catches_perturbed() -> None:
    case = covering_case(["lora", "dora", "oft"], ntok=12)
    ref = reference.run(case)
    out = torch_impl.run(case)
    assert checks.oracle(case, ref, out) is None
    bad = dict(out)
    bad["y"] = out["y"].copy()
    bad["y"][6, 3] += np.float32(1e-3) * (1 + abs(bad["y"][6, 3]))  # token 6 is slot 1 (dora)
    f = checks.oracle(case, ref, bad)
    assert f is not None and f.signature == "mismatch:y:close"
    assert "token 6 (slot 1, dora)" in f.message
    assert f.details["mismatching_slots"] == [1]
    bad["y"][0, 0] = np.nan
    assert checks.oracle(case, ref, bad).signature == "mismatch:y:nonfinite"


@pytest.mark.parametrize("dtype", strategies.DTYPES)
def test_bound_does_not_cry_wolf(dtype: str) -> None:
    rng = np.random.default_rng(hash(dtype) % 2**32)
    worst = 0.0
    for seed in range(80):
        methods = list(rng.choice(ALL_METHODS, size=int(rng.integers(1, 5))))
        case = make_case(methods, seed=seed, k=int(rng.choice([8, 16, 32])),
                         nout=int(rng.integers(4, 25)), ntok=int(rng.integers(1, 25)),
                         dtype=dtype, mode=str(rng.choice(["decode", "prefill"])))
        assert checks.validate(case) is None
        ref = reference.run(case)
        out = torch_impl.run(case)
        assert checks.oracle(case, ref, out) is None, (seed, methods)
        bound = checks.error_bound(slots.pack(case), ref["y"])
        worst = max(worst, float(np.max(np.abs(out["y"] - ref["y"]) / bound)))
    # ... and is not vacuous: the observed error uses a fair share of it
    assert 0.01 < worst < 1.0


def _break_slot(slot_method: str):  # type: ignore[no-untyped-def]
    """A run that adds an error to every token of the slots of ``slot_method``."""
    def run(inputs: dict[str, Any]) -> dict[str, Any]:
        out = torch_impl.run(inputs)
        ta = np.asarray(inputs["token_adapter"])
        for t, s in enumerate(ta):
            if s >= 0 and inputs["adapters"][s]["method"] == slot_method:
                out["y"][t] += np.float32(0.5)
        return out
    return run


def test_localize_names_the_guilty_slot() -> None:
    case = covering_case(["lora", "vera", "ia3-kv", "oft"], ntok=20)
    case["adapters"][2] = {"method": "ia3", "placement": "kv",
                           "l": np.linspace(0.5, 1.5, 12).astype(np.float32)}
    run = _break_slot("vera")
    failure = checks.oracle(case, reference.run(case), run(case))
    assert failure is not None and "vera" in failure.message
    located = checks.localize(run, case, failure)
    assert located.details["guilty"] == [{"slot": 1, "method": "vera"}]
    assert located.details["mismatching_slots"] == [1]
    assert "guilty slot 1 (vera)" in located.message
    assert located.signature == failure.signature


def test_localize_two_broken_slots_and_base() -> None:
    case = covering_case(["dora", "lora", "dora"], ntok=16)
    run = _break_slot("dora")
    failure = checks.oracle(case, reference.run(case), run(case))
    located = checks.localize(run, case, failure)
    assert located.details["guilty"] == [{"slot": 0, "method": "dora"},
                                         {"slot": 2, "method": "dora"}]

    def base_broken(inputs: dict[str, Any]) -> dict[str, Any]:
        out = torch_impl.run(inputs)
        out["y"][np.asarray(inputs["token_adapter"]) < 0] += np.float32(1)
        return out
    failure = checks.oracle(case, reference.run(case), base_broken(case))
    located = checks.localize(base_broken, case, failure)
    assert located.details["guilty"] == [{"slot": -1, "method": "base"}]


def test_target_registered_and_clean_on_torch() -> None:
    target = get_target("scute")
    assert list(target.implementations) == ["triton", "torch", "peft", "vllm-punica"]
    assert target.localize is checks.localize
    assert {p.name for p in target.properties} == {
        "batch-invariance", "zero-init-is-base", "merged-equals-unmerged", "cayley-orthogonal"}
    impl = target.implementation("torch")
    for seed in range(6):
        case = covering_case(ALL_METHODS[1:4] if seed % 2 else ALL_METHODS[4:], seed=seed,
                             dtype=strategies.DTYPES[seed % 3], ntok=10)
        assert target.oracle(case, target.reference(case), impl(case)) is None
        for prop in target.properties:
            assert prop.check(impl.fn, case) is None, prop.name


def test_strategy_draws_every_method() -> None:
    from hypothesis import HealthCheck, given, settings

    seen: set[str] = set()
    modes: set[str] = set()

    @settings(max_examples=60, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategies.inputs())
    def draw(case: dict[str, Any]) -> None:
        assert checks.validate(case) is None
        seen.update(a["method"] for a in case["adapters"])
        modes.add(case["mode"])

    draw()
    assert seen == set(reference.METHODS) and modes == {"decode", "prefill"}


# --- every property fails on an implementation that breaks it -------------------------------


def test_batch_invariance_catches_batch_dependence() -> None:
    case = covering_case(["lora", "oft"], ntok=8)

    def run(inputs: dict[str, Any]) -> dict[str, Any]:
        out = torch_impl.run(inputs)
        out["y"] = out["y"] + np.float32(1e-2 * len(inputs["x"]))
        return out
    assert properties.batch_invariance(torch_impl.run, case) is None
    f = properties.batch_invariance(run, case)
    assert f is not None and f.signature == "invariant:scute:batch-invariance"

    def bitwise_run(inputs: dict[str, Any]) -> dict[str, Any]:
        out = torch_impl.run(inputs)
        out["bitwise_batch_invariant"] = True
        if len(inputs["x"]) % 2:
            out["y"] = np.nextafter(out["y"], np.float32(np.inf))
        return out
    case = covering_case(["lora"], ntok=7)
    assert properties.batch_invariance(bitwise_run, case).details["bitwise"] is True


def test_zero_init_catches_unconditional_adapter_work() -> None:
    case = covering_case(["lora", "dora", "vera", "oft", "boft", "ia3-kv", "ia3-ff"], ntok=24)
    assert properties.zero_init_is_base(torch_impl.run, case) is None

    def run(inputs: dict[str, Any]) -> dict[str, Any]:
        out = torch_impl.run(inputs)
        out["y"][np.asarray(inputs["token_adapter"]) >= 0] += np.float32(0.25)
        return out
    f = properties.zero_init_is_base(run, case)
    assert f is not None and f.signature == "invariant:scute:zero-init-is-base"


def test_merged_catches_a_wrong_merge_only_path() -> None:
    case = covering_case(["dora", "boft"], ntok=9)
    assert properties.merged_equals_unmerged(torch_impl.run, case) is None

    def run(inputs: dict[str, Any]) -> dict[str, Any]:  # drops the bias of base-only tokens
        out = torch_impl.run(inputs)
        ta = np.asarray(inputs["token_adapter"])
        out["y"][ta < 0] -= np.asarray(inputs["b0"], np.float32)
        return out
    f = properties.merged_equals_unmerged(run, case)
    assert f is not None and f.signature == "invariant:scute:merged-equals-unmerged"


def test_cayley_orthogonal_catches_neumann_used_as_exact() -> None:
    case = covering_case(["oft", "boft"], ntok=6)
    case["adapters"][0]["cayley"] = "exact"
    assert properties.cayley_orthogonal(torch_impl.run, case) is None
    with mock.patch.object(slots, "block_rotations",
                           lambda q, c, n: reference.cayley_neumann(q, 3)):
        f = properties.cayley_orthogonal(torch_impl.run, case)
    assert f is not None and "slot 0 (oft)" in f.message
