"""Exactness oracle for Penelope's front-of-history eviction, on the real paged-KV kernels.

Penelope (docs/COMPONENTS.md §2) keeps a session's shared prefix, frees the blocks right after it
(the *front* of the remaining history), keeps the later suffix, and when the session returns
recomputes only the hole, at the hole's original positions.  Under causal attention the K/V
of a position depend only on the tokens and positions at or before it, so the recomputed hole
equals what the full prefill wrote, and the kept suffix -- computed from those same values --
stays valid.  This module checks that claim on a tiny model whose every K/V write goes through
:func:`fuzzkit.targets.paged_kv.kernels.write_kv` and every attention read through
:func:`fuzzkit.targets.paged_kv.kernels.paged_attention` with a block table.

The model's own projections run on the CPU in torch; the caches and the kernels on
:func:`fuzzkit.triton_support.device` (the CPU under ``TRITON_INTERPRET=1``).

Precision: float64 end to end, compared bitwise.  Weights, activations, queries and the K/V
caches are float64, and the kernels run with float64 storage, which makes them accumulate in
float64 throughout (scores, the scale constant, ``exp2``, the online-softmax state and both
dots; see :mod:`fuzzkit.targets.paged_kv.kernels`).  Equality is still demanded to the bit, not within
a tolerance, because the computation of a position is the *same* computation in the full
prefill and in the refill -- float64 only makes each computation closer to the exact one:

- host side, :func:`_matmul` accumulates over the input dimension with elementwise multiply and
  add, and the model uses only correctly rounded elementwise operations (``+ * / sqrt max``);
  RoPE tables come from Python's ``math`` per position.  A row's bits therefore do not depend
  on how many other rows share the batch (BLAS blocking or vectorized ``exp`` tails could);
- in the attention kernel the causal key loop of every query tile starts at key 0 and steps by
  ``BLOCK_N``, so a query sees the same key steps in the same order whether it sits in the full
  prefill or in the refill chunk; trailing steps that are fully masked for a row rescale by
  ``exp2(0) = 1`` and add zeros, which is exact.  One assumption remains: that ``tl.dot``
  gives a row the same bits whatever the other rows of its tile (16 rows for decode and for
  chunks of up to 16 tokens, 32 or 64 for longer prefills).  The interpreter runs it as
  ``np.matmul``, OpenBLAS's float64 ``dgemm`` here: the clean tests, and a sweep of 133 random
  histories / prefixes / block sizes 1-8 / front and tail evictions / CPU-tier sizes, are
  bitwise.  On a GPU a float64 ``tl.dot`` becomes float64 MMA instructions (``m8n8k4`` on
  sm_80, ``m16n8k16`` on sm_90) or FMAs, whose order over the reduction axis is fixed by the
  instruction sequence and does not involve other rows -- the same property -- but this
  oracle has not yet run on a GPU; if a device's dot broke it, ``kv-mismatch`` would say so
  with the max |diff|.

Hooks (small methods of :class:`PagedPool`, patched by the mutants in :data:`MUTANTS`):

- :meth:`PagedPool.hole_positions` -- the positions fed to the model (RoPE) when recomputing
  a hole segment; the slots always follow the original layout.
- :meth:`PagedPool.front_eviction_blocks` -- which logical blocks ``evict_front`` frees.
- :meth:`PagedPool.kept_prefix_blocks` -- how many leading blocks eviction must keep (the
  shared prefix, rounded up to its last block).

The oracle :func:`check_penelope` returns ``None`` or a one-line message starting with the
name of the failed check: ``shared-prefix``, ``resident-set``, ``recompute-count``,
``kv-mismatch``, ``greedy-decode`` or ``recompute-cost``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
from typing import Callable, Iterator, Optional, Sequence
from unittest import mock

from fuzzkit import triton_support

triton_support.prepare()  # before Triton is imported: it decides then whether to interpret

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fuzzkit.targets.paged_kv import kernels  # noqa: E402
from fuzzkit.targets.scheduling.cost import CostModel  # noqa: E402

DTYPE = torch.float64
RMS_EPS = 1e-6

# ============================================================================ the tiny model


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    """Shapes of :class:`TinyModel`: tiny, so that interpreted kernels stay fast."""

    vocab: int = 32
    d_model: int = 16
    layers: int = 2
    heads: int = 2
    head_dim: int = 8
    d_ff: int = 32
    rope_base: float = 10000.0
    seed: int = 0


def _matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w`` accumulated over the input dimension one elementwise step at a time.

    Not ``x @ w``: BLAS may choose another kernel (blocking, FMA or not) for another number of
    rows, so row t of a 4-row refill could differ in the last bit from the same row of a 20-row
    prefill.  Elementwise multiply and add are correctly rounded, so here a row's bits depend
    on that row only."""
    acc = x[:, 0:1] * w[0]
    for i in range(1, w.shape[0]):
        acc = acc + x[:, i:i + 1] * w[i]
    return acc


