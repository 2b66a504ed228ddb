"""OctEx query path: the Triton search (kernel hooks) vs the NumPy search, with a kernel check.

    OMP_NUM_THREADS=1 python benchmarks/ann_kernels.py [--storage float32|turbo8|turbo16]
        [--metric l2|ip] [--sizes 10000,50000] [--dim 128] [--queries 256]

For each base size ``n`` it builds one OctEx index (the NumPy build of
:mod:`fuzzkit.targets.ann.index`; on a GPU the kNN graph comes from a chunked float32 torch matmul
instead of the exact float64 one, which would take hours at these sizes on the CPU) and runs
the same search twice: with the NumPy hooks and with the Triton hooks of
:mod:`fuzzkit.targets.ann.triton_impl`.  It prints queries per second of each search and the share of
the time spent inside the two hooks (the rest -- probing, selection, ranking -- is the NumPy code
both share), and how many returned ids agree.

Before timing, both kernels are checked at the benchmark's own shapes against float64 NumPy
references of the hook semantics (first ``CHECK_ROWS`` queries): candidate distances within the
float32 bound, and one expansion round from the search's first frontier with exactly the NumPy
hook's new ids and visited flags.  A mismatch exits with status 1.

Without a GPU the kernels run under ``TRITON_INTERPRET=1``: the default sizes shrink to one
small index and the figures measure the interpreter, not a kernel -- the run is a correctness
check that every path works (``scripts/gpu_check.sh`` runs it in both modes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("OMP_NUM_THREADS", "1")

from fuzzkit import triton_support  # noqa: E402

triton_support.prepare()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import fuzzkit.oracles  # noqa: E402
from fuzzkit.targets.ann import bounds  # noqa: E402
from fuzzkit.targets.ann import index as ann_index  # noqa: E402
from fuzzkit.targets.ann import triton_impl  # noqa: E402
from fuzzkit.targets.ann import model  # noqa: E402
from fuzzkit.targets.ann.model import Params  # noqa: E402

CHECK_ROWS = 32


def clustered(n: int, dim: int, rng: np.random.Generator, clusters: int = 64) -> np.ndarray:
    centres = rng.standard_normal((clusters, dim)) * 3.0
    labels = rng.integers(0, clusters, n)
    return (centres[labels] + rng.standard_normal((n, dim))).astype(np.float32)


def torch_graph(x: np.ndarray, r: int, metric: str, chunk: int = 4096) -> np.ndarray:
    """kNN graph from float32 matmuls on the kernel device (benchmark only: float32 ranking,
    ties not ordered by id)."""
    device = triton_support.device()
    xt = torch.from_numpy(x).to(device)
    n = xt.shape[0]
    width = min(r, n - 1)
    graph = np.full((n, r), -1, dtype=np.int32)
    if width <= 0:
        return graph
    norms = (xt * xt).sum(1)
    for start in range(0, n, chunk):
        rows = xt[start:start + chunk]
        dots = rows @ xt.T
        dist = norms[start:start + chunk, None] - 2 * dots + norms[None, :] if metric == "l2" \
            else -dots
        idx = torch.arange(rows.shape[0], device=device)
        dist[idx, idx + start] = float("inf")
        graph[start:start + rows.shape[0], :width] = dist.topk(width, largest=False).indices\
            .to(torch.int32).cpu().numpy()
    return graph


def reference_distances(index: ann_index.Index, queries: np.ndarray, ids: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, int]:
    """float64 hook distances, error magnitude and reduction length (as the kernel tests)."""
    store = index.quant
    if store is None:
        return bounds.reference_distances(queries, index.base, ids, index.params.metric)
    turbo = {"centroids": store.centroids, "scales": store.scales, "norms": store.norms,
             "query_norms2": model.squared_norm(queries.astype(np.float32), np.float32)}
    return bounds.reference_distances(ann_index.rotated_queries(index, queries), store.codes,
                                      ids, index.params.metric, turbo)


def check_kernels(index: ann_index.Index, queries: np.ndarray) -> list[str]:
    """Both kernels at the benchmark's shapes on the first CHECK_ROWS queries."""
    problems = []
    q = np.ascontiguousarray(queries[:CHECK_ROWS], dtype=np.float32)
    hooks = triton_impl.KernelHooks()
    cand = ann_index.pad_rows(ann_index.probe(index, q))
    got = hooks.candidate_distances(index, q, cand)
    want, mag, length = reference_distances(index, q, cand)
    failure = fuzzkit.oracles.close(want, got, dtype="float32", reduction_length=length, magnitude=mag,
                            name="candidate_distances")
    if failure is not None:
        problems.append(failure.message)
    frontier = ann_index.best(cand, got, index.params.E)[0].astype(np.int32)
    visited = np.zeros((q.shape[0], index.n), dtype=bool)
    rows, cols = np.nonzero(cand >= 0)
    visited[rows, cand[rows, cols]] = True
    numpy_visited = visited.copy()
    new_ids, new_dist = hooks.expand(index, q, frontier, visited)
    want_ids, _ = ann_index.expand(index, q, frontier, numpy_visited)
    if not np.array_equal(new_ids, want_ids):
        problems.append(f"expand: new ids differ from the NumPy hook in "
                        f"{int((new_ids != want_ids).sum())} positions")
    if not np.array_equal(visited, numpy_visited):
        problems.append("expand: visited flags differ from the NumPy hook")
    want, mag, length = reference_distances(index, q, new_ids)
    failure = fuzzkit.oracles.close(want, new_dist, dtype="float32", reduction_length=length,
                            magnitude=mag, name="expand_distances")
    if failure is not None:
        problems.append(failure.message)
    return problems


