#!/usr/bin/env python
"""Triton's interpreter widens bfloat16 subnormals to float32 wrongly (triton 3.9.0).

Standalone: torch and triton only.  A kernel loads bfloat16 values and stores
``x.to(tl.float32) * 8``; under ``TRITON_INTERPRET=1`` every subnormal input comes out wrong
(1.3775e-39 * 8 gives 8.2285e-38, not 1.1020e-38) while normal values and a plain bfloat16 copy
are exact.  Exit 1: the defect reproduces; 0: it does not (fixed); 2: cannot run here.
"""

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # the interpreter is the code under test

try:
    import torch
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - an environment without the stack
    print(f"cannot run: {exc}")
    sys.exit(2)


@triton.jit
def widen_and_scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x.to(tl.float32) * 8.0, mask=mask)


def main() -> int:
    # bfloat16 subnormals (below 2**-126 ~ 1.18e-38), then two normal values as controls.
    x = torch.tensor([1.3775e-39, 1.0102e-39, 4.5918e-40, 9.1835e-41, 1.0, 1.2030e-38],
                     dtype=torch.bfloat16)
    out = torch.empty(x.shape, dtype=torch.float32)
    widen_and_scale[(1,)](x, out, x.numel(), BLOCK=8)
    want = x.float() * 8.0  # exact: a power-of-two scale of a value float32 holds exactly
    print(f"triton {triton.__version__}, torch {torch.__version__}")
    print("input:   ", [f"{v:.4e}" for v in x.float().tolist()])
    print("expected:", [f"{v:.4e}" for v in want.tolist()])
    print("got:     ", [f"{v:.4e}" for v in out.tolist()])
    wrong = [i for i in range(x.numel()) if out[i].item() != want[i].item()]
    if wrong:
        print(f"REPRODUCES: {len(wrong)} of {x.numel()} values wrong, at {wrong}")
        return 1
    print("does not reproduce (fixed in this triton?)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
