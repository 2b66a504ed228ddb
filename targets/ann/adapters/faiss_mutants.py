"""Planted bugs in the real FAISS usage of :mod:`fuzzkit.targets.ann.adapters.faiss_impl`.

Each mutant patches one step of the adapter (through :func:`fuzzkit.mutants.patch`) the way a
real FAISS user or wrapper gets it wrong; the citation names the upstream thread the bug class
comes from.  They run the real ``faiss-cpu``: the index, its training and its search are FAISS's
own, only the way they are driven is wrong.  ``tests/test_ann_faiss.py`` shows each one caught;
``fuzzkit mutants ann --only <name>`` finds them from scratch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fuzzkit.mutants import derived, patch
from fuzzkit.target import Mutant
from fuzzkit.targets.ann.adapters import faiss_impl


def _nprobe_lost(index: Any, nprobe: int) -> None:
    """nprobe set where the search never reads it (in the upstream reports: a Python attribute
    on the wrapping index, which SWIG refuses here): the IVF index keeps its default of 1."""
    del index, nprobe


def _similarity_as_distance(original: Any) -> Any:
    def converted(dist: np.ndarray, ids: np.ndarray, metric: str) -> np.ndarray:
        """Inner-product scores passed on as distances (no sign flip)."""
        out = original(dist, ids, metric)
        return np.where(ids >= 0, -out, out).astype(np.float32) if metric == "ip" else out

    return converted


def _derived_sqrt(original: Any) -> Any:
    """A wrapper that "fixes" FAISS's squared L2 into Euclidean distance."""

    def converted(dist: np.ndarray, ids: np.ndarray, metric: str) -> np.ndarray:
        out = original(dist, ids, metric)
        if metric == "l2":
            out = np.where(ids >= 0, np.sqrt(np.maximum(out, 0)), out).astype(np.float32)
        return out

    return converted


def _add_one_based(index: Any, x: np.ndarray) -> None:
    """Vectors added with explicit labels numbered from 1 (``add_with_ids``)."""
    start = index.ntotal + 1
    index.add_with_ids(x, np.arange(start, start + x.shape[0], dtype=np.int64))


def _search_one_based(original: Any) -> Any:
    def shifted(index: Any, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        dist, ids = original(index, q, k)
        return dist, np.where(ids >= 0, ids + 1, ids)

    return shifted


def _ef_below_k(index: Any, ef: int) -> None:
    """efSearch left at a small fixed beam (4), below k for most cases."""
    index.hnsw.efSearch = 4


def _hnsw_ip_for_l2(x: np.ndarray, metric: str, M: int) -> Any:
    """The HNSW index built with METRIC_INNER_PRODUCT for an l2 collection."""
    faiss = faiss_impl._faiss()
    index = faiss.IndexHNSWFlat(x.shape[1], M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = faiss_impl.EF_CONSTRUCTION
    return index


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "faiss-ivf-nprobe-ignored", "faiss-ivf",
        "nprobe set on an object the search does not read: IVF searches 1 list",
        "faiss#604 and faiss#376: Python accepts nprobe on a wrapper index (IndexPreTransform, "
        "IDMap) and silently keeps the inner IVF's default nprobe = 1",
        patch(faiss_impl, set_nprobe=_nprobe_lost),
    ),
    Mutant(
        "faiss-ivf-ip-similarity-as-distance", "faiss-ivf",
        "inner-product vs L2 mix-up: METRIC_INNER_PRODUCT scores (larger is better) passed on "
        "as distances (smaller is better)",
        "FAISS wiki 'MetricType and distances' (IP search returns similarities, best first); "
        "faiss#1578 and faiss#2971 (IP vs L2 confusions in IVF indexes)",
        patch(faiss_impl, to_model_distances=derived(_similarity_as_distance)),
    ),
    Mutant(
        "faiss-ivf-sqrt-distances", "faiss-ivf",
        "returned L2 distances square-rooted (Euclidean instead of FAISS's squared L2)",
        "faiss#192 and faiss#413: FAISS L2 indexes return squared distances; wrappers that "
        "convert one side only mix the two conventions",
        patch(faiss_impl, to_model_distances=derived(_derived_sqrt)),
    ),
    Mutant(
        "faiss-ivf-ids-one-based", "faiss-ivf",
        "labels off by one: vectors added with add_with_ids numbered from 1",
        "off-by-one between row numbers and external labels when an index is filled with "
        "add_with_ids (faiss#671: IndexIDMap2 over IVF with caller-chosen ids)",
        patch(faiss_impl, add=_add_one_based),
    ),
    Mutant(
        "faiss-hnsw-ef-below-k", "faiss-hnsw",
        "HNSW efSearch left below k",
        "faiss#1244 (efSearch < k: recall drops, 'not very consistent', wontfix) and "
        "faiss#1571 / #3711 (-1 ids when the beam is smaller than k)",
        patch(faiss_impl, set_ef_search=_ef_below_k),
    ),
    Mutant(
        "faiss-hnsw-sqrt-distances", "faiss-hnsw",
        "returned L2 distances square-rooted (Euclidean instead of FAISS's squared L2)",
        "faiss#192 and faiss#413: FAISS L2 indexes return squared distances",
        patch(faiss_impl, to_model_distances=derived(_derived_sqrt)),
    ),
    Mutant(
        "faiss-hnsw-ip-metric", "faiss-hnsw",
        "HNSW built with METRIC_INNER_PRODUCT for an L2 collection",
        "metric mix-ups between index and caller (faiss#1578 for IVF; IndexHNSWFlat's metric "
        "is a constructor argument that defaults silently)",
        patch(faiss_impl, build_hnsw=_hnsw_ip_for_l2),
    ),
    Mutant(
        "faiss-hnsw-ids-one-based", "faiss-hnsw",
        "labels off by one: 1-based labels returned for 0-based rows",
        "off-by-one between row numbers and external labels (IndexIDMap add_with_ids, "
        "faiss#671)",
        patch(faiss_impl, search=derived(_search_one_based)),
    ),
)

__all__ = ["MUTANTS"]
