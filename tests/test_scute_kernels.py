"""The ``scute`` Triton kernels (``scute_kernel``: the mixed-method slot form in one launch;
``lora_kernel``: the pure-LoRA baseline) against float64 NumPy slot-form references, the
batching, batch invariance, the kernel mutants and the ``triton`` implementation.

Natively on a GPU, under ``TRITON_INTERPRET=1`` without one (``kernels`` calls
``triton_support.prepare`` before Triton is imported).  Shapes are small and ragged: ``K`` and
``Nout`` not multiples of the blocks (tests pass ``block_n`` / ``block_k``), several tiles per
segment, every transform kind (block sizes that straddle a ``BLOCK_K`` chunk), ranks padded
(``R`` = 8 by default, ``BLOCK_R`` = 16 natively / 8 under the interpreter, slots of rank 0..R),
``-1`` tokens, decode and prefill tiles.

Forward-error bound of the slot form per element (``u`` = storage unit roundoff, ``2^-7`` for
bfloat16 because the interpreter truncates; ``M`` = the slot form on absolute values)::

    |y - ref| <= ((2K + R + 8) * 2^-24 + 2u) * M + u * |ref|

float32 accumulation of the transform GEMM and the base GEMM (``2K`` terms) and of the shrink /
expand (``R`` terms); ``x.T`` rounded to storage (``u * M``) and the output (``u * |ref|``); the
reference uses the storage-rounded parameters the kernel sees, except ``t_mat`` / ``t_diag`` which
the kernel rounds itself (the second ``u * M``).
"""

from __future__ import annotations

import types
from typing import Any, Optional

import numpy as np
import pytest

from fuzzkit import triton_support

pytestmark = pytest.mark.kernel

if triton_support.unavailable():  # pragma: no cover - torch/triton are dev dependencies
    pytest.skip(triton_support.unavailable() or "", allow_module_level=True)

import torch  # noqa: E402

from fuzzkit.targets.scute import batching, kernel_mutants, kernels, lora_baseline  # noqa: E402

U_STORE = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -7}
DEVICE = triton_support.device()
K, NOUT, R = 40, 50, 8
#: small blocks so the test shapes are ragged and span several tiles
BLOCKS = {"block_n": 32, "block_k": 16}


def _round(a: np.ndarray, dtype: str) -> np.ndarray:
    return torch.from_numpy(np.asarray(a, np.float64)).to(kernels.TORCH_DTYPES[dtype]
                                                           ).double().numpy()


# ============================================================================ cases


