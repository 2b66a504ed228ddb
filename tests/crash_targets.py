"""Targets whose implementations take the process down: a segfault, a hang, unbounded allocation.

They exist to test isolation (fuzzkit.isolation) and must never run in the test process itself:
only through an :class:`~fuzzkit.isolation.IsolatedChecker`, whose child imports this module
(``preload=["crash_targets"]``) to register them.  Each bug shows for ``n >= TRIGGER`` only, so
a fuzzing run first sees passing cases, then the failure, and Hypothesis's shrinking keeps
running cases (in fresh children) after the crash.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Any

from hypothesis import strategies as st

from fuzzkit import registry
from fuzzkit.failure import Failure
from fuzzkit.target import Implementation, Target

TRIGGER = 300


def _inputs() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"n": st.integers(0, 1000)})


def _reference(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"n": inputs["n"]}


def _oracle(inputs: dict[str, Any], expected: dict[str, Any], actual: dict[str, Any]) -> Any:
    if expected != actual:
        return Failure("mismatch", f"expected {expected}, got {actual}", "mismatch:n")
    return None


def _segfault(inputs: dict[str, Any]) -> dict[str, Any]:
    if inputs["n"] >= TRIGGER:
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    return {"n": inputs["n"]}


def _abort(inputs: dict[str, Any]) -> dict[str, Any]:
    if inputs["n"] >= TRIGGER:
        os.abort()
    return {"n": inputs["n"]}


def _hang_native(inputs: dict[str, Any]) -> dict[str, Any]:
    """Like native code that never returns to the interpreter: the SIGALRM time limit is blocked,
    so only the parent's kill ends it."""
    if inputs["n"] >= TRIGGER:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        while True:
            time.sleep(0.05)
    return {"n": inputs["n"]}


def _hang_python(inputs: dict[str, Any]) -> dict[str, Any]:
    """A Python loop that never ends: the child's own SIGALRM limit interrupts it."""
    if inputs["n"] >= TRIGGER:
        while True:
            time.sleep(0.05)
    return {"n": inputs["n"]}


def _alloc_unbounded(inputs: dict[str, Any]) -> dict[str, Any]:
    if inputs["n"] >= TRIGGER:
        hoard = []
        while True:
            hoard.append(bytearray(64 * 1024 * 1024))  # touched (zeroed) memory, 64 MiB a step
    return {"n": inputs["n"]}


def _killed_like_oom(inputs: dict[str, Any]) -> dict[str, Any]:
    """What the kernel's OOM killer does: SIGKILL out of the blue."""
    if inputs["n"] >= TRIGGER:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"n": inputs["n"]}


def _cuda_error(inputs: dict[str, Any]) -> dict[str, Any]:
    if inputs["n"] >= TRIGGER:
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel "
                           "errors might be asynchronously reported")
    return {"n": inputs["n"]}


def _target(name: str, description: str, impls: dict[str, Any]) -> Target:
    return Target(
        name=name,
        description=description,
        strategy=_inputs,
        reference=_reference,
        implementations={k: Implementation(k, fn, backend="python") for k, fn in impls.items()},
        oracle=_oracle,
    )


def segv_target() -> Target:
    return _target("crash-segv", "segfaults (and aborts) for n >= 300",
                   {"ctypes": _segfault, "abort": _abort, "cuda": _cuda_error})


def hang_target() -> Target:
    return _target("crash-hang", "never returns for n >= 300",
                   {"native": _hang_native, "python": _hang_python})


def alloc_target() -> Target:
    return _target("crash-alloc", "allocates without bound for n >= 300",
                   {"greedy": _alloc_unbounded, "oomkill": _killed_like_oom})


registry.register_target("crash-segv", replace=True)(segv_target)
registry.register_target("crash-hang", replace=True)(hang_target)
registry.register_target("crash-alloc", replace=True)(alloc_target)


def isolated_segfault_signature(inflight_dir: str, answer: object) -> None:
    """Run in a *daemonic* worker process (as campaign workers are): an IsolatedChecker there
    still starts its child, and the segfault comes back as a finding."""
    from fuzzkit.isolation import IsolatedChecker

    target = registry.get_target("crash-segv")
    with IsolatedChecker("crash-segv", "ctypes", case_timeout=2.0,
                         inflight_dir=inflight_dir) as checker:
        failure = checker(target, target.implementation("ctypes"), {"n": 999}).failure
    answer.put(failure.signature if failure else None)  # type: ignore[attr-defined]
