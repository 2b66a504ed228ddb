"""Optimized prefill policies: the decisions of :mod:`.reference`, ties included, in polylog time.

* fcfs: the push order is the age order, so the oldest waiter is the front of a deque whose
  dispatched entries are dropped lazily -- amortized O(1).
* lpm, spf: a binary heap keyed ``(-hit, age)`` / ``(cost, age)`` with lazy deletion (a reprice
  pushes a fresh entry; stale entries are skipped at the top and purged when they outnumber the
  live ones) -- amortized O(log n).  lpm's long-queue fallback uses the fcfs deque.
* fairway: the response-ratio argmax is a kinetic tournament tree (:class:`KineticTournament`),
  the bypass of the oldest waiter a difference of two running sums -- amortized polylog.

"age" below is the push sequence number: pushes are checked to come in strictly ascending
``(arrival, rid)`` order, so comparing sequence numbers is comparing ``(arrival, rid)``.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque

from .base import PrefillPolicy, Waiting
from .reference import DEFAULT_FALLBACK, build, check_count, check_price, check_push

# A certificate that never fails.  Only ever *compared* with int ticks (Python compares int and
# float infinity exactly); no float arithmetic enters a decision.
NEVER = math.inf

#: Lazy indexes (the age deque, the lazy heaps) are rebuilt from their live entries once they hold
#: more than ``2 * live + COMPACT_SLACK`` entries: the slack keeps small queues from rebuilding on
#: every dispatch.  A size where the code changes path (:mod:`fuzzkit.targets.scheduling.thresholds`).
COMPACT_SLACK = 32
#: Leaves a :class:`KineticTournament` starts with; the next insert doubles the tree (``_grow``).
TOURNAMENT_LEAVES = 8


# ------------------------------------------------------------------------------ structures


class _AgeOrder:
    """Waiting requests in push order; dispatched entries are dropped lazily from the front."""

    def __init__(self) -> None:
        self._entries: deque[tuple[int, int]] = deque()  # (age, rid)

    def append(self, age: int, rid: int) -> None:
        self._entries.append((age, rid))

    def oldest(self, age_of: dict[int, int]) -> int:
        """The rid of the oldest waiting request (``age_of``: rid -> age of the waiting ones)."""
        entries = self._entries
        while age_of.get(entries[0][1]) != entries[0][0]:
            entries.popleft()
        return entries[0][1]

    def compact(self, age_of: dict[int, int]) -> None:
        """Drop dead entries once they dominate, so a starved oldest cannot make the deque grow
        with every push (amortized O(1): each entry is copied O(1) times)."""
        if len(self._entries) > 2 * len(age_of) + COMPACT_SLACK:
            self._entries = deque(e for e in self._entries if age_of.get(e[1]) == e[0])


class _LazyHeap:
    """A min-heap of rids by a per-rid key; ``set`` overrides, stale entries are skipped."""

    def __init__(self) -> None:
        self._heap: list[tuple[tuple[int, int], int]] = []
        self._key: dict[int, tuple[int, int]] = {}

    def set(self, rid: int, key: tuple[int, int]) -> None:
        self._key[rid] = key
        heapq.heappush(self._heap, (key, rid))
        self._compact()

    def discard(self, rid: int) -> None:
        del self._key[rid]
        self._compact()

    def peek(self) -> int:
        """The rid with the smallest current key (keys embed the unique age, so no two rids tie)."""
        heap, key = self._heap, self._key
        while key.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][1]

    def _compact(self) -> None:
        """Rebuild from the live keys when stale entries outnumber them: bounded memory and
        amortized O(log n) per operation."""
        if len(self._heap) > 2 * len(self._key) + COMPACT_SLACK:
            self._heap = [(k, rid) for rid, k in self._key.items()]
            heapq.heapify(self._heap)


class KineticTournament:
    """Argmax of the response ratio over a changing set of requests as time moves forward.

    Request ``i`` (arrival ``a_i``, cost ``c_i``) is the line ``f_i(t) = (t - a_i) / c_i``; ``i``
    beats ``j`` at tick ``t`` iff ``(t - a_i)·c_j > (t - a_j)·c_i``, or equal and ``i`` is older.

    A segment tree over slots: each internal node holds the winner of its subtree at the current
    time ``T`` and a certificate -- the first integer tick at which its loser (the other child's
    winner) beats it -- plus the minimum certificate in its subtree.  Advancing to ``now``
    descends only into subtrees whose minimum certificate is ``<= now`` and replays the matches
    there bottom-up; a node whose certificate holds and whose children kept their winners keeps
    its winner, so everything else stays valid.  Insert / remove / reprice replay one leaf-to-root
    path at ``T``.  With linear motion each certificate failure is a crossing of two lines; the
    kinetic-tournament analysis (Basch-Guibas-Hershberger; Agarwal et al.) bounds the failures
    over m insertions/deletions (a reprice is one of each) by O(m log n), each replayed in
    O(log n): polylog amortized per operation (benchmarks/policy_scaling.py measures it).

    Slots live in flat lists (leaf of slot ``s`` is node ``size + s``); the tree doubles when full
    and reuses freed slots.
    """

    def __init__(self, capacity: int = TOURNAMENT_LEAVES) -> None:
        self._size = 2  # at least one internal node above the leaves
        while self._size < capacity:
            self._size *= 2
        self._time: int | None = None
        self._arrival = [0] * self._size
        self._cost = [1] * self._size
        self._age = [0] * self._size
        self._rid = [0] * self._size
        self._free = list(range(self._size - 1, -1, -1))
        self._alloc_nodes()

    # -- public ---------------------------------------------------------------------------

    def insert(self, rid: int, arrival: int, cost: int, age: int) -> int:
        """Add a line; returns its slot (needed to remove or reprice it)."""
        if self._time is None:
            self._time = arrival
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._rid[slot], self._arrival[slot], self._cost[slot], self._age[slot] = rid, arrival, cost, age
        self._win[self._size + slot] = slot
        self._replay_path(self._size + slot)
        return slot

    def remove(self, slot: int) -> None:
        self._win[self._size + slot] = -1
        self._free.append(slot)
        self._replay_path(self._size + slot)

    def set_cost(self, slot: int, cost: int) -> None:
        """Reprice: the line's slope changes, so replay its path."""
        self._cost[slot] = cost
        self._replay_path(self._size + slot)

    def advance(self, now: int) -> None:
        """Make the stored winners correct at tick ``now``.  Time is expected to be monotone; a
        step back (a caller outside the protocol) is handled by a full rebuild, so decisions
        still match the reference."""
        if self._time is None or now < self._time:  # pragma: no cover - sim time is monotone
            self._time = now
            self._rebuild()
            return
        self._time = now
        if self._minfail[1] <= now:
            self._replay_failed(1)

    def leader(self) -> int | None:
        """The rid with the highest response ratio at the current time (None when empty)."""
        slot = self._win[1]
        return None if slot < 0 else self._rid[slot]

    def overtake_tick(self, winner: int, loser: int) -> float | int:
        """First integer tick ``t`` at which slot ``loser`` beats slot ``winner`` (NEVER if it
        never does), given ``winner`` beats ``loser`` at the current time.

        ``D(t) = (t - a_l)·c_w - (t - a_w)·c_l = s·t - b`` with ``s = c_w - c_l`` and
        ``b = a_l·c_w - a_w·c_l``: the loser only ever catches up if ``s > 0`` (it is cheaper).
        It wins once ``D(t) > 0``, first at ``b // s + 1``, or already at ``D(t) == 0`` (one tick
        earlier, only when ``s`` divides ``b``) if it is the older one.  Integer arithmetic only.
        """
        cost_w, cost_l = self._cost[winner], self._cost[loser]
        s = cost_w - cost_l
        if s <= 0:
            return NEVER
        b = self._arrival[loser] * cost_w - self._arrival[winner] * cost_l
        t = b // s + 1
        if self._age[loser] < self._age[winner] and (t - 1) * s == b:
            t -= 1
        return t

    # -- internals ------------------------------------------------------------------------

    def _alloc_nodes(self) -> None:
        n = 2 * self._size
        self._win = [-1] * n  # winning slot of the node's subtree, -1 if empty
        self._fail = [NEVER] * n  # tick the node's certificate fails
        self._minfail = [NEVER] * n  # min certificate in the subtree

    def _beats(self, i: int, j: int, t: int) -> bool:
        """Slot ``i`` has the higher response ratio at ``t`` (exact cross-multiplication)."""
        lhs = (t - self._arrival[i]) * self._cost[j]
        rhs = (t - self._arrival[j]) * self._cost[i]
        return lhs > rhs or (lhs == rhs and self._age[i] < self._age[j])

    def _match(self, node: int) -> None:
        """Replay the match at ``node`` at the current time from its children's winners."""
        win, left, right = self._win, 2 * node, 2 * node + 1
        a, b = win[left], win[right]
        if a < 0 or b < 0:
            win[node], fail = max(a, b), NEVER
        else:
            if self._beats(b, a, self._time):  # type: ignore[arg-type]
                a, b = b, a
            win[node], fail = a, self.overtake_tick(a, b)
        self._fail[node] = fail
        self._minfail[node] = min(fail, self._minfail[left], self._minfail[right])

    def _replay_path(self, leaf: int) -> None:
        node = leaf >> 1
        while node:
            self._match(node)
            node >>= 1

    def _replay_failed(self, node: int) -> None:
        """Replay every match in ``node``'s subtree whose certificate failed by now."""
        now, minfail = self._time, self._minfail
        for child in (2 * node, 2 * node + 1):
            if child < self._size and minfail[child] <= now:  # type: ignore[operator]
                self._replay_failed(child)
        self._match(node)

    def _rebuild(self) -> None:
        for node in range(self._size - 1, 0, -1):
            self._match(node)

    def _grow(self) -> None:
        """Double the slots (amortized O(1) per insert) and rebuild at the current time."""
        old, self._size = self._size, 2 * self._size
        old_win = self._win
        for name in ("_arrival", "_cost", "_age", "_rid"):
            getattr(self, name).extend([getattr(self, name)[0]] * old)
        self._free.extend(range(self._size - 1, old - 1, -1))
        self._alloc_nodes()
        self._win[self._size:self._size + old] = old_win[old:2 * old]
        self._rebuild()


