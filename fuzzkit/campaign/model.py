"""The run pipeline's data: what a run does (:class:`Plan`), where it stands (:class:`RunState`),
what a worker is told (:class:`WorkerSpec`) and what it reports (:class:`Event`).

Every mode of ``fuzzkit run`` -- one process, local worker processes, Ray tasks -- goes through
the same coordinator with these types; a backend only decides where a worker runs.  The state
file is :meth:`RunState.to_json`; reading one back (``--resume``) validates every field, because
it lies on disk where anyone may edit it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Protocol, TypedDict

from fuzzkit.errors import UsageError

Item = tuple[str, str]  # (target name, implementation name or module:attr spec)

#: Every event type a run writes to ``events.jsonl``, and who writes it.
EVENT_TYPES = {
    "worker_launch": "coordinator: a worker was started with these items",
    "worker_start": "worker: it runs (pid, seed, items, budget)",
    "progress": "worker: cases so far for one item (at most once per heartbeat)",
    "found": "worker: a new failure, saved unshrunk before shrinking it (pending)",
    "finding": "worker: a final (shrunk, confirmed) finding, saved in the corpus",
    "duplicate": "worker: a finding another worker of the run had claimed already",
    "other_signature": "worker: failures counted under a signature already found",
    "reach": "worker: operation counts and threshold crossings of an item",
    "item_done": "worker: an item's totals (cases, seconds, known-signature hits, "
    "unsupported cases turned away, repeated cases not judged again, coverage)",
    "heartbeat": "worker: alive in a phase that runs no cases (shrinking, confirming, startup)",
    "worker_exit": "worker or coordinator: ok, error (with the error), died or killed",
    "worker_hung": "coordinator: a worker was silent too long and was killed",
    "worker_replaced": "coordinator: a replacement took over a dead or hung worker's items",
}


class Event(TypedDict, total=False):
    """One line of ``events.jsonl`` (fields beyond ``t``/``worker``/``type`` depend on it)."""

    t: float
    worker: int
    type: str
    target: str
    impl: str
    cases: int
    elapsed: float
    signature: str
    kind: str
    message: str
    case: str
    case_id: str
    sequence: str | None
    status: str
    error: str
    origin: str
    share: float
    seconds: float
    count: int
    pid: int
    seed: int
    items: list[list[str]]
    budget: float
    exitcode: Any
    silent_s: float
    replaces: int
    phase: str
    reason: str
    recovered: bool
    unshrunk: bool
    mutants: list[str]
    operations: dict[str, Any]
    reach: list[dict[str, Any]]
    known_hits: dict[str, int]
    unsupported: dict[str, int]
    found_at: dict[str, dict[str, float]]
    coverage: dict[str, Any] | None
    interrupted: bool
    seconds_to_first_failure: float | None
    cases_to_first_failure: int | None


@dataclasses.dataclass
class Plan:
    """Everything a run was asked to do, fixed when it starts and kept in ``state.json``."""

    items: list[Item]
    skipped: list[dict[str, str]]
    seed: int = 0
    budget: float = 60.0
    workers: int = 1
    backend: str = "inprocess"  # inprocess | local | ray
    engine: str = "hypothesis"
    isolate: bool = False
    memory_mb: int | None = None
    profile: str = "campaign"
    case_timeout: float = 60.0
    corpus: str = "corpus"
    max_cases: int | None = None
    max_findings: int | None = None
    confirm: bool = True
    mutants: list[str] = dataclasses.field(default_factory=list)
    known: list[Any] = dataclasses.field(default_factory=list)
    coverage: bool = False
    steer: bool = False
    address: str | None = None
    num_gpus: float = 0.0

    def known_signatures(self) -> Any:
        """``known`` as :class:`fuzzkit.known.KnownSignatures` (None when there are none): the
        plan keeps the JSON form, which every worker and the summary read back through here."""
        if not self.known:
            return None
        from fuzzkit.known import parse

        return parse({"format": "fuzzkit-known/1", "known": self.known}, "run plan")


@dataclasses.dataclass
class RunState:
    """Where a run stands; written atomically to ``state.json`` at least once a second."""

    run_id: str
    plan: Plan
    started: float
    elapsed: float = 0.0  # true wall-clock seconds over every session of the run
    status: str = "running"  # running | done | interrupted | error
    resumes: int = 0
    next_worker: int = 0

    def to_json(self) -> dict[str, Any]:
        plan = dataclasses.asdict(self.plan)
        plan["plan"] = [list(i) for i in plan.pop("items")]
        return {
            **plan,
            "run_id": self.run_id,
            "started": self.started,
            "elapsed": round(self.elapsed, 3),
            "status": self.status,
            "resumes": self.resumes,
            "next_worker": self.next_worker,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], source: Path) -> RunState:
        """A state file read back, every field checked (one-line UsageError otherwise)."""
        for key, (kinds, ok) in _STATE_FIELDS.items():
            if key not in data and key not in _REQUIRED:
                continue
            value = data.get(key)
            if (
                (isinstance(value, bool) and kinds is not bool)
                or not isinstance(value, kinds)
                or not ok(value)
            ):
                from fuzzkit.case import shown

                raise UsageError(
                    f"{source}: {key!r} is {shown(value)}, not what fuzzkit writes; the "
                    "state file was edited or corrupted"
                )
        names = {f.name for f in dataclasses.fields(Plan)} - {"items"}
        fields = {k: data[k] for k in names if k in data}
        fields["known"] = data.get("known") or []
        plan = Plan(items=[(str(t), str(i)) for t, i in data["plan"]], **fields)
        return cls(
            run_id=str(data.get("run_id") or source.parent.name),
            plan=plan,
            started=float(data.get("started", 0.0)),
            elapsed=float(data.get("elapsed", 0.0)),
            status=str(data.get("status", "running")),
            resumes=int(data.get("resumes", 0)),
            next_worker=int(data.get("next_worker", 0)),
        )


_NUMBER = (int, float)
_OPTIONAL_INT = (int, type(None))
_REQUIRED = ("plan", "budget", "backend", "engine", "isolate", "corpus", "seed")
#: Fields of a state file, with the type and range fuzzkit writes.
_STATE_FIELDS: dict[str, tuple[Any, Callable[[Any], bool]]] = {
    "plan": (list, lambda v: 0 < len(v) < 100_000),
    "budget": (_NUMBER, lambda v: 0 < v < 1e9),
    "elapsed": (_NUMBER, lambda v: 0 <= v < 1e9),
    "started": (_NUMBER, lambda v: 0 <= v < 1e11),
    "case_timeout": (_NUMBER, lambda v: 0 < v < 1e6),
    "seed": (int, lambda v: -(2**63) <= v < 2**64),
    "workers": (int, lambda v: 1 <= v <= 4096),
    "next_worker": (int, lambda v: 0 <= v < 2**31),
    "resumes": (int, lambda v: 0 <= v < 2**31),
    "backend": (str, lambda v: v in ("inprocess", "local", "ray")),
    "engine": (str, lambda v: v in ("hypothesis", "atheris")),
    "profile": (str, lambda v: v in ("ci", "campaign")),
    "isolate": (bool, lambda v: True),
    "confirm": (bool, lambda v: True),
    "coverage": (bool, lambda v: True),
    "steer": (bool, lambda v: True),
    "memory_mb": (_OPTIONAL_INT, lambda v: v is None or 0 < v < 2**31),
    "max_cases": (_OPTIONAL_INT, lambda v: v is None or 0 < v < 2**63),
    "max_findings": (_OPTIONAL_INT, lambda v: v is None or 0 < v < 2**31),
    "corpus": (str, lambda v: 0 < len(v) < 4096),
    "skipped": (list, lambda v: len(v) < 4096),
    "known": (list, lambda v: len(v) < 100_000),
    "mutants": (list, lambda v: len(v) < 256 and all(isinstance(m, str) for m in v)),
    "num_gpus": (_NUMBER, lambda v: 0 <= v < 1e6),
    "address": ((str, type(None)), lambda v: v is None or len(v) < 4096),
    "status": (str, lambda v: len(v) < 64),
    "run_id": (str, lambda v: len(v) < 4096),
}


@dataclasses.dataclass
class WorkerSpec:
    """What one worker is told: its items, seed and budget, and where its results go."""

    worker: int
    seed: int
    items: list[Item]
    budget: float
    plan: Plan
    run_dir: str
    #: Targets registered in the coordinator's process, as JSON (see campaign.plan).
    sources: bytes = b""
    preload: list[str] = dataclasses.field(default_factory=list)
    sys_path: list[str] = dataclasses.field(default_factory=list)
    cwd: str | None = None
    heartbeat: float = 1.0
    parent_pid: int | None = None
    #: the run's deadline as wall-clock time (``time.time()``): a worker that took long to
    #: start (spawning, imports, a busy cluster) still stops when the run must
    deadline: float | None = None


class Backend(Protocol):
    """Where workers run: this process, spawned local processes, or Ray tasks."""

    name: str

    def start(self, spec: WorkerSpec) -> Any: ...

    def alive(self, handle: Any) -> bool: ...

    def exitcode(self, handle: Any) -> Any: ...

    def kill(self, handle: Any) -> None: ...

    def interrupt(self, handle: Any) -> None:
        """Ask a worker to stop and store what it holds (SIGINT for a process)."""
        ...

    def pump(self) -> None:
        """Move what workers sent as data (Ray) into the run directory; no-op for files."""
        ...

    def close(self) -> None: ...
