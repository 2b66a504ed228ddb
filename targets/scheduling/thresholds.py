"""Where the scheduling code changes path, as data, and how a case measures the sizes involved.

A bug that lives past a rebuild point or a queue-length cut-off is unreachable for a workload that
never gets there: the optimized policies' lazy indexes rebuild at ``2 * live + 32`` entries, the
kinetic tournament doubles at its 9th waiting request and LPM falls back to FCFS past 128 waiting
requests, while a dozen requests per case never reach any of them.  So each edge is a
:class:`fuzzkit.reach.Threshold` built from the constant the code itself uses (change the constant
and the threshold moves with it), and :data:`SIZES` says how a case is measured against it.

Edges that are *parameters* of a case (Fairway's ``short_queue``, an explicit LPM
``fallback_len``, a static admission cap, Basin's ``b_min`` clamp, the token budget against a
prompt) have no fixed value to declare: the strategy draws those parameters next to the workload
size they cut (``q - 1, q, q + 1`` for a burst of ``q``; see :mod:`.strategies`).

Sizes are measured from the inputs alone (no simulation), and only where the input pins them
down: requests released at one tick all wait in one queue before its next pop only on a single
instance, with no scale-up yet and no admission controller that may hold some of them back.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from fuzzkit.reach import Size, Threshold
from fuzzkit.targets.scheduling.policies.optimized import COMPACT_SLACK, TOURNAMENT_LEAVES
from fuzzkit.targets.scheduling.policies.reference import DEFAULT_FALLBACK

#: The largest case the strategy builds (twice the lazy indexes' rebuild point and more; past
#: LPM's default fallback).
MAX_REQUESTS = 160

#: The optimized policies (:mod:`.policies.optimized`).
POLICIES: tuple[Threshold, ...] = (
    Threshold("pushes", COMPACT_SLACK,
              "LPM / SPF lazy indexes (age deque, lazy heaps) are rebuilt once they hold more "
              "than 2*live + 32 entries: 33+ requests through one queue, most of them dispatched "
              "(dead ages) or repriced (stale keys)", cap=160),
    Threshold("fairway_queue", TOURNAMENT_LEAVES,
              "Fairway's kinetic tournament starts with 8 leaves: the 9th request waiting at once "
              "doubles it (_grow copies the leaves and rebuilds at the current tick), the 17th "
              "doubles it again", cap=40),
    # a cut-off, not a tile: past it every length takes the same path, so no second crossing
    # at 2t is worth a case of 257 requests
    Threshold("lpm_queue", DEFAULT_FALLBACK,
              "LPM's default fallback_len (SGLang's 128): with more requests waiting it serves "
              "FCFS from the age deque instead of the longest-prefix heap",
              cap=DEFAULT_FALLBACK + 8),
)

#: The optimized routers (:mod:`.routers.optimized`).
ROUTERS: tuple[Threshold, ...] = (
    Threshold("vnodes", 1,
              "prefix router: with one ring point per instance the bounded-load walk meets each "
              "instance once; with more it passes further points of instances it already found "
              "full (the seen[] skip)", cap=8),
)

#: Code every implementation runs through (:mod:`.sim`, :mod:`.memory`).
SIMULATOR: tuple[Threshold, ...] = (
    Threshold("instances", 1,
              "one instance takes every request; from two on the router decides (least-loaded "
              "scan, ring walk, round-robin modulo)", cap=4),
    Threshold("kv_slack", 1,
              "session KV pool = the largest turn's context + slack blocks: at slack 0 that turn "
              "fills the pool (every other session must be evicted), at 1 one block is left",
              cap=16),
    Threshold("cpu_blocks", 1,
              "CPU tier capacity: the (cpu_blocks + 1)-th evicted block stored there pushes the "
              "least recently stored one out (and changes its session's plan)", cap=16),
)


def optimized() -> tuple[Threshold, ...]:
    """The optimized implementation's own thresholds (policies and routers)."""
    return POLICIES + ROUTERS


# ------------------------------------------------------------------------------------ measures


