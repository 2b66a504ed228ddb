"""The run pipeline: one coordinator behind every ``fuzzkit run``.

``run_campaign`` fixes a :class:`~fuzzkit.campaign.model.Plan`, starts workers on a backend (this
process for ``--workers 1``, spawned processes, or Ray tasks), folds their events into progress
and ``state.json``, replaces hung or dead workers, stops everything at the budget plus one case
time limit, and writes the summary with :mod:`fuzzkit.campaign.summary`.  Workers store findings
(unshrunk first, then final) through a channel before they report them, so an interrupt, a kill
or a save error never loses what was found: a finding whose worker died before finishing it is
recovered from its pending file.  A killed run continues with ``--resume``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from fuzzkit.campaign.model import Backend, Event, Item, Plan, RunState, WorkerSpec
from fuzzkit.campaign.plan import assign, build_plan, source_modules, target_sources
from fuzzkit.campaign.progress import Progress, Stats
from fuzzkit.campaign.state import (
    EventLog,
    EventReader,
    claim_finding,
    read_state,
    reconcile_claims,
    write_state,
)
from fuzzkit.campaign.summary import write_summary
from fuzzkit.errors import UsageError

MAX_REPLACEMENTS = 32
#: After Ctrl-C, workers get this long to store what they hold before they are killed.
INTERRUPT_GRACE = 10.0


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
    backend: str = "local"  # local (this process with one worker) or ray
    address: str | None = None
    num_gpus: float = 0
    num_cpus: int | None = None  # local Ray instance size (default: Ray's own)
    isolate: bool = False
    memory_mb: int | None = None
    engine: str = "hypothesis"
    progress: str = "quiet"
    resume: Path | None = None
    hang_timeout: float | None = None  # default case_timeout + 30
    heartbeat: float = 1.0
    known: Any = None  # fuzzkit.known.KnownSignatures: accepted signatures, never chased
    confirm: bool = True  # replay findings in a fresh process (state-dependent ones)
    max_cases: int | None = None  # per target x implementation and worker (libFuzzer's -runs)
    max_findings: int | None = None  # per target x implementation
    mutants: Sequence[str] = ()  # shipped mutants of the (single) target to fuzz under
    coverage: bool = False  # branch coverage of the code under test (this process only)
    steer: bool = False  # with coverage: reward new branches
    spawn: bool = False  # run even a single worker in a process of its own


@dataclasses.dataclass
class CampaignResult:
    run_dir: Path
    summary: Path
    findings: list[Event]
    cases: int
    elapsed: float
    status: str  # done | interrupted | error
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    errors: list[tuple[int, str]] = dataclasses.field(default_factory=list)


def run_campaign(opts: CampaignOptions) -> CampaignResult:
    meter = _coverage_meter(opts) if opts.coverage else None
    try:
        state, run_dir = _resumed(opts) if opts.resume is not None else _fresh(opts)
        return _Coordinator(state, run_dir.resolve(), opts, meter).run()
    finally:
        if meter is not None:
            meter.stop()


# ---------------------------------------------------------------------------------- planning


def _fresh(opts: CampaignOptions) -> tuple[RunState, Path]:
    from fuzzkit import corpus as corpus_mod
    from fuzzkit.report import new_run_dir

    if opts.workers < 1:
        raise UsageError("--workers must be at least 1")
    items, skipped = build_plan(opts.targets, opts.all, opts.impl)
    backend = opts.backend
    if backend == "local" and opts.workers == 1 and not opts.spawn:
        backend = "inprocess"
    if (opts.coverage or opts.steer) and backend != "inprocess":
        raise UsageError("--coverage measures this process: run it with --workers 1, no Ray")
    if opts.steer and not opts.coverage:
        raise UsageError("--steer rewards new branches, which --coverage measures: add --coverage")
    mutants = _checked_mutants(opts, items)
    # the options a plan keeps as given; the others are resolved here
    kept = _shared_fields(Plan, CampaignOptions) - {"backend", "corpus", "mutants", "known"}
    plan = Plan(
        items=items,
        skipped=skipped,
        backend=backend,
        corpus=str(Path(opts.corpus or corpus_mod.default_root()).resolve()),
        mutants=mutants,
        known=opts.known.to_json() if opts.known is not None else [],
        **{name: getattr(opts, name) for name in kept},
    )
    run_dir = new_run_dir(Path(opts.report_dir), opts.seed)
    state = RunState(run_id=run_dir.name, plan=plan, started=time.time())
    write_state(run_dir, state.to_json())
    return state, run_dir


def _shared_fields(a: Any, b: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(a)} & {f.name for f in dataclasses.fields(b)}


def _checked_mutants(opts: CampaignOptions, items: list[Item]) -> list[str]:
    """Mutants plant bugs in one target's one implementation; checked before any fuzzing."""
    if not opts.mutants:
        return []
    from fuzzkit.registry import get_target

    names = {t for t, _ in items}
    if len(names) != 1:
        raise UsageError("--mutant plants bugs in one target: name exactly one")
    target = get_target(names.pop())
    patched = {target.mutant(m).implementation for m in opts.mutants}
    if len(patched) != 1:
        raise UsageError(
            f"the mutants patch different implementations ({sorted(patched)}); "
            "plant bugs of one implementation per run"
        )
    impl = patched.pop()
    if opts.impl and opts.impl != impl:
        raise UsageError(f"--mutant patches implementation {impl!r}, not {opts.impl!r}")
    if (opts.isolate or opts.engine == "atheris") and len(opts.mutants) > 1:
        raise UsageError("--isolate and --engine atheris plant one mutant at a time")
    if not any(i == impl for _, i in items):
        raise UsageError(f"--mutant patches implementation {impl!r}, which is not in the plan")
    items[:] = [(t, i) for t, i in items if i == impl]
    return list(opts.mutants)


