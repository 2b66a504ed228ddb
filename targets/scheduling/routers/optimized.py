"""Optimized routers: a sorted ring searched with ``bisect``; decisions identical to
:mod:`.reference`.

Only the prefix router has real work to save: the reference scans all ``n * vnodes`` ring
points per request, this one finds the successor in O(log N) and walks the ring by index, which
usually stops at the first point.  Capacity is computed in integers from the Fraction's
numerator and denominator rather than with Fraction arithmetic, so the two versions also check
each other's capacity.  The other routers are O(n) or O(1) already and are written afresh only
so that this module stands alone.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from itertools import chain
from typing import Any, Sequence

import numpy as np

from .base import Router, stable_hash
from .reference import check_loads, parse_epsilon, parse_int, take_params


class _RouterBase:
    """Instance count, seed, and the scale-up every router shares."""

    name = ""
    DEFAULTS: dict[str, Any] = {}

    def __init__(self, n_instances: int, seed: int, **params: Any) -> None:
        self.n_instances = parse_int("n_instances", n_instances, 1)
        self.seed = parse_int("seed", seed, 0)
        self.params = take_params(self.name, params, self.DEFAULTS)

    def add_instance(self) -> None:
        self.n_instances += 1


class RandomRouter(_RouterBase):
    """Uniform choice with the same ``default_rng(seed)`` draw sequence as the reference."""

    name = "random"

    def __init__(self, n_instances: int, seed: int, **params: Any) -> None:
        super().__init__(n_instances, seed, **params)
        self.rng = np.random.default_rng(self.seed)

    def route(self, key: int, loads: Sequence[int]) -> int:
        check_loads(loads, self.n_instances)
        return int(self.rng.integers(0, self.n_instances))


class RoundRobinRouter(_RouterBase):
    """Counter modulo the current instance count."""

    name = "round_robin"

    def __init__(self, n_instances: int, seed: int, **params: Any) -> None:
        super().__init__(n_instances, seed, **params)
        self.calls = 0

    def route(self, key: int, loads: Sequence[int]) -> int:
        check_loads(loads, self.n_instances)
        self.calls += 1
        return (self.calls - 1) % self.n_instances


class LeastLoadedRouter(_RouterBase):
    """``min`` over indices keyed by load; ``min`` keeps the first of equal keys."""

    name = "least_loaded"

    def route(self, key: int, loads: Sequence[int]) -> int:
        check_loads(loads, self.n_instances)
        return min(range(self.n_instances), key=loads.__getitem__)


RingPoint = tuple[int, int, int]  # (position, instance, vnode): tuple order = ring order


class PrefixRouter(_RouterBase):
    """Consistent hashing with bounded loads on a sorted ring (see the reference for the rule).

    ``_ring`` is sorted by (position, instance, vnode) and ``_positions`` holds the positions
    alone, so ``bisect_left(_positions, key)`` is the first point at or after ``key`` -- among
    equal positions the lowest (instance, vnode), exactly the reference's ``min``.
    """

    name = "prefix"
    DEFAULTS = {"vnodes": 64, "epsilon": 0.25}

    def __init__(self, n_instances: int, seed: int, **params: Any) -> None:
        super().__init__(n_instances, seed, **params)
        self.vnodes = parse_int("vnodes", self.params["vnodes"], 1)
        self.epsilon = parse_epsilon(self.params["epsilon"])
        self._ring: list[RingPoint] = []
        self._positions: list[int] = []
        for instance in range(self.n_instances):
            self._insert_points(instance)

    def _ring_point(self, instance: int, vnode: int) -> int:
        """Ring position of one virtual node (tests override it to force ties)."""
        return stable_hash("ring", self.seed, instance, vnode)

    def _insert_points(self, instance: int) -> None:
        """Merge one instance's points into the sorted ring (one linear merge per scale-up)."""
        new = sorted((self._ring_point(instance, v), instance, v) for v in range(self.vnodes))
        self._ring = list(heapq.merge(self._ring, new))
        self._positions = [p[0] for p in self._ring]

    def add_instance(self) -> None:
        self._insert_points(self.n_instances)
        super().add_instance()

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
        raise RuntimeError(f"no instance below capacity {cap} for loads {list(loads)}")


ROUTERS: dict[str, type] = {
    cls.name: cls for cls in (RandomRouter, RoundRobinRouter, LeastLoadedRouter, PrefixRouter)
}


def make_router(name: str, n_instances: int, seed: int, **params: Any) -> Router:
    """An optimized router by name; ValueError for unknown names, parameters or bad values."""
    if name not in ROUTERS:
        raise ValueError(f"unknown router {name!r} (known: {', '.join(sorted(ROUTERS))})")
    return ROUTERS[name](n_instances, seed, **params)
