"""Programs for the paged KV target: small pools, shared prefixes, lengths at block edges.

Bugs in KV cache managers live at edges: a prompt of exactly ``k*b`` tokens (full-prompt hits),
``k*b ± 1`` (off-by-one block counts), a pool small enough that every allocation evicts, two
requests sharing a document prefix (hits), the same tokens under another adapter or salt
(incomplete keys), forks followed by divergent decoding (copy-on-write), windows (trimming).
Eviction policies live where a cached history is partly evicted: an agent turn that returns with
its old tokens plus more after other requests pushed the pool (penelope's holes and refills,
session eviction taking a whole history).  The strategy aims every draw at one of those edges.
A program is a flat list of operation records, so Hypothesis shrinks it by deleting steps.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

TOKENS = st.integers(0, 3)  # a tiny vocabulary: prefixes repeat, weak hashes collide
RIDS = st.integers(0, 2)


def _edge_length(block_size: int, max_blocks: int = 5) -> st.SearchStrategy[int]:
    """Lengths at ``k*b - 1``, ``k*b`` and ``k*b + 1`` mostly, anything up to the max sometimes."""
    edge = st.builds(lambda k, d: max(1, k * block_size + d),
                     st.integers(1, max_blocks), st.sampled_from([-1, 0, 0, 1]))
    return st.one_of(edge, edge, edge, st.integers(1, max_blocks * block_size + 1))


def _eviction() -> st.SearchStrategy[str]:
    """Half "lru" (the default keeps its coverage), 3 in 10 "penelope", 2 in 10 "session";
    shrinks to "lru" when the policy does not matter."""
    return st.integers(0, 9).map(lambda k: "lru" if k < 5 else "session" if k < 7 else "penelope")


def _serve(rid: int, tokens: list[int], adapter: Any = None,
           salt: Any = None) -> list[dict[str, Any]]:
    """A whole prefill: the common path, and what makes later prompts hit."""
    return [{"op": "add", "rid": rid, "tokens": tokens, "adapter": adapter, "salt": salt},
            {"op": "allocate", "rid": rid, "n": len(tokens)}, {"op": "write", "rid": rid},
            {"op": "publish", "rid": rid}]


Turn = tuple[int, int, int, list[int], list[int]]


def _session(block_size: int, num_blocks: int, rid: int, history: list[int],
             turns: list[Turn]) -> list[dict[str, Any]]:
    """An agent session: every request ends (the pool holds only free and cached blocks),
    ``rid`` is served and finishes; then each turn ``(evicted, split, offset, filler, more)``
    serves other requests (``filler`` tokens in whole blocks; ``split`` of them to a first
    request and the rest to a second, 0: one request) whose blocks are exactly the free ones
    plus ``evicted`` of the session's cached history (whole-session eviction takes it all),
    and the session returns with its tokens plus ``more``, under its own id or (``offset``)
    another's -- a handed-over session, whose hits make the history shared.  Under penelope
    the front of the history is gone and its tail kept: a hole to refill, allocated twice (the
    hole, then what follows the suffix); a second turn after a handed-over one meets a suffix
    with a gap."""
    b = block_size
    ops = [{"op": "finish", "rid": r} for r in range(3)]
    ops += _serve(rid, history) + [{"op": "finish", "rid": rid}]
    tokens = history
    for turn, (evicted, split, offset, filler, more) in enumerate(turns):
        full = len(tokens) // b
        who = (rid + offset) % 3
        pressure = max(1, num_blocks - 1 - full + max(1, min(evicted, full - 1)))
        cut = min(pressure - 1, split)
        for index, blocks in enumerate((cut, pressure - cut) if cut > 0 else (pressure,)):
            other = (who + 1 + index) % 3
            ops += _serve(other, filler[:blocks * b] or [4]) + [{"op": "finish", "rid": other}]
        tokens = tokens + more
        again = [{"op": "allocate", "rid": who, "n": len(tokens)}, {"op": "write", "rid": who}]
        ops += [{"op": "add", "rid": who, "tokens": tokens}, *again, *again,
                {"op": "publish", "rid": who}]
        if turn < len(turns) - 1:
            ops.append({"op": "finish", "rid": who})
    return ops


def _sessions(block_size: int, documents: list[list[int]],
              num_blocks: int) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Sessions (:func:`_session`) whose first history is a document cut at 3 to 6 whole
    blocks (that fit the pool), maybe plus a partial one; one or two returning turns."""
    b = block_size

    def of(full: int) -> st.SearchStrategy[list[dict[str, Any]]]:
        histories = st.builds(lambda d, tail: documents[d][:full * b] + tail,
                              st.integers(0, len(documents) - 1),
                              st.lists(TOKENS, max_size=b - 1))
        # filler tokens lie outside the documents' vocabulary: they never hit the history
        filler = st.lists(st.integers(4, 7), min_size=num_blocks * b, max_size=num_blocks * b)
        turn = st.tuples(st.integers(1, 6), st.integers(0, num_blocks - 2),
                         st.sampled_from([0, 1, 2]), filler,
                         st.lists(TOKENS, min_size=1, max_size=3 * b))
        return st.builds(_session, st.just(b), st.just(num_blocks), RIDS, histories,
                         st.lists(turn, min_size=1, max_size=2))

    return st.integers(3, max(3, min(6, num_blocks - 2))).flatmap(of)


