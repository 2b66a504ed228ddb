"""Acceptance of ``--isolate``: an isolated 2-worker campaign over test targets that segfault,
abort, raise a CUDA error, hang (in Python and in native code), allocate without bound and get
SIGKILLed like the OOM killer does.  Each must become a finding (crash / timeout / oom) and the
campaign must finish within its budget.

    python scripts/isolation_campaign.py [--budget 60]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import crash_targets  # noqa: E402,F401  registers crash-segv, crash-hang, crash-alloc

from fuzzkit.cli import main  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=60.0)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="fuzzkit-isolation-"))
    started = time.time()
    rc = main(["run", "crash-segv", "crash-hang", "crash-alloc", "--isolate", "--memory-mb", "256",
               "--budget", str(args.budget), "--workers", "2", "--case-timeout", "2",
               "--progress", "quiet", "--corpus", str(scratch / "corpus"),
               "--report-dir", str(scratch / "reports")])
    wall = time.time() - started
    print(f"exit {rc} (1 = findings), wall {wall:.1f} s for a {args.budget:g} s budget; "
          f"corpus and report under {scratch}")
    findings = sorted((scratch / "corpus").glob("*/findings/*.json"))
    print(f"{len(findings)} finding file(s) on disk")
    sys.exit(0 if rc == 1 and len(findings) == 7 and wall <= args.budget + 30 else 1)
