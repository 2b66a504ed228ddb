"""Run one case: reference, implementation, oracle, properties — and turn everything into a verdict.

Every engine (Hypothesis, atheris, replay, shrink, the pytest plugin) goes through
:func:`check_case`, so a case means the same thing wherever it came from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import signal
import sys
import sysconfig
import tempfile
import threading
import traceback
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Iterator

from fuzzkit.copying import copy_inputs
from fuzzkit.failure import Failure
from fuzzkit.target import Implementation, Inputs, Target, Unsupported, lazy

_PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _package_folder(name: str) -> str:
    """Where package ``name`` lives (found, not imported), with a trailing separator."""
    spec = importlib.util.find_spec(name)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return (os.path.abspath(locations[0]) + os.sep) if locations else ""


#: The harness's folders: fuzzkit's engine and its oracles, but not the targets (code under
#: test) that are installed inside the fuzzkit package (setup.py maps them there).
_FUZZKIT_DIR = str(Path(__file__).resolve().parent) + os.sep
_ORACLES_DIR = _package_folder("fuzzkit.oracles")
_TARGETS_DIR = _package_folder("fuzzkit.targets")


def _is_harness_path(path: str) -> bool:
    if _ORACLES_DIR and path.startswith(_ORACLES_DIR):
        return True
    return path.startswith(_FUZZKIT_DIR) and not (_TARGETS_DIR and path.startswith(_TARGETS_DIR))


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
    #: Why the implementation did not run the case (it raised :class:`Unsupported`), or None.
    unsupported: str | None = None

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
                expected = target.reference(copy_inputs(inputs))
            except CaseTimeout:
                raise
            except Exception as exc:  # noqa: BLE001 - every exception is a verdict
                _raise_if_timed_out(exc)
                return Verdict(crash_failure(exc, where="reference"))
            try:
                actual = impl.fn(copy_inputs(inputs))
            except CaseTimeout:
                raise
            except Unsupported as exc:
                return Verdict(None, expected, unsupported=str(exc) or type(exc).__name__)
            except Exception as exc:  # noqa: BLE001
                _raise_if_timed_out(exc)
                crash = crash_failure(exc, where=impl.name, code=code_under_test(target, impl))
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
                        if prop.uses_output:  # reuses the run just judged
                            failure = prop.check(guarded, copy_inputs(inputs), actual)
                        else:
                            failure = prop.check(guarded, copy_inputs(inputs))
                    except CaseTimeout:
                        raise
                    except Exception as exc:  # noqa: BLE001
                        _raise_if_timed_out(exc)
                        failure = crash_failure(
                            exc,
                            where=f"{impl.name} (property {prop.name})",
                            code=code_under_test(target, impl),
                        )
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
        located = target.localize(_copying(impl.fn), copy_inputs(inputs), failure)
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
    return lambda inputs: fn(copy_inputs(inputs))


def crash_failure(exc: BaseException, *, where: str, code: CodeUnderTest | None = None) -> Failure:
    """A crash keyed by exception type and the innermost frame in the code under test.

    ``code`` names that code (:func:`code_under_test`); without it (the reference, the oracle)
    the innermost frame outside libraries and fuzzkit is blamed.  File paths, in the signature
    and in the saved traceback alike, are relative to where each file's top-level package lies,
    so a case records the same text on every machine."""
    frame = innermost_user_frame(exc.__traceback__, code)
    location = f"{frame[0]}:{frame[1]}" if frame else "?"
    message = f"{where} raised {type(exc).__name__}: {exc}".splitlines()[0][:500]
    tb = _relative_traceback(exc)
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


#: Packages that are never code under test: fuzzkit's engine and its oracles are the harness.
_HARNESS_PACKAGES = frozenset({"fuzzkit", "fuzzkit.oracles"})

#: Sub-packages of fuzzkit that count as packages of their own when blaming a frame.
_NESTED_PACKAGES = ("fuzzkit.targets", "fuzzkit.oracles")


def package_of(module: str) -> str:
    """The package a module belongs to for blame: its top-level package, except that the
    targets and oracles installed under ``fuzzkit`` are packages of their own (a built-in
    implementation is code under test; fuzzkit's engine is not)."""
    for nested in _NESTED_PACKAGES:
        if module == nested or module.startswith(nested + "."):
            return nested
    return module.partition(".")[0]


@dataclasses.dataclass(frozen=True)
class CodeUnderTest:
    """The code a crash of an implementation is blamed on, found by module name, not by path.

    ``packages`` are top-level package names (``"vllm"``): a frame of theirs is code under test
    wherever the package is installed, site-packages included -- a path rule would call a
    pip-installed engine "library code" and blame the driver that called it.  ``drivers`` are
    modules that call into the implementation (the target's ``sources``, the module of its
    reference, an ``--impl`` object's wrapper): never blamed while a frame of the
    implementation exists, though they may share its package (``fuzzkit.targets``).
    """

    packages: frozenset[str] = frozenset()
    drivers: frozenset[str] = frozenset()

    def owns(self, module: str | None) -> bool:
        return (
            module is not None
            and package_of(module) in self.packages
            and module not in self.drivers
        )


def code_under_test(target: Target, impl: Implementation) -> CodeUnderTest:
    """What ``impl`` is made of: the top-level package of the module named by ``--impl
    module:attr`` (else of the module defining ``impl.fn``), plus any packages the object
    declares in a ``code_under_test`` attribute (an adapter in one package driving an engine
    installed as another declares the engine's, e.g. ``("vllm",)``)."""
    objects: list[Any] = [impl.fn]
    module = _module_of_callable(impl.fn)
    drivers = {*target.sources, _module_of_callable(target.reference)}
    spec_module, sep, attr = impl.name.partition(":")
    if sep and spec_module and attr:
        if module and package_of(module) != package_of(spec_module):
            drivers.add(module)  # the target's adapter (adapt_external) wrapping the object
        module = spec_module
        # Already imported by --impl; never imported here (the name may come from a report).
        found: Any = sys.modules.get(spec_module)
        for part in attr.split("."):
            found = getattr(found, part, None)
        objects.append(found)
    packages = {package_of(module)} if module else set()
    for obj in objects:
        declared = getattr(obj, "code_under_test", ())
        if isinstance(declared, str):
            declared = (declared,)
        if isinstance(declared, (tuple, list, frozenset, set)):
            packages.update(package_of(str(p)) for p in declared)
    return CodeUnderTest(
        frozenset(packages - _HARNESS_PACKAGES - {"__main__", ""}),
        frozenset(d for d in drivers if d),
    )


def _module_of_callable(fn: Any) -> str | None:
    if isinstance(fn, lazy):
        return fn.path.partition(":")[0]
    module = getattr(fn, "__module__", None)
    return module if isinstance(module, str) else None


def innermost_user_frame(
    tb: TracebackType | None, code: CodeUnderTest | None = None
) -> tuple[str, str] | None:
    """(file, function) of the innermost frame that belongs to code under test.

    First the innermost frame of ``code``'s packages (wherever installed); failing that,
    library frames (numpy, torch, triton, the standard library, site-packages) and fuzzkit's
    own harness are skipped, so that the signature names *where the implementation went
    wrong*, which stays the same while the input shrinks.
    """
    frames = [(frame.f_code, _module_of_frame(frame)) for frame, _ in traceback.walk_tb(tb)]
    if code is not None:
        for func, module in reversed(frames):
            path = os.path.abspath(func.co_filename)
            if code.owns(module) and not _is_harness_path(path):
                return _relative_path(func.co_filename, module), func.co_name
    for func, module in reversed(frames):
        path = os.path.abspath(func.co_filename)
        if _is_harness_path(path) or _is_library(path):
            continue
        return _relative_path(func.co_filename, module), func.co_name
    if frames:
        func, module = frames[-1]
        return _relative_path(func.co_filename, module), func.co_name
    return None


def _module_of_frame(frame: FrameType) -> str | None:
    """The frame's module name; ``__spec__`` first, so ``python -m pkg.mod`` is not ``__main__``."""
    name = getattr(frame.f_globals.get("__spec__"), "name", None) or frame.f_globals.get("__name__")
    return name if isinstance(name, str) else None


def _library_roots() -> tuple[str, ...]:
    """Standard library, site-packages, and the temporary directory: code there is a library or
    was generated at run time (Inductor's C++/Triton modules, Triton's caches, the fusing
    compiler's kernels) under a content hash that changes with every input -- naming it would
    split one bug into as many signatures as there are cases."""
    roots = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(tempfile.gettempdir())
    return tuple(os.path.abspath(r) + os.sep for r in roots if r)


_LIBRARY_ROOTS = _library_roots()


def _site_roots_in_project() -> tuple[str, ...]:
    """site-packages folders inside the project (a ``.venv`` there): library code, although
    under the project root."""
    project = str(_PROJECT_ROOT) + os.sep
    roots = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    roots = {os.path.abspath(r) + os.sep for r in roots if r}
    return tuple(r for r in roots if r.startswith(project))


_PROJECT_SITE_ROOTS = _site_roots_in_project()


def _in_project(path: str) -> bool:
    return path.startswith(str(_PROJECT_ROOT) + os.sep) and not path.startswith(_PROJECT_SITE_ROOTS)


def _is_library(path: str) -> bool:
    if _in_project(path):
        return False
    return path.startswith(_LIBRARY_ROOTS) or path.startswith("<")


def _relative_path(filename: str, module: str | None) -> str:
    """``filename`` relative to the project root, or else to the directory its top-level
    package lies in (``vllm/v1/core/block_pool.py``), or else its bare name: never a path
    that differs between machines."""
    if filename.startswith("<"):
        return filename
    path = Path(os.path.abspath(filename))
    if _in_project(str(path)):
        return path.relative_to(_PROJECT_ROOT).as_posix()
    if module:
        parts = module.split(".")
        if path.stem == "__init__":
            parts.append("__init__")
        tail = path.parts[-len(parts) :]
        if list(tail[:-1]) == parts[:-1] and Path(tail[-1]).stem == parts[-1]:
            return "/".join(tail)
    return path.name


def _relative_traceback(exc: BaseException) -> str:
    """The last lines of ``exc``'s formatted traceback, file paths made relative (the chained
    exceptions' frames too)."""
    names: dict[str, str] = {}
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for frame, _ in traceback.walk_tb(current.__traceback__):
            filename = frame.f_code.co_filename
            if filename not in names:
                names[filename] = _relative_path(filename, _module_of_frame(frame))
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    for filename, relative in names.items():
        text = text.replace(f'File "{filename}"', f'File "{relative}"')
    return text


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
