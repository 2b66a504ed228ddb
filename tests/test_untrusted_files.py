"""A case, sequence or state file is data: it never chooses code that gets imported or run.

Each hostile file names outside code (``subprocess:Popen``, a module planted in the current
directory that leaves a marker file when imported); every command that reads it answers with one
line and exit 2, and the marker never appears."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fuzzkit.case import Case
from fuzzkit.cli import main
from fuzzkit.sequence import CaseSequence

PLANTED = '''
import pathlib
pathlib.Path({marker!r}).write_text("imported")


def run(inputs):
    pathlib.Path({marker!r}).write_text("called")
    return {{}}
'''


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module ``planted_evil`` in the current directory (and on sys.path, as the cwd is under
    ``python -m``); returns the marker file its import or call would write."""
    marker = tmp_path / "marker"
    (tmp_path / "planted_evil.py").write_text(PLANTED.format(marker=str(marker)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return marker


def _inputs() -> dict:
    return {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}


def _one_line_exit_2(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("spec", ["subprocess:Popen", "planted_evil:run", "os:system"])
@pytest.mark.parametrize("command", ["replay", "shrink"])
def test_a_case_file_naming_code_is_refused(spec: str, command: str, planted: Path,
                                            tmp_path: Path, capsys) -> None:
    path = Case("toy-dot", spec, _inputs()).save(tmp_path / "cases")
    err = _one_line_exit_2(capsys, [command, str(path)])
    assert "cannot choose code" in err and f"--impl {spec}" in err
    assert not planted.exists()


def test_a_sequence_naming_code_is_refused(planted: Path, tmp_path: Path, capsys) -> None:
    path = CaseSequence("toy-dot", "planted_evil:run", [_inputs(), _inputs()]).save(tmp_path)
    _one_line_exit_2(capsys, ["replay", str(path)])
    assert not planted.exists()


def test_bisect_refuses_before_importing_anything(planted: Path, tmp_path: Path, capsys) -> None:
    """A target without bisection: refused on that, before the named implementation is looked at."""
    path = Case("toy-dot", "planted_evil:run", _inputs()).save(tmp_path / "cases")
    err = _one_line_exit_2(capsys, ["bisect", str(path)])
    assert "has no bisection" in err
    assert not planted.exists()


def test_the_user_may_still_run_outside_code_by_naming_it(planted: Path, tmp_path: Path,
                                                          capsys) -> None:
    """--impl on the command line is the user's choice: then the same file replays (the planted
    module is a stand-in for a user's own implementation)."""
    path = Case("toy-dot", "planted_evil:run", _inputs()).save(tmp_path / "cases")
    main(["replay", str(path), "--impl", "planted_evil:run"])
    assert planted.read_text() == "called"


def test_a_tampered_state_file_cannot_make_workers_import_code(planted: Path, tmp_path: Path,
                                                               capsys) -> None:
    code = main(["run", "toy-dot", "--budget", "1", "--workers", "2", "--progress", "quiet",
                 "--report-dir", str(tmp_path / "r"), "--corpus", str(tmp_path / "c")])
    assert code in (0, 1)
    capsys.readouterr()
    [run_dir] = (tmp_path / "r").iterdir()
    state_path = run_dir / "state.json"
    for plan in ([["toy-dot", "planted_evil:run"]], [["toy-dot"]], "toy-dot", []):
        state = json.loads(state_path.read_text())
        state["plan"] = plan
        state["budget"] = 100.0
        state_path.write_text(json.dumps(state))
        _one_line_exit_2(capsys, ["run", "--resume", str(run_dir), "--progress", "quiet"])
    assert not planted.exists()


def test_corpus_regression_naming_code_fails_without_running_it(pytester: pytest.Pytester,
                                                                planted: Path) -> None:
    """A regression file in a collected corpus that names outside code fails its test with the
    reason; the code is not imported."""
    corpus = pytester.path / "corpus" / "toy-dot" / "regressions"
    corpus.mkdir(parents=True)
    Case("toy-dot", "planted_evil:run", _inputs()).save(corpus)
    pytester.makeconftest("import toy_targets\nfrom fuzzkit import registry\n"
                          "registry.register_target('toy-dot', replace=True)"
                          "(toy_targets.dot_target)\n")
    result = pytester.runpytest_inprocess("-p", "no:randomly", str(pytester.path / "corpus"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*cannot choose code*"])
    assert not planted.exists()


def test_a_hand_edited_state_file_is_one_line_not_a_traceback(tmp_path: Path, capsys) -> None:
    """Every field a resumed campaign reads is checked for what fuzzkit writes there; the state
    file is read like a case file (bounded, strict JSON, regular file)."""
    import os

    code = main(["run", "toy-dot", "--budget", "1", "--workers", "2", "--progress", "quiet",
                 "--report-dir", str(tmp_path / "r"), "--corpus", str(tmp_path / "c")])
    assert code in (0, 1)
    capsys.readouterr()
    [run_dir] = (tmp_path / "r").iterdir()
    state_path = run_dir / "state.json"
    original = json.loads(state_path.read_text())
    for key, value in (("budget", "x"), ("resumes", "many"), ("isolate", "yes"),
                       ("next_worker", -5), ("engine", "os:system"), ("budget", 1e300),
                       ("memory_mb", True)):
        state = dict(original, status="running", elapsed=0.0, budget=100.0)
        state[key] = value
        state_path.write_text(json.dumps(state))
        err = _one_line_exit_2(capsys, ["run", "--resume", str(run_dir), "--progress", "quiet"])
        assert repr(key) in err
    state_path.write_text('{"budget": 1, "budget": 2}')
    assert "duplicate key" in _one_line_exit_2(capsys, ["run", "--resume", str(run_dir)])
    state_path.write_text("[" * 5000 + "]" * 5000)
    assert "nested" in _one_line_exit_2(capsys, ["report", str(run_dir)])
    state_path.unlink()
    os.mkfifo(state_path)
    _one_line_exit_2(capsys, ["run", "--resume", str(run_dir)])
    _one_line_exit_2(capsys, ["report", str(run_dir)])
