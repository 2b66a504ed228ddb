"""torch.compile (backend Inductor) as a compiler under test.

On CPU Inductor emits C++ (compiled with the system g++); on a GPU, Triton.  Each process gets
its own Inductor cache directory (``TORCHINDUCTOR_CACHE_DIR`` under the temp dir, keyed by pid,
set before the first compile), so parallel workers never share or race on cache files, and
``torch._dynamo.reset()`` runs before every compile so that hundreds of different graphs in one
process never hit Dynamo's recompile limit.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Sequence

_PREPARED: list[str] = []


def cache_dir() -> str:
    """This process's Inductor cache directory (created and exported on first use)."""
    if not _PREPARED or _PREPARED[0] != f"{os.getpid()}":
        path = os.path.join(tempfile.gettempdir(), f"fuzzkit_inductor_{os.getpid()}")
        os.makedirs(path, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
        _PREPARED[:] = [f"{os.getpid()}", path]
    return _PREPARED[1]


def compile_fx(gm: Any, example_inputs: Sequence[Any], dynamic: bool = False
               ) -> Callable[..., tuple[Any, ...]]:
    """``torch.compile(gm, backend="inductor", dynamic=dynamic, fullgraph=True)``, compiled now
    (the first call runs on ``example_inputs``, so compile errors surface here); one call = one
    compile (counted)."""
    cache_dir()
    import torch
    import torch._dynamo

    from fuzzkit.targets.compiler import count_compile

    count_compile()
    torch._dynamo.reset()
    compiled = torch.compile(gm, backend="inductor", dynamic=bool(dynamic), fullgraph=True)

    def run(*tensors: Any) -> tuple[Any, ...]:
        out = compiled(*tensors)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    run(*example_inputs)
    return run
