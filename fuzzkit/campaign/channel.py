"""How a worker's results reach the run: the one interface between fuzzing and where it is stored.

A worker never touches the run directory or the corpus itself; it hands events and findings to
a channel.  :class:`FileChannel` writes them where the worker runs (the in-process and local
backends): case files atomically into the corpus, events as
fsync'd lines of ``events.jsonl``, claims as hard links.  The Ray backend's channel sends the
same things to the coordinator as data instead (no shared filesystem assumed), and the
coordinator stores them through a :class:`FileChannel` of its own -- so what ends up on disk is
the same whichever way it travelled.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Protocol, cast

from fuzzkit.campaign.model import Event
from fuzzkit.campaign.state import CLAIMS, EventLog, claim_finding, finding_key


class Channel(Protocol):
    """Where a worker's events and findings go (see the module docstring)."""

    worker: int

    def emit(self, type: str, **fields: Any) -> Event:
        """Record one event; returns it as written."""
        ...

    def save_case(self, case_text: str, target: str, case_id: str, kind: str) -> str:
        """Store a case file (``kind``: findings, sequences, pending); returns its path."""
        ...

    def discard_case(self, path: str) -> None:
        """Remove a case stored with kind ``pending`` once it is superseded."""
        ...

    def claim(self, event: dict[str, Any]) -> bool:
        """True for the first worker of the run to report this (target, impl, signature)."""
        ...

    def claimed(self, target: str, impl: str, signature: str) -> bool:
        """Whether some worker of the run has claimed this signature already."""
        ...

    def close(self) -> None: ...


class FileChannel:
    """Events, claims and case files written straight to disk (see the module docstring).

    ``observer`` sees every event as it is written: the in-process backend folds them into the
    live progress display without reading the file back."""

    def __init__(
        self,
        run_dir: Path,
        corpus: Path,
        worker: int = -1,
        observer: Callable[[Event], None] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.corpus = Path(corpus)
        self.worker = worker
        self.observer = observer
        self.log = EventLog(self.run_dir, worker=worker)

    def emit(self, type: str, **fields: Any) -> Event:
        event = {"t": time.time(), "worker": fields.pop("worker", self.worker), "type": type}
        event.update(fields)
        self.write(event)
        return cast(Event, event)

    def write(self, event: Event | dict[str, Any]) -> None:
        self.log.write(event)
        if self.observer is not None:
            self.observer(cast(Event, event))

    def save_case(self, case_text: str, target: str, case_id: str, kind: str) -> str:
        from fuzzkit import corpus
        from fuzzkit.case import atomic_write_text

        if kind == "pending":
            directory = self.run_dir / "pending"
        else:
            directory = corpus.directory(self.corpus, target, kind)
        path = directory / f"{case_id}.json"
        if not path.exists():  # content-addressed: an existing file is this very case
            atomic_write_text(path, case_text)
        return str(path.resolve())

    def discard_case(self, path: str) -> None:
        candidate = Path(path)
        if candidate.parent.resolve() == (self.run_dir / "pending").resolve():
            candidate.unlink(missing_ok=True)

    def claim(self, event: dict[str, Any]) -> bool:
        return claim_finding(self.run_dir, event)

    def claimed(self, target: str, impl: str, signature: str) -> bool:
        name = finding_key(target, impl, signature) + ".json"
        return (self.run_dir / CLAIMS / name).exists()

    def close(self) -> None:
        self.log.close()
