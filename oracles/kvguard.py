"""KVGuard: shadow state for a paged KV cache, checked on every event and inside the kernels.

A KV cache manager that is wrong rarely crashes: it hands a block to two requests, frees a block
twice, leaves a stale entry in a block table, and the model quietly reads another request's
keys.  KVGuard keeps its own account of every physical block and compares each thing the manager
and the kernels do against it.  The manager *emits events* to a guard; with the guard off it
emits them to :data:`NULL_GUARD`, whose methods do nothing, so the unguarded path pays one
attribute lookup and an empty call.

Shadow state per block: state (free / owned / shared / cached), holders, the epoch (bumped on
every free, so a table entry taken in an earlier epoch is recognisably stale), a per-slot
*written* bitmap and the token position written in each slot (these two live as device tensors,
because the guarded kernels read and update them; see :mod:`fuzzkit.targets.paged_kv.kernels`).

Five check classes (docs/COMPONENTS.md §1), each a :class:`GuardViolation` naming the class, block,
slot, request and step:

1. ``allocation`` — no double allocation, no free of a block the request does not hold, the null
   block never handed out, ``ref_cnt == holders``, free queue ∩ in-use = ∅, no duplicates in the
   queue, ``free + in_use + 1 == N``, an evicted block loses its hash, prefix hits pinned before
   any other allocation of the same step;
2. ``table`` — every entry is a block the request holds, taken in the block's current epoch (no
   stale entry from a previous owner), length ``ceil(tokens / b)``, null entries only outside a
   sliding window;
3. ``translation`` — the slot mapping of every scheduled token is ``table[t // b] * b + t % b``,
   and the table handed to a kernel launch equals the host table (epochs match);
4. ``read`` — inside the attention kernel: a slot is read only if the request may read its block,
   the slot was written, and it holds the key position the kernel thinks it reads, at or before
   the query position;
5. ``write`` — inside the write kernel: only into a block the request owns exclusively (never a
   shared block without copy-on-write), each slot once per epoch, at the offset of its position.

Modes: ``abort`` raises on the first violation; ``count`` records all of them (``violations``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Sequence

CLASSES = ("allocation", "table", "translation", "read", "write")

#: Device record codes (see fuzzkit.targets.paged_kv.kernels) -> (class, check name).
DEVICE_CODES = {
    41: ("read", "not-readable"),
    42: ("read", "unwritten"),
    43: ("read", "future-position"),
    44: ("read", "wrong-position"),
    51: ("write", "not-exclusive-owner"),
    52: ("write", "written-twice"),
    53: ("write", "wrong-offset"),
}


class GuardViolation(Exception):
    """One broken rule.  ``check_class`` is one of :data:`CLASSES`; ``check`` names the rule."""

    def __init__(
        self,
        check_class: str,
        check: str,
        message: str,
        *,
        block: int | None = None,
        slot: int | None = None,
        request: int | None = None,
        step: int | None = None,
    ) -> None:
        where = ", ".join(
            f"{k} {v}"
            for k, v in (("step", step), ("request", request), ("block", block), ("slot", slot))
            if v is not None
        )
        super().__init__(
            f"KVGuard [{check_class}/{check}] {message}" + (f" ({where})" if where else "")
        )
        self.check_class, self.check = check_class, check
        self.block, self.slot, self.request, self.step = block, slot, request, step

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.check_class,
            "check": self.check,
            "message": str(self),
            "block": self.block,
            "slot": self.slot,
            "request": self.request,
            "step": self.step,
        }


class NullGuard:
    """The guard that is off: every event and check is an empty method.

    Plain methods (not ``__getattr__`` magic): an event then costs one attribute lookup and an
    empty call, the least the unguarded path can pay.
    """

    enabled = False
    step = 0

    def on_hits(self, request: int, blocks: Sequence[int]) -> None: ...
    def on_allocate(self, request: int, block: int) -> None: ...
    def on_share(self, request: int, block: int) -> None: ...
    def on_release(self, request: int, block: int) -> None: ...
    def on_publish(self, block: int, block_hash: int) -> None: ...
    def on_evict(self, block: int) -> None: ...
    def on_copy(self, src: int, dst: int) -> None: ...
    def on_step_end(self, request: int) -> None: ...
    def check_manager(self, state: dict[str, Any]) -> None: ...
    def check_table(
        self, request: int, table: Sequence[int], tokens: int, first_query: int | None = None
    ) -> None: ...
    def check_translation(
        self,
        request: int,
        positions: Sequence[int],
        slot_mapping: Sequence[int],
        host_table: Sequence[int],
        launch_table: Sequence[int],
    ) -> None: ...


NULL_GUARD = NullGuard()


@dataclasses.dataclass
class _Block:
    holders: set[int] = dataclasses.field(default_factory=set)
    epoch: int = 0
    hash: int | None = None


class KVGuard:
    """Shadow state plus the host-side checks (classes 1-3) and the device record readback."""

    enabled = True

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        mode: str = "abort",
        sliding_window: int | None = None,
    ) -> None:
        if mode not in ("abort", "count"):
            raise ValueError(f"mode must be 'abort' or 'count', got {mode!r}")
        self.num_blocks, self.block_size, self.mode = num_blocks, block_size, mode
        self.sliding_window = sliding_window
        self.blocks = [_Block() for _ in range(num_blocks)]
        self.acquired: dict[tuple[int, int], int] = {}  # (request, block) -> epoch taken
        self.unpinned_hits: dict[int, list[int]] = {}
        self.violations: list[GuardViolation] = []
        self.step = 0
        self.device: DeviceShadow | None = None  # set by attach_device (kernel runs only)

    # ------------------------------------------------------------------ reporting

    def fail(self, check_class: str, check: str, message: str, **where: Any) -> None:
        violation = GuardViolation(check_class, check, message, step=self.step, **where)
        if self.mode == "abort":
            raise violation
        self.violations.append(violation)

    # ------------------------------------------------------------------ class 1: allocation

    def on_hits(self, request: int, blocks: Sequence[int]) -> None:
        """A prefix lookup found these blocks; they must be pinned before anything else."""
        self.unpinned_hits[request] = [b for b in blocks]

    def on_allocate(self, request: int, block: int) -> None:
        """``block`` leaves the free pool for ``request`` (new content)."""
        if self.unpinned_hits.get(request):
            self.fail(
                "allocation",
                "hit-not-pinned",
                f"new block allocated while prefix hits {self.unpinned_hits[request]} are "
                "not pinned yet: the allocation may evict them",
                request=request,
                block=block,
            )
        if block == 0:
            self.fail(
                "allocation",
                "null-block",
                "the null block was handed out",
                request=request,
                block=block,
            )
            return
        shadow = self.blocks[block]
        if shadow.holders:
            self.fail(
                "allocation",
                "double-allocation",
                f"block already held by requests {sorted(shadow.holders)}",
                request=request,
                block=block,
            )
        shadow.holders = {request}
        shadow.hash = None
        self.acquired[(request, block)] = shadow.epoch
        self._clear_written(block)

    def on_share(self, request: int, block: int) -> None:
        """``request`` takes a reference on a block with content (a prefix hit, a fork)."""
        if block == 0:
            self.fail(
                "allocation",
                "null-block",
                "the null block was shared",
                request=request,
                block=block,
            )
            return
        shadow = self.blocks[block]
        if not shadow.holders and shadow.hash is None:
            self.fail(
                "allocation",
                "share-free-block",
                "a reference was taken on a free block that holds no cached content",
                request=request,
                block=block,
            )
        if request in shadow.holders:
            self.fail(
                "allocation",
                "double-reference",
                "the request already holds this block",
                request=request,
                block=block,
            )
        shadow.holders.add(request)
        self.acquired[(request, block)] = shadow.epoch
        pending = self.unpinned_hits.get(request)
        if pending and block in pending:
            pending.remove(block)

    def on_release(self, request: int, block: int) -> None:
        """``request`` drops its reference on ``block``."""
        if block == 0:
            return
        shadow = self.blocks[block]
        if request not in shadow.holders:
            self.fail(
                "allocation",
                "free-not-held",
                f"the request frees a block it does not hold (holders "
                f"{sorted(shadow.holders)}): a double free",
                request=request,
                block=block,
            )
            return
        shadow.holders.discard(request)
        self.acquired.pop((request, block), None)
        if not shadow.holders:
            shadow.epoch += 1

    def on_publish(self, block: int, block_hash: int) -> None:
        self.blocks[block].hash = block_hash

    def on_evict(self, block: int) -> None:
        self.blocks[block].hash = None

    def on_step_end(self, request: int) -> None:
        self.unpinned_hits.pop(request, None)

    def check_manager(self, state: dict[str, Any]) -> None:
        """Compare an inspected manager state with the shadow (class 1)."""
        queue = state["free_queue"]
        duplicates = [b for b, n in Counter(queue).items() if n > 1]
        if duplicates:
            self.fail(
                "allocation",
                "queue-duplicate",
                f"blocks {duplicates} are in the free queue twice",
                block=duplicates[0],
            )
        queued = set(queue)
        in_use = 0
        for block in range(1, self.num_blocks):
            shadow = self.blocks[block]
            ref_cnt = state["ref_cnt"].get(block, 0)
            if ref_cnt != len(shadow.holders):
                self.fail(
                    "allocation",
                    "ref-cnt",
                    f"manager ref_cnt {ref_cnt} but the guard "
                    f"counts holders {sorted(shadow.holders)}",
                    block=block,
                )
            if shadow.holders:
                in_use += 1
                if block in queued:
                    self.fail(
                        "allocation",
                        "in-use-in-queue",
                        f"block held by {sorted(shadow.holders)} is in the free queue",
                        block=block,
                    )
            if shadow.hash is None and state["block_hash"].get(block) is not None:
                self.fail(
                    "allocation",
                    "stale-hash",
                    "an evicted or reallocated block still carries a hash",
                    block=block,
                )
        if 0 in queued:
            self.fail("allocation", "null-block", "the null block is in the free queue", block=0)
        if len(queue) + in_use + 1 != self.num_blocks:
            self.fail(
                "allocation",
                "block-count",
                f"free {len(queue)} + in use {in_use} + null 1 != {self.num_blocks}",
            )

    # ------------------------------------------------------------------ class 2: tables

    def check_table(
        self, request: int, table: Sequence[int], tokens: int, first_query: int | None = None
    ) -> None:
        """Class 2 on the table used to run queries at positions ``first_query ..
        tokens - 1``: a null entry is allowed only where no such query reads (sliding window).
        Without ``first_query`` (between steps, when no query runs) any null entry is accepted
        under a sliding window."""
        expected = -(-tokens // self.block_size)
        if len(table) != expected:
            self.fail(
                "table",
                "length",
                f"table has {len(table)} entries for {tokens} tokens (expected {expected})",
                request=request,
            )
        first_key = None
        if self.sliding_window is not None:
            first_key = tokens if first_query is None else first_query - self.sliding_window + 1
        for index, block in enumerate(table):
            if block == 0:
                if first_key is None or (index + 1) * self.block_size > first_key:
                    self.fail(
                        "table",
                        "null-entry",
                        f"entry {index} is the null block but is inside the window",
                        request=request,
                        block=0,
                    )
                continue
            if not 0 < block < self.num_blocks:
                self.fail(
                    "table", "out-of-range", f"entry {index} is block {block}", request=request
                )
                continue
            shadow = self.blocks[block]
            if request not in shadow.holders:
                self.fail(
                    "table",
                    "not-held",
                    f"entry {index} points at a block the request "
                    f"does not hold (holders {sorted(shadow.holders)})",
                    request=request,
                    block=block,
                )
            elif self.acquired.get((request, block)) != shadow.epoch:
                self.fail(
                    "table",
                    "stale-entry",
                    f"entry {index} was taken in epoch "
                    f"{self.acquired.get((request, block))}, the "
                    f"block is in epoch {shadow.epoch}",
                    request=request,
                    block=block,
                )

    # ------------------------------------------------------------------ class 3: translation

    def check_translation(
        self,
        request: int,
        positions: Sequence[int],
        slot_mapping: Sequence[int],
        host_table: Sequence[int],
        launch_table: Sequence[int],
    ) -> None:
        if list(launch_table[: len(host_table)]) != list(host_table):
            self.fail(
                "translation",
                "launch-table",
                f"the table passed to the kernel {list(launch_table)} differs from the host "
                f"table {list(host_table)} (stale device table)",
                request=request,
            )
        for position, slot in zip(positions, slot_mapping):
            index = position // self.block_size
            expected = (
                host_table[index] * self.block_size + position % self.block_size
                if index < len(host_table)
                else None
            )
            if slot != expected:
                self.fail(
                    "translation",
                    "slot-mapping",
                    f"position {position} maps to slot {slot}, the table says {expected}",
                    request=request,
                    slot=int(slot),
                )

    # ------------------------------------------------------------------ classes 4-5: device

    def attach_device(self, device: str, max_requests: int, capacity: int = 1024) -> DeviceShadow:
        """Create the shadow tensors the guarded kernels read and update (needs torch)."""
        self.device = DeviceShadow.create(
            self.num_blocks, self.block_size, max_requests, capacity, device
        )
        return self.device

    def _attached(self) -> DeviceShadow:
        if self.device is None:
            raise RuntimeError("no device shadow: call attach_device before a kernel launch")
        return self.device

    def sync_device(self) -> DeviceShadow:
        """Refresh ownership and readability from the holders, just before a launch."""
        device = self._attached()
        owner, readable = [], [[0] * self.num_blocks for _ in range(device.max_requests)]
        for block, shadow in enumerate(self.blocks):
            if block == 0 or not shadow.holders:
                owner.append(-1)
            elif len(shadow.holders) == 1:
                owner.append(next(iter(shadow.holders)))
            else:
                owner.append(-2)  # shared: read-only
            for request in shadow.holders:
                if request < device.max_requests:
                    readable[request][block] = 1
        device.set_ownership(owner, readable)
        return device

    def collect_device(self) -> None:
        """Read the guarded kernels' violation records back (classes 4 and 5), then reset."""
        records, count = self._attached().take_records()
        # A kernel reports a bad read once per program that makes it (per kv head and query
        # tile): the same record can arrive several times.
        unique = list(dict.fromkeys(tuple(int(x) for x in record) for record in records))
        for code, request, block, slot, position, query in unique:
            check_class, check = DEVICE_CODES.get(int(code), ("read", f"code-{int(code)}"))
            where = "" if query < 0 else f" for query position {query}"
            self.fail(
                check_class,
                check,
                f"kernel {check_class} of position {position}{where}",
                request=int(request),
                block=int(block),
                slot=int(slot),
            )
        if count > len(records):
            self.fail(
                "read",
                "overflow",
                f"{count - len(records)} more device violations were not recorded",
            )

    def on_copy(self, src: int, dst: int) -> None:
        """A block copy (copy-on-write) wrote every slot of ``dst`` with ``src``'s content."""
        if self.device is not None:
            self.device.copy_block(src, dst)

    def _clear_written(self, block: int) -> None:
        """New content epoch for ``block``: its slots count as unwritten again."""
        if self.device is not None:
            self.device.clear_block(block)