def make_case(seed: int, dtype: str, ntok: int = 40, mode: str = "decode",
              slots: Optional[np.ndarray] = None, rank: int = R) -> types.SimpleNamespace:
    """A ``Packed``-like case with six slots -- dense (kind 3), LoRA-like (rank 8, ``o`` != 1),
    block-diagonal bs=5 with rank 3, diagonal (IA3 ff), ``s``/``b`` scaling (IA3 kv), block-
    diagonal bs=8 with DoRA-like ``s`` and rank 1 -- plus ``-1`` tokens.  Storage-dtype values
    (x, W0, A, B) are representable; ``t_diag`` / ``t_mat`` are float64 (the kernel rounds)."""
    rng = np.random.default_rng(seed)
    s_count = 6
    p = types.SimpleNamespace(dtype=dtype)
    p.x = _round(rng.standard_normal((ntok, K)), dtype).astype(np.float32)
    p.w0 = _round(rng.standard_normal((NOUT, K)) / np.sqrt(K), dtype).astype(np.float32)
    p.b0 = (0.5 * rng.standard_normal(NOUT)).astype(np.float32)
    p.t_kind = np.array([3, 0, 2, 1, 0, 2], np.int32)
    p.t_block = np.array([0, 0, 5, 0, 0, 8], np.int32)
    p.t_diag = np.ones((s_count, K))
    p.t_diag[3] = 1.0 + 0.5 * rng.standard_normal(K)
    p.t_mat = np.tile(np.eye(K), (s_count, 1, 1))
    q, _ = np.linalg.qr(rng.standard_normal((K, K)))
    p.t_mat[0] = q
    for slot, bs in ((2, 5), (5, 8)):
        for i in range(0, K, bs):
            qb, _ = np.linalg.qr(rng.standard_normal((bs, bs)))
            p.t_mat[slot, i:i + bs, i:i + bs] = qb
    p.s = np.ones((s_count, NOUT))
    p.s[4] = 1.0 + 0.5 * rng.standard_normal(NOUT)
    p.s[5] = 1.0 + 0.3 * rng.standard_normal(NOUT)
    p.b = np.tile(p.b0.astype(np.float64), (s_count, 1))
    p.b[4] = p.b0 * p.s[4]
    p.rank = np.array([0, rank, 3, 0, 0, 1], np.int32)
    p.A = np.zeros((s_count, rank, K))
    p.B = np.zeros((s_count, NOUT, rank))
    p.m = np.zeros((s_count, rank))
    p.o = np.zeros((s_count, NOUT))
    for slot in range(s_count):
        r = int(p.rank[slot])
        p.A[slot, :r] = _round(rng.standard_normal((r, K)) / np.sqrt(K), dtype)
        p.B[slot, :, :r] = _round(rng.standard_normal((NOUT, r)), dtype)
        p.m[slot, :r] = 1.0 + 0.5 * rng.standard_normal(r) if slot != 1 else 1.0
        p.o[slot] = 2.0 if slot == 1 else 1.0 + 0.3 * rng.standard_normal(NOUT)
    for name in ("s", "b", "m", "o"):  # the kernel holds these in float32
        setattr(p, name, getattr(p, name).astype(np.float32).astype(np.float64))
    if slots is None:
        if mode == "decode":
            slots = rng.integers(-1, s_count, ntok)
        else:
            runs: list[int] = []
            while len(runs) < ntok:  # every slot once per round, runs of 1..7 tokens
                for slot in rng.permutation(np.arange(-1, s_count)):
                    runs.extend([int(slot)] * int(rng.integers(1, 8)))
            slots = np.asarray(runs[:ntok])
    p.token_slot = np.asarray(slots, np.int64)
    return p


