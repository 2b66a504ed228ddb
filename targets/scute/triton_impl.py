"""Implementation "triton": the Scute kernel (:mod:`fuzzkit.targets.scute.kernels`) -- natively on a GPU,
under ``TRITON_INTERPRET=1`` without one.

``run(inputs)`` packs every adapter into slot form (:func:`fuzzkit.targets.scute.slots.pack`, float64),
rounds ``x``, ``W0``, ``t_diag``, ``t_mat``, ``A``, ``B`` once to the storage dtype
(``inputs["dtype"]``) and ``s``, ``b``, ``m``, ``o``, ``b0`` to float32, and launches
``scute_kernel`` once for the whole mixed batch (decode or prefill tiles from ``inputs["mode"]``).
The storage-dtype result comes back as float32.

``bitwise_batch_invariant`` says what this mode can guarantee.  Natively the kernel is
deterministic and row-wise (no atomics, no split-K, tile shape fixed per mode, a fixed order of
the K steps in every program), so a token's bits do not depend on its batch mates: True.  Under
``TRITON_INTERPRET=1`` ``tl.dot`` is NumPy's float32 matmul, and OpenBLAS computes a row with a
micro-kernel (and summation order) that depends on the row's position in its register blocks --
on Haswell and Zen kernels a token moved within its tile changes its last bits
(``OPENBLAS_CORETYPE=Zen fuzzkit run scute --impl triton`` found it).  So under the interpreter
the claim is False and the batch-invariance property checks the rows within its error bound.

The kernel module is imported lazily so that importing the target never imports torch/triton.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs -> {"y": float32 (Ntok, Nout), "bitwise_batch_invariant": native?}``."""
    import torch

    from fuzzkit import triton_support
    from fuzzkit.targets.scute import kernels, slots

    packed = slots.pack(inputs)
    dtype = kernels.TORCH_DTYPES[str(inputs.get("dtype", "float32"))]
    device = triton_support.device()
    x = torch.from_numpy(np.ascontiguousarray(packed.x, dtype=np.float32)).to(dtype).to(device)
    w0 = torch.from_numpy(np.ascontiguousarray(packed.w0, dtype=np.float32)).to(dtype).to(device)
    b0 = torch.from_numpy(np.ascontiguousarray(packed.b0, dtype=np.float32)).to(device)
    params = kernels.slot_tensors(packed, dtype, device)
    y = kernels.scute(x, w0, b0, np.asarray(packed.token_slot, np.int64), params,
                      mode=str(inputs.get("mode", "decode")))
    return {"y": y.to(torch.float32).cpu().numpy(),
            "bitwise_batch_invariant": not triton_support.interpreted()}
