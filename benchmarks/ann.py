"""Recall@10 against queries per second: OctEx (NumPy), IVF-flat and brute force, on CPU.

A synthetic clustered dataset (``--n`` vectors in ``--dim`` dimensions around ``--clusters``
Gaussian centres; queries drawn the same way, held out), exact top-10 ground truth in float64,
then one row per configuration:

* **brute force**: one float32 matrix product per query block -- recall 1, the speed floor;
* **IVF-flat** (:mod:`fuzzkit.targets.ann.ivf`): seeded k-means, ``nlist = 4 sqrt(n)``, several nprobe;
* **OctEx** (:mod:`fuzzkit.targets.ann.index`, the ``numpy`` implementation): fixed tables and graph,
  several (P, E, T) points along the recall/throughput curve.  Its graph is built here with a
  chunked float32 matrix-product kNN (the exact float64 builder of the fuzzed target is meant
  for small cases); build times are reported.

Run: ``python benchmarks/ann.py [--n 100000] [--dim 128] [--queries 1000] [--plot
reports/ann.png]``.  A plot needs the ``plots`` extra (matplotlib); without it the table is
still printed.  Triton throughput is in ``benchmarks/ann_kernels.py``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fuzzkit.targets.ann import index, ivf  # noqa: E402
from fuzzkit.targets.ann.model import Params  # noqa: E402
from fuzzkit.targets.scheduling.metrics import print_table  # noqa: E402

K = 10
QUERY_BLOCK = 64
KNN_BLOCK = 1024


def clustered(n: int, q: int, dim: int, clusters: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` stored and ``q`` query vectors around the same ``clusters`` centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    spread = 1.0

    def draw(count: int) -> np.ndarray:
        which = rng.integers(0, clusters, count)
        return (centres[which] + spread * rng.standard_normal((count, dim))).astype(np.float32)

    return draw(n), draw(q)


def knn_float32(x: np.ndarray, r: int, metric: str) -> np.ndarray:
    """kNN graph by chunked float32 matrix products (self excluded); -1 padded."""
    n = x.shape[0]
    width = min(r, n - 1)
    graph = np.full((n, r), -1, dtype=np.int32)
    norms = np.sum(x * x, axis=1)
    for start in range(0, n, KNN_BLOCK):
        rows = np.arange(start, min(n, start + KNN_BLOCK))
        dot = x[rows] @ x.T
        d = -dot if metric == "ip" else norms[rows, None] - 2.0 * dot + norms[None, :]
        d[np.arange(rows.size), rows] = np.inf
        part = np.argpartition(d, width, axis=1)[:, :width]
        order = np.argsort(np.take_along_axis(d, part, axis=1), axis=1, kind="stable")
        graph[rows, :width] = np.take_along_axis(part, order, axis=1)
    return graph


def blocked_topk(x: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """Squared-L2 top-k ids by ``||x||² − 2 q·x`` in blocks of queries, in the arrays' dtype:
    float64 for the ground truth, float32 for the brute-force baseline's speed."""
    norms = np.sum(x * x, axis=1)
    out = np.empty((q.shape[0], k), dtype=np.int64)
    for start in range(0, q.shape[0], QUERY_BLOCK):
        d = norms[None, :] - 2.0 * (q[start:start + QUERY_BLOCK] @ x.T)
        part = np.argpartition(d, k, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(d, part, axis=1), axis=1)
        out[start:start + QUERY_BLOCK] = np.take_along_axis(part, order, axis=1)
    return out


def exact_topk(x: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """Ground truth: float64 squared-L2 top-k."""
    return blocked_topk(x.astype(np.float64), q.astype(np.float64), k)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    hits = [len(set(f[f >= 0].tolist()) & set(t.tolist())) for f, t in zip(found, truth)]
    return float(np.mean(hits)) / truth.shape[1]


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def brute_force(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    return blocked_topk(x, q, K)


def octex_search(idx: index.Index, q: np.ndarray, P: int, E: int, T: int) -> np.ndarray:
    import dataclasses

    tuned = dataclasses.replace(idx, params=dataclasses.replace(idx.params, P=P, E=E, T=T))
    return np.concatenate([index.search(tuned, q[s:s + QUERY_BLOCK]).ids
                           for s in range(0, q.shape[0], QUERY_BLOCK)])


def octex_params(x: np.ndarray, seed: int) -> Params:
    """Tables sized to the data: ``w`` a fraction of the projected spread, so that a cell holds
    a few hundred vectors and ``C`` keeps the ones near its centre."""
    m = 6
    spread = float(np.sqrt(np.mean(np.sum(x.astype(np.float64) ** 2, axis=1)) / m))
    return Params(L=8, m=m, w=1.0 * spread, C=64, R=24, E=32, T=4, P=3, k=K, seed=seed,
                  metric="l2")


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    x, q = clustered(args.n, args.queries, args.dim, args.clusters, args.seed)
    truth = exact_topk(x, q, K)
    rows: list[dict[str, Any]] = []

    found, seconds = timed(lambda: brute_force(x, q))
    rows.append({"method": "brute force", "config": "float32 matmul", "build_s": 0.0,
                 "recall": recall(found, truth), "qps": q.shape[0] / seconds})

    nlist = int(4 * math.sqrt(args.n))
    coarse, build_s = timed(lambda: ivf.build(x, nlist, seed=args.seed))
    for nprobe in (1, 2, 4, 8, 16, 32):
        (found, _), seconds = timed(lambda: ivf.search(coarse, q, K, nprobe))
        rows.append({"method": "IVF-flat", "config": f"nlist={nlist} nprobe={nprobe}",
                     "build_s": build_s, "recall": recall(found, truth),
                     "qps": q.shape[0] / seconds})

    params = octex_params(x, args.seed)
    graph, graph_s = timed(lambda: knn_float32(x, params.R, params.metric))
    idx, cells_s = timed(lambda: index.build(x, params, graph_builder=lambda *_: graph))
    print(f"OctEx build: kNN graph (R={params.R}) {graph_s:.1f} s, tables and cells "
          f"{cells_s:.1f} s")
    for P, E, T in ((1, 8, 1), (1, 16, 2), (3, 16, 3), (3, 32, 4), (5, 64, 6)):
        found, seconds = timed(lambda: octex_search(idx, q, P, E, T))
        rows.append({"method": "OctEx (numpy)",
                     "config": f"L={params.L} m={params.m} C={params.C} R={params.R} "
                               f"P={P} E={E} T={T}",
                     "build_s": graph_s + cells_s, "recall": recall(found, truth),
                     "qps": q.shape[0] / seconds})
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is missing (pip install 'fuzzkit[plots]')"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, marker in (("OctEx (numpy)", "o-"), ("IVF-flat", "s-"), ("brute force", "*")):
        pts = sorted((r["recall"], r["qps"]) for r in rows if r["method"] == method)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, label=method)
    ax.set_xlabel(f"recall@{K}")
    ax.set_ylabel("queries / s (CPU)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return f"plot: {path}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=ROOT / "reports" / "ann.png")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = run(args)
    print_table(f"recall@{K} vs queries/s: n={args.n}, D={args.dim}, {args.queries} queries, "
                f"{args.clusters} clusters (CPU, 1 thread per OMP_NUM_THREADS)",
                ["method", "config", "build s", f"recall@{K}", "queries/s"],
                [[r["method"], r["config"], f"{r['build_s']:.1f}", f"{r['recall']:.3f}",
                  f"{r['qps']:.0f}"] for r in rows])
    print(plot(rows, args.plot))
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
