"""The rough edges a newcomer hit: output that rewrites data (rich markup), verdicts that read
like warnings, outputs written into the corpus, private file modes, and replay commands that
leave out what the replay needs."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from fuzzkit.case import Case, atomic_write_bytes, atomic_write_text
from fuzzkit.cli import main
from fuzzkit.failure import Failure

#: Data that rich would rewrite unless it is printed literally: an emoji code inside a
#: signature, markup tags that vanish, an emoji name on its own.
HOSTILE = ("mismatch:clamp:float16", "[bold]x[/bold]", ":thumbs_up:")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _ones_case(failure: Failure | None = None) -> Case:
    ones = np.ones(3, np.float32)
    return Case("toy-dot", "numpy", {"a": ones, "b": ones}, failure=failure)


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---------------------------------------------------------------------------------------------
# 1. rich prints data verbatim


def test_run_summary_prints_signatures_and_paths_verbatim(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fuzzkit.campaign.progress import Progress, Stats

    findings = [
        {"signature": s, "case": f"corpus/t/findings/{i}.json", "kind": "mismatch"}
        for i, s in enumerate(HOSTILE)
    ]
    row: dict[str, Any] = {
        "target": "t",
        "implementation": "[bold]impl[/bold]",
        "cases": 3,
        "cases_per_second": 1.0,
        "findings": findings,
        "coverage": {
            "covered_branches": 1,
            "branches": 2,
            "branch_percent": 50.0,
            "line_percent": 50.0,
            "missing_branches": [],
            "excluded": [],
        },
    }
    Progress("quiet", 1.0).finish(Stats([]), 1.0, [row], [])
    out = capsys.readouterr().out
    for text in (*HOSTILE, "t/[bold]impl[/bold]"):
        assert text in out, (text, out)
    assert out.count("[bold]impl[/bold]") == 2, out  # the impl column and the coverage label
    assert "\N{THUMBS UP SIGN}" not in out


def test_mutants_table_prints_signatures_verbatim(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fuzzkit import mutation

    def fake_run_mutant(target: Any, mutant: Any, **_: Any) -> mutation.MutantResult:
        return mutation.MutantResult(
            target=target.name,
            mutant=mutant.name,
            implementation=mutant.implementation,
            bug_class="mismatch:clamp:float16",
            citation=":thumbs_up:",
            detected=True,
            seconds=0.1,
            signature="mismatch:[bold]x[/bold]",
            cases=1,
        )

    monkeypatch.setattr(mutation, "run_mutant", fake_run_mutant)
    code, out, _ = _run(capsys, "mutants", "toy-dot")
    assert code == 0
    for text in HOSTILE:
        assert text in out, (text, out)


# ---------------------------------------------------------------------------------------------
# 2. a fixed regression replays as good news


def test_replay_of_a_fixed_case_reads_as_good_news(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    recorded = Failure("mismatch", "was wrong", "mismatch:close:dot", {})
    path = _ones_case(recorded).save(tmp_path / "regressions")
    code, out, err = _run(capsys, "replay", str(path))
    assert code == 0, err
    assert out == f"PASS  {path}  (fixed: the recorded mismatch:close:dot no longer fails)\n"


# ---------------------------------------------------------------------------------------------
# 3. bisect writes outside the corpus


def test_bisect_of_a_regression_writes_outside_the_corpus(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_bisect import failing_toy_case, toy_target

    from fuzzkit.registry import register_target, unregister_target

    target = toy_target()
    register_target(target, replace=True)
    try:
        regressions = tmp_path / "corpus" / target.name / "regressions"
        case = Case(target.name, "toy", failing_toy_case("reversed_sub", 20), origin="manual")
        path = case.save(regressions)
        work = tmp_path / "work"
        work.mkdir()
        monkeypatch.chdir(work)
        code, out, err = _run(capsys, "bisect", str(path), "--mutant", "reversed_sub")
    finally:
        unregister_target(target.name)
    assert code == 1, err
    corpus = {str(p.relative_to(tmp_path)) for p in (tmp_path / "corpus").rglob("*")}
    assert corpus == {str(p.relative_to(tmp_path)) for p in (path, path.parent, path.parent.parent)}
    written = work / "bisected" / case.case_id
    [minimized] = written.glob("*.json")
    assert f"minimized case: {Path('bisected') / case.case_id / minimized.name}" in out


# ---------------------------------------------------------------------------------------------
# 4. files get the mode an ordinary write would


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_atomic_writes_follow_the_umask(tmp_path: Path, mask: int, mode: int) -> None:
    with _umask(mask):
        case_path = _ones_case().save(tmp_path / "corpus")
        atomic_write_text(tmp_path / "summary.json", "{}\n")
        atomic_write_bytes(tmp_path / "plot.png", b"\x89PNG")
    for path in (case_path, tmp_path / "summary.json", tmp_path / "plot.png"):
        assert _mode(path) == mode, (path, oct(_mode(path)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "plot.png", "summary.json"]


def test_the_event_log_follows_the_umask(tmp_path: Path) -> None:
    from fuzzkit.campaign.state import EventLog

    with _umask(0o002):
        log = EventLog(tmp_path)
    log.close()
    assert _mode(log.path) == 0o664


def test_the_html_report_uses_the_shared_atomic_write() -> None:
    """One atomic write in the engine: the report's plots go through fuzzkit.case's."""
    from fuzzkit import report_html

    assert report_html.atomic_write_bytes is atomic_write_bytes
    assert not hasattr(report_html, "_atomic_write_bytes")


# ---------------------------------------------------------------------------------------------
# 5. a finding's replay command says what the replay needs


def test_outside_implementation_finding_says_how_and_where_it_replays(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    impl = "toy_targets:_outside_buggy"
    with _umask(0o022):
        code, out, err = _run(
            capsys,
            "run",
            "toy-dot",
            "--impl",
            impl,
            "--budget",
            "20",
            "--max-findings",
            "1",
            "--no-confirm",
            "--progress",
            "quiet",
            "--report-dir",
            str(tmp_path / "reports"),
            "--corpus",
            str(tmp_path / "corpus"),
        )
    assert code == 1, err
    [case] = (tmp_path / "corpus" / "toy-dot" / "findings").glob("*.json")
    hint = (
        f"fuzzkit replay {case.resolve()} --impl {impl}  "
        "(needs toy_targets importable: installed, or its folder on PYTHONPATH)"
    )
    lines = err.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("finding: "))
    assert lines[at + 1] == f"  replay: {hint}", err
    # the summary table (its cells wrap, and fold long paths): the same command and note
    table = "".join(out.replace("\N{BOX DRAWINGS LIGHT VERTICAL}", " ").split())
    assert "".join(f"replay: {hint}".split()) in table, out
    [summary] = (tmp_path / "reports").glob("*/summary.json")
    [finding] = json.loads(summary.read_text())["results"][0]["findings"]
    assert finding["replay"] == hint
    page = (summary.parent / "index.html").read_text()
    assert "needs toy_targets importable" in page and f"--impl {impl}" in page
    # the files of the run are readable by the user's colleagues, as any file they write
    assert _mode(case) == 0o644 and _mode(summary) == 0o644
    assert _mode(summary.parent / "index.html") == 0o644
    # and the command it printed replays the finding
    code, out, _ = _run(capsys, "replay", str(case), "--impl", impl)
    assert code == 1 and out.startswith("FAIL"), out


def test_a_mutant_finding_replays_with_its_mutant(capsys: pytest.CaptureFixture[str]) -> None:
    """A finding made under `run --mutant` passes on the real implementation: its replay
    command carries the mutant, in the finding line and in the summary table."""
    from fuzzkit.campaign.progress import Progress, summary_table

    event = {
        "target": "toy-dot",
        "impl": "numpy",
        "signature": "mismatch:close:dot",
        "case": "corpus/toy-dot/findings/abc.json",
        "mutants": ["drops-last-term"],
    }
    Progress("quiet", 1.0).finding(event)
    err = capsys.readouterr().err
    want = "fuzzkit replay corpus/toy-dot/findings/abc.json --mutant drops-last-term"
    assert err.splitlines()[1] == f"  replay: {want}"

    from rich.console import Console

    console = Console(width=200, emoji=False, record=True, file=open(os.devnull, "w"))
    row = {
        "target": "toy-dot",
        "implementation": "numpy",
        "cases": 3,
        "cases_per_second": 1.0,
        "findings": [event],
        "mutants": ["drops-last-term"],
    }
    console.print(summary_table([row], []))
    table = "".join(console.export_text().replace("\N{BOX DRAWINGS LIGHT VERTICAL}", " ").split())
    assert "".join(f"replay: {want}".split()) in table  # (cells wrap)
    console.file.close()


# ---------------------------------------------------------------------------------------------
# 7. errors a newcomer makes are one line, exit 2


@pytest.mark.parametrize(
    "source, needle",
    [
        ("def run(x:\n    pass\n", "SyntaxError: '(' was never closed"),
        (
            'raise RuntimeError("first line\\nsecond line")\n',
            "RuntimeError: first line second line",
        ),
    ],
)
def test_an_outside_module_that_fails_to_import_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    needle: str,
) -> None:
    """The user's module is broken, not fuzzkit: exit 2 and one line naming the file and line,
    never "internal error" with a traceback through fuzzkit."""
    (tmp_path / "user_broken_mod.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = _run(
        capsys,
        "run",
        "toy-dot",
        "--impl",
        "user_broken_mod:run",
        "--budget",
        "1",
        "--report-dir",
        str(tmp_path / "r"),
        "--corpus",
        str(tmp_path / "c"),
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("fuzzkit: error: --impl user_broken_mod:run")
    assert needle in err and f"{tmp_path / 'user_broken_mod.py'}:1" in err, err


def test_a_multi_line_error_message_prints_as_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Whatever text an error quotes (here a file name with a newline), stderr gets one line."""
    code, _, err = _run(capsys, "replay", str(tmp_path / "no\nsuch.json"))
    assert code == 2 and err.count("\n") == 1 and err.startswith("fuzzkit: error:"), err
