"""Scute decode cost: one ``scute_kernel`` launch over a batch mixing every adapter method vs the
pure-LoRA baseline ``lora_baseline.lora_kernel`` with the same number of adapters.

    OMP_NUM_THREADS=1 python benchmarks/scute.py [--k 4096] [--nout 4096] [--adapters 14]
        [--batches 16,64,256] [--ranks 8,16,64] [--dtype fp16]

Per (batch size, rank) it times, in decode mode (one token per request, requests spread over
``S`` adapters, tiles = per-adapter runs of single-token requests, ``BLOCK_M`` 16):

* ``lora``        -- ``lora_kernel``, S pure-LoRA adapters (the baseline);
* ``scute-lora``  -- ``scute_kernel`` on the same S pure-LoRA adapters (the price of generality);
* ``scute-mixed`` -- ``scute_kernel`` on S adapters cycling through LoRA, DoRA, VeRA, OFT
  (block 32), BOFT (PEFT's default single butterfly factor: a block-diagonal rotation, block 32,
  with ``boft_s``), IA3 k/v and IA3 feed-forward, all ranks ``r`` where a low-rank path exists;

and reports milliseconds and the overhead of ``scute-mixed`` over ``lora`` (the Scute paper
reports +5 % to +17 %).  Every configuration is first checked against a float64 slot-form
reference on its first ``CHECK_ROWS`` tokens (exit status 1 beyond the forward-error bound of
``tests/test_scute_kernels.py``).  GPU timing: ``triton.testing.do_bench`` (CUDA events).

Without a GPU the kernels run under ``TRITON_INTERPRET=1``: the shapes shrink (K = Nout = 64,
batches 16 and 32, rank 8) and only correctness is reported -- the interpreter's milliseconds
say nothing about a GPU (``scripts/gpu_check.sh`` runs it in both modes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("OMP_NUM_THREADS", "1")

from fuzzkit import triton_support  # noqa: E402

triton_support.prepare()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

from fuzzkit.targets.scute import kernels, lora_baseline  # noqa: E402

CHECK_ROWS = 8
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
U_STORE = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -7}
MIXED = ("lora", "dora", "vera", "oft", "boft", "ia3-kv", "ia3-ff")
BLOCK = 32  # OFT / BOFT block size


def _orthogonal_blocks(k: int, bs: int, gen: torch.Generator) -> torch.Tensor:
    """float64 (K, K) block-diagonal with random orthogonal bs x bs blocks."""
    q, _ = torch.linalg.qr(torch.randn(k // bs, bs, bs, generator=gen, dtype=torch.float64))
    return torch.block_diag(*q)


def build(methods: list[str], k: int, nout: int, r: int, dtype: torch.dtype, device: str,
          seed: int) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(params, w0, b0, scale)``: slot tensors for ``methods`` (one slot each), base weights;
    ``scale`` is each slot's ``o`` for LoRA slots (used by the ``lora`` launcher)."""
    gen = torch.Generator().manual_seed(seed)
    s_count = len(methods)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    w0 = (randn(nout, k) / k ** 0.5).to(dtype)
    b0 = (0.5 * randn(nout)).float()
    t_kind = torch.zeros(s_count, dtype=torch.int32)
    t_block = torch.zeros(s_count, dtype=torch.int32)
    t_diag = torch.ones(s_count, k, dtype=torch.float64)
    t_mat = torch.zeros(s_count, k, k, dtype=dtype)
    s = torch.ones(s_count, nout, dtype=torch.float64)
    b = b0.double().repeat(s_count, 1)
    rank = torch.zeros(s_count, dtype=torch.int32)
    a = torch.zeros(s_count, r, k, dtype=torch.float64)
    bb = torch.zeros(s_count, nout, r, dtype=torch.float64)
    m = torch.zeros(s_count, r, dtype=torch.float64)
    o = torch.zeros(s_count, nout, dtype=torch.float64)
    scale = torch.zeros(s_count, dtype=torch.float32)
    for i, method in enumerate(methods):
        if method in ("lora", "dora", "vera"):
            rank[i] = r
            a[i] = randn(r, k) / k ** 0.5
            bb[i] = randn(nout, r) / r ** 0.5
            m[i] = 1.0 if method != "vera" else 1.0 + 0.5 * randn(r)
            o[i] = 2.0 if method != "vera" else 0.5 * randn(nout)
            if method == "dora":
                s[i] = 1.0 + 0.1 * randn(nout)
                o[i] = 2.0 * s[i]
            scale[i] = 2.0
        elif method in ("oft", "boft"):
            t_kind[i], t_block[i] = kernels.T_BLOCK, BLOCK
            t_mat[i] = _orthogonal_blocks(k, BLOCK, gen).to(dtype)
            if method == "boft":
                s[i] = 1.0 + 0.1 * randn(nout)
        elif method == "ia3-kv":
            s[i] = 1.0 + 0.5 * randn(nout)
            b[i] = b0.double() * s[i]
        elif method == "ia3-ff":
            t_kind[i] = kernels.T_DIAGONAL
            t_diag[i] = 1.0 + 0.5 * randn(k)
        else:
            raise ValueError(method)
    params = {"t_kind": t_kind, "t_block": t_block, "t_diag": t_diag.to(dtype), "t_mat": t_mat,
              "s": s.float(), "b": b.float(), "rank": rank, "A": a.to(dtype), "m": m.float(),
              "B": bb.to(dtype), "o": o.float()}
    return ({n: v.contiguous().to(device) for n, v in params.items()}, w0.to(device),
            b0.to(device), scale.to(device))


