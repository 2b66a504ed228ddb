"""Run reports: ``reports/<run-id>/summary.json``, ``stats.jsonl`` and one file per finding.

The summary is the machine-readable record of a run (what ran, how fast, what was found); the
table printed at the end of ``fuzzkit run`` is rendered from the same rows.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
from pathlib import Path
from typing import Any, Iterable

from fuzzkit import __version__
from fuzzkit.case import atomic_write_text


def new_run_id(seed: int) -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-seed{seed}"


def new_run_dir(report_dir: Path, seed: int) -> Path:
    """A fresh ``report_dir/<timestamp>-seed<N>[-k]`` of this run alone: created with an
    exclusive ``mkdir``, so two runs started in the same second never share (and overwrite) one
    directory."""
    report_dir.mkdir(parents=True, exist_ok=True)
    run_id = new_run_id(seed)
    for k in range(1, 10_000):
        candidate = report_dir / (run_id if k == 1 else f"{run_id}-{k}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{report_dir}: no free run directory for {run_id}")


def require_writable(directory: Path, what: str, option: str) -> None:
    """Fail before any fuzzing when ``directory`` cannot take files: a finding made first and
    lost at the save is the worst outcome a fuzzer has.  One-line UsageError."""
    import tempfile

    from fuzzkit.errors import UsageError

    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".fuzzkit-write-check-"):
            pass
    except OSError as exc:
        raise UsageError(
            f"the {what} {directory} is not writable ({exc.strerror or exc}); pass a writable "
            f"directory with {option}"
        ) from None


def write_report(
    report_dir: Path,
    run_id: str,
    seed: int,
    budget: float,
    rows: list[dict[str, Any]],
    skipped: Iterable[dict[str, str]],
    findings: Iterable[tuple[str, str]],
    known: Any = None,
    status: str = "done",
    elapsed: float | None = None,
) -> Path:
    """Write the run's report directory and return the path of ``summary.json``."""
    out = report_dir / run_id
    out.mkdir(parents=True, exist_ok=True)
    rows = [with_first_failure(r) for r in rows]
    total_cases = sum(r["cases"] for r in rows)
    total_seconds = sum(r["seconds"] for r in rows)
    summary = {
        "run_id": run_id,
        "status": status,
        "fuzzkit_version": __version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "seed": seed,
        "budget_seconds": budget,
        "elapsed_seconds": round(elapsed, 3) if elapsed is not None else None,
        "cases": total_cases,
        "seconds": round(total_seconds, 3),
        "cases_per_second": round(total_cases / total_seconds, 2) if total_seconds else 0.0,
        "findings": sum(
            len(r.get("findings") or ([r["finding"]] if r.get("finding") else [])) for r in rows
        ),
        "known": known.to_json() if known is not None else [],
        "results": rows,
        "skipped": list(skipped),
    }
    for case_id, text in findings:
        atomic_write_text(out / "findings" / f"{case_id}.json", text)
    atomic_write_text(
        out / "stats.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    )
    path = out / "summary.json"
    atomic_write_text(path, json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return path


def first_failure(findings: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """How long a pair took to its first failure, libFuzzer's headline figure for a planted bug:
    ``{"cases": N, "seconds": S}`` of the finding seen after the fewest generated cases (counted
    by the worker that found it, the failing case included), or None without findings."""
    timed = [
        f
        for f in findings
        if isinstance(f.get("cases_to_first_failure"), int)
        and not isinstance(f.get("cases_to_first_failure"), bool)
    ]
    if not timed:
        return None
    first = min(
        timed,
        key=lambda f: (f["cases_to_first_failure"], f.get("seconds_to_first_failure") or 0.0),
    )
    return {
        "cases": first["cases_to_first_failure"],
        "seconds": first.get("seconds_to_first_failure"),
    }


def with_first_failure(row: dict[str, Any]) -> dict[str, Any]:
    """A summary row with its pair's ``cases_to_first_failure`` and ``seconds_to_first_failure``
    (None when it found nothing); each finding carries its own figures as well."""
    first = first_failure(row.get("findings") or ([row["finding"]] if row.get("finding") else []))
    return {
        **row,
        "cases_to_first_failure": first["cases"] if first else None,
        "seconds_to_first_failure": first["seconds"] if first else None,
    }


def first_failure_text(first: dict[str, Any] | None) -> str:
    """``"5 cases, 0.12 s"`` for tables (``"-"`` without a failure)."""
    if first is None:
        return "-"
    seconds = first.get("seconds")
    timed = f", {seconds:.2f} s" if isinstance(seconds, (int, float)) else ""
    return f"{first['cases']} case{'s' if first['cases'] != 1 else ''}{timed}"
