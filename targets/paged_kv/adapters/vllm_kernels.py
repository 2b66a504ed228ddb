"""vLLM's own Triton KV kernels in the ``paged_kv`` target: ``--impl vllm-triton``.

What runs.  The guarded driver (:mod:`fuzzkit.targets.paged_kv.kernel_driver`) with fuzzkit's optimized
manager under KVGuard, but every forward pass launches the real kernels of the pinned vLLM
(:data:`fuzzkit.targets.engine_pins.VLLM`) through their real launch wrappers, as vLLM's
``TritonAttentionImpl`` calls them:

* ``vllm/v1/attention/ops/triton_reshape_and_cache_flash.py`` ``triton_reshape_and_cache_flash``
  (``kv_cache_dtype="auto"``, unit ``k_scale`` / ``v_scale``) writes K/V through the slot mapping;
* ``vllm/v1/attention/ops/triton_unified_attention.py`` ``unified_attention`` (with its
  ``triton_attention_helpers``) reads them: ``causal=True``, ``window_size=(w - 1, 0)`` for a
  sliding window of ``w`` (``(-1, -1)`` without), scale ``1/sqrt(D)``, no soft-cap, and the
  split-K scratch of ``TritonAttentionMetadataBuilder`` (:data:`NUM_PAR_SOFTMAX_SEGMENTS`
  segments, ``seq_threshold_3D = MIN_LAUNCH_GRID_SIZE_2D // num_kv_heads``, one query per
  request, ``max_num_seqs`` = the driver's request rows), so pure-decode batches take the 3D
  (split-K + ``reduce_segments``) path and every other batch the 2D path.

Of the three vLLM paged-attention kernels, ``unified_attention`` is the one vLLM's Triton
backend runs for prefill, chunked prefill and decode alike, and it runs unchanged under
``TRITON_INTERPRET=1`` (both paths: ``tests/test_paged_kv_vllm_kernels.py``).  The other two
(``triton_decode_attention``, ``chunked_prefill_paged_decode``) were not tried.

Layouts, as vLLM has them: K/V caches ``[num_blocks, block_size, num_kv_heads, head_size]``
(the flash layout), float32; ``cu_seqlens_q`` / ``seqused_k`` int32; the slot mapping int64,
padded with ``-1`` (``PAD_SLOT_ID``) up to the next CUDA-graph capture size (1, 2, 4, then
multiples of 8), as the model runner pads it; the block table a *view* ``[:R, :width]`` of a
persistent ``[max_num_seqs + 1, max_blocks]`` table whose rows keep stale entries past a
request's blocks (vLLM's ``BlockTable`` never clears them), so the kernel's row stride is the
backing table's, not the view's width.

KVGuard.  vLLM's kernels take no shadow tensors, so the guard's device checks (classes 4 and 5)
cannot run inside them.  What the driver checks instead, on the kernels' arguments and effects:

* write (class 5), before the launch: each token's slot lies in a block its request owns
  exclusively, is not written twice in the block's epoch, and sits at the offset of its
  position -- the in-kernel checks, evaluated on the slot mapping the kernel receives;
* write, after the launch: the caches are diffed bit for bit against a snapshot -- every
  changed slot is a mapped one and holds its token's row; the caches live between two
  *redzone* blocks, so a write before or after the pool (a ``-1`` padding slot not skipped) is
  seen rather than corrupting memory; then the guard's written/position shadow is updated;
* read (class 4): before each attention launch every slot the guard counts as unwritten, the
  null block and the redzones hold NaN.  A key the kernel *uses* from such a slot makes its
  output NaN (vLLM's own failure mode: ``0 * NaN``, vLLM #47305, #30887), reported as
  ``read/unwritten``.  Reads of written slots of another request or position show as a wrong
  output against the float64 reference (``attention-output``), as for the guarded kernels.
  The guard's host checks (allocation, table, translation) run unchanged.

Shims (:func:`_shims`), each replacing a helper outside the kernel logic:

* ``vllm.envs`` -- ``VLLM_BATCH_INVARIANT`` read from the environment as vLLM does (default off);
* ``vllm.logger`` -- ``init_logger`` returning a :mod:`logging` logger with vLLM's ``*_once``
  methods;
* ``vllm.platforms`` -- ``current_platform`` answering the few platform queries the wrappers
  make (fp8 dtype, CUDA vs ROCm/XPU, device capability) from torch;
* ``vllm.triton_utils`` -- re-exports the real ``triton`` and ``triton.language`` (vLLM's module is
  a thin import wrapper with placeholders for machines without Triton);
* ``vllm.v1.kv_cache_interface`` -- ``KVQuantMode`` (the members the wrappers name, with vLLM's
  values; a test compares them with the wheel) and ``is_quantized_kv_cache``: the config module
  itself imports half of vLLM's config system;
* ``vllm.model_executor.layers.quantization.utils.quant_utils`` -- ``FP8_DTYPE`` and
  ``get_fp8_min_max`` (fp8 constants; the caches here are float32).

The shims are installed only while vLLM's modules (or a mutant's copy of one) are imported, then
the previous ``sys.modules`` entries are restored, so another adapter of the same wheel (the
vLLM KV manager) keeps its own stand-ins.  Under the interpreter the reshape wrapper's
``torch.cuda.get_device_capability`` query (it clamps a tile on pre-Hopper GPUs) is answered as
sm_90 for the duration of the call; natively it asks the GPU.  With vLLM installed
(:func:`fuzzkit.wheelsrc.installed`) its modules are used as they are.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import os
import types
from typing import Any, Iterator, Sequence

import numpy as np

from fuzzkit import triton_support
from fuzzkit.reach import Threshold
from fuzzkit.targets import vllm_shims
from fuzzkit.targets.paged_kv.kernel_driver import (
    HEAD_DIM,
    HEADS,
    KV_HEADS,
    MAX_REQUESTS,
    KernelDriver,
)

ATTENTION = "vllm.v1.attention.ops.triton_unified_attention"
WRITE = "vllm.v1.attention.ops.triton_reshape_and_cache_flash"
#: Wheel members extracted: the two kernel modules, their helpers, and the config module the
#: ``KVQuantMode`` shim is checked against (read, never imported).
MEMBERS = (
    "vllm/v1/attention/ops/triton_unified_attention.py",
    "vllm/v1/attention/ops/triton_attention_helpers.py",
    "vllm/v1/attention/ops/triton_reshape_and_cache_flash.py",
    "vllm/v1/kv_cache_interface.py",
)
#: Packages whose ``__init__`` must not run (vLLM's imports the whole engine).
BARE = ("vllm", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.ops")
#: Parents of the quant-utils shim, registered (empty) only while importing.
SHIM_PARENTS = ("vllm.model_executor", "vllm.model_executor.layers",
                "vllm.model_executor.layers.quantization",
                "vllm.model_executor.layers.quantization.utils")

#: vLLM ``backends/triton_attn.py`` constants (split-K decode).
MIN_LAUNCH_GRID_SIZE_2D = 128
NUM_PAR_SOFTMAX_SEGMENTS = 16
#: vLLM's default CUDA-graph capture sizes start 1, 2, 4, 8, 16, ...: the write is padded to
#: the next one with ``-1`` slots (``PAD_SLOT_ID``).
PAD_SLOT_ID = -1
SCALE = HEAD_DIM ** -0.5
#: Blocks of NaN before and after the pool (:class:`VllmKernelDriver`).
REDZONE_BLOCKS = 1


class KVQuantMode(enum.IntEnum):
    """vLLM 0.33's ``KVQuantMode`` members that the two wrappers name (same values)."""

    NONE = 0
    FP8_PER_TENSOR = 1
    INT8_PER_TOKEN_HEAD = 2
    FP8_PER_TOKEN_HEAD = 3
    INT4_PER_TOKEN_HEAD = 4