def _resumed(opts: CampaignOptions) -> tuple[RunState, Path]:
    if opts.targets or opts.all:
        raise UsageError("--resume continues a run's own plan; give no targets")
    run_dir = Path(opts.resume or ".")
    if not (run_dir / "state.json").is_file():
        raise UsageError(f"{run_dir} is not a run directory (no state.json)")
    data = read_state(run_dir)
    if isinstance(data.get("plan"), list):
        _trusted_plan(data["plan"], run_dir / "state.json", opts.impl)
    if data.get("backend") == "local" and data.get("in_process"):
        data["backend"] = "inprocess"  # written by fuzzkit 0.x's single-process runs
    state = RunState.from_json(data, run_dir / "state.json")
    state.resumes += 1
    if opts.known is not None:
        state.plan.known = opts.known.to_json()
    state.plan.confirm = state.plan.confirm and opts.confirm
    return state, run_dir


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


def _coverage_meter(opts: CampaignOptions) -> Any:
    """Coverage starts before any target module is imported, so definitions count as run."""
    from fuzzkit import branches, registry

    names = registry.target_names() if opts.all else list(opts.targets)
    modules = registry.source_packages(names)
    if opts.impl and ":" in opts.impl:
        modules.append(opts.impl.partition(":")[0])
    meter = branches.Meter([m for m in modules if branches.module_file(m) is not None])
    meter.start()
    return meter


# ------------------------------------------------------------------------------- coordinating


