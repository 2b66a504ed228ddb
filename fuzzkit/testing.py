"""Helpers for writing your own properties against a fuzzkit target in pytest.

    from hypothesis import given
    from fuzzkit.testing import target_inputs, assert_agrees

    @pytest.mark.fuzzkit_target("quant")
    @given(inputs=target_inputs("quant"))
    def test_my_kernel(fuzzkit_target, inputs):
        assert_agrees(fuzzkit_target, my_kernel, inputs)
"""

from __future__ import annotations

from typing import Any, Callable, Union

from fuzzkit.registry import as_implementation, get_target
from fuzzkit.runner import check_case
from fuzzkit.target import Implementation, Inputs, Target


def target_inputs(name: str) -> Any:
    """The Hypothesis strategy that makes ``inputs`` for target ``name``."""
    return get_target(name).strategy()


def assert_agrees(target: Union[Target, str], impl: Union[Implementation, Callable[[Inputs], Any]],
                  inputs: Inputs, *, properties: bool = True) -> None:
    """Fail the test (AssertionError with the oracle's message) unless ``impl`` agrees."""
    target = get_target(target) if isinstance(target, str) else target
    implementation = impl if isinstance(impl, Implementation) else as_implementation(impl, "test")
    failure = check_case(target, implementation, inputs, properties=properties).failure
    if failure is not None:
        raise AssertionError(f"{failure.signature}: {failure.message}")
