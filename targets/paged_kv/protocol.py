"""The KV cache manager protocol: what fuzzkit drives, and the exact policy it expects.

Every manager — the reference, the vLLM-style optimized one, or *yours* behind a thin adapter
(``fuzzkit run paged_kv --impl your_module:YourAdapter``) — is a class constructed with a
:class:`Config` and offering the operations below.  fuzzkit drives it with programs, models the
KV memory itself (see :mod:`targets.paged_kv.driver`) and compares *logical* observations only:
hit tokens, fit / no fit, scheduled counts, free-block counts.  Physical block ids never need to
agree with the reference; what a block table points at is judged by the semantic KV oracle.

Policy (the contract; the reference implements it in the plainest way)
---------------------------------------------------------------------
* A pool of ``num_blocks`` blocks of ``block_size`` token slots.  Block 0 is the *null block*:
  never allocated, hashed, freed or written.  Blocks ``1 .. num_blocks-1`` start in the free
  queue in increasing order.
* **Block hash** of logical block ``i`` of a request: ``H(parent_hash, tokens[i*b:(i+1)*b],
  extra)``, ``parent_hash`` the hash of block ``i-1`` (None for block 0).  ``extra`` is a tuple of
  *tagged* keys: ``("adapter", id)`` on every block when the request has an adapter, and
  ``("salt", s)`` on block 0 only when it has a cache salt.  Only *full* blocks whose tokens are
  all computed (KV written) are hashed, and only when :meth:`publish` is called.
* **Prefix lookup** (``add_request`` and the first allocation of a request, or the first after a
  preemption): walk the request's full blocks in order, at most ``(len(tokens) - 1) // b`` of them
  (the last token is always computed, even on a full-prompt hit), and stop at the first block
  whose hash is not cached.  With several cached blocks for one hash, take the one published
  first.  A lookup pins nothing.
* **Allocation** ``allocate(rid, n)``: schedules the next ``min(n, len(tokens) - computed -
  pending)`` tokens.  On a request holding no blocks, it first looks up the prefix again and
  *pins the hits before allocating anything*: a hit with ``ref_cnt == 0`` leaves the free queue;
  ``ref_cnt += 1``; ``computed = hits * b``.  It then appends new blocks until the table covers
  ``computed + pending + scheduled`` tokens, taken from the *front* of the free queue; taking a
  block that still has a hash evicts it (the hash is dropped from the cache).  When the write
  position falls in a block shared with another request (``ref_cnt > 1``), that block is
  *copied on write*: a new block replaces it in this request's table (``ref_cnt`` of the old one
  drops by 1) and the copy ``(old, new)`` is returned so that the KV can be copied.  If the free
  queue (minus hits that pinning would take out of it) cannot supply every new block, nothing
  changes and ``None`` is returned ("does not fit": never over-commit).
* **Free** (``finish``, ``preempt``, trimming): a request's blocks are released *tail first*;
  each gets ``ref_cnt -= 1``, and one that reaches 0 joins the free queue — at the *front* if it
  has no hash (reused first), at the *back* if it is cached (evicted last, oldest first).
  The null block is skipped.
* **Sliding window** ``w`` (``Config.sliding_window``): a query at position ``q`` reads keys
  ``max(0, q - w + 1) .. q``.  ``trim(rid)`` replaces every table entry whose block lies wholly
  below ``computed - w + 1`` (the first key any future query reads) by the null block and frees it.
* ``fork(src, dst)``: ``dst`` becomes a new request with ``src``'s tokens and extra keys, sharing
  every block of ``src``'s table (``ref_cnt += 1`` each) and its computed count.  Refused (False)
  when ``src`` has scheduled-but-unwritten tokens, or ``dst`` exists.
* ``preempt(rid)``: frees all blocks; ``computed = pending = 0``; the request keeps its tokens and
  is re-admitted by a later ``allocate`` (prefix lookup again).
* ``reset_prefix_cache()``: only when no block is in use: drops every hash (blocks keep their
  free-queue order) and returns True; otherwise changes nothing and returns False.

Operations on an unknown request id return None and change nothing; so does ``add_request``
with an id that exists.  A request "holds no blocks" when its table is empty (a table trimmed
to null entries is not empty).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Protocol, Sequence, runtime_checkable


@dataclasses.dataclass(frozen=True)
class Config:
    num_blocks: int
    block_size: int
    sliding_window: Optional[int] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Config":
        window = data.get("sliding_window")
        return cls(int(data["num_blocks"]), int(data["block_size"]),
                   None if window is None else int(window))


@dataclasses.dataclass(frozen=True)
class Allocation:
    """What one ``allocate`` did: ``computed`` is the first position scheduled now (computed
    plus already-pending tokens), ``scheduled`` how many follow it, and ``copies`` the
    copy-on-write block copies ``(src, dst)`` to apply before writing."""

    computed: int
    scheduled: int
    copies: Sequence[tuple[int, int]] = ()


@runtime_checkable
class KVCacheManager(Protocol):
    """The operations a program drives.  See the module docstring for the policy."""

    def __init__(self, config: Config) -> None: ...

    def add_request(self, rid: int, tokens: Sequence[int], adapter: Optional[int] = None,
                    salt: Optional[int] = None) -> Optional[int]:
        """Register a request; return the tokens a prefix lookup finds cached now (no pins)."""

    def allocate(self, rid: int, num_tokens: int) -> Optional[Allocation]:
        """Schedule and reserve slots for up to ``num_tokens`` more tokens; None if no fit."""

    def commit(self, rid: int) -> Optional[int]:
        """The scheduled tokens' KV is written: ``computed += pending``; return the new count."""

    def publish(self, rid: int) -> Optional[int]:
        """Hash the request's full, computed, not yet hashed blocks; return how many."""

    def append(self, rid: int, tokens: Sequence[int]) -> Optional[int]:
        """Append decoded tokens; return the request's new length."""

    def fork(self, src: int, dst: int) -> Optional[bool]: ...

    def preempt(self, rid: int) -> Optional[bool]: ...

    def trim(self, rid: int) -> Optional[int]:
        """Sliding window: release out-of-window blocks; return how many."""

    def finish(self, rid: int) -> Optional[bool]: ...

    def reset_prefix_cache(self) -> bool: ...

    def block_table(self, rid: int) -> Sequence[int]:
        """Physical block ids of the request's logical blocks (0 = null block); empty for an
        unknown request."""

    def num_free_blocks(self) -> int:
        """Blocks a new allocation could take (the free queue, cached ones included)."""


@runtime_checkable
class InspectableManager(KVCacheManager, Protocol):
    """Optional: expose the state behind the structural invariants.

    ``inspect()`` returns ``{"ref_cnt": {block: n}, "block_hash": {block: hash or None},
    "free_queue": [block, ...] (front first), "cached": {hash: [block, ...]},
    "tables": {rid: [block, ...]}, "tokens_in_table": {rid: computed + pending}}`` for blocks
    ``1 .. num_blocks-1``.
    """

    def inspect(self) -> dict[str, Any]: ...
