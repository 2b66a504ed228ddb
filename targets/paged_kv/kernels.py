"""Triton kernels of the paged KV cache: write K/V into slots, paged attention through tables.

Layout (vLLM style).  ``key_cache`` and ``value_cache`` are ``[num_blocks, block_size,
num_kv_heads, head_dim]`` tensors in the storage dtype (float32, float16, bfloat16 or float64),
the last dimension contiguous.  Block 0 is the null block: never allocated, never written;
block-table entries outside a sliding window point at it.  Slot ``s`` is offset
``s % block_size`` of block ``s // block_size``.

Launchers (torch tensors in, all on :func:`fuzzkit.triton_support.device`)::

    write_kv(key, value, key_cache, value_cache, slot_mapping, *, block_t=None, block_e=None)
    write_kv_guarded(key, value, key_cache, value_cache, slot_mapping, *,
                     token_request, token_pos, shadow, block_t=None, block_e=None)
    paged_attention(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, out,
                    *, sliding_window=None, max_query_len=None, block_m=None, block_n=None,
                    lowp_dot=None)
    paged_attention_guarded(query, key_cache, value_cache, block_tables, seq_lens,
                            query_start_loc, out, *, request_ids, shadow, sliding_window=None,
                            max_query_len=None, block_m=None, block_n=None, lowp_dot=None)

All return ``None`` and write in place (the caches, ``out``, the shadow).  The tile sizes are
launch parameters: ``block_t`` / ``block_e`` (tokens / row elements per write program),
``block_m`` / ``block_n`` (rows per attention program, keys per step) and ``lowp_dot`` override
the mode's defaults (:func:`write_tiles`, :func:`attention_config`), so a fuzzing driver can
launch small tiles under the interpreter that cheap cases already cross.

``write_kv`` (reshape-and-cache): ``key``/``value`` are ``[T, num_kv_heads, head_dim]``;
row ``t`` goes to slot ``slot_mapping[t]`` (int32 or int64); slot ``-1`` is padding, skipped.
Rows are copied bit for bit (the launchers require key, value and the caches in one dtype).

``paged_attention``: ``query [T_total, H, D]`` packs the queries of ``R`` requests; request
``r`` owns rows ``query_start_loc[r] : query_start_loc[r+1]`` (int32 ``[R+1]``), which are the
tokens at positions ``seq_lens[r] - q_len .. seq_lens[r] - 1`` (decode: ``q_len == 1``; chunked
prefill: ``q_len > 1`` after a cached context).  Key ``k`` of request ``r`` lives in physical
block ``block_tables[r, k // block_size]`` (int32 ``[R, max_blocks]``), offset
``k % block_size``.  A query at position ``t`` attends keys ``0..t`` (causal), or
``t - w + 1 .. t`` with ``sliding_window=w``; query head ``h`` uses kv head
``h // (H // H_kv)`` (GQA); softmax scale ``1/sqrt(D)``.  ``out [T_total, H, D]`` receives the
result in the storage dtype.  ``max_query_len`` (the scheduler knows it) sizes the grid; without
it the launcher reads ``query_start_loc`` back from the device.

One program handles one request, one tile of ``BLOCK_Q`` query tokens and one kv head: its
``BLOCK_M = BLOCK_Q * G_PAD`` rows are (query token, query head of the group) pairs, so the
``G = H / H_kv`` query heads that share a kv head share every K/V load (``G_PAD`` is ``G``
rounded up to a power of two; padded rows are masked).  It walks the keys ``lo .. hi`` the tile
needs in ``BLOCK_N`` steps -- each key gathered through the block table, so ``BLOCK_N`` is
independent of the block size -- with the online softmax of FlashAttention / flash-decoding:
running max ``m``, running sum ``l``, accumulator rescaled by ``exp2(m_old - m_new)``.

Precision.  The kernel accumulates in ``ACC`` (a ``tl.constexpr``): float32 for float32,
float16 and bfloat16 storage, float64 for float64 storage.  Scores, the softmax scale
``log2(e) / sqrt(D)`` (a constexpr Python float: a float32 constant, or exact in float64 --
never a float32 launch argument, which is how Triton passes a plain Python float), ``exp2``,
the running ``m`` and ``l`` and the output accumulator are all ``ACC``; the output is rounded
to the storage dtype once, at the end (a no-op in float32 / float64).

- 16-bit storage on a GPU: both products run on tensor cores in the storage dtype with float32
  accumulation (``P`` rounded to the storage dtype for ``P @ V``, as FlashAttention does).
- float32 storage, and 16-bit storage under ``TRITON_INTERPRET=1`` (where bfloat16 ``tl.dot``
  is garbage): every load is cast to float32 and the dots are IEEE float32 (no TF32).  The
  error analysis in :mod:`fuzzkit.targets.paged_kv.attention_reference` covers both paths.
- float64 storage: float64 operands and float64 dots -- Triton 3.9 accepts float64 ``tl.dot``
  (result float64; ``input_precision`` concerns float32 only) and its NVIDIA backend lowers it
  to the float64 tensor-core MMA (``mma.sync.aligned.m8n8k4...f64`` on sm_80,
  ``m16n8k16...f64`` on sm_90), or to FMAs where that does not apply; the interpreter runs it
  as a float64 ``np.matmul``.  ``exp2`` in float64 (libdevice ``__nv_exp2`` on a GPU), an IEEE
  float64 division.  Meant for exactness oracles (``fuzzkit.targets.scheduling.exactness``); on a GPU
  it gets smaller tiles (``BLOCK_M_PREFILL_GPU_FP64``, ``BLOCK_N_GPU_FP64``) and no
  pipelining.  The float64 error bound is in ``tests/test_paged_kv_kernels.py`` (its float64
  section).  Verified under the interpreter; the native float64 path has not yet run on a GPU
  (``scripts/gpu_check.sh`` covers it).

KVGuard device interface (checks 4 and 5 of docs/COMPONENTS.md §1)
------------------------------------------------------------

The guarded launchers run *the same kernels* compiled with ``GUARD=True``; the plain launchers
compile with ``GUARD=False``, where every check is a ``tl.constexpr`` branch that vanishes, so
the unguarded kernel pays nothing.  ``shadow`` is any object with these attributes (e.g.
:class:`GuardShadow`, or ``fuzzkit.oracles.kvguard.DeviceShadow``), all tensors on the kernel device:

=================  ===========================  ===============================================
``block_owner``    int32 ``[num_blocks]``       request id owning the block *exclusively*;
                                                -1 free (and the null block), -2 shared
                                                read-only
``readable``       int8 ``[max_requests,        1 if request ``r`` may read block ``p``
                   num_blocks]``
``slot_written``   int32 ``[num_blocks *        1 if the slot was written in the block's
                   block_size]``                current epoch (the host zeroes a block's slots
                                                when it re-allocates the block)
``slot_pos``       int32 ``[num_blocks *        token position last written into the slot
                   block_size]``
``records``        int32 ``[capacity, 6]``      violation records, filled from row 0
``count``          int32 ``[1]``                number of violations found (may exceed
                                                ``capacity``: records beyond it are dropped)
=================  ===========================  ===============================================

Per launch ids: ``write_kv_guarded`` takes ``token_request [T]`` (the guard's request id of each
token) and ``token_pos [T]`` (its token position), int32; ``paged_attention_guarded`` takes
``request_ids [R]`` (the guard's id of each batch row), int32.  Ids must lie in
``[0, max_requests)``; an id outside makes every read of that row ``READ_NOT_READABLE``.

A violation appends one record ``(code, request, block, slot, position, query_position)``: the
kernel does ``i = tl.atomic_add(count, 1)`` and stores the record at row ``i`` only when
``i < capacity``.  Codes (Python constants below):

- ``WRITE_NOT_OWNER = 51``: ``block_owner[block] != token_request[t]`` -- a write into a free
  block, a shared block (copy-on-write missing), another request's block, or a block index out
  of ``[0, num_blocks)`` (the guarded kernel then skips the store).
- ``WRITE_TWICE = 52``: the slot was already written in this epoch (``slot_written`` is set
  with ``tl.atomic_xchg``, so two tokens of one launch mapped to one slot are caught too).
- ``WRITE_WRONG_OFFSET = 53``: ``slot % block_size != token_pos[t] % block_size``.
  Write records carry ``position = token_pos[t]`` and ``query_position = -1``.  Every in-range
  write (violating or not) sets ``slot_written[slot] = 1`` and ``slot_pos[slot] = token_pos[t]``.
- ``READ_NOT_READABLE = 41``: ``readable[request, block] == 0`` (or the block index is out of
  range).  Checked first; a key that fails it is not checked further.
- ``READ_UNWRITTEN = 42``: ``slot_written[slot] == 0``; position checks are skipped for it.
- ``READ_FUTURE = 43``: ``slot_pos[slot] >`` the position of a query that uses the key
  (causality).
- ``READ_WRONG_POSITION = 44``: ``slot_pos[slot] !=`` the key position the kernel believes it
  reads (a wrong block, a wrong offset, a stale table).
  Read records carry ``position = slot_pos[slot]`` (for 41/42: the key position the kernel
  believes it reads) and ``query_position`` = the smallest query position that used the key
  (for 43: the smallest one that used it although ``slot_pos`` lies in its future).

Reads are checked exactly where the kernel *uses* a key -- a (query, key) pair that passes the
kernel's own causal / window / length mask; keys a tile loads but masks out are not reads.  The
check is per key and per program: one record per (code, key) in each program that uses the key,
so the same violation can be recorded once per kv head and per query tile; the host dedups.
No check fires on correct kernels with a correct shadow (``tests/test_paged_kv_kernels.py``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple, Optional

from fuzzkit import triton_support

triton_support.prepare()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# ----------------------------------------------------------------------------- guard codes

READ_NOT_READABLE = 41
READ_UNWRITTEN = 42
READ_FUTURE = 43
READ_WRONG_POSITION = 44
WRITE_NOT_OWNER = 51
WRITE_TWICE = 52
WRITE_WRONG_OFFSET = 53

CODE_NAMES = {
    READ_NOT_READABLE: "READ_NOT_READABLE",
    READ_UNWRITTEN: "READ_UNWRITTEN",
    READ_FUTURE: "READ_FUTURE",
    READ_WRONG_POSITION: "READ_WRONG_POSITION",
    WRITE_NOT_OWNER: "WRITE_NOT_OWNER",
    WRITE_TWICE: "WRITE_TWICE",
    WRITE_WRONG_OFFSET: "WRITE_WRONG_OFFSET",
}

#: Columns of a violation record.
RECORD_FIELDS = ("code", "request", "block", "slot", "position", "query_position")
OWNER_FREE = -1
OWNER_SHARED = -2

LOG2E = 1.4426950408889634

# ----------------------------------------------------------------------------- tile configs

#: Keys per inner-loop step.  16 is the smallest ``tl.dot`` tile on a GPU; under the interpreter
#: it also makes requests of a few dozen tokens span several steps, so the online-softmax
#: rescaling is exercised by small tests.
BLOCK_N_INTERPRETED = 16
BLOCK_N_GPU = 64
#: Rows (query token x group head) per program.
BLOCK_M_MAX_INTERPRETED = 256
BLOCK_M_PREFILL_GPU = 64
BLOCK_M_MIN = 16
NUM_WARPS = 4
#: Software-pipelining depth of the key loop on a GPU (two K/V tiles in flight; float32 tiles of
#: 64 x 128 stay well inside shared memory).
NUM_STAGES = 2
#: float64 storage on a GPU (an exactness oracle, not a fast path): 8-byte elements, so half
#: the prefill rows and keys per step, and no pipelining -- the fp32 tile budget, in fp64.
BLOCK_M_PREFILL_GPU_FP64 = 32
BLOCK_N_GPU_FP64 = 32
NUM_STAGES_FP64 = 1


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _record(records_ptr, count_ptr, capacity, hit, code, request, block, slot, position,
            query_position):
    """Append one record per true lane of ``hit`` (1-D); all other arguments broadcast.
    Correct launches have no hit: one reduction and a uniform branch skip the atomics."""
    flags = hit.to(tl.int32)
    if tl.max(flags, axis=0) > 0:  # pragma: no cover - a violation only (a broken kernel)
        zero = flags * 0
        index = tl.atomic_add(count_ptr + zero, zero + 1, mask=hit)
        keep = hit & (index < capacity)
        row = records_ptr + index.to(tl.int64) * 6
        tl.store(row + 0, zero + code, mask=keep)
        tl.store(row + 1, (zero + request).to(tl.int32), mask=keep)
        tl.store(row + 2, (zero + block).to(tl.int32), mask=keep)
        tl.store(row + 3, (zero + slot).to(tl.int32), mask=keep)
        tl.store(row + 4, (zero + position).to(tl.int32), mask=keep)
        tl.store(row + 5, (zero + query_position).to(tl.int32), mask=keep)


@triton.jit
def write_kv_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_mapping_ptr,
    token_request_ptr, token_pos_ptr, block_owner_ptr, slot_written_ptr, slot_pos_ptr,
    records_ptr, count_ptr, capacity,
    num_tokens, row_elems, head_dim, block_size, num_blocks,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch,
    BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, GUARD: tl.constexpr,
):
    """Scatter ``BLOCK_T`` tokens x ``BLOCK_E`` of their ``H_kv * D`` elements into the cache."""
    pid_t = tl.program_id(0)
    pid_e = tl.program_id(1)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = offs_t < num_tokens
    slot = tl.load(slot_mapping_ptr + offs_t, mask=t_ok, other=-1).to(tl.int64)
    todo = t_ok & (slot >= 0)
    block = slot // block_size
    offset = slot % block_size

    if GUARD:  # pragma: no branch - guarded launches only (GUARD=False: the plain launch)
        # Checks once per token: in the programs of the first element tile.
        check = todo & ((offs_t * 0 + pid_e) == 0)
        request = tl.load(token_request_ptr + offs_t, mask=check, other=-1)
        position = tl.load(token_pos_ptr + offs_t, mask=check, other=0)
        in_range = (block >= 0) & (block < num_blocks)
        owner = tl.load(block_owner_ptr + block, mask=check & in_range, other=-1)
        _record(records_ptr, count_ptr, capacity, check & ((owner != request) | ~in_range),
                51, request, block, slot, position, -1)
        check = check & in_range
        earlier = tl.atomic_xchg(slot_written_ptr + slot, tl.full((BLOCK_T,), 1, tl.int32),
                                 mask=check)
        _record(records_ptr, count_ptr, capacity, check & (earlier != 0),
                52, request, block, slot, position, -1)
        _record(records_ptr, count_ptr, capacity, check & (offset != position % block_size),
                53, request, block, slot, position, -1)
        tl.store(slot_pos_ptr + slot, position, mask=check)
        todo = todo & in_range  # never store outside the pool in guarded mode

    offs_e = pid_e * BLOCK_E + tl.arange(0, BLOCK_E)
    e_ok = offs_e < row_elems
    head = offs_e // head_dim
    dim = offs_e % head_dim
    mask = todo[:, None] & e_ok[None, :]
    t64 = offs_t.to(tl.int64)
    src_k = t64[:, None] * stride_kt + head[None, :] * stride_kh + dim[None, :]
    src_v = t64[:, None] * stride_vt + head[None, :] * stride_vh + dim[None, :]
    dst_k = (block[:, None] * stride_kcb + offset[:, None] * stride_kcs
             + head[None, :] * stride_kch + dim[None, :])
    dst_v = (block[:, None] * stride_vcb + offset[:, None] * stride_vcs
             + head[None, :] * stride_vch + dim[None, :])
    k = tl.load(key_ptr + src_k, mask=mask)
    v = tl.load(value_ptr + src_v, mask=mask)
    tl.store(key_cache_ptr + dst_k, k.to(key_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(value_cache_ptr + dst_v, v.to(value_cache_ptr.dtype.element_ty), mask=mask)


@triton.jit
def paged_attention_kernel(
    q_ptr, key_cache_ptr, value_cache_ptr, out_ptr,
    block_tables_ptr, seq_lens_ptr, query_start_loc_ptr,
    request_ids_ptr, readable_ptr, slot_written_ptr, slot_pos_ptr,
    records_ptr, count_ptr, capacity, max_requests,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch,
    stride_bt, max_blocks, num_blocks, block_size,
    head_dim, group, window,
    G_PAD: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    SLIDING: tl.constexpr, LOWP_DOT: tl.constexpr, GUARD: tl.constexpr,
    ACC: tl.constexpr, QK_SCALE: tl.constexpr,
):
    """Attention of one (request, query tile, kv head): online softmax over gathered keys.

    ``ACC`` is the accumulation dtype (``tl.float32``, or ``tl.float64`` for float64 storage);
    ``QK_SCALE`` (``log2(e) / sqrt(D)``) is a Python float, so it enters the arithmetic as a
    constant of ``ACC`` -- rounded to float32 once, or exact in float64."""
    r = tl.program_id(0)
    q_tile = tl.program_id(1)
    kv_head = tl.program_id(2)

    q_start = tl.load(query_start_loc_ptr + r)
    q_len = tl.load(query_start_loc_ptr + r + 1) - q_start
    seq_len = tl.load(seq_lens_ptr + r)
    context_len = seq_len - q_len  # keys cached before this step's first query

    offs_m = tl.arange(0, BLOCK_M)
    q_idx = q_tile * BLOCK_Q + offs_m // G_PAD  # query index within the request
    in_group = offs_m % G_PAD
    head = kv_head * group + in_group  # query head of each row
    row_ok = (q_idx < q_len) & (in_group < group)
    q_pos = context_len + q_idx  # token position of each row's query
    out_row = q_start + q_idx

    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < head_dim
    q_mask = row_ok[:, None] & d_ok[None, :]
    q = tl.load(q_ptr + (q_start + q_idx).to(tl.int64)[:, None] * stride_qt
                + head[:, None] * stride_qh + offs_d[None, :], mask=q_mask, other=0.0)
    if not LOWP_DOT:  # pragma: no branch - the driver's cache is float32: IEEE dots
        q = q.to(ACC)

    # Keys this tile needs: from the oldest key in any row's window to the newest query.
    hi = tl.max(tl.where(row_ok, q_pos + 1, 0), axis=0)
    if SLIDING:
        first_key = q_pos - window + 1  # oldest key in each query's window
        lo = tl.maximum(tl.min(tl.where(row_ok, first_key, hi), axis=0), 0)
    else:
        lo = 0

    m_i = tl.full((BLOCK_M,), float("-inf"), ACC)
    l_i = tl.zeros((BLOCK_M,), ACC)
    acc = tl.zeros((BLOCK_M, BLOCK_D), ACC)
    table_row = block_tables_ptr + r.to(tl.int64) * stride_bt

    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        logical = offs_n // block_size
        k_ok = (offs_n < hi) & (logical < max_blocks)
        physical = tl.load(table_row + logical, mask=k_ok, other=0)
        offset = offs_n % block_size
        base_k = (physical.to(tl.int64) * stride_kcb + offset * stride_kcs
                  + kv_head * stride_kch)
        base_v = (physical.to(tl.int64) * stride_vcb + offset * stride_vcs
                  + kv_head * stride_vch)
        k = tl.load(key_cache_ptr + base_k[None, :] + offs_d[:, None],
                    mask=k_ok[None, :] & d_ok[:, None], other=0.0)  # [BLOCK_D, BLOCK_N]
        v = tl.load(value_cache_ptr + base_v[:, None] + offs_d[None, :],
                    mask=k_ok[:, None] & d_ok[None, :], other=0.0)  # [BLOCK_N, BLOCK_D]
        if LOWP_DOT:
            s = tl.dot(q, k)  # pragma: no cover - 16-bit storage (the cache is float32)
        else:
            s = tl.dot(q, k.to(ACC), input_precision="ieee")
        s = s * QK_SCALE  # log2 domain: scale * log2(e) folded in

        valid = row_ok[:, None] & k_ok[None, :]
        valid = valid & (offs_n[None, :] <= q_pos[:, None])  # causal
        if SLIDING:
            valid = valid & (offs_n[None, :] >= first_key[:, None])
        s = tl.where(valid, s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing yet
        alpha = tl.math.exp2(m_i - m_use)
        p = tl.math.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if LOWP_DOT:
            pv = tl.dot(p.to(v.dtype), v)  # pragma: no cover - 16-bit storage only
        else:
            pv = tl.dot(p, v.to(ACC), input_precision="ieee")
        acc = acc * alpha[:, None] + pv
        m_i = m_new

        if GUARD:  # pragma: no branch - guarded launches only (GUARD=False: the plain launch)
            used = tl.max(valid.to(tl.int32), axis=0) > 0  # [BLOCK_N]
            first_q = tl.min(tl.where(valid, q_pos[:, None], 2147483647), axis=0)
            rid = tl.load(request_ids_ptr + r) + offs_n * 0  # [BLOCK_N], one value
            rid_ok = (rid >= 0) & (rid < max_requests)
            phys_ok = (physical >= 0) & (physical < num_blocks)
            slot = physical.to(tl.int64) * block_size + offset
            may_read = tl.load(readable_ptr + rid.to(tl.int64) * num_blocks + physical,
                               mask=used & phys_ok & rid_ok, other=0)
            bad_block = used & (may_read == 0)
            _record(records_ptr, count_ptr, capacity, bad_block,
                    41, rid, physical, slot, offs_n, first_q)
            used = used & ~bad_block
            written = tl.load(slot_written_ptr + slot, mask=used, other=0)
            unwritten = used & (written == 0)
            _record(records_ptr, count_ptr, capacity, unwritten,
                    42, rid, physical, slot, offs_n, first_q)
            used = used & ~unwritten
            held = tl.load(slot_pos_ptr + slot, mask=used, other=0)
            future = valid & used[None, :] & (held[None, :] > q_pos[:, None])
            first_future = tl.min(tl.where(future, q_pos[:, None], 2147483647), axis=0)
            _record(records_ptr, count_ptr, capacity, tl.max(future.to(tl.int32), axis=0) > 0,
                    43, rid, physical, slot, held, first_future)
            _record(records_ptr, count_ptr, capacity, used & (held != offs_n),
                    44, rid, physical, slot, held, first_q)

    l_safe = tl.where(l_i > 0.0, l_i, 1.0)
    result = acc / l_safe[:, None]
    tl.store(out_ptr + out_row.to(tl.int64)[:, None] * stride_ot + head[:, None] * stride_oh
             + offs_d[None, :], result.to(out_ptr.dtype.element_ty), mask=q_mask)


#: The kernels the launchers use; looked up at call time so a mutant can swap in a variant
#: (plain and guarded paths alike: both launch these).
write_kernel: Callable[..., Any] = write_kv_kernel
attention_kernel: Callable[..., Any] = paged_attention_kernel


# ----------------------------------------------------------------------------- shadow tensors


class Violation(NamedTuple):
    code: int
    request: int
    block: int
    slot: int
    position: int
    query_position: int

    @property
    def name(self) -> str:
        return CODE_NAMES.get(self.code, f"CODE_{self.code}")


@dataclasses.dataclass
class GuardShadow:
    """The guard tensors the guarded kernels read and update (layout: module docstring).

    KVGuard's host side (``fuzzkit.oracles.kvguard.DeviceShadow``) has the same attributes; either can
    be passed as ``shadow=``.
    """

    block_owner: torch.Tensor
    readable: torch.Tensor
    slot_written: torch.Tensor
    slot_pos: torch.Tensor
    records: torch.Tensor
    count: torch.Tensor

    @classmethod
    def create(cls, num_blocks: int, block_size: int, max_requests: int, capacity: int = 1024,
               device: Optional[str] = None) -> "GuardShadow":
        """Everything free, unreadable and unwritten; no violations."""
        device = device or triton_support.device()
        i32 = dict(dtype=torch.int32, device=device)
        slots = num_blocks * block_size
        return cls(
            block_owner=torch.full((num_blocks,), OWNER_FREE, **i32),
            readable=torch.zeros((max_requests, num_blocks), dtype=torch.int8, device=device),
            slot_written=torch.zeros((slots,), **i32),
            slot_pos=torch.full((slots,), -1, **i32),
            records=torch.zeros((capacity, 6), **i32),
            count=torch.zeros((1,), **i32),
        )

    def violations(self) -> list[Violation]:
        return read_violations(self)

    def clear_violations(self) -> None:
        self.count.zero_()


def read_violations(shadow: Any) -> list[Violation]:
    """The recorded violations of ``shadow`` (at most ``capacity``; ``count`` says how many
    were found), in recording order."""
    count = int(shadow.count.item())
    rows = shadow.records[: min(count, shadow.records.shape[0])].tolist()
    return [Violation(*map(int, row)) for row in rows]


# ----------------------------------------------------------------------------- launchers


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)  # pragma: no cover - a bad launch (tests)


_STORAGE = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _require_shadow_shape(shadow: dict[str, Any], blocks_seen: int, num_blocks: int,
                          block_size: int) -> None:
    """The guard's per-block tensor (``blocks_seen`` wide) and per-slot tensors must match the
    cache, or the guarded kernel would index past them."""
    _require(blocks_seen == num_blocks
             and shadow["slot_written"].shape[0] == num_blocks * block_size
             and shadow["slot_pos"].shape[0] == num_blocks * block_size,
             "shadow tensors do not match the cache's num_blocks / block_size")


def _check_cache(key_cache: torch.Tensor, value_cache: torch.Tensor) -> None:
    _require(key_cache.dim() == 4 and key_cache.shape == value_cache.shape,
             f"key_cache and value_cache must be [num_blocks, block_size, num_kv_heads, "
             f"head_dim] of one shape, got {tuple(key_cache.shape)} and "
             f"{tuple(value_cache.shape)}")
    _require(key_cache.dtype in _STORAGE and value_cache.dtype == key_cache.dtype,
             f"cache dtype must be one of float32/float16/bfloat16/float64 (both alike), got "
             f"{key_cache.dtype} and {value_cache.dtype}")
    _require(key_cache.stride(-1) == 1 and value_cache.stride(-1) == 1,
             "the head_dim axis of the caches must be contiguous")


def _int_tensor(x: torch.Tensor, name: str, device: torch.device) -> torch.Tensor:
    _require(isinstance(x, torch.Tensor) and not x.dtype.is_floating_point,
             f"{name} must be an integer tensor")
    _require(x.device == device, f"{name} is on {x.device}, the cache on {device}")
    return x.contiguous()


def _shadow_args(shadow: Any, device: torch.device) -> dict[str, torch.Tensor]:
    names = ("block_owner", "readable", "slot_written", "slot_pos", "records", "count")
    args = {}
    for name in names:
        tensor = getattr(shadow, name, None)
        _require(isinstance(tensor, torch.Tensor), f"shadow.{name} is missing (see "
                 "fuzzkit.targets.paged_kv.kernels docstring for the guard interface)")
        _require(tensor.device == device, f"shadow.{name} is on {tensor.device}, the cache "
                 f"on {device}")
        _require(tensor.is_contiguous(), f"shadow.{name} must be contiguous")
        args[name] = tensor
    for name in ("block_owner", "slot_written", "slot_pos", "records", "count"):
        _require(args[name].dtype == torch.int32, f"shadow.{name} must be int32")
    _require(args["readable"].dtype == torch.int8 and args["readable"].dim() == 2,
             "shadow.readable must be int8 [max_requests, num_blocks]")
    _require(args["records"].dim() == 2 and args["records"].shape[1] == 6,
             "shadow.records must be int32 [capacity, 6]")
    return args


def write_tiles(num_tokens: int, row_elems: int, *, block_t: Optional[int] = None,
                block_e: Optional[int] = None) -> tuple[int, int]:
    """``(BLOCK_T, BLOCK_E)`` of a write launch: tokens and row elements (``H_kv * D``) per
    program.  Interpreted: one element tile per row and up to 8192 elements per program (few,
    big programs); GPU: up to 1024 elements and 4096 per program.  Either can be given
    (a power of two)."""
    if triton_support.interpreted():
        default_e = _next_pow2(row_elems)
        default_t = min(_next_pow2(num_tokens), max(1, 8192 // default_e))
    else:  # pragma: no cover - only on a GPU
        default_e = min(_next_pow2(row_elems), 1024)
        default_t = max(1, 4096 // default_e)
    block_e = block_e or default_e
    block_t = block_t or default_t
    _require(block_t == _next_pow2(block_t) and block_e == _next_pow2(block_e),
             f"block_t and block_e must be powers of two, got {block_t} and {block_e}")
    return block_t, block_e


def _write(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
           value_cache: torch.Tensor, slot_mapping: torch.Tensor, guard: Optional[dict],
           block_t: Optional[int] = None, block_e: Optional[int] = None) -> None:
    _check_cache(key_cache, value_cache)
    num_blocks, block_size, kv_heads, head_dim = key_cache.shape
    device = key_cache.device
    _require(key.dim() == 3 and key.shape == value.shape
             and tuple(key.shape[1:]) == (kv_heads, head_dim),
             f"key and value must be [T, {kv_heads}, {head_dim}], got {tuple(key.shape)} and "
             f"{tuple(value.shape)}")
    _require(key.device == device and value.device == device,
             "key, value and the caches must be on one device")
    _require(key.stride(-1) == 1 and value.stride(-1) == 1,
             "the head_dim axis of key and value must be contiguous")
    num_tokens = key.shape[0]
    slot_mapping = _int_tensor(slot_mapping, "slot_mapping", device)
    _require(slot_mapping.dim() == 1 and slot_mapping.shape[0] == num_tokens,
             f"slot_mapping must be [T] with T = {num_tokens}")
    if num_tokens == 0:
        return  # pragma: no cover - the driver writes scheduled tokens only
    row_elems = kv_heads * head_dim
    block_t, block_e = write_tiles(num_tokens, row_elems, block_t=block_t, block_e=block_e)
    grid = (triton.cdiv(num_tokens, block_t), triton.cdiv(row_elems, block_e))
    if guard is None:
        guard_args = (slot_mapping,) * 7 + (0,)  # pragma: no cover - the plain launch
    else:
        token_request = _int_tensor(guard["token_request"], "token_request", device)
        token_pos = _int_tensor(guard["token_pos"], "token_pos", device)
        _require(token_request.shape == (num_tokens,) and token_pos.shape == (num_tokens,),
                 f"token_request and token_pos must be [T] with T = {num_tokens}")
        shadow = guard["shadow"]
        _require_shadow_shape(shadow, shadow["block_owner"].shape[0], num_blocks, block_size)
        guard_args = (token_request.to(torch.int32), token_pos.to(torch.int32),
                      shadow["block_owner"], shadow["slot_written"], shadow["slot_pos"],
                      shadow["records"], shadow["count"], shadow["records"].shape[0])
    write_kernel[grid](
        key, value, key_cache, value_cache, slot_mapping, *guard_args,
        num_tokens, row_elems, head_dim, block_size, num_blocks,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        BLOCK_T=block_t, BLOCK_E=block_e, GUARD=guard is not None, num_warps=NUM_WARPS,
    )


def write_kv(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
             value_cache: torch.Tensor, slot_mapping: torch.Tensor, *,
             block_t: Optional[int] = None, block_e: Optional[int] = None) -> None:
    """Reshape-and-cache: ``key[t]``, ``value[t]`` into slot ``slot_mapping[t]`` (-1 skips)."""
    _write(key, value, key_cache, value_cache, slot_mapping, None, block_t, block_e)


def write_kv_guarded(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                     value_cache: torch.Tensor, slot_mapping: torch.Tensor, *,
                     token_request: torch.Tensor, token_pos: torch.Tensor, shadow: Any,
                     block_t: Optional[int] = None, block_e: Optional[int] = None) -> None:
    """:func:`write_kv` with KVGuard's write checks (codes 51-53) and shadow updates."""
    device = key_cache.device
    _write(key, value, key_cache, value_cache, slot_mapping,
           {"token_request": token_request, "token_pos": token_pos,
            "shadow": _shadow_args(shadow, device)}, block_t, block_e)


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """Tile sizes of one attention launch (chosen by :func:`attention_config`)."""

    block_q: int
    block_m: int
    block_n: int
    block_d: int
    g_pad: int
    lowp_dot: bool
    #: ``tl.float64`` for float64 storage, else ``tl.float32``: scores, softmax state and the
    #: output accumulator all run in it.
    acc_dtype: Any = tl.float32
    num_stages: int = NUM_STAGES


