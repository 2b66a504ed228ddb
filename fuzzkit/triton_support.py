"""Make Triton kernels run everywhere: natively on a GPU, under the interpreter without one.

Triton decides at decoration time whether ``@triton.jit`` compiles or interprets, so this must
run before any kernel module is imported.  Kernel modules call :func:`prepare` at import.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable


def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def prepare() -> None:
    """Switch Triton to its interpreter when no GPU is present (unless the user chose already)."""
    if "TRITON_INTERPRET" not in os.environ and not gpu_available():
        os.environ["TRITON_INTERPRET"] = "1"


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def device() -> str:
    """Where kernel tensors live: ``cuda`` natively, ``cpu`` under the interpreter."""
    return "cpu" if interpreted() or not gpu_available() else "cuda"


def unavailable() -> str | None:
    """Why a Triton implementation cannot run here, or None."""
    prepare()  # importing triton before choosing the interpreter would pin the native backend
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError as exc:
        return f"needs {exc.name}: pip install 'fuzzkit' with torch and triton installed"
    return None


def unavailable_with(module: str) -> Callable[[], str | None]:
    """An ``Implementation.unavailable`` for a Triton implementation living in ``module``:
    choose the interpreter mode *before* triton is imported (or kernels launched later in the
    process would mix compiled and interpreted JIT functions), then say why Triton or the
    module cannot be used here, if they cannot."""

    def reason() -> str | None:
        prepare()
        missing = unavailable()
        if missing is not None:
            return missing
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{module} cannot be imported ({exc})"
        return None

    return reason


def import_source(module_name: str, source: str, directory: Path) -> ModuleType:
    """Write ``source`` to ``directory/<module_name>.py`` (atomically: parallel workers may
    share the directory) and import it as ``module_name``.

    Generated and mutated kernels go through here because ``@triton.jit`` reads a function's
    source with ``inspect``: code built with ``exec`` from a string has no file to read.
    """
    path = Path(directory) / f"{module_name}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