def _shims() -> dict[str, types.ModuleType]:
    """The stand-in modules (see the module docstring for why each is safe to replace)."""
    import torch
    import triton
    import triton.language as tl

    from fuzzkit import wheelsrc

    platform = vllm_shims.Platform()
    fp8_info = torch.finfo(platform.fp8_dtype())
    return {
        "vllm.envs": wheelsrc.shim(
            "vllm.envs",
            VLLM_BATCH_INVARIANT=bool(int(os.getenv("VLLM_BATCH_INVARIANT", "0")))),
        "vllm.logger": vllm_shims.logger_module(),
        "vllm.platforms": vllm_shims.platforms_module(),
        "vllm.triton_utils": wheelsrc.shim(
            "vllm.triton_utils", triton=triton, tl=tl, HAS_TRITON=True,
            LOG2E=1.4426950408889634, LOGE2=0.6931471805599453),
        "vllm.v1.kv_cache_interface": wheelsrc.shim(
            "vllm.v1.kv_cache_interface", KVQuantMode=KVQuantMode,
            is_quantized_kv_cache=lambda dtype: str(dtype).startswith(
                ("fp8", "int8_per", "int4_per", "nvfp4", "turboquant_", "ultraquant"))),
        "vllm.model_executor.layers.quantization.utils.quant_utils": wheelsrc.shim(
            "vllm.model_executor.layers.quantization.utils.quant_utils",
            FP8_DTYPE=platform.fp8_dtype(),
            get_fp8_min_max=lambda: (float(fp8_info.min), float(fp8_info.max))),
    }


