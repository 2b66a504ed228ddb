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
from typing import Any, Optional, Sequence, Union

from fuzzkit import __version__
from fuzzkit.case import (Case, CaseFileError, SavedAsJson, canonical_json, decode_value,
                          encode_value, from_json, parse_json, read_bounded)
from fuzzkit.failure import KINDS, Failure

FORMAT = "fuzzkit-sequence/1"
MAX_STEPS = 4096
_TOP_KEYS = {"format", "id", "fuzzkit_version", "target", "implementation", "origin", "steps",
             "failure"}


@dataclasses.dataclass
class CaseSequence(SavedAsJson):
    """Cases that run in order in one process; the last one fails (``failure``)."""

    target: str
    implementation: str
    steps: list[dict[str, Any]]
    failure: Optional[Failure] = None
    origin: str = "unknown"
    fuzzkit_version: str = __version__

    @property
    def case_id(self) -> str:
        key = {"target": self.target, "implementation": self.implementation,
               "steps": [encode_value(s) for s in self.steps]}
        return hashlib.sha256(canonical_json(key).encode("ascii")).hexdigest()[:20]

    def cases(self) -> list[Case]:
        return [Case(self.target, self.implementation, step, origin=self.origin)
                for step in self.steps]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "id": self.case_id, "fuzzkit_version": self.fuzzkit_version,
                "target": self.target, "implementation": self.implementation,
                "origin": self.origin, "steps": [encode_value(s) for s in self.steps],
                "failure": self.failure.to_json() if self.failure else None}


def from_data(data: Any, source: str = "<sequence>") -> CaseSequence:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CaseFileError(f"{source}: not a fuzzkit case sequence (format {FORMAT!r})")
    extra = set(data) - _TOP_KEYS
    if extra:
        raise CaseFileError(f"{source}: unknown keys {sorted(extra)}")
    for key in ("target", "implementation"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise CaseFileError(f"{source}: {key!r} must be a non-empty string")
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps or len(steps) > MAX_STEPS:
        raise CaseFileError(f"{source}: 'steps' must be a list of 1 to {MAX_STEPS} inputs")
    decoded = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise CaseFileError(f"{source}: step {i} must be a JSON object of inputs")
        try:
            decoded.append(decode_value(step, f"steps[{i}]"))
        except RecursionError:
            raise CaseFileError(f"{source}: step {i} nested too deeply") from None
        except CaseFileError as exc:
            raise CaseFileError(f"{source}: {exc}") from None
    failure = None
    raw = data.get("failure")
    if raw is not None:
        if (not isinstance(raw, dict) or raw.get("kind") not in KINDS
                or not isinstance(raw.get("message"), str)
                or not isinstance(raw.get("signature"), str)
                or not isinstance(raw.get("details", {}), dict)):
            raise CaseFileError(f"{source}: 'failure' needs kind, message, signature and details")
        failure = Failure.from_json(raw)
    sequence = CaseSequence(data["target"], data["implementation"], decoded, failure,
                            str(data.get("origin", "unknown")),
                            str(data.get("fuzzkit_version", "unknown")))
    if "id" in data and data["id"] != sequence.case_id:
        raise CaseFileError(f"{source}: content hash mismatch (file says {data['id']}, content "
                            f"hashes to {sequence.case_id}); the file was edited or corrupted")
    return sequence


def load_any(path: os.PathLike[str] | str) -> Union[Case, CaseSequence]:
    """A case file or a case sequence, whichever ``path`` holds (validated, bounded)."""
    p = Path(path)
    data = parse_json(read_bounded(p), str(p))
    if isinstance(data, dict) and data.get("format") == FORMAT:
        return from_data(data, str(p))
    return from_json(data, str(p))


def replay(target: Any, impl: Any, steps: Sequence[dict[str, Any]], *,
           timeout: Optional[float] = None) -> list[Optional[Failure]]:
    """Run every step in order in this process, as the fuzzing run did (reference,
    implementation, oracle, properties); the failure of each (None for a pass)."""
    from fuzzkit.runner import check_case

    return [check_case(target, impl, step, confirm=False, timeout=timeout).failure
            for step in steps]
