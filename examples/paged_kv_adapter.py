"""Fuzz *your* KV cache manager: a worked adapter example.

fuzzkit drives any class that offers the operations of
``targets/paged_kv/protocol.py`` (``add_request``, ``allocate``, ``commit``, ``publish``,
``append``, ``fork``, ``preempt``, ``trim``, ``finish``, ``reset_prefix_cache``, ``block_table``,
``num_free_blocks``; optionally ``inspect`` for the structural invariants).  Real engines have
their own method names and request objects; an adapter translates.  Here the engine being
adapted is fuzzkit's own vLLM-style manager, reached only through an engine-shaped facade
(request objects, LoRA ids on the request, ``get_computed_blocks`` / ``allocate_slots``), the
way you would wrap vLLM's ``KVCacheManager``:

    PYTHONPATH=. fuzzkit run paged_kv --impl examples.paged_kv_adapter:EngineAdapter --budget 60   # clean
    PYTHONPATH=. fuzzkit run paged_kv --impl examples.paged_kv_adapter:EngineAdapterDroppingLora   # finds it

The second adapter has the classic bug of vLLM #3264: the LoRA id never reaches the block hash,
so two requests with the same tokens under different adapters share KV.  fuzzkit's semantic KV
oracle (it stamps every written slot with the prefix *and* extra keys it belongs to) catches it
and shrinks the program to a handful of steps.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from fuzzkit.targets.paged_kv.optimized import OptimizedManager, thresholds
from fuzzkit.targets.paged_kv.protocol import Allocation, Config


@dataclasses.dataclass
class EngineRequest:
    """What an engine's scheduler hands its KV cache manager."""

    request_id: str
    prompt_token_ids: list[int]
    lora_int_id: int = 0  # 0 = no adapter, as in vLLM
    cache_salt: Optional[int] = None


class Engine:
    """A stand-in for a serving engine's KV cache manager API (vLLM-shaped names)."""

    def __init__(self, num_gpu_blocks: int, block_size: int, sliding_window: Optional[int]):
        self._manager = OptimizedManager(Config(num_gpu_blocks, block_size, sliding_window))

    def get_computed_blocks(self, request: EngineRequest) -> int:
        lora = request.lora_int_id or None
        return self._manager.add_request(_rid(request), request.prompt_token_ids, lora,
                                         request.cache_salt)

    def allocate_slots(self, request_id: str, num_new_tokens: int) -> Optional[Allocation]:
        return self._manager.allocate(int(request_id), num_new_tokens)

    def __getattr__(self, name: str) -> Any:  # everything else passes straight through
        return getattr(self._manager, name)


def _rid(request: EngineRequest) -> int:
    return int(request.request_id)


class EngineAdapter:
    """fuzzkit's protocol on top of :class:`Engine`."""

    #: The sizes where the engine's code changes path (its block tables' rows and width), for
    #: fuzzkit's strategy to aim at (optional; see ``fuzzkit.targets.paged_kv.manager_implementation``).
    thresholds = staticmethod(thresholds)

    def __init__(self, config: Config) -> None:
        self.engine = Engine(config.num_blocks, config.block_size, config.sliding_window)

    def make_request(self, rid: int, tokens: Sequence[int], adapter: Optional[int],
                     salt: Optional[int]) -> EngineRequest:
        # LoRA ids start at 1 in vLLM; fuzzkit's adapter ids start at 0.
        lora = 0 if adapter is None else adapter + 1
        return EngineRequest(str(rid), list(tokens), lora, salt)

    def add_request(self, rid: int, tokens: Sequence[int], adapter: Optional[int] = None,
                    salt: Optional[int] = None) -> Optional[int]:
        return self.engine.get_computed_blocks(self.make_request(rid, tokens, adapter, salt))

    def allocate(self, rid: int, num_tokens: int) -> Optional[Allocation]:
        return self.engine.allocate_slots(str(rid), num_tokens)

    def commit(self, rid: int) -> Optional[int]:
        return self.engine.commit(rid)

    def publish(self, rid: int) -> Optional[int]:
        return self.engine.publish(rid)

    def append(self, rid: int, tokens: Sequence[int]) -> Optional[int]:
        return self.engine.append(rid, tokens)

    def fork(self, src: int, dst: int) -> Optional[bool]:
        return self.engine.fork(src, dst)

    def preempt(self, rid: int) -> Optional[bool]:
        return self.engine.preempt(rid)

    def trim(self, rid: int) -> Optional[int]:
        return self.engine.trim(rid)

    def finish(self, rid: int) -> Optional[bool]:
        return self.engine.finish(rid)

    def reset_prefix_cache(self) -> bool:
        return self.engine.reset_prefix_cache()

    def block_table(self, rid: int) -> Sequence[int]:
        return self.engine.block_table(rid)

    def num_free_blocks(self) -> int:
        return self.engine.num_free_blocks()

    def inspect(self) -> dict[str, Any]:
        """Optional: lets fuzzkit check ref counts, the free queue and hashes after every step."""
        return self.engine.inspect()


class EngineAdapterDroppingLora(EngineAdapter):
    """The same adapter with vLLM #3264's bug: the LoRA id is lost on the way to the hash."""

    def make_request(self, rid: int, tokens: Sequence[int], adapter: Optional[int],
                     salt: Optional[int]) -> EngineRequest:
        return EngineRequest(str(rid), list(tokens), 0, salt)
