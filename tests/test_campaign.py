"""Campaigns: parallel workers sharing one run directory, dedup, hung-worker replacement, Ray,
and SIGKILL safety with --resume."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import toy_targets
from fuzzkit import registry
from fuzzkit.campaign import CampaignOptions, run_campaign
from fuzzkit.campaign.state import read_events, read_state
from fuzzkit.case import load
from fuzzkit.cli import main
from fuzzkit.target import Implementation

TESTS = Path(__file__).resolve().parent


# ------------------------------------------------------------ targets (module level: picklable)


def _sleep_forever(inputs):
    while True:  # a hang no case timeout interrupts here (the run passes a huge one)
        time.sleep(0.05)


def hang_target():
    target = toy_targets.dot_target()
    target.name = "toy-hang"
    target.implementations = {"sleepy": Implementation("sleepy", _sleep_forever)}
    target.mutants = []  # dot_target's mutants patch its "numpy" implementation, absent here
    return target


for _factory in (toy_targets.buggy_dot_target, toy_targets.buggy_alloc_target, hang_target):
    registry.register_target(_factory().name, replace=True)(_factory)

LAUNCHER = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import test_campaign  # registers the toy targets (conftest does not run here)
from fuzzkit import registry
import toy_targets
registry.register_target("toy-dot", replace=True)(toy_targets.dot_target)
registry.register_target("toy-alloc", replace=True)(toy_targets.alloc_target)
if __name__ == "__main__":
    from fuzzkit.cli import main
    sys.exit(main(sys.argv[1:]))
"""


def _findings(run_dir: Path) -> list[dict]:
    return [e for e in read_events(run_dir) if e["type"] == "finding"]


# ------------------------------------------------------------------------------------------


def test_two_local_workers_find_and_dedup(capsys, tmp_path: Path) -> None:
    code = main(["run", "toy-dot-buggy", "--workers", "2", "--budget", "4", "--seed", "3",
                 "--report-dir", str(tmp_path / "reports"), "--corpus", str(tmp_path / "corpus"),
                 "--progress", "jsonl"])
    out, err = capsys.readouterr()
    assert code == 1, err
    [run_dir] = list((tmp_path / "reports").iterdir())
    events = read_events(run_dir)
    assert {e["worker"] for e in events if e["type"] == "worker_start"} == {0, 1}
    seeds = sorted(e["seed"] for e in events if e["type"] == "worker_start")
    assert seeds == [3000, 3001]
    found = _findings(run_dir)
    # both workers chase the same bug; exactly one finding is recorded, the other is a duplicate
    assert len(found) == 1 and found[0]["signature"] == "mismatch:close:dot"
    assert len([e for e in events if e["type"] == "duplicate"]) <= 1
    case = load(Path(found[0]["case"]))
    assert case.failure is not None and case.failure.signature == "mismatch:close:dot"
    state = read_state(run_dir)
    assert state["status"] == "done" and state["workers"] == 2 and state["backend"] == "local"
    assert state["plan"] == [["toy-dot-buggy", "numpy"]]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["findings"] == 1 and summary["cases"] > 0
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert any(x["type"] == "finding" for x in lines) and lines[-1]["type"] == "done"
    assert (Path(state["corpus"]) / "toy-dot-buggy" / "findings").is_dir()


def test_hung_worker_is_replaced_and_the_campaign_ends(tmp_path: Path) -> None:
    start = time.monotonic()
    result = run_campaign(CampaignOptions(
        targets=["toy-hang", "toy-alloc"], budget=7, workers=2, report_dir=tmp_path / "r",
        corpus=tmp_path / "c", case_timeout=1000, hang_timeout=2.0, progress="quiet"))
    took = time.monotonic() - start
    assert took < 7 + 2 * 2 + 30, took
    events = read_events(result.run_dir)
    hung = [e for e in events if e["type"] == "worker_hung"]
    replaced = [e for e in events if e["type"] == "worker_replaced"]
    assert hung and replaced and replaced[0]["replaces"] == hung[0]["worker"]
    # the other worker kept fuzzing toy-alloc the whole time
    alloc = [e for e in events if e["type"] == "progress" and e["target"] == "toy-alloc"]
    assert alloc and max(e["cases"] for e in alloc) > 20
    assert read_state(result.run_dir)["status"] == "done"


