"""paged_kv eviction policies: tail-LRU, whole-session and Penelope, on hand-written programs.

Each policy's exact eviction order on a tiny pool (which of a history's hashes survive a fixed
amount of pressure), a Penelope refill that recomputes exactly the hole at its original
positions -- through the stamp driver and through the guarded Triton kernels --, the reference
and the optimized manager agreeing on all of it, the refill invariants failing on deliberately
broken managers, and "lru" unchanged (a config without the field is "lru").
"""

from __future__ import annotations

import copy
import os
from typing import Any, Optional

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402

from fuzzkit.targets.paged_kv import checks, manager_implementation  # noqa: E402
from fuzzkit.targets.paged_kv.driver import Driver, run_program  # noqa: E402
from fuzzkit.targets.paged_kv.hashing import full_block_hashes  # noqa: E402
from fuzzkit.targets.paged_kv.optimized import OptimizedManager  # noqa: E402
from fuzzkit.targets.paged_kv.protocol import Allocation, Config  # noqa: E402
from fuzzkit.targets.paged_kv.reference import ReferenceManager  # noqa: E402
from fuzzkit.targets.paged_kv.strategies import inputs as programs  # noqa: E402

from test_paged_kv_mutants import (HISTORY, handed_over_session, returning_turn,  # noqa: E402
                                   shared_prefix)

MANAGERS = [ReferenceManager, OptimizedManager]
B = 2


def serve(m: Any, rid: int, tokens: list[int]) -> None:
    m.add_request(rid, tokens)
    assert m.allocate(rid, len(tokens)) is not None
    m.commit(rid)
    m.publish(rid)


def surviving(m: Any, tokens: list[int]) -> list[bool]:
    """Which full blocks of ``tokens`` are still cached (by hash, whatever the block ids)."""
    cached = m.inspect()["cached"]
    return [bool(cached.get(h)) for h in full_block_hashes(tokens, B, None, None)]


def history_then_pressure(manager: Any, eviction: str, *, shared: bool) -> Any:
    """HISTORY (blocks A0..A3 + a partial one) served and finished by request 0; with
    ``shared`` request 1 hit A0, A1 first (so they are shared); then pressure that evicts two
    cached blocks (one with ``shared``), held by request 2."""
    m = manager(Config(8, B, eviction=eviction))
    serve(m, 0, HISTORY)
    if shared:
        m.add_request(1, [1, 2, 3, 4, 0])
        m.allocate(1, 5)
        m.finish(1)
    m.finish(0)
    serve(m, 2, [0] * (8 if shared else 10))
    return m


@pytest.mark.parametrize("manager", MANAGERS)
@pytest.mark.parametrize("eviction, shared, survivors", [
    # tail first: the tail goes
    ("lru", False, [True, True, False, False]),
    ("lru", True, [True, True, True, False]),
    # front of the history first; a shared prefix after the history, its root last
    ("penelope", False, [False, False, True, True]),
    ("penelope", True, [True, True, False, True]),
    # evicting one block of a finished request evicts all its non-shared cached blocks
    ("session", False, [False, False, False, False]),
    ("session", True, [True, True, False, False]),
])
def test_each_policy_evicts_in_its_order(manager: Any, eviction: str, shared: bool,
                                         survivors: list[bool]) -> None:
    m = history_then_pressure(manager, eviction, shared=shared)
    assert surviving(m, HISTORY) == survivors
    assert m.num_free_blocks() == (3 if shared else 2)


@pytest.mark.parametrize("manager", MANAGERS)
def test_session_eviction_moves_the_rest_of_the_session_to_the_front(manager: Any) -> None:
    """Pressure took A3 (the first cached block) and then A2, which its eviction had moved to
    the front; A1 and A0 wait at the front, uncached, to be reused next."""
    m = history_then_pressure(manager, "session", shared=False)
    state = m.inspect()
    assert [state["block_hash"][b] for b in state["free_queue"]] == [None, None]
    m.add_request(3, [7] * 4)
    assert m.allocate(3, 4) is not None  # reuses them: nothing else is evicted
    assert m.num_free_blocks() == 0


