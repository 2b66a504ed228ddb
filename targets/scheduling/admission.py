"""Session admission control: when may a new multi-turn agent session start?

An agent session's context grows every turn, so a server that lets every session in fills its KV
cache, starts preempting and evicting *active* sessions, recomputes them, and can stay collapsed
after the load is gone (a metastable failure).  Admission works on sessions, not requests: a
session that is admitted keeps its place until it ends; a session that is not admitted waits in a
FIFO hold queue and sends nothing.

Three controllers share one engine (:class:`_Controller`): each arriving session gets a
*reservation*, joins the hold queue, and the head of the queue is admitted while
``reserved + reservation <= budget``.  They differ only in the reservation and the budget:

* ``none``       -- reservation 0, budget 0: everyone is admitted at once (memory is the
  simulator's problem).  The baseline that collapses.
* ``static_cap`` -- reservation 1 (a *slot*), budget ``max_sessions``: a fixed session cap.
  Here the unit of ``budget``/``reserved`` is sessions, not KV blocks.
* ``basin``      -- reservation = the session's predicted lifetime peak context in KV blocks
  (from a pluggable predictor below; the simulator passes the prediction), budget ``B(t)`` in KV
  blocks adapted by AIMD on congestion signals.

Time is the simulator's integer nanosecond tick; every quantity is an integer and the AIMD
factor a :class:`~fractions.Fraction`, so a run is exact and reproducible.

Every decision is appended to ``log`` as ``{"t", "op", "sid", "amount", "budget", "reserved"}``
with ``op`` one of ``hold`` (a session arrived and joined the hold queue -- every arrival does,
possibly for zero time -- ``amount`` is its reservation), ``admit`` (``amount`` = reservation,
``reserved`` already includes it), ``release`` (``amount`` = reservation given back) and
``budget`` (``B(t)`` changed; ``amount`` = the signed change, ``sid`` None, plus ``cause``).
:func:`.admission_checks.check_log` re-derives the invariants of docs/COMPONENTS.md §2 from that log
alone, so a simulator run (or a fuzzed program) can be judged without trusting the controller's
own state.  Peak predictors live in :mod:`.admission_predictors`.

The rules are small methods (``_fits``, ``_release``, ``_next_to_admit``, ``_decrease``,
``_increase``) so that mutants can replace exactly one rule.
"""

from __future__ import annotations

import collections
import inspect
import operator
from fractions import Fraction
from typing import Any, Mapping, Optional, Protocol

SIGNALS = ("preemption", "active_eviction", "low_free_kv")

# ------------------------------------------------------------------------------ protocol


class Admission(Protocol):
    """What the simulator calls.  Every call returns the sids admitted by it, in FIFO order."""

    name: str
    held: "collections.deque[int]"
    admitted: dict[int, int]
    budget: int
    reserved: int
    b_min: int
    b_max: int
    log: list[dict[str, Any]]

    def arrive(self, sid: int, predicted_peak: int, now: int) -> list[int]: ...

    def finish(self, sid: int, now: int) -> list[int]: ...

    def signal(self, kind: str, now: int) -> list[int]: ...

    def tick(self, now: int, free_kv_blocks: int, total_kv_blocks: int) -> list[int]: ...


def _fraction(value: Any, what: str) -> Fraction:
    """An exact Fraction; a float goes through its decimal repr so that 0.7 means 7/10 (not the
    nearest binary double), which keeps ``floor(budget * decrease)`` what a reader expects."""
    try:
        return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    except (TypeError, ValueError, ZeroDivisionError):
        raise ValueError(f"{what} must be a number like 0.5 or '1/2', got {value!r}") from None


