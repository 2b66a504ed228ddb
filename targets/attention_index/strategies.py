"""Hypothesis strategy for lightning-indexer cases: sizes at every declared threshold, values over
the whole contract.

Sizes.  The plain distribution stays small (S <= 96 keys, T <= 16 queries, H <= 4 heads,
d <= 16); every size a threshold applies to is drawn with :func:`fuzzkit.reach.size` (through
:func:`_size`, which also puts the boundary values among the plain draws), so about half the
draws land on ``t - 1, t, t + 1, 2t - 1, 2t, 2t + 1`` of a declared threshold: the kernels'
tiles of :mod:`.tiles` (a second row / column program, a second ``d`` step) and the shared ones
of :mod:`.thresholds` (the recall claim's S = 32, keys absorbed after the first chunk, Lloyd
iterations, G cut to the first chunk, probing every group, ``topk`` / ``sink`` / ``local``
against query 0's causal keys).  T <= S: half the cases draw T first and S >= T, the others S
first and T <= S (either order alone would rule out the other's small edges whenever it lands
on a large one); the candidate tile applies to S (a dense row, or a row probing everything,
holds S candidates); HiSA / AttentionIndex aim at a number of representatives G when its tile
is declared (T is then cut to the S that G makes).  Configuration is drawn before the bulk
data: Hypothesis mutates later, long choice sequences far less evenly.

Cost caps (one case near a second on one core under the Triton interpreter): large contexts get
fewer queries and heads; AttentionIndex cases have at most 64 keys, and the ones of 32 keys or
more -- each runs the 512-query recall claim, re-running the search with the case's ``topk`` and
``top_g`` (one top-k extraction step per k) -- at most 2 heads, ``topk <= 16``, ``top_g <= 8``.

Values.  Half the cases use the structured kinds the indexers are built for:

- ``gaussian`` / ``clustered`` keys (clustered is what k-means groups are built for);
- ``integers``: small integers in keys, queries and weights -- exact score ties, tied block means
  and centroids, exact zero dot products;
- ``negative``: queries anti-aligned with the keys, so many dot products are negative and ReLU
  zeros whole rows (all-zero scores: every key tied).

The other half draw ``q``, ``w`` and ``k`` from :mod:`fuzzkit.values` over the contract's
:data:`DOMAIN` (finite float32: exact and signed zeros, sparse rows, repeated values, norms below
1e-7, subnormals, huge values), keys often one kind per row (a zero key next to a huge one).  On
top: duplicated keys (up to all keys equal: exact ties broken by id), and in some cases exact
power-of-two rescaling of one array (tiny keys under huge queries, huge weights on tiny dot
products) -- every case is then fitted to the contract by scaling one array down by a power of
two until no float32 score can overflow (:func:`model.overflow_factor`).

Configurations: every method; ``block`` from 1 to past S; ``top_m`` / ``top_g`` from 1 to past
the number of blocks / groups; ``groups`` up to past the first chunk (G is cut); ``chunk`` from 1
to past S; ``iters`` 0..3; ``sink`` / ``local`` off, small, or around query 0's causal keys;
``topk`` from 1 to past S.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
import operator
from typing import Any, Callable, Optional, Sequence

import numpy as np
from hypothesis import strategies as st

from fuzzkit import reach, values
from fuzzkit.reach import Threshold
from fuzzkit.targets.attention_index import model
from fuzzkit.targets.attention_index.properties import CLAIM_MIN_KEYS

#: (method, weight): dense carries the candidate tile (a row of S), AttentionIndex the most
#: thresholds (chunked build, sink / local, the recall claim).
METHODS = (("dense", 4), ("hisa", 2), ("attention_index", 5))
MAX_KEYS = 96
#: AttentionIndex keys: plain draws up to AI_PLAIN_KEYS, threshold draws up to AI_MAX_KEYS.
AI_PLAIN_KEYS = 48
AI_MAX_KEYS = 64
MAX_QUERIES = 16
MAX_HEADS = 4
MAX_DIM = 16
KINDS = ("gaussian", "clustered", "clustered", "integers", "negative")
#: The contract of q, w and k (``checks.validate``): finite float32, subnormals included.
DOMAIN = values.Domain("float32", nan=False, inf=False, subnormal=True)
#: Keys drawn one value kind per row up to this many rows (one Hypothesis draw per row).
ROW_KINDS_MAX = 128
#: Above this T * S * d a case gets at most two heads (reference loops, interpreter programs).
WORK_FOR_ALL_HEADS = 12_000
#: Above this S a case gets at most four queries (only natively launched tiles reach it).
LARGE_KEYS = 256
#: Largest topk and top_g of a case that runs the recall claim (AttentionIndex, S >= 32): the
#: claim re-runs the search 512 times, each top-k kernel launch one extraction step per k.
CLAIM_TOPK = 16
CLAIM_PROBES = 8

Draw = Callable[[Any], Any]

# Strategies memoised by their arguments: a case draws dozens of sizes whose strategies depend
# on earlier draws (``integers(t, S)``, ``one_of(base, sampled_from(edges))``); building a new
# strategy object per draw cost more than the draw itself (Hypothesis validates each new one
# and works out its properties), while the same bounds recur from case to case.
_BOOLEANS = st.booleans()
_integers = functools.lru_cache(maxsize=4096, typed=True)(st.integers)
_just = functools.lru_cache(maxsize=256, typed=True)(st.just)
_one_of = functools.lru_cache(maxsize=4096)(st.one_of)


@functools.lru_cache(maxsize=4096)
def _sampled_tuple(choices: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(choices)


def _sampled(choices: Sequence[Any]) -> st.SearchStrategy[Any]:
    return _sampled_tuple(tuple(choices))


@functools.lru_cache(maxsize=4096)
def _plus(base: st.SearchStrategy[int], shift: int) -> st.SearchStrategy[int]:
    """``base`` shifted by ``shift`` (memoised like the constructors above)."""
    return base.map(functools.partial(operator.add, shift))


@functools.lru_cache(maxsize=4096)
def _at_most(base: st.SearchStrategy[int], top: int) -> st.SearchStrategy[int]:
    """``min(x, top)`` of ``base``'s draws (memoised)."""
    return base.map(functools.partial(min, top))


