"""The ``scute`` contract as data (:mod:`fuzzkit.schema`): what ``fuzzkit describe scute``
shows.

Each adapter method's fields are its native PEFT form (:mod:`.reference`); sizes are bounded by
the resource limits (:mod:`.limits`), the strategy (:mod:`.strategies`) drawing them small and
at the kernels' tiles.  The describe tests check drawn cases and the reference's outputs
against this."""

from __future__ import annotations

from fuzzkit.schema import (
    Schema,
    Size,
    array,
    boolean,
    integer,
    listing,
    number,
    tagged,
    text,
)
from fuzzkit.targets.scute import checks, strategies

FLOATS = ("float32", "float64")


def schema() -> Schema:
    """The inputs an implementation receives and the outputs it returns."""
    low_rank = (
        array("A", "float32", ("*", "K"), "down projection (r, K), storage-dtype values"),
        array("B", "float32", ("Nout", "*"), "up projection (Nout, r)"),
        number("alpha", "scaling numerator (alpha / r, or alpha / sqrt(r) with rslora)"),
        boolean("rslora", "rank-stabilised scaling"),
    )
    cayley = (
        text("cayley", "exact Cayley transform, or PEFT's Neumann series", ("exact", "neumann")),
        integer("neumann_terms", "terms of the Neumann series", 1, 1000),
    )
    adapter = tagged("adapter", {
        "identity": (),
        "lora": low_rank,
        "dora": (*low_rank, array("magnitude", "float32", ("Nout",), "column magnitudes")),
        "vera": (array("A_shared", "float32", ("*", "*"), "shared A (r, >= K), sliced"),
                 array("B_shared", "float32", ("*", "*"), "shared B (>= Nout, r), sliced"),
                 array("lambda_d", "float32", ("*",), "per-rank scale (r,)"),
                 array("lambda_b", "float32", ("Nout",), "per-output scale")),
        "oft": (integer("block_size", "rotation block (divides K)", 1),
                array("Q", "float32", ("*", "*", "*"), "skew blocks (K / b, b, b)"), *cayley),
        "boft": (integer("block_size", "rotation block", 1),
                 integer("factors", "butterfly factors", 1, 64),
                 array("Q", "float32", ("*", "*", "*", "*"), "skew blocks (m, K / b, b, b)"),
                 array("boft_s", "float32", ("Nout",), "output scale"), *cayley),
        "ia3": (text("placement", "kv: output scale incl. bias; ff: input scale", ("kv", "ff")),
                array("l", "float32", ("*",), "the scale vector (Nout for kv, K for ff)")),
    }, "one adapter slot", tag="method")
    return Schema(
        inputs=(
            text("dtype", "storage dtype of x, W0, T, A, B (float32 accumulation)",
                 checks.DTYPES),
            text("mode", "decode: one token per request; prefill: runs of one slot",
                 strategies.MODES),
            array("x", "float32", ("Ntok", "K"), "token activations (values exact in dtype)"),
            array("w0", "float32", ("Nout", "K"), "base layer weight"),
            array("b0", "float32", ("Nout",), "base layer bias"),
            array("token_adapter", "int64", ("Ntok",), "each token's slot, -1: base layer only",
                  -1),
            listing("adapters", adapter, "the slots, each one adapter of any method",
                    (0, 256)),
        ),
        outputs=(
            array("y", FLOATS, ("Ntok", "Nout"), "the layer's output"),
            boolean("bitwise_batch_invariant", "the implementation claims bitwise batch "
                    "invariance (absent: false)", optional=True),
        ),
        sizes=(
            Size("Ntok", 0, 4096, "tokens (usually <= 12)"),
            Size("K", 1, 1024, "in features (usually <= 40)"),
            Size("Nout", 1, 4096, "out features (usually <= 32)"),
        ),
        notes="Implementations compute the unified slot form y = ((x T) W0^T) * s + b + "
              "(((x A^T) * m) B^T) * o; the reference each method's native PEFT form in "
              "float64, one token at a time.",
    )
