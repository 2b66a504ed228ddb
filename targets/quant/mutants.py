"""Realistic bugs in rotated quantizers, each a patch of one implementation.

Every mutant is modelled on a bug class seen in real quantization code and shows only where the
real bug would: a non-power-of-two dimension, a coordinate in the codebook's top cell, a 16-bit
code, a zero vector, a ragged last ``D`` block...  ``tests/test_quant.py`` proves each is found
by the oracle or a property within a bounded number of generated cases.

Citations name the project and the bug class; no issue numbers are given where we do not know a
real one.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fuzzkit.mutants import derived, device_mutants, patch, source_edit
from fuzzkit.target import Mutant
from fuzzkit.targets.quant import numpy_impl


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


# --- rotation -------------------------------------------------------------------------------


def _fwht_norm_padded_size(x: np.ndarray, chunks: Sequence[int]) -> np.ndarray:
    """Each chunk normalised by ``1/sqrt(P)``, ``P`` the next power of two of ``D``, instead of
    ``1/sqrt(c)``: right when ``D`` is a power of two (one chunk), not orthogonal otherwise."""
    dim = x.shape[-1]
    unnormalised = _ORIGINAL_FWHT(x, chunks)
    out = np.array(unnormalised, copy=True)
    offset = 0
    for c in chunks:
        out[..., offset:offset + c] *= x.dtype.type(np.sqrt(c) / np.sqrt(_next_pow2(dim)))
        offset += c
    return out


def _fwht_pad_truncate(x: np.ndarray, chunks: Sequence[int]) -> np.ndarray:
    """Zero-pad to the next power of two, one Hadamard of that size, slice back to ``D``: the
    sliced-off coordinates carry energy, so norms shrink -- only when ``D`` is not a power of 2."""
    dim = x.shape[-1]
    size = _next_pow2(dim)
    padded = np.zeros(x.shape[:-1] + (size,), dtype=x.dtype)
    padded[..., :dim] = x
    return _ORIGINAL_FWHT(padded, (size,))[..., :dim]


def _permute_scatter(x: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """The permutation applied as a scatter (``out[perm] = x``) -- its inverse.  Still orthogonal,
    so norms and scores survive; only a comparison with the specified rotation sees it."""
    out = np.empty_like(x)
    out[..., perm] = x
    return out


#: The largest Hadamard block a size-limited transform handles in one piece (see below).
FWHT_MAX_BLOCK = 64


def _fwht_capped_block(x: np.ndarray, chunks: Sequence[int]) -> np.ndarray:
    """A transform limited to ``FWHT_MAX_BLOCK``-sized blocks splits every larger block into
    ``FWHT_MAX_BLOCK``-blocks (a block-diagonal of smaller Hadamards).  Still orthogonal -- norms
    and self-scores survive -- but not the specified rotation once ``D >= 2 * FWHT_MAX_BLOCK``."""
    split: list[int] = []
    for c in chunks:
        split.extend([min(c, FWHT_MAX_BLOCK)] * max(1, c // FWHT_MAX_BLOCK))
    return _ORIGINAL_FWHT(x, tuple(split))


_ORIGINAL_FWHT = numpy_impl.fwht_blocks


# --- codes, scale, storage ------------------------------------------------------------------


def _quantize_top_cell_dropped(z: np.ndarray, boundaries: np.ndarray) -> np.ndarray:
    """One boundary too few: the top cell is never produced (code ``levels - 2`` at most)."""
    return np.searchsorted(boundaries[:-1], z, side="right")


def _quantize_into_u8(z: np.ndarray, boundaries: np.ndarray) -> np.ndarray:
    """Codes written into a ``uint8`` buffer whatever the width: turbo16 codes wrap mod 256."""
    return np.searchsorted(boundaries, z, side="right").astype(np.uint8)


def _scales_unit_norm(vectors: np.ndarray, decoded: np.ndarray) -> np.ndarray:
    """The vector's norm is not stored: ``scale = 1 / ||c||``, right only for unit vectors."""
    return 1.0 / np.sqrt(np.sum(decoded * decoded, axis=-1))


