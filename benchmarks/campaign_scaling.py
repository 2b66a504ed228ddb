"""Campaign scaling: cases per second with 1 worker, 2 local workers and Ray with 2 CPUs.

All three fuzz the same clean target (default ``quant``/``numpy``: cheap and CPU-bound, so it
never stops early on a finding) through the campaign coordinator, each for the same budget, in
fresh temporary run directories.  Two rates per configuration:

* *fuzzing rate*: the sum over workers of cases / seconds spent fuzzing (from each worker's
  last progress event) — what the workers deliver once running;
* *wall rate*: all cases / wall-clock seconds of the whole campaign, worker start-up included.

Printed as ratios to the 1-worker run.  Goal: >= 1.8x for 2 local workers (it needs 2 free
cores; on a busy 2-core machine expect less).

    python benchmarks/campaign_scaling.py [--target quant] [--impl numpy] [--seconds 10] [--no-ray]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from fuzzkit.campaign import CampaignOptions, run_campaign  # noqa: E402
from fuzzkit.campaign.state import read_events  # noqa: E402


def measure(target: str, impl: str, seconds: float, workers: int, backend: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="fuzzkit-scaling-") as tmp:
        start = time.monotonic()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = run_campaign(CampaignOptions(
                targets=[target], impl=impl, budget=seconds, workers=workers, backend=backend,
                num_cpus=workers if backend == "ray" else None, report_dir=Path(tmp) / "r",
                corpus=Path(tmp) / "c", progress="quiet", profile="ci"))
        wall = time.monotonic() - start
        last: dict[int, tuple[int, float]] = {}
        for event in read_events(result.run_dir):
            if event["type"] == "progress":
                last[event["worker"]] = (event["cases"], event["elapsed"])
    cases = sum(n for n, _ in last.values())
    rate = sum(n / el for n, el in last.values() if el > 0)
    return {"config": f"{backend} x{workers}", "workers": len(last), "cases": cases,
            "fuzzing_rate": rate, "wall_rate": cases / wall, "wall_s": wall,
            "findings": len(result.findings)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="quant")
    parser.add_argument("--impl", default="numpy")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    configs = [(1, "local"), (2, "local")]
    if not args.no_ray:
        try:
            import ray  # noqa: F401,PLC0415
            configs.append((2, "ray"))
        except ImportError:
            print("ray is not installed: skipping the Ray configuration")
    rows = [measure(args.target, args.impl, args.seconds, w, b) for w, b in configs]
    base = rows[0]
    for row in rows:
        row["fuzzing_ratio"] = row["fuzzing_rate"] / base["fuzzing_rate"]
        row["wall_ratio"] = row["wall_rate"] / base["wall_rate"]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.target}/{args.impl}, {args.seconds:g} s each, {os.cpu_count()} CPUs")
    print(f"{'config':<10} {'cases':>8} {'fuzz c/s':>10} {'ratio':>6} {'wall c/s':>10} "
          f"{'ratio':>6} {'wall s':>7}")
    for r in rows:
        print(f"{r['config']:<10} {r['cases']:>8} {r['fuzzing_rate']:>10.1f} "
              f"{r['fuzzing_ratio']:>5.2f}x {r['wall_rate']:>10.1f} {r['wall_ratio']:>5.2f}x "
              f"{r['wall_s']:>7.1f}")
    two = next(r for r in rows if r["config"] == "local x2")
    verdict = "meets" if two["fuzzing_ratio"] >= 1.8 else "misses"
    print(f"2 local workers: {two['fuzzing_ratio']:.2f}x ({verdict} the 1.8x goal)")


if __name__ == "__main__":
    main()
