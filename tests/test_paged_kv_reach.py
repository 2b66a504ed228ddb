"""paged_kv reach: declared thresholds are crossed, sizes are measured, every follow-up sequence
is generated, and the value kinds of the guarded driver's vectors stay inside the bound."""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fuzzkit import reach, triton_support  # noqa: E402
from fuzzkit.registry import get_target, resolve_implementation  # noqa: E402
from fuzzkit.runner import check_case  # noqa: E402
from fuzzkit.targets.paged_kv import checks, sizes  # noqa: E402
from fuzzkit.targets.paged_kv.driver import run_program  # noqa: E402
from fuzzkit.targets.paged_kv.protocol import Config  # noqa: E402
from fuzzkit.targets.paged_kv.reference import ReferenceManager  # noqa: E402


@pytest.fixture(scope="module")
def target() -> Any:
    return get_target("paged_kv")


def generated(target: Any, impl: Any, count: int, run_seed: int = 0) -> list[dict[str, Any]]:
    """The first ``count`` cases of a seeded generation -- the same on every machine, in any
    test order (no database, no pool of constants from whatever modules happen to be loaded:
    :func:`fuzzkit.reach.generated`)."""
    return reach.generated(target.strategy_for(impl), count, seed=run_seed)


# ----------------------------------------------------------------- thresholds


def test_the_optimized_manager_crosses_every_threshold(target: Any) -> None:
    reach.assert_crossed(target, target.implementation("optimized"), cases=300)


def test_the_guarded_implementation_crosses_every_threshold(target: Any) -> None:
    if triton_support.unavailable():
        pytest.skip(triton_support.unavailable())
    reach.assert_crossed(target, target.implementation("guarded"), cases=300)


def test_thresholds_name_measured_sizes_and_the_tiles_as_launched(target: Any) -> None:
    names = {t.size for t in target.thresholds_for(None)}
    assert names <= set(target.sizes)
    assert {"live_requests", "table_blocks"} <= {
        t.size for t in target.thresholds_for(target.implementation("optimized"))}
    if triton_support.unavailable():
        return
    from fuzzkit.targets.paged_kv import kernel_driver

    guarded = target.thresholds_for(target.implementation("guarded"))
    by_size = {(t.size, t.value) for t in guarded}
    if triton_support.interpreted():
        # the tiles the driver launches: 8-query tile shape, 32 queries, 16 keys, 8 tokens
        assert {("query_len", 8), ("query_len", 32), ("key_span", 16), ("batch_tokens", 8),
                ("request_id", 8)} <= by_size
        assert kernel_driver.launch_tiles(8)["block_m"] == 16
        assert kernel_driver.launch_tiles(9)["block_m"] == 32
        assert kernel_driver.launch_tiles(100)["block_m"] == 64  # 32 queries x 2 heads


def test_an_outside_manager_declares_its_thresholds(target: Any) -> None:
    impl = resolve_implementation(target, "examples.paged_kv_adapter:EngineAdapter")
    assert {t.size for t in target.thresholds_for(impl)} == {"live_requests", "table_blocks"}


def test_sizes_are_measured_by_replaying_the_program() -> None:
    program = [{"op": "add", "rid": r, "tokens": [r, r + 1, r + 2]} for r in range(10)]
    program += [{"op": "allocate", "rid": 9, "n": 3}, {"op": "allocate", "rid": 3, "n": 2},
                {"op": "forward"}, {"op": "finish", "rid": 0}]
    case = {"config": {"num_blocks": 20, "block_size": 2, "sliding_window": None},
            "program": program}
    seen = sizes.measure(case)
    assert max(seen["live_requests"]) == 10 and 9 in seen["live_requests"]
    assert seen["table_blocks"] == frozenset({0, 1, 2})
    assert seen["request_id"] == frozenset(range(10))
    # request 9 has no attention launch (ids >= 8): only request 3's two queries; both write
    assert seen["query_len"] == frozenset({2}) and seen["key_span"] == frozenset({2})
    assert seen["batch_tokens"] == frozenset({5})
    assert seen["block_size"] == frozenset({2})


# ----------------------------------------------------------------- sequences


def _reference_run(case: dict[str, Any]) -> list[Any]:
    return [step["result"] for step in run_program(ReferenceManager, case)["steps"]]