def _ops(block_size: int, documents: list[list[int]], num_blocks: int = 8,
         eviction: str = "lru") -> st.SearchStrategy[list[dict[str, Any]]]:
    b = block_size

    def prompt(doc_index: int, cut: int, suffix: list[int]) -> list[int]:
        return documents[doc_index][:cut] + suffix

    prompts = st.builds(prompt, st.integers(0, len(documents) - 1), _edge_length(b),
                        st.lists(TOKENS, max_size=b + 1))
    extra = st.sampled_from([None, None, None, None, 0, 1])
    add = st.builds(lambda r, t, a, s: [{"op": "add", "rid": r, "tokens": t, "adapter": a,
                                         "salt": s}],
                    RIDS, prompts.filter(bool), extra, extra)
    sizes = st.sampled_from(sorted({1, max(1, b - 1), b, b + 1, 2 * b, 4 * b + 1}))

    serve_ = st.builds(_serve, RIDS, prompts.filter(bool), extra, extra)
    # a finished request leaves its published blocks cached: the next prompt can hit them
    served_and_done = st.builds(lambda ops: ops + [{"op": "finish", "rid": ops[0]["rid"]}],
                                serve_)
    step = st.builds(lambda r, n, publish: [{"op": "allocate", "rid": r, "n": n},
                                            {"op": "write", "rid": r}]
                     + ([{"op": "publish", "rid": r}] if publish else []),
                     RIDS, sizes, st.booleans())
    def decode_step(rid: int, tokens: list[int], trim_in_flight: bool,
                    publish: bool) -> list[dict[str, Any]]:
        """One decode step; with ``trim_in_flight`` the window is trimmed while the step's KV is
        still being written (async scheduling order), where trims that count unwritten tokens
        free blocks too early.  Without ``publish`` trimmed blocks are unhashed, go to the front
        of the free queue and come straight back to the next allocation."""
        write, trim = {"op": "write", "rid": rid}, {"op": "trim", "rid": rid}
        return [{"op": "append", "rid": rid, "tokens": tokens},
                {"op": "allocate", "rid": rid, "n": len(tokens)},
                *((trim, write) if trim_in_flight else (write, trim)),
                *([{"op": "publish", "rid": rid}] if publish else [])]

    decode = st.builds(decode_step, RIDS, st.lists(TOKENS, min_size=1, max_size=b + 1),
                       st.booleans(), st.booleans())
    def batch(first: int, second: int, n1: int, n2: int) -> list[dict[str, Any]]:
        """Two requests scheduled, one forward pass over both: a mixed batch."""
        return [{"op": "allocate", "rid": first, "n": n1},
                {"op": "allocate", "rid": second, "n": n2}, {"op": "forward"},
                {"op": "publish", "rid": first}, {"op": "publish", "rid": second}]

    def mixed_prefill(first: int, offset: int, prompt_a: list[int], prompt_b: list[int],
                      n: int) -> list[dict[str, Any]]:
        """Two new requests prefilled in one forward pass: the batch layout where each request
        has several query rows (row offsets per request matter)."""
        second = (first + offset) % 3
        return [{"op": "add", "rid": first, "tokens": prompt_a},
                {"op": "add", "rid": second, "tokens": prompt_b},
                *batch(first, second, len(prompt_a), n)]

    batch_ = st.one_of(st.builds(batch, RIDS, RIDS, sizes, sizes),
                       st.builds(mixed_prefill, RIDS, st.integers(1, 2), prompts.filter(bool),
                                 prompts.filter(bool), sizes))
    single = st.builds(lambda op, r: [{"op": op, "rid": r}],
                       st.sampled_from(["write", "publish", "preempt", "trim", "finish"]), RIDS)
    # an allocation whose write comes later (or never): the bugs that live between scheduling
    # and the forward pass (a hash published before the KV is written)
    allocate_only = st.builds(lambda r, n: [{"op": "allocate", "rid": r, "n": n}], RIDS, sizes)
    append = st.builds(lambda r, t: [{"op": "append", "rid": r, "tokens": t}],
                       RIDS, st.lists(TOKENS, min_size=1, max_size=b + 1))
    def fork_step(src: int, dst: int, diverge: Any) -> list[dict[str, Any]]:
        """A fork, half the time followed by one side decoding into the shared last block
        (copy-on-write)."""
        return [{"op": "fork", "src": src, "dst": dst}, *(diverge or [])]

    fork = st.builds(fork_step, RIDS, RIDS, st.one_of(st.none(), decode))
    reset = st.just([{"op": "reset"}])

    # Weighted choice by an integer draw (one_of does not weight, and Hypothesis favours the
    # ends of a range, so both ends are the common path and the cache-wiping reset is rare).
    # Returning sessions are long (20-40 steps): rarer under "lru", whose programs keep the mix
    # of short edges they had (a policy's program may also open with one, see ``inputs``).
    sessions = _sessions(b, documents, num_blocks)
    table = [(20, serve_), (15, served_and_done), (8, add), (15, step), (12, decode),
             (10, batch_), (10, single), (5, allocate_only), (5, append), (8, fork),
             (3 if eviction == "lru" else 6, sessions), (1, reset), (1, serve_)]
    cumulative, bound = [], 0
    for weight, strategy in table:
        bound += weight
        cumulative.append((bound, strategy))
    return st.integers(0, bound - 1).flatmap(
        lambda k: next(strategy for upper, strategy in cumulative if k < upper))


@st.composite
def inputs(draw: st.DrawFn, max_steps: int = 60) -> dict[str, Any]:
    block_size = draw(st.integers(1, 4))
    num_blocks = draw(st.integers(3, 16))
    windowed = draw(st.integers(0, 9)) >= 6  # about a third of the pools use a sliding window
    window = draw(st.integers(1, 3 * block_size + 1)) if windowed else None
    eviction = draw(_eviction())
    documents = draw(st.lists(st.lists(TOKENS, min_size=6 * block_size, max_size=6 * block_size),
                              min_size=1, max_size=2))
    # half the programs of a policy open with a returning session: where policies differ
    opening = (draw(st.one_of(st.just([]), _sessions(block_size, documents, num_blocks)))
               if eviction != "lru" else [])
    chunks = draw(st.lists(_ops(block_size, documents, num_blocks, eviction), min_size=1,
                           max_size=max_steps // 3))
    return {
        "config": {"num_blocks": num_blocks, "block_size": block_size,
                   "sliding_window": window, "eviction": eviction},
        "program": (opening + [op for chunk in chunks for op in chunk])[:max_steps],
    }
