"""Planted bugs in vLLM's real Triton KV kernels and their launch wrappers (``vllm-triton``).

Each mutant is a source edit of the pinned wheel's own module -- one or a few lines of
``triton_reshape_and_cache_flash.py`` or ``triton_unified_attention.py`` replaced, as in a real
upstream bug -- imported as a private copy (Triton reads a kernel's source from its file) while
the adapter's shims are installed, and swapped in for the attribute the wrapper looks up at
call time (the kernel, or the wrapper itself).  An anchor that no longer occurs exactly once in
the wheel's source raises ``RuntimeError`` instead of silently testing the clean kernel.  Each
docstring cites the upstream fix whose bug it re-plants.  ``tests/test_paged_kv_vllm_kernels.py``
shows each caught; ``fuzzkit mutants paged_kv --only NAME`` finds them from scratch.
"""

from __future__ import annotations

from typing import Any

from fuzzkit.mutants import LineEdit, Patch, derived, patch, source_variant
from fuzzkit.target import Mutant

_ADAPTER = "fuzzkit.targets.paged_kv.adapters.vllm_kernels"
IMPLEMENTATION = "vllm-triton"


def _edited(module: str, attribute: str, *lines: LineEdit) -> Patch:
    """Replace ``<module>.<attribute>`` (``module``: ``attention_ops`` or ``write_ops`` of the
    adapter) by the same attribute of the wheel module's source with ``lines`` applied."""

    def build(original: Any) -> Any:
        from fuzzkit.targets.paged_kv.adapters import vllm_kernels

        owner = getattr(vllm_kernels, module)
        with vllm_kernels.engine_imports():
            return getattr(source_variant(owner, tuple(lines)), attribute)

    return patch(f"{_ADAPTER}:{module}", **{attribute: derived(build)})


pad_slot_not_skipped = _edited(
    "write_ops", "reshape_and_cache_kernel_flash",
    ("    if slot_idx < 0:\n        # Padding token that should be ignored.\n        return\n\n"
     "    block_idx = slot_idx // block_size\n",
     "    block_idx = slot_idx // block_size\n"),
).documented(
    """reshape_and_cache writes the CUDA-graph padding tokens (slot ``-1``) instead of skipping
    them: slot -1 lands just before the pool (another tensor, in vLLM: illegal memory access or
    silent corruption).  The driver's redzone sees a ``write/stray-write``.

    vLLM #13922 / #13418 (reshape_and_cache with CUDA-graph padding, ``PAD_SLOT_ID = -1``).
    """
)

block_table_stride_from_width = _edited(
    "attention_ops", "unified_attention",
    ("        num_queries_per_kv=num_queries_per_kv,\n"
     "        block_table_stride=block_table.stride(0),\n",
     "        num_queries_per_kv=num_queries_per_kv,\n"
     "        block_table_stride=block_table.shape[1],\n"),
).documented(
    """The launch wrapper passes the block table's *width* as its row stride: right for a
    contiguous table, wrong for the narrowed view of vLLM's persistent table -- every request
    after the first reads another row's blocks (wrong keys: ``attention-output``).

    vLLM #55109 (DeepSeek V4 K-cache gather advanced rows by ``block_table.shape[-1]`` instead
    of ``stride(0)`` for strided block tables).
    """
)

v_tail_unmasked = _edited(
    "attention_ops", "kernel_unified_attention",
    ("                mask=dim_mask[None, :] & tile_mask[:, None],\n",
     "                mask=dim_mask[None, :],\n"),
).documented(
    """V tiles are loaded past the sequence's prefix (the tile mask dropped from the V load):
    the unwritten tail of the last block and the table's padding blocks enter ``P @ V`` with
    weight 0, and ``0 * NaN`` poisons the row (``read/unwritten``).

    vLLM #47305 ("Don't read KV cache past seq_len in triton paged attn kernels": masked
    positions get weight 0 but 0 * NaN = NaN).
    """
)

window_v_unmasked = _edited(
    "attention_ops", "kernel_unified_attention",
    ("            V = tl.where(sw_mask_v, V, 0.0)\n", "            V = V\n"),
).documented(
    """Sliding window: V rows of the first tile that lie before the window are not zeroed; those
    blocks are freed (the table points at the null block) or reused, and their garbage or NaN
    reaches the output through ``0 * NaN`` (``read/unwritten``).

    vLLM #30887 ("Triton attention kernels: mask out V blocks that fall outside sliding
    window"; gpt-oss garbage output, #29998 / #26480).
    """
)

window_off_by_one = _edited(
    "attention_ops", "unified_attention",
    ("        SLIDING_WINDOW=(1 + window_size[0]),\n",
     "        SLIDING_WINDOW=window_size[0],\n"),
).documented(
    """The wrapper forgets the ``+ 1`` of the ``window_size = (w - 1, 0)`` convention: the
    kernel attends ``w - 1`` keys (and a window of 1 turns the window off).

    vLLM #3385 (sliding window one token off against HF / FlashAttention's ``window_size``).
    """
)


MUTANTS: tuple[Mutant, ...] = (
    Mutant("vllm-pad-slot-not-skipped", IMPLEMENTATION,
           "reshape_and_cache writes the -1 CUDA-graph padding slots",
           "vLLM #13922 / #13418: reshape_and_cache under CUDA-graph padding (PAD_SLOT_ID -1)",
           pad_slot_not_skipped),
    Mutant("vllm-block-table-stride-from-width", IMPLEMENTATION,
           "block-table row stride taken from the view's width, not stride(0)",
           "vLLM #55109: K-cache gather used block_table.shape[-1] as the row stride",
           block_table_stride_from_width),
    Mutant("vllm-v-tail-unmasked", IMPLEMENTATION,
           "V loaded past seq_len (unwritten last-block tail) into P @ V",
           "vLLM #47305: don't read KV cache past seq_len (0 * NaN poisons the output)",
           v_tail_unmasked),
    Mutant("vllm-window-v-unmasked", IMPLEMENTATION,
           "sliding window: out-of-window V rows of the first tile not zeroed",
           "vLLM #30887: mask out V blocks that fall outside the sliding window",
           window_v_unmasked),
    Mutant("vllm-window-off-by-one", IMPLEMENTATION,
           "sliding window w - 1 keys wide (window_size + 1 convention lost)",
           "vLLM #3385: sliding-window off by one vs HF / FlashAttention window_size",
           window_off_by_one),
)
