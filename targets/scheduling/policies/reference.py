"""Reference prefill policies: a plain O(n) scan over the waiting requests for every decision.

Written to be obviously right rather than fast: every ``pop`` takes a ``min`` over all waiting
records with an explicit sort key, and Fairway's response ratio is an exact
:class:`fractions.Fraction` (no float ever enters a decision).  The optimized policies in
:mod:`.optimized` must return the same rid on every ``pop``, ties included.

The validation helpers here (parameter checks, push-order checks, :func:`build`) are shared with
:mod:`.optimized` so both refuse exactly the same inputs.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from fractions import Fraction

from .base import PrefillPolicy, Waiting

#: LPM's default queue length past which it serves FCFS (SGLang's 128).
DEFAULT_FALLBACK = 128

# ------------------------------------------------------------------------------ validation


def _is_int(value: object) -> bool:
    """Ticks, costs and hits are plain ints so every comparison is exact (bool is not a count)."""
    # the exact type first: every price of every push and reprice comes through here
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def check_count(name: str, value: object, *, allow_none: bool) -> None:
    """Policy parameters are non-negative ints (budgets in ticks, queue lengths), or None where
    the policy gives None a meaning."""
    if value is None and allow_none:
        return
    if not _is_int(value) or value < 0:  # type: ignore[operator]
        extra = " or None" if allow_none else ""
        raise ValueError(f"{name} must be a non-negative int{extra}, got {value!r}")


def check_price(cost: object, hit: object) -> None:
    """A prefill cost is a positive int number of ticks (Fairway divides by it); a hit is a
    non-negative int token count."""
    if not _is_int(cost) or cost <= 0:  # type: ignore[operator]
        raise ValueError(f"cost must be a positive int, got {cost!r}")
    if not _is_int(hit) or hit < 0:  # type: ignore[operator]
        raise ValueError(f"hit must be a non-negative int, got {hit!r}")


def check_push(request: Waiting, last_key: tuple[int, int] | None, waiting: Mapping[int, object]) -> None:
    """Pushes must come in strictly ascending ``(arrival, rid)`` order: the optimized policies
    use the push order as the age order, so an out-of-order push would silently change their
    tie-breaks.  Refuse it loudly in both implementations instead."""
    if not _is_int(request.rid) or not _is_int(request.arrival):
        raise ValueError(f"rid and arrival must be ints, got {request!r}")
    check_price(request.cost, request.hit)
    if request.rid in waiting:
        raise ValueError(f"rid {request.rid} is already waiting")
    if last_key is not None and request.key <= last_key:
        raise ValueError(f"push out of (arrival, rid) order: {request.key} after {last_key}")


def build(registry: Mapping[str, type], name: str, params: Mapping[str, object]) -> PrefillPolicy:
    """``make_policy`` of both modules: a one-line ValueError for an unknown name or parameter."""
    cls = registry.get(name)
    if cls is None:
        raise ValueError(f"unknown prefill policy {name!r}; known: {', '.join(registry)}")
    allowed = [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) or "no parameters"
        raise ValueError(f"prefill policy {name!r} got unknown parameter(s) {', '.join(unknown)}; it takes {takes}")
    return cls(**params)


# ------------------------------------------------------------------------------ policies


def _age(request: Waiting) -> tuple[int, int]:
    """Sort key of FCFS and of every tie-break: older (smaller ``(arrival, rid)``) first."""
    return request.key


class _ScanQueue:
    """Waiting records in a dict; subclasses pick the next one with a full scan."""

    name = ""

    def __init__(self) -> None:
        self._records: dict[int, Waiting] = {}
        self._last_key: tuple[int, int] | None = None

    def push(self, request: Waiting) -> None:
        """Add ``request``; pushes come in ``(arrival, rid)`` order."""
        check_push(request, self._last_key, self._records)
        self._last_key = request.key
        self._records[request.rid] = request

    def reprice(self, rid: int, cost: int, hit: int) -> None:
        """Replace a waiting request's cost and hit (KeyError if ``rid`` is not waiting)."""
        check_price(cost, hit)
        self._records[rid] = dataclasses.replace(self._records[rid], cost=cost, hit=hit)

    def pop(self, now: int) -> int:
        """Remove and return the rid the policy prefills next at tick ``now``."""
        if not self._records:
            raise IndexError("pop from an empty prefill queue")
        chosen = self._choose(now)
        self._dispatch(chosen)
        return chosen.rid

    def __len__(self) -> int:
        return len(self._records)

    def _choose(self, now: int) -> Waiting:
        raise NotImplementedError

    def _dispatch(self, chosen: Waiting) -> None:
        del self._records[chosen.rid]

    def _oldest(self) -> Waiting:
        return min(self._records.values(), key=_age)


class FcfsPolicy(_ScanQueue):
    """First come, first served: the oldest ``(arrival, rid)`` first."""

    name = "fcfs"

    def _choose(self, now: int) -> Waiting:
        return self._oldest()


