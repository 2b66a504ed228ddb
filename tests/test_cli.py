"""The command line: exit codes, one-line errors, and the run -> replay -> shrink round trip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fuzzkit import case as casefile
from fuzzkit.case import Case
from fuzzkit.cli import main


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json_names_implementations_and_mutants(capsys) -> None:
    code, out, _ = _run(capsys, "list", "--json")
    assert code == 0
    listed = {t["name"]: t for t in json.loads(out)}
    assert {"toy-dot", "toy-alloc"} <= set(listed)
    assert [m["name"] for m in listed["toy-dot"]["mutants"]] == ["drops-last-term"]
    assert listed["toy-alloc"]["implementations"][0]["name"] == "heap"


@pytest.mark.parametrize("argv, needle", [
    (["run"], "at least one target"),
    (["run", "no-such-target", "--budget", "1"], "unknown target 'no-such-target'"),
    (["run", "toy-dot", "--budget", "-3"], "must be greater than 0"),
    (["run", "toy-dot", "--all"], "not both"),
    (["run", "toy-dot", "--impl", "nope"], "has no implementation 'nope'"),
    (["run", "toy-dot", "--impl", "no.such.module:f"], "cannot import 'no.such.module'"),
    (["run", "toy-dot", "--impl", "toy_targets:missing"], "has no attribute 'missing'"),
    (["frobnicate"], "invalid choice"),
    (["replay", "/no/such/file.json"], "no such file"),
    (["mutants", "ghost"], "unknown target 'ghost'"),
])
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, needle) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("fuzzkit: error:") and needle in err, err


def test_run_clean_writes_summary(capsys, tmp_path: Path) -> None:
    code, out, err = _run(capsys, "run", "toy-dot", "--budget", "2", "--seed", "4",
                          "--report-dir", str(tmp_path / "reports"),
                          "--corpus", str(tmp_path / "corpus"))
    assert code == 0, err
    [summary_path] = list((tmp_path / "reports").glob("*/summary.json"))
    summary = json.loads(summary_path.read_text())
    assert summary["findings"] == 0 and summary["cases"] > 10 and summary["cases_per_second"] > 0
    assert summary["results"][0]["target"] == "toy-dot"
    assert (summary_path.parent / "stats.jsonl").exists()
    assert "clean" in out


def test_outside_implementation_finding_replays_and_shrinks(capsys, tmp_path: Path) -> None:
    """--impl module:attr plugs in an outside implementation; its finding replays and shrinks."""
    code, out, err = _run(capsys, "run", "toy-dot", "--impl", "toy_targets:_outside_buggy",
                          "--budget", "20", "--max-findings", "1",
                          "--report-dir", str(tmp_path / "r"),
                          "--corpus", str(tmp_path / "corpus"))
    assert code == 1, err
    [finding] = list((tmp_path / "corpus" / "toy-dot" / "findings").glob("*.json"))
    case = casefile.load(finding)
    assert case.implementation == "toy_targets:_outside_buggy"
    assert case.failure.signature == "mismatch:close:dot"
    assert list((tmp_path / "r").glob("*/findings/*.json"))

    # the file names outside code: it runs only when the user names it again
    code, _, err = _run(capsys, "replay", str(finding))
    assert code == 2 and "--impl toy_targets:_outside_buggy" in err
    code, out, _ = _run(capsys, "replay", str(finding), "--impl", "toy_targets:_outside_buggy")
    assert code == 1 and out.startswith("FAIL") and "mismatch:close:dot" in out

    # a big hand-made case shrinks with ddmin down to what Hypothesis found
    rng = np.random.default_rng(0)
    big = Case("toy-dot", "toy_targets:_outside_buggy",
               {"a": rng.standard_normal(33).astype(np.float32),
                "b": rng.standard_normal(33).astype(np.float32)})
    path = big.save(tmp_path / "big")
    code, out, _ = _run(capsys, "shrink", str(path), "--output", str(tmp_path / "small"),
                        "--impl", "toy_targets:_outside_buggy")
    assert code == 0 and "a: 33 -> 5" in out
    [small] = list((tmp_path / "small").glob("*.json"))
    assert casefile.load(small).inputs["a"].shape == (5,)
    assert path.exists()  # the original is kept


def test_replay_passing_case_exits_0(capsys, tmp_path: Path) -> None:
    path = Case("toy-dot", "numpy", {"a": np.ones(3, np.float32),
                                     "b": np.ones(3, np.float32)}).save(tmp_path)
    code, out, _ = _run(capsys, "replay", str(tmp_path))
    assert code == 0 and out.startswith("PASS") and str(path) in out


def test_shrink_of_passing_case_is_a_usage_error(capsys, tmp_path: Path) -> None:
    path = Case("toy-dot", "numpy", {"a": np.ones(3, np.float32),
                                     "b": np.ones(3, np.float32)}).save(tmp_path)
    code, _, err = _run(capsys, "shrink", str(path))
    assert code == 2 and "nothing to shrink" in err


def test_mutants_json(capsys) -> None:
    code, out, _ = _run(capsys, "mutants", "toy-dot", "toy-alloc", "--budget", "20", "--json")
    assert code == 0
    rows = json.loads(out)
    assert {(r["target"], r["mutant"]) for r in rows} == {("toy-dot", "drops-last-term"),
                                                          ("toy-alloc", "double-free")}
    for row in rows:
        assert row["detected"] is True and row["seconds"] < 20 and row["signature"]
        assert {"target", "mutant", "detected", "seconds"} <= set(row)


def test_console_script_is_installed() -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent))
    proc = subprocess.run([sys.executable, "-m", "fuzzkit.cli", "--version"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("fuzzkit ")
