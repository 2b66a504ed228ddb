"""The vLLM-style optimized KV cache manager against the policy of targets/paged_kv/protocol.py.

Hand-written scenarios for each rule, a structural check after every step (through
``inspect()``), unit tests of the linked free queue and of the NumPy block tables, and a
randomized differential test against the reference manager.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Optional
from unittest import mock

import pytest

from fuzzkit.targets.paged_kv import hashing
from fuzzkit.targets.paged_kv.driver import check_structure, run_program
from fuzzkit.targets.paged_kv.optimized import FreeKVCacheBlockQueue, KVCacheBlock, OptimizedManager
from fuzzkit.targets.paged_kv.protocol import Allocation, Config, InspectableManager, KVCacheManager


# ---------------------------------------------------------------------------- structure


def assert_structure(m: OptimizedManager) -> None:
    """The structural invariants, checked independently of the driver's copy."""
    state = m.inspect()
    n = m.num_blocks
    ref_cnt, queue, tables = state["ref_cnt"], state["free_queue"], state["tables"]
    block_hash, cached = state["block_hash"], state["cached"]
    assert set(ref_cnt) == set(block_hash) == set(range(1, n))
    assert 0 not in queue, "null block in the free queue"
    assert len(queue) == len(set(queue)), f"duplicates in the free queue {queue}"
    assert m.num_free_blocks() == len(queue)
    holders = Counter(b for table in tables.values() for b in table if b != 0)
    for b in range(1, n):
        assert ref_cnt[b] == holders[b], f"block {b}: ref_cnt {ref_cnt[b]} != holders {holders[b]}"
        assert (ref_cnt[b] == 0) == (b in queue), f"block {b}: ref_cnt {ref_cnt[b]} vs queue"
    used = sum(1 for b in range(1, n) if ref_cnt[b] > 0)
    assert len(queue) + used + 1 == n
    listed = Counter(b for blocks in cached.values() for b in blocks)
    assert all(c == 1 for c in listed.values()), "a block listed twice in the cached map"
    for h, blocks in cached.items():
        assert blocks, f"empty cached entry for {h}"
        for b in blocks:
            assert block_hash[b] == h
    for b, h in block_hash.items():
        assert (h is not None) == (b in listed), f"block {b}: hash {h} vs cached map"
    # the null block is untouched
    assert m.blocks[0].ref_cnt == 0 and m.blocks[0].block_hash is None
    assert not FreeKVCacheBlockQueue.contains(m.blocks[0])
    # the linked list agrees with itself in both directions
    forward = [blk.block_id for blk in m.free_queue]
    backward = []
    node = m.free_queue.tail.prev_free_block
    while node is not m.free_queue.head:
        backward.append(node.block_id)
        node = node.prev_free_block
    assert forward == queue == backward[::-1]
    # table lengths cover the tokens in them; the driver's own copy of the checks agrees
    for rid, table in tables.items():
        assert len(table) == -(-state["tokens_in_table"][rid] // m.block_size)
    check_structure(state, m.config)


class Checked:
    """Proxy: every operation is followed by the structural check."""

    def __init__(self, config: Config) -> None:
        self.m = OptimizedManager(config)
        assert_structure(self.m)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.m, name)
        if not callable(attr) or name.startswith("_") or name in ("inspect", "block_table",
                                                                 "num_free_blocks"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            assert_structure(self.m)
            return result

        return call


def make(num_blocks: int, block_size: int, window: Optional[int] = None) -> Any:
    return Checked(Config(num_blocks, block_size, window))


def serve(m: Any, rid: int, tokens: list[int], adapter: Optional[int] = None,
          salt: Optional[int] = None) -> Allocation:
    """add + allocate everything + commit + publish."""
    m.add_request(rid, tokens, adapter, salt)
    alloc = m.allocate(rid, len(tokens))
    assert alloc is not None
    m.commit(rid)
    m.publish(rid)
    return alloc


def queue(m: Any) -> list[int]:
    return m.inspect()["free_queue"]


# ---------------------------------------------------------------------------- protocol shape


def test_satisfies_the_protocols() -> None:
    m = OptimizedManager(Config(4, 2))
    assert isinstance(m, KVCacheManager) and isinstance(m, InspectableManager)
    assert m.num_free_blocks() == 3 and queue(m) == [1, 2, 3]


def test_unknown_request_ids_return_none_and_change_nothing() -> None:
    m = make(6, 2)
    serve(m, 0, [1, 2, 3])
    before = m.inspect()
    for call in (lambda: m.allocate(9, 2), lambda: m.commit(9), lambda: m.publish(9),
                 lambda: m.append(9, [1]), lambda: m.fork(9, 10), lambda: m.preempt(9),
                 lambda: m.trim(9), lambda: m.finish(9)):
        assert call() is None
    assert m.block_table(9) == []
    assert m.inspect() == before


def test_add_request_with_an_existing_id_is_refused() -> None:
    m = make(6, 2)
    assert m.add_request(0, [1, 2, 3]) == 0
    assert m.add_request(0, [5, 5, 5, 5]) is None
    assert m.append(0, []) == 3


# ---------------------------------------------------------------------------- prefix cache


def test_hit_after_publish_and_lookup_pins_nothing() -> None:
    m = make(8, 4)
    assert m.add_request(1, list(range(10))) == 0
    assert m.allocate(1, 10) == Allocation(0, 10, ())
    assert m.publish(1) == 0  # nothing computed yet
    assert m.commit(1) == 10
    assert m.publish(1) == 2  # two full computed blocks
    assert m.publish(1) == 0  # already hashed
    assert m.block_table(1) == [1, 2, 3]
    free = m.num_free_blocks()
    assert m.add_request(2, list(range(10))) == 8
    assert m.num_free_blocks() == free and m.inspect()["ref_cnt"][1] == 1  # no pins
    assert m.allocate(2, 100) == Allocation(8, 2, ())
    assert m.block_table(2)[:2] == [1, 2]
    assert m.inspect()["ref_cnt"][1] == 2 and m.inspect()["ref_cnt"][3] == 1


def test_lookup_stops_at_the_first_miss() -> None:
    m = make(10, 2)
    serve(m, 0, [1, 2, 3, 4, 5, 6, 7])
    assert m.add_request(1, [1, 2, 9, 4, 5, 6, 7]) == 2  # block 1 differs: block 2 cannot hit
    assert m.add_request(2, [1, 2, 3, 4, 5, 6, 8]) == 6


def test_full_prompt_hit_leaves_the_last_token() -> None:
    m = make(8, 4)
    serve(m, 1, list(range(8)))
    m.finish(1)
    assert m.add_request(2, list(range(8))) == 4  # not 8: the last token must be computed
    assert m.allocate(2, 8) == Allocation(4, 4, ())
    assert m.add_request(3, list(range(8)) + [0]) == 8


def test_eviction_drops_the_hash_and_cached_blocks_go_last() -> None:
    m = make(5, 2)  # 4 usable blocks
    serve(m, 0, [1, 2, 3, 4])  # blocks 1, 2 hashed
    m.finish(0)
    assert queue(m) == [3, 4, 2, 1]  # cached blocks at the back, tail first
    m.add_request(1, [7, 7, 7, 7, 7, 7])
    assert m.allocate(1, 6) is not None  # takes 3, 4 and evicts 2 (the tail)
    state = m.inspect()
    assert m.block_table(1) == [3, 4, 2]
    assert state["block_hash"][2] is None and state["block_hash"][1] is not None
    assert list(state["cached"].values()) == [[1]]
    assert m.add_request(2, [1, 2, 3, 4, 5]) == 2  # only the head is still cached


def test_hits_are_pinned_before_allocation() -> None:
    """Pool exactly as large as hits + new: the new blocks must not be taken from the hits."""
    m = make(5, 2)
    serve(m, 0, [1, 2, 3, 4, 5])  # blocks 1, 2 hashed, 3 not
    m.finish(0)
    assert queue(m) == [3, 4, 2, 1]
    m.add_request(1, [1, 2, 3, 4, 9, 9, 9, 9, 9])
    assert m.allocate(1, 4) == Allocation(4, 4, ())
    assert m.block_table(1) == [1, 2, 3, 4]
    assert m.num_free_blocks() == 0


# ---------------------------------------------------------------------------- fit check


def test_does_not_fit_changes_nothing() -> None:
    m = make(5, 2)
    serve(m, 0, [1, 2, 3, 4, 5])
    m.finish(0)
    m.add_request(1, [1, 2, 3, 4, 9, 9, 9, 9, 9])
    before = m.inspect()
    # 2 hits (both in the free queue) + 3 new blocks > 4 free: refused, hits not pinned
    assert m.allocate(1, 5) is None
    assert m.inspect() == before and m.num_free_blocks() == 4
    assert m.add_request(2, [1, 2, 3, 4, 0]) == 4  # the hits were not evicted either
    assert m.allocate(1, 4) is not None  # the exact fit is accepted


def test_no_over_commit_on_a_running_request() -> None:
    m = make(4, 2)
    m.add_request(0, list(range(10)))
    assert m.allocate(0, 10) is None
    assert m.allocate(0, 6) == Allocation(0, 6, ())
    assert m.num_free_blocks() == 0
    assert m.allocate(0, 1) is None
    m.commit(0)
    assert m.allocate(0, 0) == Allocation(6, 0, ())  # nothing needed, always fits
    assert m.block_table(0) == [1, 2, 3]


def test_allocate_twice_before_commit_continues_after_pending() -> None:
    m = make(8, 2)
    m.add_request(0, list(range(7)))
    assert m.allocate(0, 3) == Allocation(0, 3, ())
    assert m.allocate(0, 3) == Allocation(3, 3, ())  # starts after the pending tokens
    assert m.allocate(0, 9) == Allocation(6, 1, ())
    assert m.allocate(0, 9) == Allocation(7, 0, ())
    assert m.commit(0) == 7 and len(m.block_table(0)) == 4


# ---------------------------------------------------------------------------- free order


def test_tail_first_free_with_the_front_back_rule() -> None:
    m = make(8, 4)
    serve(m, 1, list(range(10)))  # blocks 1, 2 hashed, 3 partial
    assert queue(m) == [4, 5, 6, 7]
    m.finish(1)
    # 3 (unhashed) to the front; then 2, 1 (hashed) to the back, tail first
    assert queue(m) == [3, 4, 5, 6, 7, 2, 1]


def test_unhashed_blocks_freed_tail_first_end_up_head_first() -> None:
    m = make(8, 2)
    m.add_request(0, list(range(6)))
    m.allocate(0, 6)
    assert m.block_table(0) == [1, 2, 3]
    m.finish(0)
    assert queue(m) == [1, 2, 3, 4, 5, 6, 7]


def test_preempt_then_readmission_hits_its_own_blocks() -> None:
    m = make(8, 4)
    serve(m, 1, list(range(9)))
    assert m.preempt(1) is True
    assert m.block_table(1) == [] and m.num_free_blocks() == 7
    assert queue(m)[0] == 3 and queue(m)[-2:] == [2, 1]
    assert m.allocate(1, 100) == Allocation(8, 1, ())
    assert m.block_table(1)[:2] == [1, 2]
    assert m.commit(1) == 9
    assert m.preempt(1) is True and m.preempt(1) is True  # idempotent on an empty table


# ---------------------------------------------------------------------------- fork, CoW


def test_copy_on_write_after_fork() -> None:
    m = make(8, 4)
    m.add_request(1, list(range(6)))
    m.allocate(1, 6)
    assert m.fork(1, 2) is False  # scheduled but unwritten tokens
    m.commit(1)
    assert m.fork(1, 2) is True
    assert m.fork(1, 2) is False  # dst exists
    assert m.fork(1, 1) is False
    assert m.block_table(2) == [1, 2]
    assert m.inspect()["ref_cnt"][2] == 2
    m.append(2, [7])
    alloc = m.allocate(2, 1)
    assert alloc == Allocation(6, 1, ((2, 3),))  # the shared partial block is copied
    assert m.block_table(2) == [1, 3] and m.block_table(1) == [1, 2]
    assert m.inspect()["ref_cnt"][2] == 1
    m.append(1, [8])
    assert m.allocate(1, 1) == Allocation(6, 1, ())  # now exclusive: no copy


def test_fork_of_full_blocks_needs_no_copy() -> None:
    m = make(8, 2)
    m.add_request(1, [1, 2, 3, 4])
    m.allocate(1, 4)
    m.commit(1)
    m.fork(1, 2)
    m.append(2, [5])
    assert m.allocate(2, 1) == Allocation(4, 1, ())
    m.finish(1)
    assert m.inspect()["ref_cnt"][1] == 1  # still held by the fork


def test_copy_on_write_counts_in_the_fit_check() -> None:
    m = make(4, 4)  # 3 usable blocks
    m.add_request(1, list(range(6)))
    m.allocate(1, 6)
    m.commit(1)
    m.fork(1, 2)
    m.append(2, [9, 9, 9, 9, 9])  # 11 tokens: the copy + 1 new block = 2 > 1 free
    before = m.inspect()
    assert m.allocate(2, 5) is None and m.inspect() == before
    assert m.allocate(2, 2) == Allocation(6, 2, ((2, 3),))


def test_no_copy_when_nothing_is_scheduled() -> None:
    m = make(6, 4)
    m.add_request(1, list(range(6)))
    m.allocate(1, 6)
    m.commit(1)
    m.fork(1, 2)
    assert m.allocate(2, 5) == Allocation(6, 0, ())


# ---------------------------------------------------------------------------- sliding window


def test_trim_with_a_window() -> None:
    m = make(10, 2, window=3)
    m.add_request(1, list(range(10)))
    m.allocate(1, 10)
    assert m.trim(1) == 0  # nothing computed yet
    m.commit(1)
    # first key read from now on: 10 - 3 + 1 = 8 -> blocks 0..3 lie wholly below it
    assert m.trim(1) == 4
    assert m.block_table(1) == [0, 0, 0, 0, 5]
    assert queue(m)[:4] == [1, 2, 3, 4]  # unhashed, released tail first -> head in front
    assert m.trim(1) == 0
    m.append(1, [1])
    assert m.allocate(1, 1) == Allocation(10, 1, ())
    m.commit(1)
    assert m.trim(1) == 0  # first needed 9: block 4 (keys 8, 9) still read
    assert m.block_table(1) == [0, 0, 0, 0, 5, 1]
    assert m.finish(1) is True and m.num_free_blocks() == 9


def test_trim_boundary_and_published_blocks_go_back() -> None:
    m = make(10, 2, window=2)
    serve(m, 1, list(range(7)))
    # computed 7, first needed 6 -> blocks 0, 1, 2 (keys 0..5)
    assert m.trim(1) == 3
    assert m.block_table(1) == [0, 0, 0, 4]
    assert queue(m)[-3:] == [3, 2, 1]  # hashed, back of the queue, tail first
    assert m.publish(1) == 0  # null entries are skipped
    assert m.add_request(2, list(range(7))) == 6  # trimmed blocks stay cached until evicted


def test_trim_without_window_is_a_noop_and_fork_shares_trimmed_tables() -> None:
    assert make(6, 2).trim(0) is None
    m = make(6, 2)
    m.add_request(0, list(range(5)))
    assert m.trim(0) == 0
    w = make(10, 2, window=1)
    w.add_request(0, list(range(6)))
    w.allocate(0, 6)
    w.commit(0)
    assert w.fork(0, 1) is True
    assert w.trim(0) == 3  # (i + 1) * 2 <= 6: every block
    assert w.block_table(0) == [0, 0, 0]
    assert w.num_free_blocks() == 6  # still held by the fork
    assert w.trim(1) == 3 and w.num_free_blocks() == 9
    assert w.allocate(0, 1) == Allocation(6, 0, ())  # a table of nulls is not "no blocks"


# ---------------------------------------------------------------------------- reset


def test_reset_refused_while_blocks_are_in_use() -> None:
    m = make(8, 2)
    serve(m, 0, [1, 2, 3, 4, 5])
    before = m.inspect()
    assert m.reset_prefix_cache() is False
    assert m.inspect() == before
    m.finish(0)
    order = queue(m)
    assert m.reset_prefix_cache() is True
    state = m.inspect()
    assert state["cached"] == {} and all(h is None for h in state["block_hash"].values())
    assert queue(m) == order
    assert m.add_request(1, [1, 2, 3, 4, 5]) == 0


def test_reset_allowed_with_requests_that_hold_no_block() -> None:
    m = make(6, 2)
    serve(m, 0, [1, 2, 3])
    m.preempt(0)
    m.add_request(1, [1, 2, 3])
    assert m.reset_prefix_cache() is True
    assert m.allocate(0, 3) == Allocation(0, 3, ())


# ---------------------------------------------------------------------------- tagged keys


def test_adapter_and_salt_with_equal_values_do_not_share() -> None:
    m = make(16, 2)
    tokens = [1, 2, 3, 4, 5]
    serve(m, 0, tokens, adapter=1)
    assert m.add_request(1, tokens, salt=1) == 0
    assert m.add_request(2, tokens) == 0
    assert m.add_request(3, tokens, adapter=2) == 0
    assert m.add_request(4, tokens, adapter=1) == 4
    assert m.add_request(5, tokens, adapter=1, salt=0) == 0


def test_salt_only_on_the_first_block_but_chained() -> None:
    m = make(16, 2)
    serve(m, 0, [1, 2, 3, 4, 5], salt=7)
    assert m.add_request(1, [1, 2, 3, 4, 5], salt=8) == 0
    assert m.add_request(2, [1, 2, 3, 4, 5], salt=7) == 4
    req = m.requests[2]
    assert req.block_hashes[1] == hashing.full_block_hashes([1, 2, 3, 4], 2, None, 7)[1]


# ---------------------------------------------------------------------------- duplicates


def test_duplicate_published_blocks_first_published_wins() -> None:
    m = make(10, 2)
    tokens = [1, 2, 3, 4, 5]
    m.add_request(0, tokens)
    m.add_request(1, tokens)
    m.allocate(0, 5)
    m.allocate(1, 5)  # no hit: nothing published yet
    assert m.block_table(0) == [1, 2, 3] and m.block_table(1) == [4, 5, 6]
    m.commit(1)
    m.commit(0)
    assert m.publish(1) == 2  # published first
    assert m.publish(0) == 2
    cached = m.inspect()["cached"]
    assert sorted(cached.values()) == [[4, 1], [5, 2]]
    m.add_request(2, tokens)
    m.allocate(2, 5)
    assert m.block_table(2)[:2] == [4, 5]
    # evict the first-published copies: the duplicates then win
    m.finish(2)
    m.finish(1)
    assert queue(m)[-2:] == [5, 4]
    assert queue(m) == [6, 7, 8, 9, 5, 4]
    m.add_request(3, [9] * 12)
    assert m.allocate(3, 12) is not None  # 6 blocks: the whole free queue, 5 and 4 evicted
    assert sorted(m.inspect()["cached"].values()) == [[1], [2]]
    m.finish(3)
    m.add_request(4, tokens)
    m.allocate(4, 5)
    assert m.block_table(4)[:2] == [1, 2]


def test_fork_then_publish_counts_each_block_once() -> None:
    m = make(10, 2)
    m.add_request(0, [1, 2, 3, 4, 5])
    m.allocate(0, 5)
    m.commit(0)
    m.fork(0, 1)
    assert m.publish(1) == 2
    assert m.publish(0) == 0


# ---------------------------------------------------------------------------- internals


def test_free_queue_operations() -> None:
    blocks = [KVCacheBlock(i) for i in range(6)]
    q = FreeKVCacheBlockQueue(blocks[1:4])
    assert q.block_ids() == [1, 2, 3] and len(q) == 3
    q.remove(blocks[2])
    assert q.block_ids() == [1, 3] and not q.contains(blocks[2])
    q.appendleft(blocks[2])
    q.append(blocks[4])
    assert q.block_ids() == [2, 1, 3, 4] and len(q) == 4
    assert q.popleft() is blocks[2] and q.popleft() is blocks[1]
    q.remove(blocks[4])
    q.remove(blocks[3])
    assert q.block_ids() == [] and len(q) == 0
    with pytest.raises(ValueError):
        q.popleft()
    with pytest.raises(ValueError):
        q.remove(blocks[1])
    q.append(blocks[1])
    with pytest.raises(ValueError):
        q.appendleft(blocks[1])


def test_block_hashes_are_computed_lazily_and_once() -> None:
    calls = []
    real = hashing.block_hash

    def counting(parent: Any, tokens: Any, extra: Any) -> int:
        calls.append(tuple(tokens))
        return real(parent, tokens, extra)

    m = OptimizedManager(Config(32, 2))
    with mock.patch.object(hashing, "block_hash", counting):
        m.add_request(0, list(range(40)))
        assert calls == [(0, 1)]  # stopped at the first miss
        m.allocate(0, 10)
        assert len(calls) == 1  # lookup again: the first hash is cached
        m.commit(0)
        m.publish(0)
        assert len(calls) == 5  # blocks 1..4 added
        m.publish(0)
        m.allocate(0, 4)
        m.commit(0)
        m.publish(0)
        assert len(calls) == 7


def test_table_rows_are_reused_reset_and_grown() -> None:
    m = make(128, 1)
    for rid in range(20):  # more requests than initial rows
        m.add_request(rid, [rid] * 3)
        m.allocate(rid, 2)
    assert m.m.tables.shape[0] >= 20
    for rid in range(20):
        assert len(m.block_table(rid)) == 2
    row = m.m.requests[5].row
    m.finish(5)
    m.add_request(100, [1, 2, 3])
    assert m.m.requests[100].row == row  # reused
    assert m.block_table(100) == []  # and reset
    m.add_request(200, list(range(30)))  # more blocks than the initial row width
    m.allocate(200, 30)
    assert len(m.block_table(200)) == 30 and m.m.tables.shape[1] >= 30
    assert all(isinstance(b, int) for b in m.block_table(200))
    assert len(m.block_table(0)) == 2  # growth kept the other rows


PATCH_POINTS = [
    "_extra_keys", "_block_hash", "_max_hit_blocks", "_cached_block", "_find_hits",
    "_holds_no_blocks", "_num_to_schedule", "_num_blocks_for", "_num_new_blocks",
    "_shared_write_index", "_fits", "_pin", "_evict", "_take_free_block", "_cow_if_shared",
    "_allocate_new_blocks", "_commit", "_publishable_range", "_publish_block", "_release_blocks",
    "_free_block", "_return_to_free_queue", "_num_out_of_window", "_remove_out_of_window",
    "_share_blocks", "_can_reset_prefix_cache", "_drop_all_hashes", "_acquire_row", "_reset_row",
    "_release_row", "_find_suffix", "_refill_bounds", "_close_refill", "_release_order",
    "_form_release_group", "_evict_release_group", "_leave_release_group", "_take_reference",
    "_admit",
]


@pytest.mark.parametrize("name", PATCH_POINTS)
def test_patch_points_exist_and_are_documented(name: str) -> None:
    method = getattr(OptimizedManager, name)
    assert callable(method) and method.__doc__


def _buggy_pin_after(self: OptimizedManager, hits: Any) -> None:
    return None  # hits never referenced: allocation may recycle them


_RELEASE_BLOCKS = OptimizedManager._release_blocks


def _buggy_release_head_first(self: OptimizedManager, blocks: Any,
                              whole_request: bool = False) -> None:
    _RELEASE_BLOCKS(self, list(reversed(blocks)), whole_request)


def _buggy_evict_keeps_hash(self: OptimizedManager, block: Any) -> None:
    return None


def _buggy_no_cow(self: OptimizedManager, req: Any, scheduled: int) -> None:
    return None


def _buggy_acquire_row_no_reset(self: OptimizedManager) -> int:
    if not self.free_rows:
        self._grow_rows()
    return self.free_rows.pop()


def _free_order_changes(m: OptimizedManager) -> bool:
    serve(m, 0, [1, 2, 3, 4, 5, 6])
    m.finish(0)
    return queue(m)[-3:] != [3, 2, 1]


def _pin_missed(m: OptimizedManager) -> bool:
    serve(m, 0, [1, 2, 3])
    m.finish(0)
    m.add_request(1, [1, 2, 3])
    m.allocate(1, 3)
    return m.inspect()["ref_cnt"][1] != 1 or 1 in queue(m)


def _stale_hash(m: OptimizedManager) -> bool:
    serve(m, 0, [1, 2, 3])
    m.finish(0)
    m.add_request(1, [7] * 22)
    m.allocate(1, 22)  # takes the whole pool: evicts everything
    return any(h is not None for h in m.inspect()["block_hash"].values())


def _no_copy(m: OptimizedManager) -> bool:
    m.add_request(0, [1, 2, 3])
    m.allocate(0, 3)
    m.commit(0)
    m.fork(0, 1)
    m.append(1, [4])
    return m.allocate(1, 1).copies == ()


def _row_not_reset(m: OptimizedManager) -> bool:
    m.add_request(0, [1, 2, 3])
    m.allocate(0, 3)
    m.finish(0)
    m.add_request(1, [1])
    return m.block_table(1) != []


@pytest.mark.parametrize("name, buggy, shows", [
    ("_pin", _buggy_pin_after, _pin_missed),
    ("_release_blocks", _buggy_release_head_first, _free_order_changes),
    ("_evict", _buggy_evict_keeps_hash, _stale_hash),
    ("_cow_if_shared", _buggy_no_cow, _no_copy),
    ("_acquire_row", _buggy_acquire_row_no_reset, _row_not_reset),
])
def test_single_method_patches_change_behaviour(name: str, buggy: Any, shows: Any) -> None:
    """A mutant is one ``patch.object`` of one step; the scenario shows the bug only under it."""
    assert not shows(OptimizedManager(Config(12, 2)))
    with mock.patch.object(OptimizedManager, name, buggy):
        assert shows(OptimizedManager(Config(12, 2)))


# ---------------------------------------------------------------------------- differential


def random_program(rng: random.Random) -> dict[str, Any]:
    """A program in the driver's format, aimed at block edges, shared prefixes and tight pools."""
    b = rng.randint(1, 4)
    n = rng.choice([rng.randint(2, 8), rng.randint(8, 32)])
    window = rng.choice([None, None, None, rng.randint(1, 3 * b + 1)])
    docs = [[rng.randint(0, 2) for _ in range(6 * b)] for _ in range(2)]
    rids = list(range(4))

    def tokens() -> list[int]:
        length = max(1, rng.randint(1, 5) * b + rng.choice([-1, 0, 0, 1]))
        if rng.random() < 0.2:
            length = rng.randint(1, 5 * b + 1)
        cut = min(length, len(docs[0]))
        return rng.choice(docs)[:cut] + [rng.randint(0, 2) for _ in range(length - cut)]

    def extra() -> Optional[int]:
        return rng.choice([None, None, None, 0, 1])

    program: list[dict[str, Any]] = []
    live: set[int] = set()  # the generator's guess; ops on unknown ids still occur sometimes
    for _ in range(rng.randint(1, 60)):
        kind = rng.random()
        if not live and rng.random() < 0.8:
            kind *= 0.25  # nothing running: mostly admit something
        idle = [r for r in rids if r not in live]
        if kind < 0.25 and idle and rng.random() < 0.9:
            r = rng.choice(idle)
        elif live and rng.random() < 0.9:
            r = rng.choice(sorted(live))
        else:
            r = rng.choice(rids)
        if kind < 0.25:
            live.add(r)
        if kind < 0.15:
            t = tokens()
            program += [{"op": "add", "rid": r, "tokens": t, "adapter": extra(), "salt": extra()},
                        {"op": "allocate", "rid": r, "n": len(t)}, {"op": "write", "rid": r},
                        {"op": "publish", "rid": r}]
            if rng.random() < 0.7:
                program.append({"op": "finish", "rid": r})
                live.discard(r)
        elif kind < 0.25:
            program.append({"op": "add", "rid": r, "tokens": tokens(), "adapter": extra(),
                            "salt": extra()})
        elif kind < 0.45:
            program.append({"op": "allocate", "rid": r,
                            "n": rng.choice([0, 1, max(1, b - 1), b, b + 1, 2 * b, 4 * b + 1])})
            if rng.random() < 0.7:
                program.append({"op": "write", "rid": r})
        elif kind < 0.55:  # decode: append, schedule, write, publish, maybe trim
            t = [rng.randint(0, 2) for _ in range(rng.randint(0, b + 1))]
            program += [{"op": "append", "rid": r, "tokens": t},
                        {"op": "allocate", "rid": r, "n": len(t)}, {"op": "write", "rid": r},
                        {"op": "publish", "rid": r}]
            if rng.random() < 0.5:
                program.append({"op": "trim", "rid": r})
        elif kind < 0.65:  # fork, then one side diverges (copy-on-write)
            d = rng.choice(idle or rids)
            program.append({"op": "fork", "src": r, "dst": d})
            live.add(d)
            if rng.random() < 0.6:
                w = rng.choice([r, d])
                program += [{"op": "append", "rid": w, "tokens": [rng.randint(0, 2)]},
                            {"op": "allocate", "rid": w, "n": 1}, {"op": "write", "rid": w}]
        elif kind < 0.97:
            op = rng.choice(["write", "publish", "publish", "preempt", "trim", "trim", "finish"])
            program.append({"op": op, "rid": r})
            if op == "finish":
                live.discard(r)
        else:
            program.append({"op": "reset"})
    # drawn last, so that each seed's program is the one it was before policies existed
    eviction = rng.choice(["lru", "lru", "session", "penelope"])
    return {"config": {"num_blocks": n, "block_size": b, "sliding_window": window,
                       "eviction": eviction},
            "program": program}


def _call(manager: Any, step: dict[str, Any]) -> Any:
    op = step["op"]
    if op == "add":
        return manager.add_request(step["rid"], step["tokens"], step["adapter"], step["salt"])
    if op == "allocate":
        a = manager.allocate(step["rid"], step["n"])
        return None if a is None else (a.computed, a.scheduled, len(a.copies))
    if op == "write":
        return manager.commit(step["rid"])
    if op == "fork":
        return manager.fork(step["src"], step["dst"])
    if op == "reset":
        return manager.reset_prefix_cache()
    return getattr(manager, op)(step["rid"], *([step["tokens"]] if op == "append" else []))


def _logical_table(manager: Any, rid: int) -> Any:
    table = manager.block_table(rid)
    return None if table is None else [b == 0 for b in table]


@pytest.mark.parametrize("seed", range(200))
def test_differential_against_reference(seed: int) -> None:
    reference = pytest.importorskip("fuzzkit.targets.paged_kv.reference")
    rng = random.Random(seed)
    inputs = random_program(rng)
    config = Config.from_json(inputs["config"])
    ref = reference.ReferenceManager(config)
    opt = OptimizedManager(config)
    live: set[int] = set()
    for index, step in enumerate(inputs["program"]):
        expected, actual = _call(ref, step), _call(opt, step)
        where = f"seed {seed} step {index} {step}"
        assert actual == expected, where
        assert opt.num_free_blocks() == ref.num_free_blocks(), where
        if step["op"] == "add" and expected is not None:
            live.add(step["rid"])
        elif step["op"] == "fork" and expected:
            live.add(step["dst"])
        elif step["op"] == "finish" and expected:
            live.discard(step["rid"])
        for rid in live:  # same length and null pattern (ids may legitimately differ)
            assert _logical_table(opt, rid) == _logical_table(ref, rid), where
        assert_structure(opt)
    # through the driver: the semantic KV model and the same logical observations
    assert run_program(OptimizedManager, inputs) == run_program(reference.ReferenceManager,
                                                                inputs)
    assert run_program(OptimizedManager, inputs)["violation"] is None
