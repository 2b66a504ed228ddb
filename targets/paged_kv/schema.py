"""The ``paged_kv`` contract as data (:mod:`fuzzkit.schema`): what ``fuzzkit describe
paged_kv`` shows.

The operations and their arguments are the validator's (:mod:`.checks`), the config's choices
the protocol's (:mod:`.protocol`), the sizes what the strategy draws within the resource limits
(:mod:`.limits`).  The describe tests check drawn cases and the reference's outputs against
this."""

from __future__ import annotations

from fuzzkit.schema import (
    Schema,
    anything,
    integer,
    listing,
    ops,
    record,
    text,
)
from fuzzkit.targets.paged_kv.protocol import EVICTIONS, HASHINGS, WINDOW_MODES


def schema() -> Schema:
    """The inputs an implementation receives and the outputs it returns."""
    tokens = listing("tokens", integer("token", ""), "token ids")
    extra = "extra hash key (LoRA adapter / cache salt), or null"
    program = ops("program", {
        "add": (integer("rid", "request id"), tokens,
                integer("adapter", extra, optional=True, nullable=True),
                integer("salt", extra, optional=True, nullable=True)),
        "allocate": (integer("rid", "request id"),
                     integer("n", "tokens to schedule (negative: an edge the strategy probes)")),
        "write": (integer("rid", "request id"),),
        "forward": (),
        "publish": (integer("rid", "request id"),),
        "append": (integer("rid", "request id"), tokens),
        "fork": (integer("src", "parent request id"), integer("dst", "child request id")),
        "preempt": (integer("rid", "request id"),),
        "trim": (integer("rid", "request id"),),
        "finish": (integer("rid", "request id"),),
        "reset": (),
    }, "the scheduler's calls, in order (reducible)", (0, 5000))
    roles = "value kinds of fuzzkit.values (zero, ties, tiny, subnormal, huge, ...)"
    return Schema(
        inputs=(
            record("config", (
                integer("num_blocks", "blocks in the pool", 2, 1024),
                integer("block_size", "tokens per block (usually 1-4, 8 or 16)", 1, 256),
                integer("sliding_window", "attention window in tokens, or null (full)", 1,
                        nullable=True, optional=True),
                text("eviction", "free-queue order (absent: lru)", EVICTIONS, optional=True),
                text("window_mode", "how blocks outside the window go (absent: trim)",
                     WINDOW_MODES, optional=True),
                text("hashing", "when full blocks get their hash (absent: publish)", HASHINGS,
                     optional=True),
            ), "the manager's construction"),
            program,
            record("kv_values", tuple(
                listing(role, text("kind", ""), f"{role} vectors' {roles}", (1, 2),
                        optional=True)
                for role in ("q", "k", "v")),
                "guarded drivers only: kinds of the query / key / value vectors (absent: "
                "standard normal)", optional=True),
        ),
        outputs=(
            listing("steps", record("step", (
                text("op", "the operation"),
                anything("result", "its logical result (hit tokens, counts; no block ids)"),
                integer("free", "free blocks after it", 0),
            ), "one step"), "one record per step run"),
            record("violation", (
                text("kind", "invariant | guard"),
                integer("step", "the step's index", 0),
                text("op", "its operation"),
                text("check", "the check that failed"),
                text("message", "what went wrong"),
            ), "the first semantic or structural violation; null: none", nullable=True,
                open=True),
            text("unsupported", "a case outside the manager's capabilities: why it was not run",
                 optional=True),
        ),
        notes="Plug in your own manager with `fuzzkit run paged_kv --impl module:Class` "
              "(protocol: fuzzkit.targets.paged_kv.protocol); each implementation is fuzzed "
              "only on the variants its capabilities declare.",
    )
