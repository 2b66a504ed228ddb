"""Runs keep going after a finding; accepted signatures are skipped; findings are confirmed in a
fresh process, and a state-dependent one comes with a case sequence that replays."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from fuzzkit import case as casefile
from fuzzkit import known as known_mod
from fuzzkit.cli import main
from fuzzkit.engines.hypothesis import fuzz
from fuzzkit.errors import UsageError
from fuzzkit.fresh import FreshConfirmer, FreshContext, Zygote
from fuzzkit.sequence import CaseSequence, load_any

TILE_BUG = "mismatch:close:sums"
ZERO_BUG = "mismatch:close:sums:nonfinite"


def _both_bugs(tiles):  # type: ignore[no-untyped-def]
    stack = contextlib.ExitStack()
    for name in ("second-tile-dropped", "zero-tile-nan"):
        stack.enter_context(tiles.mutant(name).applied())
    return stack


def test_one_run_reports_two_independent_bugs(tiles) -> None:
    with _both_bugs(tiles):
        result = fuzz(tiles, tiles.implementation("tiled"), budget=6, seed=0, profile="ci",
                      database_dir=None)
    signatures = [f.failure.signature for f in result.findings]
    assert sorted(signatures) == sorted([TILE_BUG, ZERO_BUG])
    assert result.finding is result.findings[0]
    assert set(result.found_at) == {TILE_BUG, ZERO_BUG}
    assert result.other_signatures  # both kept occurring after being found: counted, not chased
    # every finding was shrunk on its own bug: the tile bug needs > TILE columns, the zero bug
    # an all-zero tile
    for case in result.findings:
        x = case.inputs["x"]
        if case.failure.signature == TILE_BUG:
            assert x.shape[1] > 8 and x.shape[0] == 1
        else:
            assert (x == 0).all(axis=1).any()


def test_max_findings_stops_at_the_first(tiles) -> None:
    with _both_bugs(tiles):
        result = fuzz(tiles, tiles.implementation("tiled"), budget=30, seed=0, profile="ci",
                      database_dir=None, max_findings=1)
    assert len(result.findings) == 1 and result.seconds < 25


def test_known_signatures_are_counted_and_skipped(tiles) -> None:
    accepted = known_mod.parse({"format": "fuzzkit-known/1", "known": [
        {"signature": TILE_BUG, "reason": "tiles past the first are a documented limitation"}]})
    with _both_bugs(tiles):
        result = fuzz(tiles, tiles.implementation("tiled"), budget=4, seed=0, profile="ci",
                      database_dir=None, known=accepted)
    assert [f.failure.signature for f in result.findings] == [ZERO_BUG]
    assert result.known_hits[TILE_BUG] > 0


def test_known_file_is_validated(tmp_path: Path) -> None:
    path = tmp_path / "known.json"
    for text, needle in [
        ("[]", "format"),
        ('{"format": "fuzzkit-known/1", "known": [{"signature": "x"}]}', "reason"),
        ('{"format": "fuzzkit-known/1", "known": [{"signature": "x", "reason": "r", '
         '"extra": 1}]}', "an object with"),
        ('{"format": "fuzzkit-known/1", "known": [], "known": []}', "duplicate key"),
        ("{", "not a valid JSON"),
    ]:
        path.write_text(text)
        with pytest.raises(UsageError, match=needle):
            known_mod.load(path)
    with pytest.raises(UsageError, match="no such file"):
        known_mod.load(tmp_path / "missing.json")
    path.write_text(json.dumps({"format": "fuzzkit-known/1", "known": [
        {"signature": "crash:ValueError@*", "reason": "inputs our API refuses",
         "target": "quant"}]}))
    loaded = known_mod.load(path)
    assert loaded.match("quant", "numpy", "crash:ValueError@targets/quant/x.py:f")
    assert loaded.match("ann", "numpy", "crash:ValueError@x") is None


def _confirmer(mutant: str) -> FreshConfirmer:
    return FreshConfirmer(FreshContext("toy-tiles", "tiled", mutants=(mutant,),
                                       target_spec="reach_targets:target",
                                       preload=("reach_targets",)))


def test_state_dependent_bug_is_labelled_and_its_sequence_replays(tiles, tmp_path: Path,
                                                                   capsys) -> None:
    mutant = "cache-keyed-by-width"
    with tiles.mutant(mutant).applied():
        result = fuzz(tiles, tiles.implementation("tiled"), budget=4, seed=0, profile="ci",
                      database_dir=None, confirm=_confirmer(mutant), max_findings=1)
    [case] = result.findings
    failure = case.failure
    assert failure.kind == "state-dependent"
    assert failure.signature == f"state-dependent:{TILE_BUG}"
    sequence = result.sequences[case.case_id]
    assert isinstance(sequence, CaseSequence) and failure.details["sequence"] == sequence.case_id
    assert 2 <= len(sequence.steps) <= 4  # minimized: the polluting case(s), then the failing one
    assert sequence.steps[-1]["x"].shape == case.inputs["x"].shape

    # the files round-trip, and `fuzzkit replay` (a fresh process of its own) runs the sequence
    case_path = case.save(tmp_path / "findings")
    seq_path = sequence.save(tmp_path / "sequences")
    assert isinstance(load_any(seq_path), CaseSequence)
    with pytest.raises(casefile.CaseFileError, match="case sequence"):
        casefile.load(seq_path)
    assert main(["replay", str(case_path), "--mutant", mutant]) == 0
    assert "recorded as state-dependent" in capsys.readouterr().out
    with Zygote(FreshContext("toy-tiles", "tiled", mutants=(mutant,),
                             target_spec="reach_targets:target", preload=("reach_targets",)),
                sequence.steps) as zygote:
        failed = zygote.run(list(range(len(sequence.steps))))
        assert failed is not None and failed.signature == TILE_BUG
        assert zygote.run([len(sequence.steps) - 1]) is None


def test_replay_runs_a_sequence_in_order(tiles, tmp_path: Path, capsys) -> None:
    import numpy as np

    wide = {"x": np.ones((1, 3), np.float32), "scale": 2.0}
    stale = {"x": np.ones((1, 3), np.float32), "scale": 0.5}
    path = CaseSequence("toy-tiles", "tiled", [wide, stale]).save(tmp_path)
    # each process starts with an empty cache: the mutant's stale entry exists only in order
    code = main(["replay", str(path), "--mutant", "cache-keyed-by-width"])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("FAIL") and "sequence of 2 cases" in out
    assert main(["replay", str(path)]) == 0


def test_a_plain_bug_is_confirmed_as_reproducible(tiles) -> None:
    mutant = "second-tile-dropped"
    with tiles.mutant(mutant).applied():
        result = fuzz(tiles, tiles.implementation("tiled"), budget=3, seed=0, profile="ci",
                      database_dir=None, confirm=_confirmer(mutant), max_findings=1)
    [case] = result.findings
    assert case.failure.signature == TILE_BUG
    assert case.failure.details["fresh_process"] == "reproduced"
    assert not result.sequences


def test_cli_run_with_two_mutants_reports_both(tmp_path: Path, capsys) -> None:
    code = main(["run", "toy-tiles", "--mutant", "second-tile-dropped", "--mutant",
                 "zero-tile-nan", "--budget", "6", "--report-dir", str(tmp_path / "r"),
                 "--corpus", str(tmp_path / "c"), "--no-confirm"])
    out = capsys.readouterr().out
    assert code == 1
    assert TILE_BUG in out and ZERO_BUG in out
    [summary] = (tmp_path / "r").glob("*/summary.json")
    data = json.loads(summary.read_text())
    [row] = data["results"]
    assert sorted(f["signature"] for f in row["findings"]) == sorted([TILE_BUG, ZERO_BUG])
    assert data["findings"] == 2 and row["mutants"] == ["second-tile-dropped", "zero-tile-nan"]
    assert len(list((tmp_path / "c" / "toy-tiles" / "findings").glob("*.json"))) == 2


def test_cli_mutant_errors_are_one_line(capsys) -> None:
    assert main(["run", "toy-tiles", "toy-dot", "--mutant", "zero-tile-nan"]) == 2
    assert "name exactly one" in capsys.readouterr().err
    assert main(["run", "toy-tiles", "--mutant", "nope"]) == 2
    assert "no mutant 'nope'" in capsys.readouterr().err
    assert main(["mutants", "toy-tiles", "--only", "nope"]) == 2
    assert "no such mutant nope" in capsys.readouterr().err
