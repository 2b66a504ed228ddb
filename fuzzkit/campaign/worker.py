"""One campaign worker: fuzzes its share of the plan, writing progress and findings as events.

The same function runs in a spawned local process and as a Ray task.  It never raises for a
fuzzing outcome; findings are saved as case files (atomically) *before* their event is written.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any


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


def worker_main(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("parent_pid"):
        _watch_parent(spec["parent_pid"])
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for entry in reversed(spec.get("sys_path", [])):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if spec.get("cwd"):
        try:
            os.chdir(spec["cwd"])
        except OSError:
            pass

    from fuzzkit.campaign.state import EventLog, claim_finding

    run_dir = Path(spec["run_dir"])
    wid = spec["worker"]
    log = EventLog(run_dir, worker=wid)
    log.emit(
        "worker_start",
        pid=os.getpid(),
        seed=spec["seed"],
        items=spec["items"],
        budget=spec["budget"],
    )
    start = time.monotonic()
    deadline = start + spec["budget"]
    totals = {"cases": 0, "findings": 0}
    _start_heartbeat(log, spec)
    try:
        from fuzzkit import corpus
        from fuzzkit.campaign.plan import register_sources
        from fuzzkit.registry import get_target, resolve_implementation

        register_sources(spec.get("sources", b"\x80\x04}\x94."))
        items = [tuple(i) for i in spec["items"]]
        for k, (tname, ispec) in enumerate(items):
            share = (deadline - time.monotonic()) / (len(items) - k)
            if share <= 0.05:
                break
            target = get_target(tname)
            impl = resolve_implementation(target, ispec)
            item_start = time.monotonic()
            last = [0.0]
            interval = spec.get("heartbeat", 1.0)

            def progress(
                n: int,
                final: bool = False,
                last: list[float] = last,
                interval: float = interval,
                tname: str = tname,
                impl: Any = impl,
                item_start: float = item_start,
            ) -> None:
                now = time.monotonic()
                if final or now - last[0] >= interval:
                    last[0] = now
                    log.emit(
                        "progress",
                        target=tname,
                        impl=impl.name,
                        cases=n,
                        elapsed=round(now - item_start, 3),
                    )

            progress(0, final=True)
            reported: set[str] = set()
            result_box: list[Any] = []

            def report(
                finding: Any,
                sequence: Any = None,
                tname: str = tname,
                impl: Any = impl,
                reported: set[str] = reported,
                result_box: list[Any] = result_box,
            ) -> None:
                """Save one finding (and its sequence) and log it, as soon as it is final."""
                if finding.failure is None or finding.case_id in reported:
                    return
                reported.add(finding.case_id)
                root = Path(spec["corpus"])
                path = corpus.save(finding, root)  # idempotent: content hash
                if sequence is not None:
                    sequence.save(corpus.directory(root, tname, "sequences"))
                first = None
                if result_box:
                    first = result_box[0].found_at.get(finding.failure.signature, {}).get("seconds")
                event = {
                    "t": time.time(),
                    "worker": wid,
                    "type": "finding",
                    "target": tname,
                    "impl": impl.name,
                    "signature": finding.failure.signature,
                    "kind": finding.failure.kind,
                    "message": finding.failure.message,
                    "case": str(path.resolve()),
                    "case_id": finding.case_id,
                    "sequence": sequence.case_id if sequence is not None else None,
                    "seconds_to_first_failure": first,
                }
                if claim_finding(run_dir, event):
                    log.write(event)
                    totals["findings"] += 1
                else:
                    log.emit(
                        "duplicate",
                        target=tname,
                        impl=impl.name,
                        signature=finding.failure.signature,
                        case=str(path.resolve()),
                    )

            result = _fuzz_item(spec, target, impl, share, progress, report, ispec)
            result_box.append(result)
            progress(result.cases, final=True)
            totals["cases"] += result.cases
            found = list(getattr(result, "findings", None) or [])  # atheris: several
            if not found and getattr(result, "finding", None) is not None:
                found = [result.finding]
            for finding in found:  # the ones not reported as they were found (atheris)
                report(finding, (getattr(result, "sequences", None) or {}).get(finding.case_id))
            if getattr(result, "operations", None) or getattr(result, "reach", None):
                log.emit(
                    "reach",
                    target=tname,
                    impl=impl.name,
                    operations=getattr(result, "operations", {}),
                    reach=getattr(result, "reach", []),
                )
            for sig, count in (getattr(result, "other_signatures", None) or {}).items():
                log.emit(
                    "other_signature", target=tname, impl=impl.name, signature=sig, count=count
                )
    except BaseException as exc:
        log.emit(
            "worker_exit", status="error", error=f"{type(exc).__name__}: {exc}"[:500], **totals
        )
        log.close()
        raise
    log.emit("worker_exit", status="ok", elapsed=round(time.monotonic() - start, 3), **totals)
    log.close()
    return {"worker": wid, **totals}


class _SkipFound:
    """The signatures a worker does not chase: the user's accepted ones (``--known``) and those
    another worker of this campaign (or an earlier session of it) has claimed already -- shrinking
    a bug twice would cost the second worker its share of the budget."""

    def __init__(self, user_known: Any, run_dir: Path) -> None:
        self.user_known = user_known
        self.run_dir = run_dir

    def match(self, target: str, impl: str, signature: str) -> Any:
        from fuzzkit.campaign.state import CLAIMS, finding_key
        from fuzzkit.known import KnownSignature

        if self.user_known is not None:
            hit = self.user_known.match(target, impl, signature)
            if hit is not None:
                return hit
        inner = signature.removeprefix("nondeterministic:")
        for claimed in (signature, inner, f"state-dependent:{inner}", f"nondeterministic:{inner}"):
            if (self.run_dir / CLAIMS / (finding_key(target, impl, claimed) + ".json")).exists():
                return KnownSignature(signature, "found by another worker of this campaign")
        return None


#: Phases in which the fuzzing thread legitimately reports no cases for a long time: ddmin
#: after a finding (``_polish``) and a whole atheris run (it fuzzes in a child process that
#: keeps its own per-case timeouts).  While the main thread is inside one of these, a side
#: thread writes ``heartbeat`` events so the coordinator does not take the worker for hung.
_QUIET_PHASES = {"_polish", "fuzz_atheris", "shrink_case", "confirm"}


def _start_heartbeat(log: Any, spec: dict[str, Any]) -> None:
    main_id = threading.main_thread().ident
    interval = spec.get("heartbeat", 1.0)

    def beat() -> None:
        while True:
            time.sleep(interval)
            frame = sys._current_frames().get(main_id) if main_id is not None else None
            phase = None
            while frame is not None:
                if frame.f_code.co_name in _QUIET_PHASES:
                    phase = frame.f_code.co_name
                frame = frame.f_back
            if phase is not None:
                try:
                    log.emit("heartbeat", phase=phase)
                except OSError:
                    return

    threading.Thread(target=beat, daemon=True, name="fuzzkit-heartbeat").start()


def _fuzz_item(
    spec: dict[str, Any],
    target: Any,
    impl: Any,
    share: float,
    progress: Any,
    report: Any = None,
    impl_spec: str = "",
) -> Any:
    run_dir = Path(spec["run_dir"])
    checker = None
    if spec.get("isolate"):
        from fuzzkit.isolation import IsolatedChecker  # H-A; ImportError surfaces as an error

        checker = IsolatedChecker(
            target.name,
            impl.name,
            case_timeout=spec["case_timeout"],
            memory_mb=spec.get("memory_mb"),
            inflight_dir=run_dir / "inflight",
            preload=spec.get("preload", ()),
        )
    try:
        if spec.get("engine") == "atheris":
            from fuzzkit.engines.atheris import fuzz_atheris

            return fuzz_atheris(
                target,
                impl,
                budget=share,
                seed=spec["seed"],
                corpus_root=Path(spec["corpus"]),
                checker=checker,
                case_timeout=spec["case_timeout"],
                preload=spec.get("preload", ()),
            )
        from fuzzkit.engines.hypothesis import fuzz

        kwargs: dict[str, Any] = {}
        if spec.get("max_cases") is not None:
            kwargs["max_cases"] = int(spec["max_cases"])
        if checker is not None:
            if "checker" not in inspect.signature(fuzz).parameters:
                raise RuntimeError("this fuzzkit's engine does not take a checker (--isolate)")
            kwargs["checker"] = checker
        user_known = None
        if spec.get("known"):
            from fuzzkit.known import parse

            user_known = parse({"format": "fuzzkit-known/1", "known": spec["known"]}, "campaign")
        known = _SkipFound(user_known, run_dir)
        confirm = None
        if spec.get("confirm", True) and not spec.get("isolate"):
            from fuzzkit.fresh import FreshConfirmer, FreshContext
            from fuzzkit.isolation import target_source_spec

            confirm = FreshConfirmer(
                FreshContext(
                    target.name,
                    impl_spec or impl.name,
                    preload=tuple(spec.get("preload", ())),
                    target_spec=target_source_spec(target.name),
                    case_timeout=spec["case_timeout"],
                )
            )
        return fuzz(
            target,
            impl,
            budget=share,
            seed=spec["seed"],
            profile=spec["profile"],
            database_dir=run_dir / "db",
            case_timeout=spec["case_timeout"],
            on_case=progress,
            known=known,
            confirm=confirm,
            on_finding=report,
            **kwargs,
        )
    finally:
        if checker is not None and hasattr(checker, "close"):
            checker.close()
