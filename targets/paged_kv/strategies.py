"""Programs for the paged KV target: every operation sequence, every size where the code turns.

Bugs in KV cache managers live at edges: a prompt of exactly ``k*b`` tokens (full-prompt hits),
``k*b ± 1`` (off-by-one block counts), a pool small enough that every allocation evicts, two
requests sharing a document prefix (hits), the same tokens under another adapter or salt
(incomplete keys), forks followed by divergent decoding on *both* sides (copy-on-write of the
shared last block, then a write in place by the last holder), windows (trimming), preemption
and re-admission, a prefix-cache reset while requests still hold blocks.  Eviction policies
live where a cached history is partly evicted: an agent turn that returns with its old tokens
plus more after other requests pushed the pool (penelope's holes and refills, session eviction
taking a whole history).  And the optimized manager and the kernels change path at sizes a
handful of small requests never reach: more live requests than the block tables have rows, a
table longer than its row, more request ids than the guard's device shadow has rows, more
queries than one query tile, more keys than one key step, more tokens than one write program.

How a program is drawn:

* **Sizes first** (:class:`_Plan`): the crowd of requests live at once, the length of the long
  request's table, the largest request id and the token lengths of big prefills are drawn with
  :func:`fuzzkit.reach.size` against the thresholds the implementation declares (boundary
  values ``t±1``, ``2t±1`` and above, in a stated share of programs); in about half the
  programs the pool is then sized so that the planned requests fit, the others keep a small
  pool (eviction pressure, refused allocations).
* **Swarm testing** (:func:`fuzzkit.program.swarm`): each program enables a random subset of
  the chunk kinds of :data:`CHUNKS`, each with a random weight, so that some programs are all
  forks, some all preemptions, some never reset.
* **Chunks** are short, meaningful operation sequences (a prefill, a decode step, a mixed
  batch, a crowd of requests in one forward pass...) and the follow-ups bugs hide in: a fork
  whose sides *all* continue (then the winning beam returns as a prompt), preemption and
  re-admission, a reset while requests hold blocks, a request added now and scheduled after
  others evicted its hits; plus random single steps of every kind, so that every ordered pair
  of operations occurs.  A generation-time model of which requests are registered
  (:class:`_Gen`) aims them at live requests, with a share of unknown ids and refused adds.
* **Values**: tokens come from a per-program alphabet (small ids mostly; sometimes ids equal
  modulo ``2**16`` or ``2**32``, or at the int32 / int64 edges), adapters and salts include
  values equal modulo 256 and ``2**32``; the guarded driver's query / key / value vectors get
  kinds from :mod:`fuzzkit.values` (``kv_values``: zero keys, ties, tiny, subnormal, huge).

* **Variants** (:class:`~fuzzkit.targets.paged_kv.protocol.Capabilities`): a case is drawn within the
  capabilities of the implementation fuzzed (``capabilities=``; all of the contract by
  default): its eviction policy, window mode ("trim", or "eager" in 2 of 5 windowed programs
  when both are declared) and hashing mode ("allocate" in 1 of 3 programs when both are) among
  the declared ones; operations and extra keys it lacks are never drawn (chunk kinds made of
  them are switched off; single operations of them are dropped), nor ``trim`` under an eager
  window or ``publish`` under allocate hashing.  Allocate hashing reaches its same-step hits
  through the chunks that schedule several requests sharing a prefix before one forward pass
  (a crowd, a batch of new requests).

A program is a flat list of operation records, so Hypothesis (and ddmin) shrink it by deleting
steps.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
from typing import Any, Callable, Optional, Sequence

from hypothesis import strategies as st

from fuzzkit import reach, values
from fuzzkit.targets.paged_kv.protocol import ALL_CAPABILITIES, Capabilities
from fuzzkit.targets.paged_kv.protocol import EXTRA_KEYS as KEY_NAMES

Ops = list[dict[str, Any]]
Draw = Callable[[Any], Any]

#: Token alphabets (index -> token id): a program's tokens are indices 0..7 (0..3 in documents
#: and prompts, 4..7 only as filler that never hits a history), mapped through one alphabet.
#: Small ids make prefixes repeat and weak hashes collide; the others put distinct tokens that
#: are equal modulo ``2**16`` / ``2**32`` (narrow token storage) side by side, or sit at the
#: int32 / uint32 / int64 edges.
ALPHABETS: tuple[tuple[tuple[int, ...], int], ...] = (
    ((0, 1, 2, 3, 4, 5, 6, 7), 16),
    ((0, 2**16, 1, 2**16 + 1, 4, 5, 6, 7), 2),
    ((0, 2**32, 1, 2**32 + 1, 4, 5, 6, 7), 2),
    ((2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 4, 5, 6, 7), 1),
)
#: Adapter and salt values: mostly none, small ids (0 and 1: untagged keys collide), and ids
#: equal to 0 modulo 256 and ``2**32`` (narrow LoRA-id / salt fields).
EXTRA_KEYS: tuple[tuple[Optional[int], int], ...] = (
    (None, 16), (0, 4), (1, 4), (256, 1), (2**32, 1), (2**31 - 1, 1))
#: :data:`EXTRA_KEYS`, each value repeated by its weight: a uniform index picks by weight.
EXTRA_VALUES: tuple[Optional[int], ...] = tuple(
    value for value, weight in EXTRA_KEYS for _ in range(weight))
#: The chunk kinds and their default swarm weights (see the module docstring).
CHUNKS: tuple[tuple[str, int], ...] = (
    ("serve", 14), ("served_and_done", 12), ("add", 8), ("step", 14), ("decode", 12),
    ("batch", 14), ("single", 10), ("allocate_only", 5), ("append", 5), ("fork", 6),
    ("fork_both", 10), ("crowd", 4), ("long", 5), ("wide", 8), ("preempt_resume", 8),
    ("reset_live", 4), ("admit_later", 8), ("steps", 24), ("sessions", 3), ("reset", 1),
)
#: The protocol's operations (``fuzzkit.targets.paged_kv.driver.OPS``), for single steps.
OPERATIONS = ("add", "allocate", "write", "forward", "publish", "append", "fork", "preempt",
              "trim", "finish", "reset")
#: Token sizes the kernels see (``fuzzkit.targets.paged_kv.sizes``): big prefills aim at them.
TOKEN_SIZES = ("query_len", "key_span", "batch_tokens")
#: Block sizes: small mostly (every few tokens cross a block edge); 8 and 16 (vLLM's default)
#: sometimes.
BLOCK_SIZES: tuple[tuple[int, int], ...] = ((1, 6), (2, 6), (3, 4), (4, 4), (8, 1), (16, 1))
#: Token slots (``num_blocks * block_size``) of a pool unless the plan needs more: a guarded
#: case pays for every token it prefills (the interpreter runs the attention kernel), and a
#: returning session fills the whole pool.
SLOTS = 96
#: Tokens of the long request at most (its table length times the block size).
LONG_TOKENS = 96
#: Operations the last chunk of a program may run past ``max_steps``.
OVERRUN = 40
#: Operations of a program (before its last chunk's overrun), and for an implementation that
#: launches the kernels (see :func:`inputs`).
STEPS, KERNEL_STEPS = 60, 40
#: The largest crowd and long-table length of the plain (base) distributions of :func:`_plan`.
PLAIN_CROWD, PLAIN_LONG_BLOCKS = 5, 7


# Strategies are built once and cached: a fresh ``_ints(...)`` per draw costs Hypothesis a
# validation pass each time, which was most of the time a program took to draw.
BOOLS = st.booleans()


@functools.lru_cache(maxsize=None)
def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


@functools.lru_cache(maxsize=4096)
def _pick(items: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(items)


#: Choices packed into one draw span at most this many values (the draw is ``PACK_BYTES``
#: random bytes; the extra two bytes keep the modulo bias of a digit below ``2**-16``).  A draw
#: costs the same whatever it holds, and a program of a few hundred single draws spent most of
#: its time in Hypothesis's per-draw bookkeeping.
PACK = 1 << 48


@functools.lru_cache(maxsize=None)
def _bytes(count: int) -> st.SearchStrategy[bytes]:
    return st.binary(min_size=count, max_size=count)


def _digits(draw: Draw, radices: Sequence[int]) -> list[int]:
    """One choice in ``0 .. r - 1`` per radix ``r``, uniform and independent, from as few
    draws as fit in :data:`PACK` (mixed radix, the first choice most significant).

    A draw is a string of random bytes, not an integer: Hypothesis draws an integer in a wide
    range far from uniformly (most draws of ``integers(0, 2**24 - 1)`` are below ``2**13``),
    which would pin the leading choices of a packed draw to 0; its bytes are uniform.  They
    replay and shrink like any draw (towards zero bytes: every choice 0)."""
    out: list[int] = []
    i = 0
    while i < len(radices):
        span, j = radices[i], i + 1
        while j < len(radices) and span * radices[j] <= PACK:
            span *= radices[j]
            j += 1
        value = 0
        if span > 1:
            value = int.from_bytes(draw(_bytes((span.bit_length() + 23) // 8)), "big") % span
        chunk = []
        for radix in reversed(radices[i:j]):
            value, digit = divmod(value, radix)
            chunk.append(digit)
        out += reversed(chunk)
        i = j
    return out


def _bits(draw: Draw, count: int) -> list[bool]:
    """``count`` fair coin flips (:func:`_digits`)."""
    return [bool(d) for d in _digits(draw, (2,) * count)]


_choose = values.choose  # a weighted choice that shrinks to the first item


def _weighted(table: Sequence[tuple[Any, int]]) -> tuple[Any, ...]:
    """``table``'s items, each repeated by its weight: index ``k`` is :func:`_choose`'s item for
    the draw ``k`` (so one packed digit of radix ``len`` makes the same weighted choice)."""
    return tuple(item for item, weight in table for _ in range(weight))


#: Weights of the eviction policies (in tenths when all three are declared).
EVICTION_WEIGHTS = (("lru", 5), ("session", 2), ("penelope", 3))


def _eviction(draw: Draw, declared: Sequence[str] = ("lru", "session", "penelope")) -> str:
    """Among the declared policies with :data:`EVICTION_WEIGHTS` (all three: half "lru" -- the
    default keeps its coverage --, 3 in 10 "penelope", 2 in 10 "session"); shrinks to the first
    declared in that order ("lru") when the policy does not matter."""
    table = _weighted([(name, weight) for name, weight in EVICTION_WEIGHTS if name in declared])
    return str(table[_index(draw, len(table))])


def _banned_ops(capabilities: Capabilities, window_mode: str, hashing: str) -> frozenset[str]:
    """Operations a program must not hold: those the capabilities lack, ``trim`` unless the
    window mode is "trim", ``publish`` under allocate hashing (a no-op there)."""
    banned = set()
    if window_mode != "trim" or "trim" not in capabilities.windows:
        banned.add("trim")
    if hashing != "publish":
        banned.add("publish")
    if not capabilities.fork:
        banned.add("fork")
    if not capabilities.reset:
        banned.add("reset")
    return frozenset(banned)


#: Chunk kinds that exist for one operation: off when the operation is banned.
CHUNKS_OF = {"fork": ("fork", "fork_both"), "reset": ("reset", "reset_live")}


def _within(ops: Ops, banned: frozenset[str], keys: Sequence[str]) -> Ops:
    """``ops`` without the banned operations and with undeclared extra keys left out."""
    out = []
    for op in ops:
        if op["op"] in banned:
            continue
        if op["op"] == "add":
            op = {**op, **{key: None for key in KEY_NAMES if key not in keys}}
        out.append(op)
    return out


#: A prompt's cut relative to a block edge (``_Gen.prompt``): one before, at it twice, one after.
EDGE_OFFSETS = (-1, 0, 0, 1)


def _edge_blocks(block_size: int) -> int:
    """Blocks a prompt's document prefix spans at most: up to 5, fewer for big blocks (at most
    about 48 tokens)."""
    return min(5, max(2, 48 // block_size))


@functools.lru_cache(maxsize=None)
def _edge_sizes(block_size: int) -> tuple[int, ...]:
    """An allocation's usual sizes: around a block edge, two blocks, past four blocks."""
    b = block_size
    return tuple(sorted({1, max(1, b - 1), b, b + 1, 2 * b, 4 * b + 1}))


