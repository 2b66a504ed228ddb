"""The ``scheduling`` contract as data (:mod:`fuzzkit.schema`): what ``fuzzkit describe
scheduling`` shows.

Ranges are what :mod:`.strategies` draws (the simulator, :mod:`.sim`, accepts more; the
resource limits are :mod:`.limits`).  The describe tests check drawn cases and the reference's
outputs against this."""

from __future__ import annotations

from fuzzkit.schema import (
    Schema,
    anything,
    boolean,
    integer,
    listing,
    mapping,
    number,
    record,
    tagged,
    text,
)


def _config() -> tuple:
    limit = "queue length cut-off, or null"
    policy = tagged("policy", {
        "fcfs": (),
        "lpm": (integer("fallback_len", f"LPM falls back to FCFS past it: {limit}", 0,
                        optional=True, nullable=True),),
        "spf": (),
        "fairway": (integer("beta", "Fairway's waiting-time weight", 0),
                    integer("short_queue", f"below it FCFS: {limit}", 0, nullable=True)),
    }, "prefill order of each instance's waiting queue", tag="name")
    router = tagged("router", {
        "random": (), "round_robin": (), "least_loaded": (),
        "prefix": (number("epsilon", "bounded-load slack (>= 0)", 0.0),
                   integer("vnodes", "virtual nodes per instance (absent: 64)", 1, 64,
                           optional=True),
                   integer("prefix_blocks", "blocks hashed for the ring key (absent: all)",
                           choices=(1, 2, 4), optional=True)),
    }, "which instance each request goes to", tag="name")
    fraction = (0.0, 1.0)
    admission = tagged("admission", {
        "none": (),
        "static_cap": (integer("max_sessions", "live sessions at most", 1),),
        "basin": (integer("b_min", "reservation clamp, low", 0),
                  integer("b_max", "reservation clamp, high", 0),
                  integer("b_init", "initial reservation (absent: b_min)", 0, optional=True),
                  integer("increase", "additive increase", 0, 5),
                  integer("increase_every", "ticks between increases", 0),
                  number("decrease", "multiplicative decrease", *fraction),
                  integer("cooldown", "ticks after a decrease", 0),
                  number("watermark", "free-memory watermark", *fraction)),
    }, "session admission control (absent: none)", tag="name", optional=True)
    return (
        integer("block_size", "tokens per KV block", choices=(2,)),
        integer("instances", "serving instances at the start", 1, 4),
        integer("token_budget", "prefill + decode tokens per step", 1),
        integer("max_running", "running requests per instance", 1, 16),
        integer("cache_blocks", "prefix-cache blocks per instance", 0),
        boolean("serial", "one whole prefill per step (absent: false)", optional=True),
        integer("seed", "the random router's seed", 0, 7),
        listing("scale_ups", integer("tick", "", 0), "ticks where an instance is added"),
        policy,
        router,
        record("cost", (
            integer("k0", "step cost: constant", 1),
            integer("k1", "step cost: per prefill token", 0),
            integer("k2", "step cost: per prefill token squared", 0),
            integer("decode", "step cost: per decode", 0),
        ), "step cost model (integer ticks)"),
        record("memory", (
            integer("kv_blocks", "session KV pool", 0),
            text("eviction", "whose history goes first", ("tail_lru", "session", "penelope")),
            integer("cpu_blocks", "CPU tier", 0, 16),
            integer("reload_per_block", "ticks to reload a block from CPU", 0),
        ), "session KV memory (absent: none)", optional=True),
        admission,
    )


def schema() -> Schema:
    """The inputs an implementation receives and the outputs it returns."""
    request = record("request", (
        integer("rid", "request id (0, 1, ... in order)", 0),
        integer("arrival", "arrival tick", 0),
        integer("prompt", "prompt tokens", 1),
        integer("output", "output tokens", 1),
        listing("blocks", integer("block", "", 0), "prompt block ids (shared ids = shared "
                "prefix)"),
        integer("session", "session id, -1: none", -1),
        integer("after", "a follow-up turn: the request it follows, or null", 0,
                nullable=True),
        integer("think", "ticks between the previous turn and this one", 0),
        integer("shared", "tokens shared with an earlier request", 0),
    ), "one request")
    return Schema(
        inputs=(
            record("config", _config(), "the cluster, policies and costs"),
            listing("requests", request, "the workload, by arrival (reducible)",
                    (1, 2000)),  # the resource limit
        ),
        outputs=(
            listing("events", record("event", (
                text("op", "route | dispatch | scale_up | evict | refill | ..."),
                integer("t", "tick", 0),
            ), "one decision, with the hit and cost the policy saw", open=True),
                "the event trace, compared step by step"),
            listing("steps", record("step", (
                integer("t", "tick", 0), integer("inst", "instance", 0),
            ), "one engine step", open=True), "step records"),
            anything("admission", "the admission controller's record, or null"),
            mapping("requests", record("times", (), "release, instance, dispatch, hit, "
                                       "first_token, finish", open=True),
                    "per request id: its times"),
            anything("violation", "the first invariant violation, or null"),
        ),
        notes="The reference runs O(n)-scan policies and linear-scan routers; the optimized "
              "implementation heaps, a kinetic tournament and a bisected hash ring.",
    )
