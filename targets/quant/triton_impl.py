"""Implementation "triton": the NumPy encoder plus the Triton scoring kernel.

Encoding happens once per vector at insert time (CPU in Qdrant too); scoring is the hot loop,
so that is what runs as a kernel -- natively on a GPU, under ``TRITON_INTERPRET=1`` without one.
Symmetric scores reuse the same kernel with the decoded, scaled stored vectors as the "queries".
The kernel module is imported lazily so that importing the target never imports torch/triton.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from fuzzkit.targets.quant import numpy_impl


def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs -> outputs`` with the same schema as :func:`numpy_impl.run`; float32 scores."""
    from fuzzkit.targets.quant import kernels

    s = numpy_impl.store(inputs)
    stored = numpy_impl.decode(s.codes, s.centroids.astype(np.float32)) * s.scales[:, None]
    return numpy_impl.outputs(
        s,
        kernels.score(s.rotated_queries, s.codes, s.scales, s.centroids),
        kernels.score(stored, s.codes, s.scales, s.centroids),
    )
