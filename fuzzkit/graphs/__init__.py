"""Random compiler graphs: op catalogue (ops), fx building and float64 reference (build),
z3/NNSmith-style generation (generate), input values (values), forward-error bounds (bound)."""

from .build import prefix, run_reference, subgraph, to_graph_module
from .ops import OPS, OpSpec

__all__ = ["OPS", "OpSpec", "prefix", "run_reference", "subgraph", "to_graph_module"]
