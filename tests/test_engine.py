"""Runner, Hypothesis engine, ddmin and programs, proven on the toy targets' mutants."""

from __future__ import annotations

import dataclasses
from pathlib import Path
import time

import numpy as np
import pytest

from fuzzkit.engines.hypothesis import fuzz
from fuzzkit.program import drive
from fuzzkit.runner import check_case
from fuzzkit.shrink.ddmin import ddmin, shrink_case
from fuzzkit.case import Case
from fuzzkit.failure import Failure
from fuzzkit.target import Implementation

import toy_targets


# ---------------------------------------------------------------------------- runner verdicts


def _raises_in_user_code(inputs):
    return _helper_that_fails(inputs)


def _helper_that_fails(inputs):
    return np.zeros(3)[len(inputs["a"]) + 10]


def test_clean_implementation_passes(dot) -> None:
    inputs = {"a": np.ones(7, np.float32), "b": np.arange(7, dtype=np.float32)}
    assert check_case(dot, dot.implementation("numpy"), inputs).passed


def test_crash_signature_is_type_and_innermost_user_frame(dot) -> None:
    impl = Implementation("bad", _raises_in_user_code)
    sigs = set()
    for n in (1, 5, 9):
        inputs = {"a": np.ones(n, np.float32), "b": np.ones(n, np.float32)}
        failure = check_case(dot, impl, inputs).failure
        assert failure.kind == "crash"
        sigs.add(failure.signature)
    # the innermost frame is ours, not numpy's indexing machinery, and stable across sizes
    assert sigs == {"crash:IndexError@tests/test_engine.py:_helper_that_fails"}


def _off_by_a_million(inputs):
    return {"dot": np.array([np.float32(inputs["a"] @ inputs["b"] + 1e6)])}


def test_localize_hook_names_the_culprit_and_keeps_the_signature(dot) -> None:
    seen = []

    def localize(run, inputs, failure):
        if failure.kind != "crash":
            seen.append(run(inputs)["dot"][0])  # the hook may re-run the implementation
        return Failure(failure.kind, failure.message + "; culprit: term 0", failure.signature,
                       {**failure.details, "guilty": 0})

    target = dataclasses.replace(dot, localize=localize)
    inputs = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}
    plain = check_case(dot, Implementation("bad", _off_by_a_million), inputs).failure
    failure = check_case(target, Implementation("bad", _off_by_a_million), inputs).failure
    assert failure.message.endswith("culprit: term 0") and failure.details["guilty"] == 0
    assert failure.signature == plain.signature and seen
    assert check_case(target, dot.implementation("numpy"), inputs).passed
    crash = check_case(target, Implementation("bad", _raises_in_user_code), inputs).failure
    assert crash.kind == "crash" and crash.message.endswith("culprit: term 0")


@pytest.mark.parametrize("hook", ["raises", "renames"])
def test_a_broken_localize_hook_keeps_the_original_failure(dot, hook) -> None:
    def localize(run, inputs, failure):
        if hook == "raises":
            raise ValueError("no slots here")
        return Failure(failure.kind, "other", "mismatch:something-else")

    target = dataclasses.replace(dot, localize=localize)
    inputs = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}
    plain = check_case(dot, Implementation("bad", _off_by_a_million), inputs).failure
    failure = check_case(target, Implementation("bad", _off_by_a_million), inputs).failure
    assert (failure.kind, failure.message, failure.signature) == (
        plain.kind, plain.message, plain.signature)
    assert failure.details["localization"]


def test_crash_in_generated_code_is_keyed_by_the_caller(dot, tmp_path) -> None:
    """Code written to the temporary directory at run time (Inductor's modules, kernels) has a
    content-hashed name per input: the signature names the project frame that ran it."""
    import importlib.util
    import tempfile

    folder = Path(tempfile.mkdtemp())
    sigs = set()
    for n in (1, 2):
        path = folder / f"generated_{n}_{abs(hash(str(tmp_path)))}.py"
        path.write_text("def kernel(a):\n    raise RuntimeError('codegen error')\n")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

        def launch(inputs, kernel=module.kernel):
            return kernel(inputs["a"])

        inputs = {"a": np.ones(n, np.float32), "b": np.ones(n, np.float32)}
        sigs.add(check_case(dot, Implementation("gen", launch), inputs).failure.signature)
    assert sigs == {"crash:RuntimeError@tests/test_engine.py:launch"}


