"""The pytest plugin, run through pytester: regressions replay, fuzz items, fixture and marker."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from fuzzkit.case import Case
from fuzzkit.pytest_plugin import DEFAULT_CASES

HERE = Path(__file__).parent

CONFTEST = """
from fuzzkit import registry
import toy_targets
registry.register_target("toy-dot", replace=True)(toy_targets.dot_target)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copy(HERE / "toy_targets.py", pytester.path / "toy_targets.py")
    pytester.makeconftest(CONFTEST)
    pytester.syspathinsert()
    return pytester


def _save(pytester: pytest.Pytester, impl: str, n: int) -> Path:
    rng = np.random.default_rng(n)
    case = Case("toy-dot", impl, {"a": rng.standard_normal(n).astype(np.float32),
                                  "b": rng.standard_normal(n).astype(np.float32)})
    return case.save(pytester.path / "corpus" / "toy-dot" / "regressions")


def test_regressions_become_items_that_replay(project: pytest.Pytester) -> None:
    _save(project, "numpy", 4)
    bad = _save(project, "toy_targets:_outside_buggy", 7)
    (project.path / "corpus" / "toy-dot" / "findings").mkdir()
    Case("toy-dot", "numpy", {"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)}).save(
        project.path / "corpus" / "toy-dot" / "findings")  # findings are not tests
    # the outside implementation runs only because the user names it (option or ini list)
    result = project.runpytest("corpus", "-p", "no:cacheprovider",
                               "--fuzzkit-impl", "toy_targets:_outside_buggy")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*mismatch:close:dot*", f"*replay: fuzzkit replay*{bad.name}*"])
    result = project.runpytest("corpus", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*cannot choose code*"])


def test_corrupt_regression_fails_with_a_clear_message(project: pytest.Pytester) -> None:
    folder = project.path / "corpus" / "toy-dot" / "regressions"
    folder.mkdir(parents=True)
    (folder / "broken.json").write_text('{"format": "fuzzkit-case/1", "tar')
    result = project.runpytest("corpus")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*cannot replay*not valid JSON*"])


def test_budget_adds_one_fuzz_item_per_target_and_implementation(project: pytest.Pytester) -> None:
    project.makepyfile(test_nothing="def test_ok():\n    pass\n")
    result = project.runpytest("--fuzzkit-budget", "1", "--fuzzkit-targets", "toy-dot", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*fuzzkit?toy-dot-numpy?*PASSED*"])


def test_marker_fixture_and_strategy(project: pytest.Pytester) -> None:
    project.makepyfile(test_props="""
import pytest
from hypothesis import given, settings
from fuzzkit.testing import target_inputs, assert_agrees
import toy_targets

@pytest.mark.fuzzkit_target("toy-dot")
@settings(max_examples=20, deadline=None)
@given(inputs=target_inputs("toy-dot"))
def test_impls_agree(fuzzkit_target, fuzzkit_impl, inputs):
    assert_agrees(fuzzkit_target, fuzzkit_impl, inputs)

@pytest.mark.fuzzkit_target("toy-dot")
@settings(max_examples=200, deadline=None)
@given(inputs=target_inputs("toy-dot"))
def test_outside_impl_is_caught(fuzzkit_target, inputs):
    assert_agrees(fuzzkit_target, toy_targets._outside_buggy, inputs)
""")
    result = project.runpytest("-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*test_impls_agree?toy-dot-numpy? PASSED*", "*mismatch:close:dot*"]
    )
    # the falsifying example names the Target in a few characters, not its whole contract
    result.stdout.fnmatch_lines(["*fuzzkit_target=<Target 'toy-dot'>*"])
    result.stdout.no_fnmatch_line("*Target(name=*")
    # and fuzzkit's own frame is hidden: the user's line and the oracle's message are the news
    result.stdout.no_fnmatch_line("*failure = check_case(*")


def test_works_under_xdist(project: pytest.Pytester) -> None:
    _save(project, "numpy", 3)
    _save(project, "numpy", 5)
    project.makepyfile(test_nothing="def test_ok():\n    pass\n")
    result = project.runpytest_subprocess("-n", "2", "--fuzzkit-budget", "1",
                                          "--fuzzkit-targets", "toy-dot", ".")
    result.assert_outcomes(passed=4)


# ---- the user's own implementation: @pytest.mark.fuzzkit_target(name, impl=...) + fuzzkit_fuzz

MINE = """
import pytest
import toy_targets

@pytest.mark.fuzzkit_target("toy-dot", impl=[toy_targets.dot_numpy, "toy_targets:_outside_buggy"])
def test_fuzz(fuzzkit_fuzz):
    result = fuzzkit_fuzz()
    with open("cases.txt", "a") as out:
        out.write(f"{result.cases}\\n")

def test_plain():
    pass
"""


def _failure_section(lines: list[str], test_id: str) -> list[str]:
    """The lines pytest prints for one failure: from its ``____ name ____`` header to the next
    header or summary line."""
    start = next(i for i, line in enumerate(lines) if line.startswith("_") and test_id in line)
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith(("_", "=="))), len(lines)
    )
    return lines[start:end]


