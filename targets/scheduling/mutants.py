"""Real-bug mutants of the optimized scheduling policies and routers.

Each mutant replaces one small step of :mod:`.policies.optimized` or :mod:`.routers.optimized`
(:func:`fuzzkit.mutants.patch`), written the way the buggy code would have been written.
The Fairway mutants break the rules of the Fairway paper's scheduler (bypass budget against the
oldest waiter, aging relative to the request's own prefill time); the LPM ones model SGLang's
``schedule_policy.py`` (prefix matches recomputed every round; past 128 waiting requests it
falls back to FCFS); the router ones model bounded-load consistent hashing (Mirrokni, Thorup,
Zadimoghaddam 2018) as deployed in prefix-aware routers (SGLang router, llm-d), where the ring
and the load reports are state that must be kept current.

The last group lives where random workloads seldom go: past a size where the optimized code
changes path (the kinetic tournament's doubling, the lazy heap's rebuild), in a rare sequence
(a waiting turn whose blocks the full CPU tier drops) or at an edge value (an epsilon that is no
short binary fraction, a watermark of exactly 0 or 1); :mod:`.thresholds` and the strategy aim
there.  ``corpus/scheduling/regressions`` holds a shrunk case per mutant found by
``fuzzkit mutants --save-regressions``, which ``tests/test_regression_corpus.py`` replays: it
passes on the clean implementation and fails under its mutant.
"""

from __future__ import annotations

import math
import random
from typing import Any, Sequence

from fuzzkit.mutants import patch
from fuzzkit.target import Mutant
from fuzzkit.targets.scheduling import admission as A
from fuzzkit.targets.scheduling import memory as M
from fuzzkit.targets.scheduling.policies import optimized as P
from fuzzkit.targets.scheduling.routers import optimized as R

FAIRWAY_PAPER = ("Fairway prefill scheduling (docs/COMPONENTS.md §2): bypass budget β over the oldest "
                 "waiter")
SGLANG_LPM = "sglang python/sglang/srt/managers/schedule_policy.py (LPM, FCFS fallback past 128)"
KINETIC = ("kinetic tournament (Basch, Guibas, Hershberger 1999; Agarwal et al.) for Fairway's "
           "response-ratio argmax")
BOUNDED_CH = ("consistent hashing with bounded loads, Mirrokni et al. 2018; prefix-aware "
              "routing in sglang-router / llm-d")


def _side(obj: Any, name: str, default: Any) -> Any:
    return obj.__dict__.setdefault(name, default)


# ---------------------------------------------------------------------------------- Fairway


def _bypass_never_reset(self: P.FairwayPolicy) -> int:
    """The budget counts every bypass since the queue was created: the subtraction of work
    already charged to earlier oldest waiters was forgotten, so after β of bypass in total the
    policy degrades to FCFS for good."""
    return self._dispatched_total


def _cap_on_newest(self: P.FairwayPolicy) -> int:
    """The budget is measured on the *newest* waiter (the end of the queue), which nothing has
    bypassed yet: the cap never binds and the oldest request starves."""
    newest = max(self._age.values())
    return sum(cost for age, cost in self._dispatched_cost.items() if age > newest)


def _absolute_beats(self: P.KineticTournament, i: int, j: int, t: int) -> bool:
    """Aging by absolute wait: score ``wait - cost`` (shortest-job-first with linear aging)
    instead of the response ratio ``(wait + cost) / cost``, which ages relative to the request's
    own prefill time."""
    lhs = (t - self._arrival[i]) - self._cost[i]
    rhs = (t - self._arrival[j]) - self._cost[j]
    return lhs > rhs or (lhs == rhs and self._age[i] < self._age[j])


def _absolute_overtake(self: P.KineticTournament, winner: int, loser: int) -> float:
    """With ``wait - cost`` the order of two waiting requests never changes over time."""
    return P.NEVER


def _grow_without_rebuild(self: P.KineticTournament) -> None:
    """Doubling the tree copies the leaves but not the matches above them: every internal node
    starts empty, and only the paths that later inserts and removals replay are right again
    (the 9th request waiting at once is the first to see it)."""
    old, self._size = self._size, 2 * self._size
    old_win = self._win
    for name in ("_arrival", "_cost", "_age", "_rid"):
        getattr(self, name).extend([getattr(self, name)[0]] * old)
    self._free.extend(range(self._size - 1, old - 1, -1))
    self._alloc_nodes()
    self._win[self._size:self._size + old] = old_win[old:2 * old]


