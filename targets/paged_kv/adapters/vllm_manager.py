"""vLLM 0.33's real v1 ``KVCacheManager`` behind fuzzkit's KV cache manager protocol.

Usable as ``fuzzkit run paged_kv --impl vllm`` (registered on the target) or ``--impl
fuzzkit.targets.paged_kv.adapters.vllm_manager:VLLMManager``, and under KVGuard as ``--impl
'vllm[guarded]'`` (or ``--guarded``).  What runs is vLLM's own code, imported from the pinned
wheel (:data:`fuzzkit.targets.engine_pins.VLLM`) by :mod:`fuzzkit.wheelsrc` -- or from an installed vLLM
when there is one: ``KVCacheManager`` (``vllm/v1/core/kv_cache_manager.py``), the
``UnitaryKVCacheCoordinator``, ``FullAttentionManager`` / ``SlidingWindowManager``, ``BlockPool``
with its ``FreeKVCacheBlockQueue`` and ``BlockHashToBlockMap``, the block hasher and extra-key
generation of ``kv_cache_utils``, and ``vllm.v1.request.Request``.  This module only translates
calls, the way vLLM's scheduler drives the manager.

Shims (every other vLLM module imported is the wheel's own file)
---------------------------------------------------------------
The package ``__init__`` files of ``vllm``, ``vllm.v1``, ``vllm.v1.core`` and the other parents
do not run (they import the engine, CUDA, the OpenAI server); these helper modules are replaced:

* ``vllm.logger`` -- ``init_logger`` returns a standard logger with vLLM's ``*_once`` methods;
  vLLM's configures handlers and reads the platform.
* ``vllm.config`` -- only ``VllmConfig`` (a type in signatures) and
  ``get_current_vllm_config_or_none`` (returns None: the spec registry then registers the
  built-in specs, as vLLM does without a config); the real package imports the whole engine.
* ``vllm.platforms`` -- ``current_platform.register_custom_kv_cache_specs`` does nothing
  (out-of-tree platforms only); the real one probes CUDA.
* ``vllm.distributed.kv_events`` -- the event record classes (``BlockStored``...), never built
  since events are off (``enable_kv_cache_events=False``); the real module needs msgspec + zmq.
* ``vllm.multimodal.inputs`` / ``vllm.multimodal.utils`` -- no request has multimodal features,
  so ``get_mm_features_in_window`` is never called (it raises if it is); the real ones need PIL.
* ``vllm.v1.metrics.stats`` -- the stats records (``PrefixCacheStats``, ``PrefillStats``...);
  stats are off (``log_stats=False``).  The real module imports the compilation stack.
* ``vllm.v1.utils`` -- ``ConstantList`` (a read-only list view; the real module imports uvloop
  and the engine's process utilities) and ``tensor_data`` (prompt embeddings only, unused).
* ``vllm.v1.engine``, ``vllm.v1.kv_hints``, ``vllm.v1.structured_output.request``,
  ``vllm.sampling_params``, ``vllm.pooling_params`` -- the types ``Request`` names;
  ``SamplingParams`` holds ``max_tokens``, ``extra_args`` and ``skip_reading_prefix_cache``, the
  three fields ``Request`` reads, and no request uses structured output.
* ``vllm.utils.torch_utils`` (``get_dtype_size``: page sizes, unused) and
  ``vllm.v1.attention.backends.registry`` (a Mamba backend enum in a type): the real ones
  import the kernels.
* ``cbor2`` only when it is not installed: ``vllm.utils.hashing`` imports it for
  ``sha256_cbor``; the manager hashes with vLLM's default ``sha256`` (pickle + SHA-256).

A LoRA adapter is passed on the request as a small stand-in for ``vllm.lora.request.LoRARequest``
(a msgspec struct) with the fields vLLM reads (``lora_name``, ``lora_int_id``, ``lora_path``).

The protocol, the way vLLM's scheduler does it
----------------------------------------------
* ``add_request``: ``Request(...)`` with vLLM's block hasher, then ``get_computed_blocks`` (a
  lookup; pins nothing).  An adapter id ``a`` becomes the LoRA ``adapter-a`` at a path of its
  own (vLLM's extra key is ``("lora", name, path)`` on every block); a salt ``s`` becomes
  ``cache_salt="salt-s"`` (vLLM adds ``("cache_salt", salt)`` to block 0 only, and only for a
  non-empty string: the integer salt 0 must not vanish).
* ``allocate``: a request holding no blocks is admitted as the scheduler does a waiting one:
  ``get_computed_blocks`` again, then ``allocate_slots(request, n, hits, blocks)``; a running one
  gets ``allocate_slots(request, n)``.  The scheduled count is ``min(n, tokens - computed)``,
  where ``computed`` is vLLM's ``num_computed_tokens`` -- advanced at scheduling time, with
  ``num_in_flight_tokens`` counting what is not written yet, as vLLM's async scheduler does
  (``Scheduler._update_after_schedule``).  A step that schedules nothing is not sent to
  ``allocate_slots`` (vLLM's scheduler never schedules a request with nothing to compute, and
  ``allocate_slots`` refuses it); for a running request it still does what ``allocate_slots``
  does first, ``remove_skipped_blocks`` (window mode "eager").
* ``commit``: the step's output is processed: ``num_in_flight_tokens -= scheduled``.
* ``publish``: hashing mode "allocate" (vLLM's default) caches full blocks inside
  ``allocate_slots`` and publish has nothing left to do; in mode "publish" allocations pass
  ``delay_cache_blocks=True`` and publish calls ``cache_blocks(request, num_computed_tokens -
  num_in_flight_tokens)`` -- the scheduler's own call after a step's output is processed.
* ``preempt`` / ``finish``: ``free`` (blocks freed tail first); a preempted request gets
  ``num_computed_tokens = 0``, status ``PREEMPTED``, and is re-admitted by its next allocation.
* ``trim``: ``remove_skipped_blocks(request, computed - in_flight)``, the scheduler's call before
  it hands a table to a connector; vLLM also runs it inside every ``allocate_slots``
  (window mode "eager", the only one declared: cases with a ``trim`` op are not run).
* ``reset_prefix_cache``, ``block_table`` (the request's blocks, null entries 0) and
  ``num_free_blocks`` are vLLM's; ``inspect`` reads the block pool (hashes, which are bytes in
  vLLM, become ``int.from_bytes(h, "big")``).

Configuration, and the vLLM behaviour that must not look like a bug
-------------------------------------------------------------------
``watermark=0`` (vLLM keeps a fraction of the pool free for waiting requests: a fit fuzzkit's
policy does not have); ``max_model_len`` far above any program (vLLM caps slots at it);
``enable_caching=True``, no EAGLE, no connector, no events, one KV cache group of
``FullAttentionSpec`` (no window) or ``SlidingWindowSpec`` so the block size is the hash block
size.  Gaps between vLLM and the protocol, as modelled:

* no fork or copy-on-write (``capabilities.fork`` is False; :meth:`fork` raises ``Unsupported``);
* windows: vLLM frees out-of-window blocks inside ``allocate_slots`` -- before the fit check,
  so even an allocation that does not fit frees them (window mode "eager"); with a window of one
  token no block is ever cached (``SlidingWindowManager.reachable_block_mask``); and its lookup
  under a window searches right to left for the window's blocks;
* the null block is block 0 (``BlockPool.null_block``), never in the free queue;
* the free queue's order: vLLM puts uncached freed blocks at the front *tail first* (LIFO reuse);
  the protocol's reference puts them head first.  Uncached blocks are never hits and all of them
  are reused before any cached block, so only physical ids differ, which are never compared;
* "last token always computed": vLLM caps a lookup at ``num_tokens - 1`` tokens, the protocol's
  ``(len - 1) // b`` blocks.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib.util
import sys
import types
from collections.abc import Sequence as SequenceABC
from typing import Any, Callable, Iterable, Optional, Sequence

from fuzzkit import wheelsrc
from fuzzkit.targets import vllm_shims
from fuzzkit.targets.engine_pins import VLLM
from fuzzkit.targets.paged_kv.protocol import Allocation, Config

#: Source files of the wheel the adapter imports (vLLM's KV cache manager and what it imports).
MEMBERS = (
    "vllm/envs.py",
    "vllm/utils/__init__.py",
    "vllm/utils/math_utils.py",
    "vllm/utils/hashing.py",
    "vllm/v1/request.py",
    "vllm/v1/kv_cache_interface.py",
    "vllm/v1/kv_cache_layout.py",
    "vllm/v1/kv_cache_spec_registry.py",
    "vllm/v1/hisparse/block_pool.py",
    "vllm/v1/core/block_pool.py",
    "vllm/v1/core/kv_cache_coordinator.py",
    "vllm/v1/core/kv_cache_manager.py",
    "vllm/v1/core/kv_cache_metrics.py",
    "vllm/v1/core/kv_cache_utils.py",
    "vllm/v1/core/single_type_kv_cache_manager.py",
)

#: Packages whose ``__init__`` must not run (they import the whole engine).
BARE_PACKAGES = (
    "vllm", "vllm.v1", "vllm.v1.core", "vllm.v1.hisparse", "vllm.v1.attention",
    "vllm.v1.attention.backends", "vllm.v1.metrics", "vllm.v1.structured_output",
    "vllm.distributed", "vllm.multimodal",
)

#: The modules under test, imported under their real names.
MODULES = (
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.core.block_pool",
    "vllm.v1.core.single_type_kv_cache_manager",
    "vllm.v1.core.kv_cache_coordinator",
    "vllm.v1.core.kv_cache_manager",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.request",
    "vllm.utils.hashing",
)

#: Far above any program's length: vLLM caps token slots at ``max_model_len``.
MAX_MODEL_LEN = 1 << 40


# ============================================================================ shims


class _Record:
    """A plain record taking any keyword fields (vLLM's event and stats structs)."""

    def __init__(self, *args: Any, **fields: Any) -> None:
        self.args = args
        self.__dict__.update(fields)


def _record_types(*names: str) -> dict[str, type]:
    return {name: type(name, (_Record,), {}) for name in names}


class _ConstantList(SequenceABC):  # type: ignore[type-arg]
    """A read-only view of a list (what ``vllm.v1.utils.ConstantList`` is for)."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def copy(self) -> list[Any]:
        return list(self._items)


@dataclasses.dataclass
class _SamplingParams:
    """The three fields ``vllm.v1.request.Request`` reads of ``SamplingParams``."""

    max_tokens: int = 1 << 20
    extra_args: Optional[dict[str, Any]] = None
    skip_reading_prefix_cache: Optional[bool] = None


class _StructuredOutputRequest:
    @staticmethod
    def from_sampling_params(sampling_params: Any) -> None:
        return None  # no request uses structured output


def _not_called(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{name} is shimmed by the fuzzkit vLLM adapter and should "
                                  "never run (no request has multimodal inputs or embeddings)")

    return refuse


def _shims() -> dict[str, types.ModuleType]:
    shim = wheelsrc.shim
    shims = {
        "vllm.logger": vllm_shims.logger_module(),
        "vllm.config": shim("vllm.config", VllmConfig=type("VllmConfig", (), {}),
                            get_current_vllm_config_or_none=lambda: None),
        "vllm.platforms": vllm_shims.platforms_module(),
        "vllm.distributed.kv_events": shim(
            "vllm.distributed.kv_events", MEDIUM_GPU="GPU", MEDIUM_CPU="CPU",
            **_record_types("KVCacheEvent", "BlockStored", "BlockRemoved", "AllBlocksCleared")),
        "vllm.multimodal.inputs": shim("vllm.multimodal.inputs",
                                       MultiModalFeatureSpec=type("MultiModalFeatureSpec", (), {})),
        "vllm.multimodal.utils": shim(
            "vllm.multimodal.utils",
            get_mm_features_in_window=_not_called("get_mm_features_in_window")),
        "vllm.v1.metrics.stats": shim(
            "vllm.v1.metrics.stats",
            **_record_types("PrefixCacheStats", "PrefillStats", "RequestSpecDecodeMetrics",
                            "KVCacheEvictionEvent")),
        "vllm.v1.utils": shim("vllm.v1.utils", ConstantList=_ConstantList,
                              tensor_data=_not_called("tensor_data")),
        "vllm.v1.engine": shim("vllm.v1.engine", EngineCoreRequest=object,
                               **_record_types("EngineCoreEvent"),
                               EngineCoreEventType=enum.IntEnum("EngineCoreEventType",
                                                                "QUEUED SCHEDULED PREEMPTED"),
                               FinishReason=enum.IntEnum("FinishReason",
                                                         "STOP LENGTH ABORT ERROR REPETITION")),
        "vllm.v1.kv_hints": shim("vllm.v1.kv_hints", KvHintsEnvelope=object),
        "vllm.v1.structured_output.request": shim(
            "vllm.v1.structured_output.request", StructuredOutputRequest=_StructuredOutputRequest),
        "vllm.sampling_params": shim("vllm.sampling_params", SamplingParams=_SamplingParams),
        "vllm.pooling_params": shim("vllm.pooling_params", PoolingParams=object),
        "vllm.utils.torch_utils": shim("vllm.utils.torch_utils",
                                       get_dtype_size=_not_called("get_dtype_size")),
        "vllm.v1.attention.backends.registry": shim(
            "vllm.v1.attention.backends.registry",
            MambaAttentionBackendEnum=enum.Enum("MambaAttentionBackendEnum", "MAMBA MAMBA2")),
    }
    if importlib.util.find_spec("cbor2") is None:
        shims["cbor2"] = shim("cbor2", dumps=_not_called("cbor2.dumps"))
    return shims


def _merge_into_existing(shims: dict[str, types.ModuleType]) -> None:
    """Another fuzzkit adapter of the same engine (the kernel adapters) may have registered a
    shim of the same name first: :func:`fuzzkit.wheelsrc.load` then keeps theirs, so add the
    attributes this adapter needs that it lacks (never replacing one it has)."""
    for name, module in shims.items():
        existing = sys.modules.get(name)
        if existing is None or not getattr(existing, "__fuzzkit_wheelsrc__", False):
            continue
        for attr, value in vars(module).items():
            if not attr.startswith("__") and not hasattr(existing, attr):
                setattr(existing, attr, value)


@functools.lru_cache(maxsize=None)
def modules() -> types.SimpleNamespace:
    """vLLM's modules under test, loaded once per process (an installed vLLM if there is one,
    else the pinned wheel's files behind the shims above)."""
    if wheelsrc.installed("vllm"):  # pragma: no cover - a machine with vLLM installed
        import importlib

        loaded = [importlib.import_module(name) for name in MODULES]
    else:
        root = wheelsrc.extract(VLLM, MEMBERS)
        shims = _shims()
        _merge_into_existing(shims)
        loaded = wheelsrc.load(root, MODULES, BARE_PACKAGES, shims)
    space = types.SimpleNamespace(**{name.rpartition(".")[2]: module
                                     for name, module in zip(MODULES, loaded, strict=True)})
    utils = space.kv_cache_utils
    if not hasattr(utils, "NONE_HASH"):  # vLLM's EngineCore does this once per process
        utils.init_none_hash(space.hashing.sha256)
    return space


def unavailable() -> Optional[str]:
    """One line when vLLM's code cannot be had here (not installed, the pinned wheel not in the
    cache: the line says how to fetch it), else None.  Loads and downloads nothing."""
    if wheelsrc.installed("vllm"):  # pragma: no cover - a machine with vLLM installed
        return None
    return wheelsrc.unavailable(VLLM, "vllm", lambda: wheelsrc.extract(VLLM, MEMBERS))


def implementation(name: str = "vllm", **options: Any) -> Any:
    """The registered ``vllm`` implementation of ``paged_kv`` (``options``: see
    :func:`fuzzkit.targets.paged_kv.manager_implementation`; ``vllm[guarded]`` runs under KVGuard)."""
    from fuzzkit.targets.paged_kv import manager_implementation

    impl = manager_implementation(
        VLLMManager, name, "external",
        f"vLLM {VLLM.version} v1 KVCacheManager (the wheel's own code, CPU)", **options)
    guard_unavailable = impl.unavailable
    return dataclasses.replace(
        impl, unavailable=lambda: unavailable() or guard_unavailable(),
        sources=("fuzzkit.targets.paged_kv.adapters.vllm_manager",), options=implementation)


# ============================================================================ the adapter


@dataclasses.dataclass(frozen=True)
class _LoRARequest:
    """The fields of ``vllm.lora.request.LoRARequest`` vLLM's KV cache code reads."""

    lora_name: str
    lora_int_id: int
    lora_path: str

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id

    @property
    def name(self) -> str:
        return self.lora_name


def _lora(adapter: Optional[int]) -> Optional[_LoRARequest]:
    if adapter is None:
        return None
    # vLLM's LoRA ids start at 1; fuzzkit's adapter ids at 0.
    return _LoRARequest(f"adapter-{adapter}", int(adapter) + 1, f"/fuzzkit/adapters/{adapter}")


def _salt(salt: Optional[int]) -> Optional[str]:
    return None if salt is None else f"salt-{salt}"


def _hash_int(block_hash: Optional[bytes]) -> Optional[int]:
    return None if block_hash is None else int.from_bytes(block_hash, "big")


def _capabilities() -> Any:
    """The protocol variants vLLM implements (``Capabilities`` in the protocol, when present)."""
    from fuzzkit.targets.paged_kv import protocol

    declared = dict(eviction_policies=("lru",), fork=False, windows=("eager",),
                    hashing=("allocate", "publish"), extra_keys=("adapter", "salt"), reset=True)
    make = getattr(protocol, "Capabilities", None)
    return make(**declared) if make is not None else types.SimpleNamespace(**declared)


def _unsupported(message: str) -> Exception:
    from fuzzkit import target

    kind = getattr(target, "Unsupported", NotImplementedError)
    return kind(message)


class VLLMManager:
    """vLLM 0.33's real v1 KVCacheManager (BlockPool, coordinator, hashing) via the pinned wheel."""

    capabilities = _capabilities()
    eviction_policies = ("lru",)
    code_under_test = ("vllm",)

    def __init__(self, config: Config, guard: Any = None) -> None:
        self.v = modules()
        self.config = config
        self.b = config.block_size
        self.hashing = getattr(config, "hashing", "publish")
        iface = self.v.kv_cache_interface
        torch = sys.modules.get("torch") or importlib.import_module("torch")
        layout = dict(block_size=self.b, num_kv_heads=1, head_size=1, dtype=torch.float32)
        spec = (iface.FullAttentionSpec(**layout) if config.sliding_window is None else
                iface.SlidingWindowSpec(**layout, sliding_window=config.sliding_window))
        kv_cache_config = iface.KVCacheConfig(
            num_blocks=config.num_blocks, kv_cache_tensors=[],
            kv_cache_groups=[iface.KVCacheGroupSpec(["layers.0"], spec)])
        self.manager = self.v.kv_cache_manager.KVCacheManager(
            kv_cache_config, max_model_len=MAX_MODEL_LEN, scheduler_block_size=self.b,
            hash_block_size=self.b, enable_caching=True, watermark=0.0)
        self.pool = self.manager.block_pool
        self.group = self.manager.coordinator.single_type_managers[0]
        self.hasher = self.v.kv_cache_utils.get_request_block_hasher(
            self.b, self.v.hashing.sha256)
        self.requests: dict[int, Any] = {}
        self.guard = guard
        self.actor = -1  # the request the current operation serves (KVGuard events)
        if guard is not None:
            BlockPoolEvents(self.pool, guard, lambda: self.actor)

    # ------------------------------------------------------------------ operations

    def add_request(self, rid: int, tokens: Sequence[int], adapter: Optional[int] = None,
                    salt: Optional[int] = None) -> Optional[int]:
        if rid in self.requests:
            return None
        request = self.v.request.Request(
            request_id=str(rid), prompt_token_ids=[int(t) for t in tokens],
            sampling_params=_SamplingParams(), pooling_params=None, lora_request=_lora(adapter),
            cache_salt=_salt(salt), block_hasher=self.hasher)
        self.requests[rid] = request
        return int(self._lookup(request)[1])

    def _lookup(self, request: Any) -> tuple[Any, int]:
        """``get_computed_blocks``: the hit blocks and tokens, pinning nothing.  vLLM's input
        processing rejects an empty prompt before the scheduler sees it (a lookup capped at
        ``num_tokens - 1 = -1`` tokens fails), so an empty request finds nothing here."""
        if request.num_tokens == 0:
            return self.manager.empty_kv_cache_blocks, 0
        blocks, hits, _ = self.manager.get_computed_blocks(request)
        return blocks, int(hits)

    def allocate(self, rid: int, num_tokens: int) -> Optional[Allocation]:
        request = self.requests.get(rid)
        if request is None:
            return None
        self.actor = rid
        try:
            return self._allocate(request, rid, int(num_tokens))
        finally:
            if self.guard is not None:
                self.guard.on_step_end(rid)

    def _allocate(self, request: Any, rid: int, num_tokens: int) -> Optional[Allocation]:
        status = self.v.request.RequestStatus
        delay = self.hashing == "publish"
        if not self._blocks(rid):  # admission: a waiting or preempted request
            blocks, hits = self._lookup(request)
            scheduled = max(0, min(num_tokens, request.num_tokens - hits))
            if scheduled == 0 and hits == 0:
                return Allocation(computed=0, scheduled=0)  # nothing to schedule or adopt
            if self.guard is not None:
                self.guard.on_hits(rid, [b.block_id for b in blocks.blocks[0] if not b.is_null])
            if self.manager.allocate_slots(request, scheduled, hits, blocks,
                                           delay_cache_blocks=delay) is None:
                return None
            request.status = status.RUNNING
            request.num_computed_tokens = hits
        else:
            scheduled = max(0, min(num_tokens, request.num_tokens - request.num_computed_tokens))
            if scheduled == 0:  # not scheduled; allocate_slots would first free this:
                self._remove_skipped_blocks(request)
                return Allocation(computed=request.num_computed_tokens, scheduled=0)
            if self.manager.allocate_slots(request, scheduled,
                                           delay_cache_blocks=delay) is None:
                return None
        start = request.num_computed_tokens
        request.num_computed_tokens += scheduled  # Scheduler._update_after_schedule
        request.num_in_flight_tokens += scheduled
        return Allocation(computed=start, scheduled=scheduled)

    def commit(self, rid: int) -> Optional[int]:
        request = self.requests.get(rid)
        if request is None:
            return None
        request.num_in_flight_tokens = 0  # update_from_output: the step's tokens are processed
        return int(request.num_computed_tokens)

    def publish(self, rid: int) -> Optional[int]:
        request = self.requests.get(rid)
        if request is None:
            return None
        self.actor = rid
        before = self.group.num_cached_block.get(request.request_id, 0)
        if self.hashing == "publish":
            self.manager.cache_blocks(
                request, request.num_computed_tokens - request.num_in_flight_tokens)
        after = self.group.num_cached_block.get(request.request_id, 0)
        blocks = self._blocks(rid)[before:after]
        return sum(1 for block in blocks if not block.is_null and block.block_hash is not None)

    def append(self, rid: int, tokens: Sequence[int]) -> Optional[int]:
        request = self.requests.get(rid)
        if request is None:
            return None
        request.append_output_token_ids([int(t) for t in tokens])
        return int(request.num_tokens)

    def fork(self, src: int, dst: int) -> Optional[bool]:
        raise _unsupported("vLLM v1's KVCacheManager has no fork (no copy-on-write sharing)")

    def preempt(self, rid: int) -> Optional[bool]:
        request = self.requests.get(rid)
        if request is None:
            return None
        self.actor = rid
        self.manager.free(request)  # Scheduler._preempt_request
        request.status = self.v.request.RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_in_flight_tokens = 0  # the driver cancels the in-flight step's writes
        request.num_preemptions += 1
        return True

    def trim(self, rid: int) -> Optional[int]:
        request = self.requests.get(rid)
        if request is None:
            return None
        self.actor = rid
        before = sum(1 for block in self._blocks(rid) if block.is_null)
        self._remove_skipped_blocks(request)
        return sum(1 for block in self._blocks(rid) if block.is_null) - before

    def _remove_skipped_blocks(self, request: Any) -> None:
        """vLLM frees out-of-window blocks on the processed-token basis (written tokens only),
        as ``allocate_slots`` does first thing."""
        self.manager.remove_skipped_blocks(
            request.request_id,
            max(0, request.num_computed_tokens - request.num_in_flight_tokens),
            num_prompt_tokens=request.num_prompt_tokens)

    def finish(self, rid: int) -> Optional[bool]:
        request = self.requests.pop(rid, None)
        if request is None:
            return None
        self.actor = rid
        self.manager.free(request)
        request.status = self.v.request.RequestStatus.FINISHED_ABORTED
        return True

    def reset_prefix_cache(self) -> bool:
        return bool(self.manager.reset_prefix_cache())

    def block_table(self, rid: int) -> list[int]:
        return [block.block_id for block in self._blocks(rid)] if rid in self.requests else []

    def num_free_blocks(self) -> int:
        return int(self.pool.get_num_free_blocks())

    # ------------------------------------------------------------------ state

    def _blocks(self, rid: int) -> list[Any]:
        return list(self.group.req_to_blocks.get(str(rid), ()))

    def inspect(self) -> dict[str, Any]:
        pool = self.pool
        blocks = pool.blocks[1:]
        cached: dict[int, list[int]] = {}
        for key, entry in pool.cached_block_hash_to_block._cache.items():
            found = [entry] if not isinstance(entry, dict) else list(entry.values())
            cached[_hash_int(key)] = [block.block_id for block in found]  # type: ignore[index]
        return {
            "ref_cnt": {b.block_id: b.ref_cnt for b in blocks},
            "block_hash": {b.block_id: _hash_int(b.block_hash) for b in blocks},
            "free_queue": [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
            "cached": cached,
            "tables": {rid: self.block_table(rid) for rid in self.requests},
            "tokens_in_table": {rid: int(r.num_computed_tokens)
                                for rid, r in self.requests.items()},
        }


# ============================================================================ KVGuard events


class BlockPoolEvents:
    """KVGuard's events (see "KVGuard events" in :mod:`fuzzkit.targets.paged_kv.protocol`), emitted by
    wrappers around one vLLM ``BlockPool``'s methods -- vLLM's logic is not changed.

    Each wrapper is an attribute of the pool *instance*, so vLLM's own calls through ``self``
    (``get_new_blocks`` calling ``_maybe_evict_cached_block``) and the single-type managers'
    calls reach it; it calls the method of the pool's *class* at call time, so a mutant that
    patches ``BlockPool`` is still what runs.  ``actor`` names the request the current operation
    serves (the pool does not know it).

    ``touch``: on_share per non-null block; ``get_new_blocks``: on_allocate per block handed out
    (after vLLM evicts it); ``_maybe_evict_cached_block``: on_evict when it dropped a hash;
    ``free_blocks``: on_release per non-null block; ``cache_full_blocks``: on_publish per block
    that gained a hash; ``reset_prefix_cache``: on_evict per block that had one.  on_hits and
    on_step_end come from the adapter (it makes the lookup and ends the step); on_copy never
    fires (no copy-on-write with the hash block size equal to the block size)."""

    def __init__(self, pool: Any, guard: Any, actor: Callable[[], int]) -> None:
        self.pool, self.guard, self.actor = pool, guard, actor
        self.cls = type(pool)
        for name in ("touch", "get_new_blocks", "_maybe_evict_cached_block", "free_blocks",
                     "cache_full_blocks", "reset_prefix_cache"):
            setattr(pool, name, getattr(self, name))

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.cls, name)(self.pool, *args, **kwargs)

    def touch(self, blocks: Sequence[Any]) -> None:
        blocks = list(blocks)
        self._call("touch", blocks)
        for block in blocks:
            if not block.is_null:
                self.guard.on_share(self.actor(), block.block_id)

    def get_new_blocks(self, num_blocks: int) -> list[Any]:
        blocks = self._call("get_new_blocks", num_blocks)
        for block in blocks:
            self.guard.on_allocate(self.actor(), block.block_id)
        return blocks

    def _maybe_evict_cached_block(self, block: Any) -> bool:
        evicted = self._call("_maybe_evict_cached_block", block)
        if evicted:
            self.guard.on_evict(block.block_id)
        return evicted

    def free_blocks(self, ordered_blocks: Iterable[Any]) -> None:
        blocks = list(ordered_blocks)
        for block in blocks:
            if not block.is_null:
                self.guard.on_release(self.actor(), block.block_id)
        self._call("free_blocks", blocks)

    def cache_full_blocks(self, request: Any, blocks: list[Any], num_cached_blocks: int,
                          num_full_blocks: int, *args: Any, **kwargs: Any) -> None:
        window = blocks[num_cached_blocks:num_full_blocks]
        had = [block.block_hash for block in window]
        self._call("cache_full_blocks", request, blocks, num_cached_blocks, num_full_blocks,
                   *args, **kwargs)
        for block, old in zip(window, had, strict=True):
            if block.block_hash is not None and block.block_hash != old:
                self.guard.on_publish(block.block_id, _hash_int(block.block_hash))

    def reset_prefix_cache(self) -> bool:
        hashed = [block for block in self.pool.blocks if block.block_hash is not None]
        done = self._call("reset_prefix_cache")
        if done:
            for block in hashed:
                self.guard.on_evict(block.block_id)
        return done
