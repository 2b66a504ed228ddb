"""KVGuard: every check class fires on what it guards against, and only then."""

from __future__ import annotations

import pytest

from fuzzkit.registry import get_target
from fuzzkit.runner import check_case
from fuzzkit.oracles.kvguard import NULL_GUARD, GuardViolation, KVGuard
from fuzzkit.targets.paged_kv.optimized import OptimizedManager
from fuzzkit.targets.paged_kv.protocol import Config

from test_paged_kv_mutants import CASES


def guard(**kw) -> KVGuard:
    return KVGuard(6, 2, **kw)


def fires(check_class: str, check: str, action) -> None:
    with pytest.raises(GuardViolation) as info:
        action()
    assert (info.value.check_class, info.value.check) == (check_class, check), str(info.value)


# ------------------------------------------------------------------ host-side checks, one by one


def test_allocation_checks() -> None:
    g = guard()
    g.on_allocate(0, 1)
    fires("allocation", "double-allocation", lambda: g.on_allocate(1, 1))
    g = guard()
    fires("allocation", "null-block", lambda: g.on_allocate(0, 0))
    g = guard()
    g.on_allocate(0, 1)
    g.on_release(0, 1)
    fires("allocation", "free-not-held", lambda: g.on_release(0, 1))
    g = guard()
    g.on_hits(0, [3])
    fires("allocation", "hit-not-pinned", lambda: g.on_allocate(0, 1))
    g = guard()
    fires("allocation", "share-free-block", lambda: g.on_share(0, 2))


def test_check_manager_compares_the_manager_with_the_shadow() -> None:
    m = OptimizedManager(Config(6, 2), guard=(g := guard()))
    m.add_request(0, [1, 2, 3])
    m.allocate(0, 3)
    g.check_manager(m.inspect())  # consistent
    state = m.inspect()
    state["ref_cnt"][1] += 1
    fires("allocation", "ref-cnt", lambda: g.check_manager(state))
    state = m.inspect()
    state["free_queue"].append(state["free_queue"][0])
    fires("allocation", "queue-duplicate", lambda: g.check_manager(state))
    state = m.inspect()
    state["free_queue"].append(1)
    fires("allocation", "in-use-in-queue", lambda: g.check_manager(state))
    state = m.inspect()
    state["block_hash"][1] = 99
    fires("allocation", "stale-hash", lambda: g.check_manager(state))


def test_table_checks() -> None:
    g = guard()
    g.on_allocate(0, 1)
    g.on_allocate(0, 2)
    g.check_table(0, [1, 2], 4)
    fires("table", "length", lambda: g.check_table(0, [1, 2], 5))
    fires("table", "not-held", lambda: g.check_table(0, [1, 3], 4))
    fires("table", "null-entry", lambda: g.check_table(0, [0, 2], 4))
    g.on_release(0, 2)
    g.on_allocate(1, 2)
    g.on_release(1, 2)
    fires("table", "not-held", lambda: g.check_table(0, [1, 2], 4))


def test_stale_entry_after_the_block_changed_hands() -> None:
    g = guard()
    g.on_allocate(0, 1)
    g.acquired[(0, 1)] = g.blocks[1].epoch - 1  # taken before a free the request missed
    fires("table", "stale-entry", lambda: g.check_table(0, [1], 2))


def test_window_allows_null_entries_only_out_of_window() -> None:
    g = KVGuard(6, 2, sliding_window=2)
    g.on_allocate(0, 2)
    g.on_allocate(0, 3)
    g.check_table(0, [0, 2, 3], 6, first_query=5)  # keys 4..5 needed: block 0 is out
    fires("table", "null-entry", lambda: g.check_table(0, [0, 2, 3], 6, first_query=2))


def test_translation_checks() -> None:
    g = guard()
    g.check_translation(0, [0, 1, 2], [2, 3, 8], [1, 4], [1, 4])
    fires("translation", "slot-mapping", lambda: g.check_translation(0, [2], [9], [1, 4], [1, 4]))
    fires("translation", "launch-table",
          lambda: g.check_translation(0, [0], [2], [1, 4], [1, 3]))


