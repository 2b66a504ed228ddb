"""Fuzzing fuzzkit's own loader with mutated real case files.

Everything between a file's bytes and the first line of code under test -- JSON parsing, the
schema of cases and sequences, array decoding, the content hash, the target's resource limits and
``validate``, the implementation a file may name -- must answer any input with either an accepted
case or a one-line :class:`~fuzzkit.errors.FuzzkitError`.  A traceback, a hang or a memory
blow-up is a bug of fuzzkit.

Inputs are real case files (the checked-in corpus) mutated at two levels:

* bytes: flips, deletions, insertions, duplicated and truncated ranges (what corruption does);
* JSON: a value anywhere in the file replaced by a hostile one (huge or negative integers, huge
  shapes, deep nesting, escape codes, names of code), deleted, its list items multiplied, or its
  integers scaled -- with the content id dropped, so mutations reach past the hash into limits and
  validation (what an attacker does).

Every choice comes from a ``pick(n) -> int in [0, n)`` callable, so the same mutator serves a
seeded ``random.Random`` (``scripts/fuzz_loader.py``, long runs) and Hypothesis (the bounded test
in the suite, which shrinks a failure to its smallest plan).
"""

from __future__ import annotations

import dataclasses
import json
import resource
import signal
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from fuzzkit.errors import FuzzkitError

Pick = Callable[[int], int]

#: Values an attacker would put anywhere in a file.
HOSTILE: tuple[Any, ...] = (
    0,
    -1,
    1,
    10**9,
    2**31,
    2**63,
    -(2**63),
    10**19,
    1e308,
    -1e308,
    1e-320,
    0.5,
    -0.0,
    "",
    "x" * 4096,
    "subprocess:Popen",
    "os:system",
    "planted:run",
    "../../../etc/passwd",
    "\x1b[2J\x1b]2;owned\x07",
    "a\nb",
    None,
    True,
    False,
    [],
    {},
    [0] * 64,
    [[[[[]]]]],
    {"__ndarray__": {"dtype": "<f4", "shape": [2**31 - 1, 0], "data": ""}},
    {"__ndarray__": {"dtype": "<f8", "shape": [4096, 4096], "data": ""}},
    {"__ndarray__": {"dtype": "|O", "shape": [1], "data": "AAAAAAAAAAA="}},
    {"__ndarray__": {"dtype": "<f4", "shape": [1], "data": "AACAPw=="}},
    {"__ndarray__": {"dtype": "<i8", "shape": [2, 2], "data": "A" * 44}},
    {"__float__": "nan"},
    {"__float__": "-inf"},
    {"__float__": "1e999"},
    {"__ndarray__": 1},
    {"op": "reset"},
    {"op": "append", "rid": 0, "tokens": [0] * 100},
)


def seed_files(roots: Iterable[Path]) -> list[bytes]:
    """The bytes of every ``*.json`` under ``roots`` (the corpus), in a stable order."""
    files: list[bytes] = []
    for root in roots:
        if root.is_dir():
            files.extend(
                p.read_bytes() for p in sorted(root.rglob("*.json")) if not p.name.startswith(".")
            )
    return files


def mutate(seeds: Sequence[bytes], pick: Pick, rounds: int | None = None) -> bytes:
    """A mutant of one of ``seeds``: one to four JSON-level or byte-level mutations."""
    data = seeds[pick(len(seeds))]
    for _ in range(rounds if rounds is not None else 1 + pick(4)):
        data = _mutate_json(data, pick) if pick(3) else _mutate_bytes(data, pick)
    return data


def _mutate_bytes(data: bytes, pick: Pick) -> bytes:
    if not data:
        return b"{"
    i = pick(len(data))
    j = min(len(data), i + 1 + pick(64))
    kind = pick(5)
    if kind == 0:  # flip a byte
        return data[:i] + bytes([data[i] ^ (1 << pick(8))]) + data[i + 1 :]
    if kind == 1:  # delete a range
        return data[:i] + data[j:]
    if kind == 2:  # insert structural bytes
        return data[:i] + b'[{"":,]}0-e."\\\x00\xff'[pick(15) :][: 1 + pick(4)] + data[i:]
    if kind == 3:  # duplicate a range
        return data[:j] + data[i:j] * (1 + pick(8)) + data[j:]
    return data[:i]  # truncate


#: Mutants past this size only get byte-level mutations (the harness's own memory stays small).
MAX_MUTANT_BYTES = 8 * 1024 * 1024


def _mutate_json(data: bytes, pick: Pick) -> bytes:
    if len(data) > MAX_MUTANT_BYTES:
        return _mutate_bytes(data, pick)
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return _mutate_bytes(data, pick)
    if isinstance(value, dict) and pick(4):
        value.pop("id", None)  # past the content hash, into limits and validation
    paths = list(_paths(value))
    path = paths[pick(len(paths))]
    value = _edit(value, path, pick, len(data))
    try:
        return json.dumps(value).encode("utf-8")
    except (ValueError, RecursionError):  # pragma: no cover - every edit is JSON
        return data


