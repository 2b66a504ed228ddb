"""Triton kernels of the ``ann`` target's query path: candidate distances and one expansion round.

The two query-time steps of :func:`fuzzkit.targets.ann.index.search` (the hooks ``candidate_distances``
and ``expand``; the loop over the ``T`` rounds and every top-E / top-k selection stay in NumPy,
shared by both implementations) run as kernels here -- natively on a GPU, under
``TRITON_INTERPRET=1`` without one.  Launchers take torch tensors on
:func:`fuzzkit.triton_support.device`::

    distances(queries, stored, ids, *, metric, turbo=None, out=None, block_m=None, block_d=None)
        -> float32 [q, M]
    expand(frontier, graph, visited, queries, stored, *, metric, turbo=None)
        -> (int32 [q, E*R] new ids, float32 [q, E*R] their distances); ``visited`` updated

Distances (``distance_kernel``)
-------------------------------
``ids`` int32 ``[q, M]`` holds, per query row, ids into ``stored`` padded with ``-1``; the output
is the distance of query ``i`` to vector ``ids[i, j]``, ``+inf`` at padding.  Metric ``"l2"``:
squared Euclidean distance ``sum_d (x_d - q_d)^2``; ``"ip"``: ``-<x, q>``.  With ``turbo``
(:class:`Turbo`) ``stored`` holds codes (``uint8`` for turbo8; turbo16's ``uint16`` codes as
``int16``, widened in the kernel with ``& 0xFFFF`` as in :mod:`fuzzkit.targets.quant.kernels`),
``queries`` are the *rotated* queries ``R q``, and the distance comes from the asymmetric score
``s = scale_j * sum_d (Rq)_d * centroids[codes_j,d]``: ``-s`` for ip,
``||q||^2 + norm_j^2 - 2 s`` for l2 (``norm_j = ||v_j||``, the stored norm; ``||q||^2`` is
passed in by the caller, so the kernel and the NumPy hook use the same value).

Each query has its *own* candidate list, so this is a gather-and-reduce, not a matmul: one
program owns ``BLOCK_Q`` query rows x ``BLOCK_M`` candidate columns, flattened into
``BLOCK_Q * BLOCK_M`` lanes (lane -> (row, column)).  It gathers each lane's vector row (or code
row, then the centroids -- the decoded vectors never exist in memory) and its query row in
``BLOCK_D`` steps and reduces over ``D`` in float32.  Both ragged edges are masked: the last
partial tile of ``M`` by ``column < M`` (and ``row < q``), the last partial ``D`` tile by
``offs_d < D``, recomputed for every step; ids ``< 0`` are masked lanes that store ``+inf``.

Expansion (``expand_kernel``)
-----------------------------
``frontier`` int32 ``[q, E]`` (``-1`` pad), ``graph`` int32 ``[n, R]`` (``-1`` pad),
``visited`` uint8 ``[q, n]`` updated in place.  Position ``p = e * R + r`` of row ``i`` is
neighbour ``r`` of frontier node ``e`` (frontier-major, neighbour-minor).  The output at ``p``
is that neighbour if it was not visited before the call *and* ``p`` is its first position in
the row; every other position is ``-1`` (distance ``+inf``).  Every id written is marked
visited.  So each newly visited id appears exactly once per row, at its first occurrence.

Determinism of the dedup.  A GPU expansion usually deduplicates with an atomic exchange on the
visited array ("the lane that reads 0 owns the id"), which makes *which* duplicate lane wins --
and so the output position -- depend on scheduling.  Here one program owns whole query rows
(all ``E * R`` positions of a row are one tile of ``BLOCK_P = next_pow2(E * R)`` lanes), and
the dedup is keyed on position, in registers: a lane is a duplicate when an *earlier* position
of its row holds the same id (the row's ids are re-gathered in chunks of ``BLOCK_J`` positions
and compared as a ``[BLOCK_Q, BLOCK_P, BLOCK_J]`` tile; ``O((E R)^2)`` compares per row, cheap
next to the distance gathers for the beams this target runs).  The first occurrence always
wins.  Only that lane reads and sets ``visited[i, id]``; no two lanes of a launch touch one
``visited`` element, so a plain load + store is race-free and no atomic is needed (Triton has no
8-bit atomics anyway).  The output is bit-identical to the NumPy hook on every run and every
machine.  (An in-register ``tl.sort`` of ``(id, position)`` keys would be ``O(E R log^2)``, but
the interpreter runs its bitonic network's reductions element by element -- seconds per call.)
The distances of the new ids are a second launch of ``distance_kernel`` on the ``[q, E*R]``
output (``E * R`` lanes x ``BLOCK_D`` would not fit one GPU program's registers for large
beams; the tiled distance kernel scales).

Block sizes (``@triton.autotune`` needs a GPU driver; picked by hand) are launch parameters
chosen per mode in :mod:`fuzzkit.targets.ann.tiles` (which the fuzzer reads as thresholds).  GPU:
distances one query row x 64 candidates x 64 dims per program, 4 warps; expansion
``max(1, 256 // BLOCK_P)`` rows per program, comparison chunks of 16 positions (4096-element
compare tiles), 8 warps once ``BLOCK_P >= 1024``.  Interpreter (each program costs
milliseconds, each op is a NumPy call): distances from 4 rows x 16 candidates x 16 dims,
doubling while a dimension would need more than two programs or steps; expansion at least
4 rows per program, chunks of ``max(8, BLOCK_P // 2)`` positions -- small enough that cheap
cases (5 queries, 17 candidates, 17 dims, ``E * R = 9``) take a second program or a second
loop step, so the ragged last tile and the program offsets are exercised.  ``block_m`` /
``block_d`` override the distance tile (tests use them to force many tiles).

Guard tails: :func:`guarded` returns a ``[rows, D]`` view of a buffer that has ``GUARD``
zero elements after its last row; the implementation allocates queries, base vectors and codes
that way.  A correct kernel never reads the tail; a kernel with a ``D``-mask bug (the
``partial-tile-mask`` mutant) reads the next row or the zero tail instead of whatever lies
past the allocation -- deterministic, so the bug replays and shrinks.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import numpy as np

from fuzzkit import triton_support
from fuzzkit.targets.ann import tiles as _tiles

triton_support.prepare()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

METRICS = ("l2", "ip")

# ----------------------------------------------------------------------------- launch constants

#: Warps of a distance program (and of an expansion program below BLOCK_P = 1024); the tile
#: sizes are in :mod:`fuzzkit.targets.ann.tiles`.
NUM_WARPS = 4
#: Zero elements after the last row of a :func:`guarded` buffer (>= every block_d used).
GUARD = 128


# ----------------------------------------------------------------------------- kernels


@triton.jit
def distance_kernel(
    q_ptr, stored_ptr, codebook_ptr, scale_ptr, norm_ptr, qnorm_ptr, ids_ptr, out_ptr,
    Q, M, D,
    stride_q, stride_s, stride_i, stride_o,
    METRIC_IP: tl.constexpr, TURBO: tl.constexpr, CODE_MASK: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Distances of ``BLOCK_Q`` query rows to ``BLOCK_M`` of their candidates each."""
    lane = tl.arange(0, BLOCK_Q * BLOCK_M)
    row = tl.program_id(0) * BLOCK_Q + lane // BLOCK_M
    col = tl.program_id(1) * BLOCK_M + lane % BLOCK_M
    mask_m = (row < Q) & (col < M)
    ids = tl.load(ids_ptr + row * stride_i + col, mask=mask_m, other=-1)
    valid = mask_m & (ids >= 0)
    q_row = q_ptr + row.to(tl.int64) * stride_q
    s_row = stored_ptr + ids.to(tl.int64) * stride_s
    acc = tl.zeros((BLOCK_Q * BLOCK_M,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        mask_d = offs_d < D
        tile = valid[:, None] & mask_d[None, :]
        qv = tl.load(q_row[:, None] + offs_d[None, :], mask=tile, other=0.0)
        if TURBO:
            codes = tl.load(s_row[:, None] + offs_d[None, :], mask=tile, other=0)
            x = tl.load(codebook_ptr + (codes.to(tl.int32) & CODE_MASK), mask=tile, other=0.0)
            acc += tl.sum(qv * x, axis=1)
        else:
            x = tl.load(s_row[:, None] + offs_d[None, :], mask=tile, other=0.0)
            if METRIC_IP:
                acc += tl.sum(qv * x, axis=1)
            else:
                diff = x - qv
                acc += tl.sum(diff * diff, axis=1)
    if TURBO:
        scale = tl.load(scale_ptr + ids, mask=valid, other=0.0)
        score = scale * acc
        if METRIC_IP:
            dist = -score
        else:
            norm = tl.load(norm_ptr + ids, mask=valid, other=0.0)
            qnorm = tl.load(qnorm_ptr + row, mask=valid, other=0.0)
            dist = (qnorm + norm * norm) - 2.0 * score
    else:
        if METRIC_IP:
            dist = -acc
        else:
            dist = acc
    dist = tl.where(valid, dist, float("inf"))
    tl.store(out_ptr + row * stride_o + col, dist, mask=mask_m)


@triton.jit
def expand_kernel(
    frontier_ptr, graph_ptr, visited_ptr, out_ptr,
    Q, E, R,
    stride_f, stride_g, stride_v, stride_o,
    BLOCK_Q: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_J: tl.constexpr,
):
    """One expansion round for ``BLOCK_Q`` whole query rows (``E * R <= BLOCK_P`` positions)."""
    rows = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    pos = tl.arange(0, BLOCK_P)
    row_ok = rows < Q
    lane_ok = row_ok[:, None] & (pos < E * R)[None, :]
    node = tl.load(frontier_ptr + rows[:, None] * stride_f + (pos // R)[None, :],
                   mask=lane_ok, other=-1)
    ids = tl.load(graph_ptr + node.to(tl.int64) * stride_g + (pos % R)[None, :],
                  mask=lane_ok & (node >= 0), other=-1)
    live = ids >= 0
    # Dedup keyed on position: a lane is a duplicate when an earlier position of its row holds
    # the same id.  Compare against the row's positions in chunks of BLOCK_J (re-gathered).
    dup = tl.zeros((BLOCK_Q, BLOCK_P), dtype=tl.int32)
    for j0 in range(0, E * R, BLOCK_J):
        pj = j0 + tl.arange(0, BLOCK_J)
        lane_j = row_ok[:, None] & (pj < E * R)[None, :]
        node_j = tl.load(frontier_ptr + rows[:, None] * stride_f + (pj // R)[None, :],
                         mask=lane_j, other=-1)
        ids_j = tl.load(graph_ptr + node_j.to(tl.int64) * stride_g + (pj % R)[None, :],
                        mask=lane_j & (node_j >= 0), other=-1)
        same = (ids[:, :, None] == ids_j[:, None, :]) & (pj[None, None, :] < pos[None, :, None])
        dup = tl.maximum(dup, tl.max(same.to(tl.int32), axis=2))
    owner = live & (dup == 0)
    flag = visited_ptr + rows.to(tl.int64)[:, None] * stride_v + ids
    seen = tl.load(flag, mask=owner, other=1)
    new = owner & (seen == 0)
    tl.store(flag, tl.full((BLOCK_Q, BLOCK_P), 1, tl.uint8), mask=new)
    tl.store(out_ptr + rows[:, None] * stride_o + pos[None, :], tl.where(new, ids, -1),
             mask=lane_ok)


#: The kernels the launchers run; looked up at call time so a mutant can swap in a variant.
dist_kernel: Callable[..., Any] = distance_kernel
exp_kernel: Callable[..., Any] = expand_kernel


# ----------------------------------------------------------------------------- launchers


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)  # pragma: no cover - API guard: the hooks pass valid operands


@dataclasses.dataclass(frozen=True)
class Turbo:
    """Quantized storage operands (device tensors): ``centroids`` float32 ``[levels]``,
    ``scales`` and ``norms`` float32 ``[n]``, ``query_norms2`` float32 ``[q]`` (``||q||^2``)."""

    centroids: torch.Tensor
    scales: torch.Tensor
    norms: torch.Tensor
    query_norms2: torch.Tensor


def guarded(array: Any, dtype: torch.dtype, device: Optional[str] = None) -> torch.Tensor:
    """A ``[rows, D]`` device tensor holding ``array`` whose storage continues with ``GUARD``
    zeros (see the module docstring).  ``array`` is a NumPy array or a tensor."""
    device = device or triton_support.device()
    if isinstance(array, np.ndarray):  # pragma: no branch - the hooks pass NumPy arrays
        array = torch.from_numpy(np.ascontiguousarray(array))
    rows, dim = array.shape
    flat = torch.zeros(rows * dim + GUARD, dtype=dtype, device=device)
    if rows * dim:  # pragma: no branch - validate: n, q and D are at least 1
        flat[: rows * dim] = array.reshape(-1).to(device=device, dtype=dtype)
    return flat[: rows * dim].view(rows, dim)


def code_tensor(codes: np.ndarray, device: Optional[str] = None) -> torch.Tensor:
    """Guarded device codes: ``uint8`` as is, ``uint16`` reinterpreted as ``int16``."""
    if codes.dtype == np.uint8:
        return guarded(codes, torch.uint8, device)
    if codes.dtype == np.uint16:
        return guarded(codes.view(np.int16), torch.int16, device)
    raise ValueError(  # pragma: no cover - API guard: turbo codes are uint8 or uint16
        f"codes must be uint8 or uint16, got {codes.dtype}")


def _check_matrix(x: Any, name: str, dtypes: tuple[torch.dtype, ...], device: torch.device
                  ) -> None:
    _require(isinstance(x, torch.Tensor), f"{name} must be a torch tensor")
    _require(x.dim() == 2, f"{name} must be 2-D, got shape {tuple(x.shape)}")
    _require(x.dtype in dtypes, f"{name} must be {'/'.join(str(d)[6:] for d in dtypes)}, "
             f"got {str(x.dtype)[6:]}")
    _require(x.is_contiguous(), f"{name} must be contiguous")
    _require(x.device == device, f"{name} is on {x.device}, the queries on {device}")


def _check_ids(ids: torch.Tensor, n: int, name: str) -> None:
    if ids.numel():  # pragma: no branch - the search's id matrices are never empty
        lo, hi = int(ids.min()), int(ids.max())
        _require(lo >= -1 and hi < n, f"{name} must hold ids in [-1, {n}), got [{lo}, {hi}]")


def _check_vector(x: Any, name: str, size: int, device: torch.device) -> None:
    _require(isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.dim() == 1
             and x.shape[0] >= size and x.is_contiguous() and x.device == device,
             f"{name} must be a contiguous float32 [{size}] tensor on {device}")


def _check_stored(queries: Any, stored: Any, metric: str, turbo: Optional[Turbo]) -> int:
    """Validate the shared distance operands; returns the code mask (0 for float32)."""
    _require(metric in METRICS, f"metric must be one of {METRICS}, got {metric!r}")
    _check_matrix(queries, "queries", (torch.float32,), getattr(queries, "device", None))
    device = queries.device
    if turbo is None:
        _check_matrix(stored, "stored", (torch.float32,), device)
        code_mask = 0
    else:
        _check_matrix(stored, "stored codes", (torch.uint8, torch.int16), device)
        code_mask = 0xFF if stored.dtype == torch.uint8 else 0xFFFF
        _check_vector(turbo.centroids, "turbo.centroids", code_mask + 1, device)
        _check_vector(turbo.scales, "turbo.scales", stored.shape[0], device)
        _check_vector(turbo.norms, "turbo.norms", stored.shape[0], device)
        _check_vector(turbo.query_norms2, "turbo.query_norms2", queries.shape[0], device)
    _require(stored.shape[1] == queries.shape[1],
             f"queries have D={queries.shape[1]}, stored D={stored.shape[1]}")
    return code_mask


def distances(queries: torch.Tensor, stored: torch.Tensor, ids: torch.Tensor, *, metric: str,
              turbo: Optional[Turbo] = None, out: Optional[torch.Tensor] = None,
              block_m: Optional[int] = None, block_d: Optional[int] = None,
              _checked: bool = False) -> torch.Tensor:
    """Float32 ``[q, M]`` distances of ``queries[i]`` to ``stored[ids[i, j]]`` (``+inf`` at
    ``-1``); see the module docstring.  ``ids`` int32 ``[q, M]``."""
    if not _checked:
        code_mask = _check_stored(queries, stored, metric, turbo)
        _check_matrix(ids, "ids", (torch.int32,), queries.device)
        _require(ids.shape[0] == queries.shape[0],
                 f"ids has {ids.shape[0]} rows, queries {queries.shape[0]}")
        _check_ids(ids, stored.shape[0], "ids")
    else:
        code_mask = 0 if turbo is None else (0xFF if stored.dtype == torch.uint8 else 0xFFFF)
    q, m = ids.shape
    dim = queries.shape[1]
    if out is None:  # pragma: no branch - API option: the hooks let the launcher allocate
        out = torch.empty((q, m), dtype=torch.float32, device=queries.device)
    else:  # pragma: no cover - API option: the hooks let the launcher allocate
        _require(out.shape == (q, m) and out.dtype == torch.float32 and out.is_contiguous(),
                 f"out must be a contiguous float32 [{q}, {m}] tensor")
    if q == 0 or m == 0:  # pragma: no cover - q, candidate and E * R widths are at least 1
        return out
    _require(all(b is None or (b >= 1 and b == _tiles.next_pow2(b)) for b in (block_m, block_d))
             and (block_d or 0) <= GUARD, f"block_m and block_d must be powers of two, "
             f"block_d <= {GUARD}; got {block_m}, {block_d}")
    block_q, block_m, block_d = _tiles.distance_config(q, m, dim, _tiles.current(), block_m,
                                                       block_d)
    dummy = torch.zeros(1, dtype=torch.float32, device=queries.device)
    if turbo is None:
        extra = (dummy, dummy, dummy, dummy)
    else:
        extra = (turbo.centroids, turbo.scales, turbo.norms, turbo.query_norms2)
    grid = (triton.cdiv(q, block_q), triton.cdiv(m, block_m))
    dist_kernel[grid](
        queries, stored, *extra, ids, out,
        q, m, dim,
        queries.stride(0), stored.stride(0), ids.stride(0), out.stride(0),
        METRIC_IP=metric == "ip", TURBO=turbo is not None, CODE_MASK=code_mask,
        BLOCK_Q=block_q, BLOCK_M=block_m, BLOCK_D=block_d, num_warps=NUM_WARPS,
    )
    return out


def expand_config(q: int, width: int) -> tuple[int, int, int]:
    """``(BLOCK_Q, BLOCK_P, BLOCK_J)`` of an expansion over ``q`` rows of ``width = E * R`` in
    the current mode (:func:`fuzzkit.targets.ann.tiles.expand_config`)."""
    return _tiles.expand_config(q, width, _tiles.current())


def expand(frontier: torch.Tensor, graph: torch.Tensor, visited: torch.Tensor,
           queries: torch.Tensor, stored: torch.Tensor, *, metric: str,
           turbo: Optional[Turbo] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One expansion round (module docstring): ``(new_ids int32 [q, E*R], distances float32
    [q, E*R])``; ``visited`` (uint8 ``[q, n]``) is updated in place."""
    _check_stored(queries, stored, metric, turbo)
    device = queries.device
    _check_matrix(frontier, "frontier", (torch.int32,), device)
    _check_matrix(graph, "graph", (torch.int32,), device)
    _check_matrix(visited, "visited", (torch.uint8,), device)
    q, e = frontier.shape
    n, r = graph.shape
    _require(q == queries.shape[0], f"frontier has {q} rows, queries {queries.shape[0]}")
    _require(n == stored.shape[0], f"graph has {n} rows, stored {stored.shape[0]}")
    _require(tuple(visited.shape) == (q, n), f"visited must be [{q}, {n}], got "
             f"{tuple(visited.shape)}")
    _check_ids(frontier, n, "frontier")
    _check_ids(graph, n, "graph")
    width = e * r
    new_ids = torch.full((q, width), -1, dtype=torch.int32, device=device)
    if q and width:  # pragma: no branch - q, E and R are at least 1 in a search
        block_q, block_p, block_j = expand_config(q, width)
        exp_kernel[(triton.cdiv(q, block_q),)](
            frontier, graph, visited, new_ids,
            q, e, r,
            frontier.stride(0), graph.stride(0), visited.stride(0), new_ids.stride(0),
            BLOCK_Q=block_q, BLOCK_P=block_p, BLOCK_J=block_j,
            num_warps=8 if block_p >= 1024 else NUM_WARPS,
        )
    new_dist = distances(queries, stored, new_ids, metric=metric, turbo=turbo, _checked=True)
    return new_ids, new_dist
