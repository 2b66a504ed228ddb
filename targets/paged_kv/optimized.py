"""A vLLM-v1-style KV cache manager: block pool, doubly-linked free queue, NumPy block tables.

This is the *optimized* implementation of the protocol in :mod:`fuzzkit.targets.paged_kv.protocol`
(read its module docstring: that text is the contract).  The data structures follow vLLM v1's
``KVCacheManager`` / ``BlockPool`` / ``FreeKVCacheBlockQueue``:

* ``KVCacheBlock`` objects in a list indexed by block id; block 0 is the null block, never in the
  free queue, never hashed, never freed.
* a doubly-linked free queue with sentinel head and tail nodes: O(1) ``popleft``, ``append``,
  ``appendleft`` and ``remove`` from the middle (pinning a cached hit), O(1) length.
* a cached map ``hash -> {block_id: block}`` (a dict of dicts; insertion order = publish order, so
  the first value is the block published first).  Taking a still-hashed block from the free queue
  evicts it: it leaves the map and loses its hash.
* per-request state with the request's block hashes computed lazily and cached incrementally
  (tokens are only ever appended, so a cached chain hash never goes stale).
* block tables in one int32 array ``tables[max_rows, max_blocks_per_row]`` plus ``row_lens``;
  rows come from a free-row list and are reused after ``finish``; both dimensions grow on demand.

Patch points
------------
Every policy step is one small method, so that a mutant can replace exactly one of them with
``unittest.mock.patch.object(OptimizedManager, "<method>", buggy)`` and model one real bug.  The
public operations only sequence those steps; they hold no policy of their own.  The docstring of
each step says which rule of the protocol it implements and which bug class patching it models.
Steps that *decide* (``_find_hits``, ``_shared_write_index``, ``_fits``...) are pure: they
change nothing, so ``allocate`` can decide everything before it changes anything.

Eviction policies
-----------------
``Config.eviction`` picks "lru" (the above), "session" or "penelope" (the protocol's docstring
has the exact rules).  Each policy difference is one step too: ``_release_order`` (the order
released cached blocks join the back of the queue), ``_find_suffix`` (penelope's resident
suffix behind a hole), ``_close_refill`` (the jump past the suffix once the hole is computed)
and ``_evict_release_group`` (session: the rest of an evicted block's release goes with it).
Blocks carry their owner (the request id they were handed out to), a *shared* flag and their
session release group; each release group is a dict of its blocks still cached in the free
queue, in queue order, so evicting a session costs its own size.

Variants
--------
``Config.window_mode`` "eager" (vLLM's ``SlidingWindowManager``) adds two steps:
``_remove_skipped_blocks`` (every allocation first frees the out-of-window blocks, before its
fit check) and ``_find_window_hits`` (the last run of ``ceil((w - 1) / b)`` cached blocks,
behind null entries).  ``Config.hashing`` "allocate" (vLLM's ``allocate_slots`` ->
``cache_blocks``) hashes in ``_hash_scheduled_blocks`` the blocks an allocation fills, from the
request's ``num_cached_blocks`` watermark; ``publish`` is then a no-op.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

import numpy as np

from fuzzkit.reach import Threshold
from fuzzkit.targets.paged_kv import hashing
from fuzzkit.targets.paged_kv.hashing import BlockHash, ExtraKeys
from fuzzkit.oracles.kvguard import NULL_GUARD
from fuzzkit.targets.paged_kv.protocol import ALL_CAPABILITIES, EVICTIONS, Allocation, Config

__all__ = ["KVCacheBlock", "FreeKVCacheBlockQueue", "OptimizedManager", "thresholds"]


class KVCacheBlock:
    """One physical block: id, reference count, hash (None unless published and not evicted),
    the free-queue links (both None while the block is not in the queue), and for the eviction
    policies its owner (the request id it was handed out to), whether another request id has
    held it since (``shared``) and its session release group (None outside one)."""

    __slots__ = ("block_id", "ref_cnt", "block_hash", "prev_free_block", "next_free_block",
                 "owner", "shared", "release")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: Optional[BlockHash] = None
        self.prev_free_block: Optional[KVCacheBlock] = None
        self.next_free_block: Optional[KVCacheBlock] = None
        self.owner: Optional[int] = None
        self.shared = False
        self.release: Optional[int] = None

    def __repr__(self) -> str:
        return (f"KVCacheBlock(id={self.block_id}, ref_cnt={self.ref_cnt}, "
                f"hash={self.block_hash})")


class FreeKVCacheBlockQueue:
    """Doubly-linked list of free blocks between two sentinel nodes (ids -1 and -2).

    Front = next to be taken (LRU end).  Every operation is O(1); nothing scans a Python list.
    A block is in the queue iff its ``prev_free_block`` is not None (sentinels make that exact).
    """

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        self.head = KVCacheBlock(-1)
        self.tail = KVCacheBlock(-2)
        self.head.next_free_block = self.tail
        self.tail.prev_free_block = self.head
        self.num_free_blocks = 0
        for block in blocks:
            self.append(block)

    def __len__(self) -> int:
        return self.num_free_blocks

    @staticmethod
    def contains(block: KVCacheBlock) -> bool:
        return block.prev_free_block is not None

    def _link_between(self, block: KVCacheBlock, prev: KVCacheBlock, nxt: KVCacheBlock) -> None:
        if block.prev_free_block is not None or block.next_free_block is not None:
            raise ValueError(  # pragma: no cover - defensive: callers never link twice
                f"block {block.block_id} is already in the free queue")
        block.prev_free_block = prev
        block.next_free_block = nxt
        prev.next_free_block = block
        nxt.prev_free_block = block
        self.num_free_blocks += 1

    def append(self, block: KVCacheBlock) -> None:
        """Insert at the back (evicted last)."""
        self._link_between(block, self.tail.prev_free_block, self.tail)  # type: ignore[arg-type]

    def appendleft(self, block: KVCacheBlock) -> None:
        """Insert at the front (taken next)."""
        self._link_between(block, self.head, self.head.next_free_block)  # type: ignore[arg-type]

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` from anywhere in the queue."""
        prev, nxt = block.prev_free_block, block.next_free_block
        if prev is None or nxt is None:
            raise ValueError(  # pragma: no cover - defensive: callers check first
                f"block {block.block_id} is not in the free queue")
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def popleft(self) -> KVCacheBlock:
        """Remove and return the front block."""
        first = self.head.next_free_block
        if first is None or first is self.tail:
            raise ValueError("no free blocks")  # pragma: no cover - _fits checks first
        self.remove(first)
        return first

    def __iter__(self) -> Iterator[KVCacheBlock]:
        node = self.head.next_free_block
        while node is not None and node is not self.tail:
            yield node
            node = node.next_free_block

    def block_ids(self) -> list[int]:
        """Front first (for ``inspect``; O(n) by nature)."""
        return [block.block_id for block in self]


