"""The papers' scheduling claims, reproduced in the simulator.

Two experiments, each from one seed:

1. **Prefill order under a traffic spike** (one instance, RAG requests sharing Zipf-popular long
   documents, a Poisson stream with a spike of several times the base rate).  Prints TTFT
   p50 / p90 / p99 per policy.  Expected shape (Fairway paper): Fairway's median far below FCFS
   with its p99 close to FCFS; hit-first orders (LPM, SPF) with a much larger p99.
2. **Routing** (several instances, agent sessions resending a growing history and RAG traffic).
   Prints prefix hit rate and TTFT per router.  Expected shape: prefix-aware consistent hashing
   with bounded loads far above round-robin ≈ random.

Run: ``python benchmarks/policies.py [--seed 0] [--plot reports/policies.png]``.  A plot needs
the ``plots`` extra (matplotlib); without it the tables are still printed.
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
from fuzzkit.targets.scheduling.policies import optimized as policies  # noqa: E402
from fuzzkit.targets.scheduling.routers import optimized as routers  # noqa: E402
from fuzzkit.targets.scheduling.sim import simulate  # noqa: E402
from fuzzkit.targets.scheduling.workload import SECOND  # noqa: E402

BLOCK = 16
SLO = 2 * SECOND


def spike_workload(seed: int, base_rate: float, spike_rate: float) -> list[workload.Request]:
    rng = np.random.default_rng(seed)
    requests = workload.spike(
        rng, workload.Trie(), base_rate=base_rate, spike_rate=spike_rate, duration=120 * SECOND,
        spike_start=40 * SECOND, spike_end=60 * SECOND, block_size=BLOCK, documents=200,
        doc_tokens=(500, 6000), query_tokens=(20, 400), output=(20, 120), zipf=1.1)
    return workload.renumber(requests)


def policy_experiment(seed: int, base_rate: float, spike_rate: float,
                      beta_s: float) -> dict[str, Any]:
    requests = spike_workload(seed, base_rate, spike_rate)
    beta = int(beta_s * SECOND)
    runs = {
        "fcfs": {"name": "fcfs"},
        "lpm": {"name": "lpm", "fallback_len": None},
        "spf": {"name": "spf"},
        f"fairway β={beta_s:g}s": {"name": "fairway", "beta": beta, "short_queue": None},
    }
    results = {}
    for label, policy in runs.items():
        config = {"block_size": BLOCK, "instances": 1, "token_budget": 4096, "max_running": 64,
                  "cache_blocks": 20_000, "policy": policy, "seed": seed}
        started = time.perf_counter()
        out = simulate(config, requests, policies, routers)
        results[label] = {**metrics.summary(out, requests, slo_ttft=SLO, block_size=BLOCK),
                          "seconds": time.perf_counter() - started, "ttfts": metrics.ttfts(out)}
    return {"requests": len(requests), "results": results}


def routing_workload(seed: int, instances: int) -> list[workload.Request]:
    rng = np.random.default_rng(seed)
    trie = workload.Trie()
    agents = workload.agent_sessions(
        rng, trie, sessions=60 * instances, turns=6, start=0, spread=60 * SECOND,
        block_size=BLOCK, system_tokens=1024, first_prompt=(200, 2000), turn_tokens=(50, 500),
        output=(20, 200), think=(SECOND // 2, 5 * SECOND), systems=4)
    times = workload.poisson_times(rng, 2.0 * instances, 0, 60 * SECOND)
    rag = workload.rag_requests(rng, trie, count=len(times), times=times, documents=100,
                                doc_tokens=(1200, 4000), query_tokens=(20, 200),
                                output=(20, 100), block_size=BLOCK,
                                first_rid=len(agents))
    return workload.renumber(agents + rag)


def routing_experiment(seed: int, instances: int, cache_blocks: int) -> dict[str, Any]:
    requests = routing_workload(seed, instances)
    results = {}
    for name, router in {"random": {"name": "random"}, "round_robin": {"name": "round_robin"},
                         "least_loaded": {"name": "least_loaded"},
                         "prefix": {"name": "prefix", "vnodes": 64, "epsilon": 0.25,
                                    "prefix_blocks": 72}}.items():
        config = {"block_size": BLOCK, "instances": instances, "token_budget": 4096,
                  "max_running": 64, "cache_blocks": cache_blocks, "policy": {"name": "fcfs"},
                  "router": router, "seed": seed}
        started = time.perf_counter()
        out = simulate(config, requests, policies, routers)
        results[name] = {**metrics.summary(out, requests, slo_ttft=SLO, block_size=BLOCK),
                         "seconds": time.perf_counter() - started}
    return {"requests": len(requests), "results": results}


def _plot(path: Path, policy: dict[str, Any], routing: dict[str, Any]) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is missing (pip install 'fuzzkit[plots]')"
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, r in policy["results"].items():
        values = np.sort(np.array(list(r["ttfts"].values()), dtype=float) / SECOND)
        left.plot(values, np.linspace(0, 1, len(values)), label=label)
    left.set_xscale("log")
    left.set_xlabel("TTFT (s)")
    left.set_ylabel("fraction of requests")
    left.set_title("TTFT CDF under a spike, one instance")
    left.legend()
    names = list(routing["results"])
    right.bar(names, [routing["results"][n]["hit_rate"] * 100 for n in names])
    right.set_ylabel("prefix hit rate (%)")
    right.set_title("hit rate per router")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return f"plot written to {path}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--base-rate", type=float, default=6.0, help="requests/s outside the spike")
    parser.add_argument("--spike-rate", type=float, default=30.0, help="requests/s in the spike")
    parser.add_argument("--beta", type=float, default=2.0, help="Fairway bypass budget (s)")
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--cache-blocks", type=int, default=6000)
    parser.add_argument("--plot", type=Path, default=ROOT / "reports" / "policies.png")
    args = parser.parse_args(argv)

    policy = policy_experiment(args.seed, args.base_rate, args.spike_rate, args.beta)
    metrics.print_table(
        f"prefill order under a spike ({policy['requests']} requests, one instance, "
        f"base {args.base_rate:g}/s, spike {args.spike_rate:g}/s for 20 s)",
        ["policy", "TTFT p50 s", "p90 s", "p99 s", "mean s", "hit rate", "sim s"],
        [[label, f"{r['ttft_p50']:.2f}", f"{r['ttft_p90']:.2f}", f"{r['ttft_p99']:.2f}",
          f"{r['ttft_mean']:.2f}", f"{r['hit_rate']:.1%}", f"{r['seconds']:.1f}"]
         for label, r in policy["results"].items()])
    routing = routing_experiment(args.seed, args.instances, args.cache_blocks)
    metrics.print_table(
        f"routing ({routing['requests']} requests, {args.instances} instances, "
        f"{args.cache_blocks} cache blocks each)",
        ["router", "hit rate", "TTFT p50 s", "p99 s", "goodput/s", "sim s"],
        [[name, f"{r['hit_rate']:.1%}", f"{r['ttft_p50']:.2f}", f"{r['ttft_p99']:.2f}",
          f"{r['goodput']:.2f}", f"{r['seconds']:.1f}"]
         for name, r in routing["results"].items()])
    print(_plot(args.plot, policy, routing))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