@pytest.mark.parametrize("manager", MANAGERS)
def test_a_turn_returning_under_its_own_id_keeps_its_history_own(manager: Any) -> None:
    """Ownership is per request id: the same id returning does not make its history shared
    (penelope then evicts it front first, the new blocks last); another id taking the session
    over does (its history is kept behind the new blocks)."""
    turn = HISTORY + [10, 11, 12, 13]  # blocks A0..A3, N4, N5 and a partial one
    for rid, survivors in [(0, [False, False, True, True, True, True]),
                           (1, [True, True, True, True, False, False])]:
        m = manager(Config(8, B, eviction="penelope"))
        serve(m, 0, HISTORY)
        m.finish(0)
        serve(m, rid, turn)
        m.finish(rid)
        serve(m, 2, [0] * 6)  # 3 blocks: the uncached one, then two cached
        assert surviving(m, turn) == survivors, rid


# ---------------------------------------------------------------------------- penelope refills


class Recording(Driver):
    """The stamp driver, remembering the positions each request writes, in order."""

    def __init__(self, manager: Any, config: Config) -> None:
        super().__init__(manager, config)
        self.written: dict[int, list[int]] = {}

    def write(self, rid: int) -> Any:
        shadow = self.requests.get(rid)
        if shadow is not None:
            self.written.setdefault(rid, []).extend(shadow.pending)
        return super().write(rid)


def drive(manager: Any, case: dict[str, Any]) -> Recording:
    config = Config.from_json(case["config"])
    driver = Recording(manager(config), config)
    for step in case["program"]:
        getattr(driver, step["op"])(**{k: v for k, v in step.items() if k != "op"})
        driver.check_structure()
    return driver


@pytest.mark.parametrize("manager", MANAGERS)
def test_a_refill_recomputes_exactly_the_hole_at_its_positions(manager: Any) -> None:
    """The returning turn (11 tokens) finds A2, A3 (positions 4..7): it computes the hole 0..3,
    jumps over the suffix and computes 8..10 -- never 4..7.  The driver's stamp model checks
    every read of the hole and of the suffix at its original position."""
    case = returning_turn("penelope")
    out = run_program(manager, case)
    assert out["violation"] is None
    results = [step["result"] for step in out["steps"][-6:]]
    assert results == [4, {"computed": 0, "scheduled": 4}, 8, {"computed": 8, "scheduled": 3},
                       11, 3]
    assert drive(manager, case).written[2] == [0, 1, 2, 3, 8, 9, 10]


def test_reference_and_optimized_agree_on_the_eviction_programs() -> None:
    cases = [returning_turn(e) for e in ("lru", "session", "penelope")]
    cases += [shared_prefix(e, [{"op": "add", "rid": 3, "tokens": HISTORY},
                                {"op": "allocate", "rid": 3, "n": 9}, {"op": "write", "rid": 3}])
              for e in ("lru", "session", "penelope")]
    cases.append(handed_over_session())
    for case in cases:
        expected = run_program(ReferenceManager, case)
        assert expected["violation"] is None
        assert run_program(OptimizedManager, case) == expected


def _returned_with_a_hole(manager: Any) -> Any:
    """Request 0's history is evicted from the front by request 1; request 2 returns with it
    plus two new tokens: hole 0..3, suffix 4..7."""
    m = manager(Config(8, B, eviction="penelope"))
    serve(m, 0, HISTORY)
    m.finish(0)
    serve(m, 1, [0] * 10)
    m.finish(1)
    m.add_request(2, HISTORY + [10, 11])
    return m


@pytest.mark.parametrize("manager", MANAGERS)
def test_a_partly_filled_hole_continues_and_fork_waits_for_the_refill(manager: Any) -> None:
    m = _returned_with_a_hole(manager)
    assert m.allocate(2, 1) == Allocation(0, 1)
    assert m.allocate(2, 10) == Allocation(1, 3)  # never past the hole
    assert m.allocate(2, 10) == Allocation(4, 0)
    assert m.fork(2, 5) is False  # pending tokens
    assert m.commit(2) == 8  # the hole is complete: computed jumps over the suffix
    assert m.allocate(2, 2) == Allocation(8, 2)
    m.commit(2)
    assert m.fork(2, 5) is True


@pytest.mark.parametrize("manager", MANAGERS)
def test_fork_is_refused_while_a_refill_is_open(manager: Any) -> None:
    m = _returned_with_a_hole(manager)
    m.allocate(2, 2)
    m.commit(2)  # computed 2 of the hole 0..3
    assert m.fork(2, 5) is False
    assert m.inspect()["tokens_in_table"][2] == 8  # the table reaches the suffix's end


