"""Accepted signatures (``fuzzkit run --known FILE``): differences a team triaged and lives with.

A known difference must not stop a campaign (before, the first failure of a pair ended its
fuzzing, so one accepted quirk hid every other bug of that pair), and must not be reported again
and again.  A known-signatures file is plain JSON, and every entry says *why* it is accepted::

    {"format": "fuzzkit-known/1",
     "known": [
       {"signature": "mismatch:scores:close", "reason": "fp16 scores, tracked in #123",
        "target": "quant", "implementation": "triton"},
       {"signature": "crash:ValueError@*", "reason": "inputs our API refuses anyway"}
     ]}

``target`` and ``implementation`` are optional filters; a ``signature`` ending in ``*`` matches
every signature with that prefix.  The file is untrusted input like a case file: bounded in size,
strictly validated, and any problem is one line that says what to fix.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable

from fuzzkit.errors import UsageError

FORMAT = "fuzzkit-known/1"
MAX_BYTES = 1024 * 1024
MAX_ENTRIES = 10_000
_ENTRY_KEYS = {"signature", "reason", "target", "implementation"}


@dataclasses.dataclass(frozen=True)
class KnownSignature:
    signature: str
    reason: str
    target: str | None = None
    implementation: str | None = None

    def matches(self, target: str, implementation: str, signature: str) -> bool:
        if self.target is not None and self.target != target:
            return False
        if self.implementation is not None and self.implementation != implementation:
            return False
        if self.signature.endswith("*"):
            return signature.startswith(self.signature[:-1])
        return signature == self.signature


@dataclasses.dataclass(frozen=True)
class KnownSignatures:
    entries: tuple[KnownSignature, ...] = ()

    def match(self, target: str, implementation: str, signature: str) -> KnownSignature | None:
        for entry in self.entries:
            if entry.matches(target, implementation, signature):
                return entry
        return None

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in dataclasses.asdict(e).items() if v is not None} for e in self.entries
        ]

    @classmethod
    def from_entries(cls, entries: Iterable[KnownSignature]) -> KnownSignatures:
        return cls(tuple(entries))


def load(path: Path) -> KnownSignatures:
    """Read and validate a known-signatures file; any problem is a one-line UsageError."""
    p = Path(path)
    try:
        if not p.is_file():
            raise UsageError(f"--known {p}: no such file (or not a regular file)")
        if p.stat().st_size > MAX_BYTES:
            raise UsageError(f"--known {p}: larger than {MAX_BYTES} bytes")
        with p.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--known {p}: cannot read it ({exc.strerror})") from None
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise UsageError(f"--known {p}: not a valid JSON file ({str(exc)[:200]})") from None
    return parse(data, str(p))


def parse(data: Any, source: str = "<known>") -> KnownSignatures:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(
            f'--known {source}: expected a JSON object with "format": "{FORMAT}" and a "known" list'
        )
    if set(data) - {"format", "known"}:
        raise UsageError(
            f"--known {source}: unknown keys {sorted(set(data) - {'format', 'known'})}"
        )
    entries = data.get("known")
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        raise UsageError(
            f'--known {source}: "known" must be a list of at most {MAX_ENTRIES} entries'
        )
    out = []
    for i, entry in enumerate(entries):
        where = f"--known {source}: entry {i}"
        if not isinstance(entry, dict) or set(entry) - _ENTRY_KEYS:
            raise UsageError(
                f"{where}: an object with signature, reason and optionally target "
                "and implementation"
            )
        for key in ("signature", "reason"):
            value = entry.get(key)
            if not isinstance(value, str) or not value.strip() or len(value) > 1000:
                raise UsageError(
                    f"{where}: {key!r} must be a non-empty string (every accepted "
                    "signature says why it is accepted)"
                )
        for key in ("target", "implementation"):
            if key in entry and (not isinstance(entry[key], str) or not entry[key]):
                raise UsageError(f"{where}: {key!r} must be a non-empty string")
        out.append(
            KnownSignature(
                entry["signature"],
                entry["reason"].strip(),
                entry.get("target"),
                entry.get("implementation"),
            )
        )
    return KnownSignatures(tuple(out))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
    return dict(pairs)