class LpmPolicy(_ScanQueue):
    """SGLang's longest-prefix-match: the largest prefix-cache ``hit`` first, older on ties.

    SGLang falls back to FCFS when the queue is long (the scan is too costly there); so does this
    policy when ``len(queue) > fallback_len`` (None: never).
    """

    name = "lpm"

    def __init__(self, *, fallback_len: int | None = DEFAULT_FALLBACK) -> None:
        check_count("fallback_len", fallback_len, allow_none=True)
        super().__init__()
        self.fallback_len = fallback_len

    def reprice(self, rid: int, cost: int, hit: int) -> None:
        """The hit changes as the prefix cache gains or loses blocks; ordering on the hit seen at
        push time (stale hits) is the classic LPM bug, so this path stays one small method."""
        check_price(cost, hit)
        self._records[rid] = dataclasses.replace(self._records[rid], cost=cost, hit=hit)

    def _choose(self, now: int) -> Waiting:
        if self.fallback_len is not None and len(self._records) > self.fallback_len:
            return self._oldest()
        return min(self._records.values(), key=lambda w: (-w.hit, w.key))


class SpfPolicy(_ScanQueue):
    """Shortest prefill first: the smallest predicted ``cost`` first, older on ties."""

    name = "spf"

    def _choose(self, now: int) -> Waiting:
        return min(self._records.values(), key=lambda w: (w.cost, w.key))


class FairwayPolicy(_ScanQueue):
    """Fairway: highest response ratio first, with a bypass budget protecting the oldest waiter.

    ``pop(now)``: let ``o`` be the oldest waiting request.  If ``short_queue`` is not None and
    more than ``short_queue`` requests wait, serve ``o`` (long queue: plain FCFS).  Otherwise let
    ``c`` be the request with the highest response ratio ``(wait + cost) / cost`` (equivalently
    ``wait / cost``, ``wait = now - arrival``; ties go to the older).  Serve ``c`` unless
    ``c`` is not ``o`` and ``bypass(o) + c.cost > beta``, in which case serve ``o``.

    ``bypass(q)`` of a waiting ``q`` is the sum of the costs (at dispatch) of every request
    dispatched from this queue that arrived after ``q`` (larger ``(arrival, rid)``); all of them
    were dispatched while ``q`` waited.  It is *not* "a counter reset to 0 when the oldest is
    served": under that simplification the new oldest has already been bypassed by the work
    dispatched ahead of the old oldest, so it can end up bypassed by up to 2·beta.  Because ``o``
    is the oldest, ``bypass(o) >= bypass(q)`` for every waiting ``q``, so capping ``bypass(o)``
    at ``beta`` caps everyone's.

    This reference keeps one counter per waiting request and adds each dispatched cost to the
    counter of every older waiting request: O(n) per pop.
    """

    name = "fairway"

    def __init__(self, *, beta: int = 0, short_queue: int | None = None) -> None:
        check_count("beta", beta, allow_none=False)
        check_count("short_queue", short_queue, allow_none=True)
        super().__init__()
        self.beta = beta
        self.short_queue = short_queue
        self._bypass: dict[int, int] = {}

    def push(self, request: Waiting) -> None:
        """Add ``request`` with nothing dispatched ahead of it yet."""
        super().push(request)
        self._bypass[request.rid] = 0

    def bypass_of(self, rid: int) -> int:
        """``bypass(rid)`` of a waiting request (see the class docstring)."""
        return self._bypass[rid]

    def oldest_bypass(self) -> int:
        """``bypass`` of the oldest waiting request (0 on an empty queue): the capped quantity."""
        return self._bypass[self._oldest().rid] if self._records else 0

    def _choose(self, now: int) -> Waiting:
        oldest = self._oldest()
        if self.short_queue is not None and len(self._records) > self.short_queue:
            return oldest
        best = min(self._records.values(), key=lambda w: (-Fraction(now - w.arrival, w.cost), w.key))
        if best.rid != oldest.rid and self._bypass_of_oldest(oldest) + best.cost > self.beta:
            return oldest
        return best

    def _bypass_of_oldest(self, oldest: Waiting) -> int:
        """The budget already used against the oldest waiter (one method, so variants can swap it)."""
        return self._bypass[oldest.rid]

    def _dispatch(self, chosen: Waiting) -> None:
        super()._dispatch(chosen)
        del self._bypass[chosen.rid]
        for q in self._records.values():
            if q.key < chosen.key:
                self._bypass[q.rid] += chosen.cost


POLICIES: dict[str, type] = {
    "fcfs": FcfsPolicy,
    "lpm": LpmPolicy,
    "spf": SpfPolicy,
    "fairway": FairwayPolicy,
}


def make_policy(name: str, **params: object) -> PrefillPolicy:
    """A reference policy by registry name; ValueError for an unknown name or parameter."""
    return build(POLICIES, name, params)