def _add(rid: int, tokens: list[int], adapter: Any = None, salt: Any = None) -> dict[str, Any]:
    return {"op": "add", "rid": rid, "tokens": tokens, "adapter": adapter, "salt": salt}


def _op(name: str, rid: int) -> dict[str, Any]:
    return {"op": name, "rid": rid}


def _allocate(rid: int, n: int) -> dict[str, Any]:
    return {"op": "allocate", "rid": rid, "n": n}


def _serve(rid: int, tokens: list[int], adapter: Any = None,
           salt: Any = None) -> Ops:
    """A whole prefill: the common path, and what makes later prompts hit."""
    return [_add(rid, tokens, adapter, salt), _allocate(rid, len(tokens)), _op("write", rid),
            _op("publish", rid)]


# ------------------------------------------------------------------------------ sessions

Turn = tuple[int, int, int, int, list[int]]


def _seeded(seed: int, count: int, first: int) -> list[int]:
    """``count`` tokens in ``first .. first + 3`` from a seed -- one draw instead of one per
    token; seed 0 (the shrink target) gives ``first`` throughout."""
    rng = random.Random(seed)
    return [first + (rng.randrange(4) if seed else 0) for _ in range(count)]


def _filler(seed: int, count: int) -> list[int]:
    """``count`` filler tokens (4..7: outside the documents' vocabulary, so they never hit a
    history) from a seed."""
    return _seeded(seed, count, 4)


