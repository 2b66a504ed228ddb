"""Pure-LoRA baseline of the Scute kernel, for ``benchmarks/scute.py``: the same tiling and
batching as :func:`fuzzkit.targets.scute.kernels.scute` for ``y = x.W0^T + b0 + scale * (x.A^T).B^T``
(slot -1: base layer only).

Why a module of its own: the baseline is not part of the ``triton`` implementation that fuzzkit
tests (``--coverage`` measures :mod:`.kernels`, whose every line the fuzzed launches run); it
exists to measure what the mixed-method kernel costs over pure LoRA.
``tests/test_scute_kernels.py`` checks it against a float64 reference.

    lora(x, w0, b0, token_slot, A, B, scale, mode=...)    -> [Ntok, Nout] storage dtype
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import triton
import triton.language as tl

from fuzzkit.targets.scute.kernels import (NUM_WARPS, _check_base, _dot, _dot_f32, _require,
                                   _segments, block_r, configs)


@triton.jit
def lora_kernel(
    x_ptr, w0_ptr, b0_ptr, out_ptr,
    order_ptr, seg_start_ptr, seg_len_ptr, seg_slot_ptr,
    a_ptr, bb_ptr, scale_ptr,
    K, N, R,
    stride_x, stride_w, stride_o,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_R: tl.constexpr, DOT_F32: tl.constexpr,
):
    """Pure-LoRA baseline, same tiling: ``x.W0^T + b0 + scale * (x.A^T).B^T`` (slot -1: base)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    start = tl.load(seg_start_ptr + pid_m)
    length = tl.load(seg_len_ptr + pid_m)
    slot = tl.load(seg_slot_ptr + pid_m)
    use = slot >= 0
    sl = tl.maximum(slot, 0).to(tl.int64)

    rows = tl.arange(0, BLOCK_M)
    live_m = rows < length
    tok = tl.load(order_ptr + start + rows, mask=live_m, other=0).to(tl.int64)
    x_rows = x_ptr + tok * stride_x
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    live_n = offs_n < N
    offs_r = tl.arange(0, BLOCK_R)
    live_r = offs_r < R
    a_base = a_ptr + sl * R * K

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_r = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        live_k = offs_k < K
        xk = tl.load(x_rows[:, None] + offs_k[None, :], mask=live_m[:, None] & live_k[None, :],
                     other=0.0)
        wk = tl.load(w0_ptr + offs_n[None, :] * stride_w + offs_k[:, None],
                     mask=live_k[:, None] & live_n[None, :], other=0.0)
        acc = _dot(xk, wk, acc, DOT_F32)
        if use:
            ak = tl.load(a_base + offs_r[None, :] * K + offs_k[:, None],
                         mask=live_k[:, None] & live_r[None, :], other=0.0)
            acc_r = _dot(xk, ak, acc_r, DOT_F32)

    y = acc + tl.load(b0_ptr + offs_n, mask=live_n, other=0.0)[None, :]
    if use:
        bt = tl.load(bb_ptr + sl * N * R + offs_n[None, :] * R + offs_r[:, None],
                     mask=live_r[:, None] & live_n[None, :], other=0.0)
        lo_rank = tl.dot(acc_r, bt.to(tl.float32), input_precision="ieee")
        y += lo_rank * tl.load(scale_ptr + sl)
    tl.store(out_ptr + tok[:, None] * stride_o + offs_n[None, :],
             y.to(out_ptr.dtype.element_ty), mask=live_m[:, None] & live_n[None, :])


def lora(x: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor, token_slot: Any,
         a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor, *, mode: str = "decode",
         block_m: Optional[int] = None, block_n: Optional[int] = None,
         block_k: Optional[int] = None) -> torch.Tensor:
    """Storage-dtype ``[Ntok, Nout]``: ``x.W0^T + b0 + scale[slot] * (x.A[slot]^T).B[slot]^T``
    (``A`` (S, R, K), ``B`` (S, Nout, R) storage dtype, ``scale`` (S,) float32; slot -1: base)."""
    ntok, k, nout = _check_base(x, w0, b0)
    s_count, r = a.shape[0], a.shape[1]
    _require(s_count >= 1, "lora needs at least one adapter slot")
    _require(a.shape == (s_count, r, k) and a.dtype == x.dtype and a.is_contiguous(),
             "A must be contiguous (S, R, K) in the storage dtype")
    _require(b.shape == (s_count, nout, r) and b.dtype == x.dtype and b.is_contiguous(),
             "B must be contiguous (S, Nout, R) in the storage dtype")
    _require(scale.shape == (s_count,) and scale.dtype == torch.float32, "scale: float32 (S,)")
    out = torch.empty((ntok, nout), dtype=x.dtype, device=x.device)
    if ntok == 0 or nout == 0:
        return out
    bm, bn, bk = configs(mode, block_m, block_n, block_k)
    order, start, length, slot, _ = _segments(token_slot, bm, x.device)
    grid = (int(start.shape[0]), triton.cdiv(nout, bn))
    lora_kernel[grid](
        x, w0, b0, out, order, start, length, slot, a, b, scale,
        k, nout, r, x.stride(0), w0.stride(0), out.stride(0),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, BLOCK_R=block_r(r),
        DOT_F32=_dot_f32(x.dtype), num_warps=NUM_WARPS,
    )
    return out


__all__ = ["lora_kernel", "lora"]
