#!/usr/bin/env python
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
META = json.loads("{\"case_file\": \"5ee6144e41322a09a59e.json\", \"case_id\": \"5ee6144e41322a09a59e\", \"first_node\": \"n6\", \"implementation\": \"inductor\", \"op\": \"expm1\", \"signature\": \"mismatch:expm1:float32:value\", \"target\": \"compiler\", \"window\": [\"n6\"]}")

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
