"""What a compiler case may ask for (:mod:`fuzzkit.limits`), read off the unvalidated inputs.

Where a case's cost comes from: every node is one fx node to trace and compile (Inductor's
compile time grows with the graph) and one tensor the float64 reference keeps (it records every
intermediate); every tensor's size comes from the input shapes and the ops' shape rules -- an
``expand`` of a ``[1]`` input to ``[10**9]``, a broadcast ``[n, 1] + [1, m]``, a ``cat`` or an
``index_select`` with a long index list are a few bytes of JSON each; ``matmul`` / ``bmm`` cost
``m * k * n`` multiply-adds per batch, and so does every other op that does matmul-like work
(``addmm``, ``baddbmm``, ``linear``, ``einsum``, ``sdpa``, ...): each op family module of the
catalogue (:data:`.graphs.ops.FAMILIES`) declares a ``WORK`` table, op name -> ``(in_shapes,
attrs) -> multiply-adds``, which :func:`work_functions` gathers -- an op's cost is stated where the
op is, and a new matmul-like op cannot be forgotten here (``tests/test_ops_reduce.py`` checks
that every op of kind ``matmul`` or ``attention`` has one).

Sizes are computed from the inputs' declared shapes and the ops' concrete shape rules
(:func:`.graphs.build.graph_shapes`, plain Python ints: nothing is allocated, a dim of
``10**30`` is just a number); a graph those rules refuse is malformed (the measure raises
:class:`~fuzzkit.targets.compiler.graphs.build.GraphError`, a ValueError, and
:func:`fuzzkit.limits.check` says so in one line).  Value arrays are bounded by the case file's
own limits and must match the input shapes (``validate``).

Defaults: about 10x to 100x the largest value in generated cases (1 500 cases: 250 with the
strategy aimed at each implementation, seeds 0, 1 and 2): inputs 3, nodes 27, elements
131 072 (the strategy's ``MAX_ELEMENTS``), total elements 1 347 571, matmul multiply-adds
561 408.  A case at the defaults replays in well under a minute on one CPU core: a 512-node
chain of reductions, transposes and elementwise ops compiles and runs under Inductor (CPU, fresh
cache) in about 20 s (26 s with dynamic shapes), a 256-node one under the fusing compiler
(Triton interpreter) in about 1 s; 9 nodes of 2**21 elements each (about 2**24 in total) take
about 16 s and 8 s.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from fuzzkit.limits import Limit, length

WorkFunction = Callable[[Sequence[Sequence[int]], Mapping[str, Any]], int]


def _work_matmul(shapes: Sequence[Sequence[int]], attrs: Mapping[str, Any]) -> int:
    """matmul, bmm: ``(batch *) m * k`` times ``n``."""
    a, b = shapes
    return math.prod(a) * int(b[-1])


#: the core ops' work functions (the family modules declare their own ``WORK``)
_CORE_WORK: dict[str, WorkFunction] = {"matmul": _work_matmul, "bmm": _work_matmul}
_WORK: list[dict[str, WorkFunction]] = []


def work_functions() -> dict[str, WorkFunction]:
    """Op name -> ``(in_shapes, attrs) -> multiply-adds`` of every op that does matmul-like
    work: the core ones and each family module's ``WORK`` (gathered once, on first use)."""
    if not _WORK:
        import importlib

        from fuzzkit.targets.compiler.graphs.ops import FAMILIES

        table = dict(_CORE_WORK)
        for module in FAMILIES:
            table.update(getattr(importlib.import_module(module), "WORK", {}))
        _WORK.append(table)
    return _WORK[0]


def _graph(inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    graph = inputs.get("graph")
    if not isinstance(graph, Mapping):
        raise TypeError("graph must be an object with keys inputs, nodes, outputs")
    return graph


def _shapes(inputs: Mapping[str, Any]) -> dict[str, list[int]]:
    """Every value's shape from the ops' concrete shape rules (raises GraphError, a ValueError,
    on a graph those rules refuse)."""
    from fuzzkit.targets.compiler.graphs.build import graph_shapes

    return graph_shapes(_graph(inputs))


def input_count(inputs: Mapping[str, Any]) -> int:
    return length(_graph(inputs).get("inputs"))


def node_count(inputs: Mapping[str, Any]) -> int:
    return length(_graph(inputs).get("nodes"))


def largest_tensor(inputs: Mapping[str, Any]) -> int:
    return max((math.prod(s) for s in _shapes(inputs).values()), default=0)


def total_elements(inputs: Mapping[str, Any]) -> int:
    return sum(math.prod(s) for s in _shapes(inputs).values())


def matmul_work(inputs: Mapping[str, Any]) -> int:
    """Multiply-adds of every matmul-like node, from its op's work function on the shapes the
    concrete shape rules gave (so its attrs were validated too)."""
    shapes = _shapes(inputs)
    table = work_functions()
    work = 0
    for node in _graph(inputs)["nodes"]:
        measure = table.get(node["op"])
        if measure is not None:
            work += int(measure([shapes[name] for name in node["args"]], node["attrs"]))
    return work


LIMITS = (
    Limit("inputs", 64, "graph inputs", input_count),
    Limit("nodes", 512, "graph nodes", node_count),
    Limit("elements", 2**21, "elements of the largest tensor of the graph", largest_tensor),
    Limit("total_elements", 2**24, "elements of all tensors of the graph together (the "
          "reference keeps every one)", total_elements),
    Limit("matmul_work", 50_000_000, "multiply-adds of the graph's matmul-like nodes (matmul, "
          "bmm, addmm, baddbmm, linear, einsum, sdpa, ...)", matmul_work),
)

__all__ = ["LIMITS", "input_count", "node_count", "largest_tensor", "total_elements",
           "matmul_work", "work_functions"]