def _arrays(kind: str, s: int, t: int, h: int, d: int, rng: np.random.Generator,
            dup: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, w, k of one structured kind (see the module docstring) from ``rng``; also what
    ``scripts/attention_index_recall_calibration.py`` calibrates the recall claim on."""
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
    _duplicate(k, rng, dup)
    return (q.astype(np.float32), w.astype(np.float32), k.astype(np.float32))


def _duplicate(k: np.ndarray, rng: np.random.Generator, dup: float) -> None:
    """Each key after the first becomes a copy of an earlier one with probability ``dup``
    (``dup = 1``: every key equals key 0)."""
    for i in range(1, k.shape[0]):
        if rng.random() < dup:
            k[i] = k[rng.integers(0, i)]


#: Most elements of a ``drawn`` key row that Hypothesis draws one by one (two choices each): a
#: row of up to this many coordinates is drawn whole, a longer one is a ``mixed`` row with this
#: many Hypothesis-drawn elements at rng-chosen coordinates (drawn values stay in every such row,
#: at a bounded cost).
DRAWN_ELEMENTS = 8
_DRAWN_LISTS = {count: st.lists(values.element(DOMAIN), min_size=count, max_size=count)
                for count in range(1, DRAWN_ELEMENTS + 1)}
_DOMAIN_EDGE = values.largest_at_most(DOMAIN.largest, DOMAIN.dtype)


_KINDS = DOMAIN.allowed()
_KIND_CUMULATIVE = tuple(itertools.accumulate(w for _, w in _KINDS))
_KIND_INDEX = st.integers(0, _KIND_CUMULATIVE[-1] - 1)


def _kind(draw: Draw) -> str:
    """:func:`fuzzkit.values.kind` in :data:`DOMAIN` (the same single integer draw, the same
    kind for it) with the domain's table and cumulative weights computed once."""
    return _KINDS[bisect.bisect_right(_KIND_CUMULATIVE, draw(_KIND_INDEX))][0]


def _into_domain(raw: np.ndarray) -> np.ndarray:
    """What :func:`fuzzkit.values.array` makes of :func:`fuzzkit.values.fill`'s raw values in
    :data:`DOMAIN` (clipped, rounded to float32; subnormals are in the contract), elementwise:
    for a whole block of rows at once."""
    top = DOMAIN.largest
    with np.errstate(invalid="ignore"):
        raw = np.where(np.isfinite(raw), np.clip(raw, -top, top), raw)
    out = values.round_to(raw, DOMAIN.dtype)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(out) & (np.abs(out) > top), np.copysign(_DOMAIN_EDGE, out),
                        out).astype(np.float32)