# ------------------------------------------------------------------------------ policies


class _IndexedQueue:
    """Records and ages shared by the optimized policies; subclasses keep their own index."""

    name = ""

    def __init__(self) -> None:
        self._records: dict[int, Waiting] = {}
        self._age: dict[int, int] = {}  # rid -> push sequence number of the waiting ones
        self._next_age = 0
        self._last_key: tuple[int, int] | None = None

    def push(self, request: Waiting) -> None:
        """Add ``request``; pushes come in ``(arrival, rid)`` order."""
        check_push(request, self._last_key, self._records)
        self._last_key = request.key
        age, self._next_age = self._next_age, self._next_age + 1
        self._records[request.rid] = request
        self._age[request.rid] = age
        self._admit(request, age)

    def reprice(self, rid: int, cost: int, hit: int) -> None:
        """Replace a waiting request's cost and hit (KeyError if ``rid`` is not waiting)."""
        check_price(cost, hit)
        self._records[rid] = dataclasses.replace(self._records[rid], cost=cost, hit=hit)
        self._repriced(rid)

    def pop(self, now: int) -> int:
        """Remove and return the rid the policy prefills next at tick ``now``."""
        if not self._records:  # pragma: no cover - the simulator pops a non-empty queue
            raise IndexError("pop from an empty prefill queue")
        rid = self._choose(now)
        self._dispatch(rid)
        return rid

    def __len__(self) -> int:
        return len(self._records)

    def _admit(self, request: Waiting, age: int) -> None:
        raise NotImplementedError

    def _repriced(self, rid: int) -> None:
        """Index update after a reprice; nothing by default (fcfs ignores prices)."""

    def _choose(self, now: int) -> int:
        raise NotImplementedError

    def _dispatch(self, rid: int) -> None:
        del self._records[rid]
        del self._age[rid]


