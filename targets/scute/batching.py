"""Token batching of the Scute kernel: sort tokens by adapter slot and cut them into tiles.

    segments(token_slot, block_m) -> (order, seg_start, seg_len, seg_slot)

Why (Punica SGMV / vLLM ``sgmv_shrink`` / ``sgmv_expand``): a batch mixes requests of many
adapters, and a GEMM tile must read *one* adapter's weights -- otherwise every row of the tile
would gather its own ``A``, ``B``, ``T`` and the kernel degenerates into per-token GEMVs (BGMV).
Sorting the tokens by slot turns the batch into runs of equal slot (segments); each run is cut
into tiles of at most ``block_m`` rows, and one kernel program owns one tile.  The kernel gathers
a tile's tokens through ``order`` and writes its rows back at the original token positions, so
the caller never permutes anything.

* The sort is **stable** (``np.argsort(kind="stable")``): tokens of one slot keep their batch
  order, so the segmentation is a deterministic function of ``token_slot``.
* Slot ``-1`` (base layer only) sorts first and forms its own tiles; the kernel serves them with
  ``W0`` / ``b0`` alone.
* A token's output depends only on its own row and its tile's slot (row-wise GEMM, fixed tile
  shape): removing or permuting batch mates moves a token to another tile position but does not
  change its bits -- the batch-invariance promise of the kernel.

All four arrays are int32: ``order`` (Ntok,) token ids grouped by slot; per tile ``seg_start``
(offset into ``order``), ``seg_len`` (1..block_m) and ``seg_slot`` (-1..S-1).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def segments(token_slot: Any, block_m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                     np.ndarray]:
    """``(order, seg_start, seg_len, seg_slot)`` for the tokens' slots (see module doc)."""
    if block_m < 1:  # pragma: no cover - defensive: block_m comes from the tile configs (>= 1)
        raise ValueError(f"block_m must be >= 1, got {block_m}")
    slots = np.asarray(token_slot, dtype=np.int64).reshape(-1)
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    n = sorted_slots.shape[0]
    starts: list[int] = []
    lens: list[int] = []
    tile_slots: list[int] = []
    run = 0
    while run < n:
        end = run
        while end < n and sorted_slots[end] == sorted_slots[run]:
            end += 1
        for start in range(run, end, block_m):
            starts.append(start)
            lens.append(min(block_m, end - start))
            tile_slots.append(int(sorted_slots[run]))
        run = end
    return (order.astype(np.int32), np.asarray(starts, np.int32), np.asarray(lens, np.int32),
            np.asarray(tile_slots, np.int32))


__all__ = ["segments"]
