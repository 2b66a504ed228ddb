"""A prefix cache with a capacity in blocks, LRU across chains, leaves before their parents.

Block ids are prefix-trie nodes (:mod:`.workload`), so a hit is the number of *leading* blocks of
a prompt that are resident.  Using a chain touches it from the leaf up to the root, so within a
chain the root is always the most recently used: eviction takes leaves first and never strands a
deep block behind an evicted parent (what radix-tree caches such as SGLang's do).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence


class PrefixCache:
    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks < 0:  # pragma: no cover - validate() rejects it
            raise ValueError("cache capacity must be >= 0 blocks")
        self.capacity = capacity_blocks
        self._lru: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self.version = 0  # bumped whenever the resident set changes
        #: Blocks that entered or left since the owner last cleared it: only the waiting
        #: requests whose prompts hold one of them can have another hit now.
        self.changed: set[int] = set()

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, block: int) -> bool:
        return block in self._lru

    def match(self, blocks: Sequence[int]) -> int:
        """How many leading ``blocks`` are resident."""
        n = 0
        for block in blocks:
            if block not in self._lru:
                break
            n += 1
        return n

    def insert(self, blocks: Sequence[int]) -> None:
        """Make ``blocks`` (a chain from the root) resident and most recently used, evicting the
        least recently used blocks beyond capacity."""
        if self.capacity == 0 or not blocks:
            return
        lru, changed = self._lru, self.changed
        touched = False
        for block in reversed(blocks[: self.capacity]):  # leaf first: the root ends up most recent
            if block in lru:
                lru.move_to_end(block)
            else:
                lru[block] = None
                changed.add(block)
                touched = True
        while len(lru) > self.capacity:
            changed.add(lru.popitem(last=False)[0])
            touched = True
        if touched:
            self.version += 1