def _session(block_size: int, num_blocks: int, ids: Sequence[int], live: Sequence[int],
             history: list[int], turns: list[Turn]) -> Ops:
    """An agent session: every live request ends (the pool holds only free and cached blocks),
    ``ids[0]`` is served and finishes; then each turn ``(evicted, split, offset, seed, more)``
    serves other requests (filler tokens from ``seed``, in whole blocks; ``split`` of them to a
    first request and the rest to a second, 0: one request) whose blocks are exactly the free ones
    plus ``evicted`` of the session's cached history (whole-session eviction takes it all),
    and the session returns with its tokens plus ``more``, under its own id or (``offset``)
    another of ``ids`` -- a handed-over session, whose hits make the history shared.  Under
    penelope the front of the history is gone and its tail kept: a hole to refill, allocated
    twice (the hole, then what follows the suffix); a second turn after a handed-over one meets
    a suffix with a gap."""
    b = block_size
    rid = ids[0]
    ops = [_op("finish", r) for r in dict.fromkeys([*live, *ids])]
    ops += _serve(rid, history) + [_op("finish", rid)]
    tokens = history
    for turn, (evicted, split, offset, seed, more) in enumerate(turns):
        filler = _filler(seed, num_blocks * b)
        full = len(tokens) // b
        who = ids[offset % len(ids)]
        pressure = max(1, num_blocks - 1 - full + max(1, min(evicted, full - 1)))
        cut = min(pressure - 1, split)
        for index, blocks in enumerate((cut, pressure - cut) if cut > 0 else (pressure,)):
            other = ids[(ids.index(who) + 1 + index) % len(ids)]
            ops += _serve(other, filler[:blocks * b] or [4]) + [_op("finish", other)]
        tokens = tokens + more
        again = [_allocate(who, len(tokens)), _op("write", who)]
        ops += [_add(who, tokens), *again, *again, _op("publish", who)]
        if turn < len(turns) - 1:
            ops.append(_op("finish", who))
    return ops


# ------------------------------------------------------------------------------ the plan


@dataclasses.dataclass(frozen=True)
class _Plan:
    """The sizes a program aims at (drawn before anything else)."""

    ids: int  # request ids 0 .. ids - 1
    crowd: int  # requests registered at once by a crowd chunk
    long_blocks: int  # table entries of the long request
    big_tokens: tuple[int, ...]  # tokens of big prefills (one request, one forward pass)


def _plan(draw: Draw, thresholds: Sequence[reach.Threshold]) -> _Plan:
    top_id = reach.size(draw, "request_id", thresholds, lo=2, hi=24, base=_ints(2, 5))
    crowd = reach.size(draw, "live_requests", thresholds, lo=2, hi=22, base=_ints(2, PLAIN_CROWD))
    long_blocks = reach.size(draw, "table_blocks", thresholds, lo=1, hi=40,
                             base=_ints(2, PLAIN_LONG_BLOCKS))
    base = _ints(1, 24)
    big = []
    # one big prefill aimed at each threshold of a token size, the largest tile first (the
    # early ``wide`` chunk prefills it: one draw among all of a size's thresholds realised the
    # boundaries of the larger tile in a few programs of a hundred)
    aimed = sorted((t for name in TOKEN_SIZES for t in reach.of_size(thresholds, name)),
                   key=lambda t: (-t.value, TOKEN_SIZES.index(t.size)))
    for t in aimed:
        big.append(reach.size(draw, t.size, (t,), lo=1, hi=max(t.cap or 4 * t.value, 8),
                              base=base))
    big.append(draw(base))
    return _Plan(ids=max(top_id + 1, crowd + 1, 3), crowd=crowd, long_blocks=long_blocks,
                 big_tokens=tuple(big))


# ------------------------------------------------------------------------------ generation


