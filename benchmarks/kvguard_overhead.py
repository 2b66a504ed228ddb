"""KVGuard's cost on the manager: time per step of the optimized manager, guard off vs on.

The same fixed set of programs (drawn once from the paged_kv strategy with a seed) is driven
through :class:`~fuzzkit.targets.paged_kv.optimized.OptimizedManager` three ways, interleaved round by
round so machine noise hits all three alike:

* ``off``     — ``NULL_GUARD``: the events are empty calls (what production pays when off);
* ``events``  — a live :class:`~fuzzkit.oracles.kvguard.KVGuard` receiving every event (class-1 checks
  that run per event: double allocation, free of a block not held, hits pinned first);
* ``full``    — events plus the per-step checks (manager vs shadow, block tables).

Printed: microseconds per step and the ratios to ``off``.  The kernels' guarded-vs-plain time
is measured by ``benchmarks/kernel_paged_kv.py`` (run by ``scripts/gpu_check.sh``): on a GPU
that is the figure to hold against KVGuard's paper (+3.0 % / +7.4 % time per output token);
under the Triton interpreter kernel times measure the interpreter, not the GPU.

    python benchmarks/kvguard_overhead.py [--programs 300] [--rounds 5] [--seed 0]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from fuzzkit.oracles.kvguard import NULL_GUARD, KVGuard  # noqa: E402
from fuzzkit.targets.paged_kv.optimized import OptimizedManager  # noqa: E402
from fuzzkit.targets.paged_kv.protocol import Config  # noqa: E402
from fuzzkit.targets.paged_kv.strategies import inputs  # noqa: E402

#: Manager calls of a program op (the driver's KV model is not part of what is measured).
CALLS = {
    "add": lambda m, s: m.add_request(s["rid"], s["tokens"], s.get("adapter"), s.get("salt")),
    "allocate": lambda m, s: m.allocate(s["rid"], s["n"]),
    "write": lambda m, s: m.commit(s["rid"]),
    "forward": lambda m, s: [m.commit(r) for r in list(m.requests)],
    "publish": lambda m, s: m.publish(s["rid"]),
    "append": lambda m, s: m.append(s["rid"], s["tokens"]),
    "fork": lambda m, s: m.fork(s["src"], s["dst"]),
    "preempt": lambda m, s: m.preempt(s["rid"]),
    "trim": lambda m, s: m.trim(s["rid"]),
    "finish": lambda m, s: m.finish(s["rid"]),
    "reset": lambda m, s: m.reset_prefix_cache(),
}


def draw_programs(count: int, run_seed: int) -> list[dict[str, Any]]:
    drawn: list[dict[str, Any]] = []

    @seed(run_seed)
    @settings(max_examples=count, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(inputs())
    def collect(case: dict[str, Any]) -> None:
        drawn.append(case)

    collect()
    return drawn


def run(programs: list[dict[str, Any]], mode: str) -> tuple[float, int]:
    """Seconds spent in manager calls (and guard checks) over all programs, and step count."""
    spent, steps = 0.0, 0
    for case in programs:
        config = Config.from_json(case["config"])
        guard = NULL_GUARD if mode == "off" else KVGuard(
            config.num_blocks, config.block_size, mode="count",
            sliding_window=config.sliding_window)
        manager = OptimizedManager(config, guard=guard)
        started = time.perf_counter()
        for step in case["program"]:
            CALLS[step["op"]](manager, step)
            if mode == "full":
                state = manager.inspect()
                guard.check_manager(state)
                for rid, table in state["tables"].items():
                    guard.check_table(rid, table, state["tokens_in_table"][rid])
        spent += time.perf_counter() - started
        steps += len(case["program"])
        if mode != "off" and guard.violations:
            raise AssertionError(f"clean manager tripped the guard: {guard.violations[0]}")
    return spent, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kernels", choices=("auto", "on", "off"), default="auto",
                        help="also time guarded vs plain kernels (auto: when CUDA is present)")
    args = parser.parse_args()
    programs = draw_programs(args.programs, args.seed)
    modes = ("off", "events", "full")
    per_step: dict[str, list[float]] = {m: [] for m in modes}
    run(programs, "full")  # warm-up, discarded
    for _ in range(args.rounds):
        for mode in modes:
            seconds, steps = run(programs, mode)
            per_step[mode].append(seconds / steps * 1e6)
    base = statistics.median(per_step["off"])
    print(f"{len(programs)} programs, {steps} manager steps per round, {args.rounds} rounds "
          "(median)")
    for mode in modes:
        value = statistics.median(per_step[mode])
        print(f"  guard {mode:6s}: {value:8.2f} us/step   ratio to off {value / base:6.3f}")
    kernel_part(args.kernels)


def kernel_part(choice: str) -> None:
    """Guarded vs plain kernel time: the GPU part (benchmarks/kernel_paged_kv.py)."""
    import sys

    import torch

    if choice == "off" or (choice == "auto" and not torch.cuda.is_available()):
        print("kernels: no GPU here; guarded vs plain kernel time is measured on CUDA "
              "(scripts/gpu_check.sh, or --kernels on for interpreter times)")
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import kernel_paged_kv

    sys.argv = sys.argv[:1]
    kernel_paged_kv.main()


if __name__ == "__main__":
    main()
