"""Tile sizes of the ``attention_index`` Triton kernels as launched in each mode, and the
thresholds they make (the sizes where a launch takes a second program or another path).

Kept apart from :mod:`.kernels` so that the thresholds can be declared without importing torch or
Triton; :mod:`.kernels` takes its launch parameters from here.

Why two configurations: natively a program is cheap and the GPU wants narrow row tiles and wide
column / ``d`` tiles; under ``TRITON_INTERPRET=1`` each program costs milliseconds of Python, so
the interpreter launches tall row tiles (few programs for the 512-query recall claim: the top-k
kernel's cost is ``k`` extraction steps per program) but *small* column and ``d`` tiles, so that
cheap cases (17 candidates, ``d = 9``) already reach a second column program and a second,
ragged ``d`` step -- the code paths a GPU run takes only at ``M = 65`` or ``d = 65``.
"""

from __future__ import annotations

import dataclasses

from fuzzkit.reach import Threshold


@dataclasses.dataclass(frozen=True)
class Tiles:
    """One mode's launch parameters.

    ``score_t``    query rows per program of both score kernels (``BLOCK_T``);
    ``score_g``    representatives / candidates per program (``BLOCK_G`` / ``BLOCK_M``);
    ``score_d``    the ``d`` reduction step (``BLOCK_D``);
    ``topk_rows``  the most query rows one top-k program owns;
    ``topk_lanes`` the most lanes (rows x ``next_pow2(M)``) one top-k program holds;
    ``wide_m``     the top-k row width (``BLOCK_M``) from which it launches 8 warps (None: the
                   warp count does not change, as under the interpreter).
    """

    score_t: int
    score_g: int
    score_d: int
    topk_rows: int
    topk_lanes: int
    wide_m: int | None


GPU = Tiles(score_t=1, score_g=64, score_d=64, topk_rows=1, topk_lanes=1, wide_m=2048)
INTERPRETED = Tiles(score_t=16, score_g=16, score_d=8, topk_rows=32, topk_lanes=4096,
                    wide_m=None)


def current() -> Tiles:
    """The tiles of the mode this process runs kernels in (chooses the mode first)."""
    from fuzzkit import triton_support

    triton_support.prepare()
    return INTERPRETED if triton_support.interpreted() else GPU


def declared(tiles: Tiles) -> tuple[Threshold, ...]:
    """The thresholds of the kernels launched with ``tiles``.

    Caps keep a case near a second on one core under the interpreter (each program costs
    milliseconds there); natively they reach well past the second tile.
    """
    native = tiles.wide_m is not None
    out = [
        Threshold("t", tiles.score_t,
                  f"score kernels BLOCK_T = {tiles.score_t} query rows per program: "
                  f"T = {tiles.score_t + 1} needs a second row program (row < T mask)",
                  cap=8 if native else 40),
        Threshold("t", tiles.topk_rows,
                  f"top-k kernel owns at most {tiles.topk_rows} rows per program (group and "
                  f"key selection): T = {tiles.topk_rows + 1} needs a second program",
                  cap=8 if native else 40),
        Threshold("g", tiles.score_g,
                  f"rep_score_kernel BLOCK_G = {tiles.score_g}: G = {tiles.score_g + 1} "
                  "representatives need a second column program; the group-selection top-k "
                  f"row grows past BLOCK_M = {tiles.score_g}",
                  cap=160 if native else 48),
        Threshold("m", tiles.score_g,
                  f"member_score_kernel BLOCK_M = {tiles.score_g}: a row of "
                  f"{tiles.score_g + 1} candidates needs a second column program (its causal "
                  "cut can fall on a tile edge); the top-k row grows past BLOCK_M",
                  cap=160 if native else 96),
        Threshold("d", tiles.score_d,
                  f"BLOCK_D = {tiles.score_d} reduction step of both score kernels: "
                  f"d = {tiles.score_d + 1} takes a second, ragged step",
                  cap=160 if native else 24),
    ]
    if native:
        assert tiles.wide_m is not None
        out.append(Threshold("m", tiles.wide_m // 2,
                             f"top-k kernel launches 8 warps from BLOCK_M = {tiles.wide_m}: "
                             f"rows of more than {tiles.wide_m // 2} candidates",
                             cap=tiles.wide_m + 64))
    return tuple(out)


def thresholds() -> tuple[Threshold, ...]:
    """The ``triton`` implementation's thresholds in this process's mode."""
    return declared(current())
