"""Campaigns: many workers (local processes or Ray tasks) fuzzing one plan into one run directory.

``run_campaign`` is the coordinator behind ``fuzzkit run --workers N`` / ``--backend ray`` /
``--resume``.  Workers share the corpus and the Hypothesis database (``run_dir/db``) and report
through ``run_dir/events.jsonl``; the coordinator folds those events into progress, deduplicates
findings by (target, impl, signature), replaces hung or dead workers and keeps ``state.json``
current so that a killed campaign can be resumed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from fuzzkit.campaign.plan import assign, build_plan, source_modules, target_sources
from fuzzkit.campaign.progress import Progress, Stats
from fuzzkit.campaign.state import EventLog, EventReader, read_state, reconcile_claims, write_state
from fuzzkit.errors import UsageError

MAX_REPLACEMENTS = 32


@dataclasses.dataclass
class CampaignOptions:
    targets: Sequence[str] = ()
    all: bool = False
    impl: str | None = None
    budget: float = 60.0
    seed: int = 0
    profile: str = "campaign"
    report_dir: Path = Path("reports")
    corpus: Path | None = None
    case_timeout: float = 60.0
    workers: int = 1
    backend: str = "local"
    address: str | None = None
    num_gpus: float = 0
    num_cpus: int | None = None  # local Ray instance size (default: Ray's own)
    isolate: bool = False
    memory_mb: int | None = None
    engine: str = "hypothesis"
    progress: str = "quiet"
    resume: Path | None = None
    hang_timeout: float | None = None  # default max(30, 3 * case_timeout)
    heartbeat: float = 1.0
    known: Any = None  # fuzzkit.known.KnownSignatures: accepted signatures, never chased
    confirm: bool = True  # replay findings in a fresh process (state-dependent ones)
    max_cases: int | None = None  # per target x implementation and worker (libFuzzer's -runs)


@dataclasses.dataclass
class CampaignResult:
    run_dir: Path
    summary: Path
    findings: list[dict[str, Any]]
    cases: int
    elapsed: float
    status: str


def _trusted_plan(plan: Any, source: Path, allowed: str | None) -> list[tuple[str, str]]:
    """The (target, implementation) pairs of a state file, if they name only registered code.

    ``state.json`` lies on disk where anyone may edit it: an outside ``module:attr`` in it is
    imported by every worker, so it is accepted only when the user repeats it with ``--impl``."""
    from fuzzkit.registry import get_target, implementation_named_by_file

    if not isinstance(plan, list) or not plan:
        raise UsageError(f"{source}: 'plan' must be a non-empty list of [target, implementation]")
    pairs: list[tuple[str, str]] = []
    for item in plan:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not all(isinstance(x, str) and x for x in item)
        ):
            raise UsageError(
                f"{source}: plan entry {str(item)[:80]!r} is not [target, implementation]"
            )
        implementation_named_by_file(get_target(item[0]), item[1], str(source), allowed=allowed)
        pairs.append((item[0], item[1]))
    return pairs


#: Fields of a state file a resumed campaign reads, with what each must be.
_NUMBER = (int, float)
_STATE_FIELDS: dict[str, tuple[Any, Callable[[Any], bool]]] = {
    "budget": (_NUMBER, lambda v: 0 < v < 1e9),
    "elapsed": (_NUMBER, lambda v: 0 <= v < 1e9),
    "case_timeout": (_NUMBER, lambda v: 0 < v < 1e6),
    "seed": (int, lambda v: -(2**63) <= v < 2**64),
    "workers": (int, lambda v: 1 <= v <= 4096),
    "next_worker": (int, lambda v: 0 <= v < 2**31),
    "resumes": (int, lambda v: 0 <= v < 2**31),
    "backend": (str, lambda v: v in ("local", "ray")),
    "engine": (str, lambda v: v in ("hypothesis", "atheris")),
    "profile": (str, lambda v: v in ("ci", "campaign")),
    "isolate": (bool, lambda v: True),
    "memory_mb": ((int, type(None)), lambda v: v is None or 0 < v < 2**31),
    "corpus": (str, lambda v: 0 < len(v) < 4096),
    "skipped": (list, lambda v: len(v) < 4096),
    "known": (list, lambda v: len(v) < 100_000),
}


def _check_resumable(state: dict[str, Any], source: Path) -> None:
    """A state file to resume from names what the workers will do: every field it is read for
    has the type and range fuzzkit writes (a hand-edited file is one line, not a traceback)."""
    for key, (kinds, ok) in _STATE_FIELDS.items():
        if key not in state and key not in ("budget", "backend", "engine", "isolate", "corpus"):
            continue
        value = state.get(key)
        if (
            (isinstance(value, bool) and kinds is not bool)
            or not isinstance(value, kinds)
            or not ok(value)
        ):
            from fuzzkit.case import shown

            raise UsageError(
                f"{source}: {key!r} is {shown(value)}, not what fuzzkit writes; the "
                "state file was edited or corrupted"
            )


def run_campaign(opts: CampaignOptions) -> CampaignResult:
    from fuzzkit import corpus as corpus_mod
    from fuzzkit.report import new_run_dir

    if opts.resume is not None:
        run_dir = Path(opts.resume)
        if not (run_dir / "state.json").is_file():
            raise UsageError(f"{run_dir} is not a campaign run directory (no state.json)")
        state = read_state(run_dir)
        _check_resumable(state, run_dir / "state.json")
        state["resumes"] = int(state.get("resumes", 0)) + 1
        plan = _trusted_plan(state.get("plan"), run_dir / "state.json", opts.impl)
        skipped = state.get("skipped", [])
    else:
        if opts.workers < 1:
            raise UsageError("--workers must be at least 1")
        plan, skipped = build_plan(opts.targets, opts.all, opts.impl)
        run_dir = new_run_dir(Path(opts.report_dir), opts.seed)
        root = Path(opts.corpus or corpus_mod.default_root()).resolve()
        state = {
            "run_id": run_dir.name,
            "seed": opts.seed,
            "budget": opts.budget,
            "plan": [list(p) for p in plan],
            "workers": opts.workers,
            "backend": opts.backend,
            "engine": opts.engine,
            "isolate": opts.isolate,
            "memory_mb": opts.memory_mb,
            "corpus": str(root),
            "started": time.time(),
            "elapsed": 0.0,
            "status": "running",
            "resumes": 0,
            "profile": opts.profile,
            "case_timeout": opts.case_timeout,
            "skipped": skipped,
            "next_worker": 0,
            "address": opts.address,
            "num_gpus": opts.num_gpus,
            "known": opts.known.to_json() if opts.known is not None else [],
        }
        write_state(run_dir, state)
    run_dir = run_dir.resolve()
    state["status"] = "running"
    backend_name = state["backend"] if opts.resume is not None else opts.backend
    case_timeout = float(state.get("case_timeout", opts.case_timeout))
    hang_timeout = opts.hang_timeout or max(30.0, 3 * case_timeout)
    prior_elapsed = float(state.get("elapsed", 0.0))
    remaining = float(state["budget"]) - prior_elapsed

    reconcile_claims(run_dir)
    stats = Stats(plan)
    reader = EventReader(run_dir)
    events = reader.read()
    for event in events:
        stats.add(event)
    next_id = max(
        [int(state.get("next_worker", 0))] + [int(e.get("worker", -1)) + 1 for e in events]
    )
    # A pair with findings keeps fuzzing: found signatures are skipped, new ones still count.
    todo = list(plan)

    progress = Progress(opts.progress, float(state["budget"]))
    log = EventLog(run_dir, worker=-1)
    progress.start(str(run_dir))
    for event in stats.findings.values():
        progress.finding(event)
    session_start = time.monotonic()
    deadline = session_start + remaining
    handles: dict[int, tuple[Any, dict[str, Any]]] = {}
    backend: Any = None
    old_term = None
    status = "done"

    def elapsed() -> float:
        return prior_elapsed + time.monotonic() - session_start

    def save_state(st: str) -> None:
        state.update(
            elapsed=round(min(elapsed(), float(state["budget"])) if st == "done" else elapsed(), 3),
            status=st,
            next_worker=next_id,
        )
        write_state(run_dir, state)

    if threading_main():
        old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        save_state("running")
        if remaining > 0.5 and todo:
            backend = _backend(backend_name, state, opts)
            sources = target_sources(sorted({t for t, _ in plan}))
            common = {
                "run_dir": str(run_dir),
                "corpus": state["corpus"],
                "profile": state.get("profile", opts.profile),
                "case_timeout": case_timeout,
                "engine": state["engine"],
                "isolate": state["isolate"],
                "memory_mb": state.get("memory_mb"),
                "sources": sources,
                "preload": source_modules(sources),
                "sys_path": [p for p in sys.path if p],
                "cwd": os.getcwd(),
                "heartbeat": opts.heartbeat,
                "confirm": opts.confirm,
                "max_cases": opts.max_cases,
                "known": opts.known.to_json() if opts.known is not None else state.get("known", []),
            }
            last_seen: dict[int, float] = {}
            for items in assign(todo, int(state["workers"])):
                spec = dict(
                    common,
                    worker=next_id,
                    seed=int(state["seed"]) * 1000 + next_id,
                    items=[list(i) for i in items],
                    budget=remaining,
                )
                log.emit("worker_launch", worker=next_id, items=spec["items"])
                handles[next_id] = (backend.start(spec), spec)
                last_seen[next_id] = time.monotonic()
                next_id += 1
            save_state("running")
            replacements, last_state = 0, time.monotonic()
            hard_stop = deadline + 2 * hang_timeout + 30
            while handles:
                now = time.monotonic()
                for event in reader.read():
                    wid = event.get("worker", -1)
                    if wid in last_seen:
                        last_seen[wid] = now
                    new = stats.add(event)
                    if new is not None:
                        progress.finding(new)
                for wid, (handle, spec) in list(handles.items()):
                    silent = now - last_seen[wid]
                    dead = not backend.alive(handle)
                    hung = not dead and (silent > hang_timeout or now > hard_stop)
                    if not dead and not hung:
                        continue
                    if dead:
                        # the last events a worker wrote before exiting
                        for event in reader.read():
                            new = stats.add(event)
                            if new is not None:
                                progress.finding(new)
                        if wid in stats.exited:
                            del handles[wid]
                            continue
                        log.emit(
                            "worker_exit",
                            worker=wid,
                            status="died",
                            exitcode=backend.exitcode(handle),
                        )
                    else:
                        log.emit("worker_hung", worker=wid, silent_s=round(silent, 2))
                        backend.kill(handle)
                    stats.exited.add(wid)
                    del handles[wid]
                    left = deadline - now
                    started = wid in stats.workers  # one that cannot start would die again
                    if (
                        started
                        and left > 1.0
                        and replacements < MAX_REPLACEMENTS
                        and now < hard_stop
                    ):
                        replacements += 1
                        new_spec = dict(
                            spec,
                            worker=next_id,
                            budget=left,
                            seed=int(state["seed"]) * 1000 + next_id,
                        )
                        log.emit("worker_replaced", worker=next_id, replaces=wid)
                        handles[next_id] = (backend.start(new_spec), new_spec)
                        last_seen[next_id] = time.monotonic()
                        next_id += 1
                        save_state("running")
                if now - last_state >= 1.0:
                    last_state = now
                    save_state("running")
                progress.update(stats, elapsed(), len(handles))
                time.sleep(0.1)
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        for wid, (handle, _) in list(handles.items()):
            try:
                backend.kill(handle)
            except Exception:  # noqa: BLE001
                pass
            log.emit("worker_exit", worker=wid, status="killed")
        if backend is not None:
            backend.close()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        reconcile_claims(run_dir)
        for event in reader.read():
            new = stats.add(event)
            if new is not None:
                progress.finding(new)
        save_state(status)
        log.close()
        summary = _write_summary(run_dir, state, stats, skipped, status)
        progress.finish(stats, elapsed())
        write_html_if_available(run_dir)
    cases, _ = stats.totals()
    return CampaignResult(run_dir, summary, list(stats.findings.values()), cases, elapsed(), status)


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _backend(name: str, state: dict[str, Any], opts: CampaignOptions) -> Any:
    if name == "ray":
        from fuzzkit.campaign.ray_backend import RayBackend

        return RayBackend(
            address=opts.address or state.get("address"),
            num_gpus=opts.num_gpus or state.get("num_gpus") or 0,
            num_cpus=opts.num_cpus,
        )
    from fuzzkit.campaign.local import LocalBackend

    return LocalBackend()


def _write_summary(
    run_dir: Path,
    state: dict[str, Any],
    stats: Stats,
    skipped: list[dict[str, str]],
    status: str = "done",
) -> Path:
    from fuzzkit.report import write_report

    rows, findings = [], []
    by_item: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for event in stats.findings.values():
        by_item.setdefault((event["target"], event["impl"]), []).append(event)
    items = list(dict.fromkeys([tuple(p) for p in state["plan"]] + stats.items()))
    impl_names = {(t, i) for t, i in stats.items()}
    for t, spec in items:
        if (t, spec) not in impl_names and any(x == t for x, _ in impl_names) and ":" in spec:
            continue  # the resolved name of a module:attr implementation is listed instead
        row = stats.row(t, spec)
        found = by_item.get((t, spec), [])
        first = found[0] if found else None
        for event in found:
            try:
                findings.append(
                    (
                        event.get("case_id") or Path(event["case"]).stem,
                        Path(event["case"]).read_text(),
                    )
                )
            except OSError:
                pass
        rows.append(
            {
                "target": t,
                "implementation": spec,
                "seed": int(state["seed"]),
                "cases": row["cases"],
                "seconds": round(row["seconds"], 3),
                "cases_per_second": round(row["cases"] / row["seconds"], 2)
                if row["seconds"]
                else 0.0,
                "finding": None
                if first is None
                else {
                    "kind": first["kind"],
                    "signature": first["signature"],
                    "message": first["message"],
                    "case": first["case"],
                    "seconds_to_first_failure": first.get("seconds_to_first_failure"),
                },
                "findings": [
                    {"signature": e["signature"], "kind": e["kind"], "case": e["case"]}
                    for e in found
                ],
                "other_signatures": stats.other.get((t, spec), {}),
                "operations": stats.reach_of(t, spec).get("operations", {}),
                "reach": stats.reach_of(t, spec).get("thresholds", []),
            }
        )
    reach = {
        f"{r['target']}/{r['implementation']}": {
            "operations": r["operations"],
            "thresholds": r["reach"],
        }
        for r in rows
        if r["operations"] or r["reach"]
    }
    if reach:
        from fuzzkit.case import atomic_write_text

        atomic_write_text(
            run_dir / "reach.json", json.dumps(reach, indent=1, sort_keys=True) + "\n"
        )
    return write_report(
        run_dir.parent,
        run_dir.name,
        int(state["seed"]),
        float(state["budget"]),
        rows,
        skipped,
        findings,
        status=status,
    )


class RunRecorder:
    """``state.json`` + ``events.jsonl`` for the in-process run (``--workers 1``): the same run
    directory a campaign writes, so reports read both alike."""

    def __init__(
        self,
        run_dir: Path,
        *,
        seed: int,
        budget: float,
        plan: list[list[str]],
        corpus: Path,
        profile: str,
        case_timeout: float,
    ) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = run_dir
        self.start = time.monotonic()
        self.state = {
            "run_id": run_dir.name,
            "seed": seed,
            "budget": budget,
            "plan": plan,
            "workers": 1,
            "backend": "local",
            "engine": "hypothesis",
            "isolate": False,
            "memory_mb": None,
            "corpus": str(Path(corpus).resolve()),
            "started": time.time(),
            "elapsed": 0.0,
            "status": "running",
            "resumes": 0,
            "profile": profile,
            "case_timeout": case_timeout,
            "in_process": True,
        }
        write_state(run_dir, self.state)
        self.log = EventLog(run_dir, worker=0)
        self.log.emit("worker_start", pid=os.getpid(), seed=seed, items=plan, budget=budget)

    def progress_callback(self, target: str, impl: str) -> Any:
        item_start, last = time.monotonic(), [0.0]

        def on_case(n: int, final: bool = False) -> None:
            now = time.monotonic()
            if final or now - last[0] >= 1.0:
                last[0] = now
                self.log.emit(
                    "progress",
                    target=target,
                    impl=impl,
                    cases=n,
                    elapsed=round(now - item_start, 3),
                )

        on_case(0, final=True)
        return on_case

    def found(self, case: Any, path: Path, sequence: Any = None) -> None:
        """Log one finding (its case file is on disk already)."""
        f = case.failure
        self.log.emit(
            "finding",
            target=case.target,
            impl=case.implementation,
            signature=f.signature,
            kind=f.kind,
            message=f.message,
            case=str(Path(path).resolve()),
            case_id=case.case_id,
            sequence=sequence.case_id if sequence is not None else None,
        )

    def finish(self, status: str = "done") -> None:
        self.log.emit("worker_exit", status="ok", elapsed=round(time.monotonic() - self.start, 3))
        self.log.close()
        self.state.update(status=status, elapsed=round(time.monotonic() - self.start, 3))
        write_state(self.run_dir, self.state)


def write_html_if_available(run_dir: Path) -> None:
    try:
        from fuzzkit.report_html import write_html  # optional (plots extra)
    except ImportError:
        return
    try:
        write_html(run_dir)
    except Exception as exc:  # noqa: BLE001 - the HTML page must not lose the run
        print(f"fuzzkit: warning: HTML report failed: {exc}", file=sys.stderr)
