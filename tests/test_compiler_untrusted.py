"""Compiler cases come from strangers (issue "Untrusted case files never run code").

Three layers, each tested with crafted files:

* repro scripts (``targets/compiler/repro.py``) carry everything from the case and the bisection
  as one JSON string literal, parsed at run time: node names, ops, windows, signatures and
  implementation names full of quotes, triple quotes, backslashes, newlines and
  ``__import__(...)`` payloads stay data -- the marker file those payloads would write never
  appears, and the script prints the crafted strings back unchanged;
* ``fuzzkit.targets.compiler.checks.validate`` / ``fuzzkit.targets.compiler.graphs.build.validate_graph``
  accept only plain identifiers as names and, per node, exactly the keys and attributes its op
  declares (``fuzzkit.targets.compiler.graphs.ops``), with shapes that follow the op's shape rule; on
  garbage they answer with one line and never raise; every generated case passes;
* the compiler's resource limits (``fuzzkit.targets.compiler.limits``) refuse crafted cases beyond each
  limit by name before anything is built, pass every generated case, and never raise.
"""

from __future__ import annotations

import ast
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import pytest

pytest.importorskip("torch")

from fuzzkit import limits, reach  # noqa: E402
from fuzzkit.case import Case  # noqa: E402
from fuzzkit.failure import Failure  # noqa: E402
from fuzzkit.targets.compiler.graphs import build  # noqa: E402
from fuzzkit.targets.compiler.graphs.ops import OPS, SpecError  # noqa: E402
from fuzzkit.registry import get_target, register_target, unregister_target  # noqa: E402
from fuzzkit.targets.compiler.bisect import bisect  # noqa: E402
from fuzzkit.targets.compiler.repro import write_repro  # noqa: E402
from test_bisect import _run_script  # noqa: E402
from fuzzkit.target import Implementation, Mutant, Target  # noqa: E402
from fuzzkit.targets.compiler import checks  # noqa: E402
from fuzzkit.targets.compiler.limits import LIMITS  # noqa: E402


def node(name: str, op: str, args: list[str], out: list[int], **attrs: Any) -> dict:
    return {"name": name, "op": op, "args": list(args), "attrs": attrs, "shape": list(out)}


def small_case() -> dict:
    graph = {"inputs": [{"name": "x0", "shape": [3, 5]}, {"name": "x1", "shape": [5]}],
             "nodes": [node("n0", "mul", ["x0", "x1"], [3, 5]),
                       node("n1", "clamp", ["n0"], [3, 5], min=-1.0, max=None),
                       node("n2", "sum", ["n1"], [3], dim=1, keepdim=False),
                       node("n3", "sub", ["n0", "x0"], [3, 5])],
             "outputs": ["n3", "n2"]}
    rng = np.random.default_rng(1)
    return {"graph": graph, "dtype": "float32", "dynamic": False,
            "values": [rng.uniform(-1, 1, (3, 5)).astype(np.float32),
                       rng.uniform(-1, 1, (5,)).astype(np.float32)]}


# ---------------------------------------------------------------------------------------------
# 1. Repro scripts carry data only as data


def payloads(marker: Path) -> list[str]:
    """Strings that run ``code`` (which writes ``marker``) if spliced into Python source."""
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('pwned')"
    return [
        f'n"""; {code}; """',
        f"n'''; {code}; '''",
        f'n"; {code}; "',
        f"n'\n{code}\n#",
        f"n\\\n{code}\n",
        f'n\\"; {code}; #',
        f"n{{0}}{{{code}}}%s",
        f"n\r{code}\u2028{code}\x00",
        f"n\\N{{DIGIT ONE}}\\u0041\\x41 \U0001f642 {code}",
        f"n */ --> ]]> {code}",
    ]


def _run(script: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True,
                          env=env, timeout=300, cwd=str(cwd))


def _printed(stdout: str, prefix: str) -> Any:
    """The escaped value the script printed after ``prefix`` (``ascii()``, one line)."""
    line = next(line for line in stdout.splitlines() if line.startswith(prefix))
    return ast.literal_eval(line[len(prefix):])


def _meta_of(text: str) -> tuple[dict, str]:
    """The script's META document and the source segment of its literal, checking that META is
    ``json.loads(<one string constant>)`` and that no other constant holds case data."""
    tree = ast.parse(text)
    metas = [n for n in tree.body if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "META" for t in n.targets)]
    assert len(metas) == 1
    call = metas[0].value
    assert isinstance(call, ast.Call) and ast.unparse(call.func) == "json.loads"
    assert len(call.args) == 1 and isinstance(call.args[0], ast.Constant)
    assert isinstance(call.args[0].value, str)
    return json.loads(call.args[0].value), ast.get_source_segment(text, call.args[0])


