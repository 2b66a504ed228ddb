#!/usr/bin/env python
"""Inductor's CPU C++ backend fails to compile two identical float16 reductions of one tensor.

    python repro.py        exit 1: reproduces; 0: compiles and matches eager; 2: cannot run

torch and a C++ compiler only (Inductor's CPU backend).  See NOTE.md.
"""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch
except ImportError:  # pragma: no cover - the repro needs torch
    print("cannot run: pip install torch")
    sys.exit(2)


def graph(x):
    return x.sum(0), x.sum(0)


def main() -> int:
    print(f"torch {torch.__version__}")
    x = torch.arange(16.0).reshape(8, 2).half()  # 16 values; 4 rows of 2 compile fine
    compiled = torch.compile(graph, backend="inductor", fullgraph=True)
    try:
        got = compiled(x)
    except Exception as exc:  # Inductor wraps the compiler's error in InductorError
        text = f"{type(exc).__name__}: {exc}"
        if "CppCompileError" in text and "conflicting declaration" in text:
            line = next((ln for ln in text.splitlines() if "conflicting" in ln), "")
            print(f"REPRODUCES: {type(exc).__name__}: CppCompileError: "
                  f"{line[line.find('error:'):][:160]}")
            return 1
        print(f"another error, not this defect: {text[:300]}")
        return 2
    want = graph(x)
    same = all(torch.equal(g, w) for g, w in zip(got, want))
    print("compiled and ran: fixed in this version" + ("" if same else " (values differ)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
