"""Real-bug mutants of the vLLM-style optimized KV cache manager.

Each mutant replaces one (rarely two or three) of the small policy steps of
:class:`fuzzkit.targets.paged_kv.optimized.OptimizedManager` (:func:`fuzzkit.mutants.patch`).  The
buggy function's docstring says what the real code did wrong; the mutant is written the way that
code was written (two lines in the wrong order, a loop that starts one node too high, a count
taken at schedule time, a lookup cached across scheduling steps...), so it misbehaves only where
the real bug did: a prefix hit at the front of the free queue, a row reused after ``finish``, a
trim while a step is in flight, a fork of a windowed request that was not trimmed yet, a block
that re-entered the window of the request that freed it...

Citations name the upstream issue or pull request exactly as ``docs/COMPONENTS.md`` §1
lists it (vLLM numbers unless another repository is named).  Five mutants model a rule of the
policy whose violation has no single upstream number in that list (free order, free-queue end,
over-commit, reset while in use, copy-on-write after fork); their citation says which code they
model instead.  Not modelled: vLLM #45357 (blocks freed while an in-flight step still writes) --
the driver treats ``preempt``/``finish`` as cancelling the in-flight step (its pending writes are
dropped; under allocate hashing they land first), so freeing at that point is correct under the
protocol and a deferred-free bug has no observable effect; its sibling, freeing on the
*scheduled* count, is #47728 below.

Seven mutants break the eviction policies (``Config.eviction`` "penelope" and "session"; the
rules are in :mod:`fuzzkit.targets.paged_kv.protocol`).  Those policies come from papers, not from an
engine with an issue tracker, so their citation names the rule they break (docs/COMPONENTS.md §2,
Penelope / whole-session eviction) and the engine code the mistake is borrowed from.

``tests/test_paged_kv_mutants.py`` holds, for every mutant, a minimal program on which the
reference and the clean manager agree and the mutated manager fails the oracle.

:data:`VARIANT_MUTANTS` break the contract's variants (``Config.window_mode`` "eager",
``Config.hashing`` "allocate": vLLM's own sliding-window manager and allocation-time hashing);
``tests/test_paged_kv_capabilities.py`` holds their programs.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from fuzzkit.mutants import device_mutants, patch
from fuzzkit.target import Mutant
from fuzzkit.targets.paged_kv import hashing
from fuzzkit.targets.paged_kv.hashing import BlockHash, ExtraKeys
from fuzzkit.targets.paged_kv.optimized import (FreeKVCacheBlockQueue, KVCacheBlock, OptimizedManager,
                                        _Request)
from fuzzkit.targets.paged_kv.protocol import Allocation

M = OptimizedManager

# The clean steps, captured at import time (before any patch), for mutants that wrap them.
# Wrapping the clean step (rather than rewriting it) keeps whatever bookkeeping it does besides
# the policy (the KVGuard event hooks of the ``guarded`` implementation) intact under the mutant.
_ALLOCATE = M.allocate
_FINISH = M.finish
_PREEMPT = M.preempt
_PUBLISH = M.publish
_PIN = M._pin
_EVICT = M._evict
_COW_IF_SHARED = M._cow_if_shared
_SHARE_BLOCKS = M._share_blocks
_DROP_ALL_HASHES = M._drop_all_hashes
_FIND_HITS = M._find_hits
_REMOVE_OUT_OF_WINDOW = M._remove_out_of_window
_ADMIT = M._admit
_FORM_RELEASE_GROUP = M._form_release_group
_RELEASE_BLOCKS = M._release_blocks
_FORK = M.fork
_REMOVE_SKIPPED_BLOCKS = M._remove_skipped_blocks


def _side(manager: OptimizedManager, name: str) -> dict[Any, Any]:
    """Per-manager side state a mutant keeps (the real code kept it on the request or in a
    connector); created on first use, gone with the manager."""
    return manager.__dict__.setdefault(name, {})


# ============================================================================ free path


def _remove_out_of_window_recorded(self: OptimizedManager, req: _Request) -> list[KVCacheBlock]:
    """Eager CPU offload's store list (vLLM #42571): every block that leaves the window is
    recorded with its logical index, because the offload keeps the block ids of everything that
    entered the window.  (The trim itself is the clean one.)"""
    stop = self._num_out_of_window(req)
    removed = _REMOVE_OUT_OF_WINDOW(self, req)
    first = stop - len(removed)
    left = _side(self, "_left_window").setdefault(req.rid, [])
    left.extend((first + i, block.block_id) for i, block in enumerate(removed))
    return removed


def _finish_frees_store_list(self: OptimizedManager, rid: int) -> Optional[bool]:
    """vLLM #42571: with sliding window + eager offload the same physical block can leave a
    request's window and be handed back to the *same* request (it went to the front of the free
    queue); the store list then names it twice, and finish passes that list to one free call
    without deduplication, so the block is released twice.  Only a windowed request that got one
    of its own trimmed blocks back shows it."""
    req = self.requests.get(rid)
    if req is None:
        return None
    left = _side(self, "_left_window").pop(rid, [])
    ids = [block.block_id for block in self._table_blocks(req)]
    again = [self.blocks[block_id] for index, block_id in left
             if index < len(ids) and ids[index] == 0 and block_id in ids[index + 1:]]
    result = _FINISH(self, rid)  # releases the table ...
    self._release_blocks(again)  # ... and, in the same free pass, the store list's repeats
    return result


def _release_head_first(self: OptimizedManager, blocks: Sequence[KVCacheBlock],
                        whole_request: bool = False) -> None:
    """Blocks released in table order (head first) instead of reversed: cached blocks reach the
    back of the free queue head last, so eviction takes a request's *first* block before its
    tail and breaks the prefix chain.  Invisible until a cached prefix is partly evicted.
    (Emulated as the clean release of the reversed table.)"""
    _RELEASE_BLOCKS(self, list(reversed(blocks)), whole_request)


def _return_always_to_back(self: OptimizedManager, block: KVCacheBlock) -> None:
    """Every freed block is appended at the back, hashed or not: unhashed (useless) blocks are
    then reused *after* cached ones, so allocations evict prefixes that could still hit."""
    self.free_queue.append(block)


# ============================================================================ prefix lookup / pin


def _pin_after_allocation(self: OptimizedManager, hits: Sequence[KVCacheBlock]) -> None:
    """Megatron-LM#5822: the references on prefix hits are taken *after* the new blocks are
    allocated.  This step only remembers the hits; see ``_allocate_then_pin``."""
    self.__dict__["_unpinned_hits"] = list(hits)


def _allocate_then_pin(self: OptimizedManager, rid: int, num_tokens: int) -> Optional[Allocation]:
    """Megatron-LM#5822: new blocks are popped from the free queue while the hits still sit in
    it with ``ref_cnt == 0``; a hit at the front is evicted and handed out again as a new block
    of the same request, then referenced -- the request's table names it twice and the prefill
    overwrites the cached prefix."""
    result = _ALLOCATE(self, rid, num_tokens)
    _PIN(self, self.__dict__.pop("_unpinned_hits", []))
    return result


def _touch_increments_first(self: OptimizedManager, hits: Sequence[KVCacheBlock]) -> None:
    """vLLM #33775 class (hits left evictable): ``touch`` increments ``ref_cnt`` *before* testing
    ``ref_cnt == 0``, so a hit that was free never leaves the free queue and the next allocation
    (of this or another cache group) can evict a block that is in use.  (Emulated by running the
    clean step with the free-queue removal disabled: the test never fires.)"""
    with patch(self.free_queue, remove=lambda block: None)():
        _PIN(self, hits)


def _lock_skips_matched_block(self: OptimizedManager, hits: Sequence[KVCacheBlock]) -> None:
    """mini-sglang#52: ``lock_handle`` did ``node = node.parent`` as the first line of its loop,
    so it locked the matched node's ancestors but not the node itself.  With blocks: every hit
    but the deepest one is referenced; the deepest stays free and evictable while in use."""
    _PIN(self, hits[:-1])


def _find_hits_cached_on_request(self: OptimizedManager, req: _Request) -> list[KVCacheBlock]:
    """vLLM #37164 ("token bleed"): the hits found when the request is added are cached on the
    request and reused by its first ``allocate`` without a new lookup.  If another request's
    allocation evicted one of those blocks in between (hash dropped, block rewritten), the stale
    hit is pinned anyway and the request reads the other request's KV.  (Later lookups, e.g. on
    re-admission after a preemption, are fresh.)"""
    memo = _side(self, "_admission_hits")
    entry = memo.get(req.rid)
    if entry is not None and entry[0] is req:
        if entry[1] is not None:  # the first allocate after add_request: reuse the lookup
            memo[req.rid] = (req, None)
            return entry[1]
        return _FIND_HITS(self, req)
    hits = _FIND_HITS(self, req)  # add_request's lookup: remembered on the request
    memo[req.rid] = (req, hits)
    return hits


def _max_hit_blocks_full_prompt(self: OptimizedManager, req: _Request) -> int:
    """vLLM #3239: up to ``len // b`` blocks may hit, so a prompt of exactly ``k*b`` cached
    tokens hits completely and leaves zero tokens to compute (no logits for the last token)."""
    return len(req.tokens) // self.block_size


def _fits_ignoring_hits(self: OptimizedManager, hits: Sequence[KVCacheBlock],
                        num_taken: int) -> bool:
    """Over-commit: the fit check compares the blocks to take with the whole free queue,
    forgetting that pinning free hits takes them out of it first (vLLM v1 counts them as
    ``num_evictable_computed_blocks``).  With a tight pool the allocation runs the queue dry."""
    return num_taken <= self.free_queue.num_free_blocks


# ============================================================================ eviction


def _evict_keeps_block_hash(self: OptimizedManager, block: KVCacheBlock) -> None:
    """kvcached#362: eviction removes the block from the prefix-cache index but the
    ``KVCacheBlock`` keeps its ``block_hash``; the reused block carries a stale identity (and
    publish skips it, since it looks hashed already)."""
    stale = block.block_hash
    _EVICT(self, block)  # leaves the index ...
    block.block_hash = stale  # ... but the hash field is never reset


def _evict_drops_every_duplicate(self: OptimizedManager, block: KVCacheBlock) -> None:
    """kvcached#362 class (block state and cache index diverge on eviction): evicting one block
    deletes the whole ``hash -> blocks`` entry, so other blocks cached under the same hash (two
    requests computed the same prefix) keep their hash but vanish from the index (the fix of
    kvcached PR #402 removes entries "by exact block_id, so evicting one duplicate does not
    delete its siblings").  Only shows with duplicate cached blocks."""
    block_hash = block.block_hash
    _EVICT(self, block)
    if block_hash is not None:
        self.cached.pop(block_hash, None)  # the siblings go too


# ============================================================================ hashing


def _chain(self: OptimizedManager, req: _Request, index: int,
           one: Callable[[Optional[BlockHash], Sequence[int], ExtraKeys], BlockHash]) -> BlockHash:
    hashes = req.block_hashes
    b = self.block_size
    while len(hashes) <= index:
        i = len(hashes)
        parent = hashes[-1] if hashes else None
        hashes.append(one(parent, req.tokens[i * b:(i + 1) * b], self._extra_keys(req, i)))
    return hashes[index]


def _block_hash_truncated(self: OptimizedManager, req: _Request, index: int) -> BlockHash:
    """vLLM #15297 (hash collisions make prefix caching read unrelated blocks): the chain hash
    is kept in 8 bits (a narrow field / table index used as the key), so two different prefixes
    collide often enough that a lookup returns another prompt's block."""
    return _chain(self, req, index,
                  lambda parent, tokens, extra: hashing.block_hash(parent, tokens, extra) & 0xFF)


def _block_hash_token_multiset(self: OptimizedManager, req: _Request, index: int) -> BlockHash:
    """vLLM #12621 (predictable, collision-prone prefix hashes): the block's tokens are combined
    order-independently (as a sorted multiset), so any permutation of a block's tokens -- easy
    to craft -- hits the original's KV."""
    return _chain(self, req, index,
                  lambda parent, tokens, extra: hashing.block_hash(parent, sorted(tokens), extra))


def _extra_keys_without_adapter(self: OptimizedManager, req: _Request, index: int) -> ExtraKeys:
    """vLLM #3264: the LoRA adapter id is not part of the block hash, so the same tokens under
    another adapter (or none) hit KV computed with different weights."""
    return hashing.extra_keys(index, None, req.salt)


def _extra_keys_untagged(self: OptimizedManager, req: _Request, index: int) -> ExtraKeys:
    """vLLM #44701: extra keys are hashed as bare values, so adapter id 1 and cache salt 1 (or
    adapter 0 and salt 0) give block 0 the same key."""
    keys = hashing.extra_keys(index, req.adapter, req.salt)
    return tuple(value for _tag, value in keys)  # type: ignore[return-value]


def _extra_keys_without_salt(self: OptimizedManager, req: _Request, index: int) -> ExtraKeys:
    """vLLM #20261 class (a per-request identity missing from the block key): the cache salt is
    dropped, so requests isolated by different salts share prefixes anyway."""
    return hashing.extra_keys(index, req.adapter, None)


def _allocate_registers_scheduled_blocks(self: OptimizedManager, rid: int,
                                         num_tokens: int) -> Optional[Allocation]:
    """vLLM #41838: the blocks a step will fill are registered in the prefix cache when the step
    is *scheduled* (vLLM's ``allocate_slots`` calls ``cache_blocks(request, num_computed +
    num_new)``), before the forward pass wrote their KV.  A lookup in that window -- another
    request added or admitted in the same step -- hits a block that holds nothing yet; a
    request preempted or finished before its write leaves a hashed block of garbage behind."""
    result = _ALLOCATE(self, rid, num_tokens)
    req = self.requests.get(rid)
    if result is None or req is None or result.scheduled <= 0:
        return result
    stop = min((req.computed + req.pending) // self.block_size, self._table_len(req))
    early = _side(self, "_registered_early")
    if rid not in early or early[rid][0] is not req:
        early[rid] = (req, {})
    for index in range(min(req.num_cached_blocks, stop), stop):
        block = self.blocks[self._table_entry(req, index)]
        if block is not self.null_block and block.block_hash is None:
            self._publish_block(req, index, block)
            early[rid][1][index] = block.block_id
    return result


def _publish_reports_registered_blocks(self: OptimizedManager, rid: int) -> Optional[int]:
    """vLLM #41838: ``publish`` hashes what is left and *reports* the blocks registered at
    schedule time once they are computed, so a step with nothing in between (schedule, write,
    publish) looks exactly like the clean manager."""
    count = _PUBLISH(self, rid)
    req = self.requests.get(rid)
    entry = _side(self, "_registered_early").get(rid)
    if count is None or req is None or entry is None or entry[0] is not req:
        return count
    full = req.computed // self.block_size
    for index, block_id in sorted(entry[1].items()):
        if index < full:
            del entry[1][index]
            if index < self._table_len(req) and self._table_entry(req, index) == block_id:
                count += 1
    return count


# ============================================================================ allocation counts


def _num_blocks_one_token_late(self: OptimizedManager, num_tokens: int) -> int:
    """nano-vllm#240: the new block is allocated one token too late -- the count covers the
    tokens *before* the one being scheduled (``ceil((t - 1) / b)``), so the token at the first
    slot of a block (``t % b == 1``; every token when ``b == 1``) has no block to go to."""
    if num_tokens <= 0:
        return 0
    return (num_tokens - 1 + self.block_size - 1) // self.block_size


# ============================================================================ copy-on-write


def _shared_write_index_never(self: OptimizedManager, req: _Request,
                              scheduled: int) -> Optional[int]:
    """Copy-on-write missing after fork (the check vLLM v0's ``append_slots`` does for a
    beam-search fork, left out): the write position is only checked for a missing block (the
    append path), never for a shared one, so the first divergent write after a fork lands in
    the sibling's block."""
    return None


def _cow_without_copy(self: OptimizedManager, req: _Request,
                      scheduled: int) -> Optional[tuple[int, int]]:
    """vLLM #35219 class (a recycled block read before anything wrote it): copy-on-write swaps a
    fresh block into the table but never issues the ``(old, new)`` copy, so the earlier slots
    of that block hold whatever its previous owner left there."""
    _COW_IF_SHARED(self, req, scheduled)  # the swap happens; the copy record is lost
    return None


# ============================================================================ sliding window, fork


def _num_out_of_window_scheduled(self: OptimizedManager, req: _Request) -> int:
    """vLLM #47728: out-of-window blocks are computed from the *scheduled* token count (vLLM
    advances ``num_computed_tokens`` at schedule time), so a trim while a step is in flight
    frees blocks that step's queries still read."""
    assert self.sliding_window is not None
    first_needed = req.computed + req.pending - self.sliding_window + 1
    return min(max(0, first_needed // self.block_size), self._table_len(req))


def _share_blocks_window_ring(self: OptimizedManager, src: _Request, dst: _Request) -> None:
    """vLLM #1556 (fork + sliding window double free): under a window the fork takes references
    only on the blocks a window can span (the last ``ceil(w / b) + 1`` entries, the v0 "block
    sliding window" ring), assuming older entries are aliases or already dropped.  Blocks not
    trimmed yet are copied into the child without a reference and freed twice later.
    (Emulated as the clean share followed by taking back the references outside the ring.)"""
    _SHARE_BLOCKS(self, src, dst)
    if self.sliding_window is None:
        return
    ring = -(-self.sliding_window // self.block_size) + 1
    for block in self._table_blocks(src)[:-ring]:
        if block is not self.null_block:
            block.ref_cnt -= 1


# ============================================================================ rows, preemption


def _acquire_row_not_reset(self: OptimizedManager) -> int:
    """tenstorrent/vllm-tt-plugin#103: a reused block-table row keeps its previous occupant's
    entries (and length); the new request's table names another request's blocks."""
    if not self.free_rows:
        self._grow_rows()
    return self.free_rows.pop()


def _acquire_row_zero_filled(self: OptimizedManager) -> int:
    """vLLM #7018 class (zero-filled rows): the reused row is zero-filled but its length is not
    reset, so the new request starts with a table of null (block 0) entries."""
    if not self.free_rows:
        self._grow_rows()
    row = self.free_rows.pop()
    self.tables[row, :] = 0
    return row


def _preempt_frees_row(self: OptimizedManager, rid: int) -> Optional[bool]:
    """sglang#33547: retraction frees the request's ``req_to_token`` row right away, but the
    retracted request keeps its row index; once a new request reuses the row, the retracted one
    (re-admitted later) writes through the other's table."""
    result = _PREEMPT(self, rid)
    if result:
        self._release_row(self.requests[rid].row)
    return result


def _preempt_keeps_cached_count(self: OptimizedManager, rid: int) -> Optional[bool]:
    """vLLM #46595 (stale cached count after preemption): the per-request count of cached
    (hashed) blocks survives preemption; see ``_allocate_keeps_cached_count``."""
    req = self.requests.get(rid)
    stale = req.num_cached_blocks if req is not None else 0
    result = _PREEMPT(self, rid)
    if req is not None:
        req.num_cached_blocks = stale
    return result


def _allocate_keeps_cached_count(self: OptimizedManager, rid: int,
                                 num_tokens: int) -> Optional[Allocation]:
    """vLLM #46595: re-admission only *raises* the cached-block count to the hits
    (``setdefault``-style), so after some of the request's cached blocks were evicted (or when
    the full-prompt rule leaves its last cached block out) publish starts past recomputed blocks
    and never hashes them."""
    req = self.requests.get(rid)
    before = req.num_cached_blocks if req is not None else 0
    result = _ALLOCATE(self, rid, num_tokens)
    if req is not None and result is not None:
        req.num_cached_blocks = max(req.num_cached_blocks, before)
    return result


def _preempt_keeps_table(self: OptimizedManager, rid: int) -> Optional[bool]:
    """vLLM #46595 (table appended instead of replaced on resume): preemption frees the blocks
    but leaves the row as it was; the resumed request's new blocks are appended after the freed
    ones instead of replacing them."""
    req = self.requests.get(rid)
    if req is None:
        return None
    row = self.tables[req.row].copy()
    length = self.row_lens[req.row]
    result = _PREEMPT(self, rid)  # frees the blocks ...
    self.tables[req.row, :len(row)] = row  # ... but the row keeps naming them
    self.row_lens[req.row] = length
    return result


# ============================================================================ reset


def _can_reset_between_steps(self: OptimizedManager) -> bool:
    """Reset of the prefix cache while blocks are in use: the guard only waits for in-flight
    steps to drain (no request has scheduled-but-unwritten tokens) instead of checking that no
    block is held (vLLM's ``reset_prefix_cache`` refuses while blocks are used).  Running
    requests' blocks lose their hashes and their published prefixes are never cached again."""
    return all(req.pending == 0 for req in self.requests.values())


def _drop_hashes_rebuild_pool(self: OptimizedManager) -> None:
    """kvcached#398 (the null block handed out): the reset re-creates the free queue from every
    block id -- block 0 included -- instead of the pool's own free list, so block 0, which tables
    and kernels treat as null, becomes allocatable.  Only a successful reset shows it."""
    _DROP_ALL_HASHES(self)
    for block in self.blocks:
        block.prev_free_block = block.next_free_block = None
    self.free_queue = FreeKVCacheBlockQueue(self.blocks)


# ============================================================================ eviction policies


def _release_order_tail_first(self: OptimizedManager, freed: Sequence[KVCacheBlock],
                              whole_request: bool) -> list[KVCacheBlock]:
    """Penelope's release order left as vLLM's (freed blocks in reverse, tail first): the front
    of a history stays and its *tail* is evicted first -- tail-LRU under penelope's name.  A
    returning session then finds a prefix and no suffix, and recomputes its most expensive
    tokens."""
    unhashed = [block for block in freed if block.block_hash is None]
    return unhashed + [block for block in freed if block.block_hash is not None]


def _release_order_shared_first(self: OptimizedManager, freed: Sequence[KVCacheBlock],
                                whole_request: bool) -> list[KVCacheBlock]:
    """Penelope's two groups concatenated the wrong way round: the shared prefix joins the queue
    *before* the session's own history, so eviction takes the prefix other sessions hit while
    this session's history stays (the "keep the shared prefix" rule inverted)."""
    unhashed = [block for block in freed if block.block_hash is None]
    cached = [block for block in freed if block.block_hash is not None]
    if whole_request and self.eviction == "penelope":
        cached = ([block for block in cached if block.shared]
                  + [block for block in reversed(cached) if not block.shared])
    return unhashed + cached


def _find_suffix_over_gaps(self: OptimizedManager, req: _Request,
                           start: int) -> tuple[int, list[KVCacheBlock]]:
    """The suffix scan ``continue``s past a block that is not cached instead of stopping: every
    cached block behind the hole is taken, as if they were contiguous, so a suffix with a gap
    (a block evicted in its middle) is laid into the table shifted by the gap -- the resident
    set is no longer prefix plus *one contiguous* suffix."""
    if self.eviction != "penelope":
        return start, []
    last = self._max_hit_blocks(req) - 1
    while last > start and self._cached_block(self._block_hash(req, last)) is None:
        last -= 1
    suffix = [block for index in range(start + 1, last + 1)
              if (block := self._cached_block(self._block_hash(req, index))) is not None]
    return last + 1 - len(suffix), suffix


def _admit_hole_after_suffix(self: OptimizedManager, req: _Request,
                             hits: Sequence[KVCacheBlock], hole: int,
                             suffix: Sequence[KVCacheBlock]) -> None:
    """An append-only block table (vLLM v1's ``BlockTable.append_row``: rows only grow at the
    end) with holes retrofitted: the hits are appended, and the hole's new blocks after them,
    so the suffix lands at the hole's logical positions and the hole is computed into blocks
    at the suffix's positions."""
    self.guard.on_hits(req.rid, [block.block_id for block in (*hits, *suffix)])
    self._pin([*hits, *suffix])
    self._append_table(req, [block.block_id for block in (*hits, *suffix)])
    self._allocate_new_blocks(req, hole)
    req.computed = len(hits) * self.block_size
    req.num_cached_blocks = len(hits)


def _close_refill_without_jump(self: OptimizedManager, req: _Request) -> None:
    """The refill is marked done but ``num_computed_tokens`` stays at the hole's end: the
    resident suffix is recomputed (and rewritten in place), the saving penelope exists for is
    lost, and the table covers more than the computed tokens."""
    req.refill = None


def _close_refill_at_usable_end(self: OptimizedManager, req: _Request) -> None:
    """The jump assumes the resident suffix always reaches the last usable block (true for a
    re-admitted preempted request, not for a returning turn that brought new tokens):
    ``computed`` lands past blocks that were never computed."""
    _, suffix_end = req.refill  # type: ignore[misc]
    req.computed = max(suffix_end, self._max_hit_blocks(req) * self.block_size)
    req.refill = None


def _form_release_group_with_shared(self: OptimizedManager,
                                    freed: Sequence[KVCacheBlock]) -> None:
    """Whole-session eviction that takes the session's *shared* blocks along: the release
    group is every cached block the finish returned, so evicting the session also evicts the
    prefix other sessions still hit (refcount-shared prefixes must outlive one session)."""
    _FORM_RELEASE_GROUP(self, freed)
    group = self.release_groups.setdefault(self.num_releases, {})
    for block in freed:
        if block.block_hash is not None and block.shared:
            block.release = self.num_releases
            group[block.block_id] = block
    if not group:
        del self.release_groups[self.num_releases]


# ============================================================================ past a threshold


def _grow_rows_one_too_many(self: OptimizedManager) -> None:
    """Row growth hands out a row that is in use: the new rows are pushed onto the free-row
    list with ``range(2 * rows - 1, rows - 2, -1)`` -- one past the old last row -- so the
    next request gets row ``rows - 1`` (still held by a live request), whose reset on reuse
    wipes the live request's table.  Only a manager with more live requests than its initial
    rows (9 at once) ever grows; the bug class is the request-slot pool's growth path (vLLM v1
    ``InputBatch`` / ``BlockTable`` rows, sglang ``req_to_token_pool``, an off-by-one in the
    freshly added slot range)."""
    rows, cols = self.tables.shape
    tables = np.zeros((2 * rows, cols), dtype=self.tables.dtype)
    tables[:rows] = self.tables
    row_lens = np.zeros(2 * rows, dtype=self.row_lens.dtype)
    row_lens[:rows] = self.row_lens
    self.tables, self.row_lens = tables, row_lens
    self.free_rows.extend(range(2 * rows - 1, rows - 2, -1))


def _widen_rows_doubling_once(self: OptimizedManager, length: int) -> None:
    """Capacity grown by *one* doubling (``if length > cols: cols *= 2``) where a loop or
    ``max(length, 2 * cols)`` is needed: a table that jumps past twice its row width in one
    step -- a long prompt allocated at once, a fork of a long table into a narrow row --
    does not fit the widened row (numpy refuses the slice assignment).  The classic
    grow-once-instead-of-until-it-fits slip of dynamic arrays (vLLM v1 ``BlockTable`` sizes
    ``max_num_blocks_per_req`` up front for this reason)."""
    rows, cols = self.tables.shape
    if length <= cols:
        return
    tables = np.zeros((rows, 2 * cols), dtype=self.tables.dtype)
    tables[:, :cols] = self.tables
    self.tables = tables


def _fork_aliases_hash_chain(self: OptimizedManager, src: int, dst: int) -> Optional[bool]:
    """Beam-search fork with a shallow copy: the child's cached chain of block hashes *is* the
    parent's list (``child.block_hashes = parent.block_hashes``), not a copy.  Harmless while
    one side decodes; once both sides extend it -- each appends its own hashes to the one list
    -- a side publishes its blocks under its sibling's hashes and looks its own prefix up in the
    sibling's chain (vLLM v0 ``Sequence.fork`` deep-copies its state for exactly this reason;
    the bug class: state shared by the two sides of a fork)."""
    result = _FORK(self, src, dst)
    if result:
        self.requests[dst].block_hashes = self.requests[src].block_hashes
    return result


def _block_hash_uint16_tokens(self: OptimizedManager, req: _Request, index: int) -> BlockHash:
    """Token ids hashed from a 16-bit buffer (``np.asarray(tokens, dtype=np.uint16)``, a
    memory-saving token store): ids past 65,535 -- every vocabulary larger than that, Llama 3's
    128,256 tokens included -- wrap around, so two prompts that differ only in such ids share
    block hashes and one reads the other's KV (the narrow-token-id class; vLLM #12621 / #15297
    for what colliding prefix hashes do)."""
    return _chain(self, req, index,
                  lambda parent, tokens, extra: hashing.block_hash(
                      parent, [int(t) & 0xFFFF for t in tokens], extra))


# ============================================================================ the list


# ============================================================================ variants


def _remove_skipped_deferred(self: OptimizedManager, req: _Request) -> None:
    """Eager window: the out-of-window blocks are freed only once the allocation succeeded
    (see ``_allocate_then_remove_skipped``); this step only remembers the request."""
    self.__dict__["_deferred_removal"] = req


def _allocate_then_remove_skipped(self: OptimizedManager, rid: int,
                                  num_tokens: int) -> Optional[Allocation]:
    """``remove_skipped_blocks`` moved after ``get_num_blocks_to_allocate``: the fit check
    does not count the blocks leaving the window, so an allocation the freed blocks would have
    made fit is refused (and nothing leaves the window while it keeps failing -- the admission
    deadlock vLLM's ``allocate_slots`` comments guard against, #39734)."""
    result = _ALLOCATE(self, rid, num_tokens)
    req = self.__dict__.pop("_deferred_removal", None)
    if result is not None and req is not None:
        _REMOVE_SKIPPED_BLOCKS(self, req)
    return result


def _remove_skipped_on_scheduled(self: OptimizedManager, req: _Request) -> None:
    """Eager window freed on the *scheduled* count (``computed + pending``), not on the
    processed one: a second allocation before the step is written frees blocks the step's
    queries still read (vLLM ``allocate_slots``: "Free on the processed-token basis: in-flight
    steps' attention windows still read blocks below the optimistic boundary"; #47728)."""
    assert self.sliding_window is not None
    first_needed = req.computed + req.pending - self.sliding_window + 1
    stop = min(max(0, first_needed // self.block_size), self._table_len(req))
    removed: list[KVCacheBlock] = []
    for index in range(stop - 1, -1, -1):
        block_id = self._table_entry(req, index)
        if block_id == 0:
            break
        removed.append(self.blocks[block_id])
        self._set_table_entry(req, index, 0)
    removed.reverse()
    self._release_blocks(removed)


def _find_window_hits_skipping(self: OptimizedManager, req: _Request) -> list[KVCacheBlock]:
    """The sliding-window hit scan made to skip on a miss: after a missing block the scan jumps
    a whole window (``need`` blocks) to the left instead of one, so a run of ``need`` cached
    blocks that starts just left of the miss is never seen and the hit is lost (the skip-scan
    optimisation of ``find_longest_cache_hit``, vLLM PR #47556, done one block too far)."""
    assert self.sliding_window is not None
    need = -(-(self.sliding_window - 1) // self.block_size)
    run, index = 0, self._max_hit_blocks(req) - 1
    while index >= 0:
        if self._cached_block(self._block_hash(req, index)) is None:
            run = 0
            index -= max(1, need)
            continue
        run += 1
        if need and run >= need:
            blocks = [self._cached_block(self._block_hash(req, j))
                      for j in range(index, index + need)]
            return [self.null_block] * index + blocks  # type: ignore[list-item]
        index -= 1
    if index < -1:  # the scan jumped past block 0: no prefix run is known
        run = 0
    return [self._cached_block(self._block_hash(req, j)) for j in range(run)]  # type: ignore[misc]


def _hash_blocks_of_the_prompt(self: OptimizedManager, req: _Request, scheduled_end: int) -> None:
    """Allocation-time hashing capped at the request's length instead of the scheduled tokens:
    with a chunked prefill the table's last block is full *of tokens* but not of written KV,
    and it is cached anyway; a request hitting it in a later step reads KV no step wrote
    (vLLM PR #18668: only tokens the step makes final may be cached)."""
    stop = min(len(req.tokens) // self.block_size, self._table_len(req))
    self._hash_range(req, min(req.num_cached_blocks, stop), stop)


def _mutant(name: str, bug_class: str, citation: str, **replacements: Any) -> Mutant:
    return Mutant(name, "optimized", bug_class, citation, patch(M, **replacements))


MUTANTS: list[Mutant] = [
    _mutant("free-duplicate-block",
            "duplicate block in one free call (a block that re-entered the window listed twice)",
            "vLLM #42571",
            _remove_out_of_window=_remove_out_of_window_recorded,
            finish=_finish_frees_store_list),
    _mutant("fork-window-double-free",
            "fork + sliding window: references taken on the window ring only, double free",
            "vLLM #1556",
            _share_blocks=_share_blocks_window_ring),
    _mutant("pin-after-allocation",
            "references on prefix hits taken after allocation: hits recycled",
            "Megatron-LM#5822",
            _pin=_pin_after_allocation, allocate=_allocate_then_pin),
    _mutant("touch-leaves-hit-in-free-queue",
            "prefix hits referenced but left evictable in the free queue",
            "vLLM #33775",
            _pin=_touch_increments_first),
    _mutant("lock-skips-matched-block",
            "lock/ref taken on the matched node's ancestors, not on the node",
            "mini-sglang#52",
            _pin=_lock_skips_matched_block),
    _mutant("admission-hits-reused",
            "prefix block stolen between lookup and pin (token bleed)",
            "vLLM #37164",
            _find_hits=_find_hits_cached_on_request),
    _mutant("full-prompt-hit",
            "full-prompt hit leaves zero tokens to compute",
            "vLLM #3239",
            _max_hit_blocks=_max_hit_blocks_full_prompt),
    _mutant("evict-keeps-block-hash",
            "evicted block keeps its stale hash",
            "kvcached#362",
            _evict=_evict_keeps_block_hash),
    _mutant("evict-drops-duplicate-hashes",
            "eviction drops the whole hash entry: duplicate cached blocks keep a stale hash",
            "kvcached#362",
            _evict=_evict_drops_every_duplicate),
    _mutant("hash-truncated-8-bits",
            "weak block hash: collisions hit another prompt's KV",
            "vLLM #15297",
            _block_hash=_block_hash_truncated),
    _mutant("hash-token-multiset",
            "predictable block hash: order-independent token combination collides",
            "vLLM #12621",
            _block_hash=_block_hash_token_multiset),
    _mutant("adapter-missing-from-hash",
            "LoRA adapter id missing from the block hash",
            "vLLM #3264",
            _extra_keys=_extra_keys_without_adapter),
    _mutant("extra-keys-untagged",
            "untagged extra keys collide (adapter 1 == salt 1)",
            "vLLM #44701",
            _extra_keys=_extra_keys_untagged),
    _mutant("salt-missing-from-hash",
            "a per-request identity (cache salt) missing from the block key",
            "vLLM #20261",
            _extra_keys=_extra_keys_without_salt),
    _mutant("publish-before-kv-written",
            "hash published before the KV is written; a same-step hit reads garbage",
            "vLLM #41838",
            allocate=_allocate_registers_scheduled_blocks,
            publish=_publish_reports_registered_blocks),
    _mutant("row-reuse-stale-entries",
            "stale block-table row on reuse: previous occupant's entries",
            "tt-plugin#103",
            _acquire_row=_acquire_row_not_reset),
    _mutant("row-reuse-zero-filled",
            "zero-filled block-table row on reuse: null entries, stale length",
            "vLLM #7018",
            _acquire_row=_acquire_row_zero_filled),
    _mutant("reset-hands-out-null-block",
            "null block handed out (block 0 allocatable after a pool rebuild)",
            "kvcached#398",
            _drop_all_hashes=_drop_hashes_rebuild_pool),
    _mutant("trim-counts-in-flight-tokens",
            "out-of-window blocks freed too early (boundary from scheduled tokens)",
            "vLLM #47728",
            _num_out_of_window=_num_out_of_window_scheduled),
    _mutant("retract-frees-row-in-use",
            "retracted request writing through a reused row",
            "sglang#33547",
            preempt=_preempt_frees_row),
    _mutant("stale-cached-count-after-preempt",
            "stale cached-block count after preemption: recomputed blocks never hashed",
            "vLLM #46595",
            preempt=_preempt_keeps_cached_count, allocate=_allocate_keeps_cached_count),
    _mutant("resume-table-appended",
            "table appended instead of replaced on resume after preemption",
            "vLLM #46595",
            preempt=_preempt_keeps_table),
    _mutant("block-allocated-one-token-late",
            "off-by-one block allocation at len % b",
            "nano-vllm#240",
            _num_blocks_for=_num_blocks_one_token_late),
    _mutant("free-head-first",
            "wrong free order: head first instead of tail first",
            "vLLM v1 KVCacheManager.free (blocks freed in reverse so the tail is evicted first; "
            "docs/COMPONENTS.md §1 policy)",
            _release_blocks=_release_head_first),
    _mutant("unhashed-freed-to-back",
            "unhashed freed blocks queued at the back of the LRU free queue",
            "vLLM v1 BlockPool.free_blocks / FreeKVCacheBlockQueue (uncached blocks are reused "
            "first; docs/COMPONENTS.md §1 policy)",
            _return_to_free_queue=_return_always_to_back),
    _mutant("cow-missing-after-fork",
            "copy-on-write missing after fork: write into a shared block",
            "vLLM v0 block manager append_slots copy-on-write (beam-search fork); KVGuard device "
            "write check 5 (docs/COMPONENTS.md §1)",
            _shared_write_index=_shared_write_index_never),
    _mutant("cow-copy-dropped",
            "recycled block read before it is written (copy-on-write copy never issued)",
            "vLLM #35219",
            _cow_if_shared=_cow_without_copy),
    _mutant("overcommit-ignores-hits",
            "over-commit: fit check ignores hits leaving the free queue",
            "vLLM v1 get_num_blocks_to_allocate / num_evictable_computed_blocks (vLLM PR #19031, "
            "#11310); docs/COMPONENTS.md §1 'never over-commit'",
            _fits=_fits_ignoring_hits),
    _mutant("penelope-evicts-tail",
            "front-of-history eviction evicting the tail (release order not reversed)",
            "Penelope, docs/COMPONENTS.md §2 (evict a session's history from the front); vLLM v1 "
            "KVCacheManager.free (reverse order, tail first) kept by mistake",
            _release_order=_release_order_tail_first),
    _mutant("penelope-shared-prefix-first",
            "shared prefix evicted before the session's own history",
            "Penelope, docs/COMPONENTS.md §2 (keep the shared prefix; evict the history first)",
            _release_order=_release_order_shared_first),
    _mutant("penelope-suffix-gap",
            "resident suffix accepted with a gap (scan continues past a missing block)",
            "Penelope, docs/COMPONENTS.md §2 (resident set is prefix ∪ one contiguous suffix)",
            _find_suffix=_find_suffix_over_gaps),
    _mutant("penelope-hole-after-suffix",
            "hole blocks appended after the suffix: hole computed at the suffix's positions",
            "Penelope, docs/COMPONENTS.md §2 (recompute the hole with original positions); vLLM v1 "
            "BlockTable.append_row (append-only rows)",
            _admit=_admit_hole_after_suffix),
    _mutant("penelope-no-jump",
            "computed not advanced past the resident suffix after the refill",
            "Penelope, docs/COMPONENTS.md §2 (recomputed tokens == the hole); vLLM #46595 class "
            "(stale computed-token count)",
            _close_refill=_close_refill_without_jump),
    _mutant("penelope-jump-to-usable-end",
            "computed jumps to the last usable block, past never-computed tokens",
            "Penelope, docs/COMPONENTS.md §2 (refill exact under causal attention); vLLM #46595 "
            "class (stale computed-token count)",
            _close_refill=_close_refill_at_usable_end),
    _mutant("session-evicts-shared",
            "whole-session eviction drops the session's shared prefix blocks too",
            "whole-session eviction baseline, docs/COMPONENTS.md §2; SGLang RadixCache / vLLM v1 "
            "prefix blocks are refcounted and outlive one session",
            _form_release_group=_form_release_group_with_shared),
    _mutant("row-growth-hands-out-live-row",
            "request-slot pool growth: the new slot range starts one slot too early",
            "vLLM v1 InputBatch/BlockTable row slots, sglang req_to_token_pool growth "
            "(off-by-one in the added slot range; docs/COMPONENTS.md §1 stale table rows)",
            _grow_rows=_grow_rows_one_too_many),
    _mutant("table-widen-doubles-once",
            "dynamic block-table width grown by one doubling, not until the row fits",
            "vLLM v1 BlockTable (rows sized to max_num_blocks_per_req up front); grow-once "
            "capacity bug class",
            _ensure_blocks_per_row=_widen_rows_doubling_once),
    _mutant("fork-aliases-hash-chain",
            "fork shares the parent's block-hash list (shallow copy): both sides extend it",
            "vLLM v0 Sequence.fork (deep copy of sequence state for beam search); state shared "
            "by both sides of a fork",
            fork=_fork_aliases_hash_chain),
    _mutant("token-ids-hashed-as-uint16",
            "token ids wrap at 65,536 in the block hash (16-bit token buffer)",
            "narrow token-id dtype (vocabularies past 65,535, e.g. Llama 3's 128,256); "
            "vLLM #12621 / #15297 (colliding prefix hashes read foreign KV)",
            _block_hash=_block_hash_uint16_tokens),
    _mutant("reset-while-in-use",
            "reset of the prefix cache while blocks are in use",
            "vLLM v1 KVCacheManager.reset_prefix_cache (refuses while blocks are used; "
            "docs/COMPONENTS.md §1 policy)",
            _can_reset_prefix_cache=_can_reset_between_steps),
]


#: Mutants of the variants (eager windows, allocation-time hashing), on the optimized manager.
VARIANT_MUTANTS: list[Mutant] = [
    _mutant("eager-frees-after-fit-check",
            "sliding-window blocks freed after the fit check (refused allocation frees nothing)",
            "vLLM v1 KVCacheManager.allocate_slots (remove_skipped_blocks before "
            "get_num_blocks_to_allocate; the #39734 admission deadlock)",
            _remove_skipped_blocks=_remove_skipped_deferred,
            allocate=_allocate_then_remove_skipped),
    _mutant("eager-frees-in-flight-window",
            "sliding-window blocks freed on the scheduled count while a step is in flight",
            "vLLM #47728; vLLM v1 allocate_slots (free on the processed-token basis)",
            _remove_skipped_blocks=_remove_skipped_on_scheduled),
    _mutant("window-scan-skips-past-miss",
            "sliding-window hit scan skips a whole window on a miss and loses a hit",
            "vLLM PR #47556 (skip-scan of SlidingWindowManager.find_longest_cache_hit)",
            _find_window_hits=_find_window_hits_skipping),
    _mutant("allocate-hashes-unwritten-blocks",
            "allocation-time hashing caches blocks the step does not write",
            "vLLM PR #18668 (cache only the tokens a step makes final)",
            _hash_scheduled_blocks=_hash_blocks_of_the_prompt),
]


# ------------------------------------------------------------------ device-path mutants
# These live on the ``guarded`` implementation: they break what only a forward pass through
# the kernels uses (the launch table, the slot mapping, the kernels themselves), so KVGuard's
# translation, read and write checks are what must see them.


def _launch_table_cached(self: OptimizedManager, rid: int) -> list[int]:
    """The device copy of a request's block table is uploaded once and only *appended to*
    afterwards: entries replaced in place (trimmed to the null block, swapped by copy-on-write)
    stay stale on the device (vLLM v1's persistent GPU block table, #7018 class)."""
    cache = _side(self, "_device_tables")
    host = self.block_table(rid)
    device = cache.get(rid, [])
    device = device + host[len(device):]
    cache[rid] = device
    return list(device)


def _slot_mapping_edge_off_by_one(self: OptimizedManager, rid: int,
                                  positions: Sequence[int]) -> Any:
    """Slot mapping computed from ``(p - 1) // b`` for the block index: the first token of every
    block after the first is written into the previous block's first slot (an off-by-one in the
    host-side slot-mapping loop, the reshape-and-cache contract of vLLM's cache kernels)."""
    req = self.requests[rid]
    b = self.block_size
    pos = np.asarray(positions, dtype=np.int64)
    row = self.tables[req.row]
    index = np.where((pos % b == 0) & (pos > 0), (pos - 1) // b, pos // b)
    return row[index].astype(np.int64) * b + pos % b


DEVICE_MUTANTS: list[Mutant] = [
    *device_mutants("fuzzkit.targets.paged_kv.kernel_mutants", "guarded"),
    Mutant("stale-device-table", "guarded",
           "stale block table at launch: device copy not refreshed after in-place changes",
           "vLLM #7018 (stale block-table rows); KVGuard translation check 3",
           patch(M, launch_table=_launch_table_cached)),
    Mutant("host-slot-mapping-edge", "guarded",
           "slot mapping off by one at block edges (host-side slot-mapping loop)",
           "vLLM reshape_and_cache slot_mapping contract; KVGuard translation check 3",
           patch(M, slot_mapping=_slot_mapping_edge_off_by_one)),
]
