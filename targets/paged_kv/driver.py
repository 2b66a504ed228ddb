"""Drive a KV cache manager through a program, with a semantic model of KV memory.

The driver plays the model runner: it applies copy-on-write copies, *writes* KV for scheduled
tokens through the manager's block table, and *reads* it back the way attention would.  What it
writes into a slot is a **stamp**: the token prefix up to that position plus the request's extra
keys — exactly what the key/value vector at that position is a function of.  A read of position
``k`` by a request must find the stamp of *its own* prefix at ``k``.  That single check catches
cross-request bleed, stale reads after eviction, wrong prefix hits, hash collisions and
incomplete hash keys, in any manager, however it assigns physical blocks (block ids are never
compared with the reference).

Managers that expose :meth:`inspect` are also checked for the structural invariants after every
step, and under penelope eviction for the refill invariants: the blocks an admitted request
reuses (the hashed entries of its new table) are a prefix plus one contiguous suffix of its
usable blocks, and the positions it then computes are exactly the hole between them, in order,
before anything after the suffix.  The first violation stops the program: what follows it is
noise.

Under allocate hashing (``Config.hashing == "allocate"``, see "Variants" in
:mod:`.protocol`) a block is hashed, and can be hit, when it is scheduled, so the driver models
the engine's step: a ``write`` or ``forward`` first writes every request's scheduled tokens (the
whole batch), then reads; and a request released (``finish``, ``preempt``) with scheduled tokens
has them written first (its step is in flight).  A hit on a block that no step writes is still
a read of unwritten KV.
"""

from __future__ import annotations

import dataclasses
import itertools
import numbers
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Callable, Optional

from fuzzkit.targets.paged_kv.protocol import Allocation, Config

Stamp = tuple[tuple[int, ...], Optional[int], Optional[int]]
#: A stamp as KV memory holds it: ``(prefix id, adapter, salt)``, the prefix interned by the
#: driver (:meth:`Driver._key`), so that a read compares three numbers instead of two prefixes.
Key = tuple[int, Optional[int], Optional[int]]


class Violation(Exception):
    """A broken invariant, with a stable ``check`` name for the failure signature."""

    def __init__(self, check: str, message: str) -> None:  # pragma: no cover - on failure
        super().__init__(message)
        self.check = check


class ProtocolTypeError(TypeError):
    """A plug-in's ``inspect()`` returned a field of the wrong type (see
    :class:`~fuzzkit.targets.paged_kv.protocol.InspectableManager` for the types).  Raised by the driver
    before any check reads the state, so the message names the field, not a format call deep
    inside a structural check."""


def _is_int(value: Any) -> bool:
    """Python and NumPy integers; not bools (a bool where a count belongs is an adapter bug).
    A plain ``int`` is answered before the ABC check (millions of calls per run)."""
    kind = type(value)
    return kind is int or (kind is not bool and isinstance(value, numbers.Integral))


def _int_list(value: Any) -> bool:
    if isinstance(value, (str, bytes, Mapping)):
        return False
    try:
        return all(_is_int(v) for v in value)
    except TypeError:
        return False


#: ``inspect()``'s fields: (key check, value check, the types a message names).
_INSPECT_FIELDS: dict[str, tuple[Callable[[Any], bool], Callable[[Any], bool], str]] = {
    "ref_cnt": (_is_int, _is_int, "{block id (int): reference count (int)}"),
    "block_hash": (_is_int, lambda v: v is None or _is_int(v),
                   "{block id (int): block hash (int) or None}"),
    "cached": (_is_int, _int_list, "{block hash (int): [block id (int), ...]}"),
    "tables": (_is_int, _int_list, "{request id (int): [block id (int), ...]}"),
    "tokens_in_table": (_is_int, _is_int, "{request id (int): token count (int)}"),
}
#: Every field of ``inspect()``, in the order :func:`_plain_inspection` unpacks them.
_INSPECTED = ("free_queue", "ref_cnt", "block_hash", "cached", "tables", "tokens_in_table")
_INSPECTED_SET = frozenset(_INSPECTED)
assert _INSPECTED_SET == {"free_queue", *_INSPECT_FIELDS}


