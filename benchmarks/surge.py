"""Surge recovery and front-of-history eviction, in the serving simulator.

Agent sessions (one of four shared system prompts, a growing private history resent every turn,
think times between turns) arrive at a sustainable rate, then at several times that rate for ten
minutes, then at the original rate again for an hour.  One instance of a slowish model (6,250
prefill tokens/s) with a KV pool that holds a few dozen sessions' contexts.

The load is bistable by construction, which is what makes the collapse *metastable*: while the
live sessions' histories fit in KV memory, a turn prefills only its few hundred new tokens and
the instance is ~20 % busy; once they do not fit, histories are evicted between turns, every
turn recomputes its whole history (~6x the work), the instance is over-committed at the
*original* rate, turns queue, sessions live longer, even more context is live -- and that loop
sustains itself after the surge has passed.  The same load without a surge stays healthy (run
with ``--surge 1``).

1. **Admission** (tail-LRU eviction): no admission control, a static session cap and Basin
   (each session's peak context reserved from an AIMD budget; oracle predictor).  Expected
   shape: without admission the instance stays collapsed after the surge, with Basin goodput
   recovers.
2. **Eviction** under Basin (which over-commits the pool on purpose, so histories are evicted):
   tail-LRU vs whole-session vs Penelope (front of history) vs Penelope with a CPU tier.
   Expected: Penelope lowers mean TTFT, more so with the CPU tier.

TTFT of a session's first turn counts from the session's arrival, so time held by admission
control is not hidden; "follow-up TTFT" is the mean over later turns only, which is where the
eviction policy shows (a returning turn recomputes what was evicted).

Prints goodput (requests meeting the TTFT SLO per second) before, during, in the first and in
the last ten minutes of the hour after the surge, and TTFT, per policy; plots goodput over time.

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

from fuzzkit.targets.scheduling import metrics, workload  # noqa: E402
from fuzzkit.targets.scheduling.memory import OptimizedKVMemory  # noqa: E402
from fuzzkit.targets.scheduling.policies import optimized as policies  # noqa: E402
from fuzzkit.targets.scheduling.routers import optimized as routers  # noqa: E402
from fuzzkit.targets.scheduling.sim import simulate  # noqa: E402
from fuzzkit.targets.scheduling.workload import SECOND  # noqa: E402

BLOCK = 16
SLO = 2 * SECOND
MINUTE = 60 * SECOND
#: A slowish model: 160 us per prefilled token (6,250 tokens/s), attention 4 ns per unit of
#: u(2h+u), 10 ms per step, 0.4 ms per decoding sequence; chunks of at most 1,024 tokens keep
#: decode steps flowing while long histories are recomputed.
SERVER = {"token_budget": 1024, "max_running": 64,
          "cost": {"k0": 10_000_000, "k1": 160_000, "k2": 4, "decode": 400_000}}
RELOAD_PER_BLOCK = 200_000  # CPU -> GPU copy of one block: 200 us, vs ~2.6 ms to recompute it


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
    config = {"block_size": BLOCK, "instances": 1, **SERVER,
              "policy": {"name": "fcfs"}, "router": {"name": "round_robin"},
              "memory": {"kv_blocks": kv_blocks, "eviction": eviction, "cpu_blocks": cpu_blocks,
                         "reload_per_block": RELOAD_PER_BLOCK},
              "admission": admission, "max_events": 50_000_000}
    started = time.perf_counter()
    out = simulate(config, requests, policies, routers, OptimizedKVMemory)
    return {"out": out, "seconds": time.perf_counter() - started}


def window_goodput(out: dict[str, Any], start: int, end: int) -> float:
    good = sum(1 for rec in out["requests"].values()
               if "first_token" in rec and start <= rec["first_token"] < end
               and rec["first_token"] - rec.get("arrived", rec["release"]) <= SLO)
    return good / ((end - start) / SECOND)


def follow_up_ttft(out: dict[str, Any], requests: list[workload.Request]) -> float:
    """Mean TTFT (s) of turns after a session's first: what the eviction policy changes."""
    times = metrics.ttfts(out)
    later = [times[r.rid] for r in requests if r.after is not None and r.rid in times]
    return float(np.mean(later)) / SECOND if later else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate", type=float, default=0.4, help="sessions/s before and after")
    parser.add_argument("--surge", type=float, default=4.0, help="rate multiplier in the surge")
    parser.add_argument("--hour", type=int, default=3600, help="seconds simulated after the surge")
    parser.add_argument("--kv-blocks", type=int, default=10_000)
    parser.add_argument("--plot", type=Path, default=ROOT / "reports" / "surge.png")
    args = parser.parse_args(argv)
    if args.hour < 20 * 60:
        parser.error("--hour must be at least 1200 (two ten-minute windows after the surge)")

    before, during, after = 10 * MINUTE, 10 * MINUTE, args.hour * SECOND
    requests = sessions(args.seed, args.rate, args.surge, before, during, after)
    peak = max(-(-(r.prompt + r.output) // BLOCK) for r in requests)
    # Sessions do not peak together, so the budget may over-commit the pool; AIMD finds how far.
    # No free-KV watermark: idle histories fill the pool by design, so free KV is always low;
    # the congestion signal is a returning session that lost computed history (see sim.py).
    # One decrease per 30 s at most: a decrease takes a few turns (~10 s each) to show.
    basin = {"name": "basin", "b_min": peak, "b_max": 4 * args.kv_blocks,
             "b_init": 2 * args.kv_blocks, "increase": peak // 2, "increase_every": 5 * SECOND,
             "decrease": 0.7, "cooldown": 30 * SECOND, "watermark": 0}
    # Static caps at 1x, 2x and 4x (pool / largest peak) sessions: the right one depends on the
    # workload, which is what an adaptive budget is for.
    def cap(factor: int) -> dict[str, Any]:
        return {"name": "static_cap", "max_sessions": factor * args.kv_blocks // peak}

    runs = {
        "none / tail-LRU": dict(eviction="tail_lru", admission=None),
        **{f"cap {cap(f)['max_sessions']} sessions / tail-LRU": dict(eviction="tail_lru",
                                                                     admission=cap(f))
           for f in (1, 2, 4)},
        "Basin / tail-LRU": dict(eviction="tail_lru", admission=basin),
        # eviction policies under the same admission control (Basin over-commits: evictions)
        "Basin / session": dict(eviction="session", admission=basin),
        "Basin / Penelope": dict(eviction="penelope", admission=basin),
        "Basin / Penelope + CPU": dict(eviction="penelope", admission=basin,
                                       cpu_blocks=args.kv_blocks),
    }
    end = before + during + after
    windows = {"before": (0, before), "surge": (before, before + during),
               "first 10 min after": (before + during, before + during + 10 * MINUTE),
               "last 10 min": (end - 10 * MINUTE, end)}
    rows: list[list[str]] = []
    curves: dict[str, list[tuple[float, float]]] = {}
    ttft_curves: dict[str, list[tuple[float, float]]] = {}
    for label, kw in runs.items():
        result = run(requests, kv_blocks=args.kv_blocks, **kw)
        out = result["out"]
        if out["violation"] is not None:
            print(f"{label}: the simulation stopped: {out['violation']}", file=sys.stderr)
            return 1
        summary = metrics.summary(out, requests, slo_ttft=SLO, block_size=BLOCK)
        goodput = {name: window_goodput(out, *w) for name, w in windows.items()}
        rows.append([label] + [f"{goodput[n]:.2f}" for n in windows] +
                    [f"{summary['ttft_mean']:.1f}", f"{follow_up_ttft(out, requests):.2f}",
                     f"{summary['ttft_p99']:.0f}", f"{summary['finished']}/{summary['requests']}",
                     f"{result['seconds']:.0f}"])
        curves[label] = metrics.goodput_over_time(out, slo_ttft=SLO, window=MINUTE)
        if label.startswith("Basin"):
            ttft_curves[label] = ttft_over_time(out, requests)
    title = (f"surge: {len(requests)} requests, {args.rate:g} sessions/s, ×{args.surge:g} for 10 "
             f"min, then {args.hour // 60} min; {args.kv_blocks} KV blocks, TTFT SLO "
             f"{SLO / SECOND:g} s; goodput in requests/s within the SLO")
    columns = ["admission / eviction", *(f"goodput {n}" for n in windows), "TTFT mean s",
               "follow-up TTFT mean s", "TTFT p99 s", "finished", "sim s"]
    metrics.print_table(title, columns, rows)
    print(_plot(args.plot, curves, ttft_curves, before, during, end))
    return 0


def ttft_over_time(out: dict[str, Any], requests: list[workload.Request]) -> list[tuple[float, float]]:
    """(minute, mean follow-up TTFT in seconds of the turns whose first token came then)."""
    times = metrics.ttfts(out)
    by_minute: dict[int, list[int]] = {}
    for r in requests:
        if r.after is not None and r.rid in times:
            minute = out["requests"][str(r.rid)]["first_token"] // MINUTE
            by_minute.setdefault(minute, []).append(times[r.rid])
    return [(m * 60.0, float(np.mean(v)) / SECOND) for m, v in sorted(by_minute.items())]


def _plot(path: Path, goodput: dict[str, list[tuple[float, float]]],
          ttft: dict[str, list[tuple[float, float]]], before: int, during: int, end: int) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is missing (pip install 'fuzzkit[plots]')"
    fig, axes = plt.subplots(2, 1, figsize=(12, 8), sharex=True)
    for ax, curves, label in ((axes[0], goodput, f"goodput (requests/s, TTFT ≤ {SLO / SECOND:g} s)"),
                              (axes[1], ttft, "follow-up turns: mean TTFT (s)")):
        for name, points in curves.items():
            if points:
                ax.plot([p[0] / 60 for p in points], [p[1] for p in points], label=name)
        ax.axvspan(before / MINUTE, (before + during) / MINUTE, color="grey", alpha=0.2,
                   label="surge")
        ax.set_ylabel(label)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    axes[1].set_yscale("log")
    axes[1].set_xlim(0, end / MINUTE)  # the backlog drains after the workload ends: not shown
    axes[1].set_xlabel("minutes")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return f"plot written to {path}"


if __name__ == "__main__":
    raise SystemExit(main())