class FcfsPolicy(_IndexedQueue):
    """First come, first served: the front of the push-order deque."""

    name = "fcfs"

    def __init__(self) -> None:
        super().__init__()
        self._order = _AgeOrder()

    def _admit(self, request: Waiting, age: int) -> None:
        self._order.append(age, request.rid)

    def _choose(self, now: int) -> int:
        return self._order.oldest(self._age)


class LpmPolicy(_IndexedQueue):
    """Longest prefix match: a lazy max-heap on ``hit`` (older on ties); FCFS past
    ``fallback_len`` waiting requests (None: never)."""

    name = "lpm"

    def __init__(self, *, fallback_len: int | None = DEFAULT_FALLBACK) -> None:
        check_count("fallback_len", fallback_len, allow_none=True)
        super().__init__()
        self.fallback_len = fallback_len
        self._by_hit = _LazyHeap()
        self._order = _AgeOrder()

    def _admit(self, request: Waiting, age: int) -> None:
        self._by_hit.set(request.rid, (-request.hit, age))
        self._order.append(age, request.rid)

    def _repriced(self, rid: int) -> None:
        """Re-key on the new hit: ordering on the push-time hit (stale hits) is the classic LPM
        bug, so this path stays one small method."""
        self._by_hit.set(rid, (-self._records[rid].hit, self._age[rid]))

    def _choose(self, now: int) -> int:
        if self.fallback_len is not None and len(self._records) > self.fallback_len:
            return self._order.oldest(self._age)
        return self._by_hit.peek()

    def _dispatch(self, rid: int) -> None:
        super()._dispatch(rid)
        self._by_hit.discard(rid)
        self._order.compact(self._age)


