"""Vectorized NumPy turbo8 / turbo16: fast Walsh--Hadamard butterflies, ``searchsorted`` codes.

This is the optimized implementation the reference judges: it computes in float32 by default (as
a vector database would), or in float64 when ``inputs["precision"] == "float64"`` -- which the
orthogonality property uses to check the rotation to ~1e-12.  The codes and the float32 scale go
through a packed byte layout (``pack``/``unpack``) exactly as they would be stored, so storage
bugs (code width, scale width) are in the path under test.

Every step is a module-level function and every call between them is a global lookup made at
call time, so a mutant can replace one step with
``unittest.mock.patch.object(numpy_impl, "rotate", buggy)`` and :func:`run` (and the Triton
implementation, which reuses the encoder) picks the replacement up.

The rotation parameters (permutations, signs) and the codebook tables come from
:mod:`fuzzkit.targets.quant.reference`: they are data that define the format, not computation.

Per-collection state is cached, as a vector database keeps it per collection (Qdrant holds one
rotation per quantized collection): :func:`rotation` returns the rotation's rounds with the signs
already in the working dtype, and :func:`centroid_table` the codebook's centroids in it, so the
hot path neither re-derives nor re-casts them per call.  Each cache is keyed by everything its
value depends on -- ``(dim, rotation_seed, dtype)`` and ``(codebook, dtype)`` -- and holds
only *data*: every computation step (:func:`permute`, :func:`fwht_blocks`, ...) still runs, and is
still looked up, at call time, so a mutant patching a step is never hidden behind a cached value.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping, Sequence

import numpy as np

from fuzzkit import reach
from fuzzkit.targets.quant import reference

Plan = Sequence[tuple[np.ndarray, np.ndarray]]

#: Where the encoder changes path with ``D``: the block Walsh--Hadamard tiles ``D`` by its binary
#: expansion, so at every power of two ``t`` the largest block and the butterfly depth grow --
#: ``t - 1`` is ``log2 t`` blocks of every smaller size, ``t`` one block, ``t + 1`` adds a 1-block.
#: The strategy's usual dimensions (``<= 80``) already hold every power of two +-1 up to 65; this
#: threshold takes ``D`` past them: 63..65, and at ``2t`` the 128-block (7 levels: 127 is seven
#: blocks, 129 a 128-block and a 1-block).  Capped at ``2t + 1``: the float64 reference is dense
#: (``D x D`` stage matrices built in Python loops).  Every implementation runs through this
#: encoder, so the target declares it (``Target.thresholds``).
ENCODER_THRESHOLDS: tuple[reach.Threshold, ...] = (
    reach.Threshold("D", 64, "block Walsh-Hadamard: a 64-block (6 butterfly levels); at 2t a "
                    "128-block (7 levels)", cap=129),
)


#: Collections whose rotation / centroid table stay cached (least recently used dropped first).
CACHED_COLLECTIONS = 64


def working_dtype(inputs: Mapping[str, Any]) -> np.dtype:
    """float32 unless the case asks for float64."""
    precision = str(inputs.get("precision", "float32"))
    if precision not in ("float32", "float64"):  # pragma: no cover - defensive: validate() rejects
        raise ValueError(f"precision must be 'float32' or 'float64', got {precision!r}")
    return np.dtype(precision)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@functools.lru_cache(maxsize=CACHED_COLLECTIONS)
def _rotation(dim: int, seed: int, dtype: str) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    return tuple((perm, _read_only(signs.astype(dtype)))
                 for perm, signs in reference.rotation_plan(dim, seed))


def rotation(dim: int, seed: int, dtype: np.dtype) -> Plan:
    """The collection's rotation rounds ``(perm, signs)``, signs in ``dtype`` (cached per
    ``(dim, seed, dtype)``: the rotation depends on all three)."""
    return _rotation(int(dim), int(seed), np.dtype(dtype).name)


@functools.lru_cache(maxsize=CACHED_COLLECTIONS)
def _centroid_table(book: reference.Codebook, dtype: str) -> np.ndarray:
    return _read_only(book.centroids.astype(dtype))


def centroid_table(book: reference.Codebook, dtype: np.dtype) -> np.ndarray:
    """``book``'s centroids in ``dtype``, cached per ``(book, dtype)``: a codebook hashes by
    identity, and the cache holds the book, so an entry can never answer for another book."""
    return _centroid_table(book, np.dtype(dtype).name)


def fwht_blocks(x: np.ndarray, chunks: Sequence[int]) -> np.ndarray:
    """Normalised Walsh--Hadamard transform of each power-of-two chunk along the last axis.

    Butterflies in place on a copy: ``log2(c)`` levels of ``(a + b, a - b)``, then one multiply by
    ``1/sqrt(c)`` per chunk (exact for ``c = 4^k``).  Sylvester ordering, like the reference.

    Chunks in the binary-expansion order (powers of two, largest first) all start at a multiple
    of their own size, so level ``h`` is one butterfly over the prefix of the chunks of at least
    ``2h`` coordinates -- every chunk's level at once, the same additions on the same elements --
    and the normalisation one multiply by a per-coordinate ``1/sqrt(c)``.  Other chunkings take
    the chunk-by-chunk path.
    """
    out = np.array(x, copy=True, order="C")
    if not _largest_first(chunks) or sum(chunks) != out.shape[-1]:
        return _fwht_each_chunk(out, chunks)
    lead = out.shape[:-1]
    h = 1
    while True:
        prefix = sum(c for c in chunks if c >= 2 * h)
        if prefix == 0:
            break
        pairs = out[..., :prefix].reshape(*lead, prefix // (2 * h), 2, h)  # a view: in place
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        total, difference = a + b, a - b
        a[...] = total
        b[...] = difference
        h *= 2
    out *= _normalisers(tuple(chunks), out.dtype.name)
    return out


def _largest_first(chunks: Sequence[int]) -> bool:
    return all(c > 0 and c & (c - 1) == 0 for c in chunks) and all(
        a >= b for a, b in zip(chunks, chunks[1:]))


@functools.lru_cache(maxsize=CACHED_COLLECTIONS)
def _normalisers(chunks: tuple[int, ...], dtype: str) -> np.ndarray:
    """Each coordinate's ``1/sqrt(c)`` (its chunk's), in ``dtype`` -- as a scalar per chunk."""
    kind = np.dtype(dtype).type
    return _read_only(np.concatenate(
        [np.full(c, kind(1.0 / np.sqrt(c)), dtype=dtype) for c in chunks]))


def _fwht_each_chunk(out: np.ndarray, chunks: Sequence[int]) -> np.ndarray:
    """:func:`fwht_blocks` one chunk at a time, for any chunking (in place on ``out``)."""
    offset = 0
    for c in chunks:
        block = np.array(out[..., offset:offset + c], copy=True, order="C")
        lead = block.shape[:-1]
        h = 1
        while h < c:
            pairs = block.reshape(*lead, c // (2 * h), 2, h)
            a, b = pairs[..., 0, :], pairs[..., 1, :]
            total, difference = a + b, a - b
            a[...] = total
            b[...] = difference
            h *= 2
        out[..., offset:offset + c] = block * out.dtype.type(1.0 / np.sqrt(c))
        offset += c
    return out


def permute(x: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """The round's permutation as a gather: ``out[..., i] = x[..., perm[i]]``."""
    return x[..., perm]


