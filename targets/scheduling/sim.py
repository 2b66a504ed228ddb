"""A deterministic discrete-event simulation of LLM serving instances behind a router.

Each instance runs *steps* back to back while it has work.  A step carries one decode token for
every running sequence plus prefill chunks under a token budget (chunked prefill): first the
chunks of requests already being prefilled, then new requests taken from the prefill queue in the
order the policy decides, while budget and room (``max_running``) remain.  The step's duration
comes from :class:`.cost.CostModel`.  When a request's last prefill chunk ends, its first token
is out (TTFT) and its prompt blocks enter the instance's prefix cache; when its last token is
out, its blocks (prompt and output) enter the cache and the next turn of its session (if any) is
released after its think time.

``serial`` mode is the textbook single-server model the Fairway bound is stated on: each step
prefills exactly one whole request, decoding is not modelled, so a request's service time is
exactly the cost the policy saw.

All events at one tick are applied before any idle instance starts a step, in a fixed order
(scale-ups, then step ends by instance, then releases by rid), so a run is a pure function of the
workload and the config.  The observable output is an *event trace*: every routing decision,
every dispatch from a prefill queue (with the hit and cost the policy saw) and every scale-up, in
order — which is what the reference and optimized policies must agree on step by step.
"""

from __future__ import annotations

import dataclasses
import heapq
from types import ModuleType
from typing import Any, Mapping, Optional

from targets.scheduling.cache import PrefixCache
from targets.scheduling.cost import CostModel
from targets.scheduling.policies.base import Waiting
from targets.scheduling.routers.base import stable_hash
from targets.scheduling.workload import Request

DEFAULTS: dict[str, Any] = {
    "block_size": 16,
    "instances": 1,
    "token_budget": 2048,
    "max_running": 64,
    "cache_blocks": 4096,
    "serial": False,
    "seed": 0,
    "scale_ups": [],
    "max_events": 2_000_000,
    "policy": {"name": "fcfs"},
    "router": {"name": "round_robin"},
    "cost": {},
}

_SCALE_UP, _STEP_END, _RELEASE = 0, 1, 2


class Stop(Exception):
    """The simulation cannot go on: a policy or router broke the protocol."""

    def __init__(self, check: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.check, self.message, self.details = check, message, details


@dataclasses.dataclass
class Config:
    block_size: int
    instances: int
    token_budget: int
    max_running: int
    cache_blocks: int
    serial: bool
    seed: int
    scale_ups: list[int]
    max_events: int
    policy: dict[str, Any]
    router: dict[str, Any]
    cost: CostModel

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Config":
        unknown = set(data) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        merged = {**DEFAULTS, **data}
        config = cls(
            block_size=int(merged["block_size"]), instances=int(merged["instances"]),
            token_budget=int(merged["token_budget"]), max_running=int(merged["max_running"]),
            cache_blocks=int(merged["cache_blocks"]), serial=bool(merged["serial"]),
            seed=int(merged["seed"]), scale_ups=sorted(int(t) for t in merged["scale_ups"]),
            max_events=int(merged["max_events"]), policy=dict(merged["policy"]),
            router=dict(merged["router"]), cost=CostModel.from_json(merged["cost"]))
        if config.block_size < 1 or config.instances < 1:
            raise ValueError("block_size and instances must be >= 1")
        if not 1 <= config.max_running <= config.token_budget:
            raise ValueError("need 1 <= max_running <= token_budget (every decode must fit)")
        if "name" not in config.policy or "name" not in config.router:
            raise ValueError("policy and router need a 'name'")
        return config

    def policy_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.policy.items() if k != "name"}

    def router_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.router.items() if k not in ("name", "prefix_blocks")}

    @property
    def prefix_blocks(self) -> int:
        return int(self.router.get("prefix_blocks", 4))


@dataclasses.dataclass
class _Prefill:
    rid: int
    done: int  # tokens cached or already prefilled
    prompt: int


