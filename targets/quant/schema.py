"""The ``quant`` contract as data (:mod:`fuzzkit.schema`): what ``fuzzkit describe quant`` shows.

The ranges are the validator's (:mod:`.checks`) and the strategy's (:mod:`.strategies`); the
describe tests draw cases and check them against this, so a change there that is not made here
fails a test."""

from __future__ import annotations

from fuzzkit.schema import Schema, Size, anything, array, integer, text
from fuzzkit.targets.quant import checks, reference

FLOATS = ("float32", "float64")


def schema() -> Schema:
    """The inputs an implementation receives and the outputs it returns."""
    return Schema(
        inputs=(
            integer("bits", "8: turbo8 (uint8 codes), 16: turbo16 (uint16 codes)",
                    choices=reference.BITS),
            text("codebook", "N(0, 1) codebook: Lloyd-Max optimal, or uniform on [-R, R]",
                 choices=reference.CODEBOOKS),
            integer("rotation_seed", "seeds the rotation's permutations and sign flips",
                    0, 2**64 - 1),
            text("precision", "working dtype of the encoder and the rotation (absent: float32)",
                 choices=FLOATS, optional=True),
            array("vectors", "float32", ("n", "D"),
                  "stored vectors, one per row (rows independent); non-zero |x| in "
                  f"[{checks.MIN_ABS:g}, {checks.MAX_ABS:g}]", -checks.MAX_ABS, checks.MAX_ABS),
            array("queries", "float32", ("m", "D"),
                  "queries, rotated but not quantized (same magnitudes as vectors)",
                  -checks.MAX_ABS, checks.MAX_ABS),
        ),
        outputs=(
            array("codes", ("uint8", "uint16"), ("n", "D"),
                  "one code per rotated coordinate (bits wide)", 0, 2**16 - 1),
            array("scales", FLOATS, ("n",), "||v|| / ||centroids[codes]|| (0 for a zero vector)",
                  0),
            array("rotated_vectors", FLOATS, ("n", "D"), "R v in the working precision"),
            array("rotated_queries", FLOATS, ("m", "D"), "R q in the working precision"),
            array("scores", FLOATS, ("m", "n"), "asymmetric score scale_j <R q_i, c_j>"),
            array("symmetric_scores", FLOATS, ("n", "n"), "scale_j scale_k <c_j, c_k>"),
            integer("encoded_bytes", "bytes per stored vector: D * bits / 8 + 4", 5),
            anything("aux", "reference only: float64 z, its error bands and magnitudes, for "
                     "the oracle (implementations leave it out)", optional=True),
        ),
        sizes=(
            Size("n", 0, 2048, "stored vectors (usually <= 40; 0 is legal)"),
            Size("m", 0, 2048, "queries (usually <= 6; 0 is legal)"),
            Size("D", 1, checks.MAX_DIM,
                 "dimension (usually <= 80; past the encoder's and kernel's block edges)"),
        ),
        notes="Implementations return float32 where the reference returns float64; the oracle "
              "allows for the difference. `fuzzkit.targets.quant.reference` documents the codec.",
    )
