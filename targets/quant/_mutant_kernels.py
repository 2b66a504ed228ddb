"""Buggy Triton kernel variants for the quant mutants (imported only when a mutant is applied).

Kept apart from :mod:`targets.quant.kernels` so the correct module holds only correct code.
"""

from __future__ import annotations

from fuzzkit import triton_support

triton_support.prepare()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def score_kernel_hoisted_d_mask(
    q_ptr, codes_ptr, codebook_ptr, scale_ptr, out_ptr,
    M, N, D,
    stride_qm, stride_cn, stride_om,
    CODE_MASK: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """``kernels.score_kernel`` with the ``D`` mask hoisted out of the loop: it is computed once
    from ``tl.arange(0, BLOCK_D) < D``, right for the first ``D`` block, all-true for every later
    one -- so when ``D > BLOCK_D`` and ``D % BLOCK_D != 0`` the ragged last block reads past the
    end of each row (into the next row, or the launcher's zero guard tail)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    mask_d = tl.arange(0, BLOCK_D) < D  # BUG: not recomputed per block
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        q = tl.load(
            q_ptr + offs_m[:, None] * stride_qm + offs_d[None, :],
            mask=mask_m[:, None] & mask_d[None, :], other=0.0,
        )
        tile_mask = mask_n[:, None] & mask_d[None, :]
        codes = tl.load(
            codes_ptr + offs_n[:, None] * stride_cn + offs_d[None, :], mask=tile_mask, other=0,
        )
        index = codes.to(tl.int32) & CODE_MASK
        decoded = tl.load(codebook_ptr + index, mask=tile_mask, other=0.0)
        acc += tl.dot(q, tl.trans(decoded), input_precision="ieee")
    scale = tl.load(scale_ptr + offs_n, mask=mask_n, other=0.0)
    acc = acc * scale[None, :]
    tl.store(
        out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc,
        mask=mask_m[:, None] & mask_n[None, :],
    )
