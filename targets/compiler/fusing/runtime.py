"""Run a partitioned graph: fused groups launch their generated kernels, every other node runs
as an eager torch op in the case dtype."""

from __future__ import annotations

import warnings

from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.fx.passes.shape_prop import ShapeProp

from fuzzkit.targets.compiler.fusing import codegen, partition


class FusedProgram:
    """The compiled form of a GraphModule: a callable ``(*tensors) -> tuple of tensors``."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]):
        self.gm = gm
        ShapeProp(gm).propagate(*example_inputs)
        # a kernel computes in float32: a group touching an int or bool value (a typed op's
        # operand or result) runs eagerly instead
        self.groups = [g for g in partition.partition(gm) if _all_float(g)]
        self.launchers: dict[torch.fx.Node, tuple[Callable[..., Any], list[torch.fx.Node],
                                                  partition.Group]] = {}
        self.internal: set[torch.fx.Node] = set()
        for g in self.groups:
            # looked up at compile time through the module, so a mutant's swap takes effect
            launcher = codegen.compile_group(g.spec())
            self.launchers[g.result] = (launcher, g.leaves(), g)
            self.internal.update(g.nodes[:-1])

    @property
    def sources(self) -> list[str]:
        return [launcher.source for launcher, _, _ in self.launchers.values()]

    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        env: dict[torch.fx.Node, Any] = {}
        placeholders = iter(tensors)
        for node in self.gm.graph.nodes:  # pragma: no branch - an fx graph always ends with its output node
            if node.op == "placeholder":
                env[node] = next(placeholders)
            elif node.op == "output":
                result = torch.fx.node.map_arg(node.args[0], env.__getitem__)
                return tuple(result) if isinstance(result, (tuple, list)) else (result,)
            elif node in self.internal:
                continue
            elif node in self.launchers:
                launcher, leaves, group = self.launchers[node]
                with warnings.catch_warnings():
                    # the interpreter reduces with NumPy's nanmax/nanmin, which warn on all-NaN
                    # rows; NaN rows are handled in the generated code (special-value cases)
                    warnings.filterwarnings("ignore", "All-NaN slice", RuntimeWarning)
                    out = launcher(*[env[leaf] for leaf in leaves])
                # the result's own dtype (a float32 value of a float16 graph stays float32)
                env[node] = out.to(_dtype_of(node)).reshape(partition.shape_of(node))
            elif node.op == "call_function":
                args = torch.fx.node.map_arg(node.args, env.__getitem__)
                kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
                env[node] = node.target(*args, **kwargs)
            elif node.op == "get_attr":  # pragma: no cover - graph JSON has no parameters (no get_attr nodes)
                env[node] = getattr(self.gm, node.target)
            else:  # pragma: no cover - graph JSON has placeholder, call_function and output nodes only
                raise NotImplementedError(f"fusing compiler: unsupported node {node.format_node()}")
        raise RuntimeError("graph without an output node")  # pragma: no cover - an fx graph always ends with its output node


def _dtype_of(node: torch.fx.Node) -> torch.dtype:
    return node.meta["tensor_meta"].dtype


def _all_float(group: partition.Group) -> bool:
    """Whether every value a group reads or makes is floating (ShapeProp's dtypes)."""
    return all(_dtype_of(n).is_floating_point for n in list(group.nodes) + group.leaves())


def compile_fx(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]
               ) -> FusedProgram:
    """Compile ``gm`` (call_function targets from :mod:`fuzzkit.targets.compiler.graphs.ops`) for inputs
    shaped like ``example_inputs``; one call = one compile (counted)."""
    from fuzzkit.targets.compiler import count_compile

    count_compile()
    return FusedProgram(gm, list(example_inputs))
