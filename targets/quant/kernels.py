"""Triton kernel: score a block of rotated float queries against encoded vectors.

``scores[i, j] = scale[j] * sum_d q[i, d] * codebook[codes[j, d]]``

One program computes a ``BLOCK_M x BLOCK_N`` tile of scores.  It walks the dimension in
``BLOCK_D`` steps, loads a query tile and a code tile, **gathers the centroids inside the kernel**
(``tl.load(codebook_ptr + codes)`` -- the decoded vectors never exist in memory, which is the
point of storing 1 or 2 bytes per coordinate), and accumulates ``q @ decoded^T`` with ``tl.dot``
in float32.  ``input_precision="ieee"`` matters on a GPU: the default TF32 tensor-core path would
round the operands to 10-bit mantissas, far outside the float32 error bound the oracle applies.

Ragged edges (``M``, ``N`` or ``D`` not a multiple of the block) are masked on every load and on
the store, with the ``D`` mask recomputed for each step (``offs_d = d0 + arange``).  Masked code
lanes load code 0 and masked centroid lanes load 0.0, so the padded lanes contribute exactly
nothing.

Codes arrive in their storage width: ``uint8`` for turbo8 and, since PyTorch has no general
``uint16`` tensor support, the ``uint16`` codes of turbo16 reinterpreted as ``int16`` and widened
in the kernel with ``& 0xFFFF`` (a plain sign extension would turn codes >= 32768 negative).

Guard tails: the launcher allocates ``BLOCK_D`` (the launched ``block_d``) extra zero elements
after the last row of the query and code buffers.  A correct kernel never reads them; a kernel
with a mask bug (see the ``hoisted-d-mask`` mutant) reads them instead of running off the
allocation, which under ``TRITON_INTERPRET=1`` would read arbitrary memory (silently, per the
platform notes) and on a GPU could fault -- the guard makes such a bug fail deterministically, so
it can be shrunk and replayed.

Tiles are launch parameters (:mod:`fuzzkit.targets.quant.tiles`; ``@triton.autotune`` needs a GPU
driver): a GPU launches ``(64, 64, 32)``; the interpreter launches ``(16, 16, 64)``, so that
fuzzing-sized cases need second programs along ``M`` and ``N`` (and a second ``D`` step from
``D = 65``) -- the code past the first tile runs under test, not only on a GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import numpy as np

from fuzzkit import triton_support

triton_support.prepare()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from fuzzkit.targets.quant import tiles as tile_configs  # noqa: E402
from fuzzkit.targets.quant.tiles import Tiles  # noqa: E402


@triton.jit
def score_kernel(
    q_ptr, codes_ptr, codebook_ptr, scale_ptr, out_ptr,
    M, N, D,
    stride_qm, stride_cn, stride_om,
    CODE_MASK: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One ``BLOCK_M x BLOCK_N`` tile of ``scale[j] * <q_i, codebook[codes_j]>``."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        mask_d = offs_d < D
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


#: The kernel :func:`score` launches; looked up at call time so a mutant can swap in a variant.
kernel: Callable[..., Any] = score_kernel


def _guarded(array: np.ndarray, dtype: torch.dtype, device: str, guard: int) -> torch.Tensor:
    """A flat device buffer holding ``array`` row-major, followed by ``guard`` zeros."""
    flat = torch.zeros(array.size + guard, dtype=dtype, device=device)
    if array.size:
        flat[: array.size] = torch.from_numpy(np.ascontiguousarray(array).reshape(-1)).to(device)
    return flat


@dataclasses.dataclass(frozen=True)
class Operands:
    """Device-resident kernel operands (built once, launched many times by the benchmark)."""

    queries: torch.Tensor  # flat float32, m*D + block_d guard
    codes: torch.Tensor  # flat uint8 / int16 (uint16 bits), n*D + block_d guard
    codebook: torch.Tensor  # float32 centroids
    scales: torch.Tensor  # float32 (n,)
    m: int
    n: int
    dim: int
    code_mask: int
    tiles: Tiles  # what launch() launches; the guard tails are tiles.block_d long


def to_device(queries: np.ndarray, codes: np.ndarray, scales: np.ndarray,
              centroids: np.ndarray, tiles: Optional[Tiles] = None) -> Operands:
    """Copy NumPy operands to the kernel's device in the layout :func:`launch` expects, for a
    launch with ``tiles`` (default: this mode's, :func:`fuzzkit.targets.quant.tiles.current`)."""
    tiles = tiles or tile_configs.current()
    device = triton_support.device()
    guard = tiles.block_d
    if codes.dtype == np.uint8:
        code_tensor, code_mask = _guarded(codes, torch.uint8, device, guard), 0xFF
    elif codes.dtype == np.uint16:
        code_tensor = _guarded(codes.view(np.int16), torch.int16, device, guard)
        code_mask = 0xFFFF
    else:  # pragma: no cover - defensive: unpack() only ever yields uint8 / uint16 codes
        raise TypeError(f"codes must be uint8 or uint16, got {codes.dtype}")
    return Operands(
        queries=_guarded(queries.astype(np.float32), torch.float32, device, guard),
        codes=code_tensor,
        codebook=torch.from_numpy(np.array(centroids, dtype=np.float32)).to(device),  # a copy
        scales=torch.from_numpy(np.ascontiguousarray(scales, dtype=np.float32)).to(device),
        m=queries.shape[0], n=codes.shape[0], dim=queries.shape[1], code_mask=code_mask,
        tiles=tiles,
    )


def empty_scores(ops: Operands) -> torch.Tensor:
    """An uninitialised ``(m, n)`` float32 output on the operands' device."""
    return torch.empty((ops.m, ops.n), dtype=torch.float32, device=ops.scales.device)


def launch(ops: Operands, out: torch.Tensor) -> torch.Tensor:
    """Run the kernel (the module-level :data:`kernel`, looked up now) into ``out`` with the
    operands' tiles; no launch at all when there is nothing to score (an empty grid)."""
    if ops.m == 0 or ops.n == 0:
        return out
    t = ops.tiles
    grid = (triton.cdiv(ops.m, t.block_m), triton.cdiv(ops.n, t.block_n))
    kernel[grid](
        ops.queries, ops.codes, ops.codebook, ops.scales, out,
        ops.m, ops.n, ops.dim,
        ops.dim, ops.dim, out.stride(0),
        CODE_MASK=ops.code_mask,
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_D=t.block_d,
        num_warps=t.num_warps,
    )
    return out


def score(
    queries: np.ndarray, codes: np.ndarray, scales: np.ndarray, centroids: np.ndarray
) -> np.ndarray:
    """Float32 ``(M, N)`` scores of ``queries`` (M x D, already rotated) against ``codes``
    (N x D, ``uint8`` or ``uint16``) with per-vector ``scales``; ``M`` or ``N`` may be 0."""
    ops = to_device(queries, codes, scales, centroids)
    return launch(ops, empty_scores(ops)).cpu().numpy()