def test_count_mode_records_every_violation() -> None:
    g = guard(mode="count")
    g.on_allocate(0, 0)
    g.on_release(0, 3)
    g.check_translation(0, [0], [7], [1], [1])
    assert [v.check_class for v in g.violations] == ["allocation", "allocation", "translation"]
    assert g.violations[0].to_json()["block"] == 0


def test_null_guard_is_silent_and_complete() -> None:
    """Every event and check of the live guard exists on the null guard, and does nothing."""
    public = [n for n in dir(KVGuard) if n.startswith(("on_", "check_"))]
    assert public and all(callable(getattr(NULL_GUARD, n)) for n in public)
    assert NULL_GUARD.on_allocate(0, 0) is None and NULL_GUARD.check_table(0, [], 0) is None


# ------------------------------------------------------------------ each class, two real bugs


def serve(rid, tokens):
    return [{"op": "add", "rid": rid, "tokens": tokens},
            {"op": "allocate", "rid": rid, "n": len(tokens)}, {"op": "write", "rid": rid},
            {"op": "publish", "rid": rid}]


def decode(rid, token, trim=False):
    return [{"op": "append", "rid": rid, "tokens": [token]},
            {"op": "allocate", "rid": rid, "n": 1}, {"op": "write", "rid": rid},
            *([{"op": "trim", "rid": rid}] if trim else [])]


def program(steps, num_blocks=8, block_size=2, window=None):
    return {"config": {"num_blocks": num_blocks, "block_size": block_size,
                       "sliding_window": window}, "program": steps}


PREFILL = program(serve(0, [1, 2, 3, 4, 5]))
DECODE = program(serve(0, [1, 2, 3]) + decode(0, 4))
WINDOWED = program(serve(0, [1, 2, 3, 4]) + decode(0, 5, trim=True) + decode(0, 6, trim=True)
                   + decode(0, 7), block_size=1, window=2)

BY_CLASS = {
    "allocation": [("free-duplicate-block", CASES["free-duplicate-block"][0]),
                   ("pin-after-allocation", CASES["pin-after-allocation"][0])],
    "table": [("row-reuse-stale-entries", CASES["row-reuse-stale-entries"][0]),
              ("block-allocated-one-token-late", CASES["block-allocated-one-token-late"][0])],
    "translation": [("stale-device-table", WINDOWED), ("host-slot-mapping-edge", PREFILL)],
    "read": [("kernel-no-causal-mask", PREFILL), ("kernel-table-ignored", PREFILL),
             ("cow-copy-dropped", CASES["cow-copy-dropped"][0])],
    "write": [("kernel-slot-off-by-one", PREFILL), ("kernel-offset-from-batch-index", DECODE)],
}


@pytest.fixture(scope="module")
def paged_kv():
    return get_target("paged_kv")


@pytest.mark.kernel
@pytest.mark.parametrize("check_class, mutant, case",
                         [(c, m, p) for c, cases in BY_CLASS.items() for m, p in cases],
                         ids=[f"{c}-{m}" for c, cases in BY_CLASS.items() for m, _ in cases])
def test_each_class_fires_on_its_bugs(paged_kv, check_class, mutant, case) -> None:
    guarded = paged_kv.implementation("guarded")
    assert check_case(paged_kv, guarded, case).failure is None  # clean code: no violation
    with paged_kv.mutant(mutant).applied():
        failure = check_case(paged_kv, guarded, case).failure
    assert failure is not None and failure.kind == "guard", failure
    assert failure.details["check"].split("/")[0] == check_class, failure.message


def test_every_class_has_two_mutants() -> None:
    assert set(BY_CLASS) == {"allocation", "table", "translation", "read", "write"}
    assert all(len(cases) >= 2 for cases in BY_CLASS.values())
