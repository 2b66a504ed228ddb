"""The one run pipeline loses nothing in any mode: a save error is exit 3 with the finding still
on disk, SIGINT to a multi-worker run is exit 130 with every finding saved, a worker killed while
shrinking leaves its finding (unshrunk) in the report, two runs started together get their own
report directories, and ``--workers 1`` shows the same progress as a campaign."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import toy_targets
from fuzzkit import registry
from fuzzkit.campaign.state import read_events, read_state
from fuzzkit.case import load
from fuzzkit.cli import main
from fuzzkit.target import Implementation

TESTS = Path(__file__).resolve().parent


def _slow_when_wrong(inputs: dict[str, Any]) -> dict[str, Any]:
    """toy-dot without its last term, and slow on every case that shows it: shrinking such a
    bug takes far longer than finding it, so a signal or a kill lands while it shrinks."""
    a, b = inputs["a"], inputs["b"]
    if len(a) >= 2 and np.any(a[-1] * b[-1] != 0):
        time.sleep(0.5)
        a, b = a[:-1], b[:-1]
    return {"dot": np.array([toy_targets.dot_kernel(a, b)], dtype=np.float32)}


def slow_shrink_target() -> Any:
    target = toy_targets.dot_target()
    target.name = "toy-slow-shrink"
    target.implementations = {"slow": Implementation("slow", _slow_when_wrong, backend="numpy")}
    target.mutants = ()
    target.properties = ()
    return target


registry.register_target("toy-slow-shrink", replace=True)(slow_shrink_target)

LAUNCHER = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import test_run_pipeline  # registers the toy targets (conftest does not run here)
if __name__ == "__main__":
    from fuzzkit.cli import main
    sys.exit(main(sys.argv[1:]))
"""


