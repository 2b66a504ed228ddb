"""KV memory with sessions: what stays resident between the turns of an agent session, what gets
evicted when memory runs out, and what a returning turn must recompute or reload.

Each instance has a pool of ``capacity`` KV blocks.  A session's context is a shared prefix (a
system prompt or a document, block ids shared with other sessions, refcounted) followed by its
private history (block indices ``shared..n``).  A running request holds its whole context
(prompt and output) resident; between turns the session is *idle* and its private blocks are
evictable.  When a request needs blocks that are not free, the eviction policy picks idle
sessions (least recently used first) and frees blocks from them:

- ``tail_lru`` (vLLM / SGLang): from the tail of the history, then the session's claim on its
  shared prefix;
- ``session``: the whole session at once;
- ``penelope``: from the **front** of the private history, keeping the later suffix (later tokens
  cost more to recompute: they attend to more context), the shared prefix last.  With a CPU tier
  (``cpu_blocks`` > 0), evicted blocks are copied there (LRU) and a returning turn reloads them
  instead of recomputing when reloading is cheaper.

A returning turn recomputes exactly its missing blocks at their original positions (exact under
causal attention; :mod:`.exactness` proves it on a tiny model with the paged kernels).

The LRU choice among idle sessions exists twice with identical decisions: a scan
(:class:`ScanLRU`, the reference) and an ordered dict (:class:`OrderedLRU`, optimized).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any, Optional

from fuzzkit.targets.scheduling.cost import CostModel

EVICTIONS = ("tail_lru", "session", "penelope")


@dataclasses.dataclass
class SessionKV:
    sid: int
    shared: tuple[int, ...] = ()  # block ids of the shared prefix the session claims
    holds_shared: bool = False
    length: int = 0  # private blocks the session's history has (indices shared..shared+length)
    resident: set[int] = dataclasses.field(default_factory=set)  # private indices on the GPU
    cpu: set[int] = dataclasses.field(default_factory=set)  # private indices in the CPU tier
    tokens: int = 0  # context tokens computed so far (a resident block is valid up to here)
    running: int = 0  # requests of this session holding its context now
    holding: int = 0  # private blocks the running requests need resident
    version: int = 0  # bumped whenever what a turn of this session must recompute may change
    last_use: int = 0


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a turn needs before it can run: token ranges to recompute (in position order) and
    blocks to reload from the CPU tier."""

    recompute: tuple[tuple[int, int], ...]  # [start, end) token positions
    reload_blocks: int
    hit_tokens: int

    @property
    def recompute_tokens(self) -> int:
        return sum(end - start for start, end in self.recompute)


def evictable(s: SessionKV, exclude: int) -> bool:
    """An idle session (not ``exclude``, the one being served) that still holds blocks."""
    return s.sid != exclude and s.running == 0 and bool(s.resident or s.holds_shared)


class ScanLRU:
    """Reference victim choice: the idle session with evictable blocks used least recently
    (ties by sid), by a scan over all sessions."""

    def __init__(self) -> None:
        self.sessions: dict[int, SessionKV] = {}

    def touch(self, session: SessionKV) -> None:
        pass

    def forget(self, sid: int) -> None:
        pass

    def victim(self, exclude: int) -> Optional[SessionKV]:
        idle = [s for s in self.sessions.values() if evictable(s, exclude)]
        return min(idle, key=lambda s: (s.last_use, s.sid), default=None)


class OrderedLRU(ScanLRU):
    """Optimized victim choice: sessions kept in (last use, sid) order in an ordered dict; the
    first idle one with evictable blocks is the victim.  Uses arrive in time order, so moving a
    touched session to the end keeps the order; a touch at an equal tick with a smaller sid is
    placed by a short walk from the end."""

    def __init__(self) -> None:
        super().__init__()
        self._order: OrderedDict[int, None] = OrderedDict()

    def touch(self, session: SessionKV) -> None:
        self._order.pop(session.sid, None)
        self._order[session.sid] = None
        # keep (last_use, sid) order for equal ticks: move later-sid equals behind it
        behind = []
        for sid in reversed(self._order):
            if sid == session.sid:
                continue
            other = self.sessions[sid]
            if (other.last_use, other.sid) > (session.last_use, session.sid):
                behind.append(sid)
            else:
                break
        for sid in reversed(behind):
            self._order.move_to_end(sid)

    def forget(self, sid: int) -> None:
        self._order.pop(sid, None)

    def victim(self, exclude: int) -> Optional[SessionKV]:
        for sid in self._order:
            if evictable(self.sessions[sid], exclude):
                return self.sessions[sid]
        return None


