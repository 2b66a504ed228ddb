"""Lightning-indexer query path: the three Triton kernels of ``attention_index`` vs the NumPy
hooks, with a float64 check at the benchmark's own shapes.

    OMP_NUM_THREADS=1 python benchmarks/attention_index_kernels.py [--seq 8192] [--queries 64]
        [--heads 8] [--dim 64] [--groups 256] [--members 2048] [--topk 256] [--reps 3]

One prefill-tail batch: ``T`` queries at the last ``T`` of ``S`` positions, ``H`` indexer heads
of dimension ``d``.  It times (after one warm-up call) representative scoring on ``G``
representatives, member scoring on per-row candidate lists of ``M`` keys (random distinct ids,
some in the future, ``-1`` padded -- the in-kernel causal mask is exercised), and top-k of the
member scores, each as a Triton kernel (:mod:`fuzzkit.targets.attention_index.kernels`) and as the NumPy
hook (:mod:`fuzzkit.targets.attention_index.index`); then one whole ``hisa`` search through
:mod:`fuzzkit.targets.attention_index.triton_impl` against the NumPy search (agreeing ids).

Checks (exit status 1 on a mismatch): both scoring kernels within the float32 bound of float64
references on the first ``CHECK_ROWS`` rows, top-k ids exactly the NumPy hook's (the selection
is exact on its float32 input), the search's ids equal the NumPy search's on >= 99% of entries
(float32 near-ties may swap).  Without a GPU the kernels run under ``TRITON_INTERPRET=1``: the
default shapes shrink and the figures measure the interpreter -- a correctness run
(``scripts/gpu_check.sh`` runs it in both modes).
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
from fuzzkit.targets.attention_index import index as ai_index  # noqa: E402
from fuzzkit.targets.attention_index import kernels, triton_impl  # noqa: E402

CHECK_ROWS = 16


def timed(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    result = fn()  # warm-up (compile)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        result = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps, result


def reference(q: np.ndarray, w: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q64, w64, x64 = (a.astype(np.float64) for a in (q, w, x))
    d = q.shape[2]
    score = np.einsum("th,thg->tg", w64, np.maximum(np.einsum("thd,gd->thg", q64, x64), 0.0))
    mag = np.einsum("th,thg->tg", np.abs(w64), np.einsum("thd,gd->thg", np.abs(q64),
                                                          np.abs(x64)))
    return score / np.sqrt(d), mag / np.sqrt(d)


def main() -> int:
    interpreted = triton_support.interpreted()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=512 if interpreted else 8192)
    parser.add_argument("--queries", type=int, default=8 if interpreted else 64)
    parser.add_argument("--heads", type=int, default=4 if interpreted else 8)
    parser.add_argument("--dim", type=int, default=40 if interpreted else 64)
    parser.add_argument("--groups", type=int, default=32 if interpreted else 256)
    parser.add_argument("--members", type=int, default=200 if interpreted else 2048)
    parser.add_argument("--topk", type=int, default=16 if interpreted else 256)
    parser.add_argument("--reps", type=int, default=1 if interpreted else 3)
    args = parser.parse_args()
    mode = ("Triton interpreter (figures measure the interpreter)" if interpreted
            else f"native CUDA ({torch.cuda.get_device_name()})")
    print(f"attention_index kernels: {mode}")
    s, t, h, d, g, m = args.seq, args.queries, args.heads, args.dim, args.groups, args.members
    rng = np.random.default_rng(0)
    q = rng.standard_normal((t, h, d)).astype(np.float32)
    w = rng.standard_normal((t, h)).astype(np.float32)
    keys = rng.standard_normal((s, d)).astype(np.float32)
    reps = rng.standard_normal((g, d)).astype(np.float32)
    pos = np.arange(s - t, s, dtype=np.int64)
    cand = np.stack([rng.choice(s, m, replace=False) for _ in range(t)]).astype(np.int32)
    cand[rng.random((t, m)) < 0.05] = -1
    dev = triton_support.device()
    qd, wd = kernels.guarded(q, torch.float32, dev), kernels.guarded(w, torch.float32, dev)
    kd, rd = kernels.guarded(keys, torch.float32, dev), kernels.guarded(reps, torch.float32, dev)
    cd = torch.from_numpy(cand).to(dev)
    pd = torch.from_numpy(pos).to(dev)
    ok = True

    k_rep, got_rep = timed(lambda: kernels.score_representatives(qd, wd, rd), args.reps)
    n_rep, _ = timed(lambda: ai_index.score_representatives(q, w, reps), args.reps)
    want, mag = reference(q[:CHECK_ROWS], w[:CHECK_ROWS], reps)
    fail = fuzzkit.oracles.close(want, got_rep.cpu().numpy()[:CHECK_ROWS], dtype="float32",
                         reduction_length=d + h + 2, magnitude=mag, name="score_representatives")
    ok &= fail is None
    print(f"score_representatives T={t} H={h} d={d} G={g}: triton {k_rep * 1e3:9.3f} ms  "
          f"numpy {n_rep * 1e3:9.3f} ms  check {'ok' if fail is None else fail.message}")

    k_mem, got_mem = timed(lambda: kernels.score_members(qd, wd, kd, cd, pd), args.reps)
    n_mem, np_mem = timed(lambda: ai_index.score_members(q, w, keys, cand, pos), args.reps)
    rows = slice(0, CHECK_ROWS)
    full, fmag = reference(q[rows], w[rows], keys)
    c = cand[rows]
    live = (c >= 0) & (c <= pos[rows, None])
    r = np.arange(c.shape[0])[:, None]
    want = np.where(live, full[r, np.maximum(c, 0)], -np.inf)
    mag = np.where(live, fmag[r, np.maximum(c, 0)], 0.0)
    fail = fuzzkit.oracles.close(want, got_mem.cpu().numpy()[rows], dtype="float32",
                         reduction_length=d + h + 2, magnitude=mag, name="score_members")
    ok &= fail is None
    print(f"score_members         T={t} H={h} d={d} M={m}: triton {k_mem * 1e3:9.3f} ms  "
          f"numpy {n_mem * 1e3:9.3f} ms  check {'ok' if fail is None else fail.message}")

    k_top, (ids, _) = timed(lambda: kernels.select_topk(got_mem, cd, args.topk), args.reps)
    n_top, (np_ids, _) = timed(lambda: ai_index.select_topk(got_mem.cpu().numpy(), cand,
                                                          args.topk), args.reps)
    same = np.array_equal(ids.cpu().numpy(), np_ids)
    ok &= same
    print(f"select_topk           T={t} M={m} k={args.topk}: triton {k_top * 1e3:9.3f} ms  "
          f"numpy {n_top * 1e3:9.3f} ms  check {'ok' if same else 'ids differ'}")

    inputs = dict(q=q, w=w, k=keys, topk=args.topk, method="hisa", block=64 if interpreted
                  else 128, top_m=4 if interpreted else 16)
    k_s, got = timed(lambda: triton_impl.run(inputs), 1)
    n_s, want_s = timed(lambda: ai_index.search(inputs), 1)
    agree = float((got["ids"] == want_s["ids"]).mean())
    ok &= agree >= 0.99
    print(f"hisa search           T={t} S={s} top_m={inputs['top_m']}: triton {k_s * 1e3:9.1f} ms "
          f" numpy {n_s * 1e3:9.1f} ms  ids agree {agree:.4f}")
    print("attention_index kernels:", "ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
