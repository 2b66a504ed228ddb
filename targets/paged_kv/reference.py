"""The reference KV cache manager: the policy of :mod:`.protocol` in the plainest Python.

Lists and dicts, linear scans, no cleverness: every line should be checkable against the
protocol text by reading it once.  Speed does not matter here; obviousness does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from fuzzkit.targets.paged_kv.hashing import BlockHash, full_block_hashes
from fuzzkit.targets.paged_kv.protocol import ALL_CAPABILITIES, EVICTIONS, Allocation, Config

NULL_BLOCK = 0
NEW = None  # a table entry planned for a block not taken yet (the hole of a refill)


@dataclasses.dataclass
class _Request:
    tokens: list[int]
    adapter: Optional[int]
    salt: Optional[int]
    table: list[int] = dataclasses.field(default_factory=list)
    computed: int = 0
    pending: int = 0
    refill: Optional[tuple[int, int]] = None  # (hole end, suffix end) while a refill is open


class ReferenceManager:
    capabilities = ALL_CAPABILITIES
    eviction_policies = EVICTIONS

    def __init__(self, config: Config) -> None:
        self.config = config
        self.b = config.block_size
        self.ref_cnt = {p: 0 for p in range(1, config.num_blocks)}
        self.block_hash: dict[int, Optional[BlockHash]] = {p: None for p in self.ref_cnt}
        self.free_queue: list[int] = list(range(1, config.num_blocks))  # front first
        self.cached: dict[BlockHash, list[int]] = {}  # publication order
        self.requests: dict[int, _Request] = {}
        self.owner: dict[int, Optional[int]] = {p: None for p in self.ref_cnt}  # allocating rid
        self.shared = {p: False for p in self.ref_cnt}
        self.group: dict[int, Optional[int]] = {p: None for p in self.ref_cnt}  # session release
        self.releases = 0

    # ---------------------------------------------------------------- prefix cache

    def _usable(self, req: _Request) -> int:
        return (len(req.tokens) - 1) // self.b  # the last token is always computed

    def _lookup(self, req: _Request) -> tuple[list[int], int, list[int]]:
        """Prefix hits, and under penelope the hole's length and the suffix hits: the run of
        cached blocks ending at the last cached usable block, behind the prefix's first miss.
        Under an eager window the prefix starts with null entries (out of the window)."""
        hashes = full_block_hashes(req.tokens, self.b, req.adapter, req.salt,
                                   count=self._usable(req))
        found = [self.cached[h][0] if self.cached.get(h) else None for h in hashes]
        if self.config.eager:
            return self._window_lookup(found), 0, []
        prefix: list[int] = []
        for block in found:
            if block is None:
                break
            prefix.append(block)
        rest = found[len(prefix):] if self.config.eviction == "penelope" else []
        while rest and rest[-1] is None:  # after the last cached block: computed as usual
            rest.pop()
        suffix: list[int] = []
        while rest and rest[-1] is not None:
            suffix.insert(0, rest.pop())
        return prefix, len(rest), suffix

    def _window_lookup(self, found: list[Optional[int]]) -> list[int]:
        """Eager window: the last run of ``c = ceil((w - 1) / b)`` cached blocks among the usable
        ones, behind null entries; else the cached run from block 0."""
        need = -(-(self.config.sliding_window - 1) // self.b)  # type: ignore[operator]
        for i in range(len(found) - need, -1, -1):
            run = found[i:i + need]
            if need and all(block is not None for block in run):
                return [NULL_BLOCK] * i + run  # type: ignore[list-item]
        prefix: list[int] = []
        for block in found:
            if block is None:
                break
            prefix.append(block)
        return prefix

    def _hold(self, block: int, rid: int) -> None:
        """``rid`` takes a reference on a block with content (a hit, a fork)."""
        if self.ref_cnt[block] == 0:
            self.free_queue.remove(block)
        self.ref_cnt[block] += 1
        self.group[block] = None
        if self.owner[block] != rid:
            self.shared[block] = True

    def _drop_hash(self, block: int) -> None:
        h = self.block_hash[block]
        self.cached[h].remove(block)
        if not self.cached[h]:
            del self.cached[h]
        self.block_hash[block] = None

    def _take_free_block(self, rid: int) -> int:
        block = self.free_queue.pop(0)
        if self.block_hash[block] is not None:  # evict: the content is about to be overwritten
            self._drop_hash(block)
            if self.group[block] is not None:  # session: the rest of its release goes too
                rest = [p for p in self.free_queue
                        if self.group[p] == self.group[block] and self.block_hash[p] is not None]
                for p in rest:
                    self._drop_hash(p)
                    self.free_queue.remove(p)
                    self.group[p] = None
                self.free_queue[:0] = rest
        self.ref_cnt[block] = 1
        self.owner[block], self.shared[block], self.group[block] = rid, False, None
        return block

    def _release(self, blocks: Sequence[int], whole_request: bool) -> None:
        """``blocks`` in table order; ``whole_request``: a finish or preempt (not a trim)."""
        freed = []
        for block in reversed(blocks):  # tail first
            if block == NULL_BLOCK:
                continue
            self.ref_cnt[block] -= 1
            if self.ref_cnt[block] == 0:
                freed.append(block)
        for block in freed:
            if self.block_hash[block] is None:
                self.free_queue.insert(0, block)
        cached = [p for p in freed if self.block_hash[p] is not None]  # tail first
        if whole_request and self.config.eviction == "penelope":
            cached = ([p for p in reversed(cached) if not self.shared[p]]
                      + [p for p in cached if self.shared[p]])
        self.free_queue.extend(cached)
        if whole_request:
            self.releases += 1
        for block in freed:
            grouped = (whole_request and self.config.eviction == "session"
                       and block in cached and not self.shared[block])
            self.group[block] = self.releases if grouped else None

    # ---------------------------------------------------------------- operations

    def add_request(self, rid: int, tokens: Sequence[int], adapter: Optional[int] = None,
                    salt: Optional[int] = None) -> Optional[int]:
        if rid in self.requests:
            return None
        req = _Request(list(tokens), adapter, salt)
        self.requests[rid] = req
        prefix, _, suffix = self._lookup(req)
        return (len(prefix) + len(suffix)) * self.b

    def allocate(self, rid: int, num_tokens: int) -> Optional[Allocation]:
        req = self.requests.get(rid)
        if req is None:
            return None
        if self.config.eager:  # before everything, even when the allocation does not fit
            self._trim(req)
        admitting = not req.table
        if admitting:
            prefix, hole, suffix = self._lookup(req)
            hits = [p for p in prefix + suffix if p != NULL_BLOCK]
            table = prefix + [NEW] * hole + suffix
            computed = len(prefix) * self.b
            refill = ((len(prefix) + hole) * self.b, len(table) * self.b) if hole else None
        else:
            hits, table, computed, refill = [], req.table, req.computed, req.refill
        start = computed + req.pending
        limit = len(req.tokens) if refill is None else refill[0]  # a refill stops at the hole end
        scheduled = max(0, min(num_tokens, limit - start))
        needed_blocks = -(-(start + scheduled) // self.b)
        new_blocks = table.count(NEW) + max(0, needed_blocks - len(table))
        write_block = start // self.b  # only a block already in the table can be shared
        cow = (not admitting and scheduled > 0 and write_block < len(table)
               and table[write_block] != NULL_BLOCK and self.ref_cnt[table[write_block]] > 1)
        hits_in_queue = sum(1 for p in hits if self.ref_cnt[p] == 0)
        if new_blocks + int(cow) > len(self.free_queue) - hits_in_queue:
            return None
        for p in hits:  # pin hits before allocating anything
            self._hold(p, rid)
        req.table, req.computed, req.refill = table, computed, refill
        copies = []
        if cow:
            old = table[write_block]
            new = self._take_free_block(rid)
            self.ref_cnt[old] -= 1
            table[write_block] = new
            copies.append((old, new))
        for i, p in enumerate(table):  # the hole, front first
            if p is NEW:
                table[i] = self._take_free_block(rid)
        for _ in range(needed_blocks - len(table)):
            table.append(self._take_free_block(rid))
        req.pending += scheduled
        if self.config.hashing == "allocate":  # blocks full once the step is written
            self._hash_blocks(req, start + scheduled)
        return Allocation(computed=start, scheduled=scheduled, copies=tuple(copies))

    def commit(self, rid: int) -> Optional[int]:
        req = self.requests.get(rid)
        if req is None:
            return None
        req.computed += req.pending
        req.pending = 0
        if req.refill is not None and req.computed >= req.refill[0]:  # the hole is complete
            req.computed, req.refill = req.refill[1], None
        return req.computed

    def publish(self, rid: int) -> Optional[int]:
        req = self.requests.get(rid)
        if req is None:
            return None
        if self.config.hashing == "allocate":  # allocations hash; publish does nothing
            return 0
        return self._hash_blocks(req, req.computed)

    def _hash_blocks(self, req: _Request, tokens: int) -> int:
        """Hash the table's non-null, unhashed blocks that ``tokens`` fill; return how many.
        An eager window of 1 hashes nothing (no hit could use the block)."""
        if self.config.eager and self.config.sliding_window == 1:
            return 0
        count = 0
        full = min(tokens // self.b, len(req.table))
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
        if req.pending or req.refill is not None or dst in self.requests:
            return False
        for block in req.table:
            if block != NULL_BLOCK:
                self._hold(block, dst)
        self.requests[dst] = _Request(list(req.tokens), req.adapter, req.salt, list(req.table),
                                      req.computed, 0)
        return True

    def preempt(self, rid: int) -> Optional[bool]:
        req = self.requests.get(rid)
        if req is None:
            return None
        self._release(req.table, whole_request=True)
        req.table, req.computed, req.pending, req.refill = [], 0, 0, None
        return True

    def trim(self, rid: int) -> Optional[int]:
        req = self.requests.get(rid)
        if req is None:
            return None
        return self._trim(req)

    def _trim(self, req: _Request) -> int:
        """Free the blocks wholly below the first key a future query reads (``computed - w +
        1``); return how many.  ``trim`` and, under an eager window, every ``allocate``."""
        window = self.config.sliding_window
        if window is None:
            return 0
        first_needed = req.computed - window + 1
        out_of_window = [i for i in range(len(req.table))
                         if (i + 1) * self.b <= first_needed and req.table[i] != NULL_BLOCK]
        self._release([req.table[i] for i in out_of_window], whole_request=False)
        for i in out_of_window:
            req.table[i] = NULL_BLOCK
        return len(out_of_window)

    def finish(self, rid: int) -> Optional[bool]:
        req = self.requests.pop(rid, None)
        if req is None:
            return None
        self._release(req.table, whole_request=True)
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
            "tokens_in_table": {rid: r.computed + r.pending if r.refill is None else r.refill[1]
                                for rid, r in self.requests.items()},
        }
