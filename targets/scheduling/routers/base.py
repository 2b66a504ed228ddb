"""The protocol between the serving simulator and a router.

A router sees, for each new request, a 64-bit ``key`` (a stable hash of the prompt's first K
prefix blocks, computed by the simulator) and the current ``loads`` (outstanding requests per
instance: waiting + prefilling + decoding).  It returns an instance index.  Instances are
numbered 0..n-1 in the order they were added; ``add_instance`` scales up by one.

Randomness (the ``random`` router, ring point placement) comes only from the ``seed`` given at
construction, through :func:`stable_hash` or ``numpy.random.default_rng(seed)``, so a saved
case replays identically anywhere.
"""

from __future__ import annotations

import hashlib
from typing import Protocol, Sequence


def stable_hash(*parts: int | str) -> int:
    """A 64-bit hash that is the same in every process (unlike ``hash()``)."""
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(str(part).encode())
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "big")


class Router(Protocol):
    name: str

    def route(self, key: int, loads: Sequence[int]) -> int:
        """The instance for a request with prefix key ``key``; ``len(loads)`` == instances."""

    def add_instance(self) -> None:
        """Scale up by one instance (its index is the previous instance count)."""
