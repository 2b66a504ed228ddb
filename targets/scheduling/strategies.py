"""Cases for the scheduling target: tiny clusters, tiny costs, many ties.

Scheduling bugs hide in ties (equal arrival ticks, equal costs, equal response ratios), at queue
length thresholds (Fairway's short-queue limit, LPM's FCFS fallback), at the bypass budget's edge,
at bounded-load capacity edges and right after a scale-up, and in prefix-cache churn that changes
a waiting request's hit length (stale hits).  So: arrivals in a window of a few ticks, costs of a
few ticks, budgets of a few tokens (chunking), caches of a few blocks (evictions), a handful of
shared documents (hits), follow-up turns that extend an earlier request (closed loops), small
β values near typical costs, and scale-ups in the middle of the run.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from targets.scheduling.workload import Request, Trie

BLOCK = 2


def _policy() -> st.SearchStrategy[dict[str, Any]]:
    limits = st.sampled_from([None, None, 0, 1, 2, 4])
    lpm = st.builds(lambda n: {"name": "lpm", "fallback_len": n},
                    st.sampled_from([None, 0, 2, 3, 3, 4, 4]))
    return st.one_of(
        st.just({"name": "fcfs"}),
        # the stale-order fallback shows only when >= 2 requests stay behind a sort of <= n
        # requests and a burst then lengthens the queue: rare, so LPM is drawn twice as often
        lpm, lpm,
        st.just({"name": "spf"}),
        st.builds(lambda b, n: {"name": "fairway", "beta": b, "short_queue": n},
                  st.sampled_from([0, 1, 3, 8, 20, 60, 10**9]), limits),
        st.builds(lambda b, n: {"name": "fairway", "beta": b, "short_queue": n},
                  st.integers(0, 200), limits),
    )


def _router() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.just({"name": "round_robin"}),
        st.just({"name": "random"}),
        st.just({"name": "least_loaded"}),
        st.builds(lambda v, e, k: {"name": "prefix", "vnodes": v, "epsilon": e,
                                   "prefix_blocks": k},
                  st.sampled_from([1, 2, 8]), st.sampled_from([0.0, 0.25, 1.0]),
                  st.sampled_from([1, 2, 4])),
    )


# arrivals in units of the step overhead k0 (so queue dynamics look alike whatever the costs),
# spread out or in bursts: queues long enough to cross Fairway's and LPM's queue-length
# thresholds, and a short phase followed by a burst that lengthens the queue
_ARRIVAL = st.one_of(st.integers(0, 12), st.sampled_from([0, 1, 4, 5, 10]))

_SPEC = st.tuples(
    _ARRIVAL,
    st.integers(0, 3),  # document
    st.integers(0, 8),  # document tokens used
    st.integers(1, 5),  # private prompt tokens
    st.integers(1, 4),  # output tokens
    # follow one of the first few requests (or none, < 0): several follow-ups of one request are
    # released together when it finishes (an agent fanning out), with long prefix hits
    st.integers(-1, 4),
    st.integers(0, 5),  # think time
)


def _requests(specs: list[tuple[int, ...]], arrivals: list[int]) -> list[dict[str, Any]]:
    """Build prompts from specs: documents shared across requests, follow-ups that resend the
    earlier request's prompt and output plus a few new tokens (an agent turn)."""
    trie, built = Trie(), []
    for rid, (_, doc, doc_tokens, private, out, follow, think) in enumerate(specs):
        arrival = arrivals[rid]
        if 0 <= follow < rid:
            previous = built[follow]
            prompt = previous.prompt + previous.output + private
            blocks = list(previous.blocks)  # the history is the earlier request's blocks
            blocks += trie.path([("r", rid, j) for j in range((prompt + out) // BLOCK)])[len(blocks):]
            request = Request(rid, arrival, prompt, out, tuple(blocks), after=follow, think=think,
                              shared=previous.shared)
        else:
            prompt = doc_tokens + private
            labels = [("d", doc, j) for j in range(doc_tokens // BLOCK)]
            labels += [("r", rid, j) for j in range(len(labels), (prompt + out) // BLOCK)]
            request = Request(rid, arrival, prompt, out, tuple(trie.path(labels)),
                              shared=doc_tokens // BLOCK * BLOCK)
        built.append(request)
    return [r.to_json() for r in built]


def _phased(count: int, warm: int, group: int, tick: int) -> list[int]:
    """Arrival ticks of a spike after a quiet phase: ``warm`` requests at 0 (they fill the
    cache), a long quiet gap, a ``group`` arriving together (a short queue, sorted by a
    cache-aware policy), then the rest one tick later, while the group still waits (the queue
    crosses the policies' length thresholds)."""
    gap = 60 * tick
    return [0 if i < warm else gap if i < warm + group else gap + 1 for i in range(count)]


@st.composite
def inputs(draw: st.DrawFn) -> dict[str, Any]:
    cost = {"k0": draw(st.sampled_from([1, 2, 5, 20])),
            "k1": draw(st.sampled_from([0, 1, 1, 3])),
            "k2": draw(st.sampled_from([0, 0, 1])),
            "decode": draw(st.sampled_from([0, 1, 2]))}
    tick = cost["k0"]
    # a uniform size (st.lists alone averages ~6 items): queues need a dozen requests to build up
    size = draw(st.integers(1, 20))
    specs = draw(st.lists(_SPEC, min_size=size, max_size=size))
    jitter = draw(st.lists(st.integers(0, tick), min_size=1, max_size=3))
    arrivals = [spec[0] * tick + jitter[i % len(jitter)] for i, spec in enumerate(specs)]
    if draw(st.booleans()):
        arrivals = _phased(len(specs), draw(st.integers(1, 3)), draw(st.integers(2, 4)), tick)
    instances = draw(st.sampled_from([1, 1, 2, 3]))
    budget = draw(st.sampled_from([1, 2, 3, 5, 8, 64]))
    config = {
        "block_size": BLOCK,
        "instances": instances,
        "token_budget": budget,
        "max_running": draw(st.integers(1, min(budget, 4))),
        "cache_blocks": draw(st.sampled_from([0, 2, 4, 8, 64])),
        "seed": draw(st.integers(0, 3)),
        "scale_ups": [t * tick for t in draw(st.lists(st.integers(0, 12), max_size=2))],
        "policy": draw(_policy()),
        "router": draw(_router()),
        "cost": cost,
    }
    requests = _requests(specs, arrivals)
    if draw(st.integers(0, 2)) == 0:
        # session KV memory: a pool just above the largest context (it must fit on its own), so
        # that nearly every turn evicts somebody's history
        largest = max(-(-(r["prompt"] + r["output"]) // BLOCK) for r in requests)
        config["memory"] = {"kv_blocks": largest + draw(st.sampled_from([0, 1, 2, 4, 12])),
                            "eviction": draw(st.sampled_from(["tail_lru", "session",
                                                              "penelope"])),
                            "cpu_blocks": draw(st.sampled_from([0, 0, 2, 8])),
                            "reload_per_block": draw(st.sampled_from([0, 1, 50]))}
        config["admission"] = draw(st.one_of(
            st.none(), st.just({"name": "none"}),
            st.builds(lambda n: {"name": "static_cap", "max_sessions": n}, st.integers(1, 3)),
            st.builds(lambda lo, extra, dec, cool, every: {
                "name": "basin", "b_min": lo, "b_max": lo + extra, "increase": 2,
                "increase_every": every * tick, "decrease": dec, "cooldown": cool * tick,
                "watermark": 0.25},
                st.integers(2, 8), st.integers(0, 16), st.sampled_from([0.5, 0.75]),
                st.integers(0, 3), st.integers(1, 5))))
    return {"config": config, "requests": requests}
