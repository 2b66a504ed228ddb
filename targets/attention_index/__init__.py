"""Target ``attention_index``: sparse-attention lightning indexers (dense, HiSA, AttentionIndex)
against a float64 dense reference.

The model (read literally by :mod:`.reference`; shared arithmetic in :mod:`.model`)
-----------------------------------------------------------------------------------
Indexer queries ``q`` float32 (T, H, d), head weights ``w`` (T, H), keys ``k`` (S, d); query t
sits at ``pos(t) = S - T + t``.  Indexer score ``I(t, x) = sum_h w[t,h] ReLU(q[t,h].x) / sqrt(d)``
over causal keys (``s <= pos(t)``); results are the ``topk`` best by (score desc, id asc), -1/-inf
padded.

* ``dense``: every causal key.
* ``hisa``: blocks of ``block`` keys, representative = block mean; the ``top_m`` best eligible
  blocks (first position <= pos(t)) are probed, their causal members scored exactly.
* ``attention_index``: chunked k-means (the first ``chunk`` keys by seeded Lloyd, every later key
  joins its nearest centroid which becomes the running mean); the ``top_g`` best eligible groups'
  causal members plus ``sink`` / ``local`` positions are scored exactly.

Outputs: ``ids`` int64 (T, topk), ``scores`` (T, topk), ``candidates`` (T,), and for
attention_index ``assignment`` (S,), ``centroids`` (G, d), ``group_sizes`` (G,).

Implementations: ``numpy`` (:mod:`.index`) and ``triton`` (:mod:`.triton_impl`: the same search
with the three query-time hooks as Triton kernels).

Reach: the sizes where the code changes path are declared as data -- the shared build / search /
relation thresholds and the case's named sizes in :mod:`.thresholds`, the kernels' tiles as
launched in each mode in :mod:`.tiles` -- and :mod:`.strategies` draws every size at them.
"""

from __future__ import annotations


from fuzzkit import triton_support
from fuzzkit.target import Implementation, Target, lazy
from fuzzkit.targets.attention_index import checks, reference


def _kernel_thresholds() -> tuple:
    """The Triton kernels' tiles as launched in this process's mode (interpreter or GPU)."""
    from fuzzkit.targets.attention_index import tiles

    return tiles.thresholds()


def target() -> Target:
    """The ``attention_index`` target (entry point ``fuzzkit.targets.attention_index:target``)."""
    from fuzzkit.targets.attention_index import thresholds
    from fuzzkit.targets.attention_index.limits import LIMITS
    from fuzzkit.targets.attention_index.mutants import DEVICE_MUTANTS, MUTANTS
    from fuzzkit.targets.attention_index.properties import PROPERTIES

    return Target(
        name="attention_index",
        description="sparse-attention lightning indexer: dense, HiSA blocks and AttentionIndex "
                    "(chunked k-means groups, sink/local), float32 vs float64",
        strategy=lazy("fuzzkit.targets.attention_index.strategies:inputs"),
        reference=reference.run,
        implementations={
            "numpy": Implementation(
                "numpy", lazy("fuzzkit.targets.attention_index.index:run"), backend="numpy",
                description="vectorized NumPy indexer, float32 scores",
                sources=("fuzzkit.targets.attention_index.index",),
            ),
            "triton": Implementation(
                "triton", lazy("fuzzkit.targets.attention_index.triton_impl:run"), backend="triton",
                description="NumPy build + Triton kernels for scoring and top-k",
                unavailable=triton_support.unavailable_with("fuzzkit.targets.attention_index.triton_impl"),
                thresholds=_kernel_thresholds,
                sources=("fuzzkit.targets.attention_index.triton_impl", "fuzzkit.targets.attention_index.kernels",
                         "fuzzkit.targets.attention_index.index"),
            ),
        },
        oracle=checks.oracle,
        properties=PROPERTIES,
        mutants=[*MUTANTS, *DEVICE_MUTANTS],
        reducible=("k",),
        validate=checks.validate,
        thresholds=thresholds.SHARED,
        sizes=thresholds.SIZES,
        sources=("fuzzkit.targets.attention_index.model",),
        limits=LIMITS,
        schema=lazy("fuzzkit.targets.attention_index.schema:schema"),  # what describe shows
    )
