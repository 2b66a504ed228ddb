"""The ``attention_index`` contract as data (:mod:`fuzzkit.schema`): what ``fuzzkit describe
attention_index`` shows.

Ranges are what :mod:`.strategies` draws where it draws a fixed range, else the resource
limits (:mod:`.limits`); the validator (:mod:`.checks`) accepts any value >= the lower bound.
The describe tests check drawn cases and the reference's outputs against this."""

from __future__ import annotations

from fuzzkit.schema import Schema, Size, anything, array, integer, text
from fuzzkit.targets.attention_index import model

FLOATS = ("float32", "float64")
#: The resource limits' defaults for the per-method knobs (:mod:`.limits`).
KNOB_LIMIT = 8192


def schema() -> Schema:
    """The inputs an implementation receives and the outputs it returns."""
    return Schema(
        inputs=(
            text("method", "dense: every causal key; hisa: block means; attention_index: "
                 "chunked k-means groups plus sink / local positions", choices=model.METHODS),
            integer("topk", "results per query (-1 / -inf padded past the causal keys)", 1,
                    KNOB_LIMIT, binds="topk"),
            integer("block", "hisa: keys per block", 1, KNOB_LIMIT),
            integer("top_m", "hisa: blocks probed per query", 1, KNOB_LIMIT),
            integer("groups", "attention_index: k-means groups of the first chunk", 1,
                    KNOB_LIMIT),
            integer("iters", "attention_index: Lloyd iterations", 0, 3),
            integer("chunk", "attention_index: keys clustered by Lloyd; later keys join the "
                    "nearest centroid", 1, KNOB_LIMIT),
            integer("top_g", "attention_index: groups probed per query", 1, KNOB_LIMIT),
            integer("sink", "attention_index: first positions always scored", 0, KNOB_LIMIT),
            integer("local", "attention_index: last positions always scored", 0, KNOB_LIMIT),
            integer("seed", "seeds the k-means initialisation", 0, 2**32 - 1),
            array("q", "float32", ("T", "H", "d"), "indexer queries; query t sits at S - T + t"),
            array("w", "float32", ("T", "H"), "head weights"),
            array("k", "float32", ("S", "d"), "keys (rows reducible)"),
        ),
        outputs=(
            array("ids", "int64", ("T", "topk"), "best causal keys by (score desc, id asc), "
                  "-1 padded", -1),
            array("scores", FLOATS, ("T", "topk"),
                  "sum_h w ReLU(q . k) / sqrt(d), -inf padded"),
            array("candidates", "int64", ("T",), "keys scored exactly per query", 0),
            array("assignment", "int64", ("S",), "attention_index only: each key's group", 0,
                  optional=True),
            array("centroids", FLOATS, ("G", "d"), "attention_index only: group centroids",
                  optional=True),
            array("group_sizes", "int64", ("G",), "attention_index only: keys per group", 0,
                  optional=True),
            anything("aux", "reference only: every score with its error bound, for the oracle",
                     optional=True),
        ),
        sizes=(
            Size("T", 1, 4096, "queries, T <= S (usually <= 16)"),
            Size("H", 1, 256, "heads (usually <= 4)"),
            Size("d", 1, 1024, "head dimension (usually <= 16)"),
            Size("S", 1, 8192, "keys (usually <= 96)"),
            Size("topk", 1, KNOB_LIMIT, "results per query (the input topk)"),
            Size("G", 1, KNOB_LIMIT, "attention_index groups"),
        ),
        notes="Sizes and the per-method knobs are bounded by the resource limits; the "
              "strategy draws them around S (usually <= 96 keys) and at the kernels' tiles.",
    )
