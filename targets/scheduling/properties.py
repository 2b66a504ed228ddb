"""Metamorphic relations of the scheduling target: each runs one implementation on a changed
copy of the case and compares what must (not) change.

- ``scale_invariance``: multiplying every time constant (arrivals, think times, scale-up times,
  cost constants, the CPU tier's reload cost, β, the admission controller's clocks) by ``c`` leaves every decision the same and multiplies every time by ``c``.
  Exact, because costs are integers and policies compare by cross-multiplication.
- ``fairway_beta_zero_is_fcfs``: Fairway with β = 0 makes exactly the FCFS decisions.
- ``fairway_equal_costs_is_fcfs``: with every prefill costing the same (k1 = k2 = 0), Fairway
  with any β makes exactly the FCFS decisions.
- ``fairway_ttft_bound``: on one server in ``serial`` mode with fixed costs (no prefix cache,
  no session memory, no admission control) and open-loop arrivals (follow-up turns released at their own ``arrival``, since a closed
  loop makes arrivals depend on the policy), ``TTFT_fairway(q) <= TTFT_fcfs(q) + β`` for
  every request q.

The Fairway relations run for every case whose policy is Fairway, with its β and queue limit.

Cost: the runner gives every relation its own copy of the case and ``run`` copies again, so the
variants here are built by copying only what they change (the config's dicts, the request
dicts whose fields change) instead of deep copies; and ``scale_invariance`` is given the run of
the unchanged case that the runner has just judged (``Property.uses_output``) instead of
simulating it again.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from fuzzkit.failure import Failure
from fuzzkit.target import Property
from fuzzkit.targets.scheduling.cost import CostModel
from fuzzkit.targets.scheduling.metrics import ttfts

Run = Callable[[dict[str, Any]], dict[str, Any]]
SCALE = 3


def _config_copy(config: dict[str, Any]) -> dict[str, Any]:
    """A copy of a config whose nested dicts and lists may be changed in place."""
    return {k: dict(v) if type(v) is dict else list(v) if type(v) is list else v
            for k, v in config.items()}


def _variant(inputs: dict[str, Any], **config: Any) -> dict[str, Any]:
    """``inputs`` with some config keys replaced.  The requests are shared, not copied: nothing
    here writes into them, and ``run`` gives the simulator its own copy."""
    out = {**inputs, "config": _config_copy(inputs["config"])}
    out["config"].update(config)
    return out


def _first_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> Optional[int]:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _decisions(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decisions of a trace without the policy-specific view (cost, hit) or times."""
    return [{k: v for k, v in e.items() if k not in ("t", "cost", "hit")} for e in events]


def _unusable(output: dict[str, Any]) -> bool:
    """A run that stopped on a protocol violation is judged by the invariants, not here."""
    return output["violation"] is not None


def scale_invariance(run: Run, inputs: dict[str, Any], base: dict[str, Any]) -> Optional[Failure]:
    """``base`` is the implementation's run of ``inputs`` the runner has just judged."""
    config = _config_copy(inputs["config"])
    scaled_inputs = {**inputs, "config": config,
                     "requests": [dict(r) for r in inputs["requests"]]}
    config["cost"] = {k: v * SCALE for k, v in _cost(inputs).items()}
    config["scale_ups"] = [t * SCALE for t in config.get("scale_ups", [])]
    if config["policy"]["name"] == "fairway":
        config["policy"]["beta"] = int(config["policy"].get("beta", 0)) * SCALE
    if config.get("memory"):
        config["memory"]["reload_per_block"] = config["memory"].get("reload_per_block", 0) * SCALE
    for key in ("cooldown", "increase_every"):  # admission's clocks
        if config.get("admission") and key in config["admission"]:
            config["admission"][key] *= SCALE
    for r in scaled_inputs["requests"]:
        r["arrival"] *= SCALE
        r["think"] = r.get("think", 0) * SCALE
    scaled = run(scaled_inputs)
    if _unusable(base) or _unusable(scaled):
        return None
    expected = [{**e, "t": e["t"] * SCALE, **({"cost": e["cost"] * SCALE} if "cost" in e else {})}
                for e in base["events"]]
    index = _first_difference(expected, scaled["events"])
    if index is None:
        return None
    return Failure("invariant",
                   f"scaling every time constant by {SCALE} changed decision {index}: expected "
                   f"{_at(expected, index)}, got {_at(scaled['events'], index)}",
                   "invariant:scheduling:scale_invariance",
                   {"event": index, "expected": _at(expected, index),
                    "actual": _at(scaled["events"], index)})


