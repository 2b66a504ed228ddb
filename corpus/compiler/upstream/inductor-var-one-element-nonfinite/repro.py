#!/usr/bin/env python
"""Inductor: var/std over a reduction of exactly one element is 0 for an inf/NaN element (eager: NaN).

    python repro.py        exit 1: reproduces; 0: compiled matches eager; 2: cannot run

torch and a C++ compiler only (Inductor's CPU backend).  ``torch.var(x, dim=0, correction=0)``
of a 1-element tensor is ``(x - mean)**2 / 1`` with ``mean = x``: 0 for a finite x, NaN for inf
or NaN (``inf - inf``), as in NumPy (``np.var([inf])`` is NaN).  Inductor's
``WelfordReduction.create`` (``torch/_inductor/ir.py``) handles a reduction of one element with
``return copy(x), const(0), const(1)``: the sum of squared deviations is the constant 0 whatever
x is, and the kernel does not even read the input.  So the compiled graph returns 0.0 for
``[inf]`` and ``[nan]``.  ``[1.0]`` is the control (0.0 both ways).  Each of float32 and
bfloat16 is compiled static and ``dynamic=True`` (a size-1 dimension is specialized either way).
See NOTE.md.
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


def graph(x):
    return torch.var(x, dim=0, correction=0)


def same(want, got):
    """Equal values, NaN where the other has NaN."""
    return (torch.equal(torch.isnan(want), torch.isnan(got))
            and torch.equal(want.nan_to_num(), got.nan_to_num()))


def main() -> int:
    print(f"torch {torch.__version__}")
    wrong, controls = [], []
    for dtype in (torch.float32, torch.bfloat16):
        for dynamic in (False, True):
            torch._dynamo.reset()
            compiled = torch.compile(graph, backend="inductor", fullgraph=True, dynamic=dynamic)
            for value in (math.nan, math.inf, 1.0):
                x = torch.tensor([value], dtype=dtype)
                want = graph(x)  # eager, same dtype
                try:
                    got = compiled(x)
                except Exception as exc:  # noqa: BLE001 - no compiler here is not this defect
                    print(f"cannot run: the compile failed: {type(exc).__name__}: {str(exc)[:300]}")
                    return 2
                line = (f"{str(dtype):15s} dynamic={dynamic!s:5s} var([{value}], correction=0): "
                        f"eager {want.item()}, compiled {got.item()}")
                print(line)
                if not same(want, got):
                    (controls if math.isfinite(value) else wrong).append(line)
    if controls:
        print("finite control differs too (not this defect?): " + "; ".join(controls))
    if wrong:
        print(f"REPRODUCES: compiled var of a 1-element inf/NaN tensor is 0.0, eager NaN "
              f"({len(wrong)} of 8 non-finite runs)")
        return 1
    print("compiled matches eager: fixed in this version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
