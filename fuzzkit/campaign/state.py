"""The run directory of a campaign: ``state.json`` (rewritten atomically) and ``events.jsonl``.

``events.jsonl`` is append-only; every event is one line written with a single ``write(2)`` on
an ``O_APPEND`` descriptor and fsync'd, so lines from concurrent workers never interleave and an
event that is in the file survives a crash.  A reader must tolerate a torn last line (a process
killed mid-write): :func:`read_events` only consumes complete lines.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator, cast

from fuzzkit.campaign.model import Event
from fuzzkit.case import atomic_write_text

STATE = "state.json"
EVENTS = "events.jsonl"
CLAIMS = "claims"


def write_state(run_dir: Path, state: dict[str, Any]) -> None:
    atomic_write_text(Path(run_dir) / STATE, json.dumps(state, indent=2, sort_keys=True) + "\n")


def read_state(run_dir: Path) -> dict[str, Any]:
    """A run's state file, read like a case file (bounded, regular file, strict JSON): it lies on
    disk where anyone may edit it.  Raises :class:`~fuzzkit.errors.CaseFileError` (one line)."""
    from fuzzkit.case import parse_json, read_bounded
    from fuzzkit.errors import CaseFileError

    path = Path(run_dir) / STATE
    state = parse_json(read_bounded(path), str(path))
    if not isinstance(state, dict):
        raise CaseFileError(f"{path}: top level must be a JSON object")
    return state


class EventLog:
    """Appends events to ``run_dir/events.jsonl``; one per line, fsync'd."""

    def __init__(self, run_dir: Path, worker: int = -1) -> None:
        self.path = Path(run_dir) / EVENTS
        self.worker = worker
        # 0666 less the umask, like every file of a run (fuzzkit.case.atomic_write_bytes)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def emit(self, type: str, **fields: Any) -> dict[str, Any]:
        event = {
            "t": time.time(),
            "worker": fields.pop("worker", self.worker),
            "type": type,
            **fields,
        }
        self.write(event)
        return event

    def write(self, event: Event | dict[str, Any]) -> None:
        data = (json.dumps(event, sort_keys=True, default=str) + "\n").encode()
        os.write(self.fd, data)
        os.fsync(self.fd)

    def close(self) -> None:
        fd, self.fd = self.fd, -1  # a late write fails (EBADF) instead of hitting a reused fd
        try:
            os.close(fd)
        except OSError:
            pass


class EventReader:
    """Incrementally reads complete lines of ``events.jsonl``."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / EVENTS
        self.offset = 0

    def read(self) -> list[Event]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        return list(_parse(data[: end + 1]))


def read_events(run_dir: Path) -> list[Event]:
    return EventReader(run_dir).read()


def _parse(data: bytes) -> Iterator[Event]:
    for line in data.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except ValueError:  # a torn line from a killed writer, followed by a newer one
            continue
        if isinstance(event, dict):
            yield cast(Event, event)


def finding_key(target: str, impl: str, signature: str) -> str:
    return hashlib.sha256(f"{target}\0{impl}\0{signature}".encode()).hexdigest()[:24]


def claim_finding(run_dir: Path, event: Event | dict[str, Any]) -> bool:
    """Atomically claim a (target, impl, signature): True for the first claimant in the run.

    The claim file holds the complete finding event (written to a temporary file, then
    hard-linked into place, which fails if the name exists), so a finding whose event line was
    never appended (a kill in between) is recovered by :func:`reconcile_claims`.
    """
    claims = Path(run_dir) / CLAIMS
    claims.mkdir(parents=True, exist_ok=True)
    name = claims / (finding_key(event["target"], event["impl"], event["signature"]) + ".json")
    if name.exists():
        return False
    tmp = claims / f".{name.stem}.{os.getpid()}.tmp"
    atomic_write_text(tmp, json.dumps(event, sort_keys=True, default=str) + "\n")
    try:
        os.link(tmp, name)
        return True
    except FileExistsError:
        return False
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def reconcile_claims(run_dir: Path, events: list[Event] | None = None) -> int:
    """Append the finding events of claims that never reached events.jsonl; returns how many."""
    claims = Path(run_dir) / CLAIMS
    if not claims.is_dir():
        return 0
    events = read_events(run_dir) if events is None else events
    logged = {
        finding_key(e["target"], e["impl"], e["signature"])
        for e in events
        if e.get("type") == "finding"
    }
    log, added = None, 0
    for path in sorted(claims.glob("*.json")):
        if path.stem in logged:
            continue
        try:
            event = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        log = log or EventLog(run_dir, worker=event.get("worker", -1))
        log.write({**event, "recovered": True})
        added += 1
    if log is not None:
        log.close()
    return added
