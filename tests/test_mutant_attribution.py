"""A mutant counts as detected only by a finding that passes without it.

The search can reach a defect of the implementation itself before the mutant's bug (a comparison
mutant of the compiler target first found ATen's own float16 baddbmm defect).  Such a finding says
nothing about the mutant, and saved as a regression it would fail on the real code forever.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

import toy_targets
from fuzzkit import cli, registry
from fuzzkit.known import KnownSignature, KnownSignatures
from fuzzkit.mutation import run_mutant
from fuzzkit.target import Implementation, Mutant, Target


def _crashes_on_three(inputs: dict[str, Any]) -> dict[str, Any]:
    """The implementation's own defect, found by the search within its first few cases."""
    if len(inputs["a"]) == 3:
        raise ValueError("length three is not served")
    return toy_targets.dot_numpy(inputs)


INERT = Mutant("inert", "numpy", "changes nothing", "a mutant the oracle cannot see",
               contextlib.nullcontext)


def _target() -> Target:
    target = toy_targets.dot_target()
    target.name = "toy-dot-crashy"
    target.implementations = {"numpy": Implementation("numpy", _crashes_on_three,
                                                      backend="numpy")}
    target.mutants = [*target.mutants, INERT]
    return target


def test_a_finding_that_fails_without_the_mutant_is_not_a_detection() -> None:
    target = _target()
    result = run_mutant(target, INERT, budget=120.0, seed=0, max_cases=300)
    assert not result.detected and result.signature is None
    assert result.clean_failure is not None and result.clean_failure.startswith("crash:ValueError")
    assert "without the mutant too" in (result.message or "")


def test_known_signatures_let_the_search_go_past_the_implementations_own_defect() -> None:
    target = _target()
    mutant = target.mutant("drops-last-term")
    known = KnownSignatures((KnownSignature("crash:ValueError*", "the length-three defect"),))
    result = run_mutant(target, mutant, budget=120.0, seed=0, max_cases=300, known=known)
    assert result.detected and result.clean_failure is None
    assert result.signature is not None and not result.signature.startswith("crash")


@pytest.fixture
def crashy() -> Any:
    registry.register_target("toy-dot-crashy", replace=True)(_target)
    yield
    registry.unregister_target("toy-dot-crashy")


def test_cli_neither_counts_nor_saves_it(crashy: Any, tmp_path: Path, capsys: Any) -> None:
    code = cli.main(["mutants", "toy-dot-crashy", "--only", "inert", "--budget", "30", "--json",
                     "--save-regressions", str(tmp_path)])
    rows = json.loads(capsys.readouterr().out)
    assert code == 1 and not rows[0]["detected"]
    assert rows[0]["clean_failure"].startswith("crash:ValueError")
    assert not list(tmp_path.rglob("*.json"))  # no regression that fails on the real code

    known = tmp_path / "known.json"
    known.write_text(json.dumps({"format": "fuzzkit-known/1", "known": [
        {"signature": "crash:ValueError*", "reason": "length three is not served"}]}))
    code = cli.main(["mutants", "toy-dot-crashy", "--only", "drops-last-term", "--budget", "30",
                     "--json", "--known", str(known)])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and rows[0]["detected"] and rows[0]["clean_failure"] is None
