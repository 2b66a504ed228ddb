"""Surge recovery and front-of-history eviction, in the serving simulator.

Agent sessions (a shared system prompt, a growing private history resent every turn, think
times between turns) arrive at a sustainable rate, then at several times that rate for ten
minutes, then at the original rate again for an hour.  One instance with a KV pool that holds a
few dozen sessions' contexts.

1. **Admission** (tail-LRU eviction): no admission control, a static session cap and Basin
   (each session's peak context reserved from an AIMD budget; oracle predictor).  Expected
   shape: without admission the instance stays collapsed after the surge (too little KV for the
   live sessions → histories evicted → long recomputes → slower turns → more live sessions),
   with Basin goodput recovers.
2. **Eviction** (no admission control, so there is memory pressure): tail-LRU vs Penelope
   (front of history) vs Penelope with a CPU tier.  Expected: Penelope lowers mean TTFT.

TTFT of a session's first turn counts from the session's arrival, so time held by admission
control is not hidden.

Prints goodput (requests meeting the TTFT SLO per second) before, during and in the last ten
minutes of the hour after the surge, and mean / p99 TTFT, per policy; plots goodput over time.

Run: ``python benchmarks/surge.py [--seed 0] [--hour 3600] [--plot reports/surge.png]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from targets.scheduling import metrics, workload  # noqa: E402
from targets.scheduling.memory import OptimizedKVMemory  # noqa: E402
from targets.scheduling.policies import optimized as policies  # noqa: E402
from targets.scheduling.routers import optimized as routers  # noqa: E402
from targets.scheduling.sim import simulate  # noqa: E402
from targets.scheduling.workload import SECOND  # noqa: E402

BLOCK = 16
SLO = 2 * SECOND
MINUTE = 60 * SECOND


def sessions(seed: int, rate: float, surge: float, before: int, during: int,
             after: int) -> list[workload.Request]:
    """Session starts: Poisson at ``rate`` per second, ``surge`` times that during the surge."""
    rng = np.random.default_rng(seed)
    trie = workload.Trie()
    requests: list[workload.Request] = []
    phases = [(0, before, rate), (before, before + during, rate * surge),
              (before + during, before + during + after, rate)]
    first = 0
    for start, end, phase_rate in phases:
        for t in workload.poisson_times(rng, phase_rate, start, end):
            batch = workload.agent_sessions(
                rng, trie, sessions=1, turns=8, start=int(t), spread=1, block_size=BLOCK,
                system_tokens=1024, first_prompt=(300, 1500), turn_tokens=(100, 500),
                output=(50, 200), think=(2 * SECOND, 10 * SECOND), first_rid=len(requests),
                first_session=first, systems=4)
            requests += batch
            first += 1
    return workload.renumber(requests)


def run(requests: list[workload.Request], *, eviction: str, admission: Any,
        kv_blocks: int, cpu_blocks: int = 0) -> dict[str, Any]:
    config = {"block_size": BLOCK, "instances": 1, "token_budget": 4096, "max_running": 64,
              "policy": {"name": "fcfs"}, "router": {"name": "round_robin"},
              "memory": {"kv_blocks": kv_blocks, "eviction": eviction, "cpu_blocks": cpu_blocks,
                         "reload_per_block": 200_000},
              "admission": admission, "max_events": 50_000_000}
    started = time.perf_counter()
    out = simulate(config, requests, policies, routers, OptimizedKVMemory)
    return {"out": out, "seconds": time.perf_counter() - started}


def window_goodput(out: dict[str, Any], start: int, end: int) -> float:
    good = sum(1 for rec in out["requests"].values()
               if "first_token" in rec and start <= rec["first_token"] < end
               and rec["first_token"] - rec.get("arrived", rec["release"]) <= SLO)
    return good / ((end - start) / SECOND)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate", type=float, default=0.5, help="sessions/s before and after")
    parser.add_argument("--surge", type=float, default=4.0, help="rate multiplier in the surge")
    parser.add_argument("--hour", type=int, default=3600, help="seconds simulated after the surge")
    parser.add_argument("--kv-blocks", type=int, default=6000)
    parser.add_argument("--plot", type=Path, default=ROOT / "reports" / "surge.png")
    args = parser.parse_args(argv)

    before, during, after = 10 * MINUTE, 10 * MINUTE, args.hour * SECOND
    requests = sessions(args.seed, args.rate, args.surge, before, during, after)
    peak = max(-(-(r.prompt + r.output) // BLOCK) for r in requests)
    # sessions do not peak together: the budget may over-commit the pool, AIMD finds how far.
    # No free-KV watermark: idle histories fill the pool by design, so free KV is always low;
    # the congestion signal is a returning session that lost computed history (see sim.py).
    basin = {"name": "basin", "b_min": peak, "b_max": 4 * args.kv_blocks,
             "b_init": 2 * args.kv_blocks, "increase": peak // 4, "increase_every": 5 * SECOND,
             "decrease": 0.7, "cooldown": 2 * SECOND, "watermark": 0}
    cap = {"name": "static_cap", "max_sessions": args.kv_blocks // peak * 4}
    runs = {
        "none / tail-LRU": dict(eviction="tail_lru", admission=None),
        "static cap / tail-LRU": dict(eviction="tail_lru", admission=cap),
        "Basin / tail-LRU": dict(eviction="tail_lru", admission=basin),
        # eviction policies under the same pressure (no admission control)
        "none / Penelope": dict(eviction="penelope", admission=None),
        "none / Penelope + CPU": dict(eviction="penelope", admission=None,
                                      cpu_blocks=args.kv_blocks),
    }
    end = before + during + after
    windows = {"before": (0, before), "surge": (before, before + during),
               "last 10 min": (end - 10 * MINUTE, end)}
    rows, curves = [], {}
    for label, kw in runs.items():
        result = run(requests, kv_blocks=args.kv_blocks, **kw)
        out = result["out"]
        summary = metrics.summary(out, requests, slo_ttft=SLO, block_size=BLOCK)
        goodput = {name: window_goodput(out, *w) for name, w in windows.items()}
        rows.append([label] + [f"{goodput[n]:.2f}" for n in windows] +
                    [f"{summary['ttft_mean']:.2f}", f"{summary['ttft_p99']:.2f}",
                     f"{summary['finished']}/{summary['requests']}",
                     f"{result['seconds']:.0f}"])
        curves[label] = metrics.goodput_over_time(out, slo_ttft=SLO, window=MINUTE)
    title = (f"surge: {len(requests)} requests, {args.rate:g} sessions/s, ×{args.surge:g} for 10 "
             f"min, then {args.hour // 60} min; {args.kv_blocks} KV blocks, TTFT SLO "
             f"{SLO / SECOND:g} s")
    columns = ["policy", *(f"goodput {n}" for n in windows), "TTFT mean s", "p99 s", "finished",
               "sim s"]
    metrics.print_table(title, columns, rows)
    print(_plot(args.plot, curves, before, during))
    return 0


def _plot(path: Path, curves: dict[str, list[tuple[float, float]]], before: int,
          during: int) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is missing (pip install 'fuzzkit[plots]')"
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for label, points in curves.items():
        if points:
            ax.plot([p[0] / 60 for p in points], [p[1] for p in points], label=label)
    ax.axvspan(before / MINUTE, (before + during) / MINUTE, color="grey", alpha=0.2,
               label="surge")
    ax.set_xlabel("minutes")
    ax.set_ylabel(f"goodput (requests/s with TTFT ≤ {SLO / SECOND:g} s)")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return f"plot written to {path}"


if __name__ == "__main__":
    raise SystemExit(main())