def attention_config(head_dim: int, group: int, max_query_len: int, dtype: torch.dtype,
                     *, block_m: Optional[int] = None, block_n: Optional[int] = None,
                     lowp_dot: Optional[bool] = None) -> AttentionConfig:
    """Fixed tile configs (``@triton.autotune`` needs a GPU driver; these are picked by hand).

    Interpreted: one query tile covers up to ``BLOCK_M_MAX_INTERPRETED`` rows (few, big
    programs), keys in steps of 16.  GPU: 64-row tiles for prefill, 16 for decode, 64 keys per
    step, two pipeline stages; float64 storage halves the prefill tile and the key step and
    does not pipeline (float64 tiles are twice the bytes).  ``lowp_dot`` defaults to
    tensor-core dots in 16-bit storage dtypes on a GPU only.  ``block_m`` (rows per program: a
    power of two, at least ``BLOCK_M_MIN`` and the padded group) and ``block_n`` replace the
    defaults: a query tile holds ``block_m / G_PAD`` queries.
    """
    interpreted = triton_support.interpreted()
    float64 = dtype == torch.float64
    g_pad = _next_pow2(group)
    block_d = max(16, _next_pow2(head_dim))
    if interpreted:
        default_m = min(max(BLOCK_M_MIN, g_pad * _next_pow2(max_query_len)),
                        max(BLOCK_M_MAX_INTERPRETED, g_pad))
        default_n = BLOCK_N_INTERPRETED
    else:  # pragma: no cover - only on a GPU
        prefill = BLOCK_M_PREFILL_GPU_FP64 if float64 else BLOCK_M_PREFILL_GPU
        default_m = max(BLOCK_M_MIN if max_query_len <= 1 else prefill, g_pad)
        default_n = BLOCK_N_GPU_FP64 if float64 else BLOCK_N_GPU
    block_m = block_m or default_m
    _require(block_m >= max(BLOCK_M_MIN, g_pad) and block_m == _next_pow2(block_m),
             f"block_m must be a power of two >= max({BLOCK_M_MIN}, {g_pad}), got {block_m}")
    block_n = block_n or default_n
    _require(block_n >= 16 and block_n == _next_pow2(block_n),
             f"block_n must be a power of two >= 16, got {block_n}")
    default_lowp = (not interpreted) and dtype in (torch.float16, torch.bfloat16)
    lowp_dot = default_lowp if lowp_dot is None else lowp_dot
    _require(not (lowp_dot and dtype in (torch.float32, torch.float64)),
             "lowp_dot needs 16-bit storage")
    _require(not (lowp_dot and interpreted and dtype == torch.bfloat16),
             "bfloat16 tl.dot is wrong under TRITON_INTERPRET=1; use lowp_dot=False")
    return AttentionConfig(block_q=block_m // g_pad, block_m=block_m, block_n=block_n,
                           block_d=block_d, g_pad=g_pad, lowp_dot=bool(lowp_dot),
                           acc_dtype=tl.float64 if float64 else tl.float32,
                           num_stages=NUM_STAGES_FP64 if float64 else NUM_STAGES)


