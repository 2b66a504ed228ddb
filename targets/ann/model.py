"""The arithmetic the OctEx model is defined by, shared by the reference and every implementation.

The model (``docs/COMPONENTS.md``, restated in :mod:`fuzzkit.targets.ann`) makes discrete decisions from
floating-point values: which cell a vector falls in (a ``floor``), which ``C`` members a cell keeps
and which ``R`` ids a graph row holds (orderings of float64 distances).  If the reference and the
optimized build computed those values with different summation orders, a value within one ulp of a
cell boundary, or two distances within one ulp of each other, would be decided differently, and
the structural oracle would cry wolf.  So the *build-time* values are defined here once, with a
fixed evaluation order (left to right over the coordinates, separate multiply and add: NumPy never
contracts to FMA), and both sides call these functions: they are the definition of the model's
numbers, not an implementation under test.  The reference calls them one vector at a time, the
NumPy build on whole blocks; elementwise, the operations are identical, so the results are
bit-identical.

Query-time distances are different: an implementation may compute them in float32 in any order,
and the oracle allows the derived rounding bound (:mod:`fuzzkit.targets.ann.checks`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping, Optional

import numpy as np

METRICS = ("l2", "ip")
STORAGES = ("float32", "turbo8", "turbo16")
#: turbo storage reuses the quant codec with this codebook.
CODEBOOK = "lloyd_max"
PARAM_KEYS = ("L", "m", "w", "C", "R", "E", "T", "P", "k", "seed", "metric", "storage", "rerank")


@dataclasses.dataclass(frozen=True)
class Params:
    """OctEx parameters (see :mod:`fuzzkit.targets.ann` for their meaning).  ``w is None`` is the one
    infinite cell per table that holds every vector."""

    L: int
    m: int
    w: Optional[float]
    C: int
    R: int
    E: int
    T: int
    P: int
    k: int
    seed: int
    metric: str = "l2"
    storage: str = "float32"
    rerank: bool = False

    @classmethod
    def from_inputs(cls, inputs: Mapping[str, Any]) -> "Params":
        w = inputs["w"]
        return cls(
            L=int(inputs["L"]), m=int(inputs["m"]), w=None if w is None else float(w),
            C=int(inputs["C"]), R=int(inputs["R"]), E=int(inputs["E"]), T=int(inputs["T"]),
            P=int(inputs["P"]), k=int(inputs["k"]), seed=int(inputs["seed"]),
            metric=str(inputs.get("metric", "l2")), storage=str(inputs.get("storage", "float32")),
            rerank=bool(inputs.get("rerank", False)),
        )

    @property
    def bits(self) -> Optional[int]:
        """8 or 16 for turbo storage, None for float32."""
        return {"turbo8": 8, "turbo16": 16}.get(self.storage)


@functools.lru_cache(maxsize=4096)
def table(seed: int, index: int, m: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Table ``index``'s projection ``A`` (m, dim), entries N(0,1)/sqrt(m), and offset ``u`` in
    [0,1)^m, drawn in that order from ``default_rng([seed, index])``: the first L tables of a
    bigger L are the same tables, and no two tables share a stream."""
    rng = np.random.default_rng([int(seed), int(index)])
    a = rng.standard_normal((m, dim)) / math.sqrt(m)
    u = rng.random(m)
    a.setflags(write=False)
    u.setflags(write=False)
    return a, u


def tables(params: Params, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """All L projections (L, m, dim) and offsets (L, m), float64."""
    pairs = [table(params.seed, l, params.m, dim) for l in range(params.L)]
    if not pairs:  # pragma: no cover - defensive: validate requires L >= 1
        return np.zeros((0, params.m, dim)), np.zeros((0, params.m))
    return np.stack([a for a, _ in pairs]), np.stack([u for _, u in pairs])


def project(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``y = A x`` for the rows of ``x`` (..., dim) -> (..., m), float64, summed left to right."""
    x = np.asarray(x, dtype=np.float64)
    y = np.zeros(x.shape[:-1] + (a.shape[0],))
    for d in range(a.shape[1]):
        y += x[..., d, None] * a[:, d]
    return y


def cell_coords(y: np.ndarray, u: np.ndarray, w: float) -> np.ndarray:
    """``floor(y / w + u)`` as int64 (a true floor, also below zero)."""
    return np.floor(y / w + u).astype(np.int64)


def cell_centre(coords: np.ndarray, u: np.ndarray, w: float) -> np.ndarray:
    """The cell's centre in projected space, ``(c + 0.5 - u) * w``."""
    return (coords + 0.5 - u) * w


def face_fraction(y: np.ndarray, u: np.ndarray, w: float, coords: np.ndarray) -> np.ndarray:
    """``f = y / w + u - c`` in [0, 1): moving down in coordinate j costs ``f_j``, up
    ``1 - f_j``."""
    return y / w + u - coords


def squared_norm(v: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """``sum v_j^2`` over the last axis in ``dtype``, left to right (the centre-distance ranking
    key in float64; the query norm of a float32 turbo estimate)."""
    v = np.asarray(v, dtype=dtype)
    acc = np.zeros(v.shape[:-1], dtype=dtype)
    for j in range(v.shape[-1]):
        acc += v[..., j] * v[..., j]
    return acc


def distance(x: np.ndarray, q: np.ndarray, metric: str, dtype: Any = np.float64) -> np.ndarray:
    """Distance between broadcastable rows ``x`` (..., D) and ``q`` (..., D): squared L2 or
    ``-<x, q>``; computed in ``dtype``, summed left to right over D.

    In float64 this is the model's distance (graph rows, brute force, the reference's search).  In
    float32 it is what the NumPy implementation computes; its order is fixed so that a query's
    distances do not depend on how the query batch was split.
    """
    dtype = np.dtype(dtype)
    if metric not in METRICS:
        raise ValueError(  # pragma: no cover - defensive: validate checks the metric
            f"metric must be one of {METRICS}, got {metric!r}")
    x, q = _by_coordinate(x, dtype), _by_coordinate(q, dtype)
    shape = np.broadcast_shapes(x.shape[1:], q.shape[1:])
    acc = np.zeros(shape, dtype=dtype)
    term = np.empty(shape, dtype=dtype)
    # The same operations, one coordinate at a time, as ``acc += (x_d - q_d)**2`` on the
    # original layout: elementwise IEEE operations, so the result is bit-identical whatever
    # the layout; the coordinate-major copy only makes each step read contiguous memory.
    for d in range(x.shape[0]):
        if metric == "l2":
            np.subtract(x[d], q[d], out=term)
            np.multiply(term, term, out=term)
        else:
            np.multiply(x[d], q[d], out=term)
        np.add(acc, term, out=acc)
    return acc if metric == "l2" else -acc


def _by_coordinate(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``v`` (..., D) as a contiguous (D, ...) array in ``dtype`` (an exact widening or the
    same type: every value is unchanged)."""
    v = np.asarray(v)
    return np.ascontiguousarray(np.moveaxis(v, -1, 0), dtype=dtype)
