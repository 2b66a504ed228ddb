"""Case sequences: the reproducer of a bug that needs state left behind by earlier cases.

A cache keyed too coarsely, a buffer reused across calls, a global that one case sets and the next
reads: such a bug fails in the fuzzing process and passes when its case replays alone in a fresh
one.  :mod:`fuzzkit.fresh` finds the earlier cases it needs and saves them, in order, as a
*sequence*: the last case is the one that fails; the ones before it set up the state.
``fuzzkit replay SEQUENCE`` runs them in order in its own (fresh) process.

Format (canonical JSON like a case file, content-addressed, never unpickled)::

    {"format": "fuzzkit-sequence/1", "id": ..., "target": ..., "implementation": ...,
     "origin": ..., "steps": [inputs, inputs, ...], "failure": {...} | null}
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any, Sequence

from fuzzkit import __version__
from fuzzkit.case import (
    Case,
    CaseFileError,
    SavedAsJson,
    canonical_json,
    check_id,
    decode_inputs,
    encode_value,
    from_json,
    parse_header,
    parse_json,
    read_bounded,
)
from fuzzkit.failure import Failure

FORMAT = "fuzzkit-sequence/1"
MAX_STEPS = 4096
_TOP_KEYS = {
    "format",
    "id",
    "fuzzkit_version",
    "target",
    "implementation",
    "origin",
    "steps",
    "failure",
}


@dataclasses.dataclass
class CaseSequence(SavedAsJson):
    """Cases that run in order in one process; the last one fails (``failure``)."""

    target: str
    implementation: str
    steps: list[dict[str, Any]]
    failure: Failure | None = None
    origin: str = "unknown"
    fuzzkit_version: str = __version__

    @property
    def case_id(self) -> str:
        key = {
            "target": self.target,
            "implementation": self.implementation,
            "steps": [encode_value(s) for s in self.steps],
        }
        return hashlib.sha256(canonical_json(key).encode("ascii")).hexdigest()[:20]

    def cases(self) -> list[Case]:
        return [
            Case(self.target, self.implementation, step, origin=self.origin) for step in self.steps
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "id": self.case_id,
            "fuzzkit_version": self.fuzzkit_version,
            "target": self.target,
            "implementation": self.implementation,
            "origin": self.origin,
            "steps": [encode_value(s) for s in self.steps],
            "failure": self.failure.to_json() if self.failure else None,
        }


def from_data(data: Any, source: str = "<sequence>") -> CaseSequence:
    header = parse_header(data, source, FORMAT, _TOP_KEYS)
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps or len(steps) > MAX_STEPS:
        raise CaseFileError(f"{source}: 'steps' must be a list of 1 to {MAX_STEPS} inputs")
    decoded = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise CaseFileError(f"{source}: step {i} must be a JSON object of inputs")
        decoded.append(decode_inputs(step, f"steps[{i}]", source))
    sequence = CaseSequence(
        header.target,
        header.implementation,
        decoded,
        header.failure,
        header.origin,
        header.fuzzkit_version,
    )
    check_id(header.file_id, sequence.case_id, source)
    return sequence


def load_any(path: os.PathLike[str] | str) -> Case | CaseSequence:
    """A case file or a case sequence, whichever ``path`` holds (validated, bounded)."""
    p = Path(path)
    return loads_any(read_bounded(p), str(p))


def loads_any(text: str | bytes, source: str = "<file>") -> Case | CaseSequence:
    """The case or sequence in a file's contents (validated, bounded)."""
    data = parse_json(text, source)
    if isinstance(data, dict) and data.get("format") == FORMAT:
        return from_data(data, source)
    return from_json(data, source)


def replay(
    target: Any, impl: Any, steps: Sequence[dict[str, Any]], *, timeout: float | None = None
) -> list[Failure | None]:
    """Run every step in order in this process, as the fuzzing run did (reference,
    implementation, oracle, properties); the failure of each (None for a pass)."""
    from fuzzkit.runner import check_case

    return [
        check_case(target, impl, step, confirm=False, timeout=timeout).failure for step in steps
    ]
