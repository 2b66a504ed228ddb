"""Graph (plain JSON dict) -> torch.fx, float64 reference, subgraphs and prefixes.

Graph data model (see the issue-10 spec)::

    {"inputs":  [{"name": "x0", "shape": [4, 7], "dtype": "float32"}, ...],
     "nodes":   [{"name": "n0", "op": "add", "args": ["x0", "x1"], "attrs": {},
                  "shape": [4, 7], "dtype": "float32"}, ...],
     "outputs": ["n3", "n5"]}

Dtypes: every value has one of :data:`.ops.VALUE_DTYPES`.  Graph inputs are the case's float
dtype; a node's is its op's ``dtype_rule`` of its operands' (:func:`value_dtypes`).  The
``"dtype"`` keys are optional (graphs written before they existed have none): where present
they must equal what the rules infer, so they document a graph and never change its meaning.

A graph may come from a file written by someone else, and its names and attributes end up in
the Python source torch.fx generates: :func:`validate_graph` (which :func:`to_graph_module` runs
first) accepts only plain identifiers as names (:data:`NAME_PATTERN`, no keywords, no dunder
prefix), exactly the record keys above, and per node exactly the attributes its op declares
(:class:`fuzzkit.targets.compiler.graphs.ops.Attr`), with shapes that follow the op's concrete
shape rule.
"""

from __future__ import annotations

import copy
import keyword
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Any, Sequence

import numpy as np
import torch
import torch.fx

from fuzzkit.limits import MALFORMED

from .ops import FLOAT_DTYPES, INT_DTYPES, MAX_RANK, OPS, SpecError, is_int, shown

__all__ = [
    "to_graph_module",
    "run_reference",
    "run_eager",
    "subgraph",
    "prefix",
    "shapes_of",
    "validate_graph",
    "graph_shapes",
    "GraphError",
    "name_problem",
    "node_index",
    "consumers",
    "eager_module",
    "frozen",
    "value_dtypes",
    "infer_dtypes",
]

NAME_KEY = "fuzzkit_name"


def to_graph_module(graph: dict) -> torch.fx.GraphModule:
    """Build an fx GraphModule: one placeholder per input (in order), one ``call_function`` per node
    (target = ``fuzzkit.targets.compiler.graphs.ops.<op>``, attrs as kwargs), ``forward`` returns a
    tuple of outputs.
    A graph :func:`validate_graph` refuses raises ValueError (nothing of it reaches fx)."""
    problem = validate_graph(graph)
    if problem is not None:
        raise ValueError(f"invalid graph: {problem}")
    g = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    for inp in graph["inputs"]:
        n = g.create_node("placeholder", inp["name"], name=inp["name"])
        n.meta[NAME_KEY] = inp["name"]
        env[inp["name"]] = n
    for node in graph["nodes"]:
        spec = OPS[node["op"]]
        args = tuple(env[a] for a in node["args"])
        kwargs = {
            k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in node["attrs"].items()
        }
        n = g.create_node("call_function", spec.torch_fn, args, kwargs, name=node["name"])
        n.meta[NAME_KEY] = node["name"]
        env[node["name"]] = n
    g.output(tuple(env[o] for o in graph["outputs"]))
    g.lint()
    return torch.fx.GraphModule(torch.nn.Module(), g)


#: What a cast's ``dtype`` attr means in the float64 reference: float targets stay float64 (the
#: exact math; the rounding to the target is in the bound), ints are int64, bools bool.
REFERENCE_DTYPES = {**{d: "float64" for d in FLOAT_DTYPES}, **{d: "int64" for d in INT_DTYPES},
                    "bool": "bool"}


def _reference_cast(a: torch.Tensor, dtype: str) -> torch.Tensor:
    """to_dtype in the reference (:data:`REFERENCE_DTYPES`)."""
    return a.to({"float64": torch.float64, "int64": torch.int64, "bool": torch.bool}[dtype])


