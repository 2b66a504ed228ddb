"""Every paged_kv mutant on a hand-written minimal program.

For each mutant there is one small program (plain data, a handful of steps) on which the
reference and the clean optimized manager agree and break no invariant, and on which the mutated
optimized manager fails the target's oracle with the expected signature -- i.e. the program
shows the bug where the real bug would show, and the oracle check named in the signature (a
trace divergence, the semantic ``kv-content`` check, a structural invariant, or a crash) is the
one that catches it.
"""

from __future__ import annotations

import os
from typing import Any, Optional

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

from fuzzkit.registry import get_target  # noqa: E402
from fuzzkit.runner import check_case  # noqa: E402
from fuzzkit.targets.paged_kv.mutants import MUTANTS  # noqa: E402

# ---------------------------------------------------------------------------- program helpers


def add(rid: int, tokens: list[int], adapter: Optional[int] = None,
        salt: Optional[int] = None) -> dict[str, Any]:
    return {"op": "add", "rid": rid, "tokens": tokens, "adapter": adapter, "salt": salt}


def allocate(rid: int, n: int) -> dict[str, Any]:
    return {"op": "allocate", "rid": rid, "n": n}


def op(name: str, rid: int) -> dict[str, Any]:
    return {"op": name, "rid": rid}


def append(rid: int, tokens: list[int]) -> dict[str, Any]:
    return {"op": "append", "rid": rid, "tokens": tokens}


def fork(src: int, dst: int) -> dict[str, Any]:
    return {"op": "fork", "src": src, "dst": dst}


def serve(rid: int, tokens: list[int], adapter: Optional[int] = None,
          salt: Optional[int] = None) -> list[dict[str, Any]]:
    """A whole prefill: add, allocate everything, write, publish."""
    return [add(rid, tokens, adapter, salt), allocate(rid, len(tokens)), op("write", rid),
            op("publish", rid)]


def program(num_blocks: int, block_size: int, steps: list[Any],
            window: Optional[int] = None, eviction: Optional[str] = None) -> dict[str, Any]:
    flat: list[dict[str, Any]] = []
    for step in steps:
        flat.extend(step if isinstance(step, list) else [step])
    config: dict[str, Any] = {"num_blocks": num_blocks, "block_size": block_size,
                              "sliding_window": window}
    if eviction is not None:  # absent means "lru"
        config["eviction"] = eviction
    return {"config": config, "program": flat}


# ---------------------------------------------------------------------------- eviction scenarios
#
# b = 2.  HISTORY has 4 full blocks A0..A3 and a partial one; under penelope the finish queues
# A0..A3 front first, and 5 blocks of pressure (3 free, then A0, A1) leave A2, A3: the returning
# turn (old tokens + 2) has no prefix, the hole A0..A1 and the suffix A2..A3, then new blocks.

HISTORY = [1, 2, 3, 4, 5, 6, 7, 8, 9]


def returning_turn(eviction: str) -> dict[str, Any]:
    turn = HISTORY + [10, 11]
    return program(8, 2, [serve(0, HISTORY), op("finish", 0), serve(1, [0] * 10),
                          op("finish", 1), add(2, turn), allocate(2, 11), op("write", 2),
                          allocate(2, 11), op("write", 2), op("publish", 2)], eviction=eviction)


def shared_prefix(eviction: str, probe: list[dict[str, Any]]) -> dict[str, Any]:
    """Request 1 hits A0, A1 while request 0 holds them: shared.  At request 0's finish its own
    blocks are A2, A3; 4 blocks of pressure evict one cached block (after 3 uncached ones)."""
    return program(8, 2, [serve(0, HISTORY), add(1, [1, 2, 3, 4, 0]), allocate(1, 5),
                          op("finish", 1), op("finish", 0), serve(2, [0] * 8), op("finish", 2),
                          *probe], eviction=eviction)


def handed_over_session() -> dict[str, Any]:
    """Request 1 continues request 0's session (hole A0, shared suffix A1..A3, new N4, N5); at
    its finish its own blocks (A0', N4, N5) queue before the shared ones, and pressure evicts
    A0', N4: a third turn finds A1..A3 and N5 with N4 missing between them -- a suffix with a
    gap, of which only N5 is the contiguous suffix."""
    first = [1, 2, 3, 4, 5, 6, 7, 8]
    second = first + [10, 11, 12, 13, 14]
    return program(9, 2, [serve(0, first), op("finish", 0), serve(1, [0] * 10), op("finish", 1),
                          add(2, second), allocate(2, 13), op("write", 2), allocate(2, 13),
                          op("write", 2), op("publish", 2), op("finish", 2), serve(1, [5] * 8),
                          op("finish", 1), add(0, second + [15])], eviction="penelope")


