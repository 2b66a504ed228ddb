"""Buggy variants of the quant scoring kernel, each a patch that swaps one in.

Every mutant is the *correct* source of :mod:`fuzzkit.targets.quant.kernels` with one line replaced
(shown in each docstring), compiled as a real Triton kernel -- natively on a GPU, under
``TRITON_INTERPRET=1`` without one -- and installed as ``kernels.kernel``, which the launcher looks
up at call time (:func:`fuzzkit.mutants.source_edit`: an anchor line that no longer occurs
exactly once raises ``RuntimeError`` instead of silently testing the clean kernel).

Each bug lives only past one of the kernel's tiles (:mod:`fuzzkit.targets.quant.tiles`): in the second
program along ``M`` or ``N``, or the second step along ``D`` -- where the strategy's
threshold-aware sizes take the cases, and where a strategy with one program per axis never went.
They act on the ``triton`` implementation; :mod:`fuzzkit.targets.quant.mutants` lists them as
``kernel-<name>``.
"""

from __future__ import annotations

from fuzzkit.mutants import Patch, source_edit

#: The module the mutants edit, imported only when one is applied (it needs Triton).
_KERNELS = "fuzzkit.targets.quant.kernels"


_SCALE_LOAD = "    scale = tl.load(scale_ptr + offs_n, mask=mask_n, other=0.0)\n"
scale_tile_offset = source_edit(
    _KERNELS,
    _SCALE_LOAD,
    _SCALE_LOAD.replace("scale_ptr + offs_n", "scale_ptr + tl.arange(0, BLOCK_N)"),
    attribute="kernel",
).documented(
    """The per-vector scale of the epilogue is loaded at the tile-local offsets.

    Bug class: an epilogue vector (bias, per-channel scale, per-row norm) indexed with
    ``tl.arange(0, BLOCK_N)`` instead of ``pid_n * BLOCK_N + tl.arange(0, BLOCK_N)``: the first
    program along ``N`` is right, every later one scales its scores with the first tile's
    scales.  Invisible while ``n <= BLOCK_N`` (one program along ``N``); the load stays in bounds
    (lanes past ``n`` are masked), so nothing crashes -- the scores are just wrong.

    ``scale = tl.load(scale_ptr + tl.arange(0, BLOCK_N), mask=mask_n, other=0.0)``
    """
)


_QUERY_LOAD = "            q_ptr + offs_m[:, None] * stride_qm + offs_d[None, :],\n"
query_not_advanced = source_edit(
    _KERNELS,
    _QUERY_LOAD,
    _QUERY_LOAD.replace("offs_d[None, :]", "tl.arange(0, BLOCK_D)[None, :]"),
    attribute="kernel",
).documented(
    """The query tile is not advanced along ``D``: every step reloads the first ``BLOCK_D``
    coordinates of the queries while the code tile does move.

    Bug class: the K loop of a tiled matmul advances one operand's pointers and not the other's
    (the Triton matmul tutorial's ``a_ptrs += BLOCK_SIZE_K * stride_ak`` / ``b_ptrs += ...``
    pair with one line lost).  Right while ``D <= BLOCK_D`` (a single step); past it, the second
    step pairs query coordinates ``0..BLOCK_D-1`` with codes ``BLOCK_D..2 BLOCK_D-1``.  In bounds
    (the per-step mask still applies), deterministic.

    ``q_ptr + offs_m[:, None] * stride_qm + tl.arange(0, BLOCK_D)[None, :],``
    """
)


query_rows_tile_local = source_edit(
    _KERNELS,
    _QUERY_LOAD,
    _QUERY_LOAD.replace("offs_m[:, None]", "tl.arange(0, BLOCK_M)[:, None]"),
    attribute="kernel",
).documented(
    """The query tile's rows are addressed with the tile-local ``tl.arange(0, BLOCK_M)``.

    Bug class: a single-program kernel turned into a grid, with the program offset added to the
    store (and the mask) but not to one operand's load: every program along ``M`` scores the
    *first* ``BLOCK_M`` queries and stores them as its own rows.  Invisible while ``m <= BLOCK_M``
    (one program along ``M``; for the symmetric scores, ``n <= BLOCK_M``); the load stays in
    bounds (row ``i < BLOCK_M <= m``), so the scores are deterministically wrong, nothing more.

    ``q_ptr + tl.arange(0, BLOCK_M)[:, None] * stride_qm + offs_d[None, :],``
    """
)


#: name -> (patch, one-line bug class, citation).
KERNEL_MUTANTS: dict[str, tuple[Patch, str, str]] = {
    "scale-tile-offset": (
        scale_tile_offset,
        "epilogue per-vector scale indexed with tile-local offsets (second N program wrong)",
        "Triton/CUTLASS epilogue bugs: a per-column vector (bias, scale) loaded with the tile's "
        "local arange instead of the global column offsets -- the fused-epilogue class of "
        "vLLM/SGLang quantized GEMM kernels (per-channel scales), wrong only past the first tile"),
    "query-not-advanced": (
        query_not_advanced,
        "K loop advances the code tile but not the query tile (second D step wrong)",
        "Triton tutorial 03-matrix-multiplication: both a_ptrs and b_ptrs advance by BLOCK_K "
        "each K step; a lost pointer increment reuses the first K block -- invisible when "
        "K <= BLOCK_K, as in single-tile unit tests"),
    "query-rows-tile-local": (
        query_rows_tile_local,
        "query rows loaded at tile-local offsets (every program along M scores the first tile)",
        "program-offset bugs of tiled Triton kernels (pid_m * BLOCK_M + arange dropped from one "
        "operand's pointers, cf. tutorial 03's offs_am): single-tile tests cannot see them; "
        "only a second program along M (m > BLOCK_M) does"),
}
