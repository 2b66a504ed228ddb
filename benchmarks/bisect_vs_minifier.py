"""`fuzzkit bisect` vs ``torch._functorch.fx_minifier.minifier`` on the same failing graphs.

    OMP_NUM_THREADS=1 TRITON_INTERPRET=1 python benchmarks/bisect_vs_minifier.py [--quick]
        [--sizes 50,100,200,500] [--seeds 3] [--dtype float32] [--ops mixed|all|LIST]
        [--single MUTANT] [--fusion MUTANT] [--minifier-timeout 300] [--json PATH]

For each size ``n`` and seed: ``generate.random_graph(rng, n, ops)`` (``--ops``: by default an
elementwise-heavy mix, so that a sub feeding a mul in one fused kernel is common) with
``values.random_values``; a
single-op mutant and a fusion-only mutant of the in-project fusing compiler
(``fuzzkit.targets.compiler.mutants``) are applied; graphs whose whole output does not fail under the
mutant are skipped (the next seed is drawn, up to ``--tries`` per row).  On each failing graph:

* bisect: :func:`fuzzkit.targets.compiler.bisect.bisect` (the original run, the prefix bisection, the
  window and the confirmation re-run all counted);
* minifier: ``minifier(gm, inputs, module_fails)``; ``module_fails`` compiles the fx graph with
  the mutant fusing compiler and judges it against float64 with the ``compiler`` target's oracle
  and per-node error bounds, requiring the same dtype and error class as the original failure.

Compile calls are read from ``fuzzkit.targets.compiler.compile_calls()``.  "correct?" means: the final
graph contains the mutated op (single-op) or both ops of the fused pair (fusion-only), and still
fails.  The goal: bisect <= log2(n)+3 compile calls on single-op bugs, and >= 4x fewer than the
minifier.  Under the Triton interpreter every fused kernel launch costs milliseconds: tensors are
kept tiny by the generator's element cap; the minifier gets ``--minifier-timeout`` seconds per
graph (a timed-out run is reported with its calls so far, as a lower bound).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from fuzzkit import triton_support  # noqa: E402

triton_support.prepare()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.fx  # noqa: E402

from fuzzkit.runner import check_case  # noqa: E402
from fuzzkit.targets.compiler.bisect import bisect, round_to_dtype, same_bug  # noqa: E402

#: Which ops each known mutant miscompiles: one op (single-op bug) or a producer -> consumer pair
#: fused into one kernel (fusion-only bug).  Mutants not listed are looked up by keyword.
MUTANT_OPS: dict[str, tuple[str, ...]] = {
    "sub-operands-swapped": ("sub",),
    "div-operands-swapped": ("div",),
    "dropped-clamp-max": ("clamp",),
    "fast-exp": ("exp",),
    "fused-sub-mul-stale-temp": ("sub", "mul"),
}

#: The op mix of the generated graphs (``--ops mixed``): elementwise-heavy, so that fused chains
#: (and a sub feeding a mul) are common, with reductions, layout ops and a matmul between them.
MIXED_OPS = ("add", "sub", "mul", "neg", "abs", "tanh", "sigmoid", "relu", "exp", "clamp",
             "maximum", "minimum", "sum", "amax", "softmax", "permute", "reshape", "matmul")

SINGLE_DEFAULTS = ("sub-operands-swapped", "dropped-clamp-max")
FUSION_DEFAULTS = ("fused-sub-mul-stale-temp",)


class _MinifierTimeout(Exception):
    pass


def _compiler() -> Any:
    import fuzzkit.targets.compiler as tc

    return tc, tc.target()


def _ops_of_mutant(mutant: Any) -> tuple[str, ...]:
    """The op(s) a mutant touches: from the mutant's own metadata when it has any."""
    for attr in ("ops", "op"):
        v = getattr(mutant, attr, None)
        if v:
            return tuple(v) if isinstance(v, (list, tuple)) else (v,)
    if mutant.name in MUTANT_OPS:
        return MUTANT_OPS[mutant.name]
    try:
        from fuzzkit.targets.compiler import mutants as m

        table = getattr(m, "MUTANT_OPS", None) or getattr(m, "OPS_OF", None)
        if table and mutant.name in table:
            v = table[mutant.name]
            return tuple(v) if isinstance(v, (list, tuple)) else (v,)
    except ImportError:
        pass
    from fuzzkit.targets.compiler.graphs.ops import OPS

    words = mutant.name.replace("-", "_").split("_")
    return tuple(w for w in words if w in OPS)


def make_values(rng: np.random.Generator, graph: dict, dtype: str) -> list[np.ndarray]:
    try:  # H1's NumPy value maker, when there is one
        from fuzzkit.targets.compiler.graphs import values as gv

        fn = getattr(gv, "random_values", None)
        if fn is not None:
            return [np.asarray(v, dtype=np.float32) for v in fn(graph, rng, dtype)]
    except ImportError:
        pass
    out = []
    for x in graph["inputs"]:
        v = rng.uniform(0.25, 2.0, x["shape"]) * rng.choice([-1.0, 1.0], x["shape"])
        out.append(round_to_dtype(v, dtype))
    return out


