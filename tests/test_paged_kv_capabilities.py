"""paged_kv capabilities: the variants of the contract (eager windows, allocation-time hashing),
what a manager declares, what the strategy draws for it, and cases it cannot run being skipped.

Each variant's reference semantics is pinned on a hand-written program (run through the
reference *and* the optimized manager, which must agree); the strategy is checked to draw only
what a capability set declares; a case outside a manager's capabilities is turned away as
skipped (never a pass); and every variant mutant is caught on its own small program.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

from fuzzkit import reach
from fuzzkit.registry import get_target
from fuzzkit.runner import check_case
from fuzzkit.target import Unsupported
from fuzzkit.targets.paged_kv import checks, manager_implementation
from fuzzkit.targets.paged_kv.driver import run_program
from fuzzkit.targets.paged_kv.mutants import VARIANT_MUTANTS
from fuzzkit.targets.paged_kv.optimized import OptimizedManager
from fuzzkit.targets.paged_kv.protocol import (
    ALL_CAPABILITIES,
    Capabilities,
    Config,
    capabilities_of,
    unsupported,
)
from fuzzkit.targets.paged_kv.reference import ReferenceManager
from fuzzkit.targets.paged_kv.strategies import inputs as programs

# ---------------------------------------------------------------------------- helpers


def add(rid: int, tokens: list[int], adapter: int | None = None,
        salt: int | None = None) -> dict[str, Any]:
    return {"op": "add", "rid": rid, "tokens": tokens, "adapter": adapter, "salt": salt}


def allocate(rid: int, n: int) -> dict[str, Any]:
    return {"op": "allocate", "rid": rid, "n": n}


def op(name: str, rid: int) -> dict[str, Any]:
    return {"op": name, "rid": rid}


def case(program: list[dict[str, Any]], num_blocks: int = 8, block_size: int = 2,
         window: int | None = None, **config: str) -> dict[str, Any]:
    return {"config": {"num_blocks": num_blocks, "block_size": block_size,
                       "sliding_window": window, **config}, "program": program}


def both(inputs: dict[str, Any]) -> dict[str, Any]:
    """The reference's output, after checking it is clean and the optimized manager agrees."""
    expected = run_program(ReferenceManager, inputs)
    assert expected["violation"] is None, expected["violation"]
    assert run_program(OptimizedManager, inputs) == expected
    return expected


def results(out: dict[str, Any]) -> list[Any]:
    return [step["result"] for step in out["steps"]]


class Tables(ReferenceManager):
    """The reference, recording each request's block table after every allocation."""

    def allocate(self, rid: int, num_tokens: int) -> Any:
        result = super().allocate(rid, num_tokens)
        self.__dict__.setdefault("seen", []).append((rid, self.block_table(rid)))
        return result


def tables_after(inputs: dict[str, Any]) -> list[tuple[int, list[int]]]:
    managers: list[Tables] = []

    def factory(config: Config) -> Tables:
        managers.append(Tables(config))
        return managers[-1]

    assert run_program(factory, inputs)["violation"] is None
    return managers[0].__dict__.get("seen", [])


# ---------------------------------------------------------------------------- eager windows

#: 12 tokens, four written (two blocks), then an allocation of the rest: 6 blocks needed.
EAGER_FAILS = [add(0, list(range(1, 13))), allocate(0, 4), op("write", 0), allocate(0, 8)]


def test_eager_window_frees_out_of_window_blocks_even_when_the_allocation_fails() -> None:
    """Block 0 lies below ``computed - w + 1 = 3``: an eager allocation frees it first, then
    finds 4 new blocks do not fit in 2 free ones and returns None -- with the block freed."""
    eager = both(case(EAGER_FAILS, num_blocks=4, window=2, window_mode="eager"))
    trim = both(case(EAGER_FAILS, num_blocks=4, window=2, window_mode="trim"))
    assert results(eager)[-1] is None and results(trim)[-1] is None
    assert eager["steps"][-1]["free"] == 2  # block 0 came back
    assert trim["steps"][-1]["free"] == 1  # only an explicit trim would free it
    assert tables_after(case(EAGER_FAILS, num_blocks=4, window=2,
                             window_mode="eager"))[-1][1][0] == 0


