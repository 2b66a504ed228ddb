#!/usr/bin/env python
"""Does ``fuzzkit run`` keep to its budget?  Runs the main job several times and prints the
measured wall-clock time of each against the budget.

    python benchmarks/budget_holds.py [--budget 60] [--runs 3] [--workers 1 2] [--resume]

Each run is ``fuzzkit run --all --budget B [--workers W]`` in a fresh corpus and report
directory (seeds 1..runs).  The goal (issue "One run pipeline"): every run ends within
1.1 x budget plus one case time limit.  Prints one row per run and the worst ratio.

``--resume`` measures resumed runs instead: each run is killed (SIGKILL, coordinator and
workers) at a third of its budget, then ``--resume``d; the row shows the time the resumed
session took against what was left of the budget, and the true elapsed time ``state.json``
recorded over both sessions.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FUZZKIT = str(Path(sys.executable).with_name("fuzzkit"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _run_command(args: argparse.Namespace, seed: int, workers: int, work: str) -> list[str]:
    """The main job in a fresh corpus and report directory under ``work``."""
    return [FUZZKIT, "run", *(args.targets or ["--all"]), "--budget", str(args.budget),
            "--seed", str(seed), "--progress", "quiet", "--corpus", f"{work}/corpus",
            "--report-dir", f"{work}/reports", "--workers", str(workers)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--targets", nargs="*", default=None, help="default: --all")
    parser.add_argument("--resume", action="store_true", help="kill at 1/3, then resume")
    args = parser.parse_args()
    if args.resume:
        return _resumed(args)
    print(f"{'workers':>7} {'seed':>4} {'budget s':>8} {'elapsed s':>9} {'ratio':>6} {'exit':>4}")
    worst = 0.0
    for workers in args.workers:
        for seed in range(1, args.runs + 1):
            with tempfile.TemporaryDirectory(prefix="fuzzkit-budget-") as work:
                start = time.monotonic()
                done = subprocess.run(_run_command(args, seed, workers, work), env=ENV,
                                      capture_output=True, text=True)
                elapsed = time.monotonic() - start
            ratio = elapsed / args.budget
            worst = max(worst, ratio)
            print(f"{workers:>7} {seed:>4} {args.budget:>8.0f} {elapsed:>9.1f} {ratio:>6.2f} "
                  f"{done.returncode:>4}")
    print(f"worst ratio {worst:.2f} (goal: <= 1.10 plus one case time limit)")
    return 0


def _resumed(args: argparse.Namespace) -> int:
    print(f"{'workers':>7} {'seed':>4} {'left s':>7} {'resumed s':>9} {'ratio':>6} "
          f"{'state elapsed':>13} {'exit':>4}")
    worst = 0.0
    for workers in args.workers:
        for seed in range(1, args.runs + 1):
            with tempfile.TemporaryDirectory(prefix="fuzzkit-budget-") as work:
                first = subprocess.Popen(_run_command(args, seed, workers, work), env=ENV,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True)
                time.sleep(args.budget / 3)
                os.killpg(first.pid, signal.SIGKILL)
                first.wait()
                [run_dir] = list(Path(work, "reports").iterdir())
                before = json.loads((run_dir / "state.json").read_text())
                left = args.budget - before["elapsed"]
                start = time.monotonic()
                done = subprocess.run([FUZZKIT, "run", "--resume", str(run_dir), "--progress",
                                       "quiet"], env=ENV, capture_output=True, text=True)
                took = time.monotonic() - start
                after = json.loads((run_dir / "state.json").read_text())
            ratio = took / left
            worst = max(worst, ratio)
            print(f"{workers:>7} {seed:>4} {left:>7.1f} {took:>9.1f} {ratio:>6.2f} "
                  f"{after['elapsed']:>13.1f} {done.returncode:>4}")
    print(f"worst ratio {worst:.2f} (goal: <= 1.10 plus one case time limit)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
