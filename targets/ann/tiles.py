"""Launch configurations of the ``ann`` Triton kernels, as data (importable without torch/triton).

Why a module of its own: a kernel's code changes path where its grid gains a second program or
its loop a second step, and the strategy must aim at exactly those sizes *in the mode the
kernels run in* -- natively on a GPU, or under ``TRITON_INTERPRET=1``, where every Triton
operation costs a fraction of a millisecond however small its tile, so the cost of a launch is
the number of programs times the operations each runs.  The tile sizes are therefore launch
parameters chosen here per mode, used by the launchers in :mod:`fuzzkit.targets.ann.kernels` and
declared as thresholds by :mod:`fuzzkit.targets.ann.thresholds`, from one table.  Nothing here imports
torch or triton, so the strategy can read them.

Distances (``distance_kernel``): one program owns ``BLOCK_Q`` query rows x ``BLOCK_M`` candidate
columns and loops over ``D`` in ``BLOCK_D`` steps.  On a GPU the tiles are fixed (1 x 64 x 64).
Under the interpreter they start small (4 x 16 x 16: a case with 5 queries, 17 candidates or 17
dims already takes a second program / step) and *double* while a size would need more than two
of them -- the size-dependent block choice of real kernels (vLLM's ``fused_moe`` picks
``BLOCK_SIZE_M`` by ``M``), here bounding the interpreter's cost: at most two programs or steps
per dimension, the second one partial unless the size is a power of two.  (Doubling changes the
tile, not the path: every size past the first tile already has a second, masked program.)

Expansion (``expand_kernel``): one program owns ``BLOCK_Q`` whole rows of ``BLOCK_P =
next_pow2(E * R)`` positions and deduplicates in chunks of ``BLOCK_J`` earlier positions.  GPU:
``max(1, 256 // BLOCK_P)`` rows, chunks of ``4096 // max(256, BLOCK_Q * BLOCK_P)`` (a bounded
register tile: 16 positions whenever a row fits 256 lanes, fewer past it).  Interpreter: rows
from ``max(4, 64 // BLOCK_P)``, doubled while ``q`` needs more than two programs (so 5 queries
take a second program at every width past 8), and chunks of ``max(8, BLOCK_P // 2)`` (a second
chunk from ``E * R = 9``, never more than two).
"""

from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class Tiles:
    """One mode's launch configuration (see the module docstring)."""

    dist_q: int           # BLOCK_Q of the distance kernel: query rows per program (smallest)
    dist_m: int           # BLOCK_M: candidate columns per program (smallest)
    dist_d: int           # BLOCK_D: dimensions per loop step (smallest)
    at_most: int          # distance tiles double while a size needs more (0: fixed)
    expand_lanes: int     # positions (rows x BLOCK_P) an expansion program aims at
    expand_rows: int      # fewest rows an expansion program holds
    expand_compares: int  # elements of one [BLOCK_Q, BLOCK_P, BLOCK_J] compare tile
    chunk_floor: int      # smallest BLOCK_J
    max_chunks: int       # BLOCK_J >= BLOCK_P // max_chunks (0: no such bound)
    rows_at_most: int     # expansion rows per program double while q needs more (0: fixed)
    shrink_m: bool        # BLOCK_M shrinks to next_pow2(M) below it (interpreter: fewer lanes)

    def grown(self, base: int, size: int) -> int:
        """The tile for ``size``: ``base``, or -- with ``at_most`` set -- the power-of-two
        multiple of ``base`` that covers ``size`` in ``at_most`` tiles."""
        tile = base
        while self.at_most and size > self.at_most * tile:
            tile *= 2
        return tile

    @property
    def chunk(self) -> int:
        """``BLOCK_J`` of the narrowest rows that are chunked: a second chunk past it."""
        return max(self.chunk_floor, self.expand_compares // self.expand_lanes)

    def rows(self, width: int) -> int:
        """Rows of ``width = E * R`` positions one expansion program holds (before ``q``)."""
        return max(self.expand_rows, self.expand_lanes // block_p(width))


#: Native launch on a GPU (4 warps a distance program; see :mod:`fuzzkit.targets.ann.kernels`).
GPU = Tiles(dist_q=1, dist_m=64, dist_d=64, at_most=0, expand_lanes=256, expand_rows=1,
            expand_compares=4096, chunk_floor=1, max_chunks=0, rows_at_most=0, shrink_m=False)
#: Under ``TRITON_INTERPRET=1``: small first tiles that cheap cases cross, doubling with size.
INTERPRETED = Tiles(dist_q=4, dist_m=16, dist_d=16, at_most=2, expand_lanes=64, expand_rows=4,
                    expand_compares=512, chunk_floor=8, max_chunks=2, rows_at_most=2,
                    shrink_m=True)


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def block_p(width: int) -> int:
    """The expansion tile's positions per row: ``next_pow2(E * R)``, at least 2."""
    return max(2, next_pow2(width))


def current() -> Tiles:
    """The tiles of the mode the kernels will run in (chooses the mode first, as the kernel
    module does at import; may import torch to look for a GPU, never triton)."""
    from fuzzkit import triton_support

    triton_support.prepare()
    return INTERPRETED if triton_support.interpreted() else GPU


def distance_config(q: int, m: int, dim: int, tiles: Tiles, block_m: Optional[int] = None,
                    block_d: Optional[int] = None) -> tuple[int, int, int]:
    """``(BLOCK_Q, BLOCK_M, BLOCK_D)`` of a distance launch over ``q`` rows x ``m`` columns of
    ``dim`` dimensions; ``block_m`` / ``block_d`` override the mode's choice (tests force many
    tiles with them)."""
    block_q = min(tiles.grown(tiles.dist_q, q), next_pow2(q))
    block_m = block_m or tiles.grown(tiles.dist_m, m)
    block_d = block_d or tiles.grown(tiles.dist_d, dim)
    if tiles.shrink_m:  # pragma: no branch - False only on a GPU (fixed tiles)
        block_m = min(block_m, max(1, next_pow2(m)))
    return block_q, block_m, block_d


def expand_config(q: int, width: int, tiles: Tiles) -> tuple[int, int, int]:
    """``(BLOCK_Q, BLOCK_P, BLOCK_J)`` of an expansion over ``q`` rows of ``width = E * R``."""
    bp = block_p(width)
    block_q = tiles.rows(width)
    while tiles.rows_at_most and q > tiles.rows_at_most * block_q:
        block_q *= 2
    block_q = min(block_q, next_pow2(q))
    budget = tiles.expand_compares // max(tiles.expand_lanes, block_q * bp)
    spread = bp // tiles.max_chunks if tiles.max_chunks else 0
    block_j = min(bp, max(tiles.chunk_floor, budget, spread))
    return block_q, bp, block_j
