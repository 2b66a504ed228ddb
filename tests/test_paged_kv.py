"""paged_kv: the reference obeys its own invariants, and every check can fail."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings

from fuzzkit.engines.hypothesis import fuzz
from fuzzkit.errors import UsageError
from fuzzkit.registry import get_target, resolve_implementation
from fuzzkit.targets.paged_kv import checks
from fuzzkit.targets.paged_kv.driver import Violation, check_structure, run_program
from fuzzkit.targets.paged_kv.protocol import Config
from fuzzkit.targets.paged_kv.reference import ReferenceManager
from fuzzkit.targets.paged_kv.strategies import inputs as programs


def serve(rid, tokens, **extra):
    return [{"op": "add", "rid": rid, "tokens": tokens, **extra},
            {"op": "allocate", "rid": rid, "n": len(tokens)}, {"op": "write", "rid": rid},
            {"op": "publish", "rid": rid}]


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(programs())
def test_reference_never_violates_the_kv_model_or_the_structure(case) -> None:
    assert run_program(ReferenceManager, case)["violation"] is None


# ----------------------------------------------------------------- the semantic KV oracle


class SwapsTables(ReferenceManager):
    """Hands request 1 request 0's table: cross-request bleed, whatever the block ids."""

    def block_table(self, rid):
        return super().block_table(0 if rid == 1 else rid)


class ForgetsTheAdapter(ReferenceManager):
    def add_request(self, rid, tokens, adapter=None, salt=None):
        return super().add_request(rid, tokens, None, salt)


def test_cross_request_bleed_is_a_kv_content_violation() -> None:
    decode_0 = [{"op": "append", "rid": 0, "tokens": [9]}, {"op": "allocate", "rid": 0, "n": 1},
                {"op": "write", "rid": 0}]
    case = {"config": {"num_blocks": 8, "block_size": 2},
            "program": serve(0, [1, 2, 3]) + serve(1, [3, 2, 1]) + decode_0}
    out = run_program(SwapsTables, case)
    assert out["violation"]["check"] == "kv-content"
    assert "another prefix" in out["violation"]["message"]


def test_hit_under_another_adapter_reads_foreign_kv() -> None:
    """Same tokens, other adapter: a manager that drops the adapter serves the wrong KV."""
    program = serve(0, [1, 2, 3, 4, 5], adapter=0) + [{"op": "finish", "rid": 0}] + \
        serve(1, [1, 2, 3, 4, 5], adapter=1)
    case = {"config": {"num_blocks": 8, "block_size": 2}, "program": program}
    out = run_program(ForgetsTheAdapter, case)
    assert out["violation"]["check"] == "kv-content"
    assert "other extra keys" in out["violation"]["message"]
    failure = checks.oracle(case, run_program(ReferenceManager, case), out)
    assert failure.details["op"] == "add"  # the earliest evidence: a hit the reference refuses


class ReadsNull(ReferenceManager):
    def block_table(self, rid):
        return [0 for _ in super().block_table(rid)]


def test_reading_through_the_null_block_is_caught() -> None:
    case = {"config": {"num_blocks": 8, "block_size": 2}, "program": serve(0, [1, 2, 3])}
    assert run_program(ReadsNull, case)["violation"]["check"] == "kv-write-null-block"


# ----------------------------------------------------------------- structural invariants


def _state() -> dict:
    m = ReferenceManager(Config(6, 2))
    m.add_request(0, [1, 2, 3])
    m.allocate(0, 3)
    m.commit(0)
    m.publish(0)
    return m.inspect()


def _break(kind: str) -> dict:
    state = copy.deepcopy(_state())
    if kind == "ref-cnt-holders":
        state["ref_cnt"][1] += 1
    elif kind == "ref-cnt-free-queue":
        state["free_queue"].append(1)
        state["ref_cnt"][1] = 1
    elif kind == "free-queue-duplicate":
        state["free_queue"].append(state["free_queue"][0])
    elif kind == "block-count":  # implied by the others unless the queue holds a foreign id
        state["free_queue"].append(99)
    elif kind == "stale-hash":
        state["block_hash"][5] = 1234
    elif kind == "table-length":
        state["tokens_in_table"][0] = 5
    elif kind == "null-block":
        state["free_queue"].insert(0, 0)
    return state


@pytest.mark.parametrize("kind", ["ref-cnt-holders", "ref-cnt-free-queue", "free-queue-duplicate",
                                  "block-count", "stale-hash", "table-length", "null-block"])
def test_each_structural_invariant_can_fail(kind: str) -> None:
    check_structure(_state(), Config(6, 2))  # the untouched state passes
    with pytest.raises(Violation) as info:
        check_structure(_break(kind), Config(6, 2))
    assert info.value.check == kind


def test_oracle_reports_the_earliest_evidence() -> None:
    case = {"config": {"num_blocks": 8, "block_size": 2}, "program": serve(0, [1, 2, 3])}
    expected = run_program(ReferenceManager, case)
    diverged = copy.deepcopy(expected)
    diverged["steps"][1]["result"]["scheduled"] = 2
    diverged["violation"] = {"step": 2, "op": "write", "check": "kv-content", "message": "x"}
    diverged["steps"] = diverged["steps"][:2]
    failure = checks.oracle(case, expected, diverged)
    assert failure.signature.startswith("mismatch:trace:allocate")
    clean_then_violation = copy.deepcopy(expected)
    clean_then_violation["steps"] = expected["steps"][:2]
    clean_then_violation["violation"] = {"step": 2, "op": "write", "check": "kv-content",
                                         "message": "bad read"}
    failure = checks.oracle(case, expected, clean_then_violation)
    assert failure.kind == "invariant"
    assert failure.signature == "invariant:paged_kv:kv-content:write"
    assert "write(rid=0)" in failure.message


# ----------------------------------------------------------------- plug-in interface


def test_outside_manager_classes_plug_in_and_bugs_are_found() -> None:
    target = get_target("paged_kv")
    clean = resolve_implementation(target, "examples.paged_kv_adapter:EngineAdapter")
    buggy = resolve_implementation(target, "examples.paged_kv_adapter:EngineAdapterDroppingLora")
    assert fuzz(target, clean, budget=3, seed=0, database_dir=None).finding is None
    result = fuzz(target, buggy, budget=60, seed=0, database_dir=None, max_findings=1)
    assert result.finding is not None
    assert len(result.finding.inputs["program"]) <= 10


def test_impl_that_is_not_a_manager_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="expected a KV cache manager class"):
        resolve_implementation(get_target("paged_kv"), "fuzzkit.targets.paged_kv.hashing:__doc__")
