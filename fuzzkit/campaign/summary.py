"""The one summary writer: ``summary.json``, ``stats.jsonl``, ``findings/``, ``reach.json`` and
``coverage.json`` of a run, folded from its events -- the same for every backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fuzzkit.campaign.model import Event, RunState
from fuzzkit.campaign.progress import Stats
from fuzzkit.case import atomic_write_text
from fuzzkit.replay_hint import replay_hint


def summary_rows(state: RunState, stats: Stats) -> list[dict[str, Any]]:
    """One row per (target, implementation) of the plan (and any a worker resolved)."""
    rows = []
    by_item: dict[tuple[str, str], list[Event]] = {}
    for event in stats.findings.values():
        by_item.setdefault((event["target"], event["impl"]), []).append(event)
    items = list(dict.fromkeys([(t, i) for t, i in state.plan.items] + stats.items()))
    resolved = set(stats.items())
    for t, spec in items:
        if (t, spec) not in resolved and any(x == t for x, _ in resolved) and ":" in spec:
            continue  # the resolved name of a module:attr implementation is listed instead
        row = stats.row(t, spec)
        found = [_finding_entry(e) for e in by_item.get((t, spec), [])]
        done = stats.done.get((t, spec), [])
        known_hits: dict[str, int] = {}
        unsupported: dict[str, int] = {}
        repeats = sum(_count(event.get("repeats")) for event in done)
        for event in done:
            for sig, n in (event.get("known_hits") or {}).items():
                known_hits[sig] = known_hits.get(sig, 0) + int(n)
            for reason, n in (event.get("unsupported") or {}).items():
                unsupported[reason] = unsupported.get(reason, 0) + int(n)
        reach = stats.reach_of(t, spec)
        entry: dict[str, Any] = {
            "target": t,
            "implementation": spec,
            "seed": state.plan.seed,
            "cases": row["cases"],
            "seconds": round(row["seconds"], 3),
            "cases_per_second": round(row["cases"] / row["seconds"], 2) if row["seconds"] else 0.0,
            "finding": found[0] if found else None,
            "findings": found,
            "other_signatures": stats.other.get((t, spec), {}),
            "known_hits": known_hits,
            # cases the implementation cannot express: turned away, never run nor passed
            "unsupported_cases": sum(unsupported.values()),
            "unsupported": unsupported,
            # generated again after being judged once: counted, not judged (fuzzkit.seen)
            "repeated_cases": repeats,
            "operations": reach.get("operations", {}),
            "reach": reach.get("thresholds", []),
        }
        if state.plan.mutants:
            entry["mutants"] = list(state.plan.mutants)
        coverage = next((e["coverage"] for e in reversed(done) if e.get("coverage")), None)
        if coverage:
            entry["coverage"] = coverage
        rows.append(entry)
    return rows


def _finding_entry(event: Event) -> dict[str, Any]:
    entry = {
        "kind": event["kind"],
        "signature": event["signature"],
        "message": event.get("message"),
        "case": event["case"],
        "seconds_to_first_failure": event.get("seconds_to_first_failure"),
        "cases_to_first_failure": event.get("cases_to_first_failure"),
        "replay": replay_hint(event["case"], event.get("impl", ""), event.get("mutants") or ()),
    }
    if event.get("sequence"):
        entry["sequence"] = event["sequence"]
    if event.get("unshrunk"):
        entry["unshrunk"] = True
    return entry


def write_summary(
    run_dir: Path, state: RunState, stats: Stats, known: Any = None
) -> tuple[Path, list[dict[str, Any]]]:
    """Write every report file of the run; returns the summary's path and its rows."""
    from fuzzkit.report import write_report

    rows = summary_rows(state, stats)
    findings = []
    for event in stats.findings.values():
        try:
            findings.append((event.get("case_id") or Path(event["case"]).stem, _read(event)))
        except OSError:  # a case file removed by hand: the event still names it
            pass
    for name, key in (("reach.json", None), ("coverage.json", "coverage")):
        data = {
            f"{r['target']}/{r['implementation']}": (
                r[key] if key else {"operations": r["operations"], "thresholds": r["reach"]}
            )
            for r in rows
            if (r.get(key) if key else (r["operations"] or r["reach"]))
        }
        if data:
            atomic_write_text(run_dir / name, json.dumps(data, indent=1, sort_keys=True) + "\n")
    path = write_report(
        run_dir.parent,
        run_dir.name,
        state.plan.seed,
        state.plan.budget,
        rows,
        state.plan.skipped,
        findings,
        known=known,
        status=state.status,
        elapsed=state.elapsed,
    )
    return path, rows


def _read(event: Event) -> str:
    return Path(event["case"]).read_text()


def _count(value: object) -> int:
    """A count from an event (absent in events of older runs: 0)."""
    return value if isinstance(value, int) else 0
