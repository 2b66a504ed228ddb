"""The Ray channel: a worker's events, case files and claims travel to the coordinator as data.

The nodes of a cluster share no filesystem, so a Ray worker never writes the run directory or
the corpus.  Three pieces replace the files a :class:`~fuzzkit.campaign.channel.FileChannel`
would write:

* :class:`Hub`, a small actor on the coordinator's node, queues what workers send and decides
  claims: the first worker to claim a (target, implementation, signature) wins, and the hub
  starts with the run's claim files, so an earlier session's findings count (``--resume``).
* :class:`RayChannel` is a worker's end.  Events and case files are fire-and-forget calls, so
  fuzzing never waits for the coordinator; ``claim`` and ``claimed`` ask the hub (positives are
  cached); ``close`` waits until everything sent has arrived, so a worker's last events are not
  lost when it exits.  A stored case's "path" is a token (``hub:<kind>/<target>/<id>.json``).
* :class:`Receiver` is the coordinator's end: it drains the hub and stores every message through
  a ``FileChannel`` on the real run directory and corpus, in the order the worker sent them,
  replacing tokens with the paths the files were stored at.  The run directory ends up exactly
  as if the worker had written it, claim files included.

Only JSON text crosses the wire (the hub never holds a worker's objects), and the receiver checks
every message as it would a file: a case is stored only for a target of the plan, in a known
kind, under a plain content-hash name.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any, cast

from fuzzkit.campaign.channel import FileChannel
from fuzzkit.campaign.model import Event
from fuzzkit.campaign.state import CLAIMS, claim_finding, finding_key

#: What a :class:`RayChannel` returns for a stored case instead of a path.
TOKEN = "hub:"
#: Case kinds a worker stores (pending: a failure as first seen, before shrinking).
KINDS = ("findings", "sequences", "pending")
_CASE_ID = re.compile(r"[0-9A-Za-z_-]{1,128}")
#: Fire-and-forget sends kept before finished ones are collected (and their errors raised).
_COLLECT_AT = 64


class ChannelError(ValueError):
    """A message the coordinator cannot store (not JSON, an unknown op, an unsafe name)."""


def case_token(kind: str, target: str, case_id: str) -> str:
    return f"{TOKEN}{kind}/{target}/{case_id}.json"


def _dumps(message: dict[str, Any]) -> str:
    return json.dumps(message, sort_keys=True, default=str)


class Hub:
    """The coordinator's mailbox (a Ray actor; one call at a time, in the order each worker
    sent them).  Messages are JSON strings; it parses none of them."""

    def __init__(self, claimed: list[str]) -> None:
        self.inbox: list[str] = []
        self.claims: set[str] = set(claimed)

    def send(self, messages: list[str]) -> None:
        self.inbox.extend(messages)

    def claim(self, key: str, message: str) -> bool:
        """True for the first claim of ``key``; the claim's event goes into the inbox with it."""
        if key in self.claims:
            return False
        self.claims.add(key)
        self.inbox.append(message)
        return True

    def claimed(self, key: str) -> bool:
        return key in self.claims

    def drain(self) -> list[str]:
        messages, self.inbox = self.inbox, []
        return messages


def existing_claims(run_dir: Path) -> list[str]:
    """The claim keys a run holds on disk (an earlier session's findings)."""
    claims = Path(run_dir) / CLAIMS
    if not claims.is_dir():
        return []
    return sorted(p.stem for p in claims.glob("*.json"))


