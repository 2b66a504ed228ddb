"""The guarded driver: programs run through the real Triton KV kernels, under KVGuard.

:class:`~targets.paged_kv.driver.Driver` models KV memory with stamps in Python.  This driver
also does what a model runner does on the device: every ``write`` op computes the slot mapping,
scatters K/V rows into a paged cache with the write kernel, and runs paged attention for the
scheduled queries through the block table — the guarded variants of both kernels, fed with
KVGuard's shadow tensors.  K, V and the queries of a position are pseudo-random vectors seeded
by its stamp (prefix + extra keys), so the float64 reference attention of a request can be
computed from its own tokens alone, without the cache: a wrong block read anywhere moves the
output far outside the ``close`` bound.

Order of evidence in one ``write``: KVGuard's host checks (table, translation), then the device
checks (read / write records), then the attention output, then the stamp model.  The first that
fails is reported, so a kernel bug is named by the guard class that saw it first.

A penelope refill runs queries at the hole's positions while the table already reaches the end
of the resident suffix: such a launch gets the table entries its context spans (positions up to
the last query), the rest is not read yet.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Optional

import numpy as np

from oracles.kvguard import KVGuard
from targets.paged_kv.driver import Driver, Violation
from targets.paged_kv.protocol import Config

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 8  # two query heads per kv head (GQA)
MAX_REQUESTS = 8


def _vector(stamp: Any, role: str, shape: tuple[int, ...]) -> np.ndarray:
    """Deterministic pseudo-random vector for ``stamp``: the same prefix always has the same K/V."""
    digest = hashlib.sha256(repr((role, stamp)).encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return rng.standard_normal(shape).astype(np.float32)


class KernelDriver(Driver):
    def __init__(self, manager: Any, config: Config, guard: KVGuard) -> None:
        super().__init__(manager, config)
        from fuzzkit import triton_support

        triton_support.prepare()
        import torch

        self.torch = torch
        self.guard = guard
        self.device = triton_support.device()
        shape = (config.num_blocks, config.block_size, KV_HEADS, HEAD_DIM)
        self.key_cache = torch.zeros(shape, dtype=torch.float32, device=self.device)
        self.value_cache = torch.zeros(shape, dtype=torch.float32, device=self.device)
        guard.attach_device(self.device, MAX_REQUESTS)

    def check_structure(self) -> None:
        """KVGuard's allocation checks (class 1) first, so that the guard names what it sees;
        then the driver's own structural invariants."""
        if self.inspectable:
            state = self.manager.inspect()
            self.guard.check_manager(state)
            for rid, table in state["tables"].items():
                self.guard.check_table(rid, table, state["tokens_in_table"][rid])
        super().check_structure()

    def copy_block(self, src: int, dst: int) -> None:
        """Copy-on-write on the device: the cache rows, and the guard's written/position shadow
        (the copy *is* a write of the destination block's slots)."""
        super().copy_block(src, dst)
        self.key_cache[dst].copy_(self.key_cache[src])
        self.value_cache[dst].copy_(self.value_cache[src])
        self.guard.on_copy(src, dst)

    def write(self, rid: int) -> Any:
        shadow = self.requests.get(rid)
        if shadow is not None and shadow.pending:
            self._forward([rid])
        return super().write(rid)

    def forward(self) -> Any:
        """One batched forward pass over every request with scheduled tokens (a mixed batch of
        prefills and decodes, as an engine runs it), then the stamp model per request."""
        rids = self._pending_rids()
        if rids:
            self._forward(rids)
        return [[rid, Driver.write(self, rid)] for rid in rids]

    def _forward(self, rids: list[int]) -> None:
        from targets.paged_kv import kernels
        from targets.paged_kv.attention_reference import check as check_attention

        torch, guard = self.torch, self.guard
        rows = [r for r in rids if r < MAX_REQUESTS]  # the guard's device shadow is this wide
        batch = []
        for rid in rows:
            shadow = self.requests[rid]
            positions = list(shadow.pending)
            span = self._refill_span(shadow, positions[-1] + 1)
            table = list(self.manager.block_table(rid))[:span]
            guard.check_table(rid, table, positions[-1] + 1, first_query=positions[0])
            slots = self._slot_mapping(rid, positions, table)
            launch_table = self._launch_table(rid, table)[:span]
            guard.check_translation(rid, positions, slots, table, launch_table)
            batch.append((rid, shadow, positions, slots, launch_table))
        if not batch:
            return
        device = guard.sync_device()

        def tensor(values: Any, dtype: Any) -> Any:
            return torch.tensor(np.asarray(values), dtype=dtype, device=self.device)

        def vectors(shadow: Any, role: str, positions: Any, heads: int) -> np.ndarray:
            return np.stack([_vector(shadow.stamp(p), role, (heads, HEAD_DIM)) for p in positions])

        flat = [(rid, p, slot) for rid, _, positions, slots, _ in batch
                for p, slot in zip(positions, slots)]
        keys = np.concatenate([vectors(s, "k", ps, KV_HEADS) for _, s, ps, _, _ in batch])
        values = np.concatenate([vectors(s, "v", ps, KV_HEADS) for _, s, ps, _, _ in batch])
        kernels.write_kv_guarded(
            tensor(keys, torch.float32), tensor(values, torch.float32), self.key_cache,
            self.value_cache, tensor([slot for _, _, slot in flat], torch.int64),
            token_request=tensor([rid for rid, _, _ in flat], torch.int32),
            token_pos=tensor([p for _, p, _ in flat], torch.int32), shadow=device)
        queries = np.concatenate([vectors(s, "q", ps, HEADS) for _, s, ps, _, _ in batch])
        width = max(1, max(len(t) for *_, t in batch))
        tables = [list(t) + [0] * (width - len(t)) for *_, t in batch]
        starts = np.cumsum([0] + [len(ps) for _, _, ps, _, _ in batch])
        out = torch.zeros((len(flat), HEADS, HEAD_DIM), dtype=torch.float32, device=self.device)
        kernels.paged_attention_guarded(
            tensor(queries, torch.float32), self.key_cache, self.value_cache,
            tensor(tables, torch.int32), tensor([ps[-1] + 1 for _, _, ps, _, _ in batch],
                                                torch.int32),
            tensor(starts, torch.int32), out, sliding_window=self.config.sliding_window,
            request_ids=tensor([rid for rid, *_ in batch], torch.int32), shadow=device,
            max_query_len=max(len(ps) for _, _, ps, _, _ in batch))
        guard.collect_device()
        result = out.cpu().numpy()
        for (rid, shadow, positions, _, _), start in zip(batch, starts):
            context = range(positions[-1] + 1)
            failure = check_attention(queries[start:start + len(positions)],
                                      vectors(shadow, "k", context, KV_HEADS),
                                      vectors(shadow, "v", context, KV_HEADS),
                                      result[start:start + len(positions)],
                                      sliding_window=self.config.sliding_window)
            if failure is not None:
                raise Violation("attention-output",
                                f"request {rid}: paged attention for positions {positions[0]}.."
                                f"{positions[-1]} differs from the float64 reference: "
                                f"{failure.message}")

    def _refill_span(self, shadow: Any, context: int) -> Optional[int]:
        """During a refill, the table entries the launch's context spans (the hole's queries do
        not read the suffix, and KVGuard sizes a launch's table by them); else None (all)."""
        if shadow.refill is not None and not shadow.refill.written:
            return -(-context // self.b)
        return None

    def _slot_mapping(self, rid: int, positions: list[int], table: list[int]) -> list[int]:
        """The manager's slot mapping when it computes one (vLLM does, on the host)."""
        compute: Optional[Callable[..., Any]] = getattr(self.manager, "slot_mapping", None)
        if compute is not None:
            return [int(s) for s in compute(rid, positions)]
        return [table[p // self.b] * self.b + p % self.b for p in positions]

    def _launch_table(self, rid: int, table: list[int]) -> list[int]:
        """The table the kernel gets: the manager's device-side copy when it keeps one."""
        launch: Optional[Callable[..., Any]] = getattr(self.manager, "launch_table", None)
        return [int(x) for x in launch(rid)] if launch is not None else list(table)