@dataclasses.dataclass
class DeviceShadow:
    """The guard's tensors on the kernel device (layout: fuzzkit.targets.paged_kv.kernels)."""

    block_owner: Any  # int32 [num_blocks]: exclusive owner, -1 free, -2 shared read-only
    readable: Any  # int8 [max_requests, num_blocks]
    slot_written: Any  # int32 [num_blocks * block_size]
    slot_pos: Any  # int32 [num_blocks * block_size]
    records: Any  # int32 [capacity, 6]
    count: Any  # int32 [1]
    block_size: int
    max_requests: int

    @classmethod
    def create(
        cls, num_blocks: int, block_size: int, max_requests: int, capacity: int, device: str
    ) -> DeviceShadow:
        import torch

        def zeros(*shape: int, dtype: Any = torch.int32) -> Any:
            return torch.zeros(shape, dtype=dtype, device=device)

        return cls(
            zeros(num_blocks) - 1,
            zeros(max_requests, num_blocks, dtype=torch.int8),
            zeros(num_blocks * block_size),
            zeros(num_blocks * block_size) - 1,
            zeros(capacity, 6),
            zeros(1),
            block_size,
            max_requests,
        )

    def set_ownership(self, owner: Sequence[int], readable: Sequence[Sequence[int]]) -> None:
        import torch

        self.block_owner.copy_(torch.tensor(owner, dtype=torch.int32))
        self.readable.copy_(torch.tensor(readable, dtype=torch.int8))

    def clear_block(self, block: int) -> None:
        span = slice(block * self.block_size, (block + 1) * self.block_size)
        self.slot_written[span] = 0
        self.slot_pos[span] = -1

    def copy_block(self, src: int, dst: int) -> None:
        b = self.block_size
        self.slot_written[dst * b : (dst + 1) * b] = self.slot_written[src * b : (src + 1) * b]
        self.slot_pos[dst * b : (dst + 1) * b] = self.slot_pos[src * b : (src + 1) * b]

    def take_records(self) -> tuple[list[list[int]], int]:
        count = int(self.count.item())
        records = self.records[: min(count, self.records.shape[0])].tolist()
        self.count.zero_()
        return records, count
