"""Local backend: one spawned process per worker."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

from fuzzkit.campaign.worker import worker_main


class LocalBackend:
    name = "local"

    def __init__(self) -> None:
        self.ctx = multiprocessing.get_context("spawn")

    def start(self, spec: dict[str, Any]) -> Any:
        spec = dict(spec, parent_pid=os.getpid())
        proc = self.ctx.Process(
            target=worker_main, args=(spec,), daemon=True, name=f"fuzzkit-worker-{spec['worker']}"
        )
        proc.start()
        return proc

    def alive(self, handle: Any) -> bool:
        return handle.is_alive()

    def exitcode(self, handle: Any) -> Any:
        return handle.exitcode

    def kill(self, handle: Any) -> None:
        if handle.is_alive():
            handle.kill()
        handle.join(5)

    def close(self) -> None:
        pass
