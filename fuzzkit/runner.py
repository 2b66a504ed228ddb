"""Run one case: reference, implementation, oracle, properties — and turn everything into a verdict.

Every engine (Hypothesis, atheris, replay, shrink, the pytest plugin) goes through
:func:`check_case`, so a case means the same thing wherever it came from.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import signal
import sysconfig
import tempfile
import threading
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any, Iterator

from fuzzkit.failure import Failure
from fuzzkit.target import Implementation, Inputs, Target

_PROJECT_ROOT = Path(__file__).resolve().parent.parent
_HARNESS_DIRS = tuple(str(_PROJECT_ROOT / d) + os.sep for d in ("fuzzkit", "oracles"))


class CaseTimeout(Exception):
    """Raised inside a case that ran past its time limit."""


def _raise_if_timed_out(exc: BaseException) -> None:
    """Re-raise the case's timeout when ``exc`` wraps it.

    Libraries catch the alarm's exception and raise their own from it (Inductor turns anything
    raised during compilation into an ``InductorError``); without this a slow compile under load
    would be reported as a crash at the library frame where the alarm happened to land."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, CaseTimeout):
            raise CaseTimeout() from exc
        seen.add(id(current))
        current = current.__cause__ or current.__context__


@dataclasses.dataclass
class Verdict:
    """What one case did: the failure (or None) plus the outputs, for reports and debugging."""

    failure: Failure | None
    expected: Any = None
    actual: Any = None

    @property
    def passed(self) -> bool:
        return self.failure is None


def check_case(
    target: Target,
    impl: Implementation,
    inputs: Inputs,
    *,
    properties: bool = True,
    confirm: bool = True,
    timeout: float | None = None,
) -> Verdict:
    """Run ``impl`` and the reference on ``inputs``; judge with the oracle and the properties.

    A failure is re-run once (``confirm``): if the second run does not fail the same way the
    verdict becomes ``nondeterministic``, which is a bug of its own and never silently dropped.
    """
    verdict = _check_once(target, impl, inputs, properties, timeout)
    if verdict.failure is None or not confirm or verdict.failure.kind == "timeout":
        return verdict
    again = _check_once(target, impl, inputs, properties, timeout)
    if again.failure is None or again.failure.signature != verdict.failure.signature:
        second = again.failure.signature if again.failure else "a pass"
        failure = verdict.failure.with_kind(
            "nondeterministic", prefix=f"re-run gave {second}; first run: "
        )
        return Verdict(failure, verdict.expected, verdict.actual)
    return verdict


def _check_once(
    target: Target, impl: Implementation, inputs: Inputs, properties: bool, timeout: float | None
) -> Verdict:
    # Reference and implementation get their own copies: one that writes into its inputs must
    # not change what the other sees, nor the case that gets saved.
    try:
        with time_limit(timeout):
            try:
                expected = target.reference(copy.deepcopy(inputs))
            except CaseTimeout:
                raise
            except Exception as exc:  # noqa: BLE001 - every exception is a verdict
                _raise_if_timed_out(exc)
                return Verdict(crash_failure(exc, where="reference"))
            try:
                actual = impl.fn(copy.deepcopy(inputs))
            except CaseTimeout:
                raise
            except Exception as exc:  # noqa: BLE001
                _raise_if_timed_out(exc)
                crash = crash_failure(exc, where=impl.name)
                if target.localize is not None:
                    crash = _localized(target, impl, inputs, crash)
                return Verdict(crash, expected)
            try:
                failure = target.oracle(inputs, expected, actual)
            except CaseTimeout:
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. outputs of the wrong structure
                _raise_if_timed_out(exc)
                return Verdict(crash_failure(exc, where="oracle"), expected, actual)
            if failure is not None and target.localize is not None:
                failure = _localized(target, impl, inputs, failure)
            if failure is None and properties:
                guarded = _copying(impl.fn)
                for prop in target.properties:
                    try:
                        failure = prop.check(guarded, copy.deepcopy(inputs))
                    except CaseTimeout:
                        raise
                    except Exception as exc:  # noqa: BLE001
                        _raise_if_timed_out(exc)
                        failure = crash_failure(exc, where=f"{impl.name} (property {prop.name})")
                    if failure is not None:
                        break
            return Verdict(failure, expected, actual)
    except CaseTimeout:
        return Verdict(
            Failure(
                "timeout",
                f"case ran past its {timeout:g} s limit",
                f"timeout:{target.name}:{impl.name}",
                {"limit_s": timeout},
            )
        )