# -------------------------------------------------------------------------------------- LPM


def _stale_hits(self: P.LpmPolicy, rid: int) -> None:
    """Prefix matches computed once, when the request joined the queue, and never refreshed when
    the cache gained or lost its blocks."""


def _fallback_keeps_stale_order(self: P.LpmPolicy, now: int) -> int:
    """SGLang's waiting queue is a list sorted *in place* (a stable sort on the prefix-match
    length) while it is short; new requests are appended.  Past ``fallback_len`` it is no longer
    sorted and served from the front: the order of the last LPM sort, not arrival order (and
    ties in a sort keep that stale order too)."""
    queue: list[int] = _side(self, "_queue", [])
    known = set(queue)
    queue[:] = [rid for rid in queue if rid in self._records]
    queue += sorted((rid for rid in self._records if rid not in known), key=self._age.get)
    if self.fallback_len is None or len(self._records) <= self.fallback_len:
        queue.sort(key=lambda rid: -self._records[rid].hit)
    return queue[0]


def _compact_without_heapify(self: P._LazyHeap) -> None:
    """The lazy heap rebuilt from the live keys in dict order, without ``heapify``: the list is
    no heap any more, so after the first rebuild (2 * live + 32 entries) the top is no minimum."""
    if len(self._heap) > 2 * len(self._key) + P.COMPACT_SLACK:
        self._heap = [(k, rid) for rid, k in self._key.items()]


# ----------------------------------------------------------------------------- SPF and FCFS


def _salted_key(self: P.SpfPolicy, rid: int) -> tuple[int, int]:
    """Ties broken by whatever order a hash set or ``id()`` gives: a salt drawn per process."""
    salt = _side(self, "_salt", random.Random().random())
    return (self._records[rid].cost, hash((salt, rid)))


def _salted_admit(self: P.SpfPolicy, request: Any, age: int) -> None:
    self._by_cost.set(request.rid, _salted_key(self, request.rid))


def _salted_repriced(self: P.SpfPolicy, rid: int) -> None:
    self._by_cost.set(rid, _salted_key(self, rid))


def _fcfs_by_rid(self: P.FcfsPolicy, now: int) -> int:
    """"First come" by request id (creation order upstream) instead of the time the request
    joined *this* queue: a follow-up turn or a re-routed request jumps ahead."""
    return min(self._records)


def _dispatch_keeps_age(self: P.FcfsPolicy, rid: int) -> None:
    """Lazy deletion that forgets half the bookkeeping: the record goes, its age entry stays, so
    the deque still sees the request as waiting and hands it out again."""
    self._records.pop(rid, None)


# ---------------------------------------------------------------------------------- routers


def _owner_only(self: R.PrefixRouter, key: int, loads: Sequence[int]) -> int:
    """Pure consistent hashing: the load bound is computed but never consulted."""
    return self.owner(key)


def _scale_up_without_points(self: R.PrefixRouter) -> None:
    """The new instance is counted but its virtual nodes never enter the ring: it receives only
    overflow, and keys it should own stay on their old owners."""
    self.n_instances += 1


def _stale_loads(self: R.LeastLoadedRouter, key: int, loads: Sequence[int]) -> int:
    """Routes on the load report of the previous request (a cached metrics poll)."""
    previous = _side(self, "_previous", list(loads))
    seen = previous + [0] * (len(loads) - len(previous))
    self.__dict__["_previous"] = list(loads)
    return min(range(len(loads)), key=seen.__getitem__)