class RayChannel:
    """A worker's end of the channel (see the module docstring).  Thread-safe: the worker's
    heartbeat thread emits too."""

    def __init__(
        self, hub: Any, worker: int, node: str | None = None, timeout: float = 120.0
    ) -> None:
        import ray

        self.ray = ray
        self.hub = hub
        self.worker = worker
        self.node = node
        self.timeout = timeout
        self._lock = threading.Lock()
        self._sent: list[Any] = []
        self._closed = False
        self._claimed: set[str] = set()

    def emit(self, type: str, **fields: Any) -> Event:
        event = {"t": time.time(), "worker": fields.pop("worker", self.worker), "type": type}
        if type == "worker_start" and self.node:
            event["node"] = self.node  # which node of the cluster ran this worker
        event.update(fields)
        self._send({"op": "event", "event": event})
        return cast(Event, event)

    def save_case(self, case_text: str, target: str, case_id: str, kind: str) -> str:
        self._send(
            {"op": "case", "kind": kind, "target": target, "case_id": case_id, "text": case_text}
        )
        return case_token(kind, target, case_id)

    def discard_case(self, path: str) -> None:
        self._send({"op": "discard", "case": path})

    def claim(self, event: dict[str, Any]) -> bool:
        key = finding_key(event["target"], event["impl"], event["signature"])
        message = _dumps({"op": "claim", "event": event})
        with self._lock:
            self._check_open()
            ref = self.hub.claim.remote(key, message)
        won = bool(self._wait(ref))
        self._claimed.add(key)  # either way, it is claimed now
        return won

    def claimed(self, target: str, impl: str, signature: str) -> bool:
        key = finding_key(target, impl, signature)
        if key in self._claimed:
            return True
        with self._lock:
            self._check_open()
            ref = self.hub.claimed.remote(key)
        if self._wait(ref):
            self._claimed.add(key)
            return True
        return False

    def close(self) -> None:
        """Wait until the hub has everything this worker sent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sent, self._sent = self._sent, []
        self._wait(sent)

    # ------------------------------------------------------------------------------ plumbing

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the channel is closed")

    def _send(self, message: dict[str, Any]) -> None:
        text = _dumps(message)
        with self._lock:
            self._check_open()
            self._sent.append(self.hub.send.remote([text]))
            if len(self._sent) < _COLLECT_AT:
                return
            done, self._sent = self.ray.wait(self._sent, num_returns=len(self._sent), timeout=0)
        self._wait(done)  # finished sends: raise what failed (the hub is gone)

    def _wait(self, refs: Any) -> Any:
        try:
            return self.ray.get(refs, timeout=self.timeout)
        except Exception as exc:  # Ray's errors: the coordinator is unreachable
            raise OSError(
                f"the run's coordinator did not take the worker's results ({_first_line(exc)})"
            ) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


class Receiver:
    """The coordinator's end: stores what the hub holds (see the module docstring)."""

    def __init__(
        self, hub: Any, run_dir: Path, corpus: Path, targets: set[str], timeout: float = 60.0
    ) -> None:
        import ray

        self.ray = ray
        self.hub = hub
        self.timeout = timeout
        self.run_dir = Path(run_dir)
        self.files = FileChannel(self.run_dir, Path(corpus))
        self.targets = set(targets)
        self.stored: dict[str, str] = {}  # token -> path on this machine
        #: claims the hub granted that a claim file of this run refused (written by something
        #: the hub did not know about): their ``finding`` is logged as a ``duplicate``
        self.refused: set[str] = set()

    def pump(self) -> int:
        """Store everything the hub holds; returns how many messages.  Raises
        :class:`ChannelError` after storing the rest when a message was unusable, and OSError
        when a case cannot be written (both are internal errors of the run)."""
        try:
            messages = self.ray.get(self.hub.drain.remote(), timeout=self.timeout)
        except Exception as exc:  # Ray's errors (the hub died or never started): one line
            raise OSError(
                f"the hub of the Ray workers did not answer ({_first_line(exc)})"
            ) from exc
        errors: list[str] = []
        for text in messages:
            try:
                self._store(text)
            except ChannelError as exc:
                errors.append(str(exc))
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise ChannelError(f"a Ray worker sent {errors[0]}{more}")
        return len(messages)

    def close(self) -> None:
        self.files.close()

    def _store(self, text: Any) -> None:
        try:
            message = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            message = None
        if not isinstance(message, dict):
            raise ChannelError("a message that is not a JSON object")
        op = message.get("op")
        if op == "case":
            self._case(message)
        elif op == "discard":
            path = self.stored.get(str(message.get("case")))
            if path is not None:
                self.files.discard_case(path)
        elif op in ("event", "claim"):
            event = message.get("event")
            if not isinstance(event, dict) or not isinstance(event.get("type", ""), str):
                raise ChannelError(f"a message {op!r} without an event")
            if "case" in event:
                event["case"] = self.stored.get(str(event["case"]), event["case"])
            if op == "claim":
                self._claim(event)
            else:
                self._event(event)
        else:
            raise ChannelError(f"an unknown message {str(op)[:40]!r}")

    def _case(self, message: dict[str, Any]) -> None:
        kind, target = message.get("kind"), message.get("target")
        case_id, text = message.get("case_id"), message.get("text")
        if kind not in KINDS or target not in self.targets:
            raise ChannelError(f"a case of kind {str(kind)[:40]!r} for target {str(target)[:80]!r}")
        if not isinstance(case_id, str) or not _CASE_ID.fullmatch(case_id):
            raise ChannelError(f"a case named {str(case_id)[:80]!r}")
        if not isinstance(text, str):
            raise ChannelError("a case without its text")
        path = self.files.save_case(text, str(target), case_id, str(kind))
        self.stored[case_token(str(kind), str(target), case_id)] = path

    def _key(self, event: dict[str, Any]) -> str:
        target, impl, signature = (event.get(k) for k in ("target", "impl", "signature"))
        if not (isinstance(target, str) and isinstance(impl, str) and isinstance(signature, str)):
            raise ChannelError(f"a {event.get('type')} event without target, impl and signature")
        return finding_key(target, impl, signature)

    def _claim(self, event: dict[str, Any]) -> None:
        key = self._key(event)
        if not claim_finding(self.run_dir, event):
            self.refused.add(key)

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if not kind:
            raise ChannelError("an event without a type")
        if kind in ("found", "finding", "duplicate"):
            key = self._key(event)
            if kind == "finding" and key in self.refused:
                event = {
                    "t": event.get("t", time.time()),
                    "worker": event.get("worker", -1),
                    "type": "duplicate",
                    **{k: event.get(k) for k in ("target", "impl", "signature", "case")},
                }
        self.files.write(event)