def _int(value: Any, what: str) -> int:
    """An exact integer (bool and float refused: a budget of 2.5 blocks is a caller bug)."""
    if isinstance(value, bool):  # pragma: no cover - validate() rejects it
        raise ValueError(f"{what} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None


# ------------------------------------------------------------------------------ the engine


class _Controller:
    """FIFO admission against a budget.  Subclasses choose the reservation and adapt the budget.

    Reservations are never revoked: when the budget shrinks below what is already reserved, the
    admitted sessions go on and admission simply stops until enough of them end.  So
    ``reserved <= budget`` holds at every *admission*, not at every instant.
    """

    name = ""

    def __init__(self, budget: int, b_min: int, b_max: int) -> None:
        self.budget, self.b_min, self.b_max = budget, b_min, b_max
        self.reserved = 0
        self.held: collections.deque[int] = collections.deque()
        self.admitted: dict[int, int] = {}
        self.log: list[dict[str, Any]] = []
        self._pending: dict[int, int] = {}  # held sid -> its reservation
        self._seen: set[int] = set()
        self._now: Optional[int] = None

    # -- the protocol ------------------------------------------------------------------------

    def arrive(self, sid: int, predicted_peak: int, now: int) -> list[int]:
        """A new session asks to start; it joins the back of the hold queue."""
        self._clock(now)
        sid = _int(sid, "sid")
        if sid in self._seen:  # pragma: no cover - the simulator keeps the protocol
            raise ValueError(f"session {sid} arrived twice")
        peak = _int(predicted_peak, "predicted_peak")
        if peak < 0:  # pragma: no cover - the simulator keeps the protocol
            raise ValueError(f"predicted_peak must be >= 0, got {peak}")
        self._seen.add(sid)
        reservation = self._reservation(peak)
        self.held.append(sid)
        self._pending[sid] = reservation
        self._record(now, "hold", sid, reservation)
        return self._admit_ready(now)

    def finish(self, sid: int, now: int) -> list[int]:
        """An admitted session ended: give its reservation back, admit who now fits."""
        self._clock(now)
        if sid not in self.admitted:  # pragma: no cover - the simulator keeps the protocol
            raise ValueError(f"session {sid} finished but is not admitted")
        self._release(sid, now)
        return self._admit_ready(now)

    def signal(self, kind: str, now: int) -> list[int]:
        """A congestion signal from the simulator; only ``basin`` reacts to it."""
        self._clock(now)
        if kind not in SIGNALS:  # pragma: no cover - the simulator keeps the protocol
            raise ValueError(f"unknown congestion signal {kind!r}; known: {', '.join(SIGNALS)}")
        self._congestion(kind, now)
        return self._admit_ready(now)

    def tick(self, now: int, free_kv_blocks: int, total_kv_blocks: int) -> list[int]:
        """Periodic call with the KV occupancy; only ``basin`` adapts its budget here."""
        self._clock(now)
        off = not 0 <= free_kv_blocks <= total_kv_blocks
        if off:  # pragma: no cover - the simulator keeps the protocol
            raise ValueError(f"need 0 <= free_kv_blocks ({free_kv_blocks}) <= total_kv_blocks "
                             f"({total_kv_blocks})")
        self._adapt(now, free_kv_blocks, total_kv_blocks)
        return self._admit_ready(now)

    # -- rules (mutant hooks) ----------------------------------------------------------------

    def _reservation(self, predicted_peak: int) -> int:
        raise NotImplementedError

    def _fits(self, reservation: int) -> bool:
        """The admission test: the newcomer's reservation *included* must stay within B(t)."""
        return self.reserved + reservation <= self.budget

    def _next_to_admit(self) -> Optional[int]:
        """The head of the hold queue if it fits, else nobody: strict FIFO, so a small session
        never overtakes a big head (that would starve big sessions under sustained load)."""
        if self.held and self._fits(self._pending[self.held[0]]):
            return self.held[0]
        return None

    def _release(self, sid: int, now: int) -> None:
        """Give ``sid``'s reservation back, exactly once."""
        amount = self.admitted.pop(sid)
        self.reserved -= amount
        self._record(now, "release", sid, amount)

    def _congestion(self, kind: str, now: int) -> None:
        """React to a congestion signal (nothing, for a fixed budget)."""

    def _adapt(self, now: int, free: int, total: int) -> None:
        """React to the periodic KV occupancy report (nothing, for a fixed budget)."""

    # -- plumbing ----------------------------------------------------------------------------

    def _admit_ready(self, now: int) -> list[int]:
        out: list[int] = []
        while (sid := self._next_to_admit()) is not None:
            self._admit(sid, now)
            out.append(sid)
        return out

    def _admit(self, sid: int, now: int) -> None:
        if self.held[0] == sid:  # pragma: no branch - only a mutant skips the head
            self.held.popleft()
        else:  # only a (mutant) _next_to_admit that skips the head gets here
            self.held.remove(sid)
        amount = self._pending.pop(sid)
        self.admitted[sid] = amount
        self.reserved += amount
        self._record(now, "admit", sid, amount)

    def _set_budget(self, value: int, now: int, cause: str) -> None:
        if value != self.budget:
            delta, self.budget = value - self.budget, value
            self._record(now, "budget", None, delta, cause=cause)

    def _record(self, now: int, op: str, sid: Optional[int], amount: int, **extra: Any) -> None:
        self.log.append({"t": now, "op": op, "sid": sid, "amount": amount,
                         "budget": self.budget, "reserved": self.reserved, **extra})

    def _clock(self, now: int) -> None:
        """Time never goes back: a simulator that calls out of order has a bug worth a loud
        error, and the AIMD timers below assume it."""
        now = _int(now, "now")
        if self._now is not None and now < self._now:  # pragma: no cover - sim time is monotone
            raise ValueError(f"time went backwards: {now} < {self._now}")
        self._now = now


class NoAdmission(_Controller):
    """Admit every session at once; reservation 0 against a budget of 0."""

    name = "none"

    def __init__(self) -> None:
        super().__init__(budget=0, b_min=0, b_max=0)

    def _reservation(self, predicted_peak: int) -> int:
        return 0


class StaticCap(_Controller):
    """At most ``max_sessions`` admitted at once: a reservation of one slot per session against a
    fixed budget of ``max_sessions`` slots (units are sessions here, not KV blocks)."""

    name = "static_cap"

    def __init__(self, max_sessions: int = 64) -> None:
        cap = _int(max_sessions, "max_sessions")
        if cap < 1:  # pragma: no cover - validate() rejects it
            raise ValueError(f"max_sessions must be >= 1, got {cap}")
        super().__init__(budget=cap, b_min=cap, b_max=cap)

    def _reservation(self, predicted_peak: int) -> int:
        return 1


class Basin(_Controller):
    """Reserve each session's predicted peak (KV blocks) from an AIMD budget ``B(t)``.

    * decrease: on a congestion signal, ``B = max(b_min, floor(B * decrease))``, at most once per
      ``cooldown`` ticks (one burst of preemptions is one congestion event, not fifty);
    * increase: on ``tick``, when no congestion signal came for ``increase_every`` ticks, the
      free-KV fraction is at least ``watermark`` and a session is held (the budget binds),
      ``B = min(b_max, B + increase)`` (the quiet period starts again either way);
    * ``tick`` raises ``low_free_kv`` itself when ``free / total < watermark``.

    A reservation above ``b_min`` is clamped to ``b_min``.  Why: B(t) can sit at ``b_min`` for as
    long as congestion lasts, and a head whose reservation exceeds it could then never be
    admitted, not even with nothing else admitted, and would block the whole FIFO queue behind it
    for ever.  With every reservation ``<= b_min <= B(t)`` the head is admitted at the latest when
    every admitted session has ended (liveness).  The price: such a session is under-reserved, so
    "no KV-exhaustion preemption when predictions hold" is only promised for peaks ``<= b_min``;
    choose ``b_min`` at least the largest session you expect.
    """

    name = "basin"

    def __init__(self, b_min: int = 256, b_max: int = 4096, b_init: Optional[int] = None,
                 increase: int = 64, increase_every: int = 1_000_000_000,
                 decrease: Any = Fraction(1, 2), cooldown: int = 1_000_000_000,
                 watermark: Any = Fraction(1, 20)) -> None:
        lo, hi = _int(b_min, "b_min"), _int(b_max, "b_max")
        start = hi if b_init is None else _int(b_init, "b_init")
        if not 0 <= lo <= start <= hi:  # pragma: no cover - validate() rejects it
            raise ValueError(f"need 0 <= b_min ({lo}) <= b_init ({start}) <= b_max ({hi})")
        super().__init__(budget=start, b_min=lo, b_max=hi)
        self.increase = _int(increase, "increase")
        self.increase_every = _int(increase_every, "increase_every")
        self.cooldown = _int(cooldown, "cooldown")
        negative = min(self.increase, self.increase_every, self.cooldown) < 0
        if negative:  # pragma: no cover - validate() rejects it
            raise ValueError("increase, increase_every and cooldown must be >= 0")
        self.decrease = _fraction(decrease, "decrease")
        if not 0 <= self.decrease <= 1:  # pragma: no cover - validate() rejects it
            raise ValueError(f"decrease must be in [0, 1], got {self.decrease}")
        self.watermark = _fraction(watermark, "watermark")
        if not 0 <= self.watermark <= 1:  # pragma: no cover - validate() rejects it
            raise ValueError(f"watermark must be in [0, 1], got {self.watermark}")
        self._last_decrease: Optional[int] = None  # tick of the last multiplicative decrease
        self._calm_since: Optional[int] = None  # tick of the last congestion signal or increase

    def _reservation(self, predicted_peak: int) -> int:
        return min(predicted_peak, self.b_min)  # clamp: see the class docstring

    def _decrease(self, now: int, cause: str) -> None:
        """Multiplicative decrease, never below ``b_min`` (the floor liveness rests on)."""
        shrunk = self.budget * self.decrease.numerator // self.decrease.denominator
        self._set_budget(max(self.b_min, shrunk), now, cause)

    def _increase(self, now: int) -> None:
        """Additive increase, never above ``b_max``."""
        self._set_budget(min(self.b_max, self.budget + self.increase), now, "increase")

    def _congestion(self, kind: str, now: int) -> None:
        self._calm_since = now
        if self._last_decrease is None or now - self._last_decrease >= self.cooldown:
            self._last_decrease = now
            self._decrease(now, kind)

    def _adapt(self, now: int, free: int, total: int) -> None:
        if self._calm_since is None:
            self._calm_since = now  # the quiet period starts with the first report
        if total > 0 and free * self.watermark.denominator < self.watermark.numerator * total:
            self._congestion("low_free_kv", now)
        elif now - self._calm_since >= self.increase_every:
            self._calm_since = now
            if self._budget_binds():
                self._increase(now)

    def _budget_binds(self) -> bool:
        """Grow only while the budget is what holds sessions back (someone is held).  A budget
        that grew through a quiet period, when nobody needed it, would let the next surge in
        wholesale -- the overload it exists to prevent -- and take many decreases to come back
        (TCP's congestion-window validation, RFC 7661, for the same reason)."""
        return bool(self.held)


ADMISSIONS: dict[str, type[_Controller]] = {c.name: c for c in (NoAdmission, StaticCap, Basin)}


#: The optimized simulator's controllers: subclasses with the same rules, so that a mutant
#: patching one of them leaves the reference simulator's controller intact.
OPTIMIZED_ADMISSIONS: dict[str, type[_Controller]] = {
    name: type(cls.__name__, (cls,), {"__doc__": cls.__doc__}) for name, cls in ADMISSIONS.items()
}


def make_admission(name: str, registry: Optional[Mapping[str, type[_Controller]]] = None,
                   **params: Any) -> _Controller:
    """An admission controller by registry name; ValueError for an unknown name or parameter."""
    cls = (ADMISSIONS if registry is None else registry).get(name)
    if cls is None:  # pragma: no cover - validate() rejects it
        raise ValueError(f"unknown admission policy {name!r}; known: {', '.join(ADMISSIONS)}")
    allowed = [p for p in inspect.signature(cls).parameters]
    unknown = sorted(set(params) - set(allowed))
    if unknown:  # pragma: no cover - validate() rejects it
        takes = ", ".join(allowed) or "no parameters"
        raise ValueError(f"admission policy {name!r} got unknown parameter(s) "
                         f"{', '.join(unknown)}; it takes {takes}")
    return cls(**params)
