"""Confirmed upstream defects (``corpus/<target>/upstream/<name>/``) still reproduce.

Each entry holds a triage note, a standalone ``repro.py`` (exit 1: the defect reproduces) and
the fuzzkit case it was minimized from.  The test *expects* the defect: the day an upstream fix
lands in the versions this repository installs, it fails and says so, and the entry moves to
the fixed list of its note.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuzzkit.case import load
from fuzzkit.targets.compiler.inductor import cpp_driver

ROOT = Path(__file__).resolve().parent.parent
ENTRIES = sorted(p for p in ROOT.glob("corpus/*/upstream/*") if p.is_dir())


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``args`` in a clean child: its own Inductor cache (not this worker's, which the target
    exported) and a C++ compiler driver where ``CXX`` names a C one (a standalone repro is
    torch-only and takes ``CXX`` as it is; see ``inductor.cpp_driver``)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TRITON_INTERPRET="1")
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    if "CXX" in env:
        env["CXX"] = cpp_driver(env["CXX"])
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_upstream_corpus_is_not_empty() -> None:
    assert ENTRIES, "no corpus/*/upstream/* entries: the glob or the layout changed"


@pytest.mark.parametrize("entry", ENTRIES, ids=[p.name for p in ENTRIES])
def test_entry_is_complete(entry: Path) -> None:
    assert (entry / "NOTE.md").is_file() and (entry / "repro.py").is_file()
    [case_file] = entry.glob("*.json")
    case = load(case_file)  # an untrusted-input load like any case file: bounded, validated
    assert case.failure is not None, "an upstream entry records the failure it reproduces"


@pytest.mark.parametrize("entry", ENTRIES, ids=[p.name for p in ENTRIES])
def test_standalone_repro_still_reproduces(entry: Path) -> None:
    run = _run([sys.executable, "repro.py"], entry)
    assert run.returncode != 0 or "REPRODUCES" in run.stdout, run.stdout
    assert run.returncode == 1, (
        f"{entry.name}: the standalone repro no longer reproduces (exit {run.returncode}): "
        f"fixed upstream in these versions? Update {entry / 'NOTE.md'}.\n{run.stdout}{run.stderr}"
    )


@pytest.mark.parametrize("entry", ENTRIES, ids=[p.name for p in ENTRIES])
def test_case_still_fails_with_its_signature(entry: Path) -> None:
    [case_file] = entry.glob("*.json")
    recorded = load(case_file).failure
    run = _run([sys.executable, "-m", "fuzzkit.cli", "replay", str(case_file)], ROOT)
    assert run.returncode == 1, (
        f"{entry.name}: replay exit {run.returncode}\n{run.stdout}{run.stderr}"
    )
    assert recorded is not None and recorded.signature in run.stdout, run.stdout