def _key_rows(draw: Draw, s: int, d: int) -> np.ndarray:
    """``s x d`` keys with one value kind per row (:func:`fuzzkit.values.rows`' distribution:
    a zero key next to a huge one), at one Hypothesis choice per row: the rows' values come
    from one NumPy generator seeded by a Hypothesis draw, and are fitted to :data:`DOMAIN` as
    one block."""
    rng = np.random.default_rng(draw(_integers(0, 2**32 - 1)))
    raw = np.zeros((s, d))
    for i in range(s):
        kind = _kind(draw)
        if kind == "drawn":
            count = min(d, DRAWN_ELEMENTS)
            drawn = np.array(draw(_DRAWN_LISTS[count]), dtype=np.float64)
            if count == d:
                raw[i] = drawn
                continue
            raw[i] = values.fill("mixed", (d,), DOMAIN, int(rng.integers(0, 2**32 - 1)))
            raw[i, rng.choice(d, size=count, replace=False)] = drawn
        else:
            raw[i] = values.fill(kind, (d,), DOMAIN, int(rng.integers(0, 2**32 - 1)))
    return _into_domain(raw)


def _domain_arrays(draw: Draw, s: int, t: int, h: int, d: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, w, k from the contract's value kinds; keys often one kind per row."""
    if s <= ROW_KINDS_MAX and draw(_BOOLEANS):
        k = _key_rows(draw, s, d)
    else:
        k = _array(draw, (s, d))
    q = _array(draw, (t, h, d))
    w = _array(draw, (t, h))
    return q, w, k


def _array(draw: Draw, shape: tuple[int, ...]) -> np.ndarray:
    """:func:`fuzzkit.values.array` in :data:`DOMAIN`, except that a ``drawn`` array of more
    than :data:`DRAWN_ELEMENTS` elements is a ``mixed`` one with that many Hypothesis-drawn
    elements at rng-chosen places (up to 256 elements were drawn one by one: hundreds of
    choices, more than the rest of the case)."""
    kind = _kind(draw)
    size = math.prod(shape)
    if kind != "drawn" or size <= DRAWN_ELEMENTS:
        return values.array(draw, shape, DOMAIN, kind_name=kind)
    rng = np.random.default_rng(draw(_integers(0, 2**32 - 1)))
    raw = values.fill("mixed", shape, DOMAIN, int(rng.integers(0, 2**32 - 1))).reshape(-1)
    raw[rng.choice(size, size=DRAWN_ELEMENTS, replace=False)] = draw(
        _DRAWN_LISTS[DRAWN_ELEMENTS])
    return _into_domain(raw.reshape(shape))


def _shifted(x: np.ndarray, exponent: int) -> np.ndarray:
    """``x * 2**exponent`` rounded to float32 (exact unless it lands in the subnormal range);
    an upward shift stops where the largest value would leave the float32 range."""
    x64 = np.asarray(x, np.float64)
    top = float(np.abs(x64).max(initial=0.0))
    if exponent > 0 and top > 0:
        exponent = min(exponent, math.floor(math.log2(values.LARGEST["float32"] / top)))
    return np.ldexp(x64, exponent).astype(np.float32)


def _rescale(draw: Draw, q: np.ndarray, w: np.ndarray, k: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sometimes move one array by a power of two (its structure kept exactly), then fit the
    case to the contract: while a float32 score could overflow, scale down by the needed power
    of two the larger of the arrays that are not ``kept`` (that one keeps its huge values) and
    take part in the overflowing product (``q . k`` before the weight, ``w * q . k`` after)."""
    arrays = {"q": q, "w": w, "k": k}
    if values.choose(draw, [(False, 3), (True, 1)]):
        name = draw(_sampled(sorted(arrays)))
        arrays[name] = _shifted(arrays[name], draw(_integers(-150, 126)))
    kept = draw(_sampled(sorted(arrays)))
    for _ in range(8):
        dots, weighted = model.overflow_parts(arrays["q"], arrays["w"], arrays["k"])
        if max(dots, weighted) <= model.OVERFLOW_LIMIT:
            break
        factor, factors = (dots, ("q", "k")) if dots > model.OVERFLOW_LIMIT else (
            weighted, ("q", "k", "w"))
        others = [n for n in factors if n != kept]
        name = max(others, key=lambda n: float(np.abs(arrays[n]).max()))
        arrays[name] = _shifted(arrays[name],
                                -math.ceil(math.log2(factor / model.OVERFLOW_LIMIT)) - 1)
    return arrays["q"], arrays["w"], arrays["k"]


def _values(draw: Draw, s: int, t: int, h: int, d: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    dup = values.choose(draw, [(0.0, 5), (0.1, 2), (0.4, 2), (1.0, 1)])
    if values.choose(draw, [("structured", 1), ("domain", 1)]) == "structured":
        rng = np.random.default_rng(draw(_integers(0, 2**32 - 1)))
        q, w, k = _arrays(draw(_sampled(KINDS)), s, t, h, d, rng, dup)
    else:
        q, w, k = _domain_arrays(draw, s, t, h, d)
        _duplicate(k, np.random.default_rng(draw(_integers(0, 2**32 - 1))), dup)
    q, w, k = _rescale(draw, q, w, k)
    return (np.ascontiguousarray(q, np.float32), np.ascontiguousarray(w, np.float32),
            np.ascontiguousarray(k, np.float32))


def _size(draw: Draw, name: str, thresholds: Sequence[Threshold], *, lo: int, hi: int,
          base: st.SearchStrategy[int]) -> int:
    """:func:`fuzzkit.reach.size`, with the thresholds' boundary values among the plain draws
    too: Hypothesis explores its choices unevenly (it re-uses and mutates earlier cases), so a
    boundary drawn in 3 % of the cases can still go missing in 300 -- a second chance keeps
    every edge reached."""
    edges = sorted({v for t in reach.of_size(thresholds, name) for v in t.boundaries(lo, hi)})
    if edges:
        base = _one_of(base, _sampled(edges))
    return reach.size(draw, name, thresholds, lo=lo, hi=hi, base=base)


def _relative(draw: Draw, name: str, thresholds: Sequence[Threshold], origin: int, lo: int,
              hi: int, base: st.SearchStrategy[int]) -> int:
    """A value ``x`` in ``[lo, hi]`` drawn on the relative size ``x - origin + 1`` (thresholds
    at 1 land on ``origin - 1, origin, origin + 1``); ``base`` draws ``x`` itself."""
    rel = _size(draw, name, thresholds, lo=lo - origin + 1, hi=hi - origin + 1,
                base=_plus(base, 1 - origin))
    return rel + origin - 1


def _block(draw: Draw, s: int, aimed: Optional[tuple[int, int]]) -> int:
    """HiSA block size: the one that makes the aimed number of blocks, or drawn directly
    (including a block as large as S and larger)."""
    if aimed is not None:
        return aimed[1]
    return int(draw(_one_of(_integers(1, 8), _integers(1, s + 2),
                              _sampled([max(1, s - 1), s, s + 1]))))


def _chunk_and_groups(draw: Draw, thresholds: Sequence[Threshold], s: int
                      ) -> tuple[int, int]:
    """AttentionIndex ``(first chunk, groups)``: keys absorbed after the first chunk drawn on
    ``absorbed``, ``groups`` around the first chunk (``groups_over_chunk``: G cut)."""
    absorbed = _size(draw, "absorbed", thresholds, lo=0, hi=s - 1,
                     base=_one_of(_just(0), _integers(0, s - 1)))
    first_chunk = s - absorbed
    groups = _relative(draw, "groups_over_chunk", thresholds, first_chunk, 1, first_chunk + 3,
                       _one_of(_integers(1, 6), _integers(1, first_chunk + 2)))
    return first_chunk, groups


def _aimed_chunk(draw: Draw, thresholds: Sequence[Threshold], g: int) -> tuple[int, int]:
    """AttentionIndex aimed at G (``groups = G``): ``(first chunk, absorbed keys)``, the first
    chunk drawn around G (``groups_over_chunk``: a chunk of G keys makes every key its own
    centroid, a smaller one cuts G) and the keys absorbed after it on ``absorbed``; S is their
    sum (at most AI_MAX_KEYS unless G needs more; the caller cuts T to it)."""
    top = max(AI_MAX_KEYS, g)
    # groups_over_chunk = G - first_chunk + 1: from 1 - (top - G) (the widest chunk) to 3
    rel = _size(draw, "groups_over_chunk", thresholds, lo=g + 1 - top, hi=min(3, g),
                base=_integers(g + 1 - min(top, max(g, AI_PLAIN_KEYS)), min(1, g)))
    first_chunk = g + 1 - rel
    # T is cut to S afterwards (like HiSA's): a lower bound T - first chunk would rule out
    # 0 and 1 absorbed keys in every case with many queries.
    absorbed = _size(draw, "absorbed", thresholds, lo=0, hi=top - first_chunk,
                     base=_one_of(_just(0), _integers(0, 16)))
    return first_chunk, absorbed


def _aim_groups(draw: Draw, thresholds: Sequence[Threshold], method: str
                ) -> Optional[tuple[int, int]]:
    """HiSA / AttentionIndex cases aim at a number of representatives G when ``g`` thresholds
    are declared (a second representative tile): ``(G, block)`` -- for HiSA a block of 1..3 keys
    or up to S / G (S is then drawn so that it makes exactly G blocks, the last one partial or
    full), 0 for AttentionIndex (groups = G, the first chunk drawn around it:
    :func:`_aimed_chunk`, which also cuts G).  Without ``g`` thresholds (NumPy: no tiles) the
    block and the groups are drawn directly."""
    if method == "dense" or not reach.of_size(thresholds, "g"):
        return None
    top = reach.largest(thresholds, "g", MAX_QUERIES)
    if method == "attention_index":
        top = min(top, CLAIM_MIN_KEYS - 1)  # G keys or more: G >= 32 would always run the claim
    g = _size(draw, "g", thresholds, lo=1, hi=top,
              base=_one_of(_integers(1, 6), _integers(1, 24)))
    if method == "hisa":
        widest = max(1, MAX_KEYS // g)
        return g, draw(_one_of(_integers(1, min(3, widest)), _integers(1, widest)))
    return g, 0


def _probes(groups: int) -> st.SearchStrategy[int]:
    """Plain probe counts: often one or two (the sparse regime, where a mis-scored
    representative changes what is probed), otherwise any count up to one past every group."""
    return _one_of(_integers(1, min(2, groups)), _integers(1, groups + 1))


def _keys(draw: Draw, thresholds: Sequence[Threshold], method: str, t: int,
          aimed: Optional[tuple[int, int]]) -> int:
    """S (at least T).  HiSA aimed at G: the S that makes exactly G blocks.  AttentionIndex
    aimed at G: drawn later from the first chunk and the keys absorbed after it."""
    # S carries the candidate tile too: a dense row (or one probing everything) holds S keys.
    # The S thresholds themselves (the recall claim) concern AttentionIndex only.
    sizes = ("s", "m") if method == "attention_index" else ("m",)
    s_thresholds = tuple(dataclasses.replace(x, size="s") for x in thresholds
                         if x.size in sizes)
    if aimed is not None and method == "hisa":
        g, block = aimed  # exactly G blocks, the last one partial or full
        return draw(_integers((g - 1) * block + 1, g * block))
    if method == "attention_index":
        # AttentionIndex cases of S >= 32 run the 512-query recall claim (T = S batches):
        # seconds per case under the interpreter, growing with S -- kept to AI_MAX_KEYS.
        s_thresholds = tuple(dataclasses.replace(x, cap=min(x.cap or AI_MAX_KEYS, AI_MAX_KEYS))
                             for x in s_thresholds if x.value < AI_MAX_KEYS)
        return _size(draw, "s", s_thresholds, lo=t, hi=max(t, AI_MAX_KEYS),
                     base=_one_of(_integers(t, max(t, 16)),
                                    _integers(t, max(t, AI_PLAIN_KEYS))))
    return _size(draw, "s", s_thresholds, lo=t,
                 hi=max(t, reach.largest(s_thresholds, "s", MAX_KEYS)),
                 base=_one_of(_integers(t, max(t, 16)), _integers(t, max(t, MAX_KEYS))))


def _inputs(draw: Draw, thresholds: Sequence[Threshold]) -> dict[str, Any]:
    method = values.choose(draw, METHODS)
    aimed = _aim_groups(draw, thresholds, method)
    # T first (its tiles do not depend on S), then S >= T; a quarter of the short contexts
    # prefill (T = S: query 0 at position 0).
    # Half the other cases draw S first and T <= S after it: drawn first, a large T (its own
    # tiles: 16, 32 rows) would rule out the small S of the candidate tile (a row of 17) in
    # every case that draws it, and the two would rarely meet their edges in one run.
    t_top = reach.largest(thresholds, "t", MAX_QUERIES)
    t_base = _one_of(_integers(1, 4), _integers(1, MAX_QUERIES))
    chunking: Optional[tuple[int, int]] = None
    aimed_ai = aimed is not None and method == "attention_index"
    if not aimed_ai and draw(_BOOLEANS):
        s = _keys(draw, thresholds, method, 1, aimed)
        t = _size(draw, "t", thresholds, lo=1, hi=min(t_top, s), base=_at_most(t_base, s))
    else:
        t = _size(draw, "t", thresholds, lo=1, hi=t_top, base=t_base)
        if aimed is not None and method == "hisa":
            t = min(t, (aimed[0] - 1) * aimed[1] + 1)  # the smallest S that makes G blocks
        if aimed is not None and method == "attention_index":
            chunking = _aimed_chunk(draw, thresholds, aimed[0])
            s = sum(chunking)
            t = min(t, s)
        else:
            s = _keys(draw, thresholds, method, t, aimed)
    if s <= MAX_QUERIES and values.choose(draw, [(False, 3), (True, 1)]):
        t = s  # prefill of a short context (a long one costs T = S rows in every relation)
    if s > LARGE_KEYS:
        t = min(t, 4)
    d = _size(draw, "d", thresholds, lo=1, hi=reach.largest(thresholds, "d", MAX_DIM),
              base=_one_of(_integers(1, 4), _integers(1, MAX_DIM)))
    # The recall claim re-runs the search 512 times with the case's topk and top_g, and under
    # the interpreter the top-k kernel costs one extraction step per k: claim cases keep both
    # small (and at most two heads).
    claim = method == "attention_index" and s >= CLAIM_MIN_KEYS
    cheap = t * s * d <= WORK_FOR_ALL_HEADS and s <= LARGE_KEYS and not claim
    h = draw(_integers(1, MAX_HEADS if cheap else 2))
    row0 = s - t  # query 0 sees keys 0 .. S - T
    topk_top = min(s + 2, CLAIM_TOPK) if claim else s + 2
    case: dict[str, Any] = {
        "method": method,
        "topk": _relative(draw, "topk_over_row0", thresholds, row0 + 1, 1, topk_top,
                          _one_of(_integers(1, 8), _integers(1, topk_top))),
        "block": 4, "top_m": 1, "groups": 1, "iters": 2, "chunk": s, "top_g": 1,
        "sink": 0, "local": 0,
    }
    if method == "hisa":
        block = _block(draw, s, aimed)
        blocks = -(-s // block)
        case.update(block=block, top_m=_relative(
            draw, "probe_over_groups", thresholds, blocks, 1, blocks + 2, _probes(blocks)))
    elif method == "attention_index":
        if aimed is not None and chunking is not None:
            first_chunk, groups = chunking[0], aimed[0]
        else:
            first_chunk, groups = _chunk_and_groups(draw, thresholds, s)
        absorbed = s - first_chunk
        chunk = first_chunk + (draw(_sampled([0, 0, 0, 1, 7])) if absorbed == 0 else 0)
        g = model.n_groups({"groups": groups, "chunk": chunk}, s)
        probe_top = min(g + 2, CLAIM_PROBES) if claim else g + 2
        # off, a small window, or one around query 0's causal keys (row0 + 1 of them)
        local_base = _sampled([0, 0, 1, 2, 4, row0, row0 + 1, row0 + 2])
        case.update(
            chunk=chunk, groups=groups,
            top_g=_relative(draw, "probe_over_groups", thresholds, g, 1, probe_top,
                            _probes(min(g, probe_top))),
            iters=_size(draw, "iters", thresholds, lo=0, hi=3, base=_integers(0, 3)),
            sink=_relative(draw, "sink_over_row0", thresholds, row0 + 1, 0, s + 2, local_base),
            local=_relative(draw, "local_over_row0", thresholds, row0 + 1, 0, s + 2,
                            local_base),
        )
    # The bulk data last: small configuration draws made after hundreds of value draws are
    # explored far less evenly by Hypothesis (threshold boundaries would be missed).
    case["seed"] = draw(_integers(0, 2**32 - 1))
    case["q"], case["w"], case["k"] = _values(draw, s, t, h, d)
    return case


def inputs(thresholds: Optional[Sequence[Threshold]] = None
           ) -> st.SearchStrategy[dict[str, Any]]:
    """The target's strategy.  ``thresholds``: the sizes to aim at (the engine passes the
    target's plus the fuzzed implementation's); None: every declared one in this mode."""
    if thresholds is None:
        from fuzzkit.targets.attention_index import thresholds as shared, tiles

        thresholds = (*shared.SHARED, *tiles.thresholds())
    chosen = tuple(thresholds)

    @st.composite
    def _case(draw: Draw) -> dict[str, Any]:
        return _inputs(draw, chosen)

    return _case()
