"""The KV cache manager protocol: what fuzzkit drives, and the exact policy it expects.

Every manager — the reference, the vLLM-style optimized one, or *yours* behind a thin adapter
(``fuzzkit run paged_kv --impl your_module:YourAdapter``) — is a class constructed with a
:class:`Config` and offering the operations below.  fuzzkit drives it with programs, models the
KV memory itself (see :mod:`fuzzkit.targets.paged_kv.driver`) and compares *logical* observations only:
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
* **Free** (``finish``, ``preempt``, trimming): each released block gets ``ref_cnt -= 1`` (the
  null block is skipped); the ones that reach 0 join the free queue: those without a hash at the
  *front*, in table order (reused first; the request's head first), the cached ones at the
  *back* (evicted last) in the policy's *release order* (see **Eviction policy**; for "lru": tail
  first, so a request's tail is evicted before its head).
* **Sliding window** ``w`` (``Config.sliding_window``): a query at position ``q`` reads keys
  ``max(0, q - w + 1) .. q``.  ``trim(rid)`` replaces every table entry whose block lies wholly
  below ``computed - w + 1`` (the first key any future query reads) by the null block and frees it.
* ``fork(src, dst)``: ``dst`` becomes a new request with ``src``'s tokens and extra keys, sharing
  every block of ``src``'s table (``ref_cnt += 1`` each) and its computed count.  Refused (False)
  when ``src`` has scheduled-but-unwritten tokens or an open refill (penelope), or ``dst`` exists.
* ``preempt(rid)``: frees all blocks; ``computed = pending = 0``; the request keeps its tokens and
  is re-admitted by a later ``allocate`` (prefix lookup again).
* ``reset_prefix_cache()``: only when no block is in use: drops every hash (blocks keep their
  free-queue order) and returns True; otherwise changes nothing and returns False.

Eviction policy (``Config.eviction``)
-------------------------------------
Everything above is the policy "lru" (the default; vLLM's tail-LRU).  The two others change
only what is said below (the release order; for "session" what taking a block evicts; for
"penelope" the lookup and the first allocation); every other rule holds for all three.

*Ownership.*  A block the free queue hands out (a new block, a copy-on-write copy) is *owned* by
the request id it is allocated for and is not *shared*.  It becomes shared once a reference is
taken by a request id other than its owner (a prefix or suffix hit, a fork), and stays shared
until it is handed out again.  Request ids name sessions: a returning turn re-added under the
same id does not make its own history shared.

* **"lru"**: release order tail first (decreasing table index); lookup and allocation as above.
* **"session"** (whole-session eviction): release order tail first.  Each ``finish`` or
  ``preempt`` is one *release*; the blocks it returns to the queue cached and not shared form the
  release's *group* (a trim forms none).  A block leaves its group when it leaves the free queue
  (pinned as a hit, handed out).  When an allocation takes a cached block from the front of the
  queue (evicting it, as always) and that block is in a group, every other block of the group is
  evicted with it (hash dropped) and moved to the front of the queue, keeping their relative
  queue order, so the allocation reuses the rest of that session before anything else.
* **"penelope"** (front-of-history eviction, the shared prefix kept): release order for
  ``finish``/``preempt``: first the non-shared cached blocks in *increasing* table index (the
  front of a history is evicted first, its tail kept longest), then the shared ones in
  decreasing table index (the root of a shared prefix is evicted last); a trim releases tail
  first.
  *Lookup*: the prefix as above: hits ``0 .. i-1``, ``i`` the first block not cached, among
  the ``usable = (len(tokens) - 1) // b`` blocks.  If a usable block after ``i`` is cached, let
  ``m`` be the last one: the *suffix* is the longest run ``j .. m`` of cached blocks (``j > i``)
  and ``i .. j-1`` is the *hole*; otherwise there is neither.  (The suffix ends at the last
  cached block, not at ``usable - 1``: a returning turn's new tokens are never cached.)  Suffix
  hits, too, take the block published first.  ``add_request`` returns ``(prefix + suffix blocks)
  * b``.
  *Refill*: ``allocate`` on a request holding no blocks pins the prefix hits, then the suffix
  hits, before anything else; its table becomes prefix, ``j - i`` new blocks (the hole), suffix;
  ``computed = i * b`` and the refill is *open*.  While it is open an allocation schedules
  ``min(n, j*b - computed - pending)`` tokens from ``computed + pending`` (never past the hole)
  and appends no block, and the ``commit`` that makes ``computed`` reach ``j * b`` closes it and
  sets ``computed = (m + 1) * b`` (the end of the suffix): later allocations continue from there
  as usual (new blocks for ``m + 1 ..``).  The fit check counts the ``j - i`` hole blocks against
  the free queue minus the prefix and suffix hits with ``ref_cnt == 0``.  Recomputed tokens are
  exactly the hole, at their original positions.  While a refill is open ``fork`` from the
  request is refused, and trimming uses ``computed`` (the refill's progress).

Variants (``Config.window_mode``, ``Config.hashing``)
-----------------------------------------------------
Real managers differ from the rules above in two places; each difference is a variant of the
contract, chosen per case, and every other rule (eviction, copy-on-write, fork...) holds as
stated.

* **Window "trim"** (the default): the explicit ``trim(rid)`` above; nothing else frees an
  out-of-window block.
* **Window "eager"** (vLLM v1's ``SlidingWindowManager``; only meaningful with a sliding window
  ``w``; not defined with "penelope", which ``validate`` refuses):

  - *Eager removal*: every ``allocate(rid, n)`` of a known request first frees exactly the
    blocks ``trim(rid)`` would free (entries wholly below ``computed - w + 1``, ``computed``
    the *written* tokens, pending ones excluded; replaced by the null block; released tail
    first) -- before the lookup's pins and before the fit check, so it happens even when the
    allocation then does not fit and returns None (``allocate_slots`` calls
    ``remove_skipped_blocks`` first).
  - *Lookup*: a hit needs ``c = ceil((w - 1) / b)`` contiguous cached blocks (the keys the
    next query reads).  Scanning the usable blocks ``u - 1, u - 2, .. 0`` (``u = (len(tokens) -
    1) // b``), the first run of ``c`` cached blocks found, ``i .. i+c-1``, is the hit: the
    lookup reports ``(i + c) * b`` tokens and the admission's table starts with ``i`` null
    entries (out of the window, never pinned) followed by the ``c`` pinned hits.  Without such
    a run the hit is the run of cached blocks from block 0 (shorter than ``c``), as in the
    plain lookup.  (``find_longest_cache_hit``.)
  - *A window of 1 caches nothing*: with ``w == 1`` no block is ever hashed (``publish`` and
    allocate hashing hash nothing and return / count 0), since no hit could use it (vLLM's
    ``reachable_block_mask`` masks every block).
  - ``trim`` keeps its meaning; strategies do not generate it in this mode.

* **Hashing "publish"** (the default): full computed blocks are hashed on ``publish``.
* **Hashing "allocate"** (vLLM's default: ``allocate_slots`` caches blocks): a successful
  ``allocate`` (not one returning None) ends by hashing, in increasing index, every non-null
  table entry ``i`` without a hash whose block is full once the scheduled tokens are written:
  ``(i + 1) * b <= computed + pending`` counted *after* this allocation (never past
  ``len(tokens)``).  The hash and cache rules are the publish rules.  ``publish`` is a no-op
  returning 0 (strategies do not generate it in this mode).  A block can thus be hit before
  its KV is written; that is legal because the engine writes a whole step before attention
  reads it.  The driver models that step (:mod:`fuzzkit.targets.paged_kv.driver`): under "allocate",
  each ``write``/``forward`` first writes the KV of *every* request's scheduled tokens, then
  reads; and ``finish``/``preempt`` of a request with scheduled, unwritten tokens first writes
  them (its step is in flight: vLLM returns such a request's blocks to the pool only after the
  step completes, ``deferred_frees``), so a block hashed at allocation is never left cached
  without its KV.  A hit on a block that no step will write (hashed past the scheduled tokens)
  is still a read of unwritten KV, caught by the semantic check.

Capabilities
------------
A manager class declares what it implements in a class attribute ``capabilities =
Capabilities(...)`` (see :class:`Capabilities`): eviction policies, fork, window modes, hashing
modes, extra keys, reset.  fuzzkit then draws only cases within them for it, and a case outside
them (a saved case, a replay) is *not run*: the implementation raises
:class:`fuzzkit.target.Unsupported` and the engines count it as skipped, never as passed.  A
class written before capabilities existed may declare only ``eviction_policies`` (a tuple of
names); one with neither implements the defaults ("lru", fork, "trim", "publish", both extra
keys, reset).  See :func:`capabilities_of` and :func:`unsupported`.

A manager class may also declare ``thresholds``
(``fuzzkit.reach.Threshold`` records, or a zero-argument callable returning them): the sizes
where its code changes path -- "live_requests", "table_blocks", "request_id" ... as measured
by :mod:`fuzzkit.targets.paged_kv.sizes` -- which the strategy then aims at.

Operations on an unknown request id return None and change nothing; so does ``add_request``
with an id that exists.  A request "holds no blocks" when its table is empty (a table trimmed
to null entries is not empty).

Types (what the driver passes and what it expects back)
-------------------------------------------------------
"int" means a Python ``int`` or a NumPy integer, never a ``bool``.

* Arguments: ``rid``, ``src``, ``dst``, ``num_tokens`` are ints; ``tokens`` is a list of ints;
  ``adapter`` and ``salt`` are an int or None; ``__init__`` gets a :class:`Config` (and, for
  ``--guarded``, the keyword ``guard=``).
* ``add_request``, ``commit``, ``publish``, ``append``, ``trim``: an int, or None for an unknown
  request.  ``fork``, ``preempt``, ``finish``: a bool, or None.  ``reset_prefix_cache``: a bool.
  The driver records them as they are and the oracle compares them with the reference's.
* ``allocate``: an :class:`Allocation` (any object with int attributes ``computed`` and
  ``scheduled`` and an iterable ``copies`` of ``(src, dst)`` int pairs), or None for "does not
  fit".
* ``block_table``: a sequence of int block ids (a list, or a 1-D integer array), 0 for a null
  entry.  ``num_free_blocks``: an int.
* ``inspect()`` (optional, :class:`InspectableManager`): a dict with exactly these fields, all
  ints as above -- checked by :func:`fuzzkit.targets.paged_kv.driver.checked_inspection` before any
  invariant reads them, which raises ``ProtocolTypeError`` naming the first wrong field:

  ===================  =============================================================
  ``ref_cnt``          ``{block id: reference count}``, blocks ``1 .. num_blocks-1``
  ``block_hash``       ``{block id: hash or None}`` -- **hashes are ints**: an engine
                       with bytes or string hashes converts them in its adapter (e.g.
                       ``int.from_bytes(h, "big")``) so that equal hashes stay equal
  ``free_queue``       ``[block id, ...]``, front (next to be handed out) first
  ``cached``           ``{hash: [block id, ...]}``, the blocks cached under each hash,
                       published first first
  ``tables``           ``{request id: [block id, ...]}``, as ``block_table`` returns
  ``tokens_in_table``  ``{request id: tokens the table covers}`` (see
                       :class:`InspectableManager`)
  ===================  =============================================================

* Class attributes (optional): ``capabilities`` (:class:`Capabilities`), or the older
  ``eviction_policies``, a tuple of policy names; ``thresholds``
  (see above); ``code_under_test``, a tuple of top-level package names (``("vllm",)``) that a
  crash is blamed on before the adapter's own frames -- by default the package of the module
  given to ``--impl``, wherever it is installed (:func:`fuzzkit.runner.code_under_test`).

KVGuard events
--------------
``fuzzkit run paged_kv --impl X --guarded`` (or ``--impl 'X[guarded]'``) constructs the class as
``X(config, guard=guard)`` and runs every forward pass through the guarded Triton kernels; a
class whose ``__init__`` takes no ``guard=`` is refused (exit 2).  The guard
(:class:`fuzzkit.oracles.kvguard.KVGuard`) keeps its own account of every block and learns what the
manager does only from these calls, made *when the manager does it* (``request`` is the id of the
request the operation serves; blocks are ids, never the null block 0):

=======================================  ====================================================
``on_hits(request, blocks)``             an admission's lookup found these hit blocks, before
                                         any of them is pinned
``on_share(request, block)``             ``request`` takes a reference on a block with content
                                         (a pinned hit, a fork); clears it from the hits
``on_allocate(request, block)``          a block leaves the free queue for ``request`` as new
                                         content (after its eviction, if it had a hash); an
                                         allocation while hits are unpinned is a violation
``on_release(request, block)``           ``request`` drops one reference (finish, preempt,
                                         trim or eager window removal, the old side of a
                                         copy-on-write)
``on_publish(block, block_hash)``        the block gets its (int) hash and becomes cached
``on_evict(block)``                      the block loses its hash (eviction, reset)
``on_copy(src, dst)``                    a copy-on-write copy was applied (the driver calls it)
``on_step_end(request)``                 the end of one ``allocate`` (forgets unpinned hits)
=======================================  ====================================================

When the class has ``inspect()`` (:class:`InspectableManager`), the guarded driver also checks
its state against the guard's after every step.  The vLLM adapter emits these events from
wrappers around vLLM's ``BlockPool`` methods
(:class:`fuzzkit.targets.paged_kv.adapters.vllm_manager.BlockPoolEvents`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Protocol, Sequence, runtime_checkable


#: The eviction policies of the contract (module docstring), the default first.
EVICTIONS = ("lru", "session", "penelope")
#: Sliding-window semantics (module docstring, "Variants"), the default first.
WINDOW_MODES = ("trim", "eager")
#: When full blocks get their hash (module docstring, "Variants"), the default first.
HASHINGS = ("publish", "allocate")
#: The tagged extra keys a request may carry.
EXTRA_KEYS = ("adapter", "salt")


@dataclasses.dataclass(frozen=True)
class Config:
    num_blocks: int
    block_size: int
    sliding_window: Optional[int] = None
    eviction: str = "lru"
    window_mode: str = "trim"
    hashing: str = "publish"

    def __post_init__(self) -> None:
        for value, known, what in ((self.eviction, EVICTIONS, "eviction policy"),
                                   (self.window_mode, WINDOW_MODES, "window mode"),
                                   (self.hashing, HASHINGS, "hashing mode")):
            if value not in known:
                raise ValueError(  # pragma: no cover - validate() rejects unknown values
                    f"unknown {what} {value!r} (known: {', '.join(known)})")

    @property
    def eager(self) -> bool:
        """Eager window removal in effect (an "eager" mode with a window)."""
        return self.window_mode == "eager" and self.sliding_window is not None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Config":
        """A config dict without ``eviction``, ``window_mode`` or ``hashing`` takes the default
        ("lru", "trim", "publish"): cases saved before those fields existed load unchanged."""
        window = data.get("sliding_window")
        return cls(int(data["num_blocks"]), int(data["block_size"]),
                   None if window is None else int(window), str(data.get("eviction", "lru")),
                   str(data.get("window_mode", "trim")), str(data.get("hashing", "publish")))


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a manager implements of the contract (module docstring, "Capabilities").

    ``eviction_policies``: among :data:`EVICTIONS`; ``fork``: ``fork`` (and copy-on-write after
    it); ``windows``: the window modes (:data:`WINDOW_MODES`) it implements, ``()`` for none (no
    sliding window at all, no ``trim``); ``hashing``: among :data:`HASHINGS`; ``extra_keys``:
    the extra keys (:data:`EXTRA_KEYS`) its hash takes; ``reset``: ``reset_prefix_cache``."""

    eviction_policies: tuple[str, ...] = ("lru",)
    fork: bool = True  # fork / copy-on-write
    windows: tuple[str, ...] = ("trim",)  # sliding-window semantics implemented; () = none
    hashing: tuple[str, ...] = ("publish",)
    extra_keys: tuple[str, ...] = ("adapter", "salt")
    reset: bool = True  # reset_prefix_cache

    def __post_init__(self) -> None:
        for values, known, what in ((self.eviction_policies, EVICTIONS, "eviction policy"),
                                    (self.windows, WINDOW_MODES, "window mode"),
                                    (self.hashing, HASHINGS, "hashing mode"),
                                    (self.extra_keys, EXTRA_KEYS, "extra key")):
            unknown = [v for v in values if v not in known]
            if unknown:
                raise ValueError(f"Capabilities: unknown {what} {unknown[0]!r} (known: "
                                 f"{', '.join(known)})")
        if not self.eviction_policies or not self.hashing:
            raise ValueError("Capabilities: declare at least one eviction policy and one "
                             "hashing mode")


