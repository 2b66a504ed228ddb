"""Buggy variants of the ``attention_index`` Triton kernels, each a patch that swaps one in.

Every mutant is the *correct* kernel source of :mod:`fuzzkit.targets.attention_index.kernels` with one
line replaced (shown in each docstring), compiled as a real Triton kernel -- natively on a GPU,
under ``TRITON_INTERPRET=1`` without one -- and installed as ``kernels.rep_kernel``,
``kernels.member_kernel`` or ``kernels.select_kernel``, which the launchers look up at call time
(:func:`fuzzkit.mutants.source_edit`: an anchor line that no longer occurs exactly once raises
``RuntimeError`` instead of silently testing the clean kernel).

They act on the ``triton`` implementation of the ``attention_index`` target;
``fuzzkit.targets.attention_index.mutants`` lists them from :data:`KERNEL_MUTANTS`.
``tests/test_attention_index_kernels.py`` shows each one failing the kernel-level float64
comparison.
"""

from __future__ import annotations

from fuzzkit.mutants import Patch, source_edit

#: The module the mutants edit, imported only when one is applied (it needs Triton).
_KERNELS = "fuzzkit.targets.attention_index.kernels"


stale_member_list = source_edit(
    _KERNELS,
    "    ids = tl.load(cand_ptr + row * stride_c + col, mask=in_tile, other=-1)\n",
    "    ids = tl.load(cand_ptr + col, mask=in_tile, other=-1)\n",
    attribute="member_kernel",
).documented(
    """The member gather ignores the per-row offset of the candidate list: every query row of
    a tile reads row 0's member list (``cand_ptr + col``).

    Bug class: a sparse-attention gather that indexes the candidate/ block table with the
    column only -- a stale or shared member list, as when a per-query index buffer is reused
    from the previous query (or the row stride is dropped).  The causal mask still uses the
    row's own position, so future keys of row 0's list stay masked for earlier rows; the scores
    are of the wrong keys.  Invisible only when every row's list equals row 0's (a single query,
    or rows with identical lists); dense lists differ in length (causal padding), so even dense
    search changes.

    ``ids = tl.load(cand_ptr + col, mask=in_tile, other=-1)``
    """
)


topk_tie_break = source_edit(
    _KERNELS,
    "        best_id = tl.min(tl.where(tie, ids, BIG_ID), axis=1)\n",
    "        best_id = tl.max(tl.where(tie, ids, -1), axis=1)\n",
    attribute="select_kernel",
).documented(
    """Top-k breaks score ties by the *largest* id instead of the smallest.

    Bug class: a selection kernel whose tie-break disagrees with the reference order
    (``torch.topk`` / radix-select make no tie promise; a hand-written arg-max that keeps the
    last index instead of the first).  Shows only on exact score ties -- all-zero scores from
    ReLU, duplicated keys or representatives -- where the returned id set or order changes.

    ``best_id = tl.max(tl.where(tie, ids, -1), axis=1)``
    """
)


partial_tile_mask = source_edit(
    _KERNELS,
    "            in_d = offs_d < D\n",
    "            in_d = offs_d <= D\n",
    attribute="member_kernel",
).documented(
    """The ``d`` mask of the member scoring kernel is off by one: ``offs_d <= D``.

    Bug class: the K-tail mask of a tiled reduction written with ``<=``.  Only the last
    *partial* ``d`` tile has a lane at ``offs_d == D``; it reads the first coordinate of the
    next head of the query and of the next key (or the zero guard tail) and adds a spurious
    term to the dot product.  Invisible when ``BLOCK_D`` divides ``d``.

    ``in_d = offs_d <= D``
    """
)


member_dot_overwritten = source_edit(
    _KERNELS,
    "            x = tl.load(k_row[:, None] + offs_d[None, :], mask=tile, other=0.0)\n"
    "            dot += tl.sum(qv * x, axis=1)\n",
    "            x = tl.load(k_row[:, None] + offs_d[None, :], mask=tile, other=0.0)\n"
    "            dot = tl.sum(qv * x, axis=1)\n",
    attribute="member_kernel",
).documented(
    """The member scoring kernel *assigns* each ``d`` step's partial dot product instead of
    adding it: only the last ``BLOCK_D`` step counts.

    Bug class: an accumulator overwritten inside the K loop of a tiled reduction
    (``acc = tl.dot(a, b)`` / ``acc = tl.sum(...)`` where ``acc += ...`` was meant).  Invisible
    while ``d <= BLOCK_D`` (one step): it lives past the ``d`` tile threshold (``d = 9`` under
    the interpreter, ``d = 65`` natively).

    ``dot = tl.sum(qv * x, axis=1)`` (member kernel only)
    """
)