def _rms_norm(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm without weights; the sum of squares in a fixed order (see :func:`_matmul`)."""
    square = x[:, 0:1] * x[:, 0:1]
    for i in range(1, x.shape[1]):
        square = square + x[:, i:i + 1] * x[:, i:i + 1]
    return x / torch.sqrt(square / x.shape[1] + RMS_EPS)


class TinyModel:
    """A seeded two-layer decoder with RoPE: wrong positions change K (and so everything later).

    float64 weights; the attention itself is not here -- :class:`PagedPool` runs it through the
    paged-attention kernel.  ``qkv`` and ``finish_layer`` are the two halves of a layer around
    that kernel."""

    def __init__(self, config: TinyConfig = TinyConfig()) -> None:
        self.config = c = config
        rng = np.random.default_rng(c.seed)
        inner = c.heads * c.head_dim

        def weight(rows: int, cols: int) -> torch.Tensor:
            w = rng.standard_normal((rows, cols)) / math.sqrt(rows)
            return torch.from_numpy(w).to(DTYPE)

        self.embedding = torch.from_numpy(rng.standard_normal((c.vocab, c.d_model))).to(DTYPE)
        self.wq = [weight(c.d_model, inner) for _ in range(c.layers)]
        self.wk = [weight(c.d_model, inner) for _ in range(c.layers)]
        self.wv = [weight(c.d_model, inner) for _ in range(c.layers)]
        self.wo = [weight(inner, c.d_model) for _ in range(c.layers)]
        self.w1 = [weight(c.d_model, c.d_ff) for _ in range(c.layers)]
        self.w2 = [weight(c.d_ff, c.d_model) for _ in range(c.layers)]
        self.lm_head = weight(c.d_model, c.vocab)
        half = c.head_dim // 2
        self._freqs = [c.rope_base ** (-2.0 * i / c.head_dim) for i in range(half)]

    def embed(self, tokens: Sequence[int]) -> torch.Tensor:
        return self.embedding[torch.tensor(list(tokens), dtype=torch.long)].clone()

    def _rope(self, x: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
        """Rotate-half RoPE; cos/sin per position from Python floats, so identical per position."""
        angles = [[p * f for f in self._freqs] for p in positions]
        cos = torch.tensor([[math.cos(a) for a in row] for row in angles], dtype=DTYPE)[:, None]
        sin = torch.tensor([[math.sin(a) for a in row] for row in angles], dtype=DTYPE)[:, None]
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).contiguous()

    def qkv(self, layer: int, hidden: torch.Tensor,
            positions: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys, values ``[T, heads, head_dim]`` of one layer, RoPE at ``positions``."""
        c = self.config
        x = _rms_norm(hidden)
        shape = (x.shape[0], c.heads, c.head_dim)
        q = self._rope(_matmul(x, self.wq[layer]).reshape(shape), positions)
        k = self._rope(_matmul(x, self.wk[layer]).reshape(shape), positions)
        v = _matmul(x, self.wv[layer]).reshape(shape).contiguous()
        return q, k, v

    def finish_layer(self, layer: int, hidden: torch.Tensor,
                     attention: torch.Tensor) -> torch.Tensor:
        """Output projection, residual, ReLU MLP, residual (only exactly rounded operations)."""
        hidden = hidden + _matmul(attention.reshape(attention.shape[0], -1), self.wo[layer])
        mlp = torch.clamp_min(_matmul(_rms_norm(hidden), self.w1[layer]), 0.0)
        return hidden + _matmul(mlp, self.w2[layer])

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return _matmul(_rms_norm(hidden), self.lm_head)


# ============================================================================ the paged pool


class PoolFull(RuntimeError):
    """No free block: the pool never exceeds its capacity."""


@dataclasses.dataclass
class Session:
    """One session's history and block table (``None`` marks an evicted logical block)."""

    name: str
    prefix_len: int
    tokens: list[int] = dataclasses.field(default_factory=list)
    table: list[Optional[int]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class RefillReport:
    """What :meth:`PagedPool.refill` did, in tokens."""

    hole_tokens: int
    recomputed: int
    reloaded: int


class PagedPool:
    """A per-layer paged KV pool ``[num_blocks, block_size, heads, head_dim]`` with sessions.

    Block 0 is the kernels' null block (never allocated).  Blocks are reference counted (a
    shared prefix is referenced by several sessions) and handed out FIFO, so a refill gets
    blocks other than the ones just evicted; a freed block is poisoned with NaN, so reading
    stale KV cannot pass for correct KV.  ``cpu_tier_blocks > 0`` keeps that many evicted
    blocks in :attr:`cpu_tier` (``(session, logical block) -> [(K, V) per layer]``), the
    latest ones first (they are the costliest to recompute); refill reloads them."""

    def __init__(self, model: TinyModel, num_blocks: int, block_size: int, *,
                 cpu_tier_blocks: int = 0) -> None:
        c = model.config
        self.model = model
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.device = triton_support.device()  # the caches live where the kernels run
        shape = (num_blocks, block_size, c.heads, c.head_dim)
        self.key_caches = [torch.zeros(shape, dtype=DTYPE, device=self.device)
                           for _ in range(c.layers)]
        self.value_caches = [torch.zeros(shape, dtype=DTYPE, device=self.device)
                             for _ in range(c.layers)]
        self.free: collections.deque[int] = collections.deque(range(1, num_blocks))
        self.refcount = [0] * num_blocks
        self.sessions: dict[str, Session] = {}
        self.cpu_tier_blocks = cpu_tier_blocks
        self.cpu_tier: dict[tuple[str, int], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.tokens_computed = 0  # every token run through the model, any reason
        self.tokens_reloaded = 0  # every token copied back from the CPU tier

    # ------------------------------------------------------------------ sessions and blocks

    def new_session(self, name: str, prefix_len: int = 0) -> Session:
        if name in self.sessions:
            raise ValueError(f"session {name!r} exists")
        session = self.sessions[name] = Session(name, prefix_len)
        return session

    def share_prefix(self, source: Session, name: str) -> Session:
        """A session that references ``source``'s prefix blocks (read-only; refcount + 1)."""
        blocks = self._blocks_for(source.prefix_len)
        table = source.table[:blocks]
        if any(b is None for b in table):
            raise ValueError(f"the prefix of {source.name!r} is not resident")
        session = self.new_session(name, source.prefix_len)
        session.tokens = source.tokens[:source.prefix_len]
        session.table = list(table)
        for block in table:
            self.refcount[block] += 1
        return session

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def _allocate(self) -> int:
        if not self.free:
            raise PoolFull(f"all {self.num_blocks - 1} blocks are in use")
        block = self.free.popleft()
        self.refcount[block] = 1
        return block

    def _release(self, block: int) -> None:
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            for cache in self.key_caches + self.value_caches:
                cache[block].fill_(float("nan"))
            self.free.append(block)

    def _tokens_in_block(self, session: Session, logical: int) -> int:
        return max(0, min(self.block_size, len(session.tokens) - logical * self.block_size))

    def resident_positions(self, session: Session) -> list[int]:
        """History positions whose logical block holds a physical block."""
        return [p for p in range(len(session.tokens))
                if session.table[p // self.block_size] is not None]

    def read_kv(self, session: Session, layer: int,
                length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V ``[length, heads, head_dim]`` of positions ``0..length-1`` through the table
        (NaN rows for evicted positions)."""
        b = self.block_size
        keys, values = [], []
        for p in range(length):
            block = session.table[p // b]
            if block is None:
                keys.append(torch.full_like(self.key_caches[layer][0, 0].cpu(), float("nan")))
                values.append(torch.full_like(self.value_caches[layer][0, 0].cpu(),
                                              float("nan")))
            else:
                keys.append(self.key_caches[layer][block, p % b].cpu())
                values.append(self.value_caches[layer][block, p % b].cpu())
        return torch.stack(keys), torch.stack(values)

    # ------------------------------------------------------------------ forward passes

    def prefill(self, session: Session, tokens: Sequence[int], start_pos: int) -> torch.Tensor:
        """KV of ``tokens`` at positions ``start_pos..`` (attending to the resident positions
        before them through the block table); returns the logits of the last token."""
        positions = list(range(start_pos, start_pos + len(tokens)))
        return self._forward(session, tokens, start_pos, positions)

    def _forward(self, session: Session, tokens: Sequence[int], start: int,
                 positions: Sequence[int]) -> torch.Tensor:
        """One chunked-prefill pass: slots from the layout (``start..``), RoPE at ``positions``."""
        tokens = list(tokens)
        n, end, b = len(tokens), start + len(tokens), self.block_size
        if n == 0 or start > len(session.tokens):
            raise ValueError(f"prefill of {n} tokens at {start}: session has "
                             f"{len(session.tokens)} (no gaps, no empty chunks)")
        missing = [p for p in range(start) if session.table[p // b] is None]
        if missing:
            raise ValueError(f"positions {missing[0]}..{missing[-1]} before {start} are not "
                             "resident: the chunk would attend to a hole")
        session.tokens[start:end] = tokens
        session.table.extend([None] * (self._blocks_for(end) - len(session.table)))
        for logical in range(start // b, self._blocks_for(end)):
            if session.table[logical] is None:
                session.table[logical] = self._allocate()
        dev = self.device
        slots = torch.tensor([session.table[p // b] * b + p % b for p in range(start, end)],
                             dtype=torch.int64, device=dev)
        table = torch.tensor([[0 if x is None else x for x in session.table]],
                             dtype=torch.int32, device=dev)
        seq_lens = torch.tensor([end], dtype=torch.int32, device=dev)
        query_start_loc = torch.tensor([0, n], dtype=torch.int32, device=dev)
        hidden = self.model.embed(tokens)
        for layer in range(self.model.config.layers):
            q, k, v = (x.to(dev) for x in self.model.qkv(layer, hidden, positions))
            key_cache, value_cache = self.key_caches[layer], self.value_caches[layer]
            kernels.write_kv(k, v, key_cache, value_cache, slots)
            out = torch.zeros_like(q)
            kernels.paged_attention(q, key_cache, value_cache, table, seq_lens, query_start_loc,
                                    out, max_query_len=n)
            hidden = self.model.finish_layer(layer, hidden, out.cpu())
        self.tokens_computed += n
        return self.model.logits(hidden[-1:])

    def generate(self, session: Session, turn: Sequence[int],
                 count: int) -> tuple[list[int], torch.Tensor]:
        """The session returns with ``turn``; greedy-decode ``count`` tokens after it.  Returns
        the tokens and the logits ``[count, vocab]`` each was chosen from."""
        logits = self.prefill(session, turn, len(session.tokens))
        generated: list[int] = []
        steps = []
        for i in range(count):
            steps.append(logits[-1])
            generated.append(int(torch.argmax(logits[-1])))
            if i + 1 < count:
                logits = self.prefill(session, generated[-1:], len(session.tokens))
        vocab = self.model.config.vocab
        return generated, torch.stack(steps) if steps else torch.zeros((0, vocab), dtype=DTYPE)

    # ------------------------------------------------------------------ hooks (mutants patch)

    def hole_positions(self, session: Session, start: int, stop: int) -> list[int]:
        """Positions fed to the model when recomputing hole tokens ``start..stop-1``: their
        original positions (the whole point: same tokens at same positions -> same K/V)."""
        return list(range(start, stop))

    def front_eviction_blocks(self, session: Session, first: int, n_blocks: int) -> list[int]:
        """Logical blocks a front eviction frees: the ``n_blocks`` right after the kept prefix
        (``first``), so that the resident set stays prefix ∪ one contiguous suffix."""
        return list(range(first, first + n_blocks))

    def kept_prefix_blocks(self, session: Session, prefix_len: int) -> int:
        """Leading logical blocks no eviction may free: the shared prefix, rounded up to the
        block holding its last token (other sessions reference it)."""
        return self._blocks_for(prefix_len)

    # ------------------------------------------------------------------ eviction and refill

    def evict_front(self, session: Session, prefix_len: int, n_blocks: int) -> list[int]:
        """Penelope: free ``n_blocks`` whole blocks right after the shared prefix; the resident
        set becomes prefix ∪ suffix.  Returns the logical blocks freed."""
        keep = self.kept_prefix_blocks(session, prefix_len)
        self._require_evictable(session, keep, n_blocks)
        logical = self.front_eviction_blocks(session, keep, n_blocks)
        self._evict(session, logical)
        return logical

    def evict_tail(self, session: Session, n_blocks: int) -> list[int]:
        """Tail-LRU baseline (vLLM/SGLang): free the last ``n_blocks`` blocks of the history."""
        keep = self.kept_prefix_blocks(session, session.prefix_len)
        self._require_evictable(session, keep, n_blocks)
        last = self._blocks_for(len(session.tokens))
        logical = list(range(last - n_blocks, last))
        self._evict(session, logical)
        return logical

    def _require_evictable(self, session: Session, keep: int, n_blocks: int) -> None:
        last = self._blocks_for(len(session.tokens))
        available = sum(session.table[i] is not None for i in range(keep, last))
        if not 0 <= n_blocks <= available:
            raise ValueError(f"cannot evict {n_blocks} blocks of {session.name!r}: "
                             f"{available} resident after the kept prefix")

    def _evict(self, session: Session, logical: Sequence[int]) -> None:
        """Drop ``logical`` from the table (offloading the latest ones to the CPU tier while it
        has room) and release their physical blocks."""
        last = self._blocks_for(len(session.tokens))
        if any(not 0 <= i < last or session.table[i] is None for i in logical):
            raise ValueError(f"evicting blocks {list(logical)} of {session.name!r}: "
                             f"not all resident blocks of its {last}")
        for i in sorted(logical, reverse=True):
            block = session.table[i]
            if len(self.cpu_tier) < self.cpu_tier_blocks:
                self.cpu_tier[(session.name, i)] = [
                    (k[block].cpu().clone(), v[block].cpu().clone())
                    for k, v in zip(self.key_caches, self.value_caches)]
            session.table[i] = None
            self._release(block)

    def refill(self, session: Session) -> RefillReport:
        """Bring the hole back: reload what the CPU tier holds, then recompute the remaining
        runs in position order (each attends to everything before it, which is resident by
        then) at :meth:`hole_positions`, into fresh blocks."""
        holes = [i for i in range(self._blocks_for(len(session.tokens)))
                 if session.table[i] is None]
        hole_tokens = sum(self._tokens_in_block(session, i) for i in holes)
        computed, reloaded = self.tokens_computed, self.tokens_reloaded
        recompute = []
        for i in holes:
            saved = self.cpu_tier.pop((session.name, i), None)
            if saved is None:
                recompute.append(i)
                continue
            block = session.table[i] = self._allocate()
            for (k, v), key_cache, value_cache in zip(saved, self.key_caches, self.value_caches):
                key_cache[block].copy_(k)
                value_cache[block].copy_(v)
            self.tokens_reloaded += self._tokens_in_block(session, i)
        for first, last in _runs(recompute):
            start = first * self.block_size
            stop = start + sum(self._tokens_in_block(session, i) for i in range(first, last + 1))
            self._forward(session, session.tokens[start:stop], start,
                          self.hole_positions(session, start, stop))
        return RefillReport(hole_tokens, self.tokens_computed - computed,
                            self.tokens_reloaded - reloaded)


def _runs(indices: Sequence[int]) -> list[tuple[int, int]]:
    """Maximal runs ``(first, last)`` of consecutive integers in sorted ``indices``."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _intervals(positions: Sequence[int]) -> list[tuple[int, int]]:
    """Half-open intervals ``[a, b)`` covering sorted ``positions``."""
    return [(a, b + 1) for a, b in _runs(positions)]


# ============================================================================ the oracle


def check_shared_prefix(pool: PagedPool, session: Session,
                        others: Sequence[Session]) -> Optional[str]:
    """After an eviction: the session still holds its whole shared prefix, and every block any
    other session references is still allocated."""
    b = session.prefix_len
    lost = [p for p in range(b) if session.table[p // pool.block_size] is None]
    if lost and others:
        names = ", ".join(repr(o.name) for o in others)
        return (f"shared-prefix: shared prefix evicted while referenced by session {names}: "
                f"positions {lost[0]}..{lost[-1]} of {session.name!r} not resident")
    if lost:
        return (f"shared-prefix: prefix positions {lost[0]}..{lost[-1]} of {session.name!r} "
                "evicted")
    for other in others:
        freed = [x for x in other.table if x is not None and pool.refcount[x] <= 0]
        if freed:
            return (f"shared-prefix: blocks {freed} referenced by {other.name!r} were freed")
    return None


def check_resident_set(pool: PagedPool, session: Session, mode: str) -> Optional[str]:
    """Front: resident = [0, A) ∪ [S, L) with A the prefix rounded up to its block (one
    contiguous suffix, possibly empty).  Tail: resident = [0, X) with X ≥ A."""
    length, b = len(session.tokens), pool.block_size
    kept = min(length, -(-session.prefix_len // b) * b)
    resident = pool.resident_positions(session)
    shown = " ∪ ".join(f"[{x}, {y})" for x, y in _intervals(resident)) or "∅"
    held = set(resident)
    if any(p not in held for p in range(kept)):
        return f"resident-set: prefix block positions [0, {kept}) not all resident ({shown})"
    after = _intervals([p for p in resident if p >= kept])
    if mode == "front" and (len(after) > 1 or (after and after[0][1] != length)):
        return (f"resident-set: after a front eviction {session.name!r} holds {shown}, not "
                f"prefix [0, {kept}) ∪ one contiguous suffix ending at {length}")
    if mode == "tail" and (len(after) > 1 or (after and after[0][0] != kept)):
        return (f"resident-set: after a tail eviction {session.name!r} holds {shown}, not one "
                f"run from 0")
    return None


def check_refill_counts(pool: PagedPool, session: Session, hole: Sequence[int],
                        recomputed: int, reloaded: int) -> Optional[str]:
    """Everything is resident again, and recomputed tokens == hole tokens − reloaded tokens."""
    missing = len(session.tokens) - len(pool.resident_positions(session))
    if missing:
        return f"recompute-count: {missing} positions still evicted after refill"
    if recomputed != len(hole) - reloaded or reloaded > pool.cpu_tier_blocks * pool.block_size:
        return (f"recompute-count: hole of {len(hole)} tokens, {reloaded} reloaded from the "
                f"CPU tier, but {recomputed} recomputed")
    return None


def compare_kv(model: TinyModel, reference: PagedPool, ref_session: Session, pool: PagedPool,
               session: Session, length: int) -> Optional[str]:
    """Bitwise equality of K and V of every layer at positions ``0..length-1``."""
    for layer in range(model.config.layers):
        expected = reference.read_kv(ref_session, layer, length)
        actual = pool.read_kv(session, layer, length)
        for name, want, got in zip(("key", "value"), expected, actual):
            same = (want == got).flatten(1).all(dim=1)
            if not bool(same.all()):
                p = int((~same).nonzero()[0])
                diff = float((want[p] - got[p]).abs().max())
                return (f"kv-mismatch: layer {layer} {name} at position {p} differs from the "
                        f"full prefill (max |diff| {diff:.3g})")
    return None


def compare_decode(expected: tuple[list[int], torch.Tensor],
                   actual: tuple[list[int], torch.Tensor]) -> Optional[str]:
    """Greedy tokens equal, and (stronger: a tiny random model's argmax has wide margins, so
    tokens alone miss most KV errors) the logits behind them bitwise equal."""
    (want_tokens, want_logits), (got_tokens, got_logits) = expected, actual
    if got_tokens != want_tokens:
        return f"greedy-decode: after refill {got_tokens}, full prefill {want_tokens}"
    same = (want_logits == got_logits).all(dim=1)
    if not bool(same.all()):
        step = int((~same).nonzero()[0])
        return (f"greedy-decode: tokens {got_tokens} agree but the logits of step {step} "
                "differ from the full prefill's")
    return None


def tail_hole(length: int, tokens: int) -> tuple[int, int]:
    """The hole a tail eviction of the same number of tokens leaves: ``(start, tokens)``."""
    return (length - tokens, tokens)


def compare_recompute_cost(cost: CostModel, front: tuple[int, int],
                           tail: tuple[int, int]) -> Optional[str]:
    """Modelled recompute cost (``CostModel.chunk(u, done)``) of the front hole ≤ the tail
    hole's; holes are ``(start, tokens)``, ``start`` being the context before the hole."""
    front_cost = cost.chunk(front[1], front[0])
    tail_cost = cost.chunk(tail[1], tail[0])
    if front_cost > tail_cost:
        return (f"recompute-cost: front hole [{front[0]}, {front[0] + front[1]}) costs "
                f"{front_cost} > tail hole [{tail[0]}, {tail[0] + tail[1]}) {tail_cost}")
    return None


def check_penelope(model: TinyModel, tokens: Sequence[int], prefix_len: int, evict_blocks: int,
                   *, mode: str = "front", cpu_tier_blocks: int = 0, block_size: int = 4,
                   turn: Sequence[int] = (1,), decode_tokens: int = 3,
                   cost: CostModel = CostModel()) -> Optional[str]:
    """Evict ``evict_blocks`` blocks of a session with history ``tokens`` (``mode`` "front":
    Penelope, "tail": tail-LRU), refill, and compare with a pool that never evicted.

    A second session shares the prefix (when ``prefix_len > 0``).  Checks, in order:
    shared-prefix, resident-set (after eviction); recompute-count, kv-mismatch (every layer,
    every history position, bitwise), greedy-decode (the session returns with ``turn`` and
    decodes ``decode_tokens`` greedily: same tokens, bitwise same logits); recompute-cost
    (front mode: the front hole's modelled cost ≤ a tail hole of as many tokens -- per token,
    not per block: a partial last block holds fewer tokens, so a tail eviction of as many
    *blocks* can legitimately cost less).  Returns None or the first failure's message."""
    tokens = list(tokens)
    length = len(tokens)
    if mode not in ("front", "tail"):
        raise ValueError(f"mode must be 'front' or 'tail', got {mode!r}")
    if not 0 <= prefix_len <= length or length == 0:
        raise ValueError(f"need 0 <= prefix_len ({prefix_len}) <= len(tokens) ({length}) > 0")
    total = length + len(turn) + decode_tokens
    num_blocks = 2 + -(-total // block_size) + evict_blocks  # null + spare: refills get fresh

    reference = PagedPool(model, num_blocks, block_size)
    ref_session = reference.new_session("main", prefix_len)
    reference.prefill(ref_session, tokens, 0)

    pool = PagedPool(model, num_blocks, block_size, cpu_tier_blocks=cpu_tier_blocks)
    session = pool.new_session("main", prefix_len)
    pool.prefill(session, tokens, 0)
    others = [pool.share_prefix(session, "sibling")] if prefix_len else []
    if mode == "front":
        pool.evict_front(session, prefix_len, evict_blocks)
    else:
        pool.evict_tail(session, evict_blocks)
    failure = (check_shared_prefix(pool, session, others)
               or check_resident_set(pool, session, mode))
    if failure:
        return failure
    resident = set(pool.resident_positions(session))
    hole = [p for p in range(length) if p not in resident]
    report = pool.refill(session)
    failure = (check_refill_counts(pool, session, hole, report.recomputed, report.reloaded)
               or compare_kv(model, reference, ref_session, pool, session, length))
    if failure:
        return failure
    failure = compare_decode(reference.generate(ref_session, turn, decode_tokens),
                             pool.generate(session, turn, decode_tokens))
    if failure:
        return failure
    if mode == "front" and hole:
        return compare_recompute_cost(cost, (hole[0], len(hole)), tail_hole(length, len(hole)))
    return None


# ============================================================================ mutants


def _positions_from_zero(self: PagedPool, session: Session, start: int, stop: int) -> list[int]:
    """Bug: the recomputed segment is encoded as if it were a fresh request."""
    return list(range(stop - start))


def _positions_from_hole_length(self: PagedPool, session: Session, start: int,
                                stop: int) -> list[int]:
    """Bug: positions restart at the hole's length (an offset taken from the wrong counter)."""
    return list(range(stop - start, 2 * (stop - start)))


def _evict_from_tail(self: PagedPool, session: Session, first: int, n_blocks: int) -> list[int]:
    """Bug: the policy frees the last blocks (tail-LRU) instead of the front of the history."""
    last = -(-len(session.tokens) // self.block_size)
    return list(range(last - n_blocks, last))


def _evict_inside_suffix(self: PagedPool, session: Session, first: int,
                         n_blocks: int) -> list[int]:
    """Bug: off by one block -- the hole is punched inside the kept suffix."""
    return list(range(first + 1, first + 1 + n_blocks))


def _prefix_evictable(self: PagedPool, session: Session, prefix_len: int) -> int:
    """Bug: nothing is protected, so the shared prefix is evicted while others reference it."""
    return 0


#: name -> (PagedPool hook, replacement, the check that must catch it)
MUTANTS: dict[str, tuple[str, Callable[..., object], str]] = {
    "hole-positions-from-zero": ("hole_positions", _positions_from_zero, "kv-mismatch"),
    "hole-positions-from-hole-length": ("hole_positions", _positions_from_hole_length,
                                        "kv-mismatch"),
    "evict-tail-not-front": ("front_eviction_blocks", _evict_from_tail, "resident-set"),
    "hole-inside-suffix": ("front_eviction_blocks", _evict_inside_suffix, "resident-set"),
    "shared-prefix-evicted": ("kept_prefix_blocks", _prefix_evictable, "shared-prefix"),
}


@contextlib.contextmanager
def mutant(name: str) -> Iterator[None]:
    """Patch :class:`PagedPool` with mutant ``name`` for the duration of the block."""
    hook, replacement, _ = MUTANTS[name]
    with mock.patch.object(PagedPool, hook, replacement):
        yield


__all__ = [
    "MUTANTS", "PagedPool", "PoolFull", "RefillReport", "Session", "TinyConfig", "TinyModel",
    "check_penelope", "check_refill_counts", "check_resident_set", "check_shared_prefix",
    "compare_decode", "compare_kv", "compare_recompute_cost", "mutant", "tail_hole",
]
