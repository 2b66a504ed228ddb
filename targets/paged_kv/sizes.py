"""The sizes of a paged KV case, measured by replaying its program on the reference manager.

A program's interesting sizes -- how many requests are registered at once, how long a block table
grows, how many queries and keys one forward pass gives the attention kernel -- are not fields of
the case: they emerge from the operations (an ``add`` that is refused, an ``allocate`` that does
not fit, a fork, a trim).  So they are measured the honest way: the program runs on the plain
:class:`~fuzzkit.targets.paged_kv.reference.ReferenceManager` under a recording driver (a millisecond per
case), and every size that *occurred* is reported.  ``Target.sizes`` (the reach report, and
``fuzzkit.reach.assert_crossed``) and the strategy's own tests read them from here.

Sizes (each yields every occurrence in a case):

``live_requests``  requests registered at once (after each step): rows of the optimized
                   manager's NumPy block tables in use;
``table_blocks``   entries of a request's block table (after each step, every request);
``request_id``     every request id an operation names;
``query_len``      queries of one request in one forward pass (its scheduled tokens);
``key_span``       keys one request's attention walks in one forward pass: from the oldest key
                   in its first query's window to its last query;
``batch_tokens``   tokens written by one forward pass (all its requests);
``block_size``     the pool's block size.

The attention sizes (``query_len``, ``key_span``) count only requests the guarded driver
launches the attention kernel for (ids below
:data:`~fuzzkit.targets.paged_kv.kernel_driver.MAX_REQUESTS`); ``batch_tokens`` counts every request
(all K/V goes through the write kernel).
"""

from __future__ import annotations

import functools
import json
from typing import Any, Iterable, Mapping, Optional

from fuzzkit import reach
from fuzzkit.targets.paged_kv.driver import OPS, Driver, Violation
from fuzzkit.targets.paged_kv.kernel_driver import MAX_REQUESTS as LAUNCHED_IDS
from fuzzkit.targets.paged_kv.protocol import Config
from fuzzkit.targets.paged_kv.reference import ReferenceManager

NAMES = ("live_requests", "table_blocks", "request_id", "query_len", "key_span",
         "batch_tokens", "block_size")


class _Recorder(Driver):
    """The plain driver on the reference manager, recording sizes: no structure checks, no
    refill checks and no KV memory (what a pass writes and reads changes no size; the target's
    reference run checks all of them on every case)."""

    def __init__(self, config: Config) -> None:
        super().__init__(ReferenceManager(config), config, trusted=True)
        self.checks_refills = False
        self.seen: dict[str, set[int]] = {name: set() for name in NAMES}

    def check_structure(self) -> None:
        manager = self.manager
        self.seen["live_requests"].add(len(manager.requests))
        for req in manager.requests.values():
            self.seen["table_blocks"].add(len(req.table))

    def launch(self, rids: Iterable[int]) -> None:
        """One forward pass over ``rids`` (those with scheduled tokens), as the kernels see it."""
        tokens = 0
        for rid in rids:
            positions = self.requests[rid].pending if rid in self.requests else []
            tokens += len(positions)  # every request's K/V goes through the write kernel
            if not positions or rid >= LAUNCHED_IDS:
                continue  # no attention launch for ids past the guard's device rows
            first, last = positions[0], positions[-1]
            self.seen["query_len"].add(len(positions))
            self.seen["key_span"].add(last + 1 - self._window(first).start)
        if tokens:
            self.seen["batch_tokens"].add(tokens)

    def write(self, rid: int) -> Any:
        self.launch([rid])
        return super().write(rid)

    def forward(self) -> Any:
        rids = self._pending_rids()
        self.launch(rids)
        return [[rid, Driver.write(self, rid)] for rid in rids]

    def _store(self, rid: int, shadow: Any, table: Optional[list[int]] = None) -> None:
        pass  # no KV memory: sizes only

    def _reads_hold(self, shadow: Any, table: list[int]) -> bool:
        return True  # nothing was stored to read


def _request_ids(program: Iterable[Mapping[str, Any]]) -> set[int]:
    ids: set[int] = set()
    for step in program:
        for key in ("rid", "src", "dst"):
            if isinstance(step.get(key), int):
                ids.add(step[key])
    return ids


@functools.lru_cache(maxsize=64)
def _measure_json(text: str) -> dict[str, frozenset[int]]:
    inputs = json.loads(text)
    config = Config.from_json(inputs["config"])
    driver = _Recorder(config)
    driver.seen["block_size"].add(config.block_size)
    driver.seen["request_id"].update(_request_ids(inputs["program"]))
    for step in inputs["program"]:
        op = step["op"]
        if op not in OPS:
            break
        try:
            getattr(driver, op)(**{k: v for k, v in step.items() if k != "op"})
            driver.check_structure()
        except Violation:
            break  # the reference broke the KV model: the oracle reports it, sizes stop here
    return {name: frozenset(values) for name, values in driver.seen.items()}


def measure(inputs: Mapping[str, Any]) -> dict[str, frozenset[int]]:
    """Every size of ``NAMES`` that occurs in the case (memoized: each size name asks)."""
    return _measure_json(json.dumps(inputs, sort_keys=True, default=str))


def size(name: str, lo: int = 0) -> reach.Size:
    """``Target.sizes`` entry for ``name``."""
    return reach.Size(lambda inputs: sorted(measure(inputs)[name]), lo=lo)


SIZES = {name: size(name, lo=1 if name in ("block_size", "live_requests") else 0)
         for name in NAMES}
