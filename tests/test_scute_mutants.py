"""Every non-kernel scute mutant is caught on a fixed case, and the failure names the method and
the slot (oracle message + localization)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from fuzzkit.registry import get_target
from fuzzkit.runner import check_case
from fuzzkit.target import Target
from fuzzkit.targets.scute import checks
from fuzzkit.targets.scute.mutants import MUTANTS
from test_scute import covering_case

pytest.importorskip("torch")

RNG = np.random.default_rng(11)


def _f32(a: Any) -> np.ndarray:
    return np.asarray(a, np.float32)


def _skew(shape: tuple[int, ...]) -> np.ndarray:
    u = _f32(np.triu(0.3 * RNG.standard_normal(shape), 1))
    return u - np.swapaxes(u, -1, -2)


def lora(k: int = 16, nout: int = 12, r: int = 4, **kw: Any) -> dict[str, Any]:
    return {"method": "lora", "A": _f32(RNG.integers(-4, 5, (r, k)) / 8),
            "B": _f32(RNG.integers(-4, 5, (nout, r)) / 8), "alpha": 16.0, "rslora": False, **kw}


def case_with(adapters: list[dict[str, Any]], dtype: str = "float32", **kw: Any
              ) -> dict[str, Any]:
    case = covering_case(["identity"] * len(adapters), dtype=dtype, **kw)
    case["adapters"] = adapters
    assert checks.validate(case) is None
    return case


def vera(r: int = 4) -> dict[str, Any]:
    return {"method": "vera", "A_shared": _f32(RNG.integers(-4, 5, (r, 24)) / 8),
            "B_shared": _f32(RNG.integers(-4, 5, (20, r)) / 8),
            "lambda_d": _f32(RNG.standard_normal(r)), "lambda_b": _f32(RNG.standard_normal(12))}


def oft(cayley: str = "exact") -> dict[str, Any]:
    return {"method": "oft", "block_size": 4, "Q": _skew((4, 4, 4)), "cayley": cayley,
            "neumann_terms": 5}


def boft(m: int = 1) -> dict[str, Any]:
    return {"method": "boft", "block_size": 4, "factors": m, "Q": _skew((m, 4, 4, 4)),
            "boft_s": _f32(1 + 0.3 * RNG.standard_normal(12)), "cayley": "exact",
            "neumann_terms": 5}


def dora() -> dict[str, Any]:
    return {**lora(), "method": "dora", "magnitude": _f32(RNG.uniform(0.5, 2.0, 12))}


def huge_row_case() -> dict[str, Any]:
    """A DoRA slot over a W0 whose row 3 is scaled by 2^70 (|w| ~ 1e20: its float32 squares
    overflow) and row 5 by 2^-90 (|w| ~ 1e-28: its float32 squares underflow) -- legal, the
    float64 norm is fine."""
    case = case_with([dora()])
    w0 = case["w0"].copy()
    w0[3] = np.ldexp(w0[3], 70)
    w0[5] = np.ldexp(w0[5], -90)
    case["w0"] = w0
    case["adapters"][0]["magnitude"] = np.sqrt((w0.astype(np.float64) ** 2).sum(axis=1)
                                               ).astype(np.float32)
    assert checks.validate(case) is None
    return case


def ia3_kv(nout: int = 12) -> dict[str, Any]:
    return {"method": "ia3", "placement": "kv", "l": _f32(RNG.uniform(0.3, 1.7, nout))}


# mutant -> (case, method and slot the message must name)
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "gather-sorted-position": (case_with([lora(), vera(), oft()]), r"\(slot \d, (lora|vera|oft)\)"),
    "minus-one-not-skipped": (case_with([lora(), dora()]),
                              r"guilty slot -1 \(base\) \(base-only tokens pick up slot 1 "
                              r"\(dora\)\)"),
    "dora-bias-scaled": (case_with([dora()]), r"slot 0, dora"),
    "dora-norm-wrong-axis": (case_with([dora()]), r"slot 0, dora"),
    "alpha-applied-twice": (case_with([lora()]), r"slot 0, lora"),
    "rslora-ignored": (case_with([lora(rslora=True)]), r"slot 0, lora"),
    "rotation-transposed": (case_with([oft()], dtype="float16"), r"slot 0, oft"),
    "cayley-variant-confused": (case_with([oft("neumann")], dtype="bfloat16"), r"slot 0, oft"),
    "ia3-kv-bias-unscaled": (case_with([ia3_kv()]), r"slot 0, ia3-kv"),
    "ia3-placement-swapped": (case_with([ia3_kv(16)], k=16, nout=16), r"slot 0, ia3-kv"),
    "vera-lambda-after-expand": (case_with([vera()]), r"slot 0, vera"),
    "vera-slice-from-end": (case_with([vera()], dtype="bfloat16"), r"slot 0, vera"),
    "boft-scale-on-bias": (case_with([boft()]), r"slot 0, boft"),
    "butterfly-perm-inverted": (case_with([boft(3)], dtype="float16"), r"slot 0, boft"),
    "fp16-shrink-buffer": (case_with([lora()]), r"slot 0, lora"),
    "dora-norm-float32": (huge_row_case(), r"slot 0, dora"),
}


@pytest.fixture(scope="module")
def target() -> Target:
    return get_target("scute")


def test_every_mutant_has_a_case() -> None:
    assert {m.name for m in MUTANTS} == set(CASES)
    assert len(MUTANTS) >= 10


def test_cases_pass_on_the_clean_implementation(target: Target) -> None:
    impl = target.implementation("torch")
    for name, (case, _) in CASES.items():
        assert check_case(target, impl, case, properties=True).failure is None, name


@pytest.mark.parametrize("mutant", [m.name for m in MUTANTS])
def test_mutant_caught_and_named(target: Target, mutant: str) -> None:
    case, pattern = CASES[mutant]
    impl = target.implementation("torch")
    with target.mutant(mutant).applied():
        failure = check_case(target, impl, case, properties=True).failure
    assert failure is not None, mutant
    assert re.search(pattern, failure.message), failure.message
    if failure.signature == "mismatch:y:close":
        assert failure.details["guilty"], failure.message
