"""The reference: SGLang's documented prefix-cache policy as plain sets, dicts and counters.

No tree, no slots.  The cache is a dict ``nodes`` from the token tuple that *ends* a node (a
segment of the radix tree) to its recency stamp; a node's parent is the longest proper prefix of
its end that ends another node (the root is ``()``; remembered in ``parent`` when a node is
added, so that the policy stays linear in the cache), and the node holds the tokens between.
Node ends are kept because they are observable: eviction removes whole leaf nodes, and a node
end appears exactly where SGLang splits (see the walk below) and disappears only with eviction
(nodes never merge again).  Everything else is derived on demand from this dict:

* **cached prefix** of a key: the longest page multiple ``m`` with ``key[:m]`` a prefix of some
  node end (pages of ``page_size`` tokens; a key is cut to whole pages first);
* **locks**: each live request (and each ``lock`` pin) holds one lock on a node end ``F``; a
  node is locked while some ``F`` extends its end.  ``protected`` = tokens of locked nodes,
  ``evictable`` = the rest;
* **recency**: one logical clock.  A walk (a lookup or an insert) stamps every node it enters
  with one tick -- the nodes whose ends lie on the cached prefix and the node the prefix ends
  inside -- and every node it creates with a later tick each.  SGLang stamps with
  ``time.monotonic()``; the adapter replaces that clock with a counter, so both order the same
  events the same way and no two leaves ever tie;
* **a walk** ending inside a node splits it there (a new node end at the cached prefix); an
  insert then adds the uncached rest as one new leaf;
* **eviction of n tokens**: while fewer than n are freed, drop the unlocked leaf with the oldest
  stamp (whole node, all its pages);
* **KV pages**: a counter of free pages.  A request owns the pages of its tokens past its
  protected (tree-owned) prefix; the tree owns a node's pages; freeing returns them.

The request life cycle is the scheduler's (``add``: match, lock, evict the shortfall, allocate;
``append``: decode tokens; ``checkpoint``: cache the unfinished request; ``finish`` / ``abort``:
release with or without caching), as written out step by step in
:mod:`fuzzkit.targets.prefix_cache.program`.  Outputs: ``{"steps": [{"op", "result", "state"}],
"violation": null}``; ``state`` is ``{"evictable", "protected", "available", "cached"}``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fuzzkit.targets.prefix_cache import program as prog

Key = tuple[int, ...]


@dataclasses.dataclass
class Request:
    tokens: list[int]
    prompt_len: int
    protected: int  # tree-owned prefix of the row (page multiple)
    lock: Key  # the node end this request locks (() = the root: nothing)


class Model:
    """The policy on a dict of node ends (see the module docstring)."""

    def __init__(self, page_size: int, num_pages: int) -> None:
        self.ps = page_size
        self.num_pages = num_pages
        self.free_pages = num_pages
        self.nodes: dict[Key, int] = {}
        self.parent: dict[Key, Key] = {}
        self.clock = 0
        self.requests: dict[Any, Request] = {}
        self.pins: dict[Any, Key] = {}

    # ---------------------------------------------------------------- derived views

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def aligned(self, tokens: list[int]) -> Key:
        return tuple(tokens[: len(tokens) // self.ps * self.ps])

    def length(self, end: Key) -> int:
        return len(end) - len(self.parent[end])

    def add_node(self, end: Key, stamp: int) -> None:
        """A new node end: its parent is the longest proper prefix that ends a node; the nodes
        that hung from that parent below ``end`` now hang from ``end``."""
        parent = next((end[:cut] for cut in range(len(end) - 1, 0, -1)
                       if end[:cut] in self.nodes), ())
        for other, above in self.parent.items():
            if above == parent and other[: len(end)] == end:
                self.parent[other] = end
        self.parent[end] = parent
        self.nodes[end] = stamp

    def cached_prefix(self, key: Key) -> int:
        best = 0
        for end in self.nodes:
            common = 0
            for a, b in zip(end, key):
                if a != b:
                    break
                common += 1
            best = max(best, common)
        return best // self.ps * self.ps

    def holders(self) -> list[Key]:
        return [r.lock for r in self.requests.values()] + list(self.pins.values())

    def locked(self) -> set[Key]:
        """The locked node ends: every end on the path to a holder's lock."""
        out: set[Key] = set()
        for end in self.holders():
            while end:
                out.add(end)
                end = self.parent[end]
        return out

    def state(self) -> dict[str, int]:
        protected = sum(self.length(e) for e in self.locked())
        cached = sum(self.length(e) for e in self.nodes)
        return {"evictable": cached - protected, "protected": protected,
                "available": self.free_pages * self.ps, "cached": cached}

    # ---------------------------------------------------------------- tree operations

    def walk(self, key: Key) -> int:
        """Stamp the path of ``key``'s cached prefix, split where it ends inside a node; return
        the cached prefix length (the part of a lookup and of an insert they share)."""
        m = self.cached_prefix(key)
        if m == 0:
            return 0
        now = self.tick()
        inside = None
        for end in self.nodes:
            if end[:m] == key[:m]:
                if len(end) <= m:
                    self.nodes[end] = now
                elif inside is None or len(end) < len(inside):
                    inside = end
        if inside is not None and key[:m] not in self.nodes:
            # the lookup ends inside the node ``inside``: it is entered (stamped), then split at
            # m; the upper half is a new node, created after the entry
            self.nodes[inside] = now
            self.add_node(key[:m], self.tick())
        return m

    def match(self, tokens: list[int]) -> int:
        key = self.aligned(tokens)
        if not key:
            return 0
        return self.walk(key)

    def insert(self, key: Key) -> int:
        if not key:
            return 0
        m = self.walk(key)
        if m < len(key):
            self.add_node(key, self.tick())
        return m

    def evict(self, num_tokens: int) -> int:
        evicted = 0
        locked = self.locked()  # no lock changes hands during an eviction
        while evicted < num_tokens:
            inner = set(self.parent.values())
            leaves = [e for e in self.nodes if e not in inner and e not in locked]
            if not leaves:
                break
            victim = min(leaves, key=lambda e: self.nodes[e])
            size = self.length(victim)
            del self.nodes[victim], self.parent[victim]
            evicted += size
            self.free_pages += size // self.ps
        return evicted

    # ---------------------------------------------------------------- the scheduler's steps

    def pages(self, tokens: int) -> int:
        return -(-tokens // self.ps)

    def make_room(self, new_tokens: int, new_pages: int) -> tuple[bool, int]:
        """Evict the shortfall of the scheduler's estimate, then check the pages fit."""
        estimate = new_tokens + (self.ps if self.ps > 1 else 0)
        shortfall = estimate - self.free_pages * self.ps
        evicted = self.evict(shortfall) if shortfall > 0 else 0
        return new_pages <= self.free_pages, evicted

    def add(self, rid: Any, tokens: list[int]) -> dict[str, Any]:
        key = self.aligned(tokens[: len(tokens) - 1])
        m = self.walk(key) if key else 0
        req = Request(list(tokens), len(tokens), m, key[:m])
        self.requests[rid] = req
        need = self.pages(len(tokens)) - m // self.ps
        fits, evicted = self.make_room(len(tokens) - m, need)
        if not fits:
            del self.requests[rid]
            return {"admitted": False, "prefix": m, "evicted": evicted}
        self.free_pages -= need
        return {"admitted": True, "prefix": m, "evicted": evicted}

    def append(self, rid: Any, tokens: list[int]) -> dict[str, Any]:
        req = self.requests[rid]
        n = len(req.tokens)
        need = self.pages(n + len(tokens)) - self.pages(n)
        fits, evicted = self.make_room(len(tokens), need)
        if fits:
            self.free_pages -= need
            req.tokens.extend(tokens)
        return {"appended": fits, "evicted": evicted}

    def checkpoint(self, req: Request) -> dict[str, int]:
        key = self.aligned(req.tokens)
        reused = self.insert(key)
        self.free_pages += (reused - req.protected) // self.ps
        prompt_key = self.aligned(req.tokens[: req.prompt_len])
        if 0 < len(prompt_key) < len(key):
            self.insert(prompt_key)
        self.match(list(key))
        deduplicated = reused - req.protected
        req.protected = len(key)
        req.lock = key
        return {"protected": len(key), "deduplicated": deduplicated}

    def release(self, rid: Any, cache: bool) -> dict[str, int]:
        req = self.requests[rid]
        result = self.checkpoint(req) if cache else {}
        freed = self.pages(len(req.tokens)) - req.protected // self.ps
        self.free_pages += freed
        del self.requests[rid]
        return {**result, "freed": freed * self.ps}

    def lock(self, pin: Any, tokens: list[int]) -> dict[str, int]:
        key = self.aligned(tokens)
        m = self.walk(key) if key else 0
        self.pins[pin] = key[:m]
        return {"prefix": m}

    def reset(self) -> bool:
        if self.requests or self.pins:
            return False
        self.nodes.clear()
        self.parent.clear()
        self.free_pages = self.num_pages
        return True


def step(model: Model, op: dict[str, Any]) -> Any:
    """One program step on the model; its result (the same JSON the adapter reports)."""
    kind, rid = op["op"], op.get("rid")
    if kind in ("add",) and (rid in model.requests or not op["tokens"]):
        return prog.SKIPPED
    if kind in ("append", "checkpoint", "finish", "abort") and rid not in model.requests:
        return prog.SKIPPED
    if kind == "add":
        return model.add(rid, op["tokens"])
    if kind == "append":
        return model.append(rid, op["tokens"])
    if kind == "checkpoint":
        return model.checkpoint(model.requests[rid])
    if kind == "finish":
        return model.release(rid, cache=True)
    if kind == "abort":
        return model.release(rid, cache=False)
    if kind == "match":
        return {"prefix": model.match(op["tokens"])}
    if kind == "lock":
        return prog.SKIPPED if op["pin"] in model.pins else model.lock(op["pin"], op["tokens"])
    if kind == "unlock":
        return {"unlocked": model.pins.pop(op["pin"], None) is not None}
    if kind == "evict":
        return {"evicted": model.evict(op["n"])}
    if kind == "reset":
        return {"reset": model.reset()}
    raise ValueError(f"unknown op {kind!r}")


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    config = prog.Config.from_json(inputs["config"])
    model = Model(config.page_size, config.num_pages)
    steps = []
    for op in inputs["program"]:
        result = step(model, op)
        steps.append({"op": op["op"], "result": result, "state": model.state()})
    return {"steps": steps, "violation": None}
