"""The prefix_cache case format: a pool configuration and a program of scheduler steps.

Inputs::

    config   {"page_size": p, "num_pages": N, "need_sort": bool}
    program  [{"op": "add", "rid": 0, "tokens": [...]},     match, lock, evict, allocate
              {"op": "append", "rid": 0, "tokens": [...]},  decode: allocate more slots
              {"op": "checkpoint", "rid": 0},               cache the unfinished request
              {"op": "finish", "rid": 0},                   cache it and release its row
              {"op": "abort", "rid": 0},                    release without caching
              {"op": "match", "tokens": [...]},             a lookup (touches, may split)
              {"op": "lock", "pin": 0, "tokens": [...]},    look up and lock the match
              {"op": "unlock", "pin": 0},                   release that lock
              {"op": "evict", "n": 5},                      evict at least n tokens
              {"op": "reset"}]                              flush (only with no live request)

The steps are the scheduler's, spelled out once here so the reference model and the adapter
do the same thing:

* ``add``: look up ``tokens[:-1]`` cut to whole pages (the scheduler always computes the last
  prompt token), lock the matched node, then make room: evict the shortfall of the scheduler's
  estimate (new tokens, plus one page when pages hold more than one token) below the free
  tokens, and allocate the new tokens' pages (page size 1: ``alloc``; else ``alloc_extend``
  continuing the row).  No room: unlock, not admitted.
* ``append``: the same room-making for the new tokens; no room: nothing appended.
* ``checkpoint``: SGLang's ``RadixCache.checkpoint(req, up_to=len)`` (insert the page-aligned
  tokens, free the duplicates, split at the prompt boundary, re-match, move the lock).
* ``finish`` / ``abort``: ``release_kv_cache`` with / without checkpoint: free the row past the
  tree-owned prefix, unlock.
* ``lock`` / ``unlock``: a holder outside any request (a prefetch, a session) looks the tokens
  up (cut to whole pages, no limit) and locks the node the match ends at; ``unlock`` releases
  it.  Locking the root (no match) holds nothing.
* An ``add`` of a live id or of no tokens, a ``lock`` of a held pin, and a step naming no
  live request is skipped (``unlock`` of a free pin reports ``unlocked: false``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

OPS = ("add", "append", "checkpoint", "finish", "abort", "match", "lock", "unlock", "evict",
       "reset")
REQUEST_OPS = ("append", "checkpoint", "finish", "abort")
SKIPPED = "skipped"


@dataclasses.dataclass(frozen=True)
class Config:
    page_size: int
    num_pages: int
    need_sort: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Config:
        return cls(int(data["page_size"]), int(data["num_pages"]),
                   bool(data.get("need_sort", False)))


def chained(values: Any) -> list[int]:
    """The KV value of each position: a hash of (the previous position's value, the token), so
    position i's value names the whole prefix ``tokens[:i + 1]`` (the driver writes it into the
    slot it allocated for that position; the oracle expects it wherever that prefix is read)."""
    out, h = [], 0x5151
    for t in values:
        h = hash((h, int(t))) & 0x7FFF_FFFF_FFFF_FFFF
        out.append(h)
    return out
