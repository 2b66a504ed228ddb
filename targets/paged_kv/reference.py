"""The reference KV cache manager: the policy of :mod:`.protocol` in the plainest Python.

Lists and dicts, linear scans, no cleverness: every line should be checkable against the
protocol text by reading it once.  Speed does not matter here; obviousness does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from targets.paged_kv.hashing import BlockHash, full_block_hashes
from targets.paged_kv.protocol import Allocation, Config

NULL_BLOCK = 0


@dataclasses.dataclass
class _Request:
    tokens: list[int]
    adapter: Optional[int]
    salt: Optional[int]
    table: list[int] = dataclasses.field(default_factory=list)
    computed: int = 0
    pending: int = 0


class ReferenceManager:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.b = config.block_size
        self.ref_cnt = {p: 0 for p in range(1, config.num_blocks)}
        self.block_hash: dict[int, Optional[BlockHash]] = {p: None for p in self.ref_cnt}
        self.free_queue: list[int] = list(range(1, config.num_blocks))  # front first
        self.cached: dict[BlockHash, list[int]] = {}  # publication order
        self.requests: dict[int, _Request] = {}

    # ---------------------------------------------------------------- prefix cache

    def _lookup(self, req: _Request) -> list[int]:
        """Cached blocks for the request's leading full blocks, leaving the last token out."""
        hits = []
        usable = (len(req.tokens) - 1) // self.b
        for h in full_block_hashes(req.tokens, self.b, req.adapter, req.salt, count=usable):
            if not self.cached.get(h):
                break
            hits.append(self.cached[h][0])
        return hits

    def _take_free_block(self) -> int:
        block = self.free_queue.pop(0)
        h = self.block_hash[block]
        if h is not None:  # evict: the cached content is about to be overwritten
            self.cached[h].remove(block)
            if not self.cached[h]:
                del self.cached[h]
            self.block_hash[block] = None
        return block

    def _release(self, blocks: Sequence[int]) -> None:
        for block in reversed(blocks):  # tail first
            if block == NULL_BLOCK:
                continue
            self.ref_cnt[block] -= 1
            if self.ref_cnt[block] == 0:
                if self.block_hash[block] is None:
                    self.free_queue.insert(0, block)
                else:
                    self.free_queue.append(block)

    # ---------------------------------------------------------------- operations

    def add_request(self, rid: int, tokens: Sequence[int], adapter: Optional[int] = None,
                    salt: Optional[int] = None) -> Optional[int]:
        if rid in self.requests:
            return None
        req = _Request(list(tokens), adapter, salt)
        self.requests[rid] = req
        return len(self._lookup(req)) * self.b

    def allocate(self, rid: int, num_tokens: int) -> Optional[Allocation]:
        req = self.requests.get(rid)
        if req is None:
            return None
        hits = self._lookup(req) if not req.table else []
        computed = len(hits) * self.b if not req.table else req.computed
        start = computed + req.pending
        scheduled = max(0, min(num_tokens, len(req.tokens) - start))
        table = req.table if req.table else list(hits)
        needed_blocks = -(-(start + scheduled) // self.b)
        new_blocks = max(0, needed_blocks - len(table))
        write_block = start // self.b  # only a block already in the table can be shared
        cow = (scheduled > 0 and write_block < len(table) and table[write_block] != NULL_BLOCK
               and self.ref_cnt[table[write_block]] > 1)
        hits_in_queue = sum(1 for p in hits if self.ref_cnt[p] == 0)
        if new_blocks + int(cow) > len(self.free_queue) - hits_in_queue:
            return None
        for p in hits:  # pin hits before allocating anything
            if self.ref_cnt[p] == 0:
                self.free_queue.remove(p)
            self.ref_cnt[p] += 1
        req.table = table
        req.computed = computed
        copies = []
        if cow:
            old = table[write_block]
            new = self._take_free_block()
            self.ref_cnt[new] = 1
            self.ref_cnt[old] -= 1
            table[write_block] = new
            copies.append((old, new))
        for _ in range(new_blocks):
            block = self._take_free_block()
            self.ref_cnt[block] = 1
            table.append(block)
        req.pending += scheduled
        return Allocation(computed=start, scheduled=scheduled, copies=tuple(copies))

    def commit(self, rid: int) -> Optional[int]:
        req = self.requests.get(rid)
        if req is None:
            return None
        req.computed += req.pending
        req.pending = 0
        return req.computed

    def publish(self, rid: int) -> Optional[int]:
        req = self.requests.get(rid)
        if req is None:
            return None
        count = 0
        full = min(req.computed // self.b, len(req.table))
        hashes = full_block_hashes(req.tokens, self.b, req.adapter, req.salt, count=full)
        for i, h in enumerate(hashes):
            block = req.table[i]
            if block == NULL_BLOCK or self.block_hash[block] is not None:
                continue
            self.block_hash[block] = h
            self.cached.setdefault(h, []).append(block)
            count += 1
        return count

    def append(self, rid: int, tokens: Sequence[int]) -> Optional[int]:
        req = self.requests.get(rid)
        if req is None:
            return None
        req.tokens.extend(tokens)
        return len(req.tokens)

    def fork(self, src: int, dst: int) -> Optional[bool]:
        req = self.requests.get(src)
        if req is None:
            return None
        if req.pending or dst in self.requests:
            return False
        for block in req.table:
            if block != NULL_BLOCK:
                self.ref_cnt[block] += 1
        self.requests[dst] = _Request(list(req.tokens), req.adapter, req.salt, list(req.table),
                                      req.computed, 0)
        return True

    def preempt(self, rid: int) -> Optional[bool]:
        req = self.requests.get(rid)
        if req is None:
            return None
        self._release(req.table)
        req.table, req.computed, req.pending = [], 0, 0
        return True

    def trim(self, rid: int) -> Optional[int]:
        req = self.requests.get(rid)
        if req is None:
            return None
        window = self.config.sliding_window
        if window is None:
            return 0
        first_needed = req.computed - window + 1
        out_of_window = [i for i in range(len(req.table))
                         if (i + 1) * self.b <= first_needed and req.table[i] != NULL_BLOCK]
        self._release([req.table[i] for i in out_of_window])
        for i in out_of_window:
            req.table[i] = NULL_BLOCK
        return len(out_of_window)

    def finish(self, rid: int) -> Optional[bool]:
        req = self.requests.pop(rid, None)
        if req is None:
            return None
        self._release(req.table)
        return True

    def reset_prefix_cache(self) -> bool:
        if any(self.ref_cnt.values()):
            return False
        for block in self.block_hash:
            self.block_hash[block] = None
        self.cached.clear()
        return True

    def block_table(self, rid: int) -> list[int]:
        req = self.requests.get(rid)
        return list(req.table) if req else []

    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def inspect(self) -> dict[str, Any]:
        return {
            "ref_cnt": dict(self.ref_cnt),
            "block_hash": dict(self.block_hash),
            "free_queue": list(self.free_queue),
            "cached": {h: list(bs) for h, bs in self.cached.items()},
            "tables": {rid: list(r.table) for rid, r in self.requests.items()},
            "tokens_in_table": {rid: r.computed + r.pending for rid, r in self.requests.items()},
        }
