"""The ``ann`` contract as data (:mod:`fuzzkit.schema`): what ``fuzzkit describe ann`` shows.

Parameter ranges are what :mod:`.strategies` draws (the validator, :mod:`.checks`, accepts any
value >= the lower bound); the describe tests check drawn cases and the reference's outputs
against this."""

from __future__ import annotations

from fuzzkit.schema import Schema, Size, anything, array, boolean, integer, number, text
from fuzzkit.targets.ann import checks, model, strategies

FLOATS = ("float32", "float64")


def schema() -> Schema:
    """The inputs an implementation receives and the outputs it returns."""
    s = strategies
    return Schema(
        inputs=(
            array("vectors", "float32", ("n", "D"), "stored at build time (rows reducible)",
                  -checks.MAX_ABS, checks.MAX_ABS),
            array("inserted", "float32", ("n2", "D"),
                  "inserted after the build, ids continue from n (absent: none)",
                  -checks.MAX_ABS, checks.MAX_ABS, optional=True, nullable=True),
            array("queries", "float32", ("q", "D"), "query vectors (rows reducible)",
                  -checks.MAX_ABS, checks.MAX_ABS),
            integer("L", "hash tables (the first L of a bigger L are the same tables)", 1, 4),
            integer("m", "projected dimensions per table", 1, 4, binds="m"),
            number("w", "cell width (> 0); null: one cell per table", 0.0, nullable=True),
            integer("C", "cell capacity: members kept nearest the cell centre", 1, s.MAX_C),
            integer("R", "kNN-graph degree", 1, s.MAX_R, binds="R"),
            integer("E", "beam width (frontier size)", 1, 64),
            integer("T", "graph expansion rounds", 0, 4),
            integer("P", "probed cells per table (own + P - 1 adjacent), <= 2m + 1", 1, 9),
            integer("k", "results per query", 1, s.MAX_VECTORS + 3, binds="k"),
            integer("seed", "seeds the projections and offsets", 0, 2**63 - 1),
            text("metric", "l2: squared L2; ip: -<x, q> (smaller is better, ties by id)",
                 choices=model.METRICS),
            text("storage", "float32 vectors, or the quant target's turbo8 / turbo16 codes",
                 choices=model.STORAGES),
            boolean("rerank", "turbo storage: re-rank the max(k, E) best by exact distance"),
        ),
        outputs=(
            array("ids", "int64", ("q", "k"), "the k best ids per query, -1 padded", -1),
            array("distances", FLOATS, ("q", "k"), "their distances, +inf padded"),
            array("visited_count", "int64", ("q",), "ids visited per query", 0),
            array("cell_table", "int64", ("cells",), "each non-empty cell's table", 0),
            array("cell_coords", "int64", ("cells", "m"), "each cell's integer coordinates"),
            array("cell_offsets", "int64", ("*",),
                  "cells + 1 offsets into cell_members (CSR)", 0),
            array("cell_members", "int64", ("*",), "every cell's kept members, by offsets", 0),
            array("graph", "int64", ("N", "R"), "the exact kNN graph, -1 padded", -1),
            array("codes", ("uint8", "uint16"), ("N", "D"),
                  "turbo storage only: the stored codes", 0, optional=True),
            array("scales", FLOATS, ("N",), "turbo storage only: the stored scales", 0,
                  optional=True),
            anything("aux", "reference only: exact distances, slacks, eligibility, for the "
                     "oracle", optional=True),
        ),
        sizes=(
            Size("n", 1, s.MAX_VECTORS, "vectors at build time (usually <= 200)"),
            Size("n2", 0, s.MAX_VECTORS - 1, "inserted vectors"),
            Size("N", 1, s.MAX_VECTORS, "all vectors: n + n2"),
            Size("q", 1, s.MAX_QUERIES, "queries (usually <= 16)"),
            Size("D", 1, s.MAX_DIM, "dimension (usually <= 32)"),
            Size("m", 1, 4, "projected dimensions (the input m)"),
            Size("k", 1, s.MAX_VECTORS + 3, "results per query (the input k)"),
            Size("R", 1, s.MAX_R, "graph degree (the input R)"),
            Size("cells", 0, None, "non-empty cells over all tables"),
        ),
        notes="FAISS adapters (faiss-ivf, faiss-hnsw) return the same ids and distances and "
              "are judged by validity and recall only.",
    )
