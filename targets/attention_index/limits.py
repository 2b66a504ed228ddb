"""What an attention_index case may ask for (:mod:`fuzzkit.limits`), read off the unvalidated
inputs.

Where a case's cost comes from: ``T`` queries of ``H`` heads of ``d`` dims against ``S`` keys.

* The float64 reference scores every candidate key of every query in Python, one call per
  query-key pair and one multiply per head and dim (``pairs = T * S``: T = S = 4 096 took 19 s
  and 1 GB of (T, S) masks; ``score_work = T * H * d * S``: 4.2e6 took 1 s);
* group selection compares every pair of eligible groups per query (``group_work = T * G**2``,
  ``G`` = ``ceil(S / block)`` blocks for HiSA, ``min(groups, chunk, S)`` k-means groups for
  AttentionIndex);
* the chunked k-means runs ``iters`` Lloyd rounds over the first ``chunk`` keys, then places
  every later key (``kmeans_work = (iters + 1) * S * G * d``);
* results are (T, topk), -1 / -inf padded whatever ``S``.

``block``, ``top_m``, ``groups``, ``chunk``, ``top_g``, ``sink`` and ``local`` act only up to
``S`` (a larger value means "all of them"), so their defaults are the keys limit: a value past
it is refused, but never one that a smaller value could not stand for.

Defaults: 40x to 7 000x the largest values in 2 500 generated cases (seeds 0 and 7, the
strategy for each implementation): T 34, H 4, d 24, S 96, elements 2 936, pairs 3 102, score
work 69 632, group work 68 479, k-means work 91 676, topk 96, iters 3, block 84, top_m 48,
groups 48, chunk 96, top_g 33, sink 53, local 48.  A case at any one default replays in
seconds on one core (the Triton implementation runs the interpreter on top).
"""

from __future__ import annotations

from typing import Any

from fuzzkit import limits
from fuzzkit.limits import Limit, field, integer, shape as shape_of

#: The keys limit: also the default of every parameter that acts only up to ``S``.
KEYS = 8_192




def _axis(inputs: dict[str, Any], key: str, axis: int) -> int:
    shape = shape_of(inputs.get(key))
    return shape[axis] if axis < len(shape) else 0


def queries(inputs: dict[str, Any]) -> int:
    return max(_axis(inputs, "q", 0), _axis(inputs, "w", 0))


def heads(inputs: dict[str, Any]) -> int:
    return max(_axis(inputs, "q", 1), _axis(inputs, "w", 1))


def dim(inputs: dict[str, Any]) -> int:
    return max(_axis(inputs, "q", 2), _axis(inputs, "k", 1))


def keys(inputs: dict[str, Any]) -> int:
    return _axis(inputs, "k", 0)


def elements(inputs: dict[str, Any]) -> int:
    return sum(limits.elements(inputs.get(k)) for k in ("q", "w", "k"))




def _positive(inputs: dict[str, Any], key: str, default: int) -> int:
    return max(0, integer(inputs.get(key, default)))


def groups_of(inputs: dict[str, Any]) -> int:
    """How many groups the case's method selects among: HiSA's blocks, AttentionIndex's
    k-means groups (at most ``chunk`` and ``S``), none for dense."""
    s = keys(inputs)
    method = inputs.get("method")
    if method == "hisa":
        return -(-s // max(1, _positive(inputs, "block", 4)))
    if method == "attention_index":
        return max(1, min(_positive(inputs, "groups", 1), _positive(inputs, "chunk", s), s))
    return 0


def pairs(inputs: dict[str, Any]) -> int:
    return queries(inputs) * keys(inputs)


def score_work(inputs: dict[str, Any]) -> int:
    return queries(inputs) * heads(inputs) * dim(inputs) * keys(inputs)


def group_work(inputs: dict[str, Any]) -> int:
    return queries(inputs) * groups_of(inputs) ** 2


def kmeans_work(inputs: dict[str, Any]) -> int:
    if inputs.get("method") != "attention_index":
        return 0
    return ((_positive(inputs, "iters", 2) + 1) * keys(inputs) * groups_of(inputs)
            * dim(inputs))


LIMITS = (
    Limit("queries", 4_096, "queries T", queries),
    Limit("heads", 256, "heads H", heads),
    Limit("dim", 1_024, "head dimension d", dim),
    Limit("keys", KEYS, "keys S", keys),
    Limit("elements", 4_000_000, "float elements of q, w and k", elements),
    Limit("pairs", 4_000_000, "query-key pairs T * S (the reference's scoring calls, the (T, S) "
          "masks)", pairs),
    Limit("score_work", 20_000_000, "reference score products T * H * d * S", score_work),
    Limit("group_work", 500_000_000, "group comparisons T * G**2", group_work),
    Limit("kmeans_work", 100_000_000, "k-means products (iters + 1) * S * G * d", kmeans_work),
    Limit("topk", KEYS, "results per query (topk)", field("topk")),
    Limit("iters", 1_000, "Lloyd iterations (iters)", field("iters")),
    Limit("block", KEYS, "HiSA block size (block)", field("block")),
    Limit("top_m", KEYS, "HiSA probed blocks (top_m)", field("top_m")),
    Limit("groups", KEYS, "k-means groups (groups)", field("groups")),
    Limit("chunk", KEYS, "k-means first chunk (chunk)", field("chunk")),
    Limit("top_g", KEYS, "probed groups (top_g)", field("top_g")),
    Limit("sink", KEYS, "sink positions (sink)", field("sink")),
    Limit("local", KEYS, "local positions (local)", field("local")),
)
