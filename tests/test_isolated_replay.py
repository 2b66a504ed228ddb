"""Replaying a finding that kills or hangs its process gives a verdict, not a dead replayer.

A case file whose recorded failure is a crash, timeout or oom is replayed in an isolated child
process by default (``replay``, ``shrink``, pytest regression items); ``--isolate`` asks for it
for any file.  The crash targets (``crash_targets``) only ever run in such a child.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import crash_targets
from fuzzkit.case import Case
from fuzzkit.failure import Failure

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="signals and RLIMIT_AS as on Linux")

TESTS = str(Path(__file__).resolve().parent)
#: The fuzzkit command with the crash targets registered (as a conftest or plug-in would); -P:
#: the current directory is not put on sys.path, as for the installed console script.
LAUNCH = ("import sys; sys.path.insert(0, sys.argv.pop(1)); import crash_targets; "
          "from fuzzkit.cli import main; sys.exit(main(sys.argv[1:]))")


def _fuzzkit(*argv: str, cwd: Path) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-P", "-c", LAUNCH, TESTS, *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    return done.returncode, done.stdout, done.stderr


def _finding(tmp_path: Path, target: str, impl: str, kind: str, n: int = 999) -> Path:
    recorded = Failure(kind, "recorded", f"{kind}:recorded", {})
    return Case(target, impl, {"n": n}, failure=recorded, origin="isolated").save(tmp_path)


@pytest.mark.parametrize("target, impl, kind, extra, signature", [
    ("crash-segv", "ctypes", "crash", (), "crash:signal:SIGSEGV"),
    ("crash-segv", "abort", "crash", (), "crash:signal:SIGABRT"),
    ("crash-hang", "native", "timeout", ("--case-timeout", "1"), "timeout:crash-hang:native"),
    ("crash-alloc", "greedy", "oom", ("--memory-mb", "256"), "oom:crash-alloc:greedy"),
    ("crash-alloc", "oomkill", "oom", (), "oom:crash-alloc:oomkill"),
])
def test_replay_of_a_process_death_is_a_verdict(tmp_path: Path, target: str, impl: str,
                                                kind: str, extra: tuple[str, ...],
                                                signature: str) -> None:
    path = _finding(tmp_path, target, impl, kind)
    code, out, err = _fuzzkit("replay", str(path), *extra, cwd=tmp_path)
    assert code == 1, (out, err)
    assert out.startswith(f"FAIL  {path}  (isolated)  {signature}"), out
    assert "Traceback" not in err


def test_a_fixed_process_death_replays_as_a_pass(tmp_path: Path) -> None:
    path = _finding(tmp_path, "crash-segv", "ctypes", "crash", n=1)
    code, out, err = _fuzzkit("replay", str(path), cwd=tmp_path)
    assert code == 0, (out, err)
    assert "(isolated)" in out and "(fixed: the recorded crash:recorded no longer fails)" in out


def test_isolate_is_asked_for_any_file_and_a_python_hang_is_bounded_without_it(
        tmp_path: Path) -> None:
    """No failure recorded: in-process by default, where a Python hang still ends at the case
    time limit; ``--isolate`` runs a segfault in a child."""
    hang = Case("crash-hang", "python", {"n": 999}).save(tmp_path)
    code, out, err = _fuzzkit("replay", str(hang), "--case-timeout", "1", cwd=tmp_path)
    assert code == 1 and "timeout" in out and "(isolated)" not in out, (out, err)
    segv = Case("crash-segv", "ctypes", {"n": 999}).save(tmp_path)
    code, out, err = _fuzzkit("replay", str(segv), "--isolate", cwd=tmp_path)
    assert code == 1 and "crash:signal:SIGSEGV" in out, (out, err)


def test_shrink_of_a_segfault_runs_isolated(tmp_path: Path) -> None:
    path = _finding(tmp_path, "crash-segv", "ctypes", "crash")
    code, out, err = _fuzzkit("shrink", str(path), "--output", str(tmp_path / "out"),
                              cwd=tmp_path)
    assert code == 0, (out, err)
    assert "crash:signal:SIGSEGV" in out and "wrote" in out


def test_memory_limit_needs_isolation(tmp_path: Path) -> None:
    path = _finding(tmp_path, "crash-alloc", "greedy", "oom")
    code, out, err = _fuzzkit("replay", str(path), "--no-isolate", "--memory-mb", "64",
                              cwd=tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)
    assert crash_targets.TRIGGER <= 999


def test_a_corpus_regression_that_segfaults_fails_its_test_not_pytest(
        pytester: pytest.Pytester) -> None:
    corpus = pytester.path / "corpus" / "crash-segv" / "regressions"
    corpus.mkdir(parents=True)
    _finding(corpus, "crash-segv", "ctypes", "crash")
    _finding(corpus, "crash-segv", "ctypes", "crash", n=1)
    pytester.makeconftest("import crash_targets\n")
    result = pytester.runpytest_inprocess("-p", "no:randomly", str(pytester.path / "corpus"))
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*crash:signal:SIGSEGV*"])