_LOADED: dict[str, types.ModuleType] = {}


def _root() -> Any:
    from fuzzkit import wheelsrc
    from fuzzkit.targets.engine_pins import VLLM

    return wheelsrc.extract(VLLM, MEMBERS)


@contextlib.contextmanager
def engine_imports() -> Iterator[None]:
    """While active, vLLM's kernel modules (and a mutant's edited copy of one) import: the
    bare packages and the shims are registered; on exit the shims and their parents give
    way to whatever ``sys.modules`` held before (another adapter's stand-ins)."""
    from fuzzkit import wheelsrc

    if wheelsrc.installed("vllm"):  # pragma: no cover - a machine with vLLM installed
        yield
        return
    shims = _shims()
    with wheelsrc.scoped((*SHIM_PARENTS, *shims)):
        wheelsrc.load(_root(), (), (*BARE, *SHIM_PARENTS), shims)
        yield


def modules() -> tuple[types.ModuleType, types.ModuleType]:
    """``(triton_unified_attention, triton_reshape_and_cache_flash)`` of the pinned vLLM."""
    if not _LOADED:
        triton_support.prepare()
        with engine_imports():
            _LOADED.update({name: importlib.import_module(name) for name in (ATTENTION, WRITE)})
    return _LOADED[ATTENTION], _LOADED[WRITE]


def __getattr__(name: str) -> Any:
    """``attention_ops`` / ``write_ops``: the loaded vLLM modules, for mutant patches to name
    (``"fuzzkit.targets.paged_kv.adapters.vllm_kernels:attention_ops"``) without importing vLLM
    before a mutant is applied."""
    if name == "attention_ops":
        return modules()[0]
    if name == "write_ops":
        return modules()[1]
    raise AttributeError(name)


def unavailable() -> str | None:
    """One line saying why vLLM's kernels cannot run here (no Triton, no wheel), or None."""
    from fuzzkit import wheelsrc
    from fuzzkit.targets.engine_pins import VLLM

    return triton_support.unavailable() or wheelsrc.unavailable(VLLM, "vllm", modules)


# ----------------------------------------------------------------------------- launch shapes


def _group() -> int:
    return HEADS // KV_HEADS


def block_q() -> int:
    """Queries per q block of ``unified_attention`` (its ``BLOCK_M`` rows over the group)."""
    block_m = 16 if _group() <= 16 else 1 << (_group() - 1).bit_length()
    return block_m // _group()


def tile_sizes() -> tuple[int, int]:
    """``(prefill / 2D tile, decode / 3D tile)`` of keys per step, from vLLM's own chooser."""
    attention = modules()[0]
    tile = attention._get_tile_size
    return (tile(HEAD_DIM, 0, 4, is_prefill=True), tile(HEAD_DIM, 0, 4, is_prefill=False))


