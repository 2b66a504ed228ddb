"""Routing invariants as pure functions: each returns None, or one line saying what broke.

The oracle supplies the ring owner and the capacity (from a router's ``owner`` / ``capacity``,
which the differential test pins between reference and optimized); these functions only judge a
decision against them, so a router that ignores its own capacity or owner is caught here.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable, Iterable, Optional, Sequence

ROUTER_NAMES = ("random", "round_robin", "least_loaded", "prefix")


# ------------------------------------------------------------------------------- one decision


def check_route(router_name: str, chosen: int, loads: Sequence[int],
                owner: Optional[int] = None, capacity: Optional[int] = None) -> Optional[str]:
    """Judge one routing decision made with ``loads`` (the loads *before* this request).

    Every router: ``chosen`` is an instance index.  ``least_loaded``: ``chosen`` has the minimum
    load.  ``prefix`` (needs ``owner`` and ``capacity``): never a full instance while a non-full
    one exists; bounded load ``loads[chosen] + 1 <= capacity``; affinity -- if the owner is not
    full the request goes to the owner.  "Full" means ``load >= capacity``, so bounded load and
    "never full" coincide whenever some instance is below capacity; the second message is kept
    for the remaining case, which means the capacity itself is too small.
    """
    if router_name not in ROUTER_NAMES:
        raise ValueError(f"unknown router {router_name!r} (known: {', '.join(ROUTER_NAMES)})")
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < len(loads):
        return f"{router_name}: chose {chosen!r}, not an instance index in [0, {len(loads)})"
    if router_name == "least_loaded" and loads[chosen] != min(loads):
        return (f"least_loaded: chose instance {chosen} with load {loads[chosen]}, "
                f"minimum load is {min(loads)}")
    if router_name == "prefix":
        if owner is None or capacity is None:
            raise ValueError("check_route('prefix', ...) needs owner and capacity")
        return _check_prefix(chosen, loads, owner, capacity)
    return None


def _check_prefix(chosen: int, loads: Sequence[int], owner: int, capacity: int) -> Optional[str]:
    """The three bounded-load consistent-hashing invariants, most specific message first."""
    if loads[chosen] >= capacity:
        open_ = [i for i, load in enumerate(loads) if load < capacity]
        if open_:
            return (f"prefix: routed to full instance {chosen} (load {loads[chosen]} >= capacity "
                    f"{capacity}) while instance {open_[0]} has load {loads[open_[0]]}")
        return (f"prefix: bounded load violated, instance {chosen} goes to load "
                f"{loads[chosen] + 1} > capacity {capacity} (no instance below capacity)")
    if loads[owner] < capacity and chosen != owner:
        return (f"prefix: affinity violated, owner {owner} has load {loads[owner]} < capacity "
                f"{capacity} but chose {chosen}")
    return None


# --------------------------------------------------------------------------------- scale-up


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


@lru_cache(maxsize=256)
def scale_up_acceptance(m: int, n_before: int, vnodes: int,
                        alpha: float = 1e-3) -> tuple[int, int, float]:
    """The accepted range ``[lo, hi]`` for the number of moved keys, and its exact false-alarm
    probability ``P(K < lo) + P(K > hi)`` (<= ``alpha``; less, since K is discrete).

    Model: the ``N = (n+1)V`` ring points are i.i.d. uniform (idealized hash), so the N arcs
    between consecutive points are Dirichlet(1, ..., 1), and the instance labels are independent
    of the positions.  The new instance owns the arcs ending at its V points, so its share is
    ``S ~ Beta(V, nV)`` (mean ``1/(n+1)``, variance ``p(1-p)/(N+1)`` with ``p = 1/(n+1)``).
    ``m`` distinct keys, i.i.d. uniform and independent of the ring, then move
    ``K | S ~ Binomial(m, S)``: marginally ``K ~ BetaBinomial(m, V, nV)`` with
    ``Var(K/m) = p(1-p)(N+m) / (m(N+1))``, i.e. about ``p(1-p)(1/N + 1/m)``.  Each tail gets at
    most ``alpha/2`` of exact Beta-binomial mass (roughly ``p +- 3.29 sd`` at alpha = 1e-3, but
    skewed correctly for small V, where the Beta is far from normal).
    """
    a, b = float(vnodes), float(n_before * vnodes)
    log_norm = _log_beta(a, b)
    log_m = math.lgamma(m + 1)
    pmf = [math.exp(log_m - math.lgamma(k + 1) - math.lgamma(m - k + 1)
                    + _log_beta(k + a, m - k + b) - log_norm) for k in range(m + 1)]
    lo, below = _tail_cut(pmf, alpha / 2)
    hi_from_top, above = _tail_cut(pmf[::-1], alpha / 2)
    return lo, m - hi_from_top, below + above


def _tail_cut(pmf: Sequence[float], budget: float) -> tuple[int, float]:
    """The first index whose cumulative mass (inclusive) exceeds ``budget``, and the mass before."""
    mass = 0.0
    for k, p in enumerate(pmf):
        if mass + p > budget:
            return k, mass
        mass += p
    return len(pmf), mass


def check_scale_up(router_before_owner_fn: Callable[[int], int],
                   router_after_owner_fn: Callable[[int], int], keys: Iterable[int],
                   n_before: int, *, vnodes: int = 64, alpha: float = 1e-3) -> Optional[str]:
    """Adding instance ``n_before`` moves only keys onto it, and about ``1/(n_before+1)`` of them.

    Exact part: every key whose owner changed now belongs to the new instance (and owners are in
    range before and after).  Statistical part: the moved count of the distinct ``keys`` must lie
    in :func:`scale_up_acceptance`'s range for ``vnodes`` points per instance, which false-alarms
    with probability <= ``alpha`` (1e-3) per check when ring points and keys are uniform -- keys
    clustered in a few regions of the ring inflate the spread and void the bound.  Power depends
    on V: with ``vnodes=1`` the new instance's share is Beta(1, n), so even "no key moved" can be
    within range; with V = 64 it is caught.
    """
    distinct = list(dict.fromkeys(keys))
    moved = 0
    for key in distinct:
        before, after = router_before_owner_fn(key), router_after_owner_fn(key)
        if not 0 <= before < n_before or not 0 <= after <= n_before:
            return (f"scale-up: owner of key {key} out of range (before {before} of {n_before}, "
                    f"after {after} of {n_before + 1})")
        if after != before:
            if after != n_before:
                return (f"scale-up: key {key} moved from instance {before} to {after}, "
                        f"not onto the new instance {n_before}")
            moved += 1
    if not distinct:
        return None
    m = len(distinct)
    lo, hi, _ = scale_up_acceptance(m, n_before, vnodes, alpha)
    if not lo <= moved <= hi:
        return (f"scale-up: {moved}/{m} keys moved (fraction {moved / m:.4f}), expected about "
                f"1/{n_before + 1} = {1 / (n_before + 1):.4f}; accepted [{lo}, {hi}] "
                f"(vnodes={vnodes}, alpha={alpha:g})")
    return None
