"""The command that replays a finding, as every report prints it (run output, summary table,
HTML report), so none of them can leave out what the replay needs.

A case file names its implementation, but ``fuzzkit replay`` imports only registered ones: a
file never chooses code to import.  A finding of an outside ``module:attr`` implementation
therefore replays only with ``--impl module:attr`` *and* where that module imports -- on the
machine and ``PYTHONPATH`` of the run, not necessarily a colleague's.  A finding made under a
shipped mutant (``fuzzkit run --mutant NAME``) passes on the real implementation, so its replay
needs the same ``--mutant``; without it the replay reads as "fixed".
"""

from __future__ import annotations

import shlex
from typing import Iterable


def outside_module(implementation: str) -> str | None:
    """The module an outside ``module:attr[options]`` implementation is imported from (None for
    a registered one)."""
    base = implementation.split("[", 1)[0]
    if ":" not in base:
        return None
    return base.split(":", 1)[0]


def replay_command(case: str, implementation: str = "", mutants: Iterable[str] = ()) -> str:
    """``fuzzkit replay CASE`` plus the options without which it would not replay the finding."""
    words = ["fuzzkit", "replay", str(case)]
    if outside_module(implementation) is not None:
        words += ["--impl", implementation]
    for mutant in mutants:
        words += ["--mutant", mutant]
    return " ".join(shlex.quote(word) for word in words)


def replay_note(implementation: str) -> str:
    """What the replay needs besides the command ('' when nothing): the outside module."""
    module = outside_module(implementation)
    if module is None:
        return ""
    return f"needs {module} importable: installed, or its folder on PYTHONPATH"


def replay_hint(case: str, implementation: str = "", mutants: Iterable[str] = ()) -> str:
    """The command with its note, for one line of text:
    ``fuzzkit replay F --impl mypkg.mod:fn  (needs mypkg.mod importable: ...)``."""
    note = replay_note(implementation)
    return replay_command(case, implementation, mutants) + (f"  ({note})" if note else "")
