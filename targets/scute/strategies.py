"""Hypothesis strategy for Scute cases: mixed batches of every adapter method, sized at the
kernel's edges, with values from every corner of the contract.

Sizes (:mod:`fuzzkit.reach`): ``inputs(thresholds=...)`` gets the thresholds of the
implementation it fuzzes (the Scute kernel's tiles as launched in this mode, :mod:`.tiles`; the
slot conversion's edges and torch's branches, :mod:`.sizes`) and draws every size a threshold
names through ``reach.size`` -- the plain distribution below in about half the draws (K in
{8, 12, 16, 24, 32} or 1..40, Nout 4..24 or square, ranks 1..8, 1..4 slots, a few tokens per
slot), ``t-1, t, t+1, 2t-1, 2t, 2t+1`` of a threshold or above it in the rest -- plus a fifth of
the draws on a boundary picked evenly (:func:`_size`: Hypothesis favours the first of few
options).  The sizes:

* ``k`` (K loop), ``nout`` (column programs), ``rank`` (the padded R: the first low-rank adapter
  has it, the others any rank up to it);
* the tokens of every slot, -1 included (``decode_slot_tokens`` / ``prefill_slot_tokens``: tiles
  of one slot's run; ``base_tokens``), arranged as decode (shuffled single tokens) or prefill
  (runs of one slot in shuffled order);
* ``span``: OFT block sizes (any divisor of K -- non-powers of two straddle the K chunks) and
  BOFT's packed block ``bs·2^(m-1)``; in half the cases with a transform K is built from a block
  at a span edge (:func:`_structured_k`); ``boft_factors`` 1..5 (as many as K allows; PEFT's
  permutations are involutions for the first two factors); ``neumann_terms`` 1..9; ``slots``
  0..4 (0: base layer only).

Values (:mod:`fuzzkit.values`): every float array -- ``x`` (one kind per token row up to
:data:`ROWS_MAX` rows), ``W0`` (usual, one kind, or one per row: DoRA norms differ row by row),
``b0``, ``A``, ``B``, the VeRA matrices and ``λ``, OFT/BOFT ``Q`` (skew-symmetric from a drawn
triangle), ``boft_s``, IA3 ``l``, DoRA magnitudes -- comes from its domain: exact zeros and ±0,
small integers and repeated values (ties), sparse, tiny norms, subnormals, values near the
format's largest and at its square root, elementwise mixtures (:data:`KINDS`).  The contract has
no NaN/Inf (``validate`` rejects them) and no value that overflows its format (:mod:`.ranges`),
so :func:`fuzzkit.targets.scute.fit.fit` scales the culprits by powers of two until every intermediate
fits: huge cases land at the edge, not beyond it.  Values held in the storage dtype (float32 /
float16 / bfloat16) are rounded to it.

``build`` makes a plain case from parameters (tests use it).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

import numpy as np
from hypothesis import reject
from hypothesis import strategies as st

from fuzzkit import reach, values
from fuzzkit.targets.scute import checks, pristine
from fuzzkit.targets.scute.checks import round_to
from fuzzkit.targets.scute.fit import fit

DTYPES = ("float32", "float16", "bfloat16")
METHODS = ("identity", "lora", "dora", "vera", "oft", "boft", "ia3-kv", "ia3-ff")
#: Draw weights of the methods: the transforms (block-diagonal spans, butterfly factors, Cayley
#: variants) and the low-rank paths have the most code to reach; identity the least.
METHOD_WEIGHTS = (("identity", 1), ("lora", 3), ("dora", 2), ("vera", 2), ("oft", 4),
                  ("boft", 4), ("ia3-kv", 1), ("ia3-ff", 1))
MODES = ("decode", "prefill")
#: Largest sizes when no threshold names a cap (the torch implementation has no tiles).
DEFAULT_HI = {"k": 40, "nout": 32, "rank": 12, "slots": 4, "tokens": 12, "boft_factors": 5,
              "neumann_terms": 9}
#: A size with fewer legal values than this around its threshold is drawn evenly over them.
SMALL_RANGE = 10
#: Up to this many rows, ``x`` and ``W0`` get one value kind per row (two choices a row);
#: beyond, one kind for the whole array -- the choice sequence stays short (see :data:`KINDS`).
ROWS_MAX = 12


# Strategies are built once (here, or once per argument tuple by the cached helpers below) and
# only *drawn* per case: building ``st.integers(...)`` anew for each of a case's fifty draws
# costs about as much as drawing it.
_SEED = st.integers(0, 2**32 - 1)
_PERCENT = st.integers(0, 99)
_BOOL = st.booleans()
_DTYPE = st.sampled_from(DTYPES)
_MODE = st.sampled_from(MODES)
_CAYLEY = st.sampled_from(["neumann", "exact", "neumann"])
_TIMES = st.sampled_from([1, 2, 4, 8])
_SPAN_BASE = st.sampled_from([2, 4, 8, 16, 3, 6, 12])
_K_BASE = st.one_of(st.sampled_from([8, 16, 32, 12, 24]), st.integers(1, 40))


@functools.cache
def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    """``st.integers(lo, hi)``, built once per range."""
    return st.integers(lo, hi)


@functools.cache
def _choices(options: tuple) -> st.SearchStrategy[Any]:
    """``st.sampled_from(options)``, built once per option tuple."""
    return st.sampled_from(options)


@functools.cache
def _alpha(r: int) -> st.SearchStrategy[float]:
    """LoRA/DoRA alpha for rank ``r``: the usual values (``2r`` among them) or any float32."""
    return st.one_of(st.sampled_from([1.0, 2.0 * r, 8.0, 16.0, 3.0, 0.0, 0.5, 64.0]),
                     values.element(values.Domain("float32")))


def _f32(a: Any) -> np.ndarray:
    return np.asarray(a, np.float32)


def _skew(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    u = _f32(np.triu(scale * rng.standard_normal(shape), 1))
    return u - np.swapaxes(u, -1, -2)


def make_adapter(method: str, k: int, nout: int, dtype: str,
                 rng: np.random.Generator, w0: np.ndarray) -> dict[str, Any]:
    """One random adapter of ``method`` (see :data:`METHODS`) for a (nout, k) layer."""
    r = int(rng.integers(1, 9))
    if method == "identity":
        return {"method": "identity"}
    if method in ("lora", "dora"):
        a = round_to(0.5 * rng.standard_normal((r, k)), dtype)
        b = round_to(0.5 * rng.standard_normal((nout, r)), dtype)
        alpha = float(rng.choice([1.0, 2.0 * r, 8.0, 16.0, 3.0]))
        ad: dict[str, Any] = {"method": method, "A": a, "B": b, "alpha": alpha,
                              "rslora": bool(rng.random() < 0.4)}
        if method == "dora":
            norms = np.sqrt((np.asarray(w0, np.float64) ** 2).sum(axis=1))
            ad["magnitude"] = _f32(norms * rng.uniform(0.5, 1.5, nout))
        return ad
    if method == "vera":
        kmax = k + int(rng.integers(0, 9))
        nmax = nout + int(rng.integers(0, 9))
        return {"method": "vera",
                "A_shared": round_to(0.5 * rng.standard_normal((r, kmax)), dtype),
                "B_shared": round_to(0.5 * rng.standard_normal((nmax, r)), dtype),
                "lambda_d": _f32(rng.standard_normal(r)),
                "lambda_b": _f32(0.5 * rng.standard_normal(nout))}
    cayley = "exact" if rng.random() < 0.5 else "neumann"
    terms = int(rng.integers(1, 7))
    if method == "oft":
        bs = int(rng.choice([b for b in (1, 2, 4, 8) if k % b == 0]))
        return {"method": "oft", "block_size": bs,
                "Q": _skew(rng, (k // bs, bs, bs), 0.3), "cayley": cayley,
                "neumann_terms": terms}
    if method == "boft":
        bs = int(rng.choice([2, 4, 8]))
        options = [1] + [m for m in (2, 3, 4)
                         if (k // bs) % 2 == 0 and k % (bs * 2 ** (m - 1)) == 0]
        m = int(rng.choice(options))
        return {"method": "boft", "block_size": bs, "factors": m,
                "Q": _skew(rng, (m, k // bs, bs, bs), 0.3),
                "boft_s": _f32(1.0 + 0.3 * rng.standard_normal(nout)),
                "cayley": cayley, "neumann_terms": terms}
    placement = method.split("-")[1]
    if placement == "kv":
        return {"method": "ia3", "placement": "kv", "l": _f32(1.0 + 0.5 * rng.standard_normal(nout))}
    return {"method": "ia3", "placement": "ff",
            "l": round_to(1.0 + 0.5 * rng.standard_normal(k), dtype)}


def token_slots(mode: str, ntok: int, n_slots: int, rng: np.random.Generator) -> np.ndarray:
    choices = np.arange(-1, n_slots)
    probs = np.full(n_slots + 1, 0.85 / max(n_slots, 1))
    probs[0] = 0.15 if n_slots else 1.0
    probs /= probs.sum()
    if mode == "decode":
        return rng.choice(choices, size=ntok, p=probs).astype(np.int64)
    out = []
    while len(out) < ntok:
        run = int(rng.integers(1, 9))
        out.extend([int(rng.choice(choices, p=probs))] * run)
    return np.asarray(out[:ntok], np.int64)


def build(seed: int, *, k: int, nout: int, ntok: int, dtype: str, mode: str,
          methods: list[str]) -> dict[str, Any]:
    """A case from plain parameters (also used by tests)."""
    rng = np.random.default_rng(seed)
    x = round_to(rng.standard_normal((ntok, k)), dtype)
    w0 = round_to(rng.standard_normal((nout, k)) / np.sqrt(k), dtype)
    b0 = _f32(0.5 * rng.standard_normal(nout))
    adapters = [make_adapter(m, k, nout, dtype, rng, w0) for m in methods]
    return {"dtype": dtype, "mode": mode, "x": x, "w0": w0, "b0": b0,
            "token_adapter": token_slots(mode, ntok, len(adapters), rng),
            "adapters": adapters}


# ----------------------------------------------------------------------------- sizes


def _size(draw: Callable[[Any], Any], name: str, thresholds: Sequence[reach.Threshold], *,
          lo: int, hi: Optional[int] = None, base: st.SearchStrategy[int]) -> int:
    """``reach.size`` with ``hi`` defaulting to the largest cap of ``name``'s thresholds, and
    with an even hand for the boundary values.

    Hypothesis does not draw small choices evenly: it favours the first option and replays
    values of earlier cases, so through ``reach.size``'s boundary list a size drawn once per case
    saw ``t`` and ``t+1`` of its threshold a handful of times in 300 cases, sometimes never.  So a
    fifth of the draws here pick a boundary value with :func:`_even` (two draws summed modulo the
    count: near uniform whatever the skew of each), and a size whose whole legal range is a
    handful of values around its threshold (BOFT factors 1..5, Neumann terms 1..9) is drawn
    evenly over that range: every value there is a boundary or next to one."""
    hi, boundaries = _size_plan(tuple(thresholds), name, lo, hi)
    if boundaries and hi - lo < SMALL_RANGE:
        return lo + _even(draw, hi - lo + 1)
    if boundaries and draw(_ints(0, 4)) == 0:
        values = boundaries[_even(draw, len(boundaries))]
        return values[_even(draw, len(values))]
    return reach.size(draw, name, thresholds, lo=lo, hi=hi, base=base)


@functools.lru_cache(maxsize=4096)
def _size_plan(thresholds: tuple[reach.Threshold, ...], name: str, lo: int, hi: int | None
               ) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """``(hi, boundary values of each of name's thresholds that has some in [lo, hi])`` for
    :func:`_size` (pure: computed once per argument tuple)."""
    if hi is None:
        caps = [t.cap for t in reach.of_size(thresholds, name) if t.cap is not None]
        hi = max(caps + [DEFAULT_HI.get(name, 64)])
    return hi, tuple(b for b in (t.boundaries(lo, hi) for t in reach.of_size(thresholds, name))
                     if b)


def _even(draw: Callable[[Any], Any], n: int) -> int:
    """An index in ``0..n-1``, close to uniform: the sum of two draws modulo ``n``."""
    if n <= 1:
        return 0
    ints = _ints(0, n - 1)
    return (draw(ints) + draw(ints)) % n


def _token_counts(draw: Callable[[Any], Any], mode: str, n_slots: int,
                  thresholds: Sequence[reach.Threshold]) -> dict[int, int]:
    """Tokens per slot (-1 first): each at a tile edge of this mode or plain."""
    name = f"{mode}_slot_tokens"
    caps = [t.cap for t in reach.of_size(thresholds, name) if t.cap is not None]
    # one slot may take a whole tile edge's worth, the others share a few more
    left = max(caps + [DEFAULT_HI["tokens"]]) + 8
    counts: dict[int, int] = {}
    for slot in [-1, *range(n_slots)]:
        names = [n for n in ([name] + (["base_tokens"] if slot < 0 else []))
                 if reach.of_size(thresholds, n)] or [name]
        chosen = names[draw(_ints(0, len(names) - 1))] if len(names) > 1 else names[0]
        plain = 3 if slot < 0 else (5 if mode == "decode" else 12)
        count = _size(draw, chosen, thresholds, lo=0, hi=max(left, 0),
                      base=_ints(0, min(plain, max(left, 0))))
        counts[slot] = count
        left -= count
    if sum(counts.values()) == 0:
        counts[0 if n_slots else -1] = 1
    return counts


def _arrange(counts: dict[int, int], mode: str, rng: np.random.Generator) -> np.ndarray:
    """decode: every token its own request, shuffled; prefill: runs of one slot (1..8 tokens,
    several runs per slot) in shuffled order."""
    if mode == "decode":
        tokens = np.concatenate([np.full(c, s, np.int64) for s, c in counts.items()])
        return rng.permutation(tokens).astype(np.int64)
    runs: list[list[int]] = []
    for slot, count in counts.items():
        while count > 0:
            length = min(count, int(rng.integers(1, 9)))
            runs.append([slot] * length)
            count -= length
    order = rng.permutation(len(runs))
    return np.asarray([s for i in order for s in runs[i]], np.int64)


def _divisor(draw: Callable[[Any], Any], k: int, options: list[int], span_of: Any,
             thresholds: Sequence[reach.Threshold]) -> int:
    """One of ``options`` (block sizes dividing K), aimed at a ``span`` edge: the option whose
    span is nearest the drawn target (the wider one on a tie)."""
    spans = sorted({span_of(b): b for b in options}.items())
    # the widest span twice: one block over all of K (BOFT packed dense) is its own path
    target = _size(draw, "span", thresholds, lo=1, hi=k,
                   base=_choices(tuple([sp for sp, _ in spans] + [spans[-1][0]])))
    return min(spans, key=lambda item: (abs(item[0] - target), -item[0]))[1]


def _structured_k(draw: Callable[[Any], Any], thresholds: Sequence[reach.Threshold]
                  ) -> tuple[int, int]:
    """``(K, span)``: K built from a transform block, ``span * 2^j`` -- a model whose width is a
    multiple of its OFT/BOFT block, as PEFT configures them.  The span is aimed at the span
    edges directly (not through K's divisors), and powers of two leave BOFT room for factors."""
    caps = [t.cap for t in reach.of_size(thresholds, "k") if t.cap is not None]
    hi = max(caps + [DEFAULT_HI["k"]])
    edges = sorted({v for t in reach.of_size(thresholds, "span") for v in t.boundaries(1, hi)})
    if edges and draw(_BOOL):  # this path exists to put a block at a span edge
        span = edges[_even(draw, len(edges))]
    else:
        span = _size(draw, "span", thresholds, lo=1, hi=hi,
                     base=_SPAN_BASE)
    times = draw(_TIMES)
    while span * times > hi and times > 1:
        times //= 2
    return span * times, span


# ----------------------------------------------------------------------------- values


#: Every value kind of :mod:`fuzzkit.values` but ``drawn`` (elements drawn one by one): a case
#: holds thousands of values, and element-wise choices would be most of Hypothesis' choice
#: sequence -- its mutations then vary values and hardly ever the structure (sizes, methods,
#: tokens).  ``mixed`` still mixes every kind element by element, from one seed.
KINDS = tuple(kind for kind, _ in values.KINDS if kind != "drawn")


@functools.cache
def _domain(fmt: str) -> values.Domain:
    """The contract: finite values of the format, subnormals included (:data:`KINDS`)."""
    return values.Domain(fmt, kinds=KINDS)


def _array(draw: Callable[[Any], Any], shape: tuple[int, ...], fmt: str, *,
           plain: Optional[Callable[[np.random.Generator], np.ndarray]] = None,
           plain_weight: int = 0) -> np.ndarray:
    """Values of ``fmt`` from the domain; with ``plain``, that typical distribution in
    ``plain_weight`` percent of the draws (a trained adapter's magnitudes, scales near 1)."""
    if plain is not None and draw(_PERCENT) < plain_weight:
        rng = np.random.default_rng(draw(_SEED))
        return round_to(plain(rng), fmt)
    return values.array(draw, shape, _domain(fmt))


def _drawn_skew(draw: Callable[[Any], Any], shape: tuple[int, ...]) -> np.ndarray:
    """A skew-symmetric Q (exactly: ``U - Uᵀ`` of a drawn strict upper triangle)."""
    u = np.triu(_array(draw, shape, "float32"), 1).astype(np.float32)
    return u - np.swapaxes(u, -1, -2)


def _adapter(draw: Callable[[Any], Any], method: str, k: int, nout: int, dtype: str,
             w0: np.ndarray, thresholds: Sequence[reach.Threshold], rank: int,
             block: Optional[int] = None) -> dict[str, Any]:
    """One adapter of ``method``; a low-rank one has rank ``rank`` (the case's padded R) or,
    when ``rank`` is negative, any rank up to ``-rank``; an OFT/BOFT one packs to the span
    ``block`` when K was built from it (:func:`_structured_k`), else aims at a span edge."""
    if method == "identity":
        return {"method": "identity"}
    if method in ("lora", "dora", "vera"):
        r = rank if rank > 0 else draw(_ints(1, -rank))
    if method in ("lora", "dora"):
        alpha = draw(_alpha(r))
        ad: dict[str, Any] = {"method": method, "A": _array(draw, (r, k), dtype),
                              "B": _array(draw, (nout, r), dtype), "alpha": float(alpha),
                              "rslora": draw(_BOOL)}
        if method == "dora":
            norms = np.sqrt((np.asarray(w0, np.float64) ** 2).sum(axis=1))
            top = float(np.finfo(np.float32).max)
            ad["magnitude"] = _array(draw, (nout,), "float32", plain_weight=70,
                                     plain=lambda rng: np.minimum(
                                         norms * rng.uniform(0.5, 1.5, nout), top))
        return ad
    if method == "vera":
        kmax = k + draw(_ints(0, 8))
        nmax = nout + draw(_ints(0, 8))
        return {"method": "vera", "A_shared": _array(draw, (r, kmax), dtype),
                "B_shared": _array(draw, (nmax, r), dtype),
                "lambda_d": _array(draw, (r,), "float32"),
                "lambda_b": _array(draw, (nout,), "float32")}
    if method in ("oft", "boft"):
        # the Neumann series twice as often: it has the more paths (1, 2, 3-4 terms, the loop)
        cayley = draw(_CAYLEY)
        terms = _size(draw, "neumann_terms", thresholds, lo=1, base=_ints(1, 6))
        divisors = [d for d in range(1, k + 1) if k % d == 0]
        if method == "oft":
            bs = block or _divisor(draw, k, divisors, lambda b: b, thresholds)
            return {"method": "oft", "block_size": bs, "Q": _drawn_skew(draw, (k // bs, bs, bs)),
                    "cayley": cayley, "neumann_terms": terms}
        m = _size(draw, "boft_factors", thresholds, lo=1, base=_ints(1, 4))

        def valid(f: int) -> list[int]:
            return [d for d in divisors if f == 1 or (d % 2 == 0 and (k // d) % 2 == 0
                                                      and k % (d * 2 ** (f - 1)) == 0)]
        if block is not None:  # K = block * 2^j: the butterfly packs to the block if it can
            while m > 1 and (block % 2 ** m or block // 2 ** (m - 1) not in valid(m)):
                m -= 1
            bs = block // 2 ** (m - 1)
        else:  # as many factors as K allows, evenly over those (odd K: one)
            possible = [f for f in range(1, 6) if valid(f)]
            if m not in possible:
                m = possible[_even(draw, len(possible))]
            bs = _divisor(draw, k, valid(m), lambda b: min(b * 2 ** (m - 1), k), thresholds)
        return {"method": "boft", "block_size": bs, "factors": m,
                "Q": _drawn_skew(draw, (m, k // bs, bs, bs)),
                "boft_s": _array(draw, (nout,), "float32", plain_weight=60,
                                 plain=lambda rng: 1.0 + 0.3 * rng.standard_normal(nout)),
                "cayley": cayley, "neumann_terms": terms}
    placement = method.split("-")[1]
    width, fmt = (nout, "float32") if placement == "kv" else (k, dtype)
    return {"method": "ia3", "placement": placement,
            "l": _array(draw, (width,), fmt, plain_weight=60,
                        plain=lambda rng: 1.0 + 0.5 * rng.standard_normal(width))}


def _rows(draw: Callable[[Any], Any], count: int, width: int, domain: values.Domain
          ) -> np.ndarray:
    """:func:`fuzzkit.values.rows` -- one kind per row, each row's values from its own seed,
    the same two draws a row in the same order -- with the clipping and rounding that
    :func:`fuzzkit.values.array` applies to each row done once for the whole matrix (they are
    elementwise: the values are the same)."""
    raw = np.empty((count, width))
    for i in range(count):
        kind = values.kind(draw, domain)
        if kind == "drawn":  # pragma: no cover - not among this target's KINDS
            raw[i] = values.array(draw, (width,), domain, kind)
        else:
            raw[i] = values.fill(kind, (width,), domain, draw(_SEED))
    return _in_domain(raw, domain)


def _in_domain(raw: np.ndarray, domain: values.Domain) -> np.ndarray:
    """What :func:`fuzzkit.values.array` does to filled values: clipped to the domain's range,
    rounded to its dtype, the largest value kept inside after rounding, subnormals flushed where
    the domain has none."""
    top = domain.largest
    with np.errstate(invalid="ignore"):
        raw = np.where(np.isfinite(raw), np.clip(raw, -top, top), raw)
    out = values.round_to(raw, domain.dtype)
    edge = values.largest_at_most(top, domain.dtype)
    with np.errstate(invalid="ignore"):
        out = np.where(np.isfinite(out) & (np.abs(out) > top), np.copysign(edge, out), out
                       ).astype(domain.storage)
    if not domain.subnormal:  # pragma: no cover - this target's domains have subnormals
        tiny = values.SMALLEST_NORMAL[domain.dtype]
        out = np.where(np.abs(out) < tiny, np.copysign(0.0, out), out).astype(domain.storage)
    return out


def _activations(draw: Callable[[Any], Any], ntok: int, k: int, dtype: str) -> np.ndarray:
    """One value kind per token row (a zero row, a tiny row, a huge row next to normal ones);
    one kind for the whole batch when it has many rows (:data:`ROWS_MAX`)."""
    if ntok <= ROWS_MAX:
        return _rows(draw, ntok, k, _domain(dtype))
    return values.array(draw, (ntok, k), _domain(dtype))


def _weights(draw: Callable[[Any], Any], nout: int, k: int, dtype: str) -> np.ndarray:
    """W0: mostly the usual ``N(0, 1/K)``, else one kind for the whole matrix or one per row."""
    how = values.choose(draw, [("plain", 4), ("array", 3), ("rows", 3)])
    if how == "plain":
        rng = np.random.default_rng(draw(_SEED))
        return round_to(rng.standard_normal((nout, k)) / np.sqrt(k), dtype)
    if how == "rows" and nout <= ROWS_MAX:
        return _rows(draw, nout, k, _domain(dtype))
    return values.array(draw, (nout, k), _domain(dtype))


@st.composite
def _inputs(draw: Callable[[Any], Any], thresholds: tuple[reach.Threshold, ...]
            ) -> dict[str, Any]:
    dtype = draw(_DTYPE)
    mode = draw(_MODE)
    n_slots = _size(draw, "slots", thresholds, lo=0, base=_ints(1, 4))
    methods = [values.choose(draw, METHOD_WEIGHTS) for _ in range(n_slots)]
    # multiples of 4 and 8 often: BOFT needs K divisible by block * 2^(factors-1)
    k = _size(draw, "k", thresholds, lo=1,
              base=_K_BASE)
    block = None
    if {"oft", "boft"} & set(methods) and draw(_BOOL):
        k, block = _structured_k(draw, thresholds)
    # square layers (q/k/v/o projections) often: some bugs only fit their shapes
    square = draw(_ints(0, 5)) == 0
    nout = k if square else _size(draw, "nout", thresholds, lo=1, base=_ints(4, 24))
    counts = _token_counts(draw, mode, n_slots, thresholds)
    rng = np.random.default_rng(draw(_SEED))
    token_adapter = _arrange(counts, mode, rng)
    x = _activations(draw, len(token_adapter), k, dtype)
    w0 = _weights(draw, nout, k, dtype)
    b0 = _array(draw, (nout,), "float32", plain_weight=50,
                plain=lambda g: 0.5 * g.standard_normal(nout))
    # the padded rank R (what BLOCK_R depends on): the first low-rank adapter has it, the
    # others any rank up to it (a batch mixes ranks; the kernel pads them to R)
    big_r = _size(draw, "rank", thresholds, lo=1, base=_ints(1, 8))
    adapters: list[dict[str, Any]] = []
    for m in methods:
        first = m in ("lora", "dora", "vera") and not any(
            a["method"] in ("lora", "dora", "vera") for a in adapters)
        structured = block if m in ("oft", "boft") and not any(
            a["method"] in ("oft", "boft") for a in adapters) else None
        adapters.append(_adapter(draw, m, k, nout, dtype, w0, thresholds,
                                 big_r if first else -big_r, structured))
    case = fit({"dtype": dtype, "mode": mode, "x": x, "w0": w0, "b0": b0,
                "token_adapter": token_adapter, "adapters": adapters})
    # fit() makes every case legal (tests/test_scute_reach.py checks it on hundreds of draws);
    # should one slip through, Hypothesis discards it rather than fuzzing outside the contract
    if checks.validate(case, conversion=pristine.slots()) is not None:
        reject()
    return case


def inputs(thresholds: tuple = ()) -> Any:
    """The case strategy, aimed at ``thresholds`` (``Target.thresholds_for`` the fuzzed
    implementation; none: the plain distribution)."""
    return _inputs(tuple(thresholds))
