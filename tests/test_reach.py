"""Thresholds as data: boundaries, the stated share of sizes on them, and the crossing check."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from fuzzkit import reach
from fuzzkit.program import OperationCounts, swarm, weighted

import reach_targets


def test_boundaries_and_required_values() -> None:
    t = reach.Threshold("n", 8, "tile")
    assert t.boundaries() == (7, 8, 9, 15, 16, 17)
    assert t.required() == (7, 8, 9)
    assert t.boundaries(lo=8, hi=16) == (8, 9, 15, 16)
    capped = reach.Threshold("n", 8, "tile", cap=10)
    assert capped.boundaries() == (7, 8, 9)
    one = reach.Threshold("n", 1, "first element")
    assert one.required(lo=1) == (1, 2)
    with pytest.raises(ValueError, match="positive int"):
        reach.Threshold("n", 0, "nothing")


def _draws(thresholds: tuple[reach.Threshold, ...], cases: int, **kw: Any) -> list[int]:
    seen: list[int] = []

    @hypothesis_seed(3)
    @settings(max_examples=cases, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(reach.sizes("n", thresholds, **kw), st.integers(0, 10**6))
    def draw(n: int, _noise: int) -> None:
        seen.append(n)

    draw()
    return seen


def test_stated_share_of_sizes_lands_on_boundaries() -> None:
    """At least a quarter of the sizes are boundary values of some threshold, some are well
    above them, and every size stays inside [lo, hi] -- while the plain distribution (here:
    sizes 1..5, far below every threshold) still gets the largest share."""
    thresholds = (reach.Threshold("n", 16, "tile"), reach.Threshold("n", 40, "growth", cap=200),
                  reach.Threshold("m", 3, "another size"))
    seen = _draws(thresholds, 1000, lo=1, hi=120, base=st.integers(1, 5))
    assert all(1 <= n <= 120 for n in seen)
    boundary = {v for t in thresholds if t.size == "n" for v in t.boundaries(1, 120)}
    on = sum(n in boundary for n in seen) / len(seen)
    above = sum(n > 33 and n not in boundary for n in seen) / len(seen)
    plain = sum(n <= 5 for n in seen) / len(seen)
    assert on >= 0.25, on
    assert above >= 0.02, above
    assert plain >= 0.4, plain
    assert not any(n in (2, 3, 4) for n in seen if n > 5)  # the other size's values stay out


def test_no_thresholds_means_the_plain_distribution() -> None:
    assert set(_draws((), 200, lo=1, hi=120, base=st.integers(1, 5))) <= {1, 2, 3, 4, 5}


def test_toy_target_crosses_its_tile(tiles) -> None:
    reach.assert_crossed(tiles, tiles.implementation("tiled"), cases=300)
    [crossing] = reach.crossings(tiles, tiles.implementation("tiled"), cases=300)
    assert crossing.crossed and crossing.seen[reach_targets.TILE + 1] > 0


def test_the_crossing_check_fails_for_a_strategy_that_ignores_thresholds(tiles) -> None:
    blind = tiles.__class__(**{**tiles.__dict__, "strategy": lambda: reach_targets.strategy(())})
    with pytest.raises(AssertionError, match=r"width=8 .*missing \[7, 8, 9\]"):
        reach.assert_crossed(blind, blind.implementation("tiled"), cases=300)


def test_strategy_for_hands_the_implementation_thresholds_to_the_strategy(tiles) -> None:
    impl = tiles.implementation("tiled")
    assert tiles.thresholds_for(impl) == reach_targets.THRESHOLDS
    assert tiles.thresholds_for() == reach_targets.THRESHOLDS  # union over implementations


def test_thresholds_may_be_computed_per_mode() -> None:
    assert reach.resolve(lambda: [reach.Threshold("n", 4, "small tile")])[0].value == 4
    with pytest.raises(TypeError, match="Threshold records"):
        reach.resolve([("n", 4)])


def test_counter_refuses_thresholds_of_unmeasured_sizes() -> None:
    with pytest.raises(ValueError, match="does not measure"):
        reach.ReachCounter((reach.Threshold("rows", 4, "tile"),), {"n": lambda inputs: [1]})


def test_engine_reports_reach_per_run(tiles) -> None:
    from fuzzkit.engines.hypothesis import fuzz

    result = fuzz(tiles, tiles.implementation("tiled"), budget=1.0, seed=0, profile="ci",
                  database_dir=None)
    [row] = result.reach
    assert row["size"] == "width" and row["value"] == reach_targets.TILE and row["crossed"]


# ------------------------------------------------------------------------------------- swarm


def test_swarm_configurations_switch_operations_off_and_reweight() -> None:
    table = [("add", 5), ("fork", 2), ("reset", 1)]
    configs: list[dict[str, int]] = []

    @hypothesis_seed(0)
    @settings(max_examples=300, phases=[Phase.generate], database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data: Any) -> None:
        configs.append(swarm(data.draw, table, keep=("add",)))

    draw()
    assert all("add" in c for c in configs)  # kept
    assert any("fork" not in c for c in configs) and any("reset" not in c for c in configs)
    assert any(c.get("fork") == 16 for c in configs)  # 8x the default
    assert any(c == dict(table) for c in configs)  # the default mix (the shrink target)


def test_weighted_draws_only_enabled_operations() -> None:
    seen: collections.Counter[str] = collections.Counter()

    @hypothesis_seed(1)
    @settings(max_examples=200, phases=[Phase.generate], database=None,
              suppress_health_check=list(HealthCheck))
    @given(weighted({"a": 1, "b": 9}, {"a": st.just("a"), "b": st.just("b"),
                                       "c": st.just("c")}), st.integers(0, 10**6))
    def draw(name: str, _noise: int) -> None:
        seen[name] += 1

    draw()
    assert "c" not in seen and seen["b"] > seen["a"] > 0
    with pytest.raises(ValueError, match="enables no operation"):
        weighted({}, {"a": st.just("a")})


def test_operation_counts_record_ops_and_ordered_pairs() -> None:
    counts = OperationCounts()
    counts.add(["add", "fork", "add"])
    counts.add(["fork", "fork"])
    counts.add([])
    report = counts.to_json()
    assert report["cases"] == 2
    assert report["operations"] == {"fork": 3, "add": 2}
    assert report["pairs"] == {"add>fork": 1, "fork>add": 1, "fork>fork": 1}


def test_program_targets_report_their_operations(alloc) -> None:
    from fuzzkit.engines.hypothesis import fuzz

    result = fuzz(alloc, alloc.implementation("heap"), budget=1.0, seed=0, profile="ci",
                  database_dir=None)
    ops = result.operations["operations"]
    assert set(ops) == {"alloc", "release"} and result.operations["cases"] > 10
    assert np.isin(["alloc>release", "release>alloc"], list(result.operations["pairs"])).all()
