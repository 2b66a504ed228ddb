"""Ray on a multi-node cluster: no shared filesystem, a worker node killed mid-run.

``ray.cluster_utils.Cluster`` starts a head and two worker nodes as separate raylets on this
machine, each worker node with its own temporary directory.  Workers ask for a custom resource
that only worker nodes advertise (``{"gpu_slot": 1}`` through ``FUZZKIT_RAY_RESOURCES``, what
``--num-gpus`` is on a cluster with GPUs), so none runs beside the coordinator.  Every Ray worker
process of the job gets an audit hook that refuses -- and logs -- any file operation under the
coordinator's report and corpus directories: the nodes share this machine's disk, so the run
passes only if findings and stats really came back as data.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
import toy_targets

from fuzzkit import registry
from fuzzkit.campaign import CampaignOptions, run_campaign
from fuzzkit.campaign.state import CLAIMS, read_events, read_state
from fuzzkit.case import load

TESTS = Path(__file__).resolve().parent
FORBIDDEN_ENV = "FUZZKIT_TEST_FORBIDDEN"
VIOLATIONS_ENV = "FUZZKIT_TEST_VIOLATIONS"
BUDGET = 20.0
CASE_TIMEOUT = 5.0


# ------------------------------------------------ targets (module level: workers import them)


for _factory in (toy_targets.buggy_dot_target, toy_targets.buggy_alloc_target):
    registry.register_target(_factory().name, replace=True)(_factory)


# ------------------------------------------------------------ no shared filesystem, enforced


def forbid_coordinator_paths() -> None:
    """Ray's ``worker_process_setup_hook`` for this test's job: from now on this process may not
    open, create, list, rename or remove anything under the coordinator's directories."""
    roots = tuple(json.loads(os.environ[FORBIDDEN_ENV]))
    log = os.environ[VIOLATIONS_ENV]

    def touched(event: str, args: tuple[Any, ...]) -> str | None:
        if event != "open" and not event.startswith(("os.", "shutil.")):
            return None
        for arg in args:
            if isinstance(arg, (str, bytes, os.PathLike)):
                path = os.path.abspath(os.fsdecode(arg))
                if any(path == r or path.startswith(r + os.sep) for r in roots):
                    return path
        return None

    def hook(event: str, args: tuple[Any, ...]) -> None:
        try:
            path = touched(event, args)
        except Exception:  # noqa: BLE001 - an argument that is no path
            return
        if path is not None:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(fd, f"{os.getpid()} {event} {path}\n".encode())
            os.close(fd)
            raise PermissionError(f"{event} {path}: the coordinator's files are not on this node")

    sys.addaudithook(hook)


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """A node started inside inherits these (its raylet and the workers it spawns)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _NodeKiller(threading.Thread):
    """Watches the run's events; once both workers run and a failure was seen (or after a few
    seconds), removes worker 0's node as a crash would (no graceful shutdown)."""

    def __init__(self, cluster: Any, nodes: dict[str, Any], reports: Path) -> None:
        super().__init__(daemon=True, name="node-killer")
        self.cluster, self.nodes, self.reports = cluster, nodes, reports
        self.killed: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set() and time.monotonic() - start < BUDGET:
            runs = list(self.reports.iterdir()) if self.reports.is_dir() else []
            events = read_events(runs[0]) if runs else []
            nodes = {e["worker"]: e.get("node") for e in events if e["type"] == "worker_start"}
            seen = any(e["type"] in ("found", "finding") for e in events)
            if len(nodes) >= 2 and (seen or time.monotonic() - start > 10):
                node = nodes[0]
                self.cluster.remove_node(self.nodes[node], allow_graceful=False)
                self.killed = {"worker": 0, "node": node, "at": time.monotonic() - start}
                return
            time.sleep(0.2)


# ------------------------------------------- the channel's two ends, without a cluster


