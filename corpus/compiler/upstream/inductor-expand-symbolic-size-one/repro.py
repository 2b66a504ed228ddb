#!/usr/bin/env python
"""Inductor, dynamic shapes: a broadcast of a *computed* tensor whose size-1 dim is a symbolic
expression equal to 1 only at run time is dropped (torch 2.13.0+cpu).

    python repro.py        exit 1: reproduces; 0: fixed; 2: cannot run

torch only.  ``x[:, 1::2]`` of a ``(4, 3)`` tensor has shape ``(4, 1)``; under
``torch.compile(dynamic=True)`` its size is ``s//2`` (``s`` = the symbolic 3), not the literal 1.
``* 2`` (float32) or the float16 upcast inside ``clamp`` makes it a Pointwise, and
``ExpandView.make_reindexer`` (torch/_inductor/ir.py) tests ``actual[i] == 1`` structurally, so
the broadcast dim keeps the output's loop index: element ``[i, j]`` reads ``x.flat[3i + 1 + 2j]``
instead of ``x.flat[3i + 1]``.  Wrong values here; reads far out of bounds (SIGSEGV) for large
shapes.  Only rows 0..2 are compared: their wrong reads stay inside the buffer, whereas the last
row reads past its end (garbage).  ``dynamic=False`` and eager are correct.  See NOTE.md.
"""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch
except ImportError:  # pragma: no cover - the repro needs torch
    print("cannot run: pip install torch")
    sys.exit(2)


def add_slice(x):
    return x + x[:, 1::2] * 2  # (4, 3) + (4, 1): the Pointwise "x[:, 1::2] * 2" is broadcast


def clamp_slice(a, lo):  # the fuzzkit case: float16 clamp whose max is a (4, 1) strided slice
    c = a.clone()
    v = c[:, 1::2]  # a view taken before the in-place add, so it sees it
    c.add_(a)
    return torch.clamp(a, min=lo, max=v)


def compare(name, fn, args, dynamic=True):
    """(rows 0..2 of eager, of compiled, equal?) in the inputs' dtype."""
    eager = fn(*args)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="inductor", dynamic=dynamic, fullgraph=True)(*args)
    eager, got = eager[:3], got[:3]  # the last row's wrong reads are past the buffer's end
    same = torch.equal(eager, got)
    print(f"{name:34s} eager row 0 {eager[0].tolist()}, compiled row 0 {got[0].tolist()}"
          f"{'' if same else '  <-- differs'}")
    return same


def main() -> int:
    print(f"torch {torch.__version__}")
    x = torch.arange(12.0).reshape(4, 3)
    a = torch.tensor([[-1.0, 3.0, 2.0]] * 4, dtype=torch.float16)
    lo = torch.zeros_like(a)
    try:
        ok_add = compare("x + x[:,1::2]*2 float32 dynamic", add_slice, (x,))
        ok_clamp = compare("clamp(a, 0, (a+a)[:,1::2]) f16 dyn", clamp_slice, (a, lo))
        ok_static = compare("x + x[:,1::2]*2 float32 static", add_slice, (x,), dynamic=False)
    except Exception as exc:  # noqa: BLE001 - no C++ compiler, unsupported platform, ...
        print(f"cannot run: {type(exc).__name__}: {str(exc)[:300]}")
        return 2
    print(f"control: dynamic=False matches eager: {ok_static}")
    if not (ok_add and ok_clamp):
        print("REPRODUCES: with dynamic=True Inductor drops the broadcast of a computed (4, 1) "
              "operand whose size is s//2 (1 only at run time): "
              + ", ".join(n for n, ok in (("float32 add", ok_add), ("float16 clamp", ok_clamp))
                          if not ok))
        return 1
    print("does not reproduce: compiled matches eager (fixed in this version?)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
