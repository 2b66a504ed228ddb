"""Reference routers: the obvious linear scans, written to be checked by eye.

Every decision here is a ``min`` over a list built on the spot, so there is no state to get out
of sync; :mod:`.optimized` keeps a sorted ring and must make identical decisions.

Parameter parsing (:func:`parse_int`, :func:`parse_epsilon`, :func:`check_loads`) lives here and
is reused by :mod:`.optimized`: it rejects inputs, it makes no routing decision.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from .base import Router, stable_hash

# ------------------------------------------------------------------------------ input checks


def parse_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as a Python int >= ``minimum``; bools and floats are refused (no silent casts)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def parse_epsilon(value: Any) -> Fraction:
    """``epsilon`` as an exact Fraction via its decimal string, so 0.1 means 1/10 exactly.

    Going through ``str`` keeps the capacity ``ceil((1+eps)(S+1)/n)`` free of binary rounding
    (``Fraction(0.1)`` would be 0.1000000000000000055...).
    """
    if isinstance(value, bool):
        raise ValueError(f"epsilon must be a number >= 0, got {value!r}")
    try:
        eps = Fraction(str(value))
    except (ValueError, ZeroDivisionError, TypeError):
        raise ValueError(f"epsilon must be a finite number >= 0, got {value!r}") from None
    if eps < 0:
        raise ValueError(f"epsilon must be >= 0, got {value!r}")
    return eps


def check_loads(loads: Sequence[Any], n: int) -> None:
    """Loads are counts, one per instance; negative loads would void the capacity argument."""
    if len(loads) != n:
        raise ValueError(f"got {len(loads)} loads for {n} instances")
    for load in loads:
        if isinstance(load, bool) or not isinstance(load, (int, np.integer)) or load < 0:
            raise ValueError(f"loads must be integers >= 0, got {load!r}")


def take_params(name: str, params: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` overridden by ``params``; a parameter the router does not know is an error."""
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        known = ", ".join(sorted(defaults)) or "none"
        raise ValueError(f"router {name!r}: unknown parameter(s) {unknown} (known: {known})")
    return {**defaults, **params}


# ----------------------------------------------------------------------------------- routers


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
    """Uniform choice; one ``integers(0, n)`` draw per request, so both versions draw alike."""

    name = "random"

    def __init__(self, n_instances: int, seed: int, **params: Any) -> None:
        super().__init__(n_instances, seed, **params)
        self.rng = np.random.default_rng(self.seed)

    def route(self, key: int, loads: Sequence[int]) -> int:
        check_loads(loads, self.n_instances)
        return int(self.rng.integers(0, self.n_instances))


class RoundRobinRouter(_RouterBase):
    """The i-th request goes to ``i mod n``; the counter survives a scale-up."""

    name = "round_robin"

    def __init__(self, n_instances: int, seed: int, **params: Any) -> None:
        super().__init__(n_instances, seed, **params)
        self.calls = 0

    def route(self, key: int, loads: Sequence[int]) -> int:
        check_loads(loads, self.n_instances)
        chosen = self.calls % self.n_instances
        self.calls += 1
        return chosen


class LeastLoadedRouter(_RouterBase):
    """Lowest load, ties to the lowest index (an explicit strict-< scan)."""

    name = "least_loaded"

    def route(self, key: int, loads: Sequence[int]) -> int:
        check_loads(loads, self.n_instances)
        best = 0
        for i in range(1, self.n_instances):
            if loads[i] < loads[best]:
                best = i
        return best


RingPoint = tuple[int, int, int]  # (position, instance, vnode): tuple order = ring order


class RingRouter(_RouterBase):
    """What both prefix routers share: parameters, ring point positions, scale-up.  Subclasses
    keep the points their own way (``_add_points``)."""

    name = "prefix"
    DEFAULTS = {"vnodes": 64, "epsilon": 0.25}

    def __init__(self, n_instances: int, seed: int, **params: Any) -> None:
        super().__init__(n_instances, seed, **params)
        self.vnodes = parse_int("vnodes", self.params["vnodes"], 1)
        self.epsilon = parse_epsilon(self.params["epsilon"])
        for instance in range(self.n_instances):
            self._add_points(instance)

    def _ring_point(self, instance: int, vnode: int) -> int:
        """Ring position of one virtual node (tests override it to force ties)."""
        return stable_hash("ring", self.seed, instance, vnode)

    def _add_points(self, instance: int) -> None:
        raise NotImplementedError

    def add_instance(self) -> None:
        self._add_points(self.n_instances)
        super().add_instance()


class PrefixRouter(RingRouter):
    """Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018).

    Each instance owns ``vnodes`` ring points ``stable_hash("ring", seed, i, v)``.  A key's owner
    is the first point clockwise at or after the key (equal positions ordered by instance, then
    vnode), wrapping to the smallest point.  A request goes to the first instance clockwise from
    that point whose load is below ``ceil((1+eps)(sum(loads)+1)/n)``.

    The reference keeps the ring as an unsorted list: the successor is a ``min`` over the points
    at or after the key, and the walk is one ``min`` over eligible points of their clockwise
    order from the start (points before the start sort after it).  That is a different
    algorithm from the optimized index walk, which is the point of a differential check.
    """

    def __init__(self, n_instances: int, seed: int, **params: Any) -> None:
        self.points: list[RingPoint] = []
        super().__init__(n_instances, seed, **params)

    def _add_points(self, instance: int) -> None:
        for vnode in range(self.vnodes):
            self.points.append((self._ring_point(instance, vnode), instance, vnode))

    def _successor(self, key: int) -> RingPoint:
        at_or_after = [p for p in self.points if p[0] >= key]
        return min(at_or_after) if at_or_after else min(self.points)

    def owner(self, key: int) -> int:
        """The ring owner of ``key``, ignoring load."""
        return self._successor(key)[1]

    def capacity(self, loads: Sequence[int]) -> int:
        """``ceil((1+eps) * (sum(loads) + 1) / n)``, exactly (the +1 is the newcomer)."""
        check_loads(loads, self.n_instances)
        return math.ceil((1 + self.epsilon) * (sum(int(x) for x in loads) + 1) / self.n_instances)

    def route(self, key: int, loads: Sequence[int]) -> int:
        start = self._successor(key)
        cap = self.capacity(loads)
        eligible = [p for p in self.points if loads[p[1]] < cap]
        if not eligible:  # impossible: cap > average >= min(loads)
            raise RuntimeError(f"no instance below capacity {cap} for loads {list(loads)}")
        return min(eligible, key=lambda p: (p < start, p))[1]


ROUTERS: dict[str, type] = {
    cls.name: cls for cls in (RandomRouter, RoundRobinRouter, LeastLoadedRouter, PrefixRouter)
}


def build_router(registry: dict[str, type], name: str, n_instances: int, seed: int,
                 **params: Any) -> Router:
    """A router from ``registry`` by name; ValueError for unknown names, parameters or values."""
    if name not in registry:
        raise ValueError(f"unknown router {name!r} (known: {', '.join(sorted(registry))})")
    return registry[name](n_instances, seed, **params)


def make_router(name: str, n_instances: int, seed: int, **params: Any) -> Router:
    """A reference router by name."""
    return build_router(ROUTERS, name, n_instances, seed, **params)
