"""Group an fx graph's nodes into fused kernels.

Rule (greedy, in topological order): an elementwise node with a codegen template joins the group
of each producer that is the current result of an open group and has no other consumer (in fx
terms ``producer.users == {node}``; a graph output is used by the ``output`` node, so it never
disappears inside a group).  Groups are therefore expression trees with one result; broadcasting
inputs are allowed (the leaves are loaded at broadcast strides).  A reduction over the last
dimension (sum/mean/amax/amin) closes a group: it joins its producer's open group under the same
rule, or starts a group of its own.  Everything else -- matmul, softmax, layout ops, other
reductions, unsupported attrs -- runs eagerly.  Which ops may fuse, and how, is each op's record
(``fusing`` and its template in :mod:`fuzzkit.targets.compiler.graphs.ops`), looked up by op name through
``ops.OPS`` at call time like codegen does, so both see the records a mutant puts in force.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch.fx

from fuzzkit.targets.compiler.fusing import codegen
from fuzzkit.targets.compiler.graphs import ops


def op_name(node: torch.fx.Node) -> str:
    """The op name of a call_function node (by its target function); the function's own name
    for a call the graph catalogue does not know."""
    target = node.target
    name = ops.op_of(target)
    return name if name is not None else getattr(target, "__name__", str(target))


def attrs_of(node: torch.fx.Node) -> dict[str, Any]:
    return {k: v for k, v in node.kwargs.items() if not isinstance(v, torch.fx.Node)}


def tensor_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    return [a for a in node.args if isinstance(a, torch.fx.Node)]


def shape_of(node: torch.fx.Node) -> tuple[int, ...]:
    meta = node.meta.get("tensor_meta")
    if meta is None:
        raise ValueError(f"node {node.name} has no shape (run ShapeProp first)")  # pragma: no cover - defensive: FusedProgram runs ShapeProp first
    return tuple(int(s) for s in meta.shape)


def last_dim_reduction(node: torch.fx.Node, op: str) -> bool:
    """A sum/mean/amax/amin (an op whose record fuses it as a reduction) over exactly the last
    dimension of its single input."""
    spec = ops.OPS.get(op)
    if spec is None or spec.fusing != "reduction":
        return False
    args = tensor_args(node)
    if len(args) != 1 or len(node.args) != 1:
        return False  # pragma: no cover - defensive: every reduction op takes one tensor
    rank = len(shape_of(args[0]))
    if rank == 0:
        return False
    dim = node.kwargs.get("dim", None)
    if dim is None:
        return rank == 1
    if isinstance(dim, (list, tuple)):
        if len(dim) != 1:
            return False
        dim = dim[0]
    return int(dim) in (-1, rank - 1)


def fusible_elementwise(node: torch.fx.Node, op: str) -> bool:
    if node.op != "call_function":
        return False  # pragma: no cover - defensive: partition() asks about call_function nodes only
    if any(not isinstance(a, torch.fx.Node) for a in node.args):
        return False  # pragma: no cover - graph JSON passes scalars as keyword attrs, never positionally
    spec = ops.OPS.get(op)
    if spec is None or spec.fusing != "elementwise":
        return False
    return codegen.supported(op, attrs_of(node))


@dataclasses.dataclass
class Group:
    nodes: list[torch.fx.Node]
    closed: bool = False
    reduction: Optional[str] = None

    @property
    def result(self) -> torch.fx.Node:
        return self.nodes[-1]

    def leaves(self) -> list[torch.fx.Node]:
        inside = set(self.nodes)
        seen: list[torch.fx.Node] = []
        for n in self.nodes:
            for a in tensor_args(n):
                if a not in inside and a not in seen:
                    seen.append(a)
        return seen

    def spec(self) -> codegen.GroupSpec:
        leaves = self.leaves()
        # the elementwise part's shape: the result's, or the reduced tensor's for a reduction
        full = shape_of(tensor_args(self.result)[0] if self.reduction else self.result)
        return codegen.GroupSpec(
            nodes=[(n.name, op_name(n), [a.name for a in tensor_args(n)], attrs_of(n))
                   for n in self.nodes],
            leaves=[leaf.name for leaf in leaves],
            leaf_shapes=[shape_of(leaf) for leaf in leaves],
            shape=full,
            reduction=self.reduction,
        )


def partition(gm: torch.fx.GraphModule) -> list[Group]:
    """The fused groups of ``gm`` (shapes in ``node.meta['tensor_meta']``), in topological
    order of their results.  Nodes in no group run eagerly."""
    group_of: dict[torch.fx.Node, Group] = {}
    groups: list[Group] = []

    def joinable(producer: torch.fx.Node, consumer: torch.fx.Node) -> Optional[Group]:
        g = group_of.get(producer)
        if g is None or g.closed or g.result is not producer:
            return None
        if set(producer.users) != {consumer}:
            return None
        return g

    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        op = op_name(node)
        if last_dim_reduction(node, op):
            (arg,) = tensor_args(node)
            g = joinable(arg, node)
            if g is None:
                g = Group([])
                groups.append(g)
            g.nodes.append(node)
            g.closed, g.reduction = True, op
            group_of[node] = g
            continue
        if not fusible_elementwise(node, op):
            continue
        merged: Optional[Group] = None
        for arg in tensor_args(node):
            g = joinable(arg, node)
            if g is None or g is merged:
                continue
            if merged is None:
                merged = g
            else:  # a second producer tree: fold it into the first group
                merged.nodes = _topo_merge(merged.nodes, g.nodes)
                for n in g.nodes:
                    group_of[n] = merged
                groups.remove(g)
        if merged is None:
            merged = Group([])
            groups.append(merged)
        merged.nodes.append(node)
        group_of[node] = merged
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    groups.sort(key=lambda g: order[g.result])
    return groups


def _topo_merge(a: list[torch.fx.Node], b: list[torch.fx.Node]) -> list[torch.fx.Node]:
    nodes = a + b
    graph_order = {n: i for i, n in enumerate(nodes[0].graph.nodes)}
    return sorted(nodes, key=graph_order.__getitem__)
