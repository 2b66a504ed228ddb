"""Invariants of session admission control, re-derived from a controller's log alone.

:mod:`.admission`'s controllers append every decision to their ``log``; :func:`check_log` replays
it (so a simulator run, or a fuzzed program of controller calls, is judged without trusting the
controller's own state) and :func:`check_liveness` checks that nobody is held for ever.  The
oracle side of admission control, kept apart from the controllers it judges.
"""

from __future__ import annotations

import collections
from typing import Any, Iterable, Mapping, Optional, Sequence


def check_log(log: Sequence[Mapping[str, Any]], *, b_min: int, b_max: int,
              all_finished: bool = False) -> Optional[str]:
    """Re-derive the admission invariants from the event log alone; a one-line message naming
    the first one broken, or None.

    * ``budget_range``: B(t) in [b_min, b_max] in every event;
    * ``admit_budget``: at every admission, Σ reservations *with the newcomer* <= B(t);
    * ``fifo``: sessions are admitted in the order they joined the hold queue;
    * ``release_once``: a reservation is released exactly once, only for an admitted session
      and for the amount reserved;
    * ``bookkeeping``: the ``reserved`` each event reports equals the replayed Σ;
    * ``drained`` (with ``all_finished``): at the end nothing is held or admitted and Σ = 0.
    """
    waiting: collections.OrderedDict[int, int] = collections.OrderedDict()  # sid -> reservation
    live: dict[int, int] = {}
    released: set[int] = set()
    total = 0
    for i, event in enumerate(log):
        op, sid, amount, budget = event["op"], event.get("sid"), event["amount"], event["budget"]
        where = f"event {i} (t={event['t']}, {op} sid={sid})"
        if not b_min <= budget <= b_max:
            return f"budget_range: B={budget} outside [{b_min}, {b_max}] at {where}"
        if op == "hold":
            if sid in waiting or sid in live or sid in released:
                return f"fifo: session {sid} joined the hold queue twice at {where}"
            waiting[sid] = amount
        elif op == "admit":
            if sid not in waiting:
                return f"fifo: session {sid} admitted without waiting (or twice) at {where}"
            head = next(iter(waiting))
            if sid != head:
                return f"fifo: session {sid} admitted before earlier arrival {head} at {where}"
            if amount != waiting.pop(sid):
                return (f"bookkeeping: session {sid} admitted with another reservation than it "
                        f"held with at {where}")
            total += amount
            live[sid] = amount
            if total > budget:
                return f"admit_budget: Σ reservations {total} > B={budget} at {where}"
        elif op == "release":
            if sid in released:
                return f"release_once: session {sid} released twice at {where}"
            if sid not in live:
                return f"release_once: session {sid} released but never admitted at {where}"
            if amount != live.pop(sid):
                return f"release_once: session {sid} released a different amount at {where}"
            released.add(sid)
            total -= amount
        elif op != "budget":
            return f"bookkeeping: unknown op {op!r} at {where}"
        if event["reserved"] != total:
            return (f"bookkeeping: log says reserved={event['reserved']}, replay says {total} "
                    f"at {where}")
    if all_finished:
        if waiting:
            return (f"drained: {len(waiting)} session(s) still held at the end, first "
                    f"{next(iter(waiting))}")
        if live or total != 0:
            return f"drained: Σ reservations = {total} at the end, unreleased {sorted(live)[:5]}"
    return None


def check_liveness(arrivals: Iterable[int], admitted: Iterable[int],
                   finished_all: bool) -> Optional[str]:
    """If every admitted session finished (``finished_all``), every arrival must have been
    admitted: holding a session for ever while the server is empty is a deadlock.  A one-line
    message, or None."""
    arrived = list(arrivals)
    ever = set(admitted)
    stray = ever - set(arrived)
    if stray:
        return f"liveness: admitted session(s) {sorted(stray)[:5]} that never arrived"
    if finished_all:
        starved = [sid for sid in arrived if sid not in ever]
        if starved:
            return (f"liveness: {len(starved)} session(s) never admitted although every admitted "
                    f"session finished, first {starved[0]}")
    return None