def test_eager_window_uses_the_written_count_not_the_pending_one() -> None:
    """A second allocation before the first step is written frees nothing more: the pending
    tokens' queries still read the window below them."""
    program = [add(0, list(range(1, 13))), allocate(0, 4), op("write", 0), allocate(0, 4),
               allocate(0, 2), op("write", 0)]
    out = both(case(program, num_blocks=8, window=2, window_mode="eager"))
    tables = tables_after(case(program, num_blocks=8, window=2, window_mode="eager"))
    assert tables[1][1][:2] == [0, tables[0][1][1]]  # block 0 freed at the 2nd allocation
    assert tables[2][1][1] != 0  # block 1 (read by the pending queries) kept at the 3rd
    assert out["steps"][-1]["result"] == 10


def test_eager_lookup_hits_the_last_window_behind_null_entries() -> None:
    """w = 3, b = 2: a hit needs one cached block; the last usable cached block is the hit,
    the blocks before it become null entries (never pinned)."""
    prompt = list(range(1, 9))  # four full blocks, published
    program = [add(0, prompt), allocate(0, 8), op("write", 0), op("publish", 0),
               op("finish", 0), add(1, prompt + [9]), allocate(1, 9)]
    eager = both(case(program, num_blocks=8, window=3, window_mode="eager"))
    trim = both(case(program, num_blocks=8, window=3, window_mode="trim"))
    assert results(eager)[5] == results(trim)[5] == 8  # both report 8 tokens hit
    table = tables_after(case(program, num_blocks=8, window=3, window_mode="eager"))[-1][1]
    assert table[:3] == [0, 0, 0] and table[3] != 0 and len(table) == 5
    assert eager["steps"][-1]["free"] == trim["steps"][-1]["free"] + 3  # three never pinned


def test_eager_lookup_needs_a_whole_window_run_else_the_run_from_block_zero() -> None:
    """w = 5, b = 2: a hit needs two contiguous cached blocks.  Only block 0 of the prompt is
    cached (the second prompt diverges in block 1): the run from block 0 is the hit."""
    program = [add(0, [1, 2, 3, 4, 5, 6]), allocate(0, 6), op("write", 0), op("publish", 0),
               op("finish", 0), add(1, [1, 2, 7, 7, 7, 7, 7])]
    out = both(case(program, window=5, window_mode="eager"))
    assert results(out)[-1] == 2


def test_a_window_of_one_never_caches_a_block() -> None:
    program = [add(0, [1, 2, 3, 4, 5]), allocate(0, 5), op("write", 0), op("publish", 0),
               add(1, [1, 2, 3, 4, 5])]
    assert results(both(case(program, window=1, window_mode="eager")))[3:] == [0, 0]
    assert results(both(case(program, window=1, window_mode="trim")))[3:] == [2, 4]
    allocated = [add(0, [1, 2, 3, 4, 5]), allocate(0, 5), op("write", 0),
                 add(1, [1, 2, 3, 4, 5])]
    assert results(both(case(allocated, window=1, window_mode="eager",
                             hashing="allocate")))[-1] == 0


# ---------------------------------------------------------------------------- allocate hashing


def test_allocate_hashing_hashes_the_blocks_the_step_fills_and_publish_is_a_noop() -> None:
    program = [add(0, [1, 2, 3, 4, 5]), allocate(0, 3), add(1, [1, 2, 3, 4, 5, 6]),
               op("write", 0), op("publish", 0), allocate(0, 9), add(2, [1, 2, 3, 4, 5, 6])]
    out = both(case(program, hashing="allocate"))
    # 3 tokens scheduled fill block 0 only; the rest of the prompt fills block 1
    assert results(out)[2] == 2 and results(out)[4] == 0 and results(out)[6] == 4


@pytest.mark.parametrize("order", ["forward", "reader-first", "writer-first"])
def test_a_same_step_hit_on_an_unwritten_block_is_legal(order: str) -> None:
    """Request 1 is admitted in the step that hashed request 0's blocks, before their KV is
    written; the step writes both before either reads, in whatever order the program says."""
    step = {"forward": [{"op": "forward"}],
            "reader-first": [op("write", 1), op("write", 0)],
            "writer-first": [op("write", 0), op("write", 1)]}[order]
    program = [add(0, [1, 2, 3, 4, 5]), add(1, [1, 2, 3, 4, 5, 6]), allocate(0, 5),
               allocate(1, 6), *step, allocate(1, 1)]
    out = both(case(program, hashing="allocate"))
    assert results(out)[1] == 0  # nothing cached when it was added
    assert results(out)[3] == {"computed": 4, "scheduled": 2}  # ... but hit when scheduled