def reference(x: torch.Tensor, w0: torch.Tensor, b0: torch.Tensor, slots: np.ndarray,
              p: dict[str, torch.Tensor], rows: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``(y, M)`` of the slot form for the first ``rows`` tokens (params as stored)."""
    ys, ms = [], []
    w = w0.double().cpu()
    for t in range(rows):
        xt = x[t].double().cpu()
        a = int(slots[t])
        if a < 0:
            ys.append(xt @ w.T + b0.double().cpu())
            ms.append(xt.abs() @ w.abs().T + b0.double().abs().cpu())
            continue
        g = {n: v[a].double().cpu() for n, v in p.items() if v.ndim >= 2 and n != "t_mat"}
        tm = p["t_mat"][a].double().cpu() if int(p["t_kind"][a]) >= 2 else \
            torch.diag(g["t_diag"])
        lo = ((xt @ g["A"].T) * g["m"]) @ g["B"].T
        lo_abs = ((xt.abs() @ g["A"].abs().T) * g["m"].abs()) @ g["B"].abs().T
        ys.append(((xt @ tm) @ w.T) * g["s"] + g["b"] + lo * g["o"])
        ms.append(((xt.abs() @ tm.abs()) @ w.abs().T) * g["s"].abs() + g["b"].abs()
                  + lo_abs * g["o"].abs())
    return torch.stack(ys).numpy(), torch.stack(ms).numpy()


def within(y: torch.Tensor, ref: np.ndarray, mag: np.ndarray, dtype: str, k: int, r: int
           ) -> tuple[bool, float, float]:
    """(ok, max abs error, max error / bound) on the checked rows."""
    u = U_STORE[dtype]
    got = y[: ref.shape[0]].double().cpu().numpy()
    err = np.abs(got - ref)
    bound = ((2 * k + r + 8) * 2.0 ** -24 + 2 * u) * mag + u * np.abs(ref) + 1e-30
    ratio = float((err / bound).max())
    return ratio <= 1.0, float(err.max()), ratio


def timed(fn: Callable[[], Any], gpu: bool) -> float:
    fn()  # warm-up (compile)
    if gpu:
        return float(triton.testing.do_bench(fn))
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def main() -> int:
    gpu = not triton_support.interpreted() and triton_support.gpu_available()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=4096 if gpu else 64)
    ap.add_argument("--nout", type=int, default=4096 if gpu else 64)
    ap.add_argument("--adapters", type=int, default=14 if gpu else 7)
    ap.add_argument("--batches", default="16,64,256" if gpu else "16,32")
    ap.add_argument("--ranks", default="8,16,64" if gpu else "8")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp16")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    dtype_name = DTYPES[args.dtype]
    dtype = kernels.TORCH_DTYPES[dtype_name]
    device = triton_support.device()
    k, nout, n_adapters = args.k, args.nout, args.adapters
    mode = "native CUDA on " + torch.cuda.get_device_name(0) if gpu else \
        "Triton interpreter (no GPU): correctness only, timings are not GPU figures"
    print(f"scute benchmark | {mode} | K={k} Nout={nout} S={n_adapters} {dtype_name} decode")
    mixed = [MIXED[i % len(MIXED)] for i in range(n_adapters)]
    failures = 0
    rows_out = []
    for r in (int(v) for v in args.ranks.split(",")):
        p_mixed, w0, b0, _ = build(mixed, k, nout, r, dtype, device, args.seed)
        # same seed: the same W0 / b0 (drawn first), so the slot form's b equals lora's b0
        p_lora, _, _, scale = build(["lora"] * n_adapters, k, nout, r, dtype, device, args.seed)
        for batch in (int(v) for v in args.batches.split(",")):
            rng = np.random.default_rng(args.seed + batch)
            slots = rng.permutation(np.arange(batch) % n_adapters).astype(np.int64)
            x = torch.randn(batch, k, generator=torch.Generator().manual_seed(batch)
                            ).to(dtype).to(device)
            cases = {
                "lora": (lambda: lora_baseline.lora(x, w0, b0, slots, p_lora["A"], p_lora["B"],
                                                    scale, mode="decode"), p_lora),
                "scute-lora": (lambda: kernels.scute(x, w0, b0, slots, p_lora, mode="decode"),
                               p_lora),
                "scute-mixed": (lambda: kernels.scute(x, w0, b0, slots, p_mixed,
                                                      mode="decode"), p_mixed),
            }
            ms: dict[str, float] = {}
            for name, (fn, params) in cases.items():
                rows = min(CHECK_ROWS, batch)
                ref, mag = reference(x, w0, b0, slots, params, rows)
                ok, err, ratio = within(fn(), ref, mag, dtype_name, k, r)
                if not ok:
                    failures += 1
                    print(f"  FAIL {name} batch={batch} r={r}: max err {err:.3g} "
                          f"({ratio:.3g} x bound)")
                ms[name] = timed(fn, gpu)
                if not gpu:
                    print(f"  {name:12s} batch={batch:4d} r={r:3d}: max err {err:.3g} "
                          f"({ratio:.3f} x bound) {'ok' if ok else 'FAIL'}")
            rows_out.append((batch, r, ms))
    if gpu:
        print(f"{'batch':>6s} {'rank':>5s} {'lora ms':>9s} {'scute-lora':>11s} "
              f"{'scute-mixed':>12s} {'overhead':>9s}")
        for batch, r, ms in rows_out:
            over = 100.0 * (ms["scute-mixed"] / ms["lora"] - 1.0)
            print(f"{batch:6d} {r:5d} {ms['lora']:9.4f} {ms['scute-lora']:11.4f} "
                  f"{ms['scute-mixed']:12.4f} {over:+8.1f}%")
        print("paper: scute-mixed +5 % to +17 % over pure LoRA")
    else:
        print("no GPU: interpreter-mode correctness only (timings omitted: they measure the "
              "interpreter, not a GPU)")
    print("scute benchmark:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
