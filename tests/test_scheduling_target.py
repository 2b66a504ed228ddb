"""The ``scheduling`` target as fuzzkit sees it: clean on generated cases, every metamorphic
relation able to fail, and the oracle's choice between a trace divergence and a violation."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings

from fuzzkit.registry import get_target
from fuzzkit.runner import check_case
from targets.scheduling import properties, run_with
from targets.scheduling.policies import optimized as policies
from targets.scheduling.routers import optimized as routers
from targets.scheduling.strategies import inputs

TARGET = get_target("scheduling")


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(inputs())
def test_generated_cases_are_valid_and_clean(case: dict[str, Any]) -> None:
    assert TARGET.validate(case) is None
    verdict = check_case(TARGET, TARGET.implementation("optimized"), case)
    assert verdict.failure is None, verdict.failure.message


def _case(policy: dict[str, Any], **config: Any) -> dict[str, Any]:
    """A long request keeps the server busy while another long one and two short ones queue up
    behind it: Fairway may let the short ones bypass the waiting long one, within β."""
    requests = [{"rid": 0, "arrival": 0, "prompt": 9, "output": 1, "blocks": [0, 1, 2, 3, 4]},
                {"rid": 1, "arrival": 1, "prompt": 9, "output": 1, "blocks": [7, 8, 9, 10, 11]},
                {"rid": 2, "arrival": 1, "prompt": 1, "output": 1, "blocks": [5]},
                {"rid": 3, "arrival": 1, "prompt": 1, "output": 1, "blocks": [6]}]
    base = {"block_size": 2, "token_budget": 1, "max_running": 1, "cache_blocks": 0,
            "policy": policy, "router": {"name": "round_robin"},
            "cost": {"k0": 1, "k1": 2, "k2": 0, "decode": 0}}
    base.update(config)
    return {"config": base, "requests": requests}


def _run(case: dict[str, Any]) -> dict[str, Any]:
    return run_with(policies, routers, copy.deepcopy(case))


def _lying(transform: Any) -> Any:
    """A run function that changes its behaviour on the property's variant inputs."""
    def run(case: dict[str, Any]) -> dict[str, Any]:
        return _run(transform(copy.deepcopy(case)))
    return run


def test_relations_hold_on_the_clean_simulator() -> None:
    case = _case({"name": "fairway", "beta": 5, "short_queue": None})
    for prop in properties.PROPERTIES:
        assert prop.check(_run, case) is None, prop.name


def test_scale_invariance_fails_when_a_time_constant_is_not_scaled() -> None:
    def forget_beta_scaling(case: dict[str, Any]) -> dict[str, Any]:
        if case["requests"][1]["arrival"] > 1:  # the scaled copy
            case["config"]["policy"]["beta"] //= properties.SCALE * 3
        return case
    case = _case({"name": "fairway", "beta": 6, "short_queue": None})
    failure = properties.scale_invariance(_lying(forget_beta_scaling), case)
    assert failure is not None and failure.signature.endswith("scale_invariance")


def test_beta_zero_relation_fails_when_beta_zero_still_bypasses() -> None:
    def ignore_zero(case: dict[str, Any]) -> dict[str, Any]:
        if case["config"]["policy"].get("beta") == 0:
            case["config"]["policy"]["beta"] = 10**6
        return case
    case = _case({"name": "fairway", "beta": 5, "short_queue": None})
    failure = properties.beta_zero_is_fcfs(_lying(ignore_zero), case)
    assert failure is not None and "fairway_beta_zero_is_fcfs" in failure.signature


def test_equal_costs_relation_fails_for_an_order_that_ignores_age() -> None:
    def spf_instead(case: dict[str, Any]) -> dict[str, Any]:
        if case["config"]["policy"]["name"] == "fairway":
            case["config"]["policy"] = {"name": "lpm", "fallback_len": None}
            case["requests"][0]["arrival"] = 2  # breaks the tie differently from FCFS
        return case
    case = _case({"name": "fairway", "beta": 5, "short_queue": None})
    failure = properties.equal_costs_is_fcfs(_lying(spf_instead), case)
    assert failure is not None and "fairway_equal_costs_is_fcfs" in failure.signature


def test_ttft_bound_fails_when_fairway_bypasses_without_limit() -> None:
    def unlimited(case: dict[str, Any]) -> dict[str, Any]:
        if case["config"]["policy"]["name"] == "fairway":
            case["config"]["policy"]["beta"] = 10**6
        return case
    case = _case({"name": "fairway", "beta": 0, "short_queue": None})
    failure = properties.ttft_bound(_lying(unlimited), case)
    assert failure is not None and failure.details["beta"] == 0


def test_oracle_reports_a_divergence_as_a_trace_mismatch() -> None:
    case = _case({"name": "spf"})
    expected = _run(case)
    actual = copy.deepcopy(expected)
    dispatches = [e for e in actual["events"] if e["op"] == "dispatch"]
    dispatches[1]["rid"], dispatches[2]["rid"] = dispatches[2]["rid"], dispatches[1]["rid"]
    failure = TARGET.oracle(case, expected, actual)
    assert failure is not None and failure.signature.startswith("mismatch:trace:dispatch")


def test_oracle_prefers_the_reference_breaking_an_invariant() -> None:
    case = _case({"name": "fcfs"})
    broken = _run(case)
    broken["requests"]["3"].pop("finish")
    failure = TARGET.oracle(case, broken, _run(case))
    assert failure is not None and failure.signature == "invariant:scheduling:reference:liveness"
