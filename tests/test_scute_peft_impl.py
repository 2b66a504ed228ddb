"""The ``peft`` implementation of ``scute`` (PEFT's own layers, one adapter at a time): right on
small cases of every method and dtype, unsupported cases declared and never run, each planted
PEFT mutant caught by fuzzing from scratch, and a short clean fuzzing run."""

from __future__ import annotations

import copy
import os
from typing import Any

import numpy as np
import pytest

pytest.importorskip("peft")
pytest.importorskip("torch")

from fuzzkit.engines.hypothesis import fuzz
from fuzzkit.mutation import run_mutant
from fuzzkit.registry import get_target
from fuzzkit.target import UNSUPPORTED, Unsupported
from fuzzkit.targets.scute import checks, reference, strategies
from fuzzkit.targets.scute.adapters import peft_impl
from fuzzkit.targets.scute.adapters.peft_mutants import MUTANTS

METHODS = ["identity", "lora", "dora", "vera", "oft", "boft", "ia3-kv", "ia3-ff"]


def _judge(case: dict[str, Any]) -> Any:
    return checks.oracle(case, reference.run(case), peft_impl.run(copy.deepcopy(case)))


def _supported(seed: int, dtype: str, methods: list[str]) -> dict[str, Any]:
    """A plain case whose BOFT adapters PEFT can express (one factor, exact Cayley)."""
    case = strategies.build(seed, k=16, nout=12, ntok=14, dtype=dtype, mode="decode",
                            methods=methods)
    for ad in case["adapters"]:
        if ad["method"] == "boft":
            ad.update(Q=ad["Q"][:1], factors=1, cayley="exact")
        if ad["method"] in ("oft", "boft"):  # within PEFT's float32 rotation range
            q = np.asarray(ad["Q"], np.float32)
            ad["Q"] = q * np.float32(min(1.0, 0.9 / max(float(np.abs(q).sum(-1).max()), 1e-30)))
    assert peft_impl.unsupported(case) is None, peft_impl.unsupported(case)
    return case


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_method_within_the_bound(dtype: str) -> None:
    for seed in range(3):
        case = _supported(seed, dtype, METHODS)
        assert checks.validate(case) is None
        assert _judge(case) is None, (dtype, seed)


def test_rslora_and_both_cayley_branches() -> None:
    case = _supported(7, "float32", ["lora", "oft", "oft"])
    case["adapters"][0]["rslora"] = True
    case["adapters"][1]["cayley"] = "exact"
    for terms in (1, 2, 3, 5):
        case["adapters"][2].update(cayley="neumann", neumann_terms=terms)
        assert _judge(case) is None, terms


def test_a_boft_layer_leaves_the_process_environment_alone(monkeypatch) -> None:
    """PEFT's BOFT tries to build a CUDA extension under ``CC=gcc CXX=gcc`` and, when that
    fails (no CUDA), never restores them: Inductor's kernels built later in the process (and
    in its children) then linked without libstdc++ and failed to load."""
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CC", raising=False)
    before = dict(os.environ)
    case = _supported(5, "float32", ["boft"])
    peft_impl.run(copy.deepcopy(case))
    assert dict(os.environ) == before


def test_unsupported_cases_are_declared_not_passed() -> None:
    case = strategies.build(3, k=16, nout=8, ntok=4, dtype="float32", mode="decode",
                            methods=["boft"])
    u = np.triu(0.1 * np.random.default_rng(0).standard_normal((2, 4, 4, 4)), 1)
    case["adapters"][0].update(block_size=4, factors=2, cayley="exact",
                               Q=np.asarray(u - np.swapaxes(u, -1, -2), np.float32))
    assert "butterfly factors" in (peft_impl.unsupported(case) or "")
    with pytest.raises(Unsupported):
        peft_impl.run(case)
    case["adapters"][0].update(Q=case["adapters"][0]["Q"][:1], factors=1, cayley="neumann")
    assert "Cayley-Neumann" in (peft_impl.unsupported(case) or "")


def test_registered_with_its_own_strategy() -> None:
    target = get_target("scute")
    impl = target.implementations["peft"]
    assert impl.unavailable() is None and impl.cases is not None
    from hypothesis import HealthCheck, given, settings

    seen: list[Any] = []
    before = sum(UNSUPPORTED.values())

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(target.strategy_for(impl))
    def draw(case: dict[str, Any]) -> None:
        seen.append(peft_impl.unsupported(case))

    draw()
    assert seen and all(reason is None for reason in seen)
    assert sum(UNSUPPORTED.values()) > before  # the turned-away draws are counted


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_caught(mutant: Any) -> None:
    # bounded by cases, not seconds (a loaded machine ran too few): the slowest needs 187
    result = run_mutant(get_target("scute"), mutant, budget=900.0, seed=0, max_cases=400)
    assert result.detected, mutant.name
    assert result.signature == checks.SIGNATURE


def test_short_clean_run() -> None:
    target = get_target("scute")
    result = fuzz(target, target.implementations["peft"], budget=12.0, seed=1, profile="ci",
                  database_dir=None, shrink=False)
    assert result.cases > 50
    assert not result.findings, [f.failure.message for f in result.findings]