def rotate(x: np.ndarray, plan: Plan) -> np.ndarray:
    """Apply the rotation to the rows of ``x`` (keeps ``x``'s dtype)."""
    chunks = reference.hadamard_chunks(x.shape[-1])
    y = x
    for perm, signs in plan:
        y = permute(y, perm) * signs.astype(x.dtype, copy=False)
        y = fwht_blocks(y, chunks)
    return y


def rescale(y: np.ndarray) -> np.ndarray:
    """``y * sqrt(D) / ||y||`` per row; zero rows map to zero (no division by zero)."""
    dim = y.shape[-1]
    norms = np.sqrt(np.sum(y * y, axis=-1, keepdims=True))
    safe = np.where(norms > 0, norms, y.dtype.type(1))
    return np.where(norms > 0, y * y.dtype.type(np.sqrt(dim)) / safe, y.dtype.type(0))


def quantize(z: np.ndarray, boundaries: np.ndarray) -> np.ndarray:
    """Codes: the number of boundaries ``<= z`` (``searchsorted(side='right')``)."""
    return np.searchsorted(boundaries, z, side="right")


def decode(codes: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    return centroids[codes.astype(np.intp)]


def compute_scales(vectors: np.ndarray, decoded: np.ndarray) -> np.ndarray:
    """``||v|| / ||c||`` per row (``||c|| > 0``: the codebooks have no zero centroid)."""
    norm_v = np.sqrt(np.sum(vectors * vectors, axis=-1))
    norm_c = np.sqrt(np.sum(decoded * decoded, axis=-1))
    return norm_v / norm_c


def pack(codes: np.ndarray, scales: np.ndarray, bits: int) -> np.ndarray:
    """Stored layout, one row of bytes per vector: the codes (little-endian ``uint8``/``uint16``)
    followed by the float32 scale."""
    n = codes.shape[0]
    code_bytes = np.ascontiguousarray(codes.astype(reference.codes_dtype(bits).newbyteorder("<")))
    scale_bytes = scales.astype("<f4").reshape(n, 1)
    return np.concatenate([code_bytes.view(np.uint8), scale_bytes.view(np.uint8)], axis=1)


def unpack(buffer: np.ndarray, dim: int, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`pack`: codes in their storage dtype and float32 scales."""
    n = buffer.shape[0]
    width = dim * bits // 8
    dtype = reference.codes_dtype(bits).newbyteorder("<")
    codes = np.ascontiguousarray(buffer[:, :width]).view(dtype).reshape(n, dim)
    scales = np.ascontiguousarray(buffer[:, width:width + 4]).view("<f4").reshape(n)
    return codes.astype(reference.codes_dtype(bits)), scales.astype(np.float32)


def encode(
    vectors: np.ndarray, plan: Plan, book: reference.Codebook, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rotate, rescale, quantize and pack.  Returns ``(packed, rotated, codes)``."""
    x = vectors.astype(dtype)
    rotated = rotate(x, plan)
    z = rescale(rotated)
    codes = quantize(z, book.boundaries)
    decoded = decode(codes, centroid_table(book, dtype))
    scales = compute_scales(x, decoded)
    return pack(codes, scales, book.bits), rotated, codes


def score(
    rotated_queries: np.ndarray, codes: np.ndarray, scales: np.ndarray, centroids: np.ndarray
) -> np.ndarray:
    """Asymmetric scores ``scale_j * <Rq_i, c_j>``: rotated float query against decoded codes."""
    decoded = decode(codes, centroids.astype(rotated_queries.dtype, copy=False))
    return (rotated_queries @ decoded.T) * scales.astype(rotated_queries.dtype)[None, :]


def symmetric_scores(codes: np.ndarray, scales: np.ndarray, centroids: np.ndarray,
                     dtype: np.dtype) -> np.ndarray:
    """``scale_j scale_k <c_j, c_k>`` between stored vectors."""
    decoded = decode(codes, centroids.astype(dtype, copy=False)) * scales.astype(dtype)[:, None]
    return decoded @ decoded.T


def prepare_queries(queries: np.ndarray, plan: Plan, dtype: np.dtype) -> np.ndarray:
    """Rotate the queries (they are not quantized: the asymmetric estimator)."""
    return rotate(queries.astype(dtype), plan)


@dataclasses.dataclass(frozen=True)
class Stored:
    """What every implementation shares: the encoded vectors and the rotated queries."""

    codes: np.ndarray
    scales: np.ndarray
    rotated: np.ndarray
    rotated_queries: np.ndarray
    centroids: np.ndarray  # in the working dtype (the cached table)
    encoded_bytes: int
    dtype: np.dtype


def store(inputs: Mapping[str, Any]) -> Stored:
    """Encode the case's vectors through the packed storage layout and rotate its queries."""
    dtype = working_dtype(inputs)
    vectors = np.asarray(inputs["vectors"])
    dim = vectors.shape[1]
    bits = int(inputs["bits"])
    plan = rotation(dim, int(inputs["rotation_seed"]), dtype)
    book = reference.codebook(str(inputs["codebook"]), bits)
    packed, rotated, _ = encode(vectors, plan, book, dtype)
    codes, scales = unpack(packed, dim, bits)
    rotated_queries = prepare_queries(np.asarray(inputs["queries"]), plan, dtype)
    return Stored(codes, scales, rotated, rotated_queries, centroid_table(book, dtype),
                  int(packed.shape[1]), dtype)


def outputs(stored: Stored, scores: np.ndarray, symmetric: np.ndarray) -> dict[str, Any]:
    """The output record (schema in the target's docstring)."""
    return {
        "codes": stored.codes,
        "scales": stored.scales,
        "rotated_vectors": stored.rotated,
        "rotated_queries": stored.rotated_queries,
        "scores": scores,
        "symmetric_scores": symmetric,
        "encoded_bytes": stored.encoded_bytes,
    }


def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The NumPy implementation: ``inputs -> outputs`` (schema in the target's docstring)."""
    s = store(inputs)
    return outputs(
        s,
        score(s.rotated_queries, s.codes, s.scales, s.centroids),
        symmetric_scores(s.codes, s.scales, s.centroids, s.dtype),
    )
