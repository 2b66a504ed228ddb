"""Isolation: a segfault, a hang and unbounded allocation become findings, in bounded time, and the
campaign goes on.  The crash targets only ever run in the IsolatedChecker's child process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import crash_targets
from fuzzkit import case as case_io
from fuzzkit.engines.hypothesis import fuzz
from fuzzkit.isolation import IsolatedChecker, WorkerStartupError
from fuzzkit.registry import get_target

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="signals and RLIMIT_AS as on Linux")

PRELOAD = ["crash_targets"]


def _checker(tmp_path: Path, target: str, impl: str, **kw: object) -> IsolatedChecker:
    kw.setdefault("case_timeout", 1.0)
    return IsolatedChecker(target, impl, inflight_dir=tmp_path / "inflight", preload=PRELOAD,
                           **kw)  # type: ignore[arg-type]


def _fuzz(target_name: str, impl_name: str, checker: IsolatedChecker, **kw: object):
    target = get_target(target_name)
    return fuzz(target, target.implementation(impl_name), budget=kw.pop("budget", 5.0), seed=1,
                profile="ci", database_dir=None, checker=checker, **kw)  # type: ignore[arg-type]


def test_segfault_becomes_a_crash_finding_and_the_campaign_goes_on(tmp_path: Path) -> None:
    with _checker(tmp_path, "crash-segv", "ctypes") as checker:
        # Every crash restarts the child, so shrinking is slow on a loaded machine: a generous
        # budget, and the run stops at this first finding.
        result = _fuzz("crash-segv", "ctypes", checker, case_timeout=1.0, budget=40.0,
                       max_findings=1)
        assert result.finding is not None
        failure = result.finding.failure
        assert failure.kind == "crash" and failure.signature == "crash:signal:SIGSEGV"
        assert "killed by SIGSEGV" in failure.message
        # Hypothesis shrank to the smallest crashing input: cases ran after the crash, each
        # crash in a fresh child.
        assert result.finding.inputs == {"n": crash_targets.TRIGGER}
        assert result.cases > result.cases_to_first_failure
        assert checker.starts >= 3
        # The finding is a regular case file that replays (through isolation) to the same bug.
        path = result.finding.save(tmp_path / "findings")
        loaded = case_io.loads(path.read_text())
        target = get_target("crash-segv")
        again = checker(target, target.implementation("ctypes"), loaded.inputs)
        assert again.failure.signature == failure.signature
        # ... and the checker still runs passing cases after all that.
        assert checker(target, target.implementation("ctypes"), {"n": 1}).passed


def test_native_hang_is_killed_and_becomes_a_timeout(tmp_path: Path) -> None:
    start = time.monotonic()
    with _checker(tmp_path, "crash-hang", "native", case_timeout=0.5) as checker:
        result = _fuzz("crash-hang", "native", checker, case_timeout=0.5, shrink=False,
                       budget=3.0)
    assert result.finding is not None
    failure = result.finding.failure
    assert (failure.kind, failure.signature) == ("timeout", "timeout:crash-hang:native")
    assert failure.details.get("killed") is True
    assert time.monotonic() - start < 20


def test_unbounded_allocation_hits_the_memory_limit_as_oom(tmp_path: Path) -> None:
    start = time.monotonic()
    with _checker(tmp_path, "crash-alloc", "greedy", memory_mb=256) as checker:
        target = get_target("crash-alloc")
        impl = target.implementation("greedy")
        assert checker(target, impl, {"n": 3}).passed  # small cases run under the limit
        result = _fuzz("crash-alloc", "greedy", checker, shrink=False, budget=3.0)
        assert checker.starts == 1  # MemoryError is caught in the child: no restart needed
    assert result.finding is not None
    failure = result.finding.failure
    assert (failure.kind, failure.signature) == ("oom", "oom:crash-alloc:greedy")
    assert "MemoryError" in failure.message and failure.details["memory_mb"] == 256
    assert time.monotonic() - start < 20


@pytest.mark.parametrize("target_name, impl_name, kind, signature", [
    ("crash-segv", "abort", "crash", "crash:signal:SIGABRT"),
    ("crash-segv", "cuda", "crash", "crash:cuda:an_illegal_memory_access_was_encountered"),
    ("crash-alloc", "oomkill", "oom", "oom:crash-alloc:oomkill"),
    ("crash-hang", "python", "timeout", "timeout:crash-hang:python"),
])
def test_each_death_has_its_kind(tmp_path: Path, target_name: str, impl_name: str, kind: str,
                                 signature: str) -> None:
    target = get_target(target_name)
    impl = target.implementation(impl_name)
    with _checker(tmp_path, target_name, impl_name, case_timeout=0.5) as checker:
        assert checker(target, impl, {"n": 1}).passed
        failure = checker(target, impl, {"n": 999}).failure
        assert (failure.kind, failure.signature) == (kind, signature)
        assert checker(target, impl, {"n": 2}).passed  # a fresh child (where needed) goes on
        assert not (tmp_path / "inflight" / f"{os.getpid()}.json").exists()


def test_inflight_case_survives_a_hard_kill_of_the_worker(tmp_path: Path) -> None:
    """SIGKILL the process that drives the checker while a case hangs: the case is on disk,
    and the child goes down with its parent."""
    inflight = tmp_path / "inflight"
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = {[str(Path(__file__).parent), str(Path(__file__).parent.parent)]!r}
        from fuzzkit.isolation import IsolatedChecker
        from fuzzkit.registry import get_target
        if __name__ == "__main__":
            import crash_targets
            target = get_target("crash-hang")
            checker = IsolatedChecker("crash-hang", "native", case_timeout=60,
                                      inflight_dir={str(inflight)!r}, preload=["crash_targets"])
            assert checker(target, target.implementation("native"), {{"n": 1}}).passed
            print(checker.pid, flush=True)
            checker(target, target.implementation("native"), {{"n": 777}})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(proc.stdout.readline())
        path = inflight / f"{proc.pid}.json"
        deadline = time.monotonic() + 20
        while not path.exists() or case_io.loads(path.read_text()).inputs != {"n": 777}:
            assert time.monotonic() < deadline, "in-flight case never written"
            time.sleep(0.05)
        time.sleep(0.3)  # the case is running now
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    saved = case_io.loads(path.read_text())
    assert (saved.target, saved.implementation, saved.inputs) == ("crash-hang", "native",
                                                                  {"n": 777})
    assert saved.origin == "inflight" and saved.failure is None
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, "isolated child outlived its parent"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[-1][:1] != "Z"
    except FileNotFoundError:
        return False


def test_unknown_target_in_the_child_is_a_startup_error(tmp_path: Path) -> None:
    """A Target object registered in-process cannot be rebuilt in the child: one clear error."""
    from fuzzkit import registry

    target = crash_targets.segv_target()
    target.name = "crash-segv-object"
    registry.register_target(target, replace=True)
    checker = IsolatedChecker("crash-segv-object", "ctypes", inflight_dir=tmp_path)
    try:
        assert checker.target_spec is None
        with pytest.raises(WorkerStartupError, match="unknown target 'crash-segv-object'"):
            checker(target, target.implementation("ctypes"), {"n": 1})
    finally:
        checker.close()
        registry.unregister_target("crash-segv-object")


def test_isolated_run_of_a_real_mutant_matches_the_in_process_one(tmp_path: Path) -> None:
    """Ordinary findings are unchanged by isolation (mutant applied in the child, ddmin through
    the checker)."""
    target = get_target("toy-alloc")
    impl = target.implementation("heap")
    # No preload: toy-alloc was registered by conftest with a factory the child imports itself.
    with IsolatedChecker("toy-alloc", "heap", case_timeout=5.0, inflight_dir=tmp_path,
                         mutant="double-free") as checker:
        assert checker.target_spec == "toy_targets:alloc_target"
        result = fuzz(target, impl, budget=10.0, seed=3, profile="ci", database_dir=None,
                      checker=checker)
    assert result.finding is not None
    assert result.finding.failure.kind in ("mismatch", "invariant")
    assert result.finding.origin == "hypothesis+ddmin"
    json.dumps(result.finding.to_json())


def test_checker_works_inside_a_daemonic_worker(tmp_path: Path) -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    answer = ctx.Queue()
    worker = ctx.Process(target=crash_targets.isolated_segfault_signature,
                         args=(str(tmp_path), answer), daemon=True)
    worker.start()
    try:
        assert answer.get(timeout=60) == "crash:signal:SIGSEGV"
    finally:
        worker.join(timeout=10)
        if worker.is_alive():
            worker.kill()


@pytest.mark.parametrize("text, signature", [
    ("kernel raised RuntimeError: CUDA error: device-side assert triggered",
     "crash:cuda:device_side_assert_triggered"),
    ("kernel raised AcceleratorError: CUDA error: an illegal memory access was encountered",
     "crash:cuda:an_illegal_memory_access_was_encountered"),
    ("kernel raised RuntimeError: Triton Error [CUDA]: misaligned address",
     "crash:cuda:misaligned_address"),
])
def test_cuda_errors_get_a_cuda_signature(text: str, signature: str) -> None:
    from fuzzkit.failure import Failure
    from fuzzkit.isolation import _as_cuda_crash

    crash = _as_cuda_crash(Failure("crash", text, "crash:RuntimeError@x.py:f", {}))
    assert crash is not None and crash.signature == signature and crash.kind == "crash"
    assert _as_cuda_crash(Failure("crash", "ValueError: no", "crash:ValueError@x.py:f")) is None
