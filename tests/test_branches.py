"""Branch coverage of the code under test: measured per pair, reported with what was missed and
what was excluded (with its reason), in the summary, coverage.json and the HTML report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fuzzkit import branches
from fuzzkit.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_module_file_does_not_import() -> None:
    sys.modules.pop("fuzzkit.targets.scheduling.cost", None)
    path = branches.module_file("fuzzkit.targets.scheduling.cost")
    assert path is not None and path.endswith("targets/scheduling/cost.py")
    assert "fuzzkit.targets.scheduling.cost" not in sys.modules
    assert branches.module_file("no_such_package.mod") is None
    files = branches.module_files(["fuzzkit.targets.scheduling.policies"])
    assert any(f.endswith("policies/optimized.py") for f in files)
    with pytest.raises(ValueError, match="not an importable module"):
        branches.module_files(["no_such_package"])


def test_exclusions_carry_their_reasons(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("x = 1\nif x:  # pragma: no branch - always true here\n    y = 2\n"
                   "def f():  # pragma: no cover\n    pass\n")
    found = branches.exclusions([str(src)], tmp_path)
    assert [(e.line, e.kind, e.reason) for e in found] == [
        (2, "branch", "always true here"), (4, "cover", "")]


def test_every_coverage_pragma_in_the_project_says_why() -> None:
    files = [str(p) for d in ("fuzzkit", "oracles", "targets", "examples")
             for p in (ROOT / d).rglob("*.py")]
    missing = [f"{e.file}:{e.line}" for e in branches.exclusions(files, ROOT)
               if not e.reason and not e.file.endswith("fuzzkit/branches.py")]
    assert not missing, f"coverage pragmas without a reason: {missing}"


def test_meter_reports_branches_per_pair(tiles) -> None:
    from fuzzkit.engines.hypothesis import fuzz

    meter = branches.Meter(["reach_targets"], sample_every=0.0)
    meter.start()
    try:
        meter.pair("toy-tiles/tiled", ["reach_targets"])
        fuzz(tiles, tiles.implementation("tiled"), budget=1.0, seed=0, profile="ci",
             database_dir=None, on_case=lambda n: meter.tick())
        meter.tick(force=True)
    finally:
        meter.stop()
    report = meter.report("toy-tiles/tiled")
    assert report["branches"] > 0 and 0 < report["branch_percent"] < 100
    # the mutants' bodies never ran: their branches are listed as never taken
    assert any("reach_targets.py" in b for b in report["missing_branches"])
    assert any("reach_targets.py" in line for line in report["missing_lines"])
    assert report["timeline"] and report["timeline"][-1][1] == report["branch_percent"]
    with pytest.raises(ValueError, match="not measured"):
        meter.pair("x/y", ["fuzzkit.values"])


def test_run_with_coverage_writes_table_json_and_html(tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    code = main(["run", "toy-tiles", "--budget", "2", "--coverage", "--report-dir",
                 str(tmp_path / "r"), "--corpus", str(tmp_path / "c")])
    out = capsys.readouterr().out
    assert code == 0
    assert "branch %" in out and "toy-tiles/tiled" in out
    [run_dir] = (tmp_path / "r").iterdir()
    coverage = json.loads((run_dir / "coverage.json").read_text())
    pair = coverage["toy-tiles/tiled"]
    assert pair["branches"] > 0 and "missing_branches" in pair and "excluded" in pair
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["results"][0]["coverage"]["branch_percent"] == pair["branch_percent"]
    page = (run_dir / "index.html").read_text()
    assert "Coverage of the code under test" in page and "Reach" in page
    assert (run_dir / "plots" / "coverage_over_time.png").is_file()
    reach = json.loads((run_dir / "reach.json").read_text())
    assert reach["toy-tiles/tiled"]["thresholds"][0]["crossed"]


def test_novelty_counts_only_arcs_never_run_before(tiles) -> None:
    """The steering score: positive for the first case through new code, zero for a repeat."""
    meter = branches.Meter(["reach_targets"], sample_every=0.0)
    meter.start()
    try:
        meter.pair("toy-tiles/tiled", ["reach_targets"])
        from hypothesis import find

        impl = tiles.implementation("tiled")
        inputs = find(tiles.strategy_for(impl), lambda _: True)
        impl.fn(inputs)
        first = meter.novelty()
        impl.fn(inputs)
        again = meter.novelty()
    finally:
        meter.stop()
    assert first > 0 and again == 0


def test_steer_needs_coverage_and_runs_with_it(tmp_path: Path, capsys) -> None:
    assert main(["run", "toy-tiles", "--budget", "1", "--steer"]) == 2
    assert "--coverage" in capsys.readouterr().err
    code = main(["run", "toy-tiles", "--budget", "2", "--coverage", "--steer", "--report-dir",
                 str(tmp_path / "r"), "--corpus", str(tmp_path / "c"), "--progress", "quiet"])
    assert code == 0
    [run_dir] = (tmp_path / "r").iterdir()
    assert json.loads((run_dir / "coverage.json").read_text())["toy-tiles/tiled"]["branches"] > 0
