"""Minimization is a target hook (``fuzzkit/shrink/hook.py``): ``fuzzkit shrink`` runs the
target's ``minimize`` hook, ddmin over ``reducible`` when it has none; a hook gets the case, a
trial that runs candidates and the deadline, and returns the smaller case, what it found and the
files to write beside it."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from fuzzkit import case as casefile
from fuzzkit.case import Case
from fuzzkit.cli import main
from fuzzkit.registry import register_target, unregister_target
from fuzzkit.shrink.hook import Minimization, Minimized, NotFailing, minimize
from fuzzkit.target import Target

NAME = "toy-dot-hooked"
calls: list[Minimization] = []


def first_rows(request: Minimization) -> Minimized:
    """A hook that keeps the first five rows of a and b (the outside implementation drops the
    last term of an odd length >= 5) and writes a note beside the saved case."""
    calls.append(request)
    if request.trial(request.case.inputs).failure is None:
        raise NotFailing("the case passes; nothing for the hook to do")
    inputs = {k: v[:5] for k, v in request.case.inputs.items()}
    failure = request.trial(inputs, confirm=True).failure
    smaller = dataclasses.replace(request.case, inputs=inputs, failure=failure, origin="hook")

    def note(saved: Case, path: Path) -> dict[str, Path]:
        written = path.with_suffix(".txt")
        written.write_text(f"{saved.case_id}: kept the first rows\n")
        return {"note": written}

    return Minimized(smaller, tests=2, lines=["kept the first rows"], companions=note)


@pytest.fixture
def hooked(dot: Target) -> Iterator[Target]:
    target = dataclasses.replace(dot, name=NAME, minimize=first_rows)
    register_target(target, replace=True)
    calls.clear()
    try:
        yield target
    finally:
        unregister_target(NAME)


def _failing(name: str) -> Case:
    """A dot case that the outside implementation (which drops the last term) fails."""
    a = np.arange(1.0, 10.0, dtype=np.float32)
    return Case(name, "toy_targets:_outside_buggy", {"a": a, "b": a.copy()})


def test_shrink_runs_the_targets_hook(hooked: Target, tmp_path: Path, capsys) -> None:
    path = _failing(NAME).save(tmp_path)
    code = main(["shrink", str(path), "--output", str(tmp_path / "out"),
                 "--impl", "toy_targets:_outside_buggy"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "kept the first rows" in out and "note: " in out
    [request] = calls
    assert request.target.name == NAME and request.until is None
    assert request.implementation.name == "toy_targets:_outside_buggy"
    [written] = (tmp_path / "out").glob("*.json")
    small = casefile.load(written)
    assert small.inputs["a"].shape == (5,) and small.origin == "hook"
    assert written.with_suffix(".txt").read_text().startswith(small.case_id)


def test_a_hook_that_finds_the_case_passing_is_one_line(hooked: Target, tmp_path: Path,
                                                        capsys) -> None:
    ones = np.ones(3, np.float32)
    path = Case(NAME, "numpy", {"a": ones, "b": ones}).save(tmp_path)
    assert main(["shrink", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing for the hook to do" in err[0]


def test_without_a_hook_minimize_is_ddmin_over_reducible(dot: Target) -> None:
    assert dot.minimize is None
    rng = np.random.default_rng(0)
    a = rng.standard_normal(21).astype(np.float32)
    case = Case("toy-dot", "numpy", {"a": a, "b": a[::-1].copy()})
    with dot.mutant("drops-last-term").applied():
        result = minimize(dot, dot.implementation("numpy"), case)
    assert result.details["before"] == {"a": 21, "b": 21}
    assert result.details["after"]["a"] < 21 and result.case.origin == "shrink"
    assert "shrunk in" in result.lines[0] and result.companions is None
    with pytest.raises(NotFailing):
        minimize(dot, dot.implementation("numpy"), case)  # the clean implementation passes


def test_the_hook_gets_the_deadline_and_a_trial_of_the_implementation(hooked: Target) -> None:
    from fuzzkit.registry import resolve_implementation

    impl = resolve_implementation(hooked, "toy_targets:_outside_buggy")
    until = time.monotonic() + 60
    result = minimize(hooked, impl, _failing(NAME), until=until)
    [request] = calls
    assert request.until == until and not request.expired()
    assert result.case.inputs["a"].shape == (5,) and result.case.failure is not None
