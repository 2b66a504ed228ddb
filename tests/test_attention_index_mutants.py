"""Every non-kernel attention_index mutant is caught by the oracle on a fixed small case."""

from __future__ import annotations

from typing import Any

import pytest

from fuzzkit.registry import get_target
from fuzzkit.target import Target
from fuzzkit.testing import first_failure
from targets.attention_index import checks, index, reference
from targets.attention_index.mutants import MUTANTS
from test_attention_index import make_case

ORACLE_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "causal-group-level-only": (make_case(t=40), "mismatch:attention_index:candidates"),
    "relu-dropped": (make_case(method="dense"), "mismatch:attention_index:score"),
    "head-weights-ignored": (make_case(method="dense"), "mismatch:attention_index:score"),
    "centroid-not-updated": (make_case(chunk=8), "mismatch:attention_index:"),
    "key-in-two-groups": (make_case(), "mismatch:attention_index:partition"),
    "topk-off-by-one": (make_case(method="dense"), "mismatch:attention_index:count"),
    "sink-dropped": (make_case(top_g=1, sink=4, local=0), "mismatch:attention_index:candidates"),
    "block-rep-first-key": (make_case(method="hisa", top_m=2, block=8),
                            "mismatch:attention_index:"),
    "local-window-off-by-one": (make_case(top_g=1, sink=0, local=3),
                                "mismatch:attention_index:candidates"),
}


@pytest.fixture(scope="module")
def target() -> Target:
    return get_target("attention_index")


def test_every_numpy_mutant_has_a_case() -> None:
    assert {m.name for m in MUTANTS} == set(ORACLE_CASES)
    assert len(MUTANTS) >= 7


@pytest.mark.parametrize("name", sorted(ORACLE_CASES))
def test_oracle_catches_mutant(name: str, target: Target) -> None:
    inputs, signature = ORACLE_CASES[name]
    expected = reference.run(inputs)
    assert checks.oracle(inputs, expected, index.run(inputs)) is None
    with target.mutant(name).applied():
        failure = checks.oracle(inputs, expected, index.run(inputs))
    assert failure is not None, f"{name} escaped the oracle"
    assert failure.signature.startswith(signature), failure.signature


@pytest.mark.parametrize("name", ["causal-group-level-only", "sink-dropped",
                                  "centroid-not-updated"])
def test_fuzzing_finds_mutant(name: str, target: Target) -> None:
    with target.mutant(name).applied():
        assert first_failure(target, target.implementations["numpy"], 100) is not None