def test_every_follow_up_sequence_is_generated(target: Any) -> None:
    """Within 200 programs: forks whose two sides both continue (and copy on write), more live
    requests than the tables' rows, a preempted request scheduled again, a reset refused while
    blocks are held and then accepted, and every operation of the protocol."""
    found: set[str] = set()
    ops: set[str] = set()
    for case in generated(target, target.implementation("optimized"), 200):
        program = case["program"]
        ops.update(step["op"] for step in program)
        results = _reference_run(case)
        for i, step in enumerate(program[:len(results)]):
            later = program[i + 1:len(results)]
            if step["op"] == "fork" and results[i]:
                sides = {step["src"], step["dst"]}
                if all(any(s.get("rid") == rid and s["op"] in ("allocate", "append")
                           for s in later) for rid in sides):
                    found.add("fork, both sides continue")
            if step["op"] == "preempt" and results[i] and any(
                    s["op"] == "allocate" and s.get("rid") == step["rid"] for s in later):
                found.add("preempt, then scheduled again")
            if step["op"] == "reset" and results[i] is False and any(
                    s["op"] == "reset" for s in later):
                found.add("reset refused while in use, reset later")
        if max(sizes.measure(case)["live_requests"], default=0) > 8:
            found.add("more live requests than table rows")
    assert found == {"fork, both sides continue", "preempt, then scheduled again",
                     "reset refused while in use, reset later",
                     "more live requests than table rows"}, found
    from fuzzkit.targets.paged_kv.driver import OPS
    from fuzzkit.targets.paged_kv.strategies import OPERATIONS

    assert ops == set(OPS) and set(OPERATIONS) == set(OPS)


def test_random_steps_reach_nearly_every_ordered_pair_of_operations(target: Any) -> None:
    """The engine counts ordered pairs of consecutive operations (reach.json); 500 programs
    hold all but a few of the 121 (1 to 3 missing with seeds 0..3: the bound leaves a margin;
    without the random single steps of ``steps`` chunks some 30 are missing)."""
    from fuzzkit.program import OperationCounts
    from fuzzkit.targets.paged_kv.driver import OPS

    counts = OperationCounts()
    for case in generated(target, target.implementation("optimized"), 500, run_seed=3):
        counts.add(target.operations(case))
    pairs = counts.to_json()["pairs"]
    missing = [f"{a}>{b}" for a in OPS for b in OPS if f"{a}>{b}" not in pairs]
    assert len(missing) <= 8, missing
    assert min(counts.to_json()["operations"][op] for op in OPS) >= 50


def test_copy_on_write_happens_from_both_sides_of_a_fork(target: Any) -> None:
    """Some program copies the shared last block for one side and lets the other side (its
    last holder) write in place; some forks twice (three holders)."""
    both, nested = False, False
    for case in generated(target, target.implementation("optimized"), 200, run_seed=1):
        program = case["program"]
        steps = run_program(ReferenceManager, case)["steps"]
        forks = [s for s, r in zip(program, steps) if s["op"] == "fork" and r["result"]]
        nested |= any(a["dst"] == b["src"] or a["src"] == b["src"]
                      for i, a in enumerate(forks) for b in forks[i + 1:])
        for fork in forks:
            writers = [s.get("rid") for s, r in zip(program, steps)
                       if s["op"] == "allocate" and r["result"] and r["result"]["scheduled"]
                       and s.get("rid") in (fork["src"], fork["dst"])]
            both |= {fork["src"], fork["dst"]} <= set(writers)
    assert both and nested


# ----------------------------------------------------------------- values


def test_the_strategy_draws_extreme_ids_and_values(target: Any) -> None:
    cases = generated(target, target.implementation("guarded"), 200, run_seed=2)
    tokens = {t for case in cases for step in case["program"] for t in step.get("tokens", [])}
    extras = {step.get(key) for case in cases for step in case["program"]
              for key in ("adapter", "salt")}
    assert {0, 2**16}.issubset(tokens) or {0, 2**32}.issubset(tokens)
    assert any(t >= 2**31 for t in tokens)
    assert {None, 0, 1}.issubset(extras) and any(e and e >= 256 for e in extras)
    kinds = {k for case in cases for role in case.get("kv_values", {}).values() for k in role}
    assert {"zero", "tiny", "subnormal", "huge"} <= kinds
    assert any("kv_values" not in case for case in cases)  # standard normal vectors too
    assert all(checks.validate(case) is None for case in cases)
    assert any(step["op"] == "allocate" and step["n"] <= 0
               for case in cases for step in case["program"])


