"""Graph (plain JSON dict) -> torch.fx, float64 reference, subgraphs and prefixes.

Graph data model (see the issue-10 spec)::

    {"inputs":  [{"name": "x0", "shape": [4, 7]}, ...],
     "nodes":   [{"name": "n0", "op": "add", "args": ["x0", "x1"], "attrs": {}, "shape": [4, 7]}, ...],
     "outputs": ["n3", "n5"]}
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np
import torch
import torch.fx

from .ops import OPS

__all__ = [
    "to_graph_module",
    "run_reference",
    "run_eager",
    "subgraph",
    "prefix",
    "shapes_of",
    "validate_graph",
    "node_index",
    "consumers",
]

NAME_KEY = "fuzzkit_name"


def to_graph_module(graph: dict) -> torch.fx.GraphModule:
    """Build an fx GraphModule: one placeholder per input (in order), one ``call_function`` per node
    (target = ``fuzzkit.graphs.ops.<op>``, attrs as kwargs), ``forward`` returns a tuple of outputs."""
    g = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    for inp in graph["inputs"]:
        n = g.create_node("placeholder", inp["name"], name=inp["name"])
        n.meta[NAME_KEY] = inp["name"]
        env[inp["name"]] = n
    for node in graph["nodes"]:
        spec = OPS[node["op"]]
        args = tuple(env[a] for a in node["args"])
        kwargs = {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in node["attrs"].items()}
        n = g.create_node("call_function", spec.torch_fn, args, kwargs, name=node["name"])
        n.meta[NAME_KEY] = node["name"]
        env[node["name"]] = n
    g.output(tuple(env[o] for o in graph["outputs"]))
    g.lint()
    return torch.fx.GraphModule(torch.nn.Module(), g)


class _Recorder(torch.fx.Interpreter):
    """Interpreter that records the value of every placeholder and call_function node."""

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__(gm)
        self.values: dict[str, torch.Tensor] = {}

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


def run_graph(graph: dict, values: Sequence[Any], dtype: torch.dtype = torch.float64
              ) -> dict[str, np.ndarray]:
    """Run eagerly in ``dtype`` on CPU (rounding after every op); every input and node as float64."""
    gm = to_graph_module(graph)
    rec = _Recorder(gm)
    with torch.no_grad():
        rec.run(*_as_tensors(values, dtype))
    return {k: v.detach().to(torch.float64).contiguous().numpy().copy() for k, v in rec.values.items()}


def run_reference(graph: dict, values: Sequence[Any]) -> dict[str, np.ndarray]:
    """Float64 CPU reference: ``{name: np.ndarray float64}`` for every input and node."""
    return run_graph(graph, values, torch.float64)


def run_eager(graph: dict, values: Sequence[Any], dtype: str | torch.dtype) -> dict[str, np.ndarray]:
    """Eager run in a low precision (``"float32"|"float16"|"bfloat16"``), widened to float64."""
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    return run_graph(graph, values, dtype)


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
    """Keep the nodes named in ``keep`` (original order); every arg not produced by a kept node becomes
    a graph input with the same name and shape (original inputs first keep their original relative
    order of first use).  ``outputs`` must be kept nodes or the (new) inputs."""
    keep_set = set(keep)
    shapes = shapes_of(graph)
    nodes = [copy.deepcopy(n) for n in graph["nodes"] if n["name"] in keep_set]
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
    outputs = original outputs inside the prefix, then live-outs (prefix nodes used after ``i``), then
    node ``i`` — each once, in that order (node ``i`` is always the last output)."""
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


def validate_graph(graph: dict) -> str | None:
    """One-line error for a malformed graph, or None."""
    try:
        known = set()
        for inp in graph["inputs"]:
            if inp["name"] in known:
                return f"duplicate name {inp['name']!r}"
            if any(int(d) < 0 for d in inp["shape"]):
                return f"negative dim in input {inp['name']!r}"
            known.add(inp["name"])
        for n in graph["nodes"]:
            if n["op"] not in OPS:
                return f"unknown op {n['op']!r} in node {n['name']!r}"
            if len(n["args"]) != OPS[n["op"]].arity:
                return f"node {n['name']!r}: {n['op']} takes {OPS[n['op']].arity} args"
            for a in n["args"]:
                if a not in known:
                    return f"node {n['name']!r} uses {a!r} before it is defined"
            if n["name"] in known:
                return f"duplicate name {n['name']!r}"
            known.add(n["name"])
        for o in graph["outputs"]:
            if o not in known:
                return f"unknown output {o!r}"
        if not graph["outputs"]:
            return "graph has no outputs"
    except (KeyError, TypeError, ValueError) as e:
        return f"malformed graph: {e!r}"
    return None
