"""Does steering by coverage pay?  Plain runs against ``--steer`` runs, same budget and seeds.

``fuzzkit run --coverage --steer`` hands every case's number of never-run arcs to
``hypothesis.target``, so Hypothesis's targeting phase mutates the cases that reached new code.
That costs a coverage-data flush per case.  This benchmark runs each (target, implementation) for
``--budget`` seconds per seed, once plain and once steered, each in a fresh process (coverage
must start before the target is imported), and prints the branch and line coverage reached and
the cases run: steering pays where it reaches more branches in the same time.

    python benchmarks/coverage_steering.py [--pair scheduling/optimized ...] [--budget 20]
                                           [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: pairs with enough branches that a short run does not reach them all
DEFAULT_PAIRS = ("compiler/fusing", "paged_kv/optimized", "ann/numpy", "scheduling/optimized")


def one_run(pair: str, budget: float, seed: int, steer: bool) -> dict[str, float]:
    """Coverage and cases of one ``fuzzkit run`` of ``pair``."""
    target, impl = pair.split("/")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "fuzzkit.cli", "run", target, "--impl", impl, "--coverage",
               "--budget", str(budget), "--seed", str(seed), "--progress", "quiet",
               "--no-confirm", "--report-dir", f"{tmp}/r", "--corpus", f"{tmp}/c"]
        if steer:
            cmd.append("--steer")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=budget * 4 + 120)
        found = list(Path(tmp, "r").glob("*/coverage.json"))
        summary = list(Path(tmp, "r").glob("*/summary.json"))
        if not found or not summary:
            raise SystemExit(f"{pair}: the run wrote no coverage.json: {' '.join(cmd)}")
        cov = json.loads(found[0].read_text())[pair]
        rows = json.loads(summary[0].read_text()).get("results", [])
        cases = sum(int(r.get("cases", 0)) for r in rows)
    return {"branches": cov["covered_branches"], "of": cov["branches"],
            "lines": cov["covered_lines"], "cases": cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", action="append", default=[],
                        help="target/implementation (repeatable)")
    parser.add_argument("--budget", type=float, default=20.0)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    pairs = args.pair or list(DEFAULT_PAIRS)
    print(f"{'pair':24} {'mode':6} {'branches (mean, min-max)':>26} {'lines':>8} {'cases':>7}")
    for pair in pairs:
        means = {}
        for steer in (False, True):
            runs = [one_run(pair, args.budget, s, steer) for s in range(args.seeds)]
            b = [r["branches"] for r in runs]
            means[steer] = statistics.mean(b)
            print(f"{pair:24} {'steer' if steer else 'plain':6} "
                  f"{statistics.mean(b):9.1f}/{runs[0]['of']:<4} ({min(b)}-{max(b)})"
                  f"{statistics.mean(r['lines'] for r in runs):>10.1f}"
                  f"{statistics.mean(r['cases'] for r in runs):>8.1f}")
        print(f"{pair:24} steered - plain: {means[True] - means[False]:+.1f} branches "
              f"in {args.budget:g} s ({args.seeds} seeds)")


if __name__ == "__main__":
    main()
