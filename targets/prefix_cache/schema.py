"""The ``prefix_cache`` contract as data (:mod:`fuzzkit.schema`): what ``fuzzkit describe
prefix_cache`` shows.

The operations are :mod:`.program`'s (which says what each step does), the ranges what
:mod:`.strategies` draws.  The describe tests check drawn cases and the reference's outputs
against this."""

from __future__ import annotations

from fuzzkit.schema import Schema, anything, boolean, integer, listing, ops, record, text
from fuzzkit.targets.prefix_cache import strategies


def schema() -> Schema:
    """The inputs an implementation receives and the outputs it returns."""
    s = strategies
    tokens = listing("tokens", integer("token", "", 0, 7), "token ids (an alphabet of 2-8)")
    rid = integer("rid", "request id", 0, s.RIDS)
    pin = integer("pin", "a lock holder outside any request", 0, s.PINS - 1)
    program = ops("program", {
        "add": (rid, tokens),
        "append": (rid, tokens),
        "checkpoint": (rid,),
        "finish": (rid,),
        "abort": (rid,),
        "match": (tokens,),
        "lock": (pin, tokens),
        "unlock": (pin,),
        "evict": (integer("n", "evict at least n tokens", 0),),
        "reset": (),
    }, "the scheduler's steps, in order (reducible; fuzzkit.targets.prefix_cache.program "
       "says what each does)", (1, 2000))
    counts = ("evictable", "protected", "available", "cached")
    return Schema(
        inputs=(
            record("config", (
                integer("page_size", "tokens per page (1: per token)",
                        choices=sorted(set(s.PAGE_SIZES))),
                integer("num_pages", "pages in the KV pool", 3, 48),
                boolean("need_sort", "the allocator sorts freed slots (absent: false)",
                        optional=True),
            ), "the pool"),
            program,
        ),
        outputs=(
            listing("steps", record("step", (
                text("op", "the operation"),
                anything("result", "its result: admitted / prefix / evicted / freed counts, "
                         "or \"skipped\""),
                record("state", tuple(integer(c, f"{c} tokens after the step", 0)
                                      for c in counts), "the cache's token counts"),
            ), "one step"), "one record per step run"),
            record("violation", (), "the implementation's first semantic violation; null: "
                   "none", nullable=True, open=True),
        ),
        notes="No slot ids in the outputs: the allocator's order is its own business; the "
              "oracle checks the KV values a read returns instead.",
    )