class KVMemory:
    """One instance's KV pool.  ``events`` records every eviction and refill for the
    invariant checks (resident shape, recompute == hole − reload, capacity, front ≤ tail cost)."""

    def __init__(self, capacity: int, block_size: int, eviction: str, cost: CostModel, *,
                 cpu_blocks: int = 0, reload_per_block: int = 0, lru: type = ScanLRU) -> None:
        if eviction not in EVICTIONS:  # pragma: no cover - validate() rejects it
            raise ValueError(f"unknown eviction {eviction!r} (known: {', '.join(EVICTIONS)})")
        self.capacity, self.block_size, self.eviction, self.cost = capacity, block_size, eviction, cost
        self.cpu_blocks, self.reload_per_block = cpu_blocks, reload_per_block
        self.lru = lru()
        self.sessions = self.lru.sessions
        self.shared_refs: dict[int, int] = {}
        self.private_used = 0
        self.cpu_lru: OrderedDict[tuple[int, int], None] = OrderedDict()  # (sid, index)
        self.events: list[dict[str, Any]] = []
        self.version = 0  # bumped on every change of what is resident
        self.shared_version = 0  # bumped when a shared block enters or leaves the pool

    # -- accounting --------------------------------------------------------------------------

    @property
    def used(self) -> int:
        return self.private_used + len(self.shared_refs)

    @property
    def free(self) -> int:
        return self.capacity - self.used

    def session(self, sid: int) -> SessionKV:
        return self.sessions.setdefault(sid, SessionKV(sid))

    # -- planning a turn ---------------------------------------------------------------------

    def plan_key(self, sid: int) -> tuple[int, int]:
        """Changes whenever :meth:`plan` for a turn of ``sid`` may give another answer."""
        s = self.sessions.get(sid)
        return (-1 if s is None else s.version, self.shared_version)

    def shared_resident(self, shared: tuple[int, ...]) -> bool:
        """Whether every block of a shared prefix is in the pool: all that :meth:`plan` reads of
        the shared pool, so a turn for which this did not change when ``shared_version`` did
        keeps its plan (if its session's version did not change either)."""
        return all(block in self.shared_refs for block in shared)

    def plan(self, sid: int, shared: tuple[int, ...], prompt: int) -> Plan:
        """Token ranges of ``prompt`` that are not resident (to recompute, at their positions)
        and the number of blocks to reload from the CPU tier.  The last prompt token is always
        computed: its logits give the first output token."""
        b = self.block_size
        s = self.sessions.get(sid)
        ranges: list[tuple[int, int]] = []
        if shared and not self.shared_resident(shared):
            ranges.append((0, min(len(shared) * b, prompt)))
        reload_blocks = 0
        for index in range(len(shared), (prompt + b - 1) // b):
            lo, hi = index * b, min((index + 1) * b, prompt)
            if s is not None and index in s.resident:
                lo = max(lo, min(hi, s.tokens))  # a resident block is valid up to s.tokens
            elif s is not None and index in s.cpu and self._reload_is_cheaper(index):
                reload_blocks += 1
                lo = max(lo, min(hi, s.tokens))
            if lo < hi:
                ranges.append((lo, hi))
        ranges = _merge(ranges)
        if not ranges:
            ranges = [(prompt - 1, prompt)]
        recompute = sum(hi - lo for lo, hi in ranges)
        return Plan(tuple(ranges), reload_blocks, prompt - recompute)

    def _reload_is_cheaper(self, index: int) -> bool:
        position = index * self.block_size
        return self.reload_per_block < self.cost.chunk(self.block_size, position)

    def plan_cost(self, plan: Plan) -> int:
        """Predicted prefill cost of a plan: each recomputed range at its original positions."""
        return self.cost.k0 + self.reload_per_block * plan.reload_blocks + sum(
            self.cost.chunk(hi - lo, lo) for lo, hi in plan.recompute)

    # -- running a turn ----------------------------------------------------------------------

    def acquire(self, sid: int, shared: tuple[int, ...], context_tokens: int, prompt: int,
                now: int) -> Optional[Plan]:
        """Make the whole context of a turn resident (evicting idle sessions if needed) and
        return what must be recomputed; None (nothing changed) when it cannot fit."""
        b = self.block_size
        plan = self.plan(sid, shared, prompt)
        s = self.session(sid)
        before = {"resident_before": sorted(s.resident), "cpu_before": sorted(s.cpu),
                  "tokens_before": s.tokens, "shared_blocks": len(shared),
                  "shared_resident_before": all(block in self.shared_refs for block in shared)}
        total_private = max(0, (context_tokens + b - 1) // b - len(shared))
        need_private = [i for i in range(len(shared), len(shared) + total_private)
                        if i not in s.resident]
        while True:
            # recounted after every eviction: dropping a victim's claim on a shared prefix this
            # turn also uses can free that prefix
            need_shared = 0 if s.holds_shared and s.shared == tuple(shared) else sum(
                1 for block in shared if block not in self.shared_refs)
            need = len(need_private) + need_shared
            if self.free >= need:
                break
            victim = self.lru.victim(exclude=sid)
            if victim is None:
                return None
            self._evict(victim, need - self.free, now)
        if not (s.holds_shared and s.shared == tuple(shared)):
            self._drop_shared(s)
            s.shared = tuple(shared)
            for block in shared:
                if block not in self.shared_refs:
                    self.shared_version += 1
                self.shared_refs[block] = self.shared_refs.get(block, 0) + 1
            s.holds_shared = True
        for index in need_private:
            s.resident.add(index)
            self._cpu_drop(s, index)
        self.private_used += len(need_private)
        s.length = max(s.length, total_private)
        s.tokens = max(s.tokens, context_tokens)
        s.version += 1
        s.holding = max(s.holding if s.running else 0, total_private)
        s.running += 1
        s.last_use = now
        self.lru.touch(s)
        self.version += 1
        self.events.append({"op": "refill", "t": now, "sid": sid, "prompt": prompt,
                            "recompute": plan.recompute_tokens,
                            "reload": plan.reload_blocks, "hit": plan.hit_tokens, **before})
        return plan

    def release(self, sid: int, now: int) -> None:
        """A turn finished: its context stays resident, the session is idle (evictable)."""
        s = self.sessions[sid]
        s.running -= 1
        s.last_use = now
        self.lru.touch(s)
        self.version += 1

    def end(self, sid: int) -> None:
        """The session is over: free everything it holds."""
        s = self.sessions.pop(sid, None)
        if s is None:
            return
        self.private_used -= len(s.resident)
        self._drop_shared(s)
        for index in list(s.cpu):
            self._cpu_drop(s, index)
        self.lru.forget(sid)
        self.version += 1

    # -- eviction ----------------------------------------------------------------------------

    def _evict(self, victim: SessionKV, want: int, now: int) -> None:
        chosen = self.blocks_to_evict(victim, want)
        victim.version += 1
        for index in chosen:
            victim.resident.discard(index)
            self._cpu_keep(victim, index)
        self.private_used -= len(chosen)
        dropped = False
        if len(chosen) < want or self.eviction == "session":
            dropped = victim.holds_shared
            self._drop_shared(victim)
        self.events.append({"op": "evict", "t": now, "sid": victim.sid, "blocks": sorted(chosen),
                            "shared_dropped": dropped, "length": victim.length,
                            "shared": len(victim.shared), "policy": self.eviction,
                            "resident": sorted(victim.resident)})

    def blocks_to_evict(self, victim: SessionKV, want: int) -> list[int]:
        """Which private blocks of ``victim`` go (the policy's whole difference)."""
        ordered = sorted(victim.resident)
        if self.eviction == "session":
            return ordered
        if self.eviction == "tail_lru":
            return ordered[::-1][:want]
        return ordered[:want]  # penelope: the front of the private history

    def _drop_shared(self, s: SessionKV) -> None:
        if not s.holds_shared:
            return
        for block in s.shared:
            self.shared_refs[block] -= 1
            if self.shared_refs[block] == 0:
                del self.shared_refs[block]
                self.shared_version += 1
        s.holds_shared = False

    # -- CPU tier ----------------------------------------------------------------------------

    def _cpu_keep(self, s: SessionKV, index: int) -> None:
        if self.cpu_blocks <= 0:
            return
        s.cpu.add(index)
        self.cpu_lru[(s.sid, index)] = None
        self.cpu_lru.move_to_end((s.sid, index))
        while len(self.cpu_lru) > self.cpu_blocks:
            (sid, old), _ = self.cpu_lru.popitem(last=False)
            self.sessions[sid].cpu.discard(old)
            self.sessions[sid].version += 1

    def _cpu_drop(self, s: SessionKV, index: int) -> None:
        if index in s.cpu:
            s.cpu.discard(index)
            self.cpu_lru.pop((s.sid, index), None)


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


class OptimizedKVMemory(KVMemory):
    """The same memory with the ordered-dict LRU: only the victim search differs, so a mutant
    patching this class leaves the reference memory intact."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("lru", OrderedLRU)
        super().__init__(*args, **kwargs)