def test_a_request_released_with_its_step_in_flight_leaves_its_kv_written() -> None:
    """Request 0's allocation hashed two blocks; it is preempted (or finishes) before its write.
    The step in flight lands before the blocks go back, so a later hit reads real KV."""
    for release in ("preempt", "finish"):
        program = [add(0, [1, 2, 3, 4, 5]), allocate(0, 5), op(release, 0),
                   add(1, [1, 2, 3, 4, 5, 6]), allocate(1, 6), op("write", 1)]
        out = both(case(program, hashing="allocate"))
        assert results(out)[3] == 4


class HashesThePrompt(ReferenceManager):
    """Allocation-time hashing capped at the request's length, not at the scheduled tokens."""

    def allocate(self, rid: int, num_tokens: int) -> Any:
        result = super().allocate(rid, num_tokens)
        req = self.requests.get(rid)
        if result is not None and req is not None:
            self._hash_blocks(req, len(req.tokens))
        return result


def test_a_read_of_a_hashed_block_no_step_writes_is_caught() -> None:
    """Request 0 schedules 5 of its 8 tokens; hashing its block 2 (tokens 4, 5) then caches a
    block whose position 5 nobody writes: a hit on it reads unwritten KV."""
    program = [add(0, list(range(1, 9))), allocate(0, 5), op("write", 0),
               add(1, list(range(1, 10))), allocate(1, 9), op("write", 1)]
    inputs = case(program, hashing="allocate")
    assert both(inputs)["steps"][3]["result"] == 4
    out = run_program(HashesThePrompt, inputs)
    assert out["violation"]["check"] == "kv-content"
    assert "nothing was ever written" in out["violation"]["message"]


# ---------------------------------------------------------------------------- config, validate


def test_old_configs_load_with_the_default_variants_and_unknown_ones_are_refused() -> None:
    config = Config.from_json({"num_blocks": 4, "block_size": 2})
    assert (config.window_mode, config.hashing, config.eviction) == ("trim", "publish", "lru")
    for field, value in (("window_mode", "lazy"), ("hashing", "never")):
        bad = case([], **{field: value})
        assert field in (checks.validate(bad) or "")
    assert "penelope" in (checks.validate(case([], window=2, window_mode="eager",
                                               eviction="penelope")) or "")


# ---------------------------------------------------------------------------- capabilities


class LruOnly:
    """A manager written before capabilities: declares nothing."""


class Legacy:
    eviction_policies = ("lru", "session")


class Declared:
    capabilities = Capabilities(eviction_policies=("lru",), fork=False, windows=("eager",),
                                hashing=("allocate",), extra_keys=("adapter",), reset=False)


def test_capabilities_of_reads_the_declaration_or_the_legacy_attribute() -> None:
    assert capabilities_of(LruOnly) == Capabilities()
    assert capabilities_of(Legacy) == Capabilities(eviction_policies=("lru", "session"))
    assert capabilities_of(Declared) is Declared.capabilities
    assert capabilities_of(ReferenceManager) == capabilities_of(OptimizedManager) \
        == ALL_CAPABILITIES
    with pytest.raises(ValueError, match="window mode"):
        Capabilities(windows=("sliding",))


def _drawn(capabilities: Capabilities | None, count: int, seed: int = 0) -> list[Any]:
    strategy = programs(capabilities=capabilities)
    return reach.generated(strategy, count, seed=seed)


def test_the_strategy_draws_only_declared_capabilities() -> None:
    caps = Declared.capabilities
    cases = _drawn(caps, 120)
    for inputs in cases:
        assert unsupported(caps, inputs) is None
        config = Config.from_json(inputs["config"])
        assert config.eviction == "lru" and config.hashing == "allocate"
        assert config.sliding_window is None or config.window_mode == "eager"
        ops = {step["op"] for step in inputs["program"]}
        assert not ops & {"fork", "reset", "trim", "publish"}, ops
        assert all(step.get("salt") is None for step in inputs["program"])
    assert any(Config.from_json(c["config"]).eager for c in cases)
    assert any(step.get("adapter") is not None for c in cases for step in c["program"])


