"""Every non-kernel ann mutant is caught -- by the oracle itself on a small case, and by the full
check (oracle + relations) -- so the oracle can fail; and some bugs show only where the real bug
would (floor truncation needs negative coordinates, a stale insert needs an insert)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fuzzkit.registry import get_target
from fuzzkit.runner import check_case
from fuzzkit.target import Target
from targets.ann import checks, index, model, reference
from targets.ann.mutants import MUTANTS
from test_ann import make_case


@pytest.fixture(scope="module")
def ann() -> Target:
    return get_target("ann")


#: A case on which the *oracle alone* (no relation) catches each mutant, and the signature.
ORACLE_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "floor-truncation": (make_case(seed=1), "mismatch:ann:cells:occupied"),
    "centre-without-offset": (make_case(seed=1), "mismatch:ann:cells"),
    "centre-without-half": (make_case(seed=1), "mismatch:ann:cells"),
    "seed-reused": (make_case(seed=1), "mismatch:ann:cells:occupied"),
    "frontier-returned": (make_case(seed=1, T=3, E=2), "mismatch:ann:results"),
    "visited-not-updated": (make_case(seed=1, T=3), "mismatch:ann:results:duplicate"),
    "ip-sign-flipped": (make_case(seed=1, metric="ip"), "mismatch:ann:results"),
    "stale-neighbours-after-insert": (make_case(seed=1, inserted=10), "mismatch:ann:graph"),
    "probe-wrong-direction": (make_case(seed=1, P=3, T=0), "mismatch:ann:visited-count"),
    "cell-cap-by-arrival": (make_case(seed=1, C=2), "mismatch:ann:cells"),
    "rerank-with-estimates": (make_case(seed=1, storage="turbo8", rerank=True),
                              "mismatch:ann:results"),
}


def test_every_numpy_mutant_has_a_case() -> None:
    assert {m.name for m in MUTANTS} == set(ORACLE_CASES)
    assert len(MUTANTS) >= 7


@pytest.mark.parametrize("name", sorted(ORACLE_CASES))
def test_oracle_catches_mutant(name: str, ann: Target) -> None:
    inputs, signature = ORACLE_CASES[name]
    expected = reference.run(inputs)
    assert checks.oracle(inputs, expected, index.run(inputs)) is None
    with ann.mutant(name).applied():
        failure = checks.oracle(inputs, expected, index.run(inputs))
    assert failure is not None, f"{name} escaped the oracle"
    assert failure.signature.startswith(signature), failure.signature


@pytest.mark.parametrize("name", sorted(ORACLE_CASES))
def test_full_check_catches_mutant(name: str, ann: Target) -> None:
    inputs, _ = ORACLE_CASES[name]
    impl = ann.implementation("numpy")
    with ann.mutant(name).applied():
        assert check_case(ann, impl, inputs, confirm=False).failure is not None


def _passes_with(ann: Target, name: str, inputs: dict[str, Any]) -> bool:
    with ann.mutant(name).applied():
        return check_case(ann, ann.implementation("numpy"), inputs, confirm=False).failure is None


def test_floor_truncation_needs_negative_coordinates(ann: Target) -> None:
    # One table projecting D = 1 to m = 1 with a positive factor: positive data stays on the
    # positive side, where truncation and floor agree.
    seed = next(s for s in range(100) if model.table(s, 0, 1, 1)[0][0, 0] > 0)
    rng = np.random.default_rng(0)
    x = rng.uniform(0.0, 5.0, (30, 1)).astype(np.float32)
    q = rng.uniform(0.0, 5.0, (4, 1)).astype(np.float32)
    inputs = make_case(seed=1, L=1, m=1, P=1, w=0.7)
    inputs.update(seed=seed, vectors=x, inserted=np.zeros((0, 1), np.float32), queries=q)
    assert _passes_with(ann, "floor-truncation", inputs)
    assert not _passes_with(ann, "floor-truncation", {**inputs, "vectors": -x, "queries": -q})


def test_stale_neighbours_need_an_insert(ann: Target) -> None:
    assert _passes_with(ann, "stale-neighbours-after-insert", make_case(seed=1, inserted=0))
    assert not _passes_with(ann, "stale-neighbours-after-insert", make_case(seed=1, inserted=4))


def test_ip_sign_needs_the_ip_metric(ann: Target) -> None:
    assert _passes_with(ann, "ip-sign-flipped", make_case(seed=1, metric="l2"))


def test_rerank_mutant_needs_a_rerank(ann: Target) -> None:
    # The oracle sees it only on a rerank (the all-covering relation turns one on by itself).
    inputs = make_case(seed=1, storage="turbo8")
    expected = reference.run(inputs)
    with ann.mutant("rerank-with-estimates").applied():
        assert checks.oracle(inputs, expected, index.run(inputs)) is None
