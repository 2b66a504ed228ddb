"""Two tiny targets whose behaviour a test can predict exactly (corpus and report tests).

``toy-branches`` is an integer classifier with a few branches and two planted bugs, small enough
that a test can say which cases cover what (the corpus merge tests).  Classes: negative, zero,
small (1..10), large (> 10).  Bugs: 7 is misclassified (a mismatch), 13 raises (a crash).

``toy-late`` has the same reference, but its implementation goes wrong from its
:data:`FAIL_FROM`-th call on, whatever the input: a run's cases-to-first-failure is known in
advance (:func:`reset` before each run).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from fuzzkit.failure import Failure
from fuzzkit.target import Implementation, Target


def reference(inputs: dict[str, Any]) -> dict[str, Any]:
    x = inputs["x"]
    return {"y": (x > 0) - (x < 0) + (x > 10)}


def classify(inputs: dict[str, Any]) -> dict[str, Any]:
    x = inputs["x"]
    if x < 0:
        return {"y": -1}
    if x == 0:
        return {"y": 0}
    if x == 7:
        return {"y": 99}  # planted mismatch
    if x == 13:
        raise ValueError("unlucky")  # planted crash
    if x > 10:
        return {"y": 2}
    return {"y": 1}


def oracle(inputs: dict[str, Any], expected: dict[str, Any], actual: dict[str, Any]) -> Any:
    if expected["y"] == actual["y"]:
        return None
    return Failure("mismatch", f"y={actual['y']}, expected {expected['y']}", "mismatch:y")


FAIL_FROM = 5
_calls = [0]


def reset() -> None:
    _calls[0] = 0


def late(inputs: dict[str, Any]) -> dict[str, Any]:
    _calls[0] += 1
    return {"y": 99} if _calls[0] >= FAIL_FROM else reference(inputs)


def target() -> Target:
    return Target(
        name="toy-branches",
        description="integer classifier with planted bugs at 7 and 13",
        strategy=lambda: st.fixed_dictionaries({"x": st.integers(-50, 50)}),
        reference=reference,
        implementations={
            "branchy": Implementation("branchy", classify, backend="python", sources=(__name__,))
        },
        oracle=oracle,
    )


def late_target() -> Target:
    return Target(
        name="toy-late",
        description=f"goes wrong from its {FAIL_FROM}th call on",
        strategy=lambda: st.fixed_dictionaries({"x": st.integers(-50, 50)}),
        reference=reference,
        implementations={"counting": Implementation("counting", late, backend="python")},
        oracle=oracle,
    )