class Instance:
    """One serving instance: a prefill queue (the policy), running sequences, a prefix cache."""

    def __init__(self, index: int, config: Config, policies: ModuleType) -> None:
        self.index = index
        self.config = config
        self.queue = policies.make_policy(config.policy["name"], **config.policy_params())
        self.cache = PrefixCache(config.cache_blocks)
        self.waiting: dict[int, Waiting] = {}
        self.prefilling: list[_Prefill] = []
        self.decoding: dict[int, int] = {}  # rid -> tokens still to generate
        self.busy = False
        self._priced_at = -1  # cache version the waiting requests were priced at
        self._step: Optional[tuple[list[tuple[_Prefill, int]], list[int]]] = None

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.prefilling) + len(self.decoding)

    def price(self, request: Request) -> tuple[int, int]:
        """(hit tokens, predicted prefill cost) of ``request`` against the cache now.  At least
        one prompt token is always computed (its logits give the first output token)."""
        b = self.config.block_size
        hit = min(self.cache.match(request.blocks[: request.prompt // b]) * b, request.prompt - 1)
        return hit, self.config.cost.prefill(request.prompt - hit, hit)


class Simulation:
    def __init__(self, config: Config, requests: list[Request], policies: ModuleType,
                 routers: ModuleType) -> None:
        self.config = config
        self.requests = {r.rid: r for r in requests}
        self.policies = policies
        self.router = routers.make_router(config.router["name"], config.instances, config.seed,
                                          **config.router_params())
        self.instances = [Instance(i, config, policies) for i in range(config.instances)]
        self.events: list[dict[str, Any]] = []  # the observable trace
        self.steps: list[dict[str, Any]] = []  # one record per step, for invariant checks
        self.record: dict[int, dict[str, Any]] = {r.rid: {} for r in requests}
        self._heap: list[tuple[int, int, int, int]] = []
        self._followers: dict[int, list[int]] = {}
        self.now = 0
        for r in requests:
            if r.after is None:
                self._push(r.arrival, _RELEASE, r.rid)
            else:
                self._followers.setdefault(r.after, []).append(r.rid)
        for t in config.scale_ups:
            self._push(t, _SCALE_UP, 0)

    # -- event loop --------------------------------------------------------------------------

    def _push(self, time: int, kind: int, who: int) -> None:
        heapq.heappush(self._heap, (time, kind, who, len(self._heap)))

    def run(self) -> None:
        handled = 0
        while self._heap:
            self.now = self._heap[0][0]
            while self._heap and self._heap[0][0] == self.now:
                _, kind, who, _ = heapq.heappop(self._heap)
                handled += 1
                if handled > self.config.max_events:
                    raise Stop("runaway", f"more than {self.config.max_events} events")
                if kind == _SCALE_UP:
                    self._scale_up()
                elif kind == _STEP_END:
                    self._end_step(self.instances[who])
                else:
                    self._release(self.requests[who])
            for instance in self.instances:
                if not instance.busy:
                    self._start_step(instance)

    # -- events ------------------------------------------------------------------------------

    def _scale_up(self) -> None:
        self.router.add_instance()
        self.instances.append(Instance(len(self.instances), self.config, self.policies))
        self.events.append({"op": "scale_up", "t": self.now, "instances": len(self.instances)})

    def _release(self, request: Request) -> None:
        loads = [i.load for i in self.instances]
        key = stable_hash("prefix", *request.blocks[: self.config.prefix_blocks])
        chosen = self.router.route(key, loads)
        if not isinstance(chosen, int) or not 0 <= chosen < len(self.instances):
            raise Stop("route_range", f"router chose instance {chosen!r} of {len(loads)}",
                       rid=request.rid)
        self.events.append({"op": "route", "t": self.now, "rid": request.rid, "inst": chosen,
                            "key": key, "loads": loads})
        instance = self.instances[chosen]
        hit, cost = instance.price(request)
        waiting = Waiting(request.rid, self.now, cost, hit)
        instance.waiting[request.rid] = waiting
        instance.queue.push(waiting)
        self.record[request.rid].update(release=self.now, instance=chosen)

    def _reprice(self, instance: Instance) -> None:
        if instance._priced_at == instance.cache.version:
            return
        instance._priced_at = instance.cache.version
        for rid, old in list(instance.waiting.items()):
            hit, cost = instance.price(self.requests[rid])
            if (hit, cost) != (old.hit, old.cost):
                instance.waiting[rid] = dataclasses.replace(old, hit=hit, cost=cost)
                instance.queue.reprice(rid, cost, hit)

    def _start_step(self, instance: Instance) -> None:
        config = self.config
        budget = config.token_budget
        decodes = [] if config.serial else list(instance.decoding)
        budget -= len(decodes)
        chunks: list[tuple[_Prefill, int]] = []
        for prefill in instance.prefilling:
            take = min(prefill.prompt - prefill.done, budget)
            if take > 0:
                chunks.append((prefill, take))
                budget -= take
        self._reprice(instance)
        held = False
        while (budget > 0 and instance.waiting and not (config.serial and chunks)
               and len(instance.prefilling) + len(instance.decoding) < config.max_running):
            rid = instance.queue.pop(self.now)
            if rid is None:  # a policy that idles with work waiting: the invariant will say so
                held = True
                break
            if rid not in instance.waiting:
                raise Stop("dispatch_unknown",
                           f"instance {instance.index}'s policy dispatched rid {rid!r}, which is "
                           "not waiting there (dispatched twice, or never routed there)",
                           rid=rid, inst=instance.index)
            seen = instance.waiting.pop(rid)
            request = self.requests[rid]
            self.events.append({"op": "dispatch", "t": self.now, "inst": instance.index,
                                "rid": rid, "hit": seen.hit, "cost": seen.cost})
            self.record[rid].update(dispatch=self.now, hit=seen.hit)
            prefill = _Prefill(rid, seen.hit, request.prompt)
            instance.prefilling.append(prefill)
            take = prefill.prompt - prefill.done if config.serial else min(
                prefill.prompt - prefill.done, budget)
            chunks.append((prefill, take))
            budget -= take
        if not chunks and not decodes:
            if held:
                self.steps.append(self._step_record(instance, 0, 0, budget))
            return
        duration = config.cost.k0 + config.cost.decode * len(decodes) + sum(
            config.cost.chunk(take, prefill.done) for prefill, take in chunks)
        self.steps.append(self._step_record(instance, len(decodes),
                                            sum(take for _, take in chunks), budget))
        instance.busy = True
        instance._step = (chunks, decodes)
        self._push(self.now + duration, _STEP_END, instance.index)

    def _step_record(self, instance: Instance, decodes: int, prefill_tokens: int,
                     budget_left: int) -> dict[str, Any]:
        room = self.config.max_running - len(instance.prefilling) - len(instance.decoding)
        return {"t": self.now, "inst": instance.index, "decodes": decodes,
                "prefill_tokens": prefill_tokens, "budget_left": budget_left,
                "waiting": len(instance.waiting), "room": room}

    def _end_step(self, instance: Instance) -> None:
        assert instance._step is not None
        chunks, decodes = instance._step
        instance.busy, instance._step = False, None
        for rid in decodes:
            instance.decoding[rid] -= 1
            if instance.decoding[rid] == 0:
                del instance.decoding[rid]
                self._finish(instance, rid)
        b = self.config.block_size
        for prefill, take in chunks:
            prefill.done += take
            if prefill.done < prefill.prompt:
                continue
            instance.prefilling.remove(prefill)
            request = self.requests[prefill.rid]
            self.record[prefill.rid]["first_token"] = self.now
            instance.cache.insert(request.blocks[: request.prompt // b])
            if request.output == 1 or self.config.serial:
                self._finish(instance, prefill.rid)
            else:
                instance.decoding[prefill.rid] = request.output - 1

    def _finish(self, instance: Instance, rid: int) -> None:
        request = self.requests[rid]
        self.record[rid]["finish"] = self.now
        instance.cache.insert(request.blocks)
        for follower in self._followers.get(rid, ()):
            nxt = self.requests[follower]
            self._push(max(nxt.arrival, self.now + nxt.think), _RELEASE, follower)


def simulate(config: Mapping[str, Any], requests: list[Request], policies: ModuleType,
             routers: ModuleType) -> dict[str, Any]:
    """Run the simulation; return the event trace, per-request times and step records, plus the
    protocol violation that stopped it (or None)."""
    sim = Simulation(Config.from_json(config), requests, policies, routers)
    violation = None
    try:
        sim.run()
    except Stop as stop:
        violation = {"check": stop.check, "message": stop.message, "t": sim.now, **stop.details}
    return {"events": sim.events, "steps": sim.steps,
            "requests": {str(rid): rec for rid, rec in sim.record.items()},
            "violation": violation}