# ---------------------------------------------------------------------------- the cases
#
# mutant name -> (program, expected failure signature).  The comment says where the bug shows.

CASES: dict[str, tuple[dict[str, Any], str]] = {
    # past the tables' 8 rows: the 9th live request gets row 7, still request 7's, and wipes it
    "row-growth-hands-out-live-row": (
        program(12, 1, [[add(r, [r]), allocate(r, 1)] for r in range(8)] + [add(8, [8])]),
        "invariant:paged_kv:ref-cnt-holders:add"),
    # a 17-entry table allocated at once into rows 8 wide: one doubling (16) is not enough
    "table-widen-doubles-once": (
        program(19, 1, [add(0, list(range(17))), allocate(0, 17)]),
        "crash:ValueError@targets/paged_kv/optimized.py:_append_table"),
    # both sides of the fork decode a block and publish it: request 1's block [1, 3] is cached
    # under request 0's hash of [1, 2], so a prompt [1, 3, ...] finds one block, not two
    "fork-aliases-hash-chain": (
        program(6, 1, [serve(0, [1]), fork(0, 1),
                       append(0, [2]), allocate(0, 1), op("write", 0), op("publish", 0),
                       append(1, [3]), allocate(1, 1), op("write", 1), op("publish", 1),
                       add(2, [1, 3, 9])]),
        "mismatch:trace:add:exact:step['result']"),
    # tokens 0 and 65536 are equal in 16 bits: the second prompt hits the first's block
    "token-ids-hashed-as-uint16": (
        program(4, 1, [serve(0, [0, 1]), op("finish", 0), add(1, [65536, 1])]),
        "mismatch:trace:add:exact:step['result']"),
    # w=1: both blocks leave the window and go to the front; the next block the request needs is
    # its own trimmed block 1, so the store list names it twice and finish frees it twice.
    "free-duplicate-block": (
        program(4, 1, [add(0, [1, 2]), allocate(0, 2), op("write", 0), op("trim", 0),
                       append(0, [3]), allocate(0, 1), op("write", 0), op("finish", 0)],
                window=1),
        "invariant:paged_kv:ref-cnt-holders:finish"),
    # the fork happens before any trim: block 1 lies outside the window ring
    "fork-window-double-free": (
        program(6, 1, [add(0, [1, 2, 3]), allocate(0, 3), op("write", 0), fork(0, 1)],
                window=1),
        "invariant:paged_kv:ref-cnt-holders:fork"),
    # free queue [4, 2, 1, 3] with hit 1 third: 3 new blocks are popped before the hit is pinned,
    # so the hit is handed out again (one block fewer leaves the queue; the prefill would then
    # overwrite the cached prefix)
    "pin-after-allocation": (
        program(5, 2, [serve(0, [1, 2, 3]), serve(1, [5, 6, 7]), op("finish", 0),
                       op("finish", 1), add(2, [1, 2, 9, 9, 9, 9, 9]), allocate(2, 7),
                       op("write", 2)]),
        "mismatch:trace:allocate:exact:step['free']"),
    "touch-leaves-hit-in-free-queue": (
        program(4, 2, [serve(0, [1, 2, 3]), op("finish", 0), add(1, [1, 2, 3]),
                       allocate(1, 3)]),
        "invariant:paged_kv:ref-cnt-free-queue:allocate"),
    # two hits: only the first (the "ancestor") is referenced
    "lock-skips-matched-block": (
        program(6, 2, [serve(0, [1, 2, 3, 4, 5]), op("finish", 0), add(1, [1, 2, 3, 4, 5]),
                       allocate(1, 5)]),
        "invariant:paged_kv:ref-cnt-holders:allocate"),
    # request 1's hit (block 1) is evicted and rewritten by request 2 between add and allocate
    "admission-hits-reused": (
        program(3, 2, [serve(0, [1, 2, 3]), op("finish", 0), add(1, [1, 2, 3]),
                       add(2, [7, 7, 7, 7]), allocate(2, 4), op("write", 2), op("finish", 2),
                       allocate(1, 3), op("write", 1)]),
        "mismatch:trace:allocate:exact:step['result']['computed']"),
    # a prompt of exactly 2 blocks, both cached
    "full-prompt-hit": (
        program(4, 2, [serve(0, [1, 2, 3, 4]), add(1, [1, 2, 3, 4])]),
        "mismatch:trace:add:exact:step['result']"),
    "evict-keeps-block-hash": (
        program(3, 2, [serve(0, [1, 2, 3]), op("finish", 0), add(1, [7, 7, 7, 7]),
                       allocate(1, 4)]),
        "invariant:paged_kv:stale-hash:allocate"),
    # blocks 1 and 3 are both cached under the hash of [1, 2]; evicting 1 drops 3 from the index
    "evict-drops-duplicate-hashes": (
        program(6, 2, [add(0, [1, 2, 3]), add(1, [1, 2, 3]), allocate(0, 3), allocate(1, 3),
                       op("write", 0), op("write", 1), op("publish", 0), op("publish", 1),
                       op("finish", 0), op("finish", 1), add(2, [7] * 8), allocate(2, 8)]),
        "invariant:paged_kv:stale-hash:allocate"),
    # [1, 1] and [3, 2] collide in the low 8 bits of the chain hash
    "hash-truncated-8-bits": (
        program(6, 2, [serve(0, [1, 1, 0]), add(1, [3, 2, 0])]),
        "mismatch:trace:add:exact:step['result']"),
    "hash-token-multiset": (
        program(6, 2, [serve(0, [1, 2, 3]), add(1, [2, 1, 3])]),
        "mismatch:trace:add:exact:step['result']"),
    "adapter-missing-from-hash": (
        program(6, 2, [serve(0, [1, 2, 3], adapter=1), add(1, [1, 2, 3])]),
        "mismatch:trace:add:exact:step['result']"),
    "extra-keys-untagged": (
        program(6, 2, [serve(0, [1, 2, 3], adapter=1), add(1, [1, 2, 3], salt=1)]),
        "mismatch:trace:add:exact:step['result']"),
    "salt-missing-from-hash": (
        program(6, 2, [serve(0, [1, 2, 3], salt=1), add(1, [1, 2, 3], salt=2)]),
        "mismatch:trace:add:exact:step['result']"),
    # request 1 is added while request 0's prefill is scheduled but not written: it hits
    # block 1, which holds nothing yet
    "publish-before-kv-written": (
        program(6, 2, [add(0, [1, 2, 3]), allocate(0, 3), add(1, [1, 2, 3]), op("write", 0),
                       op("publish", 0)]),
        "mismatch:trace:add:exact:step['result']"),
    # row 0 is reused by request 1 after request 0 finished
    "row-reuse-stale-entries": (
        program(4, 2, [add(0, [1, 2, 3]), allocate(0, 3), op("finish", 0), add(1, [5])]),
        "invariant:paged_kv:ref-cnt-holders:add"),
    "row-reuse-zero-filled": (
        program(4, 2, [add(0, [1, 2, 3]), allocate(0, 3), op("finish", 0), add(1, [5])]),
        "invariant:paged_kv:null-block:add"),
    # only a reset that succeeds rebuilds the pool
    "reset-hands-out-null-block": (
        program(3, 2, [serve(0, [1, 2, 3]), op("finish", 0), {"op": "reset"}]),
        "invariant:paged_kv:null-block:reset"),
    # trim while positions 2 and 3 are scheduled but not written
    "trim-counts-in-flight-tokens": (
        program(6, 1, [add(0, [1, 2, 3, 4]), allocate(0, 2), op("write", 0), allocate(0, 2),
                       op("trim", 0), op("write", 0)], window=2),
        "mismatch:trace:trim:exact:step['result']"),
    # request 1 gets request 0's row while request 0 is preempted
    "retract-frees-row-in-use": (
        program(6, 2, [add(0, [1, 2, 3]), allocate(0, 3), op("write", 0), op("preempt", 0),
                       add(1, [5, 6, 7]), allocate(1, 3)]),
        "invariant:paged_kv:ref-cnt-holders:allocate"),
    # 2 blocks published; re-admission hits 1 (the last token is recomputed), block 1 is
    # recomputed but never hashed again
    "stale-cached-count-after-preempt": (
        program(4, 2, [serve(0, [1, 2, 3, 4]), op("preempt", 0), allocate(0, 4),
                       op("write", 0), op("publish", 0)]),
        "mismatch:trace:publish:exact:step['result']"),
    "resume-table-appended": (
        program(4, 2, [add(0, [1, 2, 3]), allocate(0, 3), op("write", 0), op("preempt", 0)]),
        "invariant:paged_kv:ref-cnt-holders:preempt"),
    # 3 tokens, b = 2: the third token starts a block
    "block-allocated-one-token-late": (
        program(4, 2, [add(0, [1, 2, 3]), allocate(0, 3)]),
        "invariant:paged_kv:table-length:allocate"),
    # request 1 evicts one of request 0's two cached blocks: the tail (right) or the head
    "free-head-first": (
        program(4, 2, [serve(0, [1, 2, 3, 4, 5]), op("finish", 0), add(1, [9, 9, 9, 9]),
                       allocate(1, 4), add(2, [1, 2, 3, 4, 5])]),
        "mismatch:trace:add:exact:step['result']"),
    # request 1's unhashed blocks end up behind cached block 1, which request 2 then evicts
    "unhashed-freed-to-back": (
        program(4, 2, [serve(0, [1, 2, 3]), op("finish", 0), add(1, [7, 7, 7]),
                       allocate(1, 3), op("write", 1), op("finish", 1), add(2, [8, 8, 8]),
                       allocate(2, 3), add(3, [1, 2, 3])]),
        "mismatch:trace:add:exact:step['result']"),
    # the fork's first write lands in the shared, partly filled block
    "cow-missing-after-fork": (
        program(6, 2, [add(0, [1, 2, 3]), allocate(0, 3), op("write", 0), fork(0, 1),
                       append(1, [4]), allocate(1, 1), op("write", 1)]),
        "mismatch:trace:allocate:exact:step['free']"),
    "cow-copy-dropped": (
        program(6, 2, [add(0, [1, 2, 3]), allocate(0, 3), op("write", 0), fork(0, 1),
                       append(1, [4]), allocate(1, 1), op("write", 1)]),
        "invariant:paged_kv:kv-content:write"),
    # 2 free blocks, one of them the hit: hit + 2 new blocks do not fit
    "overcommit-ignores-hits": (
        program(3, 2, [serve(0, [1, 2, 3]), op("finish", 0), add(1, [1, 2, 7, 7, 7]),
                       allocate(1, 5)]),
        "crash:ValueError@targets/paged_kv/optimized.py:popleft"),
    # request 0 still holds its blocks (nothing in flight)
    "reset-while-in-use": (
        program(4, 2, [serve(0, [1, 2, 3]), {"op": "reset"}]),
        "mismatch:trace:reset:exact:step['result']"),
    # tail first evicts A3, A2: the returning turn hits the prefix A0, A1 and computes from 4
    "penelope-evicts-tail": (
        returning_turn("penelope"), "mismatch:trace:allocate:exact:step['result']['computed']"),
    # the shared A1 is evicted instead of A2: same hit count, a different hole
    "penelope-shared-prefix-first": (
        shared_prefix("penelope", [add(3, HISTORY), allocate(3, 9), op("write", 3)]),
        "mismatch:trace:allocate:exact:step['result']['computed']"),
    "penelope-suffix-gap": (
        handed_over_session(), "mismatch:trace:add:exact:step['result']"),
    # the table is A2, A3, hole: the driver sees two leading hits but a refill from 0
    "penelope-hole-after-suffix": (
        returning_turn("penelope"), "invariant:paged_kv:refill-positions:allocate"),
    "penelope-no-jump": (
        returning_turn("penelope"), "invariant:paged_kv:table-length:write"),
    # the new block 4 (tokens 8, 9) lies before the last usable block's end: jumped over
    "penelope-jump-to-usable-end": (
        returning_turn("penelope"), "invariant:paged_kv:table-length:write"),
    # evicting request 0's group (A3, A2) takes the shared A0, A1 along
    "session-evicts-shared": (
        shared_prefix("session", [add(3, HISTORY)]), "mismatch:trace:add:exact:step['result']"),
}


