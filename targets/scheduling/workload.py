"""Workloads for the serving simulator: requests as plain data, generators from a seed.

A request's prompt is described by the ids of its *full KV blocks*, which are nodes of a prefix
trie: two prompts that start with the same tokens start with the same block ids, and a block id
determines everything before it.  That is all a prefix cache or a prefix router needs to know of
the tokens, and it keeps case files small.  ``blocks`` covers prompt *and* output (the blocks a
finished request leaves in the cache); the prompt's own full blocks are ``blocks[:prompt // B]``.

Agent sessions are closed loops: turn ``k+1`` of a session is released ``think`` ticks after
turn ``k`` finishes (``after`` names turn ``k``), never before its own ``arrival``.  Everything
else is open loop.  Time is integer ticks of one nanosecond (see :mod:`.cost`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Optional

import numpy as np

SECOND = 1_000_000_000  # ticks


@dataclasses.dataclass(frozen=True)
class Request:
    rid: int
    arrival: int  # earliest release tick
    prompt: int  # prompt tokens (>= 1)
    output: int  # generated tokens (>= 1); the first comes out of the prefill
    blocks: tuple[int, ...]  # trie ids of the full blocks of prompt + output
    session: int = -1
    after: Optional[int] = None  # rid of the previous turn (closed loop), or None
    think: int = 0  # ticks between the previous turn finishing and this one being sent
    shared: int = 0  # leading prompt tokens shared with other sessions (system prompt, document)

    def to_json(self) -> dict[str, Any]:
        # the fields by hand: dataclasses.asdict deep-copies each one (a tenth of generation)
        return {"rid": self.rid, "arrival": self.arrival, "prompt": self.prompt,
                "output": self.output, "blocks": list(self.blocks), "session": self.session,
                "after": self.after, "think": self.think, "shared": self.shared}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Request":
        return cls(rid=int(data["rid"]), arrival=int(data["arrival"]), prompt=int(data["prompt"]),
                   output=int(data["output"]), blocks=tuple(int(b) for b in data["blocks"]),
                   session=int(data.get("session", -1)),
                   after=None if data.get("after") is None else int(data["after"]),
                   think=int(data.get("think", 0)), shared=int(data.get("shared", 0)))


class Trie:
    """Block ids from labels: the same label path always gives the same ids (a prefix trie)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, Any], int] = {}

    def path(self, labels: Iterable[Any]) -> list[int]:
        ids, parent = [], -1
        for label in labels:
            parent = self._ids.setdefault((parent, label), len(self._ids))
            ids.append(parent)
        return ids


def validate_requests(requests: list[Request], block_size: int) -> Optional[str]:
    """One line saying what is wrong with a workload, or None."""
    seen: dict[int, Request] = {}
    for r in requests:
        if r.rid in seen:
            return f"request id {r.rid} appears twice"
        if r.prompt < 1 or r.output < 1 or r.arrival < 0 or r.think < 0:
            return f"request {r.rid}: prompt and output must be >= 1, arrival and think >= 0"
        if len(r.blocks) != (r.prompt + r.output) // block_size:
            return (f"request {r.rid}: {len(r.blocks)} blocks for {r.prompt + r.output} tokens "
                    f"at block size {block_size}")
        if not 0 <= r.shared <= r.prompt:
            return f"request {r.rid}: shared prefix of {r.shared} tokens outside the prompt"
        if r.after is not None and r.after not in seen:
            return f"request {r.rid}: follows {r.after}, which is not an earlier request"
        seen[r.rid] = r
    return None


# ---------------------------------------------------------------------------------------------
# Generators.  Each takes a numpy Generator and returns requests with rids from ``first_rid``.


def _session_labels(session: int, shared: int, total_blocks: int, system: int) -> list[Any]:
    """Block labels of a session's history: the shared system prompt, then its own blocks."""
    return [("sys", system, i) if i < shared else ("s", session, i) for i in range(total_blocks)]


