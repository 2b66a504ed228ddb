#!/usr/bin/env python
"""Inductor folds floating ``x * 0`` (int literal 0) to a constant 0, so NaN/inf times 0 is 0.

    python repro.py        exit 1: reproduces; 0: compiled matches eager; 2: cannot run

torch and a C++ compiler only (Inductor's CPU backend).  ``F.softshrink`` decomposes to
``where(abs(a) > lambd, a - sign(a) * lambd, a * 0)``; for a NaN input the result is meant to be
``a * 0`` = NaN.  Inductor's joint-graph peephole (``UniformValueConstantFolder.
_add_peephole_patterns`` in ``torch/_inductor/fx_passes/joint_graph.py``) replaces every
``aten.mul(x, 0)`` with a constant 0 whatever x is, so compiled ``softshrink(NaN)`` is 0.0 (eager:
NaN).  The second output, the bare ``t * 0``, shows the rewrite itself: eager NaN for NaN and
±inf, compiled 0.  The finite elements are controls (same results both ways).  See NOTE.md.
"""

import math
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - the repro needs torch
    print("cannot run: pip install torch")
    sys.exit(2)


def graph(t):
    return F.softshrink(t, 0.5), t * 0


def same(want, got):
    """Equal values, NaN where the other has NaN."""
    return (torch.equal(torch.isnan(want), torch.isnan(got))
            and torch.equal(want.nan_to_num(), got.nan_to_num()))


def main() -> int:
    print(f"torch {torch.__version__}")
    t = torch.tensor([math.nan, math.inf, 0.25, 2.0], dtype=torch.float32)
    want = graph(t)  # eager, same dtype
    try:
        got = torch.compile(graph, backend="inductor", fullgraph=True)(t)
    except Exception as exc:  # noqa: BLE001 - no compiler here is not this defect
        print(f"cannot run: the compile failed: {type(exc).__name__}: {str(exc)[:300]}")
        return 2
    print("input:              ", t.tolist())
    wrong = []
    for name, w, g in zip(("softshrink(t, 0.5)", "t * 0"), want, got):
        print(f"{name:19s} eager:    {w.tolist()}")
        print(f"{name:19s} compiled: {g.tolist()}")
        if not same(w, g):
            wrong.append(f"{name}: eager {w.tolist()}, compiled {g.tolist()}")
    if wrong:
        print("REPRODUCES: compiled float32 graph differs from eager (NaN/inf times int 0 "
              "folded to 0): " + "; ".join(wrong))
        return 1
    print("compiled matches eager: fixed in this version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
