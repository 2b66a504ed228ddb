"""The pytest plugin, run through pytester: regressions replay, fuzz items, fixture and marker."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from fuzzkit.case import Case

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
    result.stdout.fnmatch_lines(["*test_impls_agree?toy-dot-numpy? PASSED*", "*mismatch:close:dot*"])


def test_works_under_xdist(project: pytest.Pytester) -> None:
    _save(project, "numpy", 3)
    _save(project, "numpy", 5)
    project.makepyfile(test_nothing="def test_ok():\n    pass\n")
    result = project.runpytest_subprocess("-n", "2", "--fuzzkit-budget", "1",
                                          "--fuzzkit-targets", "toy-dot", ".")
    result.assert_outcomes(passed=4)
