"""Planted bugs in vLLM's *real* v1 KV cache code, run through :mod:`.vllm_manager`.

Each mutant monkeypatches one method or helper of the pinned vLLM (``BlockPool``,
``SingleTypeKVCacheManager``, ``SlidingWindowManager``, ``KVCacheManager``, ``kv_cache_utils``)
the way an upstream bug had it, for the duration of the mutant (:func:`fuzzkit.mutants.patch`);
the adapter and fuzzkit's oracles are untouched.  The owners are named lazily
(``"fuzzkit.targets.paged_kv.adapters.vllm_mutants:BlockPool"``, resolved by this module's
``__getattr__``) so that declaring the mutants loads no vLLM code: it is imported when a mutant
is applied.  Citations name the upstream issue or pull request the bug class comes from.
``tests/test_paged_kv_vllm.py`` shows each one caught on a minimal program;
``fuzzkit mutants paged_kv --only NAME`` finds it from scratch.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from fuzzkit.mutants import derived, patch
from fuzzkit.target import Mutant

HERE = __name__

#: The vLLM objects the mutants patch: name -> (module under ``vllm_manager.modules()``, attr).
OWNERS = {
    "BlockPool": ("block_pool", "BlockPool"),
    "SingleTypeKVCacheManager": ("single_type_kv_cache_manager", "SingleTypeKVCacheManager"),
    "SlidingWindowManager": ("single_type_kv_cache_manager", "SlidingWindowManager"),
    "KVCacheManager": ("kv_cache_manager", "KVCacheManager"),
    "kv_cache_utils": ("kv_cache_utils", None),
}


def __getattr__(name: str) -> Any:
    """The vLLM class or module a mutant patches, loaded on first use (PEP 562)."""
    if name not in OWNERS:
        raise AttributeError(name)
    from fuzzkit.targets.paged_kv.adapters.vllm_manager import modules

    module, attr = OWNERS[name]
    found = getattr(modules(), module)
    return found if attr is None else getattr(found, attr)


# ============================================================================ the bugs


def _free_head_first(self: Any, request_id: str) -> None:
    """``SingleTypeKVCacheManager.free`` without ``reversed``: a request's blocks are freed in
    allocation order, so its cached *head* joins the back of the free queue first,
    and eviction takes the head of a prefix before its tail -- every later block of the chain
    becomes unreachable (a hit needs the whole prefix) while it still takes memory."""
    self.block_pool.free_blocks(self.pop_blocks_for_free(request_id))


def _remove_hash_keep_map_entry(self: Any, block: Any) -> list[Any]:
    """``BlockPool._remove_cached_block_hashes`` that resets the block's hash but leaves its entry
    in ``cached_block_hash_to_block``: an evicted (reallocated, rewritten) block stays reachable
    under its old hash, so a later request with that prefix reads another request's KV."""
    removed = [block.block_hash] if block.block_hash is not None else []
    block.reset_hash()
    return removed


def _touch_increments_first(self: Any, blocks: Any) -> None:
    """``BlockPool.touch`` with its two steps swapped: ``ref_cnt += 1`` before the ``ref_cnt ==
    0`` test, so a hit that was free never leaves the free queue and the next allocation can
    evict a block that a running request reads."""
    for block in blocks:
        if block.is_null:
            continue
        block.ref_cnt += 1
        if block.ref_cnt == 0:
            self.free_block_queue.remove(block)


def _lookup_whole_prompt(original: Callable[..., Any]) -> Callable[..., Any]:
    def get_computed_blocks(self: Any, request: Any,
                            max_cache_hit_length: Optional[int] = None) -> Any:
        """``get_computed_blocks`` capped at ``num_tokens`` instead of ``num_tokens - 1``: a fully
        cached prompt is a full hit, nothing is left to compute for the last token's logits,
        and the request's schedule differs from the protocol's (and vLLM's)."""
        if max_cache_hit_length is None:
            max_cache_hit_length = request.num_tokens
        return original(self, request, max_cache_hit_length)

    return get_computed_blocks


def _no_lora_keys(request: Any) -> list[Any]:
    """``_gen_lora_extra_hash_keys`` returning no key: two requests with the same tokens under
    different LoRA adapters hash alike and share KV computed with the other adapter."""
    return []


def _skipped_counts_the_query(self: Any, num_computed_tokens: int) -> int:
    """``SlidingWindowManager.get_num_skipped_tokens`` one token too far: the window is taken to
    end *before* the next query token, so the block holding the window's first key is freed
    (nulled) while the next query still reads it."""
    return max(0, num_computed_tokens - self.sliding_window + 2 - self.extra_retained_tokens)


def _mutant(name: str, bug_class: str, citation: str, owner: str, **replacements: Any) -> Mutant:
    return Mutant(name, "vllm", bug_class, citation, patch(f"{HERE}:{owner}", **replacements))


MUTANTS: tuple[Mutant, ...] = (
    _mutant("vllm-free-head-first",
            "blocks freed head first: the cached head of a prefix is evicted before its tail",
            "vLLM v1 KVCacheManager.free / SingleTypeKVCacheManager.free (\"free blocks in "
            "reverse order so that the tail blocks are evicted first\", vLLM PR #9972); "
            "LMCache#443 (a middle block evicted first leaves the rest of the chain useless)",
            "SingleTypeKVCacheManager", free=_free_head_first),
    _mutant("vllm-evict-keeps-map-entry",
            "evicted block's hash removed from the block but not from the cached map",
            "ovg-project/kvcached#362 and #363 (vLLM prefix-cache blocks keep a stale hash "
            "after eviction; the block and the cache index diverge)",
            "BlockPool", _remove_cached_block_hashes=_remove_hash_keep_map_entry),
    _mutant("vllm-touch-keeps-hit-free",
            "prefix hit not removed from the free queue on touch (ref_cnt raised first)",
            "vLLM #33775 (cache-hit blocks evicted by an allocation before they are touched) "
            "and PR #11310 (touch must take hits out of the free queue)",
            "BlockPool", touch=_touch_increments_first),
    _mutant("vllm-hit-past-last-token",
            "prefix lookup may hit the whole prompt: the last token is not recomputed",
            "vLLM PR #11186 (re-compute an entire block when fully cache hit) and LMCache#3322 "
            "(a full-prompt hit leaves no token to compute)",
            "KVCacheManager", get_computed_blocks=derived(_lookup_whole_prompt)),
    _mutant("vllm-lora-not-hashed",
            "LoRA adapter missing from the block hash's extra keys",
            "vLLM #3264 (prefix caching shares KV across LoRA adapters); vLLM "
            "kv_cache_utils._gen_lora_extra_hash_keys",
            "kv_cache_utils", _gen_lora_extra_hash_keys=_no_lora_keys),
    _mutant("vllm-window-frees-first-key",
            "sliding window: out-of-window count off by one, the window's first key freed",
            "vLLM PR #14097 review (\"-1 since the input token itself is also included in the "
            "window\") and PR #28047 (off-by-one of the keep-from block in get_num_skipped_"
            "tokens)",
            "SlidingWindowManager", get_num_skipped_tokens=_skipped_counts_the_query),
)