def test_validate_rejects_bad_windows_and_value_kinds() -> None:
    base = {"config": {"num_blocks": 4, "block_size": 2, "sliding_window": None},
            "program": []}
    assert checks.validate(base) is None
    assert "sliding_window" in checks.validate(
        {**base, "config": {**base["config"], "sliding_window": 0}})
    assert "kv_values" in checks.validate({**base, "kv_values": {"q": ["nan"]}})
    assert "kv_values" in checks.validate({**base, "kv_values": {"x": ["normal"]}})
    assert checks.validate({**base, "kv_values": {"q": ["zero"], "v": ["huge", "ints"]}}) is None


def test_vector_kinds_are_functions_of_the_stamp_and_inside_their_domain() -> None:
    from fuzzkit.targets.paged_kv.kernel_driver import ROLE_DOMAINS, _vector

    stamp = ((1, 2, 3), None, None)
    for role, domain in ROLE_DOMAINS.items():
        for kind in ("zero", "tiny", "subnormal", "huge", "mixed"):
            first = _vector(stamp, role, (2, 8), [kind])
            assert np.array_equal(first, _vector(stamp, role, (2, 8), [kind]))
            assert np.all(np.isfinite(first)) and np.all(np.abs(first) <= domain.largest)
    assert not np.any(_vector(stamp, "k", (2, 8), ["zero"]))
    plain = _vector(stamp, "k", (2, 8))
    assert plain.dtype == np.float32 and np.all(np.isfinite(plain))


GUARDED_PROGRAM = [
    {"op": "add", "rid": 0, "tokens": [1, 2, 3, 4, 5, 6, 7]},
    {"op": "allocate", "rid": 0, "n": 7}, {"op": "write", "rid": 0},
    {"op": "publish", "rid": 0},
    {"op": "append", "rid": 0, "tokens": [8]}, {"op": "allocate", "rid": 0, "n": 1},
    {"op": "write", "rid": 0},
]


@pytest.mark.parametrize("kinds", [
    {"q": ["huge"], "k": ["huge"], "v": ["huge"]},
    {"q": ["normal"], "k": ["zero"], "v": ["repeated"]},
    {"q": ["tiny"], "k": ["subnormal"], "v": ["tiny"]},
    {"q": ["subnormal", "huge"], "k": ["mixed"], "v": ["subnormal", "zero"]},
])
def test_extreme_vectors_pass_the_derived_attention_bound(target: Any,
                                                          kinds: dict[str, Any]) -> None:
    if triton_support.unavailable():
        pytest.skip(triton_support.unavailable())
    case = {"config": {"num_blocks": 8, "block_size": 2, "sliding_window": None},
            "program": GUARDED_PROGRAM, "kv_values": kinds}
    verdict = check_case(target, target.implementation("guarded"), case, confirm=False)
    assert verdict.failure is None, verdict.failure


def test_requests_past_the_device_shadow_still_write_what_others_hit(target: Any) -> None:
    """Request 9 has no row in the guard's device shadow (8 rows): its attention is judged by
    the stamp model only, but its K/V goes through the write kernel -- request 0 hits it."""
    if triton_support.unavailable():
        pytest.skip(triton_support.unavailable())
    prompt = [1, 2, 3, 4, 5]
    serve = lambda rid: [{"op": "add", "rid": rid, "tokens": prompt},  # noqa: E731
                         {"op": "allocate", "rid": rid, "n": 5}, {"op": "write", "rid": rid},
                         {"op": "publish", "rid": rid}]
    case = {"config": {"num_blocks": 8, "block_size": 2, "sliding_window": None},
            "program": serve(9) + [{"op": "finish", "rid": 9}] + serve(0)}
    assert run_program(ReferenceManager, case)["steps"][-3]["result"]["computed"] == 4
    verdict = check_case(target, target.implementation("guarded"), case, confirm=False)
    assert verdict.failure is None, verdict.failure


def test_config_window_check_matches_the_managers() -> None:
    from fuzzkit.targets.paged_kv.optimized import OptimizedManager

    with pytest.raises(ValueError):
        OptimizedManager(Config(4, 2, sliding_window=0))