def test_the_strategy_draws_every_declared_variant() -> None:
    """The whole contract (what the reference and the optimized manager declare): every
    eviction policy, window mode and hashing mode, and a trim window without the trim op."""
    cases = _drawn(None, 200, seed=1)
    configs = [Config.from_json(c["config"]) for c in cases]
    assert {c.eviction for c in configs} == {"lru", "session", "penelope"}
    assert {c.hashing for c in configs} == {"publish", "allocate"}
    assert {c.window_mode for c in configs if c.sliding_window} == {"trim", "eager"}
    assert {(c.hashing, c.eager) for c in configs} >= {("allocate", True), ("allocate", False)}
    for inputs, config in zip(cases, configs):
        ops = {step["op"] for step in inputs["program"]}
        assert not (config.eager and "trim" in ops)
        assert not (config.hashing == "allocate" and "publish" in ops)
        assert not (config.eager and config.eviction == "penelope")
    legacy = _drawn(capabilities_of(Legacy), 60, seed=2)
    assert {Config.from_json(c["config"]).eviction for c in legacy} == {"lru", "session"}


def test_implementations_take_their_cases_from_their_capabilities() -> None:
    target = get_target("paged_kv")
    assert target.implementation("optimized").cases is None  # the whole contract
    for cls in (Legacy, Declared):
        impl = manager_implementation(cls, cls.__name__)
        caps = capabilities_of(cls)
        for inputs in reach.generated(target.strategy_for(impl), 30, seed=3):
            assert unsupported(caps, inputs) is None
    guarded = target.implementation("guarded")
    for inputs in reach.generated(target.strategy_for(guarded), 30, seed=4):
        config = Config.from_json(inputs["config"])
        assert config.hashing == "publish" and not config.eager


class LegacyReference(ReferenceManager):
    """The reference declaring only "lru" the old way (no ``capabilities`` of its own)."""

    capabilities = None  # type: ignore[assignment]
    eviction_policies = ("lru",)


def test_a_case_outside_the_capabilities_is_skipped_not_passed() -> None:
    """Through the runner: an ``unsupported`` verdict (the engines count it apart); called
    directly: the older ``unsupported`` output, which the oracle passes."""
    target = get_target("paged_kv")
    impl = manager_implementation(LegacyReference, "legacy")
    program = [add(0, [1, 2, 3]), allocate(0, 3), op("write", 0)]
    for config in ({"eviction": "session"}, {"hashing": "allocate"},
                   {"window_mode": "eager"}):
        inputs = case(program, window=2, **config)
        verdict = check_case(target, impl, inputs, confirm=False)
        assert verdict.unsupported and verdict.failure is None, config
        with pytest.raises(Unsupported):
            impl.fn(inputs)
        out = impl(inputs)
        assert out["unsupported"] and checks.oracle(inputs, run_program(ReferenceManager,
                                                                        inputs), out) is None
    fork = case(program + [{"op": "fork", "src": 0, "dst": 1}])
    assert check_case(target, manager_implementation(Declared, "declared"), fork,
                      confirm=False).unsupported
    plain = case(program)
    verdict = check_case(target, impl, plain, confirm=False)
    assert verdict.unsupported is None and verdict.failure is None
    assert check_case(target, target.implementation("guarded"),
                      case(program, hashing="allocate"), confirm=False).unsupported


# ---------------------------------------------------------------------------- mutants

#: Per variant mutant: a program on which the clean managers agree and the mutant fails.
MUTANT_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "eager-frees-after-fit-check": (
        case(EAGER_FAILS[:3] + [allocate(0, 4)], num_blocks=4, window=2, window_mode="eager"),
        "mismatch:trace:allocate:exact:step['result']:type"),
    "eager-frees-in-flight-window": (
        case([add(0, list(range(1, 13))), allocate(0, 4), op("write", 0), allocate(0, 4),
              allocate(0, 2), op("write", 0)], window=2, window_mode="eager"),
        "mismatch:trace:allocate:exact:step['free']"),
    "window-scan-skips-past-miss": (
        # blocks 0..2 of the second prompt are cached, its last usable block 3 is not; w = 5
        # needs runs of 2: the hit is blocks 1, 2 (behind a null entry), not blocks 0, 1
        case([add(0, list(range(1, 9))), allocate(0, 8), op("write", 0), op("publish", 0),
              op("finish", 0), add(1, [1, 2, 3, 4, 5, 6, 9, 9, 9])],
             window=5, window_mode="eager"),
        "mismatch:trace:add:exact:step['result']"),
    "allocate-hashes-unwritten-blocks": (
        case([add(0, list(range(1, 9))), allocate(0, 5), op("write", 0),
              add(1, list(range(1, 10))), allocate(1, 9), op("write", 1)], hashing="allocate"),
        "mismatch:trace:add:exact:step['result']"),
}


