"""Time the paged KV Triton kernels, plain vs KVGuard-guarded.

    OMP_NUM_THREADS=1 python benchmarks/kernel_paged_kv.py [--dtype bf16|fp16|fp32|fp64]
                                                           [--requests 64 ...]

Prints the time per launch of

- ``write_kv`` for a decode step (one token per request) and a prefill chunk;
- ``paged_attention`` for decode (``q_len = 1`` per request over its whole context) and for
  chunked prefill (a chunk of new tokens after a cached context);

each unguarded and guarded (:func:`~fuzzkit.targets.paged_kv.kernels.write_kv_guarded`,
:func:`~fuzzkit.targets.paged_kv.kernels.paged_attention_guarded`, with a correct shadow, so the checks
run and record nothing), and the ratio guarded / plain -- the device-side share of KVGuard's
overhead (the KVGuard paper reports +3.0 % / +7.4 % time per output token end to end on vLLM /
SGLang).

On CUDA the defaults are realistic (64 requests x 2048 tokens of context, 32 query heads, 8 kv
heads, head_dim 128, block size 16, bf16) and times come from CUDA events around each launch
(the guard's shadow reset between write launches is outside the timed region).  Without a GPU
the kernels run under ``TRITON_INTERPRET=1`` on tiny shapes, and the figures measure the
interpreter (NumPy per block operation), not a kernel -- useful only to see that every path
runs.  The figures carry no assertions (they vary with the machine), but every path's output is
checked once, after timing, at the benchmark's own shapes -- the native-CUDA correctness check
of the paged kernels at realistic sizes (``scripts/gpu_check.sh`` runs it for the default dtype
and for float64): ``write_kv`` must leave the written rows in their slots bit for bit, and
``paged_attention`` (plain and guarded) must match the float64 reference of
:mod:`fuzzkit.targets.paged_kv.attention_reference` on the last ``CHECK_QUERIES`` queries of the first
``CHECK_REQUESTS`` requests, with K/V gathered from the cache through the block table -- within
the derived bound for float32/float16/bfloat16 storage, and within
``FLOAT64_RELATIVE_TOLERANCE`` of ``sum_j p_j |v_j|`` for float64 storage (float64
accumulation; a float32 accumulator would be ~1e-7 off).  A mismatch exits with status 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("OMP_NUM_THREADS", "1")

from fuzzkit import triton_support  # noqa: E402

triton_support.prepare()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fuzzkit.targets.paged_kv import attention_reference, kernels  # noqa: E402

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16,
          "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp64": torch.float64, "float64": torch.float64}
#: Output check after timing: these many requests, their last these many query rows.
CHECK_REQUESTS = 2
CHECK_QUERIES = 8
#: float64 storage: allowed ``max |out - ref| / W``, ``W = sum_j p_j |v_j|``.  The float64 bound
#: of tests/test_paged_kv_kernels.py (kernel and reference error together) stays below ~1e-11
#: up to a few thousand keys at these score ranges; float32 accumulation lands near 1e-7.
FLOAT64_RELATIVE_TOLERANCE = 1e-10


def timed(fn: Callable[[], None], reset: Optional[Callable[[], None]], reps: int,
          cuda: bool) -> float:
    """Median seconds per call after one warm-up (which also compiles)."""
    if reset:
        reset()
    fn()
    if cuda:
        torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        if reset:
            reset()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


class Setup:
    """A pool holding ``requests`` sequences of ``context`` tokens in shuffled blocks."""

    def __init__(self, args: argparse.Namespace, device: str) -> None:
        gen = torch.Generator(device="cpu").manual_seed(0)
        self.args, self.device = args, device
        b, dtype = args.block_size, DTYPES[args.dtype]
        # one spare block per request for the decode token that does not fit
        self.blocks_per_request = -(-(args.context + 1) // b)
        self.num_blocks = 1 + args.requests * self.blocks_per_request
        order = torch.randperm(self.num_blocks - 1, generator=gen) + 1
        self.tables = order.view(args.requests, self.blocks_per_request).to(torch.int32)
        shape = (self.num_blocks, b, args.kv_heads, args.head_dim)
        self.dtype, self.gen = dtype, gen
        self.key_cache = self.tensor(*shape)
        self.value_cache = self.tensor(*shape)
        self.block_tables = self.tables.to(device)
        self.shadow = kernels.GuardShadow.create(self.num_blocks, b, args.requests,
                                                 capacity=1024, device=device)
        owner = torch.full((self.num_blocks,), -1, dtype=torch.int32)
        readable = torch.zeros((args.requests, self.num_blocks), dtype=torch.int8)
        slot_pos = torch.full((self.num_blocks * b,), -1, dtype=torch.int32)
        for r in range(args.requests):
            blocks = self.tables[r].long()
            owner[blocks] = r
            readable[r, blocks] = 1
            slots = self.slots(r, torch.arange(args.context + 1))
            slot_pos[slots] = torch.arange(args.context + 1, dtype=torch.int32)
        self.shadow.block_owner.copy_(owner)
        self.shadow.readable.copy_(readable)
        self.shadow.slot_pos.copy_(slot_pos)
        self.shadow.slot_written.copy_((slot_pos >= 0).to(torch.int32))

    def slots(self, r: int, positions: torch.Tensor) -> torch.Tensor:
        b = self.args.block_size
        return self.tables[r, positions // b].long() * b + positions % b

    def tensor(self, *shape: int) -> torch.Tensor:
        # float64 draws float64 values (float32-representable ones would hide a float32 round
        # trip); the other dtypes draw float32 as before.
        wide = torch.float64 if self.dtype == torch.float64 else torch.float32
        return torch.randn(*shape, generator=self.gen, dtype=wide).to(self.dtype).to(self.device)


def bench_write(setup: Setup, tokens: list[tuple[int, int]], reps: int,
                cuda: bool) -> tuple[float, float, str, bool]:
    """(plain, guarded) seconds for writing ``(request, position)`` tokens, and the output
    check: the slots hold the written rows bit for bit."""
    args, device = setup.args, setup.device
    key = setup.tensor(len(tokens), args.kv_heads, args.head_dim)
    value = setup.tensor(len(tokens), args.kv_heads, args.head_dim)
    slot_list = [int(setup.slots(r, torch.tensor([p]))[0]) for r, p in tokens]
    slots = torch.tensor(slot_list, dtype=torch.int64, device=device)
    token_request = torch.tensor([r for r, _ in tokens], dtype=torch.int32, device=device)
    token_pos = torch.tensor([p for _, p in tokens], dtype=torch.int32, device=device)
    shadow = setup.shadow

    def reset() -> None:  # these slots count as unwritten before each guarded write
        shadow.slot_written[slots] = 0

    plain = timed(lambda: kernels.write_kv(key, value, setup.key_cache, setup.value_cache,
                                           slots), None, reps, cuda)
    guarded = timed(lambda: kernels.write_kv_guarded(
        key, value, setup.key_cache, setup.value_cache, slots, token_request=token_request,
        token_pos=token_pos, shadow=shadow), reset, reps, cuda)
    shadow.slot_written[slots] = 1
    ok = (torch.equal(setup.key_cache.flatten(0, 1)[slots], key)
          and torch.equal(setup.value_cache.flatten(0, 1)[slots], value))
    return plain, guarded, "bitwise" if ok else "WRONG ROWS", ok


def check_attention(setup: Setup, query: torch.Tensor, outs: list[torch.Tensor], requests: int,
                    seq_len: int, q_len: int) -> tuple[str, bool]:
    """Check ``outs`` (plain, guarded) against the float64 reference on the last
    ``CHECK_QUERIES`` query rows of the first ``CHECK_REQUESTS`` requests."""
    rows = min(q_len, CHECK_QUERIES)
    key_slots = setup.key_cache.flatten(0, 1)
    value_slots = setup.value_cache.flatten(0, 1)
    keys, values, picked = [], [], []
    for r in range(min(requests, CHECK_REQUESTS)):
        slots = setup.slots(r, torch.arange(seq_len)).to(key_slots.device)
        keys.append(key_slots[slots].double().cpu().numpy())
        values.append(value_slots[slots].double().cpu().numpy())
        picked.extend(range(r * q_len + q_len - rows, (r + 1) * q_len))
    index = torch.tensor(picked, device=query.device)
    ref = attention_reference.reference_attention(
        keys, values, query[index].double().cpu().numpy(),
        list(range(0, rows * len(keys) + 1, rows)))
    worst, ok = 0.0, True
    for out in outs:
        got = out[index].cpu()
        relative = float((np.abs(got.double().numpy() - ref.out) / ref.weight).max())
        worst = max(worst, relative)
        if setup.dtype == torch.float64:
            ok = ok and relative <= FLOAT64_RELATIVE_TOLERANCE
        else:
            ok = ok and ref.check(got, setup.dtype) is None
    return f"{'ok' if ok else 'MISMATCH'} {worst:.1e}", ok


def bench_attention(setup: Setup, requests: int, seq_len: int, q_len: int, reps: int,
                    cuda: bool) -> tuple[float, float, str, bool]:
    """(plain, guarded) seconds for ``requests`` rows attending ``seq_len`` keys each with the
    last ``q_len`` positions as queries, and the output check (:func:`check_attention`)."""
    args, device = setup.args, setup.device
    query = setup.tensor(requests * q_len, args.heads, args.head_dim)
    out = torch.empty_like(query)
    seq_lens = torch.full((requests,), seq_len, dtype=torch.int32, device=device)
    qsl = torch.arange(0, requests * q_len + 1, q_len, dtype=torch.int32, device=device)
    tables = setup.block_tables[:requests]
    ids = torch.arange(requests, dtype=torch.int32, device=device)
    common = dict(max_query_len=q_len)
    plain = timed(lambda: kernels.paged_attention(
        query, setup.key_cache, setup.value_cache, tables, seq_lens, qsl, out, **common),
        None, reps, cuda)
    guarded = timed(lambda: kernels.paged_attention_guarded(
        query, setup.key_cache, setup.value_cache, tables, seq_lens, qsl, out,
        request_ids=ids, shadow=setup.shadow, **common), None, reps, cuda)
    guarded_out = out.clone()
    out.fill_(float("nan"))
    kernels.paged_attention(query, setup.key_cache, setup.value_cache, tables, seq_lens, qsl, out,
                            **common)
    return (plain, guarded, *check_attention(setup, query, [out, guarded_out], requests, seq_len,
                                             q_len))


def main() -> None:
    cuda = triton_support.device() == "cuda"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16" if cuda else "fp32")
    parser.add_argument("--requests", type=int, default=64 if cuda else 4)
    parser.add_argument("--context", type=int, default=2048 if cuda else 48,
                        help="tokens already in the cache per request")
    parser.add_argument("--heads", type=int, default=32 if cuda else 4)
    parser.add_argument("--kv-heads", type=int, default=8 if cuda else 2)
    parser.add_argument("--head-dim", type=int, default=128 if cuda else 32)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--prefill-requests", type=int, default=8 if cuda else 2)
    parser.add_argument("--prefill-chunk", type=int, default=512 if cuda else 16,
                        help="new tokens per request in the chunked-prefill case")
    parser.add_argument("--reps", type=int, default=50 if cuda else 3)
    args = parser.parse_args()
    if args.prefill_chunk > args.context or args.prefill_requests > args.requests:
        parser.error("need --prefill-chunk <= --context and --prefill-requests <= --requests")

    device = triton_support.device()
    mode = ("Triton interpreter (TRITON_INTERPRET=1, CPU) -- these times measure the "
            "interpreter, not a kernel" if not cuda else
            f"native CUDA ({torch.cuda.get_device_name()})")
    print(f"mode: {mode}")
    print(f"shapes: {args.requests} requests x {args.context} context, {args.heads} heads / "
          f"{args.kv_heads} kv heads, head_dim {args.head_dim}, block {args.block_size}, "
          f"{args.dtype}; prefill {args.prefill_requests} x {args.prefill_chunk} new tokens")
    setup = Setup(args, device)
    rows = []
    decode_tokens = [(r, args.context) for r in range(args.requests)]
    rows.append(("write_kv decode", f"{len(decode_tokens)} tokens",
                 *bench_write(setup, decode_tokens, args.reps, cuda)))
    prefill_tokens = [(r, p) for r in range(args.prefill_requests)
                      for p in range(args.context - args.prefill_chunk, args.context)]
    rows.append(("write_kv prefill", f"{len(prefill_tokens)} tokens",
                 *bench_write(setup, prefill_tokens, args.reps, cuda)))
    rows.append(("paged_attention decode", f"{args.requests} x q1 / {args.context + 1} keys",
                 *bench_attention(setup, args.requests, args.context + 1, 1, args.reps, cuda)))
    rows.append(("paged_attention prefill",
                 f"{args.prefill_requests} x q{args.prefill_chunk} / {args.context} keys",
                 *bench_attention(setup, args.prefill_requests, args.context,
                                  args.prefill_chunk, args.reps, cuda)))
    unit, scale = ("us", 1e6) if cuda else ("ms", 1e3)
    print(f"{'kernel':<26}{'shape':<30}{'plain ' + unit:>12}{'guarded ' + unit:>14}"
          f"{'ratio':>8}  check (max |err| / W)")
    for name, shape, plain, guarded, verdict, _ in rows:
        print(f"{name:<26}{shape:<30}{plain * scale:>12.1f}{guarded * scale:>14.1f}"
              f"{guarded / plain:>8.3f}  {verdict}")
    found = kernels.read_violations(setup.shadow)
    print(f"guard violations recorded on these correct launches: {len(found)}")
    failed = [name for name, *_, ok in rows if not ok]
    if failed:
        print(f"output check FAILED ({args.dtype}): {', '.join(failed)}")
        sys.exit(1)
    print(f"output check passed ({args.dtype}): write_kv bitwise, paged_attention plain and "
          f"guarded against the float64 reference")


if __name__ == "__main__":
    main()
