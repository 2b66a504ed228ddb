"""Confirm findings in a fresh process; find the sequence that replays a state-dependent one.

The same-process re-run of ``check_case`` cannot tell a bug of the case from a bug of the state
the earlier cases left behind (a cache keyed too coarsely answers the re-run from the same wrong
entry).  So before a finding is reported as reproducible it is replayed where nothing ran before:

1. the case alone, in a fresh process -> fails the same way: **reproducible**;
2. otherwise it is **state-dependent** (failure kind ``state-dependent``, signature
   ``state-dependent:<signature>``); the cases that ran before it in the fuzzing run (the last
   ``history`` of them) are replayed in front of it, in order; if the sequence fails the same way,
   ddmin cuts it to the cases the failure needs, and the run saves it as a
   :class:`~fuzzkit.sequence.CaseSequence` (``fuzzkit replay SEQUENCE`` replays it).

Each test needs a state nothing else touched, and a fresh Python with torch and Triton takes
seconds to start.  So one helper process (a *zygote*: ``python -m fuzzkit.fresh``) imports the
target, its implementation and the mutants once, runs nothing, and forks a child per test; a
child inherits the imports but not a single case's state.  The zygote talks JSON lines over its
stdin/stdout; the cases travel as case-file JSON (never pickled).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from fuzzkit.case import Case, decode_value, encode_value
from fuzzkit.failure import Failure
from fuzzkit.sequence import CaseSequence

#: Seconds the zygote may take to import the target (torch, triton, a compiler) and say ready.
STARTUP_TIMEOUT_S = 300.0


@dataclasses.dataclass(frozen=True)
class FreshContext:
    """What a fresh process needs to rebuild the implementation exactly as it was fuzzed."""

    target: str
    implementation: str
    mutants: tuple[str, ...] = ()
    preload: tuple[str, ...] = ()
    target_spec: str | None = None
    case_timeout: float | None = None
    #: one test (a fork running some cases) may take this long before it is killed
    test_timeout: float = 120.0
    #: at most this many tests and seconds for minimizing a sequence
    max_tests: int = 64
    time_limit: float = 120.0


class FreshProcessError(RuntimeError):
    """The zygote could not start or stopped answering (a setup problem, not a verdict)."""


class Zygote:
    """A helper process holding the imported implementation; :meth:`run` forks a test."""

    def __init__(self, ctx: FreshContext, steps: Sequence[dict[str, Any]]) -> None:
        if not hasattr(os, "fork"):
            raise FreshProcessError("fresh-process confirmation needs os.fork (Linux, macOS)")
        env = dict(os.environ)
        paths = [p for p in sys.path if p] + [str(Path(__file__).resolve().parents[1])]
        env["PYTHONPATH"] = os.pathsep.join(
            dict.fromkeys(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        )
        env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # no CUDA context before a fork
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fuzzkit.fresh"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.ctx = ctx
        self.tests = 0
        setup = {
            "target": ctx.target,
            "implementation": ctx.implementation,
            "mutants": list(ctx.mutants),
            "preload": list(ctx.preload),
            "target_spec": ctx.target_spec,
            "case_timeout": ctx.case_timeout,
            "test_timeout": ctx.test_timeout,
            "steps": [encode_value(s) for s in steps],
        }
        answer = self._ask(setup, STARTUP_TIMEOUT_S)
        if not answer.get("ready"):
            self.close()
            raise FreshProcessError(
                f"fresh process for {ctx.target}/{ctx.implementation} did not "
                f"start: {answer.get('error', 'no answer')}"
            )

    def _ask(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return {"error": f"exit code {self.proc.poll()}"}
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return {"error": "no answer in time"}
        line = self.proc.stdout.readline()
        if not line:
            return {"error": f"exit code {self.proc.wait()}"}
        return json.loads(line)

    def run(self, indices: Sequence[int]) -> Failure | None:
        """Run steps ``indices`` in order in a fresh fork; the last step's failure or None."""
        self.tests += 1
        answer = self._ask({"run": [int(i) for i in indices]}, self.ctx.test_timeout + 30)
        if "error" in answer:
            raise FreshProcessError(f"fresh process: {answer['error']}")
        raw = answer.get("failure")
        return Failure.from_json(raw) if raw else None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"stop": True}) + "\n")
            self.proc.stdin.flush()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _same(failure: Failure | None, signature: str) -> bool:
    if failure is None:
        return False
    return failure.signature.removeprefix("nondeterministic:") == signature.removeprefix(
        "nondeterministic:"
    )