def _paths(value: Any, prefix: tuple[Any, ...] = (), limit: int = 4000) -> Iterable[tuple]:
    """Paths to values of a JSON tree (breadth first, at most ``limit``)."""
    queue, seen = [(prefix, value)], 0
    while queue and seen < limit:
        path, item = queue.pop(0)
        seen += 1
        yield path
        if isinstance(item, dict):
            queue.extend((path + (k,), v) for k, v in item.items())
        elif isinstance(item, list):
            queue.extend((path + (i,), v) for i, v in enumerate(item[:64]))


#: A multiplied list grows the file to about this much at most (past the loader's 64 MB cap).
MAX_GROWN_BYTES = 96 * 1024 * 1024


def _edit(root: Any, path: tuple[Any, ...], pick: Pick, size: int) -> Any:
    if not path:
        return HOSTILE[pick(len(HOSTILE))]
    parent = root
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    old = parent[key]
    kind = pick(6)
    if kind == 0 and isinstance(parent, dict):
        del parent[key]
    elif kind == 1 and isinstance(old, list) and old:
        # More steps, requests, nodes: up to ~200k items (past most limits, not past memory).
        parent[key] = old * min(
            2 + pick(1000), max(2, 200_000 // len(old)), max(2, MAX_GROWN_BYTES // max(1, size))
        )
    elif kind == 2 and isinstance(old, int) and not isinstance(old, bool):
        parent[key] = old * 10 ** (1 + pick(12)) if pick(2) else -old - 1
    elif kind == 3:
        nested: Any = old
        for _ in range(1 + pick(80)):
            nested = [nested] if pick(2) else {"x": nested}
        parent[key] = nested
    else:
        parent[key] = HOSTILE[pick(len(HOSTILE))]
    return root


def load_for_run(data: bytes, source: str = "<fuzzed>") -> Any:
    """What ``fuzzkit replay`` does with a file before running it: parse, check the schema and
    hash, resolve the target, check limits and ``validate``, look up the implementation the file
    names (registered ones only).  Returns the accepted case; raises FuzzkitError otherwise."""
    from fuzzkit.admission import admit
    from fuzzkit.registry import implementation_named_by_file
    from fuzzkit.sequence import loads_any

    record = loads_any(data, source)
    target = admit(record, source)
    implementation_named_by_file(target, record.implementation, source)
    return record


@dataclasses.dataclass
class Report:
    executions: int = 0
    accepted: int = 0
    refused: int = 0
    seconds: float = 0.0
    slowest_s: float = 0.0
    rss_start_mb: float = 0.0
    rss_peak_mb: float = 0.0
    tracebacks: list[dict[str, str]] = dataclasses.field(default_factory=list)
    hangs: list[str] = dataclasses.field(default_factory=list)
    #: Inputs during whose load the peak RSS grew by more than ``jump_mb``: (input, MiB).
    memory_jumps: list[tuple[str, float]] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Hang(BaseException):
    """Raised by the alarm of one execution (a BaseException: loader code must not catch it)."""


def run(
    seeds: Sequence[bytes],
    *,
    seconds: float | None = None,
    executions: int | None = None,
    seed: int = 0,
    hang_s: float = 30.0,
    keep: Path | None = None,
    jump_mb: float = 100.0,
) -> Report:
    """Mutate and load until ``seconds`` or ``executions`` run out.  Tracebacks and hangs are
    recorded (and the offending inputs written under ``keep``), never raised."""
    import random

    rng = random.Random(seed)
    report = Report(rss_start_mb=_rss_mb())
    started = time.monotonic()

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Hang()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        while True:
            elapsed = time.monotonic() - started
            if (seconds is not None and elapsed >= seconds) or (
                executions is not None and report.executions >= executions
            ):
                break
            data = mutate(seeds, rng.randrange)
            peak = _rss_mb()
            one = time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, hang_s)
            try:
                load_for_run(data)
                report.accepted += 1
            except FuzzkitError:
                report.refused += 1
            except _Hang:
                report.hangs.append(_keep(keep, data, "hang"))
            except Exception:  # noqa: BLE001 - a traceback is what this harness looks for
                report.tracebacks.append(
                    {
                        "input": _keep(keep, data, "traceback"),
                        "traceback": traceback.format_exc(limit=6),
                    }
                )
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            report.slowest_s = max(report.slowest_s, time.monotonic() - one)
            if _rss_mb() - peak > jump_mb:
                report.memory_jumps.append((_keep(keep, data, "memory"), _rss_mb() - peak))
            report.executions += 1
    finally:
        signal.signal(signal.SIGALRM, previous)
    report.seconds = time.monotonic() - started
    report.rss_peak_mb = _rss_mb()
    return report


def _keep(directory: Path | None, data: bytes, kind: str) -> str:
    if directory is None:
        return f"<{len(data)} bytes>"
    import hashlib

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{kind}-{hashlib.sha256(data).hexdigest()[:16]}.json"
    path.write_bytes(data)
    return str(path)


def _rss_mb() -> float:
    """Peak resident set size of this process so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
