"""Penelope's front eviction + refill is exact: checked on the paged-KV Triton kernels.

A tiny float64 model writes every K/V through ``write_kv`` and reads through
``paged_attention`` (natively on a GPU, under ``TRITON_INTERPRET=1`` without one); the oracle
:func:`fuzzkit.targets.scheduling.exactness.check_penelope` compares an evicted-and-refilled session
with one that never evicted, bitwise.  Each mutant hook must be caught by the check it breaks.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from unittest import mock  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fuzzkit import triton_support  # noqa: E402

triton_support.prepare()
if triton_support.unavailable():
    pytest.skip(triton_support.unavailable(), allow_module_level=True)

import torch  # noqa: E402

from fuzzkit.targets.scheduling import exactness as E  # noqa: E402
from fuzzkit.targets.scheduling.cost import CostModel  # noqa: E402

BLOCK = 4


@pytest.fixture(scope="module")
def model() -> E.TinyModel:
    return E.TinyModel()


def history(length: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, E.TinyConfig.vocab, length).tolist()


def evicted_pool(model: E.TinyModel, length: int, prefix_len: int, n_blocks: int,
                 cpu_tier_blocks: int = 0) -> tuple[E.PagedPool, E.Session]:
    pool = E.PagedPool(model, 16, BLOCK, cpu_tier_blocks=cpu_tier_blocks)
    session = pool.new_session("main", prefix_len)
    pool.prefill(session, history(length), 0)
    pool.evict_front(session, prefix_len, n_blocks)
    return pool, session


# ============================================================================ clean


@pytest.mark.kernel
@pytest.mark.parametrize("length,prefix_len,n_blocks", [
    (13, 5, 1),   # prefix ends mid-block, partial last block
    (16, 4, 2),   # block-aligned prefix and history
    (12, 3, 2),   # the whole post-prefix history evicted: empty suffix
    (10, 0, 1),   # no shared prefix
    (17, 8, 2),   # suffix of a single token in a partial block
])
def test_front_eviction_refill_equals_full_prefill(model: E.TinyModel, length: int,
                                                   prefix_len: int, n_blocks: int) -> None:
    assert E.check_penelope(model, history(length, length), prefix_len, n_blocks) is None


@pytest.mark.kernel
@pytest.mark.parametrize("length,prefix_len,n_blocks", [(14, 5, 2), (12, 4, 2)])
def test_tail_eviction_refill_is_exact(model: E.TinyModel, length: int, prefix_len: int,
                                       n_blocks: int) -> None:
    assert E.check_penelope(model, history(length, 1), prefix_len, n_blocks,
                            mode="tail") is None


@pytest.mark.kernel
@pytest.mark.parametrize("length,cpu_blocks,reloaded,recomputed", [
    (16, 1, 4, 8),    # the latest evicted block reloaded, the two before it recomputed
    (14, 1, 2, 8),    # the reloaded block is the partial last one
    (16, 3, 12, 0),   # the whole hole reloaded: nothing recomputed
])
def test_cpu_tier_reload_counts_and_exactness(model: E.TinyModel, length: int,
                                              cpu_blocks: int, reloaded: int,
                                              recomputed: int) -> None:
    pool, session = evicted_pool(model, length, 4, 3, cpu_tier_blocks=cpu_blocks)
    computed_before = pool.tokens_computed
    report = pool.refill(session)
    assert report == E.RefillReport(hole_tokens=length - 4, recomputed=recomputed,
                                    reloaded=reloaded)
    assert pool.tokens_computed - computed_before == recomputed
    assert E.check_penelope(model, history(length), 4, 3, cpu_tier_blocks=cpu_blocks) is None


# ============================================================================ mutants


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(E.MUTANTS))
def test_mutant_is_caught_by_its_check(model: E.TinyModel, name: str) -> None:
    """20 tokens, prefix 5 (kept blocks 0-1), evict 1 block: the front hole is [8, 12), whose
    length 4 differs from its start 8, and the suffix has room for a hole inside it."""
    hook, replacement, check = E.MUTANTS[name]
    with mock.patch.object(E.PagedPool, hook, replacement):
        failure = E.check_penelope(model, history(20, 2), 5, 1)
    assert failure is not None and failure.startswith(check + ":"), failure


@pytest.mark.kernel
def test_wrong_positions_report_first_layer_and_position(model: E.TinyModel) -> None:
    with E.mutant("hole-positions-from-zero"):
        failure = E.check_penelope(model, history(20, 2), 5, 1)
    assert failure is not None and "layer 0 key at position 8" in failure


@pytest.mark.kernel
@pytest.mark.parametrize("seed,detail", [(3, "full prefill ["), (2, "logits of step")])
def test_greedy_decode_check_stands_on_its_own(model: E.TinyModel, seed: int,
                                               detail: str) -> None:
    """With the KV comparison switched off, wrong hole positions still fail greedy decoding:
    by the tokens for history seed 3; for seed 2 the tokens agree (the tiny model's argmax has
    wide margins) and only the bitwise logits comparison sees it."""
    with E.mutant("hole-positions-from-zero"), mock.patch.object(E, "compare_kv",
                                                                 return_value=None):
        failure = E.check_penelope(model, history(20, seed), 5, 1, decode_tokens=4)
    assert failure is not None and failure.startswith("greedy-decode:"), failure
    assert detail in failure, failure


@pytest.mark.kernel
def test_hole_inside_suffix_shows_two_runs(model: E.TinyModel) -> None:
    with E.mutant("hole-inside-suffix"):
        failure = E.check_penelope(model, history(20, 2), 5, 1)
    assert failure is not None and "[0, 12) ∪ [16, 20)" in failure


# ============================================================================ cost


def test_front_hole_costs_no_more_than_tail_hole() -> None:
    cost = CostModel()
    assert E.compare_recompute_cost(cost, (8, 4), E.tail_hole(20, 4)) is None


def test_cost_comparison_fails_for_a_hole_at_the_end() -> None:
    """Not vacuous: were the 'front' hole at the end and the comparator earlier, it fails."""
    cost = CostModel()
    failure = E.compare_recompute_cost(cost, E.tail_hole(20, 4), (8, 4))
    assert failure is not None and failure.startswith("recompute-cost:")


@pytest.mark.kernel
def test_cost_check_is_wired_into_the_oracle(model: E.TinyModel) -> None:
    """Give the oracle a comparator hole at position 0: the real front hole [8, 12) costs more."""
    with mock.patch.object(E, "tail_hole", lambda length, tokens: (0, tokens)):
        failure = E.check_penelope(model, history(20, 2), 5, 1)
    assert failure is not None and failure.startswith("recompute-cost:"), failure


def test_same_block_count_is_not_same_tokens_with_a_partial_last_block() -> None:
    """Why the comparison is per token: evicting the partial last block (1 token of history
    length 9) is cheaper than a full front block, though both free one block."""
    cost = CostModel()
    assert E.compare_recompute_cost(cost, (4, 4), (8, 1)) is not None
    assert E.compare_recompute_cost(cost, (4, 4), E.tail_hole(9, 4)) is None


# ============================================================================ the pool


@pytest.mark.kernel
def test_front_eviction_keeps_prefix_and_contiguous_suffix(model: E.TinyModel) -> None:
    pool, session = evicted_pool(model, 13, 5, 1)
    assert pool.resident_positions(session) == list(range(8)) + list(range(12, 13))
    assert E.check_resident_set(pool, session, "front") is None
    freed = [b for b in range(1, pool.num_blocks) if pool.refcount[b] == 0]
    assert pool.free and set(pool.free) == set(freed)


@pytest.mark.kernel
def test_refill_uses_fresh_blocks_and_poisons_freed_ones(model: E.TinyModel) -> None:
    pool, session = evicted_pool(model, 16, 4, 2)
    freed = list(pool.free)[-2:]
    assert all(bool(pool.key_caches[0][b].isnan().all()) for b in freed)
    pool.refill(session)
    assert not set(freed) & set(session.table)


@pytest.mark.kernel
def test_pool_rejects_bad_requests(model: E.TinyModel) -> None:
    pool, session = evicted_pool(model, 13, 5, 1)
    with pytest.raises(ValueError, match="cannot evict"):
        pool.evict_front(session, 5, 2)  # one evictable block left after the prefix
    with pytest.raises(ValueError, match="not resident"):
        pool.prefill(session, [1], 12)  # would attend to the hole [8, 12)
    small = E.PagedPool(model, 3, BLOCK)  # null block + 2
    with pytest.raises(E.PoolFull):
        small.prefill(small.new_session("s"), history(9), 0)


@pytest.mark.kernel
def test_refill_count_check_names_a_wrong_count(model: E.TinyModel) -> None:
    pool, session = evicted_pool(model, 16, 4, 2)
    pool.refill(session)
    hole = list(range(4, 12))
    assert E.check_refill_counts(pool, session, hole, 8, 0) is None
    failure = E.check_refill_counts(pool, session, hole, 9, 0)
    assert failure is not None and failure.startswith("recompute-count:")


@pytest.mark.kernel
def test_model_and_caches_are_float64_and_compared_to_the_ulp(model: E.TinyModel) -> None:
    """Everything the kernels see is float64, and the KV comparison is bitwise: one float64 ulp
    on one cached key element is a ``kv-mismatch``."""
    reference = E.PagedPool(model, 8, BLOCK)
    ref_session = reference.new_session("main")
    logits = reference.prefill(ref_session, history(9), 0)
    assert E.DTYPE == torch.float64 and logits.dtype == torch.float64
    assert all(c.dtype == torch.float64 for c in reference.key_caches + reference.value_caches)
    pool = E.PagedPool(model, 8, BLOCK)
    session = pool.new_session("main")
    pool.prefill(session, history(9), 0)
    assert E.compare_kv(model, reference, ref_session, pool, session, 9) is None
    block = session.table[6 // BLOCK]
    cell = pool.key_caches[1][block, 6 % BLOCK, 1, 3]
    cell.copy_(torch.nextafter(cell, torch.tensor(float("inf"), dtype=torch.float64)))
    failure = E.compare_kv(model, reference, ref_session, pool, session, 9)
    assert failure is not None and failure.startswith("kv-mismatch: layer 1 key at position 6")