#: The exact types of a plain inspection (:func:`_plain_inspection`).
_INTS = frozenset({int})
_HASHES = frozenset({int, type(None)})
_LISTS = frozenset({list})


def _types(items: Iterable[Any]) -> set[type]:
    return set(map(type, items))


def _plain_inspection(state: Any) -> bool:
    """Whether ``state`` is made of exactly the plain types -- a dict of dicts and lists of
    ``int`` (hashes ``int`` or ``None``), what fuzzkit's managers return.  Such a state has the
    protocol's types, so :func:`checked_inspection` accepts it after one pass of C-level type
    lookups per field instead of an ABC check per entry (the wider types it also accepts, NumPy
    integers, tuples, other mappings, and every wrong type, take the entry-by-entry path)."""
    if type(state) is not dict or not state.keys() >= _INSPECTED_SET:
        return False
    queue, ref_cnt, block_hash, cached, tables, tokens = (state[f] for f in _INSPECTED)
    if type(queue) is not list or any(type(state[f]) is not dict for f in _INSPECT_FIELDS):
        return False
    lists = itertools.chain(cached.values(), tables.values())
    if not (_types(lists) <= _LISTS and _types(block_hash.values()) <= _HASHES):
        return False
    ints = itertools.chain(queue, ref_cnt, ref_cnt.values(), block_hash, cached, tables, tokens,
                           tokens.values(), *cached.values(), *tables.values())
    return _types(ints) <= _INTS


def checked_inspection(state: Any) -> dict[str, Any]:
    """``state`` (what ``inspect()`` returned) if every field has the protocol's type, else a
    :class:`ProtocolTypeError` naming the first field, entry and type that are wrong.  Hashes
    must be ints: an engine with bytes or string hashes converts them in its adapter (e.g.
    ``int.from_bytes(h, "big")``), so that equal hashes stay equal."""
    if _plain_inspection(state):  # the common case, at C speed; else entry by entry
        return dict(state)
    if not isinstance(state, Mapping):
        raise ProtocolTypeError(f"inspect() returned a {type(state).__name__}; expected a dict "
                                f"with the fields {', '.join(['free_queue', *_INSPECT_FIELDS])}")
    missing = [f for f in ("free_queue", *_INSPECT_FIELDS) if f not in state]
    if missing:
        raise ProtocolTypeError(f"inspect() has no field {', '.join(map(repr, missing))}")
    if not _int_list(state["free_queue"]):
        raise ProtocolTypeError("inspect()['free_queue'] must be a list of block ids (int), "
                                f"front first; got {_shown(state['free_queue'])}")
    for field, (key_ok, value_ok, expected) in _INSPECT_FIELDS.items():
        value = state[field]
        if not isinstance(value, Mapping):
            raise ProtocolTypeError(f"inspect()[{field!r}] must be a dict {expected}; got a "
                                    f"{type(value).__name__}")
        for key, item in value.items():
            if not key_ok(key) or not value_ok(item):
                raise ProtocolTypeError(f"inspect()[{field!r}] must be {expected}; got the entry "
                                        f"{_shown(key)}: {_shown(item)}")
    return dict(state)


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{text[:80]}{'...' if len(text) > 80 else ''} ({type(value).__name__})"


@dataclasses.dataclass
class _Refill:
    """An open penelope refill as the driver sees it: the hole ``next .. hole_end - 1`` must be
    scheduled next, in order; once it is written, scheduling resumes at ``suffix_end``."""

    next: int
    hole_end: int
    suffix_end: int
    written: bool = False


