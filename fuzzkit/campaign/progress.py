"""Campaign progress: a live table (rich), quiet (final table only) or JSON lines on stdout."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Sequence

from fuzzkit.campaign.model import Event


class Stats:
    """Everything the coordinator knows, folded from events."""

    def __init__(self, plan: Sequence[tuple[str, str]]) -> None:
        self.plan = [tuple(p) for p in plan]
        self.progress: dict[tuple[int, str, str], tuple[int, float]] = {}
        self.findings: dict[tuple[str, str, str], Event] = {}
        self.other: dict[tuple[str, str], dict[str, int]] = {}
        self.exited: set[int] = set()
        self.workers: set[int] = set()
        #: (target, impl, signature) -> ``found`` event of a failure not (yet) final
        self.pending: dict[tuple[str, str, str], Event] = {}
        #: (target, impl) -> the ``item_done`` events of its workers
        self.done: dict[tuple[str, str], list[Event]] = {}
        #: (worker, error) of workers that stopped on an internal error
        self.errors: list[tuple[int, str]] = []
        self.interrupted: set[int] = set()
        #: (target, impl) -> (share, elapsed) of its latest progress event
        self.shares: dict[tuple[str, str], tuple[float, float]] = {}
        #: (target, impl) -> summed operation / pair counts and threshold boundary counts
        self.reach: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, event: Event) -> Event | None:
        """Fold one event in; returns it when it is a new (deduplicated) finding."""
        kind, wid = event.get("type"), event.get("worker", -1)
        if kind == "progress":
            key = (wid, event["target"], event["impl"])
            self.progress[key] = (int(event.get("cases", 0)), float(event.get("elapsed", 0.0)))
            self.shares[(event["target"], event["impl"])] = (
                float(event.get("share") or 0.0),
                float(event.get("elapsed", 0.0)),
            )
        elif kind == "finding":
            key3 = (event["target"], event["impl"], event["signature"])
            self.pending.pop(key3, None)
            if key3 not in self.findings:
                self.findings[key3] = event
                return event
        elif kind == "found":
            key3 = (event["target"], event["impl"], event["signature"])
            if key3 not in self.findings:
                self.pending[key3] = event
        elif kind == "item_done":
            self.done.setdefault((event["target"], event["impl"]), []).append(event)
        elif kind == "other_signature":
            slot = self.other.setdefault((event["target"], event["impl"]), {})
            slot[event["signature"]] = slot.get(event["signature"], 0) + int(event["count"])
        elif kind == "reach":
            self._add_reach((event["target"], event["impl"]), event)
        elif kind == "worker_start":
            self.workers.add(wid)
        elif kind in ("worker_exit", "worker_hung"):
            self.exited.add(wid)
            if event.get("status") == "error":
                self.errors.append((wid, str(event.get("error", "unknown error"))))
            elif event.get("status") == "interrupted":
                self.interrupted.add(wid)
        return None

    def _add_reach(self, key: tuple[str, str], event: Event) -> None:
        """Sum one worker's operation and threshold counts into the pair's."""
        slot = self.reach.setdefault(
            key, {"operations": {"cases": 0, "operations": {}, "pairs": {}}, "thresholds": {}}
        )
        ops = event.get("operations") or {}
        total = slot["operations"]
        total["cases"] += int(ops.get("cases", 0))
        for group in ("operations", "pairs"):
            for name, n in (ops.get(group) or {}).items():
                total[group][name] = total[group].get(name, 0) + int(n)
        for t in event.get("reach") or []:
            name = f"{t.get('size')}={t.get('value')}"
            row = slot["thresholds"].setdefault(
                name, {**t, "seen": {}, "above": 0, "at_double": 0, "cases": 0}
            )
            for value, n in (t.get("seen") or {}).items():
                row["seen"][value] = row["seen"].get(value, 0) + int(n)
            for field in ("above", "at_double", "cases"):
                row[field] += int(t.get(field, 0))
            row["crossed"] = bool(row.get("crossed")) or bool(t.get("crossed"))

    def reach_of(self, target: str, impl: str) -> dict[str, Any]:
        slot = self.reach.get((target, impl))
        if not slot:
            return {}
        return {
            "operations": slot["operations"] if slot["operations"]["cases"] else {},
            "thresholds": list(slot["thresholds"].values()),
        }

    def items(self) -> list[tuple[str, str]]:
        seen = {(t, i) for _, t, i in self.progress} | {(t, i) for t, i, _ in self.findings}
        return sorted(seen)

    def row(self, target: str, impl: str) -> dict[str, Any]:
        cases, seconds, rate = 0, 0.0, 0.0
        for (wid, t, i), (n, el) in self.progress.items():
            if (t, i) != (target, impl):
                continue
            cases += n
            seconds += el
            if wid not in self.exited and el > 0:
                rate += n / el
        findings = [f for (t, i, _), f in self.findings.items() if (t, i) == (target, impl)]
        return {
            "target": target,
            "impl": impl,
            "cases": cases,
            "seconds": seconds,
            "cases_per_second": rate if rate else (cases / seconds if seconds else 0.0),
            "findings": findings,
            "share": self.shares.get((target, impl), (0.0, 0.0))[0],
            "item_elapsed": self.shares.get((target, impl), (0.0, 0.0))[1],
        }

    def totals(self) -> tuple[int, int]:
        return sum(n for n, _ in self.progress.values()), len(self.findings)


class Progress:
    """What a run shows while it runs, the same in every mode and backend: ``live`` (a rich
    table with a bar per item, redrawn four times a second), ``quiet`` (findings as they come,
    the summary table at the end) or ``jsonl`` (one JSON status line per second on stdout, for
    CI)."""

    def __init__(self, mode: str, budget: float) -> None:
        self.mode = mode
        self.budget = budget
        self.live: Any = None
        self.last = 0.0

    def start(self, run_dir: str) -> None:
        print(f"run: {run_dir}", file=sys.stderr, flush=True)
        if self.mode == "live":
            from rich.console import Console
            from rich.live import Live

            self.live = Live(
                self._table(None, 0.0),
                refresh_per_second=4,
                transient=False,
                console=Console(emoji=False),  # signatures such as mismatch:clamp:... are data
            )
            self.live.start()

    def finding(self, event: Event) -> None:
        if self.mode == "jsonl":
            print(json.dumps(event, sort_keys=True), flush=True)
            return
        from fuzzkit.replay_hint import replay_hint

        unshrunk = " (unshrunk)" if event.get("unshrunk") else ""
        line = (
            f"finding: {event['target']}/{event['impl']} {event['signature']}{unshrunk} "
            f"{event['case']}\n"
            f"  replay: {replay_hint(event['case'], event['impl'], event.get('mutants') or ())}"
        )
        if self.live is not None:
            from rich.text import Text

            self.live.console.print(Text(line))  # no markup: signatures are data
        else:
            print(line, file=sys.stderr, flush=True)

    def update(self, stats: Stats, elapsed: float, workers: int) -> None:
        now = time.monotonic()
        if self.mode == "live" and self.live is not None:
            if now - self.last >= 0.25:
                self.last = now
                self.live.update(self._table(stats, elapsed))
        elif self.mode == "jsonl" and now - self.last >= 1.0:
            self.last = now
            cases, found = stats.totals()
            print(
                json.dumps(
                    {
                        "t": time.time(),
                        "type": "status",
                        "elapsed": round(elapsed, 2),
                        "remaining": round(max(0.0, self.budget - elapsed), 2),
                        "workers": workers,
                        "cases": cases,
                        "findings": found,
                        "rows": [_plain(stats.row(t, i)) for t, i in stats.items()],
                    }
                ),
                flush=True,
            )

    def finish(
        self,
        stats: Stats,
        elapsed: float,
        rows: list[dict[str, Any]] | None = None,
        skipped: Sequence[dict[str, Any]] = (),
    ) -> None:
        if self.live is not None:
            self.live.update(self._table(stats, elapsed))
            self.live.stop()
            self.live = None
        if self.mode == "jsonl":
            cases, found = stats.totals()
            print(
                json.dumps(
                    {
                        "t": time.time(),
                        "type": "done",
                        "elapsed": round(elapsed, 2),
                        "cases": cases,
                        "findings": found,
                    }
                ),
                flush=True,
            )
            return
        from rich.console import Console

        console = Console(width=max(100, _terminal_width()), emoji=False)  # signatures are data
        console.print(summary_table(rows or [], skipped))
        coverage = {
            f"{r['target']}/{r['implementation']}": r["coverage"]
            for r in rows or []
            if r.get("coverage")
        }
        if coverage:
            console.print(coverage_table(coverage))

    def _table(self, stats: Stats | None, elapsed: float) -> Any:
        from rich.markup import escape
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        remaining = max(0.0, self.budget - elapsed)
        table = Table(title=f"elapsed {elapsed:.0f} s, {remaining:.0f} s left of {self.budget:.0f}")
        for column in ("target", "impl", "", "cases", "cases/s", "findings", "left"):
            table.add_column(column)
        for t, i in stats.items() if stats else []:
            row = stats.row(t, i)  # type: ignore[union-attr]
            found = "\n".join(f"[red]{escape(f['signature'])}[/]" for f in row["findings"])
            share = row.get("share") or 0.0
            done = min(row["item_elapsed"], share) if share else 0.0
            table.add_row(
                escape(t),
                escape(i),
                ProgressBar(total=share or 1.0, completed=done if share else 0.0, width=20),
                str(row["cases"]),
                f"{row['cases_per_second']:.1f}",
                found or "0",
                f"{max(0.0, share - row['item_elapsed']):.0f} s" if share else "-",
            )
        return table


#: Fewer cases than this in a clean run is said in the table: the pair was barely fuzzed (the
#: worker shares its budget so that every item gets this many when it can; see worker.py).
MIN_CASES = 30


def summary_table(rows: list[dict[str, Any]], skipped: Sequence[dict[str, Any]]) -> Any:
    """The table printed when a run ends (rendered from the summary's rows)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table()
    from fuzzkit.report import first_failure, first_failure_text

    for column in ("target", "impl", "cases", "cases/s", "first failure", "verdict"):
        table.add_column(column, overflow="fold")
    for row in rows:
        found = row.get("findings") or []
        if not found:
            verdict = "[green]clean[/]"
        else:
            verdict = "\n".join(_finding_cell(f, row) for f in found)
        if row.get("known_hits"):
            verdict += f"\n[dim]known: {sum(row['known_hits'].values())} case(s) skipped[/]"
        if row.get("unsupported_cases"):
            verdict += f"\n[dim]unsupported: {row['unsupported_cases']} case(s) not run[/]"
        if row.get("repeated_cases"):
            verdict += f"\n[dim]repeated: {row['repeated_cases']} case(s) not judged again[/]"
        if not found and row["cases"] < MIN_CASES:
            verdict += f"\n[yellow]only {row['cases']} case(s): give it a longer --budget[/]"
        table.add_row(
            escape(row["target"]),
            escape(row["implementation"]),
            str(row["cases"]),
            f"{row['cases_per_second']:.1f}",
            first_failure_text(first_failure(found)),  # cases (and seconds) to it
            verdict,
        )
    for s in skipped:
        table.add_row(
            escape(s["target"]),
            escape(s["implementation"]),
            "-",
            "-",
            "-",
            f"skipped: {escape(s['reason'])}",
        )
    return table


def _finding_cell(finding: dict[str, Any], row: dict[str, Any]) -> str:
    """Signature and case file of one finding (rich markup, data escaped), and its replay
    command where a bare ``fuzzkit replay CASE`` would not replay it: a finding of an outside
    implementation or one made under a mutant."""
    from rich.markup import escape

    from fuzzkit.replay_hint import outside_module, replay_hint

    cell = f"[red]{escape(finding['signature'])}[/]"
    cell += " [yellow](unshrunk)[/]" if finding.get("unshrunk") else ""
    cell += f"\n{escape(str(finding['case']))}"
    mutants = row.get("mutants") or ()
    if mutants or outside_module(row["implementation"]) is not None:
        cell += "\nreplay: " + escape(replay_hint(finding["case"], row["implementation"], mutants))
    return cell


def coverage_table(coverage: dict[str, Any]) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table()
    for column in ("target/impl", "branches", "branch %", "line %", "missed branches", "excluded"):
        table.add_column(column)
    for label, c in coverage.items():
        table.add_row(
            escape(label),  # an outside implementation's options are [bracketed]
            f"{c['covered_branches']}/{c['branches']}",
            f"{c['branch_percent']:.1f}",
            f"{c['line_percent']:.1f}",
            str(len(c["missing_branches"])),
            str(len(c["excluded"])),
        )
    return table


def _terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size((140, 24)).columns


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {
        **row,
        "cases_per_second": round(row["cases_per_second"], 2),
        "seconds": round(row["seconds"], 2),
        "findings": [f["signature"] for f in row["findings"]],
    }
