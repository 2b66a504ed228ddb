"""Target ``ann``: OctEx approximate nearest-neighbour search, against exact float64 brute force.

The model (read literally by :mod:`.reference`; its arithmetic in :mod:`.model`)
---------------------------------------------------------------------------------
Stored vectors ``X`` float32 (n, D), ids = row numbers; queries ``Q`` float32.  Metric ``l2``
(squared L2) or ``ip`` (``-<x, q>``); smaller is better, ties by id.

* **Tables.** ``L`` tables; table ``l`` projects to ``m`` dims with ``A_l`` (entries
  N(0,1)/sqrt(m)) and offsets ``u_l`` in [0,1)^m drawn from ``default_rng([seed, l])``: the first
  L tables of a bigger L are the same tables.
* **Cells.** ``c = floor(A_l x / w + u_l)``; centre ``(c + 0.5 - u_l) w``.  A cell keeps the ``C``
  members nearest its centre (projected squared distance, ties by id).  ``w = null``: one cell per
  table, ranked by ``||A_l x||^2``.
* **Probing.** The query's own cell plus the ``P - 1`` adjacent cells (one coordinate +-1) with the
  smallest face distance (``f = y/w + u - c``; down costs ``f_j``, up ``1 - f_j``; ties by
  (j, down first)).
* **Graph.** The exact kNN graph: per id the ``R`` nearest other ids, -1 padded.
* **Search.** visited = candidates (the union of the probed cells' lists); frontier = the ``E``
  best; ``T`` rounds: the frontier's unvisited graph neighbours become visited and the next
  frontier is their ``E`` best.  Result: the ``k`` best of everything visited.
* **turbo8 / turbo16.** Vectors stored with the ``quant`` target's codec (rotation seed = seed,
  Lloyd--Max codebook); the search ranks by the asymmetric estimate (``-s`` or
  ``||q||^2 + ||v||^2 - 2 s``, ``s = scale <R q, c>``); ``rerank`` re-ranks the ``max(k, E)`` best
  visited by the exact distance.
* **Inserts.** ``inserted`` vectors are added after the build (ids continue from n); the index
  must then be what a build over all of them would be.

Inputs::

    vectors   float32 (n, D)      stored at build time (rows reducible)
    inserted  float32 (n2, D)     optional, inserted after the build
    queries   float32 (q, D)      (rows reducible)
    L m C R E T P k               ints (L, m, C, R, E, P, k >= 1; T >= 0; P <= 2m + 1)
    w                             float > 0 or null
    seed                          int in [0, 2**63)
    metric "l2" | "ip";  storage "float32" | "turbo8" | "turbo16";  rerank bool

Outputs: ``ids`` int64 (q, k) and ``distances`` (q, k) (-1 / +inf padded), ``visited_count``
(q,), the index (``cell_table``, ``cell_coords``, ``cell_offsets``, ``cell_members``, ``graph``)
and, with turbo storage, ``codes`` and ``scales``.  The reference adds ``"aux"`` for the oracle.

Implementations: ``numpy`` (:mod:`.index`: vectorized build, float32 search; its two
query-time hooks in :mod:`.numpy_hooks`) and ``triton`` (:mod:`.triton_impl`: the same build and
search loop, the two hooks as Triton kernels, :mod:`.kernels`, launched with the tiles of
:mod:`.tiles`).  ``faiss-ivf`` / ``faiss-hnsw`` (:mod:`.adapters`) are FAISS run as black boxes:
their outputs declare it, and they are judged by validity and recall only
(:mod:`.adapters.judge`).  Where their code changes path -- the graph build's block, the kernels'
tiles as launched in this mode, and where ``R``, ``C``, ``E``, ``k`` and ``P`` meet the data -- is
declared in :mod:`.thresholds`, and :mod:`.strategies` aims at it.
"""

from __future__ import annotations


from fuzzkit import triton_support
from fuzzkit.target import Implementation, Target, lazy
from fuzzkit.targets.ann import checks, reference


def target() -> Target:
    """The ``ann`` target (the registry's entry point ``fuzzkit.targets.ann:target``)."""
    from fuzzkit.targets.ann.adapters import faiss_impl, judge
    from fuzzkit.targets.ann.adapters.faiss_mutants import MUTANTS as FAISS_MUTANTS
    from fuzzkit.targets.ann.limits import LIMITS
    from fuzzkit.targets.ann.mutants import DEVICE_MUTANTS, MUTANTS
    from fuzzkit.targets.ann.properties import PROPERTIES
    from fuzzkit.targets.ann.thresholds import INDEX_THRESHOLDS, SIZES, kernel_thresholds

    return Target(
        name="ann",
        description="OctEx approximate nearest-neighbour search (projections, capped cells, "
                    "kNN-graph beam expansion; float32 / turbo8 / turbo16 storage)",
        strategy=lazy("fuzzkit.targets.ann.strategies:inputs"),
        reference=reference.run,
        implementations={
            "numpy": Implementation(
                "numpy", lazy("fuzzkit.targets.ann.index:run"), backend="numpy",
                description="vectorized NumPy build, float32 search",
                sources=("fuzzkit.targets.ann.numpy_hooks",),
            ),
            "triton": Implementation(
                "triton", lazy("fuzzkit.targets.ann.triton_impl:run"), backend="triton",
                description="NumPy build + Triton kernels for candidate distances and expansion",
                unavailable=triton_support.unavailable_with("fuzzkit.targets.ann.triton_impl"),
                thresholds=kernel_thresholds,
                sources=("fuzzkit.targets.ann.triton_impl", "fuzzkit.targets.ann.kernels", "fuzzkit.targets.ann.tiles"),
            ),
            # black boxes (fuzzkit.targets.ann.adapters): judged by validity + recall only
            "faiss-ivf": Implementation(
                "faiss-ivf", lazy("fuzzkit.targets.ann.adapters.faiss_impl:ivf_flat"),
                backend="external", description="FAISS IndexIVFFlat (faiss-cpu), black box",
                unavailable=faiss_impl.unavailable, sources=("fuzzkit.targets.ann.adapters.faiss_impl",),
            ),
            "faiss-hnsw": Implementation(
                "faiss-hnsw", lazy("fuzzkit.targets.ann.adapters.faiss_impl:hnsw"),
                backend="external", description="FAISS IndexHNSWFlat (faiss-cpu), black box",
                unavailable=faiss_impl.unavailable, sources=("fuzzkit.targets.ann.adapters.faiss_impl",),
            ),
        },
        # an implementation whose outputs declare a black-box index type (adapters.judge.KEY)
        # is judged by validity + recall; fuzzkit's own keep the exact structural oracle
        oracle=judge.dispatch(checks.oracle),
        properties=judge.properties(PROPERTIES),
        mutants=[*MUTANTS, *DEVICE_MUTANTS, *FAISS_MUTANTS],
        reducible=("vectors", "queries", "inserted"),
        validate=checks.validate,
        # index.py (build, probing, the search loop, rerank) runs under both implementations:
        # the Triton one replaces only the two query-time hooks of numpy_hooks.py
        thresholds=INDEX_THRESHOLDS,
        sizes=SIZES,
        sources=("fuzzkit.targets.ann.index", "fuzzkit.targets.ann.model"),
        limits=LIMITS,
        schema=lazy("fuzzkit.targets.ann.schema:schema"),  # what describe shows
    )
