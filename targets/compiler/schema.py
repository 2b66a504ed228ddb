"""The ``compiler`` contract as data (:mod:`fuzzkit.schema`): what ``fuzzkit describe
compiler`` shows.

The graph format is :mod:`.graphs.build`'s (names are plain identifiers, each node carries the
attributes its op declares in :mod:`.graphs.ops`); lengths are bounded by the resource limits
(:mod:`.limits`).  The describe tests check drawn cases and the reference's outputs against
this."""

from __future__ import annotations

from fuzzkit.schema import (
    Schema,
    anything,
    array,
    boolean,
    integer,
    listing,
    mapping,
    record,
    text,
)
from fuzzkit.targets.compiler.checks import DTYPES

#: Tensor rank the generator and the validator allow (:data:`.graphs.common.MAX_RANK`).
MAX_RANK = 4


def _op_names() -> tuple[str, ...]:
    from fuzzkit.targets.compiler.graphs import OPS

    return tuple(sorted(OPS))


def schema() -> Schema:
    """The inputs an implementation receives and the outputs it returns."""
    dims = listing("shape", integer("dim", "", 0), "the tensor's shape", (0, MAX_RANK))
    graph = record("graph", (
        listing("inputs", record("input", (
            text("name", "a plain identifier"), dims), "one graph input"),
            "the graph's inputs, in the order of values", (1, 64)),
        listing("nodes", record("node", (
            text("name", "a plain identifier, unique in the graph"),
            text("op", "a torch op of .graphs.ops", choices=_op_names()),
            listing("args", anything("arg", "an input's or an earlier node's name"),
                    "operands"),
            mapping("attrs", anything("value", ""),
                    "exactly the attributes the op declares (dim, keepdim, min, max, ...)"),
            dims), "one call_function node"),
            "nodes in topological order", (0, 512)),
        listing("outputs", text("name", "a node's or an input's name"), "the graph's outputs",
                (1, None)),
    ), "the fx graph, as plain JSON")
    return Schema(
        inputs=(
            graph,
            text("dtype", "the dtype the graph is compiled and run in", choices=DTYPES),
            boolean("dynamic", "Inductor: compile with dynamic shapes (absent: false)",
                    optional=True),
            listing("values", array("value", "float32", (),
                                    "exactly representable in dtype; shape as declared"),
                    "one array per graph input", (1, 64)),
            boolean("special", "the strategy drew NaN / +-Inf / huge values (informational)",
                    optional=True),
        ),
        outputs=(
            listing("outputs", array("output", ("float64", "float32"), (),
                                     "the result in dtype, widened"),
                    "one array per graph output", (1, None)),
            anything("intermediates", "reference only: every input's and node's float64 value, "
                     "for per-node error bounds", optional=True),
        ),
        notes="Strategy: up to 12 nodes (a few more around a wide fan-out), tensors up to "
              "2**17 elements, a quarter of the cases with special values.",
    )
