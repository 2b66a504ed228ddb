"""Run cases in a child process: a segfault, an abort, a hang or an out-of-memory kill becomes a
finding instead of taking the campaign down.

:class:`IsolatedChecker` is a drop-in ``checker`` for :func:`fuzzkit.engines.hypothesis.fuzz`
(and :func:`fuzzkit.shrink.ddmin.shrink_case`): it keeps one persistent child process
(``multiprocessing`` *spawn* context, one :func:`~multiprocessing.Pipe`) that loads the target
once and runs :func:`fuzzkit.runner.check_case` for every case it is sent.

* Before a case is sent its inputs are written, atomically (temp file + rename; add an fsync per
  case with ``durable=True``), to ``inflight_dir/<pid>.json``
  (``<pid>`` is the *parent's* process id; a regular case file with ``origin: "inflight"``), so a
  hard kill of the whole worker still leaves the case that was running on disk.  The file is
  removed once the case has a verdict.
* The child dies by a signal ->
  ``Failure("crash", "... killed by SIGSEGV", "crash:signal:SIGSEGV")``.
* The case runs past ``case_timeout`` (the child's own SIGALRM limit catches Python code; native
  code that ignores it is killed by the parent after ``2 * case_timeout + 2 s``, because
  ``check_case`` may run a failing case twice) -> ``Failure("timeout", ..., "timeout:<t>:<i>")``.
* ``MemoryError`` in the child (``RLIMIT_AS``), or a SIGKILL the parent did not send (the kernel's
  OOM killer) -> ``Failure("oom", ..., "oom:<t>:<i>")``.
* ``CUDA error`` (or Triton's ``Triton Error [CUDA]``) in an exception message -> ``crash`` with
  signature ``crash:cuda:<error, lower_snake_case>``; the child is replaced afterwards, since a
  CUDA context does not survive such an error.
* A dead child is replaced by a fresh one at once (it starts while the parent carries on).

Memory limit: ``memory_mb`` is the *headroom* a case gets, in MiB of address space on top of what
the child uses once it has imported the target and its implementation (``RLIMIT_AS`` is set to
that sum).  A fixed total would not work: importing torch alone maps gigabytes.  RLIMIT_AS and
CUDA do not mix (the driver reserves huge address ranges), so leave ``memory_mb=None`` when a
target runs on a GPU.  The limit is enforced on Linux; elsewhere it is best effort.

Targets must be findable by name in the child: a built-in or entry-point target always is; one
registered at run time (tests, conftest files) needs its module in ``preload``, imported by the
child before the target is looked up.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

from fuzzkit.case import Case, atomic_write_text
from fuzzkit.failure import Failure
from fuzzkit.runner import Verdict
from fuzzkit.target import Implementation, Inputs, Target

#: Seconds the parent adds to the child's own time limit before it kills the child.
KILL_MARGIN_S = 2.0
#: Seconds a fresh child may take to import the target and say it is ready.
STARTUP_TIMEOUT_S = 300.0

#: torch's "CUDA error: ..." (RuntimeError / torch.AcceleratorError) and Triton's launcher errors.
_CUDA_ERROR = re.compile(r"(?:CUDA error|Triton Error \[CUDA\]):?\s*([^\n]*)", re.IGNORECASE)


class WorkerStartupError(RuntimeError):
    """The child process could not load the target (not a finding: a setup problem)."""


class IsolatedChecker:
    """A ``checker(target, impl, inputs, *, properties, timeout) -> Verdict`` that runs each case
    in a persistent child process.  Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        target_name: str,
        impl_name: str,
        *,
        case_timeout: float | None = 10.0,
        memory_mb: int | None = None,
        inflight_dir: os.PathLike[str] | str = Path(".fuzzkit") / "inflight",
        mutant: str | None = None,
        preload: Sequence[str] = (),
        durable: bool = False,
    ) -> None:
        self.target_name = target_name
        self.durable = durable
        self.impl_name = impl_name
        self.case_timeout = case_timeout
        self.memory_mb = memory_mb
        self.inflight_dir = Path(inflight_dir)
        self.mutant = mutant
        self.preload = tuple(preload)
        self.inflight_path = self.inflight_dir / f"{os.getpid()}.json"
        self.target_spec = target_source_spec(target_name)
        #: Children started so far (1 + replacements) and cases sent.
        self.starts = 0
        self.cases = 0
        self._ctx = multiprocessing.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self._ready = False
        self._start()

    # ------------------------------------------------------------------------------ lifecycle

    def _start(self) -> None:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=_child_main,
            args=(
                child_conn,
                self.target_name,
                self.impl_name,
                self.mutant,
                self.memory_mb,
                self.preload,
                self.target_spec,
            ),
            name=f"fuzzkit-isolated-{self.target_name}",
            daemon=True,
        )
        _start_even_if_daemonic(proc)
        child_conn.close()
        self._proc, self._conn, self._ready = proc, parent_conn, False
        self.starts += 1

    def _wait_ready(self) -> None:
        if self._ready:
            return
        message: Any = None
        try:
            if self._conn.poll(STARTUP_TIMEOUT_S):
                message = self._conn.recv()
        except (EOFError, OSError):
            message = None
        if not (isinstance(message, tuple) and message and message[0] == "ready"):
            detail = (
                message[1]
                if isinstance(message, tuple) and message[:1] == ("error",)
                else (
                    f"exit code {self._proc.exitcode}" if not self._proc.is_alive() else "no answer"
                )
            )
            self._kill()
            self._start()  # keep a child around; the next call tries again
            raise WorkerStartupError(
                f"isolated worker for {self.target_name}/{self.impl_name} did not start: {detail}"
            )
        self._ready = True

    def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.is_alive():
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=10)
        with contextlib.suppress(OSError):
            self._conn.close()
        self._proc = None

    def _replace(self) -> None:
        self._kill()
        self._start()

    def close(self) -> None:
        """Stop the child (politely, then by force) and remove the in-flight file."""
        if self._proc is not None:
            with contextlib.suppress(OSError, BrokenPipeError):
                self._conn.send(("stop",))
            self._proc.join(timeout=2)
            self._kill()
        with contextlib.suppress(OSError):
            self.inflight_path.unlink()

    def __enter__(self) -> IsolatedChecker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self, _kill: Any = os.kill, _sig: int = signal.SIGKILL) -> None:
        # best effort, also at interpreter shutdown (module globals may be gone by then)
        try:
            if self._proc is not None and self._proc.is_alive():
                _kill(self._proc.pid, _sig)
        except Exception:  # noqa: BLE001  # pragma: no cover - interpreter shutdown
            pass

    @property
    def pid(self) -> int | None:
        """The current child's process id."""
        return self._proc.pid if self._proc is not None else None

    # ------------------------------------------------------------------------------- checking

    def __call__(
        self,
        target: Target,
        impl: Implementation,
        inputs: Inputs,
        *,
        properties: bool = True,
        timeout: float | None = None,
    ) -> Verdict:
        if target.name != self.target_name:
            raise ValueError(f"this IsolatedChecker runs {self.target_name!r}, not {target.name!r}")
        limit = timeout if timeout is not None else self.case_timeout
        self._wait_ready()
        self._write_inflight(inputs)
        self.cases += 1
        try:
            self._conn.send(("case", inputs, properties, limit))
        except (OSError, BrokenPipeError):
            pass  # the child is gone; the poll below sees EOF and the exit code says why
        deadline = None if limit is None else 2 * limit + KILL_MARGIN_S
        message: Any = None
        timed_out = False
        try:
            if self._conn.poll(deadline):
                message = self._conn.recv()
            else:
                timed_out = True
        except (EOFError, OSError):
            message = None
        if isinstance(message, tuple) and message and message[0] == "verdict":
            failure = Failure.from_json(message[1]) if message[1] is not None else None
            if message[2]:  # the child asked to be replaced (CUDA context lost)
                self._replace()
            self._clear_inflight()
            unsupported = message[3] if len(message) > 3 else None
            return Verdict(failure, unsupported=unsupported)
        failure = self._death(timed_out, limit)
        self._replace()
        self._clear_inflight()
        return Verdict(failure)

    def _death(self, timed_out: bool, limit: float | None) -> Failure:
        name, impl = self.target_name, self.impl_name
        if timed_out:
            self._kill()
            return Failure(
                "timeout",
                f"case ran past its {limit:g} s limit (isolated worker killed)",
                f"timeout:{name}:{impl}",
                {"limit_s": limit, "killed": True},
            )
        proc = self._proc
        proc.join(timeout=10)
        code = proc.exitcode
        if code is None:  # pipe broke but the process lives on: treat as a crash
            self._kill()
            return Failure(
                "crash", f"isolated worker for {impl} stopped answering", "crash:worker:lost", {}
            )
        if code < 0:
            sig = _signal_name(-code)
            if -code == signal.SIGKILL:
                return Failure(
                    "oom",
                    f"{impl} was killed by SIGKILL (not by fuzzkit: most likely "
                    "the kernel's out-of-memory killer)",
                    f"oom:{name}:{impl}",
                    {"signal": sig, "memory_mb": self.memory_mb},
                )
            return Failure(
                "crash",
                f"{impl} killed by {sig}",
                f"crash:signal:{sig}",
                {"signal": sig, "where": impl},
            )
        return Failure(
            "crash",
            f"{impl} exited the worker process with status {code}",
            f"crash:exit:{code}",
            {"exit_code": code, "where": impl},
        )

    def _write_inflight(self, inputs: Inputs) -> None:
        """Temp file + rename: atomic for readers and it survives any kill of this process
        (the page cache outlives it).  ``durable=True`` adds an fsync per case, for power loss
        too, at a cost of milliseconds per case."""
        case = Case(
            target=self.target_name, implementation=self.impl_name, inputs=inputs, origin="inflight"
        )
        text = case.dumps() + "\n"
        if self.durable:
            atomic_write_text(self.inflight_path, text)
            return
        tmp = self.inflight_path.with_name(f".{self.inflight_path.name}.tmp")
        try:
            tmp.write_text(text, encoding="ascii")
        except FileNotFoundError:
            self.inflight_dir.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text, encoding="ascii")
        os.replace(tmp, self.inflight_path)

    def _clear_inflight(self) -> None:
        with contextlib.suppress(OSError):
            self.inflight_path.unlink()