class _Direct:
    """An object whose methods are called as Ray would (``obj.method.remote(...)``), at once."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getattr__(self, name: str) -> Any:
        return SimpleNamespace(remote=getattr(self.obj, name))


_NO_RAY = SimpleNamespace(get=lambda refs, timeout=None: refs,
                          wait=lambda refs, num_returns=1, timeout=None: (refs, []))


def _ends(run_dir: Path, corpus: Path, claimed: list[str]) -> tuple[Any, Any, Any]:
    pytest.importorskip("ray")
    from fuzzkit.campaign.ray_channel import Hub, RayChannel, Receiver

    hub = _Direct(Hub(claimed))
    channel = RayChannel(hub, worker=3, node="n1")
    receiver = Receiver(hub, run_dir, corpus, {"toy-dot"})
    channel.ray = receiver.ray = _NO_RAY
    return hub, channel, receiver


def test_results_sent_as_data_land_as_a_file_channel_writes_them(tmp_path):
    from fuzzkit.campaign.ray_channel import existing_claims
    from fuzzkit.campaign.state import claim_finding

    run_dir, corpus = tmp_path / "run", tmp_path / "corpus"
    run_dir.mkdir()
    earlier = {"target": "toy-dot", "impl": "numpy", "signature": "old", "case": "x"}
    assert claim_finding(run_dir, earlier)  # a finding of an earlier session (--resume)
    hub, channel, receiver = _ends(run_dir, corpus, existing_claims(run_dir))

    channel.emit("worker_start", pid=1, items=[["toy-dot", "numpy"]])
    pending = channel.save_case("{pending}\n", "toy-dot", "aaaa", "pending")
    assert not Path(pending).is_absolute()  # a token: nothing was written on the worker
    channel.emit("found", target="toy-dot", impl="numpy", signature="new", case=pending)
    final = channel.save_case("{final}\n", "toy-dot", "bbbb", "findings")
    event = {"target": "toy-dot", "impl": "numpy", "signature": "new", "case": final}
    assert channel.claim(event) and channel.claimed("toy-dot", "numpy", "new")
    channel.emit("finding", **event)
    assert not channel.claim({**event, "signature": "old"})  # the earlier session's
    assert channel.claimed("toy-dot", "numpy", "old")
    channel.discard_case(pending)
    channel.close()
    with pytest.raises(ValueError):
        channel.emit("heartbeat")  # the heartbeat thread stops on this

    assert receiver.pump() == 7
    receiver.close()
    events = read_events(run_dir)
    assert [e["type"] for e in events] == ["worker_start", "found", "finding"]
    assert events[0]["node"] == "n1" and {e["worker"] for e in events} == {3}
    stored = corpus / "toy-dot" / "findings" / "bbbb.json"
    assert stored.read_text() == "{final}\n" and events[2]["case"] == str(stored.resolve())
    assert events[1]["case"] == str((run_dir / "pending" / "aaaa.json").resolve())
    assert not (run_dir / "pending" / "aaaa.json").exists()  # discarded once final
    claims = {json.loads(p.read_text())["signature"]: json.loads(p.read_text())
              for p in (run_dir / CLAIMS).glob("*.json")}
    assert sorted(claims) == ["new", "old"] and claims["new"]["case"] == str(stored.resolve())


def test_a_claim_the_run_directory_refuses_is_logged_as_a_duplicate(tmp_path):
    from fuzzkit.campaign.state import claim_finding

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    hub, channel, receiver = _ends(run_dir, tmp_path / "corpus", [])  # a hub that missed it
    event = {"target": "toy-dot", "impl": "numpy", "signature": "s", "case": "c"}
    assert claim_finding(run_dir, {**event, "worker": 9})
    assert channel.claim(event)
    channel.emit("finding", **event)
    receiver.pump()
    [logged] = read_events(run_dir)
    assert logged["type"] == "duplicate" and logged["signature"] == "s"


def test_unsafe_messages_are_refused_and_the_rest_is_stored(tmp_path):
    from fuzzkit.campaign.ray_channel import ChannelError

    run_dir, corpus = tmp_path / "run", tmp_path / "corpus"
    run_dir.mkdir()
    hub, channel, receiver = _ends(run_dir, corpus, [])
    channel.save_case("x", "../escape", "aaaa", "findings")  # not a target of the plan
    channel.save_case("x", "toy-dot", "../../escape", "findings")
    channel.save_case("x", "toy-dot", "aaaa", "regressions")  # not a worker's kind
    hub.obj.send(["not json", json.dumps(["a list"]), json.dumps({"op": "exec"})])
    channel.emit("heartbeat", phase="startup")
    with pytest.raises(ChannelError, match="and 5 more"):
        receiver.pump()
    assert [e["type"] for e in read_events(run_dir)] == ["heartbeat"]
    assert not list(tmp_path.rglob("escape*")) and not corpus.exists()


# ---------------------------------------------------------------------------------- the test


@pytest.fixture
def node_dirs() -> Iterator[list[Path]]:
    """A temporary directory per worker node (short paths: Ray puts sockets under them)."""
    dirs = [Path(tempfile.mkdtemp(prefix="fk-node-")) for _ in range(2)]
    yield dirs
    for directory in dirs:
        shutil.rmtree(directory, ignore_errors=True)


def test_three_node_cluster_without_shared_files_survives_a_dead_node(tmp_path, monkeypatch,
                                                                     node_dirs):
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    reports, corpus = tmp_path / "reports", tmp_path / "corpus"
    reports.mkdir()
    corpus.mkdir()
    violations = tmp_path / "violations.log"
    forbidden = sorted({str(p) for d in (reports, corpus) for p in (d, d.resolve())})
    monkeypatch.setenv("FUZZKIT_RAY_RESOURCES", '{"gpu_slot": 1}')
    if ray.is_initialized():
        ray.shutdown()
    # Ray declares a node dead after 5 failed health checks 3 s apart; until then it may place
    # the replacement on the dead node, which looks idle.  Checking every second keeps the test
    # short (a killed raylet fails a check at once; a busy one still has 10 s to answer).
    health = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "_system_config": health})
    try:
        # the driver (the coordinator) attaches to a raylet of its machine; connected while the
        # head is the only node, it is the head's, as on a real cluster's head machine
        pythonpath = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
        ray.init(address=cluster.address, log_to_driver=False, runtime_env={
            "worker_process_setup_hook": f"{__name__}.forbid_coordinator_paths",
            "env_vars": {"PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1",
                         FORBIDDEN_ENV: json.dumps(forbidden), VIOLATIONS_ENV: str(violations)},
        })
        assert ray.get_runtime_context().get_node_id() == cluster.head_node.node_id
        nodes = {}
        for directory in node_dirs:  # each worker node with its own temporary directory
            with _environ(TMPDIR=str(directory)):
                node = cluster.add_node(num_cpus=2, resources={"gpu_slot": 2})
            nodes[node.node_id] = node

        @ray.remote(num_cpus=0, resources={"gpu_slot": 0.01})
        def probe(path: str) -> str:
            try:
                Path(path).write_text("x")
            except PermissionError:
                return "refused"
            return "written"

        # the hook is in force on worker nodes: writing the coordinator's corpus is refused
        assert ray.get(probe.remote(str(corpus / "probe")), timeout=120) == "refused"
        assert not (corpus / "probe").exists()

        killer = _NodeKiller(cluster, nodes, reports)
        killer.start()
        start = time.monotonic()
        result = run_campaign(CampaignOptions(
            targets=["toy-dot-buggy", "toy-alloc-buggy"], budget=BUDGET, workers=2,
            backend="ray", address=cluster.address, report_dir=reports, corpus=corpus,
            case_timeout=CASE_TIMEOUT, hang_timeout=60.0, progress="quiet", seed=5))
        took = time.monotonic() - start
        killer.stop.set()
        killer.join(10)
    finally:
        ray.shutdown()
        cluster.shutdown()

    _check_run(result, took, killer, node_dirs, corpus, violations)


def _check_run(result: Any, took: float, killer: _NodeKiller, node_dirs: list[Path],
               corpus: Path, violations: Path) -> None:
    print(f"run took {took:.1f} s (budget {BUDGET:.0f} s); node killed at "
          f"{killer.killed.get('at', -1):.1f} s; {len(result.findings)} findings; "
          f"{result.cases} cases")
    assert killer.error is None, killer.error
    assert killer.killed, "the node killer never fired"
    # the budget holds: budget + one case time limit, plus Ray's start and stop
    assert took < BUDGET + CASE_TIMEOUT + 8, took
    run_dir = result.run_dir
    events = read_events(run_dir)
    starts = {e["worker"]: e for e in events if e["type"] == "worker_start"}
    dead_node = killer.killed["node"]
    assert starts[0]["node"] != starts[1]["node"], "workers were not spread over the nodes"
    survivor = starts[1]["node"]

    # the dead node's worker was noticed and its items went to a replacement on the survivor
    died = [e for e in events if e["type"] == "worker_exit" and e.get("status") == "died"]
    assert [e["worker"] for e in died] == [0], died
    assert died[0]["exitcode"] in ("NodeDiedError", "WorkerCrashedError"), died
    replaced = [e for e in events if e["type"] == "worker_replaced"]
    assert [e["replaces"] for e in replaced] == [0], replaced
    new = replaced[0]["worker"]
    assert starts[new]["node"] == survivor != dead_node
    assert starts[new]["items"] == starts[0]["items"]
    progressed = [e for e in events if e["type"] == "progress" and e["worker"] == new]
    assert progressed and max(e["cases"] for e in progressed) > 0

    # every finding is on the coordinator's disk, once
    assert result.status == "done", result.errors
    assert read_state(run_dir)["status"] == "done"
    findings = [e for e in events if e["type"] == "finding"]
    assert findings and len(findings) == len(result.findings)
    keys = [(e["target"], e["impl"], e["signature"]) for e in findings]
    assert len(set(keys)) == len(keys), keys
    assert len(list((run_dir / CLAIMS).glob("*.json"))) == len(keys)
    for event in findings:
        path = Path(event["case"])
        assert path.is_relative_to(corpus.resolve()), path
        case = load(path)
        assert case.failure is not None and case.failure.signature == event["signature"]
    assert not [e for e in events if str(e.get("case", "")).startswith("hub:")]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["findings"] == len(findings)

    # what is only a worker's own stayed on its node: the example database of a worker node
    assert not (corpus / ".hypothesis").exists()
    assert any(list((d / "fuzzkit-ray").glob("corpus-*/.hypothesis")) for d in node_dirs)
    # and no worker process touched the coordinator's files (the probe's refusal aside)
    lines = violations.read_text().splitlines()
    assert len(lines) == 1 and lines[0].endswith("/probe"), lines
