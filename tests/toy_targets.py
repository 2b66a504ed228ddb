"""Two small targets that exercise the core end to end without any heavy component.

``toy-dot`` is a float reduction judged by the ``close`` oracle; ``toy-alloc`` is a stateful
block allocator driven by programs and judged by the ``trace`` oracle.  Each ships a mutant whose
bug shows only in a specific situation, so the tests see the engine *search* and *shrink*.
They live in tests/ (not targets/) because they exist to test fuzzkit, not a component.
"""

from __future__ import annotations

import contextlib
import heapq
from typing import Any, Iterator
from unittest import mock

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fuzzkit.oracles
from fuzzkit.program import program_runner, programs
from fuzzkit.target import Implementation, Mutant, Property, Target

# --------------------------------------------------------------------------------------- toy-dot


def _dot_inputs() -> st.SearchStrategy[dict[str, Any]]:
    def pair(n: int) -> st.SearchStrategy[dict[str, Any]]:
        floats = st.floats(-100, 100, width=32)
        arr = hnp.arrays(np.float32, n, elements=floats)
        return st.fixed_dictionaries({"a": arr, "b": arr})

    return st.integers(1, 24).flatmap(pair)


def dot_reference(inputs: dict[str, Any]) -> dict[str, Any]:
    a, b = inputs["a"].astype(np.float64), inputs["b"].astype(np.float64)
    return {"dot": np.array([a @ b]), "magnitude": np.array([np.abs(a) @ np.abs(b)])}


def dot_kernel(a: np.ndarray, b: np.ndarray) -> np.float32:
    return np.float32(np.dot(a, b))


def dot_numpy(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"dot": np.array([dot_kernel(inputs["a"], inputs["b"])], dtype=np.float32)}


def dot_oracle(inputs: dict[str, Any], expected: dict[str, Any], actual: dict[str, Any]) -> Any:
    return fuzzkit.oracles.close(expected["dot"], actual["dot"], dtype="float32",
                         reduction_length=len(inputs["a"]), magnitude=expected["magnitude"],
                         name="dot")


def _dot_symmetric(impl: Any, inputs: dict[str, Any]) -> Any:
    swapped = impl({"a": inputs["b"], "b": inputs["a"]})
    return fuzzkit.oracles.exact(impl(inputs)["dot"], swapped["dot"], name="dot_symmetry")


def _drops_last_term(a: np.ndarray, b: np.ndarray) -> np.float32:
    """A vectorized loop whose remainder handling forgets the last element at odd lengths >= 5."""
    n = len(a) - 1 if len(a) % 2 == 1 and len(a) >= 5 else len(a)
    return np.float32(np.dot(a[:n], b[:n]))


def _patch_dot() -> Any:
    return mock.patch(f"{__name__}.dot_kernel", _drops_last_term)


def dot_target() -> Target:
    return Target(
        name="toy-dot",
        description="float32 dot product against a float64 reference",
        strategy=_dot_inputs,
        reference=dot_reference,
        implementations={"numpy": Implementation("numpy", dot_numpy, backend="numpy")},
        oracle=dot_oracle,
        properties=[Property("symmetric", _dot_symmetric)],
        mutants=[Mutant("drops-last-term", "numpy", "remainder loop drops the tail element",
                        "classic vectorization tail bug", _patch_dot)],
        reducible=[("a", "b")],
        validate=lambda inputs: None if len(inputs["a"]) else "empty vectors",
    )


# ------------------------------------------------------------------------------------- toy-alloc


class ReferenceAllocator:
    """Hands out the lowest free block; a block has at most one owner."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.free = set(range(1, int(config.get("blocks", 4)) + 1))
        self.owner: dict[int, int] = {}

    def alloc(self, rid: int) -> int:
        if not self.free:
            raise MemoryError("no free block")
        block = min(self.free)
        self.free.remove(block)
        self.owner[block] = rid
        return block

    def release(self, rid: int, block: int) -> bool:
        if self.owner.get(block) != rid:
            return False
        del self.owner[block]
        self.free.add(block)
        return True


class HeapAllocator:
    """The optimized version: a heap of free blocks."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.heap = list(range(1, int(config.get("blocks", 4)) + 1))
        self.owner: dict[int, int] = {}

    def alloc(self, rid: int) -> int:
        if not self.heap:
            raise MemoryError("no free block")
        block = heapq.heappop(self.heap)
        self.owner[block] = rid
        return block

    def release(self, rid: int, block: int) -> bool:
        if self.owner.get(block) != rid:
            return False
        del self.owner[block]
        heapq.heappush(self.heap, block)
        return True


def _release_without_owner_check(self: HeapAllocator, rid: int, block: int) -> bool:
    """Double free: releasing a block twice puts it on the heap twice (cf. vLLM #42571)."""
    if block not in self.owner and block not in range(1, 99):
        return False
    self.owner.pop(block, None)
    heapq.heappush(self.heap, block)
    return True


@contextlib.contextmanager
def _patch_alloc() -> Iterator[None]:
    with mock.patch.object(HeapAllocator, "release", _release_without_owner_check):
        yield


def _alloc_inputs() -> st.SearchStrategy[dict[str, Any]]:
    ops = {
        "alloc": st.fixed_dictionaries({"rid": st.integers(0, 3)}),
        "release": st.fixed_dictionaries({"rid": st.integers(0, 3), "block": st.integers(1, 5)}),
    }
    return st.fixed_dictionaries({
        "config": st.fixed_dictionaries({"blocks": st.integers(1, 4)}),
        "program": programs(ops, max_steps=30),
    })


def alloc_target() -> Target:
    return Target(
        name="toy-alloc",
        description="lowest-free-block allocator driven by programs",
        strategy=_alloc_inputs,
        reference=program_runner(ReferenceAllocator),
        implementations={"heap": Implementation("heap", program_runner(HeapAllocator))},
        oracle=lambda inputs, expected, actual: fuzzkit.oracles.trace(expected, actual),
        mutants=[Mutant("double-free", "heap", "free without an ownership check",
                        "vLLM #42571 (duplicate block in one free call)", _patch_alloc)],
        reducible=["program"],
    )


def _outside_buggy(inputs: dict[str, Any]) -> dict[str, Any]:
    """An implementation that lives outside fuzzkit, plugged in with --impl module:attr."""
    return {"dot": np.array([_drops_last_term(inputs["a"], inputs["b"])], dtype=np.float32)}


def plugged_dot_target() -> Target:
    """``toy-dot`` under another name, as a third-party package would ship it."""
    target = dot_target()
    target.name = "plugged-dot"
    return target


# ---- toy targets with a bug, shared by the campaign tests (module level: workers import them)


def buggy_dot_target() -> Target:
    """``toy-dot`` whose implementation drops the last term: found in a few cases."""
    target = dot_target()
    target.name = "toy-dot-buggy"
    target.implementations = {"numpy": Implementation("numpy", _outside_buggy, backend="numpy")}
    return target


class _DoubleFreeHeap(HeapAllocator):
    release = _release_without_owner_check


def buggy_alloc_target() -> Target:
    """``toy-alloc`` whose allocator releases a block it does not own: a stateful bug."""
    target = alloc_target()
    target.name = "toy-alloc-buggy"
    target.implementations = {"heap": Implementation("heap", program_runner(_DoubleFreeHeap))}
    return target
