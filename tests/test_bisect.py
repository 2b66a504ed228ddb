"""Bisection of failing compiler-graph cases (targets/compiler/bisect.py, repro.py, and
`fuzzkit bisect`, which runs the case's target's ``bisect`` hook).

Two layers:

* a tiny local "graph target" (a NumPy interpreter standing in for a compiler, with a fusion
  rule and two planted miscompiles) tests the bisection logic itself: fast, no torch.compile;
* the real ``compiler`` target (H2's fusing compiler under its shipped mutants), when present.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from fuzzkit.case import Case
from fuzzkit.failure import Failure
from fuzzkit.target import Implementation, Mutant, Target
from fuzzkit.targets.compiler.bisect import NotAGraphCase, NotFailing, bisect, bisection

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------
# A toy graph target: elementwise ops on [4, 8] tensors.

SHAPE = [4, 8]
UNARY = {
    "neg": lambda a: -a,
    "tanh": np.tanh,
    "abs": np.abs,
    "relu": lambda a: np.maximum(a, 0),
    "sigmoid": lambda a: 0.5 * (1 + np.tanh(0.5 * a)),
    "clamp": lambda a: np.clip(a, -0.5, 0.5),
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
}
_bugs: set[str] = set()  # planted miscompiles, switched on by the toy mutants


def _eval(graph: dict, values: list, dtype: Any, compiled: bool) -> dict[str, np.ndarray]:
    env = {x["name"]: np.asarray(v, dtype=dtype) for x, v in zip(graph["inputs"], values)}
    consumers: dict[str, int] = {}
    for n in graph["nodes"]:
        for a in n["args"]:
            consumers[a] = consumers.get(a, 0) + 1
    producer = {n["name"]: n for n in graph["nodes"]}
    if compiled and "twin_crash" in _bugs:
        # the compiler crashes when two identical ops on the same value are both outputs (the
        # Inductor C++ bug in corpus/compiler/findings: a twice-declared fused accumulator)
        seen = {}
        for n in graph["nodes"]:
            key = (n["op"], tuple(n["args"]))
            if n["name"] in graph["outputs"] and seen.setdefault(key, n["name"]) != n["name"]:
                raise RuntimeError("conflicting declaration of a fused accumulator")
    for n in graph["nodes"]:
        args = [env[a] for a in n["args"]]
        op = n["op"]
        if compiled and op == "sub" and "reversed_sub" in _bugs:
            args = args[::-1]
        if compiled and op == "mul" and "stale_sub_temp" in _bugs:
            # "fused": the sub producing an arg has this mul as its only consumer and is not an
            # output, so it lives in a register of the same kernel -- which reads a stale temp.
            for k, a in enumerate(n["args"]):
                p = producer.get(a)
                if (p is not None and p["op"] == "sub" and consumers.get(a) == 1
                        and a not in graph["outputs"]):
                    args[k] = env[p["args"][0]]
        fn = UNARY.get(op) or BINARY[op]
        env[n["name"]] = np.asarray(fn(*args), dtype=dtype)
    return env


def toy_reference(inputs: dict) -> dict:
    env = _eval(inputs["graph"], inputs["values"], np.float64, compiled=False)
    return {"outputs": [env[o] for o in inputs["graph"]["outputs"]], "intermediates": env}


toy_calls = [0]


def toy_compiled(inputs: dict) -> dict:
    toy_calls[0] += 1
    env = _eval(inputs["graph"], inputs["values"], np.float32, compiled=True)
    return {"outputs": [env[o].astype(np.float64) for o in inputs["graph"]["outputs"]]}


def toy_oracle(inputs: dict, expected: dict, actual: dict) -> Failure | None:
    graph = inputs["graph"]
    ops = {n["name"]: n["op"] for n in graph["nodes"]}
    for name, e, a in zip(graph["outputs"], expected["outputs"], actual["outputs"]):
        err = np.abs(a - e)
        bound = 1e-4 * (1 + np.abs(e))
        if (err > bound).any():
            op = ops.get(name, "input")
            return Failure("mismatch", f"{name} ({op}) off by {err.max():.3g}",
                           f"mismatch:{op}:{inputs['dtype']}:value",
                           {"node": name, "op": op, "dtype": inputs["dtype"],
                            "error_class": "value", "worst": float(err.max())})
    return None


@contextlib.contextmanager
def _bug(name: str) -> Iterator[None]:
    _bugs.add(name)
    try:
        yield
    finally:
        _bugs.discard(name)


def toy_target() -> Target:
    return Target(
        name="toy_graphs", description="toy graph target for bisect tests",
        strategy=lambda: None, reference=toy_reference,
        implementations={"toy": Implementation("toy", toy_compiled, backend="python")},
        oracle=toy_oracle,
        bisect=bisection,  # a plug-in graph target reuses the compiler's bisection hook
        mutants=[Mutant("reversed_sub", "toy", "operand order", "-", lambda: _bug("reversed_sub")),
                 Mutant("stale_sub_temp", "toy", "fusion", "-",
                        lambda: _bug("stale_sub_temp")),
                 Mutant("twin_crash", "toy", "crash", "-", lambda: _bug("twin_crash"))])


def toy_graph(rng: np.random.Generator, n: int) -> dict:
    inputs = [{"name": f"x{k}", "shape": SHAPE} for k in range(3)]
    names = [x["name"] for x in inputs]
    nodes = []
    for k in range(n):
        recent = names[-4:]
        if rng.random() < 0.5:
            op = str(rng.choice(sorted(UNARY)))
            args = [str(rng.choice(recent))]
        else:
            op = str(rng.choice(sorted(BINARY)))
            args = [str(rng.choice(recent)), str(rng.choice(names))]
        name = f"n{k}"
        nodes.append({"name": name, "op": op, "args": args, "attrs": {}, "shape": SHAPE})
        names.append(name)
    used = {a for nd in nodes for a in nd["args"]}
    outputs = [nd["name"] for nd in nodes if nd["name"] not in used]
    return {"inputs": inputs, "nodes": nodes, "outputs": outputs}


def toy_case(seed: int, n: int) -> dict:
    rng = np.random.default_rng(seed)
    graph = toy_graph(rng, n)
    values = [rng.uniform(-2, 2, SHAPE).astype(np.float32) for _ in graph["inputs"]]
    return {"graph": graph, "values": values, "dtype": "float32"}


def failing_toy_case(bug: str, n: int) -> dict:
    for seed in range(200):
        inputs = toy_case(seed, n)
        with _bug(bug):
            if toy_oracle(inputs, toy_reference(inputs), toy_compiled(inputs)) is not None:
                return inputs
    raise AssertionError(f"no failing toy graph for {bug}")  # pragma: no cover


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [40, 60])
def test_single_op_bug_is_a_one_node_window_in_log_calls(n: int) -> None:
    target = toy_target()
    inputs = failing_toy_case("reversed_sub", n)
    with target.mutant("reversed_sub").applied():
        result = bisect(target, target.implementation("toy"), inputs)
    assert result.op == "sub"
    assert result.window == [result.first_node]
    assert result.confirmed and not result.nondeterministic
    assert result.compile_calls <= math.log2(n) + 3, result.steps
    # the first diverging node: every earlier sub is harmless, this one is not
    mini = result.minimized_inputs
    assert [nd["name"] for nd in mini["graph"]["nodes"]] == [result.first_node]
    with target.mutant("reversed_sub").applied():
        assert toy_oracle(mini, toy_reference(mini), toy_compiled(mini)) is not None
    assert toy_oracle(mini, toy_reference(mini), toy_compiled(mini)) is None


def test_fusion_only_bug_is_the_two_fused_ops() -> None:
    target = toy_target()
    inputs = failing_toy_case("stale_sub_temp", 50)
    with target.mutant("stale_sub_temp").applied():
        result = bisect(target, target.implementation("toy"), inputs)
    ops = {nd["name"]: nd["op"] for nd in inputs["graph"]["nodes"]}
    assert result.op == "mul"
    assert [ops[w] for w in result.window] == ["sub", "mul"]
    assert result.confirmed


def test_passing_case_is_a_clear_error() -> None:
    target = toy_target()
    with pytest.raises(NotFailing, match="passes"):
        bisect(target, target.implementation("toy"), toy_case(1, 20))
    with pytest.raises(NotAGraphCase):
        bisect(target, target.implementation("toy"), {"x": 1})


def test_nondeterministic_window_is_flagged() -> None:
    import json

    target = toy_target()
    inputs = failing_toy_case("reversed_sub", 30)
    previous: list[str] = []

    def flaky(case: dict) -> dict:  # fails, except on an immediate re-run of the same graph
        key = json.dumps(case["graph"], sort_keys=True)
        rerun = bool(previous) and previous[-1] == key
        previous.append(key)
        if rerun:
            return toy_compiled(case)
        with _bug("reversed_sub"):
            return toy_compiled(case)

    result = bisect(target, Implementation("flaky", flaky), inputs)
    assert result.nondeterministic and not result.confirmed
    assert result.steps[-1][0] == "confirm" and result.steps[-1][2] is False


# ---------------------------------------------------------------------------------------------
# The CLI and the repro script on the toy target (registered in-process).


@pytest.fixture
def toy_registered() -> Iterator[Target]:
    from fuzzkit.registry import register_target, unregister_target

    target = toy_target()
    register_target(target, replace=True)
    try:
        yield target
    finally:
        unregister_target(target.name)


def _run_script(script: Path, *argv: str) -> int:
    import runpy

    old = sys.argv
    sys.argv = [str(script), *argv]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        sys.argv = old
    return 0


def test_cli_bisect_end_to_end(
    toy_registered: Target,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    from fuzzkit.cli import main

    monkeypatch.chdir(tmp_path)  # the default output is ./bisected/<case-id>/
    failing = Case("toy_graphs", "toy", failing_toy_case("reversed_sub", 40), origin="manual")
    path = failing.save(tmp_path)
    assert main(["bisect", str(path), "--mutant", "reversed_sub"]) == 1
    out = capsys.readouterr().out
    assert "first diverging node" in out and "(sub)" in out and "confirmed" in out
    written = sorted((tmp_path / "bisected" / failing.case_id).iterdir())
    cases = [p for p in written if p.suffix == ".json"]
    repros = [p for p in written if p.name.startswith("repro_")]
    assert len(cases) == 1 and len(repros) == 1
    assert repros[0].name == f"repro_{cases[0].stem}.py"
    from fuzzkit.case import load

    mini = load(cases[0])
    assert [n["op"] for n in mini.inputs["graph"]["nodes"]] == ["sub"]
    assert mini.failure is not None and mini.origin == "bisect"
    # the repro reproduces under the mutant, and not without it
    assert _run_script(repros[0], "--mutant", "reversed_sub") == 1
    assert _run_script(repros[0]) == 0
    capsys.readouterr()

    # --json, --out
    assert main(["bisect", str(path), "--mutant", "reversed_sub", "--json",
                 "--out", str(tmp_path / "o")]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["op"] == "sub" and data["confirmed"] and Path(data["repro"]).exists()

    # a case that does not fail: exit 0, nothing written
    assert main(["bisect", str(path), "--out", str(tmp_path / "none")]) == 0
    assert "passes" in capsys.readouterr().out
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("argv, message", [
    (["--mutant", "no_such"], "no mutant"),
    (["--impl", "no_such"], "no implementation"),
])
def test_cli_bisect_usage_errors(toy_registered: Target, tmp_path: Path, argv: list[str],
                                 message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from fuzzkit.cli import main

    path = Case("toy_graphs", "toy", toy_case(0, 10)).save(tmp_path)
    assert main(["bisect", str(path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_bisect_refuses_bad_files(toy_registered: Target, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from fuzzkit.cli import main

    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"format": "fuzzkit-case/1", "inputs": ')
    assert main(["bisect", str(corrupt)]) == 2
    not_graph = Case("toy_graphs", "toy", {"x": np.zeros(3)}).save(tmp_path)
    assert main(["bisect", str(not_graph)]) == 2
    unknown = Case("no_such_target", "toy", toy_case(0, 5)).save(tmp_path)
    assert main(["bisect", str(unknown)]) == 2
    errs = capsys.readouterr().err.strip().splitlines()
    assert len(errs) == 3 and "not valid JSON" in errs[0] and "not a graph case" in errs[1]
    assert "unknown target" in errs[2]


def test_cli_bisect_needs_the_targets_hook(
    toy_registered: Target,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`fuzzkit bisect` is the target's hook: a target without one says so in one line, and
    writes nothing (neither into the default ./bisected/ nor beside the case)."""
    import dataclasses

    from fuzzkit.cli import main
    from fuzzkit.registry import register_target

    register_target(dataclasses.replace(toy_registered, bisect=None), replace=True)
    cases = tmp_path / "cases"
    path = Case("toy_graphs", "toy", failing_toy_case("reversed_sub", 10)).save(cases)
    monkeypatch.chdir(tmp_path)
    assert main(["bisect", str(path), "--mutant", "reversed_sub"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no bisection" in err[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == [
        Path("cases"),
        path.relative_to(tmp_path),
    ]


# ---------------------------------------------------------------------------------------------
# The real `compiler` target: H2's fusing compiler under its shipped mutants.

COMPILER_OPS = ("add", "sub", "mul", "neg", "abs", "tanh", "sigmoid", "relu", "clamp",
                "maximum", "sum", "amax", "permute", "reshape")
SINGLE_MUTANT, SINGLE_OP = "sub-operands-swapped", "sub"
FUSION_MUTANT, FUSION_OPS = "fused-sub-mul-stale-temp", ("sub", "mul")


@pytest.fixture(scope="module")
def compiler() -> tuple[Target, Implementation]:
    pytest.importorskip("fuzzkit.targets.compiler.graphs.bound")
    pytest.importorskip("fuzzkit.targets.compiler.graphs.generate")
    mod = pytest.importorskip("fuzzkit.targets.compiler")
    pytest.importorskip("fuzzkit.targets.compiler.mutants")
    target = mod.target()
    missing = {SINGLE_MUTANT, FUSION_MUTANT} - {m.name for m in target.mutants}
    if missing:
        pytest.fail(f"the compiler target lost the mutants these tests use: {sorted(missing)}")
    impl = target.implementation("fusing")
    reason = impl.unavailable()
    if reason:
        pytest.skip(reason)
    return target, impl


def _failing_compiler_case(target: Target, impl: Implementation, mutant: str, n: int,
                           needs: tuple[str, ...]) -> dict:
    from fuzzkit.runner import check_case
    from fuzzkit.targets.compiler.graphs import generate
    from fuzzkit.targets.compiler.graphs.values import round_to_dtype

    for seed in range(40):
        rng = np.random.default_rng(seed)
        graph = generate.random_graph(rng, n, COMPILER_OPS)
        if not all(any(nd["op"] == o for nd in graph["nodes"]) for o in needs):
            continue
        values = [round_to_dtype(rng.uniform(0.25, 2.0, x["shape"])
                                 * rng.choice([-1.0, 1.0], x["shape"]), "float32")
                  for x in graph["inputs"]]
        inputs = {"graph": graph, "dtype": "float32", "dynamic": False, "values": values}
        with target.mutant(mutant).applied():
            failure = check_case(target, impl, inputs, properties=False, confirm=False).failure
        if failure is not None and failure.kind == "mismatch":
            return inputs
    pytest.skip(f"no generated graph fails under {mutant}")


@pytest.fixture(scope="module")
def single_op_case(compiler: tuple[Target, Implementation]) -> dict:
    return _failing_compiler_case(*compiler, SINGLE_MUTANT, 40, (SINGLE_OP,))


def test_compiler_single_op_mutant_is_named_in_log_calls(
        compiler: tuple[Target, Implementation], single_op_case: dict) -> None:
    target, impl = compiler
    n = len(single_op_case["graph"]["nodes"])
    with target.mutant(SINGLE_MUTANT).applied():
        result = bisect(target, impl, single_op_case)
    assert result.op == SINGLE_OP, result.steps
    assert result.window == [result.first_node]
    assert result.confirmed and not result.nondeterministic
    assert result.compile_calls <= math.log2(n) + 3, result.steps
    # the window inputs are the reference values rounded to float32, and it fails with them
    mini = result.minimized_inputs
    assert all(np.asarray(v).dtype == np.float32 for v in mini["values"])
    assert result.failure is not None and result.failure.details["op"] == SINGLE_OP


def test_compiler_fusion_only_mutant_is_the_fused_pair(
        compiler: tuple[Target, Implementation]) -> None:
    target, impl = compiler
    inputs = _failing_compiler_case(target, impl, FUSION_MUTANT, 40, FUSION_OPS)
    with target.mutant(FUSION_MUTANT).applied():
        result = bisect(target, impl, inputs)
    ops = {nd["name"]: nd["op"] for nd in inputs["graph"]["nodes"]}
    assert sorted(ops[w] for w in result.window) == sorted(FUSION_OPS), result.steps
    assert result.op == "mul" and result.confirmed


def test_compiler_cli_and_repro(compiler: tuple[Target, Implementation], single_op_case: dict,
                                tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fuzzkit.cli import main

    path = Case("compiler", "fusing", single_op_case, origin="manual").save(tmp_path)
    assert main(["bisect", str(path)]) == 0  # the clean compiler passes it
    assert main(["bisect", str(path), "--mutant", SINGLE_MUTANT, "--out",
                 str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert f"({SINGLE_OP})" in out
    repro = next((tmp_path / "b").glob("repro_*.py"))
    assert (tmp_path / "b" / (repro.stem[len("repro_"):] + ".json")).exists()
    env = dict(os.environ, OMP_NUM_THREADS="1", TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, str(repro), "--mutant", SINGLE_MUTANT],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "REPRODUCES" in run.stdout and "max error" in run.stdout
    clean = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True,
                           env=env, timeout=300)
    assert clean.returncode == 0, clean.stdout + clean.stderr


def test_window_inputs_are_reference_values_rounded_to_the_dtype() -> None:
    from fuzzkit.targets.compiler.graphs.values import round_to_dtype

    target = toy_target()
    inputs = failing_toy_case("reversed_sub", 40)
    inputs = dict(inputs, dtype="float16",
                  values=[round_to_dtype(v, "float16") for v in inputs["values"]])
    with target.mutant("reversed_sub").applied():
        result = bisect(target, target.implementation("toy"), inputs)
    mini = result.minimized_inputs
    ref = toy_reference(inputs)["intermediates"]
    for spec, value in zip(mini["graph"]["inputs"], mini["values"]):
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, round_to_dtype(value, "float16"))
        np.testing.assert_array_equal(value, round_to_dtype(ref[spec["name"]], "float16"))
    assert result.signature.endswith(":float16:value")
    assert round_to_dtype(np.array([1 + 2**-9]), "bfloat16")[0] == 1.0


def test_a_crash_is_cut_to_the_ops_that_crash_together() -> None:
    """A compiler crash has no diverging value to follow: every kept node stays an output and
    ddmin finds the two twin ops (values fed from the reference), in a confirmed repro."""
    target = toy_target()
    inputs = toy_case(3, 30)
    graph = inputs["graph"]
    for k in range(2):
        graph["nodes"].append({"name": f"twin{k}", "op": "clamp", "args": ["n7"], "attrs": {},
                               "shape": SHAPE})
        graph["outputs"].append(f"twin{k}")
    with target.mutant("twin_crash").applied():
        result = bisect(target, target.implementation("toy"), inputs)
    assert result.original_failure.kind == "crash"
    assert result.window == ["twin0", "twin1"]
    assert result.confirmed and not result.nondeterministic
    assert result.minimized_inputs["graph"]["outputs"] == ["twin0", "twin1"]
