"""What a serving operator reads off a simulation: TTFT percentiles, goodput, prefix hit rate."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from fuzzkit.targets.scheduling.workload import SECOND, Request


def ttfts(output: Mapping[str, Any]) -> dict[int, int]:
    """Time to first token (ticks) of every request that got one, from the moment it was sent:
    its release, or for a session's first turn held by admission control, its arrival."""
    return {int(rid): rec["first_token"] - rec.get("arrived", rec["release"])
            for rid, rec in output["requests"].items() if "first_token" in rec}


def summary(output: Mapping[str, Any], requests: Sequence[Request], *,
            slo_ttft: int, block_size: int) -> dict[str, Any]:
    """TTFT p50/p90/p99 (seconds), goodput (requests meeting the TTFT SLO per second of the
    run), mean hit rate (cached prompt tokens / prompt tokens) and how many requests finished."""
    times = np.array(sorted(ttfts(output).values()), dtype=np.float64) / SECOND
    records = output["requests"]
    finished = [rec for rec in records.values() if "finish" in rec]
    span = max((rec["finish"] for rec in finished), default=0) / SECOND
    prompt_tokens = sum(r.prompt for r in requests)
    hit_tokens = sum(records[str(r.rid)].get("hit", 0) for r in requests)
    met = int(np.sum(times <= slo_ttft / SECOND)) if len(times) else 0

    def pct(q: float) -> float:
        return float(np.percentile(times, q)) if len(times) else float("nan")

    return {
        "requests": len(requests), "finished": len(finished),
        "ttft_p50": pct(50), "ttft_p90": pct(90), "ttft_p99": pct(99),
        "ttft_mean": float(times.mean()) if len(times) else float("nan"),
        "goodput": met / span if span else 0.0,
        "hit_rate": hit_tokens / prompt_tokens if prompt_tokens else 0.0,
    }


def goodput_over_time(output: Mapping[str, Any], *, slo_ttft: int, window: int) -> list[tuple[float, float]]:
    """(window start in seconds, requests per second whose first token came in the window within
    the SLO): the curve a surge plot shows."""
    good = sorted(rec["first_token"] for rec in output["requests"].values()
                  if "first_token" in rec
                  and rec["first_token"] - rec.get("arrived", rec["release"]) <= slo_ttft)
    if not good:
        return []
    end = max(rec.get("finish", 0) for rec in output["requests"].values())
    edges = np.arange(0, end + window, window)
    counts, _ = np.histogram(good, bins=edges)
    return [(float(e) / SECOND, c / (window / SECOND)) for e, c in zip(edges[:-1], counts)]


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A right-aligned rich table on stdout (the benchmarks' output)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for c in columns:
        table.add_column(c, justify="right")
    for row in rows:
        table.add_row(*row)
    Console(width=160).print(table)