class _Request:
    """Per-request state.  ``row`` indexes the NumPy block tables.  ``block_hashes`` holds the
    chain hashes of the first ``len(block_hashes)`` full blocks, extended lazily.
    ``num_cached_blocks``: leading table entries known to be hashed or null (publish starts there,
    as vLLM's per-request ``num_cached_block``).  Such a block stays hashed while held: eviction
    only takes ref-0 blocks and a prefix-cache reset only happens with no block in use.
    ``refill``: ``(hole end, suffix end)`` in tokens while a penelope refill is open."""

    __slots__ = ("rid", "tokens", "adapter", "salt", "computed", "pending", "row",
                 "block_hashes", "num_cached_blocks", "refill")

    def __init__(self, rid: int, tokens: list[int], adapter: Optional[int],
                 salt: Optional[int], row: int) -> None:
        self.rid = rid
        self.tokens = tokens
        self.adapter = adapter
        self.salt = salt
        self.computed = 0
        self.pending = 0
        self.row = row
        self.block_hashes: list[BlockHash] = []
        self.num_cached_blocks = 0
        self.refill: Optional[tuple[int, int]] = None


class OptimizedManager:
    """vLLM-v1-style manager implementing ``KVCacheManager`` and ``InspectableManager``."""

    capabilities = ALL_CAPABILITIES
    eviction_policies = EVICTIONS
    INITIAL_ROWS = 8
    INITIAL_BLOCKS_PER_ROW = 8

    def __init__(self, config: Config, guard: Any = NULL_GUARD) -> None:
        if config.num_blocks < 1 or config.block_size < 1:
            raise ValueError(f"bad config {config}")  # pragma: no cover - validate() rejects
        if config.sliding_window is not None and config.sliding_window < 1:
            raise ValueError(  # pragma: no cover - validate() rejects it
                f"bad sliding window {config.sliding_window}")
        self.config = config
        self.num_blocks = config.num_blocks
        self.block_size = config.block_size
        self.sliding_window = config.sliding_window
        self.eviction = config.eviction
        self.eager = config.eager
        self.hashing = config.hashing
        self.blocks = [KVCacheBlock(i) for i in range(self.num_blocks)]
        self.null_block = self.blocks[0]
        self.free_queue = FreeKVCacheBlockQueue(self.blocks[1:])
        self.cached: dict[BlockHash, dict[int, KVCacheBlock]] = {}
        # session eviction: release id -> {block_id: block} still cached in the free queue
        self.release_groups: dict[int, dict[int, KVCacheBlock]] = {}
        self.num_releases = 0
        self.requests: dict[int, _Request] = {}
        self.tables = np.zeros((self.INITIAL_ROWS, self.INITIAL_BLOCKS_PER_ROW), dtype=np.int32)
        self.row_lens = np.zeros(self.INITIAL_ROWS, dtype=np.int64)
        self.free_rows: list[int] = list(range(self.INITIAL_ROWS - 1, -1, -1))
        # KVGuard events (oracles/kvguard.py): the primitives below report every block handed
        # out, shared, released, published and evicted, on behalf of ``_actor`` (the request
        # the current operation serves).  With the guard off these are empty calls.
        self.guard = guard
        self._actor = -1

    # ================================================================== public operations

    def add_request(self, rid: int, tokens: Sequence[int], adapter: Optional[int] = None,
                    salt: Optional[int] = None) -> Optional[int]:
        """Register ``rid``; return ``hits * block_size`` of a lookup that pins nothing (prefix
        and, under penelope, suffix hits).  An id that already exists is refused with None
        (nothing changes; the reference agrees)."""
        if rid in self.requests:
            return None
        req = _Request(rid, [int(t) for t in tokens], adapter, salt, self._acquire_row())
        self.requests[rid] = req
        hits = self._find_hits(req)
        _, suffix = self._find_suffix(req, len(hits))
        return (len(hits) + len(suffix)) * self.block_size

    def allocate(self, rid: int, num_tokens: int) -> Optional[Allocation]:
        """Decide everything first (hits, hole, scheduled count, copy-on-write, new blocks,
        fit), then apply in the protocol's order: pin hits (prefix, then suffix), take the hole's
        blocks, copy on write, append new blocks."""
        req = self.requests.get(rid)
        if req is None:
            return None
        self._actor = rid
        if self.eager:  # before the lookup's pins and the fit check: even if it does not fit
            self._remove_skipped_blocks(req)
        admitting = self._holds_no_blocks(req)
        hits = self._find_hits(req) if admitting else []
        suffix_start, suffix = self._find_suffix(req, len(hits)) if admitting else (0, [])
        hole = suffix_start - len(hits) if suffix else 0
        if admitting:
            computed = len(hits) * self.block_size
            refill = self._refill_bounds(suffix_start, len(suffix)) if hole else None
        else:
            computed, refill = req.computed, req.refill
        scheduled = self._num_to_schedule(req, computed, num_tokens, refill)
        held = len(hits) + hole + len(suffix) if admitting else self._table_len(req)
        num_new = self._num_new_blocks(computed + req.pending + scheduled, held)
        cow_index = None if admitting else self._shared_write_index(req, scheduled)
        num_taken = hole + num_new + (0 if cow_index is None else 1)
        if not self._fits([b for b in (*hits, *suffix) if b is not self.null_block], num_taken):
            return None
        if admitting:
            self._admit(req, hits, hole, suffix)
            req.refill = refill
        copies: list[tuple[int, int]] = []
        copy = self._cow_if_shared(req, scheduled)
        if copy is not None:
            copies.append(copy)
        self._allocate_new_blocks(req, num_new)
        self.guard.on_step_end(rid)
        start = req.computed + req.pending
        req.pending += scheduled
        if self.hashing == "allocate":
            self._hash_scheduled_blocks(req, start + scheduled)
        # ``computed`` is the first position scheduled now (computed + still-pending tokens):
        # the driver writes positions ``computed .. computed + scheduled - 1``.
        return Allocation(computed=start, scheduled=scheduled, copies=tuple(copies))

    def commit(self, rid: int) -> Optional[int]:
        req = self.requests.get(rid)
        if req is None:
            return None
        self._commit(req)
        return req.computed

    def publish(self, rid: int) -> Optional[int]:
        req = self.requests.get(rid)
        if req is None:
            return None
        if self.hashing == "allocate":  # allocations hash; publish does nothing
            return 0
        return self._hash_range(req, *self._publishable_range(req))

    def _hash_range(self, req: _Request, start: int, stop: int) -> int:
        """Hash the non-null, unhashed blocks at logical indices ``start .. stop - 1`` and move
        the request's watermark to ``stop``; return how many were hashed.  An eager window of
        1 hashes nothing (vLLM's ``reachable_block_mask``: no hit could use such a block)."""
        if self.eager and self.sliding_window == 1:
            return 0
        count = 0
        for index in range(start, stop):
            block = self.blocks[self._table_entry(req, index)]
            if block is not self.null_block and block.block_hash is None:
                self._publish_block(req, index, block)
                count += 1
        req.num_cached_blocks = max(req.num_cached_blocks, stop)
        return count

    def _hash_scheduled_blocks(self, req: _Request, scheduled_end: int) -> None:
        """Hashing "allocate": hash every block that is full once the scheduled tokens
        (``.. scheduled_end - 1``) are written, from the watermark.  Patch the stop to count
        the request's whole length for hashing blocks no step writes (a hit reads garbage)."""
        stop = min(min(scheduled_end, len(req.tokens)) // self.block_size, self._table_len(req))
        self._hash_range(req, min(req.num_cached_blocks, stop), stop)

    def append(self, rid: int, tokens: Sequence[int]) -> Optional[int]:
        req = self.requests.get(rid)
        if req is None:
            return None
        req.tokens.extend(int(t) for t in tokens)
        return len(req.tokens)

    def fork(self, src: int, dst: int) -> Optional[bool]:
        parent = self.requests.get(src)
        if parent is None:
            return None
        if parent.pending or parent.refill is not None or dst in self.requests:
            return False
        child = _Request(dst, list(parent.tokens), parent.adapter, parent.salt,
                         self._acquire_row())
        child.computed = parent.computed
        child.block_hashes = list(parent.block_hashes)
        child.num_cached_blocks = parent.num_cached_blocks
        self.requests[dst] = child
        self._share_blocks(parent, child)
        return True

    def preempt(self, rid: int) -> Optional[bool]:
        req = self.requests.get(rid)
        if req is None:
            return None
        self._actor = rid
        self._release_blocks(self._table_blocks(req), whole_request=True)
        self._reset_row(req.row)
        req.computed = req.pending = 0
        req.num_cached_blocks = 0
        req.refill = None
        return True

    def trim(self, rid: int) -> Optional[int]:
        req = self.requests.get(rid)
        if req is None:
            return None
        if self.sliding_window is None:
            return 0
        self._actor = rid
        removed = self._remove_out_of_window(req)
        self._release_blocks(removed)
        return len(removed)

    def finish(self, rid: int) -> Optional[bool]:
        req = self.requests.get(rid)
        if req is None:
            return None
        self._actor = rid
        self._release_blocks(self._table_blocks(req), whole_request=True)
        del self.requests[rid]
        self._release_row(req.row)
        return True

    def reset_prefix_cache(self) -> bool:
        if not self._can_reset_prefix_cache():
            return False
        self._drop_all_hashes()
        return True

    def block_table(self, rid: int) -> list[int]:
        """``tables[row, :length]``; empty for an unknown id (the protocol's rule)."""
        req = self.requests.get(rid)
        if req is None:
            return []  # pragma: no cover - the driver asks only for registered requests
        return self.tables[req.row, :self.row_lens[req.row]].tolist()

    def slot_mapping(self, rid: int, positions: Sequence[int]) -> np.ndarray:
        """Slots of ``positions`` through the NumPy table, vectorized (vLLM computes this on the
        host for every scheduled token): ``table[p // b] * b + p % b``."""
        req = self.requests[rid]
        pos = np.asarray(positions, dtype=np.int64)
        row = self.tables[req.row]
        return row[pos // self.block_size].astype(np.int64) * self.block_size + pos % self.block_size

    def launch_table(self, rid: int) -> list[int]:
        """The table a kernel launch gets (the "device" copy): the NumPy row itself."""
        return self.block_table(rid)

    def num_free_blocks(self) -> int:
        """O(1): the free queue keeps its own count."""
        return self.free_queue.num_free_blocks

    def inspect(self) -> dict[str, Any]:
        blocks = self.blocks[1:]
        return {
            "ref_cnt": {b.block_id: b.ref_cnt for b in blocks},
            "block_hash": {b.block_id: b.block_hash for b in blocks},
            "free_queue": self.free_queue.block_ids(),
            "cached": {h: list(d) for h, d in self.cached.items()},
            "tables": {rid: self.block_table(rid) for rid in self.requests},
            "tokens_in_table": {rid: r.computed + r.pending if r.refill is None else r.refill[1]
                                for rid, r in self.requests.items()},
        }

    # ================================================================== hashing

    def _extra_keys(self, req: _Request, index: int) -> ExtraKeys:
        """Tagged extra keys of logical block ``index`` (adapter on every block, salt on block 0).
        Patch to drop the adapter (vLLM #3264) or to untag the keys (#44701)."""
        return hashing.extra_keys(index, req.adapter, req.salt)

    def _block_hash(self, req: _Request, index: int) -> BlockHash:
        """Chain hash of full logical block ``index``, extending the request's cached chain
        lazily (never recomputed: tokens are append-only).  Caller guarantees the block is full."""
        hashes = req.block_hashes
        b = self.block_size
        while len(hashes) <= index:
            i = len(hashes)
            parent = hashes[-1] if hashes else None
            hashes.append(hashing.block_hash(parent, req.tokens[i * b:(i + 1) * b],
                                             self._extra_keys(req, i)))
        return hashes[index]

    # ================================================================== prefix lookup

    def _max_hit_blocks(self, req: _Request) -> int:
        """At most ``(len - 1) // b`` blocks may hit: the last token is always computed, even on
        a full-prompt hit.  Patch to ``len // b`` for the zero-tokens-left bug (vLLM #3239)."""
        return max(0, (len(req.tokens) - 1) // self.block_size)

    def _cached_block(self, block_hash: BlockHash) -> Optional[KVCacheBlock]:
        """The block published first for ``block_hash`` (first in insertion order), or None."""
        candidates = self.cached.get(block_hash)
        if not candidates:
            return None
        return next(iter(candidates.values()))

    def _find_hits(self, req: _Request) -> list[KVCacheBlock]:
        """Walk the request's full blocks in order, stop at the first uncached hash.  Pure: pins
        nothing (``add_request``'s lookup and ``allocate``'s planning both use it).  Under an
        eager window: :meth:`_find_window_hits`."""
        if self.eager:
            return self._find_window_hits(req)
        hits: list[KVCacheBlock] = []
        for index in range(self._max_hit_blocks(req)):
            block = self._cached_block(self._block_hash(req, index))
            if block is None:
                break
            hits.append(block)
        return hits

    def _find_window_hits(self, req: _Request) -> list[KVCacheBlock]:
        """Eager window (vLLM ``SlidingWindowManager.find_longest_cache_hit``): scan the usable
        blocks right to left for ``need = ceil((w - 1) / b)`` contiguous cached ones; the first
        such run ``i .. i+need-1`` is the hit, behind ``i`` null entries.  Without one, the
        cached run from block 0.  Pure.  Patch to the plain prefix walk for a window lookup
        that never finds a hit whose head was freed."""
        assert self.sliding_window is not None
        need = -(-(self.sliding_window - 1) // self.block_size)
        run = 0
        for index in range(self._max_hit_blocks(req) - 1, -1, -1):
            if self._cached_block(self._block_hash(req, index)) is None:
                run = 0
                continue
            run += 1
            if need and run >= need:
                blocks = [self._cached_block(self._block_hash(req, j))
                          for j in range(index, index + need)]
                return [self.null_block] * index + blocks  # type: ignore[list-item]
        hits = [self._cached_block(self._block_hash(req, j)) for j in range(run)]
        return hits  # type: ignore[return-value]

    def _find_suffix(self, req: _Request, start: int) -> tuple[int, list[KVCacheBlock]]:
        """Penelope: ``(first index, blocks)`` of the run of cached blocks ending at the last
        cached usable block, behind the prefix's first miss at ``start`` (so the hole between
        is never empty); no blocks under the other policies or when nothing after ``start`` is
        cached.  Pure.  Patch to run over a missing block for the suffix-with-a-gap bug."""
        if self.eviction != "penelope":
            return start, []
        index = self._max_hit_blocks(req) - 1
        while index > start and self._cached_block(self._block_hash(req, index)) is None:
            index -= 1  # blocks after the last cached one are computed as usual
        suffix: list[KVCacheBlock] = []
        while index > start:
            block = self._cached_block(self._block_hash(req, index))
            if block is None:
                break
            suffix.append(block)
            index -= 1
        suffix.reverse()
        return index + 1, suffix

    def _refill_bounds(self, suffix_start: int, suffix_len: int) -> tuple[int, int]:
        """``(hole end, suffix end)`` in tokens: the hole ends where the suffix starts."""
        return (suffix_start * self.block_size,
                (suffix_start + suffix_len) * self.block_size)

    def _holds_no_blocks(self, req: _Request) -> bool:
        """A request with an empty table (new, or preempted) is (re-)admitted with a lookup.
        A table whose entries were all trimmed to the null block is *not* empty."""
        return self._table_len(req) == 0

    # ================================================================== allocation planning

    def _num_to_schedule(self, req: _Request, computed: int, num_tokens: int,
                         refill: Optional[tuple[int, int]]) -> int:
        """``min(n, limit - computed - pending)``, never negative (a negative ``n`` schedules 0);
        the limit is the request's length, or the hole's end while a refill is open."""
        limit = len(req.tokens) if refill is None else refill[0]
        return max(0, min(int(num_tokens), limit - computed - req.pending))

    def _num_blocks_for(self, num_tokens: int) -> int:
        """Blocks that cover ``num_tokens`` slots: ``ceil(t / b)``.  Patch to ``t // b + 1`` for
        the off-by-one at ``len % b == 0`` (nano-vllm #240)."""
        return -(-num_tokens // self.block_size)

    def _num_new_blocks(self, num_tokens: int, held: int) -> int:
        """New blocks to append so the table (``held`` entries) covers ``num_tokens``."""
        return max(0, self._num_blocks_for(num_tokens) - held)

    def _shared_write_index(self, req: _Request, scheduled: int) -> Optional[int]:
        """Logical index of the block at the write position (``computed + pending``) when this
        step writes (``scheduled > 0``) into an existing block held by another request too
        (``ref_cnt > 1``); else None.  Pure.  Patch to return None for the missing-copy-on-write
        bug (fork + write into the shared last block)."""
        if scheduled <= 0:
            return None
        index = (req.computed + req.pending) // self.block_size
        if index >= self._table_len(req):
            return None
        block_id = self._table_entry(req, index)
        if block_id == 0 or self.blocks[block_id].ref_cnt <= 1:
            return None
        return index

    def _fits(self, hits: Sequence[KVCacheBlock], num_taken: int) -> bool:
        """The free queue, minus hits that pinning will take out of it, must supply every block
        taken (copy-on-write + new).  Checked before any state change: never over-commit.
        Patch to ignore the hits for the over-commit / hit-stolen bug class."""
        in_queue = sum(1 for block in hits if block.ref_cnt == 0)
        return num_taken <= self.free_queue.num_free_blocks - in_queue

    # ================================================================== allocation steps

    def _pin(self, hits: Sequence[KVCacheBlock]) -> None:
        """Take a reference on each hit *before* any new block is allocated; a hit with
        ``ref_cnt == 0`` leaves the free queue (else the allocation below could evict it:
        Megatron-LM #5822, vLLM #37164 "token bleed").  Patch to a no-op / move after allocation
        to model those."""
        for block in hits:
            if block.ref_cnt == 0:
                self.free_queue.remove(block)
                self._leave_release_group(block)
            self._take_reference(block, self._actor)

    def _take_reference(self, block: KVCacheBlock, rid: int) -> None:
        """One more holder (a hit, a fork); a holder other than the block's owner makes it
        shared (the eviction policies keep shared blocks longest / out of a session)."""
        block.ref_cnt += 1
        if block.owner != rid:
            block.shared = True
        self.guard.on_share(rid, block.block_id)

    def _admit(self, req: _Request, hits: Sequence[KVCacheBlock], hole: int,
               suffix: Sequence[KVCacheBlock]) -> None:
        """(Re-)admission: pin the prefix and suffix hits before anything else, then build the
        table in logical order -- prefix, ``hole`` new blocks, suffix -- and start computing
        after the prefix (at the hole).  Patch to append the hole after the suffix (an
        append-only block table) for the hole-at-the-suffix's-position bug."""
        pinned = [block for block in (*hits, *suffix) if block is not self.null_block]
        self.guard.on_hits(req.rid, [block.block_id for block in pinned])
        self._pin(pinned)
        self._append_table(req, [block.block_id for block in hits])
        self._allocate_new_blocks(req, hole)
        self._append_table(req, [block.block_id for block in suffix])
        req.computed = len(hits) * self.block_size
        req.num_cached_blocks = len(hits)

    def _evict(self, block: KVCacheBlock) -> None:
        """Drop a block being reused from the cached map and clear its hash.  Patch to keep the
        hash for the stale-hash-after-eviction bug (kvcached #362)."""
        block_hash = block.block_hash
        if block_hash is None:
            return  # pragma: no cover - defensive: callers evict only hashed blocks
        candidates = self.cached.get(block_hash)
        if candidates is not None:  # pragma: no branch - defensive: a hash is in the map
            candidates.pop(block.block_id, None)
            if not candidates:
                del self.cached[block_hash]
        block.block_hash = None
        self.guard.on_evict(block.block_id)

    def _take_free_block(self) -> KVCacheBlock:
        """Pop the front of the free queue, evict it if it still has a hash (under session
        eviction with the rest of its release group), hand it out with ``ref_cnt == 1``, owned
        by the current request and not shared.  Patch to hand out the null block
        (kvcached #398)."""
        block = self.free_queue.popleft()
        if block.block_hash is not None:
            self._evict(block)
            self._evict_release_group(block)
        block.ref_cnt += 1
        block.owner, block.shared = self._actor, False
        self.guard.on_allocate(self._actor, block.block_id)
        return block

    def _evict_release_group(self, block: KVCacheBlock) -> None:
        """Session eviction: ``block`` (in a release group) was just evicted; every other block
        of its group -- all still cached in the free queue -- is evicted too and moved to the
        front, in queue order, to be reused next."""
        if block.release is None:
            return
        group = self.release_groups.pop(block.release)
        del group[block.block_id]
        block.release = None
        for member in reversed(list(group.values())):
            member.release = None
            self.free_queue.remove(member)
            self._evict(member)
            self.free_queue.appendleft(member)

    def _leave_release_group(self, block: KVCacheBlock) -> None:
        """A block pinned out of the free queue leaves its release group (a later release puts
        it in a new one)."""
        if block.release is None:
            return
        group = self.release_groups[block.release]
        del group[block.block_id]
        if not group:
            del self.release_groups[block.release]
        block.release = None

    def _cow_if_shared(self, req: _Request, scheduled: int) -> Optional[tuple[int, int]]:
        """Copy on write: if the write position lies in a shared block, replace it in this
        request's table by a fresh block (the old one's ``ref_cnt`` drops by 1; it stays held by
        the other sharers) and return ``(old, new)``.  Patch to return None without copying for
        the write-into-shared-block bug; the fit check still counts the copy."""
        index = self._shared_write_index(req, scheduled)
        if index is None:
            return None
        old = self.blocks[self._table_entry(req, index)]
        new = self._take_free_block()
        self._set_table_entry(req, index, new.block_id)
        old.ref_cnt -= 1
        self.guard.on_release(self._actor, old.block_id)
        return (old.block_id, new.block_id)

    def _allocate_new_blocks(self, req: _Request, count: int) -> None:
        """Append ``count`` blocks from the front of the free queue to the request's table."""
        if count <= 0:
            return
        self._append_table(req, [self._take_free_block().block_id for _ in range(count)])

    def _commit(self, req: _Request) -> None:
        """The scheduled tokens' KV is written."""
        req.computed += req.pending
        req.pending = 0
        if req.refill is not None and req.computed >= req.refill[0]:
            self._close_refill(req)

    def _close_refill(self, req: _Request) -> None:
        """Penelope: the hole is computed, so everything up to the suffix's end is: ``computed``
        jumps there and later allocations continue after the suffix.  Patch to stay at the hole's
        end (the suffix is recomputed) or to jump past the suffix."""
        req.computed = req.refill[1]  # type: ignore[index]
        req.refill = None

    # ================================================================== publish

    def _publishable_range(self, req: _Request) -> tuple[int, int]:
        """Logical blocks publish may hash: from the request's watermark of known hashed-or-null
        leading blocks up to the last block that is *full and computed* (``computed // b``).
        Patch the stop to ``(computed + pending) // b`` for hash-before-KV-written (#41838)."""
        stop = min(req.computed // self.block_size, self._table_len(req))
        return min(req.num_cached_blocks, stop), stop

    def _publish_block(self, req: _Request, index: int, block: KVCacheBlock) -> None:
        """Give ``block`` the request's chain hash of logical block ``index`` and add it *last*
        to that hash's entry of the cached map (duplicates allowed; the first published wins)."""
        block_hash = self._block_hash(req, index)
        block.block_hash = block_hash
        self.cached.setdefault(block_hash, {})[block.block_id] = block
        self.guard.on_publish(block.block_id, block_hash)

    # ================================================================== free

    def _release_blocks(self, blocks: Sequence[KVCacheBlock], whole_request: bool = False) -> None:
        """Release a request's blocks, given in *table order*, tail first (vLLM frees in reverse
        so a request's tail is evicted before its head); the freed ones join the free queue in
        the policy's order.  ``whole_request``: a finish or preempt (the eviction policies apply;
        a trim releases as "lru").  Patch to release head first for the wrong-free-order bug,
        or to release one block twice (#42571)."""
        freed = [block for block in reversed(blocks) if self._free_block(block)]
        for block in self._release_order(freed, whole_request):
            self._return_to_free_queue(block)
        if whole_request and self.eviction == "session":
            self._form_release_group(freed)

    def _free_block(self, block: KVCacheBlock) -> bool:
        """Drop one reference (the null block is skipped); True when it reached 0."""
        if block is self.null_block or block.block_id == 0:
            return False
        self.guard.on_release(self._actor, block.block_id)
        block.ref_cnt -= 1
        return block.ref_cnt == 0

    def _release_order(self, freed: Sequence[KVCacheBlock],
                       whole_request: bool) -> list[KVCacheBlock]:
        """The order freed blocks (given tail first) join the queue: every unhashed one goes to
        the front and every cached one to the back (``_return_to_free_queue``), so only the
        cached ones' order matters: tail first, or under penelope (a whole request) its
        non-shared blocks head first, then its shared ones tail first.  Patch to keep tail
        first (penelope evicting from the tail) or to put shared blocks first."""
        unhashed = [block for block in freed if block.block_hash is None]
        cached = [block for block in freed if block.block_hash is not None]
        if whole_request and self.eviction == "penelope":
            cached = ([block for block in reversed(cached) if not block.shared]
                      + [block for block in cached if block.shared])
        return unhashed + cached

    def _form_release_group(self, freed: Sequence[KVCacheBlock]) -> None:
        """Session eviction: a finish or preempt's blocks that joined the queue cached and not
        shared form one release group (in queue order: tail first).  Patch to take shared
        blocks in as well for the session-evicts-the-shared-prefix bug."""
        self.num_releases += 1
        group = {block.block_id: block for block in freed
                 if block.block_hash is not None and not block.shared}
        for block in group.values():
            block.release = self.num_releases
        if group:
            self.release_groups[self.num_releases] = group

    def _return_to_free_queue(self, block: KVCacheBlock) -> None:
        """Front if unhashed (reused first), back if cached (evicted last, oldest first).  Patch
        to always append for the wrong-LRU-end bug."""
        if block.block_hash is None:
            self.free_queue.appendleft(block)
        else:
            self.free_queue.append(block)

    # ================================================================== sliding window, fork

    def _num_out_of_window(self, req: _Request) -> int:
        """Leading logical blocks lying wholly below ``computed - w + 1`` (the first key any
        future query reads): block ``i`` qualifies iff ``(i + 1) * b <= computed - w + 1``.
        Patch to ``computed - w`` etc. for out-of-window-freed-too-early (#47728)."""
        assert self.sliding_window is not None
        first_needed = req.computed - self.sliding_window + 1
        return min(max(0, first_needed // self.block_size), self._table_len(req))

    def _remove_out_of_window(self, req: _Request) -> list[KVCacheBlock]:
        """Replace out-of-window table entries by the null block; return the removed blocks in
        table order.  Trimmed entries always form a prefix of the table, so (like vLLM's
        ``remove_skipped_blocks``) the walk goes backwards and stops at the first null entry."""
        removed: list[KVCacheBlock] = []
        for index in range(self._num_out_of_window(req) - 1, -1, -1):
            block_id = self._table_entry(req, index)
            if block_id == 0:
                break
            removed.append(self.blocks[block_id])
            self._set_table_entry(req, index, 0)
        removed.reverse()
        return removed

    def _remove_skipped_blocks(self, req: _Request) -> None:
        """Eager window: at the start of every allocation, free the blocks ``trim`` would
        (vLLM ``allocate_slots`` -> ``remove_skipped_blocks`` on the processed-token count,
        before ``get_num_blocks_to_allocate``).  Patch to count pending tokens for freeing
        blocks an in-flight step still reads (#47728)."""
        self._release_blocks(self._remove_out_of_window(req))

    def _share_blocks(self, src: _Request, dst: _Request) -> None:
        """Fork: ``dst``'s table becomes a copy of ``src``'s; each shared (non-null) block takes
        one more reference.  Patch to skip the references for the fork double-free (#1556)."""
        length = self._table_len(src)
        self._ensure_blocks_per_row(length)
        self.tables[dst.row, :length] = self.tables[src.row, :length]
        self.row_lens[dst.row] = length
        for block in self._table_blocks(src):
            if block is not self.null_block:
                self._take_reference(block, dst.rid)

    # ================================================================== reset

    def _can_reset_prefix_cache(self) -> bool:
        """Only when no block is in use: every block but the null one is in the free queue."""
        return self.free_queue.num_free_blocks == self.num_blocks - 1

    def _drop_all_hashes(self) -> None:
        """Clear every hash and the cached map; free-queue order is left as it is."""
        for candidates in self.cached.values():
            for block in candidates.values():
                block.block_hash = None
                block.release = None
                self.guard.on_evict(block.block_id)
        self.cached.clear()
        self.release_groups.clear()

    # ================================================================== NumPy block tables

    def _acquire_row(self) -> int:
        """A table row for a new request, from the free-row list (grown when empty).  Rows are
        reset here, on reuse.  Patch to skip the reset for stale-row bugs (#7018, sglang#33547)."""
        if not self.free_rows:
            self._grow_rows()
        row = self.free_rows.pop()
        self._reset_row(row)
        return row

    def _reset_row(self, row: int) -> None:
        """Empty a row (on reuse and on preemption: a resumed request's table is replaced, not
        appended to, vLLM #46595)."""
        self.row_lens[row] = 0
        self.tables[row, :] = 0

    def _release_row(self, row: int) -> None:
        """A finished request's row goes back to the free-row list (reset when reused)."""
        self.free_rows.append(row)

    def _grow_rows(self) -> None:
        rows, cols = self.tables.shape
        tables = np.zeros((2 * rows, cols), dtype=self.tables.dtype)
        tables[:rows] = self.tables
        row_lens = np.zeros(2 * rows, dtype=self.row_lens.dtype)
        row_lens[:rows] = self.row_lens
        self.tables, self.row_lens = tables, row_lens
        self.free_rows.extend(range(2 * rows - 1, rows - 1, -1))

    def _ensure_blocks_per_row(self, length: int) -> None:
        rows, cols = self.tables.shape
        if length <= cols:
            return
        new_cols = max(length, 2 * cols)
        tables = np.zeros((rows, new_cols), dtype=self.tables.dtype)
        tables[:, :cols] = self.tables
        self.tables = tables

    def _table_len(self, req: _Request) -> int:
        return int(self.row_lens[req.row])

    def _table_entry(self, req: _Request, index: int) -> int:
        return int(self.tables[req.row, index])

    def _set_table_entry(self, req: _Request, index: int, block_id: int) -> None:
        self.tables[req.row, index] = block_id

    def _append_table(self, req: _Request, block_ids: Sequence[int]) -> None:
        if not block_ids:
            return
        start = self._table_len(req)
        stop = start + len(block_ids)
        self._ensure_blocks_per_row(stop)
        self.tables[req.row, start:stop] = block_ids
        self.row_lens[req.row] = stop

    def _table_blocks(self, req: _Request) -> list[KVCacheBlock]:
        """The request's table as block objects, in table order (null entries included)."""
        blocks = self.blocks
        return [blocks[i] for i in self.tables[req.row, :self._table_len(req)].tolist()]


def thresholds() -> tuple[Threshold, ...]:
    """The sizes where this manager's code changes path (see :mod:`fuzzkit.reach`): the NumPy
    block tables start at ``INITIAL_ROWS x INITIAL_BLOCKS_PER_ROW`` and grow on demand."""
    rows, cols = OptimizedManager.INITIAL_ROWS, OptimizedManager.INITIAL_BLOCKS_PER_ROW
    return (
        Threshold("live_requests", rows, f"NumPy block tables: {rows} rows; request "
                  f"{rows + 1} (registered at once) grows them (_grow_rows: rows double, new "
                  "row ids)", cap=20),
        Threshold("table_blocks", cols, f"NumPy block tables: {cols} entries per row; a "
                  f"{cols + 1}th widens every row (_ensure_blocks_per_row: to max(length, "
                  "2 x width))", cap=36),
    )
