"""How far a float32 implementation's query-time distances may be from the float64 model.

Two uses: the oracle accepts a returned distance within this slack of the model's, and the
reference marks a query *ambiguous* when one of its cuts (the beam's ``E`` best, the rerank pool)
separates two distances closer than their slacks -- there a correct float32 implementation may
legitimately cut elsewhere and then visit other vectors, so its ids are not comparable with the
reference's (the other oracles still apply).

Bounds (``u`` = unit roundoff, ``g_n = n u / (1 - n u)``, ``S`` = ``fuzzkit.oracles.close.ROUNDING_SLACK``):

* **l2**, ``sum (x_d - q_d)^2`` from float32 inputs: each term carries a subtraction, a square and
  at most ``D`` additions, all of non-negative terms, so ``|d32 - d| <= g_(D+2) d``; the float64
  reference adds ``g_(D+2)(2^-53) d``.  (An implementation using ``|x|^2 + |q|^2 - 2 x.q`` is
  outside this bound on purpose: it cancels catastrophically for near neighbours.)
* **ip**, ``-sum x_d q_d``: ``g_D sum |x_d q_d|``.
* **underflow** (both): the contract admits tiny and subnormal coordinates, whose squares and
  products fall below float32's subnormal range.  With gradual underflow each rounded product
  is ``p (1 + d) + e`` with ``|e| <= 2^-150`` (half the smallest subnormal; additions and
  subtractions of floats are exact when their result is subnormal), so the ``D`` products add
  at most ``D 2^-150 (1 + g_D) < D 2^-149`` absolute error on top of the relative bound: a
  distance of ``1e-61`` computed as ``0`` is float32 arithmetic, not a bug.  (The float64
  reference's own term, ``D 2^-1074``, is added for symmetry.)
* **turbo estimate**, ``s = scale <R q, c>``: the quant oracle's score bound (a ``3D + 10``-long
  reduction against ``scale |Rq|.|c|``, which covers the float32 scale) plus the query rotation's
  error ``min(g_L scale (|M||q|).|c|, E2(q) ||v||)`` (the quant oracle's two bounds); for l2
  ``||q||^2 + ||v||^2 - 2 s`` adds ``2`` of those and ``g_(D+6) (||q||^2 + ||v||^2 + 2 |s|)``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from fuzzkit.oracles.close import ROUNDING_SLACK, gamma
from fuzzkit.targets.ann import brute, model
from fuzzkit.targets.quant import checks as quant_checks
from fuzzkit.targets.quant import reference as quant_reference

U32 = 2.0**-24
U64 = 2.0**-53
#: Smallest subnormals: twice the absolute error one underflowing product may carry.
TINY32 = 2.0**-149
TINY64 = 2.0**-1074


def _g(n: int, u: float = U32) -> float:
    return gamma(n + ROUNDING_SLACK, u)


def exact_slack(x: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    """(q, n) bound on ``|d32 - d64|`` for the exact metric on float32 vectors."""
    x64 = np.asarray(x, dtype=np.float64)
    q64 = np.asarray(q, dtype=np.float64)
    dim = x64.shape[1]
    underflow = dim * (TINY32 + TINY64)
    if metric == "l2":
        magnitude = brute.distances(x, q, "l2")  # the model's l2 distance itself
        return (_g(dim + 2) + _g(dim + 2, U64)) * magnitude + underflow
    magnitude = np.abs(q64) @ np.abs(x64).T
    return (_g(dim) + _g(dim, U64)) * magnitude + underflow


def estimate_slack(x: np.ndarray, q: np.ndarray, derived: Mapping[str, Any],
                   metric: str) -> np.ndarray:
    """(q, n) bound on a float32 turbo estimate's distance from the float64 estimate.
    ``derived`` is :func:`fuzzkit.targets.quant.reference.scores_from_codes`'s record for the codes."""
    dim = np.asarray(x).shape[1]
    q_norm = np.sqrt(model.squared_norm(np.asarray(q, dtype=np.float64)))
    x_norm = np.sqrt(model.squared_norm(np.asarray(x, dtype=np.float64)))
    rotation_magnitude = np.asarray(derived["scores_rotation_magnitude"])
    rotation = np.minimum(_g(quant_reference.rotation_roundings(dim)) * rotation_magnitude,
                          quant_checks._e2(q_norm[:, None], dim, U32) * x_norm[None, :])
    score_slack = _g(3 * dim + 10) * np.asarray(derived["scores_magnitude"]) + rotation
    if metric == "ip":
        return score_slack
    magnitude = q_norm[:, None] ** 2 + x_norm[None, :] ** 2 + 2.0 * np.abs(derived["scores"])
    return 2.0 * score_slack + _g(dim + 6) * magnitude


def reference_distances(queries: np.ndarray, stored: np.ndarray, ids: np.ndarray, metric: str,
                        turbo: Optional[Mapping[str, np.ndarray]] = None
                        ) -> tuple[np.ndarray, np.ndarray, int]:
    """What a query-time hook must return, in float64, for ``fuzzkit.oracles.close``: the distances of
    ``ids`` (-1 = padding, +inf), the magnitude the float32 error scales with, and the
    reduction length.  ``stored`` is the float32 base, or with ``turbo`` (``centroids``,
    ``scales``, ``norms``, ``query_norms2``) the codes, and then ``queries`` are the rotated
    queries.  The kernel tests and the GPU benchmark's check both judge the kernels by it."""
    safe = np.maximum(ids, 0)
    q = queries.astype(np.float64)[:, None, :]
    dim = queries.shape[1]
    if turbo is None:
        x = stored.astype(np.float64)[safe]
        if metric == "l2":
            dist = ((x - q) ** 2).sum(-1)
            magnitude, length = dist, dim + 2
        else:
            dist = -(x * q).sum(-1)
            magnitude, length = np.abs(x * q).sum(-1), dim
    else:
        decoded = turbo["centroids"].astype(np.float64)[stored[safe].astype(np.int64)]
        scale = turbo["scales"].astype(np.float64)[safe]
        score = scale * (decoded * q).sum(-1)
        abs_score = np.abs(scale) * np.abs(decoded * q).sum(-1)
        if metric == "ip":
            dist, magnitude, length = -score, abs_score, dim + 1
        else:
            norm2 = turbo["norms"].astype(np.float64)[safe] ** 2
            qn = turbo["query_norms2"].astype(np.float64)[:, None]
            dist = qn + norm2 - 2.0 * score
            magnitude, length = qn + norm2 + 2.0 * abs_score, dim + 4
    dist = np.where(ids >= 0, dist, np.inf)
    return dist, np.where(ids >= 0, magnitude, 0.0), length
