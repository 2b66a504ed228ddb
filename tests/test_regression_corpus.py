"""The checked-in regression corpus is alive: each case that came from a mutant still catches it.

The pytest plugin replays every regression against the real implementation (it must pass); this
test replays the same files with the mutant they were found under applied (it must fail the same
way), so a weakened oracle or a changed strategy cannot quietly turn the corpus into dead files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzzkit import case as casefile
from fuzzkit.registry import get_target
from fuzzkit.runner import check_case

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
FROM_MUTANTS = sorted(
    path for path in CORPUS.glob("*/regressions/*.json")
    if casefile.load(path).origin.startswith("mutant:")
)


def test_the_corpus_has_mutant_regressions() -> None:
    assert len(FROM_MUTANTS) >= 5


@pytest.mark.parametrize("path", FROM_MUTANTS, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_regression_still_catches_its_mutant(path: Path) -> None:
    case = casefile.load(path)
    target = get_target(case.target)
    impl = target.implementation(case.implementation)
    mutant = target.mutant(case.origin.removeprefix("mutant:"))
    assert check_case(target, impl, case.inputs).failure is None
    # A mutant that breaks ties at random (a bug class of its own) fails only on some runs, and
    # whether the saving run's confirming re-run agreed decides if the file says
    # "nondeterministic:" -- so every mutant gets a few tries to fail the same inner way.
    inner = case.failure.signature.removeprefix("nondeterministic:")
    seen = set()
    with mutant.applied():
        for _ in range(30):
            failure = check_case(target, impl, case.inputs, confirm=False).failure
            seen.add(failure.signature if failure else "pass")
            if inner in seen:
                return
    raise AssertionError(f"{case.origin} no longer caught: expected {inner}, saw {sorted(seen)}")
