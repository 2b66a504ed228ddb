"""Target ``scheduling``: a serving simulator with prefill policies and routers.

Inputs::

    config    {"block_size", "instances", "token_budget", "max_running", "cache_blocks",
               "serial", "seed", "scale_ups": [ticks], "cost": {"k0", "k1", "k2", "decode"},
               "policy": {"name": "fcfs"|"lpm"|"spf"|"fairway", ...params},
               "router": {"name": "random"|"round_robin"|"least_loaded"|"prefix", ...params}}
    requests  [{"rid", "arrival", "prompt", "output", "blocks", "session", "after", "think"}]

Outputs: the simulation's event trace (routing decisions, dispatches with the hit and cost the
policy saw, scale-ups), step records and per-request times (:mod:`.sim`).

The reference runs the simulator with the O(n)-scan policies and linear-scan routers; the
``optimized`` implementation with the heap / kinetic-tournament policies and bisecting routers.
The oracle (:mod:`.checks`) checks the invariants of the implementation's run and compares the
two event traces step by step; :mod:`.properties` adds the metamorphic relations.
"""

from __future__ import annotations

from typing import Any

from fuzzkit.target import Implementation, Target, lazy
from fuzzkit.targets.scheduling import checks
from fuzzkit.targets.scheduling.workload import Request


def run_with(policies: Any, routers: Any, inputs: dict[str, Any], memory_class: Any = None,
             admissions: Any = None) -> dict[str, Any]:
    """Simulate ``inputs`` with the given policy and router modules, KV memory class and
    admission controller classes."""
    from fuzzkit.targets.scheduling.memory import KVMemory
    from fuzzkit.targets.scheduling.sim import simulate

    requests = [Request.from_json(r) for r in inputs["requests"]]
    output = simulate(inputs["config"], requests, policies, routers, memory_class or KVMemory,
                      admissions)
    return output


def _reference(inputs: dict[str, Any]) -> dict[str, Any]:
    from fuzzkit.targets.scheduling.policies import reference as policies
    from fuzzkit.targets.scheduling.routers import reference as routers

    return run_with(policies, routers, inputs)


def _optimized(inputs: dict[str, Any]) -> dict[str, Any]:
    from fuzzkit.targets.scheduling.admission import OPTIMIZED_ADMISSIONS
    from fuzzkit.targets.scheduling.memory import OptimizedKVMemory
    from fuzzkit.targets.scheduling.policies import optimized as policies
    from fuzzkit.targets.scheduling.routers import optimized as routers

    return run_with(policies, routers, inputs, OptimizedKVMemory, OPTIMIZED_ADMISSIONS)


def _strategy(thresholds: tuple[Any, ...] = ()) -> Any:
    from fuzzkit.targets.scheduling.strategies import inputs

    return inputs(thresholds)


def _events(inputs: dict[str, Any]) -> list[str]:
    from fuzzkit.targets.scheduling.workload_events import events

    return events(inputs)


def target() -> Target:
    """The ``scheduling`` target (entry point ``fuzzkit.targets.scheduling:target``)."""
    from fuzzkit.targets.scheduling import thresholds
    from fuzzkit.targets.scheduling.limits import LIMITS
    from fuzzkit.targets.scheduling.mutants import MUTANTS
    from fuzzkit.targets.scheduling.properties import PROPERTIES

    return Target(
        name="scheduling",
        description="serving simulator: FCFS / LPM / SPF / Fairway prefill order, random / "
                    "round-robin / least-loaded / prefix-aware routing; invariants, metamorphic "
                    "relations and a step-by-step trace against O(n) references",
        strategy=_strategy,
        reference=_reference,
        implementations={
            "optimized": Implementation(
                "optimized", _optimized, backend="python",
                description="heaps, a kinetic tournament for Fairway's response ratios, "
                            "bisected hash ring",
                thresholds=lazy("fuzzkit.targets.scheduling.thresholds:optimized"),
                sources=("fuzzkit.targets.scheduling.policies.optimized",
                         "fuzzkit.targets.scheduling.routers.optimized")),
        },
        oracle=checks.oracle,
        properties=PROPERTIES,
        mutants=MUTANTS,
        reducible=("requests",),
        validate=checks.validate,
        thresholds=thresholds.SIMULATOR,
        sizes=thresholds.SIZES,
        events=_events,
        # the simulator and the layers both implementations run through (the session KV memory
        # and the admission controllers hold the optimized LRU and controller classes too)
        sources=("fuzzkit.targets.scheduling.sim", "fuzzkit.targets.scheduling.cache", "fuzzkit.targets.scheduling.cost",
                 "fuzzkit.targets.scheduling.memory", "fuzzkit.targets.scheduling.admission",
                 "fuzzkit.targets.scheduling.policies.base", "fuzzkit.targets.scheduling.routers.base"),
        limits=LIMITS,
        schema=lazy("fuzzkit.targets.scheduling.schema:schema"),  # what describe shows
    )
