"""The ``prefix_cache`` target: SGLang's real RadixCache against the policy model.

Shown here: the model implements SGLang's documented policy on hand-checked programs; the real
RadixCache (pinned wheel, CPU) agrees with it on hand-written and generated programs of page
sizes 1 and above; every semantic check fails on a deliberately corrupted cache; the oracle
catches planted bugs in the *model* (so its comparison is not vacuous) and every planted bug
in the *real code* (found by the fuzzer from scratch); a short clean campaign finds nothing.

Tests that need SGLang skip with the reason when its wheel is neither cached nor downloadable,
and fail instead when ``FUZZKIT_REQUIRE_ENGINES=1`` (CI).
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any, Callable

import pytest

from fuzzkit import reach
from fuzzkit.mutants import patch
from fuzzkit.registry import get_target
from fuzzkit.targets.prefix_cache import checks, reference
from fuzzkit.targets.prefix_cache.adapters import sglang_load
from fuzzkit.targets.prefix_cache.adapters.sglang_mutants import MUTANTS


@pytest.fixture(scope="module")
def sglang() -> Any:
    """The adapter module, or a skip (a failure under FUZZKIT_REQUIRE_ENGINES=1)."""
    reason = sglang_load.unavailable()
    if reason:
        if os.environ.get("FUZZKIT_REQUIRE_ENGINES") == "1":
            pytest.fail(f"FUZZKIT_REQUIRE_ENGINES=1 but {reason}")
        pytest.skip(reason)
    from fuzzkit.targets.prefix_cache.adapters import sglang_impl

    return sglang_impl


def _case(page_size: int, program: list[dict[str, Any]], pages: int = 12) -> dict[str, Any]:
    return {"config": {"page_size": page_size, "num_pages": pages}, "program": program}


SHARED = [
    {"op": "add", "rid": 0, "tokens": [1, 2, 3, 4, 5, 6, 7]},
    {"op": "add", "rid": 1, "tokens": [1, 2, 3, 9, 9, 9]},
    {"op": "finish", "rid": 0},
    {"op": "append", "rid": 1, "tokens": [5, 5, 5]},
    {"op": "checkpoint", "rid": 1},
    {"op": "match", "tokens": [1, 2, 3, 4, 5]},
    {"op": "add", "rid": 2, "tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9]},
    {"op": "evict", "n": 3},
    {"op": "finish", "rid": 1},
    {"op": "evict", "n": 100},
    {"op": "abort", "rid": 2},
    {"op": "evict", "n": 100},
    {"op": "reset"},
]


@pytest.fixture(scope="module")
def generated() -> list[dict[str, Any]]:
    return reach.generated(get_target("prefix_cache").strategy_for(), 120, seed=11)


# ----------------------------------------------------------------- the model, on its own


def _results(case: dict[str, Any]) -> list[Any]:
    return [s["result"] for s in reference.run(case)["steps"]]


def test_model_evicts_the_least_recently_used_leaf() -> None:
    """Two cached prompts; a lookup refreshes the older one, so the other goes first."""
    program = [
        {"op": "add", "rid": 0, "tokens": [1, 1, 1]}, {"op": "finish", "rid": 0},
        {"op": "add", "rid": 1, "tokens": [2, 2, 2, 2]}, {"op": "finish", "rid": 1},
        {"op": "match", "tokens": [1, 1, 1]},
        {"op": "evict", "n": 1},
        {"op": "match", "tokens": [1, 1, 1]}, {"op": "match", "tokens": [2, 2, 2, 2]},
    ]
    results = _results(_case(1, program))
    assert results[5] == {"evicted": 4}  # the whole [2,2,2,2] leaf, not one token
    assert results[6:] == [{"prefix": 3}, {"prefix": 0}]


def test_model_splits_on_lookup_and_protects_locked_paths() -> None:
    """A lookup ending inside a cached edge splits it; a request locks only its matched path;
    eviction takes the unlocked tail (a whole node) and stops at the lock."""
    program = [
        {"op": "add", "rid": 0, "tokens": [1, 2, 3, 4, 5, 6]}, {"op": "finish", "rid": 0},
        {"op": "match", "tokens": [1, 2, 9]},  # splits [1..6] into [1,2] + [3..6]
        {"op": "add", "rid": 1, "tokens": [1, 2, 7, 7]},  # locks [1,2]
        {"op": "evict", "n": 100},
    ]
    case = _case(1, program)
    out = reference.run(case)["steps"]
    assert out[2]["result"] == {"prefix": 2}
    assert out[3]["result"] == {"admitted": True, "prefix": 2, "evicted": 0}
    assert out[3]["state"]["protected"] == 2
    assert out[4]["result"] == {"evicted": 4} and out[4]["state"]["cached"] == 2


def test_model_deduplicates_a_second_copy() -> None:
    """Two requests compute the same prompt; the second one's cached copy is freed."""
    program = [
        {"op": "add", "rid": 0, "tokens": [4, 4, 4, 4, 4]},
        {"op": "add", "rid": 1, "tokens": [4, 4, 4, 4, 4]},
        {"op": "finish", "rid": 0}, {"op": "finish", "rid": 1},
    ]
    out = reference.run(_case(2, program))["steps"]
    assert out[2]["result"] == {"protected": 4, "deduplicated": 0, "freed": 2}
    assert out[3]["result"] == {"protected": 4, "deduplicated": 4, "freed": 2}
    assert out[3]["state"] == {"evictable": 4, "protected": 0, "available": 20, "cached": 4}