class _Coordinator:
    """Starts the workers, watches them, and writes what they report (see module docstring)."""

    def __init__(self, state: RunState, run_dir: Path, opts: CampaignOptions, meter: Any) -> None:
        self.state = state
        self.plan = state.plan
        self.run_dir = run_dir
        self.opts = opts
        self.meter = meter
        self.case_timeout = float(self.plan.case_timeout)
        self.hang_timeout = opts.hang_timeout or self.case_timeout + 30.0
        self.prior_elapsed = float(state.elapsed)
        self.stats = Stats(self.plan.items)
        self.reader = EventReader(run_dir)
        self.log = EventLog(run_dir, worker=-1)
        self.progress = Progress(opts.progress, float(self.plan.budget))
        self.handles: dict[int, tuple[Any, WorkerSpec]] = {}
        self.last_seen: dict[int, float] = {}
        self.backend: Backend | None = None
        self.session_start = time.monotonic()
        self.status = "done"
        #: the targets registered in this process, for workers to import (the same for all)
        self.sources = target_sources(sorted({t for t, _ in self.plan.items}))
        self._last_observed_state = 0.0  # when an in-process worker's events last saved state

    def elapsed(self) -> float:
        return self.prior_elapsed + time.monotonic() - self.session_start

    def run(self) -> CampaignResult:
        reconcile_claims(self.run_dir)
        events = self.reader.read()
        for event in events:
            self.stats.add(event)
        self.state.next_worker = max(
            [self.state.next_worker] + [int(e.get("worker", -1)) + 1 for e in events]
        )
        remaining = float(self.plan.budget) - self.prior_elapsed
        self.deadline = self.session_start + remaining
        # a run ends within its budget plus one case time limit (and a moment to exit)
        self.hard_stop = self.deadline + self.case_timeout + 2.0
        self.progress.start(str(self.run_dir))
        for event in self.stats.findings.values():
            self.progress.finding(event)
        saved_handlers: dict[int, Any] = {}
        if _in_main_thread():
            # SIGINT explicitly too, not Python's default handler: a process started from a
            # script's background job inherits SIGINT ignored, and `kill -INT` would then
            # never stop the run.
            saved_handlers = {
                sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGINT)
            }
        try:
            self.save_state("running")
            if remaining > 0.5:
                self.backend = self._backend()
                self._launch(remaining)
                self._watch()
        except KeyboardInterrupt:
            self.status = "interrupted"
            self._wind_down()
        except Exception as exc:  # noqa: BLE001 - an internal error: exit 3 with a summary
            self.status = "error"
            self._fold()
            if not self.stats.errors:  # the worker's own exit event says it better
                self.stats.errors.append((-1, f"{type(exc).__name__}: {exc}"[:500]))
            self._wind_down(grace=0.0)
        finally:
            self._finish(saved_handlers)
        return self._result()

    # ------------------------------------------------------------------ starting and watching

    def _backend(self) -> Backend:
        name = self.plan.backend
        if name == "ray":
            from fuzzkit.campaign.ray_backend import RayBackend

            return RayBackend(
                self.run_dir,
                address=self.opts.address or self.plan.address,
                num_gpus=self.opts.num_gpus or self.plan.num_gpus or 0,
                num_cpus=self.opts.num_cpus,
            )
        from fuzzkit.campaign.local import InProcessBackend, LocalBackend

        if name == "inprocess":
            return InProcessBackend(self._fold_observed, meter=self.meter)
        return LocalBackend()

    def _spec(self, worker: int, items: list[Item], budget: float) -> WorkerSpec:
        return WorkerSpec(
            worker=worker,
            seed=int(self.plan.seed) * 1000 + worker,
            items=items,
            budget=budget,
            plan=self.plan,
            run_dir=str(self.run_dir),
            sources=self.sources,
            preload=source_modules(self.sources),
            sys_path=[p for p in sys.path if p],
            cwd=os.getcwd(),
            heartbeat=self.opts.heartbeat,
            deadline=time.time() + budget,
        )

    def _launch(self, remaining: float) -> None:
        assert self.backend is not None
        inprocess = self.plan.backend == "inprocess"
        for items in assign(self.plan.items, 1 if inprocess else int(self.plan.workers)):
            wid = self.state.next_worker
            self.state.next_worker += 1
            spec = self._spec(wid, items, remaining)
            self.log.emit("worker_launch", worker=wid, items=[list(i) for i in items])
            self.last_seen[wid] = time.monotonic()
            self.save_state("running")
            try:
                handle = self.backend.start(spec)
            except Exception:
                self.stats.exited.add(wid)
                raise
            self.handles[wid] = (handle, spec)

    def _watch(self) -> None:
        assert self.backend is not None
        replacements, last_state = 0, time.monotonic()
        while self.handles:
            now = time.monotonic()
            self._fold()
            for wid, (handle, spec) in list(self.handles.items()):
                silent = now - self.last_seen[wid]
                dead = not self.backend.alive(handle)
                over = now > self.hard_stop
                hung = not dead and (silent > self.hang_timeout or over)
                if not dead and not hung:
                    continue
                if dead:
                    self._fold()  # the last events it wrote before exiting
                    if wid in self.stats.exited:
                        del self.handles[wid]
                        continue
                    self.log.emit(
                        "worker_exit",
                        worker=wid,
                        status="died",
                        exitcode=self.backend.exitcode(handle),
                    )
                elif over:
                    self.log.emit("worker_exit", worker=wid, status="killed", reason="budget")
                    self.backend.kill(handle)
                else:
                    self.log.emit("worker_hung", worker=wid, silent_s=round(silent, 2))
                    self.backend.kill(handle)
                self.stats.exited.add(wid)
                del self.handles[wid]
                left = self.deadline - now
                started = wid in self.stats.workers  # one that cannot start would die again
                if started and not over and left > 1.0 and replacements < MAX_REPLACEMENTS:
                    replacements += 1
                    new_id = self.state.next_worker
                    self.state.next_worker += 1
                    new_spec = dataclasses.replace(
                        spec,
                        worker=new_id,
                        budget=left,
                        deadline=time.time() + left,
                        seed=int(self.plan.seed) * 1000 + new_id,
                    )
                    self.log.emit("worker_replaced", worker=new_id, replaces=wid)
                    self.handles[new_id] = (self.backend.start(new_spec), new_spec)
                    self.last_seen[new_id] = time.monotonic()
                    self.save_state("running")
            if now - last_state >= 1.0:
                last_state = now
                self.save_state("running")
            self.progress.update(self.stats, self.elapsed(), len(self.handles))
            time.sleep(0.1)

    def _fold(self) -> None:
        if self.backend is not None:
            self.backend.pump()
        now = time.monotonic()
        for event in self.reader.read():
            wid = event.get("worker", -1)
            if wid in self.last_seen:
                self.last_seen[wid] = now
            new = self.stats.add(event)
            if new is not None:
                self.progress.finding(new)

    def _fold_observed(self, event: Event) -> None:
        """An in-process worker wrote ``event``: show it now (the worker holds the thread)."""
        if event.get("type") in ("progress", "finding", "item_done", "found"):
            self._fold()
            self.progress.update(self.stats, self.elapsed(), 1)
            now = time.monotonic()
            if now - self._last_observed_state >= 1.0:
                self._last_observed_state = now
                self.save_state("running")

    # --------------------------------------------------------------------------- stopping

    def _wind_down(self, grace: float = INTERRUPT_GRACE) -> None:
        """Ask every worker to stop and store what it holds; kill those still running after
        ``grace`` seconds (a second Ctrl-C kills at once)."""
        if self.backend is None or not self.handles:
            return
        for handle, _ in self.handles.values():
            self.backend.interrupt(handle)
        until = time.monotonic() + grace
        try:
            while self.handles and time.monotonic() < until:
                self._fold()
                for wid, (handle, _) in list(self.handles.items()):
                    if not self.backend.alive(handle):
                        del self.handles[wid]
                time.sleep(0.1)
        except KeyboardInterrupt:
            pass

    def _finish(self, saved_handlers: dict[int, Any]) -> None:
        for wid, (handle, _) in list(self.handles.items()):
            try:
                if self.backend is not None:
                    self.backend.kill(handle)
            except Exception:  # noqa: BLE001 - stopping must go on to the summary
                pass
            self.log.emit("worker_exit", worker=wid, status="killed")
        self.handles.clear()
        self._fold()
        if self.backend is not None:
            self.backend.close()
        for sig, handler in saved_handlers.items():
            if handler is not None:  # None: a handler not installed from Python, left as is
                signal.signal(sig, handler)
        reconcile_claims(self.run_dir)
        self._fold()
        self._recover_pending()
        if self.stats.errors and self.status == "done":
            self.status = "error"
        self.save_state(self.status)
        self.log.close()
        self.summary, self.rows = write_summary(
            self.run_dir, self.state, self.stats, self.plan.known_signatures()
        )
        self.progress.finish(self.stats, self.elapsed(), self.rows, self.plan.skipped)
        write_html_if_available(self.run_dir)

    def _recover_pending(self) -> None:
        """A failure stored as ``found`` whose worker died before finishing it (a kill while
        shrinking, a hang, the hard stop) becomes a finding as it was first seen."""
        from fuzzkit import corpus
        from fuzzkit.case import atomic_write_text

        for key, event in list(self.stats.pending.items()):
            pending = Path(event["case"])
            if key in self.stats.findings:  # another worker finished the same bug
                if pending.parent == self.run_dir / "pending":
                    pending.unlink(missing_ok=True)
                continue
            try:
                text = pending.read_text()
            except OSError:  # finished, or discarded: the engine decided it was no finding
                continue
            directory = corpus.directory(Path(self.plan.corpus), event["target"], "findings")
            kept = directory / pending.name
            try:
                atomic_write_text(kept, text)
            except OSError:  # the corpus is what failed: the pending file is the finding
                kept = pending
            finding: Event = {
                **event,
                "type": "finding",
                "case": str(kept.resolve()),
                "unshrunk": True,
                "recovered": True,
            }
            if claim_finding(self.run_dir, finding):
                self.log.write(finding)
                self.stats.add(finding)
                self.progress.finding(finding)
            if kept != pending:
                pending.unlink(missing_ok=True)

    def save_state(self, status: str) -> None:
        self.state.elapsed = self.elapsed()
        self.state.status = status
        write_state(self.run_dir, self.state.to_json())

    def _result(self) -> CampaignResult:
        cases, _ = self.stats.totals()
        return CampaignResult(
            self.run_dir,
            self.summary,
            list(self.stats.findings.values()),
            cases,
            self.elapsed(),
            self.status,
            rows=self.rows,
            errors=list(self.stats.errors),
        )


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def write_html_if_available(run_dir: Path) -> None:
    try:
        from fuzzkit.report_html import write_html  # optional (plots extra)
    except ImportError:
        return
    try:
        write_html(run_dir)
    except Exception as exc:  # noqa: BLE001 - the HTML page must not lose the run
        print(f"fuzzkit: warning: HTML report failed: {exc}", file=sys.stderr)
