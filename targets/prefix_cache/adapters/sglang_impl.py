"""SGLang's real ``RadixCache`` and token-to-KV-slot allocator as the ``sglang`` implementation.

The driver plays SGLang's scheduler over the real tree (``sglang/srt/mem_cache/radix_cache.py``
of the pinned wheel, loaded by :mod:`.sglang_load`; the shims are listed there) and the real
allocator (``TokenToKVPoolAllocator`` for page size 1, ``PagedTokenToKVPoolAllocator`` above it,
its pure-torch ``alloc_extend_naive`` path), step by step as :mod:`fuzzkit.targets.prefix_cache.program`
spells out: ``match_prefix`` + ``lock`` + ``evict`` + ``alloc`` / ``alloc_extend`` at admission,
``RadixCache.checkpoint`` for caching, ``free_segments`` + ``unlock`` at release.

It also models the KV memory: every slot the allocator hands out gets the value the model would
compute for that token at that position with that prefix (:func:`program.chained`), written by
the driver.  After every step the semantic oracle checks (first violation reported, the program
stops there):

* ``kv``: every slot the cache returns for a prefix, every slot of the tree and every slot of a
  live request's row holds exactly the value of its own prefix;
* ``slots``: no slot both free in the allocator and referenced by the tree or a request, no page
  owned twice, free pages listed once, and every page free or owned (no leak);
* ``locks``: every node's lock count is the number of live holders (requests, pins) whose
  locked path passes through it; a locked node is still in the tree (never evicted);
* ``sizes``: ``evictable_size_`` / ``protected_size_`` are the token counts of the unlocked /
  locked nodes; ``evictable_leaves`` is exactly the unlocked childless nodes;
* ``tree``: child keys are their child's first page, node lengths whole pages, values as long as
  keys, parent links consistent, a match's length equals its path's.

Determinism: ``radix_cache.time`` is replaced, for the duration of a run, by a counter clock
(``monotonic()`` returns 1, 2, 3, ...).  SGLang orders leaves by ``last_access_time`` and breaks
ties by heap position over a ``set`` of nodes (object addresses), so with the wall clock two
leaves stamped in one tick would be evicted in an order that changes between runs; with the
counter no two stamps are equal and the order is the one the reference predicts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from array import array
from typing import Any, Iterator

from fuzzkit.targets.prefix_cache import program as prog
from fuzzkit.targets.prefix_cache.adapters import sglang_load

unavailable = sglang_load.unavailable


class CounterClock:
    """Stands in for the ``time`` module inside radix_cache.py: a strictly increasing counter."""

    def __init__(self) -> None:
        self.now = 0

    def monotonic(self) -> float:
        self.now += 1
        return float(self.now)

    def perf_counter(self) -> float:  # eviction metrics only (disabled)
        return 0.0


@dataclasses.dataclass
class KvInfo:
    """The fields of SGLang's ``ReqKvInfo`` that RadixCache reads and writes."""

    req_pool_idx: int
    cache_protected_len: int = 0
    cache_inserted_len: int = 0
    swa_evict_floor: int = 0


@dataclasses.dataclass
class Request:
    """The fields of SGLang's ``Req`` that ``RadixCache.checkpoint`` reads and writes."""

    rid: Any
    tokens: array
    origin_input_ids: array
    kv: KvInfo
    lock: Any = None
    last_node: Any = None
    extra_key: Any = None
    cache_salt: Any = None
    priority: Any = None

    @property
    def full_untruncated_fill_ids(self) -> array:
        return self.tokens


class Violation(Exception):
    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check, self.message = check, message


