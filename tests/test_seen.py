"""Repeated cases (issue 22): a generated case equal to one judged earlier in the run is counted
apart and never judged again; the fingerprint tells apart every pair of different inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from fuzzkit.engines.hypothesis import first_chunk_size, fuzz
from fuzzkit.runner import check_case
from fuzzkit.seen import SeenSet, fingerprint
from fuzzkit.target import Implementation, Target


def _tiny_target() -> Target:
    """Eight possible cases: Hypothesis generates most of them many times over."""

    def reference(inputs):
        return {"y": np.array([inputs["x"] * 2], np.int64)}

    return Target(
        name="toy-tiny",
        description="a search space of eight cases",
        strategy=lambda: st.fixed_dictionaries({"x": st.integers(0, 7)}),
        reference=reference,
        implementations={"same": Implementation("same", reference, backend="numpy")},
        oracle=lambda inputs, expected, actual: None,
    )


def test_a_repeated_case_is_counted_apart_and_not_judged_again() -> None:
    target = _tiny_target()
    judged: list[int] = []

    def counting_checker(target, impl, inputs, **kwargs):
        judged.append(inputs["x"])
        return check_case(target, impl, inputs, **kwargs)

    result = fuzz(target, target.implementation("same"), budget=3, seed=1, database_dir=None,
                  profile="ci", checker=counting_checker)
    assert result.repeats > 0
    assert sorted(judged) == sorted(set(judged))  # each distinct case judged once
    assert result.cases == len(judged) <= 8


def test_the_seen_set_is_shared_between_passes_of_one_item() -> None:
    target = _tiny_target()
    seen = SeenSet()
    impl = target.implementation("same")
    first = fuzz(target, impl, budget=2, seed=1, database_dir=None, profile="ci", seen=seen)
    second = fuzz(target, impl, budget=2, seed=1, database_dir=None, profile="ci", seen=seen,
                  first_chunk=len(first.chunks))
    assert first.cases + second.cases <= 8
    assert second.chunks[0][0] != first.chunks[0][0]  # it continues, it does not replay


def test_fingerprints_of_different_inputs_differ() -> None:
    base = {"a": np.zeros(3, np.float32), "n": 1, "xs": [1, 2]}
    variants = [
        {"a": np.zeros(3, np.float64), "n": 1, "xs": [1, 2]},  # dtype
        {"a": np.zeros((1, 3), np.float32), "n": 1, "xs": [1, 2]},  # shape
        {"a": np.array([0, 0, -0.0], np.float32), "n": 1, "xs": [1, 2]},  # sign of zero
        {"a": np.zeros(3, np.float32), "n": 1.0, "xs": [1, 2]},  # int vs float
        {"a": np.zeros(3, np.float32), "n": True, "xs": [1, 2]},  # bool vs int
        {"a": np.zeros(3, np.float32), "n": 1, "xs": (1, 2)},  # tuple vs list
        {"a": np.zeros(3, np.float32), "n": 1, "xs": [2, 1]},  # order
    ]
    prints = {fingerprint(v) for v in variants}
    assert len(prints) == len(variants) and fingerprint(base) not in prints
    assert fingerprint(base) == fingerprint({"a": np.zeros(3, np.float32), "n": 1, "xs": [1, 2]})


def test_an_unencodable_case_is_always_judged() -> None:
    seen = SeenSet()
    inputs = {"f": lambda: None}
    assert fingerprint(inputs) is None
    assert not seen.repeat(inputs) and not seen.repeat(inputs)


def test_the_seen_set_is_bounded() -> None:
    seen = SeenSet(limit=2)
    for x in range(5):
        assert not seen.repeat({"x": x})
    assert len(seen) == 2 and not seen.repeat({"x": 4}) and seen.repeat({"x": 0})


def test_the_first_chunk_is_sized_from_the_budget() -> None:
    assert first_chunk_size(0.1) == 10
    assert first_chunk_size(5) == 100
    assert first_chunk_size(10_000) == 1000


def test_max_cases_counts_judged_cases_even_when_some_repeat() -> None:
    """A run asked for N cases judges N distinct ones when the space has them, though chunks
    open with a repeat (the simplest case)."""
    from hypothesis import strategies as st2

    def reference(inputs):
        return {"y": np.array([inputs["x"]], np.int64)}

    target = Target(
        name="toy-wide", description="many cases",
        strategy=lambda: st2.fixed_dictionaries({"x": st2.integers(0, 10**6).map(lambda v: v % 97)}),
        reference=reference,
        implementations={"same": Implementation("same", reference, backend="numpy")},
        oracle=lambda inputs, expected, actual: None,
    )
    for n in (1, 11, 30, 47):
        result = fuzz(target, target.implementation("same"), budget=30, seed=2,
                      database_dir=None, profile="ci", max_cases=n)
        assert result.cases == n, (n, result.cases, result.repeats)