@pytest.fixture(scope="module")
def target() -> Any:
    return get_target("paged_kv")


def test_every_mutant_has_a_case() -> None:
    assert sorted(CASES) == sorted(m.name for m in MUTANTS)
    assert len(MUTANTS) >= 22
    assert all(m.implementation == "optimized" for m in MUTANTS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_clean_manager_passes_the_case(target: Any, name: str) -> None:
    inputs, _ = CASES[name]
    verdict = check_case(target, target.implementation("optimized"), inputs, confirm=False)
    assert verdict.failure is None, verdict.failure
    assert verdict.expected["violation"] is None
    assert verdict.actual == verdict.expected  # same logical observations, no violation


@pytest.mark.parametrize("name", sorted(CASES))
def test_mutant_fails_its_case(target: Any, name: str) -> None:
    inputs, signature = CASES[name]
    with target.mutant(name).applied():
        verdict = check_case(target, target.implementation("optimized"), inputs)
    assert verdict.failure is not None, f"mutant {name} passed its case"
    assert verdict.failure.signature == signature, verdict.failure.message
    assert verdict.failure.kind != "nondeterministic"


def test_mutants_are_undone_after_the_context(target: Any) -> None:
    """Leaving a mutant's context restores every step (the next case runs the clean code)."""
    for name, (inputs, _) in CASES.items():
        with target.mutant(name).applied():
            pass
        assert check_case(target, target.implementation("optimized"), inputs,
                          confirm=False).failure is None, name