def reference(p: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(y, M)`` float64: the slot form with ``t_diag`` / ``t_mat`` rounded to storage (as the
    kernel holds them) and its absolute-value magnitude."""
    x = np.asarray(p.x, np.float64)
    w0 = np.asarray(p.w0, np.float64)
    b0 = np.asarray(p.b0, np.float64)
    y = x @ w0.T + b0
    mag = np.abs(x) @ np.abs(w0).T + np.abs(b0)
    for t, a in enumerate(p.token_slot):
        if a < 0:
            continue
        if p.t_kind[a] >= 2:
            tm = _round(p.t_mat[a], p.dtype)
        else:
            tm = np.diag(_round(p.t_diag[a], p.dtype))
        lo = ((x[t] @ p.A[a].T) * p.m[a]) @ p.B[a].T
        lo_abs = ((np.abs(x[t]) @ np.abs(p.A[a]).T) * np.abs(p.m[a])) @ np.abs(p.B[a]).T
        y[t] = ((x[t] @ tm) @ w0.T) * p.s[a] + p.b[a] + lo * p.o[a]
        mag[t] = ((np.abs(x[t]) @ np.abs(tm)) @ np.abs(w0).T) * np.abs(p.s[a]) \
            + np.abs(p.b[a]) + lo_abs * np.abs(p.o[a])
    return y, mag


def bound(p: Any, ref: np.ndarray, mag: np.ndarray) -> np.ndarray:
    u = U_STORE[p.dtype]
    k, r = p.w0.shape[1], p.A.shape[1]
    return ((2 * k + r + 8) * 2.0 ** -24 + 2 * u) * mag + u * np.abs(ref) + 1e-30


def run_scute(p: Any, mode: str = "decode", **blocks: Any) -> np.ndarray:
    dt = kernels.TORCH_DTYPES[p.dtype]
    x = torch.from_numpy(p.x).to(dt).to(DEVICE)
    w0 = torch.from_numpy(p.w0).to(dt).to(DEVICE)
    b0 = torch.from_numpy(p.b0).to(DEVICE)
    params = kernels.slot_tensors(p, dt, DEVICE)
    out = kernels.scute(x, w0, b0, p.token_slot, params, mode=mode, **{**BLOCKS, **blocks})
    return out.float().cpu().numpy()


def excess(p: Any, y: np.ndarray) -> float:
    """max ``|y - ref| / bound`` (<= 1 passes)."""
    ref, mag = reference(p)
    return float(np.max(np.abs(y.astype(np.float64) - ref) / bound(p, ref, mag)))


# ============================================================================ batching


def test_segments_sorted_stable_and_tiled() -> None:
    slots = np.array([2, -1, 0, 2, 2, 0, -1, 2, 2, 1, 2])
    order, start, length, seg_slot = batching.segments(slots, 3)
    assert all(a.dtype == np.int32 for a in (order, start, length, seg_slot))
    assert order.tolist() == [1, 6, 2, 5, 9, 0, 3, 4, 7, 8, 10]  # stable within a slot
    assert seg_slot.tolist() == [-1, 0, 1, 2, 2]
    assert length.tolist() == [2, 2, 1, 3, 3]
    assert start.tolist() == [0, 2, 4, 5, 8]
    assert batching.segments(np.zeros(0, np.int64), 16)[1].shape == (0,)


# ============================================================================ scute_kernel


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_scute_kernel_matches_slot_reference(dtype: str, mode: str) -> None:
    p = make_case(1, dtype, mode=mode)
    assert set(p.token_slot.tolist()) == set(range(-1, 6))
    y = run_scute(p, mode)
    assert excess(p, y) <= 1.0, (dtype, mode, excess(p, y))


def test_scute_kernel_several_tiles_per_segment_and_default_blocks() -> None:
    # 30 tokens of one dense slot, 12 of slot 1, a few base-only: several tiles of 8 rows each
    slots = np.array([0] * 30 + [1] * 12 + [-1] * 5)
    p = make_case(2, "float32", ntok=len(slots), slots=np.random.default_rng(0).permutation(slots))
    assert excess(p, run_scute(p, "prefill", block_m=8)) <= 1.0
    assert excess(p, run_scute(p, "prefill", block_n=None, block_k=None)) <= 1.0


def test_scute_kernel_base_only_and_empty() -> None:
    p = make_case(3, "float16", ntok=9, slots=np.full(9, -1))
    y = run_scute(p)
    ref = np.asarray(p.x, np.float64) @ np.asarray(p.w0, np.float64).T + p.b0
    assert excess(p, y) <= 1.0 and np.abs(y - ref).max() < 0.05
    q = make_case(3, "float32", ntok=0, slots=np.zeros(0))
    assert run_scute(q).shape == (0, NOUT)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_scute_kernel_is_batch_invariant(dtype: str) -> None:
    """Removing and permuting batch mates leaves every kept token's bits unchanged natively.

    Under the interpreter ``tl.dot`` is NumPy's float32 matmul, whose rows depend on their
    position in OpenBLAS's register blocks (Haswell / Zen kernels), so there the rows only agree
    within twice the forward-error bound -- what ``triton_impl`` then claims."""
    for mode in ("decode", "prefill"):
        p = make_case(4, dtype, ntok=40, mode=mode)
        full = run_scute(p, mode)
        keep = np.random.default_rng(5).permutation(40)[:17]
        sub = types.SimpleNamespace(**vars(p))
        sub.x, sub.token_slot = p.x[keep], p.token_slot[keep]
        part = run_scute(sub, mode)
        if triton_support.interpreted():
            ref, mag = reference(p)
            tol = 2 * bound(p, ref, mag)[keep]
            assert np.all(np.abs(part.astype(np.float64) - full[keep]) <= tol), (dtype, mode)
        else:  # pragma: no cover - only on a GPU
            assert np.array_equal(part.view(np.uint32), full[keep].view(np.uint32)), (dtype, mode)


# ============================================================================ lora_kernel


def _lora_case(seed: int, dtype: str, ntok: int, mode: str) -> tuple[Any, np.ndarray, tuple]:
    rng = np.random.default_rng(seed)
    s_count, r = 3, 8
    x = _round(rng.standard_normal((ntok, K)), dtype)
    w0 = _round(rng.standard_normal((NOUT, K)) / np.sqrt(K), dtype)
    b0 = (0.5 * rng.standard_normal(NOUT)).astype(np.float32)
    a = _round(rng.standard_normal((s_count, r, K)) / np.sqrt(K), dtype)
    b = _round(rng.standard_normal((s_count, NOUT, r)), dtype)
    scale = np.array([2.0, 0.5, 16 / np.sqrt(8)], np.float32)
    slots = rng.integers(-1, s_count, ntok) if mode == "decode" else np.sort(
        rng.integers(-1, s_count, ntok))
    ref = x @ w0.T + b0
    mag = np.abs(x) @ np.abs(w0).T + np.abs(b0)
    for t, s in enumerate(slots):
        if s >= 0:
            ref[t] += scale[s] * ((x[t] @ a[s].T) @ b[s].T)
            mag[t] += abs(scale[s]) * ((np.abs(x[t]) @ np.abs(a[s]).T) @ np.abs(b[s]).T)
    dt = kernels.TORCH_DTYPES[dtype]
    tensors = tuple(torch.from_numpy(np.ascontiguousarray(v)).to(dt).to(DEVICE)
                    for v in (x, w0)) + (torch.from_numpy(b0).to(DEVICE), slots) + tuple(
        torch.from_numpy(np.ascontiguousarray(v)).to(dt).to(DEVICE) for v in (a, b)) + (
        torch.from_numpy(scale).to(DEVICE),)
    u = U_STORE[dtype]
    bnd = ((K + r + 8) * 2.0 ** -24 + u) * mag + u * np.abs(ref) + 1e-30
    return tensors, ref, bnd


@pytest.mark.parametrize("dtype,mode", [("float32", "decode"), ("float16", "prefill"),
                                        ("bfloat16", "decode")])
def test_lora_kernel_matches_reference(dtype: str, mode: str) -> None:
    tensors, ref, bnd = _lora_case(6, dtype, 37, mode)
    y = lora_baseline.lora(*tensors, mode=mode, **BLOCKS).float().cpu().numpy()
    assert np.all(np.abs(y - ref) <= bnd), float(np.max(np.abs(y - ref) / bnd))


# ============================================================================ mutants


def test_every_kernel_mutant_is_listed_with_a_citation() -> None:
    assert len(kernel_mutants.KERNEL_MUTANTS) >= 6
    for name, (cm, bug_class, citation) in kernel_mutants.KERNEL_MUTANTS.items():
        assert callable(cm) and bug_class and citation, name
        assert cm.__doc__ and "Bug class" in cm.__doc__, name


#: mutants whose bug needs a size the default case does not have: (make_case kwargs, blocks)
MUTANT_SETUP: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # every slot's run an exact multiple of the tile
    "tile-remainder-zero": ({}, {"block_m": 1}),
    # a rank above the smallest BLOCK_R of this mode (16 natively, 4 under the interpreter)
    "block-r-capped": ({"rank": 2 * kernels.tiles.block_r_min() + 1}, {}),
}


@pytest.mark.parametrize("name", sorted(kernel_mutants.KERNEL_MUTANTS))
def test_kernel_mutant_fails_the_float32_comparison(name: str) -> None:
    case_kw, blocks = MUTANT_SETUP.get(name, ({}, {}))
    p = make_case(7, "float32", ntok=40, mode="decode", **case_kw)
    assert excess(p, run_scute(p, **blocks)) <= 1.0
    with kernel_mutants.KERNEL_MUTANTS[name][0]():
        y = run_scute(p, **blocks)
    # the clean kernel sits at ~0.02 of the bound; the weakest mutant (shrink-buffer-fp16:
    # a 2^-12 relative error on the low-rank part only) at ~10, the others at 1e4..1e7
    assert excess(p, y) > 2.0, (name, excess(p, y))


# ============================================================================ triton_impl


def test_triton_impl_matches_the_native_reference() -> None:
    pytest.importorskip("fuzzkit.targets.scute.reference")
    from fuzzkit.targets.scute import checks, reference, strategies, triton_impl

    methods = ["lora", "dora", "vera", "oft", "boft", "ia3-kv", "ia3-ff", "identity"]
    for dtype, mode in (("float32", "decode"), ("float16", "prefill")):
        inputs = strategies.build(11, k=16, nout=24, ntok=24, dtype=dtype, mode=mode,
                                  methods=methods)
        assert checks.validate(inputs) is None
        out = triton_impl.run(inputs)
        # bitwise only natively: under the interpreter NumPy's sgemm is position dependent
        assert out["bitwise_batch_invariant"] is (not triton_support.interpreted())
        assert out["y"].dtype == np.float32 and out["y"].shape == (24, 24)
        failure = checks.oracle(inputs, reference.run(inputs), out)
        assert failure is None, failure