def _launch(tmp_path: Path, *argv: str, sigint_ignored: bool = False) -> subprocess.Popen[str]:
    """``fuzzkit run`` in a child; ``sigint_ignored``: started with SIGINT ignored, as a
    script's background job is (``cmd &`` in a non-interactive shell)."""
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    return subprocess.Popen(
        [sys.executable, str(launcher), "run", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        cwd=tmp_path,
        text=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored
        else None,
    )


def _wait_for_event(reports: Path, kind: str, timeout: float = 90.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for events in reports.glob("*/events.jsonl"):
            if any(e["type"] == kind for e in read_events(events.parent)):
                return events.parent
        time.sleep(0.1)
    raise AssertionError(f"no {kind!r} event within {timeout} s")


def _findings_on_disk(run_dir: Path) -> list[dict[str, Any]]:
    summary = json.loads((run_dir / "summary.json").read_text())
    found = [f for row in summary["results"] for f in row["findings"]]
    for f in found:
        case = load(Path(f["case"]))
        assert case.failure is not None and case.failure.signature == f["signature"]
    return found


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_finding_that_cannot_be_saved_is_exit_3_and_still_on_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: str
) -> None:
    """The corpus passed the writable check, but its findings folder of this target cannot be
    made (a file is in the way; root ignores permissions, not this): the run is an internal error,
    never "clean", and the finding survives as the unshrunk case stored before shrinking."""
    corpus = tmp_path / "corpus"
    (corpus / "toy-dot-buggy").mkdir(parents=True)
    (corpus / "toy-dot-buggy" / "findings").write_text("in the way")
    import test_campaign  # noqa: F401 - registers toy-dot-buggy here and in the workers

    code = main(["run", "toy-dot-buggy", "--budget", "6", "--workers", workers, "--progress",
                 "quiet", "--no-confirm", "--corpus", str(corpus), "--report-dir",
                 str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "internal error" in err and "finding(s) saved" in err
    [run_dir] = (tmp_path / "r").iterdir()
    assert read_state(run_dir)["status"] == "error"
    [finding] = _findings_on_disk(run_dir)
    assert finding["unshrunk"] and finding["signature"] == "mismatch:close:dot"
    assert (run_dir / "findings").is_dir() and list((run_dir / "findings").glob("*.json"))


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["default", "inherited-ignored"])
def test_sigint_to_a_two_worker_run_saves_every_finding(tmp_path: Path,
                                                         sigint_ignored: bool) -> None:
    reports = tmp_path / "reports"
    proc = _launch(tmp_path, "toy-slow-shrink", "--workers", "2", "--budget", "120",
                   "--progress", "quiet", "--no-confirm", "--report-dir", str(reports),
                   "--corpus", str(tmp_path / "corpus"), sigint_ignored=sigint_ignored)
    try:
        run_dir = _wait_for_event(reports, "found")
        time.sleep(0.5)  # inside Hypothesis's shrinking now (each failing call takes 0.5 s)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    state = read_state(run_dir)
    assert state["status"] == "interrupted" and state["elapsed"] < 60
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    found = _findings_on_disk(run_dir)
    assert [f["signature"] for f in found] == ["mismatch:close:dot"]
    pids = {e["pid"] for e in read_events(run_dir) if e["type"] == "worker_start"}
    time.sleep(0.5)
    assert not [p for p in pids if _alive(p)]


def test_a_worker_killed_while_shrinking_leaves_its_finding(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    proc = _launch(tmp_path, "toy-slow-shrink", "--workers", "2", "--budget", "12",
                   "--max-findings", "1", "--progress", "quiet", "--no-confirm",
                   "--report-dir", str(reports), "--corpus", str(tmp_path / "corpus"))
    try:
        run_dir = _wait_for_event(reports, "found")
        events = read_events(run_dir)
        finder = next(e["worker"] for e in events if e["type"] == "found")
        pid = next(e["pid"] for e in events if e["type"] == "worker_start"
                   and e["worker"] == finder)
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    found = _findings_on_disk(run_dir)
    assert [f["signature"] for f in found] == ["mismatch:close:dot"]
    events = read_events(run_dir)
    assert any(e["type"] == "worker_exit" and e.get("status") == "died" for e in events)


def test_two_runs_started_together_keep_their_own_reports(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    argv = ("toy-slow-shrink", "--budget", "3", "--seed", "7", "--progress", "quiet",
            "--no-confirm", "--max-findings", "1", "--report-dir", str(reports),
            "--corpus", str(tmp_path / "corpus"))
    procs = [_launch(tmp_path, *argv) for _ in range(2)]
    codes = [p.wait(timeout=120) for p in procs]
    assert codes == [1, 1], [p.stderr.read() for p in procs if p.stderr]
    runs = sorted(reports.iterdir())
    assert len(runs) == 2
    for run_dir in runs:
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["run_id"] == run_dir.name and summary["status"] == "done"
        assert len({e["pid"] for e in read_events(run_dir) if "pid" in e}) == 1


@pytest.mark.parametrize("workers", ["1", "2"])
def test_jsonl_progress_is_the_same_in_every_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: str
) -> None:
    import test_campaign  # noqa: F401 - toy-dot-buggy

    code = main(["run", "toy-dot-buggy", "--budget", "4", "--workers", workers, "--progress",
                 "jsonl", "--no-confirm", "--corpus", str(tmp_path / "c"), "--report-dir",
                 str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 1
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    kinds = [x["type"] for x in lines]
    assert "status" in kinds and "finding" in kinds and kinds[-1] == "done"
    status = [x for x in lines if x["type"] == "status"][-1]
    assert status["rows"] and {"cases", "cases_per_second", "findings"} <= set(status["rows"][0])


def test_the_example_database_is_written_and_reused(tmp_path: Path) -> None:
    """``--profile campaign`` keeps failing examples beside the corpus; the next run (another
    seed) replays them first, so it finds the bug at its first case."""
    import test_campaign  # noqa: F401

    common = ["run", "toy-dot-buggy", "--budget", "4", "--progress", "quiet", "--no-confirm",
              "--max-findings", "1", "--corpus", str(tmp_path / "c"), "--report-dir",
              str(tmp_path / "r")]
    assert main([*common, "--seed", "1"]) == 1
    database = tmp_path / "c" / ".hypothesis"
    assert database.is_dir() and any(p.is_file() for p in database.rglob("*"))
    assert main([*common, "--seed", "2"]) == 1
    runs = sorted((tmp_path / "r").iterdir())
    summary = json.loads((runs[-1] / "summary.json").read_text())
    [finding] = summary["results"][0]["findings"]
    assert finding["cases_to_first_failure"] == 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return True
