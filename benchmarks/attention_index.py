"""Indexer time and recall@k vs context length: dense, HiSA and AttentionIndex (NumPy, CPU).

Synthetic indexer keys with structure (``--clusters`` Gaussian centres, keys drawn around them in
a random order: semantically similar tokens spread over the context), ``--queries`` decode
queries at the last positions whose heads are keys plus noise, non-negative head weights.
Recall@k is tie-aware against the float64 dense indexer.  Equal candidate budget: HiSA blocks of
``--block`` keys, AttentionIndex ``G = S / block`` k-means groups (built chunked, ``--chunk``
keys first), both probing the same number ``top = max(2, blocks / 8)`` of blocks / groups
(groups are unequal in size, so the mean number of keys scored is reported too).  Times are the
query-time indexer (scoring + selection); AttentionIndex's build is reported separately.

Then the statistical comparison "AttentionIndex misses no more than HiSA at an equal candidate
budget": paired per-query recall over ``--seeds`` seeds at the middle context, Hoeffding at 99 %
(:func:`fuzzkit.oracles.recall.compare_recall`).  Reported, not asserted.

Run: ``python benchmarks/attention_index.py [--contexts 1024 4096 16384]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fuzzkit.oracles.recall import compare_recall, hoeffding_radius, recall_at_k  # noqa: E402
from fuzzkit.targets.attention_index import index, model  # noqa: E402
from fuzzkit.targets.scheduling.metrics import print_table  # noqa: E402


def make_case(s: int, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    d, h, t = args.dim, args.heads, args.queries
    centres = rng.standard_normal((args.clusters, d))
    k = centres[rng.integers(0, args.clusters, s)] + 0.5 * rng.standard_normal((s, d))
    q = k[rng.integers(0, s, (t, h))] + 1.0 * rng.standard_normal((t, h, d))
    w = rng.random((t, h))
    blocks = -(-s // args.block)
    top = max(2, blocks // 8)
    return {"q": q.astype(np.float32), "w": w.astype(np.float32), "k": k.astype(np.float32),
            "topk": args.topk, "block": args.block, "top_m": top, "groups": blocks,
            "iters": 3, "chunk": min(args.chunk, s), "top_g": top, "sink": 0, "local": 0,
            "seed": seed}


def timed_search(case: dict[str, Any], method: str) -> tuple[dict[str, Any], float, float]:
    """(outputs, query seconds, build seconds); the build is timed by wrapping it."""
    built: dict[str, float] = {"s": 0.0}
    original = index.build_groups

    def build(keys: Any, p: Any) -> Any:
        start = time.perf_counter()
        out = original(keys, p)
        built["s"] += time.perf_counter() - start
        return out

    with mock.patch.object(index, "build_groups", build):
        start = time.perf_counter()
        out = index.search({**case, "method": method})
        total = time.perf_counter() - start
    return out, total - built["s"], built["s"]


def exact_scores(case: dict[str, Any]) -> np.ndarray:
    q, w, k = case["q"], case["w"], case["k"]
    pos = model.positions(q.shape[0], k.shape[0])
    causal = np.arange(k.shape[0])[None, :] <= pos[:, None]
    return np.where(causal, model.scores64(q, w, k), -np.inf)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--topk", type=int, default=64)
    parser.add_argument("--queries", type=int, default=16)
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--chunk", type=int, default=2048)
    parser.add_argument("--clusters", type=int, default=32)
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()
    started = time.perf_counter()
    rows = []
    for s in args.contexts:
        case = make_case(s, args, seed=0)
        exact = exact_scores(case)
        for method in model.METHODS:
            out, query_s, build_s = timed_search(case, method)
            rec = recall_at_k(None, out["ids"], args.topk, ref_scores=exact)
            rows.append([str(s), method, str(case["top_m"] if method != "dense" else "-"),
                         f"{float(np.mean(out['candidates'])):.0f}",
                         f"{1000 * query_s:.1f}", f"{build_s:.2f}" if build_s else "-",
                         f"{float(rec.mean()):.3f}"])
    print_table(f"lightning indexer, d={args.dim}, H={args.heads}, topk={args.topk}, "
                f"{args.queries} decode queries, block={args.block} (CPU, NumPy float32)",
                ["context", "method", "probed", "keys scored", "query ms", "build s",
                 f"recall@{args.topk}"], rows)

    s = sorted(args.contexts)[len(args.contexts) // 2]
    ai, hi, ca, ch = [], [], [], []
    for seed in range(args.seeds):
        case = make_case(s, args, seed=100 + seed)
        exact = exact_scores(case)
        for method, rec, cand in (("attention_index", ai, ca), ("hisa", hi, ch)):
            out = index.search({**case, "method": method})
            rec.append(recall_at_k(None, out["ids"], args.topk, ref_scores=exact))
            cand.append(out["candidates"])
    a, b = np.concatenate(ai), np.concatenate(hi)
    failure = compare_recall(a, b, confidence=0.99, name="attention_index-vs-hisa")
    radius = hoeffding_radius(a.size, 0.99, 2.0)
    print(f"claim 'AttentionIndex misses no more than HiSA at an equal candidate budget' "
          f"(context {s}, {a.size} paired queries over {args.seeds} seeds): "
          f"recall AI {a.mean():.3f} vs HiSA {b.mean():.3f}, difference "
          f"{a.mean() - b.mean():+.3f} (99 % Hoeffding radius {radius:.3f}); keys scored AI "
          f"{np.concatenate(ca).mean():.0f} vs HiSA {np.concatenate(ch).mean():.0f}; verdict: "
          f"{'not refuted' if failure is None else 'REFUTED: ' + failure.message}")
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
