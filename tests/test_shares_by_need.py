"""A worker's budget shared by need (issue 22, item 4): every item first runs to a minimum number
of cases within an equal share, then what is left is shared equally -- so a slow pair gets what
the fast ones did not need.  Driven by a fake clock: the policy, not the machine, is tested."""

from __future__ import annotations

import types

import pytest

from fuzzkit.campaign import worker
from fuzzkit.campaign.worker import MIN_CASES, shares_by_need


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def _job(name: str, rate: float, engine: str = "hypothesis", max_cases=None, max_findings=None):
    plan = types.SimpleNamespace(engine=engine, max_cases=max_cases, max_findings=max_findings)
    return types.SimpleNamespace(name=name, rate=rate, plan=plan, cases_before=0, findings=0,
                                 seconds=0.0)


def _simulate(jobs, budget: float, monkeypatch) -> list[tuple[str, float, object]]:
    clock = _Clock()
    monkeypatch.setattr(worker, "time", clock)
    passes = []
    for job, share, max_cases in shares_by_need(jobs, deadline=budget):
        passes.append((job.name, round(share, 3), max_cases))
        cases = job.rate * share if max_cases is None else min(job.rate * share, max_cases)
        spent = cases / job.rate
        clock.now += spent
        job.cases_before += int(cases)
        job.seconds += spent
    return passes


def test_a_slow_item_gets_what_the_fast_ones_did_not_need(monkeypatch) -> None:
    fast = [_job(f"fast{i}", rate=1000.0) for i in range(3)]
    slow = _job("slow", rate=1.0)
    _simulate([*fast, slow], budget=40.0, monkeypatch=monkeypatch)
    # equal shares would give each 10 s; the slow one gets its 10 s plus a quarter of the ~30 s
    # the fast ones left in the first pass
    assert slow.seconds > 16.0
    assert all(job.cases_before >= MIN_CASES for job in fast)
    assert sum(job.seconds for job in [*fast, slow]) == pytest.approx(40.0)


def test_every_item_reaches_the_minimum_before_any_gets_more(monkeypatch) -> None:
    jobs = [_job("a", rate=100.0), _job("b", rate=10.0), _job("c", rate=50.0)]
    passes = _simulate(jobs, budget=30.0, monkeypatch=monkeypatch)
    assert [(name, cap) for name, _, cap in passes[:3]] == [(n, MIN_CASES) for n in "abc"]
    assert [name for name, _, _ in passes[3:]] == ["a", "b", "c"]


def test_one_item_or_another_engine_runs_in_one_pass(monkeypatch) -> None:
    assert _simulate([_job("only", rate=5.0)], 10.0, monkeypatch) == [("only", 10.0, None)]
    jobs = [_job("a", 5.0, engine="atheris"), _job("b", 5.0, engine="atheris")]
    assert [p[0] for p in _simulate(jobs, 10.0, monkeypatch)] == ["a", "b"]


def test_max_cases_and_max_findings_bound_the_second_pass(monkeypatch) -> None:
    capped = _job("capped", rate=1000.0, max_cases=10)
    passes = _simulate([capped, _job("other", 1000.0, max_cases=10)], 10.0, monkeypatch)
    assert [(n, cap) for n, _, cap in passes] == [("capped", 10), ("other", 10)]
    found = _job("found", rate=1000.0, max_findings=1)
    found.findings = 1
    passes = _simulate([found, _job("more", 1000.0)], 10.0, monkeypatch)
    assert [n for n, _, _ in passes] == ["found", "more", "more"]
    more_left = _job("more_left", rate=1000.0, max_cases=100)
    passes = _simulate([more_left, _job("x", 1000.0)], 10.0, monkeypatch)
    assert passes[2] == ("more_left", pytest.approx(passes[2][1]), 100 - MIN_CASES)
