"""Cases an implementation cannot express are counted apart: never run as passes, never
failures -- in the in-process runner, the isolated checker, the engine's totals, the campaign
summary and ``replay``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import unsupported_targets  # noqa: E402

from fuzzkit.case import Case  # noqa: E402
from fuzzkit.engines.hypothesis import fuzz  # noqa: E402
from fuzzkit.isolation import IsolatedChecker  # noqa: E402
from fuzzkit.runner import check_case  # noqa: E402


def _pair(impl: str = "even"):  # type: ignore[no-untyped-def]
    target = unsupported_targets.target()
    return target, target.implementations[impl]


def test_verdict_marks_unsupported_not_passed() -> None:
    target, impl = _pair()
    odd = check_case(target, impl, {"n": 3})
    assert odd.failure is None and odd.unsupported == "odd n"
    even = check_case(target, impl, {"n": 4})
    assert even.passed and even.unsupported is None


def test_engine_counts_unsupported_apart_from_cases(tmp_path: Path) -> None:
    target, impl = _pair()
    checked: list[int] = []

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        verdict = check_case(*args, **kwargs)
        checked.append(1)
        return verdict

    result = fuzz(target, impl, budget=30, seed=1, max_cases=80, database_dir=None,
                  checker=counting)
    assert result.finding is None
    assert result.unsupported.get("odd n", 0) > 0
    assert result.cases + result.unsupported["odd n"] == len(checked)


def test_strategy_turn_aways_are_reported(tmp_path: Path) -> None:
    target, impl = _pair("narrowed")
    result = fuzz(target, impl, budget=30, seed=2, max_cases=40, database_dir=None)
    assert result.finding is None and result.cases > 0
    assert result.unsupported.get("narrowed: odd n", 0) > 0
    assert "odd n" not in result.unsupported  # the strategy never drew one


def test_isolated_checker_returns_unsupported(tmp_path: Path) -> None:
    target, impl = _pair()
    with IsolatedChecker(target.name, impl.name, case_timeout=20,
                         inflight_dir=tmp_path / "inflight",
                         preload=["unsupported_targets"]) as checker:
        odd = checker(target, impl, {"n": 5})
        even = checker(target, impl, {"n": 6})
    assert odd.failure is None and odd.unsupported == "odd n"
    assert even.failure is None and even.unsupported is None


def test_replay_says_not_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fuzzkit.cli import main

    path = tmp_path / "odd.json"
    path.write_text(Case(target="unsupported-demo", implementation="even",
                         inputs={"n": 7}, seed=0).dumps())
    code = main(["replay", str(path)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("SKIP") and "not run: even odd n" in out
    assert "PASS" not in out


def test_campaign_summary_counts_unsupported(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from fuzzkit.cli import main

    code = main(["run", "unsupported-demo", "--impl", "even", "--budget", "3", "--seed", "1",
                 "--max-cases", "60", "--report-dir", str(tmp_path / "reports"),
                 "--corpus", str(tmp_path / "corpus"), "--progress", "quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    [run_dir] = list((tmp_path / "reports").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    [row] = [r for r in summary["results"] if r["implementation"] == "even"]
    assert row["unsupported_cases"] == row["unsupported"]["odd n"] > 0
    assert row["cases"] > 0 and row["findings"] == []
    assert "case(s) not run" in out