class SpfPolicy(_IndexedQueue):
    """Shortest prefill first: a lazy min-heap on ``cost`` (older on ties)."""

    name = "spf"

    def __init__(self) -> None:
        super().__init__()
        self._by_cost = _LazyHeap()

    def _admit(self, request: Waiting, age: int) -> None:
        self._by_cost.set(request.rid, (request.cost, age))

    def _repriced(self, rid: int) -> None:
        self._by_cost.set(rid, (self._records[rid].cost, self._age[rid]))

    def _choose(self, now: int) -> int:
        return self._by_cost.peek()

    def _dispatch(self, rid: int) -> None:
        super()._dispatch(rid)
        self._by_cost.discard(rid)


class FairwayPolicy(_IndexedQueue):
    """Fairway: highest response ratio first, with a bypass budget protecting the oldest waiter.

    Same decisions as :class:`.reference.FairwayPolicy` (see its docstring for the rule).
    ``bypass(q)`` is the sum of the costs, at dispatch, of every dispatched request that arrived
    after ``q`` -- *not* "a counter reset to 0 when the oldest is served", which would let the new
    oldest be bypassed by up to 2·beta (work dispatched ahead of the old oldest bypassed it too).

    Pushes come in age order, so for the oldest waiter ``o`` every request pushed before it has
    been dispatched, and ``bypass(o) = (all dispatched cost) - (dispatched cost of requests pushed
    before o)``.  The second sum is a prefix sum advanced as the oldest pointer moves forward:
    amortized O(1).  The argmax of the response ratio is a :class:`KineticTournament`.

    Memory: the dispatched cost of each request pushed after the oldest waiter is kept until the
    oldest pointer passes it (at most the requests pushed while the oldest has been waiting).
    """

    name = "fairway"

    def __init__(self, *, beta: int = 0, short_queue: int | None = None) -> None:
        check_count("beta", beta, allow_none=False)
        check_count("short_queue", short_queue, allow_none=True)
        super().__init__()
        self.beta = beta
        self.short_queue = short_queue
        self._ratio = KineticTournament()
        self._slot: dict[int, int] = {}  # rid -> tournament slot
        self._order: deque[tuple[int, int]] = deque()  # (age, rid) from the oldest pointer on
        self._dispatched_cost: dict[int, int] = {}  # age -> cost at dispatch, not yet passed
        self._dispatched_total = 0  # cost of everything dispatched so far
        self._passed_total = 0  # dispatched cost of requests pushed before the oldest pointer

    def oldest_bypass(self) -> int:
        """``bypass`` of the oldest waiting request (0 on an empty queue): the capped quantity."""
        self._advance_oldest()
        return self._bypass_of_oldest()

    def bypass_of(self, rid: int) -> int:
        """``bypass(rid)`` of a waiting request; O(n), for tests and oracles only."""
        age = self._age[rid]
        return sum(cost for later, cost in self._dispatched_cost.items() if later > age)

    def _admit(self, request: Waiting, age: int) -> None:
        self._slot[request.rid] = self._ratio.insert(request.rid, request.arrival, request.cost, age)
        self._order.append((age, request.rid))

    def _repriced(self, rid: int) -> None:
        self._ratio.set_cost(self._slot[rid], self._records[rid].cost)

    def _choose(self, now: int) -> int:
        self._ratio.advance(now)
        oldest = self._advance_oldest()
        if self.short_queue is not None and len(self._records) > self.short_queue:
            return oldest
        best = self._ratio.leader()
        if best != oldest and self._bypass_of_oldest() + self._records[best].cost > self.beta:  # type: ignore[index]
            return oldest
        return best  # type: ignore[return-value]

    def _bypass_of_oldest(self) -> int:
        """Dispatched cost of requests pushed after the oldest waiter (valid once
        :meth:`_advance_oldest` has run): the budget already used against it."""
        return self._dispatched_total - self._passed_total

    def _advance_oldest(self) -> int | None:
        """Move the oldest pointer past dispatched requests, folding their cost into the prefix
        sum; returns the oldest waiting rid (None when empty)."""
        order = self._order
        while order and self._age.get(order[0][1]) != order[0][0]:
            age, _ = order.popleft()
            self._passed_total += self._dispatched_cost.pop(age)
        return order[0][1] if order else None

    def _dispatch(self, rid: int) -> None:
        cost, age = self._records[rid].cost, self._age[rid]
        super()._dispatch(rid)
        self._ratio.remove(self._slot.pop(rid))
        self._dispatched_cost[age] = cost
        self._dispatched_total += cost


POLICIES: dict[str, type] = {
    "fcfs": FcfsPolicy,
    "lpm": LpmPolicy,
    "spf": SpfPolicy,
    "fairway": FairwayPolicy,
}


def make_policy(name: str, **params: object) -> PrefillPolicy:
    """An optimized policy by registry name; ValueError for an unknown name or parameter."""
    return build(POLICIES, name, params)
