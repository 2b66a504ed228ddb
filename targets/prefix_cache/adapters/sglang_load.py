"""Load SGLang's real radix cache and KV-slot allocators from the pinned wheel, on a CPU.

What is real (imported from ``sglang==0.5.23``, :data:`fuzzkit.targets.engine_pins.SGLANG`, under the
engine's own module names): ``mem_cache/radix_cache.py`` (RadixKey, TreeNode, RadixCache),
``base_prefix_cache.py`` (params/results, lock/unlock), ``cache_init_params.py``,
``evict_policy.py``, ``utils.py`` (the eviction-strategy factory, node hash splitting),
``cpp_utils/native_hash.py`` (imported by utils.py; its C++ extension is built lazily and never
here), ``unified_cache/component_type.py`` and ``allocator/{__init__,base,token,paged}.py`` (the
token and paged TokenToKVPool allocators).

What is shimmed, and why (nothing of it decides what the tree caches, matches, locks or evicts):

* ``sglang.srt.mem_cache.events`` -- the KV-event publisher (a ZMQ/disaggregation stack).  The
  tree is built with events disabled, so the real recorder would drop everything too; the shim
  records nothing.
* ``sglang.srt.observability.metrics_collector`` and ``sglang.srt.runtime_context`` -- Prometheus
  metrics and the process-wide server context; only read when metrics are enabled (never here).
* ``sglang.srt.mem_cache.memory_pool`` -- the module imports CUDA kernels, attention layers and
  quantization at import time.  RadixCache only touches ``ReqToTokenPool.req_to_token`` (the
  request -> KV-slot rows) and ``write``; :class:`RowPool` is that table on the CPU.
* ``sglang.srt.utils`` / ``sglang.srt.utils.common`` -- a 4 000-line grab bag importing PIL,
  starlette, orjson...; the tree reads ``ceil_align`` and the paged allocator
  ``get_bool_env_var`` / ``is_hip`` / ``next_power_of_2`` (Triton launch width, unused on the CPU
  path) and ``get_num_new_pages`` (never called: the driver passes ``num_new_pages``, and the
  shim raises if that ever changes).
* ``sglang.srt.platforms`` -- the accelerator platform query: CPU, no Triton, so the paged
  allocator takes its pure-torch ``alloc_extend_naive`` path.
* ``sglang.kernels.ops.memory.allocator`` / ``sglang.kernels.ops.kvcache.mla_buffer`` -- Triton
  kernels for GPU pools; the CPU path never launches them, and the shims raise if it does.
* ``sglang.srt.environ`` -- the env-var registry; utils.py reads it only in a function for
  custom GPU memory pools, never called here.

Packages whose ``__init__`` must not run (they import the whole server) are registered bare.
A user with SGLang installed (``import sglang`` works and is not fuzzkit's) gets the installed
modules instead: nothing is shimmed then.
"""

from __future__ import annotations

import functools
import os
import types
from typing import Any

from fuzzkit import wheelsrc
from fuzzkit.targets.engine_pins import SGLANG

MEM = "sglang/srt/mem_cache/"
MEMBERS = tuple(MEM + name for name in (
    "radix_cache.py", "base_prefix_cache.py", "cache_init_params.py", "evict_policy.py",
    "utils.py", "cpp_utils/native_hash.py", "unified_cache/component_type.py",
    "allocator/__init__.py", "allocator/base.py", "allocator/token.py", "allocator/paged.py",
))
BARE = (
    "sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.mem_cache.cpp_utils",
    "sglang.srt.mem_cache.unified_cache", "sglang.kernels", "sglang.kernels.ops",
    "sglang.kernels.ops.memory", "sglang.kernels.ops.kvcache", "sglang.srt.observability",
)
MODULES = (
    "sglang.srt.mem_cache.radix_cache", "sglang.srt.mem_cache.base_prefix_cache",
    "sglang.srt.mem_cache.allocator",
)


class RowPool:
    """The request -> KV-slot table (``ReqToTokenPool``'s two members RadixCache uses)."""

    def __init__(self, size: int, max_context_len: int, device: str = "cpu", **_: Any) -> None:
        import torch

        self.size = size
        self.max_context_len = max_context_len
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int64)

    def write(self, indices: Any, values: Any) -> None:
        self.req_to_token[indices] = values


