"""Chained block hashes with tagged extra keys — shared by every manager in this package.

``H(parent, tokens, extra)``: SHA-256 over a canonical, *tagged* encoding, so that an adapter id
1 and a cache salt 1 can never produce the same key (the untagged-keys bug, vLLM #44701), and so
that identical token blocks under different parents differ (the chain).  Truncated to 64 bits:
plenty for a fuzzing pool, and an int is cheap to compare and to print.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Optional, Sequence

BlockHash = int
ExtraKeys = tuple[tuple[str, int], ...]


def extra_keys(block_index: int, adapter: Optional[int], salt: Optional[int]) -> ExtraKeys:
    """Tagged extra keys of logical block ``block_index``: the adapter on every block, the cache
    salt on the first block only (the chain carries it to the rest)."""
    keys: list[tuple[str, int]] = []
    if adapter is not None:
        keys.append(("adapter", int(adapter)))
    if salt is not None and block_index == 0:
        keys.append(("salt", int(salt)))
    return tuple(keys)


def block_hash(parent: Optional[BlockHash], tokens: Sequence[int], extra: ExtraKeys) -> BlockHash:
    if parent is not None and type(parent) is not int:  # its repr is part of the text
        return _block_hash.__wrapped__(parent, tuple(map(int, tokens)), tuple(extra))
    return _block_hash(parent, tuple(map(int, tokens)), tuple(extra))


@functools.lru_cache(maxsize=1 << 14)
def _block_hash(parent: Optional[BlockHash], tokens: tuple[int, ...], extra: ExtraKeys
                ) -> BlockHash:
    """Memoized (a pure function): the reference recomputes a prompt's chain at every lookup,
    and the sizes replay and both runs of a case hash the same blocks again."""
    text = repr((parent, tokens, extra))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def full_block_hashes(tokens: Sequence[int], block_size: int, adapter: Optional[int],
                      salt: Optional[int], count: Optional[int] = None) -> list[BlockHash]:
    """Hashes of the first ``count`` (default: all) full blocks of ``tokens``."""
    full = len(tokens) // block_size
    count = full if count is None else min(count, full)
    hashes: list[BlockHash] = []
    parent: Optional[BlockHash] = None
    for i in range(count):
        parent = block_hash(parent, tokens[i * block_size:(i + 1) * block_size],
                            extra_keys(i, adapter, salt))
        hashes.append(parent)
    return hashes
