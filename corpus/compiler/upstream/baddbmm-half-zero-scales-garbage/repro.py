#!/usr/bin/env python
"""CPU eager ``torch.baddbmm`` in float16/bfloat16 mishandles ``alpha=0`` (torch 2.13.0+cpu).

    python repro.py        exit 1: reproduces; 0: fixed; 2: cannot run

torch only.  Once the product is large enough for ATen's oneDNN (mkldnn) matmul path
(batch*m*k*n > 4096 here), ``alpha=0`` makes baddbmm ignore ``beta``: with ``beta=0.5`` it returns
``self`` unscaled (2 instead of 1, every element, every run), and with ``beta=0`` it returns
uninitialized memory (garbage or NaN, different each run) instead of zeros.  float32, small
products and ``torch.backends.mkldnn`` disabled are all correct.  ``torch.compile`` (Inductor)
calls the same ATen kernel and gives the same wrong values.  See NOTE.md.
"""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch
except ImportError:  # pragma: no cover - the repro needs torch
    print("cannot run: pip install torch")
    sys.exit(2)

SHAPE = (2, 16, 16)  # batch 2, 16x16 @ 16x16: 8192 multiply-adds, past the oneDNN threshold


def wrong(dtype, beta, mkldnn=True):
    """(elements wrong, elements, a few got values) of baddbmm(self, 1, 1, beta, alpha=0)."""
    self_value = 0.0 if beta == 0 else 2.0
    c = torch.full(SHAPE, self_value, dtype=dtype)
    a = torch.ones(SHAPE, dtype=dtype)
    with torch.backends.mkldnn.flags(enabled=mkldnn):
        got = torch.baddbmm(c, a, a, beta=beta, alpha=0.0)
    want = torch.full(SHAPE, beta * self_value, dtype=dtype)  # alpha=0: beta*self exactly
    bad = got != want  # NaN counts as wrong
    return int(bad.sum()), got.numel(), got[bad][:3].tolist()


def main() -> int:
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    reproduced = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for beta in (0.5, 0.0):
            n, total, sample = wrong(dtype, beta)
            name = f"{str(dtype)[6:]} alpha=0 beta={beta}"
            print(f"{name:32s}: {n:4d} of {total} wrong" + (f", e.g. {sample}" if n else ""))
            if n and dtype != torch.float32:
                reproduced.append(f"{name}: {n} of {total} wrong (e.g. {sample[0]!r})")
    n, total, _ = wrong(torch.float16, 0.5, mkldnn=False)
    print(f"control, float16 beta=0.5 with mkldnn disabled: {n} of {total} wrong")

    # torch.compile inherits it (Inductor calls the ATen kernel): same dtype, eager vs compiled
    try:
        def graph(c, x, y):
            return torch.baddbmm(c, x, y, beta=0.5, alpha=0.0)

        c = torch.full(SHAPE, 2.0, dtype=torch.float16)
        x = torch.ones(SHAPE, dtype=torch.float16)
        compiled = torch.compile(graph, backend="inductor", fullgraph=True)(c, x, x)
        eager = graph(c, x, x)
        print(f"compiled float16 beta=0.5: values {compiled.unique().tolist()} "
              f"(eager {eager.unique().tolist()}, expected [1.0]); "
              f"compiled == eager: {torch.equal(compiled, eager)}")
    except Exception as exc:  # informational only: the eager kernel decides the exit status
        print(f"compiled check did not run: {type(exc).__name__}: {str(exc)[:200]}")

    if reproduced:
        print("REPRODUCES: baddbmm with alpha=0 on the oneDNN path: " + "; ".join(reproduced))
        return 1
    print("does not reproduce: alpha=0 handled correctly (fixed in this version?)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
