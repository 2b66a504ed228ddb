"""Local backends: the coordinator's own process (``--workers 1``) or one spawned process per
worker."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any, Callable

from fuzzkit.campaign.channel import FileChannel
from fuzzkit.campaign.model import Event, WorkerSpec
from fuzzkit.campaign.worker import process_main, worker_main


class LocalBackend:
    name = "local"

    def __init__(self) -> None:
        self.ctx = multiprocessing.get_context("spawn")

    def start(self, spec: WorkerSpec) -> Any:
        spec = dataclasses.replace(spec, parent_pid=os.getpid())
        proc = self.ctx.Process(
            target=process_main, args=(spec,), daemon=True, name=f"fuzzkit-worker-{spec.worker}"
        )
        proc.start()
        return proc

    def alive(self, handle: Any) -> bool:
        return bool(handle.is_alive())

    def exitcode(self, handle: Any) -> Any:
        return handle.exitcode

    def kill(self, handle: Any) -> None:
        if handle.is_alive():
            handle.kill()
        handle.join(5)

    def interrupt(self, handle: Any) -> None:
        if handle.is_alive() and handle.pid:
            try:
                os.kill(handle.pid, signal.SIGINT)
            except OSError:
                pass

    def pump(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclasses.dataclass
class _Done:
    exitcode: int


class InProcessBackend:
    """The worker runs in this very process, in the main thread (``--workers 1``): coverage
    measurement, ``--steer`` and Ctrl-C work directly; every event it writes is handed to
    ``observer`` as well, which keeps the live display current while the worker holds the
    thread.  ``start`` returns when the worker is done, so the coordinator's loop only folds
    what it wrote."""

    name = "inprocess"

    def __init__(self, observer: Callable[[Event], None], meter: Any = None) -> None:
        self.observer = observer
        self.meter = meter

    def start(self, spec: WorkerSpec) -> Any:
        channel = FileChannel(
            Path(spec.run_dir), Path(spec.plan.corpus), worker=spec.worker, observer=self.observer
        )
        worker_main(spec, channel=channel, meter=self.meter, own_process=False)
        return _Done(0)

    def alive(self, handle: Any) -> bool:
        return False

    def exitcode(self, handle: Any) -> Any:
        return handle.exitcode

    def kill(self, handle: Any) -> None:
        pass

    def interrupt(self, handle: Any) -> None:
        pass

    def pump(self) -> None:
        pass

    def close(self) -> None:
        pass
