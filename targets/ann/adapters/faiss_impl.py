"""FAISS IVF-Flat and HNSW (``faiss-cpu``) as black-box ``ann`` implementations.

Usable as ``--impl fuzzkit.targets.ann.adapters.faiss_impl:ivf_flat`` / ``:hnsw`` or by the registered
names ``faiss-ivf`` / ``faiss-hnsw``.  FAISS runs its own algorithm, so the outputs carry no
OctEx structure: only ``ids`` (q, k) and ``distances`` (q, k) in the model's convention (l2:
squared L2; ip: ``-<x, q>``; smaller is better; -1 / +inf padding) and ``black_box`` naming the
index type, which selects the validity + recall judgement of :mod:`fuzzkit.targets.ann.adapters.judge`.

Parameters (from the case where OctEx has an equivalent, else fixed values that give high
recall on the strategy's small inputs -- they are what the stated recall targets of
:data:`fuzzkit.targets.ann.adapters.judge.RECALL_TARGETS` were measured with):

* IVF-Flat: ``nlist = clamp(distinct // 39, 1, MAX_NLIST)`` -- FAISS's guideline of at least
  39 training points per centroid, counting *distinct* vectors: k-means over many copies of
  one point splits its centroid into near-identical ones that the float32 coarse quantizer
  cannot rank, and the list holding the copies is then probed only if it wins that tie (found by
  the clean campaign: 424 zero vectors of 497, 18 centroids within 1e-9 of each other, recall
  0.53 at nprobe 16 of 32; and with ``n // 4`` lists, below the guideline);
  ``nprobe = max(P, ceil(nlist * PROBE_SHARE), ceil(K_COVER * k * nlist / n))`` capped at
  nlist -- the case's probe count ``P``, never below half the lists, and enough lists to hold
  about ``4 k`` vectors (as a user raises nprobe with k; at ``k >= n / 4`` the search is
  exhaustive).  Trained on ``vectors`` only; ``inserted`` are added after training (FAISS's
  usual train-on-a-sample path), ids continue from n.
* HNSW-Flat: ``M = clamp(R, MIN_M, MAX_M)`` (the graph degree), ``efConstruction`` 40 (FAISS's
  default), ``efSearch = max(E, k, MIN_EF_SEARCH)`` (the beam width, never below k: FAISS issue
  #1244 -- efSearch < k loses recall).

Determinism: one OpenMP thread (``faiss.omp_set_num_threads(1)``), the k-means seed taken from
the case's ``seed``; HNSW draws its levels from a fixed internal seed.  A saved case replays the
same.  Each step is a module-level function so that the planted mutants
(:mod:`fuzzkit.targets.ann.adapters.faiss_mutants`) patch exactly one of them.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

MAX_NLIST = 32
#: FAISS's own training guideline (``ClusteringParameters.min_points_per_centroid``; it warns
#: below it).
POINTS_PER_CENTROID = 39
PROBE_SHARE = 0.5
#: Probe enough lists to hold about K_COVER * k vectors (a large k needs most of the base).
K_COVER = 4
MIN_M, MAX_M = 4, 32
EF_CONSTRUCTION = 40
MIN_EF_SEARCH = 32


def unavailable() -> str | None:
    """One line saying why FAISS cannot run here, or None."""
    try:
        import faiss  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        return f"faiss is not importable ({exc}); pip install 'fuzzkit[faiss]'"
    return None


def _faiss() -> Any:
    import faiss

    faiss.omp_set_num_threads(1)
    return faiss


def faiss_metric(metric: str) -> int:
    """The FAISS metric constant for the model's metric name."""
    faiss = _faiss()
    return faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT


def distinct_rows(x: np.ndarray) -> int:
    """How many different vectors ``x`` holds (k-means can only place that many centroids)."""
    return int(np.unique(x, axis=0).shape[0]) if x.size else 0


