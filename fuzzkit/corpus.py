"""The corpus: ``corpus/<target>/{seeds,findings,regressions,sequences}/<case-id>.json``.

*findings* are what a run found and minimized (not yet triaged); a human moves a finding to
*regressions* once the bug is fixed, and from then on it replays as a test forever.  *seeds* are
inputs worth keeping -- written by hand, or a corpus reduced by ``fuzzkit corpus merge``
(:mod:`fuzzkit.corpus_merge`); ``fuzzkit replay`` re-checks them, but a run does not read them
(it restarts from Hypothesis's example database).  *sequences* hold the case sequences that
replay a state-dependent finding (:mod:`fuzzkit.sequence`), named by their own content hash.
Every write is atomic (see :mod:`fuzzkit.case`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from fuzzkit.case import Case

KINDS = ("seeds", "findings", "regressions", "sequences")


def default_root() -> Path:
    return Path(os.environ.get("FUZZKIT_CORPUS", "corpus"))


def directory(root: Path, target: str, kind: str) -> Path:
    if kind not in KINDS:
        raise ValueError(f"unknown corpus kind {kind!r}; expected one of {KINDS}")
    return root / target / kind


def save(case: Case, root: Path, kind: str = "findings") -> Path:
    return case.save(directory(root, case.target, kind))


def case_files(paths: list[Path]) -> Iterator[Path]:
    """Expand directories into the ``*.json`` files under them, in a stable order."""
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*.json") if not p.name.startswith("."))
        else:
            yield path
