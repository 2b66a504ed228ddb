"""Make Triton kernels run everywhere: natively on a GPU, under the interpreter without one.

Triton decides at decoration time whether ``@triton.jit`` compiles or interprets, so this must
run before any kernel module is imported.  Kernel modules call :func:`prepare` at import.
"""

from __future__ import annotations

import os
from typing import Optional


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


def unavailable() -> Optional[str]:
    """Why a Triton implementation cannot run here, or None."""
    prepare()  # importing triton before choosing the interpreter would pin the native backend
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError as exc:
        return f"needs {exc.name}: pip install 'fuzzkit' with torch and triton installed"
    return None