class _Recorder(torch.fx.Interpreter):
    """Interpreter that records the value of every placeholder and call_function node; in the
    ``reference`` run a node's ``dtype`` attr (a cast) is read as :data:`REFERENCE_DTYPES`."""

    def __init__(self, gm: torch.fx.GraphModule, reference: bool = False):
        super().__init__(gm)
        self.values: dict[str, torch.Tensor] = {}
        self.reference = reference

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if self.reference and target is OPS["to_dtype"].torch_fn:
            kwargs = dict(kwargs)
            wanted = REFERENCE_DTYPES[kwargs.pop("dtype")]
            return _reference_cast(args[0], wanted)
        return super().call_function(target, args, kwargs)

    def run_node(self, n: torch.fx.Node) -> Any:
        out = super().run_node(n)
        if n.op in ("placeholder", "call_function", "call_method", "call_module"):
            self.values[n.meta.get(NAME_KEY, n.name)] = out
        return out


def _as_tensors(values: Sequence[Any], dtype: torch.dtype) -> list[torch.Tensor]:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v.detach().to("cpu", dtype))
        else:
            out.append(torch.from_numpy(np.asarray(v, dtype=np.float64)).to(dtype))
    return out


def frozen(value: Any) -> Hashable:
    """A hashable, type-tagged copy of a JSON-like value: lists, tuples, ints, bools, floats
    (by ``repr``: ``-0.0``, NaN and every bit of a float kept), NumPy scalars and arrays (by
    dtype and bytes) stay distinct wherever Dynamo could see them differently."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value if kind is not bool else ("bool", value)
    if kind is float:
        return ("float", repr(value))
    if isinstance(value, Mapping):
        return ("dict", tuple(sorted((str(k), frozen(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return (kind.__name__, tuple(frozen(v) for v in value))
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return ("numpy", value.dtype.str, value.tobytes())
    if isinstance(value, float) and math.isnan(value):  # a float subclass
        return (kind.__qualname__, "nan")
    return (kind.__module__, kind.__qualname__, repr(value))


#: GraphModules of the latest graphs run eagerly, by :func:`frozen` graph: the strategy's range
#: check and the reference of the same case build one module, not two (each build is fx code
#: generation plus a ``compile``, milliseconds).  Interpreting a module never changes it.
_EAGER_MODULES: OrderedDict[Hashable, torch.fx.GraphModule] = OrderedDict()
EAGER_MODULES_KEPT = 8
_EAGER_LOCK = threading.Lock()


def eager_module(graph: dict) -> torch.fx.GraphModule:
    """:func:`to_graph_module` of ``graph``, shared by eager runs of equal graphs."""
    try:
        key = frozen(graph)
    except RecursionError:  # nested past reason: to_graph_module's validation says what is wrong
        return to_graph_module(graph)
    with _EAGER_LOCK:
        gm = _EAGER_MODULES.get(key)
        if gm is not None:
            _EAGER_MODULES.move_to_end(key)
            return gm
    gm = to_graph_module(graph)
    with _EAGER_LOCK:
        _EAGER_MODULES[key] = gm
        while len(_EAGER_MODULES) > EAGER_MODULES_KEPT:
            _EAGER_MODULES.popitem(last=False)
    return gm


def run_graph(
    graph: dict, values: Sequence[Any], dtype: torch.dtype = torch.float64
) -> dict[str, np.ndarray]:
    """Run eagerly in ``dtype`` on CPU (rounding after every op); every input and node as
    float64."""
    gm = eager_module(graph)
    rec = _Recorder(gm, reference=dtype == torch.float64)
    with torch.no_grad():
        rec.run(*_as_tensors(values, dtype))
    return {
        k: v.detach().to(torch.float64).contiguous().numpy().copy() for k, v in rec.values.items()
    }


def run_reference(graph: dict, values: Sequence[Any]) -> dict[str, np.ndarray]:
    """Float64 CPU reference: ``{name: np.ndarray float64}`` for every input and node."""
    return run_graph(graph, values, torch.float64)


def run_eager(
    graph: dict, values: Sequence[Any], dtype: str | torch.dtype
) -> dict[str, np.ndarray]:
    """Eager run in a low precision (``"float32"|"float16"|"bfloat16"``), widened to float64."""
    torch_dtype: torch.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return run_graph(graph, values, torch_dtype)


def shapes_of(graph: dict) -> dict[str, list[int]]:
    out = {i["name"]: list(i["shape"]) for i in graph["inputs"]}
    for n in graph["nodes"]:
        out[n["name"]] = list(n["shape"])
    return out


def node_index(graph: dict) -> dict[str, int]:
    return {n["name"]: i for i, n in enumerate(graph["nodes"])}


def consumers(graph: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {i["name"]: [] for i in graph["inputs"]}
    for n in graph["nodes"]:
        out.setdefault(n["name"], [])
        for a in n["args"]:
            out.setdefault(a, []).append(n["name"])
    return out


def subgraph(graph: dict, keep: Sequence[str], outputs: Sequence[str]) -> dict:
    """Keep the nodes named in ``keep`` (original order); every arg not produced by a kept node
    becomes a graph input with the same name and shape (original inputs first keep their original
    relative order of first use).  ``outputs`` must be kept nodes or the (new) inputs.

    Graph inputs are floating (the case dtype): a cut through an int or bool value keeps the
    nodes that make it (and theirs, back to float values), so the subgraph stays valid -- a
    bool mask cut loose from its comparison would be a float input no typed op takes.  Node
    ``dtype`` keys are dropped (a float32 value cut into a float16 input changes what follows:
    the rules infer it again)."""
    keep_set = set(keep)
    try:
        dtypes = value_dtypes(graph, keys=False)
    except GraphError:  # a graph the rules refuse: cut as asked, validation will say why
        dtypes = {}
    made = {n["name"]: n for n in graph["nodes"]}
    todo = [a for n in graph["nodes"] if n["name"] in keep_set for a in n["args"]]
    todo += list(outputs)
    while todo:
        a = todo.pop()
        if a in made and a not in keep_set and dtypes.get(a, "float32") not in FLOAT_DTYPES:
            keep_set.add(a)
            todo.extend(made[a]["args"])
    shapes = shapes_of(graph)
    nodes = [copy.deepcopy(n) for n in graph["nodes"] if n["name"] in keep_set]
    for n in nodes:  # the new inputs are the case dtype: node dtypes are inferred again
        n.pop("dtype", None)
    produced = {n["name"] for n in nodes}
    inputs: list[dict] = []
    seen: set[str] = set()
    for n in nodes:
        for a in n["args"]:
            if a not in produced and a not in seen:
                seen.add(a)
                inputs.append({"name": a, "shape": list(shapes[a])})
    for o in outputs:
        if o not in produced and o not in seen:
            if o not in shapes:
                raise KeyError(f"unknown output {o!r}")
            seen.add(o)
            inputs.append({"name": o, "shape": list(shapes[o])})
    return {"inputs": inputs, "nodes": nodes, "outputs": list(outputs)}


def prefix(graph: dict, i: int) -> dict:
    """Nodes ``0..i`` (inclusive) with all original inputs (same order, so the case's values apply);
    outputs = original outputs inside the prefix, then live-outs (prefix nodes used after ``i``),
    then node ``i`` — each once, in that order (node ``i`` is always the last output)."""
    nodes = graph["nodes"]
    if not 0 <= i < len(nodes):
        raise IndexError(f"prefix index {i} out of range for {len(nodes)} nodes")
    pre = [copy.deepcopy(n) for n in nodes[: i + 1]]
    names = {n["name"] for n in pre}
    outs: list[str] = []

    def add(o: str) -> None:
        if o not in outs:
            outs.append(o)

    last = nodes[i]["name"]
    for o in graph["outputs"]:
        if o in names and o != last:
            add(o)
    for n in nodes[i + 1 :]:
        for a in n["args"]:
            if a in names and a != last:
                add(a)
    add(last)
    return {"inputs": copy.deepcopy(graph["inputs"]), "nodes": pre, "outputs": outs}


#: A name in a graph: a plain ASCII identifier of at most 64 characters (also not a keyword and
#: not starting with ``__``; see :func:`name_problem`).
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
GRAPH_KEYS = ("inputs", "nodes", "outputs")
INPUT_KEYS = ("name", "shape")
NODE_KEYS = ("name", "op", "args", "attrs", "shape")
#: keys an input or node record may carry besides the required ones
OPTIONAL_KEYS = ("dtype",)


class GraphError(ValueError):
    """A graph :func:`graph_shapes` refuses (the message is one line)."""


def name_problem(name: Any) -> str | None:
    """Why ``name`` may not name a value of a graph, or None."""
    if not isinstance(name, str):
        return f"name {shown(name)} is not a string"
    if not NAME_PATTERN.fullmatch(name) or keyword.iskeyword(name) or name.startswith("__"):
        return (
            f"name {shown(name)} is not a plain identifier (letters, digits, _; at most 64; "
            "no keyword, no leading __)"
        )
    return None


def _keys(record: Any, keys: Sequence[str], what: str, optional: Sequence[str] = ()) -> None:
    if not isinstance(record, Mapping):
        raise GraphError(f"{what} must be an object with keys {', '.join(keys)}")
    unknown = [k for k in record if k not in keys and k not in optional]
    if unknown:
        allowed = ", ".join(tuple(keys) + tuple(optional))
        raise GraphError(f"{what} has unknown key {shown(unknown[0])} (allowed: {allowed})")
    missing = [k for k in keys if k not in record]
    if missing:
        raise GraphError(f"{what} needs key {missing[0]!r}")


def _shape(value: Any, what: str) -> list[int]:
    if (
        not isinstance(value, (list, tuple))
        or len(value) > MAX_RANK
        or not all(is_int(d) and d >= 0 for d in value)
    ):
        raise GraphError(
            f"{what}: shape must be a list of at most {MAX_RANK} non-negative "
            f"integers, got {shown(value)}"
        )
    return [int(d) for d in value]


def graph_shapes(graph: Any, dtype: str | None = None) -> dict[str, list[int]]:
    """The shape of every input and node of ``graph``, from the inputs' shapes and the ops'
    concrete shape rules (Python ints: nothing is allocated, a dim may be huge), after checking
    everything :func:`validate_graph` checks; raises :class:`GraphError` (one line) otherwise.
    Safe on any JSON value."""
    return _graph_types(graph, dtype)[0]


def value_dtypes(graph: Any, dtype: str | None = None, keys: bool = True) -> dict[str, str]:
    """The dtype of every input and node of ``graph`` run in the case dtype ``dtype`` (inputs:
    ``dtype``, else their declared one, else float32; nodes: their ops' dtype rules), after the
    checks of :func:`graph_shapes` (:class:`GraphError`).  ``keys=False`` ignores the
    graph's ``dtype`` keys (the oracle's view: what a run in ``dtype`` makes, whatever dtype the
    graph was written for)."""
    return _graph_types(graph, dtype, keys)[1]


def infer_dtypes(graph: Mapping[str, Any], dtype: str) -> dict[str, str]:
    """The dtype of every value of an already validated ``graph`` run in case dtype ``dtype``:
    the ops' dtype rules only, no shape checks -- the oracle's view, which must also hold for a
    dynamic-shape variant of the graph (0-sized dims a file's node could not declare).  Raises
    :class:`GraphError` where a rule refuses its operands."""
    dtypes = {i["name"]: dtype for i in graph["inputs"]}
    for n in graph["nodes"]:
        in_dtypes = [dtypes[a] for a in n["args"]]
        made = OPS[n["op"]].dtype_rule(in_dtypes, n["attrs"])
        if made is None:
            raise GraphError(f"node {n['name']!r}: {n['op']} does not take operands of dtype "
                             f"{', '.join(in_dtypes)}")
        dtypes[n["name"]] = made
    return dtypes


def _input_dtype(inp: Mapping[str, Any], name: str, case: str | None, given: bool) -> str:
    declared = inp.get("dtype")
    if "dtype" in inp and (not isinstance(declared, str) or declared not in FLOAT_DTYPES):
        raise GraphError(
            f"input {name!r}: dtype must be one of {', '.join(FLOAT_DTYPES)}, got {shown(declared)}"
        )
    if case is not None and declared is not None and declared != case:
        where = "the case runs in" if given else "the graph's first input is"
        raise GraphError(f"input {name!r}: dtype {declared}, but {where} {case}")
    return case or declared or "float32"


def _graph_types(graph: Any, case: str | None, keys: bool = True
                 ) -> tuple[dict[str, list[int]], dict[str, str]]:
    _keys(graph, GRAPH_KEYS, "the graph")
    inputs, nodes, outputs = graph["inputs"], graph["nodes"], graph["outputs"]
    for key, value in (("inputs", inputs), ("nodes", nodes), ("outputs", outputs)):
        if not isinstance(value, (list, tuple)):
            raise GraphError(f"graph {key} must be a list")
    shapes: dict[str, list[int]] = {}
    dtypes: dict[str, str] = {}
    given = case is not None

    def define(name: Any, what: str) -> str:
        bad = name_problem(name)
        if bad:
            raise GraphError(f"{what}: {bad}")
        if name in shapes:
            raise GraphError(f"duplicate name {name!r}")
        return name

    for k, inp in enumerate(inputs):
        _keys(inp, INPUT_KEYS, f"graph input {k}", OPTIONAL_KEYS)
        name = define(inp["name"], f"graph input {k}")
        shapes[name] = _shape(inp["shape"], f"input {name!r}")
        dtypes[name] = _input_dtype(inp, name, case, given) if keys else (case or "float32")
        case = dtypes[name]  # every input is the case dtype (the first one's, if none given)
    for k, node in enumerate(nodes):
        _keys(node, NODE_KEYS, f"node {k}", OPTIONAL_KEYS)
        name = define(node["name"], f"node {k}")
        op = node["op"]
        if not isinstance(op, str) or op not in OPS:
            raise GraphError(f"node {name!r}: unknown op {shown(op)}")
        args = node["args"]
        if not isinstance(args, (list, tuple)):
            raise GraphError(f"node {name!r}: args must be a list of names")
        if len(args) != OPS[op].arity:
            raise GraphError(f"node {name!r}: {op} takes {OPS[op].arity} args, got {len(args)}")
        for a in args:
            if not isinstance(a, str) or a not in shapes:
                raise GraphError(
                    f"node {name!r}: argument {shown(a)} is not an input or an earlier node"
                )
        try:
            out = OPS[op].out_shape([shapes[a] for a in args], node["attrs"])
        except SpecError as exc:
            raise GraphError(f"node {name!r}: {exc}") from None
        declared = _shape(node["shape"], f"node {name!r}")
        if declared != out:
            raise GraphError(f"node {name!r}: shape {declared} but {op} makes {out}")
        shapes[name] = out
        in_dtypes = [dtypes[a] for a in args]
        made = OPS[op].dtype_rule(in_dtypes, node["attrs"])
        if made is None:
            raise GraphError(f"node {name!r}: {op} does not take operands of dtype "
                             f"{', '.join(in_dtypes)}")
        if keys and "dtype" in node and node["dtype"] != made:
            raise GraphError(f"node {name!r}: dtype {shown(node['dtype'])} but {op} makes {made}")
        dtypes[name] = made
    if not outputs:
        raise GraphError("graph has no outputs")
    seen: set[str] = set()
    for o in outputs:
        if not isinstance(o, str) or o not in shapes:
            raise GraphError(f"output {shown(o)} is not an input or node of the graph")
        if o in seen:
            raise GraphError(f"output {o!r} is listed twice")
        seen.add(o)
    return shapes, dtypes


def validate_graph(graph: Any, dtype: str | None = None) -> str | None:
    """One-line error for a malformed graph (anything :func:`graph_shapes` refuses, with the
    inputs in the case dtype ``dtype`` when given), or None; never raises."""
    try:
        _graph_types(graph, dtype)
    except GraphError as exc:
        return str(exc)
    except MALFORMED as exc:  # defensive: graph_shapes checks types before using them
        return f"malformed graph: {type(exc).__name__}: {shown(str(exc))}"
    return None
