"""The protocol between the serving simulator and a prefill-ordering policy.

Time is an integer number of ticks (the simulator uses microseconds) and costs are integer
ticks, so every comparison a policy makes is exact integer arithmetic: the reference and the
optimized policy can then be required to make *identical* decisions, ties included, on any
machine.

The simulator pushes requests in arrival order (``(arrival, rid)`` ascending; ``arrival`` is the
tick the request reached this instance), tells the policy when the prefix cache changed a
waiting request's hit length and predicted prefill cost (``reprice``), and asks for the next
request to prefill with ``pop(now)`` whenever it has room in a batch.  ``now`` never decreases.

Ties are broken the same way everywhere: by ``(arrival, rid)`` ascending, i.e. the older
request wins.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol


@dataclasses.dataclass(frozen=True)
class Waiting:
    """What a policy knows of one queued request."""

    rid: int
    arrival: int  # tick it joined this instance's queue
    cost: int  # predicted prefill cost in ticks (> 0), from the cost model and the hit below
    hit: int  # prefix-cache hit length in tokens at the last (re)pricing

    @property
    def key(self) -> tuple[int, int]:
        """Age order: smaller is older."""
        return (self.arrival, self.rid)


class PrefillPolicy(Protocol):
    """A prefill queue.  ``name`` is the registry name ("fcfs", "lpm", "spf", "fairway")."""

    name: str

    def push(self, request: Waiting) -> None:
        """A request joins the queue (calls come in ``(arrival, rid)`` order)."""

    def reprice(self, rid: int, cost: int, hit: int) -> None:
        """A waiting request's hit length and predicted cost changed (the prefix cache gained
        or lost blocks it uses)."""

    def pop(self, now: int) -> int:
        """Remove and return the rid to prefill next.  Only called on a non-empty queue."""

    def __len__(self) -> int:
        """Number of waiting requests."""
