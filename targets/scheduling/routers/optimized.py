"""Optimized routers: a sorted ring searched with ``bisect``; decisions identical to
:mod:`.reference`.

Only the prefix router has real work to save: the reference scans all ``n * vnodes`` ring
points per request, this one finds the successor in O(log N) and walks the ring by index, which
usually stops at the first point.  Capacity is computed in integers from the Fraction's
numerator and denominator rather than with Fraction arithmetic, so the two versions also check
each other's capacity.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from itertools import chain
from typing import Any, Sequence

from . import reference
from .base import Router
from .reference import RingPoint, check_loads


# Random, round-robin and least-loaded have nothing to optimize (O(1) / O(n) over the loads they
# are handed): the optimized routers are subclasses of the reference ones, so a mutant patching
# them here leaves the reference intact.


class RandomRouter(reference.RandomRouter):
    pass


class RoundRobinRouter(reference.RoundRobinRouter):
    pass


class LeastLoadedRouter(reference.LeastLoadedRouter):
    pass


class PrefixRouter(reference.RingRouter):
    """Consistent hashing with bounded loads on a sorted ring (see the reference for the rule).

    ``_ring`` is sorted by (position, instance, vnode) and ``_positions`` holds the positions
    alone, so ``bisect_left(_positions, key)`` is the first point at or after ``key`` -- among
    equal positions the lowest (instance, vnode), exactly the reference's ``min``.
    """

    def __init__(self, n_instances: int, seed: int, **params: Any) -> None:
        self._ring: list[RingPoint] = []
        self._positions: list[int] = []
        super().__init__(n_instances, seed, **params)

    def _add_points(self, instance: int) -> None:
        """Merge one instance's points into the sorted ring (one linear merge per scale-up)."""
        new = sorted((self._ring_point(instance, v), instance, v) for v in range(self.vnodes))
        self._ring = list(heapq.merge(self._ring, new))
        self._positions = [p[0] for p in self._ring]

    def _start(self, key: int) -> int:
        index = bisect_left(self._positions, key)
        return 0 if index == len(self._ring) else index

    def owner(self, key: int) -> int:
        """The ring owner of ``key``, ignoring load."""
        return self._ring[self._start(key)][1]

    def capacity(self, loads: Sequence[int]) -> int:
        """``ceil((q+p)(S+1) / (q n))`` for ``eps = p/q``, in integers."""
        check_loads(loads, self.n_instances)
        p, q = self.epsilon.numerator, self.epsilon.denominator
        total = sum(int(x) for x in loads)
        return -(-(q + p) * (total + 1) // (q * self.n_instances))

    def route(self, key: int, loads: Sequence[int]) -> int:
        cap = self.capacity(loads)
        start = self._start(key)
        seen = bytearray(self.n_instances)
        for index in chain(range(start, len(self._ring)), range(start)):
            instance = self._ring[index][1]
            if seen[instance]:
                continue
            if loads[instance] < cap:
                return instance
            seen[instance] = 1
        # unreachable: cap > mean load >= min load, so some instance is below the capacity
        raise RuntimeError(  # pragma: no cover - cap > mean load >= min load
            f"no instance below capacity {cap} for loads {list(loads)}")


ROUTERS: dict[str, type] = {
    cls.name: cls for cls in (RandomRouter, RoundRobinRouter, LeastLoadedRouter, PrefixRouter)
}


def make_router(name: str, n_instances: int, seed: int, **params: Any) -> Router:
    """An optimized router by name."""
    return reference.build_router(ROUTERS, name, n_instances, seed, **params)
