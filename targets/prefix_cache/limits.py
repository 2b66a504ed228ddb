"""What a prefix_cache case may ask for (:mod:`fuzzkit.limits`), read off the unvalidated inputs.

Where a case's cost comes from: every step of the model scans its node ends comparing keys
(a lookup, an insert, a checkpoint re-inserting the whole request), and every step of the
adapter runs the semantic check, which walks the tree and the live rows recomputing each
path's chained KV values.  Both are bounded by ``steps * longest key * nodes``, and the nodes
are at most the pool's slots and at most the tokens the program brings (``work``).  The
adapter's request table is one row per request id, as long as the longest request
(``row_cells``).

Defaults: 40x and more above the largest values in 1 000 generated programs (seeds 0 and 1:
steps 49, slots 368, tokens 287, longest request 55, row cells 495, work 330 720).  A program
at the work limit (1 000 steps re-caching five 100-token requests in a 500-slot pool) replays
in 0.1 s on the model and 3 s on the adapter, one core.
"""

from __future__ import annotations

from typing import Any

from fuzzkit.limits import Limit, integer, length


def _program(inputs: dict[str, Any]) -> list[Any]:
    program = inputs.get("program")
    return program if isinstance(program, list) else []


def _config(inputs: dict[str, Any]) -> dict[str, Any]:
    config = inputs.get("config")
    return config if isinstance(config, dict) else {}


def steps(inputs: dict[str, Any]) -> int:
    return len(_program(inputs))


def slots(inputs: dict[str, Any]) -> int:
    config = _config(inputs)
    return max(0, integer(config.get("num_pages"))) * max(0, integer(config.get("page_size")))


def tokens(inputs: dict[str, Any]) -> int:
    """Tokens the program adds, appends, looks up and locks."""
    return sum(length(op.get("tokens")) for op in _program(inputs) if isinstance(op, dict))


def _requests(inputs: dict[str, Any]) -> dict[Any, int]:
    """Per request id, its tokens over all its adds and appends (ids are never forgotten)."""
    sizes: dict[Any, int] = {}
    for op in _program(inputs):
        if isinstance(op, dict) and op.get("op") in ("add", "append"):
            rid = op.get("rid")
            key = rid if isinstance(rid, int) else None
            sizes[key] = sizes.get(key, 0) + length(op.get("tokens"))
    return sizes


def request_tokens(inputs: dict[str, Any]) -> int:
    """The longest key a step can use: a request's tokens, or one lookup's."""
    lookups = (length(op.get("tokens")) for op in _program(inputs)
               if isinstance(op, dict) and op.get("op") in ("match", "lock"))
    return max([*_requests(inputs).values(), *lookups, 0])


def row_cells(inputs: dict[str, Any]) -> int:
    """Cells of the adapter's request -> slot table: request ids times the longest request."""
    sizes = _requests(inputs)
    return (len(sizes) + 1) * max(sizes.values(), default=0)


def work(inputs: dict[str, Any]) -> int:
    """Steps * longest key * node bound (the pool's slots, and the program's tokens)."""
    return steps(inputs) * max(1, request_tokens(inputs)) * max(1, min(slots(inputs),
                                                                        tokens(inputs)))


LIMITS = (
    Limit("steps", 2_000, "program steps (operations)", steps),
    Limit("slots", 16_384, "KV slots (num_pages * page_size)", slots),
    Limit("tokens", 20_000, "tokens added, appended, looked up and locked", tokens),
    Limit("request_tokens", 4_096, "tokens of the longest request or lookup", request_tokens),
    Limit("row_cells", 4 * 10**6, "request table cells (request ids * longest request)",
          row_cells),
    Limit("work", 5 * 10**7, "steps * longest key * min(slots, tokens)", work),
)