class FreshConfirmer:
    """``confirm(case, history) -> (case, sequence)`` for :func:`fuzzkit.engines.hypothesis.fuzz`.

    Returns the case unchanged (with ``details["fresh_process"]`` saying so) when it fails alone
    in a fresh process; relabelled ``state-dependent`` otherwise, with the minimized
    :class:`CaseSequence` that replays it (None if no sequence of the recorded history does).
    """

    def __init__(self, ctx: FreshContext) -> None:
        self.ctx = ctx

    def __call__(
        self,
        case: Case,
        history: Sequence[dict[str, Any]],
        first: tuple[dict[str, Any], Sequence[dict[str, Any]]] | None = None,
    ) -> tuple[Case, CaseSequence | None]:
        return self.confirm(case, history, first)

    def confirm(
        self,
        case: Case,
        history: Sequence[dict[str, Any]],
        first: tuple[dict[str, Any], Sequence[dict[str, Any]]] | None = None,
    ) -> tuple[Case, CaseSequence | None]:
        """``history``: the cases that ran before ``case`` in the fuzzing run; ``first``: the
        ``(inputs, history)`` of the signature's first occurrence, before shrinking.

        Candidates, in order: the case alone (reproducible); the recorded history, then the
        case; the first occurrence's history, then the case; the first occurrence's history,
        then the *unshrunk* case (shrinking a state-dependent bug in one process can keep a
        case whose failure came from the shrinker's own attempts) -- the first sequence that
        fails the same way is cut by ddmin, and its last case becomes the finding's case."""
        failure = case.failure
        if (
            failure is None
            or failure.kind in ("timeout", "oom")
            or (failure.kind == "crash" and failure.signature.startswith("crash:signal:"))
        ):
            return case, None  # re-running a hang or a crash of the process proves nothing more
        first_inputs, first_history = first if first is not None else (case.inputs, history)
        steps = [*history, case.inputs, *first_history, first_inputs]
        at_case, at_first = len(history), len(steps) - 1
        own = list(range(len(history)))
        origin = list(range(len(history) + 1, at_first))
        candidates = [(own, at_case), (origin, at_case), (origin, at_first)]
        signature = failure.signature
        try:
            with Zygote(self.ctx, steps) as zygote:
                alone = zygote.run([at_case])
                if alone is not None:
                    note = (
                        "reproduced"
                        if _same(alone, signature)
                        else f"failed differently: {alone.signature}"
                    )
                    return _with_details(case, fresh_process=note), None
                for before, last in candidates:
                    if before and _same(zygote.run([*before, last]), signature):
                        break
                else:
                    return _state_dependent(case, None, len(history)), None
                kept = _minimize(zygote, before, last, signature, self.ctx)
        except FreshProcessError as exc:
            return _with_details(case, fresh_process=f"not confirmed: {exc}"[:300]), None
        if last != at_case:
            case = dataclasses.replace(case, inputs=steps[last])
        sequence = CaseSequence(
            case.target,
            case.implementation,
            [steps[i] for i in kept] + [steps[last]],
            origin=case.origin,
        )
        labelled = _state_dependent(case, sequence, len(history))
        sequence.failure = labelled.failure
        return labelled, sequence


def _minimize(
    zygote: Zygote, before: list[int], last: int, signature: str, ctx: FreshContext
) -> list[int]:
    """ddmin over the preceding cases (the failing one stays last), within the test budget."""
    from fuzzkit.shrink.ddmin import ddmin

    stop = time.monotonic() + ctx.time_limit

    def fails(indices: list[int]) -> bool:
        if zygote.tests >= ctx.max_tests or time.monotonic() > stop:
            return False
        return _same(zygote.run([*indices, last]), signature)

    # the shortest suffix first: state usually comes from the most recent cases
    for size in (1, 2, 4, 8, 16):
        if size < len(before) and fails(before[-size:]):
            before = before[-size:]
            break
    return ddmin(before, fails)


