"""Invariants of the session KV memory (:mod:`.memory`), checked by the simulator after every
allocation from the memory's state and its eviction / refill records — independently of how the
memory computed them:

- ``capacity``: blocks in use never exceed the pool; the private count matches the sessions;
- ``shared_prefix``: a shared block's refcount equals the sessions that claim it, and a running
  session's shared prefix is resident (never evicted while referenced);
- ``running_context``: a running session's whole context is resident;
- ``resident_shape``: after a Penelope eviction a session keeps exactly one contiguous suffix of
  its private history (after tail eviction, one contiguous front);
- ``front_cost``: the recompute cost of the blocks Penelope evicted is at most that of the same
  number of blocks at the session's tail;
- ``refill``: the tokens recomputed for a turn equal the hole (prompt tokens not resident) minus
  what the CPU tier reloaded.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

Problem = Optional[tuple[str, str]]


def audit(memory: Any, eviction: str, events: Sequence[dict[str, Any]]) -> Problem:
    for check in (_capacity, _shared, _running):
        problem = check(memory)
        if problem is not None:
            return problem
    for event in events:
        problem = (_shape(memory, eviction, event) if event["op"] == "evict"
                   else _refill(memory, event))
        if problem is not None:
            return problem
    return None


def _capacity(memory: Any) -> Problem:
    private = sum(len(s.resident) for s in memory.sessions.values())
    if private != memory.private_used:
        return ("capacity", f"{memory.private_used} private blocks counted in use, sessions "
                            f"hold {private}")
    if memory.used > memory.capacity:
        return ("capacity", f"{memory.used} blocks in use in a pool of {memory.capacity}")
    return None


def _shared(memory: Any) -> Problem:
    claims: dict[int, int] = {}
    for s in memory.sessions.values():
        if s.holds_shared:
            for block in s.shared:
                claims[block] = claims.get(block, 0) + 1
    if claims != memory.shared_refs:
        wrong = sorted(set(claims.items()) ^ set(memory.shared_refs.items()))[:3]
        return ("shared_prefix", f"shared block refcounts differ from the sessions' claims "
                                 f"(first differences {wrong})")
    return None


def _running(memory: Any) -> Problem:
    for s in memory.sessions.values():
        if s.running <= 0:
            continue
        if s.shared and not (s.holds_shared and all(b in memory.shared_refs for b in s.shared)):
            return ("shared_prefix", f"session {s.sid} is running but its shared prefix is not "
                                     "resident (evicted while referenced)")
        need = set(range(len(s.shared), len(s.shared) + s.holding))
        if not need <= s.resident:
            return ("running_context", f"session {s.sid} is running with private blocks "
                                       f"{sorted(need - s.resident)[:5]} not resident")
    return None


def _shape(memory: Any, eviction: str, event: dict[str, Any]) -> Problem:
    first, end = event["shared"], event["shared"] + event["length"]
    resident = event["resident"]
    if resident:
        contiguous = resident == list(range(resident[0], resident[-1] + 1))
        if eviction == "penelope" and not (contiguous and resident[-1] == end - 1):
            return ("resident_shape", f"after a Penelope eviction session {event['sid']} holds "
                                      f"{_ranges(resident)} of its private blocks "
                                      f"{first}..{end - 1}: not one contiguous suffix")
        if eviction == "tail_lru" and not (contiguous and resident[0] == first):
            return ("resident_shape", f"after a tail eviction session {event['sid']} holds "
                                      f"{_ranges(resident)}: not one contiguous front")
    if eviction == "penelope" and event["blocks"]:
        before = sorted(set(resident) | set(event["blocks"]))
        tail = before[-len(event["blocks"]):]
        b = memory.block_size
        front_cost = sum(memory.cost.chunk(b, i * b) for i in event["blocks"])
        tail_cost = sum(memory.cost.chunk(b, i * b) for i in tail)
        if front_cost > tail_cost:
            return ("front_cost", f"Penelope evicted blocks {_ranges(event['blocks'])} of "
                                  f"session {event['sid']}, costlier to recompute "
                                  f"({front_cost}) than its tail ({tail_cost})")
    return None


def _refill(memory: Any, event: dict[str, Any]) -> Problem:
    """Count the hole from the state before the allocation: prompt tokens outside resident
    (or reloaded) blocks, or past what the session had computed."""
    b, prompt = memory.block_size, event["prompt"]
    valid = event["tokens_before"]
    resident, cpu = set(event["resident_before"]), set(event["cpu_before"])
    hole = reloaded = 0
    shared_tokens = min(event["shared_blocks"] * b, prompt)
    if not event["shared_resident_before"]:
        hole += shared_tokens
    for index in range(event["shared_blocks"], -(-prompt // b)):
        lo, hi = index * b, min((index + 1) * b, prompt)
        if index in resident or index in cpu:
            missing_tail = max(0, hi - max(lo, min(hi, valid)))
            hole += missing_tail
            if index in cpu and index not in resident:
                hole += hi - lo - missing_tail
                # which CPU blocks come back is the memory's choice; the count is checked
                reloaded += (hi - lo - missing_tail) if memory._reload_is_cheaper(index) else 0
        else:
            hole += hi - lo
    expected = max(1, hole - reloaded)
    if event["recompute"] != expected:
        return ("refill", f"session {event['sid']} recomputed {event['recompute']} tokens for a "
                          f"hole of {hole} with {reloaded} reloaded from the CPU tier "
                          f"(expected {expected})")
    return None


def _ranges(indices: Sequence[int]) -> str:
    out, start, prev = [], None, None
    for i in indices:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}..{prev}")
            start = prev = i
    if start is not None:
        out.append(f"{start}..{prev}")
    return "[" + ", ".join(out) + "]"
