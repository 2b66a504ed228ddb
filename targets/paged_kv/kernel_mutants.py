"""Buggy variants of the paged KV Triton kernels, each a patch that swaps one in.

Every mutant is the *correct* kernel source of :mod:`fuzzkit.targets.paged_kv.kernels` with one or two
lines replaced (shown in each docstring), compiled as a real Triton kernel -- natively on a GPU,
under ``TRITON_INTERPRET=1`` without one -- and installed as ``kernels.write_kernel`` or
``kernels.attention_kernel``, which the plain *and* the guarded launchers look up at call time.
The mutated source is written to a private temporary module (Triton reads a kernel's source
from its file), built once per process and mutant.  A replacement whose anchor line no longer
occurs exactly once in ``kernels.py`` raises ``RuntimeError`` instead of silently testing
nothing.

Citations name the upstream code and bug class; no issue numbers are given where we do not know
a real one.  ``tests/test_paged_kv_kernels.py`` shows each mutant caught by the float64 ``close``
oracle within a bounded number of generated cases (and, where the guard can see it, by KVGuard's
device records).
"""

from __future__ import annotations

from fuzzkit.mutants import Patch, source_edit

#: The module the mutants edit, imported only when one is applied (it needs Triton).
_KERNELS = "fuzzkit.targets.paged_kv.kernels"


# ============================================================================ write kernel


_SLOT_LOAD = "slot = tl.load(slot_mapping_ptr + offs_t, mask=t_ok, other=-1).to(tl.int64)\n"
slot_off_by_one = source_edit(
    _KERNELS,
    _SLOT_LOAD,
    _SLOT_LOAD[:-1] + " + 1\n",
    attribute="write_kernel",
).documented(
    """Slot mapping off by one in reshape-and-cache: every token goes to ``slot + 1``.

    Bug class: the slot of a token is ``block_table[pos // b] * b + pos % b`` (vLLM
    ``reshape_and_cache`` / ``reshape_and_cache_flash`` take it from ``slot_mapping``, ``-1``
    meaning padding); an off-by-one -- a slot computed from the length *after* appending the
    token, or an index bumped twice -- shifts each K/V row into its neighbour's slot, the last
    slot of a block into the next block, and turns the ``-1`` padding sentinel into slot 0 of
    the null block.  KVGuard's write check sees ``WRITE_WRONG_OFFSET`` / ``WRITE_NOT_OWNER``.

    ``slot = tl.load(slot_mapping_ptr + offs_t, ...).to(tl.int64) + 1``
    """
)


offset_from_batch_index = source_edit(
    _KERNELS,
    "    offset = slot % block_size\n",
    "    offset = offs_t % block_size\n",
    attribute="write_kernel",
).documented(
    """In-block offset taken from the token's index in the batch instead of its slot.

    Bug class: a reshape-and-cache kernel that derives the offset inside the block from the
    token's row in the packed batch (``t % b``) rather than from ``slot % b``: right for a
    prefill that starts at a block boundary, wrong for every decode token and for chunked
    prefill whose chunk starts mid-block.  KVGuard's write check sees ``WRITE_WRONG_OFFSET``.

    ``offset = offs_t % block_size``
    """
)


# ============================================================================ attention kernel


table_ignored = source_edit(
    _KERNELS,
    "physical = tl.load(table_row + logical, mask=k_ok, other=0)\n",
    "physical = logical\n",
    attribute="attention_kernel",
).documented(
    """Physical block = logical block index: the block table is never read.

    Bug class: an attention kernel written for a contiguous KV layout (FlashAttention varlen
    without its ``block_table`` argument, a prefill path that assumes the context was
    allocated contiguously) run on a paged cache.  Right only when the table happens to be the
    identity; otherwise it reads other requests' blocks and the null block.

    ``physical = logical``
    """
)


no_causal_mask = source_edit(
    _KERNELS,
    "valid = valid & (offs_n[None, :] <= q_pos[:, None])  # causal\n",
    "valid = valid  # causal mask dropped\n",
    attribute="attention_kernel",
).documented(
    """The causal mask is missing: every query of a chunk sees the whole chunk.

    Bug class: a decode kernel (one query, the newest token, so "every key up to ``seq_len``"
    is causal) reused for chunked prefill, or the Triton fused-attention tutorial's ``causal``
    stage skipped -- vLLM's prefix-prefill kernel masks only the new-token part, and forgetting
    it there lets early queries attend later tokens of the same chunk.  Decode is unaffected;
    KVGuard's read check sees ``READ_FUTURE``.

    ``valid = valid  # causal mask dropped``
    """
)


reads_past_seq_len = source_edit(
    _KERNELS,
    "seq_len = tl.load(seq_lens_ptr + r)\n",
    "seq_len = max_blocks * block_size\n",
    attribute="attention_kernel",
).documented(
    """Reads past the sequence length: the key count comes from the block-table width.

    Bug class: vLLM's paged attention masks ``token_idx >= seq_len``; a kernel that takes the
    number of keys from ``max_num_blocks_per_seq * block_size`` (the padded table width, e.g.
    under CUDA-graph padding) instead of ``seq_lens`` attends the unwritten tail of the last
    block and the null-block padding of the row (docs/COMPONENTS.md §1: zero-filled / stale table
    rows, vLLM #7018).  KVGuard sees ``READ_UNWRITTEN`` / ``READ_NOT_READABLE``.

    ``seq_len = max_blocks * block_size``
    """
)