def test_repro_keeps_every_case_string_as_data(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    bad = payloads(marker)
    case = Case("compiler", bad[5], small_case(), origin="manual")
    case_path = case.save(tmp_path)
    script = write_repro(case, case_path, first_node=bad[0], op=bad[1], window=bad[2:6],
                         signature=bad[6] + bad[7] + bad[8] + bad[9])
    text = script.read_text()
    assert text.isascii()
    compile(text, str(script), "exec")
    meta, literal = _meta_of(text)
    assert meta["first_node"] == bad[0] and meta["op"] == bad[1]
    assert meta["window"] == bad[2:6] and meta["implementation"] == bad[5]
    assert meta["signature"] == bad[6] + bad[7] + bad[8] + bad[9]
    assert meta["target"] == "compiler" and meta["case_file"] == case_path.name
    # no path of the machine that wrote it: the script finds fuzzkit by where it lies
    assert "project" not in meta and str(Path(__file__).resolve().parents[1]) not in text
    # outside the one literal, nothing of the case: no payload fragment
    rest = text.replace(literal, "")
    assert "pwned" not in rest and str(marker) not in rest
    assert case.case_id not in rest and case_path.name not in rest
    constants = [n.value for n in ast.walk(ast.parse(text))
                 if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert sum("pwned" in c for c in constants) == 1

    # run it: the implementation named by the file is not a registered one -> exit 2, the
    # details printed back as they were, and no marker
    run = _run(script, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "no implementation" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert _printed(run.stdout, "first diverging node: ") == bad[0]
    assert _printed(run.stdout, "op: ") == bad[1]
    assert _printed(run.stdout, "window: ") == bad[2:6]
    assert _printed(run.stdout, "signature: ") == meta["signature"]
    assert not marker.exists()


@pytest.mark.parametrize("impl", ["fuzzkit.targets.compiler.fusing", "os", "../fusing", "fusing.py",
                                  "inductor\n", "subprocess:Popen"])
def test_repro_impl_selects_registered_compilers_only(impl: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    case = Case("compiler", "fusing", small_case(), origin="manual")
    bad = payloads(marker)
    script = write_repro(case, case.save(tmp_path), first_node=bad[3], op="mul",
                         window=[bad[3]], signature=bad[0])
    run = _run(script, "--impl", impl, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "no implementation" in run.stderr
    assert _printed(run.stdout, "first diverging node: ") == bad[3]
    assert not marker.exists()


def test_repro_with_crafted_details_still_runs_the_case(tmp_path: Path) -> None:
    """The registered compiler, the case from the file: it passes (exit 0); the crafted details
    are printed, not run."""
    marker = tmp_path / "marker"
    bad = payloads(marker)
    case = Case("compiler", "fusing", small_case(), origin="manual")
    script = write_repro(case, case.save(tmp_path), first_node=bad[4], op=bad[0],
                         window=bad[:3], signature=bad[8])
    run = _run(script, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "does not reproduce" in run.stdout and "max error" in run.stdout
    assert _printed(run.stdout, "first diverging node: ") == bad[4]
    assert not marker.exists()


def test_repro_refuses_a_case_file_that_fails_validation(tmp_path: Path) -> None:
    """A case file edited behind the script's back (a hostile node name) is refused, exit 2."""
    inputs = small_case()
    inputs["graph"]["nodes"][0]["name"] = 'n0"); import os; ("'
    case = Case("compiler", "fusing", inputs, origin="manual")
    script = write_repro(case, case.save(tmp_path), first_node="n0")
    run = _run(script, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "not a plain identifier" in run.stderr


# A graph target with no name rules at all (a plug-in): bisect and the repro must still keep
# its crafted node names as data.

SHAPE = [4, 6]
_BUGS: set[str] = set()


def _eval(graph: dict, values: list, dtype: Any, compiled: bool) -> dict[str, np.ndarray]:
    env = {x["name"]: np.asarray(v, dtype=dtype) for x, v in zip(graph["inputs"], values)}
    for n in graph["nodes"]:
        args = [env[a] for a in n["args"]]
        if n["op"] == "sub":
            a, b = args[::-1] if compiled and "reversed_sub" in _BUGS else args
            out = a - b
        elif n["op"] == "tanh":
            out = np.tanh(args[0])
        else:
            out = -args[0]
        env[n["name"]] = np.asarray(out, dtype=dtype)
    return env


def _reference(inputs: dict) -> dict:
    env = _eval(inputs["graph"], inputs["values"], np.float64, False)
    return {"outputs": [env[o] for o in inputs["graph"]["outputs"]], "intermediates": env}


def _compiled(inputs: dict) -> dict:
    env = _eval(inputs["graph"], inputs["values"], np.float32, True)
    return {"outputs": [env[o].astype(np.float64) for o in inputs["graph"]["outputs"]]}


def _oracle(inputs: dict, expected: dict, actual: dict) -> Optional[Failure]:
    ops = {n["name"]: n["op"] for n in inputs["graph"]["nodes"]}
    for name, e, a in zip(inputs["graph"]["outputs"], expected["outputs"], actual["outputs"]):
        if (np.abs(a - e) > 1e-4 * (1 + np.abs(e))).any():
            op = ops.get(name, "input")
            return Failure("mismatch", "off", f"mismatch:{op}:{inputs['dtype']}:value",
                           {"node": name, "op": op, "dtype": inputs["dtype"],
                            "error_class": "value"})
    return None


class _Bug:
    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        _BUGS.add(self.name)

    def __exit__(self, *exc: Any) -> None:
        _BUGS.discard(self.name)


@pytest.fixture
def plugin_graphs() -> Iterator[Target]:
    target = Target(name="untrusted_graphs", description="a graph target without name rules",
                    strategy=lambda: None, reference=_reference,
                    implementations={"toy": Implementation("toy", _compiled)},
                    oracle=_oracle,
                    mutants=[Mutant("reversed_sub", "toy", "operand order", "-",
                                    lambda: _Bug("reversed_sub"))])
    register_target(target, replace=True)
    try:
        yield target
    finally:
        unregister_target(target.name)


def _crafted_graph_case(names: list[str]) -> dict:
    """A chain neg, tanh, sub(., x1), neg, ... whose node names are ``names``."""
    rng = np.random.default_rng(0)
    inputs = [{"name": "x0", "shape": SHAPE}, {"name": "x1", "shape": SHAPE}]
    nodes, prev = [], "x0"
    for k, name in enumerate(names):
        op = ("neg", "tanh", "sub")[k % 3]
        args = [prev, "x1"] if op == "sub" else [prev]
        nodes.append({"name": name, "op": op, "args": args, "attrs": {}, "shape": SHAPE})
        prev = name
    return {"graph": {"inputs": inputs, "nodes": nodes, "outputs": [prev]}, "dtype": "float32",
            "values": [rng.uniform(-2, 2, SHAPE).astype(np.float32) for _ in inputs]}


def test_bisected_crafted_node_names_stay_data(plugin_graphs: Target, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    names = payloads(marker)
    inputs = _crafted_graph_case(names)
    with plugin_graphs.mutant("reversed_sub").applied():
        result = bisect(plugin_graphs, plugin_graphs.implementation("toy"), inputs)
    assert result.op == "sub" and result.first_node == names[2] and result.confirmed
    case = Case(plugin_graphs.name, "toy", result.minimized_inputs, failure=result.failure,
                origin="bisect")
    script = write_repro(case, case.save(tmp_path / "b"), first_node=result.first_node,
                         op=result.op, window=result.window, signature=result.signature)
    meta, _ = _meta_of(script.read_text())
    assert meta["first_node"] == names[2] and meta["window"] == result.window

    # in this process (the plug-in target registered): it reproduces under the mutant only
    def run_here(*argv: str) -> int:
        return _run_script(script, *argv)

    assert run_here("--mutant", "reversed_sub") == 1
    assert run_here() == 0
    # in a fresh process the plug-in target does not exist: exit 2 after printing the details
    run = _run(script, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert _printed(run.stdout, "first diverging node: ") == names[2]
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# 2. Names and attributes follow the op specs; garbage is refused, never raised


def _generated(count: int) -> list[dict]:
    target = get_target("compiler")
    out: list[dict] = []
    for impl in ("fusing", "inductor"):
        out += reach.generated(target.strategy_for(target.implementation(impl)), count // 2,
                               seed=0)
    return out


@pytest.fixture(scope="module")
def generated_cases() -> list[dict]:
    return _generated(300)


def test_generated_cases_validate_and_stay_within_limits(generated_cases: list[dict]) -> None:
    target = get_target("compiler")
    assert len(generated_cases) == 300
    most = {lim.name: 0 for lim in LIMITS}
    for inputs in generated_cases:
        assert checks.validate(inputs) is None
        assert limits.check("compiler", target.limits, inputs) is None
        shapes = build.graph_shapes(inputs["graph"])
        assert all(shapes[n["name"]] == n["shape"] for n in inputs["graph"]["nodes"])
        for lim in LIMITS:
            most[lim.name] = max(most[lim.name], lim.measure(inputs))
    # the defaults are far above what the strategy makes (the module docstring has the numbers)
    for lim in LIMITS:
        assert most[lim.name] * 8 <= lim.default, (lim.name, most[lim.name], lim.default)


def test_the_compiler_target_declares_its_limits() -> None:
    target = get_target("compiler")
    assert [lim.name for lim in target.limits] == ["inputs", "nodes", "elements",
                                                   "total_elements", "matmul_work"]
    assert target.validate is checks.validate


HOSTILE_NAMES = ['n0"', "n0'", 'a"""b', "a\nb", "a\\b", "a b", "a.b", "a-b", "", "0abc",
                 "def", "class", "None", "True", "lambda", "__class__", "__import__", "x" * 65,
                 "ñ", "n\u2028", "n\x00", "__import__('os').system('id')", "a;b", 7, None,
                 ["n0"], {"n": 0}, 1.5, True]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=[ascii(n)[:20] for n in HOSTILE_NAMES])
@pytest.mark.parametrize("where", ["node", "input"])
def test_names_must_be_plain_identifiers(name: Any, where: str) -> None:
    inputs = small_case()
    graph = inputs["graph"]
    if where == "node":
        graph["nodes"][3]["name"] = name
        graph["outputs"][0] = name
    else:
        graph["inputs"][0]["name"] = name
        graph["nodes"][0]["args"][0] = name
        graph["nodes"][3]["args"][1] = name
    problem = checks.validate(inputs)
    assert isinstance(problem, str) and "\n" not in problem
    assert "identifier" in problem or "string" in problem, problem
    with pytest.raises(ValueError, match="invalid graph"):
        build.to_graph_module(graph)


def test_longest_plain_names_are_accepted() -> None:
    inputs = small_case()
    for name in ("x" * 64, "_", "_private", "match", "case", "type", "print", "self", "torch",
                 "inf", "nan", "fuzzkit_graphs_ops_mul"):
        case = small_case()
        case["graph"]["nodes"][3]["name"] = name
        case["graph"]["outputs"][0] = name
        assert checks.validate(case) is None, name
        gm = build.to_graph_module(case["graph"])
        ref = build.run_reference(case["graph"], case["values"])
        assert name in ref and gm is not None
    assert checks.validate(inputs) is None


def _with(change: Any) -> dict:
    inputs = small_case()
    change(inputs["graph"])
    return inputs


def _set(path: list[Any], value: Any) -> Any:
    def change(graph: dict) -> None:
        obj = graph
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value
    return change


def _drop(path: list[Any]) -> Any:
    def change(graph: dict) -> None:
        obj = graph
        for key in path[:-1]:
            obj = obj[key]
        del obj[path[-1]]
    return change


REFUSED = [
    # names, definitions, outputs
    (_set(["nodes", 1, "name"], "n0"), "duplicate name"),
    (_set(["inputs", 1, "name"], "x0"), "duplicate name"),
    (_set(["nodes", 0, "name"], "x1"), "duplicate name"),
    (_set(["outputs"], ["n3", "n3"]), "listed twice"),
    (_set(["outputs"], ["zz"]), "'zz' is not an input or node"),
    (_set(["outputs"], []), "no outputs"),
    (_set(["outputs"], [3]), "is not an input or node"),
    (_set(["nodes", 0, "args"], ["x0", "n3"]), "is not an input or an earlier node"),
    (_set(["nodes", 0, "args"], ["x0", "zz"]), "is not an input or an earlier node"),
    (_set(["nodes", 0, "args"], ["x0"]), "takes 2 args, got 1"),
    (_set(["nodes", 0, "args"], ["x0", "x1", "x1"]), "takes 2 args, got 3"),
    (_set(["nodes", 0, "args"], "x0"), "args must be a list"),
    (_set(["nodes", 0, "args"], [["x0"], "x1"]), "is not an input or an earlier node"),
    (_set(["nodes", 0, "op"], "frobnicate"), "unknown op"),
    (_set(["nodes", 0, "op"], "__import__"), "unknown op"),
    (_set(["nodes", 0, "op"], ["mul"]), "unknown op"),
    # record keys
    (_set(["nodes", 0, "code"], "import os"), "unknown key 'code'"),
    (_set(["nodes", 0, "target"], "os.system"), "unknown key 'target'"),
    (_drop(["nodes", 0, "attrs"]), "needs key 'attrs'"),
    (_drop(["nodes", 0, "shape"]), "needs key 'shape'"),
    # an input may declare its dtype (issue 23), only a case dtype: a wider one is refused, and
    # any other key still is
    (_set(["inputs", 0, "dtype"], "float64"), "dtype must be one of float32, float16, bfloat16"),
    (_set(["inputs", 0, "dtype"], ["float32"]), "dtype must be one of"),
    (_set(["inputs", 0, "stride"], [1, 1]), "unknown key 'stride'"),
    (_set(["extra"], 1), "unknown key 'extra'"),
    (_drop(["outputs"]), "needs key 'outputs'"),
    # attributes against the op spec
    (_set(["nodes", 0, "attrs"], {"alpha": 2}), "mul has no attribute 'alpha'"),
    (_set(["nodes", 1, "attrs", "inplace"], True), "clamp has no attribute 'inplace'"),
    (_set(["nodes", 1, "attrs", "_mode"], "flatten"), "has no attribute '_mode'"),
    (_drop(["nodes", 1, "attrs", "max"]), "needs attribute 'max'"),
    (_set(["nodes", 1, "attrs", "min"], "__import__('os')"), "'min' must be a number or null"),
    (_set(["nodes", 1, "attrs", "min"], float("nan")), "must not be NaN"),
    (_set(["nodes", 1, "attrs", "min"], True), "must be a number"),
    (_set(["nodes", 1, "attrs", "min"], None), "clamp needs min or max"),
    (_set(["nodes", 1, "attrs", "min"], 10**400), "is too large"),
    (_set(["nodes", 2, "attrs", "dim"], "1"), "'dim'"),
    (_set(["nodes", 2, "attrs", "dim"], 1.0), "'dim'"),
    (_set(["nodes", 2, "attrs", "dim"], 2), "out of range for a rank-2 operand"),
    (_set(["nodes", 2, "attrs", "dim"], -1), "'dim'"),
    (_set(["nodes", 2, "attrs", "dim"], [1, 1]), "repeats a dim"),
    (_set(["nodes", 2, "attrs", "dim"], []), "non-empty list"),
    (_set(["nodes", 2, "attrs", "keepdim"], 1), "'keepdim' must be true or false"),
    (_set(["nodes", 2, "attrs"], [1, False]), "attrs must be an object"),
    # shapes
    (_set(["nodes", 2, "shape"], [5]), "shape [5] but sum makes [3]"),
    (_set(["nodes", 2, "shape"], "3"), "shape must be a list"),
    (_set(["inputs", 0, "shape"], [3, -5]), "shape must be a list"),
    (_set(["inputs", 0, "shape"], [1, 1, 1, 1, 1]), "at most 4"),
    (_set(["inputs", 1, "shape"], [4]), "do not broadcast"),
    # structure
    (_set(["nodes"], {"n0": {}}), "graph nodes must be a list"),
    (_set(["nodes", 0], ["n0", "mul"]), "node 0 must be an object"),
    (_set(["inputs", 0], "x0"), "graph input 0 must be an object"),
]


@pytest.mark.parametrize("change, message", REFUSED,
                         ids=[f"{k}-{m[:24]}" for k, (_, m) in enumerate(REFUSED)])
def test_what_the_op_specs_do_not_declare_is_refused(change: Any, message: str) -> None:
    inputs = _with(change)
    problem = checks.validate(inputs)
    assert isinstance(problem, str) and "\n" not in problem
    assert message in problem, problem
    assert build.validate_graph(inputs["graph"]) == problem


@pytest.mark.parametrize("op, args, shape, attrs, message", [
    ("reshape", [[6]], [4], {"shape": [4]}, "cannot reshape"),
    ("reshape", [[6]], [6], {"shape": [-1]}, "must be >= 0"),
    ("expand", [[3]], [2, 4], {"shape": [2, 4]}, "cannot expand"),
    ("expand", [[2, 3]], [3], {"shape": [3]}, "cannot expand"),
    ("permute", [[2, 3]], [3, 2], {"perm": [1, 1]}, "not a permutation"),
    ("permute", [[2, 3]], [3, 2], {"perm": [1, 2]}, "not a permutation"),
    ("transpose", [[2, 3]], [3, 2], {"dim0": 0, "dim1": 2}, "dim1 2 is out of range"),
    ("squeeze", [[2, 3]], [3], {"dim": 0}, "is not 1"),
    ("unsqueeze", [[2, 3]], [2, 3, 1], {"dim": 3}, "out of range"),
    ("unsqueeze", [[1, 1, 1, 1]], [1, 1, 1, 1, 1], {"dim": 0}, "rank-5"),
    ("cat", [[2, 3], [2, 4]], [4, 3], {"dim": 0}, "cannot cat"),
    ("index_select", [[2, 3]], [2, 2], {"dim": 1, "index": [0, 3]}, "out of range"),
    ("index_select", [[2, 3]], [2, 1], {"dim": 1, "index": ["0"]}, "'index' entry"),
    ("matmul", [[2, 3], [4, 5]], [2, 5], {}, "matmul needs"),
    ("bmm", [[2, 3, 4], [3, 4, 5]], [2, 3, 5], {}, "bmm needs"),
    ("softmax", [[]], [], {"dim": 0}, "out of range for a rank-0"),
    ("amax", [[2, 0]], [2], {"dim": 1, "keepdim": False}, "zero-size"),
    ("pow", [[2]], [2], {"exponent": 1e6}, "must be in"),
    ("pow", [[2]], [2], {"exponent": float("inf")}, "must be finite"),
    ("add_scalar", [[2]], [2], {"value": "1"}, "must be a number"),
])
def test_node_attributes_follow_the_op_spec(op: str, args: list, shape: list, attrs: dict,
                                            message: str) -> None:
    inputs = [{"name": f"x{k}", "shape": s} for k, s in enumerate(args)]
    graph = {"inputs": inputs,
             "nodes": [node("y", op, [i["name"] for i in inputs], shape, **attrs)],
             "outputs": ["y"]}
    problem = build.validate_graph(graph)
    assert problem is not None and message in problem, problem


def test_shape_rules_agree_with_torch() -> None:
    """Wherever an op's concrete shape rule accepts a node, torch (meta tensors) gives the same
    shape: the rule is what validation and the limits trust instead of running anything."""
    from fuzzkit.targets.compiler.graphs import ops

    rnd = random.Random(0)
    dims = [0, 1, 2, 3, 5]

    def draw_attr(name: str, kind: str) -> Any:
        if name == "shape":
            return [rnd.choice(dims + [4, 6, 10]) for _ in range(rnd.randint(0, 4))]
        if name == "perm":
            perm = list(range(rnd.randint(0, 4)))
            rnd.shuffle(perm)
            return perm
        if name == "index":
            return [rnd.randint(0, 5) for _ in range(rnd.randint(0, 4))]
        if name == "keepdim":
            return rnd.random() < 0.5
        if kind == "dims":
            r = rnd.random()
            return (None if r < 0.3 else rnd.randint(0, 3) if r < 0.6
                    else sorted({rnd.randint(0, 3) for _ in range(rnd.randint(1, 3))}))
        if name in ("dim", "dim0", "dim1"):
            return rnd.randint(0, 4)
        if name in ("min", "max"):
            return rnd.choice([None, -1.0, 1.0, math.inf])
        return rnd.choice([0.5, 2.0, -1.0])

    agreed = 0
    for _ in range(3000):
        op = rnd.choice(sorted(OPS))
        spec = OPS[op]
        shapes = [[rnd.choice(dims) for _ in range(rnd.randint(0, 4))]
                  for _ in range(spec.arity)]
        if spec.arity > 1 and rnd.random() < 0.5:
            shapes = [list(shapes[0]) for _ in shapes]
        attrs = {k: draw_attr(k, a.kind) for k, a in spec.attributes.items()}
        try:
            out = spec.out_shape(shapes, attrs)
        except SpecError:
            continue
        # operands of dtypes the op takes (float32 where it can: a comparison's mask is bool)
        assert ops.eval_shape(op, attrs, shapes) == out, (op, shapes, attrs)
        agreed += 1
    assert agreed > 1000


GARBAGE: list[Any] = [
    None, 0, -1, 1.5, "graph", b"x", [], [1, 2], {}, {"graph": None},
    {"graph": [], "dtype": "float32", "values": []},
    {"graph": {"inputs": 1, "nodes": 2, "outputs": 3}, "dtype": "float32", "values": []},
    {"graph": {"inputs": [[]], "nodes": [], "outputs": []}, "dtype": "float32", "values": []},
    {"graph": {"inputs": [{"name": "x", "shape": "abc"}], "nodes": [], "outputs": ["x"]},
     "dtype": "float32", "values": [[1.0]]},
    {"graph": {"inputs": [{"name": "x", "shape": [10**40]}], "nodes": [], "outputs": ["x"]},
     "dtype": "float32", "values": [[1.0]]},
    {"graph": {"inputs": [{"name": "x", "shape": [2]}], "nodes": [None], "outputs": ["x"]},
     "dtype": "float32", "values": [[1.0, 2.0]]},
    {"graph": {"inputs": [{"name": "x", "shape": [2]}],
               "nodes": [{"name": "y", "op": {"a": 1}, "args": ["x"], "attrs": {}, "shape": [2]}],
               "outputs": ["y"]}, "dtype": "float32", "values": [[1.0, 2.0]]},
    {"graph": {"inputs": [{"name": "x", "shape": [2]}], "nodes": [], "outputs": ["x"]},
     "dtype": ["float32"], "values": [[1.0, 2.0]]},
    {"graph": {"inputs": [{"name": "x", "shape": [2]}], "nodes": [], "outputs": ["x"]},
     "dtype": "float32", "values": [[1.0, [2.0]]]},
    {"graph": {"inputs": [{"name": "x", "shape": [2]}], "nodes": [], "outputs": ["x"]},
     "dtype": "float32", "values": {"x": [1.0, 2.0]}},
    {"graph": {"inputs": [{"name": "x", "shape": [2]}], "nodes": [], "outputs": ["x"]},
     "dtype": "float32", "values": [{"x": 1}]},
    {"graph": {"inputs": [{"name": "x", "shape": [2]}], "nodes": [], "outputs": ["x"]},
     "dtype": "float32", "values": [["a", "b"]]},
    {"graph": {"inputs": [{"name": "x", "shape": [2]}], "nodes": [], "outputs": ["x"]},
     "dtype": "float32", "values": [[1.0, 2.0]], "dynamic": "yes"},
]


def _json_garbage(rnd: random.Random, depth: int = 0) -> Any:
    kind = rnd.randint(0, 9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rnd.choice([True, False])
    if kind == 2:
        return rnd.choice([0, -1, 1, 3, 2**31, 10**30, -(10**30)])
    if kind == 3:
        return rnd.choice([0.5, -0.0, math.inf, -math.inf, math.nan, 1e308])
    if kind in (4, 5, 6):
        return rnd.choice(["", "x0", "n0", "mul", "sum", "dim", "a\nb", "__import__('os')",
                           "float32", "shape", "args"])
    if kind in (7, 8):
        return [_json_garbage(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    return {rnd.choice(["name", "op", "args", "attrs", "shape", "dim", "x"]):
            _json_garbage(rnd, depth + 1) for _ in range(rnd.randint(0, 3))}


def _mutated(inputs: Any, rnd: random.Random) -> Any:
    """``inputs`` with one random place (dict value, list item) replaced by random JSON."""
    places: list[tuple[Any, Any]] = []

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                places.append((obj, k))
                walk(v)
        elif isinstance(obj, list):
            for k, v in enumerate(obj):
                places.append((obj, k))
                walk(v)

    walk(inputs)
    obj, key = rnd.choice(places)
    obj[key] = _json_garbage(rnd)
    return inputs


def _never_raises(inputs: Any) -> None:
    target = get_target("compiler")
    problem = limits.check("compiler", target.limits, inputs)
    assert problem is None or (isinstance(problem, str) and "\n" not in problem)
    verdict = checks.validate(inputs)
    assert verdict is None or (isinstance(verdict, str) and "\n" not in verdict)
    graph_verdict = build.validate_graph(inputs.get("graph") if isinstance(inputs, dict)
                                         else inputs)
    assert graph_verdict is None or isinstance(graph_verdict, str)
    if verdict is None:  # accepted: then it builds (and the limits measured it)
        assert problem is None or "exceeds the limit" in problem
        build.to_graph_module(inputs["graph"])


@pytest.mark.parametrize("garbage", GARBAGE, ids=[str(k) for k in range(len(GARBAGE))])
def test_garbage_is_refused_in_one_line_never_raised(garbage: Any) -> None:
    _never_raises(garbage)
    assert checks.validate(garbage) is not None


def test_mutated_cases_are_refused_or_built_never_raised(generated_cases: list[dict]) -> None:
    import copy

    rnd = random.Random(1)
    pool = [small_case()] + generated_cases[:40]
    refused = 0
    for _ in range(1500):
        inputs = _mutated(copy.deepcopy(rnd.choice(pool)), rnd)
        _never_raises(inputs)
        refused += checks.validate(inputs) is not None
    assert refused > 1000


# ---------------------------------------------------------------------------------------------
# 3. Resource limits


def _over(name: str) -> dict:
    """A case (no values needed: the limits come first) beyond limit ``name``."""
    x = {"name": "x", "shape": [2]}
    if name == "inputs":
        graph = {"inputs": [{"name": f"x{k}", "shape": [1]} for k in range(65)],
                 "nodes": [node("y", "neg", ["x0"], [1])], "outputs": ["y"]}
    elif name == "nodes":
        nodes = [node("n0", "neg", ["x"], [2])]
        nodes += [node(f"n{k}", "neg", [f"n{k - 1}"], [2]) for k in range(1, 10**5)]
        graph = {"inputs": [x], "nodes": nodes, "outputs": [nodes[-1]["name"]]}
    elif name == "elements":  # a broadcast of a [1] to 10**9 elements
        graph = {"inputs": [{"name": "x", "shape": [1]}],
                 "nodes": [node("e", "expand", ["x"], [10**9], shape=[10**9]),
                           node("y", "exp", ["e"], [10**9])], "outputs": ["y"]}
    elif name == "elements_broadcast":
        graph = {"inputs": [{"name": "a", "shape": [50000, 1]}, {"name": "b", "shape": [1, 50000]}],
                 "nodes": [node("y", "add", ["a", "b"], [50000, 50000])], "outputs": ["y"]}
    elif name == "elements_cat":
        graph = {"inputs": [{"name": "x", "shape": [2**20]}],
                 "nodes": [node("c1", "cat", ["x", "x"], [2**21], dim=0),
                           node("c2", "cat", ["c1", "c1"], [2**22], dim=0)], "outputs": ["c2"]}
    elif name == "elements_input":  # reshape needs the elements first: the input has them
        graph = {"inputs": [{"name": "x", "shape": [10**9]}],
                 "nodes": [node("y", "reshape", ["x"], [10**5, 10**4], shape=[10**5, 10**4])],
                 "outputs": ["y"]}
    elif name == "total_elements":
        n = 2**21
        nodes = [node("n0", "neg", ["x"], [n])]
        nodes += [node(f"n{k}", "neg", [f"n{k - 1}"], [n]) for k in range(1, 9)]
        graph = {"inputs": [{"name": "x", "shape": [n]}], "nodes": nodes, "outputs": ["n8"]}
    elif name == "matmul_work":
        graph = {"inputs": [{"name": "a", "shape": [1000, 1000]}],
                 "nodes": [node("y", "matmul", ["a", "a"], [1000, 1000])], "outputs": ["y"]}
    else:  # pragma: no cover
        raise KeyError(name)
    return {"graph": graph, "dtype": "float32", "values": []}


@pytest.mark.parametrize("case, limit", [
    ("inputs", "inputs"), ("nodes", "nodes"), ("elements", "elements"),
    ("elements_broadcast", "elements"), ("elements_cat", "elements"),
    ("elements_input", "elements"), ("total_elements", "total_elements"),
    ("matmul_work", "matmul_work")])
def test_cases_beyond_a_limit_are_refused_by_name(case: str, limit: str) -> None:
    import time

    target = get_target("compiler")
    inputs = _over(case)
    started = time.perf_counter()
    problem = limits.check("compiler", target.limits, inputs)
    assert time.perf_counter() - started < 5
    assert problem is not None and f"{limit}=" in problem and "--limit" in problem, problem
    assert "\n" not in problem
    # the user may raise it; then that limit passes (the next one may not)
    raised = limits.check("compiler", target.limits, inputs, {limit: 10**12})
    assert raised is None or f" {limit}=" not in raised


def test_limits_come_from_the_shape_rules_not_the_declared_shapes() -> None:
    """A node that declares a small shape but makes a huge one is refused as malformed: its
    declared shape is never what gets measured."""
    target = get_target("compiler")
    inputs = _over("elements")
    for n in inputs["graph"]["nodes"]:
        n["shape"] = [1]
    problem = limits.check("compiler", target.limits, inputs)
    assert problem is not None and "malformed" in problem and "makes [1000000000]" in problem
    inputs = _over("elements_broadcast")
    inputs["graph"]["nodes"][0]["shape"] = [1, 1]
    assert "malformed" in limits.check("compiler", target.limits, inputs)