def test_ray_local_instance(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    result = run_campaign(CampaignOptions(
        # a generous budget that the first finding ends: Ray's start counts against the budget
        targets=["toy-dot-buggy"], budget=60, max_findings=1, workers=2, backend="ray", num_cpus=2,
        report_dir=tmp_path / "r", corpus=tmp_path / "c", progress="quiet"))
    found = _findings(result.run_dir)
    assert len(found) == 1 and Path(found[0]["case"]).is_file()
    assert read_state(result.run_dir)["backend"] == "ray"
    assert len({e["worker"] for e in read_events(result.run_dir)
                if e["type"] == "worker_start"}) == 2


def test_sigkill_at_random_moments_then_resume(tmp_path: Path) -> None:
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    reports, corpus = tmp_path / "reports", tmp_path / "corpus"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    base = [sys.executable, str(launcher), "run"]
    first = ["toy-dot-buggy", "toy-alloc-buggy", "toy-alloc", "--workers", "2", "--budget", "16",
             "--report-dir", str(reports), "--corpus", str(corpus), "--progress", "quiet",
             "--case-timeout", "20"]
    rng = random.Random(11)
    run_dir = None
    printed: set[str] = set()
    for kill in range(20):
        argv = base + (first if run_dir is None else ["--resume", str(run_dir)])
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, cwd=tmp_path, text=True)
        if run_dir is None:
            deadline = time.monotonic() + 60
            while not list(reports.glob("*/state.json")) and time.monotonic() < deadline:
                time.sleep(0.05)
            [state_file] = list(reports.glob("*/state.json"))
            run_dir = state_file.parent
        time.sleep(rng.uniform(0.3, 2.0))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        printed |= {line.split()[-1] for line in out.splitlines()
                    if line.startswith("finding: ")}
    # workers die with their coordinator
    time.sleep(1.0)
    pids = {e["pid"] for e in read_events(run_dir) if e["type"] == "worker_start"}
    alive = [p for p in pids if _alive(p)]
    assert not alive, alive
    state = read_state(run_dir)
    assert state["resumes"] >= 1 and state["status"] == "running"
    found = _findings(run_dir)
    logged = {e["case"] for e in found}
    assert printed <= logged, printed - logged
    for path in logged:
        assert Path(path).is_file(), path
        load(Path(path))  # a complete, valid case file
    # no duplicates across the restarts
    keys = [(e["target"], e["impl"], e["signature"]) for e in found]
    assert len(keys) == len(set(keys))
    # fuzzkit replay loads (and reproduces) every finding
    if logged:
        replay = subprocess.run(base[:2] + ["replay", *sorted(logged)], capture_output=True,
                                text=True, env=env, cwd=tmp_path, timeout=60)
        assert replay.returncode == 1, replay.stderr
        assert replay.stdout.count("FAIL") == len(logged)
    seeds = [e["seed"] for e in read_events(run_dir) if e["type"] == "worker_start"]
    assert len(seeds) == len(set(seeds))  # every restart fuzzes with fresh seeds
    # a last resume runs out the remaining budget and keeps every earlier finding
    done = subprocess.run(base + ["--resume", str(run_dir)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=90)
    state = read_state(run_dir)
    # the true elapsed time over every session: the budget, plus at most one case time limit
    assert state["status"] == "done" and 15 <= state["elapsed"] <= 16 + 20 + 2, done.stderr
    final = _findings(run_dir)
    assert {e["case"] for e in final} >= logged
    assert done.returncode == (1 if final else 0), done.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["findings"] == len({(e["target"], e["impl"]) for e in final})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0
    except OSError:
        return True


def test_isolated_campaign_turns_a_segfault_into_a_finding(tmp_path: Path) -> None:
    pytest.importorskip("fuzzkit.isolation")
    import crash_targets  # noqa: F401 - registers crash-segv (workers get it by pickle/preload)

    result = run_campaign(CampaignOptions(
        targets=["crash-segv"], impl="ctypes", budget=6, workers=2, isolate=True,
        memory_mb=2048, case_timeout=5, report_dir=tmp_path / "r", corpus=tmp_path / "c",
        progress="quiet"))
    events = read_events(result.run_dir)
    found = _findings(result.run_dir)
    assert len(found) == 1 and found[0]["kind"] == "crash", found
    assert "SIGSEGV" in found[0]["signature"] and Path(found[0]["case"]).is_file()
    exits = [e for e in events if e["type"] == "worker_exit"]
    assert exits and all(e["status"] == "ok" for e in exits), exits  # no worker went down
    assert read_state(result.run_dir)["isolate"] is True


@pytest.mark.parametrize("argv, needle", [
    (["run", "--resume", "/no/such/run"], "not a run directory"),
    (["run", "toy-dot", "--memory-mb", "100"], "--memory-mb needs --isolate"),
    (["run", "toy-dot", "--workers", "0"], "must be at least 1"),
    (["run", "toy-dot", "--backend", "slurm"], "invalid choice"),
])
def test_campaign_usage_errors_are_one_line(capsys, argv, needle) -> None:
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and needle in err, err


def test_sigterm_interrupts_cleanly(tmp_path: Path) -> None:
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    reports = tmp_path / "reports"
    proc = subprocess.Popen([sys.executable, str(launcher), "run", "toy-alloc", "--workers", "2",
                             "--budget", "60", "--report-dir", str(reports), "--corpus",
                             str(tmp_path / "corpus"), "--progress", "jsonl"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = list(reports.glob("*/events.jsonl"))
        if runs and sum(e["type"] == "progress" for e in read_events(runs[0].parent)) >= 2:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    [run_dir] = [p.parent for p in reports.glob("*/state.json")]
    state = read_state(run_dir)
    assert state["status"] == "interrupted" and 0 < state["elapsed"] < 60
    assert (run_dir / "summary.json").is_file()
    status = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert status and all(s["type"] in ("status", "finding", "done") for s in status)
    time.sleep(0.5)
    pids = {e["pid"] for e in read_events(run_dir) if e["type"] == "worker_start"}
    assert not [p for p in pids if _alive(p)]
