"""The case-file loader, fuzzed with mutated real case files for a bounded number of inputs:
every input is accepted or refused with a one-line FuzzkitError -- never a traceback.  (The long
run is ``scripts/fuzz_loader.py --minutes 10``.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzkit import loader_fuzz
from fuzzkit.errors import FuzzkitError

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
SEEDS = loader_fuzz.seed_files([CORPUS])


def test_the_corpus_seeds_the_harness_and_loads_clean() -> None:
    assert len(SEEDS) >= 50
    targets = {loader_fuzz.load_for_run(seed).target for seed in SEEDS}
    assert len(targets) >= 7  # every built-in target has real files to mutate


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.data())
def test_mutated_case_files_are_accepted_or_refused_in_one_line(data: st.DataObject) -> None:
    mutant = loader_fuzz.mutate(SEEDS, lambda n: data.draw(st.integers(0, n - 1)))
    try:
        loader_fuzz.load_for_run(mutant)
    except FuzzkitError as exc:
        assert len(str(exc).splitlines()) == 1, str(exc)


def test_the_seeded_loop_reports_no_traceback_or_hang(tmp_path: Path) -> None:
    report = loader_fuzz.run(SEEDS, executions=3000, seed=7, hang_s=60.0, keep=tmp_path)
    assert report.executions == 3000
    assert report.tracebacks == [] and report.hangs == []
    assert report.accepted > 0 and report.refused > 0  # mutations reach both outcomes


@pytest.mark.parametrize("text", [b"", b"{", b"[]", b"null", b'{"format": 1}'])
def test_trivial_inputs(text: bytes) -> None:
    with pytest.raises(FuzzkitError):
        loader_fuzz.load_for_run(text)