def fx_to_graph(gm: torch.fx.GraphModule, inps: list[torch.Tensor]) -> tuple[dict, list]:
    """A (minifier-edited) fx GraphModule back to the JSON graph, with shapes from a run."""
    from fuzzkit.targets.compiler.graphs.ops import OPS

    fn_to_op = {spec.torch_fn: name for name, spec in OPS.items()}
    shapes: dict[str, list[int]] = {}

    class Shapes(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            if isinstance(out, torch.Tensor):
                shapes[n.name] = list(out.shape)
            return out

    Shapes(gm).run(*[t.to(torch.float64) for t in inps])
    graph: dict[str, Any] = {"inputs": [], "nodes": [], "outputs": []}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            graph["inputs"].append({"name": n.name, "shape": shapes[n.name]})
        elif n.op == "call_function":
            graph["nodes"].append({"name": n.name, "op": fn_to_op[n.target],
                                   "args": [a.name for a in n.args],
                                   "attrs": {k: (list(v) if isinstance(v, tuple) else v)
                                             for k, v in n.kwargs.items()},
                                   "shape": shapes[n.name]})
        elif n.op == "output":
            outs = n.args[0]
            outs = outs if isinstance(outs, (tuple, list)) else (outs,)
            graph["outputs"] = [o.name for o in outs if isinstance(o, torch.fx.Node)]
    return graph, [t.detach().to(torch.float32).numpy() for t in inps]


def run_minifier(target: Any, impl: Any, inputs: dict, original: Any, tc: Any,
                 timeout: float) -> dict[str, Any]:
    from torch._functorch.fx_minifier import minifier

    from fuzzkit.targets.compiler.graphs import build

    dtype = inputs["dtype"]
    gm = build.to_graph_module(inputs["graph"])
    inps = [torch.from_numpy(np.asarray(v, dtype=np.float32)) for v in inputs["values"]]
    calls = {"n": 0}
    start = time.perf_counter()
    last_fail: dict[str, Any] = {}

    def module_fails(mod: torch.fx.GraphModule, xs: list[torch.Tensor]) -> bool:
        if time.perf_counter() - start > timeout:
            raise _MinifierTimeout()
        graph, vals = fx_to_graph(mod, list(xs))
        if not graph["outputs"] or not graph["nodes"]:
            return False
        case = dict(inputs, graph=graph, values=[round_to_dtype(v, dtype) for v in vals])
        calls["n"] += 1
        failure = check_case(target, impl, case, properties=False, confirm=False).failure
        ok = same_bug(original, failure)
        if ok:
            last_fail["graph"] = graph
        return ok

    before = tc.compile_calls()
    status = "ok"
    final_graph = inputs["graph"]
    sink = io.StringIO()
    try:
        with contextlib.redirect_stderr(sink), contextlib.redirect_stdout(sink):
            out_gm, out_inps = minifier(gm, inps, module_fails, dump_state=lambda *a: None)
        final_graph, _ = fx_to_graph(out_gm, list(out_inps))
    except _MinifierTimeout:
        status = "timeout"
        final_graph = last_fail.get("graph", inputs["graph"])
    compiles = tc.compile_calls() - before
    return {"calls": compiles or calls["n"], "seconds": time.perf_counter() - start,
            "graph": final_graph, "status": status}


def _correct(graph: dict, ops: tuple[str, ...]) -> bool:
    present = [n["op"] for n in graph["nodes"]]
    return bool(ops) and all(o in present for o in ops)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 50,100, one seed")
    parser.add_argument("--sizes", default="50,100,200,500")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tries", type=int, default=20,
                        help="graphs drawn per row until the mutant makes one fail")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--ops", default="mixed",
                        help="'mixed' (elementwise-heavy subset), 'all', or a comma list")
    parser.add_argument("--single", help="single-op mutant (default: first shipped one found)")
    parser.add_argument("--fusion", help="fusion-only mutant (default: first shipped one found)")
    parser.add_argument("--only", choices=("single-op", "fusion-only"),
                        help="run only this bug kind")
    parser.add_argument("--minifier-timeout", type=float, default=300.0)
    parser.add_argument("--no-minifier", action="store_true")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    sizes = [50, 100] if args.quick else [int(s) for s in args.sizes.split(",")]
    op_mix = (MIXED_OPS if args.ops == "mixed" else None if args.ops == "all"
              else tuple(args.ops.split(",")))
    seeds = 1 if args.quick else args.seeds

    from fuzzkit.targets.compiler.graphs import generate

    tc, target = _compiler()
    impl = target.implementation("fusing")
    reason = impl.unavailable()
    if reason:
        print(f"fusing compiler unavailable: {reason}")
        return 2
    names = [m.name for m in target.mutants]

    def pick(given: Optional[str], defaults: tuple[str, ...], keyword: str) -> Optional[Any]:
        if given:
            return target.mutant(given)
        for d in defaults:
            if d in names:
                return target.mutant(d)
        for m in target.mutants:
            if keyword in (m.name + " " + m.bug_class).lower():
                return m
        return None

    bugs = [("single-op", pick(args.single, SINGLE_DEFAULTS, "clamp")),
            ("fusion-only", pick(args.fusion, FUSION_DEFAULTS, "fusion"))]
    rows: list[dict[str, Any]] = []
    print(f"mutants: {', '.join(f'{k}={m.name if m else None}' for k, m in bugs)}; "
          f"dtype {args.dtype}; sizes {sizes}; seeds {seeds}", flush=True)
    for kind, mutant in bugs:
        if args.only and kind != args.only:
            continue
        if mutant is None:
            print(f"no {kind} mutant found; skipped")
            continue
        ops = _ops_of_mutant(mutant)
        for n in sizes:
            for s in range(seeds):
                found = None
                for t in range(args.tries):
                    rng = np.random.default_rng(1000 * n + 100 * s + t)
                    try:
                        graph = generate.random_graph(rng, n, op_mix)
                    except RuntimeError:  # the generator's shape solver gave up: next draw
                        continue
                    if ops and not all(any(nd["op"] == o for nd in graph["nodes"]) for o in ops):
                        continue
                    inputs = {"graph": graph, "dtype": args.dtype, "dynamic": False,
                              "values": make_values(rng, graph, args.dtype)}
                    if target.validate is not None and target.validate(inputs):
                        continue
                    with mutant.applied():
                        failure = check_case(target, impl, inputs, properties=False,
                                             confirm=False).failure
                    if failure is not None and failure.kind == "mismatch":
                        found = (inputs, failure)
                        break
                if found is None:
                    print(f"  n={n} seed={s} {kind}: no failing graph in {args.tries} draws",
                          flush=True)
                    continue
                inputs, failure = found
                with mutant.applied():
                    r = bisect(target, impl, inputs)
                row = {"n": len(inputs["graph"]["nodes"]), "bug": kind, "mutant": mutant.name,
                       "tool": "bisect", "calls": r.compile_calls, "seconds": r.seconds,
                       "final_nodes": len(r.window), "status": "ok" if r.confirmed else "unconf",
                       "correct": _correct(r.minimized_inputs["graph"], ops),
                       "first_op": r.op,
                       "goal": math.log2(len(inputs["graph"]["nodes"])) + 3}
                rows.append(row)
                _print_row(row)
                if not args.no_minifier:
                    with mutant.applied():
                        m = run_minifier(target, impl, inputs, failure, tc,
                                         args.minifier_timeout)
                    row = {"n": row["n"], "bug": kind, "mutant": mutant.name,
                           "tool": "minifier", "calls": m["calls"], "seconds": m["seconds"],
                           "final_nodes": len(m["graph"]["nodes"]), "status": m["status"],
                           "correct": _correct(m["graph"], ops), "goal": row["goal"]}
                    rows.append(row)
                    _print_row(row)
    _summary(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


def _print_row(r: dict[str, Any]) -> None:
    print(f"{r['n']:>5} {r['bug']:<12} {r['tool']:<9} {r['calls']:>6} {r['seconds']:>9.2f} "
          f"{r['final_nodes']:>6}  {'yes' if r['correct'] else 'NO':<4} {r['status']}"
          f"{'  (goal <= %.1f)' % r['goal'] if r['tool'] == 'bisect' else ''}", flush=True)


def _summary(rows: list[dict[str, Any]]) -> None:
    print()
    print("    n bug          tool       calls   seconds  nodes  correct? status")
    for r in rows:
        _print_row(r)
    print()
    for bug in ("single-op", "fusion-only"):
        med: dict[str, float] = {}
        for tool in ("bisect", "minifier"):
            sel = [r for r in rows if r["bug"] == bug and r["tool"] == tool]
            if not sel:
                continue
            med[tool] = statistics.median(r["calls"] for r in sel)
            print(f"median {bug:<12} {tool:<9} calls {med[tool]:>6.1f}  seconds "
                  f"{statistics.median(r['seconds'] for r in sel):>8.2f}  final nodes "
                  f"{statistics.median(r['final_nodes'] for r in sel):>5.1f}  correct "
                  f"{sum(r['correct'] for r in sel)}/{len(sel)}")
        if bug == "single-op":
            sel = [r for r in rows if r["bug"] == bug and r["tool"] == "bisect"]
            within = sum(r["calls"] <= r["goal"] for r in sel)
            if sel:
                print(f"  bisect within log2(n)+3: {within}/{len(sel)}")
        if "bisect" in med and "minifier" in med and med["bisect"]:
            print(f"  minifier/bisect median calls: {med['minifier'] / med['bisect']:.1f}x "
                  f"(goal >= 4x)")


if __name__ == "__main__":
    raise SystemExit(main())