class Timed:
    """Wraps a hook and accumulates the seconds spent in it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn, self.seconds = fn, 0.0

    def __call__(self, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.fn(*args)
        finally:
            self.seconds += time.perf_counter() - start


def timed_search(index: ann_index.Index, queries: np.ndarray, dist_hook: Callable[..., Any],
                 expand_hook: Callable[..., Any], reps: int) -> tuple[float, float, Any]:
    """(seconds per search, hook share, result) over ``reps`` searches after one warm-up."""
    result = ann_index.search(index, queries, candidate_distances=dist_hook, expand=expand_hook)
    d, e = Timed(dist_hook), Timed(expand_hook)
    start = time.perf_counter()
    for _ in range(reps):
        result = ann_index.search(index, queries, candidate_distances=d, expand=e)
    total = (time.perf_counter() - start) / reps
    return total, (d.seconds + e.seconds) / reps / total, result


def main() -> int:
    interpreted = triton_support.interpreted()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", choices=("float32", "turbo8", "turbo16"), default="float32")
    parser.add_argument("--metric", choices=("l2", "ip"), default="l2")
    parser.add_argument("--sizes", default="400" if interpreted else "10000,50000",
                        help="comma-separated base sizes n")
    parser.add_argument("--dim", type=int, default=24 if interpreted else 128)
    parser.add_argument("--queries", type=int, default=16 if interpreted else 256)
    parser.add_argument("--reps", type=int, default=1 if interpreted else 3)
    args = parser.parse_args()

    mode = ("Triton interpreter (TRITON_INTERPRET=1, CPU) -- figures measure the interpreter"
            if interpreted else f"native CUDA ({torch.cuda.get_device_name()})")
    print(f"mode: {mode}")
    if interpreted:
        params = Params(L=2, m=3, w=4.0, C=24, R=8, E=8, T=3, P=3, k=10, seed=1,
                        metric=args.metric, storage=args.storage)
    else:
        params = Params(L=4, m=6, w=6.0, C=64, R=16, E=16, T=4, P=4, k=10, seed=1,
                        metric=args.metric, storage=args.storage)
    print(f"params: {params}")
    print(f"{'n':>8} {'D':>4} {'q':>5} {'impl':<7} {'queries/s':>11} {'ms/search':>10} "
          f"{'in hooks':>9} {'ids agree':>10}")
    rng = np.random.default_rng(0)
    failed = False
    for n in (int(s) for s in args.sizes.split(",")):
        base = clustered(n, args.dim, rng)
        queries = clustered(args.queries, args.dim, rng)
        builder = None if interpreted else torch_graph
        index = ann_index.build(base, params, graph_builder=builder)
        problems = check_kernels(index, queries)
        for problem in problems:
            print(f"KERNEL MISMATCH (n={n}): {problem}")
        failed |= bool(problems)
        hooks = triton_impl.KernelHooks()
        t_np, share_np, r_np = timed_search(index, queries, ann_index.candidate_distances,
                                            ann_index.expand, args.reps)
        t_tr, share_tr, r_tr = timed_search(index, queries, hooks.candidate_distances,
                                            hooks.expand, args.reps)
        agree = float(np.mean(r_np.ids == r_tr.ids))
        q = queries.shape[0]
        for name, t, share in (("numpy", t_np, share_np), ("triton", t_tr, share_tr)):
            print(f"{n:>8} {args.dim:>4} {q:>5} {name:<7} {q / t:>11.1f} {1e3 * t:>10.1f} "
                  f"{100 * share:>8.0f}% {agree:>10.4f}")
    rows = min(CHECK_ROWS, args.queries)
    print("kernel check: " + ("FAILED" if failed else f"ok (first {rows} queries of each size, "
                                                      "both kernels)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
