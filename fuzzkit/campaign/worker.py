"""One worker: fuzzes its share of the plan item by item through :func:`run_item`.

The same function runs in the coordinator's own process (``--workers 1``), in a spawned local
process and as a Ray task; only the channel its results go through differs.  A fuzzing outcome
never raises; an error here (a finding that cannot be saved, a target that does not import) is
logged as ``worker_exit`` with ``status: error`` and re-raised -- the coordinator turns it into
exit 3, never into a clean run.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from fuzzkit.campaign.channel import Channel, FileChannel
from fuzzkit.campaign.model import WorkerSpec

# Cases every item of a worker is given before any item gets more (the run's table says when a
# pair stayed below it): with equal shares a slow pair (Inductor compiling each graph, a Triton
# kernel interpreted on the CPU) ran a handful of cases in a short ``run --all`` while a fast one
# ran thousands.
from fuzzkit.campaign.progress import MIN_CASES


def _watch_parent(parent_pid: int) -> None:
    """A local worker dies with its coordinator (SIGKILL included): PDEATHSIG on Linux, plus
    polling the parent pid everywhere."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux
        pass

    def poll() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(3)
            time.sleep(0.5)

    if os.getppid() != parent_pid:
        os._exit(3)
    threading.Thread(target=poll, daemon=True, name="fuzzkit-parent-watch").start()


