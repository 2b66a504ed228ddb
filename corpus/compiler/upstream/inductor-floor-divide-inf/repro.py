#!/usr/bin/env python
"""Inductor (CPU) floor_divide disagrees with eager when the dividend is infinite.

    python repro.py        exit 1: reproduces; 0: compiled matches eager; 2: cannot run

torch and a C++ compiler only (Inductor's CPU backend).  Eager ``torch.floor_divide(inf, -2.81)``
is NaN, as Python's ``inf // -2.81`` and ``numpy.floor_divide`` are; the compiled graph returns
-inf.  The second element, ``-5 // inf``, is a control of the same lowering: eager -1 (as Python),
compiled -0.  See NOTE.md.
"""

import math
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch
except ImportError:  # pragma: no cover - the repro needs torch
    print("cannot run: pip install torch")
    sys.exit(2)


def graph(a, b):
    return torch.floor_divide(a, b)


def main() -> int:
    print(f"torch {torch.__version__}")
    a = torch.tensor([math.inf, -5.0], dtype=torch.bfloat16)
    b = torch.tensor([-2.81, math.inf], dtype=torch.bfloat16)
    want = graph(a, b)  # eager, same dtype
    try:
        got = torch.compile(graph, backend="inductor", fullgraph=True)(a, b)
    except Exception as exc:  # noqa: BLE001 - no compiler here is not this defect
        print(f"cannot run: the compile failed: {type(exc).__name__}: {str(exc)[:300]}")
        return 2
    python = [x // y for x, y in zip(a.float().tolist(), b.float().tolist())]
    print("a:        ", a.float().tolist())
    print("b:        ", b.float().tolist())
    print("python // ", python)
    print("eager:    ", want.float().tolist())
    print("compiled: ", got.float().tolist())
    # same value, same NaN-ness, same sign (so -0.0 vs -1.0 and nan vs -inf both count)
    wrong = [i for i in range(a.numel())
             if not (torch.equal(got[i:i + 1], want[i:i + 1])
                     or (math.isnan(got[i].item()) and math.isnan(want[i].item())))]
    if wrong:
        print("REPRODUCES: compiled floor_divide differs from eager (bfloat16) at "
              + ", ".join(f"{a[i].item()} // {b[i].item():.4g}: eager {want[i].item()}, "
                          f"compiled {got[i].item()}" for i in wrong))
        return 1
    print("compiled matches eager: fixed in this version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
