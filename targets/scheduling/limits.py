"""What a scheduling case may ask for (:mod:`fuzzkit.limits`), read off the unvalidated inputs.

Where a case's cost comes from:

* the simulator runs one step per instance while it has work, each step decoding one token of
  every running request and prefilling at most ``token_budget`` tokens: the steps grow with the
  tokens the requests ask for (``prompt + output``; one request of ``output = 10**9`` is
  ``10**9`` steps, and ``len(blocks)`` does not bound it when the block size is huge); 200 000
  tokens of one request take 0.7 s per implementation;
* every step and every routing decision walks the instances (``instances`` plus one per
  ``scale_ups`` tick);
* the reference prefix router, and the oracle's, scan all ``instances * vnodes`` ring points per
  request (2 000 requests over 32 768 points: 10 s, plus 7 s in the oracle);
* the reference policies scan the waiting requests at every step, and memory mode reprices
  them: requests times tokens (5 000 requests arriving at once: 34 s for Fairway's reference).

Arrival and think times, cost constants, cache and memory capacities, policy and admission
parameters are numbers compared or added: no loop or allocation grows with them.  Config numbers
go through ``int()`` in the simulator, so a float or a numeric string counts at its value.

Defaults: 12x to 1 000x the largest values in 2 500 generated cases (seeds 0 and 7, the
strategy for each implementation): requests 160, instances 6, tokens 3 609, ring points 384,
route work 9 920, queue work 458 343.  A case at any one default replays in about 10 s
(the reference and the optimized simulator, one core), most of them in a second or two.
"""

from __future__ import annotations

from typing import Any

from fuzzkit.limits import Limit, integer

#: The router's ``vnodes`` when the config leaves it out (``routers.reference.RingRouter``).
DEFAULT_VNODES = 64




def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _requests(inputs: dict[str, Any]) -> list[Any]:
    requests = inputs.get("requests")
    return requests if isinstance(requests, list) else []


def requests(inputs: dict[str, Any]) -> int:
    return len(_requests(inputs))


def instances(inputs: dict[str, Any]) -> int:
    """Instances at the end of the run: the configured ones plus one per scale-up."""
    config = _dict(inputs.get("config"))
    scale_ups = config.get("scale_ups")  # int() of each item: a string's characters count too
    return (integer(config.get("instances", 1))
            + (len(scale_ups) if isinstance(scale_ups, (list, tuple, dict, str)) else 0))


def tokens(inputs: dict[str, Any]) -> int:
    """Prompt and output tokens of all requests: what the steps work through."""
    return sum(max(0, integer(r.get("prompt"))) + max(0, integer(r.get("output")))
               for r in _requests(inputs) if isinstance(r, dict))


def ring_points(inputs: dict[str, Any]) -> int:
    """Points on the prefix router's hash ring: instances times ``vnodes``."""
    router = _dict(_dict(inputs.get("config")).get("router"))
    if router.get("name") != "prefix":
        return 0
    return max(0, instances(inputs)) * max(0, integer(router.get("vnodes", DEFAULT_VNODES)))


def queue_work(inputs: dict[str, Any]) -> int:
    """Requests times tokens: steps (tokens) that may each reprice or scan every waiting
    request."""
    return requests(inputs) * max(0, tokens(inputs))


def route_work(inputs: dict[str, Any]) -> int:
    """Requests times ring points: the reference router (and the oracle's) scans every point
    for every request."""
    return requests(inputs) * max(0, ring_points(inputs))


LIMITS = (
    Limit("requests", 2_000, "requests in the workload", requests),
    Limit("instances", 256, "serving instances (config instances + scale_ups)", instances),
    Limit("tokens", 200_000, "prompt + output tokens of all requests", tokens),
    Limit("ring_points", 8_192, "prefix-router ring points (instances * vnodes)", ring_points),
    Limit("route_work", 10**7, "ring points scanned (requests * ring points)", route_work),
    Limit("queue_work", 15_000_000, "requests * tokens (steps that reprice or scan the queues)",
          queue_work),
)
