#!/usr/bin/env python
"""Fuzz fuzzkit's case-file loader for a while and report (see fuzzkit/loader_fuzz.py).

    python scripts/fuzz_loader.py --minutes 10 [--seed 0] [--corpus corpus] [--keep DIR]

Prints executions, accepted/refused counts, the slowest load, peak memory, and every traceback
or hang (with the input saved under --keep).  Exit 1 when any traceback, hang (> --hang-s) or
memory growth over --max-growth-mb was seen.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", type=Path, action="append", default=None)
    parser.add_argument("--keep", type=Path, default=Path("loader-fuzz-findings"))
    parser.add_argument("--hang-s", type=float, default=30.0)
    parser.add_argument("--max-growth-mb", type=float, default=1024.0)
    args = parser.parse_args()

    from fuzzkit import loader_fuzz

    roots = args.corpus or [Path(__file__).resolve().parent.parent / "corpus"]
    seeds = loader_fuzz.seed_files(roots)
    if not seeds:
        print(f"no case files under {', '.join(map(str, roots))}", file=sys.stderr)
        return 2
    for seed in seeds:  # imports (torch for graph cases) and registry warm-up, not measured
        loader_fuzz.load_for_run(seed)
    report = loader_fuzz.run(seeds, seconds=args.minutes * 60, seed=args.seed,
                             hang_s=args.hang_s, keep=args.keep)
    growth = report.rss_peak_mb - report.rss_start_mb
    print(json.dumps({**report.to_json(), "seed_files": len(seeds),
                      "executions_per_s": round(report.executions / report.seconds, 1),
                      "rss_growth_mb": round(growth, 1)}, indent=1))
    bad = report.tracebacks or report.hangs or growth > args.max_growth_mb
    print(f"{report.executions} executions in {report.seconds:.0f} s: "
          f"{len(report.tracebacks)} tracebacks, {len(report.hangs)} hangs, slowest "
          f"{report.slowest_s:.2f} s, peak RSS {report.rss_peak_mb:.0f} MiB "
          f"(+{growth:.0f}) -> {'FAIL' if bad else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
