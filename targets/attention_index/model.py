"""Shared arithmetic of the lightning-indexer model (float64): scores, rounding bounds, k-means.

Both the reference (:mod:`.reference`) and the NumPy index (:mod:`.index`) make the *discrete*
decisions of the chunked k-means build with these float64 functions, so they agree exactly on
``assignment``; only the query-time scores are float32 in the implementations.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

METHODS = ("dense", "hisa", "attention_index")
U32 = 2.0 ** -24
#: Half the smallest float32 subnormal: the absolute error of a rounding into the subnormal range.
ETA32 = 2.0 ** -150
#: Largest :func:`overflow_factor` the contract accepts: a factor 4 below float32's largest
#: finite value (about 2^128), room for the (1 + gamma) growth of rounded partial sums.
OVERFLOW_LIMIT = 2.0 ** 126


def params(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The case's parameters with defaults filled in."""
    s = int(np.asarray(inputs["k"]).shape[0])
    return {
        "method": inputs.get("method", "dense"),
        "topk": int(inputs["topk"]),
        "block": int(inputs.get("block", 4)),
        "top_m": int(inputs.get("top_m", 1)),
        "groups": int(inputs.get("groups", 1)),
        "iters": int(inputs.get("iters", 2)),
        "chunk": int(inputs.get("chunk", s)),
        "top_g": int(inputs.get("top_g", 1)),
        "sink": int(inputs.get("sink", 0)),
        "local": int(inputs.get("local", 0)),
        "seed": int(inputs.get("seed", 0)),
    }


def positions(t_count: int, s_count: int) -> np.ndarray:
    """pos(t) = S - T + t."""
    return np.arange(t_count, dtype=np.int64) + (s_count - t_count)


