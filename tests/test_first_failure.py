"""Cases (and seconds) to the first failure: in the table ``fuzzkit run`` prints, in
``summary.json`` per pair and per finding, and in the HTML report -- checked on ``toy-late``,
whose implementation goes wrong from its 5th call on, so the right figure is known."""

from __future__ import annotations

import json
import re
from pathlib import Path

import corpus_targets
from fuzzkit import registry
from fuzzkit.cli import main
from fuzzkit.report import first_failure, first_failure_text
from test_report_html import _parse

registry.register_target("toy-late", replace=True)(corpus_targets.late_target)


def test_run_reports_cases_to_first_failure_everywhere(capsys, tmp_path: Path) -> None:
    corpus_targets.reset()
    code = main(
        [
            "run",
            "toy-late",
            "--budget",
            "5",
            "--seed",
            "0",
            "--profile",
            "ci",
            "--no-confirm",
            "--max-findings",
            "1",
            "--progress",
            "quiet",
            "--report-dir",
            str(tmp_path / "reports"),
            "--corpus",
            str(tmp_path / "corpus"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 1, err
    expected = corpus_targets.FAIL_FROM

    [summary_path] = (tmp_path / "reports").glob("*/summary.json")
    [row] = json.loads(summary_path.read_text())["results"]
    assert row["cases_to_first_failure"] == expected
    assert row["findings"][0]["cases_to_first_failure"] == expected
    seconds = row["seconds_to_first_failure"]
    assert isinstance(seconds, float) and seconds >= 0
    assert seconds == row["findings"][0]["seconds_to_first_failure"]

    # the printed table: a "first failure" column with the same figures
    assert "first failure" in out
    assert re.search(rf"\b{expected} cases, {seconds:.2f} s", out), out

    page = _parse(summary_path.parent / "index.html")
    summary = next(t for t in page.tables if t[0][:3] == ["target", "impl", "cases"])
    column = summary[0].index("first failure")
    [pair] = [r for r in summary[1:] if r[0] == "toy-late"]
    assert pair[column] == f"{expected} cases, {seconds:.2f} s"
    assert f"first failed after {expected} cases, {seconds:.2f} s" in "".join(page.text)


def test_first_failure_is_the_earliest_finding_of_a_pair() -> None:
    findings = [
        {"cases_to_first_failure": 40, "seconds_to_first_failure": 0.5},
        {"cases_to_first_failure": 3, "seconds_to_first_failure": 2.0},
        {"cases_to_first_failure": None},
    ]
    assert first_failure(findings) == {"cases": 3, "seconds": 2.0}
    assert first_failure([{"cases_to_first_failure": None}]) is None
    assert first_failure_text({"cases": 1, "seconds": None}) == "1 case"
    assert first_failure_text(None) == "-"