def _with_details(case: Case, **extra: Any) -> Case:
    assert case.failure is not None
    f = case.failure
    return dataclasses.replace(
        case, failure=Failure(f.kind, f.message, f.signature, {**f.details, **extra})
    )


def _state_dependent(case: Case, sequence: CaseSequence | None, history: int) -> Case:
    assert case.failure is not None
    f = case.failure
    if sequence is None:
        note = (
            f"passes alone in a fresh process and no sequence of the {history} cases before "
            "it replays it: state from earlier in the run"
        )
        details = {**f.details, "fresh_process": "passed", "sequence": None}
    else:
        note = (
            f"passes alone in a fresh process; fails after {len(sequence.steps) - 1} earlier "
            f"case(s): replay the sequence {sequence.case_id}"
        )
        details = {
            **f.details,
            "fresh_process": "passed",
            "sequence": sequence.case_id,
            "sequence_steps": len(sequence.steps),
        }
    inner = f.signature.removeprefix("nondeterministic:")
    return dataclasses.replace(
        case,
        failure=Failure(
            "state-dependent", f"{note}; {f.message}", f"state-dependent:{inner}", details
        ),
    )


# -------------------------------------------------------------------------------- the zygote


def _zygote_main() -> int:
    """Read the setup, import everything, answer ``run`` requests with forked children."""
    import contextlib as _contextlib

    # The protocol gets its own descriptor; fd 1 becomes stderr, so nothing the target (or a
    # native library in it) prints can corrupt an answer.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    line = sys.stdin.readline()
    try:
        setup = json.loads(line)
        from fuzzkit.isolation import load_target_modules
        from fuzzkit.registry import get_target, resolve_implementation

        load_target_modules(setup["target"], setup.get("preload", ()), setup.get("target_spec"))
        target = get_target(setup["target"])
        impl = resolve_implementation(target, setup["implementation"])
        stack = _contextlib.ExitStack()
        for name in setup.get("mutants", ()):
            stack.enter_context(target.mutant(name).applied())
        steps = [decode_value(s) for s in setup["steps"]]
        # Import what the implementation runs (torch, triton, its kernels) once, here: every
        # forked test inherits the imports, none inherits a case's state.
        impl.unavailable()
        for module in target.coverage_sources(impl):
            with _contextlib.suppress(Exception):
                importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001 - report it, the parent decides
        out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:500]}) + "\n")
        out.flush()
        return 1
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    case_timeout = setup.get("case_timeout")
    test_timeout = float(setup.get("test_timeout", 120.0))
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("stop"):
            break
        chosen = [steps[i] for i in request["run"]]
        out.write(json.dumps(_fork_run(target, impl, chosen, case_timeout, test_timeout)) + "\n")
        out.flush()
    return 0


def _fork_run(
    target: Any,
    impl: Any,
    steps: list[dict[str, Any]],
    case_timeout: float | None,
    test_timeout: float,
) -> dict[str, Any]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, write one JSON line, leave without cleanup
        os.close(read_end)
        code = 0
        try:
            from fuzzkit.sequence import replay

            failures = replay(target, impl, steps, timeout=case_timeout)
            last = failures[-1] if failures else None
            payload: dict[str, Any] = {"failure": last.to_json() if last is not None else None}
        except BaseException as exc:  # noqa: BLE001
            payload = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            code = 1
        data = (json.dumps(payload) + "\n").encode()
        while data:
            data = data[os.write(write_end, data) :]
        os._exit(code)
    os.close(write_end)
    chunks: list[bytes] = []
    deadline = time.monotonic() + test_timeout
    with os.fdopen(read_end, "rb") as reader:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([reader], [], [], max(0.0, left))
            if not ready:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"error": f"test ran past {test_timeout:g} s"}
            chunk = os.read(reader.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode()
    if not text.strip():
        return {"error": f"child died ({_status(status)})"}
    return json.loads(text)


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit code {os.WEXITSTATUS(status)}"


if __name__ == "__main__":  # pragma: no cover - the zygote process
    raise SystemExit(_zygote_main())
