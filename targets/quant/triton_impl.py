"""Implementation "triton": the NumPy encoder plus the Triton scoring kernel.

Encoding happens once per vector at insert time (CPU in Qdrant too); scoring is the hot loop,
so that is what runs as a kernel -- natively on a GPU, under ``TRITON_INTERPRET=1`` without one.
Symmetric scores reuse the same kernel with the decoded, scaled stored vectors as the "queries".
The kernel module is imported lazily so that importing the target never imports torch/triton.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from targets.quant import numpy_impl, reference


def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs -> outputs`` with the same schema as :func:`numpy_impl.run`; float32 scores."""
    from targets.quant import kernels

    dtype = numpy_impl.working_dtype(inputs)
    vectors = np.asarray(inputs["vectors"])
    queries = np.asarray(inputs["queries"])
    bits = int(inputs["bits"])
    dim = vectors.shape[1]
    plan = reference.rotation_plan(dim, int(inputs["rotation_seed"]))
    book = reference.codebook(str(inputs["codebook"]), bits)

    packed, rotated, _ = numpy_impl.encode(vectors, plan, book, dtype)
    codes, scales = numpy_impl.unpack(packed, dim, bits)
    rotated_queries = numpy_impl.prepare_queries(queries, plan, dtype)
    stored = numpy_impl.decode(codes, book.centroids.astype(np.float32)) * scales[:, None]
    return {
        "codes": codes,
        "scales": scales,
        "rotated_vectors": rotated,
        "rotated_queries": rotated_queries,
        "scores": kernels.score(rotated_queries, codes, scales, book.centroids),
        "symmetric_scores": kernels.score(stored, codes, scales, book.centroids),
        "encoded_bytes": int(packed.shape[1]),
    }
