"""Campaign reports: ``reports/<run-id>/index.html``, one self-contained page per run.

The page is built only from what a campaign leaves in its run directory, so it can be regenerated
at any time (``fuzzkit report RUN_DIR``), also for a run that is still going or was killed:

* ``state.json``   -- run id, seed, budget, plan, workers, backend, engine, status, timing;
* ``events.jsonl`` -- append-only ``progress`` / ``finding`` / ``worker_*`` events;
* the case files the ``finding`` events point at (inlined, with their replay command).

It holds a summary table per (target, implementation), every finding (deduplicated by signature
per target and implementation, as the campaign does), the worker incidents (hung, replaced) and
three matplotlib plots -- findings over time, cases over time, cases per second per worker --
embedded as base64 PNG (and saved under ``plots/``).  No scripts, no outside resources: the file
opens anywhere.  Without matplotlib the page says so in one line and still has every table.

``progress`` events carry a worker's cumulative ``cases`` and ``elapsed`` for one (target,
implementation).  A count that goes down starts a new segment (a replaced worker, a resumed run
reusing the index); the totals add the segments.
"""

from __future__ import annotations

import base64
import bisect
import dataclasses
import datetime as _dt
import html
import io
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from fuzzkit import __version__
from fuzzkit.case import atomic_write_bytes, atomic_write_text
from fuzzkit.errors import UsageError
from fuzzkit.replay_hint import replay_command, replay_hint
from fuzzkit.report import first_failure, first_failure_text

#: The three plots, in page order: file stem and title.
PLOTS = (
    ("findings_over_time", "Findings over time"),
    ("cases_over_time", "Cases over time"),
    ("cases_per_second_per_worker", "Cases per second per worker"),
)
MAX_INLINE_CASE_CHARS = 100_000
MAX_LEGEND_WORKERS = 16  # more workers: no per-worker legend (and no per-worker case lines)
MATPLOTLIB_MISSING = (
    "Plots unavailable: matplotlib is not installed (pip install 'fuzzkit[plots]')."
)


# ---------------------------------------------------------------------------------------------
# Reading a run directory


@dataclasses.dataclass
class RunData:
    run_dir: Path
    state: dict[str, Any]
    events: list[dict[str, Any]]
    bad_lines: int  # lines of events.jsonl that were not JSON objects (a torn last line, say)
    #: ``coverage.json`` of a ``--coverage`` run: per "target/impl", see fuzzkit.branches
    coverage: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: ``reach.json``: per "target/impl", operation counts and threshold boundaries reached
    reach: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def started(self) -> float:
        started = self.state.get("started")
        if isinstance(started, (int, float)):
            return float(started)
        times = [e["t"] for e in self.events if isinstance(e.get("t"), (int, float))]
        return min(times) if times else 0.0


def _event_time(event: dict[str, Any]) -> float:
    t = event.get("t")
    return float(t) if isinstance(t, (int, float)) else 0.0


