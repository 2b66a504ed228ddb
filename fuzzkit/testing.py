"""Helpers for writing your own properties against a fuzzkit target in pytest.

from hypothesis import given
from fuzzkit.testing import target_inputs, assert_agrees

@pytest.mark.fuzzkit_target("quant")
@given(inputs=target_inputs("quant"))
def test_my_kernel(fuzzkit_target, inputs):
    assert_agrees(fuzzkit_target, my_kernel, inputs)
"""

from __future__ import annotations

from typing import Any, Callable

from fuzzkit.failure import Failure
from fuzzkit.registry import as_implementation, get_target
from fuzzkit.runner import check_case
from fuzzkit.target import Implementation, Inputs, Target


def target_inputs(name: str) -> Any:
    """The Hypothesis strategy that makes ``inputs`` for target ``name``."""
    return get_target(name).strategy_for()


def assert_agrees(
    target: Target | str,
    impl: Implementation | Callable[[Inputs], Any],
    inputs: Inputs,
    *,
    properties: bool = True,
) -> None:
    """Fail the test (AssertionError with the oracle's message) unless ``impl`` agrees."""
    target = get_target(target) if isinstance(target, str) else target
    implementation = impl if isinstance(impl, Implementation) else as_implementation(impl, "test")
    failure = check_case(target, implementation, inputs, properties=properties).failure
    if failure is not None:
        raise AssertionError(f"{failure.signature}: {failure.message}")


class _Found(Exception):
    """Stops the Hypothesis loop at the first failure (no shrinking wanted)."""


def first_failure(
    target: Target,
    impl: Implementation,
    max_examples: int,
    *,
    seed: int | None = None,
    properties: bool = True,
) -> Failure | None:
    """Fuzz ``impl`` with the target's strategy until the oracle (or, with ``properties``, a
    property) fails; that failure, or None after ``max_examples`` clean cases.  Deterministic:
    Hypothesis is derandomized, or seeded with ``seed``; generation only, no shrinking and no
    example database, so a test that proves "this mutant is caught" cannot pass by replaying an
    old find."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    found: list[Failure] = []

    @settings(
        max_examples=max_examples,
        derandomize=seed is None,
        phases=[Phase.generate],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(target.strategy_for(impl))
    def search(inputs: Inputs) -> None:
        failure = check_case(target, impl, inputs, properties=properties, confirm=False).failure
        if failure is not None:
            found.append(failure)
            raise _Found

    if seed is not None:
        search = hypothesis_seed(seed)(search)
    try:
        search()
    except _Found:
        pass
    return found[0] if found else None
