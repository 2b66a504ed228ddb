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
import functools
import heapq
from types import ModuleType
from typing import Any, Mapping, Optional

from fuzzkit.targets.scheduling import memory_checks
from fuzzkit.targets.scheduling.cache import PrefixCache
from fuzzkit.targets.scheduling.cost import CostModel
from fuzzkit.targets.scheduling.memory import KVMemory
from fuzzkit.targets.scheduling.policies.base import Waiting
from fuzzkit.targets.scheduling.routers.base import stable_hash
from fuzzkit.targets.scheduling.workload import Request

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
    "memory": None,  # {"kv_blocks", "eviction", "cpu_blocks", "reload_per_block"}: see memory.py
    "admission": None,  # {"name": "none"|"static_cap"|"basin", ...}: see admission.py
}

_SCALE_UP, _STEP_END, _ARRIVE, _RELEASE = 0, 1, 2, 3


@functools.lru_cache(maxsize=1 << 16)
def _prefix_key(blocks: tuple[int, ...]) -> int:
    """The router's key of a prompt's first blocks (a pure function, computed once per prefix:
    every run of a case and of its variants routes the same prompts)."""
    return stable_hash("prefix", *blocks)


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
    memory: Optional[dict[str, Any]] = None
    admission: Optional[dict[str, Any]] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Config":
        unknown = set(data) - set(DEFAULTS)
        if unknown:  # pragma: no cover - validate() rejects it
            raise ValueError(f"unknown config keys {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        merged = {**DEFAULTS, **data}
        config = cls(
            block_size=int(merged["block_size"]), instances=int(merged["instances"]),
            token_budget=int(merged["token_budget"]), max_running=int(merged["max_running"]),
            cache_blocks=int(merged["cache_blocks"]), serial=bool(merged["serial"]),
            seed=int(merged["seed"]), scale_ups=sorted(int(t) for t in merged["scale_ups"]),
            max_events=int(merged["max_events"]), policy=dict(merged["policy"]),
            router=dict(merged["router"]), cost=CostModel.from_json(merged["cost"]),
            memory=None if merged["memory"] is None else dict(merged["memory"]),
            admission=None if merged["admission"] is None else dict(merged["admission"]))
        if config.memory is not None:
            unknown = set(config.memory) - {"kv_blocks", "eviction", "cpu_blocks",
                                            "reload_per_block"}
            if unknown or "kv_blocks" not in config.memory:  # pragma: no cover - validate() rejects it
                raise ValueError("memory needs kv_blocks (and optionally eviction, cpu_blocks, "
                                 f"reload_per_block); unknown: {sorted(unknown)}")
        if config.block_size < 1 or config.instances < 1:  # pragma: no cover - validate() rejects it
            raise ValueError("block_size and instances must be >= 1")
        if not 1 <= config.max_running <= config.token_budget:  # pragma: no cover - validate() rejects it
            raise ValueError("need 1 <= max_running <= token_budget (every decode must fit)")
        if "name" not in config.policy or "name" not in config.router:  # pragma: no cover - validate() rejects it
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
    """A request being prefilled: the token ranges still to compute, in position order (one
    range after a prefix hit; several when a session's evicted front must be recomputed too),
    and a reload cost paid with its first chunk."""

    rid: int
    segments: list[list[int]]
    extra: int = 0
    #: tokens still to compute (the segments' total, kept as they are consumed: read every step)
    remaining: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.remaining = sum(end - start for start, end in self.segments)

    def take(self, tokens: int, cost: CostModel) -> int:
        """Consume ``tokens`` from the front; return their cost (each at its own positions)."""
        total, self.extra = self.extra, 0
        self.remaining -= tokens
        while tokens > 0:
            start, end = self.segments[0]
            n = min(tokens, end - start)
            total += cost.chunk(n, start)
            tokens -= n
            if start + n == end:
                self.segments.pop(0)
            else:
                self.segments[0][0] = start + n
        return total


class Instance:
    """One serving instance: a prefill queue (the policy), running sequences, a prefix cache."""

    def __init__(self, index: int, config: Config, policies: ModuleType,
                 memory_class: type = KVMemory) -> None:
        self.index = index
        self.config = config
        self.queue = policies.make_policy(config.policy["name"], **config.policy_params())
        self.cache = PrefixCache(config.cache_blocks)
        self.memory: Optional[KVMemory] = None
        if config.memory is not None:
            self.memory = memory_class(
                int(config.memory["kv_blocks"]), config.block_size,
                config.memory.get("eviction", "tail_lru"), config.cost,
                cpu_blocks=int(config.memory.get("cpu_blocks", 0)),
                reload_per_block=int(config.memory.get("reload_per_block", 0)))
        self.deferred: list[Waiting] = []  # dispatched but waiting for KV memory, FIFO
        # memory mode: rid -> (memory.plan_key, memory.shared_resident) it was priced at
        self._plan_keys: dict[int, tuple[tuple[int, int], bool]] = {}
        # prefix-cache mode: block -> the waiting rids whose prompt holds it (what a change of
        # that block's residency may reprice)
        self._waiting_on: dict[int, set[int]] = {}
        self.waiting: dict[int, Waiting] = {}
        self.prefilling: list[_Prefill] = []
        self.decoding: dict[int, int] = {}  # rid -> tokens still to generate
        self.busy = False
        self._priced_at = -1  # cache version the waiting requests were priced at
        self._step: Optional[tuple[list[tuple[_Prefill, int]], list[int]]] = None

    @property
    def load(self) -> int:
        return (len(self.waiting) + len(self.deferred) + len(self.prefilling)
                + len(self.decoding))

    @property
    def version(self) -> int:
        """Changes whenever a waiting request's price may have changed."""
        return self.memory.version if self.memory is not None else self.cache.version

    def plan(self, request: Request, sid: int) -> tuple[int, int, list[list[int]], int]:
        """(hit tokens, predicted prefill cost, token ranges to compute, reload cost) of
        ``request`` now.  At least one prompt token is always computed (its logits give the
        first output token)."""
        b = self.config.block_size
        if self.memory is not None:
            shared = request.blocks[: request.shared // b]
            plan = self.memory.plan(sid, shared, request.prompt)
            return (plan.hit_tokens, self.memory.plan_cost(plan),
                    [list(r) for r in plan.recompute],
                    self.memory.reload_per_block * plan.reload_blocks)
        hit = min(self.cache.match(request.blocks[: request.prompt // b]) * b, request.prompt - 1)
        return hit, self.config.cost.prefill(request.prompt - hit, hit), [[hit, request.prompt]], 0

    def price(self, request: Request, sid: int) -> tuple[int, int]:
        hit, cost, _, _ = self.plan(request, sid)
        return hit, cost

    def shared_blocks(self, request: Request) -> tuple[int, ...]:
        """The blocks of ``request``'s prefix shared with other sessions (memory mode)."""
        return request.blocks[: request.shared // self.config.block_size]

    def memory_key(self, request: Request, sid: int) -> tuple[tuple[int, int], bool]:
        """What the memory's plan for ``request`` depends on (see :meth:`_stale_in_memory`)."""
        assert self.memory is not None
        return (self.memory.plan_key(sid),
                self.memory.shared_resident(self.shared_blocks(request)))

    def prompt_blocks(self, request: Request) -> tuple[int, ...]:
        """The blocks a prefix-cache hit of ``request`` is matched on."""
        return request.blocks[: request.prompt // self.config.block_size]

    def wait_on(self, request: Request) -> None:
        """Index a waiting request under its prompt blocks (prefix-cache mode)."""
        for block in self.prompt_blocks(request):
            self._waiting_on.setdefault(block, set()).add(request.rid)

    def stop_waiting_on(self, request: Request) -> None:
        for block in self.prompt_blocks(request):
            rids = self._waiting_on[block]
            rids.discard(request.rid)
            if not rids:
                del self._waiting_on[block]

    def touched(self) -> list[int]:
        """The waiting rids whose prompts hold a block that entered or left the prefix cache
        since the last call, in queue order: no other waiting request can have another hit."""
        rids: set[int] = set()
        for block in self.cache.changed:
            rids.update(self._waiting_on.get(block, ()))
        self.cache.changed.clear()
        return sorted(rids, key=lambda rid: self.waiting[rid].key)


class Simulation:
    def __init__(self, config: Config, requests: list[Request], policies: ModuleType,
                 routers: ModuleType, memory_class: type = KVMemory,
                 admissions: Optional[Mapping[str, type]] = None) -> None:
        self.config = config
        self.memory_class = memory_class
        self.requests = {r.rid: r for r in requests}
        self.policies = policies
        self.router = routers.make_router(config.router["name"], config.instances, config.seed,
                                          **config.router_params())
        self.instances = [Instance(i, config, policies, memory_class)
                          for i in range(config.instances)]
        self.events: list[dict[str, Any]] = []  # the observable trace
        self.steps: list[dict[str, Any]] = []  # one record per step, for invariant checks
        self.record: dict[int, dict[str, Any]] = {r.rid: {} for r in requests}
        self._heap: list[tuple[int, int, int, int]] = []
        self._followers: dict[int, list[int]] = {}
        self.now = 0
        # sessions: a chain of follow-up turns; the root is the turn that follows nothing
        self.sid: dict[int, int] = {}
        self.outstanding: dict[int, int] = {}
        self.peak: dict[int, int] = {}
        b = config.block_size
        for r in requests:
            sid = r.rid if r.after is None else self.sid[r.after]
            self.sid[r.rid] = sid
            self.outstanding[sid] = self.outstanding.get(sid, 0) + 1
            self.peak[sid] = max(self.peak.get(sid, 0), -(-(r.prompt + r.output) // b))
        self.admission = None
        if config.admission is not None:
            from fuzzkit.targets.scheduling.admission import make_admission

            params = {k: v for k, v in config.admission.items() if k != "name"}
            self.admission = make_admission(config.admission["name"], admissions, **params)
        self._log_seen = 0
        for r in requests:
            if r.after is None:
                self._push(r.arrival, _ARRIVE if self.admission else _RELEASE, r.rid)
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
                if handled > self.config.max_events:  # pragma: no cover - a safety net far above any case
                    raise Stop("runaway", f"more than {self.config.max_events} events")
                if kind == _SCALE_UP:
                    self._scale_up()
                elif kind == _STEP_END:
                    self._end_step(self.instances[who])
                elif kind == _ARRIVE:
                    self.record[who]["arrived"] = self.now
                    self._admitted(self.admission.arrive(self.sid[who], self.peak[who], self.now))
                else:
                    self._release(self.requests[who])
            for instance in self.instances:
                if not instance.busy:
                    self._start_step(instance)

    # -- admission ---------------------------------------------------------------------------

    def _admitted(self, sids: list[int], delay: int = 0) -> None:
        """Release the first turn of every session admission just let in (a session's id is its
        root request's rid).  Admissions decided while a step is being formed (budget ticks,
        congestion signals) take effect one step overhead ``k0`` later: releasing them at this
        tick could put a request into a queue behind one that arrived at the same tick with a
        larger id, against the policies' arrival order; ``k0`` keeps runs scale-invariant."""
        self._record_admission()
        for sid in sids:
            self._push(self.now + delay, _RELEASE, sid)

    def _record_admission(self) -> None:
        if self.admission is None:
            return
        for entry in self.admission.log[self._log_seen:]:
            if entry["op"] in ("admit", "hold", "release"):
                self.events.append({"op": entry["op"], "t": self.now, "sid": entry["sid"],
                                    "budget": entry["budget"]})
        self._log_seen = len(self.admission.log)

    def _signal(self, kind: str) -> None:
        if self.admission is not None:
            self._admitted(self.admission.signal(kind, self.now), self.config.cost.k0)

    # -- events ------------------------------------------------------------------------------

    def _scale_up(self) -> None:
        self.router.add_instance()
        self.instances.append(Instance(len(self.instances), self.config, self.policies,
                                       self.memory_class))
        self.events.append({"op": "scale_up", "t": self.now, "instances": len(self.instances)})

    def _release(self, request: Request) -> None:
        loads = [i.load for i in self.instances]
        key = _prefix_key(tuple(request.blocks[: self.config.prefix_blocks]))
        chosen = self.router.route(key, loads)
        off = not isinstance(chosen, int) or not 0 <= chosen < len(self.instances)
        if off:  # pragma: no cover - a router off protocol
            raise Stop("route_range", f"router chose instance {chosen!r} of {len(loads)}",
                       rid=request.rid)
        self.events.append({"op": "route", "t": self.now, "rid": request.rid, "inst": chosen,
                            "key": key, "loads": loads})
        instance = self.instances[chosen]
        hit, cost = instance.price(request, self.sid[request.rid])
        if instance.memory is not None:
            instance._plan_keys[request.rid] = instance.memory_key(request, self.sid[request.rid])
        else:
            instance.wait_on(request)
        waiting = Waiting(request.rid, self.now, cost, hit)
        instance.waiting[request.rid] = waiting
        instance.queue.push(waiting)
        self.record[request.rid].update(release=self.now, instance=chosen)

    def _reprice(self, instance: Instance) -> None:
        if instance._priced_at == instance.version:
            return
        instance._priced_at = instance.version
        memory = instance.memory
        if memory is None:  # only the requests whose prompt blocks came or went
            stale = instance.touched()
        else:
            stale = self._stale_in_memory(instance)
        for rid in stale:
            old = instance.waiting[rid]
            hit, cost = instance.price(self.requests[rid], self.sid[rid])
            if hit != old.hit or cost != old.cost:
                instance.waiting[rid] = Waiting(rid, old.arrival, cost, hit)
                instance.queue.reprice(rid, cost, hit)

    def _stale_in_memory(self, instance: Instance) -> list[int]:
        """The waiting rids whose plan may have changed: their session's residency changed, or
        whether their shared prefix is all resident did (the memory's plan reads nothing else;
        most changes of the shared pool concern other prefixes)."""
        memory = instance.memory
        assert memory is not None
        stale = []
        for rid in instance.waiting:
            sid = self.sid[rid]
            key = memory.plan_key(sid)
            priced = instance._plan_keys.get(rid)
            if priced is not None and priced[0] == key:
                continue  # nothing it depends on changed
            now = instance.memory_key(self.requests[rid], sid)
            instance._plan_keys[rid] = now
            if priced is None or priced[0][0] != now[0][0] or priced[1] != now[1]:
                stale.append(rid)
        return stale

    def _start_step(self, instance: Instance) -> None:
        config = self.config
        if self.admission is not None and instance.memory is not None:
            memory = instance.memory
            self._admitted(self.admission.tick(self.now, memory.free, memory.capacity),
                           config.cost.k0)
        if not (instance.waiting or instance.deferred or instance.prefilling
                or instance.decoding):
            # idle (most calls): no step to form, and no waiting request a cache change
            # could reprice
            instance.cache.changed.clear()
            return
        budget = config.token_budget
        decodes = [] if config.serial else list(instance.decoding)
        budget -= len(decodes)
        chunks: list[tuple[_Prefill, int]] = []
        for prefill in instance.prefilling:
            take = min(prefill.remaining, budget)
            # at most one prefill is unfinished at a step's start, and decodes leave it a token
            if take > 0:  # pragma: no branch - always (see the line above)
                chunks.append((prefill, take))
                budget -= take
        self._reprice(instance)
        held = blocked = False
        max_running = config.max_running
        prefilling, decoding = instance.prefilling, instance.decoding
        while (budget > 0 and (instance.waiting or instance.deferred)
               and not (config.serial and chunks)
               and len(prefilling) + len(decoding) < max_running):  # room for one more
            if instance.deferred:
                seen = instance.deferred[0]
            else:
                rid = instance.queue.pop(self.now)
                # a policy that idles with work waiting: the invariant says so
                if rid is None:  # pragma: no cover - a policy off protocol
                    held = True
                    break
                if rid not in instance.waiting:  # pragma: no cover - a policy off protocol
                    raise Stop("dispatch_unknown",
                               f"instance {instance.index}'s policy dispatched rid {rid!r}, "
                               "which is not waiting there (dispatched twice, or never routed "
                               "there)", rid=rid, inst=instance.index)
                seen = instance.waiting.pop(rid)
                instance._plan_keys.pop(rid, None)
                if instance.memory is None:
                    instance.stop_waiting_on(self.requests[rid])
                self.events.append({"op": "dispatch", "t": self.now, "inst": instance.index,
                                    "rid": rid, "hit": seen.hit, "cost": seen.cost})
                self.record[rid].update(dispatch=self.now, hit=seen.hit)
                instance.deferred.append(seen)
            prefill = self._admit_to_memory(instance, seen.rid)
            if prefill is None:
                blocked = True  # no KV memory even after evicting every idle session
                self._signal("preemption")
                break
            instance.deferred.pop(0)
            instance.prefilling.append(prefill)
            take = prefill.remaining if config.serial else min(prefill.remaining, budget)
            chunks.append((prefill, take))
            budget -= take
        if not chunks and not decodes:
            if held or blocked:  # pragma: no branch - an idle instance fits any one turn
                self.steps.append(self._step_record(instance, 0, 0, budget, blocked))
            return
        cost = config.cost
        duration, tokens = cost.k0 + cost.decode * len(decodes), 0
        for prefill, take in chunks:
            duration += prefill.take(take, cost)
            tokens += take
        self.steps.append(self._step_record(instance, len(decodes), tokens, budget, blocked))
        instance.busy = True
        instance._step = (chunks, decodes)
        self._push(self.now + duration, _STEP_END, instance.index)

    def _admit_to_memory(self, instance: Instance, rid: int) -> Optional[_Prefill]:
        """The ranges to compute for ``rid``, after making its context resident (memory mode);
        None when the memory cannot hold it now."""
        request = self.requests[rid]
        sid = self.sid[rid]
        memory = instance.memory
        if memory is None:
            _, _, segments, extra = instance.plan(request, sid)
            return _Prefill(rid, segments, extra)
        b = self.config.block_size
        seen = len(memory.events)
        plan = memory.acquire(sid, request.blocks[: request.shared // b],
                              request.prompt + request.output, request.prompt, self.now)
        evictions = [e for e in memory.events[seen:] if e["op"] == "evict"]
        for event in evictions:
            self.events.append({"op": "evict", "t": self.now, "inst": instance.index,
                                "sid": event["sid"], "blocks": event["blocks"],
                                "shared_dropped": event["shared_dropped"]})
        problem = memory_checks.audit(memory, self.config.memory.get("eviction", "tail_lru"),
                                      memory.events[seen:])
        if problem is not None:  # pragma: no cover - only a broken memory fails its audit
            raise Stop(f"memory:{problem[0]}", problem[1], inst=instance.index, rid=rid)
        refills = [e for e in memory.events[seen:] if e["op"] == "refill"]
        if any(e["recompute"] > max(1, e["prompt"] - e["tokens_before"]) for e in refills):
            # a returning session lost part of the history it had computed: the live sessions'
            # contexts no longer fit (evicting an idle history alone is routine, not congestion)
            self._signal("active_eviction")
        if plan is None:
            return None
        return _Prefill(rid, [list(r) for r in plan.recompute],
                        memory.reload_per_block * plan.reload_blocks)

    def _step_record(self, instance: Instance, decodes: int, prefill_tokens: int,
                     budget_left: int, blocked: bool = False) -> dict[str, Any]:
        room = self.config.max_running - len(instance.prefilling) - len(instance.decoding)
        return {"t": self.now, "inst": instance.index, "decodes": decodes,
                "prefill_tokens": prefill_tokens, "budget_left": budget_left,
                "waiting": len(instance.waiting), "room": room, "blocked": blocked}

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
        for prefill, _ in chunks:
            if prefill.remaining:
                continue
            instance.prefilling.remove(prefill)
            request = self.requests[prefill.rid]
            self.record[prefill.rid]["first_token"] = self.now
            if instance.memory is None:
                instance.cache.insert(request.blocks[: request.prompt // b])
            if request.output == 1 or self.config.serial:
                self._finish(instance, prefill.rid)
            else:
                instance.decoding[prefill.rid] = request.output - 1

    def _finish(self, instance: Instance, rid: int) -> None:
        request = self.requests[rid]
        self.record[rid]["finish"] = self.now
        sid = self.sid[rid]
        self.outstanding[sid] -= 1
        if instance.memory is None:
            instance.cache.insert(request.blocks)
        else:
            instance.memory.release(sid, self.now)
        if self.outstanding[sid] == 0:
            for other in self.instances:
                if other.memory is not None:
                    other.memory.end(sid)
            if self.admission is not None:
                self._admitted(self.admission.finish(sid, self.now))
        for follower in self._followers.get(rid, ()):
            nxt = self.requests[follower]
            self._push(max(nxt.arrival, self.now + nxt.think), _RELEASE, follower)


def simulate(config: Mapping[str, Any], requests: list[Request], policies: ModuleType,
             routers: ModuleType, memory_class: type = KVMemory,
             admissions: Optional[Mapping[str, type]] = None) -> dict[str, Any]:
    """Run the simulation; return the event trace, per-request times and step records, plus the
    protocol violation that stopped it (or None)."""
    sim = Simulation(Config.from_json(config), requests, policies, routers, memory_class,
                     admissions)
    violation = None
    try:
        sim.run()
    except Stop as stop:
        violation = {"check": stop.check, "message": stop.message, "t": sim.now, **stop.details}
    sim._record_admission()
    admission = None if sim.admission is None else {
        "log": sim.admission.log, "b_min": sim.admission.b_min, "b_max": sim.admission.b_max}
    return {"events": sim.events, "steps": sim.steps, "admission": admission,
            "requests": {str(rid): rec for rid, rec in sim.record.items()},
            "violation": violation}
