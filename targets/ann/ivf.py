"""IVF-flat: the classic inverted-file baseline OctEx is compared with (benchmark only).

A seeded k-means coarse quantizer splits the vectors into ``nlist`` lists; a query scans the
``nprobe`` lists whose centroids are nearest and ranks their members by exact float32 distance.
Probing every list is brute force, and the lists probed with ``nprobe`` are a prefix of those
probed with ``nprobe + 1``, so recall is non-decreasing in ``nprobe``.

Float32 matrix products throughout (``||x||^2 - 2 x.c + ||c||^2``): this is a throughput
baseline, not part of the float64 model.
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: Rows per block of a distance matrix (bounds memory at 100k vectors).
BLOCK = 4096


@dataclasses.dataclass
class IVF:
    centroids: np.ndarray  # float32 (nlist, D)
    offsets: np.ndarray    # int64 (nlist + 1,) CSR over lists
    members: np.ndarray    # int64 ids, grouped by list
    base: np.ndarray       # float32 (n, D)
    metric: str


def _scores(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """(len(a), len(b)) float32 distances: squared L2, or -<a, b>."""
    dot = a @ b.T
    if metric == "ip":
        return -dot
    return (np.sum(a * a, axis=1)[:, None] - 2.0 * dot) + np.sum(b * b, axis=1)[None, :]


def assign(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Nearest centroid (squared L2) of every row, blocked."""
    out = np.empty(x.shape[0], dtype=np.int64)
    for start in range(0, x.shape[0], BLOCK):
        out[start:start + BLOCK] = np.argmin(_scores(x[start:start + BLOCK], centroids, "l2"),
                                             axis=1)
    return out


def kmeans(x: np.ndarray, nlist: int, seed: int, iterations: int = 10) -> np.ndarray:
    """Lloyd's k-means from ``nlist`` distinct rows drawn with ``default_rng(seed)``; an emptied
    cluster keeps its previous centroid."""
    rng = np.random.default_rng(seed)
    nlist = min(nlist, x.shape[0])
    centroids = x[rng.choice(x.shape[0], nlist, replace=False)].astype(np.float32)
    for _ in range(iterations):
        labels = assign(x, centroids)
        sums = np.zeros_like(centroids, dtype=np.float64)
        np.add.at(sums, labels, x)
        counts = np.bincount(labels, minlength=nlist)
        filled = counts > 0
        centroids[filled] = (sums[filled] / counts[filled, None]).astype(np.float32)
    return centroids


def build(x: np.ndarray, nlist: int, seed: int = 0, metric: str = "l2",
          iterations: int = 10) -> IVF:
    x = np.ascontiguousarray(x, dtype=np.float32)
    centroids = kmeans(x, nlist, seed, iterations)
    labels = assign(x, centroids)
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=centroids.shape[0])
    return IVF(centroids, np.r_[0, np.cumsum(counts)].astype(np.int64), order.astype(np.int64),
               x, metric)


def search(ivf: IVF, q: np.ndarray, k: int, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best ids (q, k) among the ``nprobe`` nearest lists, by (distance, id); -1 /
    +inf padded."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    nprobe = min(nprobe, ivf.centroids.shape[0])
    coarse = _scores(q, ivf.centroids, "l2")
    probed = np.argsort(coarse, axis=1, kind="stable")[:, :nprobe]
    ids = np.full((q.shape[0], k), -1, dtype=np.int64)
    dist = np.full((q.shape[0], k), np.inf, dtype=np.float32)
    for i in range(q.shape[0]):
        cand = np.concatenate([ivf.members[ivf.offsets[c]:ivf.offsets[c + 1]]
                               for c in probed[i]])
        if cand.size == 0:
            continue
        d = _scores(q[i:i + 1], ivf.base[cand], ivf.metric)[0]
        top = np.lexsort((cand, d))[:k]
        ids[i, :top.size] = cand[top]
        dist[i, :top.size] = d[top]
    return ids, dist