def test_validate_refuses_malformed_cases() -> None:
    good = _case(2, SHARED)
    assert checks.validate(good) is None
    for bad in ({"config": {"page_size": 0, "num_pages": 4}, "program": []},
                _case(1, [{"op": "fork"}]),
                _case(1, [{"op": "add", "rid": 0, "tokens": [-1]}]),
                _case(1, [{"op": "append", "rid": 0, "tokens": []}]),
                _case(1, [{"op": "evict", "n": -3}])):
        assert checks.validate(bad) is not None, bad


# ----------------------------------------------------------------- the real RadixCache


def test_the_code_under_test_is_sglangs(sglang: Any) -> None:
    radix = sglang_load.modules().radix
    assert radix.__name__ == "sglang.srt.mem_cache.radix_cache"
    assert "sglang" in radix.__file__ and radix.RadixCache.__module__ == radix.__name__


@pytest.mark.parametrize("page_size", [1, 2, 3, 4])
def test_sglang_agrees_on_a_shared_prefix_program(sglang: Any, page_size: int) -> None:
    case = _case(page_size, SHARED)
    expected, actual = reference.run(case), sglang.run(case)
    assert actual["violation"] is None, actual["violation"]
    assert checks.oracle(case, expected, actual) is None


def test_sglang_agrees_on_generated_programs(sglang: Any, generated: list[Any]) -> None:
    sizes = set()
    for case in generated:
        sizes.add(case["config"]["page_size"])
        failure = checks.oracle(case, reference.run(case), sglang.run(case))
        assert failure is None, (failure, case)
    assert sizes >= {1, 2, 4, 8}, sizes


def test_replays_the_same(sglang: Any, generated: list[Any]) -> None:
    for case in generated[:20]:
        assert sglang.run(copy.deepcopy(case)) == sglang.run(copy.deepcopy(case))


def _driver(sglang: Any, page_size: int) -> Any:
    """A driver after the shared-prefix program's first six steps (requests live, a cached
    tree with locked and unlocked nodes)."""
    from fuzzkit.targets.prefix_cache.program import Config

    driver = sglang.Driver(Config(page_size, 12), SHARED)
    with sglang.counter_clock(driver.tree):
        for op in SHARED[:6]:
            driver.step(op)
    driver.check()
    return driver


def _first_node(driver: Any, locked: bool) -> Any:
    return next(n for n, _ in driver.nodes() if bool(n.lock_ref) == locked)