def load_run(run_dir: os.PathLike[str] | str) -> RunData:
    """Read ``state.json`` and ``events.jsonl``.  Raises :class:`UsageError` with one line."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")
    state_path, events_path = run_dir / "state.json", run_dir / "events.jsonl"
    missing = [p.name for p in (state_path, events_path) if not p.is_file()]
    if missing:
        raise UsageError(
            f"{run_dir}: not a campaign run directory (no {' or '.join(missing)}); "
            "give a reports/<run-id> directory written by `fuzzkit run`"
        )
    from fuzzkit.campaign.state import read_state

    state = read_state(run_dir)  # bounded and strict, one-line errors
    events, bad = [], 0
    with events_path.open("rb") as handle:
        for raw in handle:
            if not raw.strip():
                continue
            try:
                event = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                bad += 1
                continue
            if isinstance(event, dict) and isinstance(event.get("type"), str):
                events.append(event)
            else:
                bad += 1
    events.extend(_unlogged_claims(run_dir, events))
    events.sort(key=_event_time)
    return RunData(
        run_dir,
        state,
        events,
        bad,
        _optional_json(run_dir / "coverage.json"),
        _optional_json(run_dir / "reach.json"),
    )


def _optional_json(path: Path) -> dict[str, Any]:
    """A JSON object written by the run beside its events, or {} (missing or unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _unlogged_claims(run_dir: Path, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Finding events in ``claims/*.json`` whose line never reached events.jsonl (a kill between
    claiming a signature and appending its event); the campaign reconciles them on resume."""
    logged = {_finding_key(e) for e in events if e.get("type") == "finding"}
    found = []
    for path in sorted((run_dir / "claims").glob("*.json")):
        try:
            event = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if (
            isinstance(event, dict)
            and event.get("type") == "finding"
            and _finding_key(event) not in logged
        ):
            logged.add(_finding_key(event))
            found.append(event)
    return found


def _finding_key(event: dict[str, Any]) -> tuple[str, str, str]:
    return (str(event.get("target")), _impl(event), str(event.get("signature")))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# ---------------------------------------------------------------------------------------------
# Aggregation


@dataclasses.dataclass
class PairStats:
    target: str
    impl: str
    cases: int = 0
    elapsed: float = 0.0  # worker-seconds spent on this pair
    workers: set = dataclasses.field(default_factory=set)
    findings: int = 0
    #: cases and seconds to the pair's first failure (:func:`fuzzkit.report.first_failure`)
    first_failure: dict[str, Any] | None = None


def _num(value: Any, default: float = 0.0) -> float:
    return (
        float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default
    )


def _impl(event: dict[str, Any]) -> str:
    return str(event.get("impl", event.get("implementation")))


def progress_series(
    events: Iterable[dict[str, Any]],
) -> dict[tuple, list[tuple[float, int, float]]]:
    """(worker, target, impl, segment) -> [(t, cases, elapsed), ...] in time order."""
    series: dict[tuple, list[tuple[float, int, float]]] = {}
    segment: dict[tuple, int] = {}
    for e in events:
        if e.get("type") != "progress":
            continue
        key = (e.get("worker"), str(e.get("target")), _impl(e))
        cases, t, elapsed = int(_num(e.get("cases"))), _num(e.get("t")), _num(e.get("elapsed"))
        seg = segment.setdefault(key, 0)
        points = series.get((*key, seg))
        if points and cases < points[-1][1]:
            seg = segment[key] = seg + 1
            points = None
        if points is None:
            points = series[(*key, seg)] = []
        points.append((t, cases, elapsed))
    return series


def unique_findings(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """First event of each (target, impl, signature), with ``seen`` and ``workers`` added."""
    first: dict[tuple, dict[str, Any]] = {}
    later: list[dict[str, Any]] = []  # "duplicate" events: a signature already claimed
    for e in events:
        if e.get("type") == "duplicate":
            later.append(e)
        if e.get("type") != "finding":
            continue
        key = _finding_key(e)
        if key not in first:
            first[key] = {**e, "seen": 0, "workers": []}
        first[key]["seen"] += 1
        if e.get("worker") not in first[key]["workers"]:
            first[key]["workers"].append(e.get("worker"))
    for e in later:
        key = _finding_key(e)
        if key not in first:
            continue
        first[key]["seen"] += 1
        if e.get("worker") not in first[key]["workers"]:
            first[key]["workers"].append(e.get("worker"))
    return list(first.values())


def pair_stats(run: RunData, findings: list[dict[str, Any]]) -> list[PairStats]:
    stats: dict[tuple[str, str], PairStats] = {}
    for pair in run.state.get("plan") or []:
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            stats.setdefault((str(pair[0]), str(pair[1])), PairStats(str(pair[0]), str(pair[1])))
    for (worker, target, impl, _seg), points in progress_series(run.events).items():
        s = stats.setdefault((target, impl), PairStats(target, impl))
        s.cases += points[-1][1]
        s.elapsed += points[-1][2]
        s.workers.add(worker)
    for f in findings:
        key = (str(f.get("target")), _impl(f))
        stats.setdefault(key, PairStats(*key)).findings += 1
    for s in stats.values():
        s.first_failure = first_failure(
            f for f in findings if (str(f.get("target")), _impl(f)) == (s.target, s.impl)
        )
    return list(stats.values())


# ---------------------------------------------------------------------------------------------
# Plots


def render_plots(run: RunData, findings: list[dict[str, Any]]) -> dict[str, bytes] | None:
    """PNG bytes of each plot in :data:`PLOTS`, or None when matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure  # Figure + savefig uses Agg; no pyplot state
    except ImportError:
        return None
    t0 = run.started
    series = progress_series(run.events)
    span = max(
        [p[0] - t0 for pts in series.values() for p in pts]
        + [_num(f.get("t")) - t0 for f in findings]
        + [_num(run.state.get("elapsed"))]
        + [1.0]
    )
    scale, unit = (60.0, "minutes") if span > 1200 else (1.0, "seconds")
    xlabel = f"{unit} since the run started"

    def figure(title: str, ylabel: str) -> tuple[Any, Any]:
        fig = Figure(figsize=(8, 3.6), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.set_xlim(0, span / scale * 1.02)
        return fig, ax

    def png(fig: Any) -> bytes:
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()

    out: dict[str, bytes] = {}

    # 1. cumulative unique findings, one marker per finding coloured by kind
    fig, ax = figure("Findings over time (unique signatures per target/impl)", "findings")
    times = sorted((_num(f.get("t")) - t0) / scale for f in findings)
    ax.step(
        [0.0, *times, span / scale],
        [0, *range(1, len(times) + 1), len(times)],
        where="post",
        color="0.35",
    )
    kinds: dict[str, list[tuple[float, int]]] = {}
    for rank, f in enumerate(sorted(findings, key=lambda f: _num(f.get("t"))), 1):
        kinds.setdefault(str(f.get("kind")), []).append(((_num(f.get("t")) - t0) / scale, rank))
    for kind, pts in sorted(kinds.items()):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", label=kind)
    ax.set_ylim(0, max(1, len(times)) * 1.15)
    ax.yaxis.get_major_locator().set_params(integer=True)
    if kinds:
        ax.legend(loc="upper left", fontsize="small", title="kind")
    else:
        ax.text(0.5, 0.5, "no findings", transform=ax.transAxes, ha="center", color="gray")
    out["findings_over_time"] = png(fig)

    # 2. cumulative cases: the total over all workers, and each worker's own
    fig, ax = figure("Cases over time", "cases (cumulative)")
    per_worker = _cumulative_by_worker(series, t0, scale)
    if per_worker:
        all_times = sorted({t for pts in per_worker.values() for t, _ in pts})
        total: list[float] = [
            sum(_value_at(pts, t) for pts in per_worker.values()) for t in all_times
        ]
        if len(per_worker) <= MAX_LEGEND_WORKERS:  # the sum of the lines drawn for each worker
            drawn = [
                np.interp(all_times, [0.0, *[p[0] for p in pts]], [0, *[p[1] for p in pts]])
                for pts in per_worker.values()
            ]
            total = [float(v) for v in np.sum(drawn, axis=0)]
        ax.plot([0.0, *all_times], [0, *total], color="black", lw=2, label="all workers")
        if 1 < len(per_worker) <= MAX_LEGEND_WORKERS:
            for worker, pts in _by_worker(per_worker):
                ax.plot(
                    [0.0, *[p[0] for p in pts]],
                    [0, *[p[1] for p in pts]],
                    lw=1,
                    alpha=0.8,
                    label=f"worker {worker}",
                )
        _legend(ax, len(per_worker) + 1)
        ax.set_ylim(bottom=0)
    else:
        ax.text(
            0.5, 0.5, "no progress events yet", transform=ax.transAxes, ha="center", color="gray"
        )
    out["cases_over_time"] = png(fig)

    # 3. cases per second per worker: rate between consecutive progress events
    window = max(5.0, span / 100)
    fig, ax = figure(f"Cases per second per worker (over the last {window:.0f} s)", "cases / s")
    rates = _rates_by_worker(series, t0, scale, window)
    many = len(rates) > MAX_LEGEND_WORKERS
    for worker, pts in _by_worker(rates):
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            lw=0.8 if many else 1.2,
            alpha=0.6 if many else 0.9,
            marker="." if len(pts) <= 120 else None,
            ms=4,
            label=None if many else f"worker {worker}",
        )
    if many:
        ax.set_title(f"{ax.get_title()}, {len(rates)} workers")
    if rates:
        _legend(ax, 0 if many else len(rates))
        ax.set_ylim(0, max(r for pts in rates.values() for _, r in pts) * 1.25 or 1.0)
    else:
        ax.text(
            0.5, 0.5, "no progress events yet", transform=ax.transAxes, ha="center", color="gray"
        )
    out["cases_per_second_per_worker"] = png(fig)

    # 4. branch coverage over time, per target/impl (``--coverage`` runs only)
    if run.coverage:
        fig = Figure(figsize=(8, 3.6), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        ax.set_title("Branch coverage of the code under test over time")
        ax.set_xlabel("seconds since the pair started")
        ax.set_ylabel("branches covered (%)")
        ax.grid(True, alpha=0.3)
        for label, cov in sorted(run.coverage.items()):
            points = [p for p in cov.get("timeline", []) if isinstance(p, list) and len(p) == 2]
            if points:
                ax.plot(
                    [0.0, *[p[0] for p in points]],
                    [0.0, *[p[1] for p in points]],
                    marker="." if len(points) < 60 else None,
                    label=label,
                )
        ax.set_ylim(0, 101)
        _legend(ax, len(run.coverage))
        out["coverage_over_time"] = png(fig)
    return out


def _by_worker(data: dict[Any, Any]) -> list[tuple[Any, Any]]:
    return sorted(data.items(), key=lambda kv: (not isinstance(kv[0], int), str(kv[0]).zfill(9)))


def _legend(ax: Any, entries: int) -> None:
    """Inside the axes for a few lines; beside them (never over the data) for more."""
    if entries == 0:
        return
    if entries <= 3:
        ax.legend(loc="best", fontsize="small")
    else:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", borderaxespad=0.0)


def _cumulative_by_worker(
    series: dict[tuple, list], t0: float, scale: float
) -> dict[Any, list[tuple[float, int]]]:
    """worker -> [(x, cases so far over all its pairs and segments)] at each of its events."""
    by_worker: dict[Any, list[tuple[float, tuple, int]]] = {}
    for key, points in series.items():
        for t, cases, _ in points:
            by_worker.setdefault(key[0], []).append(((t - t0) / scale, key[1:], cases))
    out = {}
    for worker, items in by_worker.items():
        latest: dict[tuple, int] = {}
        pts = []
        for x, stream, cases in sorted(items, key=lambda i: i[0]):
            latest[stream] = cases
            pts.append((x, sum(latest.values())))
        out[worker] = pts
    return out


def _value_at(points: list[tuple[float, int]], x: float) -> int:
    """The last value at or before ``x`` (0 before the first point); points sorted by x."""
    i = bisect.bisect_right(points, (x, math.inf))
    return points[i - 1][1] if i else 0


def _rates_by_worker(
    series: dict[tuple, list], t0: float, scale: float, window: float
) -> dict[Any, list[tuple[float, float]]]:
    """worker -> [(x, cases/s)]: each progress event's rate over the trailing ``window`` seconds
    of its stream (1 s heartbeats of slow targets would otherwise jump between 0 and a few)."""
    out: dict[Any, list[tuple[float, float]]] = {}
    for key, points in series.items():
        start = 0
        for i, (t, cases, elapsed) in enumerate(points):
            while start < i - 1 and points[start + 1][2] <= elapsed - window:
                start += 1
            if i == 0:
                rate = cases / elapsed if elapsed > 0 else None
            else:
                _, c0, e0 = points[start]
                rate = (cases - c0) / (elapsed - e0) if elapsed > e0 else None
            if rate is not None:
                out.setdefault(key[0], []).append(((t - t0) / scale, rate))
    for pts in out.values():
        pts.sort()
    return out


# ---------------------------------------------------------------------------------------------
# Case files


def resolve_case_path(run: RunData, path_text: Any) -> Path | None:
    """Where a finding's case file is: as written, else relative to the run dir or its parents."""
    if not isinstance(path_text, str) or not path_text:
        return None
    path = Path(path_text)
    candidates = (
        [path]
        if path.is_absolute()
        else [path, run.run_dir / path, run.run_dir.parent / path, run.run_dir.parent.parent / path]
    )
    candidates.append(run.run_dir / "findings" / path.name)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return None


def _case_block(run: RunData, finding: dict[str, Any]) -> str:
    from fuzzkit.case import load
    from fuzzkit.errors import CaseFileError

    path_text = finding.get("case")
    path = resolve_case_path(run, path_text)
    if path is None:
        return f'<p class="bad">case file not found: <code>{_e(path_text)}</code></p>'
    shown = path_text if Path(str(path_text)) == path else str(path)
    mutants = finding.get("mutants") or ()
    replay = replay_command(str(shown), "", mutants)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f'<p class="bad">cannot read {_e(path)}: {_e(_one_line(exc))}</p>'
    note = ""
    try:
        implementation = load(path).implementation
    except CaseFileError as exc:
        note = f'<p class="bad">not a valid case file: {_e(_one_line(exc))}</p>'
    else:
        # outside code runs only when the user names it, and only where it imports
        replay = replay_hint(str(shown), implementation, mutants)
    try:
        pretty = json.dumps(json.loads(text), indent=1, sort_keys=True)
    except json.JSONDecodeError:
        pretty = text
    if len(pretty) > MAX_INLINE_CASE_CHARS:
        pretty = (
            pretty[:MAX_INLINE_CASE_CHARS]
            + f"\n... ({len(pretty) - MAX_INLINE_CASE_CHARS} more characters in the file)"
        )
    return (
        f'<p>case: <code class="path">{_e(shown)}</code></p>'
        f'<p>replay: <code class="cmd">{_e(replay)}</code></p>{note}'
        f"<details><summary>case file ({len(text)} bytes)</summary>"
        f"<pre>{_e(pretty)}</pre></details>"
    )


# ---------------------------------------------------------------------------------------------
# The page


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _fmt_time(t: Any) -> str:
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        return "-"
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """Cells are already escaped HTML."""
    thead = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{thead}</tr></thead><tbody>{body}</tbody></table>'


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:70em;
color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;border-bottom:1px solid #ddd;
margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0}th,td{border:1px solid #ccc;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#f3f3f3}span.num{display:block;text-align:right}
table.meta th{width:9em}tr.total td{font-weight:bold;background:#fafafa}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:.6em;overflow:auto;max-height:30em}
.finding{border:1px solid #e0b4b4;border-left:4px solid #c0392b;padding:.2em 1em;margin:1em 0;
background:#fffafa}.finding h3{font-size:1em;margin:.5em 0}.msg{white-space:pre-wrap}
.status-done{color:#1e7e34}.status-running{color:#b8860b}.status-interrupted{color:#c0392b}
.bad{color:#c0392b}.note{color:#666}img{max-width:100%;border:1px solid #eee;margin:.4em 0}
"""


def render_html(run: RunData, plots: dict[str, bytes] | None) -> str:
    state = run.state
    findings = unique_findings(run.events)
    stats = pair_stats(run, findings)
    run_id = state.get("run_id") or run.run_dir.name
    status = str(state.get("status", "unknown"))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>fuzzkit campaign {_e(run_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>fuzzkit campaign <code>{_e(run_id)}</code></h1>",
        f'<p>status: <strong class="status-{_e(status)}">{_e(status)}</strong> &middot; '
        f"{len(findings)} finding{'s' if len(findings) != 1 else ''}</p>",
    ]
    plan = state.get("plan") or []
    meta = [
        ("started", _e(_fmt_time(state.get("started")))),
        ("elapsed", _e(f"{_num(state.get('elapsed')):.1f} s")),
        ("budget", _e(f"{_num(state.get('budget')):g} s")),
        ("seed", _e(state.get("seed"))),
        ("engine", _e(state.get("engine"))),
        ("backend", _e(state.get("backend"))),
        ("workers", _e(state.get("workers"))),
        ("isolate", _e(state.get("isolate"))),
        ("corpus", f"<code>{_e(state.get('corpus'))}</code>"),
        (
            "plan",
            _e(
                ", ".join("/".join(map(str, p)) for p in plan if isinstance(p, (list, tuple)))
                or "-"
            ),
        ),
        (
            "report",
            _e(
                f"generated {_fmt_time(_dt.datetime.now(_dt.timezone.utc).timestamp())} "
                f"by fuzzkit {__version__}"
            ),
        ),
    ]
    parts.append(
        '<table class="meta"><tbody>'
        + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in meta)
        + "</tbody></table>"
    )
    if run.bad_lines:
        parts.append(
            f'<p class="note">{run.bad_lines} unreadable line(s) in events.jsonl were skipped.</p>'
        )

    # summary table
    parts.append('<h2 id="summary">Summary</h2>')
    rows = []
    for s in stats:
        rate = s.cases / s.elapsed if s.elapsed > 0 else 0.0
        rows.append(
            [
                _e(s.target),
                _e(s.impl),
                _num_cell(s.cases),
                _num_cell(f"{rate:.1f}"),
                _num_cell(s.findings),
                _num_cell(f"{s.elapsed:.1f}"),
                _e(", ".join(str(w) for w in sorted(s.workers, key=str)) or "-"),
                _e(first_failure_text(s.first_failure)),
            ]
        )
    total_cases = sum(s.cases for s in stats)
    wall = _num(state.get("elapsed"))
    if not wall:
        times = [_num(e.get("t")) for e in run.events]
        wall = max(times) - run.started if times else 0.0
    rows.append(
        [
            "total",
            "",
            _num_cell(total_cases),
            _num_cell(f"{total_cases / wall:.1f}" if wall > 0 else "0.0"),
            _num_cell(len(findings)),
            _num_cell(f"{wall:.1f} (wall)"),
            "",
            "",
        ]
    )
    table = _table(
        [
            "target",
            "impl",
            "cases",
            "cases/s",
            "findings",
            "elapsed (worker-s)",
            "workers",
            "first failure",
        ],
        rows,
        "summary",
    )
    parts.append(table.replace("<tr><td>total</td>", '<tr class="total"><td>total</td>'))
    parts.append(
        '<p class="note">cases/s of a row: its cases over the worker-seconds spent '
        "on it; of the total: all cases over the run's wall-clock time.  first failure: "
        "the generated cases (the failing one included) and seconds its worker took to the "
        "pair's first failure.</p>"
    )

    # plots
    parts.append('<h2 id="plots">Plots</h2>')
    if plots is None:
        parts.append(f'<p class="note">{_e(MATPLOTLIB_MISSING)}</p>')
    else:
        for stem, title in PLOTS + (("coverage_over_time", "Coverage over time"),):
            if stem not in plots:
                continue
            data = base64.b64encode(plots[stem]).decode("ascii")
            parts.append(
                f'<figure><img alt="{_e(title)}" title="{_e(title)}" '
                f'src="data:image/png;base64,{data}"></figure>'
            )
    parts.extend(_coverage_section(run.coverage))
    parts.extend(_reach_section(run.reach))

    # findings
    parts.append(f'<h2 id="findings">Findings ({len(findings)})</h2>')
    if not findings:
        parts.append("<p>No findings.</p>")
    for n, f in enumerate(findings, 1):
        seen = (
            f" &middot; reported {f['seen']} times by workers "
            f"{_e(', '.join(map(str, f['workers'])))}"
            if f["seen"] > 1
            else ""
        )
        parts.append(
            f'<div class="finding" id="finding-{n}"><h3>{n}. <code>{_e(f.get("signature"))}'
            f"</code> &middot; {_e(f.get('kind'))}</h3>"
            f"<p>{_e(f.get('target'))} / {_e(_impl(f))} &middot; worker "
            f"{_e(f.get('worker'))} &middot; at {_e(_fmt_time(f.get('t')))} "
            f"(+{_num(f.get('t')) - run.started:.1f} s){_found_after(f)}{seen}</p>"
            f'<p class="msg">{_e(f.get("message"))}</p>{_case_block(run, f)}</div>'
        )

    # other signatures a run saw besides the one it kept per target/impl
    others: dict[tuple[str, str, str], int] = {}
    for e in run.events:
        if e.get("type") == "other_signature":
            key = _finding_key(e)
            others[key] = others.get(key, 0) + int(_num(e.get("count"), 1))
    if others:
        parts.append('<h2 id="other-signatures">Other signatures seen</h2>')
        parts.append(
            _table(
                ["target", "impl", "signature", "times"],
                [
                    [_e(t), _e(i), f"<code>{_e(sig)}</code>", _num_cell(n)]
                    for (t, i, sig), n in sorted(others.items())
                ],
            )
        )

    # worker incidents
    incidents = [e for e in run.events if e.get("type") in ("worker_hung", "worker_replaced")]
    starts = sum(e.get("type") == "worker_start" for e in run.events)
    exits = sum(e.get("type") == "worker_exit" for e in run.events)
    parts.append('<h2 id="workers">Workers</h2>')
    parts.append(f"<p>{starts} worker start(s), {exits} exit(s), {len(incidents)} incident(s).</p>")
    if incidents:
        rows = []
        for e in incidents:
            extra = {k: v for k, v in e.items() if k not in ("t", "worker", "type")}
            rows.append(
                [
                    _e(_fmt_time(e.get("t"))),
                    _e(e.get("worker")),
                    _e(e.get("type")),
                    f"<code>{_e(json.dumps(extra, sort_keys=True, default=str))}</code>",
                ]
            )
        parts.append(_table(["time", "worker", "event", "details"], rows))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _coverage_section(coverage: dict[str, Any]) -> list[str]:
    """Branch coverage per pair, the never-taken branches and the exclusions with reasons."""
    if not coverage:
        return []
    parts = ['<h2 id="coverage">Coverage of the code under test</h2>']
    rows = []
    for label, c in sorted(coverage.items()):
        rows.append(
            [
                _e(label),
                _num_cell(f"{_num(c.get('branch_percent')):.1f}"),
                _num_cell(f"{c.get('covered_branches', 0)}/{c.get('branches', 0)}"),
                _num_cell(f"{_num(c.get('line_percent')):.1f}"),
                _num_cell(len(c.get("missing_branches", []))),
                _num_cell(len(c.get("excluded", []))),
            ]
        )
    parts.append(
        _table(["target/impl", "branch %", "branches", "line %", "never taken", "excluded"], rows)
    )
    for label, c in sorted(coverage.items()):
        missing = c.get("missing_branches", [])
        excluded = c.get("excluded", [])
        if missing:
            parts.append(
                f"<details><summary>{_e(label)}: {len(missing)} branch(es) never "
                "taken</summary><pre>"
                + _e("\n".join(map(str, missing[:2000])))
                + "</pre></details>"
            )
        if excluded:
            lines = [
                f"{e.get('file')}:{e.get('line')} (no {e.get('kind')}): "
                f"{e.get('reason') or 'NO REASON GIVEN'}"
                for e in excluded
            ]
            parts.append(
                f"<details><summary>{_e(label)}: {len(excluded)} exclusion(s)"
                "</summary><pre>" + _e("\n".join(lines)) + "</pre></details>"
            )
    return parts


def _reach_section(reach: dict[str, Any]) -> list[str]:
    """Operations (and their ordered pairs) and threshold boundaries reached, per pair."""
    if not reach:
        return []
    parts = ['<h2 id="reach">Reach</h2>']
    for label, r in sorted(reach.items()):
        thresholds = r.get("thresholds") or []
        operations = (r.get("operations") or {}).get("operations") or {}
        pairs = (r.get("operations") or {}).get("pairs") or {}
        if thresholds:
            rows = [
                [
                    _e(f"{t.get('size')}={t.get('value')}"),
                    _e(t.get("what")),
                    _e(", ".join(f"{k}: {v}" for k, v in (t.get("seen") or {}).items())),
                    _num_cell(t.get("above", 0)),
                    _e("yes" if t.get("crossed") else "NO"),
                ]
                for t in thresholds
            ]
            parts.append(f"<h3>{_e(label)}: thresholds</h3>")
            parts.append(
                _table(
                    ["threshold", "what", "boundary sizes seen (cases)", "above 2t+1", "crossed"],
                    rows,
                )
            )
        if operations:
            parts.append(f"<h3>{_e(label)}: operations</h3>")
            parts.append(
                _table(
                    ["operation", "count"],
                    [[f"<code>{_e(k)}</code>", _num_cell(v)] for k, v in operations.items()],
                )
            )
            parts.append(
                f"<details><summary>{len(pairs)} ordered pairs</summary><pre>"
                + _e("\n".join(f"{k}: {v}" for k, v in pairs.items()))
                + "</pre>"
                "</details>"
            )
    return parts


def _found_after(finding: dict[str, Any]) -> str:
    """`` · first failed after 5 cases, 0.12 s`` for a finding that records it."""
    first = first_failure([finding])
    return f" &middot; first failed after {_e(first_failure_text(first))}" if first else ""


def _num_cell(value: Any) -> str:
    return f'<span class="num">{_e(value)}</span>'


def write_html(run_dir: os.PathLike[str] | str) -> Path:
    """(Re)write ``run_dir/index.html`` and ``run_dir/plots/*.png``; return the page's path."""
    run = load_run(run_dir)
    findings = unique_findings(run.events)
    plots = render_plots(run, findings)
    if plots is not None:
        plot_dir = run.run_dir / "plots"
        plot_dir.mkdir(exist_ok=True)
        for stem, data in plots.items():
            atomic_write_bytes(plot_dir / f"{stem}.png", data)
    out = run.run_dir / "index.html"
    atomic_write_text(
        out, render_html(run, plots).encode("ascii", "xmlcharrefreplace").decode("ascii")
    )
    return out
