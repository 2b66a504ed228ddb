"""A target whose implementation cannot express odd cases: it raises Unsupported for them, and
its own strategy (``narrowed``) turns half of the draws away.  Registered on import so that an
isolated child (``preload=["unsupported_targets"]``) sees it too."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from fuzzkit import registry
from fuzzkit.failure import Failure
from fuzzkit.target import Implementation, Target, Unsupported, count_unsupported


def _inputs(thresholds: tuple = ()) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"n": st.integers(0, 1000)})


def _reference(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"n": inputs["n"]}


def _oracle(inputs: dict[str, Any], expected: Any, actual: Any) -> Failure | None:
    if expected != actual:
        return Failure("mismatch", f"expected {expected}, got {actual}", "mismatch:n")
    return None


def _even_only(inputs: dict[str, Any]) -> dict[str, Any]:
    """Wrong on every odd case -- which it declares it cannot express: never a failure."""
    if inputs["n"] % 2:
        raise Unsupported("odd n")
    return {"n": inputs["n"]}


def _admit(inputs: dict[str, Any]) -> bool:
    if inputs["n"] % 2:
        count_unsupported("narrowed: odd n")
        return False
    return True


def _narrowed(thresholds: tuple = ()) -> Any:
    return _inputs(thresholds).filter(_admit)


def target() -> Target:
    return Target(
        name="unsupported-demo",
        description="an implementation that turns odd cases away",
        strategy=_inputs,
        reference=_reference,
        implementations={
            "even": Implementation("even", _even_only),
            "narrowed": Implementation("narrowed", _even_only, cases=_narrowed),
        },
        oracle=_oracle,
    )


registry.register_target("unsupported-demo", replace=True)(target)
