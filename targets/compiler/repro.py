"""Standalone reproducer scripts for bisected graph cases.

:func:`write_repro` writes ``repro_<case_id>.py`` next to a minimized case file.  The script
loads the case (``fuzzkit.case.load``), checks it against the target's resource limits and
``validate`` (exit 2 when refused), runs it through the named built-in compiler's driver
(:func:`fuzzkit.targets.compiler.run_builtin`: the case's values and every variant through one
compile, in the case's dynamic mode and input layouts -- what the campaign ran), runs the
float64 reference, prints the max error of each output against its bound and the verdict of the
target's oracle (error class, dtype and determinism included), and exits 1 when the bug
reproduces (0 when it does not, 2 when it cannot run).  Mutants are in-process patches, so
``--mutant NAME`` applies one of the target's shipped mutants around the compile and run.
Scripts written before variants existed (``corpus/``) keep their own copy of the old driver and
still run: the oracle judges outputs of that older shape by the float bound alone.

For targets other than ``compiler`` (a plug-in graph target), and for a compiler implementation
registered from outside, the script runs the target's own implementation and oracle through
``fuzzkit.runner.check_case``.

The script is code that someone runs; the case and the bisection result are data that came from
a file.  So every value taken from them -- target, implementation, first node, op, window,
signature and case file name -- goes into the script as *one* ASCII JSON
string literal (``META = json.loads("...")``), parsed when it runs; the docstring and comments
are fixed text.  An implementation name selects among the target's registered implementations
(:meth:`fuzzkit.target.Target.implementation`), never a module to import.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fuzzkit.case import Case, atomic_write_text

#: The one place in TEMPLATE where data goes: replaced (once) by a JSON string literal.
META_SLOT = "@META_JSON_LITERAL@"

TEMPLATE = (
    '''#!/usr/bin/env python
"""Reproducer written by `fuzzkit bisect` for a bisected graph case.

    python THIS_SCRIPT [--mutant NAME] [--impl NAME] [--limit NAME=N]

