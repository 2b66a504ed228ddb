"""A finding, once made, is never lost: unwritable output directories are refused before any
fuzzing (exit 2), Ctrl-C keeps every failure seen so far (exit 130, summary marked interrupted),
an unexpected error is exit 3 (never 0 or 1), and every run gets a report directory of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import toy_targets
from fuzzkit import registry
from fuzzkit.case import load
from fuzzkit.cli import main
from fuzzkit.report import new_run_dir
from fuzzkit.target import Implementation


def _blocked(tmp_path: Path) -> Path:
    """A directory that cannot be created even as root: its parent is a regular file."""
    (tmp_path / "file").write_text("x")
    return tmp_path / "file" / "sub"


@pytest.mark.parametrize("option", ["--corpus", "--report-dir"])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_unwritable_output_is_refused_before_fuzzing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, workers: str
) -> None:
    other = "--report-dir" if option == "--corpus" else "--corpus"
    code = main(["run", "toy-dot", "--budget", "30", "--workers", workers, "--progress",
                 "quiet", option, str(_blocked(tmp_path)), other, str(tmp_path / "ok")])
    captured = capsys.readouterr()
    assert code == 2, captured
    [line] = captured.err.strip().splitlines()
    assert "not writable" in line and option in line
    assert "fuzzing" not in captured.err  # refused before the first case


def test_two_runs_in_the_same_second_get_their_own_directories(tmp_path: Path) -> None:
    dirs = {new_run_dir(tmp_path, seed=0) for _ in range(5)}
    assert len(dirs) == 5 and all(d.is_dir() for d in dirs)


class _InterruptedWhileShrinking:
    """The mutant of toy-dot that drops the last term, whose 4th failing call is a Ctrl-C: the
    bug is found, then the user interrupts while Hypothesis shrinks it."""

    def __init__(self) -> None:
        self.failing_calls = 0

    def __call__(self, inputs: dict[str, Any]) -> dict[str, Any]:
        a, b = inputs["a"], inputs["b"]
        if len(a) >= 3 and np.any(a[-1] * b[-1] != 0):
            self.failing_calls += 1
            if self.failing_calls == 4:
                raise KeyboardInterrupt
            a, b = a[:-1], b[:-1]
        return {"dot": np.array([toy_targets.dot_kernel(a, b)], dtype=np.float32)}


@pytest.fixture
def interrupted_target() -> Any:
    def factory() -> Any:
        target = toy_targets.dot_target()
        target.name = "toy-ctrl-c"
        impl = Implementation("interrupted", _InterruptedWhileShrinking(), backend="numpy")
        target.implementations = {"interrupted": impl}
        target.mutants = ()
        target.properties = ()
        return target

    registry.register_target("toy-ctrl-c", replace=True)(factory)
    yield
    registry.unregister_target("toy-ctrl-c")


def test_ctrl_c_mid_shrink_keeps_the_finding_and_writes_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], interrupted_target: Any
) -> None:
    code = main(["run", "toy-ctrl-c", "--budget", "60", "--no-confirm", "--corpus",
                 str(tmp_path / "corpus"), "--report-dir", str(tmp_path / "reports")])
    captured = capsys.readouterr()
    assert code == 130, captured
    [finding] = (tmp_path / "corpus" / "toy-ctrl-c" / "findings").glob("*.json")
    case = load(finding)
    assert case.origin == "interrupted" and case.failure is not None
    assert case.failure.signature.startswith("mismatch")
    [run_dir] = (tmp_path / "reports").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["findings"] == 1
    assert json.loads((run_dir / "state.json").read_text())["status"] == "interrupted"


def test_an_unexpected_error_is_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails after the checks (the disk filled up, say) is an internal error: exit 3,
    which CI cannot mistake for "clean" or "findings"."""
    import fuzzkit.report

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fuzzkit.report, "write_report", broken)
    code = main(["run", "toy-dot", "--budget", "1", "--corpus", str(tmp_path / "c"),
                 "--report-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 3
    assert err.strip().splitlines()[-1].startswith("fuzzkit: internal error: OSError")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_max_cases_stops_a_clean_run_at_n_cases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: str
) -> None:
    """libFuzzer's -runs: a generous budget, a small case count, and the count decides."""
    code = main(["run", "toy-dot", "--budget", "120", "--max-cases", "25", "--workers", workers,
                 "--progress", "quiet", "--corpus", str(tmp_path / "c"), "--report-dir",
                 str(tmp_path / "r")])
    capsys.readouterr()
    assert code == 0
    [run_dir] = (tmp_path / "r").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    cases = {row["implementation"]: row["cases"] for row in summary["results"]}
    assert cases and all(0 < n <= 25 * int(workers) for n in cases.values()), cases
