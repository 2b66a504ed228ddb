"""What a quant case may ask for (:mod:`fuzzkit.limits`), read off the unvalidated inputs.

Where a case's cost comes from: ``n`` stored vectors and ``m`` queries of ``D`` dims; the
outputs hold ``scores`` (m, n) and ``symmetric_scores`` (n, n), float64 in the reference and the
oracle's bounds, so ``n * (n + m)`` is memory (``scores``: n = 4 096, m = 2 048 peaked at
1.8 GB) and ``D * n * (n + m)`` the work (``score_work``: 6.4e9 took 12 s); the rotation is
built from ``D x D`` Walsh--Hadamard blocks; the codebook has ``2**bits`` levels, Lloyd--Max
iterated over all of them.  The rotation seed, codebook name and precision select, they do not
size.

Defaults: 13x to 5 000x the largest values in 2 500 generated cases (seeds 0 and 7, the
strategy for each implementation): n 41, m 41, D 156, elements 9 869, scores 3 200, score work
384 891; ``bits`` is the largest width the codec has (16; the validator accepts 8 and 16 only).
A case at the defaults encodes, scores and is judged in a few seconds and under a gigabyte on
one core.
"""

from __future__ import annotations

from typing import Any

from fuzzkit import limits
from fuzzkit.limits import Limit, integer, shape as shape_of




def _rows(inputs: dict[str, Any], key: str) -> int:
    shape = shape_of(inputs.get(key))
    return shape[0] if shape else 0


def vectors(inputs: dict[str, Any]) -> int:
    return _rows(inputs, "vectors")


def queries(inputs: dict[str, Any]) -> int:
    return _rows(inputs, "queries")


def dim(inputs: dict[str, Any]) -> int:
    shapes = [shape_of(inputs.get(key)) for key in ("vectors", "queries")]
    return max([s[-1] for s in shapes if len(s) >= 2] or [0])


def elements(inputs: dict[str, Any]) -> int:
    return sum(limits.elements(inputs.get(k)) for k in ("vectors", "queries"))


def scores(inputs: dict[str, Any]) -> int:
    n = vectors(inputs)
    return n * (n + queries(inputs))


def score_work(inputs: dict[str, Any]) -> int:
    n = vectors(inputs)
    return dim(inputs) * n * (n + queries(inputs))


def bits(inputs: dict[str, Any]) -> int:
    return integer(inputs.get("bits"))


LIMITS = (
    Limit("vectors", 2_048, "stored vectors n", vectors),
    Limit("queries", 2_048, "queries m", queries),
    Limit("dim", 2_048, "vector dimension D", dim),
    Limit("elements", 2_000_000, "float elements of vectors and queries", elements),
    Limit("scores", 5_000_000, "score entries n * (n + m) (scores and symmetric_scores)",
          scores),
    Limit("score_work", 2_000_000_000, "products D * n * (n + m) of the scores", score_work),
    Limit("bits", 16, "code bits (a codebook of 2**bits levels)", bits),
)
