"""The compiler target's random graphs: the op catalogue, one record per op (ops), the per-op
float-error and value-range rules the records name (error_rules, intervals), fx building and
the float64 reference (build), z3/NNSmith-style generation (generate), input values (values) and
forward-error bounds (bound)."""

from .build import prefix, run_reference, subgraph, to_graph_module
from .ops import OPS, OpSpec

__all__ = ["OPS", "OpSpec", "prefix", "run_reference", "subgraph", "to_graph_module"]