def _cost(inputs: dict[str, Any]) -> dict[str, int]:
    return dataclasses.asdict(CostModel.from_json(inputs["config"].get("cost", {})))


def _at(events: list[dict[str, Any]], index: int) -> Any:
    return events[index] if index < len(events) else None


def _same_as_fcfs(run: Run, fairway_inputs: dict[str, Any], relation: str,
                  why: str) -> Optional[Failure]:
    fairway = run(fairway_inputs)
    fcfs = run(_variant(fairway_inputs, policy={"name": "fcfs"}))
    if _unusable(fairway) or _unusable(fcfs):
        return None
    a, b = _decisions(fcfs["events"]), _decisions(fairway["events"])
    index = _first_difference(a, b)
    if index is None:
        return None
    return Failure("invariant",
                   f"{why}, yet decision {index} differs from FCFS: FCFS {_at(a, index)}, "
                   f"Fairway {_at(b, index)}",
                   f"invariant:scheduling:{relation}",
                   {"event": index, "expected": _at(a, index), "actual": _at(b, index)})


def beta_zero_is_fcfs(run: Run, inputs: dict[str, Any]) -> Optional[Failure]:
    policy = inputs["config"]["policy"]
    if policy["name"] != "fairway":
        return None
    return _same_as_fcfs(run, _variant(inputs, policy={**policy, "beta": 0}),
                         "fairway_beta_zero_is_fcfs", "Fairway ran with β = 0")


def equal_costs_is_fcfs(run: Run, inputs: dict[str, Any]) -> Optional[Failure]:
    policy = inputs["config"]["policy"]
    if policy["name"] != "fairway":
        return None
    cost = {**_cost(inputs), "k1": 0, "k2": 0}
    variant = _variant(inputs, cost=cost)
    if variant["config"].get("memory"):  # reloads from the CPU tier cost too
        variant["config"]["memory"]["reload_per_block"] = 0
    return _same_as_fcfs(run, variant, "fairway_equal_costs_is_fcfs",
                         "every prefill cost the same (k1 = k2 = 0, free reloads)")


def ttft_bound(run: Run, inputs: dict[str, Any]) -> Optional[Failure]:
    policy = inputs["config"]["policy"]
    if policy["name"] != "fairway":
        return None
    beta = int(policy.get("beta", 0))
    single = dict(instances=1, serial=True, cache_blocks=0, scale_ups=[], memory=None,
                  admission=None, router={"name": "round_robin"})
    open_loop = _variant(inputs, **single)
    # a follow-up's release would depend on the policy
    open_loop["requests"] = [{**r, "after": None, "think": 0} for r in inputs["requests"]]
    fairway = run(open_loop)
    fcfs = run(_variant(open_loop, policy={"name": "fcfs"}))
    if _unusable(fairway) or _unusable(fcfs):
        return None
    slow, fast = ttfts(fairway), ttfts(fcfs)
    for rid in sorted(fast):
        if rid in slow and slow[rid] > fast[rid] + beta:
            return Failure("invariant",
                           f"one server, fixed costs: request {rid} waited {slow[rid]} ticks to "
                           f"its first token under Fairway but {fast[rid]} under FCFS, more "
                           f"than β = {beta} later",
                           "invariant:scheduling:fairway_ttft_bound",
                           {"rid": rid, "fairway": slow[rid], "fcfs": fast[rid], "beta": beta})
    return None


PROPERTIES = [
    Property("scale_invariance", scale_invariance,
             "times and costs scaled by c: same decisions, times scaled by c", uses_output=True),
    Property("fairway_beta_zero_is_fcfs", beta_zero_is_fcfs, "Fairway with β = 0 is FCFS"),
    Property("fairway_equal_costs_is_fcfs", equal_costs_is_fcfs,
             "Fairway with equal prefill costs is FCFS"),
    Property("fairway_ttft_bound", ttft_bound,
             "one server, fixed costs: TTFT_fairway <= TTFT_fcfs + β"),
]