def _enter_process(spec: WorkerSpec) -> None:
    """A worker in a process of its own sees the coordinator's import path and directory."""
    if spec.parent_pid:
        _watch_parent(spec.parent_pid)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for entry in reversed(spec.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if spec.cwd:
        try:
            os.chdir(spec.cwd)
        except OSError:  # another node of a cluster: its own working directory
            pass


def worker_main(
    spec: WorkerSpec, channel: Channel | None = None, meter: Any = None, own_process: bool = True
) -> dict[str, Any]:
    """Fuzz ``spec.items`` within ``spec.budget`` seconds; returns the worker's totals."""
    if own_process:
        _enter_process(spec)
    if channel is None:
        channel = FileChannel(Path(spec.run_dir), Path(spec.plan.corpus), worker=spec.worker)
    channel.emit(
        "worker_start",
        pid=os.getpid(),
        seed=spec.seed,
        items=[list(i) for i in spec.items],
        budget=spec.budget,
    )
    start = time.monotonic()
    budget = spec.budget
    if spec.deadline is not None:
        budget = min(budget, spec.deadline - time.time())
    deadline = start + budget
    totals = {"cases": 0, "findings": 0}
    beat = _Heartbeat(channel, spec.heartbeat) if own_process else None
    try:
        from fuzzkit.campaign.item import ItemJob, run_item
        from fuzzkit.campaign.plan import register_sources
        from fuzzkit.registry import get_target, resolve_implementation

        with _Phase(beat, "startup"):
            register_sources(spec.sources)
            resolved = []
            for tname, ispec in spec.items:
                target = get_target(tname)
                resolved.append((target, resolve_implementation(target, ispec), ispec))
        jobs = [
            ItemJob(spec, target, impl, ispec, 0.0, channel, meter)
            for target, impl, ispec in resolved
        ]
        for job, share, max_cases in shares_by_need(jobs, deadline):
            if share <= 0.05:
                continue
            job.next_pass(share, max_cases)
            result = run_item(job)
            job.close_pass(result)
            totals["cases"] += result.cases
            totals["findings"] += job.findings
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "error"
        _exit_event(channel, status, f"{type(exc).__name__}: {exc}"[:500], totals, start)
        raise
    _exit_event(channel, "ok", None, totals, start)
    return {"worker": spec.worker, **totals}


def shares_by_need(jobs: list[Any], deadline: float) -> Iterator[tuple[Any, float, int | None]]:
    """The worker's budget, shared by need: ``(job, seconds, max_cases)`` per pass, computed
    as each pass starts (so time an item leaves unused goes to the items after it).

    With one item, or an engine other than Hypothesis, one pass per item with an equal share of
    what is left.  Otherwise two passes: first every item runs until it has ``MIN_CASES``
    cases, for at most an equal share of the whole budget (a fast pair needs a second, a slow
    one all of its share); then what is left is shared equally, each item continuing where it
    stopped (its seen-set and chunk seeds carry over, so no case is judged twice).  A slow pair
    thus gets its equal share plus an equal part of what the fast ones did not need."""
    if not jobs:
        return
    plan = jobs[0].plan
    if len(jobs) == 1 or plan.engine != "hypothesis":
        for k, job in enumerate(jobs):
            yield job, (deadline - time.monotonic()) / (len(jobs) - k), plan.max_cases
        return
    equal = (deadline - time.monotonic()) / len(jobs)
    first = MIN_CASES if plan.max_cases is None else min(MIN_CASES, plan.max_cases)
    for job in jobs:
        yield job, min(equal, deadline - time.monotonic()), first
    going = [job for job in jobs if _wants_more(job)]
    for k, job in enumerate(going):
        left = None if plan.max_cases is None else plan.max_cases - job.cases_before
        yield job, (deadline - time.monotonic()) / (len(going) - k), left


def _wants_more(job: Any) -> bool:
    """Whether a second pass can still do something for the item."""
    plan = job.plan
    if plan.max_cases is not None and job.cases_before >= plan.max_cases:
        return False
    if plan.max_findings is not None and job.findings >= plan.max_findings:
        return False
    return True


def process_main(spec: WorkerSpec) -> None:
    """The entry point of a worker process: its outcome is in its events, so an interrupt exits
    130 quietly and an error exits 3 with one line (the coordinator reports it)."""
    try:
        worker_main(spec)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - logged as worker_exit; the coordinator says it
        print(f"fuzzkit: worker {spec.worker}: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(3)


def _exit_event(
    channel: Channel, status: str, error: str | None, totals: dict[str, int], start: float
) -> None:
    fields: dict[str, Any] = {"status": status, "elapsed": round(time.monotonic() - start, 3)}
    if error is not None:
        fields["error"] = error
    try:
        channel.emit("worker_exit", **fields, **totals)
    finally:
        channel.close()


class _Heartbeat:
    """While the worker is in a phase that runs no cases (startup imports, shrinking,
    confirming, a whole atheris run), a side thread writes ``heartbeat`` events so the
    coordinator does not take it for hung.  A phase is either entered explicitly
    (:func:`_phase`) or recognised from the main thread's stack."""

    #: functions inside which the fuzzing thread legitimately reports no cases for a long time
    QUIET = frozenset({"_polish", "fuzz_atheris", "minimize", "shrink_case", "confirm"})

    def __init__(self, channel: Channel, interval: float) -> None:
        self.channel = channel
        self.interval = interval
        self.phase: str | None = None
        self.main_id = threading.main_thread().ident
        threading.Thread(target=self._run, daemon=True, name="fuzzkit-heartbeat").start()

    def _current(self) -> str | None:
        if self.phase is not None:
            return self.phase
        frame = sys._current_frames().get(self.main_id) if self.main_id is not None else None
        while frame is not None:
            if frame.f_code.co_name in self.QUIET:
                return frame.f_code.co_name
            frame = frame.f_back
        return None

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            phase = self._current()
            if phase is not None:
                try:
                    self.channel.emit("heartbeat", phase=phase)
                except (OSError, ValueError):  # the channel was closed: the worker is done
                    return


class _Phase:
    def __init__(self, beat: _Heartbeat | None, name: str) -> None:
        self.beat, self.name = beat, name

    def __enter__(self) -> None:
        if self.beat is not None:
            self.beat.phase = self.name

    def __exit__(self, *exc: object) -> None:
        if self.beat is not None:
            self.beat.phase = None