def test_every_variant_mutant_has_a_case() -> None:
    assert sorted(MUTANT_CASES) == sorted(m.name for m in VARIANT_MUTANTS)
    names = [m.name for m in get_target("paged_kv").mutants]
    assert all(name in names for name in MUTANT_CASES)


@pytest.mark.parametrize("name", sorted(MUTANT_CASES))
def test_variant_mutant_is_caught(name: str) -> None:
    target = get_target("paged_kv")
    inputs, signature = MUTANT_CASES[name]
    impl = target.implementation("optimized")
    clean = check_case(target, impl, inputs, confirm=False)
    assert clean.failure is None and clean.expected["violation"] is None
    with target.mutant(name).applied():
        verdict = check_case(target, impl, inputs)
    assert verdict.failure is not None, f"mutant {name} passed its case"
    assert verdict.failure.signature == signature, verdict.failure.message


def test_variant_mutants_need_their_variant() -> None:
    """Outside their variant (a trim window, publish hashing) the mutants change nothing."""
    target = get_target("paged_kv")
    impl = target.implementation("optimized")
    for name, (inputs, _) in MUTANT_CASES.items():
        config = {**inputs["config"], "window_mode": "trim", "hashing": "publish"}
        assert not Config.from_json(config).eager
        with target.mutant(name).applied():
            assert check_case(target, impl, {**inputs, "config": config},
                              confirm=False).failure is None, name


class CountsSameStepHits(ReferenceManager):
    """The reference, counting admissions that pin a block hashed by an allocation whose KV is
    not written yet (another request's scheduled, unwritten tokens)."""

    same_step_hits = 0

    def allocate(self, rid: int, num_tokens: int) -> Any:
        unwritten = {block for req in self.requests.values() if req.pending
                     for i, block in enumerate(req.table)
                     if block and self.block_hash[block] is not None
                     and (i + 1) * self.b > req.computed}
        admitting = rid in self.requests and not self.requests[rid].table
        result = super().allocate(rid, num_tokens)
        if result is not None and admitting and unwritten & set(self.requests[rid].table):
            CountsSameStepHits.same_step_hits += 1
        return result


def test_the_strategy_reaches_same_step_hits_under_allocate_hashing() -> None:
    """Allocate hashing is only tested where a request hits a block hashed in the same step
    (the crowd and batch chunks schedule requests sharing a prefix before one pass)."""
    CountsSameStepHits.same_step_hits = 0
    allocating = [c for c in _drawn(None, 300, seed=5) if c["config"]["hashing"] == "allocate"]
    for inputs in allocating:
        assert run_program(CountsSameStepHits, inputs)["violation"] is None
    assert CountsSameStepHits.same_step_hits >= 3, CountsSameStepHits.same_step_hits


def test_program_steps_are_validated_before_any_manager_runs() -> None:
    """A malformed step in a case file is refused as an invalid case (exit 2 on replay), never
    run into the manager, whose crash would be reported as the manager's bug."""
    import inspect

    from hypothesis import HealthCheck, given, settings

    from fuzzkit.targets.paged_kv import checks, driver
    from fuzzkit.targets.paged_kv.strategies import inputs as paged_inputs

    for op, (required, optional) in checks._STEP_ARGUMENTS.items():
        params = list(inspect.signature(getattr(driver.Driver, op)).parameters)[1:]
        assert params == [*required, *optional], op
    assert set(checks._STEP_ARGUMENTS) == set(driver.OPS)
    config = {"num_blocks": 4, "block_size": 2}
    bad = [{"op": "add", "rid": 0, "tokens": ["echo"]}, {"op": "add", "rid": True, "tokens": []},
           {"op": "allocate", "rid": 0}, {"op": "allocate", "rid": 0, "n": 1.5},
           {"op": "write", "rid": 0, "cmd": 1}, {"op": "system", "rid": 0}, ["add"],
           {"op": "add", "rid": 0, "tokens": [1], "salt": "x"}, {"op": "fork", "src": 0,
                                                                  "dst": 1 << 70}]
    for step in bad:
        assert checks.validate({"config": config, "program": [step]}) is not None, step

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(paged_inputs())
    def generated_cases_validate(case: dict) -> None:
        assert checks.validate(case) is None

    generated_cases_validate()
