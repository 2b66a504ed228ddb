"""Cases per second of this tree against a git revision, pair by pair (issue 22, item 6).

    python benchmarks/throughput.py --baseline 9113970 [--budget 10] [--rounds 2]
        [--pairs quant/numpy,paged_kv/optimized] [--json OUT]

Why it is built this way:

* **Ratios within one run, interleaved.**  Absolute cases/s on a shared machine drift by tens of
  percent between minutes; a ratio of two runs made at different times measures the machine.
  So both trees are measured in the same run, alternating per pair (baseline, this, baseline,
  this, ... for ``--rounds`` rounds), and noise hits both sides alike; the table shows each
  tree's cases/s summed over rounds and the ratio this / baseline.
* **One process per tree.**  The baseline is a temporary ``git worktree`` of ``REV`` (removed at
  the end, also on an error or Ctrl-C).  The two trees cannot share a process: module names
  collide, and the package layout changed (``targets.quant`` at 9113970, ``fuzzkit.targets.quant``
  now), while the installed entry points and the editable finder point at the checkout.  Each
  tree gets its own long-lived worker (``_throughput_worker.py``, ``python -I``, ``cwd`` the
  tree, the editable finder removed, the tree root first on ``sys.path``) that imports and
  registers its own tree's targets explicitly.  Only one worker measures at a time.
* **The engine the CLI uses**: ``fuzzkit.engines.hypothesis.fuzz`` in-process, ``ci`` profile
  (no example database: nothing replayed), no shrinking, a fixed seed, one thread
  (``OMP_NUM_THREADS=1`` and friends).  A finding must not end a measurement early: the old
  engine stops at its first finding, so the worker calls ``fuzz`` again with the next seed
  until the pair's time is spent; cases/s is cases / elapsed either way, and a pair that found
  something is marked ``*``.  Findings are expected (known bugs) and not judged here.
* **CPU ratio**: the same ratio of cases per second of the fuzz loop's *CPU* time.  On a loaded
  machine a worker gets a varying part of a core, and the wall-clock ratio of a short run moves
  by 2x between two runs of the same code; the CPU ratio does not depend on what else runs.
  The acceptance figure stays the wall-clock ratio; the CPU ratio says whether a change is real.
* **Warm**: before a pair's first measurement each worker draws and judges one case of it
  untimed, so that imports, interpreter setup and Inductor's first compile (over 15 s) are not
  counted as fuzzing.
* **Generation share** (this tree only): the runner's per-case check (reference,
  implementation, oracle and properties) is wrapped with a ``time.process_time()`` timer via the
  engine's ``checker`` hook, and compared with the process CPU time of the whole ``fuzz`` loop:
  generation share = 1 - case CPU / loop CPU.  Everything outside the check -- Hypothesis
  drawing the inputs, and the engine's own per-case bookkeeping -- counts as generation, so the
  figure is an upper bound on the time spent drawing.
* **Repeats** (this tree only): generated cases equal to one judged earlier in the same run,
  which the engine counts apart and does not judge again (``fuzzkit.seen``), as a share of all
  generated cases.  They are not in ``cases``, so they never inflate the rate.

Figures are printed, never asserted.  Pairs default to every pair available in both trees,
except ``external`` backends (real libraries: vLLM, SGLang, PEFT, FAISS), which ``--pairs`` can
still name.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "_throughput_worker.py"
#: The pairs the issue's acceptance names (ratio >= 3.0 there).
HIGHLIGHT = ("paged_kv/optimized", "scheduling/optimized", "compiler/inductor")
SEED = 0
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


class Worker:
    """A measuring process for one tree, spoken to in JSON lines."""

    def __init__(self, label: str, root: Path) -> None:
        self.label = label
        self.log = tempfile.TemporaryFile(mode="w+")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env.update({name: "1" for name in THREAD_VARS})
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(WORKER), str(root)],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self._read()  # the "ready" line: imports done

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            tail = self.log.read()[-3000:]
            raise RuntimeError(f"{self.label} worker died:\n{tail}")
        return json.loads(line)

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()


def _available(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{p['target']}/{p['impl']}": p for p in listing["pairs"] if p["impl"] != "*"}


def _choose_pairs(
    base: dict[str, dict[str, Any]], this: dict[str, dict[str, Any]], wanted: list[str] | None
) -> tuple[list[str], list[str]]:
    chosen, skipped = [], []
    for pair in wanted or sorted(set(base) | set(this)):
        missing = [
            label for label, pairs in (("baseline", base), ("this", this)) if pair not in pairs
        ]
        if missing:
            skipped.append(f"{pair}: not in {' or '.join(missing)} tree")
            continue
        reasons = {base[pair]["unavailable"], this[pair]["unavailable"]} - {None}
        if reasons:
            skipped.append(f"{pair}: unavailable ({'; '.join(sorted(reasons))})")
        elif wanted is None and "external" in (base[pair]["backend"], this[pair]["backend"]):
            skipped.append(f"{pair}: external backend (name it in --pairs to measure it)")
        else:
            chosen.append(pair)
    return chosen, skipped


def _fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _table(rows: list[dict[str, Any]], out: TextIO) -> None:
    header = (
        "pair",
        "baseline cases/s",
        "this cases/s",
        "ratio",
        "CPU ratio",
        "gen share",
        "repeats",
    )
    lines = [header]
    for row in rows:
        lines.append(
            (
                row["pair"],
                _fmt_rate(row["baseline_rate"]) + (" *" if row["baseline_found"] else ""),
                _fmt_rate(row["this_rate"]) + (" *" if row["this_found"] else ""),
                "-" if row["ratio"] is None else f"{row['ratio']:.2f}",
                "-" if row["cpu_ratio"] is None else f"{row['cpu_ratio']:.2f}",
                "-" if row["gen_share"] is None else f"{100 * row['gen_share']:.0f} %",
                "-" if row["repeats"] is None else f"{100 * row['repeats']:.1f} %",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for n, line in enumerate(lines):
        cells = [line[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(line[1:], widths[1:])]
        print(" | ".join(cells), file=out)
        if n == 0:
            print("-+-".join("-" * w for w in widths), file=out)


def _sum(results: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in results if "error" not in r]
    seconds = sum(r["seconds"] for r in ok)
    loop = sum(r["loop_cpu"] for r in ok)
    return {
        "rate": sum(r["cases"] for r in ok) / seconds if seconds > 0 else None,
        "cpu_rate": sum(r["cases"] for r in ok) / loop if loop > 0 else None,
        "cases": sum(r["cases"] for r in ok),
        "seconds": seconds,
        "found": sorted({s for r in ok for s in r["found"]}),
        "gen_share": 1 - sum(r["case_cpu"] for r in ok) / loop if loop > 0 else None,
        "repeats": _repeat_share(ok),
        "errors": [r["error"] for r in results if "error" in r],
    }


def _repeat_share(results: list[dict[str, Any]]) -> float | None:
    """Repeated cases (equal to one judged earlier in the run, so not judged again) as a share
    of all generated ones; None for a tree whose engine does not count them."""
    if not results or any("repeats" not in r for r in results):
        return None
    repeats = sum(r["repeats"] for r in results)
    generated = repeats + sum(r["cases"] for r in results)
    return repeats / generated if generated else 0.0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    rev = _git("rev-parse", "--verify", f"{args.baseline}^{{commit}}")
    tmp = Path(tempfile.mkdtemp(prefix="fuzzkit-baseline-"))
    worktree = tmp / "tree"
    workers: list[Worker] = []
    added = False
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        _git("worktree", "add", "--detach", str(worktree), rev)
        added = True
        print(f"baseline {args.baseline} = {rev[:12]} in a temporary worktree {worktree}")
        base = Worker("baseline", worktree)
        workers.append(base)
        this = Worker("this", REPO)
        workers.append(this)
        wanted = [p.strip() for p in args.pairs.split(",") if p.strip()] if args.pairs else None
        listings = {w.label: w.ask(op="list") for w in workers}
        for label, listing in listings.items():
            if "error" in listing:
                raise RuntimeError(f"{label} worker: {listing['trace']}")
            print(f"{label}: fuzzkit from {listing['fuzzkit']}, targets from {listing['targets']}")
        pairs, skipped = _choose_pairs(
            _available(listings["baseline"]), _available(listings["this"]), wanted
        )
        total = len(pairs) * 2 * args.rounds * args.budget
        print(
            f"plan: {len(pairs)} pairs x 2 trees x {args.rounds} rounds x {args.budget:g} s "
            f"= about {total / 60:.1f} min, interleaved baseline/this per pair"
        )
        print("pairs: " + (", ".join(pairs) or "none"))
        for line in skipped:
            print(f"  skipped {line}")
        raw: dict[str, dict[str, list[dict[str, Any]]]] = {
            p: {"baseline": [], "this": []} for p in pairs
        }
        for round_no in range(args.rounds):
            for pair in pairs:
                target, impl = pair.split("/", 1)
                for worker in (base, this) if round_no % 2 == 0 else (this, base):
                    result = worker.ask(
                        op="run", target=target, impl=impl, budget=args.budget, seed=SEED
                    )
                    raw[pair][worker.label].append(result)
                    rate = (
                        f"{result['cases'] / result['seconds']:,.1f} cases/s"
                        if "error" not in result and result["seconds"] > 0
                        else result.get("error", "?")
                    )
                    print(f"  round {round_no + 1} {pair:<28} {worker.label:<8} {rate}", flush=True)
    finally:
        for worker in workers:
            worker.close()
        if added:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=False
            )
        subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
    rows = []
    for pair in pairs:
        b, t = _sum(raw[pair]["baseline"]), _sum(raw[pair]["this"])
        ratio = t["rate"] / b["rate"] if b["rate"] and t["rate"] is not None else None
        cpu_ratio = (
            t["cpu_rate"] / b["cpu_rate"] if b["cpu_rate"] and t["cpu_rate"] is not None else None
        )
        rows.append(
            {
                "pair": pair,
                "baseline_rate": b["rate"],
                "this_rate": t["rate"],
                "ratio": ratio,
                "cpu_ratio": cpu_ratio,
                "gen_share": t["gen_share"],
                "repeats": t["repeats"],
                "baseline_found": b["found"],
                "this_found": t["found"],
                "baseline": b,
                "this": t,
            }
        )
    return {
        "baseline": args.baseline,
        "revision": rev,
        "budget": args.budget,
        "rounds": args.rounds,
        "rows": rows,
        "skipped": skipped,
    }


def report(summary: dict[str, Any], out: TextIO = sys.stdout) -> None:
    rows = summary["rows"]
    print(file=out)
    _table(rows, out)
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    median = statistics.median(ratios) if ratios else None
    summary["median_ratio"] = median
    print(file=out)
    print(
        f"median ratio: {'-' if median is None else f'{median:.2f}'} over {len(ratios)} pairs",
        file=out,
    )
    cpu_ratios = [r["cpu_ratio"] for r in rows if r.get("cpu_ratio") is not None]
    cpu_median = statistics.median(cpu_ratios) if cpu_ratios else None
    summary["median_cpu_ratio"] = cpu_median
    if cpu_median is not None:
        print(f"median CPU ratio: {cpu_median:.2f} over {len(cpu_ratios)} pairs", file=out)
    by_pair = {r["pair"]: r for r in rows}
    for pair in HIGHLIGHT:
        row = by_pair.get(pair)
        value = "not measured" if row is None or row["ratio"] is None else f"{row['ratio']:.2f}"
        if row is not None and row.get("cpu_ratio") is not None:
            value += f" (CPU {row['cpu_ratio']:.2f})"
        print(f"{pair}: {value}", file=out)
    if any(r["baseline_found"] or r["this_found"] for r in rows):
        print("* the pair found something (the run went on with the next seed)", file=out)
    for row in rows:
        for side in ("baseline", "this"):
            for error in row[side]["errors"]:
                print(f"error {row['pair']} {side}: {error}", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="git revision to compare with")
    parser.add_argument(
        "--budget",
        type=float,
        default=10.0,
        help="seconds per pair, per tree, per round (default 10)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    parser.add_argument("--pairs", help="target/impl,... (default: all available in both trees)")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    for name in THREAD_VARS:
        os.environ.setdefault(name, "1")
    try:
        summary = measure(args)
    except KeyboardInterrupt:
        print("interrupted: nothing measured is reported (the temporary worktree is removed)")
        return 130
    report(summary)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
