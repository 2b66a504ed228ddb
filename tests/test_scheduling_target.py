"""The ``scheduling`` target as fuzzkit sees it: clean on generated cases, every metamorphic
relation able to fail, and the oracle's choice between a trace divergence and a violation."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, Phase, find, given, settings

from fuzzkit import reach
from fuzzkit.registry import get_target
from fuzzkit.runner import check_case
from fuzzkit.targets.scheduling import properties, run_with
from fuzzkit.targets.scheduling.policies import optimized as policies
from fuzzkit.targets.scheduling.routers import optimized as routers
from fuzzkit.targets.scheduling.strategies import inputs

TARGET = get_target("scheduling")
OPTIMIZED = TARGET.implementation("optimized")


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(TARGET.strategy_for(OPTIMIZED))
def test_generated_cases_are_valid_and_clean(case: dict[str, Any]) -> None:
    assert TARGET.validate(case) is None
    verdict = check_case(TARGET, OPTIMIZED, case)
    assert verdict.failure is None, verdict.failure.message


def test_strategy_without_thresholds_still_makes_valid_cases() -> None:
    """``inputs()`` alone (no thresholds: the plain distributions) is what outside callers get."""
    case = find(inputs(), lambda c: len(c["requests"]) >= 3,
                settings=settings(database=None, phases=[Phase.generate]))
    assert TARGET.validate(case) is None


def test_every_threshold_is_crossed() -> None:
    """Within 300 generated cases the workloads reach both sides of every declared threshold
    (the lazy indexes' rebuild, the tournament's doublings, LPM's default fallback, the router's
    ring points, the instance count, the KV pool's and the CPU tier's capacity edges)."""
    names = {t.size for t in TARGET.thresholds_for(OPTIMIZED)}
    assert {"pushes", "fairway_queue", "lpm_queue", "vnodes", "instances", "kv_slack",
            "cpu_blocks"} <= names
    reach.assert_crossed(TARGET, OPTIMIZED, cases=300)


def test_thresholds_follow_the_constants_of_the_code() -> None:
    from fuzzkit.targets.scheduling.policies import optimized as policies
    from fuzzkit.targets.scheduling.policies.reference import DEFAULT_FALLBACK

    values = {t.size: t.value for t in TARGET.thresholds_for(OPTIMIZED)}
    assert values["pushes"] == policies.COMPACT_SLACK
    assert values["fairway_queue"] == policies.TOURNAMENT_LEAVES
    assert values["lpm_queue"] == DEFAULT_FALLBACK == policies.LpmPolicy().fallback_len
    assert policies.KineticTournament()._size == policies.TOURNAMENT_LEAVES


def test_sizes_measure_what_one_queue_holds() -> None:
    """A burst is measured only where it is certain to wait in one queue: one instance, no
    admission control that may hold it back, before any scale-up."""
    case = _case({"name": "fairway", "beta": 5, "short_queue": None})
    sizes = TARGET.sizes
    assert list(sizes["fairway_queue"].measure(case)) == [1, 2, 3]  # requests 1..3 at tick 1
    assert list(sizes["pushes"].measure(case)) == []  # not an LPM / SPF case
    held = copy.deepcopy(case)
    held["config"]["admission"] = {"name": "static_cap", "max_sessions": 1}
    assert list(sizes["fairway_queue"].measure(held)) == []
    scaled = copy.deepcopy(case)
    scaled["config"]["scale_ups"] = [1]
    assert list(sizes["fairway_queue"].measure(scaled)) == [1]  # only tick 0 comes before it
    lpm = _case({"name": "lpm"})
    assert list(sizes["lpm_queue"].measure(lpm)) == [1, 2, 3]
    assert list(sizes["pushes"].measure(lpm)) == [1, 2, 3, 4]
    explicit = _case({"name": "lpm", "fallback_len": 2})
    assert list(sizes["lpm_queue"].measure(explicit)) == []


def test_events_read_the_workload_back() -> None:
    case = _case({"name": "fcfs"}, scale_ups=[1])
    case["requests"][3]["after"] = 0
    assert TARGET.operations(case) == ["arrival", "scale_up", "burst", "follow_up"]
    case["requests"][2]["after"] = 0
    assert TARGET.operations(case) == ["arrival", "scale_up", "stream", "fan_out"]
    quiet = copy.deepcopy(case)
    quiet["requests"][1]["arrival"] = 40  # k0 = 1: a gap of 30 step overheads or more
    assert TARGET.operations(quiet) == ["arrival", "scale_up", "fan_out", "quiet", "arrival"]


def test_validate_rejects_what_the_components_refuse() -> None:
    """Parameters a policy, router, admission controller or memory would refuse make the case
    invalid (instead of crashing both simulators), and so does a session that branches under
    session KV memory, which keeps one history per session."""
    base = _case({"name": "fcfs"})
    assert TARGET.validate(base) is None
    for key, value in [("policy", {"name": "fairway", "beta": -1}),
                       ("router", {"name": "prefix", "epsilon": float("nan")}),
                       ("admission", {"name": "basin", "b_min": 5, "b_max": 2}),
                       ("memory", {"kv_blocks": 8, "eviction": "fifo"}),
                       ("memory", {"kv_blocks": 8, "cpu_blocks": -1})]:
        case = copy.deepcopy(base)
        case["config"][key] = value
        assert TARGET.validate(case) is not None, (key, value)
    fan_out = copy.deepcopy(base)
    fan_out["config"]["memory"] = {"kv_blocks": 8}
    assert TARGET.validate(fan_out) is None
    fan_out["requests"][2]["after"] = fan_out["requests"][3]["after"] = 0
    assert "second follow-up" in TARGET.validate(fan_out)


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
        output = (_run(case),) if prop.uses_output else ()
        assert prop.check(_run, case, *output) is None, prop.name


def test_scale_invariance_fails_when_a_time_constant_is_not_scaled() -> None:
    def forget_beta_scaling(case: dict[str, Any]) -> dict[str, Any]:
        if case["requests"][1]["arrival"] > 1:  # the scaled copy
            case["config"]["policy"]["beta"] //= properties.SCALE * 3
        return case
    case = _case({"name": "fairway", "beta": 6, "short_queue": None})
    run = _lying(forget_beta_scaling)
    failure = properties.scale_invariance(run, case, run(case))
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