#: Everything the contract defines (what the reference implements).
ALL_CAPABILITIES = Capabilities(EVICTIONS, True, WINDOW_MODES, HASHINGS, EXTRA_KEYS, True)


def capabilities_of(manager_class: Any) -> Capabilities:
    """``manager_class.capabilities``; for a class that declares only the older
    ``eviction_policies``, those policies and the defaults for the rest; for one that declares
    neither, the defaults ("lru" only)."""
    declared = getattr(manager_class, "capabilities", None)
    if isinstance(declared, Capabilities):
        return declared
    if declared is not None:
        raise TypeError(f"{getattr(manager_class, '__name__', manager_class)}.capabilities "
                        f"must be a fuzzkit.targets.paged_kv.protocol.Capabilities, got "
                        f"{type(declared).__name__}")
    policies = getattr(manager_class, "eviction_policies", None)
    if policies is None:
        return Capabilities()
    return Capabilities(eviction_policies=tuple(policies))


def unsupported(capabilities: Capabilities, inputs: Mapping[str, Any]) -> Optional[str]:
    """Why a manager with ``capabilities`` cannot run the case ``inputs`` (the first variant it
    lacks), or None when it can.  Short and from a small set: the engines count skipped cases
    by this reason."""
    config = Config.from_json(inputs["config"])
    program = inputs.get("program") or []
    ops = {step.get("op") for step in program if isinstance(step, Mapping)}
    if config.eviction not in capabilities.eviction_policies:
        return f"eviction {config.eviction!r} not declared"
    if config.sliding_window is not None and config.window_mode not in capabilities.windows:
        return f"window mode {config.window_mode!r} not declared"
    if "trim" in ops and "trim" not in capabilities.windows:
        return "trim not declared"
    if config.hashing not in capabilities.hashing:
        return f"hashing {config.hashing!r} not declared"
    if "fork" in ops and not capabilities.fork:
        return "fork not declared"
    if "reset" in ops and not capabilities.reset:
        return "reset not declared"
    for key in EXTRA_KEYS:
        if key not in capabilities.extra_keys and any(
                isinstance(step, Mapping) and step.get("op") == "add"
                and step.get(key) is not None for step in program):
            return f"extra key {key!r} not declared"
    return None


def supports(manager_class: Any, eviction: str) -> bool:
    """Whether ``manager_class`` implements ``eviction`` (see :func:`capabilities_of`)."""
    return eviction in capabilities_of(manager_class).eviction_policies


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
    "tables": {rid: [block, ...]}, "tokens_in_table": {rid: tokens}}`` for blocks
    ``1 .. num_blocks-1``, where ``tokens`` is what the table covers: ``computed + pending``, or
    the end of the suffix while a refill (penelope) is open.  Every key and value is an int
    (hashes included) or, for ``block_hash`` values, None: see "Types" in the module docstring.
    """

    def inspect(self) -> dict[str, Any]: ...
