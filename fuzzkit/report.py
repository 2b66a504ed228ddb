"""Run reports: ``reports/<run-id>/summary.json``, ``stats.jsonl`` and one file per finding.

The summary is the machine-readable record of a run (what ran, how fast, what was found); the
table printed at the end of ``fuzzkit run`` is rendered from the same rows.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
from pathlib import Path
from typing import Any, Iterable, Optional

from fuzzkit import __version__
from fuzzkit.case import atomic_write_text
from fuzzkit.engines.hypothesis import FuzzResult


def new_run_id(seed: int) -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-seed{seed}"


def result_row(result: FuzzResult, finding_path: Optional[Path]) -> dict[str, Any]:
    failure = result.finding.failure if result.finding else None
    return {
        "target": result.target,
        "implementation": result.implementation,
        "seed": result.seed,
        "cases": result.cases,
        "seconds": round(result.seconds, 3),
        "cases_per_second": round(result.cases_per_second, 2),
        "finding": None if failure is None else {
            "kind": failure.kind,
            "signature": failure.signature,
            "message": failure.message,
            "case": str(finding_path) if finding_path else None,
            "seconds_to_first_failure": result.seconds_to_first_failure,
        },
        "other_signatures": result.other_signatures,
    }


def write_report(report_dir: Path, run_id: str, seed: int, budget: float,
                 rows: list[dict[str, Any]], skipped: Iterable[dict[str, str]],
                 findings: Iterable[tuple[str, str]]) -> Path:
    """Write the run's report directory and return the path of ``summary.json``."""
    out = report_dir / run_id
    out.mkdir(parents=True, exist_ok=True)
    total_cases = sum(r["cases"] for r in rows)
    total_seconds = sum(r["seconds"] for r in rows)
    summary = {
        "run_id": run_id,
        "fuzzkit_version": __version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "seed": seed,
        "budget_seconds": budget,
        "cases": total_cases,
        "seconds": round(total_seconds, 3),
        "cases_per_second": round(total_cases / total_seconds, 2) if total_seconds else 0.0,
        "findings": sum(1 for r in rows if r["finding"]),
        "results": rows,
        "skipped": list(skipped),
    }
    for case_id, text in findings:
        atomic_write_text(out / "findings" / f"{case_id}.json", text)
    atomic_write_text(out / "stats.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n"
                                                   for r in rows))
    path = out / "summary.json"
    atomic_write_text(path, json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return path