def test_marked_implementation_is_fuzzed_with_a_short_report(project: pytest.Pytester) -> None:
    project.makepyfile(test_mine=MINE)
    result = project.runpytest("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*test_fuzz?toy-dot-dot_numpy? PASSED*", "*test_fuzz?toy-dot-_outside_buggy? FAILED*"]
    )
    section = _failure_section(result.outlines, "test_fuzz[toy-dot-_outside_buggy]")
    assert 4 <= len(section) <= 25, section
    text = "\n".join(section)
    assert "mismatch:close:dot" in text and "Traceback" not in text and "def test_" not in text
    case = re.search(r"minimized case: (\S+\.json)", text)
    assert case and (project.path / case.group(1)).is_file()
    assert case.group(1).startswith("corpus/toy-dot/findings/")
    # toy_targets is not installed: the command puts its folder on PYTHONPATH
    assert (
        f"replay: PYTHONPATH={HERE.resolve()} fuzzkit replay {case.group(1)} "
        "--impl toy_targets:_outside_buggy" in text
    )
    assert "(needs toy_targets importable" in text
    # without --fuzzkit-budget: the short deterministic run of DEFAULT_CASES cases
    assert (project.path / "cases.txt").read_text().split() == [str(DEFAULT_CASES)]


def test_fuzz_items_are_selectable_by_node_id(project: pytest.Pytester) -> None:
    project.makepyfile(test_mine=MINE)
    node = "test_mine.py::test_fuzz[toy-dot-dot_numpy]"
    result = project.runpytest("-v", "-p", "no:cacheprovider", node)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_fuzz?toy-dot-dot_numpy? PASSED*"])


def test_budget_fuzzes_only_the_marked_implementations(project: pytest.Pytester) -> None:
    project.makepyfile(test_mine=MINE)
    result = project.runpytest(
        "-v", "-p", "no:cacheprovider", "--fuzzkit-budget", "1", "-k", "not outside_buggy"
    )
    result.assert_outcomes(passed=2)
    assert not [line for line in result.outlines if "fuzzkit[" in line]  # no built-in pairs
    cases = int((project.path / "cases.txt").read_text())
    assert cases > DEFAULT_CASES  # a budgeted run, not the short one


def test_fuzzkit_fuzz_without_impl_is_a_one_line_error(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_bad="""
import pytest

@pytest.mark.fuzzkit_target("toy-dot")
def test_fuzz(fuzzkit_fuzz):
    fuzzkit_fuzz()
"""
    )
    result = project.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_fuzz: fuzzkit_fuzz fuzzes your implementation*impl=*"])


SLOW_FIRST_CASE = """
import time
from datetime import timedelta
import pytest
from hypothesis import given, settings
from fuzzkit.testing import target_inputs

def slow_first(calls):
    if not calls:  # a first case that pays for imports / JIT compilation
        calls.append(1)
        time.sleep(0.5)

DEFAULT, OWN = [], []

@pytest.mark.fuzzkit_target("toy-dot")
@given(inputs=target_inputs("toy-dot"))
def test_default_settings(fuzzkit_target, inputs):
    slow_first(DEFAULT)

@pytest.mark.fuzzkit_target("toy-dot")
@settings(deadline=timedelta(milliseconds=200))
@given(inputs=target_inputs("toy-dot"))
def test_own_settings(fuzzkit_target, inputs):
    slow_first(OWN)
"""


def test_marked_hypothesis_tests_run_without_a_deadline_unless_the_user_set_one(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(test_slow=SLOW_FIRST_CASE)
    result = project.runpytest("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*test_default_settings?toy-dot? PASSED*", "*test_own_settings?toy-dot? FAILED*"]
    )


def test_no_side_effects_on_the_session(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project that merely has fuzzkit installed: its environment and its own
    ``regressions/*.json`` are left alone."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    mine = project.path / "data" / "regressions"
    mine.mkdir(parents=True)
    (mine / "expected.json").write_text('{"answer": 42}')
    ours = _save(project, "numpy", 3)
    project.makepyfile(
        test_env="""
import os

def test_environment_untouched():
    assert "OMP_NUM_THREADS" not in os.environ
"""
    )
    result = project.runpytest_subprocess("-v", "-p", "no:cacheprovider", ".")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*{ours.stem}*PASSED*"])
    assert "expected" not in result.stdout.str()


def test_a_failure_report_stays_short_whatever_the_findings(tmp_path: Path) -> None:
    """Many findings with long, many-line messages: still a report of at most 25 lines."""
    from types import SimpleNamespace

    from fuzzkit.engines.hypothesis import FuzzResult
    from fuzzkit.failure import Failure
    from fuzzkit.pytest_plugin import failure_report

    saved = []
    for i in range(6):
        failure = Failure("mismatch", "\n".join(["x" * 300] * 40), f"mismatch:close:out{i}")
        case = Case("toy-dot", "toy_targets:_outside_buggy", {"a": np.ones(i + 1)}, failure=failure)
        saved.append((case, case.save(tmp_path / "corpus" / "toy-dot" / "findings")))
    config = SimpleNamespace(invocation_params=SimpleNamespace(dir=tmp_path))
    result = FuzzResult("toy-dot", "toy_targets:_outside_buggy", 0, cases=50)
    lines = failure_report(config, result, saved)  # type: ignore[arg-type]
    assert len(lines) + 1 <= 25  # + pytest's own header line
    assert all(len(line) <= 500 for line in lines)
    assert lines[-1] == "... and 4 more finding(s) under corpus/toy-dot/findings"
    assert sum("replay: " in line for line in lines) == 2


def test_messages_are_bounded() -> None:
    from fuzzkit.testing import bounded

    assert bounded("short") == "short"
    many = bounded("\n".join(f"line {i}" for i in range(50)))
    assert many.splitlines()[-1] == "line 3 ..." and len(many.splitlines()) == 4
    assert len(bounded("y" * 10_000)) == 400