def agent_sessions(rng: np.random.Generator, trie: Trie, *, sessions: int, turns: int,
                   start: int, spread: int, block_size: int, system_tokens: int,
                   first_prompt: tuple[int, int], turn_tokens: tuple[int, int],
                   output: tuple[int, int], think: tuple[int, int], first_rid: int = 0,
                   first_session: int = 0, systems: int = 1) -> list[Request]:
    """Agent sessions that resend their whole, growing history every turn (the workload where
    prefix caching and front-of-history eviction matter).  Session starts are uniform in
    ``[start, start + spread)``; ``systems`` different system prompts are shared among them."""
    requests: list[Request] = []
    rid = first_rid
    for s in range(first_session, first_session + sessions):
        system = int(rng.integers(0, systems))
        arrival = start + int(rng.integers(0, max(1, spread)))
        context, previous = system_tokens + int(rng.integers(*first_prompt, endpoint=True)), None
        for _ in range(turns):
            out = int(rng.integers(*output, endpoint=True))
            labels = _session_labels(s, system_tokens // block_size,
                                     (context + out) // block_size, system)
            gap = int(rng.integers(*think, endpoint=True))
            requests.append(Request(rid, arrival, context, out, tuple(trie.path(labels)),
                                    session=s, after=previous, think=gap if previous is not None
                                    else 0, shared=system_tokens // block_size * block_size))
            previous, rid = rid, rid + 1
            context += out + int(rng.integers(*turn_tokens, endpoint=True))
    return requests


def rag_requests(rng: np.random.Generator, trie: Trie, *, count: int, times: np.ndarray,
                 documents: int, doc_tokens: tuple[int, int], query_tokens: tuple[int, int],
                 output: tuple[int, int], block_size: int, first_rid: int = 0,
                 zipf: float = 1.2) -> list[Request]:
    """RAG requests: a long retrieved document shared by many requests (Zipf popularity), then a
    short private query."""
    lengths = rng.integers(*doc_tokens, endpoint=True, size=documents)
    ranks = np.arange(1, documents + 1, dtype=float) ** -zipf
    popularity = ranks / ranks.sum()
    requests = []
    for i in range(count):
        rid = first_rid + i
        doc = int(rng.choice(documents, p=popularity))
        query = int(rng.integers(*query_tokens, endpoint=True))
        out = int(rng.integers(*output, endpoint=True))
        prompt = int(lengths[doc]) + query
        doc_blocks = int(lengths[doc]) // block_size
        labels = [("doc", doc, j) for j in range(doc_blocks)]
        labels += [("q", rid, j) for j in range(doc_blocks, (prompt + out) // block_size)]
        requests.append(Request(rid, int(times[i]), prompt, out, tuple(trie.path(labels)),
                                shared=doc_blocks * block_size))
    return requests


def poisson_times(rng: np.random.Generator, rate_per_s: float, start: int, end: int) -> np.ndarray:
    """Arrival ticks of a Poisson process of ``rate_per_s`` in ``[start, end)``."""
    expected = max(1, int(rate_per_s * (end - start) / SECOND * 1.5) + 10)
    gaps = rng.exponential(SECOND / rate_per_s, size=expected)
    times = start + np.cumsum(gaps)
    return times[times < end].astype(np.int64)


def steady(rng: np.random.Generator, trie: Trie, *, rate_per_s: float, duration: int,
           block_size: int, first_rid: int = 0, **rag: Any) -> list[Request]:
    """A steady Poisson stream of RAG-style requests."""
    times = poisson_times(rng, rate_per_s, 0, duration)
    return rag_requests(rng, trie, count=len(times), times=times, block_size=block_size,
                        first_rid=first_rid, **rag)


def spike(rng: np.random.Generator, trie: Trie, *, base_rate: float, spike_rate: float,
          duration: int, spike_start: int, spike_end: int, block_size: int,
          first_rid: int = 0, **rag: Any) -> list[Request]:
    """A Poisson stream at ``base_rate`` with a spike at ``spike_rate`` in
    ``[spike_start, spike_end)``: the load under which prefill order decides tail latency."""
    times = np.sort(np.concatenate([
        poisson_times(rng, base_rate, 0, spike_start),
        poisson_times(rng, spike_rate, spike_start, spike_end),
        poisson_times(rng, base_rate, spike_end, duration)]))
    return rag_requests(rng, trie, count=len(times), times=times, block_size=block_size,
                        first_rid=first_rid, **rag)


def renumber(requests: list[Request]) -> list[Request]:
    """Sort by (arrival, old rid) and number 0..n-1, keeping ``after`` links (a merged workload
    must list every request after the one it follows)."""
    ordered = sorted(requests, key=lambda r: (r.arrival, r.rid))
    new = {r.rid: i for i, r in enumerate(ordered)}
    out = [dataclasses.replace(r, rid=new[r.rid],
                               after=None if r.after is None else new[r.after]) for r in ordered]
    # a turn never arrives before the turn it follows, so `after` always points backwards
    assert all(r.after is None or r.after < r.rid for r in out)
    return out