Prints the case's details (kept as data in META below), checks the case file beside this
script against its target's limits and validation, then runs it.
Exit 1: the mismatch reproduces; 0: it does not; 2: cannot run.
"""

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

# Everything taken from the case and the bisection, as one JSON document: data, never code.
META = json.loads('''
    + META_SLOT
    + ''')

os.environ.setdefault("OMP_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
CASE = HERE / Path(str(META["case_file"])).name
# fuzzkit installed, or the checkout this script lies in (corpus/<target>/regressions/)
PROJECT = next((str(p) for p in HERE.parents if (p / "fuzzkit" / "__init__.py").is_file()), None)
if PROJECT and PROJECT not in sys.path:
    sys.path.insert(0, PROJECT)

import numpy as np  # noqa: E402


def show(value):
    """A value from the case as one escaped line."""
    return ascii(value)


def describe():
    print(f"case {show(META.get('case_id'))}: target {show(META.get('target'))}, "
          f"implementation {show(META.get('implementation'))}")
    print(f"first diverging node: {show(META.get('first_node'))}")
    print(f"op: {show(META.get('op'))}")
    print(f"window: {show(META.get('window'))}")
    print(f"signature: {show(META.get('signature'))}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutant", help="apply this shipped mutant of the target (in-process)")
    parser.add_argument("--impl", help="registered implementation to run (default: the case's)")
    parser.add_argument("--limit", action="append", default=[], metavar="NAME=N",
                        help="raise one of the target's resource limits")
    args = parser.parse_args()
    describe()

    from fuzzkit import limits
    from fuzzkit.case import load
    from fuzzkit.registry import get_target

    case = load(CASE)
    target = get_target(case.target)  # a registered target, or a one-line error
    # a registered implementation of it: the name selects among registered code only
    impl = target.implementation(args.impl or case.implementation)
    inputs = case.inputs
    problem = (limits.check(target.name, getattr(target, "limits", ()), inputs,
                            limits.parse_overrides(args.limit))
               or limits.validation_problem(target, inputs))
    if problem:
        print(f"repro: cannot run: {problem}", file=sys.stderr)
        return 2
    graph, dtype = inputs["graph"], inputs["dtype"]
    print(f"case file {CASE.name}: {len(graph['nodes'])} node(s) "
          f"{[n['op'] for n in graph['nodes']]}, dtype {show(dtype)}, implementation {impl.name}"
          + (f", mutant {show(args.mutant)}" if args.mutant else ""))
    patch = target.mutant(args.mutant).applied() if args.mutant else contextlib.nullcontext()
    compile_fx = None
    if case.target == "compiler":
        from fuzzkit.targets.compiler import compile_function

        compile_fx = compile_function(impl.name)  # built-in compilers only (a fixed list)
    with patch:
        if compile_fx is not None:
            failed = run_compiler(compile_fx, impl.name, inputs)
        else:
            from fuzzkit.runner import check_case

            failure = check_case(target, impl, inputs, properties=False, confirm=False).failure
            print(failure.message if failure else "outputs agree")
            failed = failure is not None
    print("REPRODUCES" if failed else "does not reproduce")
    return 1 if failed else 0


def run_compiler(compile_fx, impl, inputs):
    """The case through the target's own driver (the run a campaign made: the case's values
    and every variant through one compile, in the case's dynamic mode and input layouts), its
    float64 reference, and the target's oracle."""
    from fuzzkit.targets.compiler import checks, reference, run_builtin
    from fuzzkit.targets.compiler.graphs import bound

    graph, dtype = inputs["graph"], inputs["dtype"]
    actual = run_builtin(impl, inputs)
    error = actual.get("error")
    if error:
        print(f"  run {error.get('run')}: the compiled graph raised "
              f"{show(error.get('message'))} (eager: {show(error.get('eager'))})")
    expected = reference(inputs)
    bounds = bound.error_bounds(graph, expected["intermediates"], dtype)
    for name, want, got in zip(graph["outputs"], expected["outputs"], actual["outputs"]):
        verdict = checks.compare(name, want, got, bounds.get(name, 0.0), dtype)
        want = np.asarray(want, dtype=np.float64)
        both = np.isfinite(want) & np.isfinite(got) if got.shape == want.shape else None
        error = float(np.abs(got - want)[both].max(initial=0.0)) if both is not None else np.nan
        print(f"  {name}: max error {error:.6g}, " + ("within the bound" if verdict is None else
              f"{verdict['error_class']} error, worst {verdict.get('worst')}"))
    if inputs.get("variants") or inputs.get("layouts") or inputs.get("dynamic"):
        print(f"  dynamic {show(inputs.get('dynamic', False))}, "
              f"{len(inputs.get('variants') or [])} variant(s), layouts "
              f"{show(inputs.get('layouts'))}, compiles {show(actual.get('compiles'))}")
    failure = checks.oracle(inputs, expected, actual)
    print(f"oracle: {failure.signature + ': ' + failure.message if failure else 'pass'}")
    return failure is not None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001
        print(f"repro: cannot run: {type(exc).__name__}: {ascii(str(exc))[1:-1]}",
              file=sys.stderr)
        sys.exit(2)
'''
)


def meta_literal(meta: dict[str, Any]) -> str:
    """``meta`` as one Python string literal holding its JSON: ``json.dumps`` of the ASCII JSON
    text is a JSON string literal, which (ASCII, escapes ``\\" \\\\ \\n \\uXXXX`` only) is also a
    Python string literal with the same value."""
    text = json.dumps(meta, ensure_ascii=True, sort_keys=True, default=str)
    literal = json.dumps(text, ensure_ascii=True)
    assert literal.isascii() and "\n" not in literal
    return literal


def render(meta: dict[str, Any]) -> str:
    """The script text for ``meta`` (the template is fixed; META_SLOT occurs in it once)."""
    head, slot, tail = TEMPLATE.partition(META_SLOT)
    assert slot and META_SLOT not in tail
    return head + meta_literal(meta) + tail


def write_repro(
    case: Case,
    case_path: os.PathLike[str] | str,
    *,
    first_node: Any = "?",
    op: Any = "?",
    window: list[Any] | None = None,
    signature: Any = "?",
) -> Path:
    """Write ``repro_<case_id>.py`` beside ``case_path`` (the saved minimized case)."""
    case_path = Path(case_path)
    script = case_path.parent / f"repro_{case.case_id}.py"
    meta = {
        "case_id": case.case_id,
        "target": case.target,
        "implementation": case.implementation,
        "first_node": first_node,
        "op": op,
        "window": list(window or []),
        "signature": signature,
        "case_file": case_path.name,
    }
    atomic_write_text(script, render(meta))
    script.chmod(0o755)
    return script