@dataclasses.dataclass
class _Shadow:
    """What the driver knows about a request independently of the manager."""

    tokens: list[int]
    adapter: Optional[int]
    salt: Optional[int]
    pending: list[int] = dataclasses.field(default_factory=list)  # positions to write
    refill: Optional[_Refill] = None
    #: ``keys[k]``: the memory key of position ``k`` (:meth:`Driver._key`), for the positions
    #: asked so far (tokens are append-only, so a position's key never changes)
    keys: list[Key] = dataclasses.field(default_factory=list)

    def stamp(self, position: int) -> Stamp:
        return (tuple(self.tokens[: position + 1]), self.adapter, self.salt)


class Driver:
    """``trusted``: the manager is fuzzkit's reference, whose ``inspect()`` builds plain dicts
    and lists of ints by construction: its states are checked for the invariants, not for their
    types (:func:`checked_inspection` stays for every manager under test)."""

    def __init__(self, manager: Any, config: Config, *, trusted: bool = False) -> None:
        self.manager = manager
        self.config = config
        self.trusted = trusted
        self.b = config.block_size
        self.memory: dict[int, Key] = {}  # slot -> stamp (as a key: :meth:`_key`)
        self.requests: dict[int, _Shadow] = {}
        #: interned token prefixes: ``(parent id, token) -> id``, and ``id -> (parent, token)``
        #: (id 0 is the empty prefix); equal prefixes have equal ids, whichever request wrote
        self.prefix_ids: dict[tuple[int, int], int] = {}
        self.prefixes: list[tuple[int, int]] = [(-1, 0)]
        self.inspectable = callable(getattr(manager, "inspect", None))
        self.checks_refills = self.inspectable and config.eviction == "penelope"
        # hashing "allocate": blocks are hashed when scheduled, so a step's batch writes every
        # scheduled token before any read (see :meth:`write`)
        self.step_writes = config.hashing == "allocate"

    # ------------------------------------------------------------------ operations

    def add(self, rid: int, tokens: list[int], adapter: Optional[int] = None,
            salt: Optional[int] = None) -> Any:
        result = self.manager.add_request(rid, list(tokens), adapter, salt)
        if rid not in self.requests:
            self.requests[rid] = _Shadow(list(tokens), adapter, salt)
        return result

    def allocate(self, rid: int, n: int) -> Any:
        admitting = (self.checks_refills and rid in self.requests
                     and not self.manager.block_table(rid))
        allocation: Optional[Allocation] = self.manager.allocate(rid, n)
        if allocation is None:
            return None
        shadow = self.requests[rid]
        if admitting:
            shadow.refill = self._admitted(rid, shadow, allocation)
        if shadow.refill is not None:
            self._check_refill_step(rid, shadow.refill, allocation)
            if shadow.refill.written:
                shadow.refill = None
        for src, dst in allocation.copies:
            self.copy_block(src, dst)
        start = allocation.computed
        shadow.pending.extend(range(start, start + allocation.scheduled))
        return {"computed": allocation.computed, "scheduled": allocation.scheduled}

    def copy_block(self, src: int, dst: int) -> None:
        """Copy-on-write: the KV moves with the block."""
        for s in range(self.b):
            if src * self.b + s in self.memory:
                self.memory[dst * self.b + s] = self.memory[src * self.b + s]

    def write(self, rid: int) -> Any:
        """The forward pass: write the scheduled tokens' KV, read what attention reads.

        Under hashing "allocate" a block is hashed -- and can be hit -- when it is scheduled, so
        the step is modelled as the engine runs it: every request's scheduled tokens are written
        (the whole batch) before this request's queries read.  Another request's tokens written
        here stay pending for its own ``write`` (which writes the same stamps again)."""
        shadow = self.requests.get(rid)
        if shadow is None:
            return self.manager.commit(rid)
        table = list(self.manager.block_table(rid))
        if self.step_writes:
            for other in self._pending_rids():
                self._store(other, self.requests[other])
        else:
            self._store(rid, shadow, table)
        if not self._reads_hold(shadow, table):
            self._check_reads(rid, shadow, table)
        shadow.pending = []
        if shadow.refill is not None and shadow.refill.next == shadow.refill.hole_end:
            shadow.refill.written = True
        return self.manager.commit(rid)

    def _reads_hold(self, shadow: _Shadow, table: list[int]) -> bool:
        """Whether every read of the pass (:meth:`_check_reads`) finds its own stamp.  Memory
        does not change while the queries read, so what a read finds depends on its key
        position only: each position any query's window holds is read once, here."""
        b, num_blocks, memory, key_of = self.b, self.config.num_blocks, self.memory, self._key
        try:
            for key in self._read_positions(shadow.pending):
                index = key // b
                if index >= len(table):
                    return False
                block = table[index]
                if not 0 < block < num_blocks or memory.get(block * b + key % b) != key_of(
                        shadow, key):
                    return False
        except TypeError:  # a table entry that is no block id: the full walk names it
            return False
        return True

    def _read_positions(self, queries: Iterable[int]) -> Iterator[int]:
        """Every key position some query's window holds, once each, ascending (a window ends
        at its query and starts no earlier than a later query's)."""
        end = -1
        for query in sorted(set(queries)):
            yield from range(max(self._window(query).start, end + 1), query + 1)
            end = query

    def _check_reads(self, rid: int, shadow: _Shadow, table: list[int]) -> None:
        """Every query's reads, in order: raises the first read that does not find its stamp."""
        for query in shadow.pending:
            for key in self._window(query):
                slot = self._slot(table, key, rid, "read")
                found = self.memory.get(slot)
                if found != self._key(shadow, key):  # pragma: no cover - a broken manager only
                    raise Violation("kv-content", self._describe_bad_read(rid, key, query, slot,
                                                                          found, shadow))

    def _store(self, rid: int, shadow: _Shadow, table: Optional[list[int]] = None) -> None:
        """Write the KV of ``rid``'s scheduled tokens through its block table."""
        if table is None:
            table = list(self.manager.block_table(rid))
        for position in shadow.pending:
            self.memory[self._slot(table, position, rid, "write")] = self._key(shadow, position)

    def _key(self, shadow: _Shadow, position: int) -> Key:
        """The stamp of ``position`` (:meth:`_Shadow.stamp`: the tokens up to it, at most all of
        them, and the extra keys) as memory holds it, its prefix interned."""
        if 0 <= position < len(shadow.keys):
            return shadow.keys[position]
        tokens, keys = shadow.tokens, shadow.keys
        # the last token the stamp holds (a negative position slices like the stamp's does)
        last = min(position, len(tokens) - 1) if position >= 0 else len(tokens[:position + 1]) - 1
        while len(keys) <= last:
            parent = keys[-1][0] if keys else 0
            link = (parent, tokens[len(keys)])
            prefix = self.prefix_ids.get(link)
            if prefix is None:
                prefix = self.prefix_ids[link] = len(self.prefixes)
                self.prefixes.append(link)
            keys.append((prefix, shadow.adapter, shadow.salt))
        if last < 0:  # no tokens: the empty prefix
            return (0, shadow.adapter, shadow.salt)
        return keys[last]

    def _stamp(self, key: Key) -> Stamp:
        """The stamp a memory key stands for (for messages)."""
        prefix, adapter, salt = key
        tokens = []
        while prefix:
            prefix, token = self.prefixes[prefix]
            tokens.append(token)
        return (tuple(reversed(tokens)), adapter, salt)

    def _land_in_flight(self, rid: int) -> None:
        """Hashing "allocate": a request released with scheduled tokens still has its step in
        flight; that step's KV is written before the blocks go back (vLLM frees them only after
        the step completes), so its blocks hashed at allocation hold what their hash says."""
        shadow = self.requests.get(rid)
        if self.step_writes and shadow is not None and shadow.pending:
            self._store(rid, shadow)

    def forward(self) -> Any:
        """One forward pass over every request with scheduled tokens, in request-id order."""
        return [[rid, self.write(rid)] for rid in self._pending_rids()]

    def _pending_rids(self) -> list[int]:
        return sorted(rid for rid, shadow in self.requests.items() if shadow.pending)

    def publish(self, rid: int) -> Any:
        return self.manager.publish(rid)

    def append(self, rid: int, tokens: list[int]) -> Any:
        result = self.manager.append(rid, list(tokens))
        if result is not None and rid in self.requests:
            self.requests[rid].tokens.extend(tokens)
        return result

    def fork(self, src: int, dst: int) -> Any:
        result = self.manager.fork(src, dst)
        if result and src in self.requests:
            s = self.requests[src]
            self.requests[dst] = _Shadow(list(s.tokens), s.adapter, s.salt, keys=list(s.keys))
        return result

    def preempt(self, rid: int) -> Any:
        self._land_in_flight(rid)
        result = self.manager.preempt(rid)
        if result and rid in self.requests:
            self.requests[rid].pending = []
            self.requests[rid].refill = None
        return result

    def trim(self, rid: int) -> Any:
        return self.manager.trim(rid)

    def finish(self, rid: int) -> Any:
        self._land_in_flight(rid)
        result = self.manager.finish(rid)
        if result:
            self.requests.pop(rid, None)
        return result

    def reset(self) -> Any:
        return self.manager.reset_prefix_cache()

    # ------------------------------------------------------------------ helpers

    def _window(self, query: int) -> range:
        w = self.config.sliding_window
        return range(0 if w is None else max(0, query - w + 1), query + 1)

    def _slot(self, table: list[int], position: int, rid: int, what: str) -> int:
        index = position // self.b
        if index >= len(table):
            raise Violation(f"kv-{what}-no-block",  # pragma: no cover - a broken manager only
                            f"request {rid} {what}s position {position}, but its block table has "
                            f"only {len(table)} entries")
        block = table[index]
        if block == 0:
            raise Violation(f"kv-{what}-null-block",  # pragma: no cover - a broken manager only
                            f"request {rid} {what}s position {position} through the null block "
                            f"(table entry {index})")
        if not 0 < block < self.config.num_blocks:  # pragma: no cover - a broken manager only
            raise Violation("kv-table-range", f"request {rid}: table entry {index} is block "
                                              f"{block}, outside the pool")
        return block * self.b + position % self.b

    def _describe_bad_read(self, rid: int, key: int, query: int, slot: int,
                           found_key: Optional[Key],
                           shadow: _Shadow) -> str:  # pragma: no cover - on failure only
        head = (f"request {rid} (query position {query}) reads position {key} from slot {slot} "
                f"(block {slot // self.b})")
        if found_key is None:
            return f"{head}: nothing was ever written there"
        found = self._stamp(found_key)
        tokens, adapter, salt = found
        if tokens == tuple(shadow.tokens[: key + 1]):
            return (f"{head}: same tokens but other extra keys (adapter={adapter}, salt={salt}; "
                    f"expected adapter={shadow.adapter}, salt={shadow.salt})")
        owner = [r for r, s in self.requests.items() if s.stamp(len(tokens) - 1) == found]
        whose = f" (request {owner[0]}'s)" if owner else ""
        return (f"{head}: it holds the KV of another prefix{whose}: position {len(tokens) - 1} "
                f"of {list(tokens)}, expected {list(shadow.tokens[: key + 1])}")

    # ------------------------------------------------------------------ penelope refills

    def _admitted(self, rid: int, shadow: _Shadow, allocation: Allocation) -> Optional[_Refill]:
        """Check what an admission reuses (the table entries that kept their hash: hits; new
        blocks have none) and where it starts computing; return the refill if it has a hole."""
        state = self.inspection()
        table = state["tables"].get(rid, [])
        start, end = allocation.computed, allocation.computed + allocation.scheduled
        written = range(0)  # allocate hashing: blocks this step fills are hashed, not reused
        if self.step_writes:
            written = range(-(-start // self.b), end // self.b)
        reused = [i for i, block in enumerate(table)
                  if block and state["block_hash"].get(block) is not None and i not in written]
        usable = max(0, (len(shadow.tokens) - 1) // self.b)
        prefix = next((k for k, i in enumerate(reused) if i != k), len(reused))
        suffix = reused[prefix:]
        start = suffix[0] if suffix else prefix
        if suffix != list(range(start, start + len(suffix))) or any(i >= usable for i in reused):
            raise Violation("refill-resident-set",  # pragma: no cover - a broken manager only
                            f"request {rid} reuses table entries {reused} of {usable} usable "
                            "blocks: not a prefix plus one contiguous suffix of usable blocks")
        if allocation.computed != prefix * self.b:
            raise Violation("refill-positions",  # pragma: no cover - a broken manager only
                            f"request {rid} reuses a prefix of {prefix} blocks but computes "
                            f"from position {allocation.computed}, not {prefix * self.b}")
        if not suffix:
            return None
        return _Refill(prefix * self.b, start * self.b, (start + len(suffix)) * self.b)

    def _check_refill_step(self, rid: int, refill: _Refill, allocation: Allocation) -> None:
        """Recomputed tokens are exactly the hole, in order; then the suffix is skipped."""
        start, end = allocation.computed, allocation.computed + allocation.scheduled
        if refill.written and start != refill.suffix_end:
            raise Violation("refill-positions",  # pragma: no cover - a broken manager only
                            f"request {rid}: the hole up to {refill.hole_end - 1} is computed "
                            f"and the suffix {refill.hole_end}..{refill.suffix_end - 1} is "
                            f"resident, so computing resumes at {refill.suffix_end}; the "
                            f"manager schedules {start}..{end - 1}")
        if not refill.written and (start != refill.next or end > refill.hole_end):
            raise Violation("refill-positions",  # pragma: no cover - a broken manager only
                            f"request {rid} must compute the hole {refill.next}.."
                            f"{refill.hole_end - 1} next, in order; the manager schedules "
                            f"{start}..{end - 1}")
        refill.next = max(refill.next, end)

    # ------------------------------------------------------------------ structure

    def inspection(self) -> dict[str, Any]:
        """The manager's ``inspect()``, its types checked unless the manager is ``trusted``."""
        state = self.manager.inspect()
        return state if self.trusted else checked_inspection(state)

    def check_structure(self) -> None:
        if not self.inspectable:  # pragma: no branch - fuzzkit's managers all inspect
            return
        self.check_state(self.inspection())

    def check_state(self, state: dict[str, Any]) -> None:
        """The invariants of one inspected state (a subclass adds its own checks)."""
        check_structure(state, self.config)


def check_structure(state: dict[str, Any], config: Config) -> None:
    """The structural invariants of docs/COMPONENTS.md §1 on an inspected manager state.

    They run after every step of every program, so they are decided first with set and counter
    arithmetic (:func:`_structure_holds`, linear in the state); only a state that fails there
    is walked block by block (:func:`_check_structure_entries`), which raises the first broken
    invariant with its message."""
    if not _structure_holds(state, config):
        _check_structure_entries(state, config)


def _structure_holds(state: dict[str, Any], config: Config) -> bool:
    """Whether every invariant of :func:`_check_structure_entries` holds, decided without its
    per-block scans of the free queue: the same conditions, as equalities of sets and counts.
    False for anything unusual (a ``None`` table entry, an unhashable block id): the entry walk
    judges those."""
    try:
        return _counts_hold(state, config) and _hashes_hold(state) and _lengths_hold(state,
                                                                                    config)
    except TypeError:
        return False


def _counts_hold(state: dict[str, Any], config: Config) -> bool:
    """Null block, duplicates, ``ref_cnt == holders``, ``ref_cnt == 0 <=> free`` and the block
    count.  With ``used`` the blocks ``1 .. n - 1`` of nonzero count: the counts equal the
    holders' exactly when ``used`` equals the holders within the pool; given that, "zero count
    <=> in the queue" is "the queue's blocks within the pool are the others"."""
    ref_cnt: dict[int, int] = state["ref_cnt"]
    queue: list[int] = state["free_queue"]
    tables: dict[int, list[int]] = state["tables"]
    n = config.num_blocks
    free = set(queue)
    if 0 in free or ref_cnt.get(0, 0) or len(free) != len(queue):
        return False
    if not config.sliding_window and any(0 in table for table in tables.values()):
        return False
    holders = Counter(itertools.chain.from_iterable(tables.values()))
    used = {b: count for b, count in ref_cnt.items() if count and 0 < b < n}
    if used != {b: count for b, count in holders.items() if 0 < b < n}:
        return False
    free_in_pool = {b for b in free if 0 < b < n}
    return (free_in_pool.isdisjoint(used) and len(free_in_pool) + len(used) == n - 1
            and len(queue) + len(used) + 1 == n)


def _hashes_hold(state: dict[str, Any]) -> bool:
    """Every cached block carries its hash, and every hashed block is cached: with each block
    listed once, the hashed blocks and the listed ones are the same map ``block -> hash`` (a
    block listed twice goes to the entry walk)."""
    block_hash: dict[int, Any] = state["block_hash"]
    cached: dict[Any, list[int]] = state["cached"]
    listed = {b: h for h, blocks in cached.items() for b in blocks}
    if len(listed) != sum(map(len, cached.values())):
        return False
    return listed == {b: h for b, h in block_hash.items() if h is not None}


def _lengths_hold(state: dict[str, Any], config: Config) -> bool:
    tokens = state["tokens_in_table"]
    b = config.block_size
    return all(len(table) == -(-tokens.get(rid, 0) // b) for rid, table in state["tables"].items())


def _check_structure_entries(state: dict[str, Any], config: Config) -> None:
    """The structural invariants entry by entry: raises the first :class:`Violation`."""
    ref_cnt: dict[int, int] = state["ref_cnt"]
    queue: list[int] = state["free_queue"]
    tables: dict[int, list[int]] = state["tables"]
    block_hash: dict[int, Any] = state["block_hash"]
    cached: dict[Any, list[int]] = state["cached"]
    if 0 in queue or ref_cnt.get(0, 0):  # pragma: no cover - a broken manager only
        raise Violation("null-block", "the null block 0 is in the free queue or counted as used")
    if not config.sliding_window:
        for rid, table in tables.items():
            if 0 in table:  # pragma: no cover - a broken manager only
                raise Violation("null-block", f"request {rid}'s table holds the null block "
                                              "without a sliding window")
    duplicates = [b for b, n in Counter(queue).items() if n > 1]
    if duplicates:  # pragma: no cover - a broken manager only
        raise Violation("free-queue-duplicate", f"blocks {duplicates} are in the free queue twice")
    holders = Counter(b for table in tables.values() for b in table if b != 0)
    for block in range(1, config.num_blocks):
        held = holders.get(block, 0)
        if ref_cnt.get(block, 0) != held:  # pragma: no cover - a broken manager only
            raise Violation("ref-cnt-holders", f"block {block}: ref_cnt {ref_cnt.get(block, 0)} "
                                               f"but {held} table entries hold it")
        in_queue = block in queue
        if (ref_cnt.get(block, 0) == 0) != in_queue:  # pragma: no cover - a broken manager only
            raise Violation("ref-cnt-free-queue",
                            f"block {block}: ref_cnt {ref_cnt.get(block, 0)} but "
                            f"{'in' if in_queue else 'not in'} the free queue")
    used = sum(1 for b in range(1, config.num_blocks) if ref_cnt.get(b, 0) > 0)
    if len(queue) + used + 1 != config.num_blocks:  # pragma: no cover - a broken manager only
        raise Violation("block-count", f"free {len(queue)} + used {used} + null 1 != "
                                       f"{config.num_blocks} blocks")
    for h, blocks in cached.items():
        for b in blocks:
            if block_hash.get(b) != h:  # pragma: no cover - a broken manager only
                raise Violation("stale-hash", f"block {b} is cached under hash {h:#x} but carries "
                                              f"{block_hash.get(b)!r} (evicted blocks must lose "
                                              "their hash)")
    listed = {b for blocks in cached.values() for b in blocks}
    for b, h in block_hash.items():
        if h is not None and b not in listed:  # pragma: no cover - a broken manager only
            raise Violation("stale-hash", f"block {b} keeps hash {h:#x} but is not in the cache")
    for rid, table in tables.items():
        tokens = state["tokens_in_table"].get(rid, 0)
        expected = -(-tokens // config.block_size)
        if len(table) != expected:  # pragma: no cover - a broken manager only
            raise Violation("table-length", f"request {rid}: block table has {len(table)} entries "
                                            f"for {tokens} tokens (expected {expected})")


#: Program operations: methods of the driver (looked up on the instance, so a subclass such as
#: the kernel driver can override them).
OPS = ("add", "allocate", "write", "forward", "publish", "append", "fork", "preempt", "trim",
       "finish", "reset")


def run_program(manager_factory: Callable[..., Any], inputs: dict[str, Any], *,
                guarded: bool = False,
                kernel_driver: Callable[..., Any] | None = None,
                trusted: bool = False) -> dict[str, Any]:
    """``inputs -> {"steps": [...], "violation": None | {...}}`` for one manager class.

    ``guarded``: the manager gets a :class:`~fuzzkit.oracles.kvguard.KVGuard` (it must accept
    ``guard=``) and every forward pass runs the guarded Triton kernels
    (:class:`~fuzzkit.targets.paged_kv.kernel_driver.KernelDriver`, or ``kernel_driver``: a subclass
    whose forward passes launch another engine's kernels).  ``trusted``: the manager is fuzzkit's
    reference (see :class:`Driver`).
    """
    from fuzzkit.oracles.kvguard import GuardViolation, KVGuard

    config = Config.from_json(inputs["config"])
    guard = None
    if guarded:  # pragma: no branch - one implementation takes each side
        from fuzzkit.targets.paged_kv.kernel_driver import KernelDriver

        guard = KVGuard(config.num_blocks, config.block_size,
                        sliding_window=config.sliding_window)
        driver: Driver = (kernel_driver or KernelDriver)(
            manager_factory(config, guard=guard), config, guard, inputs.get("kv_values"))
    else:
        driver = Driver(manager_factory(config), config, trusted=trusted)
    steps: list[dict[str, Any]] = []
    for index, step in enumerate(inputs["program"]):
        op = step["op"]
        arguments = {k: v for k, v in step.items() if k != "op"}
        if guard is not None:  # pragma: no branch - one implementation takes each side
            guard.step = index
        try:
            if op not in OPS:  # pragma: no cover - defensive: strategies emit only OPS
                raise ValueError(f"program step uses unknown operation {op!r}")
            result = getattr(driver, op)(**arguments)
            driver.check_structure()
        except Violation as violation:  # pragma: no cover - a broken manager only
            return {"steps": steps, "violation": {"kind": "invariant", "step": index, "op": op,
                                                   "check": violation.check,
                                                   "message": str(violation)}}
        except GuardViolation as violation:  # pragma: no cover - a broken manager only
            return {"steps": steps, "violation": {"kind": "guard", "step": index, "op": op,
                                                   "check": f"{violation.check_class}/"
                                                            f"{violation.check}",
                                                   "message": str(violation)}}
        steps.append({"op": op, "result": result, "free": driver.manager.num_free_blocks()})
    return {"steps": steps, "violation": None}
