"""Relations every target can use, whatever its outputs look like."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import fuzzkit.oracles
from fuzzkit.failure import Failure


def deterministic(
    impl: Callable[[Mapping[str, Any]], Any], inputs: Mapping[str, Any]
) -> Failure | None:
    """The same inputs twice give bit-identical outputs: every random choice must flow from a
    seed in the inputs, or a saved case would not replay the same way."""
    failure = fuzzkit.oracles.exact(dict(impl(inputs)), dict(impl(inputs)), name="rerun")
    return (
        None
        if failure is None
        else failure.with_kind("nondeterministic", "two runs of the same case differ: ")
    )