def row_shape(program: list[dict[str, Any]], page_size: int) -> tuple[int, int]:
    """Rows and tokens per row the request table needs: one row per request id (a released
    request's row is reused), each as long as the id's longest add plus all its appends,
    page-rounded, plus a page."""
    sizes: dict[Any, int] = {}
    for op in program:
        rid = op.get("rid")
        if op["op"] in ("add", "append") and isinstance(rid, int):
            sizes[rid] = sizes.get(rid, 0) + len(op["tokens"])
    longest = max(sizes.values(), default=1)
    return len(sizes) + 1, -(-longest // page_size) * page_size + page_size


class Driver:
    """The scheduler's steps over the real tree and allocator, with the KV memory model."""

    def __init__(self, config: prog.Config, program: list[dict[str, Any]]) -> None:
        import torch

        self.torch = torch
        mods = sglang_load.modules()
        self.radix, self.base = mods.radix, mods.base
        self.ps = config.page_size
        self.num_pages = config.num_pages
        size = self.ps * config.num_pages
        if self.ps == 1:
            self.allocator = mods.alloc.token.TokenToKVPoolAllocator(
                size, torch.float16, "cpu", None, config.need_sort)
        else:
            self.allocator = mods.alloc.paged.PagedTokenToKVPoolAllocator(
                size, self.ps, torch.float16, "cpu", None, config.need_sort)
        rows, width = row_shape(program, self.ps)
        self.rows = sglang_load.RowPool(rows, width)
        self.free_rows = list(range(rows - 1, -1, -1))
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams

        self.tree = self.radix.RadixCache(CacheInitParams(
            disable=False, req_to_token_pool=self.rows,
            token_to_kv_pool_allocator=self.allocator, page_size=self.ps))
        self.requests: dict[Any, Request] = {}
        self.pins: dict[Any, Any] = {}
        self.kv: dict[int, int] = {}

    # ------------------------------------------------------------------ helpers

    def key(self, tokens: Any, limit: int | None = None) -> Any:
        return self.radix.RadixKey(array("q", tokens), limit=limit)

    def row(self, req: Request) -> Any:
        return self.rows.req_to_token[req.kv.req_pool_idx]

    def check_prefix(self, tokens: list[int], indices: Any, what: str) -> None:
        want = prog.chained(tokens[: len(indices)])
        for pos, slot in enumerate(indices.tolist()):
            if self.kv.get(slot) != want[pos]:
                raise Violation("kv", f"{what}: slot {slot} returned for position {pos} holds "
                                      f"the KV of another prefix (or none)")

    def make_room(self, new_tokens: int) -> int:
        estimate = new_tokens + (self.ps if self.ps > 1 else 0)
        shortfall = estimate - self.allocator.available_size()
        if shortfall <= 0:
            return 0
        return self.tree.evict(self.base.EvictParams(num_tokens=shortfall)).num_tokens_evicted

    def allocate(self, row: Any, before: int, after: int) -> Any:
        torch = self.torch
        if self.ps == 1:
            return self.allocator.alloc(after - before)
        new_pages = -(-after // self.ps) - -(-before // self.ps)
        prefix = torch.tensor([before], dtype=torch.int64)
        seq = torch.tensor([after], dtype=torch.int64)
        last = torch.tensor([int(row[before - 1]) if before else -1], dtype=torch.int64)
        return self.allocator.alloc_extend(prefix, prefix.clone(), seq, seq.clone(), last,
                                           after - before, num_new_pages=new_pages)

    def write(self, tokens: list[int], start: int, slots: Any) -> None:
        values = prog.chained(tokens)
        for i, slot in enumerate(slots.tolist()):
            self.kv[slot] = values[start + i]

    # ------------------------------------------------------------------ the steps

    def add(self, rid: Any, tokens: list[int]) -> dict[str, Any]:
        result = self.tree.match_prefix(self.base.MatchPrefixParams(
            key=self.key(tokens, limit=len(tokens) - 1)))
        m, node = result.device_prefix_len, result.last_device_node
        prefix = self.tree.path_device_indices(node)
        if len(prefix) != m:
            raise Violation("tree", f"match reported {m} tokens, its node's path holds "
                                    f"{len(prefix)}")
        self.check_prefix(tokens, prefix, "add's match")
        lock = self.tree.lock(node)
        evicted = self.make_room(len(tokens) - m)
        row_index = self.free_rows[-1]
        row = self.rows.req_to_token[row_index]
        row[:m] = prefix
        slots = self.allocate(row, m, len(tokens))
        if slots is None:
            self.tree.unlock(lock)
            return {"admitted": False, "prefix": m, "evicted": evicted}
        self.free_rows.pop()
        row[m: len(tokens)] = slots
        self.write(tokens, m, slots)
        self.requests[rid] = Request(
            rid, array("q", tokens), array("q", tokens),
            KvInfo(row_index, cache_protected_len=m), lock=lock, last_node=node)
        return {"admitted": True, "prefix": m, "evicted": evicted}

    def append(self, req: Request, tokens: list[int]) -> dict[str, Any]:
        n = len(req.tokens)
        evicted = self.make_room(len(tokens))
        row = self.row(req)
        slots = self.allocate(row, n, n + len(tokens))
        if slots is None:
            return {"appended": False, "evicted": evicted}
        row[n: n + len(tokens)] = slots
        req.tokens.extend(tokens)
        self.write(list(req.tokens), n, slots)
        return {"appended": True, "evicted": evicted}

    def checkpoint(self, req: Request) -> dict[str, int]:
        before = self.allocator.available_size()
        self.tree.checkpoint(req, up_to=len(req.tokens))
        return {"protected": req.kv.cache_protected_len,
                "deduplicated": self.allocator.available_size() - before}

    def release(self, rid: Any, cache: bool) -> dict[str, int]:
        req = self.requests[rid]
        result = self.checkpoint(req) if cache else {}
        before = self.allocator.available_size()
        start, end = req.kv.cache_protected_len, len(req.tokens)
        self.allocator.free_segments([(self.row(req)[start:end], start)])
        self.tree.unlock(req.lock)
        req.lock = None
        del self.requests[rid]
        self.free_rows.append(req.kv.req_pool_idx)
        return {**result, "freed": self.allocator.available_size() - before}

    def match(self, tokens: list[int]) -> dict[str, int]:
        result = self.tree.match_prefix(self.base.MatchPrefixParams(key=self.key(tokens)))
        path = self.tree.path_device_indices(result.last_device_node)
        if len(path) != result.device_prefix_len:
            raise Violation("tree", f"match reported {result.device_prefix_len} tokens, its "
                                    f"node's path holds {len(path)}")
        self.check_prefix(tokens, path, "match")
        return {"prefix": result.device_prefix_len}

    def lock(self, pin: Any, tokens: list[int]) -> dict[str, int]:
        result = self.tree.match_prefix(self.base.MatchPrefixParams(key=self.key(tokens)))
        self.check_prefix(tokens, self.tree.path_device_indices(result.last_device_node), "lock")
        self.pins[pin] = self.tree.lock(result.last_device_node)
        return {"prefix": result.device_prefix_len}

    def unlock(self, pin: Any) -> dict[str, bool]:
        lock = self.pins.pop(pin, None)
        self.tree.unlock(lock)
        return {"unlocked": lock is not None}

    def reset(self) -> dict[str, bool]:
        if self.requests or self.pins:
            return {"reset": False}
        self.tree.reset()
        self.allocator.clear()
        return {"reset": True}

    def step(self, op: dict[str, Any]) -> Any:
        kind, rid = op["op"], op.get("rid")
        if kind == "add" and (rid in self.requests or not op["tokens"]):
            return prog.SKIPPED
        if kind in prog.REQUEST_OPS and rid not in self.requests:
            return prog.SKIPPED
        if kind == "add":
            return self.add(rid, list(op["tokens"]))
        if kind == "append":
            return self.append(self.requests[rid], list(op["tokens"]))
        if kind == "checkpoint":
            return self.checkpoint(self.requests[rid])
        if kind in ("finish", "abort"):
            return self.release(rid, cache=kind == "finish")
        if kind == "match":
            return self.match(list(op["tokens"]))
        if kind == "lock":
            return prog.SKIPPED if op["pin"] in self.pins else self.lock(op["pin"],
                                                                          list(op["tokens"]))
        if kind == "unlock":
            return self.unlock(op["pin"])
        if kind == "evict":
            return {"evicted": self.tree.evict(
                self.base.EvictParams(num_tokens=op["n"])).num_tokens_evicted}
        if kind == "reset":
            return self.reset()
        raise ValueError(f"unknown op {kind!r}")

    def state(self) -> dict[str, int]:
        return {"evictable": int(self.tree.evictable_size()),
                "protected": int(self.tree.protected_size()),
                "available": int(self.allocator.available_size()),
                "cached": int(self.tree.total_size())}

    # ------------------------------------------------------------------ the semantic oracle

    def nodes(self) -> Iterator[tuple[Any, list[int]]]:
        """Every node below the root with the tokens of its path, checking the links."""
        root = self.tree.root_node
        stack = [(root, [])]
        while stack:
            node, path = stack.pop()
            for child_key, child in node.children.items():
                if child.parent is not node:
                    raise Violation("tree", "a child's parent link does not point back")
                if child_key != child.key.child_key(self.ps):
                    raise Violation("tree", f"child stored under {child_key!r}, its first page "
                                            f"is {child.key.child_key(self.ps)!r}")
                tokens = path + list(child.key.token_ids)
                yield child, tokens
                stack.append((child, tokens))

    def check(self) -> None:
        ps, tree = self.ps, self.tree
        nodes = list(self.nodes())  # the links first: a broken one explains everything else
        owner: dict[int, str] = {}
        tree_slots: set[int] = set()
        locks: dict[int, int] = {}
        holders = [(f"request {r.rid!r}", r.lock) for r in self.requests.values()]
        holders += [(f"pin {pin!r}", lock) for pin, lock in self.pins.items()]
        for who, lock in holders:
            node = lock.node if lock is not None else tree.root_node
            while node is not tree.root_node:
                parent = node.parent
                if parent is None or parent.children.get(node.key.child_key(ps)) is not node:
                    raise Violation("locks", f"{who}'s locked node left the tree")
                locks[id(node)] = locks.get(id(node), 0) + 1
                node = parent
        evictable = protected = 0
        leaves = set()
        for node, tokens in nodes:
            n = len(node.key)
            if n == 0 or n % ps or len(node.value) != n:
                raise Violation("tree", f"node of {n} tokens holds {len(node.value)} slots "
                                        f"(page size {ps})")
            if node.lock_ref != locks.get(id(node), 0):
                raise Violation("locks", f"node lock_ref {node.lock_ref}, live requests "
                                         f"through it {locks.get(id(node), 0)}")
            if node.lock_ref:
                protected += n
            else:
                evictable += n
                if not node.children:
                    leaves.add(id(node))
            want = prog.chained(tokens)
            start = len(tokens) - n
            for i, slot in enumerate(node.value.tolist()):
                if self.kv.get(slot) != want[start + i]:
                    raise Violation("kv", f"tree slot {slot} at position {start + i} holds the "
                                          f"KV of another prefix")
                if slot in tree_slots:
                    raise Violation("slots", f"slot {slot} cached twice in the tree")
                tree_slots.add(slot)
                owner[slot // ps] = "tree"
        if (tree.evictable_size_, tree.protected_size_) != (evictable, protected):
            raise Violation("sizes", f"evictable/protected {tree.evictable_size_}/"
                                     f"{tree.protected_size_}, the nodes say {evictable}/"
                                     f"{protected}")
        if {id(x) for x in tree.evictable_leaves} != leaves:
            raise Violation("sizes", f"evictable_leaves has {len(tree.evictable_leaves)} nodes, "
                                     f"{len(leaves)} unlocked childless nodes exist")
        for req in self.requests.values():
            row = self.row(req)[: len(req.tokens)].tolist()
            want = prog.chained(req.tokens)
            for pos, slot in enumerate(row):
                if self.kv.get(slot) != want[pos]:
                    raise Violation("kv", f"request {req.rid!r}: slot {slot} of position {pos} "
                                          f"holds the KV of another prefix")
            protected_len = req.kv.cache_protected_len
            if any(slot not in tree_slots for slot in row[:protected_len]):
                raise Violation("slots", f"request {req.rid!r}: its tree-owned prefix is not "
                                         f"all in the tree")
            for page in {slot // ps for slot in row[protected_len:]}:
                if page in owner:
                    raise Violation("slots", f"page {page} of request {req.rid!r} also owned by "
                                             f"{owner[page]}")
                owner[page] = f"request {req.rid!r}"
        free = self.allocator.get_all_free_pages().tolist()
        if len(set(free)) != len(free):
            raise Violation("slots", "a page is listed free twice")
        for page in free:
            if page in owner:
                raise Violation("slots", f"page {page} is free and owned by {owner[page]}")
        leaked = set(range(1, self.num_pages + 1)) - set(free) - set(owner)
        if leaked or len(free) + len(owner) != self.num_pages:
            raise Violation("slots", f"{len(leaked)} page(s) neither free nor owned (leak), "
                                     f"{len(free)} free + {len(owner)} owned of "
                                     f"{self.num_pages}")


@contextlib.contextmanager
def counter_clock(tree: Any) -> Iterator[None]:
    """The counter clock in the module that defines ``tree``'s class (a mutant's private copy
    of radix_cache.py has its own ``time``)."""
    module = sys.modules[type(tree).__module__]
    saved = module.time
    module.time = CounterClock()
    try:
        yield
    finally:
        module.time = saved


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    """The ``sglang`` implementation: the program over the real RadixCache and allocator."""
    config = prog.Config.from_json(inputs["config"])
    program = inputs["program"]
    driver = Driver(config, program)
    steps: list[dict[str, Any]] = []
    violation = None
    with counter_clock(driver.tree):
        for index, op in enumerate(program):
            try:
                result = driver.step(op)
                state = driver.state()
                driver.check()
            except Violation as exc:
                violation = {"step": index, "op": op["op"], "check": exc.check,
                             "message": exc.message}
                break
            steps.append({"op": op["op"], "result": result, "state": state})
    return {"steps": steps, "violation": violation}