def test_the_suffix_ends_at_the_last_cached_block() -> None:
    """After a handed-over session, A1..A3 are cached but N4 is not: the suffix is the run
    ending at the last cached block (N5), and the hole 0..4 is recomputed although A1..A3 are
    cached -- the resident set stays a prefix plus one contiguous suffix."""
    out = run_program(ReferenceManager, handed_over_session())
    assert out["violation"] is None and out["steps"][-1]["result"] == 2


def test_a_refill_runs_through_the_guarded_kernels() -> None:
    """Hole queries at their original positions through the guarded Triton kernels: KVGuard's
    table, translation, read and write checks and the float64 attention reference agree."""
    from fuzzkit import triton_support

    if triton_support.unavailable():
        pytest.skip(triton_support.unavailable())
    case = returning_turn("penelope")
    for index, step in enumerate(case["program"]):  # the hole in two forward passes
        if step == {"op": "allocate", "rid": 2, "n": 11}:
            case["program"][index:index + 2] = [{"op": "allocate", "rid": 2, "n": 3},
                                                {"op": "forward"},
                                                {"op": "allocate", "rid": 2, "n": 11},
                                                {"op": "write", "rid": 2}]
            break
    guarded = run_program(OptimizedManager, case, guarded=True)
    assert guarded["violation"] is None
    assert guarded == run_program(ReferenceManager, case)


# ---------------------------------------------------------------------------- the checks can fail


class SkipsTheHole(ReferenceManager):
    """Admits a returning request as if the hole were resident: computing starts after the
    suffix."""

    def allocate(self, rid: int, num_tokens: int) -> Optional[Allocation]:
        allocation = super().allocate(rid, num_tokens)
        req = self.requests.get(rid)
        if allocation is None or req is None or req.refill is None:
            return allocation
        req.computed, req.pending, req.refill = req.refill[1], 0, None
        return Allocation(req.computed, 0)


class ReportsAGap(ReferenceManager):
    """Reuses the hole's second block and leaves the suffix's first one out: a resident set of
    blocks 1 and 3 of 0..3."""

    def inspect(self) -> dict[str, Any]:
        state = super().inspect()
        for req in self.requests.values():
            if req.refill is not None:
                state["block_hash"][req.table[1]] = 1234
                state["block_hash"][req.table[2]] = None
        return state


@pytest.mark.parametrize("broken, check", [(SkipsTheHole, "refill-positions"),
                                           (ReportsAGap, "refill-resident-set")])
def test_the_refill_invariants_can_fail(broken: Any, check: str) -> None:
    case = returning_turn("penelope")
    violation = run_program(broken, case)["violation"]
    assert violation is not None and violation["check"] == check
    assert violation["op"] == "allocate"
    assert run_program(broken, returning_turn("lru"))["violation"] is None  # penelope only


# ---------------------------------------------------------------------------- lru, config, plug-in


def test_a_config_without_eviction_is_lru_and_unknown_policies_are_refused() -> None:
    assert Config.from_json({"num_blocks": 4, "block_size": 2}).eviction == "lru"
    with pytest.raises(ValueError, match="unknown eviction policy"):
        Config(4, 2, eviction="fifo")
    bad = {"config": {"num_blocks": 4, "block_size": 2, "eviction": "fifo"}, "program": []}
    assert "eviction" in checks.validate(bad)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_lru_is_the_default_and_policies_agree_across_managers(case: dict[str, Any]) -> None:
    expected = run_program(ReferenceManager, case)
    assert expected["violation"] is None
    assert run_program(OptimizedManager, case) == expected
    if case["config"]["eviction"] == "lru":
        unset = copy.deepcopy(case)
        del unset["config"]["eviction"]
        assert run_program(OptimizedManager, unset) == expected


def test_outside_managers_run_only_the_policies_they_declare() -> None:
    """A manager without ``eviction_policies`` (written for tail-LRU) is not failed on the
    other policies' cases: they are passed without running."""
    from examples.paged_kv_adapter import EngineAdapter

    impl = manager_implementation(EngineAdapter, "adapter")
    penelope = returning_turn("penelope")
    out = impl(penelope)
    assert out["unsupported"] and checks.oracle(penelope, run_program(ReferenceManager, penelope),
                                                out) is None
    lru = returning_turn("lru")
    assert impl(lru) == run_program(ReferenceManager, lru)
    assert manager_implementation(OptimizedManager, "optimized")(penelope) == \
        run_program(ReferenceManager, penelope)