def test_nondeterminism_is_flagged(dot) -> None:
    calls = []

    def flaky(inputs):
        calls.append(1)
        value = 0.0 if len(calls) % 2 else 1e6  # wrong on every other call
        return {"dot": np.array([np.float32(inputs["a"] @ inputs["b"] + value)])}

    inputs = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}
    calls.append(1)  # make the first call the wrong one
    failure = check_case(dot, Implementation("flaky", flaky), inputs, properties=False).failure
    assert failure.kind == "nondeterministic"
    assert failure.signature.startswith("nondeterministic:")


def test_timeout_becomes_a_verdict(dot) -> None:
    def slow(inputs):
        time.sleep(5)

    inputs = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}
    started = time.monotonic()
    failure = check_case(dot, Implementation("slow", slow), inputs, timeout=0.2).failure
    assert failure.kind == "timeout" and time.monotonic() - started < 3


class _CompilerError(RuntimeError):
    """Stands for a library that turns whatever its compile step raised into its own error."""


def test_timeout_wrapped_by_a_library_is_still_a_timeout(dot) -> None:
    """Inductor raises ``InductorError`` from the alarm that interrupted its compile: that is the
    case's timeout, not a crash at whatever frame the alarm landed in."""
    def wrapping(inputs):
        try:
            time.sleep(5)
        except Exception as exc:  # noqa: BLE001 - what the library does
            raise _CompilerError("compile failed") from exc

    inputs = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}
    failure = check_case(dot, Implementation("wraps", wrapping), inputs, timeout=0.2).failure
    assert (failure.kind, failure.signature) == ("timeout", "timeout:toy-dot:wraps")

    def unrelated(inputs):  # a real error of the library still is a crash
        raise _CompilerError("compile failed")

    failure = check_case(dot, Implementation("breaks", unrelated), inputs, timeout=5).failure
    assert failure.kind == "crash"


def test_implementation_cannot_corrupt_the_case_by_writing_into_inputs(dot) -> None:
    def scribbles(inputs):
        out = toy_targets.dot_numpy(inputs)
        inputs["a"][:] = 0
        return out

    inputs = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}
    assert check_case(dot, Implementation("s", scribbles), inputs).passed
    assert inputs["a"].sum() == 3


def test_property_failure_is_reported(dot) -> None:
    def asymmetric(inputs):
        return {"dot": np.array([np.float32(inputs["a"] @ inputs["b"] + 1e-3 * inputs["a"][0])])}

    inputs = {"a": np.array([1e6], np.float32), "b": np.array([0.0], np.float32)}
    failure = check_case(dot, Implementation("asym", asymmetric), inputs).failure
    assert failure is not None


# ---------------------------------------------------------------------------- engine


def test_engine_finds_and_shrinks_the_dot_mutant(dot) -> None:
    mutant = dot.mutant("drops-last-term")
    with mutant.applied():
        result = fuzz(dot, dot.implementation("numpy"), budget=20, seed=1, database_dir=None,
                      max_findings=1)
    assert result.finding is not None, "mutant not detected"
    failure = result.finding.failure
    assert failure.signature == "mismatch:close:dot"
    # Hypothesis shrinks to the smallest length that shows the bug (5) and to simple values
    a, b = result.finding.inputs["a"], result.finding.inputs["b"]
    assert len(a) == 5
    assert np.all(np.abs(a) <= 1) and np.all(np.abs(b) <= 1) and a[-1] * b[-1] != 0


def test_clean_run_is_clean_and_counts_cases(dot) -> None:
    result = fuzz(dot, dot.implementation("numpy"), budget=2, seed=3, database_dir=None)
    assert result.finding is None
    assert result.cases > 20 and result.seconds >= 2


