"""Acceptance of the compiler target end to end: fuzz every miscompile mutant of the fusing
compiler until it is found, save the finding, then run ``fuzzkit bisect`` (the real CLI, in a
subprocess) on the saved case under the same mutant and check that the window it reports is the
mutated op -- one node, or for a fusion-only mutant the two ops that must share a kernel.

    python scripts/compiler_mutant_bisect.py [--budget 120] [--out DIR] [--only NAME ...]

Prints one row per mutant and exits 1 if any mutant is missed or bisects to the wrong place.
Under ``TRITON_INTERPRET=1`` without a GPU (set automatically by ``fuzzkit.triton_support``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: mutant -> the ops its miscompile can surface in (the window must be made of them).
ELEMENTWISE = {"abs", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu",
               "sin", "cos", "reciprocal", "pow", "clamp", "add", "sub", "mul", "div",
               "maximum", "minimum", "where_gt", "add_scalar"}
REDUCTIONS = {"sum", "mean", "amax", "amin"}
LAYOUT = {"permute", "transpose"}
EXPECTED: dict[str, tuple[set[str], int]] = {
    # name: (ops the window may contain, largest window)
    "broadcast-collapsed": (ELEMENTWISE, 1),
    "reduction-wrong-axis": (REDUCTIONS, 1),
    "fast-exp": ({"exp"}, 1),
    "dropped-clamp-max": ({"clamp"}, 1),
    "fp16-accumulator": (REDUCTIONS, 1),
    "tail-off-by-one": (ELEMENTWISE | REDUCTIONS, 1),
    # a layout bug needs the view that makes the layout: window inputs are materialized
    # (contiguous) reference values, so the repro is the permute/transpose plus the fused
    # consumer that misreads its strides
    "permute-as-contiguous": (ELEMENTWISE | REDUCTIONS | LAYOUT, 2),
    "sub-operands-swapped": ({"sub"}, 1),
    "div-operands-swapped": ({"div"}, 1),
    "fused-sub-mul-stale-temp": ({"sub", "mul"}, 2),
    "fused-reduction-reads-input": (ELEMENTWISE | REDUCTIONS, 2),
    # reach mutants: a tie, a NaN, or a size past a tile; the window keeps the shape and the
    # values (reference values rounded to the dtype: ties and NaN survive)
    "where-gt-as-ge": ({"where_gt"}, 1),
    "maximum-drops-nan": ({"maximum"}, 1),
    "clamp-min-drops-nan": ({"clamp"}, 1),
    "elementwise-grid-floor": (ELEMENTWISE, 1),
    "long-row-truncated": (REDUCTIONS, 1),
    "reduction-store-drops-program-offset": (REDUCTIONS, 1),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per mutant search")
    parser.add_argument("--out", type=Path, default=None, help="where cases and repros go")
    parser.add_argument("--only", nargs="*", default=None, help="mutant names")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from fuzzkit.mutation import run_mutant
    from fuzzkit.registry import get_target

    target = get_target("compiler")
    out = args.out or Path(tempfile.mkdtemp(prefix="compiler-bisect-"))
    out.mkdir(parents=True, exist_ok=True)
    bad = 0
    header = (f"{'mutant':30} {'found s':>8} {'nodes':>5} {'calls':>5} {'<=log2n+3':>9} "
              f"{'window ops':28} verdict")
    print(header)
    print("-" * len(header))
    for mutant in target.mutants:
        if args.only and mutant.name not in args.only:
            continue
        result = run_mutant(target, mutant, budget=args.budget, seed=0)
        if not result.detected or result.finding is None:
            why = f" ({result.message})" if result.clean_failure else ""
            print(f"{mutant.name:30} {'-':>8} {'':>5} {'':>5} {'':>9} {'':28} NOT FOUND{why}")
            bad += 1
            continue
        path = result.finding.save(out / mutant.name)
        n = len(result.finding.inputs["graph"]["nodes"])
        proc = subprocess.run(
            [sys.executable, "-m", "fuzzkit.cli", "bisect", str(path), "--mutant", mutant.name,
             "--json", "--out", str(out / mutant.name / "bisected")],
            capture_output=True, text=True, cwd=ROOT, env=dict(os.environ))
        if proc.returncode != 1:  # 1: the divergence reproduces and was bisected
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
            print(f"{mutant.name:30} {result.seconds:8.2f} {n:5} {'':>5} {'':>9} {'':28} "
                  f"BISECT rc={proc.returncode} {tail}")
            bad += 1
            continue
        report = json.loads(proc.stdout)
        window = report["window"]
        graph = report.get("minimized_graph") or {}
        ops_by_name = {node["name"]: node["op"] for node in result.finding.inputs["graph"]["nodes"]}
        ops = [ops_by_name.get(name, graph.get(name, "?")) for name in window]
        allowed, largest = EXPECTED.get(mutant.name, (ELEMENTWISE | REDUCTIONS, 2))
        calls = report["compile_calls"]
        limit = math.log2(max(n, 1)) + 3
        ok = (set(ops) <= allowed and 1 <= len(window) <= largest and report["confirmed"]
              and not report["nondeterministic"])
        bad += not ok
        print(f"{mutant.name:30} {result.seconds:8.2f} {n:5} {calls:5} "
              f"{'yes' if calls <= limit else 'no':>9} {','.join(ops)[:28]:28} "
              f"{'ok' if ok else 'WRONG WINDOW'}")
    print(f"cases and repros under {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
