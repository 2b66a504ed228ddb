"""Programs for the prefix_cache target: where a radix prefix cache goes wrong.

Radix-tree bugs live at node edges and page edges: a lookup or insert that ends in the middle
of an edge (a split, which must copy the lock count and the values), keys of ``k*p`` and
``k*p +- 1`` tokens (page rounding), many requests sharing a prefix (deep trees) or diverging
after one token (wide trees), the same sequence cached twice (dedup: the second copy's slots
must go back to the allocator), eviction while requests hold locks on a path (a locked node
must survive, its unlocked siblings and descendants go, parents become leaves), a request that
grows past its prompt and is checkpointed several times (the lock moves down), and a pool
small enough that every admission evicts or is refused.

How a program is drawn: a page size (1 mostly, 2, 3, 4, 8), a pool of 3 to 48 pages (small
pools in most programs), a token alphabet of 2 to 8 ids (small alphabets make prefixes
repeat), and swarm weights (each operation kind gets a random weight, some zero, so some
programs are all lookups and evictions, others never finish a request).  Token sequences are
either fresh or an earlier sequence cut at a drawn point (often a page boundary +- 1 or the
middle of an earlier sequence) plus a fresh tail, so keys share prefixes of every length.  A
generation-time guess of which requests and pins are live aims request operations and unlocks
at them, with a share of unknown ids (skipped steps, also compared).  Pins lock arbitrary
lookups (mid-edge, after splits, the same node twice) outside any request.
"""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from fuzzkit.targets.prefix_cache.program import OPS, REQUEST_OPS

Draw = Callable[[Any], Any]

PAGE_SIZES = (1, 1, 1, 2, 3, 4, 8)
STEPS = 40
RIDS = 8
PINS = 3
#: default swarm weight ceilings per op (a program draws each weight in 0..ceiling)
WEIGHTS = {"add": 6, "append": 3, "checkpoint": 3, "finish": 6, "abort": 1, "match": 3,
           "lock": 2, "unlock": 2, "evict": 3, "reset": 1}


def _cut(draw: Draw, length: int, ps: int) -> int:
    """Where to cut an earlier sequence: a page boundary +- 1, its middle, or anywhere."""
    how = draw(st.integers(0, 3))
    if how == 0 and length >= ps:
        page = draw(st.integers(1, length // ps)) * ps
        return max(0, min(length, page + draw(st.integers(-1, 1))))
    if how == 1:
        return length // 2
    return draw(st.integers(0, length))


def _tokens(draw: Draw, seen: list[list[int]], ps: int, alphabet: int) -> list[int]:
    tail_max = draw(st.sampled_from([ps + 1, 2 * ps + 1, 4 * ps + 2, 3 * ps + 9]))
    if seen and draw(st.integers(0, 4)) < 4:
        base = seen[draw(st.integers(0, len(seen) - 1))]
        head = base[: _cut(draw, len(base), ps)]
        tail = draw(st.lists(st.integers(0, alphabet - 1), min_size=0, max_size=tail_max))
        tokens = head + tail
    else:
        tokens = draw(st.lists(st.integers(0, alphabet - 1), min_size=1, max_size=tail_max))
    return tokens or [draw(st.integers(0, alphabet - 1))]


@st.composite
def inputs(draw: Draw, max_steps: int = STEPS) -> dict[str, Any]:
    """One case: ``config`` and ``program`` (see :mod:`fuzzkit.targets.prefix_cache.program`)."""
    ps = draw(st.sampled_from(PAGE_SIZES))
    small = draw(st.integers(0, 3)) < 3
    num_pages = draw(st.integers(3, 12) if small else st.integers(8, 48))
    config = {"page_size": ps, "num_pages": num_pages, "need_sort": draw(st.booleans())}
    alphabet = draw(st.sampled_from([2, 3, 4, 8]))
    weights = {op: draw(st.integers(0, WEIGHTS[op])) for op in OPS}
    weights["add"] = max(1, weights["add"])
    table = [op for op in OPS for _ in range(weights[op])]
    seen: list[list[int]] = []
    live: dict[int, list[int]] = {}
    pins: set[int] = set()
    served = draw(st.booleans())
    program: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, max_steps))):
        kind = table[draw(st.integers(0, len(table) - 1))]
        unknown = draw(st.integers(0, 15)) == 15
        if kind == "add" and len(live) == RIDS and not unknown:
            kind = "finish"  # every id is taken: make room
        elif kind in REQUEST_OPS and not live and not unknown:
            kind = "add"  # nothing to aim at
        if kind == "add":
            free = [r for r in range(RIDS) if r not in live]
            rid = draw(st.sampled_from(free)) if free and not unknown else draw(
                st.integers(0, RIDS - 1))
            tokens = _tokens(draw, seen, ps, alphabet)
            program.append({"op": "add", "rid": rid, "tokens": tokens})
            seen.append(tokens)
            if served and draw(st.integers(0, 2)) == 0:  # a short request: served at once
                program.append({"op": "finish", "rid": rid})
            else:
                live.setdefault(rid, list(tokens))
            continue
        if kind in ("match", "lock"):
            tokens = _tokens(draw, seen, ps, alphabet)
            if kind == "lock":
                pin = draw(st.integers(0, PINS - 1))
                program.append({"op": "lock", "pin": pin, "tokens": tokens})
                pins.add(pin)
            else:
                program.append({"op": "match", "tokens": tokens})
                if draw(st.integers(0, 3)) == 0:  # then the least recent leaf goes
                    program.append({"op": "evict", "n": draw(st.sampled_from([1, ps]))})
            continue
        if kind == "unlock":
            pin = (draw(st.sampled_from(sorted(pins))) if pins and not unknown
                   else draw(st.integers(0, PINS - 1)))
            program.append({"op": "unlock", "pin": pin})
            pins.discard(pin)
            continue
        if kind == "evict":
            n = draw(st.sampled_from([0, 1, ps - 1, ps, ps + 1, 2 * ps + 1, 3 * ps, 10**4]))
            program.append({"op": "evict", "n": max(0, n)})
            continue
        if kind == "reset":
            program.append({"op": "reset"})
            if not live or unknown:
                seen.clear()
            continue
        rid = (draw(st.sampled_from(sorted(live))) if live and not unknown
               else draw(st.integers(0, RIDS)))
        if kind == "append":
            tokens = draw(st.lists(st.integers(0, alphabet - 1), min_size=1,
                                   max_size=draw(st.sampled_from([1, ps, 2 * ps + 1]))))
            program.append({"op": "append", "rid": rid, "tokens": tokens})
            if rid in live:
                live[rid] = live[rid] + tokens
                seen.append(live[rid])
            continue
        program.append({"op": kind, "rid": rid})
        if kind in ("finish", "abort"):
            live.pop(rid, None)
    return {"config": config, "program": program}