def _gpu_only(name: str) -> Any:
    def launch(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{name}: a GPU kernel the CPU path must never launch")

    return launch


def _never(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{name}: shimmed out; fuzzkit's driver must not reach it")

    return call


class _NoEvents:
    """KVCacheEventRecorder with events disabled: every record is dropped."""

    def __init__(self, enabled: bool = False, **_: Any) -> None:
        self.enabled = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("record"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def take(self) -> list[Any]:
        return []


class _Names:
    """LoRA-name table of the event module (only stored, never read with events off)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class _Platform:
    class capabilities:  # noqa: N801 - mirrors current_platform.capabilities
        supports_triton = False


def _ceil_align(x: int, align: int) -> int:
    return -(-x // align) * align


def _bool_env(name: str, default: str = "false") -> bool:
    return os.environ.get(name, default).strip().lower() in ("1", "true", "yes", "on")


def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _shims() -> dict[str, types.ModuleType]:
    shim = wheelsrc.shim
    utils = dict(ceil_align=_ceil_align, get_bool_env_var=_bool_env, is_hip=lambda: False,
                 next_power_of_2=_next_power_of_2,
                 get_num_new_pages=_never("sglang.srt.utils.get_num_new_pages"))
    mla = {name: _gpu_only(name) for name in (
        "get_mla_kv_buffer_kernel", "get_mla_kv_buffer_triton",
        "set_mla_kv_buffer_dcp_sharded_triton", "set_mla_kv_buffer_fp8_quant_kernel",
        "set_mla_kv_buffer_kernel", "set_mla_kv_buffer_triton",
        "set_mla_kv_buffer_triton_fp8_quant", "set_mla_kv_scale_buffer_kernel",
        "set_mla_kv_scale_buffer_triton")}
    utils_package = shim("sglang.srt.utils", **utils)
    utils_package.__path__ = []  # a package, so that ``sglang.srt.utils.common`` resolves
    return {
        "sglang.srt.utils": utils_package,
        "sglang.srt.utils.common": shim("sglang.srt.utils.common", **utils),
        "sglang.srt.environ": shim("sglang.srt.environ", envs=types.SimpleNamespace()),
        "sglang.srt.platforms": shim("sglang.srt.platforms", current_platform=_Platform()),
        "sglang.srt.runtime_context": shim(
            "sglang.srt.runtime_context", get_observability=_never("get_observability"),
            get_parallel=_never("get_parallel")),
        "sglang.srt.observability.metrics_collector": shim(
            "sglang.srt.observability.metrics_collector",
            STAT_LOGGER_ROLE_RADIX_CACHE="radix_cache", RadixCacheMetricsCollector=object,
            radix_cache_metric_labels=_never("radix_cache_metric_labels"),
            resolve_collector_class=_never("resolve_collector_class")),
        "sglang.srt.mem_cache.events": shim(
            "sglang.srt.mem_cache.events", KVCacheEventRecorder=_NoEvents,
            LoRANameTable=_Names, KvEventLoraNames=_Names),
        "sglang.srt.mem_cache.memory_pool": shim(
            "sglang.srt.mem_cache.memory_pool", ReqToTokenPool=RowPool, KVCache=object),
        "sglang.kernels.ops.memory.allocator": shim(
            "sglang.kernels.ops.memory.allocator",
            alloc_decode_kernel=_gpu_only("alloc_decode_kernel"),
            alloc_extend_kernel=_gpu_only("alloc_extend_kernel")),
        "sglang.kernels.ops.kvcache.mla_buffer": shim(
            "sglang.kernels.ops.kvcache.mla_buffer", **mla),
    }


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """One line saying why SGLang's radix cache cannot be loaded here, or None (asked once per
    process: a failed download is not retried for every case)."""
    return wheelsrc.unavailable(SGLANG, "sglang", modules)


@functools.lru_cache(maxsize=1)
def modules() -> types.SimpleNamespace:
    """The real modules: ``radix`` (radix_cache), ``base`` (base_prefix_cache), ``alloc``
    (the allocator package) -- installed SGLang if present, else the pinned wheel's."""
    import importlib

    if wheelsrc.installed("sglang"):
        radix, base, alloc = (importlib.import_module(m) for m in MODULES)
    else:
        root = wheelsrc.extract(SGLANG, MEMBERS)
        radix, base, alloc = wheelsrc.load(root, MODULES, BARE, _shims())
    return types.SimpleNamespace(radix=radix, base=base, alloc=alloc)


def __getattr__(name: str) -> Any:
    """``radix`` / ``base`` / ``alloc``: the real modules, loaded on first use -- so a mutant can
    name ``"fuzzkit.targets.prefix_cache.adapters.sglang_load:radix"`` as its owner without importing
    torch or the wheel until it is applied."""
    if name in ("radix", "base", "alloc"):
        return getattr(modules(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
