"""Ray backend: the same worker function as ``ray.remote(num_cpus=1, num_gpus=G)`` tasks.

Workers write to the run directory directly, so every node must see it at the same path (a
shared filesystem: NFS, a cluster volume); on a single machine a local Ray instance just works.
"""

from __future__ import annotations

from typing import Any

from fuzzkit.errors import UsageError


class RayBackend:
    name = "ray"

    def __init__(
        self, address: str | None = None, num_gpus: float = 0, num_cpus: int | None = None
    ) -> None:
        try:
            import ray
        except ImportError:
            raise UsageError("ray is not installed (pip install 'fuzzkit[ray]')") from None
        self.ray = ray
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
        from fuzzkit.campaign.worker import worker_main

        self.task = ray.remote(num_cpus=1, num_gpus=num_gpus or 0, max_retries=0)(worker_main)

    def start(self, spec: dict[str, Any]) -> Any:
        return self.task.remote(dict(spec, parent_pid=None))

    def alive(self, handle: Any) -> bool:
        ready, _ = self.ray.wait([handle], timeout=0)
        return not ready

    def exitcode(self, handle: Any) -> Any:
        try:
            self.ray.get(handle, timeout=0)
            return 0
        except Exception:  # noqa: BLE001
            return 1

    def kill(self, handle: Any) -> None:
        try:
            self.ray.cancel(handle, force=True)
        except Exception:  # noqa: BLE001
            pass

    def close(self) -> None:
        if self._owns:
            self.ray.shutdown()