def ivf_params(n: int, P: int, k: int) -> tuple[int, int]:
    """(nlist, nprobe) for ``n`` distinct training vectors, the case's probe count ``P``, and
    ``k``."""
    nlist = max(1, min(MAX_NLIST, n // POINTS_PER_CENTROID))
    wanted = max(P, math.ceil(nlist * PROBE_SHARE), math.ceil(K_COVER * k * nlist / max(n, 1)))
    return nlist, min(nlist, wanted)


def build_ivf(x: np.ndarray, metric: str, nlist: int, seed: int) -> Any:
    """An IndexIVFFlat over ``x``'s dimension, trained on ``x`` with a seeded k-means."""
    faiss = _faiss()
    dim = x.shape[1]
    quantizer = faiss.IndexFlat(dim, faiss_metric(metric))
    index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss_metric(metric))
    index.cp.seed = int(seed % 2**31)
    # ivf_params keeps 39 points a centroid; only nlist = 1 falls below it: no warning then
    index.cp.min_points_per_centroid = 1
    index.train(x)
    return index


def set_nprobe(index: Any, nprobe: int) -> None:
    """The number of inverted lists a search scans."""
    index.nprobe = nprobe


def build_hnsw(x: np.ndarray, metric: str, M: int) -> Any:
    """An IndexHNSWFlat with degree ``M`` (nothing to train)."""
    faiss = _faiss()
    index = faiss.IndexHNSWFlat(x.shape[1], M, faiss_metric(metric))
    index.hnsw.efConstruction = EF_CONSTRUCTION
    return index


def set_ef_search(index: Any, ef: int) -> None:
    """HNSW's search beam width."""
    index.hnsw.efSearch = ef


def add(index: Any, x: np.ndarray) -> None:
    """Append vectors; FAISS numbers them from ``index.ntotal``."""
    index.add(x)


def search(index: Any, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """FAISS's (distances, ids), each (q, k)."""
    dist, ids = index.search(q, k)
    return np.asarray(dist), np.asarray(ids)


def to_model_distances(dist: np.ndarray, ids: np.ndarray, metric: str) -> np.ndarray:
    """FAISS returns squared L2 (smaller better) or the inner product (larger better); the model
    wants squared L2 or ``-<x, q>``, +inf at padding."""
    out = dist.astype(np.float32) if metric == "l2" else -dist.astype(np.float32)
    return np.where(ids >= 0, out, np.float32(np.inf)).astype(np.float32)


def _arrays(inputs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    x = np.ascontiguousarray(inputs["vectors"], dtype=np.float32)
    extra = inputs.get("inserted")
    ins = None if extra is None or np.asarray(extra).shape[0] == 0 else \
        np.ascontiguousarray(extra, dtype=np.float32)
    q = np.ascontiguousarray(inputs["queries"], dtype=np.float32)
    return x, ins, q


def _outputs(index: Any, q: np.ndarray, k: int, metric: str, kind: str) -> dict[str, Any]:
    dist, ids = search(index, q, k)
    ids = ids.astype(np.int64)
    return {"ids": ids, "distances": to_model_distances(dist, ids, metric), "black_box": kind}


def ivf_flat(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``faiss-ivf`` implementation ``inputs -> outputs``."""
    x, ins, q = _arrays(inputs)
    metric, k = str(inputs["metric"]), int(inputs["k"])
    nlist, nprobe = ivf_params(distinct_rows(x), int(inputs["P"]), k)
    index = build_ivf(x, metric, nlist, int(inputs["seed"]))
    add(index, x)
    if ins is not None:
        add(index, ins)
    set_nprobe(index, nprobe)
    return _outputs(index, q, k, metric, "faiss-ivf")


def hnsw(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``faiss-hnsw`` implementation ``inputs -> outputs``."""
    x, ins, q = _arrays(inputs)
    metric, k = str(inputs["metric"]), int(inputs["k"])
    index = build_hnsw(x, metric, max(MIN_M, min(MAX_M, int(inputs["R"]))))
    add(index, x)
    if ins is not None:
        add(index, ins)
    set_ef_search(index, max(int(inputs["E"]), k, MIN_EF_SEARCH))
    return _outputs(index, q, k, metric, "faiss-hnsw")