def _capacity_without_newcomer(self: R.PrefixRouter, loads: Sequence[int]) -> int:
    """``ceil((1+ε)·S/n)`` without the request being placed: with every instance at the average
    no instance is below capacity, and the walk falls off the ring."""
    p, q = self.epsilon.numerator, self.epsilon.denominator
    return -(-(q + p) * sum(loads) // (q * self.n_instances))


def _capacity_in_floating_point(self: R.PrefixRouter, loads: Sequence[int]) -> int:
    """The bounded-load capacity ``ceil((1 + eps)(S + 1) / n)`` in floating point: an epsilon
    that is not a short binary fraction (0.1, a subnormal, 1e-9) rounds the product across an
    integer, so the capacity is one off exactly when it is an integer, and a huge one
    overflows."""
    R.check_loads(loads, self.n_instances)
    return math.ceil((1 + float(self.epsilon)) * (sum(loads) + 1) / self.n_instances)


# ------------------------------------------------------------------- session KV memory

MEM = M.OptimizedKVMemory
PENELOPE = ("Penelope front-of-history eviction (docs/COMPONENTS.md §2): keep the shared prefix and a "
            "suffix")
BASIN = "Basin admission control (docs/COMPONENTS.md §2): reservations from an AIMD budget, FIFO"
_BLOCKS_TO_EVICT = M.KVMemory.blocks_to_evict


def _penelope_from_tail(self: M.KVMemory, victim: M.SessionKV, want: int) -> list[int]:
    """Penelope configured, tail-LRU code path taken: the later (costlier) blocks go."""
    if self.eviction == "penelope":
        return sorted(victim.resident)[::-1][:want]
    return _BLOCKS_TO_EVICT(self, victim, want)


def _penelope_hole_in_suffix(self: M.KVMemory, victim: M.SessionKV, want: int) -> list[int]:
    """Front eviction that starts one block too late: it keeps the first private block and
    punches the hole inside what should be the kept suffix."""
    if self.eviction == "penelope":
        ordered = sorted(victim.resident)
        return (ordered[1:] + ordered[:1])[:want]
    return _BLOCKS_TO_EVICT(self, victim, want)


def _drop_shared_ignoring_refs(self: M.KVMemory, s: M.SessionKV) -> None:
    """Dropping one session's claim frees the shared prefix outright, although other sessions
    still use it (refcount ignored)."""
    if not s.holds_shared:
        return
    for block in s.shared:
        self.shared_refs.pop(block, None)
    s.holds_shared = False


_PLAN = M.KVMemory.plan


def _hole_at_wrong_positions(self: M.KVMemory, sid: int, shared: tuple[int, ...],
                             prompt: int) -> M.Plan:
    """The hole is recomputed as if it started right after the shared prefix with no history
    before it: positions (and the context each token attends to) shifted to the front."""
    plan = _PLAN(self, sid, shared, prompt)
    start = len(shared) * self.block_size
    shifted, position = [], start
    for lo, hi in plan.recompute:
        if lo >= start:
            shifted.append((position, position + hi - lo))
            position += hi - lo
        else:
            shifted.append((lo, hi))
    return M.Plan(tuple(shifted), plan.reload_blocks, plan.hit_tokens)


def _reload_and_recompute(self: M.KVMemory, sid: int, shared: tuple[int, ...],
                          prompt: int) -> M.Plan:
    """Blocks reloaded from the CPU tier are recomputed as well (the reload is paid for and then
    thrown away): recomputed tokens exceed the hole minus what was reloaded."""
    plan = _PLAN(self, sid, shared, prompt)
    s = self.sessions.get(sid)
    if not plan.reload_blocks or s is None:
        return plan
    b = self.block_size
    extra = [(i * b, min((i + 1) * b, prompt)) for i in sorted(s.cpu) if i * b < prompt
             and i not in s.resident]
    ranges = M._merge(list(plan.recompute) + extra)
    return M.Plan(tuple(ranges), plan.reload_blocks,
                  prompt - sum(hi - lo for lo, hi in ranges))


def _most_recent_victim(self: M.OrderedLRU, exclude: int) -> Any:
    """The LRU list walked from the wrong end: the most recently used idle session is evicted."""
    for sid in reversed(self._order):
        if M.evictable(self.sessions[sid], exclude):
            return self.sessions[sid]
    return None


def _cpu_keep_without_invalidation(self: M.KVMemory, s: M.SessionKV, index: int) -> None:
    """When the CPU tier is full, its least recently stored block is dropped -- but the version
    of the session that owned it is not bumped, so a waiting turn of that session keeps the plan
    (and the price) it had while the block could still be reloaded."""
    if self.cpu_blocks <= 0:
        return
    s.cpu.add(index)
    self.cpu_lru[(s.sid, index)] = None
    self.cpu_lru.move_to_end((s.sid, index))
    while len(self.cpu_lru) > self.cpu_blocks:
        (sid, old), _ = self.cpu_lru.popitem(last=False)
        self.sessions[sid].cpu.discard(old)


# -------------------------------------------------------------------------------- admission

BASIN_CLASS = A.OPTIMIZED_ADMISSIONS["basin"]
_RELEASE_ONCE = A._Controller._release


def _release_twice(self: Any, sid: int, now: int) -> None:
    """The reservation is given back on the session's end *and* again on its last turn's."""
    amount = self.admitted[sid]
    _RELEASE_ONCE(self, sid, now)
    self.reserved -= amount
    self._record(now, "release", sid, amount)


def _release_never(self: Any, sid: int, now: int) -> None:
    """The session leaves, its reservation stays: the budget leaks until nothing is admitted."""
    self.admitted.pop(sid)


def _fits_before_newcomer(self: Any, reservation: int) -> bool:
    """The budget checked before adding the newcomer's reservation."""
    return self.reserved <= self.budget


def _first_that_fits(self: Any) -> Any:
    """Any held session that fits is admitted, not the head: small sessions overtake."""
    for sid in self.held:
        if self._fits(self._pending[sid]):
            return sid
    return None


def _decrease_without_floor(self: Any, now: int, cause: str) -> None:
    """AIMD without a floor: repeated congestion drives B(t) below b_min (towards 0)."""
    shrunk = self.budget * self.decrease.numerator // self.decrease.denominator
    self._set_budget(shrunk, now, cause)


def _adapt_watermark_inclusive(self: Any, now: int, free: int, total: int) -> None:
    """``free / total <= watermark`` counted as congestion: at exactly the watermark (a full
    pool under watermark 0, any pool under watermark 1, a quarter free under 0.25) the budget
    shrinks where it should have been allowed to grow."""
    if self._calm_since is None:
        self._calm_since = now
    if total > 0 and free * self.watermark.denominator <= self.watermark.numerator * total:
        self._congestion("low_free_kv", now)
    elif now - self._calm_since >= self.increase_every:
        self._calm_since = now
        if self._budget_binds():
            self._increase(now)


MUTANTS: list[Mutant] = [
    Mutant("fairway_bypass_never_reset", "optimized", "bypass budget never reset",
           FAIRWAY_PAPER, patch(P.FairwayPolicy, _bypass_of_oldest=_bypass_never_reset)),
    Mutant("fairway_cap_on_newest", "optimized", "bypass cap measured on the newest waiter",
           FAIRWAY_PAPER, patch(P.FairwayPolicy, _bypass_of_oldest=_cap_on_newest)),
    Mutant("fairway_absolute_aging", "optimized", "aging by absolute wait instead of relative",
           FAIRWAY_PAPER + "; response ratio (wait + p) / p",
           patch(P.KineticTournament, _beats=_absolute_beats,
                 overtake_tick=_absolute_overtake)),
    Mutant("lpm_stale_hits", "optimized", "stale prefix-hit lengths in the queue order",
           SGLANG_LPM, patch(P.LpmPolicy, _repriced=_stale_hits)),
    Mutant("lpm_fallback_stale_order", "optimized",
           "FCFS fallback keeps the stale LPM order", SGLANG_LPM,
           patch(P.LpmPolicy, _choose=_fallback_keeps_stale_order)),
    Mutant("spf_ties_nondeterministic", "optimized", "ties broken non-deterministically",
           "hash-set / id() iteration order in a priority key",
           patch(P.SpfPolicy, _admit=_salted_admit, _repriced=_salted_repriced)),
    Mutant("fcfs_by_request_id", "optimized", "FCFS by request id, not true arrival order",
           "FCFS must order by queue arrival (docs/COMPONENTS.md §2: 'FCFS (true arrival order)')",
           patch(P.FcfsPolicy, _choose=_fcfs_by_rid)),
    Mutant("fcfs_double_dispatch", "optimized", "lazy deletion dispatches a request twice",
           "lazy-deletion heap/deque bookkeeping",
           patch(P.FcfsPolicy, _dispatch=_dispatch_keeps_age)),
    Mutant("router_ignores_capacity", "optimized", "router ignores capacity", BOUNDED_CH,
           patch(R.PrefixRouter, route=_owner_only)),
    Mutant("ring_not_updated_on_scale_up", "optimized", "ring not updated on scale-up",
           BOUNDED_CH, patch(R.PrefixRouter, add_instance=_scale_up_without_points)),
    Mutant("capacity_without_newcomer", "optimized",
           "bounded-load capacity computed without the request being placed", BOUNDED_CH,
           patch(R.PrefixRouter, capacity=_capacity_without_newcomer)),
    Mutant("least_loaded_stale_loads", "optimized", "least-loaded routing on stale load reports",
           "router load metrics polled, not tracked per request (sglang-router, vLLM "
           "production-stack)", patch(R.LeastLoadedRouter, route=_stale_loads)),
    Mutant("penelope_evicts_tail", "optimized", "Penelope evicts from the tail", PENELOPE,
           patch(MEM, blocks_to_evict=_penelope_from_tail)),
    Mutant("penelope_hole_in_suffix", "optimized", "hole punched inside the kept suffix",
           PENELOPE, patch(MEM, blocks_to_evict=_penelope_hole_in_suffix)),
    Mutant("shared_prefix_evicted_while_referenced", "optimized",
           "shared prefix evicted while referenced", PENELOPE + "; vLLM/SGLang prefix refcounts",
           patch(MEM, _drop_shared=_drop_shared_ignoring_refs)),
    Mutant("hole_recomputed_at_wrong_positions", "optimized",
           "recomputed segment at wrong positions", PENELOPE,
           patch(MEM, plan=_hole_at_wrong_positions)),
    Mutant("cpu_reload_also_recomputed", "optimized",
           "recompute != hole - reload (CPU tier reload wasted)", PENELOPE + "; CPU tier",
           patch(MEM, plan=_reload_and_recompute)),
    Mutant("lru_evicts_most_recent", "optimized", "LRU list walked from the wrong end",
           "vLLM FreeKVCacheBlockQueue / SGLang radix LRU order",
           patch(M.OrderedLRU, victim=_most_recent_victim)),
    Mutant("basin_release_twice", "optimized", "reservation released twice", BASIN,
           patch(BASIN_CLASS, _release=_release_twice)),
    Mutant("basin_release_never", "optimized", "reservation never released", BASIN,
           patch(BASIN_CLASS, _release=_release_never)),
    Mutant("basin_budget_before_newcomer", "optimized",
           "budget checked before adding the newcomer's reservation", BASIN,
           patch(BASIN_CLASS, _fits=_fits_before_newcomer)),
    Mutant("basin_admits_out_of_fifo", "optimized", "admission out of FIFO order", BASIN,
           patch(BASIN_CLASS, _next_to_admit=_first_that_fits)),
    Mutant("basin_aimd_without_floor", "optimized", "AIMD without a floor", BASIN,
           patch(BASIN_CLASS, _decrease=_decrease_without_floor)),
    # past a threshold, in a rare sequence or at an edge value (the reach issue)
    Mutant("tournament_grow_without_rebuild", "optimized",
           "tree index grown by doubling without recomputing its internal nodes",
           KINETIC + "; array-backed segment / tournament trees resized in place",
           patch(P.KineticTournament, _grow=_grow_without_rebuild)),
    Mutant("lazy_heap_compaction_unheapified", "optimized",
           "priority queue rebuilt from a dict without heapify",
           "Python heapq: a rebuilt list must be heapify()-ed; lazy-deletion heap compaction "
           "in waiting queues (sglang / vLLM schedulers)",
           patch(P._LazyHeap, _compact=_compact_without_heapify)),
    Mutant("cpu_tier_drop_keeps_plan", "optimized",
           "stale cached lookup after the offload tier evicts (no invalidation)",
           PENELOPE + "; CPU KV offloading (vLLM KV connector / LMCache): a prefix lookup "
           "must be invalidated when the tier drops its blocks",
           patch(MEM, _cpu_keep=_cpu_keep_without_invalidation)),
    Mutant("capacity_in_floating_point", "optimized",
           "bounded-load capacity computed in floating point", BOUNDED_CH + "; float "
           "(1 + eps) * avg rounding at an integer capacity",
           patch(R.PrefixRouter, capacity=_capacity_in_floating_point)),
    Mutant("basin_watermark_inclusive", "optimized",
           "watermark comparison inclusive (<= for <) at the exact edge", BASIN,
           patch(BASIN_CLASS, _adapt=_adapt_watermark_inclusive)),
]
