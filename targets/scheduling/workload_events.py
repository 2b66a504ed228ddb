"""The kinds of workload events a scheduling case is made of, and how to read them back.

The strategy builds a workload as a sequence of events (swarm testing,
:func:`fuzzkit.program.swarm`: each case enables a random subset of :data:`KINDS` with random
weights, so some cases are all bursts, some all follow-up turns, some never scale up).
:func:`events` recovers the sequence from the inputs alone -- from the arrival ticks, the
``after`` links, the shared prefixes and the scale-up times -- so it also describes a case that
was shrunk, edited or written by hand; it is the target's ``events`` hook, whose per-kind and
per-pair counts show which sequences a run exercised (a scale-up right after a burst, a burst
right after a quiet phase, ...).
"""

from __future__ import annotations

from typing import Any, Mapping

#: ``(kind, default weight)`` for :func:`fuzzkit.program.swarm`.
KINDS: tuple[tuple[str, int], ...] = (
    ("arrival", 6),    # one new request (a new session's first turn) after a short gap
    ("stream", 2),     # first turns at about a step's pace: a queue that stays non-empty
    ("burst", 3),      # several first turns at one tick: a queue builds before the next pop
    ("session", 2),    # a first turn and a few follow-up turns (an agent session, closed loop)
    ("follow_up", 3),  # the next turn of an earlier request (closed loop: released when it ends)
    ("fan_out", 1),    # several turns after one request, released together (an agent fanning out)
    ("churn", 2),      # a first turn on a new document: caches evict, waiting requests reprice
    ("quiet", 1),      # a long gap: queues drain (dead index entries pile up), then load returns
    ("scale_up", 4),   # an instance joins (often while a burst still waits)
)
#: Kinds that add requests (a case needs at least one of them).
REQUEST_KINDS = ("arrival", "stream", "burst", "session", "follow_up", "fan_out", "churn")
#: What :func:`events` reads back: a stream shows as first turns at most a step overhead apart,
#: a session as its first turn and its follow-ups.
READ_BACK = ("arrival", "stream", "burst", "follow_up", "fan_out", "churn", "quiet", "scale_up")
#: A gap of at least this many step overheads (``k0``) between two events is a quiet phase.
QUIET_STEPS = 30


def events(inputs: Mapping[str, Any]) -> list[str]:
    """The workload events of a case, in time order (scale-ups first at a tick, as the simulator
    applies them; then first turns; then follow-up turns at their earliest release tick)."""
    config = inputs.get("config", {})
    k0 = int(config.get("cost", {}).get("k0", 4_000_000))
    items: list[tuple[int, int, str]] = [(int(t), 0, "scale_up")
                                         for t in config.get("scale_ups", [])]
    firsts: dict[int, list[Mapping[str, Any]]] = {}
    followers: dict[int, list[Mapping[str, Any]]] = {}
    for r in inputs.get("requests", []):
        if r.get("after") is None:
            firsts.setdefault(int(r["arrival"]), []).append(r)
        else:
            followers.setdefault(int(r["after"]), []).append(r)
    documents: set[int] = set()
    last = None
    for tick in sorted(firsts):
        group = firsts[tick]
        new_document = False
        for r in group:
            if int(r.get("shared", 0)) > 0 and r["blocks"]:
                new_document |= int(r["blocks"][0]) not in documents
                documents.add(int(r["blocks"][0]))
        kind = ("burst" if len(group) > 1 else "churn" if new_document
                else "stream" if last is not None and tick - last <= k0 else "arrival")
        items.append((tick, 1, kind))
        last = tick
    for group in followers.values():
        tick = min(int(r["arrival"]) for r in group)
        items.append((tick, 2, "fan_out" if len(group) > 1 else "follow_up"))
    items.sort()
    out: list[str] = []
    previous = None
    for tick, _, kind in items:
        if previous is not None and tick - previous >= QUIET_STEPS * k0:
            out.append("quiet")
        out.append(kind)
        previous = tick
    return out
