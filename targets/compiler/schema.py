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
from fuzzkit.targets.compiler import LAYOUTS
from fuzzkit.targets.compiler.checks import DTYPES

#: Tensor rank the generator and the validator allow (:data:`.graphs.common.MAX_RANK`).
MAX_RANK = 4


def _op_names() -> tuple[str, ...]:
    from fuzzkit.targets.compiler.graphs import OPS

    return tuple(sorted(OPS))


def schema() -> Schema:
    """The inputs an implementation receives and the outputs it returns."""
    from fuzzkit.targets.compiler.graphs import ops

    dims = listing("shape", integer("dim", "", 0), "the tensor's shape", (0, MAX_RANK))
    value_dtype = text("dtype", "the value's dtype (optional, documentation: it must equal "
                       "what the ops' dtype rules infer; graph inputs are the case dtype)",
                       choices=tuple(getattr(ops, "VALUE_DTYPES", DTYPES)), optional=True)
    graph = record("graph", (
        listing("inputs", record("input", (
            text("name", "a plain identifier"), dims, value_dtype), "one graph input"),
            "the graph's inputs, in the order of values", (1, 64)),
        listing("nodes", record("node", (
            text("name", "a plain identifier, unique in the graph"),
            text("op", "a torch op of .graphs.ops", choices=_op_names()),
            listing("args", anything("arg", "an input's or an earlier node's name"),
                    "operands"),
            mapping("attrs", anything("value", ""),
                    "exactly the attributes the op declares (dim, keepdim, min, max, ...)"),
            dims, value_dtype), "one call_function node"),
            "nodes in topological order", (0, 512)),
        listing("outputs", text("name", "a node's or an input's name"), "the graph's outputs",
                (1, None)),
    ), "the fx graph, as plain JSON")
    return Schema(
        inputs=(
            graph,
            text("dtype", "the dtype the graph is compiled and run in", choices=DTYPES),
            anything("dynamic", "Inductor's dynamic shapes: false (static: each new shape "
                     "recompiles), true (torch.compile(dynamic=True)) or \"marked\" (the dims "
                     "that vary across the variants marked dynamic, dynamic=None); absent: false",
                     optional=True),
            listing("values", array("value", "float32", (),
                                    "exactly representable in dtype; shape as declared"),
                    "one array per graph input", (1, 64)),
            boolean("special", "the strategy drew NaN / +-Inf / huge values (informational)",
                    optional=True),
            listing("variants", listing("run", array(
                "value", "float32", (), "exactly representable in dtype; same rank as the "
                "input, a shape the graph's shape rules accept with the same attributes"),
                "one array per graph input"),
                "more value sets of other input shapes, run through the same compile after "
                "values (dynamic shapes); they count towards the element limits", (0, 4),
                optional=True),
            listing("layouts", text("layout", "how the input is laid out in memory "
                                    "(transposed: last two dims swapped in memory, rank >= 2; "
                                    "strided: every 2nd element along the last dim; offset: a "
                                    "nonzero storage offset; channels_last: rank 4)",
                                    choices=LAYOUTS),
                    "one memory layout per graph input (absent: all contiguous); the values "
                    "are the same, the reference ignores it", (1, 64), optional=True),
        ),
        outputs=(
            listing("outputs", array("output", ("float64", "float32"), (),
                                     "the result in dtype, widened"),
                    "one array per graph output", (1, None)),
            anything("meta", "each output's [dtype, shape] before widening (the reference: "
                     "eager in the case dtype on meta tensors; null where an op cannot run "
                     "there)", optional=True),
            anything("again", "implementations: the outputs of a second run on fresh copies "
                     "of the same inputs (the determinism oracle)", optional=True),
            anything("variants", "per variant: its outputs, meta, again (the reference: also "
                     "intermediates)", optional=True),
            anything("compiles", "implementations: graphs compiled for this case, Dynamo's "
                     "recompiles included (informational)", optional=True),
            anything("error", "implementations: the run that raised, its exception type and "
                     "whether eager runs it (the error-class oracle)", optional=True),
            anything("intermediates", "reference only: every input's and node's float64 value, "
                     "for per-node error bounds", optional=True),
        ),
        notes="Strategy: up to 12 nodes (a few more around a wide fan-out), tensors up to "
              "2**17 elements, a quarter of the cases with special values; half of the "
              "Inductor cases run 2 to 4 variants (other input shapes, 0/1 and vector-width "
              "sizes included) through one compile, a quarter lay their inputs out "
              "non-contiguously, an eighth are one op or a prefix of the drawn graph.",
    )
