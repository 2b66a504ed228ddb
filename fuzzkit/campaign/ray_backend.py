"""Ray backend: workers are Ray tasks anywhere on a cluster; what they find comes back as data.

Every worker runs the same :func:`~fuzzkit.campaign.worker.worker_main` as in the other
backends, with a :class:`~fuzzkit.campaign.ray_channel.RayChannel`: its events, case files and
claims go to a hub actor on the coordinator's node, and :meth:`RayBackend.pump` stores them in
the run directory and corpus on the coordinator's machine.  No node needs to see those paths (no
shared filesystem); a worker never opens them.

* On a node other than the coordinator's, a worker keeps what is only its own -- the Hypothesis
  example database of ``--profile campaign``, isolation's in-flight files, atheris's working
  corpus -- under ``<tempdir>/fuzzkit-ray/`` of that node (the database keyed by the corpus path,
  so a later run on that node starts from it).  On the coordinator's node it uses the run's own
  paths, as the local backends do.
* Tasks ask for ``num_cpus=1``, ``--num-gpus`` GPUs and the custom resources of the
  ``FUZZKIT_RAY_RESOURCES`` environment variable, a JSON object such as ``{"gpu_slot": 1}`` (to
  keep workers on nodes that advertise a resource, or to test GPU scheduling on a cluster
  without GPUs).  They are spread over the nodes that have room (``SPREAD``).
* A task whose node dies (``NodeDiedError``) or whose worker process crashes counts as a dead
  worker: the coordinator replaces it, on whichever node has room.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from fuzzkit.campaign.model import WorkerSpec
from fuzzkit.campaign.ray_channel import Hub, RayChannel, Receiver, existing_claims
from fuzzkit.errors import UsageError

RESOURCES_ENV = "FUZZKIT_RAY_RESOURCES"


def resources_from_env() -> dict[str, float]:
    """The custom resources each worker task asks for (``FUZZKIT_RAY_RESOURCES``)."""
    text = os.environ.get(RESOURCES_ENV, "").strip()
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(
        isinstance(k, str)
        and k not in ("CPU", "GPU", "memory")
        and isinstance(v, (int, float))
        and not isinstance(v, bool)
        and math.isfinite(v)
        and v >= 0
        for k, v in data.items()
    ):
        raise UsageError(
            f"{RESOURCES_ENV} must be a JSON object of custom resource name -> amount "
            f'(for example {{"gpu_slot": 1}}), not {text[:80]!r}'
        )
    return {k: float(v) for k, v in data.items()}


def node_local(spec: WorkerSpec) -> WorkerSpec:
    """``spec`` for a node that does not have the coordinator's run directory and corpus: the
    worker's own files (example database, in-flight cases, atheris corpus) go to this node's
    temporary directory.  Its results still go through the channel to the coordinator."""
    root = Path(tempfile.gettempdir()) / "fuzzkit-ray"
    corpus = root / ("corpus-" + hashlib.sha256(spec.plan.corpus.encode()).hexdigest()[:16])
    scratch = root / f"{Path(spec.run_dir).name}-w{spec.worker}"
    return dataclasses.replace(
        spec, run_dir=str(scratch), plan=dataclasses.replace(spec.plan, corpus=str(corpus))
    )


def ray_worker(spec: WorkerSpec, hub: Any, home: str | None) -> dict[str, Any]:
    """The Ray task: one worker, its results sent to ``hub``; ``home`` is the coordinator's
    node (None when it cannot be known, as with a Ray client)."""
    import ray

    from fuzzkit.campaign.worker import worker_main

    node = ray.get_runtime_context().get_node_id()
    if node != home:
        spec = node_local(spec)
    return worker_main(spec, channel=RayChannel(hub, spec.worker, node=node))


class RayBackend:
    name = "ray"

    def __init__(
        self,
        run_dir: Path,
        address: str | None = None,
        num_gpus: float = 0,
        num_cpus: int | None = None,
        resources: dict[str, float] | None = None,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise UsageError("ray is not installed (pip install 'fuzzkit[ray]')") from None
        self.ray = ray
        self.run_dir = Path(run_dir)
        resources = resources_from_env() if resources is None else resources
        self._owns = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            elif num_cpus:
                kwargs["num_cpus"] = num_cpus
            try:
                ray.init(**kwargs)
            except Exception as exc:  # noqa: BLE001 - connection errors etc.
                raise UsageError(
                    f"cannot start or reach Ray ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else ''})"
                ) from None
            self._owns = True
        from ray.util.client import ray as client
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        # a Ray client's driver runs on the head, not beside the coordinator's files
        self.home = None if client.is_connected() else here
        remote: Any = ray.remote  # its overloads do not cover options with a class or function
        hub = remote(
            num_cpus=0,
            max_restarts=0,
            # on this very node (a soft affinity may place it on a worker node, which can die)
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
        )(Hub)
        self.hub = hub.remote(existing_claims(self.run_dir))
        self.receiver: Receiver | None = None
        self.task = remote(
            num_cpus=1,
            num_gpus=num_gpus or 0,
            resources=resources or None,
            max_retries=0,
            scheduling_strategy="SPREAD",
        )(ray_worker)

    def start(self, spec: WorkerSpec) -> Any:
        if self.receiver is None:
            targets = {t for t, _ in spec.plan.items}
            self.receiver = Receiver(self.hub, self.run_dir, Path(spec.plan.corpus), targets)
        return self.task.remote(dataclasses.replace(spec, parent_pid=None), self.hub, self.home)

    def alive(self, handle: Any) -> bool:
        ready, _ = self.ray.wait([handle], timeout=0)
        return not ready

    def exitcode(self, handle: Any) -> Any:
        """0, or the name of Ray's error (``NodeDiedError``, ``WorkerCrashedError``, ...)."""
        try:
            self.ray.get(handle, timeout=0)
            return 0
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__

    def kill(self, handle: Any) -> None:
        try:
            self.ray.cancel(handle, force=True)
        except Exception:  # noqa: BLE001 - finished, or its node is gone
            pass

    def interrupt(self, handle: Any) -> None:
        try:
            self.ray.cancel(handle, force=False)  # KeyboardInterrupt in the worker
        except Exception:  # noqa: BLE001
            pass

    def pump(self) -> None:
        if self.receiver is not None:
            self.receiver.pump()

    def close(self) -> None:
        try:
            self.pump()  # the last words of workers that exited just now
        finally:
            if self.receiver is not None:
                self.receiver.close()
                self.receiver = None
            try:
                self.ray.kill(self.hub)
            except Exception:  # noqa: BLE001
                pass
            if self._owns:
                self.ray.shutdown()