def scratch_rows() -> int:
    """Rows of the split-K scratch (``TritonAttentionMetadataBuilder``: one query per request
    without speculative decoding, ``min(seq_threshold_3D, max_num_seqs)`` requests)."""
    return min(MIN_LAUNCH_GRID_SIZE_2D // KV_HEADS, MAX_REQUESTS)


def padded_tokens(n: int) -> int:
    """The CUDA-graph capture size a batch of ``n`` tokens is padded to."""
    if n <= 4:
        return 1 << max(0, n - 1).bit_length()
    return -(-n // 8) * 8


def thresholds() -> tuple[Threshold, ...]:
    """Where vLLM's kernels change path, as launched (the same natively and interpreted)."""
    attention = modules()[0]
    prefill_tile, decode_tile = tile_sizes()
    return (
        Threshold("request_id", MAX_REQUESTS, "kernel_driver.MAX_REQUESTS: request rows of the "
                  "driver (attention launched for ids < 8)", cap=20),
        Threshold("query_len", block_q(), f"unified_attention BLOCK_Q: {block_q()} queries per "
                  "q block (16 rows / 2 heads); one more needs a second q block, and "
                  f"MAX_3D_QUERY_LEN={attention.MAX_3D_QUERY_LEN} ends split-K", cap=20),
        Threshold("key_span", decode_tile, f"split-K decode tile: {decode_tile} keys per "
                  "segment tile; one more key fills a second segment (reduce_segments)", cap=40),
        Threshold("key_span", prefill_tile, f"2D tile: {prefill_tile} keys per step; one more "
                  "needs a second tile (online-softmax rescale)", cap=80),
        Threshold("batch_tokens", scratch_rows(), f"split-K scratch holds {scratch_rows()} "
                  "query tokens; a larger decode batch falls back to 2D", cap=20),
        Threshold("batch_tokens", 4, "CUDA-graph padding: up to 4 tokens pad to 1/2/4, then to "
                  "multiples of 8 with -1 slots", cap=20),
    )


# ----------------------------------------------------------------------------- the driver


@contextlib.contextmanager
def _capability_answered(torch: Any) -> Iterator[None]:
    """Under the interpreter, answer the reshape wrapper's capability query as sm_90."""
    if not triton_support.interpreted():  # pragma: no cover - only on a GPU
        yield
        return
    original = torch.cuda.get_device_capability
    torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)
    try:
        yield
    finally:
        torch.cuda.get_device_capability = original


@contextlib.contextmanager
def _ieee_float32_dots() -> Iterator[None]:
    """On a GPU, float32 ``tl.dot`` without ``input_precision`` defaults to TF32; the float64
    reference's bound is for IEEE float32 products, so the launch runs with Triton's
    ``fp32_default`` knob (``TRITON_F32_DEFAULT``) at ``"ieee"``.  The interpreter's dots are
    IEEE already."""
    if triton_support.interpreted():
        yield
        return
    from triton import knobs  # pragma: no cover - only on a GPU

    previous = knobs.language.fp32_default  # pragma: no cover - only on a GPU
    knobs.language.fp32_default = "ieee"  # pragma: no cover - only on a GPU
    try:  # pragma: no cover - only on a GPU
        yield
    finally:  # pragma: no cover - only on a GPU
        knobs.language.fp32_default = previous


class VllmKernelDriver(KernelDriver):
    """The guarded driver whose forward passes launch vLLM's reshape-and-cache and unified
    attention (see the module docstring for layouts and what the guard checks)."""

    def __init__(self, manager: Any, config: Any, guard: Any,
                 kv_values: Any = None) -> None:
        super().__init__(manager, config, guard, kv_values)
        torch = self.torch
        self.attention_ops, self.write_ops = modules()
        nb, b = config.num_blocks, config.block_size
        shape = (nb + 2 * REDZONE_BLOCKS, b, KV_HEADS, HEAD_DIM)
        nan = float("nan")
        self.key_buffer = torch.full(shape, nan, dtype=torch.float32, device=self.device)
        self.value_buffer = torch.full(shape, nan, dtype=torch.float32, device=self.device)
        self.key_cache = self.key_buffer[REDZONE_BLOCKS:REDZONE_BLOCKS + nb]
        self.value_cache = self.value_buffer[REDZONE_BLOCKS:REDZONE_BLOCKS + nb]
        prefill_tile, _ = tile_sizes()
        # vLLM: cdiv(max_model_len, block_size) columns; a request holds at most every block,
        # and the kernel's unmasked table load runs up to a tile past the last key.
        width = nb + -(-prefill_tile // b) + 1
        self.block_table = torch.zeros((MAX_REQUESTS + 1, width), dtype=torch.int32,
                                       device=self.device)
        rows, heads = scratch_rows(), HEADS
        padded = 1 << max(0, HEAD_DIM - 1).bit_length()
        f32 = dict(dtype=torch.float32, device=self.device)
        self.segm_output = torch.empty((rows, heads, NUM_PAR_SOFTMAX_SEGMENTS, padded), **f32)
        self.segm_max = torch.empty((rows, heads, NUM_PAR_SOFTMAX_SEGMENTS), **f32)
        self.segm_expsum = torch.empty((rows, heads, NUM_PAR_SOFTMAX_SEGMENTS), **f32)
        self.k_scale = torch.ones((), **f32)
        self.v_scale = torch.ones((), **f32)
        self.padding_rng = np.random.default_rng(0)

    # ------------------------------------------------------------------ write

    def launch_write(self, keys: np.ndarray, values: np.ndarray,
                     tokens: list[tuple[int, int, int]], device: Any, max_query_len: int) -> None:
        torch, guard, b = self.torch, self.guard, self.b
        self._check_slots(tokens, device)
        total = padded_tokens(len(tokens))
        pad = total - len(tokens)
        garbage = self.padding_rng.standard_normal((pad, KV_HEADS, HEAD_DIM)).astype(np.float32)
        slots = [slot for _, _, slot in tokens] + [PAD_SLOT_ID] * pad
        key = self._tensor(np.concatenate([keys, garbage]), torch.float32)
        value = self._tensor(np.concatenate([values, garbage]), torch.float32)
        before = (self.key_buffer.clone(), self.value_buffer.clone())
        with _capability_answered(torch):
            self.write_ops.triton_reshape_and_cache_flash(
                key, value, self.key_cache, self.value_cache,
                self._tensor(slots, torch.int64), "auto", self.k_scale, self.v_scale)
        mapped = {slot: index for index, (_, _, slot) in enumerate(tokens)}
        for name, old, new, rows in (("key", before[0], self.key_buffer, keys),
                                     ("value", before[1], self.value_buffer, values)):
            changed = (_bits(old) != _bits(new)).reshape(old.shape[0] * b, -1).any(dim=1)
            for buffer_slot in torch.nonzero(changed).flatten().tolist():
                slot = buffer_slot - REDZONE_BLOCKS * b
                if slot not in mapped:
                    pool = 0 <= slot < self.config.num_blocks * b
                    where = f"block {slot // b}" if pool else "a redzone outside the pool"
                    guard.fail("write", "stray-write", f"the write kernel changed {name} slot "
                               f"{slot} ({where}), which no token of the launch maps to",
                               slot=int(slot))
            stored = new[REDZONE_BLOCKS:REDZONE_BLOCKS + self.config.num_blocks]
            stored = stored.reshape(-1, KV_HEADS, HEAD_DIM).cpu().numpy()
            for slot, index in mapped.items():
                if not 0 <= slot < stored.shape[0]:
                    continue  # reported by the slot checks above
                if stored[slot].tobytes() != rows[index].tobytes():
                    rid, position, _ = tokens[index]
                    guard.fail("write", "row-mismatch", f"{name} slot {slot} does not hold the "
                               f"row of position {position} after the write kernel",
                               request=rid, slot=int(slot))
        in_pool = [(p, s) for _, p, s in tokens if 0 <= s < self.config.num_blocks * b]
        if in_pool:
            index = self._tensor([s for _, s in in_pool], torch.int64)
            device.slot_written[index] = 1
            device.slot_pos[index] = self._tensor([p for p, _ in in_pool], torch.int32)

    def _check_slots(self, tokens: list[tuple[int, int, int]], device: Any) -> None:
        """KVGuard's write checks (class 5) on the slot mapping the kernel receives."""
        guard, b = self.guard, self.b
        owners = device.block_owner.cpu().numpy()
        written = device.slot_written.cpu().numpy()
        seen: set[int] = set()
        for rid, position, slot in tokens:
            block = slot // b
            if not 0 <= block < len(owners) or owners[block] != rid:
                guard.fail("write", "not-exclusive-owner", f"position {position} maps to slot "
                           f"{slot}, in a block the request does not own exclusively",
                           request=rid, block=int(block), slot=int(slot))
                continue
            if written[slot] or slot in seen:
                guard.fail("write", "written-twice", f"slot {slot} (position {position}) was "
                           "already written in this epoch", request=rid, block=int(block),
                           slot=int(slot))
            if slot % b != position % b:
                guard.fail("write", "wrong-offset", f"position {position} maps to offset "
                           f"{slot % b} of its block", request=rid, block=int(block),
                           slot=int(slot))
            seen.add(slot)

    # ------------------------------------------------------------------ attention

    def launch_attention(self, queries: np.ndarray, tables: list[list[int]],
                         seq_lens: list[int], query_start_loc: Sequence[int],
                         request_ids: list[int], device: Any, max_query_len: int) -> np.ndarray:
        torch = self.torch
        self._poison_unwritten(device)
        width = max(1, max(len(t) for t in tables))
        for row, table in enumerate(tables):
            self.block_table[row, :len(table)] = self._tensor(table, torch.int32)
        out = torch.zeros((len(queries), HEADS, HEAD_DIM), dtype=torch.float32,
                          device=self.device)
        # errstate: the interpreter divides the padded rows of a q block by L = 0
        with np.errstate(invalid="ignore", divide="ignore"), _ieee_float32_dots():
            self._unified_attention(queries, out, query_start_loc, seq_lens, max_query_len,
                                    self.block_table[:len(seq_lens), :width])
        result = out.cpu().numpy()
        for row, rid in enumerate(request_ids):
            start, stop = query_start_loc[row], query_start_loc[row + 1]
            bad = np.flatnonzero(np.isnan(result[start:stop]).any(axis=(1, 2)))
            if len(bad):
                first = seq_lens[row] - (stop - start) + int(bad[0])
                self.guard.fail("read", "unwritten", f"attention output of query position "
                                f"{first} is NaN: the kernel used a key slot that was never "
                                "written in its block's epoch (unwritten slots hold NaN)",
                                request=rid)
        return result

    def _unified_attention(self, queries: np.ndarray, out: Any, query_start_loc: Sequence[int],
                           seq_lens: list[int], max_query_len: int, block_table: Any) -> None:
        """``unified_attention`` called as ``TritonAttentionImpl.forward`` calls it."""
        torch = self.torch
        window = self.config.sliding_window
        descale = (len(seq_lens), KV_HEADS)
        self.attention_ops.unified_attention(
            q=self._tensor(queries, torch.float32), k=self.key_cache, v=self.value_cache,
            out=out, cu_seqlens_q=self._tensor(query_start_loc, torch.int32),
            max_seqlen_q=max_query_len, seqused_k=self._tensor(seq_lens, torch.int32),
            max_seqlen_k=max(seq_lens), softmax_scale=SCALE, causal=True,
            window_size=(window - 1, 0) if window is not None else (-1, -1),
            block_table=block_table, softcap=0, q_descale=None,
            k_descale=self.k_scale.expand(descale), v_descale=self.v_scale.expand(descale),
            seq_threshold_3D=MIN_LAUNCH_GRID_SIZE_2D // KV_HEADS,
            num_par_softmax_segments=NUM_PAR_SOFTMAX_SEGMENTS,
            softmax_segm_output=self.segm_output, softmax_segm_max=self.segm_max,
            softmax_segm_expsum=self.segm_expsum)

    def _poison_unwritten(self, device: Any) -> None:
        """NaN into every slot the guard counts as unwritten (free, reallocated, the null
        block, the unwritten tail of a last block)."""
        unwritten = (device.slot_written == 0).reshape(self.config.num_blocks, self.b)
        self.key_cache[unwritten] = float("nan")
        self.value_cache[unwritten] = float("nan")


def _bits(tensor: Any) -> Any:
    """The raw bits of a float32 tensor (NaN compares equal to itself)."""
    import torch

    return tensor.view(torch.int32)


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    """``vllm-triton``: the optimized manager under KVGuard, forward passes through vLLM."""
    from fuzzkit.targets.paged_kv.driver import run_program
    from fuzzkit.targets.paged_kv.optimized import OptimizedManager

    return run_program(OptimizedManager, inputs, guarded=True, kernel_driver=VllmKernelDriver)