def target_source_spec(target_name: str) -> str | None:
    """``module:qualname`` of the factory a target was registered with at run time (e.g. by a
    conftest file), so that a fresh process can register it too; None for entry-point targets
    (the shipped ones too: found by name anyway) and for sources that cannot be imported."""
    from fuzzkit import registry

    source = registry._sources.get(target_name)
    if source is None or registry.from_entry_point(target_name) or isinstance(source, Target):
        return None
    module = getattr(source, "__module__", None)
    qualname = getattr(source, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def load_target_modules(target_name: str, preload: Sequence[str], target_spec: str | None) -> None:
    """In a fresh process: import ``preload`` and register ``target_spec`` when the target is
    not known by then."""
    import importlib

    from fuzzkit import registry

    for module in preload:
        importlib.import_module(module)
    if target_spec and target_name not in registry.target_names():
        factory = registry.load_object(target_spec, what=f"target {target_name!r}")
        registry.register_target(target_name, replace=True)(factory)


def _start_even_if_daemonic(proc: Any) -> None:
    """multiprocessing refuses children of daemonic processes (campaign workers are daemonic so
    that they die with the coordinator).  Our child dies with its parent anyway (PDEATHSIG,
    daemon=True), so lift the flag for the start only."""
    me = multiprocessing.current_process()
    config = getattr(me, "_config", {})
    was = config.get("daemon")
    if was:
        config["daemon"] = False
    try:
        proc.start()
    finally:
        if was:
            config["daemon"] = was


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


# ----------------------------------------------------------------------------------- the child


def _child_main(
    conn: Any,
    target_name: str,
    impl_name: str,
    mutant_name: str | None,
    memory_mb: int | None,
    preload: Sequence[str],
    target_spec: str | None = None,
) -> None:
    _die_with_parent()
    try:
        from fuzzkit.registry import get_target, resolve_implementation

        load_target_modules(target_name, preload, target_spec)
        target = get_target(target_name)
        impl = resolve_implementation(target, impl_name)
        patch = target.mutant(mutant_name).applied() if mutant_name else contextlib.nullcontext()
        patch.__enter__()
        if memory_mb is not None:
            _limit_memory(memory_mb)
    except BaseException as exc:  # noqa: BLE001 - report it, the parent decides
        with contextlib.suppress(Exception):
            conn.send(("error", f"{type(exc).__name__}: {exc}".splitlines()[0][:500]))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        _, inputs, properties, timeout = message
        failure, replace, unsupported = _check(target, impl, inputs, properties, timeout, memory_mb)
        conn.send(
            ("verdict", failure.to_json() if failure is not None else None, replace, unsupported)
        )
        if replace:
            return


def _check(
    target: Target,
    impl: Implementation,
    inputs: Inputs,
    properties: bool,
    timeout: float | None,
    memory_mb: int | None,
) -> tuple[Failure | None, bool, str | None]:
    """check_case with its confirmation re-run done here, so that a CUDA error (after which the
    context is unusable) is reported as itself rather than as a non-deterministic failure.
    Returns the failure, whether the child must be replaced, and why the implementation turned
    the case away (:class:`~fuzzkit.target.Unsupported`), if it did."""
    from fuzzkit.runner import check_case

    try:
        verdict = check_case(
            target, impl, inputs, properties=properties, confirm=False, timeout=timeout
        )
        first = verdict.failure
        if first is not None:
            cuda = _as_cuda_crash(first)
            if cuda is not None:
                return cuda, True, None
            oom = _as_oom(first, target, impl, memory_mb)
            if oom is not None:
                return oom, False, None
            if first.kind == "timeout":
                return first, False, None
            again = check_case(
                target, impl, inputs, properties=properties, confirm=False, timeout=timeout
            ).failure
            if again is None or again.signature != first.signature:
                second = again.signature if again else "a pass"
                return (
                    first.with_kind(
                        "nondeterministic", prefix=f"re-run gave {second}; first run: "
                    ),
                    False,
                    None,
                )
        return first, False, verdict.unsupported
    except MemoryError:
        return (
            Failure(
                "oom",
                f"{impl.name} ran out of memory",
                f"oom:{target.name}:{impl.name}",
                {"memory_mb": memory_mb},
            ),
            False,
            None,
        )


def _as_cuda_crash(failure: Failure) -> Failure | None:
    text = failure.message + "\n" + str(failure.details.get("traceback", ""))
    match = _CUDA_ERROR.search(text)
    if failure.kind != "crash" or match is None:
        return None
    error = re.sub(r"[^a-z0-9]+", "_", match.group(1).lower()).strip("_")[:60] or "unknown"
    return Failure(
        "crash",
        failure.message,
        f"crash:cuda:{error}",
        {**failure.details, "cuda_error": match.group(1)[:300]},
    )


def _as_oom(
    failure: Failure, target: Target, impl: Implementation, memory_mb: int | None
) -> Failure | None:
    if failure.kind == "crash" and failure.details.get("exception") == "MemoryError":
        limit = f" (limit: {memory_mb} MiB above the worker's baseline)" if memory_mb else ""
        return Failure(
            "oom",
            f"out of memory{limit}: {failure.message}",
            f"oom:{target.name}:{impl.name}",
            {**failure.details, "memory_mb": memory_mb},
        )
    return None


def _limit_memory(memory_mb: int) -> None:
    import resource

    in_use = _address_space_bytes()
    limit = in_use + int(memory_mb) * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _address_space_bytes() -> int:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _die_with_parent() -> None:
    """Linux: the child gets SIGKILL when the parent dies, even if the parent was SIGKILLed."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(0)
