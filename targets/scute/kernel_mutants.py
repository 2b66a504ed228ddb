"""Buggy variants of the ``scute`` Triton kernel, each a context manager that swaps one in.

Every kernel mutant is the *correct* kernel source of :mod:`targets.scute.kernels` with one line
replaced (quoted in each docstring), compiled as a real Triton kernel -- natively on a GPU, under
``TRITON_INTERPRET=1`` without one -- and installed as ``kernels.scute_kernel``, which the
launcher looks up at call time (:mod:`fuzzkit.kernel_mutation`: an anchor line that no longer
occurs exactly once raises ``RuntimeError`` instead of silently testing the clean kernel).  The
``segment-off-by-one`` mutant patches :func:`targets.scute.batching.segments` instead (the host
side of the SGMV metadata), which the launcher also looks up at call time.

They act on the ``triton`` implementation of the ``scute`` target; ``targets.scute.mutants``
wires them with ``fuzzkit.kernel_mutation.device_mutants("targets.scute.kernel_mutants")``.
``tests/test_scute_kernels.py`` shows each one failing the float64 slot-form comparison at
float32 on a typical mixed batch.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Iterator
from unittest import mock

import numpy as np

from fuzzkit.kernel_mutation import swapped


def _swap(name: str, *replacements: tuple[str, str]) -> ContextManager[None]:
    from targets.scute import kernels

    return swapped(kernels, "scute_kernel", name, *replacements)


@contextlib.contextmanager
def wrong_adapter_gather() -> Iterator[None]:
    """A tile reads its adapter id from the per-token (unsorted) mapping indexed by the tile
    number, instead of the per-segment slot list.

    Bug class: mixing the two index spaces of SGMV metadata -- token-level ``token_lora_mapping``
    vs segment-level ``lora_ids`` / ``lora_token_start_loc`` (vllm-project/vllm#15979, "Potential
    bug in LoRA Punica Kernel implementation": a segment's start taken from the wrong array, so
    tokens are served with another adapter's weights).  Invisible only when the token at
    position ``i`` happens to carry tile ``i``'s slot for every tile (e.g. a single adapter).

    ``slot = tl.load(token_slot_ptr + pid_m)``
    """
    with _swap("wrong-adapter-gather",
               ("    slot = tl.load(seg_slot_ptr + pid_m)\n    use = slot >= 0\n"
                "    sl = tl.maximum(slot, 0).to(tl.int64)\n    kind =",
                "    slot = tl.load(token_slot_ptr + pid_m)\n    use = slot >= 0\n"
                "    sl = tl.maximum(slot, 0).to(tl.int64)\n    kind =")):
        yield


@contextlib.contextmanager
def base_only_not_skipped() -> Iterator[None]:
    """Slot ``-1`` (no adapter) is not skipped: it is clamped to slot 0 and served with adapter
    0's transform, scale, shift and low-rank path.

    Bug class: the "no LoRA" sentinel handled by clamping the index instead of masking the
    adapter path -- base-model requests mixed into an adapter batch get an adapter's delta
    (NVIDIA/TensorRT-LLM#2096, "Random generation when inferring llama 2 with and without LoRA
    in the same batch"; predibase/lorax#64 on base-model rows inside SGMV batches).  Invisible
    when slot 0 is an identity slot or no token is ``-1``.

    ``use = slot >= -1``
    """
    with _swap("base-only-not-skipped",
               ("    use = slot >= 0\n    sl = tl.maximum(slot, 0).to(tl.int64)\n    kind =",
                "    use = slot >= -1\n    sl = tl.maximum(slot, 0).to(tl.int64)\n    kind =")):
        yield


@contextlib.contextmanager
def shrink_buffer_fp16() -> Iterator[None]:
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
    with _swap("shrink-buffer-fp16",
               ("        h = acc_r * mv[None, :]\n",
                "        h = acc_r.to(tl.float16).to(tl.float32) * mv[None, :]\n")):
        yield


@contextlib.contextmanager
def transform_transposed() -> Iterator[None]:
    """The input transform ``T`` is loaded transposed (``x . T^T`` instead of ``x . T``).

    Bug class: a row/column-major mix-up of the rotation -- for an orthogonal OFT/BOFT block
    ``T^T = T^-1``, the *inverse* rotation; PEFT's exact Cayley and its Cayley-Neumann series
    differ by exactly such a transposition (COMPONENTS section 3, "approximately *transposed*
    rotations"; huggingface/peft OFT ``W' = W0 . R^T``).  Invisible for identity / diagonal /
    symmetric transforms (IA3, LoRA, unused slots).

    ``tj = tl.load(t_base + offs_j[:, None] + offs_k[None, :] * K,``
    """
    with _swap("transform-transposed",
               ("                tj = tl.load(t_base + offs_j[:, None] * K + offs_k[None, :],\n",
                "                tj = tl.load(t_base + offs_j[:, None] + offs_k[None, :] * K,\n")):
        yield


@contextlib.contextmanager
def shift_dropped() -> Iterator[None]:
    """The slot shift ``b`` is replaced by the base bias ``b0`` for every slot.

    Bug class: an adapter epilogue that keeps the base layer's bias -- IA3 on keys/values scales
    the whole base output, bias included (``b = b0 * l``); a fused kernel that adds ``b0`` after
    the scaling (the "bias is not scaled" rule of DoRA applied to IA3) is wrong there.  Visible
    whenever a batch has an IA3 (k/v) token and ``b0 != 0``.

    ``bv = tl.where(use, tl.load(b0_ptr + offs_n, mask=live_n, other=0.0),``
    """
    with _swap("shift-dropped",
               ("    bv = tl.where(use, tl.load(b_ptr + sl * N + offs_n, mask=live_n, "
                "other=0.0),\n",
                "    bv = tl.where(use, tl.load(b0_ptr + offs_n, mask=live_n, other=0.0),\n")):
        yield


@contextlib.contextmanager
def scale_not_applied() -> Iterator[None]:
    """The output scale ``s`` of the base GEMM is never applied (``acc + b``).

    Bug class: a dropped per-slot scale in a fused epilogue (vllm-project/vllm-ascend#9743
    review: MoE LoRA path with ``scale=1.0`` hard-coded instead of the adapter's scaling).  For
    Scute it loses DoRA's ``g``, BOFT's ``boft_s`` and IA3 (k/v)'s ``l``.  Invisible when every
    slot in the batch has ``s = 1`` (LoRA, VeRA, OFT, IA3 ff).

    ``y = acc + bv[None, :]``
    """
    with _swap("scale-not-applied",
               ("    y = acc * sv[None, :] + bv[None, :]\n", "    y = acc + bv[None, :]\n")):
        yield


@contextlib.contextmanager
def output_scale_twice() -> Iterator[None]:
    """The low-rank output scale ``o`` is applied twice (``lo * o * o``).

    Bug class: LoRA scaling folded into ``B`` at load time *and* applied in the kernel (``alpha
    / r`` twice; the vLLM LoRA loader folds ``scaling`` into ``lora_b`` so that the Punica
    kernels must not scale again).  Invisible when ``o = 1`` (``alpha = r``) or a batch has no
    low-rank slot.

    ``y += lo_rank * ov[None, :] * ov[None, :]``
    """
    with _swap("output-scale-twice",
               ("        y += lo_rank * ov[None, :]\n",
                "        y += lo_rank * ov[None, :] * ov[None, :]\n")):
        yield


@contextlib.contextmanager
def segment_off_by_one() -> Iterator[None]:
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
    from targets.scute import batching

    original = batching.segments

    def off_by_one(token_slot: Any, block_m: int) -> tuple[np.ndarray, ...]:
        order, start, length, slot = original(token_slot, block_m)
        length = length.copy()
        for i in range(len(length) - 1):
            if slot[i + 1] != slot[i]:
                length[i] -= 1
        return order, start, length, slot

    with mock.patch.object(batching, "segments", off_by_one):
        yield


#: name -> (context manager, one-line bug class, citation).
KERNEL_MUTANTS: dict[str, tuple[Callable[[], ContextManager[None]], str, str]] = {
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
}

__all__ = ["KERNEL_MUTANTS"] + [cm.__name__ for cm, _, _ in KERNEL_MUTANTS.values()]
