"""Hypothesis strategy for lightning-indexer cases: small shapes and the awkward corners.

Sizes: S <= 96 keys, T <= 16 queries (T < S decode-like tails and T = S prefill), H <= 4 heads,
d <= 16.  Data kinds:

- ``gaussian`` / ``clustered`` keys (clustered is what k-means groups are built for);
- ``integers``: small integers in keys, queries and weights -- exact score ties, tied block means
  and centroids, exact zero dot products;
- ``negative``: queries anti-aligned with the keys, so many dot products are negative and ReLU
  zeros whole rows (all-zero scores: every key tied);
- duplicated keys (exact ties broken by id).

Configurations: every method; ``block`` 1..S+; ``top_m`` / ``top_g`` from 1 to past the number
of blocks / groups (probe-everything); ``groups`` up to more than the first chunk holds (G is
reduced); ``chunk`` from 1 to S (chunk < S: later keys are absorbed one by one); ``iters`` 0..3;
``sink`` / ``local`` 0 (off) or on; ``topk`` from 1 to past S.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

MAX_KEYS = 96
MAX_QUERIES = 16
MAX_HEADS = 4
MAX_DIM = 16
KINDS = ("gaussian", "clustered", "clustered", "integers", "negative")


def _arrays(kind: str, s: int, t: int, h: int, d: int, rng: np.random.Generator,
            dup: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if kind == "integers":
        k = rng.integers(-2, 3, (s, d)).astype(np.float64)
        q = rng.integers(-2, 3, (t, h, d)).astype(np.float64)
        w = rng.integers(0, 3, (t, h)).astype(np.float64)
    else:
        if kind == "clustered":
            centres = 3.0 * rng.standard_normal((int(rng.integers(1, 6)), d))
            k = centres[rng.integers(0, centres.shape[0], s)] + 0.2 * rng.standard_normal((s, d))
        else:
            k = rng.standard_normal((s, d))
        q = rng.standard_normal((t, h, d))
        if kind == "negative":
            k = np.abs(k)
            q = -np.abs(q) + 0.1 * rng.standard_normal((t, h, d))
        w = rng.random((t, h)) * (2.0 if rng.random() < 0.5 else 1.0)
        if rng.random() < 0.2:
            w = -w if rng.random() < 0.5 else w - 0.5  # negative head weights
    for i in range(1, s):
        if rng.random() < dup:
            k[i] = k[rng.integers(0, i)]
    return (q.astype(np.float32), w.astype(np.float32), k.astype(np.float32))


@st.composite
def _inputs(draw: Callable[[Any], Any]) -> dict[str, Any]:
    kind = draw(st.sampled_from(KINDS))
    s = draw(st.one_of(st.integers(1, 16), st.integers(1, MAX_KEYS)))
    t = draw(st.one_of(st.just(s), st.integers(1, min(s, MAX_QUERIES))))
    t = min(t, MAX_QUERIES)
    h = draw(st.integers(1, MAX_HEADS))
    d = draw(st.one_of(st.integers(1, 4), st.integers(1, MAX_DIM)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q, w, k = _arrays(kind, s, t, h, d, rng, draw(st.sampled_from([0.0, 0.0, 0.1, 0.4])))
    block = draw(st.one_of(st.integers(1, 8), st.integers(1, s + 2)))
    blocks = -(-s // block)
    chunk = draw(st.one_of(st.just(s), st.integers(1, s)))
    groups = draw(st.one_of(st.integers(1, 6), st.integers(1, s + 2)))
    return {
        "q": q, "w": w, "k": k,
        "topk": draw(st.one_of(st.integers(1, 8), st.integers(1, s + 2))),
        "method": draw(st.sampled_from(["dense", "hisa", "attention_index",
                                        "attention_index"])),
        "block": block,
        "top_m": draw(st.integers(1, blocks + 1)),
        "groups": groups,
        "iters": draw(st.integers(0, 3)),
        "chunk": chunk,
        "top_g": draw(st.integers(1, groups + 1)),
        "sink": draw(st.sampled_from([0, 0, 1, 2, 4])),
        "local": draw(st.sampled_from([0, 0, 1, 2, 4])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def inputs() -> st.SearchStrategy[dict[str, Any]]:
    """The target's strategy (a zero-argument callable, as :class:`fuzzkit.Target` wants)."""
    return _inputs()
