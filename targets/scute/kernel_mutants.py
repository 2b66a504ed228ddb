"""Buggy variants of the ``scute`` Triton kernel, each a patch that swaps one in.

Every kernel mutant is the *correct* kernel source of :mod:`fuzzkit.targets.scute.kernels` with one line
replaced (quoted in each docstring), compiled as a real Triton kernel -- natively on a GPU, under
``TRITON_INTERPRET=1`` without one -- and installed as ``kernels.scute_kernel``, which the
launcher looks up at call time (:func:`fuzzkit.mutants.source_edit`: an anchor line that no longer
occurs exactly once raises ``RuntimeError`` instead of silently testing the clean kernel).  The
``segment-off-by-one`` and ``tile-remainder-zero`` mutants patch
:func:`fuzzkit.targets.scute.batching.segments` instead (the host side of the SGMV metadata), and
``block-r-capped`` patches :func:`fuzzkit.targets.scute.kernels.block_r`; the launcher looks both up at
call time.

They act on the ``triton`` implementation of the ``scute`` target; ``fuzzkit.targets.scute.mutants``
wires them with ``fuzzkit.mutants.device_mutants("fuzzkit.targets.scute.kernel_mutants")``.
``tests/test_scute_kernels.py`` shows each one failing the float64 slot-form comparison at
float32 on a typical mixed batch.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fuzzkit.mutants import Patch, derived, patch, source_edit
from fuzzkit.targets.scute import batching, tiles

#: The module the mutants edit, imported only when one is applied (it needs Triton).
_KERNELS = "fuzzkit.targets.scute.kernels"

#: ``batching.segments``: ``(token_slot, block_m) -> (order, start, length, slot)``.
Segments = Callable[[Any, int], tuple[np.ndarray, ...]]


wrong_adapter_gather = source_edit(
    _KERNELS,
    "    slot = tl.load(seg_slot_ptr + pid_m)\n    use = slot >= 0\n"
    "    sl = tl.maximum(slot, 0).to(tl.int64)\n    kind =",
    "    slot = tl.load(token_slot_ptr + pid_m)\n    use = slot >= 0\n"
    "    sl = tl.maximum(slot, 0).to(tl.int64)\n    kind =",
    attribute="scute_kernel",
).documented(
    """A tile reads its adapter id from the per-token (unsorted) mapping indexed by the tile
    number, instead of the per-segment slot list.

    Bug class: mixing the two index spaces of SGMV metadata -- token-level ``token_lora_mapping``
    vs segment-level ``lora_ids`` / ``lora_token_start_loc`` (vllm-project/vllm#15979, "Potential
    bug in LoRA Punica Kernel implementation": a segment's start taken from the wrong array, so
    tokens are served with another adapter's weights).  Invisible only when the token at
    position ``i`` happens to carry tile ``i``'s slot for every tile (e.g. a single adapter).

    ``slot = tl.load(token_slot_ptr + pid_m)``
    """
)


base_only_not_skipped = source_edit(
    _KERNELS,
    "    use = slot >= 0\n    sl = tl.maximum(slot, 0).to(tl.int64)\n    kind =",
    "    use = slot >= -1\n    sl = tl.maximum(slot, 0).to(tl.int64)\n    kind =",
    attribute="scute_kernel",
).documented(
    """Slot ``-1`` (no adapter) is not skipped: it is clamped to slot 0 and served with adapter
    0's transform, scale, shift and low-rank path.

    Bug class: the "no LoRA" sentinel handled by clamping the index instead of masking the
    adapter path -- base-model requests mixed into an adapter batch get an adapter's delta
    (NVIDIA/TensorRT-LLM#2096, "Random generation when inferring llama 2 with and without LoRA
    in the same batch"; predibase/lorax#64 on base-model rows inside SGMV batches).  Invisible
    when slot 0 is an identity slot or no token is ``-1``.

    ``use = slot >= -1``
    """
)


shrink_buffer_fp16 = source_edit(
    _KERNELS,
    "        h = acc_r * mv[None, :]\n",
    "        h = acc_r.to(tl.float16).to(tl.float32) * mv[None, :]\n",
    attribute="scute_kernel",
).documented(
    """The shrink result ``x . A^T`` is stored in a float16 buffer instead of float32 before the
    ``m`` scaling and the expand.

    Bug class: the intermediate LoRA buffer allocated in the activation dtype (Punica / vLLM
    allocate the shrink output ``buffer`` in float32 precisely so that ``x . A^T`` over ``K``
    terms is not rounded to half precision before the expand; see the fp32 ``buffer`` of vLLM's
    ``sgmv_shrink`` / ``bgmv_shrink`` and predibase/lorax#70 on erroneous SGMV shrink output).
    Visible at float32 storage whenever a slot has a low-rank path (relative 2^-11 >> the
    float32 bound); at float16 too, since the expand is float32.

    ``h = acc_r.to(tl.float16).to(tl.float32) * mv[None, :]``
    """
)


transform_transposed = source_edit(
    _KERNELS,
    "                tj = tl.load(t_base + offs_j[:, None] * K + offs_k[None, :],\n",
    "                tj = tl.load(t_base + offs_j[:, None] + offs_k[None, :] * K,\n",
    attribute="scute_kernel",
).documented(
    """The input transform ``T`` is loaded transposed (``x . T^T`` instead of ``x . T``).

    Bug class: a row/column-major mix-up of the rotation -- for an orthogonal OFT/BOFT block
    ``T^T = T^-1``, the *inverse* rotation; PEFT's exact Cayley and its Cayley-Neumann series
    differ by exactly such a transposition (COMPONENTS section 3, "approximately *transposed*
    rotations"; huggingface/peft OFT ``W' = W0 . R^T``).  Invisible for identity / diagonal /
    symmetric transforms (IA3, LoRA, unused slots).

    ``tj = tl.load(t_base + offs_j[:, None] + offs_k[None, :] * K,``
    """
)


shift_dropped = source_edit(
    _KERNELS,
    "    bv = tl.where(use, tl.load(b_ptr + sl * N + offs_n, mask=live_n, "
    "other=0.0),\n",
    "    bv = tl.where(use, tl.load(b0_ptr + offs_n, mask=live_n, other=0.0),\n",
    attribute="scute_kernel",
).documented(
    """The slot shift ``b`` is replaced by the base bias ``b0`` for every slot.

    Bug class: an adapter epilogue that keeps the base layer's bias -- IA3 on keys/values scales
    the whole base output, bias included (``b = b0 * l``); a fused kernel that adds ``b0`` after
    the scaling (the "bias is not scaled" rule of DoRA applied to IA3) is wrong there.  Visible
    whenever a batch has an IA3 (k/v) token and ``b0 != 0``.

    ``bv = tl.where(use, tl.load(b0_ptr + offs_n, mask=live_n, other=0.0),``
    """
)


scale_not_applied = source_edit(
    _KERNELS,
    "    y = acc * sv[None, :] + bv[None, :]\n",
    "    y = acc + bv[None, :]\n",
    attribute="scute_kernel",
).documented(
    """The output scale ``s`` of the base GEMM is never applied (``acc + b``).

    Bug class: a dropped per-slot scale in a fused epilogue (vllm-project/vllm-ascend#9743
    review: MoE LoRA path with ``scale=1.0`` hard-coded instead of the adapter's scaling).  For
    Scute it loses DoRA's ``g``, BOFT's ``boft_s`` and IA3 (k/v)'s ``l``.  Invisible when every
    slot in the batch has ``s = 1`` (LoRA, VeRA, OFT, IA3 ff).

    ``y = acc + bv[None, :]``
    """
)


output_scale_twice = source_edit(
    _KERNELS,
    "        y += lo_rank * ov[None, :]\n",
    "        y += lo_rank * ov[None, :] * ov[None, :]\n",
    attribute="scute_kernel",
).documented(
    """The low-rank output scale ``o`` is applied twice (``lo * o * o``).

    Bug class: LoRA scaling folded into ``B`` at load time *and* applied in the kernel (``alpha
    / r`` twice; the vLLM LoRA loader folds ``scaling`` into ``lora_b`` so that the Punica
    kernels must not scale again).  Invisible when ``o = 1`` (``alpha = r``) or a batch has no
    low-rank slot.

    ``y += lo_rank * ov[None, :] * ov[None, :]``
    """
)


def _segments_off_by_one(original: Segments) -> Segments:
    def off_by_one(token_slot: Any, block_m: int) -> tuple[np.ndarray, ...]:
        order, start, length, slot = original(token_slot, block_m)
        length = length.copy()
        for i in range(len(length) - 1):
            if slot[i + 1] != slot[i]:
                length[i] -= 1
        return order, start, length, slot

    return off_by_one


segment_off_by_one = patch(batching, segments=derived(_segments_off_by_one)).documented(
    """Host-side SGMV metadata off by one: the last tile of every segment that is followed by
    another segment is one row too short -- the segment's last token is never computed and its
    output row keeps the launcher's zero fill.

    Bug class: segment boundaries (``seq_start_loc`` / ``lora_token_start_loc``) computed with
    an inclusive end where an exclusive one is meant (sgl-project/sglang#28371: segment
    metadata out of step with the batch, work silently skipped; vllm-project/vllm#15979's
    segment start/length confusion).  Invisible only when the batch holds a single slot.

    Patched (``batching.segments``): ``length[i] - 1`` for the last tile of every run but the
    final one.
    """
)


transform_block_unaligned = source_edit(
    _KERNELS,
    "            lo = (k0 // span) * span\n",
    "            lo = k0\n",
    attribute="scute_kernel",
).documented(
    """The rows of ``T`` that a K chunk reads start at the chunk (``lo = k0``) instead of at the
    first transform block the chunk overlaps: the kernel assumes block boundaries fall on
    ``BLOCK_K`` boundaries.

    Bug class: a block-structured operand assumed aligned to the kernel tile -- block-sparse /
    block-diagonal kernels written for block sizes that divide the tile (triton-lang/triton#630,
    GEMM wrong when K is not a multiple of the tile; PEFT's OFT/BOFT block sizes are any
    divisor of the layer width, e.g. 12 or 24 next to a 16 / 64 tile).  Invisible unless K spans
    more than one chunk *and* a block straddles a chunk start (block size not dividing
    ``BLOCK_K``, or wider than it): with K <= BLOCK_K every chunk starts at 0.

    ``lo = k0``
    """
)


epilogue_column_offset = source_edit(
    _KERNELS,
    "    sv = tl.where(use, tl.load(s_ptr + sl * N + offs_n, mask=live_n, other=1.0), "
    "1.0)\n",
    "    sv = tl.where(use, tl.load(s_ptr + sl * N + tl.arange(0, BLOCK_N), "
    "mask=live_n, other=1.0), 1.0)\n",
    attribute="scute_kernel",
).documented(
    """The per-column output scale ``s`` is loaded at the in-tile column ``tl.arange(0,
    BLOCK_N)`` instead of the program's global columns ``offs_n``: every column program reads
    the first ``BLOCK_N`` scales.

    Bug class: a per-output-feature vector indexed without the program's ``pid_n * BLOCK_N``
    offset (vllm-project/vllm#13110: the sgmv expand kernels' column-tile bound on ``pid_n *
    BLOCK_N`` was wrong; per-slice ``slice_offset`` handling of packed QKV outputs).  Invisible
    unless Nout > BLOCK_N *and* a slot's scale varies across features (DoRA ``g``, BOFT
    ``boft_s``, IA3 k/v ``l``) -- a single column program reads the right values.

    ``sv = tl.where(use, tl.load(s_ptr + sl * N + tl.arange(0, BLOCK_N), ...``
    """
)


shrink_accumulator_reset = source_edit(
    _KERNELS,
    "            acc_prev = acc_r\n",
    "            acc_prev = tl.full((BLOCK_M, BLOCK_R), 0.0, dtype=tl.float32)\n",
    attribute="scute_kernel",
).documented(
    """The shrink accumulator is re-initialised in every K step (``acc_r = x_k . A_k^T`` instead
    of ``acc_r += ...``): only the last K chunk reaches the expand.

    Bug class: a loop-carried accumulator restarted inside the K loop -- the dot of the last
    chunk overwrites the partial sums (sgl-project/sglang#27087 collapsed the LoRA K loop into a
    single block, which is only right while the reduction fits one; triton-lang/triton#10821:
    K-loop accumulator chains computed wrongly).  Invisible while K <= BLOCK_K (one step) or a
    batch has no low-rank slot.

    ``acc_prev = tl.full((BLOCK_M, BLOCK_R), 0.0, dtype=tl.float32)`` (what the shrink GEMM
    adds to)
    """
)


def _segments_remainder_zero(original: Segments) -> Segments:
    def remainder(token_slot: Any, block_m: int) -> tuple[np.ndarray, ...]:
        order, start, length, slot = original(token_slot, block_m)
        length = length.copy()
        run_total = 0
        for i in range(len(length)):
            run_total += int(length[i])
            if i + 1 == len(length) or slot[i + 1] != slot[i]:
                length[i] = run_total % block_m
                run_total = 0
        return order, start, length, slot

    return remainder


tile_remainder_zero = patch(batching, segments=derived(_segments_remainder_zero)).documented(
    """Host-side SGMV metadata: the last tile of a slot's run gets ``count % BLOCK_M`` rows --
    zero when the run is an exact multiple of ``BLOCK_M``, so its last full tile is never
    computed and those tokens keep the launcher's zero fill.

    Bug class: the tail of a tiled loop computed as ``n % tile`` (herumi/msoffice#5: "when the
    data size is a multiple of blockSize, the last block size is 0"; vllm-project/vllm#13110:
    ``pid_m * BLOCK_M > M`` tile bounds wrong exactly at multiples of ``BLOCK_M`` in the sgmv
    kernels).  Invisible unless some slot (or the base-only tokens) has exactly ``BLOCK_M``,
    ``2 * BLOCK_M``, ... tokens.

    Patched (``batching.segments``): the last tile of every run gets ``run_length % block_m``.
    """
)


block_r_capped = patch(_KERNELS, block_r=lambda rank: tiles.block_r_min()).documented(
    """The launcher sizes the shrink buffer for the smallest supported rank: ``BLOCK_R`` is the
    mode's minimum whatever the adapters' rank, so the ranks past it are masked off
    (``live_r = offs_r < R`` never sees them).

    Bug class: a LoRA kernel compiled for a fixed maximum rank (predibase/lorax#70: the SGMV
    shrink gave erroneous output for ranks such as 32; lorax#256 pads ranks to what the kernel
    supports; punica-ai/punica#53: different ranks padded to the largest *supported*).
    Invisible unless the largest rank in the batch exceeds the minimum ``BLOCK_R`` (16 on a GPU,
    4 under the interpreter).

    Patched (``kernels.block_r``): ``lambda rank: tiles.block_r_min()``.
    """
)


#: name -> (patch, one-line bug class, citation).
KERNEL_MUTANTS: dict[str, tuple[Patch, str, str]] = {
    "wrong-adapter-gather": (
        wrong_adapter_gather,
        "Triton tile reads its adapter id from the per-token mapping (tile index), not its segment",
        "vllm-project/vllm#15979 (Punica kernel: token vs segment index spaces of the LoRA "
        "metadata)"),
    "base-only-not-skipped": (
        base_only_not_skipped,
        "adapter index -1 (base model only) clamped to slot 0 instead of skipping the adapter",
        "NVIDIA/TensorRT-LLM#2096 (with and without LoRA in one batch); predibase/lorax#64"),
    "shrink-buffer-fp16": (
        shrink_buffer_fp16,
        "shrink result x.A^T kept in a float16 buffer instead of float32",
        "Punica / vLLM sgmv_shrink float32 buffer; predibase/lorax#70 (erroneous SGMV shrink)"),
    "transform-transposed": (
        transform_transposed,
        "OFT/BOFT input transform loaded transposed (inverse rotation)",
        "COMPONENTS section 3 (exact Cayley vs Neumann: transposed rotations); PEFT OFT "
        "W' = W0 R^T"),
    "shift-dropped": (
        shift_dropped,
        "slot shift b replaced by base bias b0 (IA3 k/v bias not scaled)",
        "PEFT IA3 (k/v scales the whole base output, bias included); COMPONENTS section 3 table"),
    "scale-not-applied": (
        scale_not_applied,
        "per-slot output scale s dropped in the fused epilogue",
        "vllm-project/vllm-ascend#9743 (LoRA scale hard-coded to 1.0)"),
    "output-scale-twice": (
        output_scale_twice,
        "low-rank output scale o (alpha/r) applied twice",
        "vLLM folds LoRA scaling into lora_b at load time; kernels must not scale again"),
    "segment-off-by-one": (
        segment_off_by_one,
        "SGMV segment boundary off by one: each segment's last token is never computed",
        "sgl-project/sglang#28371 (stale segment metadata); vllm-project/vllm#15979"),
    "transform-block-unaligned": (
        transform_block_unaligned,
        "block-diagonal transform rows assumed aligned to the K tile (lo = k0)",
        "triton-lang/triton#630 (tile-alignment assumptions); PEFT OFT/BOFT block sizes are any "
        "divisor of the width"),
    "epilogue-column-offset": (
        epilogue_column_offset,
        "per-column scale s loaded without the column program's pid_n * BLOCK_N offset",
        "vllm-project/vllm#13110 (sgmv expand column-tile bounds)"),
    "shrink-accumulator-reset": (
        shrink_accumulator_reset,
        "shrink accumulator restarted in every K step: only the last chunk reaches the expand",
        "sgl-project/sglang#27087 (LoRA K loop collapsed to one block); "
        "triton-lang/triton#10821"),
    "tile-remainder-zero": (
        tile_remainder_zero,
        "last tile of a slot's run gets count % BLOCK_M rows: 0 for an exact multiple",
        "herumi/msoffice#5 (last block size 0 at a multiple); vllm-project/vllm#13110"),
    "block-r-capped": (
        block_r_capped,
        "shrink buffer sized for the minimum rank: ranks above BLOCK_R's minimum are dropped",
        "predibase/lorax#70 and #256 (SGMV wrong/unsupported for some ranks); "
        "punica-ai/punica#53"),
}