_WEIGHT_LOAD = ("        wv = tl.load(w_ptr + row * stride_wt + h, mask=live, other=0.0)\n"
                "        acc += wv * tl.maximum(dot, 0.0)\n"
                "    score = tl.where(live, acc * scale, float(\"-inf\"))\n")
member_weight_local_row = source_edit(
    _KERNELS,
    _WEIGHT_LOAD,
    _WEIGHT_LOAD.replace("w_ptr + row * stride_wt", "w_ptr + (lane // BLOCK_M) * stride_wt"),
    attribute="member_kernel",
).documented(
    """The member scoring kernel loads the head weight ``w[t, h]`` with the tile-*local* row
    (``lane // BLOCK_M``) instead of the global one: every row program reads the first
    ``BLOCK_T`` rows' weights.

    Bug class: a program-id offset missing on one pointer of a tiled kernel (a per-row scale or
    weight indexed with the in-tile offset).  Invisible while one program holds every query
    row: it lives past the ``T`` tile threshold (``T = 17`` under the interpreter's 16-row
    tiles; ``T = 2`` natively, one row per program).

    ``wv = tl.load(w_ptr + (lane // BLOCK_M) * stride_wt + h, mask=live, other=0.0)``
    """
)


member_gather_first_tile = source_edit(
    _KERNELS,
    "    ids = tl.load(cand_ptr + row * stride_c + col, mask=in_tile, other=-1)\n",
    "    ids = tl.load(cand_ptr + row * stride_c + lane % BLOCK_M, mask=in_tile, "
    "other=-1)\n",
    attribute="member_kernel",
).documented(
    """The member scoring kernel gathers candidate ids with the tile-*local* column
    (``lane % BLOCK_M``): every column program scores the row's first ``BLOCK_M`` candidates
    and stores those scores in its own columns, next to other keys' ids.

    Bug class: a gather index missing the column-tile offset (the column analogue of a stale
    member list).  Invisible while a row fits one column tile: it lives past the candidate tile
    threshold (``M = 17`` under the interpreter, ``M = 65`` natively).

    ``ids = tl.load(cand_ptr + row * stride_c + lane % BLOCK_M, mask=in_tile, other=-1)``
    """
)


#: name -> (patch, one-line bug class, citation).
KERNEL_MUTANTS: dict[str, tuple[Patch, str, str]] = {
    "stale-member-list": (
        stale_member_list,
        "Triton gather using a stale member list: every row gathers row 0's candidate ids",
        "per-query sparse index gather (DeepSeek-V3.2 DSA / HiSA top-k index buffers, "
        "paged block-table gathers); issue 9's 'Triton gather using a stale member list'"),
    "topk-tie-break": (
        topk_tie_break,
        "top-k kernel breaks score ties by id desc instead of id asc",
        "torch.topk / radix-select give no tie order; issue 9's tie-aware top-k comparison "
        "(oracles/topk.py)"),
    "partial-tile-mask": (
        partial_tile_mask,
        "Triton mask error on the last partial d tile of the member scoring kernel (<= for <)",
        "K-tail masking of Triton tiled reductions (tutorial 03-matrix-multiplication, "
        "offs_k < K - k*BLOCK_K); issue 8's 'Triton mask error on the last partial tile'"),
    "member-dot-overwritten": (
        member_dot_overwritten,
        "accumulator overwritten in the d loop of the member scoring kernel (= for +=): only "
        "the last BLOCK_D step counts, past the d tile",
        "K-loop accumulation of Triton tiled reductions (tutorial 03-matrix-multiplication, "
        "accumulator = tl.dot(a, b, accumulator)); the 'acc = instead of acc +=' bug class"),
    "member-gather-first-tile": (
        member_gather_first_tile,
        "candidate gather missing the column-tile offset in the member scoring kernel: every "
        "column program scores the row's first BLOCK_M candidates",
        "per-query sparse index gathers in tiled kernels (DeepSeek-V3.2 DSA / NSA top-k index "
        "buffers, paged block-table gathers) indexed with the in-tile offset only"),
    "member-weight-local-row": (
        member_weight_local_row,
        "head weights loaded with the tile-local row index in the member scoring kernel: "
        "rows of a second row program use the first program's weights",
        "per-row scale / weight pointers missing the program-id offset in tiled kernels (e.g. "
        "per-token activation scales in vLLM / SGLang fp8 GEMM and indexer kernels); the "
        "DeepSeek-V3.2 indexer's per-token head weights"),
}