def _attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
               block_tables: torch.Tensor, seq_lens: torch.Tensor,
               query_start_loc: torch.Tensor, out: torch.Tensor, sliding_window: Optional[int],
               max_query_len: Optional[int], guard: Optional[dict], block_n: Optional[int],
               lowp_dot: Optional[bool], block_m: Optional[int] = None) -> None:
    _check_cache(key_cache, value_cache)
    num_blocks, block_size, kv_heads, head_dim = key_cache.shape
    device = key_cache.device
    _require(query.dim() == 3 and query.shape[2] == head_dim,
             f"query must be [T_total, H, {head_dim}], got {tuple(query.shape)}")
    num_heads = query.shape[1]
    _require(num_heads % kv_heads == 0,
             f"query heads {num_heads} must be a multiple of kv heads {kv_heads}")
    _require(query.dtype == key_cache.dtype and out.dtype == key_cache.dtype,
             f"query, out and the caches must share the storage dtype, got {query.dtype}, "
             f"{out.dtype}, {key_cache.dtype}")
    _require(out.shape == query.shape, f"out must be {tuple(query.shape)}, got "
             f"{tuple(out.shape)}")
    _require(query.device == device and out.device == device,
             "query, out and the caches must be on one device")
    _require(query.stride(-1) == 1 and out.stride(-1) == 1,
             "the head_dim axis of query and out must be contiguous")
    block_tables = _int_tensor(block_tables, "block_tables", device)
    seq_lens = _int_tensor(seq_lens, "seq_lens", device)
    query_start_loc = _int_tensor(query_start_loc, "query_start_loc", device)
    _require(block_tables.dim() == 2, "block_tables must be [R, max_blocks]")
    num_requests, max_blocks = block_tables.shape
    _require(seq_lens.shape == (num_requests,) and query_start_loc.shape == (num_requests + 1,),
             f"seq_lens must be [R] and query_start_loc [R + 1] with R = {num_requests}")
    if sliding_window is not None:
        _require(int(sliding_window) >= 1, f"sliding_window must be >= 1, got {sliding_window}")
    if num_requests == 0 or query.shape[0] == 0:
        return  # pragma: no cover - the driver launches requests with queries
    block_tables = block_tables.to(torch.int32)
    seq_lens = seq_lens.to(torch.int32)
    query_start_loc = query_start_loc.to(torch.int32)
    if max_query_len is None:  # pragma: no cover - the driver passes max_query_len
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max().item())
    if max_query_len <= 0:
        return  # pragma: no cover - every launched request has a query
    group = num_heads // kv_heads
    cfg = attention_config(head_dim, group, max_query_len, key_cache.dtype, block_m=block_m,
                           block_n=block_n, lowp_dot=lowp_dot)
    grid = (num_requests, triton.cdiv(max_query_len, cfg.block_q), kv_heads)
    if guard is None:
        guard_args = (seq_lens,) * 6 + (0, 1)  # pragma: no cover - the plain launch
    else:
        request_ids = _int_tensor(guard["request_ids"], "request_ids", device)
        _require(request_ids.shape == (num_requests,), f"request_ids must be [R], R = "
                 f"{num_requests}")
        shadow = guard["shadow"]
        _require_shadow_shape(shadow, shadow["readable"].shape[1], num_blocks, block_size)
        guard_args = (request_ids.to(torch.int32), shadow["readable"], shadow["slot_written"],
                      shadow["slot_pos"], shadow["records"], shadow["count"],
                      shadow["records"].shape[0], shadow["readable"].shape[0])
    qk_scale = LOG2E / math.sqrt(head_dim)  # a constexpr: exact in float64 (module docstring)
    attention_kernel[grid](
        query, key_cache, value_cache, out, block_tables, seq_lens, query_start_loc,
        *guard_args,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        block_tables.stride(0), max_blocks, num_blocks, block_size,
        head_dim, group, int(sliding_window or 0),
        G_PAD=cfg.g_pad, BLOCK_Q=cfg.block_q, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        BLOCK_D=cfg.block_d, SLIDING=sliding_window is not None, LOWP_DOT=cfg.lowp_dot,
        GUARD=guard is not None, ACC=cfg.acc_dtype, QK_SCALE=qk_scale,
        num_warps=NUM_WARPS, num_stages=cfg.num_stages,
    )


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor,
                    query_start_loc: torch.Tensor, out: torch.Tensor, *,
                    sliding_window: Optional[int] = None, max_query_len: Optional[int] = None,
                    block_m: Optional[int] = None, block_n: Optional[int] = None,
                    lowp_dot: Optional[bool] = None) -> None:
    """Paged attention for decode and chunked prefill (see the module docstring) into ``out``."""
    _attention(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, out,
               sliding_window, max_query_len, None, block_n, lowp_dot, block_m)


def paged_attention_guarded(query: torch.Tensor, key_cache: torch.Tensor,
                            value_cache: torch.Tensor, block_tables: torch.Tensor,
                            seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
                            out: torch.Tensor, *, request_ids: torch.Tensor, shadow: Any,
                            sliding_window: Optional[int] = None,
                            max_query_len: Optional[int] = None, block_m: Optional[int] = None,
                            block_n: Optional[int] = None,
                            lowp_dot: Optional[bool] = None) -> None:
    """:func:`paged_attention` with KVGuard's read checks (codes 41-44)."""
    _attention(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, out,
               sliding_window, max_query_len,
               {"request_ids": request_ids, "shadow": _shadow_args(shadow, key_cache.device)},
               block_n, lowp_dot, block_m)


__all__ = [
    "CODE_NAMES", "GuardShadow", "READ_FUTURE", "READ_NOT_READABLE", "READ_UNWRITTEN",
    "READ_WRONG_POSITION", "RECORD_FIELDS", "Violation", "WRITE_NOT_OWNER", "WRITE_TWICE",
    "WRITE_WRONG_OFFSET", "attention_config", "paged_attention", "paged_attention_guarded",
    "read_violations", "write_kv", "write_kv_guarded", "write_tiles",
]
