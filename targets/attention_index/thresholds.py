"""The sizes of an ``attention_index`` case and the thresholds of the code every implementation
runs through (the chunked k-means build of :mod:`.model`, the search driver of :mod:`.index`,
the relations of :mod:`.properties`).  The Triton kernels' tiles are in :mod:`.tiles`.

Several paths change where one input crosses *another*, not a fixed number: ``chunk`` vs ``S``
(keys absorbed after the first chunk), ``groups`` vs the first chunk (G cut), ``top_g`` vs G
(probe everything), ``topk`` / ``sink`` / ``local`` vs the causal keys of query 0.  Those are
declared on *relative* sizes (``x - y + 1``), so the usual ``t - 1, t, t + 1`` boundaries of a
threshold at 1 land on ``x = y - 1, y, y + 1``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from fuzzkit.reach import Size, Threshold
from fuzzkit.targets.attention_index import model
from fuzzkit.targets.attention_index.properties import CLAIM_MIN_KEYS

SHARED = (
    Threshold("s", CLAIM_MIN_KEYS,
              f"recall-claim property: AttentionIndex cases of S >= {CLAIM_MIN_KEYS} keys run "
              "the 512-query recall claim (seconds per case under the interpreter: capped)",
              cap=48),
    Threshold("absorbed", 1,
              "chunked k-means: keys after the first chunk join one by one (model.chunked_kmeans "
              "loop); 0 = Lloyd only, from 2 a joining key sees a centroid an earlier joiner "
              "moved", cap=48),
    Threshold("iters", 1,
              "Lloyd iterations on the first chunk: 0 keeps the seeded initial centroids, 1 "
              "moves them once, 2+ re-assign against moved centroids", cap=3),
    Threshold("groups_over_chunk", 1,
              "n_groups = min(groups, chunk, S): at groups - min(chunk, S) + 1 = 1 every "
              "first-chunk key is its own centroid, above it G is cut to the first chunk"),
    Threshold("probe_over_groups", 1,
              "select_groups probes min(top_g | top_m, G): top - G + 1 = 1 probes every group "
              "(= dense), above it the count is clamped"),
    Threshold("topk_over_row0", 1,
              "topk vs query 0's S - T + 1 causal keys: topk - (S - T) above 1 pads row 0 with "
              "-1 / -inf (select_topk's invalid lanes, the kernel's found = False path)"),
    Threshold("sink_over_row0", 1,
              "sink vs query 0's causal keys: sink - (S - T) above 1 forces positions past "
              "pos(0), which the causal mask must drop"),
    Threshold("local_over_row0", 1,
              "local window vs query 0's causal keys: local - (S - T) above 1 reaches before "
              "position 0 (a window start below zero)"),
)


def _shape(inputs: Mapping[str, Any]) -> tuple[int, int, int]:
    q, k = np.asarray(inputs["q"]), np.asarray(inputs["k"])
    return int(k.shape[0]), int(q.shape[0]), int(q.shape[2])


def representatives(inputs: Mapping[str, Any]) -> int:
    """G: HiSA blocks or AttentionIndex groups (0 for dense)."""
    s = _shape(inputs)[0]
    p = model.params(inputs)
    if p["method"] == "hisa":
        return -(-s // p["block"])
    if p["method"] == "attention_index":
        return model.n_groups(p, s)
    return 0


def _probe(inputs: Mapping[str, Any]) -> int:
    p = model.params(inputs)
    return p["top_m"] if p["method"] == "hisa" else p["top_g"]


def _candidate_width(inputs: Mapping[str, Any]) -> Iterable[int]:
    """The member list width M where it is known from the inputs alone: the last query sees all
    S keys when every causal key is a candidate (dense, every group probed, or a local window
    over everything).  Other cases depend on the float32 group scores and are not counted."""
    s, t, _ = _shape(inputs)
    p = model.params(inputs)
    if (p["method"] == "dense" or _probe(inputs) >= representatives(inputs)
            or (p["method"] == "attention_index" and p["local"] >= s)):
        yield s


def _ai(inputs: Mapping[str, Any], value: Any) -> Iterable[int]:
    if model.params(inputs)["method"] == "attention_index":
        yield int(value(inputs))


def _grouped(inputs: Mapping[str, Any], value: Any) -> Iterable[int]:
    if model.params(inputs)["method"] != "dense":
        yield int(value(inputs))


def _first_chunk(inputs: Mapping[str, Any]) -> int:
    return min(model.params(inputs)["chunk"], _shape(inputs)[0])


def _row0(inputs: Mapping[str, Any]) -> int:
    """S - T: query 0 sees S - T + 1 keys."""
    s, t, _ = _shape(inputs)
    return s - t


SIZES: dict[str, Size] = {
    "s": Size(lambda i: [_shape(i)[0]], lo=1),
    "t": Size(lambda i: [_shape(i)[1]], lo=1),
    "d": Size(lambda i: [_shape(i)[2]], lo=1),
    "g": Size(lambda i: _grouped(i, representatives), lo=1),
    "m": Size(_candidate_width, lo=1),
    "absorbed": Size(lambda i: _ai(i, lambda x: _shape(x)[0] - _first_chunk(x))),
    "iters": Size(lambda i: _ai(i, lambda x: model.params(x)["iters"])),
    "groups_over_chunk": Size(lambda i: _ai(
        i, lambda x: model.params(x)["groups"] - _first_chunk(x) + 1)),
    "probe_over_groups": Size(lambda i: _grouped(
        i, lambda x: _probe(x) - representatives(x) + 1)),
    "topk_over_row0": Size(lambda i: [model.params(i)["topk"] - _row0(i)]),
    "sink_over_row0": Size(lambda i: _ai(i, lambda x: model.params(x)["sink"] - _row0(x))),
    "local_over_row0": Size(lambda i: _ai(i, lambda x: model.params(x)["local"] - _row0(x))),
}
