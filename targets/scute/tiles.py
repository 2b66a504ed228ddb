"""Launch configurations of the Scute kernel per mode, and the thresholds they imply.

Why a module of its own: the tile sizes are *data* that two parties read -- the launcher
(:mod:`.kernels`, which imports torch and Triton) and the strategy (:mod:`.strategies`, which
must not).  A bug in a tiled kernel lives past a tile edge: a second K step, a second column
program, a second tile of one slot's tokens, a wider shrink buffer.  So every edge the kernel
has is declared here as a :class:`fuzzkit.reach.Threshold`, and the strategy draws sizes on
both sides of it.

Natively on a GPU the tiles are the real ones (``tl.dot`` needs at least 16 rows / columns /
reduction elements).  Under ``TRITON_INTERPRET=1`` every program costs milliseconds of Python,
and a case whose K or Nout must exceed 64 to take a second step is expensive, so the interpreter
launches the *same* kernel with small tiles (the interpreter's ``tl.dot`` takes any shape):
cheap cases then cross every edge.  :func:`thresholds` declares the tiles as launched in the
current mode.

Edges of the Scute kernel (see :mod:`.kernels` for the program structure):

* ``k`` vs ``BLOCK_K``: the K loop (transform chunk, base GEMM, shrink) takes a second step;
* ``nout`` vs ``BLOCK_N``: grid axis 1 launches a second column program (epilogue vectors
  ``s``, ``b``, ``o`` and ``B`` rows loaded at an offset);
* tokens of one slot vs ``BLOCK_M`` (decode and prefill configs separately): a slot's run of
  tokens is cut into a second tile (:func:`fuzzkit.targets.scute.batching.segments`);
* ``rank`` (the padded rank R) vs the smallest ``BLOCK_R``: the shrink buffer widens to the
  next power of two;
* ``span`` (the effective block of a block-diagonal or dense transform) vs ``BLOCK_K``: a block
  wider than the K chunk needs several inner steps, narrower blocks that do not divide it
  straddle chunk edges (the ``lo`` / ``hi`` row range of the inner loop).
"""

from __future__ import annotations

from fuzzkit import reach

#: mode -> (BLOCK_M, BLOCK_N, BLOCK_K) natively on a GPU.
CONFIGS_GPU = {"decode": (16, 64, 64), "prefill": (64, 64, 64)}
#: mode -> (BLOCK_M, BLOCK_N, BLOCK_K) under the interpreter: the same kernel with small tiles,
#: so that cases that run in a fraction of a second still take a second step of every loop.
#: (A program costs the same milliseconds at 16 or 32 columns; 32 keeps the typical case at one
#: program and one K step, and the edges cost the same number of steps at either.)
CONFIGS_INTERPRETED = {"decode": (8, 32, 32), "prefill": (16, 32, 32)}
#: smallest shrink-buffer width BLOCK_R (natively ``tl.dot`` needs 16; the interpreter none).
BLOCK_R_MIN_GPU = 16
BLOCK_R_MIN_INTERPRETED = 4

#: Largest sizes worth drawing per mode (a case of these runs in about a second on one core
#: under the interpreter; natively the float64 reference is the cost).
CAPS_INTERPRETED = {"k": 72, "nout": 72, "decode": 24, "prefill": 36, "rank": 20}
CAPS_GPU = {"k": 160, "nout": 160, "decode": 40, "prefill": 144, "rank": 40}


def interpreted() -> bool:
    """Whether kernels run under the Triton interpreter (chooses it first if nobody has)."""
    from fuzzkit import triton_support

    triton_support.prepare()
    return triton_support.interpreted()


def configs_table() -> dict[str, tuple[int, int, int]]:
    return CONFIGS_INTERPRETED if interpreted() else CONFIGS_GPU


def block_r_min() -> int:
    return BLOCK_R_MIN_INTERPRETED if interpreted() else BLOCK_R_MIN_GPU


def thresholds() -> tuple[reach.Threshold, ...]:
    """The Scute kernel's edges as launched in the current mode (module docstring)."""
    native = not interpreted()
    table = CONFIGS_GPU if native else CONFIGS_INTERPRETED
    caps = CAPS_GPU if native else CAPS_INTERPRETED
    r_min = BLOCK_R_MIN_GPU if native else BLOCK_R_MIN_INTERPRETED
    bm_decode, bn, bk = table["decode"]
    bm_prefill = table["prefill"][0]
    assert table["prefill"][1:] == (bn, bk), "decode and prefill share BLOCK_N / BLOCK_K"
    return (
        reach.Threshold("k", bk, "Scute kernel K loop: BLOCK_K columns per step; K > BLOCK_K "
                        "takes a second step of the transform chunk, base GEMM and shrink",
                        cap=caps["k"]),
        reach.Threshold("span", bk, "transform block vs the K chunk: wider blocks need "
                        "several inner steps, narrower ones that do not divide BLOCK_K straddle "
                        "chunk edges (inner-loop lo/hi)", cap=caps["k"]),
        reach.Threshold("nout", bn, "grid axis 1: BLOCK_N output features per program; "
                        "Nout > BLOCK_N launches a second column program (epilogue vectors "
                        "at an offset)", cap=caps["nout"]),
        reach.Threshold("decode_slot_tokens", bm_decode, "decode tiles: BLOCK_M tokens of "
                        "one slot per program; more tokens of a slot need a second tile",
                        cap=caps["decode"]),
        reach.Threshold("prefill_slot_tokens", bm_prefill, "prefill tiles: BLOCK_M tokens of "
                        "one slot per program; more tokens of a slot need a second tile",
                        cap=caps["prefill"]),
        reach.Threshold("rank", r_min, "shrink buffer BLOCK_R = max(min, next_pow2(R)): a "
                        "padded rank R above the minimum widens it to the next power of two",
                        cap=caps["rank"]),
    )


__all__ = ["CONFIGS_GPU", "CONFIGS_INTERPRETED", "BLOCK_R_MIN_GPU", "BLOCK_R_MIN_INTERPRETED",
           "configs_table", "block_r_min", "thresholds", "interpreted"]
