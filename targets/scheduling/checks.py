"""Invariants of a simulation run, and the scheduling oracle.

The invariants are checked on the *implementation's* own run, independently of the reference,
so a bug shows up as the rule it breaks (bypass above β, a full instance chosen, an idle
instance with work waiting) and not only as "differs from the reference":

- every request is routed once, dispatched once and finished (liveness); the simulator itself
  stops on a dispatch of a request that is not waiting (dispatched twice);
- work conservation: no step leaves token budget and room unused while requests wait;
- a step never carries more tokens than the budget;
- FCFS dispatches each instance's queue in arrival order;
- Fairway: the bypass of every waiting request (work dispatched ahead of it by later arrivals)
  stays within β;
- routing: for least-loaded, a least-loaded instance; for the prefix router, against an
  independent reference ring: bounded load, never a full instance while a non-full one exists,
  affinity to the ring owner when it is not full.

The oracle reports whichever comes first in time: a divergence from the reference's event trace
or an invariant violation.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterator, Mapping, Optional

import fuzzkit.oracles
from fuzzkit.failure import Failure
from fuzzkit.targets.scheduling.routers import checks as router_checks
from fuzzkit.targets.scheduling.sim import Config
from fuzzkit.targets.scheduling.workload import Request, validate_requests

Violation = dict[str, Any]


def first_violation(inputs: Mapping[str, Any], output: Mapping[str, Any]) -> Optional[Violation]:
    """The earliest invariant violation of a run (by simulated time), or None."""
    if output["violation"] is not None:
        return dict(output["violation"])
    config = Config.from_json(inputs["config"])
    found = [v for v in _violations(config, inputs, output)]
    return min(found, key=lambda v: v["t"]) if found else None


def _violations(config: Config, inputs: Mapping[str, Any],
                output: Mapping[str, Any]) -> Iterator[Violation]:
    for check in (_steps, _fcfs_order, _bypass, _routing, _admission, _liveness):
        violation = check(config, inputs, output)
        if violation is not None:
            yield violation


def _liveness(config: Config, inputs: Mapping[str, Any], output: Mapping[str, Any]) -> Optional[Violation]:
    """Every request reaches every stage by the end of the run (reported at the last tick)."""
    end = max([e["t"] for e in output["events"]] + [s["t"] for s in output["steps"]] +
              [rec.get("finish", 0) for rec in output["requests"].values()], default=0)
    for rid, rec in sorted(output["requests"].items(), key=lambda kv: int(kv[0])):
        for stage in ("release", "dispatch", "first_token", "finish"):
            if stage not in rec:
                return {"check": "liveness", "t": end, "rid": int(rid),
                        "message": f"request {rid} never reached {stage} (stuck after "
                                   f"{sorted(rec) or 'nothing'})"}
    return None


def _steps(config: Config, inputs: Mapping[str, Any], output: Mapping[str, Any]) -> Optional[Violation]:
    for step in output["steps"]:
        used = step["decodes"] + step["prefill_tokens"]
        if not config.serial and used > config.token_budget:
            return {"check": "token_budget", "t": step["t"], "inst": step["inst"],
                    "message": f"instance {step['inst']} ran a step of {used} tokens over a "
                               f"budget of {config.token_budget}"}
        idle_capacity = (step["prefill_tokens"] == 0 if config.serial
                         else step["budget_left"] > 0)
        if step["waiting"] and step["room"] > 0 and idle_capacity and not step.get("blocked"):
            return {"check": "work_conservation", "t": step["t"], "inst": step["inst"],
                    "message": f"instance {step['inst']} left {step['budget_left']} tokens of "
                               f"budget and {step['room']} sequence slots unused while "
                               f"{step['waiting']} requests waited"}
    return None


def _dispatch_ranks(output: Mapping[str, Any]) -> dict[int, list[tuple[int, dict[str, Any]]]]:
    """Per instance, its dispatch events with their queue-arrival order (routing time, rid)."""
    arrived = {e["rid"]: (e["t"], e["rid"]) for e in output["events"] if e["op"] == "route"}
    per: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for e in output["events"]:
        if e["op"] == "dispatch":
            per.setdefault(e["inst"], []).append((arrived[e["rid"]], e))
    return per


def _fcfs_order(config: Config, inputs: Mapping[str, Any], output: Mapping[str, Any]) -> Optional[Violation]:
    if config.policy["name"] != "fcfs":
        return None
    for inst, dispatches in _dispatch_ranks(output).items():
        for (before, _), (key, event) in zip(dispatches, dispatches[1:]):
            if key < before:
                return {"check": "fcfs_order", "t": event["t"], "inst": inst,
                        "message": f"FCFS on instance {inst} dispatched request {event['rid']} "
                                   f"after a request that arrived later"}
    return None


def _bypass(config: Config, inputs: Mapping[str, Any], output: Mapping[str, Any]) -> Optional[Violation]:
    """Replay each instance's queue: every dispatch adds its cost to the bypass of each waiting
    request that arrived before it."""
    if config.policy["name"] != "fairway":
        return None
    beta = int(config.policy.get("beta", 0))
    waiting: dict[int, dict[int, int]] = {}  # inst -> rid -> bypass so far
    arrival: dict[int, tuple[int, int]] = {}
    for e in output["events"]:
        if e["op"] == "route":
            waiting.setdefault(e["inst"], {})[e["rid"]] = 0
            arrival[e["rid"]] = (e["t"], e["rid"])
        elif e["op"] == "dispatch":
            queue = waiting.get(e["inst"], {})
            queue.pop(e["rid"], None)
            for rid in queue:
                if arrival[rid] < arrival[e["rid"]]:
                    queue[rid] += e["cost"]
                    if queue[rid] > beta:
                        return {"check": "bypass", "t": e["t"], "inst": e["inst"], "rid": rid,
                                "message": f"request {rid} was bypassed by {queue[rid]} ticks of "
                                           f"later arrivals' work (β = {beta}); the last was "
                                           f"request {e['rid']}"}
    return None


def _routing(config: Config, inputs: Mapping[str, Any], output: Mapping[str, Any]) -> Optional[Violation]:
    name = config.router["name"]
    ring = None
    if name == "prefix":
        from fuzzkit.targets.scheduling.routers import reference

        ring = reference.make_router("prefix", config.instances, config.seed,
                                     **config.router_params())
    for e in output["events"]:
        if e["op"] == "scale_up":
            if ring is not None:
                ring.add_instance()
            continue
        if e["op"] != "route":
            continue
        owner = ring.owner(e["key"]) if ring is not None else None
        capacity = ring.capacity(e["loads"]) if ring is not None else None
        problem = router_checks.check_route(name, e["inst"], e["loads"], owner, capacity)
        if problem is not None:
            return {"check": "routing", "t": e["t"], "rid": e["rid"],
                    "message": f"{name} router sent request {e['rid']} to instance {e['inst']} "
                               f"with loads {e['loads']}: {problem}"}
    return None


def _admission(config: Config, inputs: Mapping[str, Any], output: Mapping[str, Any]) -> Optional[Violation]:
    """The admission controller's invariants, re-derived from its log (Σ reservations ≤ B(t)
    at every admission, each reservation released exactly once, Σ = 0 at the end, FIFO,
    B(t) within bounds)."""
    from fuzzkit.targets.scheduling.admission_checks import check_log

    admission = output.get("admission")
    if not admission:
        return None
    finished = all("finish" in rec for rec in output["requests"].values())
    problem = check_log(admission["log"], b_min=admission["b_min"], b_max=admission["b_max"],
                        all_finished=finished)
    if problem is None:
        return None
    end = max([e["t"] for e in admission["log"]], default=0)
    return {"check": "admission", "t": end, "message": problem}


# ---------------------------------------------------------------------------------------------


def oracle(inputs: dict[str, Any], expected: dict[str, Any], actual: dict[str, Any]) -> Optional[Failure]:
    ref_violation = first_violation(inputs, expected)
    if ref_violation is not None:
        return Failure("invariant",
                       f"the reference scheduler itself broke {ref_violation['check']}: "
                       f"{ref_violation['message']}",
                       f"invariant:scheduling:reference:{ref_violation['check']}", ref_violation)
    if _identical(expected, actual):
        return None  # the same run as the reference's, which breaks no invariant
    violation = first_violation(inputs, actual)
    diverged = (None if _identical(expected["events"], actual["events"]) else
                fuzzkit.oracles.trace(expected["events"], actual["events"],
                                      name="scheduling events"))
    if diverged is not None and (violation is None or _time_of(diverged) < violation["t"]):
        return diverged
    if violation is None:
        return None
    config = inputs["config"]
    # the component whose rule broke, so that shrinking may simplify everything else
    component = (config["router"]["name"] if violation["check"] in ("routing", "route_range")
                 else (config.get("admission") or {}).get("name", "none")
                 if violation["check"] == "admission"
                 else (config.get("memory") or {}).get("eviction", "tail_lru")
                 if violation["check"].startswith("memory:") else config["policy"]["name"])
    return Failure("invariant", f"{violation['check']}: {violation['message']}",
                   f"invariant:scheduling:{violation['check']}:{component}", violation)


def _identical(expected: Any, actual: Any) -> bool:
    """Whether two outputs are the same plain data, types and key order included: then every
    invariant holds of both or of neither, and their traces agree step by step.  (Pickles of
    equal JSON-like data are equal bytes; where they differ, the caller compares in full.)"""
    try:
        return expected == actual and pickle.dumps(expected, 5) == pickle.dumps(actual, 5)
    except Exception:  # noqa: BLE001 - something unpicklable: compare in full
        return False


def _time_of(failure: Failure) -> int:
    for side in ("actual", "expected"):
        step = failure.details.get(side)
        if isinstance(step, dict) and "t" in step:
            return int(step["t"])
    return 0


def validate(inputs: dict[str, Any]) -> Optional[str]:
    try:
        config = Config.from_json(inputs.get("config", {}))
        requests = [Request.from_json(r) for r in inputs.get("requests", [])]
        _build(config)
    except (KeyError, TypeError, ValueError) as exc:
        return f"bad scheduling case: {exc}"
    problem = validate_requests(requests, config.block_size)
    if problem is None and config.memory is not None:
        problem = _memory_problem(requests, config)
    return problem


def _build(config: Config) -> None:
    """Construct every component the config names, so that a parameter they refuse (an unknown
    policy, a negative β, an epsilon that is not a number, a Basin floor above its ceiling, an
    unknown eviction) makes the case invalid here instead of crashing both simulators."""
    from fuzzkit.targets.scheduling.admission import make_admission
    from fuzzkit.targets.scheduling.cache import PrefixCache
    from fuzzkit.targets.scheduling.memory import KVMemory
    from fuzzkit.targets.scheduling.policies.reference import make_policy
    from fuzzkit.targets.scheduling.routers.reference import make_router

    make_policy(config.policy["name"], **config.policy_params())
    make_router(config.router["name"], config.instances, config.seed, **config.router_params())
    PrefixCache(config.cache_blocks)
    if config.admission is not None:
        make_admission(config.admission["name"],
                       **{k: v for k, v in config.admission.items() if k != "name"})
    if config.memory is not None:
        memory = config.memory
        for key in ("kv_blocks", "cpu_blocks", "reload_per_block"):
            value = memory.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"memory {key} must be an integer >= 0, got {value!r}")
        KVMemory(memory["kv_blocks"], config.block_size, memory.get("eviction", "tail_lru"),
                 config.cost)


def _memory_problem(requests: list[Request], config: Config) -> Optional[str]:
    """What session KV memory cannot model: a turn larger than the pool, or a session whose turns
    branch (two follow-ups of one request).  The memory keeps *one* history per session, block
    index by block index (:mod:`.memory`), so two branches would read each other's blocks as
    their own; without memory, fan-outs are fine."""
    b, pool = config.block_size, int(config.memory["kv_blocks"])  # type: ignore[index]
    followed: set[int] = set()
    for r in requests:
        need = -(-(r.prompt + r.output) // b)
        if need > pool:
            return (f"request {r.rid} needs {need} KV blocks, more than the pool of "
                    f"{pool}: it could never run")
        if r.after is not None:
            if r.after in followed:
                return (f"request {r.rid} is a second follow-up of request {r.after}: session "
                        "KV memory keeps one history per session, so its turns must form a chain")
            followed.add(r.after)
    return None
