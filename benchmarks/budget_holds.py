#!/usr/bin/env python
"""Does ``fuzzkit run`` keep to its budget?  Runs the main job several times and prints the
measured wall-clock time of each against the budget.

    python benchmarks/budget_holds.py [--budget 60] [--runs 3] [--workers 1 2]

Each run is ``fuzzkit run --all --budget B [--workers W]`` in a fresh corpus and report
directory (seeds 1..runs).  The goal (issue "One run pipeline"): every run ends within
1.1 x budget plus one case time limit.  Prints one row per run and the worst ratio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--targets", nargs="*", default=None, help="default: --all")
    args = parser.parse_args()
    fuzzkit = str(Path(sys.executable).with_name("fuzzkit"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(f"{'workers':>7} {'seed':>4} {'budget s':>8} {'elapsed s':>9} {'ratio':>6} {'exit':>4}")
    worst = 0.0
    for workers in args.workers:
        for seed in range(1, args.runs + 1):
            with tempfile.TemporaryDirectory(prefix="fuzzkit-budget-") as work:
                command = [fuzzkit, "run", *(args.targets or ["--all"]), "--budget",
                           str(args.budget), "--seed", str(seed), "--progress", "quiet",
                           "--corpus", f"{work}/corpus", "--report-dir", f"{work}/reports"]
                if workers > 1:
                    command += ["--workers", str(workers)]
                start = time.monotonic()
                done = subprocess.run(command, env=env, capture_output=True, text=True)
                elapsed = time.monotonic() - start
            ratio = elapsed / args.budget
            worst = max(worst, ratio)
            print(f"{workers:>7} {seed:>4} {args.budget:>8.0f} {elapsed:>9.1f} {ratio:>6.2f} "
                  f"{done.returncode:>4}")
    print(f"worst ratio {worst:.2f} (goal: <= 1.10 plus one case time limit)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
