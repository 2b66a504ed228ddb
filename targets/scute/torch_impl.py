"""Batched PyTorch slot form of Scute, Punica/vLLM-bgmv style (the ``torch`` implementation).

Per token: gather its slot's parameters by index (:func:`gather_index`), with slot -1 (base
layer only) handled explicitly by a mask -- never by indexing, since ``tensor[-1]`` silently
reads the last adapter.  Storage dtype (``inputs["dtype"]``) for x, W0, T, A and B; products in
float32 from the stored values; ``x·T`` rounded to storage before the base GEMM; the shrink
``x·Aᵀ`` goes into a float32 buffer (:data:`SHRINK_DTYPE`); s, b, m, o in float32; the result
is rounded to the storage dtype once and returned as float32.  Not bitwise batch invariant
(the batched matmuls may block differently for different batch sizes).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from fuzzkit.targets.scute import slots as slot_form

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: dtype of the shrink buffer x·Aᵀ (Punica keeps it in float32).
SHRINK_DTYPE = torch.float32


def gather_index(token_slot: np.ndarray) -> np.ndarray:
    """The slot whose parameters each token reads (its own ``token_slot``)."""
    return token_slot


def base_mask(token_slot: np.ndarray) -> np.ndarray:
    """Tokens that take the base layer only (slot -1)."""
    return token_slot < 0


def _store(a: Any, dtype: torch.dtype) -> torch.Tensor:
    """Round to the storage dtype, then widen to float32 for the arithmetic."""
    return torch.as_tensor(np.asarray(a, np.float32)).to(dtype).to(torch.float32)


def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    packed = slot_form.pack(inputs)
    return run_packed(packed)


def run_packed(packed: slot_form.Packed) -> dict[str, Any]:
    dtype = TORCH_DTYPES[packed.dtype]
    x = _store(packed.x, dtype)
    w0 = _store(packed.w0, dtype)
    b0 = torch.as_tensor(np.asarray(packed.b0, np.float32))
    ntok, k = x.shape
    nout = w0.shape[0]
    y = torch.zeros((ntok, nout), dtype=torch.float32)
    token_slot = np.asarray(packed.token_slot, np.int64)
    base = base_mask(token_slot)
    if base.any():
        idx = torch.as_tensor(np.nonzero(base)[0])
        y[idx] = x[idx] @ w0.T + b0
    if (~base).any() and packed.s.shape[0] > 0:
        rows = np.nonzero(~base)[0]
        gidx = torch.as_tensor(np.asarray(gather_index(token_slot))[rows])
        ridx = torch.as_tensor(rows)
        t_mat = _store(packed.t_mat, dtype)
        t_diag = _store(packed.t_diag, dtype)
        xs = x[ridx]
        xt = xs * t_diag[gidx]
        xt = torch.bmm(xt[:, None, :], t_mat[gidx])[:, 0, :]
        xt = xt.to(dtype).to(torch.float32)
        acc = xt @ w0.T
        s = torch.as_tensor(np.asarray(packed.s, np.float32))[gidx]
        b = torch.as_tensor(np.asarray(packed.b, np.float32))[gidx]
        out = acc * s + b
        a = _store(packed.A, dtype)[gidx]          # (n, R, K)
        bb = _store(packed.B, dtype)[gidx]         # (n, Nout, R)
        m = torch.as_tensor(np.asarray(packed.m, np.float32))[gidx]
        o = torch.as_tensor(np.asarray(packed.o, np.float32))[gidx]
        shrink = torch.bmm(a, xs[:, :, None])[:, :, 0].to(SHRINK_DTYPE).to(torch.float32)
        expand = torch.bmm(bb, (shrink * m)[:, :, None])[:, :, 0]
        y[ridx] = out + expand * o
    y = y.to(dtype).to(torch.float32)
    return {"y": y.numpy().astype(np.float32), "bitwise_batch_invariant": False}
