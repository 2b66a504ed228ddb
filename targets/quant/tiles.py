"""Tile configurations of the quant scoring kernel, and the thresholds they put on case sizes.

The kernel (:mod:`fuzzkit.targets.quant.kernels`) takes its tile sizes as launch parameters.  On a GPU it
launches the real ``64 x 64 x 32`` tiles.  Under ``TRITON_INTERPRET=1`` every program costs
milliseconds, and with 64-row tiles a fuzzing-sized case would never need a second program along
any axis -- the code past the first tile (program offsets, ragged tails) would never run.  So
the interpreter launches 16-row tiles along ``M`` and ``N`` (the smallest ``tl.dot`` takes on a
GPU), which cases of a few dozen rows cross cheaply.  Along ``D`` the block size does not change
how many programs run, only how many interpreted loop iterations each makes, so the interpreter
takes *wider* steps: 64, the encoder's own 64-block edge (:data:`numpy_impl.ENCODER_THRESHOLDS`),
so one set of dimensions (63..65, 127..129) crosses both; the usual dimensions (up to 80) hold a
ragged second step (65..80) too.

This module imports neither torch nor triton: the target reads the thresholds from here (through
:func:`thresholds`) before deciding whether the kernel module may be imported at all.
"""

from __future__ import annotations

import dataclasses

from fuzzkit import reach, triton_support


@dataclasses.dataclass(frozen=True)
class Tiles:
    """One launch configuration: ``block_m`` query rows x ``block_n`` stored rows per program,
    walking the dimension in ``block_d`` steps (also the launcher's zero guard tail)."""

    block_m: int
    block_n: int
    block_d: int
    num_warps: int = 4


#: What a GPU launches (tl.dot needs every block dimension >= 16 there).
NATIVE = Tiles(block_m=64, block_n=64, block_d=32, num_warps=4)
#: What the interpreter launches: cheap cases with a few dozen rows cross every tile boundary.
INTERPRETED = Tiles(block_m=16, block_n=16, block_d=64, num_warps=4)


def current() -> Tiles:
    """The tiles launched in this process's mode (choose the mode first: interpreter without a
    GPU, unless the user already set ``TRITON_INTERPRET``)."""
    triton_support.prepare()
    return INTERPRETED if triton_support.interpreted() else NATIVE


def kernel_thresholds(tiles: Tiles) -> tuple[reach.Threshold, ...]:
    """The sizes where the scoring kernel changes path, for the tiles it launches.

    The asymmetric launch puts the ``m`` queries along ``M`` and the ``n`` stored vectors along
    ``N``; the symmetric launch puts the ``n`` stored vectors along *both* axes.  ``D`` walks in
    ``block_d`` steps: ``D > block_d`` runs a second step, ragged when ``block_d`` does not
    divide it.  Caps keep the case near a second of interpreter time (a GPU can afford more).
    """
    def cap(block: int) -> int:  # a few sizes above 2t+1: "well above" the second tile
        return 2 * block + 1 + block // 2

    return (
        reach.Threshold("m", tiles.block_m,
                        "score kernel BLOCK_M: more queries need a second program along M",
                        cap=cap(tiles.block_m)),
        reach.Threshold("n", tiles.block_m,
                        "symmetric scores: the stored vectors run along BLOCK_M as well",
                        cap=cap(tiles.block_m)),
        reach.Threshold("n", tiles.block_n,
                        "score kernel BLOCK_N: more stored vectors need a second program along N",
                        cap=cap(tiles.block_n)),
        reach.Threshold("D", tiles.block_d,
                        "score kernel BLOCK_D: a second D step (offsets d0 + arange, per-step "
                        "mask, ragged tail)", cap=cap(tiles.block_d)),
    )


def thresholds() -> tuple[reach.Threshold, ...]:
    """The kernel's thresholds as launched in this process's mode (the triton implementation's
    ``thresholds`` callable)."""
    return kernel_thresholds(current())
