"""The guarded driver: programs run through the real Triton KV kernels, under KVGuard.

:class:`~fuzzkit.targets.paged_kv.driver.Driver` models KV memory with stamps in Python.  This driver
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

Tiles.  Under the interpreter the driver launches smaller tiles than the kernels' defaults
(:func:`launch_tiles`): query tiles of at most 32 queries, key steps of 16, write programs of 8
tokens and half a K/V row, so that programs of a few dozen tokens already need a second program
of every kernel; on a GPU it launches the kernels' own tiles.  :func:`thresholds` declares the
tiles as launched in each mode.

Values.  ``kv_values`` (the case's ``"kv_values"``: ``{"q"|"k"|"v": [kind, ...]}``) picks the
kind of every vector from :mod:`fuzzkit.values` -- zero keys (exact ties), tiny and subnormal
queries, huge scores, repeated values -- one kind per position, chosen by its stamp, so the
same prefix still has the same K/V; without it every vector is standard normal.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from fuzzkit import values
from fuzzkit.reach import Threshold
from fuzzkit.oracles.kvguard import KVGuard
from fuzzkit.targets.paged_kv.driver import Driver, Violation
from fuzzkit.targets.paged_kv.protocol import Config

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 8  # two query heads per kv head (GQA)
G_PAD = 2  # query heads per kv head, padded to a power of two (the kernel's G_PAD)
#: Rows of the guard's device shadow: requests with larger ids are not launched (their KV is
#: still judged by the stamp model).
MAX_REQUESTS = 8
#: Launch tiles under the interpreter (see the module docstring); on a GPU the kernels' own.
INTERPRETED_BLOCK_M_MAX = 64  # rows per attention program: 8, 16 or 32 queries x G_PAD heads
INTERPRETED_BLOCK_N = 16  # keys per attention step
INTERPRETED_BLOCK_T = 8  # tokens per write program
INTERPRETED_BLOCK_E = 8  # K/V row elements per write program: two programs per row of 16

#: The float contracts of the driver's vectors.  Queries and keys up to 128: scores up to
#: ``|q.k| log2(e) / sqrt(D) <= 4 * 128**2 ~ 6.6e4`` (``D = 8``), so every key but a row's
#: largest underflows in ``exp2`` while the float32 score error keeps the derived bound
#: meaningful (kappa ~ 0.1 at the top; past score magnitudes of ~1e5 it exceeds the output
#: itself and checks nothing).  Values up to ``2**100``: running sums (``n * M_v``) stay finite
#: and the bound is relative.  No NaN or Inf: attention of non-finite K/V is not defined.
ROLE_DOMAINS = {
    "q": values.Domain("float32", max_abs=128.0),
    "k": values.Domain("float32", max_abs=128.0),
    "v": values.Domain("float32", max_abs=2.0**100),
}
#: Kinds the driver draws from (``drawn`` needs Hypothesis: a vector comes from its stamp).
KINDS = tuple(kind for kind, _ in values.KINDS if kind not in ("drawn", "special"))


def launch_tiles(max_query_len: int) -> dict[str, Optional[int]]:
    """Tile launch parameters for one forward pass (None: the kernel's default)."""
    from fuzzkit import triton_support

    if not triton_support.interpreted():  # pragma: no cover - only on a GPU
        return {"block_m": None, "block_n": None, "block_t": None, "block_e": None}
    rows = min(max(16, G_PAD * (1 << max(0, max_query_len - 1).bit_length())),
               INTERPRETED_BLOCK_M_MAX)
    return {"block_m": rows, "block_n": INTERPRETED_BLOCK_N, "block_t": INTERPRETED_BLOCK_T,
            "block_e": INTERPRETED_BLOCK_E}


def thresholds() -> tuple[Threshold, ...]:
    """The kernel driver's sizes where the launched code changes path, in the current mode."""
    from fuzzkit import triton_support

    triton_support.prepare()
    ids = Threshold("request_id", MAX_REQUESTS, "kernel_driver.MAX_REQUESTS: the guard's device "
                    "shadow has 8 request rows; ids >= 8 are not launched", cap=20)
    if not triton_support.interpreted():  # pragma: no cover - only on a GPU
        from fuzzkit.targets.paged_kv import kernels

        return (ids,
                Threshold("query_len", 1, "GPU attention tile: 1 query launches the decode tile "
                          "(16 rows), 2+ the prefill tile", cap=4),
                Threshold("query_len", kernels.BLOCK_M_PREFILL_GPU // G_PAD, "GPU prefill "
                          "tile: 32 queries; a 33rd needs a second program", cap=80),
                Threshold("key_span", kernels.BLOCK_N_GPU, "GPU attention key loop: 64 keys per "
                          "step; a 65th needs a second step", cap=160),
                Threshold("batch_tokens", kernels.write_tiles(1, KV_HEADS * HEAD_DIM)[0],
                          "GPU write kernel: 256 tokens per program (16-element K/V rows)",
                          cap=300))
    return (ids,
            Threshold("query_len", 16 // G_PAD, "attention query tile as launched: 8 queries "
                      "(16 rows); 9..16 and 17..32 launch wider tiles", cap=20),
            Threshold("query_len", INTERPRETED_BLOCK_M_MAX // G_PAD, "attention query tile as "
                      "launched: 32 queries (64 rows); a 33rd needs a second program", cap=70),
            Threshold("key_span", INTERPRETED_BLOCK_N, "attention key loop as launched: 16 keys "
                      "per step; a 17th key needs a second step (online-softmax rescale)",
                      cap=48),
            Threshold("batch_tokens", INTERPRETED_BLOCK_T, "write kernel as launched: 8 tokens "
                      "per program; a 9th needs a second program", cap=40))


def _vector(stamp: Any, role: str, shape: tuple[int, ...],
            kinds: Optional[Sequence[str]] = None) -> np.ndarray:
    """Deterministic pseudo-random vector for ``stamp``: the same prefix always has the same K/V.
    With ``kinds`` the vector is one of them (picked by the stamp) from :mod:`fuzzkit.values`."""
    digest = hashlib.sha256(repr((role, stamp)).encode()).digest()
    seed = int.from_bytes(digest[:8], "little")
    if not kinds:
        return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    kind = kinds[seed % len(kinds)]
    return values.round_to(values.fill(kind, shape, ROLE_DOMAINS[role], seed), "float32")


class KernelDriver(Driver):
    def __init__(self, manager: Any, config: Config, guard: KVGuard,
                 kv_values: Optional[Mapping[str, Sequence[str]]] = None) -> None:
        super().__init__(manager, config)
        self.kinds: dict[str, list[str]] = {}
        if kv_values:
            self.kinds = {role: list(kv_values.get(role) or []) for role in ROLE_DOMAINS}
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

    def check_state(self, state: dict[str, Any]) -> None:
        """KVGuard's allocation checks (class 1) first, so that the guard names what it sees;
        then the driver's own structural invariants (on the same inspected state, its types
        checked first)."""
        self.guard.check_manager(state)
        for rid, table in state["tables"].items():
            self.guard.check_table(rid, table, state["tokens_in_table"][rid])
        super().check_state(state)

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
        """One forward pass over ``rids`` (each with scheduled tokens): every request's K/V goes
        through the write kernel (a later request may hit any of them); the attention kernel
        runs for the requests the guard's device shadow has rows for (ids below
        ``MAX_REQUESTS``), whose outputs are checked against the float64 reference."""
        guard = self.guard
        batch = []
        for rid in rids:
            shadow = self.requests[rid]
            positions = list(shadow.pending)
            span = self._refill_span(shadow, positions[-1] + 1)
            table = list(self.manager.block_table(rid))[:span]
            guard.check_table(rid, table, positions[-1] + 1, first_query=positions[0])
            slots = self._slot_mapping(rid, positions, table)
            launch_table = self._launch_table(rid, table)[:span]
            guard.check_translation(rid, positions, slots, table, launch_table)
            batch.append((rid, shadow, positions, slots, launch_table))
        device = guard.sync_device()
        flat = [(rid, p, slot) for rid, _, positions, slots, _ in batch
                for p, slot in zip(positions, slots)]
        keys = np.concatenate([self._vectors(s, "k", ps, KV_HEADS) for _, s, ps, _, _ in batch])
        vals = np.concatenate([self._vectors(s, "v", ps, KV_HEADS) for _, s, ps, _, _ in batch])
        self.launch_write(keys, vals, flat, device, max(len(ps) for _, _, ps, _, _ in batch))
        readers = [entry for entry in batch if entry[0] < MAX_REQUESTS]
        if readers:
            self._attention(readers, device)  # collects the write and read records
        else:
            guard.collect_device()

    def launch_write(self, keys: np.ndarray, values: np.ndarray,
                     tokens: list[tuple[int, int, int]], device: Any, max_query_len: int) -> None:
        """The write (reshape-and-cache) launch of one forward pass: ``keys[i]``, ``values[i]``
        of token ``tokens[i] = (request, position, slot)``; here fuzzkit's guarded kernel.  An
        engine's kernels plug in by overriding this and :meth:`launch_attention`."""
        from fuzzkit.targets.paged_kv import kernels

        torch = self.torch
        tiles = launch_tiles(max_query_len)
        kernels.write_kv_guarded(
            self._tensor(keys, torch.float32), self._tensor(values, torch.float32),
            self.key_cache, self.value_cache,
            self._tensor([slot for _, _, slot in tokens], torch.int64),
            token_request=self._tensor([rid for rid, _, _ in tokens], torch.int32),
            token_pos=self._tensor([p for _, p, _ in tokens], torch.int32), shadow=device,
            block_t=tiles["block_t"], block_e=tiles["block_e"])

    def launch_attention(self, queries: np.ndarray, tables: list[list[int]],
                         seq_lens: list[int], query_start_loc: Sequence[int],
                         request_ids: list[int], device: Any, max_query_len: int) -> np.ndarray:
        """The paged-attention launch of one forward pass (a mixed batch: request ``i`` owns
        query rows ``query_start_loc[i] : query_start_loc[i + 1]``, the last ones of its
        ``seq_lens[i]`` tokens); returns the output ``[T, HEADS, HEAD_DIM]``.  Here fuzzkit's
        guarded kernel; the caller collects the device records afterwards."""
        from fuzzkit.targets.paged_kv import kernels

        torch = self.torch
        tiles = launch_tiles(max_query_len)
        out = torch.zeros((len(queries), HEADS, HEAD_DIM), dtype=torch.float32,
                          device=self.device)
        kernels.paged_attention_guarded(
            self._tensor(queries, torch.float32), self.key_cache, self.value_cache,
            self._tensor(tables, torch.int32), self._tensor(seq_lens, torch.int32),
            self._tensor(query_start_loc, torch.int32), out,
            sliding_window=self.config.sliding_window,
            request_ids=self._tensor(request_ids, torch.int32), shadow=device,
            max_query_len=max_query_len, block_m=tiles["block_m"], block_n=tiles["block_n"])
        return out.cpu().numpy()

    def _attention(self, batch: list[Any], device: Any) -> None:
        """Paged attention for ``batch`` (one launch, a mixed batch), then each request's
        output against the float64 reference under the derived bound."""
        from fuzzkit.targets.paged_kv.attention_reference import check as check_attention

        max_query_len = max(len(ps) for _, _, ps, _, _ in batch)
        queries = np.concatenate([self._vectors(s, "q", ps, HEADS) for _, s, ps, _, _ in batch])
        width = max(1, max(len(t) for *_, t in batch))
        tables = [list(t) + [0] * (width - len(t)) for *_, t in batch]
        starts = np.cumsum([0] + [len(ps) for _, _, ps, _, _ in batch])
        result = self.launch_attention(queries, tables, [ps[-1] + 1 for _, _, ps, _, _ in batch],
                                       [int(s) for s in starts], [rid for rid, *_ in batch],
                                       device, max_query_len)
        self.guard.collect_device()
        for (rid, shadow, positions, _, _), start in zip(batch, starts):
            context = range(positions[-1] + 1)
            failure = check_attention(queries[start:start + len(positions)],
                                      self._vectors(shadow, "k", context, KV_HEADS),
                                      self._vectors(shadow, "v", context, KV_HEADS),
                                      result[start:start + len(positions)],
                                      sliding_window=self.config.sliding_window)
            if failure is not None:
                raise Violation("attention-output",  # pragma: no cover - a broken kernel
                                f"request {rid}: paged attention for positions {positions[0]}.."
                                f"{positions[-1]} differs from the float64 reference: "
                                f"{failure.message}")

    def _tensor(self, data: Any, dtype: Any) -> Any:
        return self.torch.tensor(np.asarray(data), dtype=dtype, device=self.device)

    def _vectors(self, shadow: Any, role: str, positions: Any, heads: int) -> np.ndarray:
        """The ``role`` vectors of ``positions`` of a request (functions of their stamps)."""
        kinds = self.kinds.get(role)
        return np.stack([_vector(shadow.stamp(p), role, (heads, HEAD_DIM), kinds)
                         for p in positions])

    def _refill_span(self, shadow: Any, context: int) -> Optional[int]:
        """During a refill, the table entries the launch's context spans (the hole's queries do
        not read the suffix, and KVGuard sizes a launch's table by them); else None (all)."""
        if shadow.refill is not None and not shadow.refill.written:
            return -(-context // self.b)
        return None

    def _slot_mapping(self, rid: int, positions: list[int], table: list[int]) -> list[int]:
        """The manager's slot mapping when it computes one (vLLM does, on the host)."""
        compute: Optional[Callable[..., Any]] = getattr(self.manager, "slot_mapping", None)
        if compute is None:  # pragma: no cover - the optimized manager maps its own slots
            return [table[p // self.b] * self.b + p % self.b for p in positions]
        return [int(s) for s in compute(rid, positions)]

    def _launch_table(self, rid: int, table: list[int]) -> list[int]:
        """The table the kernel gets: the manager's device-side copy when it keeps one."""
        launch: Optional[Callable[..., Any]] = getattr(self.manager, "launch_table", None)
        return [int(x) for x in launch(rid)] if launch is not None else list(table)