@dataclasses.dataclass
class _Gen:
    """What chunk generators share: the pool, the documents, the plan, and a model of which
    request ids are registered (approximate: a refused fork or add is not modelled)."""

    b: int
    num_blocks: int
    window: Optional[int]
    eviction: str
    documents: list[list[int]]
    plan: _Plan
    live: list[int] = dataclasses.field(default_factory=list)
    unused_big: list[int] = dataclasses.field(default_factory=list)  # for wide chunks, in order

    # ---- request ids

    def pick(self, draw: Draw) -> int:
        """A registered request mostly (7 in 8); any id (often unknown) sometimes."""
        live = self.live
        if not live:
            return draw(_ints(0, self.plan.ids - 1))
        choice, anyone = _digits(draw, (8 * len(live), self.plan.ids))
        return live[choice % len(live)] if choice >= len(live) else anyone

    def fresh(self, draw: Draw) -> int:
        """An id that is not registered (when one is left): the lowest one half the time (an
        engine reuses its lowest free slot), else any; sometimes (1 in 10) any id (a refused
        add)."""
        free = [r for r in range(self.plan.ids) if r not in self.live]
        if not free:
            return draw(_ints(0, self.plan.ids - 1))
        choice, anyone = _digits(draw, (10 * len(free), self.plan.ids))
        mode, index = divmod(choice, len(free))
        if mode >= 5:
            return free[0]
        return free[index] if mode > 0 else anyone

    def register(self, *rids: int) -> None:
        for rid in rids:
            if rid not in self.live:
                self.live.append(rid)

    def release(self, *rids: int) -> None:
        for rid in rids:
            if rid in self.live:
                self.live.remove(rid)

    # ---- tokens and keys

    def extra(self, draw: Draw) -> Optional[int]:
        return EXTRA_VALUES[draw(_ints(0, len(EXTRA_VALUES) - 1))]

    def extras(self, draw: Draw) -> tuple[Optional[int], Optional[int]]:
        """An adapter and a salt (:data:`EXTRA_KEYS`, independently), in one draw."""
        adapter, salt = _digits(draw, (len(EXTRA_VALUES),) * 2)
        return EXTRA_VALUES[adapter], EXTRA_VALUES[salt]

    def tokens(self, draw: Draw, count: int) -> list[int]:
        """``count`` tokens of the documents' vocabulary: each its own digit when few (they
        shrink one by one), from a seed when many (long prompts were most of a program's
        draws otherwise)."""
        if count <= 8:
            return _digits(draw, (4,) * count)
        return _seeded(draw(_ints(0, 2**31 - 1)), count, 0)

    def prompt(self, draw: Draw, length: Optional[int] = None) -> list[int]:
        """A document prefix (cut at a block edge ± 1, or at ``length``) plus a few tokens.
        The documents all have the same length (:func:`_documents`)."""
        b, span = self.b, len(self.documents[0])
        if length is None:
            max_blocks = _edge_blocks(b)
            doc, mode, edge, anywhere, count, *few = _digits(
                draw, (len(self.documents), 4, 4 * max_blocks, max_blocks * b + 1, b + 2,
                       *(4,) * min(b + 1, 8)))
            cut = (max(1, (1 + edge // 4) * b + EDGE_OFFSETS[edge % 4]) if mode < 3
                   else 1 + anywhere)  # 3 in 4 at a block edge (k*b - 1, k*b, k*b + 1)
            return (self.documents[doc][:cut] + self._more(draw, count, few)) or [0]
        doc, shared, cut = _digits(draw, (len(self.documents), 2, span + 1))
        cut = min(length, cut) if shared else 0
        return self.documents[doc][:cut] + self.tokens(draw, length - cut)

    def _more(self, draw: Draw, count: int, few: list[int]) -> list[int]:
        """``count`` tokens: the digits ``few`` drawn along with the count when they suffice
        (as :meth:`tokens` draws up to 8), else :meth:`tokens`."""
        return few[:count] if count <= len(few) else self.tokens(draw, count)

    def big(self, draw: Draw) -> int:
        """One of the plan's big token sizes."""
        return self.plan.big_tokens[_digits(draw, (len(self.plan.big_tokens),))[0]]

    def size(self, draw: Draw) -> int:
        """Tokens for one allocation: block edges mostly (17 in 20), the plan's big size
        sometimes (2 in 20), and rarely (1 in 20) 0 or a negative count (the protocol schedules
        nothing then)."""
        mode = draw(_ints(0, 19))
        if mode >= 18:
            return self.big(draw)
        if mode == 17:
            return draw(_pick((0, -1)))
        return draw(_pick(_edge_sizes(self.b)))

    def decode(self, draw: Draw, rid: int) -> Ops:
        """One decode step (``k`` tokens: speculative decoding when ``k > 1``); with
        ``trim_in_flight`` the window is trimmed while the step's KV is still being written
        (async scheduling order), where trims that count unwritten tokens free blocks too
        early.  Without ``publish`` trimmed blocks are unhashed, go to the front of the free
        queue and come straight back to the next allocation."""
        more, trim_in_flight, publish, *few = _digits(
            draw, (self.b + 1, 2, 2, *(4,) * min(self.b + 1, 8)))
        new = self._more(draw, 1 + more, few)
        write, trim = _op("write", rid), _op("trim", rid)
        return [{"op": "append", "rid": rid, "tokens": new}, _allocate(rid, len(new)),
                *((trim, write) if trim_in_flight else (write, trim)),
                *([_op("publish", rid)] if publish else [])]


def _interleave(draw: Draw, sides: list[Ops]) -> Ops:
    """A random merge of several op sequences, each keeping its order (the scheduler runs the
    requests' steps in any order): each op comes from a uniformly chosen side among those left
    (a digit whose radix every such count divides)."""
    sides = [list(side) for side in sides if side]
    radix = math.lcm(*range(1, len(sides) + 1))
    out: Ops = []
    for digit in _digits(draw, (radix,) * sum(map(len, sides))):
        side = sides[digit % len(sides)]
        out.append(side.pop(0))
        sides = [s for s in sides if s]
    return out


# ------------------------------------------------------------------------------ chunk kinds


def _chunk_serve(draw: Draw, g: _Gen) -> Ops:
    """A new request prefilled whole: a document prefix at a block edge, or (1 in 4) a prompt
    of the plan's big size -- one request's queries, keys and tokens in one forward pass."""
    rid = g.fresh(draw)
    g.register(rid)
    big, adapter, salt = _digits(draw, (4, len(EXTRA_VALUES), len(EXTRA_VALUES)))
    prompt = g.prompt(draw, g.big(draw)) if big == 0 else g.prompt(draw)
    return _serve(rid, prompt, EXTRA_VALUES[adapter], EXTRA_VALUES[salt])


def _chunk_wide(draw: Draw, g: _Gen) -> Ops:
    """A prefill of one of the plan's big sizes, of fresh random tokens, for the lowest free
    id: exactly that many queries, keys and written tokens in one forward pass (through the
    kernels); maybe finished."""
    free = [r for r in range(g.plan.ids) if r not in g.live]
    rid = free[0] if free else g.fresh(draw)
    tokens = g.tokens(draw, g.unused_big.pop(0) if g.unused_big else g.big(draw))
    ops = _serve(rid, tokens, *g.extras(draw))
    if draw(BOOLS):
        g.release(rid)
        return ops + [_op("finish", rid)]
    g.register(rid)
    return ops


def _chunk_admit_later(draw: Draw, g: _Gen) -> Ops:
    """A request added now (its lookup finds cached blocks) and scheduled only after other
    requests ran -- a scheduler's waiting queue: their allocations (filler prompts up to the
    pool's size) may evict the blocks the lookup found before the request pins them."""
    rid = g.fresh(draw)
    g.register(rid)
    ops: Ops = [_add(rid, g.prompt(draw), *g.extras(draw))]
    slots = g.num_blocks * g.b
    others, size1, finish1, size2, finish2, huge = _digits(draw, (2, slots, 2, slots, 2, 2))
    for size, finish in [(size1, finish1), (size2, finish2)][:1 + others]:
        other = g.fresh(draw)
        ops += _serve(other, _filler(draw(_ints(0, 2**31 - 1)), 1 + size))
        if finish:
            ops.append(_op("finish", other))
            g.release(other)
        else:
            g.register(other)
    size = g.size(draw)
    return ops + [_allocate(rid, (size, 10**6)[huge]), _op("write", rid),
                  _op("publish", rid)]


def _chunk_served_and_done(draw: Draw, g: _Gen) -> Ops:
    """A finished request leaves its published blocks cached: the next prompt can hit them."""
    rid = g.fresh(draw)
    g.release(rid)
    return _serve(rid, g.prompt(draw), *g.extras(draw)) + [_op("finish", rid)]


def _chunk_add(draw: Draw, g: _Gen) -> Ops:
    """A request registered and not scheduled yet (rarely with an empty prompt: nothing to hit,
    nothing to compute)."""
    rid = g.fresh(draw)
    g.register(rid)
    tokens = [] if draw(_ints(0, 15)) == 0 else g.prompt(draw)
    return [_add(rid, tokens, *g.extras(draw))]


def _chunk_step(draw: Draw, g: _Gen) -> Ops:
    """A scheduled step of a live request (a chunk of its prefill), maybe published."""
    rid = g.pick(draw)
    size = g.size(draw)
    return ([_allocate(rid, size), _op("write", rid)]
            + ([_op("publish", rid)] if draw(BOOLS) else []))


def _chunk_decode(draw: Draw, g: _Gen) -> Ops:
    return g.decode(draw, g.pick(draw))


def _chunk_batch(draw: Draw, g: _Gen) -> Ops:
    """Two requests scheduled, one forward pass over both (a mixed batch); or two new requests
    prefilled in one pass (several query rows each: row offsets per request matter)."""
    if draw(BOOLS):
        first, second = g.pick(draw), g.pick(draw)
        ops: Ops = []
    else:
        first = g.fresh(draw)
        g.register(first)
        second = g.fresh(draw)
        g.register(second)
        a, c = g.prompt(draw), g.prompt(draw)
        ops = [_add(first, a), _add(second, c)]
    return ops + [_allocate(first, g.size(draw)), _allocate(second, g.size(draw)),
                  {"op": "forward"}, _op("publish", first), _op("publish", second)]


def _chunk_single(draw: Draw, g: _Gen) -> Ops:
    name = draw(_pick(("write", "publish", "preempt", "trim", "finish")))
    rid = g.pick(draw)
    if name == "finish":
        g.release(rid)
    return [_op(name, rid)]


def _chunk_allocate_only(draw: Draw, g: _Gen) -> Ops:
    """An allocation whose write comes later (or never): the bugs that live between scheduling
    and the forward pass (a hash published before the KV is written)."""
    return [_allocate(g.pick(draw), g.size(draw))]


def _chunk_append(draw: Draw, g: _Gen) -> Ops:
    return [{"op": "append", "rid": g.pick(draw),
             "tokens": g.tokens(draw, draw(_ints(1, g.b + 1)))}]


def _chunk_fork(draw: Draw, g: _Gen) -> Ops:
    """A fork, half the time followed by one side decoding into the shared last block;
    sometimes of a request with a step in flight (refused: its KV is not written yet)."""
    src, dst = g.pick(draw), g.fresh(draw)
    g.register(dst)
    flight, side, decode = _digits(draw, (4, 2, 2))
    in_flight = [_allocate(src, g.size(draw))] if flight == 0 else []
    return [*in_flight, {"op": "fork", "src": src, "dst": dst},
            *(g.decode(draw, (src, dst)[side]) if decode else [])]


def _continuation(draw: Draw, g: _Gen, rid: int) -> Ops:
    """What one side of a fork does next: decode steps (the first write into the shared last
    block copies it; the last holder writes in place), publish, maybe finish.  Mostly the side
    first decodes a block's worth and publishes it: each side's own continuation of the shared
    prefix is cached (where state shared by the sides would mix them up)."""
    ops: Ops = []
    first, first_too, extra, extra_too, steps, finish, *kinds = _digits(
        draw, (3, 3, 2, 2, 3, 3, 4, 4, 4))
    if (first + first_too) % 3 > 0:  # as _index: the sum of two digits
        tokens = g.tokens(draw, g.b + (extra + extra_too) % 2)
        ops += [{"op": "append", "rid": rid, "tokens": tokens}, _allocate(rid, len(tokens)),
                _op("write", rid), _op("publish", rid)]
    for kind in kinds[:1 + steps]:
        if kind <= 1:
            ops += g.decode(draw, rid)
        elif kind == 2:
            ops.append(_op("publish", rid))
        else:
            ops += [_allocate(rid, g.size(draw)), _op("write", rid)]
    if finish == 0:
        ops.append(_op("finish", rid))
        g.release(rid)
    return ops


def _chunk_fork_both(draw: Draw, g: _Gen) -> Ops:
    """Beam search: a request (served now with a partial last block, or a live one) forks,
    maybe forks again, and *every* side continues -- decode, publish, finish -- in an
    interleaved order, or all sides decode in one batch: copy-on-write of the shared last block
    from each side, a write in place by its last holder, shared blocks freed by both.  Then,
    mostly, the winning beam's text comes back as a new prompt (the next turn): a lookup
    through the blocks the sides published."""
    ops: Ops = []
    prompt: Optional[list[int]] = None
    live, blocks, partial, trim = _digits(draw, (2, 4, max(1, g.b - 1), 2))
    if g.live and live:
        src = g.pick(draw)
    else:
        src = g.fresh(draw)
        prompt = g.prompt(draw, (1 + blocks) * g.b + 1 + partial)
        ops += _serve(src, prompt, *g.extras(draw))
        g.register(src)
        if g.window is not None and trim:  # blocks left the window: the forked table
            ops.append(_op("trim", src))  # holds null entries (shared by neither side)
    ops += _beams(draw, g, src)
    if prompt is not None and _index(draw, 4) > 0:
        beams = tuple(sorted({op["dst"] for op in ops if op["op"] == "fork"} | {src}))
        winner = beams[draw(_ints(0, len(beams) - 1))]
        text = prompt + [t for op in ops if op["op"] == "append" and op["rid"] == winner
                         for t in op["tokens"]]
        ops += _chunk_turn(draw, g, text)
    return ops


def _chunk_turn(draw: Draw, g: _Gen, text: list[int]) -> Ops:
    """A new request whose prompt is ``text`` plus a few tokens, prefilled and published."""
    rid = g.fresh(draw)
    g.register(rid)
    count, *few = _digits(draw, (g.b + 1, *(4,) * min(g.b, 8)))
    tokens = text + g._more(draw, count, few)
    return _serve(rid, tokens)


def _beams(draw: Draw, g: _Gen, src: int) -> Ops:
    """Forks of ``src`` (one or two) and every side's continuation (see
    :func:`_chunk_fork_both`)."""
    ops: Ops = []
    sides = [src]
    forks, first_parent, second_parent, batch, *counts = _digits(
        draw, (2, 1, 2, 3, *(g.b + 1,) * 3, *(2,) * 3))
    for parent in (first_parent, second_parent)[:1 + forks]:
        child = g.fresh(draw)
        if child in sides:
            break
        ops.append({"op": "fork", "src": sides[parent], "dst": child})
        g.register(child)
        sides.append(child)
    if batch == 0:  # every side decodes in one forward pass
        news = {rid: g.tokens(draw, 1 + count) for rid, count in zip(sides, counts)}
        ops += [{"op": "append", "rid": rid, "tokens": t} for rid, t in news.items()]
        ops += [_allocate(rid, len(t)) for rid, t in news.items()]
        ops.append({"op": "forward"})
        ops += [_op("publish", rid) for rid, publish in zip(sides, counts[3:]) if publish]
    return ops + _interleave(draw, [_continuation(draw, g, rid) for rid in sides])


def _chunk_crowd(draw: Draw, g: _Gen) -> Ops:
    """Many live requests at once (the plan's crowd): short prompts sharing a document prefix
    (hits), all registered before any is scheduled, prefilled together in one forward pass (or
    one by one), a decode round for all, then some finish.  Crosses the block tables' row
    count and the kernels' request rows."""
    count = g.plan.crowd
    free = [r for r in range(g.plan.ids) if r not in g.live]
    if len(free) < count:
        free = list(range(g.plan.ids))
    start, doc, shared, batched, decode = _digits(
        draw, (len(free) - count + 1, len(g.documents), 3, 2, 2))
    rids = free[start:start + count]
    prefix = g.documents[doc][:shared * g.b]
    # per request: its prompt's own tokens less one, an extra key (1 in 4: an adapter, else
    # none), whether it publishes, whether it finishes
    lengths = _digits(draw, (g.b + 1,) * count)
    keyed = _digits(draw, (4 * len(EXTRA_VALUES),) * count)
    publish, finish = _bits(draw, count), _bits(draw, count)
    prompts = {rid: prefix + g.tokens(draw, 1 + n) for rid, n in zip(rids, lengths)}
    ops: Ops = [_add(rid, p, EXTRA_VALUES[k] if k < len(EXTRA_VALUES) else None)
                for (rid, p), k in zip(prompts.items(), keyed)]
    g.register(*rids)
    for rid, p in prompts.items():
        ops.append(_allocate(rid, len(p)))
        if not batched:
            ops.append(_op("write", rid))
    if batched:
        ops.append({"op": "forward"})
    ops += [_op("publish", rid) for rid, flag in zip(rids, publish) if flag]
    if decode:  # a decode round for (up to 9 of) the crowd, one forward pass
        decoding = rids[:9]
        tokens = _digits(draw, (4,) * len(decoding))  # one each
        ops += [{"op": "append", "rid": rid, "tokens": [t]} for rid, t in zip(decoding, tokens)]
        ops += [_allocate(rid, 1) for rid in decoding] + [{"op": "forward"}]
    done = [rid for rid, flag in zip(rids, finish) if flag]
    g.release(*done)
    return ops + [_op("finish", rid) for rid in done]


def _chunk_long(draw: Draw, g: _Gen) -> Ops:
    """One request whose table reaches the plan's length: prefilled in one allocation (the
    table jumps past its row), in chunks (with trims under a window: a long table of null
    entries in a small pool), or prefilled in part and decoded to the end."""
    b, rid = g.b, g.fresh(draw)
    short, mode, publish, step, decodes, finish = _digits(draw, (b, 3, 2, 4, 3, 2))
    length = max(1, g.plan.long_blocks * b - short)
    tokens = g.prompt(draw, length)
    ops: Ops = [_add(rid, tokens, *g.extras(draw))]
    g.register(rid)
    if mode == 0:
        ops += [_allocate(rid, length), _op("write", rid)]
    else:
        chunk = max(g.big(draw) if step == 3 else (b, 2 * b, 4 * b)[step], -(-length // 10))
        chunks = -(-length // chunk)
        published = _bits(draw, chunks) if publish else [False] * chunks
        for flag in published:
            ops += [_allocate(rid, chunk), _op("write", rid)]
            ops += ([_op("trim", rid)] if g.window is not None else [])
            ops += ([_op("publish", rid)] if flag else [])
    if mode == 2:
        for _ in range(1 + decodes):
            ops += g.decode(draw, rid)
    ops += [_op("publish", rid)] if publish else []
    if finish:
        ops.append(_op("finish", rid))
        g.release(rid)
    return ops


def _chunk_preempt_resume(draw: Draw, g: _Gen) -> Ops:
    """Preemption and re-admission: a request (maybe mid-prefill, maybe with a step in flight)
    is preempted, other requests push the pool, and it is scheduled again -- a new prefix
    lookup, hits on its own published blocks, recomputation of the rest."""
    ops: Ops = []
    live, decode, flight, other, again, *sized, decode_after = _digits(
        draw, (2, 2, 3, 2, 2, 2, 2, 2))
    if g.live and live:
        rid = g.pick(draw)
    else:
        rid = g.fresh(draw)
        ops += _serve(rid, g.prompt(draw), *g.extras(draw))
        g.register(rid)
    if decode:
        ops += g.decode(draw, rid)
    if flight == 0:
        ops.append(_allocate(rid, g.size(draw)))  # a step in flight is dropped
    ops.append(_op("preempt", rid))
    if other:
        pusher = g.fresh(draw)
        ops += _serve(pusher, g.prompt(draw)) + [_op("finish", pusher)]
    for fits in sized[:1 + again]:
        ops += [_allocate(rid, g.size(draw) if fits else 10**6), _op("write", rid)]
    ops.append(_op("publish", rid))
    if decode_after:
        ops += g.decode(draw, rid)
    return ops


def _chunk_reset_live(draw: Draw, g: _Gen) -> Ops:
    """A prefix-cache reset while requests hold blocks (refused), the requests finish, a reset
    that succeeds, and a prompt that would have hit before it."""
    ops: Ops = [{"op": "reset"}]
    rids = list(g.live)
    every, *stays = _digits(draw, (2, *(5,) * len(rids)))  # else some (1 in 5) stay: the
    done = [rid for rid, stay in zip(rids, stays) if every or stay > 0]  # second is refused too
    ops += [_op("finish", rid) for rid in done]
    g.release(*done)
    ops.append({"op": "reset"})
    rid = g.fresh(draw)
    g.register(rid)
    return ops + _serve(rid, g.prompt(draw))


def _turns(draw: Draw, g: _Gen, count: int) -> list[Turn]:
    """``count`` returning turns (:func:`_session`; the filler is drawn as a seed)."""
    turns = []
    for _ in range(count):
        evicted, split, offset, offset_too, more = _digits(
            draw, (6, g.num_blocks - 1, 3, 3, 3 * g.b))
        seed = draw(_ints(0, 2**31 - 1))
        turns.append((1 + evicted, split, (offset + offset_too) % 3, seed,
                      g.tokens(draw, 1 + more)))
    return turns


def _chunk_sessions(draw: Draw, g: _Gen) -> Ops:
    """Sessions (:func:`_session`) whose first history is a document cut at 3 to 6 whole
    blocks (that fit the pool), maybe plus a partial one; one to three returning turns.  A
    session fills the whole pool: in a pool of more than :data:`SLOTS` slots (sized for a
    crowd or a long request) a plain prefill stands in."""
    b, num_blocks = g.b, g.num_blocks
    if num_blocks * b > SLOTS:
        return _chunk_serve(draw, g)
    full, doc, partial, count, count_too = _digits(
        draw, (max(3, min(6, num_blocks - 2)) - 2, len(g.documents), b, 3, 3))
    history = g.documents[doc][:(3 + full) * b] + g.tokens(draw, partial)
    turns = _turns(draw, g, 1 + (count + count_too) % 3)  # one to three turns
    ids: list[int] = []
    while len(ids) < 3:  # three distinct ids, the first three of a uniform sequence
        for rid in _digits(draw, (g.plan.ids,) * 3):
            if rid not in ids and len(ids) < 3:
                ids.append(rid)
    ops = _session(b, num_blocks, ids, g.live, history, turns)
    g.release(*g.live)
    g.register(ids[turns[-1][2] % 3])
    return ops


def _chunk_steps(draw: Draw, g: _Gen) -> Ops:
    """Three to nine single operations of any kind on live requests, in any order -- a forward
    pass right after a preemption, a fork right before a trim, a reset after a fork: every
    ordered pair of operations, whatever the chunks above put next to each other."""
    ops: Ops = []
    count, count_too, *names = _digits(draw, (7, 7, *(len(OPERATIONS),) * 18))
    for first, second in list(zip(names[::2], names[1::2]))[:3 + (count + count_too) % 7]:
        name = OPERATIONS[(first + second) % len(OPERATIONS)]  # as _index: two digits' sum
        if name == "add":
            rid = g.fresh(draw)
            g.register(rid)
            ops.append(_add(rid, g.prompt(draw), *g.extras(draw)))
        elif name == "allocate":
            ops.append(_allocate(g.pick(draw), g.size(draw)))
        elif name == "append":
            ops.append({"op": "append", "rid": g.pick(draw),
                        "tokens": g.tokens(draw, draw(_ints(1, g.b + 1)))})
        elif name == "fork":
            src, dst = g.pick(draw), g.fresh(draw)
            g.register(dst)
            ops.append({"op": "fork", "src": src, "dst": dst})
        elif name in ("forward", "reset"):
            ops.append({"op": name})
        else:
            rid = g.pick(draw)
            if name == "finish":
                g.release(rid)
            ops.append(_op(name, rid))
    return ops


def _chunk_reset(draw: Draw, g: _Gen) -> Ops:
    return [{"op": "reset"}]


GENERATORS: dict[str, Callable[[Draw, _Gen], Ops]] = {
    "serve": _chunk_serve, "served_and_done": _chunk_served_and_done, "add": _chunk_add,
    "step": _chunk_step, "decode": _chunk_decode, "batch": _chunk_batch,
    "single": _chunk_single, "allocate_only": _chunk_allocate_only, "append": _chunk_append,
    "fork": _chunk_fork, "fork_both": _chunk_fork_both, "crowd": _chunk_crowd,
    "long": _chunk_long, "wide": _chunk_wide, "preempt_resume": _chunk_preempt_resume,
    "reset_live": _chunk_reset_live, "admit_later": _chunk_admit_later, "steps": _chunk_steps,
    "sessions": _chunk_sessions, "reset": _chunk_reset,
}


# ------------------------------------------------------------------------------ the case


def _aimed(plan: _Plan) -> list[str]:
    """The chunk kinds a program runs once, early, whatever the swarm enabled: a crowd or a long
    table the plan drew past the plain sizes (a threshold's boundary, or above it).  Left to
    the swarm, a drawn boundary was realised only when the kind was enabled, weighted enough
    and reached before the step budget -- a few percent of the programs."""
    return ([*(["crowd"] if plan.crowd > PLAIN_CROWD else []),
             *(["long"] if plan.long_blocks > PLAIN_LONG_BLOCKS else [])])


def _block_size(draw: Draw, plan: _Plan, enabled: Sequence[str]) -> int:
    """A block size (:data:`BLOCK_SIZES`) that keeps a planned long request within
    :data:`LONG_TOKENS`."""
    fits = [(b, w) for b, w in BLOCK_SIZES
            if "long" not in enabled or b * plan.long_blocks <= LONG_TOKENS]
    return int(_choose(draw, fits or BLOCK_SIZES[:1]))


def _pool(draw: Draw, block_size: int, plan: _Plan, enabled: Sequence[str]) -> int:
    """Pool size: 3..16 blocks, at most :data:`SLOTS` token slots (every allocation evicts).
    When the program plans a crowd, a long table or a big prefill past the plain sizes, about
    half the programs get enough blocks for it (plus a few), so that the planned size is
    reached, not refused; the others keep the small pool and its eviction pressure."""
    b = block_size
    blocks = draw(_ints(3, max(3, min(16, SLOTS // b))))
    need = 0
    if "crowd" in enabled and plan.crowd > PLAIN_CROWD:
        need = max(need, 2 * plan.crowd + 4)
    if "long" in enabled and plan.long_blocks > PLAIN_LONG_BLOCKS:
        need = max(need, plan.long_blocks + 2)
    aimed = plan.big_tokens[:-1]  # the sizes drawn against thresholds
    if aimed and max(aimed) > 5 * b:
        need = max(need, -(-max(aimed) // b) + 2)
    if need > blocks and draw(_ints(0, 2)) > 0:
        blocks = need + draw(_ints(0, 3))
    return blocks


def _kv_values(draw: Draw) -> dict[str, list[str]]:
    """The guarded driver's vector kinds per role (:mod:`fuzzkit.values`): one or two kinds
    each, so a case can hold zero keys among normal ones, or only huge scores."""
    from fuzzkit.targets.paged_kv.kernel_driver import ROLE_DOMAINS

    out: dict[str, list[str]] = {}
    for role, domain in ROLE_DOMAINS.items():
        kinds = _weighted([(k, w) for k, w in domain.allowed() if k != "drawn"])
        two, first, second = _digits(draw, (2, len(kinds), len(kinds)))
        out[role] = [str(kinds[first]), *([str(kinds[second])] if two else [])]
    return out


def _index(draw: Draw, count: int) -> int:
    """An index in ``0 .. count - 1``, uniform: the sum of two digits modulo ``count``, in one
    draw.  (The sum was the cure for Hypothesis's integer draws, 0 far more often than their
    share; the digits are uniform, and the sum keeps the choices the coverage tests measured.)"""
    first, second = _digits(draw, (count, count))
    return (first + second) % count


def _swarm(draw: Draw, table: Sequence[tuple[str, int]], keep: Sequence[str]) -> dict[str, int]:
    """:func:`fuzzkit.program.swarm`'s configuration with its distribution -- all defaults in a
    third of the programs; else each kind enabled with probability 3/4 (always if kept) and
    weighted 1, its default or 8x its default -- from packed draws: one digit per kind, of 12
    values (disabled in 3 of them) or 3 for a kept kind."""
    defaults, *choices = _digits(draw, (3, *(3 if name in keep else 12 for name, _ in table)))
    if defaults == 0:
        return {name: weight for name, weight in table}
    config: dict[str, int] = {}
    for (name, weight), choice in zip(table, choices):
        if name in keep or choice >= 3:
            config[name] = (weight, 1, 8 * weight)[choice % 3]
    if not config:
        name, weight = table[draw(_ints(0, len(table) - 1))]
        config[name] = weight
    return config


def _kind(draw: Draw, config: dict[str, int]) -> tuple[str, int]:
    """One chunk kind with the swarm configuration's weights, and the program's stop digit
    (0..15; the program stops after this chunk on 7, a middle value: Hypothesis favours the
    ends of a range), in one draw.  ``fuzzkit.program.weighted`` draws one index, which is 0
    more often than its share, giving the first kind more than its weight; the sum of two
    digits (:func:`_index`) keeps close to the stated weights (and still shrinks to the first
    kind)."""
    table = [(name, weight) for name, weight in config.items() if weight > 0]
    total = sum(weight for _, weight in table)
    first, second, stop = _digits(draw, (total, total, 16))
    k = (first + second) % total
    for name, weight in table:
        if k < weight:
            return name, stop
        k -= weight
    return table[-1][0], stop  # pragma: no cover - unreachable: k < total


@functools.lru_cache(maxsize=None)
def _documents(block_size: int) -> st.SearchStrategy[list[list[int]]]:
    """One or two documents of six blocks (from seeds): the prefixes prompts share."""
    return st.lists(_ints(0, 2**31 - 1).map(lambda seed: _seeded(seed, 6 * block_size, 0)),
                    min_size=1, max_size=2)


def _map_tokens(ops: Ops, alphabet: Sequence[int]) -> Ops:
    return [{**op, "tokens": [alphabet[t] for t in op["tokens"]]} if "tokens" in op else op
            for op in ops]


@st.composite
def inputs(draw: Draw, thresholds: Sequence[reach.Threshold] = (),
           max_steps: Optional[int] = None,
           capabilities: Optional[Capabilities] = None) -> dict[str, Any]:
    """One case: ``config``, ``program`` (chunks until ``max_steps`` operations, the last one
    finished up to :data:`OVERRUN` more) and, mostly, ``kv_values``.
    ``capabilities``: what the implementation fuzzed declares (None: the whole contract, what
    the reference implements); the case stays within them (see "Variants" above).
    ``thresholds``: the sizes to aim at (``Target.thresholds_for``; none: the plain
    distribution only).  ``max_steps`` defaults to :data:`STEPS`, or :data:`KERNEL_STEPS`
    when the thresholds name the kernels' token sizes (an implementation that launches the
    kernels pays for every forward pass under the interpreter: shorter programs, more of
    them -- the manager's paths are reached by the variety of programs more than by length)."""
    thresholds = tuple(thresholds)
    if max_steps is None:
        kernels = any(t.size in TOKEN_SIZES for t in thresholds)
        max_steps = KERNEL_STEPS if kernels else STEPS
    caps = capabilities or ALL_CAPABILITIES
    eviction = _eviction(draw, caps.eviction_policies)
    hashing = caps.hashing[0] if len(caps.hashing) == 1 else (
        "allocate" if draw(_ints(0, 2)) == 2 else "publish")
    modes = [m for m in caps.windows if not (m == "eager" and eviction == "penelope")]
    window_mode = "trim" if "trim" in modes or not modes else "eager"
    banned = _banned_ops(caps, window_mode, hashing)
    plan = _plan(draw, thresholds)
    off = {kind for op, kinds in CHUNKS_OF.items() if op in banned for kind in kinds}
    config = _swarm(draw, [(name, 16 if name == "sessions" and eviction != "lru"
                            else weight) for name, weight in CHUNKS if name not in off],
                    keep=("serve",))
    aimed = _aimed(plan)
    block_size = _block_size(draw, plan, [*config, *aimed])
    windowed = draw(_ints(0, 9)) >= 6 and bool(modes)  # about a third use a sliding window
    window = draw(_ints(1, 3 * block_size + 1)) if windowed else None
    if windowed and len(modes) == 2 and draw(_ints(0, 4)) >= 3:  # 2 in 5: eager
        window_mode = "eager"
        banned = _banned_ops(caps, window_mode, hashing)
    # most programs of a policy open with a returning session (where policies differ);
    # a session needs the small pool it evicts from, so those programs keep one
    opening = eviction != "lru" and draw(_ints(0, 2)) > 0
    num_blocks = _pool(draw, block_size, plan, [] if opening else [*config, *aimed])
    documents = draw(_documents(block_size))
    g = _Gen(block_size, num_blocks, window, eviction, documents, plan,
             unused_big=list(plan.big_tokens))
    ops: Ops = []
    if opening:
        ops += _chunk_sessions(draw, g)
    if "wide" in config:  # the first planned big prefill, early: it is reached, not refused
        ops += _chunk_wide(draw, g)
    opened = len(ops)
    for kind in aimed:  # the plan's crowd / long table past the plain sizes, early, whatever
        ops += GENERATORS[kind](draw, g)  # the swarm enabled: a drawn boundary is reached
    budget = max_steps + len(ops) - opened  # they do not eat the swarm's share of the program
    # chunks until the budget; after each, 1 in 16 programs stops early (a middle value:
    # Hypothesis favours the ends of a range)
    while len(ops) < budget:
        kind, stop = _kind(draw, config)
        ops += GENERATORS[kind](draw, g)
        if stop == 7:
            break
    alphabet = _choose(draw, ALPHABETS)
    case = {
        "config": {"num_blocks": num_blocks, "block_size": block_size,
                   "sliding_window": window, "eviction": eviction,
                   "window_mode": window_mode, "hashing": hashing},
        # the last chunk runs to its end (a crowd's forward pass), within a hard cap
        "program": _map_tokens(_within(ops[:budget + OVERRUN], banned, caps.extra_keys),
                               alphabet),
    }
    if draw(_ints(0, 3)) > 0:  # else standard normal vectors (the older cases' kind)
        case["kv_values"] = _kv_values(draw)
    return case