gqa_wrong_kv_head = source_edit(
    _KERNELS,
    "head = kv_head * group + in_group  # query head of each row\n",
    "head = in_group * tl.num_programs(2) + kv_head\n",
    attribute="attention_kernel",
).documented(
    """GQA head mapping: query head ``h`` uses kv head ``h % H_kv`` instead of ``h // G``.

    Bug class: grouped-query attention maps ``G = H / H_kv`` *consecutive* query heads to one
    kv head (vLLM ``num_queries_per_kv``, FlashInfer's ``group_size``); an interleaved mapping
    (``h % H_kv``, as in a ``repeat`` vs ``repeat_interleave`` mix-up) reads the wrong kv head
    for most heads.  Invisible with ``H_kv == 1`` or ``G == 1``.

    ``head = in_group * tl.num_programs(2) + kv_head``
    """
)


previous_block_at_edge = source_edit(
    _KERNELS,
    "logical = offs_n // block_size\n",
    "logical = (offs_n - 1) // block_size\n",
    attribute="attention_kernel",
).documented(
    """Off-by-one in ``k // b``: the first key of each block is read from the previous block.

    Bug class: page-index arithmetic off by one (``(k - 1) // b`` where ``k // b`` is meant --
    the same slip as ``(len - 1) // page_size`` last-page bookkeeping in FlashInfer-style page
    tables); every key at a block edge reads slot 0 of the block before.  With ``b == 1`` every
    key is at an edge.  KVGuard sees ``READ_WRONG_POSITION``.

    ``logical = (offs_n - 1) // block_size``
    """
)


softmax_max_not_updated = source_edit(
    _KERNELS,
    "        m_i = m_new\n",
    "        m_i = m_i  # running max never updated\n",
    attribute="attention_kernel",
).documented(
    """Online softmax: the running max is never updated across key blocks.

    Bug class: FlashAttention-2 Algorithm 1 / the Triton fused-attention tutorial keep a
    running max ``m_i`` and rescale the accumulator by ``exp(m_old - m_new)``; dropping the
    ``m_i = m_new`` update makes every rescale factor ``exp(-inf) = 0``, so each key block
    erases the ones before -- only the last block counts.  Invisible while a row's keys fit in
    one ``BLOCK_N`` step.

    ``m_i = m_i  # running max never updated``
    """
)


window_off_by_one = source_edit(
    _KERNELS,
    "first_key = q_pos - window + 1  # oldest key in each query's window\n",
    "first_key = q_pos - window\n",
    attribute="attention_kernel",
).documented(
    """Sliding window one key too wide: ``t - w .. t`` instead of ``t - w + 1 .. t``.

    Bug class: a window of ``w`` tokens including the query itself is FlashAttention's
    ``window_size=(w - 1, 0)``; passing ``(w, 0)`` (or comparing ``>=`` where ``>`` is meant)
    attends ``w + 1`` keys -- the classic Mistral / vLLM sliding-window off-by-one.  Shows only
    once a query is more than ``w`` tokens in.

    ``first_key = q_pos - window``
    """
)


wrong_output_row = source_edit(
    _KERNELS,
    "out_row = q_start + q_idx\n",
    "out_row = r + q_idx\n",
    attribute="attention_kernel",
).documented(
    """Output written to the wrong query row in chunked prefill.

    Bug class: in a mixed batch request ``r``'s queries start at row ``query_start_loc[r]``
    (vLLM prefix-prefill's ``cur_batch_in_all_start_index``); a store indexed with the decode
    layout (row = batch index, one query per request) is right for all-decode batches and
    overwrites other requests' rows -- leaving some unwritten -- as soon as an earlier request
    has more than one query.

    ``out_row = r + q_idx``
    """
)


write_tile_offset_dropped = source_edit(
    _KERNELS,
    "    t64 = offs_t.to(tl.int64)\n",
    "    t64 = tl.arange(0, BLOCK_T).to(tl.int64)\n",
    attribute="write_kernel",
).documented(
    """The K/V source rows of a write program ignore its token tile: every program copies the
    rows of the *first* ``BLOCK_T`` tokens into its own tokens' slots.

    Bug class: a multi-program Triton kernel where one of several derived offsets forgets the
    ``pid * BLOCK`` term (the mask and the slot use ``offs_t``, the source pointer a bare
    ``tl.arange``); correct while a launch fits one program -- ``BLOCK_T`` tokens (256 on a GPU,
    8 as the guarded driver launches under the interpreter) -- wrong K/V for every later
    token.  The guard sees right slots and positions; the attention output does not match.

    ``t64 = tl.arange(0, BLOCK_T).to(tl.int64)``
    """
)


