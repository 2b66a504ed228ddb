"""No oracle may depend on the CPU's BLAS kernel: the kernel tests pass under other OpenBLAS cores.

Under the Triton interpreter ``tl.dot`` is a NumPy matmul, and OpenBLAS picks its kernels by CPU
(``DYNAMIC_ARCH``): the float32 result of a row can depend on where the row falls in the kernel's
blocks.  A bitwise claim that holds with this machine's kernels (SkylakeX here) then fails on an
AMD EPYC (``Zen``, which OpenBLAS serves with its Haswell kernels).  ``OPENBLAS_CORETYPE`` forces a
core, so the kernel tests run here as they would there -- in a subprocess, since OpenBLAS reads it
once, at load.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Zen: what an AMD EPYC gets by default (Haswell kernels), the machine the suite once failed on.
#: More cores (Prescott: the oldest x86-64 kernels) with ``FUZZKIT_BLAS_CORES=Zen,Prescott``:
#: each re-run costs minutes of the suite's 15.
CORES = tuple(filter(None, os.environ.get("FUZZKIT_BLAS_CORES", "Zen").split(",")))
#: Kernel tests not re-run under another core: they fuzz until a planted bug shows, so what they
#: measure is how fast the search finds it (a third of the kernel tests' time), not a verdict
#: the BLAS kernel could flip.  Every verdict on clean code, and every mutant test on fixed
#: inputs, still runs under each core.
SEARCH_SPEED_TESTS = ("test_each_mutant_is_caught", "test_mutant_caught_from_scratch")


def _env(core: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("OPENBLAS_CORETYPE", None)
    if core:
        env["OPENBLAS_CORETYPE"] = core
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _core_in_use(core: str) -> str:
    out = subprocess.run([sys.executable, "-c", "import numpy"], env={
        **_env(core), "OPENBLAS_VERBOSE": "2"}, capture_output=True, text=True, timeout=120)
    lines = [line for line in out.stderr.splitlines() if line.startswith("Core:")]
    return lines[0].split(":", 1)[1].strip() if lines else "unknown"


@pytest.mark.parametrize("core", CORES)
def test_kernel_tests_pass_under_another_blas_core(core: str) -> None:
    native = _core_in_use("")
    forced = _core_in_use(core)
    if forced == "unknown":
        pytest.skip("NumPy's BLAS does not report its core (not OpenBLAS with DYNAMIC_ARCH)")
    if forced == native:
        pytest.skip(f"this CPU already uses the {native} kernels")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:xdist", "-p", "no:cacheprovider",
         "-m", "kernel", "-k", " and ".join(f"not {name}" for name in SEARCH_SPEED_TESTS),
         "tests"],
        cwd=ROOT, env=_env(core), capture_output=True, text=True, timeout=1500)
    tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-25:])
    assert run.returncode == 0, f"kernel tests under OPENBLAS_CORETYPE={core} ({forced}):\n{tail}"
