"""Planted bugs in SGLang's real radix cache (``sglang/srt/mem_cache/radix_cache.py``, 0.5.23).

Each mutant is a one-line (or one-statement) source edit of the engine's own file
(:func:`fuzzkit.mutants.source_edit`: a private copy of the module with the line replaced, its
``RadixCache`` -- or, for the allocator one, ``PagedTokenToKVPoolAllocator`` of
``allocator/paged.py`` -- swapped in while the mutant is applied), so it stays one edit away
from the real code.  The owners are named through :mod:`.sglang_load`'s lazy ``radix`` /
``alloc`` attributes, so declaring the mutants loads neither torch nor the wheel.  Each cites
the upstream bug class it models.
``tests/test_prefix_cache.py`` shows each caught; ``fuzzkit mutants prefix_cache --only NAME``
hunts it from scratch.
"""

from __future__ import annotations

from fuzzkit.mutants import source_edit
from fuzzkit.target import Mutant

RADIX = "fuzzkit.targets.prefix_cache.adapters.sglang_load:radix"
PAGED = "fuzzkit.targets.prefix_cache.adapters.sglang_load:alloc.paged"


def _edit(old: str, new: str) -> object:
    return source_edit(RADIX, old, new, attribute="RadixCache")


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "sglang-split-drops-lock", "sglang",
        "a node split does not carry the lock count to the new prefix node: a locked path "
        "becomes evictable above the split",
        "sglang#38480 (HiCache: the prefix fragment of a split does not inherit the host lock, "
        "its blocks are freed and reused while in use) and sglang#38138 (SWA host lock lost on "
        "node split)",
        _edit("        new_node.lock_ref = child.lock_ref\n",
              "        new_node.lock_ref = 0\n"),
    ),
    Mutant(
        "sglang-lock-skips-matched-node", "sglang",
        "inc_lock_ref starts at the matched node's parent: the node a request holds is never "
        "locked and can be evicted under it",
        "mini-sglang#52 (RadixCacheManager.lock_handle moved `node = node.parent` to the top of "
        "the loop: the handle's own node kept ref_count 0 and was evicted while in use)",
        _edit("        delta = 0\n        while node != self.root_node:\n"
              "            if node.lock_ref == 0:\n",
              "        delta = 0\n        node = node.parent or node\n"
              "        while node != self.root_node:\n            if node.lock_ref == 0:\n"),
    ),
    Mutant(
        "sglang-dedup-frees-protected-prefix", "sglang",
        "caching a request frees its whole deduplicated prefix, including the tree-owned part "
        "it matched at admission (a double free of KV slots the tree still references)",
        "sglang#6888 and sglang#11970 ('token_to_kv_pool_allocator memory leak detected' after "
        "release paths freed the same slots twice), sglang#12224 as ported in sglang-jax#982 "
        "(scattered KV release, one slot freed by two paths)",
        _edit("            kv_indices[req.kv.cache_protected_len : result.prefix_len],\n"
              "            start_pos=req.kv.cache_protected_len,\n",
              "            kv_indices[: result.prefix_len],\n            start_pos=0,\n"),
    ),
    Mutant(
        "sglang-match-no-lru-refresh", "sglang",
        "a prefix hit does not refresh the nodes' last access time: LRU degrades to insertion "
        "order, hot shared prefixes are evicted first",
        "sglang#18843 (RadixCache never updated hit metadata on match_prefix, so LFU ran on "
        "stale counts), sglang#24892 (which nodes a split match refreshes), ferrox#14 (a "
        "prefix cache that was FIFO under an LRU name)",
        _edit("            child.last_access_time = access_time\n",
              "            pass\n"),
    ),
    Mutant(
        "sglang-evict-locked-parent", "sglang",
        "eviction promotes a parent to the heap once its last child goes, checking that it is "
        "not the root instead of its lock: a node on a live request's path is evicted",
        "sglang#21406 / sglang#21379 (evict_mamba picked a leaf still locked by the in-flight "
        "batch and freed KV in use) and sglang#23537 (wrong leaf-status check let a node with "
        "live descendants into the evictable set)",
        _edit("            if len(x.parent.children) == 0 and x.parent.lock_ref == 0:\n",
              "            if len(x.parent.children) == 0 and x.parent != self.root_node:\n"),
    ),
    Mutant(
        "sglang-paged-free-skips-partial-page", "sglang",
        "the paged allocator picks each page's representative slot at the page's last offset: "
        "a segment ending mid-page never frees its last page (a leak at page_size > 1)",
        "sglang#7130 and sglang#6888 ('token_to_kv_pool_allocator memory leak detected' with "
        "--page-size 16: the partial last page of a request not returned)",
        source_edit(PAGED, "        reps = free_index[::ps]\n",
                    "        reps = free_index[ps - 1 :: ps]\n",
                    attribute="PagedTokenToKVPoolAllocator"),
    ),
)