query_tile_position_dropped = source_edit(
    _KERNELS,
    "q_pos = context_len + q_idx  # token position of each row's query\n",
    "q_pos = context_len + offs_m // G_PAD\n",
    attribute="attention_kernel",
).documented(
    """Query positions computed without the query tile: the rows of the second and later
    query tiles get the first tile's positions.

    Bug class: the tile offset dropped from one derived index (``q_idx`` has it, ``q_pos`` is
    rebuilt from ``offs_m``): the causal mask and the key range of every query past the first
    ``BLOCK_Q`` (32 on a GPU prefill tile and as the guarded driver launches under the
    interpreter) are those of a query 32 positions earlier -- a prefill chunk longer than
    one tile attends too few keys.

    ``q_pos = context_len + offs_m // G_PAD``
    """
)


running_max_zero_init = source_edit(
    _KERNELS,
    '    m_i = tl.full((BLOCK_M,), float("-inf"), ACC)\n',
    "    m_i = tl.zeros((BLOCK_M,), ACC)\n",
    attribute="attention_kernel",
).documented(
    """Online softmax with the running max started at 0 instead of ``-inf``.

    Bug class: FlashAttention-style kernels keep ``m_i``, the row max so far; starting it at 0
    is harmless while some score of the row is near or above 0 (the shift cancels in
    ``acc / l``) -- and wrong when every score of a row lies far below 0: ``exp2(s - 0)``
    underflows to 0 for all keys, ``l = 0`` and the row comes out 0.  Only large query/key
    magnitudes (extreme values) reach it.

    ``m_i = tl.zeros((BLOCK_M,), ACC)``
    """
)


#: name -> (patch, one-line bug class, citation).
KERNEL_MUTANTS: dict[str, tuple[Patch, str, str]] = {
    "offset-from-batch-index": (
        offset_from_batch_index,
        "in-block offset from the token's batch index instead of its slot",
        "vLLM csrc/cache_kernels.cu reshape_and_cache (offset = slot % block_size); KVGuard "
        "write check 5"),
    "slot-off-by-one": (
        slot_off_by_one,
        "slot mapping off by one in reshape-and-cache",
        "vLLM csrc/cache_kernels.cu reshape_and_cache(_flash): slot_mapping contract "
        "(slot = table[pos // b] * b + pos % b, -1 = padding); KVGuard write check 5"),
    "table-ignored": (
        table_ignored,
        "physical block = logical index: block table ignored",
        "FlashAttention varlen vs paged KV (block_table argument); vLLM paged_attention "
        "block_table lookup"),
    "no-causal-mask": (
        no_causal_mask,
        "causal mask missing inside a chunked-prefill query chunk",
        "vLLM triton prefix_prefill (causal mask on the new-token part); Triton tutorial "
        "06-fused-attention causal stage"),
    "reads-past-seq-len": (
        reads_past_seq_len,
        "key count from the block-table width: reads past seq_len",
        "vLLM paged_attention token_idx < seq_len mask; zero-filled/stale table rows "
        "(docs/COMPONENTS.md §1, vLLM #7018)"),
    "gqa-wrong-kv-head": (
        gqa_wrong_kv_head,
        "GQA kv head h % H_kv instead of h // (H / H_kv)",
        "vLLM num_queries_per_kv / FlashInfer group_size head mapping (repeat vs "
        "repeat_interleave)"),
    "previous-block-at-edge": (
        previous_block_at_edge,
        "off-by-one in k // b: block-edge keys read from the previous block",
        "page-index arithmetic off by one (FlashInfer-style page tables, vLLM block_table "
        "indexing)"),
    "softmax-max-not-updated": (
        softmax_max_not_updated,
        "online softmax: running max not carried across key blocks",
        "FlashAttention-2 Algorithm 1 / Triton tutorial 06-fused-attention (m_i = m_ij "
        "rescale)"),
    "window-off-by-one": (
        window_off_by_one,
        "sliding window off by one (w + 1 keys)",
        "FlashAttention window_size=(w-1, 0) convention; Mistral/vLLM sliding-window "
        "semantics"),
    "write-tile-offset-dropped": (
        write_tile_offset_dropped,
        "write kernel: source rows ignore the token tile (pid * BLOCK_T dropped)",
        "Triton multi-program offsets (pid * BLOCK + arange); vLLM reshape_and_cache "
        "token-parallel launch"),
    "query-tile-position-dropped": (
        query_tile_position_dropped,
        "attention: query positions ignore the query tile (second tile masked as the first)",
        "Triton tutorial 06-fused-attention start_m * BLOCK_M offsets; vLLM prefix_prefill "
        "query-block positions"),
    "running-max-zero-init": (
        running_max_zero_init,
        "online softmax: running max initialised to 0, rows of very negative scores vanish",
        "FlashAttention-2 Algorithm 1 (m_0 = -inf); Triton tutorial 06-fused-attention "
        "(m_i = -inf init)"),
    "wrong-output-row": (
        wrong_output_row,
        "output stored at the decode-layout row in a mixed batch",
        "vLLM prefix_prefill cur_batch_in_all_start_index (query_start_loc) indexing"),
}