def _rescale_unguarded(y: np.ndarray) -> np.ndarray:
    """``y * sqrt(D) / ||y||`` without the zero guard: a zero vector becomes NaN (and NaN sorts
    past every boundary, so it silently gets the top code)."""
    norms = np.sqrt(np.sum(y * y, axis=-1, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return y * y.dtype.type(np.sqrt(y.shape[-1])) / norms


#: The ``eps`` of the clamped normalisation below (``F.normalize``-style ``max(||y||, eps)``).
NORM_EPS = 1e-8


def _rescale_eps_floor(y: np.ndarray) -> np.ndarray:
    """``y * sqrt(D) / max(||y||, eps)``: the clamp replaces the zero-norm guard (the zero vector
    still maps to zero), but a vector whose norm is below ``eps`` is rescaled to a norm of
    ``sqrt(D) ||y|| / eps < sqrt(D)`` -- its coordinates all fall into the cells next to 0."""
    norms = np.sqrt(np.sum(y * y, axis=-1, keepdims=True))
    return y * y.dtype.type(np.sqrt(y.shape[-1])) / np.maximum(norms, y.dtype.type(NORM_EPS))


# --- per-collection state -------------------------------------------------------------------


def _rotation_cache_keyed_by_dim(original: Callable[..., Any]) -> Callable[..., Any]:
    """The rotation cache keyed by ``(dim, dtype)`` only: the first collection of a dimension
    fixes the rotation every later one of that dimension gets, whatever its seed.  A case run
    alone is self-consistent (one seed per case), so it fails only after an earlier case left an
    entry of its dimension with another seed: state-dependent.  The buggy cache is a fresh dict
    per application (:func:`~fuzzkit.mutants.derived`), so nothing leaks into a later (clean)
    run."""
    cache: dict[tuple[int, str], Any] = {}

    def rotation(dim: int, seed: int, dtype: np.dtype) -> Any:
        key = (int(dim), np.dtype(dtype).name)
        if key not in cache:
            cache[key] = original(dim, seed, dtype)
        return cache[key]

    return rotation


# --- scoring --------------------------------------------------------------------------------


def _score_quantized_query(rotated_queries: np.ndarray, codes: np.ndarray, scales: np.ndarray,
                           centroids: np.ndarray) -> np.ndarray:
    """Symmetric (SDC) instead of asymmetric (ADC) scoring: the rotated query is encoded with
    the storage codec (rescale, nearest centroid, norm-preserving scale) before the dot
    product.  Invisible at 16 bits, where the query's quantization error is below float32
    rounding of the score; clear at 8 bits."""
    dtype = rotated_queries.dtype
    table = centroids.astype(dtype)
    boundaries = 0.5 * (centroids[1:] + centroids[:-1])  # the codebooks' boundaries are midpoints
    q_codes = np.searchsorted(boundaries, numpy_impl.rescale(rotated_queries), side="right")
    q_decoded = table[q_codes]
    q_scales = numpy_impl.compute_scales(rotated_queries, q_decoded)
    quantized = q_decoded * q_scales[:, None]
    decoded = table[codes.astype(np.intp)]
    return (quantized @ decoded.T) * scales.astype(dtype)[None, :]


_HOISTED_D_MASK = source_edit(
    "fuzzkit.targets.quant.kernels",
    "    mask_n = offs_n < N\n",
    "    mask_n = offs_n < N\n    mask_d = tl.arange(0, BLOCK_D) < D\n",
    ("        mask_d = offs_d < D\n", ""),
    attribute="kernel",
).documented(
    """``kernels.score_kernel`` with the ``D`` mask hoisted out of the loop: computed once from
    ``tl.arange(0, BLOCK_D) < D``, right for the first ``D`` block, all-true for every later
    one -- so when ``D > BLOCK_D`` and ``D % BLOCK_D != 0`` the ragged last block reads past the
    end of each row (into the next row, or the launcher's zero guard tail)."""
)


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "hadamard-norm-padded-size", "numpy",
        "non-orthogonal rotation: Hadamard normalised by the padded size, not each block's",
        "Hadamard-rotation quantizers (QuaRot/SpinQuant-style kernels; Dao-AILab "
        "fast-hadamard-transform takes the 1/sqrt(n) scale from the caller): a scale computed "
        "for the padded power-of-two size is wrong for block-decomposed non-power-of-two dims",
        patch(numpy_impl, fwht_blocks=_fwht_norm_padded_size),
    ),
    Mutant(
        "pad-truncate", "numpy",
        "wrong padding for non-power-of-two D: pad, transform, slice back to D",
        "Walsh-Hadamard needs power-of-two sizes; padding then truncating the rotated vector "
        "discards energy (FAISS's RandomRotationMatrix keeps d_out >= d_in for this reason); "
        "TurboQuant/RaBitQ-style codecs assume an orthogonal rotation",
        patch(numpy_impl, fwht_blocks=_fwht_pad_truncate),
    ),
    Mutant(
        "inverse-permutation", "numpy",
        "rotation differs from the specified one: scatter where a gather is meant",
        "permutation-convention bugs (perm vs argsort(perm)); the rotation is part of the "
        "stored format (Qdrant quantized segments), so codes written by one build would be "
        "misread by another",
        patch(numpy_impl, permute=_permute_scatter),
    ),
    Mutant(
        "query-quantized", "numpy",
        "query quantized before scoring (symmetric instead of asymmetric distance)",
        "Jegou et al., 'Product quantization for nearest neighbor search' (TPAMI 2011): SDC vs "
        "ADC; TurboQuant (Zandieh et al., 2025) and Qdrant score the un-quantized rotated query",
        patch(numpy_impl, score=_score_quantized_query),
    ),
    Mutant(
        "scale-not-stored", "numpy",
        "per-vector norm/scale not stored (vectors assumed unit-norm)",
        "Qdrant normalises only Cosine collections; Dot/Euclid need the stored norm -- the "
        "per-vector rescaling factor of RaBitQ/TurboQuant-style codecs dropped",
        patch(numpy_impl, compute_scales=_scales_unit_norm),
    ),
    Mutant(
        "top-cell-dropped", "numpy",
        "off-by-one codebook boundary count: the top cell is never emitted",
        "scalar-quantizer edge bugs (L levels need L-1 boundaries; clamping to 2**bits - 2), "
        "FAISS ScalarQuantizer / Qdrant scalar-quantization range-edge class",
        patch(numpy_impl, quantize=_quantize_top_cell_dropped),
    ),
    Mutant(
        "turbo16-codes-in-u8", "numpy",
        "integer overflow: 16-bit codes stored in a uint8 buffer",
        "code-width/storage-dtype bugs in quantized storage (NumPy astype and Rust `as u8` wrap "
        "silently); only the 16-bit variant overflows",
        patch(numpy_impl, quantize=_quantize_into_u8),
    ),
    Mutant(
        "zero-vector-nan", "numpy",
        "division by a zero norm: the zero vector becomes NaN",
        "zero-vector normalisation bugs (FAISS normalize_L2 and cosine distance on zero "
        "vectors; Qdrant zero-vector handling in cosine preprocessing)",
        patch(numpy_impl, rescale=_rescale_unguarded),
    ),
    Mutant(
        "hoisted-d-mask", "triton",
        "Triton mask error on a ragged last block (mask hoisted out of the K loop)",
        "the K-tail masking of Triton matmul kernels (the tutorial recomputes the mask per "
        "K step); out-of-bounds tile loads without a per-step mask read neighbouring rows",
        _HOISTED_D_MASK,
    ),
    # --- past a threshold, at an extreme value, or after an earlier case (this issue) --------
    Mutant(
        "hadamard-block-capped-64", "numpy",
        "size-limited fast Walsh-Hadamard: blocks above 64 split into 64-blocks (D >= 128)",
        "fast-Hadamard kernels are specialised per power-of-two size up to a maximum (Dao-AILab "
        "fast-hadamard-transform); rotation codecs compose smaller Hadamards for other sizes "
        "(QuaRot's kron(H_k, H_2^n)); a build that splits larger blocks stays orthogonal but "
        "writes codes another build misreads -- only for D >= 2 x the limit",
        patch(numpy_impl, fwht_blocks=_fwht_capped_block),
    ),
    Mutant(
        "norm-eps-floor", "numpy",
        "normalisation clamps the norm at eps: vectors with ||v|| < 1e-8 are mis-rescaled",
        "x / max(||x||, eps) (torch.nn.functional.normalize's form, default eps 1e-12) with an "
        "eps sized for float16 (1e-8 .. 1e-6) in a float32 path: right for the zero vector, "
        "wrong for every norm below eps -- the epsilon-in-normalisation class (FAISS's "
        "fvec_renorm_L2 guards only the exact zero norm)",
        patch(numpy_impl, rescale=_rescale_eps_floor),
    ),
    Mutant(
        "rotation-cache-keyed-by-dim", "numpy",
        "stale per-collection cache: the rotation cached by dimension, its seed not in the key",
        "cache keys missing a parameter the value depends on (vLLM/torch.compile and Triton "
        "autotuner cache-key bugs); Qdrant keeps a rotation per collection -- two collections "
        "of one dimension with different seeds must not share it",
        patch(numpy_impl, rotation=derived(_rotation_cache_keyed_by_dim)),
    ),
)

#: The Triton kernel's mutants (:mod:`fuzzkit.targets.quant.kernel_mutants`), as ``kernel-<name>``.
DEVICE_MUTANTS: list[Mutant] = device_mutants("fuzzkit.targets.quant.kernel_mutants")

