"""How the prefill policies' per-dispatch cost grows with the queue length: reference vs optimized.

For each policy and queue length n: fill the queue with n requests, then time a steady state in
which every round pops at an advancing ``now``, pushes one new request (so the queue stays at n)
and, every fourth round, reprices the newest request.  The reference scans the queue on every
pop (time ~ n); the optimized heaps / kinetic tournament should grow ~ log n.  Both run the same
operations and the rids they pop are compared, so the table also shows they agree.

    python benchmarks/policy_scaling.py [--sizes 100,1000,10000] [--rounds 20000] [--seed 0]

Printed: policy, n, µs per round (pop + push, + reprice every 4th) for each, and the speedup.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuzzkit.targets.scheduling.policies import optimized, reference  # noqa: E402
from fuzzkit.targets.scheduling.policies.base import Waiting  # noqa: E402

#: (label, registry name, params): lpm without its FCFS fallback, or past 128 waiting requests it
#: would only measure FCFS; fairway with a budget of a few dozen typical prefills.
POLICIES = [
    ("fcfs", "fcfs", {}),
    ("lpm", "lpm", {"fallback_len": None}),
    ("spf", "spf", {}),
    ("fairway", "fairway", {"beta": 20_000, "short_queue": None}),
]
REPRICE_EVERY = 4


def prefill_cost(rnd: random.Random) -> tuple[int, int]:
    """A heavy-tailed predicted cost in ticks (most prompts short, a few long) and a hit."""
    cost = min(int(100 * rnd.paretovariate(1.2)), 1_000_000)
    return cost, rnd.choice([0, 0, 16, 64, 256, 1024])


def workload(n: int, rounds: int, seed: int) -> tuple[list[Waiting], list[tuple[int, Waiting, tuple | None]]]:
    """The initial queue and the steady-state rounds ``(now, new request, reprice or None)``,
    generated up front so the timed loop does nothing but call the policy."""
    rnd = random.Random(seed)
    initial, arrival = [], 0
    for rid in range(n):
        arrival += rnd.randint(0, 200)
        initial.append(Waiting(rid, arrival, *prefill_cost(rnd)))
    now, steady = arrival, []
    for i in range(rounds):
        now += rnd.randint(0, 300)  # roughly one mean prefill per dispatch
        request = Waiting(n + i, now, *prefill_cost(rnd))
        reprice = (request.rid, *prefill_cost(rnd)) if i % REPRICE_EVERY == 0 else None
        steady.append((now, request, reprice))
    return initial, steady


def time_rounds(make: Callable[[], Any], initial: list[Waiting], steady: list) -> tuple[float, list[int]]:
    """Seconds per steady-state round, and the rids popped (to check both sides agree)."""
    policy = make()
    for request in initial:
        policy.push(request)
    popped: list[int] = []
    pop, push, reprice, record = policy.pop, policy.push, policy.reprice, popped.append
    started = time.perf_counter()
    for now, request, change in steady:
        record(pop(now))
        push(request)
        if change is not None:
            reprice(*change)
    return (time.perf_counter() - started) / len(steady), popped


def measure(name: str, params: dict, n: int, rounds: int, seed: int) -> tuple[float, float]:
    """µs per round of (reference, optimized) at queue length ``n``.  The reference runs fewer
    rounds at large n (its rounds cost ~n); the optimized run's prefix is checked against it."""
    ref_rounds = max(50, min(rounds, 1_000_000 // max(n, 1)))
    initial, steady = workload(n, rounds, seed)
    ref_s, ref_popped = time_rounds(lambda: reference.make_policy(name, **params), initial, steady[:ref_rounds])
    opt_s, opt_popped = time_rounds(lambda: optimized.make_policy(name, **params), initial, steady)
    if opt_popped[:ref_rounds] != ref_popped:
        raise SystemExit(f"{name} n={n}: reference and optimized popped different rids")
    return ref_s * 1e6, opt_s * 1e6


def print_table(rows: list[tuple[str, int, float, float]]) -> None:
    """A rich table when rich is installed, plain columns otherwise."""
    headers = ("policy", "n", "µs/round ref", "µs/round opt", "speedup")
    cells = [(p, str(n), f"{r:.1f}", f"{o:.1f}", f"{r / o:.1f}×") for p, n, r, o in rows]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print("  ".join(f"{h:>14}" for h in headers))
        for row in cells:
            print("  ".join(f"{c:>14}" for c in row))
        return
    table = Table(title=f"prefill policies, steady state (pop + push, reprice every {REPRICE_EVERY}th round)")
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i == 0 else "right")
    for row in cells:
        table.add_row(*row)
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="comma-separated queue lengths")
    parser.add_argument("--rounds", type=int, default=20000, help="steady-state rounds (optimized)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    rows = []
    for label, name, params in POLICIES:
        for n in sizes:
            ref_us, opt_us = measure(name, params, n, args.rounds, args.seed)
            rows.append((label, n, ref_us, opt_us))
    print_table(rows)


if __name__ == "__main__":
    main()