def _localized(target: Target, impl: Implementation, inputs: Inputs, failure: Failure) -> Failure:
    """The oracle's failure with the culprit named by the target's ``localize`` hook.

    Localization only adds words and details: a hook that crashes, or that would change the
    failure's kind or signature (which shrinking and deduplication rely on), leaves the original
    failure in place, with a note saying why.
    """
    assert target.localize is not None
    try:
        located = target.localize(_copying(impl.fn), copy.deepcopy(inputs), failure)
    except CaseTimeout:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken hook must not hide the finding
        _raise_if_timed_out(exc)
        note = f"localization failed: {type(exc).__name__}: {exc}".splitlines()[0][:300]
        return Failure(
            failure.kind,
            failure.message,
            failure.signature,
            {**failure.details, "localization": note},
        )
    if located.kind != failure.kind or located.signature != failure.signature:
        return Failure(
            failure.kind,
            failure.message,
            failure.signature,
            {**failure.details, "localization": "hook changed the signature; ignored"},
        )
    return located


def _copying(fn: Any) -> Any:
    """``fn`` that gets its own copy of its inputs on every call (properties call it often)."""
    return lambda inputs: fn(copy.deepcopy(inputs))


def crash_failure(exc: BaseException, *, where: str) -> Failure:
    """A crash keyed by exception type and the innermost frame in the code under test."""
    frame = innermost_user_frame(exc.__traceback__)
    location = f"{frame[0]}:{frame[1]}" if frame else "?"
    message = f"{where} raised {type(exc).__name__}: {exc}".splitlines()[0][:500]
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    return Failure(
        "crash",
        message,
        f"crash:{where + ':' if where in ('reference', 'oracle') else ''}"
        f"{type(exc).__name__}@{location}",
        {
            "exception": type(exc).__name__,
            "where": where,
            "frame": location,
            "traceback": tb[-4000:],
        },
    )


def innermost_user_frame(tb: TracebackType | None) -> tuple[str, str] | None:
    """(file, function) of the innermost frame that belongs to code under test.

    Library frames (numpy, torch, triton, the standard library) and fuzzkit's own harness are
    skipped, so that the signature names *where the implementation went wrong*, which stays the
    same while the input shrinks.
    """
    frames = traceback.extract_tb(tb) if tb is not None else []
    for entry in reversed(frames):
        path = os.path.abspath(entry.filename)
        if path.startswith(_HARNESS_DIRS) or _is_library(path):
            continue
        return _short_path(path), entry.name
    if frames:
        return _short_path(os.path.abspath(frames[-1].filename)), frames[-1].name
    return None


def _library_roots() -> tuple[str, ...]:
    """Standard library, site-packages, and the temporary directory: code there is a library or
    was generated at run time (Inductor's C++/Triton modules, Triton's caches, the fusing
    compiler's kernels) under a content hash that changes with every input -- naming it would
    split one bug into as many signatures as there are cases."""
    roots = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(tempfile.gettempdir())
    return tuple(os.path.abspath(r) + os.sep for r in roots if r)


_LIBRARY_ROOTS = _library_roots()


def _is_library(path: str) -> bool:
    if path.startswith(str(_PROJECT_ROOT) + os.sep):
        return False
    return path.startswith(_LIBRARY_ROOTS) or path.startswith("<")


def _short_path(path: str) -> str:
    try:
        return Path(path).relative_to(_PROJECT_ROOT).as_posix()
    except ValueError:
        return Path(path).name


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt Python code that runs past ``seconds`` (main thread, POSIX only).

    Native code that never returns to the interpreter cannot be interrupted this way; campaigns
    isolate such cases in a subprocess instead.
    """
    usable = (
        seconds is not None
        and seconds > 0
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise CaseTimeout()

    assert seconds is not None  # usable
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
