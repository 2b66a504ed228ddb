#!/usr/bin/env python
"""Inductor reinplaces index_put_(accumulate=True) into its own source: wrong values (torch 2.13.0).

    python repro.py        exit 1: reproduces; 0: compiled matches eager (fixed); 2: cannot run

torch only (Inductor's CPU backend, so a C++ compiler).  ``e = x + 1`` is cloned, and the clone
gets ``index_put_((idx,), e, accumulate=True)``: e is both the base (through the clone) and the
values.  Inductor drops the clone and accumulates into e's own buffer, so a row that is read as
a value after it was written is read already updated.  With 2 values, x = [0, 1] and
idx = [1, 0], eager gives [3, 3] (exact); compiled gives [4, 3].  index_copy_ in the same form
is checked too and reported.  See NOTE.md.
"""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch
except ImportError:  # pragma: no cover - the repro needs torch
    print("cannot run: pip install torch")
    sys.exit(2)

IDX = [1, 0]  # row 1 is written first (from e[0]), then read as the value for row 0


def index_put_accumulate(x):
    e = x + 1  # a graph intermediate: Inductor may reuse its buffer
    c = e.clone()
    c.index_put_((torch.tensor(IDX),), e, accumulate=True)
    return c


def index_copy(x):
    e = x + 1
    c = e.clone()
    c.index_copy_(0, torch.tensor(IDX), e)
    return c


def check(fn, x, exact):
    """(eager, compiled, eager_is_exact) for fn on x; compiled in the same dtype as eager."""
    torch._dynamo.reset()
    eager = fn(x)
    compiled = torch.compile(fn, backend="inductor", fullgraph=True)(x)
    return eager, compiled, eager.tolist() == exact


def main() -> int:
    print(f"torch {torch.__version__}")
    x = torch.tensor([0.0, 1.0])  # float32; every value is a small integer, so all sums are exact
    try:
        put = check(index_put_accumulate, x, [3.0, 3.0])
        copy = check(index_copy, x, [2.0, 1.0])
    except Exception as exc:  # noqa: BLE001 - a compile failure is not this defect
        print(f"cannot run: {type(exc).__name__}: {str(exc)[:300]}")
        return 2
    wrong = []
    for name, (eager, compiled, exact) in (("index_put_(accumulate=True)", put),
                                            ("index_copy_", copy)):
        same = torch.equal(eager, compiled)
        print(f"{name}: x {x.tolist()}, idx {IDX}: eager {eager.tolist()}"
              f"{'' if exact else ' (eager is not the exact answer!)'}, "
              f"compiled {compiled.tolist()}: {'same' if same else 'DIFFERENT'}")
        if not same:
            wrong.append(name)
    if "index_put_(accumulate=True)" in wrong:
        eager, compiled, _ = put
        print(f"REPRODUCES: index_put_(accumulate=True) of e into e.clone(): eager "
              f"{eager.tolist()}, compiled {compiled.tolist()}"
              + ("; index_copy_ too" if "index_copy_" in wrong else ""))
        return 1
    print("compiled matches eager for index_put_: fixed in this version"
          + ("" if not wrong else f" (but still different: {', '.join(wrong)})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