def scores64(q: np.ndarray, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """float64 I(t, x_j) = sum_h w[t,h] ReLU(q[t,h].x_j) / sqrt(d): (T, N)."""
    q64 = np.asarray(q, np.float64)
    dots = np.einsum("thd,nd->thn", q64, np.asarray(x, np.float64))
    return np.einsum("th,thn->tn", np.asarray(w, np.float64), np.maximum(dots, 0.0)) \
        / math.sqrt(q64.shape[-1])


def score_bound(q: np.ndarray, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A bound on |float32 I - float64 I| for a float32 implementation fed ``x`` rounded to
    float32 (x itself may be float64, e.g. centroids), in any reasonable evaluation order.

    Standard model with gradual underflow: every float32 product, quotient or cast is
    ``v (1 + delta) + eta`` with ``|delta| <= u = 2^-24`` and ``|eta| <= 2^-150`` (half the
    smallest subnormal; sums of floats are exact when subnormal, so they carry no eta).

    * relative part: the dot product's gamma_d error on ``sum_i |q_i x_i|`` (ReLU is
      1-Lipschitz, so a dot within rounding of 0 may go either way and is still covered), the
      weight product, the H-term sum, the rounding of ``x`` and of the scale ``1/sqrt(d)`` and
      the scaling: gamma_{d+H+4} on ``sum_h |w| sum_i |q_i x_i| / sqrt(d)``;
    * absolute part (underflow): ``d`` products per head, each off by ``eta``, weighted by
      ``|w_h|``; one ``eta`` per weighted head term and one for the scaling; and one rounding of
      either operand before its product (``x`` cast to float32, or ``q`` scaled by
      ``1/sqrt(d)`` first, as attention kernels often do): ``eta (|q_i| + |x_i|)`` per
      coordinate.  Together ``(d W + sum_h |w_h| sum_i (|q_hi| + |x_i|) + H) eta / sqrt(d) +
      eta`` with ``W = sum_h |w_h|`` (tiny dot products under a huge head weight lose up to
      ``d |w| eta`` -- more than any fixed absolute constant).

    Both parts doubled for safety (the float64 score's own error, the (1 + gamma) factors
    dropped above).  Inputs are within the overflow limit of :func:`overflow_factor`, so no
    float32 intermediate overflows."""
    d, h = q.shape[-1], q.shape[-2]
    q64 = np.abs(np.asarray(q, np.float64))
    w64 = np.abs(np.asarray(w, np.float64))
    x64 = np.abs(np.asarray(x, np.float64))
    absdots = np.einsum("thd,nd->thn", q64, x64)
    mag = np.einsum("th,thn->tn", w64, absdots) / math.sqrt(d)
    n = d + h + 4
    gamma = n * U32 / (1 - n * U32)
    weight = w64.sum(axis=1)
    operands = (d * weight + np.einsum("th,thd->t", w64, q64) + h)[:, None] \
        + weight[:, None] * x64.sum(axis=1)[None, :]
    underflow = 2.0 * (operands / math.sqrt(d) + 1.0) * ETA32
    return 2.0 * gamma * mag + underflow


def overflow_parts(q: np.ndarray, w: np.ndarray, k: np.ndarray) -> tuple[float, float]:
    """``(dots, weighted)``: the largest per-head dot magnitude ``sum_i |q[t,h,i]| max_s
    |k[s,i]|`` (the dot product runs before the weight) and the largest weighted head sum
    ``sum_h |w[t,h]| (...)``, float64.  Together they bound every float32 intermediate of every
    score, up to rounding: each key's, and each block mean's or centroid's (their coordinates
    are means of the keys')."""
    q64 = np.abs(np.asarray(q, np.float64))
    kmax = np.abs(np.asarray(k, np.float64)).max(axis=0, initial=0.0)
    per_head = np.einsum("thd,d->th", q64, kmax)
    weighted = np.einsum("th,th->t", np.abs(np.asarray(w, np.float64)), per_head)
    return float(per_head.max(initial=0.0)), float(weighted.max(initial=0.0))


def overflow_factor(q: np.ndarray, w: np.ndarray, k: np.ndarray) -> float:
    """The larger of :func:`overflow_parts`.  The contract (``checks.validate``) keeps it at
    most :data:`OVERFLOW_LIMIT`, so float32 scoring never overflows."""
    return max(overflow_parts(q, w, k))


def sq_distances(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float64 squared Euclidean distances (N, G) between rows of x and rows of c."""
    diff = np.asarray(x, np.float64)[:, None, :] - np.asarray(c, np.float64)[None, :, :]
    return np.einsum("ngd,ngd->ng", diff, diff)


def nearest(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Nearest centroid per row, ties to the lower group id."""
    return np.argmin(sq_distances(x, c), axis=1).astype(np.int64)


def init_ids(n0: int, g: int, seed: int) -> np.ndarray:
    """The G distinct first-chunk positions chosen as initial centroids."""
    return np.sort(np.random.default_rng(seed).choice(n0, size=g, replace=False)).astype(np.int64)


def means(x: np.ndarray, assign: np.ndarray, old: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sums (G,d) float64, counts (G,)) of each group's members, summed in position order."""
    g = old.shape[0]
    sums = np.zeros((g, x.shape[1]), np.float64)
    # unbuffered and in index order: row by row, each group's sum in position order (as a
    # loop of ``sums[a] += x[i]`` would add them)
    np.add.at(sums, np.asarray(assign, np.intp), np.asarray(x, np.float64))
    counts = np.bincount(assign, minlength=g).astype(np.int64)
    return sums, counts


def centroids_of(sums: np.ndarray, counts: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Mean of members; an empty group keeps ``old``."""
    out = np.array(old, np.float64, copy=True)
    nz = counts > 0
    out[nz] = sums[nz] / counts[nz, None]
    return out


def n_groups(p: Mapping[str, Any], s: int) -> int:
    return max(1, min(p["groups"], min(p["chunk"], s)))


def absorb(sums: np.ndarray, counts: np.ndarray, group: int, x: np.ndarray) -> None:
    """A later (chunked) key joins ``group``: its centroid becomes the running mean."""
    sums[group] += x
    counts[group] += 1


def chunked_kmeans(keys: np.ndarray, p: Mapping[str, Any],
                   join: Callable[[np.ndarray, np.ndarray, int, np.ndarray], None] = absorb
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Chunked k-means as prefill builds it: (assignment int64 (S,), centroids float64 (G, d)).
    The first ``chunk`` keys by seeded Lloyd; each later key, in position order, joins the
    nearest centroid through ``join`` (a parameter so that the implementation's rule can be
    mutated without touching the reference's)."""
    x = np.asarray(keys, np.float64)
    s = x.shape[0]
    n0 = min(p["chunk"], s)
    g = n_groups(p, s)
    first = x[:n0]
    cent = first[init_ids(n0, g, p["seed"])]
    for _ in range(p["iters"]):
        assign = nearest(first, cent)
        cent = centroids_of(*means(first, assign, cent), cent)
    assign = nearest(first, cent)
    sums, counts = means(first, assign, cent)
    assignment = np.zeros(s, np.int64)
    assignment[:n0] = assign
    for i in range(n0, s):
        a = int(nearest(x[i:i + 1], centroids_of(sums, counts, cent))[0])
        assignment[i] = a
        join(sums, counts, a, x[i])
    return assignment, centroids_of(sums, counts, cent)
