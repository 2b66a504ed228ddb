"""Buggy variants of the ``ann`` Triton kernels, each a patch that swaps one in.

Every mutant is the *correct* kernel source of :mod:`fuzzkit.targets.ann.kernels` with one line
replaced (shown in each docstring), compiled as a real Triton kernel -- natively on a GPU, under
``TRITON_INTERPRET=1`` without one -- and installed as ``kernels.dist_kernel`` or
``kernels.exp_kernel``, which the launchers look up at call time (the mechanism of
:func:`fuzzkit.mutants.source_edit`: an anchor line that no longer occurs exactly once raises
``RuntimeError`` instead of silently testing the clean kernel).

They act on the ``triton`` implementation of the ``ann`` target; ``fuzzkit.targets.ann.mutants`` lists
them from :data:`KERNEL_MUTANTS`.  ``tests/test_ann_kernels.py`` shows each one failing the
kernel-level float64 comparison.
"""

from __future__ import annotations

from fuzzkit.mutants import Patch, source_edit

#: The module the mutants edit, imported only when one is applied (it needs Triton).
_KERNELS = "fuzzkit.targets.ann.kernels"


partial_tile_mask = source_edit(
    _KERNELS,
    "        mask_d = offs_d < D\n",
    "        mask_d = offs_d <= D\n",
    attribute="dist_kernel",
).documented(
    """The ``D`` mask of the distance kernel is off by one: ``offs_d <= D``.

    Bug class: the K-tail mask of a tiled reduction (the Triton matmul tutorial's
    ``offs_k < K - k * BLOCK_K``) written with ``<=``.  Only the last *partial* ``D`` tile has
    a lane at ``offs_d == D``; it reads element ``D`` of the row -- the first coordinate of the
    next stored vector and of the next query (or the zero guard tail after the last row) -- and
    adds a spurious term to the distance.  Invisible when ``BLOCK_D`` divides ``D``.

    ``mask_d = offs_d <= D``
    """
)


dedup_race = source_edit(
    _KERNELS,
    "    owner = live & (dup == 0)\n",
    "    owner = live  # no within-round dedup\n",
    attribute="exp_kernel",
).documented(
    """The within-round dedup is dropped: every lane that finds the id unvisited claims it.

    Bug class: a check-then-set on the visited set without an atomic (or without the
    in-tile dedup that replaces it here): all lanes holding one id read ``visited == 0`` before
    any of them writes 1, so an id reached from two frontier nodes in one round is emitted
    twice (GPU graph-search visited tables -- CAGRA/GGNN-style hash sets -- use atomicCAS for
    exactly this reason).  Shows as soon as two frontier nodes share an unvisited neighbour,
    which kNN graphs make common; ids are then returned twice.

    ``owner = live  # no within-round dedup``
    """
)


_SCALE_LOAD = "        scale = tl.load(scale_ptr + ids, mask=valid, other=0.0)\n"
turbo_scale_dropped = source_edit(
    _KERNELS,
    _SCALE_LOAD,
    _SCALE_LOAD[:-1] + " * 0.0 + 1.0\n",
    attribute="dist_kernel",
).documented(
    """turbo storage: the per-vector scale is not applied to the asymmetric score.

    Bug class: a quantized-distance kernel that gathers the codes and centroids but forgets
    the stored per-vector rescaling factor (``scale_j <Rq, c_j>`` computed as ``<Rq, c_j>``),
    as if every stored vector had the norm of its decoded codes -- the RaBitQ/TurboQuant-style
    norm correction (quant's ``scale-not-stored`` class) lost on the device path only.
    Float32 storage is unaffected.

    ``scale = tl.load(...) * 0.0 + 1.0``
    """
)


chunk_verdict_overwritten = source_edit(
    _KERNELS,
    "        dup = tl.maximum(dup, tl.max(same.to(tl.int32), axis=2))\n",
    "        dup = tl.max(same.to(tl.int32), axis=2)\n",
    attribute="exp_kernel",
).documented(
    """The dedup loop overwrites its per-lane verdict with each chunk's instead of keeping the
    maximum over chunks: only the *last* chunk's earlier positions count.

    Bug class: a loop-carried reduction written as an assignment (``acc = partial`` for
    ``acc += partial`` / ``m = max(m, partial)``) in a chunked kernel loop -- right while the
    loop runs once.  Here a lane whose earlier duplicate lies in any chunk but the last is
    taken for a first occurrence, so an id reached twice is emitted twice.  Lives only past the
    chunk edge: with ``E * R <= BLOCK_J`` (8 under the interpreter, 16 on a GPU) there is one
    chunk; the old interpreter configuration (one chunk of ``BLOCK_P`` always) could not show
    it at all.

    ``dup = tl.max(same.to(tl.int32), axis=2)``
    """
)


qnorm_local_row = source_edit(
    _KERNELS,
    "            qnorm = tl.load(qnorm_ptr + row, mask=valid, other=0.0)\n",
    "            qnorm = tl.load(qnorm_ptr + lane // BLOCK_M, mask=valid, "
    "other=0.0)\n",
    attribute="dist_kernel",
).documented(
    """turbo l2: ``||q||^2`` is read at the program-local row instead of the global one.

    Bug class: a local tile index used where the global one is meant (``offs`` without the
    ``pid * BLOCK`` term) on a side operand -- the main operand's pointer is right, only the
    per-row epilogue scalar comes from the wrong row.  Only programs past the first row block
    read a wrong norm, so it needs more queries than ``BLOCK_Q`` (4 under the interpreter, 1
    on a GPU), turbo storage, the l2 metric; a constant offset per query row keeps the ranking,
    so it shows in the returned estimates (no rerank).

    ``qnorm = tl.load(qnorm_ptr + lane // BLOCK_M, ...)``
    """
)


#: name -> (patch, one-line bug class, citation).
KERNEL_MUTANTS: dict[str, tuple[Patch, str, str]] = {
    "partial-tile-mask": (
        partial_tile_mask,
        "Triton mask error on the last partial D tile of the distance kernel (<= for <)",
        "K-tail masking of Triton tiled reductions (tutorial 03-matrix-multiplication, "
        "offs_k < K - k*BLOCK_K); issue 8's 'Triton mask error on the last partial tile'"),
    "dedup-race": (
        dedup_race,
        "expansion emits an id once per lane that reached it: no within-round dedup",
        "check-then-set race on a GPU visited set (CAGRA / GGNN visited hash tables use "
        "atomicCAS); issue 8's 'visited set not updated' class on the device path"),
    "turbo-scale-dropped": (
        turbo_scale_dropped,
        "turbo distance kernel drops the per-vector scale of the asymmetric score",
        "RaBitQ / TurboQuant per-vector norm correction; Qdrant turbo scoring "
        "(scale_j <Rq, c_j>), quant target's scale-not-stored class"),
    "chunk-verdict-overwritten": (
        chunk_verdict_overwritten,
        "expansion dedup keeps only the last chunk's verdict: duplicates past BLOCK_J emitted "
        "twice",
        "loop-carried reductions assigned instead of accumulated in chunked Triton loops "
        "(acc = tl.dot(...) for acc += tl.dot(...); running max / LSE overwritten per block "
        "in flash-attention style kernels)"),
    "qnorm-local-row": (
        qnorm_local_row,
        "turbo l2 distance kernel reads ||q||^2 at the program-local row (rows past BLOCK_Q)",
        "local vs global index in a tiled kernel's epilogue (pid * BLOCK_M + arange vs "
        "arange); vLLM/SGLang attention kernels' per-row scale / LSE loads indexed by the "
        "in-block row"),
}
