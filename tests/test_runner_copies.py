"""The runner's per-run copies (fuzzkit.copying) and properties given the judged output."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from fuzzkit.copying import copy_inputs
from fuzzkit.failure import Failure
from fuzzkit.runner import check_case
from fuzzkit.target import Implementation, Property, Target


def test_a_copy_shares_nothing_mutable_and_keeps_types() -> None:
    inner = [1, 2]
    value = {"a": np.arange(6, dtype=np.int16).reshape(2, 3).T, "l": [inner, (3, inner)],
             "s": "x", "f": 1.5, "n": None, "g": np.float32(2), "d": {"k": [0.0]}}
    copied = copy_inputs(value)
    assert copied["a"].dtype == np.int16 and copied["a"].shape == (3, 2)
    assert np.array_equal(copied["a"], value["a"]) and copied["a"].base is None
    assert copied["l"] == [[1, 2], (3, [1, 2])] and type(copied["l"][1]) is tuple
    copied["a"][0, 0] = 99
    copied["l"][0].append(9)
    copied["l"][1][1].append(9)
    copied["d"]["k"].append(1.0)
    assert value["a"][0, 0] == 0 and inner == [1, 2] and value["d"] == {"k": [0.0]}


def test_other_objects_are_deep_copied() -> None:
    class Box:
        def __init__(self) -> None:
            self.items = [1]

    box = Box()
    copied = copy_inputs({"b": box})["b"]
    copied.items.append(2)
    assert copied is not box and box.items == [1]


def test_a_property_that_uses_the_output_gets_the_judged_run() -> None:
    calls: list[str] = []
    given: list[object] = []

    def impl(inputs):
        calls.append("impl")
        return {"y": np.array([inputs["x"] + 1])}

    def relation(run, inputs, output):
        given.append(output)
        shifted = run({"x": inputs["x"] + 1})
        if shifted["y"][0] != output["y"][0] + 1:
            return Failure("invariant", "not a shift", "invariant:toy:shift")
        return None

    target = Target(
        name="toy-shift",
        description="y = x + 1",
        strategy=lambda: st.fixed_dictionaries({"x": st.integers(0, 9)}),
        reference=lambda inputs: {"y": np.array([inputs["x"] + 1])},
        implementations={"impl": Implementation("impl", impl)},
        oracle=lambda inputs, expected, actual: None,
        properties=[Property("shift", relation, "shifting x shifts y", uses_output=True)],
    )
    verdict = check_case(target, target.implementation("impl"), {"x": 3})
    assert verdict.passed
    assert calls == ["impl", "impl"]  # the judged run and the variant; the base is not re-run
    assert given == [verdict.actual]