CORRUPTIONS: dict[str, tuple[str, Callable[[Any], None]]] = {
    "stale KV in a tree slot": ("kv", lambda d: d.kv.__setitem__(
        int(_first_node(d, False).value[0]), -1)),
    "a cached page listed free": ("slots", lambda d: d.allocator.free_segment(
        _first_node(d, False).value, start_pos=0)),
    "a leaked request page": ("slots", lambda d: setattr(
        d.allocator, "free_pages", d.allocator.free_pages[1:])),
    "a lock count off by one": ("locks", lambda d: setattr(
        _first_node(d, True), "lock_ref", _first_node(d, True).lock_ref + 1)),
    "evictable size drifted": ("sizes", lambda d: setattr(
        d.tree, "evictable_size_", d.tree.evictable_size_ + 1)),
    "a locked node in the evictable set": ("sizes", lambda d: d.tree.evictable_leaves.add(
        _first_node(d, True))),
    "a child under the wrong key": ("tree", lambda d: d.tree.root_node.children.__setitem__(
        ("x",), d.tree.root_node.children.pop(next(iter(d.tree.root_node.children))))),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_each_semantic_check_fails_on_a_corrupted_cache(sglang: Any, name: str) -> None:
    check, corrupt = CORRUPTIONS[name]
    driver = _driver(sglang, 2)
    corrupt(driver)
    with pytest.raises(sglang.Violation) as caught:
        driver.check()
    assert caught.value.check == check, caught.value.message


def test_the_oracle_reports_a_diverging_step_and_a_violation(sglang: Any) -> None:
    case = _case(2, SHARED)
    expected, actual = reference.run(case), sglang.run(case)
    drifted = copy.deepcopy(actual)
    drifted["steps"][4]["state"]["available"] += 2
    failure = checks.oracle(case, expected, drifted)
    assert failure is not None and failure.signature.startswith("mismatch:trace:checkpoint")
    broken = {"steps": actual["steps"][:3], "violation": {
        "step": 3, "op": "append", "check": "kv", "message": "slot 7 holds another prefix"}}
    failure = checks.oracle(case, expected, broken)
    assert failure is not None and failure.signature == "invariant:prefix_cache:kv:append"


# ----------------------------------------------------------------- mutants of the model


def _evict_newest(self: reference.Model, num_tokens: int) -> int:
    """MRU instead of LRU."""
    evicted = 0
    locked = self.locked()
    while evicted < num_tokens:
        inner = set(self.parent.values())
        leaves = [e for e in self.nodes if e not in inner and e not in locked]
        if not leaves:
            break
        victim = max(leaves, key=lambda e: self.nodes[e])
        size = self.length(victim)
        del self.nodes[victim], self.parent[victim]
        evicted += size
        self.free_pages += size // self.ps
    return evicted


def _lookup_without_split(original: Callable[..., int]) -> Callable[..., int]:
    def match(self: reference.Model, tokens: list[int]) -> int:
        before = set(self.nodes)
        m = original(self, tokens)
        key = self.aligned(tokens)
        for end in set(self.nodes) - before:  # forget the split point a lookup created
            if len(end) == m and end != key:
                below = [e for e, above in self.parent.items() if above == end]
                for e in below:
                    self.parent[e] = self.parent[end]
                del self.nodes[end], self.parent[end]
        return m

    return match


def _no_dedup(original: Callable[..., dict[str, int]]) -> Callable[..., dict[str, int]]:
    def checkpoint(self: reference.Model, req: reference.Request) -> dict[str, int]:
        pages = self.free_pages
        result = original(self, req)
        self.free_pages = pages
        return {**result, "deduplicated": 0}

    return checkpoint


def _lock_node_only(self: reference.Model) -> set[tuple[int, ...]]:
    return {end for end in self.holders() if end}


def _whole_prompt(original: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    def add(self: reference.Model, rid: Any, tokens: list[int]) -> dict[str, Any]:
        return original(self, rid, tokens + [tokens[-1]])  # looks up the whole prompt

    return add


def _derived(fn: Callable[[Any], Any]) -> Any:
    from fuzzkit.mutants import derived

    return derived(fn)


MODEL_MUTANTS = {
    "evicts-most-recent": patch(reference.Model, evict=_evict_newest),
    "lookup-does-not-split": patch(reference.Model, match=_derived(_lookup_without_split)),
    "no-dedup-free": patch(reference.Model, checkpoint=_derived(_no_dedup)),
    "lock-covers-node-only": patch(reference.Model, locked=_lock_node_only),
    "matches-whole-prompt": patch(reference.Model, add=_derived(_whole_prompt)),
}


#: A lookup that splits the only cached leaf, then one token of pressure: SGLang evicts the
#: unmatched lower half only (generated programs reach this in about 1 case of 100).
SPLIT_PROBE = _case(1, [
    {"op": "add", "rid": 0, "tokens": [1, 2, 3, 4, 5, 6]}, {"op": "finish", "rid": 0},
    {"op": "match", "tokens": [1, 2, 9]}, {"op": "evict", "n": 1},
    {"op": "match", "tokens": [1, 2, 3]}])


@pytest.mark.parametrize("name", sorted(MODEL_MUTANTS))
def test_a_wrong_model_is_caught_against_sglang(sglang: Any, generated: list[Any],
                                                name: str) -> None:
    """Planted bugs in the reference: the comparison with the real cache must fail, so the
    trace oracle compares what the policy decides (eviction order, split points, dedup,
    lock extent, the scheduler's lookup limit), not only what both sides trivially share."""
    generated = [*generated, SPLIT_PROBE]
    actual = [sglang.run(case) for case in generated]
    with MODEL_MUTANTS[name]():
        caught = [checks.oracle(case, reference.run(case), out)
                  for case, out in zip(generated, actual)]
    assert any(f is not None for f in caught), f"model mutant {name} passed every case"


# ----------------------------------------------------------------- mutants of SGLang


def test_generated_cases_stay_far_below_the_limits(generated: list[Any]) -> None:
    from fuzzkit import limits

    target = get_target("prefix_cache")
    for case in generated:
        assert limits.check("prefix_cache", target.limits, case) is None
        for lim in target.limits:
            assert lim.measure(case) * 4 <= lim.default, (lim.name, lim.measure(case))


def test_a_case_past_a_limit_is_refused_by_name() -> None:
    """Each crafted case exceeds exactly its own limit."""
    from fuzzkit import limits

    target = get_target("prefix_cache")
    many_ids = _case(1, [{"op": "add", "rid": 0, "tokens": [1] * 4_096}]
                     + [{"op": "add", "rid": r, "tokens": [2]} for r in range(1, 1_000)])
    long_replay = _case(1, [{"op": "add", "rid": 0, "tokens": [3] * 2_000}]
                        + [{"op": "checkpoint", "rid": 0}] * 1_999, pages=4_096)
    for case, name in ((many_ids, "row_cells"), (long_replay, "work")):
        problem = limits.check("prefix_cache", target.limits, case)
        assert problem is not None and f"{name}=" in problem, problem
        measured = next(lim.measure(case) for lim in target.limits if lim.name == name)
        assert limits.check("prefix_cache", target.limits, case, {name: measured}) is None
    assert limits.check("prefix_cache", target.limits, _case(1, SHARED)) is None


def test_mutants_are_planted_in_the_real_code() -> None:
    assert len(MUTANTS) >= 3
    for m in MUTANTS:
        assert m.implementation == "sglang" and "sglang" in m.citation


@pytest.mark.parametrize("name", [m.name for m in MUTANTS])
def test_sglang_mutant_is_found_by_the_fuzzer(sglang: Any, name: str) -> None:
    from fuzzkit.mutation import run_mutant

    target = get_target("prefix_cache")
    result = run_mutant(target, target.mutant(name), budget=900.0, seed=0, max_cases=400)
    assert result.detected, f"{name} escaped a hunt of 400 cases"  # the slowest needs 50


def test_short_clean_campaign_finds_nothing(sglang: Any, tmp_path: Any) -> None:
    from fuzzkit.campaign import CampaignOptions, run_campaign

    started = time.monotonic()
    summary = run_campaign(CampaignOptions(
        targets=["prefix_cache"], impl="sglang", budget=6.0, seed=0,
        corpus=tmp_path / "corpus", report_dir=tmp_path / "reports", profile="ci",
        progress="quiet"))
    assert summary.cases > 50, summary
    assert not summary.findings, summary.findings
    assert time.monotonic() - started < 30
