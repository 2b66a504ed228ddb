"""Scoring throughput of turbo8/turbo16: Triton kernel vs NumPy vs torch matmul on decoded vectors.

    OMP_NUM_THREADS=1 python benchmarks/kernel_quant.py [--bits 8] [--m 256 --n 65536 --dim 512]

Prints query-vector pairs scored per second for

- ``triton``: :mod:`fuzzkit.targets.quant.kernels` -- codes stay 1-2 bytes per coordinate in memory and
  the centroids are gathered inside the kernel;
- ``numpy``: :func:`fuzzkit.targets.quant.numpy_impl.score` -- decodes (gathers) then one float32 matmul,
  on the CPU;
- ``torch``: ``(q @ decoded.T) * scale`` with the decoded float32 vectors materialized on the
  device beforehand (4 bytes per coordinate: the memory turbo8 saves; gather time not counted).

It says which mode it ran in.  On a GPU the Triton kernel runs natively; without one it runs under
``TRITON_INTERPRET=1``, where its figure measures the interpreter (NumPy per block op), not a
kernel -- useful only to see that the path works.  Shapes default to small under the interpreter
and large on CUDA.  No assertions: figures vary with the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("OMP_NUM_THREADS", "1")

from fuzzkit import triton_support  # noqa: E402

triton_support.prepare()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fuzzkit.targets.quant import kernels, numpy_impl, reference  # noqa: E402


def timed(fn: Callable[[], object], sync: Callable[[], None], min_seconds: float = 0.5,
          max_reps: int = 200) -> float:
    """Seconds per call: one warm-up, then repeat until ``min_seconds`` have passed."""
    fn()
    sync()
    reps, start = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds or reps >= max_reps:
            return elapsed / reps


def size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError


def main() -> None:
    interpreted = triton_support.device() == "cpu"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, choices=reference.BITS, default=8)
    parser.add_argument("--m", type=int, default=16 if interpreted else 256, help="queries")
    parser.add_argument("--n", type=int, default=512 if interpreted else 65536, help="vectors")
    parser.add_argument("--dim", type=int, default=96 if interpreted else 512)
    parser.add_argument("--numpy-n", type=int, default=None,
                        help="vectors for the NumPy run (default: n, capped at 16384)")
    args = parser.parse_args()

    device = triton_support.device()
    mode = ("Triton interpreter (TRITON_INTERPRET=1, CPU) -- kernel figures measure the "
            "interpreter" if interpreted else f"native CUDA ({torch.cuda.get_device_name()})")
    tiles = kernels.tile_configs.current()
    print(f"mode: {mode}")
    print(f"shape: m={args.m} queries x n={args.n} vectors x D={args.dim}, turbo{args.bits}, "
          f"blocks {tiles.block_m}x{tiles.block_n}x{tiles.block_d} (as launched in this mode)")

    rng = np.random.default_rng(0)
    book = reference.codebook("lloyd_max", args.bits)
    dtype = reference.codes_dtype(args.bits)
    codes = rng.integers(0, book.levels, (args.n, args.dim)).astype(dtype)
    scales = rng.uniform(0.5, 2.0, args.n).astype(np.float32)
    queries = rng.standard_normal((args.m, args.dim)).astype(np.float32)
    pairs = args.m * args.n

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    ops = kernels.to_device(queries, codes, scales, book.centroids)
    out = torch.empty((args.m, args.n), dtype=torch.float32, device=device)
    t_triton = timed(lambda: kernels.launch(ops, out), sync, max_reps=20 if interpreted else 200)

    numpy_n = args.numpy_n or min(args.n, 16384)
    t_numpy = timed(lambda: numpy_impl.score(queries, codes[:numpy_n], scales[:numpy_n],
                                             book.centroids), lambda: None, max_reps=50)

    q_t = torch.from_numpy(queries).to(device)
    decoded = torch.from_numpy(book.centroids.astype(np.float32)).to(device)[
        torch.from_numpy(codes.astype(np.int64)).to(device)]
    s_t = torch.from_numpy(scales).to(device)
    t_torch = timed(lambda: (q_t @ decoded.T) * s_t, sync)

    # Cross-check once so a fast but wrong kernel is not celebrated.
    got = kernels.launch(ops, kernels.empty_scores(ops)).cpu().numpy()
    want = ((q_t @ decoded.T) * s_t).cpu().numpy()
    worst = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))

    print(f"{'implementation':<12} {'pairs/s':>14} {'ms/call':>10}  notes")
    print(f"{'triton':<12} {pairs / t_triton:>14.3e} {1e3 * t_triton:>10.3f}  {device}, "
          f"codes {size(codes.nbytes)}")
    print(f"{'numpy':<12} {args.m * numpy_n / t_numpy:>14.3e} {1e3 * t_numpy:>10.3f}  cpu, "
          f"n={numpy_n}, 1 thread, decode + matmul")
    print(f"{'torch':<12} {pairs / t_torch:>14.3e} {1e3 * t_torch:>10.3f}  {device}, decoded "
          f"float32 {size(decoded.numel() * 4)}, allow_tf32="
          f"{torch.backends.cuda.matmul.allow_tf32}")
    print(f"max relative difference triton vs torch: {worst:.2e}")


if __name__ == "__main__":
    main()
