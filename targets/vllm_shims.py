"""Stand-ins for the vLLM helper modules that every vLLM adapter needs: its logger and its
platform query object.

Why shared: the KV-manager adapter, the attention-kernel adapter and the Punica adapter each
import vLLM modules that call ``vllm.logger.init_logger`` and ``vllm.platforms.current_platform``.
The real ``vllm.logger`` configures handlers from the environment and ``vllm.platforms`` probes
CUDA, ROCm, XPU and out-of-tree plug-ins at import; neither is part of any logic under test.
One faithful stand-in each keeps the adapters agreeing on what the platform answers.
"""

from __future__ import annotations

import logging
import types
from typing import Any

from fuzzkit import wheelsrc


class Logger(logging.Logger):
    """A standard logger with the ``*_once`` methods vLLM's ``_VllmLogger`` adds (each message
    logged once per process, as vLLM does)."""

    _seen: set[tuple[str, str]] = set()

    def _once(self, level: int, msg: str, *args: Any) -> None:
        key = (self.name, msg)
        if key not in self._seen:
            self._seen.add(key)
            self.log(level, msg, *args)

    def debug_once(self, msg: str, *args: Any, **_: Any) -> None:
        self._once(logging.DEBUG, msg, *args)

    def info_once(self, msg: str, *args: Any, **_: Any) -> None:
        self._once(logging.INFO, msg, *args)

    def warning_once(self, msg: str, *args: Any, **_: Any) -> None:
        self._once(logging.WARNING, msg, *args)


def init_logger(name: str) -> logging.Logger:
    """``vllm.logger.init_logger``: quiet below ERROR (vLLM warns on every refused
    ``reset_prefix_cache``, which fuzz programs do on purpose)."""
    logger = Logger(name)
    logger.setLevel(logging.ERROR)
    return logger


class Platform:
    """``current_platform``: the queries vLLM's KV-cache and Triton modules make, answered from
    torch -- CUDA when a GPU is there, otherwise a platform with no device capability."""

    @staticmethod
    def _torch() -> Any:
        import torch

        return torch

    def _capability(self) -> int:
        if not self.is_cuda():
            return 0
        major, minor = self._torch().cuda.get_device_capability()
        return int(major) * 10 + int(minor)

    @staticmethod
    def _wanted(capability: int | tuple[int, int]) -> int:
        return capability if isinstance(capability, int) else capability[0] * 10 + capability[1]

    def is_cuda(self) -> bool:
        return bool(self._torch().cuda.is_available())

    def is_rocm(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False

    def is_fp8_fnuz(self) -> bool:
        return False

    def fp8_dtype(self) -> Any:
        return self._torch().float8_e4m3fn

    def has_device_capability(self, capability: int | tuple[int, int]) -> bool:
        return self._capability() >= self._wanted(capability)

    def is_device_capability(self, capability: int | tuple[int, int]) -> bool:
        return self._capability() == self._wanted(capability)

    def is_device_capability_family(self, family: int) -> bool:
        return self.is_cuda() and self._capability() // 10 * 10 == family

    def register_custom_kv_cache_specs(self, vllm_config: Any) -> None:
        return None  # out-of-tree platforms only


def logger_module() -> types.ModuleType:
    return wheelsrc.shim("vllm.logger", init_logger=init_logger)


def platforms_module() -> types.ModuleType:
    return wheelsrc.shim("vllm.platforms", current_platform=Platform())