def _config(inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    return inputs.get("config", {})


def _holds(config: Mapping[str, Any]) -> bool:
    """An admission controller that may hold sessions back (so arrivals need not queue at once)."""
    admission = config.get("admission")
    return admission is not None and admission.get("name") != "none"


def largest_burst(inputs: Mapping[str, Any]) -> int:
    """The largest group of first turns sent at one tick to a single instance that nothing holds
    back, before any scale-up (0 if the case has none): the group waits in the queue together
    before its next pop."""
    config = _config(inputs)
    if int(config.get("instances", 1)) != 1 or _holds(config):
        return 0
    first_scale_up = min((int(t) for t in config.get("scale_ups", [])), default=None)
    groups: dict[int, int] = {}
    for r in inputs.get("requests", []):
        if r.get("after") is None:
            groups[int(r["arrival"])] = groups.get(int(r["arrival"]), 0) + 1
    return max((count for tick, count in groups.items()
                if first_scale_up is None or tick < first_scale_up), default=0)


def queue_lengths(inputs: Mapping[str, Any]) -> Iterator[int]:
    """Every length the queue certainly passes through: a group of ``k`` joins it one push at a
    time and leaves it one pop at a time (arrivals only add), so the policy sees each length
    ``1..k``; the tournament holds each of them too."""
    yield from range(1, largest_burst(inputs) + 1)


def _policy(inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    return _config(inputs).get("policy", {})


def _pushes(inputs: Mapping[str, Any]) -> Iterator[int]:
    """Push counts instance 0's LPM / SPF queue certainly reaches (its indexes grow one push at a
    time): on a single instance that nothing holds back, every request before the first
    scale-up (only first turns then: a follow-up may be released after it)."""
    config = _config(inputs)
    if (_policy(inputs).get("name") not in ("lpm", "spf") or _holds(config)
            or int(config.get("instances", 1)) != 1):
        return
    requests = inputs.get("requests", [])
    if config.get("scale_ups"):
        first = min(int(t) for t in config["scale_ups"])
        requests = [r for r in requests if r.get("after") is None and int(r["arrival"]) < first]
    yield from range(1, len(requests) + 1)


def _fairway_queue(inputs: Mapping[str, Any]) -> Iterator[int]:
    if _policy(inputs).get("name") == "fairway":
        yield from queue_lengths(inputs)


def _lpm_queue(inputs: Mapping[str, Any]) -> Iterator[int]:
    policy = _policy(inputs)
    if policy.get("name") == "lpm" and "fallback_len" not in policy:
        yield from queue_lengths(inputs)


def _vnodes(inputs: Mapping[str, Any]) -> Iterator[int]:
    router = _config(inputs).get("router", {})
    if router.get("name") == "prefix":
        yield int(router.get("vnodes", 64))


def _instances(inputs: Mapping[str, Any]) -> Iterator[int]:
    yield int(_config(inputs).get("instances", 1))


def largest_context(requests: Any, block_size: int) -> int:
    """Blocks of the largest turn's context (prompt and output): what one turn holds at once."""
    return max((-(-(int(r["prompt"]) + int(r["output"])) // block_size) for r in requests),
               default=0)


def _kv_slack(inputs: Mapping[str, Any]) -> Iterator[int]:
    config = _config(inputs)
    memory = config.get("memory")
    if memory:
        largest = largest_context(inputs.get("requests", []), int(config.get("block_size", 16)))
        yield int(memory["kv_blocks"]) - largest


def _cpu_blocks(inputs: Mapping[str, Any]) -> Iterator[int]:
    memory = _config(inputs).get("memory")
    if memory:
        yield int(memory.get("cpu_blocks", 0))


#: ``Target.sizes``: every size a threshold above names.
SIZES: dict[str, Size] = {
    "pushes": Size(_pushes, lo=1),
    "fairway_queue": Size(_fairway_queue, lo=1),
    "lpm_queue": Size(_lpm_queue, lo=1),
    "vnodes": Size(_vnodes, lo=1),
    "instances": Size(_instances, lo=1),
    "kv_slack": Size(_kv_slack, lo=0),
    "cpu_blocks": Size(_cpu_blocks, lo=0),
}
