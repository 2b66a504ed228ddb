"""Standalone reproducer scripts for bisected graph cases.

:func:`write_repro` writes ``repro_<case_id>.py`` next to a minimized case file.  The script
loads the case (``fuzzkit.case.load``), rebuilds the window graph as an fx GraphModule
(``fuzzkit.graphs.build.to_graph_module``), compiles it with the named compiler
(``targets.compiler.<impl>.compile_fx``), runs the float64 reference, prints the max error of each
output against its bound and the verdict, and exits 1 when the bug reproduces (0 when it does
not, 2 when it cannot run).  Mutants are in-process patches, so ``--mutant NAME`` applies one of
the target's shipped mutants around the compile and run.

For targets other than ``compiler`` (a plug-in graph target) the script falls back to the
target's own implementation and oracle through ``fuzzkit.runner.check_case``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from fuzzkit.case import Case, atomic_write_text

TEMPLATE = '''#!/usr/bin/env python
"""Reproducer written by `fuzzkit bisect` for case {case_id}.

Target {target!r}, implementation {impl!r}; first diverging node {first_node} ({op}),
window {window}; divergence signature {signature}.

    python {script_name} [--mutant NAME] [--impl NAME]

Exit 1: the mismatch reproduces; 0: it does not; 2: cannot run.
"""

import argparse
import contextlib
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
CASE = HERE / {case_file!r}
PROJECT = {project!r}  # where fuzzkit lives, if it is not installed
if PROJECT and PROJECT not in sys.path:
    sys.path.insert(0, PROJECT)

import numpy as np  # noqa: E402

from fuzzkit.case import load  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutant", help="apply this shipped mutant of the target (in-process)")
    parser.add_argument("--impl", default={impl!r}, help="compiler to run (default %(default)s)")
    args = parser.parse_args()
    case = load(CASE)
    inputs = case.inputs
    graph, dtype = inputs["graph"], inputs["dtype"]
    print(f"case {{CASE.name}}: {{len(graph['nodes'])}} node(s) "
          f"{{[n['op'] for n in graph['nodes']]}}, dtype {{dtype}}, compiler {{args.impl}}"
          + (f", mutant {{args.mutant}}" if args.mutant else ""))
    patch = contextlib.nullcontext()
    target = None
    if args.mutant or case.target != "compiler":
        from fuzzkit.registry import get_target
        target = get_target(case.target)
        if args.mutant:
            patch = target.mutant(args.mutant).applied()
    with patch:
        if case.target == "compiler":
            failed = run_compiler(args.impl, inputs)
        else:
            from fuzzkit.runner import check_case
            failure = check_case(target, target.implementation(args.impl), inputs,
                                 properties=False, confirm=False).failure
            print(failure.message if failure else "outputs agree")
            failed = failure is not None
    print("REPRODUCES" if failed else "does not reproduce")
    return 1 if failed else 0


def run_compiler(impl, inputs):
    import importlib

    import torch

    from fuzzkit.graphs import bound, build

    graph, dtype = inputs["graph"], inputs["dtype"]
    tdtype = getattr(torch, dtype)
    gm = build.to_graph_module(graph)
    xs = [torch.from_numpy(np.asarray(v, dtype=np.float32)).to(tdtype) for v in inputs["values"]]
    module = importlib.import_module(f"targets.compiler.{{impl}}")
    try:
        if impl == "inductor":
            compiled = module.compile_fx(gm, xs, dynamic=bool(inputs.get("dynamic", False)))
        else:
            compiled = module.compile_fx(gm, xs)
        outs = compiled(*xs)
    except Exception as exc:  # a compiler crash is what a crash case reproduces
        errors = [line for line in str(exc).splitlines() if " error: " in line] or [
            str(exc).splitlines()[0] if str(exc) else ""]
        print(f"  the compiler raised {{type(exc).__name__}}: " + "; ".join(errors[:5]))
        return True
    if not isinstance(outs, (tuple, list)):
        outs = (outs,)
    from targets.compiler import checks  # the target's own oracle decides

    ref = build.run_reference(graph, inputs["values"])
    bounds = bound.error_bounds(graph, ref, dtype)
    actual = [o.detach().to(torch.float64).cpu().numpy() for o in outs]
    for name, got in zip(graph["outputs"], actual):
        verdict = checks.compare(name, ref[name], got, bounds.get(name, 0.0), dtype)
        want = np.asarray(ref[name], dtype=np.float64)
        both = np.isfinite(want) & np.isfinite(got) if got.shape == want.shape else None
        error = float(np.abs(got - want)[both].max(initial=0.0)) if both is not None else np.nan
        print(f"  {{name}}: max error {{error:.6g}}, " + ("within the bound" if verdict is None else
              f"{{verdict['error_class']}} error, worst {{verdict.get('worst')}}"))
    expected = {{"outputs": [np.asarray(ref[o], dtype=np.float64) for o in graph["outputs"]],
                "intermediates": ref}}
    failure = checks.oracle(inputs, expected, {{"outputs": actual}})
    print(f"oracle: {{failure.signature + ': ' + failure.message if failure else 'pass'}}")
    return failure is not None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001
        print(f"repro: cannot run: {{type(exc).__name__}}: {{exc}}", file=sys.stderr)
        sys.exit(2)
'''


def write_repro(case: Case, case_path: os.PathLike[str] | str, *, first_node: str = "?",
                op: str = "?", window: Optional[list[str]] = None,
                signature: str = "?") -> Path:
    """Write ``repro_<case_id>.py`` beside ``case_path`` (the saved minimized case)."""
    case_path = Path(case_path)
    script = case_path.parent / f"repro_{case.case_id}.py"
    project = str(Path(__file__).resolve().parent.parent.parent)
    text = TEMPLATE.format(case_id=case.case_id, target=case.target, impl=case.implementation,
                           first_node=first_node, op=op, window=", ".join(window or []),
                           signature=signature, script_name=script.name,
                           case_file=case_path.name, project=project)
    atomic_write_text(script, text)
    script.chmod(0o755)
    return script
