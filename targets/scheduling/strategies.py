"""Cases for the scheduling target: workloads built from swarm-tested event sequences, sized at the
code's thresholds, with tiny costs and many ties.

Scheduling bugs hide in ties (equal arrival ticks, equal costs, equal response ratios), past the
sizes where the optimized code changes path (a lazy index's rebuild at ``2 * live + 32`` entries,
the kinetic tournament's doubling at its 9th waiting request, LPM's FCFS fallback past 128), at
parameter cut-offs (Fairway's short-queue limit, an explicit LPM fallback, a static session cap,
Basin's reservation clamp, the token budget against a prompt), at capacity edges (a KV pool
exactly full, a CPU tier one block over, a prefix cache as long as a document), right after a
scale-up, and in prefix-cache churn that changes a waiting request's hit (stale hits).

So a case is a sequence of workload events (:mod:`.workload_events`) drawn with a swarm
configuration (each case enables a random subset of the event kinds with random weights), its
sizes drawn with :func:`fuzzkit.reach.size` from the declared thresholds (:mod:`.thresholds`),
its parameter cut-offs drawn next to the workload sizes they cut (``q - 1, q, q + 1``), and its
time constants in units of the step overhead ``k0`` (so queue dynamics look alike whatever the
costs), with exact zeros (free tokens, zero think time, β = 0, empty caches and tiers) and huge
values (β = 10**9, production-size cost constants, an epsilon near the largest double).

Generation is part of every case's cost, so every strategy is built once: module constants, or
:func:`_ints` (cached per bounds) -- not a new ``one_of``/``sampled_from``/``map`` per draw.  A
time drawn "in ticks" comes from a constant strategy tagged with its unit (:func:`_tagged`) and
is multiplied here, and weighted choices are one integer draw (:func:`_choose`).  The choices
and the distribution are those of the per-draw strategies they replace.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

import numpy as np
from hypothesis import strategies as st

from fuzzkit import program, reach, values
from fuzzkit.reach import Threshold
from fuzzkit.targets.scheduling.cost import CostModel
from fuzzkit.targets.scheduling.thresholds import MAX_REQUESTS, largest_context
from fuzzkit.targets.scheduling.workload import Request, Trie
from fuzzkit.targets.scheduling.workload_events import KINDS, QUIET_STEPS, REQUEST_KINDS

BLOCK = 2
#: A case without a threshold to reach holds a few dozen requests at most (cheap cases: many).
BASE_REQUESTS = st.one_of(st.integers(1, 20), st.integers(1, 32))
#: Non-negative finite floats for the router's epsilon: zero (and -0.0), subnormals, tiny, huge.
EPSILON = values.Domain("float64")

Draw = Callable[[Any], Any]

BOOLEANS = st.booleans()


@functools.lru_cache(maxsize=4096)
def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    """``st.integers(lo, hi)``, built once per bounds (Hypothesis's own strategy cache costs more
    per lookup than a small draw)."""
    return st.integers(lo, hi)


@functools.lru_cache(maxsize=256)
def _sampled(options: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(options)


def _tagged(plain: st.SearchStrategy[int], in_ticks: st.SearchStrategy[int]
            ) -> st.SearchStrategy[tuple[int, bool]]:
    """``one_of(plain, in_ticks.map(lambda k: k * tick))`` for any ``tick``, built once: draws
    ``(k, whether k counts ticks)``; :func:`_untag` multiplies."""
    return st.one_of(plain.map(lambda k: (k, False)), in_ticks.map(lambda k: (k, True)))


def _untag(drawn: tuple[int, bool], tick: int) -> int:
    k, in_ticks = drawn
    return k * tick if in_ticks else k


_choose = values.choose  # a weighted choice that shrinks to the first item


def inputs(thresholds: Sequence[Threshold] = ()) -> st.SearchStrategy[dict[str, Any]]:
    """Scheduling cases aimed at ``thresholds`` (the target's and the fuzzed implementation's)."""
    return _inputs(tuple(thresholds))


# ------------------------------------------------------------------------------ small pieces


def _chance(draw: Draw, k: int, n: int) -> bool:
    """True in ``k`` of ``n`` draws (a weighted choice: Hypothesis favours small integers, so
    ``integers(0, n - 1) == 0`` would come out far more often than ``1/n``); shrinks to False."""
    return bool(_choose(draw, ((False, n - k), (True, k))))


def _near(draw: Draw, value: int, lo: int, base: st.SearchStrategy[int]) -> int:
    """A parameter next to a size it cuts: ``value - 1, value, value + 1`` in half the draws
    (never below ``lo``), ``base`` otherwise."""
    if draw(BOOLEANS):
        return int(draw(base))
    return max(lo, value + draw(_ints(-1, 1)))


def _cost(draw: Draw) -> dict[str, int]:
    """Tiny integer costs (ties everywhere), exact zeros, and now and then the production-size
    constants of :class:`.cost.CostModel` (large ticks, exact integer arithmetic all the same)."""
    return {key: _choose(draw, table) for key, table in _COSTS}


_REAL = CostModel()
_COSTS = (("k0", ((1, 3), (2, 3), (5, 3), (20, 2), (_REAL.k0, 1))),
          ("k1", ((0, 2), (1, 4), (3, 2), (_REAL.k1, 1))),
          ("k2", ((0, 4), (1, 3), (_REAL.k2 * 7, 1))),
          ("decode", ((0, 2), (1, 2), (2, 2), (_REAL.decode, 1))))
#: β: a usual value, any small one, or a few step overheads (in ticks)
_BETAS = st.one_of(st.sampled_from([0, 1, 3, 8, 20, 60, 10**9]).map(lambda k: (k, False)),
                   st.integers(0, 200).map(lambda k: (k, False)),
                   st.integers(0, 20).map(lambda k: (k, True)))


def _beta(draw: Draw, tick: int) -> int:
    return int(_untag(draw(_BETAS), tick))


def _limit(draw: Draw, burst: int) -> Optional[int]:
    """A queue-length cut-off (Fairway's short_queue, an explicit LPM fallback_len): none, a
    small one, or one next to the case's burst size."""
    kind = draw(_ints(0, 2))
    if kind == 0:
        return None
    if kind == 1:
        return int(draw(_SMALL_LIMITS))
    return max(0, burst + draw(_ints(-2, 1)))


_SMALL_LIMITS = st.sampled_from([0, 1, 2, 3, 4])


def _policy(draw: Draw, name: str, lpm_default: bool, burst: int, tick: int) -> dict[str, Any]:
    if name == "fairway":
        return {"name": "fairway", "beta": _beta(draw, tick), "short_queue": _limit(draw, burst)}
    if name == "lpm":
        # the stale-order fallback shows only when >= 2 requests stay behind a sort of <= n
        # requests and a burst then lengthens the queue: the burst and the limit are drawn together
        return {"name": "lpm"} if lpm_default else {"name": "lpm",
                                                     "fallback_len": _limit(draw, burst)}
    return {"name": name}


def _epsilon(draw: Draw) -> float:
    """The bounded-load slack: the usual values, or any non-negative finite double."""
    if draw(BOOLEANS):
        return float(draw(_USUAL_EPSILONS))
    x = float(draw(_EPSILONS))
    return x if x == 0 else abs(x)


_USUAL_EPSILONS = st.sampled_from([0.0, 0.25, 1.0, 0.1, 0.5, 0.3, 2.0])
_EPSILONS = values.element(EPSILON)
_ROUTERS = (("round_robin", 2), ("random", 1), ("least_loaded", 2), ("prefix", 4))
_VNODES = st.sampled_from([1, 2, 8, 64])
_PREFIX_BLOCKS = st.sampled_from([None, 1, 2, 4])


def _router(draw: Draw, thresholds: Sequence[Threshold]) -> dict[str, Any]:
    name = _choose(draw, _ROUTERS)
    if name != "prefix":
        return {"name": name}
    router: dict[str, Any] = {"name": "prefix", "epsilon": _epsilon(draw)}
    vnodes = reach.size(draw, "vnodes", thresholds, lo=1, hi=64, base=_VNODES)
    if vnodes != 64 or draw(BOOLEANS):
        router["vnodes"] = vnodes  # 64 is the default: omitted half the time
    blocks = draw(_PREFIX_BLOCKS)
    if blocks is not None:
        router["prefix_blocks"] = blocks
    return router


# ------------------------------------------------------------------------------- the workload

#: A case with more requests (or a larger burst) than this is large: cost matters.
LARGE = 48
#: Bursts up to this size draw each member with Hypothesis (so the shrinker simplifies them).
SMALL_BURST = 8

#: A handful of popular document lengths (one often empty: no shared prefix), by longest length.
_DOCUMENTS = {longest: st.lists(st.one_of(st.integers(0, 8), st.integers(0, longest)),
                                min_size=1, max_size=4) for longest in (8, 30)}
_GAP_STEPS = st.one_of(st.integers(0, 12), st.sampled_from([0, 1, 4, 5, 10]))
_PACES = st.sampled_from([1, 2, 4])
_SEEDS = st.integers(0, 2**32 - 1)
#: think times: a few ticks, or a few step overheads
_SESSION_THINK = _tagged(st.integers(0, 5), st.integers(0, 16))
_FOLLOW_UP_THINK = _tagged(st.integers(0, 5), st.integers(0, 8))


def _seeded(seed: int) -> Callable[[int, int], int]:
    """``pick(lo, hi)`` from a NumPy generator seeded by one Hypothesis draw."""
    rng = np.random.default_rng(seed)
    return lambda lo, hi: int(rng.integers(lo, hi, endpoint=True))



class _Workload:
    """Requests built event by event (prompts as prefix-trie block ids, see :mod:`.workload`):
    documents shared across first turns, follow-up turns that resend the earlier request's prompt
    and output plus a few new tokens, all at ticks in units of the step overhead ``tick``.

    The case has a size: ``limit`` requests that count.  Bursts count too, unless the case aims
    at a queue length: then they come on top, ``extra_bursts`` requests of bursts at most (and
    :data:`MAX_REQUESTS` in all).  The first burst has the ``burst`` size the policy's cut-offs
    were drawn next to; later ones draw theirs with ``size(largest)``.
    """

    def __init__(self, draw: Draw, tick: int, burst: int, size: Callable[[int], int],
                 extra_bursts: Optional[int], chains: bool) -> None:
        self.draw, self.tick, self.burst, self.size = draw, tick, burst, size
        # requests bursts may add on top of the counted ones (None: bursts count)
        self.extra_bursts = extra_bursts
        self.burst_requests = 0
        # sessions whose turns form chains (session KV memory keeps one history per session):
        # a follow-up continues a session's latest turn, and nothing fans out
        self.chains = chains
        self.followed: set[int] = set()
        self.limit = MAX_REQUESTS
        self.counted = 0
        self.now = 0
        self.trie = Trie()
        self.requests: list[Request] = []
        self.labels: list[list[Any]] = []
        self.scale_ups: list[int] = []
        self.bursts = 0
        self._counts = True  # whether the requests being added count towards ``limit``
        # a handful of popular documents (one often empty: no shared prefix) and now and then a
        # long one (chunked prefill, long hits) -- seldom under session memory, whose pool only
        # just holds the largest context: one long document there leaves room for many sessions
        # of short ones, and nothing gets evicted
        self.documents = draw(_DOCUMENTS[30 if not chains or _chance(draw, 1, 4) else 8])

    def full(self) -> bool:
        return self.counted >= self.limit or len(self.requests) >= MAX_REQUESTS

    # -- events ------------------------------------------------------------------------------

    def apply(self, kind: str) -> None:
        getattr(self, "_" + kind)()

    def _gap(self) -> None:
        """Move to a later tick: a few step overheads, or a single tick (queues build up while a
        step runs)."""
        draw = self.draw
        steps = draw(_GAP_STEPS)
        self.now += max(1, steps * self.tick + draw(_ints(0, self.tick)))

    def _straggle(self) -> None:
        """Now and then stay at the same tick: a straggler joins the group sent just before (a
        burst one or two larger than drawn, ties of equal arrival)."""
        if self.draw(_ints(0, 5)):
            self._gap()

    def _arrival(self) -> None:
        self._straggle()
        self._first_turn(self.now, self._pick(-1, len(self.documents) - 1))

    def _stream(self) -> None:
        """Steady load near saturation: first turns one after another at about the pace of a
        step, so a queue stays non-empty for a long time (an old request with a short hit is
        passed again and again under LPM or SPF, its bypass budget fills under Fairway)."""
        draw = self.draw
        pace = max(1, self.tick * draw(_PACES) // 2)
        # one document (a spike of queries on a popular one) or each its own
        doc = self._pick(-2, len(self.documents) - 1)
        for _ in range(draw(_ints(3, 12))):
            self._gap_of(pace)
            self._first_turn(self.now, doc if doc > -2 else self._pick(-1, len(self.documents) - 1))

    def _gap_of(self, ticks: int) -> None:
        self.now += max(1, ticks + self.draw(_ints(-1, 1)))

    def _session(self) -> None:
        """Agent sessions started together: one to three first turns at one tick, then a few
        rounds of follow-ups, each released after its think time once the previous turn of its
        session has finished (closed loop).  The sessions of a group share their output lengths
        and think times, so they finish and come back at the same ticks (ties in the LRU order
        of idle sessions); between turns a session is idle and its KV is what eviction takes."""
        draw = self.draw
        self._straggle()
        out = draw(_ints(1, 4))
        sessions = []
        for _ in range(draw(_ints(1, 3))):
            if self._first_turn(self.now, self._pick(-1, len(self.documents) - 1), out=out):
                sessions.append(len(self.requests) - 1)
        for _ in range(draw(_ints(1, 3))):
            think = _untag(draw(_SESSION_THINK), self.tick)
            out = draw(_ints(1, 4))
            for i, parent in enumerate(sessions):
                if self._next_turn(parent, self.now, think, out=out):
                    sessions[i] = len(self.requests) - 1

    def _burst(self) -> None:
        self._gap()
        if self.extra_bursts is None:
            largest = self.limit - self.counted
        else:
            largest = max(self.burst, self.extra_bursts) - self.burst_requests
        if self.bursts and largest < 2:
            return
        size = self.burst if self.bursts == 0 else self.size(largest)
        self.bursts += 1
        self._counts = self.extra_bursts is None
        # a large burst's members come from a seeded generator (one draw, not a hundred): cheap
        # to generate, and the shrinker drops members instead of simplifying them
        pick = self._pick if size <= SMALL_BURST else _seeded(self.draw(_SEEDS))
        for _ in range(size):
            self._first_turn(self.now, pick(-1, len(self.documents) - 1), pick=pick)
        self._counts = True

    def _churn(self) -> None:
        self._straggle()
        self._first_turn(self.now, -1, ("new", len(self.requests)), self.draw(_ints(2, 24)))

    def _follow_up(self, count: int = 1) -> None:
        if not self.requests:
            self._arrival()
            return
        draw = self.draw
        if self.chains:
            leaves = [i for i in range(len(self.requests)) if i not in self.followed]
            parent, count = leaves[draw(_ints(0, len(leaves) - 1))], 1
        else:
            parent = draw(_ints(0, len(self.requests) - 1))
        self.now += draw(_ints(0, 2)) * self.tick
        for _ in range(count):
            self._next_turn(parent, self.now, _untag(draw(_FOLLOW_UP_THINK), self.tick))

    def _fan_out(self) -> None:
        self._follow_up(self.draw(_ints(2, 4)))

    def _quiet(self) -> None:
        self.now += self.draw(_ints(QUIET_STEPS, 2 * QUIET_STEPS)) * self.tick

    def _scale_up(self) -> None:
        if len(self.scale_ups) < 3:
            self.scale_ups.append(self.now + self.draw(_ints(0, 1)))

    # -- requests ----------------------------------------------------------------------------

    def _add(self, request: Request, labels: list[Any]) -> bool:
        """Add ``request`` unless the case is full; whether it was added."""
        if len(self.requests) >= MAX_REQUESTS or (self._counts and self.counted >= self.limit):
            return False
        self.requests.append(request)
        self.labels.append(labels)
        self.counted += self._counts
        self.burst_requests += not self._counts
        return True

    def _pick(self, lo: int, hi: int) -> int:
        return int(self.draw(_ints(lo, hi)))

    def _first_turn(self, arrival: int, doc: int, label: Any = None, doc_tokens: int = 0, *,
                    pick: Optional[Callable[[int, int], int]] = None,
                    out: Optional[int] = None) -> bool:
        """A new session's first turn on popular document ``doc`` (none if < 0), or on a new
        document ``label`` of ``doc_tokens`` tokens; whether it was added."""
        pick = pick or self._pick
        rid = len(self.requests)
        if doc >= 0:
            label, doc_tokens = ("d", doc), self.documents[doc]
        private = pick(0 if doc_tokens else 1, 5)  # 0: the prompt is the document
        if out is None:
            out = pick(1, 4 if pick(0, 1) else 12)
        prompt = doc_tokens + private
        labels: list[Any] = [(label, j) for j in range(doc_tokens // BLOCK)]
        labels += [("r", rid, j) for j in range(len(labels), (prompt + out) // BLOCK)]
        return self._add(Request(rid, arrival, prompt, out, tuple(self.trie.path(labels)),
                                 shared=doc_tokens // BLOCK * BLOCK), labels)

    def _next_turn(self, parent: int, arrival: int, think: int,
                   out: Optional[int] = None) -> bool:
        """The next turn after request ``parent`` (its prompt and output plus a few new
        tokens); whether it was added."""
        draw = self.draw
        rid = len(self.requests)
        previous = self.requests[parent]
        new = draw(_ints(0, 6))  # 0: the new turn adds nothing (a retry of the same context)
        if out is None:
            out = draw(_ints(1, 4))
        prompt = previous.prompt + previous.output + new
        labels = list(self.labels[parent])
        labels += [("r", rid, j) for j in range(len(labels), (prompt + out) // BLOCK)]
        added = self._add(Request(rid, arrival, prompt, out, tuple(self.trie.path(labels)),
                                  after=parent, think=think, shared=previous.shared), labels)
        if added:
            self.followed.add(parent)
        return added


def _events(draw: Draw, workload: _Workload, requests: int, burst: bool) -> None:
    """Apply swarm-chosen events until the workload holds ``requests`` counted requests; with
    ``burst``, the case's designed burst comes at a drawn point of the sequence if the swarm has
    not sent one by then (and no scale-up splits the queue)."""
    # session memory is about sessions that come back: there, agent sessions are the default
    table = [(kind, 3 * w if workload.chains and kind == "session" else w) for kind, w in KINDS]
    config = program.swarm(draw, table)
    if burst:
        config.pop("scale_up", None)  # one queue for the whole case
    if workload.chains:
        config.pop("fan_out", None)
    if not any(kind in config for kind in REQUEST_KINDS):
        config["arrival"] = dict(KINDS)["arrival"]
    # program.weighted's choice (one integer draw), without a flatmap strategy per case
    known = dict(KINDS)
    enabled = tuple((kind, w) for kind, w in config.items() if w > 0 and kind in known)
    at = draw(_ints(0, min(requests - 1, 8))) if burst else -1
    workload.limit = requests
    for step in range(requests + 12):  # quiet phases and scale-ups add no request
        if step == at and not workload.bursts:
            if workload.extra_bursts is None:
                workload.limit = max(requests, workload.counted + workload.burst)
            workload.apply("burst")
        if workload.full():
            break
        workload.apply(_choose(draw, enabled))
    if not workload.requests:
        workload.apply("arrival")


# ---------------------------------------------------------------------------------- the case


def _memory(draw: Draw, requests: list[dict[str, Any]], cost: dict[str, int],
            thresholds: Sequence[Threshold]) -> dict[str, Any]:
    """Session KV memory: a pool the largest turn fills exactly, or a few blocks more (nearly
    every turn evicts somebody's history), a CPU tier around its capacity edge, and a reload
    cost next to a block's recompute cost (where reloading stops being cheaper)."""
    largest = largest_context(requests, BLOCK)
    slack = reach.size(draw, "kv_slack", thresholds, lo=0, hi=16, base=_KV_SLACKS)
    cpu = reach.size(draw, "cpu_blocks", thresholds, lo=0, hi=16, base=_CPU_BLOCKS)
    model = CostModel(**cost)
    block_cost = model.chunk(BLOCK, BLOCK * draw(_ints(0, 4)))
    reload, near_block_cost = draw(_RELOADS)
    if near_block_cost:
        reload = max(0, block_cost + reload)
    return {"kv_blocks": largest + slack, "eviction": draw(_EVICTIONS),
            "cpu_blocks": cpu, "reload_per_block": reload}


_KV_SLACKS = st.sampled_from([0, 1, 2, 4, 12])
_CPU_BLOCKS = st.sampled_from([0, 2, 8, 1])
#: a reload cost per block: a usual one, or next to a block's recompute cost (d in -1..1)
_RELOADS = st.one_of(st.sampled_from([0, 1, 50]).map(lambda k: (k, False)),
                     st.integers(-1, 1).map(lambda d: (d, True)))
_EVICTIONS = st.sampled_from(["tail_lru", "session", "penelope"])
_FRACTIONS = st.floats(0.0, 1.0)
_FRACTION_KINDS = (("usual", 3), ("zero", 1), ("one", 1), ("any", 2))


def _fraction(draw: Draw, usual: Sequence[float]) -> float:
    """A float in [0, 1] (an exact decimal for the controller): usual values, the edges, any."""
    kind = _choose(draw, _FRACTION_KINDS)
    if kind == "usual":
        return float(draw(_sampled(tuple(usual))))
    if kind == "any":
        return float(draw(_FRACTIONS))
    return 0.0 if kind == "zero" else 1.0


def _admission(draw: Draw, requests: list[dict[str, Any]], burst: int, tick: int,
               memory: bool) -> Optional[dict[str, Any]]:
    """None, 'none', a static session cap (a few sessions, or next to the burst of sessions it
    cuts), or Basin (most often where there is session memory to congest): its reservation clamp
    ``b_min`` small or next to the largest session's peak, its AIMD factor and watermark the usual
    ones, the edges 0 and 1, or any fraction."""
    kind = _choose(draw, ((None, 1), ("none", 1), ("static_cap", 2), ("basin", 4 if memory else 1)))
    if kind is None:
        return None
    if kind == "none":
        return {"name": "none"}
    if kind == "static_cap":
        return {"name": "static_cap",
                "max_sessions": _near(draw, burst, 1, _ints(1, 3))}
    peak = largest_context(requests, BLOCK)
    lo = _near(draw, peak, 0, _ints(2, 8))
    hi = lo + draw(_ints(0, 16))
    basin: dict[str, Any] = {
        "name": "basin", "b_min": lo, "b_max": hi,
        "increase": draw(_INCREASES),
        "increase_every": draw(_ints(0, 5)) * tick,
        "decrease": _fraction(draw, [0.5, 0.75]),
        "cooldown": draw(_ints(0, 3)) * tick,
        "watermark": _fraction(draw, [0.25])}
    if _chance(draw, 1, 4):
        basin["b_init"] = draw(_ints(lo, hi))
    return basin


_INCREASES = st.sampled_from([2, 0, 1, 5])
_BUDGETS = st.sampled_from([1, 2, 3, 5, 8, 64])
_CACHE_BLOCKS = st.sampled_from([0, 1, 2, 3, 4, 8, 64])


def _budget(draw: Draw, requests: list[Request], least: int) -> int:
    """Token budgets of a few tokens (chunked prefill), or one next to a prompt (a prompt that
    just fits, or needs a second chunk), or a large one; at least ``least``."""
    if _chance(draw, 1, 4):
        prompt = requests[draw(_ints(0, len(requests) - 1))].prompt
        return max(least, prompt + draw(_ints(-1, 1)))
    return max(least, int(draw(_BUDGETS)))


def _cache_blocks(draw: Draw, workload: _Workload) -> int:
    """Prefix caches of a few blocks (evictions on every insert), or exactly as long as a
    document (one block less or more: it just fits, or its chain is cut), or large."""
    if _chance(draw, 1, 3):
        doc = workload.documents[draw(_ints(0, len(workload.documents) - 1))]
        return max(0, doc // BLOCK + draw(_ints(-1, 1)))
    return int(draw(_CACHE_BLOCKS))


#: What a case aims at, with weights.  ``general`` cases are small and exercise everything
#: (ties, routers, scale-ups, session memory, admission control); the others put one queue past
#: one policy threshold: a single instance that nothing holds back and nothing scales up, so that
#: a burst waits in one queue and every request goes through it.
AIMS: tuple[tuple[str, int], ...] = (
    ("general", 6),
    ("fairway_queue", 2),  # Fairway past its kinetic tournament's doublings
    ("lpm_queue", 2),      # LPM (default fallback_len) past 128 waiting requests
    ("pushes", 1),         # LPM / SPF past their lazy indexes' rebuild points
)
#: The general cases' policies (LPM without fallback_len: its default).
POLICIES = (("fcfs", 2), ("lpm", 3), ("spf", 2), ("fairway", 3))


def _aimed_policy(draw: Draw, aim: str) -> tuple[str, bool]:
    """(policy name, whether an LPM case keeps the default fallback_len) for an aim."""
    if aim == "fairway_queue":
        return "fairway", False
    if aim == "lpm_queue":
        return "lpm", True
    if aim == "pushes":
        return str(draw(_PUSH_POLICIES)), False
    name = str(_choose(draw, POLICIES))
    return name, name == "lpm" and draw(BOOLEANS)


_PUSH_POLICIES = st.sampled_from(["spf", "lpm"])
_INSTANCES = st.sampled_from([2, 1, 3, 2])
_SEEDS_OF_CONFIG = st.integers(0, 7)


@functools.lru_cache(maxsize=128)
def _max_running(budget: int) -> st.SearchStrategy[int]:
    """A few sequences, or up to 16 (never more than the budget)."""
    return st.one_of(st.integers(1, min(budget, 4)), st.integers(1, min(budget, 16)))


@st.composite
def _inputs(draw: Draw, thresholds: tuple[Threshold, ...]) -> dict[str, Any]:
    cost = _cost(draw)
    tick = cost["k0"]
    aim = str(_choose(draw, AIMS))
    focus = aim != "general"
    name, lpm_default = _aimed_policy(draw, aim)
    instances = 1 if focus else reach.size(draw, "instances", thresholds, lo=1, hi=4,
                                           base=_INSTANCES)
    # the burst size first: the policy's queue-length cut-offs are drawn next to it
    queue = aim if aim in ("fairway_queue", "lpm_queue") else "queue"

    def burst_size(hi: int) -> int:
        return reach.size(draw, queue, thresholds, lo=2, hi=max(2, hi), base=_ints(2, 10))

    burst = burst_size(MAX_REQUESTS)
    policy = _policy(draw, name, lpm_default, burst, tick)
    if aim == "pushes":
        count = reach.size(draw, "pushes", thresholds, lo=1, hi=MAX_REQUESTS,
                           base=BASE_REQUESTS)
    else:
        count = draw(BASE_REQUESTS)
    # session memory in a third of the cases, but in one in eight of the large ones (memory
    # mode reprices every waiting request at every step: a long queue costs seconds)
    memory = _chance(draw, 1, 3 if max(count, burst) <= LARGE else 8)
    # a case aimed at a queue length sends its bursts on top of its counted requests, up to the
    # threshold's cap; the others count them
    caps = [t.cap or MAX_REQUESTS for t in thresholds if t.size == queue]
    workload = _Workload(draw, tick, burst, burst_size, chains=memory,
                         extra_bursts=max(caps) if caps else None)
    _events(draw, workload, count, focus)
    requests = [r.to_json() for r in workload.requests]
    # a long queue in memory mode reprices every waiting request at every step: large memory
    # cases get budgets of 8+ tokens (fewer steps); small ones carry the tiny budgets
    large = len(requests) > LARGE
    budget = _budget(draw, workload.requests, 8 if memory and large else 1)
    config: dict[str, Any] = {
        "block_size": BLOCK,
        "instances": instances,
        "token_budget": budget,
        "max_running": draw(_max_running(budget)),
        "cache_blocks": _cache_blocks(draw, workload),
        "seed": draw(_SEEDS_OF_CONFIG),
        "scale_ups": workload.scale_ups,
        "policy": policy,
        "router": _router(draw, thresholds),
        "cost": cost,
    }
    if _chance(draw, 1, 8):
        config["serial"] = True  # the textbook single-server model: one whole prefill per step
    if memory:
        config["memory"] = _memory(draw, requests, cost, thresholds)
    if memory or _chance(draw, 1, 4):
        admission = _admission(draw, requests, burst, tick, memory)
        if admission is not None and not (focus and admission["name"] != "none"):
            config["admission"] = admission
    return {"config": config, "requests": requests}
