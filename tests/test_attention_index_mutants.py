"""Every non-kernel attention_index mutant is caught by the oracle on a fixed small case; the
mutants whose bug lives past a threshold or at an extreme value are invisible just below it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fuzzkit.registry import get_target
from fuzzkit.target import Target
from fuzzkit.testing import first_failure
from fuzzkit.targets.attention_index import checks, index, reference
from fuzzkit.targets.attention_index.mutants import MUTANTS
from test_attention_index import make_case

def _huge_negative_hisa(scale: float = 3e18) -> dict[str, Any]:
    """HiSA, 4 blocks of 2 keys, query 0 at position 4: block 3 starts after it.  Keys and
    queries near 3e18 under a negative weight: every block scores about -1e37."""
    rng = np.random.default_rng(0)
    return dict(q=np.full((4, 1, 2), scale, np.float32), w=np.full((4, 1), -1.0, np.float32),
                k=(rng.random((8, 2)) * scale).astype(np.float32), topk=3, method="hisa",
                block=2, top_m=2)


def _tiny_dense(scale: float = 1e-20) -> dict[str, Any]:
    """Dense search whose dot products (about 1e-40) are float32 subnormals."""
    rng = np.random.default_rng(1)
    return dict(q=(rng.standard_normal((3, 2, 4)) * scale).astype(np.float32),
                w=rng.random((3, 2)).astype(np.float32),
                k=(rng.standard_normal((6, 4)) * scale).astype(np.float32), topk=3,
                method="dense")


def _absorbed(keys: list[float]) -> dict[str, Any]:
    """d = 1, first chunk [0, 10] (two groups, no Lloyd step), the rest absorbed in order: 6
    joins 10 (the centroid moves to 8), then 4.5 is nearer 8 than 0 -- but nearer 0 than 10."""
    return dict(q=np.ones((1, 1, 1), np.float32), w=np.ones((1, 1), np.float32),
                k=np.array(keys, np.float32)[:, None], topk=2, method="attention_index",
                groups=2, chunk=2, iters=0, top_g=1, seed=0)


def _equal_keys(distinct: bool = False) -> dict[str, Any]:
    """Six equal keys, three groups: the seeded initial centroids tie, groups 1 and 2 end empty
    (``distinct``: keys apart, no group empty)."""
    rng = np.random.default_rng(2)
    k = np.tile(np.array([[1.0, 2.0, -1.0]], np.float32), (6, 1))
    if distinct:
        k = k + np.arange(6, dtype=np.float32)[:, None] * np.float32(3.0)
    return dict(q=rng.standard_normal((2, 1, 3)).astype(np.float32),
                w=np.ones((2, 1), np.float32), k=k, topk=2, method="attention_index", groups=3,
                chunk=6, iters=1, top_g=1, seed=0)


def _last_block(s: int) -> dict[str, Any]:
    """HiSA, blocks of 4 keys valued 2 and a last block valued 3 (partial when S = 10)."""
    k = np.array([[2.0]] * 8 + [[3.0]] * (s - 8), np.float32)
    return dict(q=np.ones((1, 1, 1), np.float32), w=np.ones((1, 1), np.float32), k=k, topk=2,
                method="hisa", block=4, top_m=1)


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
    "group-mask-finite": (_huge_negative_hisa(), "mismatch:attention_index:candidates"),
    "scores-flush-subnormal": (_tiny_dense(), "mismatch:attention_index:score"),
    "absorb-batched": (_absorbed([0, 10, 6, 4.5]), "mismatch:attention_index:assignment"),
    "empty-group-zeroed": (_equal_keys(), "mismatch:attention_index:centroids"),
    "block-mean-padded": (_last_block(10), "mismatch:attention_index:candidates"),
}

#: The same mutants just below their threshold / away from the extreme value: invisible.
HIDDEN_CASES: dict[str, dict[str, Any]] = {
    "group-mask-finite": _huge_negative_hisa(1.0),      # scores far above -1e30
    "scores-flush-subnormal": _tiny_dense(1.0),          # no subnormal value anywhere
    "absorb-batched": _absorbed([0, 10, 6]),            # one absorbed key only
    "empty-group-zeroed": _equal_keys(distinct=True),    # no empty group
    "block-mean-padded": _last_block(12),                # S a multiple of the block
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


@pytest.mark.parametrize("name", sorted(HIDDEN_CASES))
def test_mutant_is_invisible_below_its_threshold(name: str, target: Target) -> None:
    inputs = HIDDEN_CASES[name]
    assert checks.validate(inputs) is None
    clean = index.run(inputs)
    with target.mutant(name).applied():
        mutated = index.run(inputs)
    for key in clean:
        np.testing.assert_array_equal(np.asarray(mutated[key]), np.asarray(clean[key]),
                                      err_msg=f"{name}: {key}")


@pytest.mark.parametrize("name", ["causal-group-level-only", "sink-dropped",
                                  "centroid-not-updated"])
def test_fuzzing_finds_mutant(name: str, target: Target) -> None:
    with target.mutant(name).applied():
        assert first_failure(target, target.implementations["numpy"], 100) is not None