def test_same_seed_same_finding(dot) -> None:
    mutant = dot.mutant("drops-last-term")
    findings = []
    for _ in range(2):
        with mutant.applied():
            r = fuzz(dot, dot.implementation("numpy"), budget=20, seed=5, database_dir=None,
                     max_findings=1)
        findings.append(r.finding.case_id)
    assert findings[0] == findings[1]


def test_engine_shrinks_a_program_to_the_one_bad_step(alloc) -> None:
    with alloc.mutant("double-free").applied():
        result = fuzz(alloc, alloc.implementation("heap"), budget=20, seed=0, database_dir=None,
                      max_findings=1)
    assert result.finding is not None
    program = result.finding.inputs["program"]
    assert len(program) <= 2, program
    assert result.finding.failure.details["op"] == "release"


def test_database_replays_a_known_failure_first(dot, tmp_path) -> None:
    mutant = dot.mutant("drops-last-term")
    with mutant.applied():
        first = fuzz(dot, dot.implementation("numpy"), budget=20, seed=11, database_dir=tmp_path,
                     max_findings=1)
        again = fuzz(dot, dot.implementation("numpy"), budget=20, seed=12, database_dir=tmp_path,
                     max_findings=1)
    assert first.finding is not None and again.finding is not None
    assert first.cases_to_first_failure > 1
    assert again.cases_to_first_failure <= 5  # replayed from the database, not searched again
    assert again.cases_to_first_failure < first.cases_to_first_failure


# ---------------------------------------------------------------------------- ddmin


def test_ddmin_is_one_minimal() -> None:
    items = list(range(40))
    calls = []

    def fails(subset):
        calls.append(1)
        return {3, 17, 31} <= set(subset)

    assert ddmin(items, fails) == [3, 17, 31]
    assert len(calls) < 200


def test_ddmin_keeps_order_and_handles_single_items() -> None:
    assert ddmin(["x"], lambda s: "x" in s) == ["x"]
    assert ddmin(list("abcdef"), lambda s: "".join(s).find("e") > s.index("b") if "b" in s and "e" in s else False) == ["b", "e"]


def _long_failing_program():
    noise = [{"op": "alloc", "rid": r % 3} for r in range(12)]
    noise += [{"op": "release", "rid": r % 3, "block": (r % 3) + 1} for r in range(8)]
    bad = [{"op": "release", "rid": 2, "block": 4}, {"op": "release", "rid": 2, "block": 4}]
    return noise[:9] + bad[:1] + noise[9:] + bad[1:]


def test_shrink_case_cuts_a_program_with_ddmin(alloc) -> None:
    program = _long_failing_program()
    case = Case("toy-alloc", "heap", {"config": {"blocks": 4}, "program": program})
    with alloc.mutant("double-free").applied():
        result = shrink_case(alloc, alloc.implementation("heap"), case)
    assert result.before == {"program": len(program)}
    assert result.after["program"] == 1
    assert result.case.failure.signature.startswith("mismatch:trace:release")


def test_shrink_case_cuts_array_rows_jointly(dot) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(21).astype(np.float32)
    b = rng.standard_normal(21).astype(np.float32)
    case = Case("toy-dot", "numpy", {"a": a, "b": b})
    with dot.mutant("drops-last-term").applied():
        result = shrink_case(dot, dot.implementation("numpy"), case)
    assert result.after == {"a": 5, "b": 5}


def test_shrink_refuses_a_passing_case(dot) -> None:
    case = Case("toy-dot", "numpy", {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})
    with pytest.raises(ValueError, match="passes"):
        shrink_case(dot, dot.implementation("numpy"), case)


def test_drive_records_errors_as_observations() -> None:
    machine = toy_targets.ReferenceAllocator({"blocks": 1})
    obs = drive(machine, [{"op": "alloc", "rid": 0}, {"op": "alloc", "rid": 1}])
    assert obs == [{"op": "alloc", "result": 1}, {"op": "alloc", "error": "MemoryError"}]
    with pytest.raises(ValueError, match="unknown operation"):
        drive(machine, [{"op": "__init__"}])
