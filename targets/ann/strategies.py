"""Hypothesis strategy for OctEx cases: every parameter, every edge of the code, every value kind.

A case is a dataset, a query batch and a configuration.  Three things decide whether a bug can be
found at all, and the strategy aims at each.

**Sizes at the code's edges.**  The implementations declare where their code changes path
(:mod:`fuzzkit.targets.ann.thresholds`: the graph build's row block, the Triton kernels' tiles as
launched in this mode, and the *relative* edges where a parameter meets the data -- a graph row
of degree ``R`` over ``n - 1`` ids, a cell of capacity ``C`` over its population, a frontier of
``E`` over a query's candidates, ``k`` over ``n``, the rerank pool ``max(k, E)``, ``P - 1``
probes over ``2m`` faces).  Every size a threshold applies to is drawn with
:func:`fuzzkit.reach.size`, and the relative ones from the data itself: the strategy computes
the cell populations and each query's candidate count with the model's arithmetic
(:func:`thresholds.cell_populations`, :func:`thresholds.candidate_counts`) and puts ``C`` and
``E`` at, one below and one above them.  Two constructions reach kernel sizes that otherwise
only arise by chance: a *width* case picks ``E * R`` first and factors it, an *M* case makes
every query's candidate list exactly ``M`` long (one table, one cell, ``C = M``).

**Values across the contract** (``checks.validate``: finite float32, ``|x| <= 1e4``; turbo
storage also needs non-zero ``|x| >= 1e-12``).  Datasets come in ANN *shapes* -- Gaussian,
clustered (where capped cells overflow), shifted far below zero (floor vs truncation), small
integers and half-integers (exact distance and centre ties, points on cell faces) -- or in the
shared value kinds of :mod:`fuzzkit.values` (exact and signed zeros, sparse, tiny norms down to
the smallest normal, subnormals, values near ``1e4`` and near ``sqrt(1e4)``, repeated values,
Hypothesis-drawn elements), for the whole array or one kind per row.  Then a share of rows
become **duplicates** of earlier ones (zero distances, ties broken by id), queries **copy**
stored vectors exactly or nearly, a few are zero (every inner product 0: all ties), and in some
cases ``w`` is nudged until one vector or query projects *exactly* onto a grid line or a
cell's middle (``floor`` at an integer, equal face costs).

**Configurations**: both metrics, all storages, rerank on/off, ``w = null`` in about one case in
six, ``T = 0``, inserts after the build (a few, or hundreds: the insert's own graph block).

Everything random comes from Hypothesis draws (NumPy generators are seeded by a drawn integer),
so a case replays and shrinks.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Optional, Sequence

import numpy as np
from hypothesis import strategies as st

from fuzzkit import reach, values
from fuzzkit.reach import Threshold
from fuzzkit.targets.ann import checks, model, tiles
from fuzzkit.targets.ann import thresholds as edges
from fuzzkit.targets.ann.model import Params
from fuzzkit.targets.quant import checks as quant_checks

Draw = Callable[[Any], Any]

#: Sizes: the usual, cheap ones (``BASE_*``) and the largest any threshold may ask for.
BASE_VECTORS, BASE_DIM, BASE_QUERIES = 200, 32, 16
MAX_VECTORS, MAX_DIM, MAX_QUERIES = 640, 160, 40
MAX_E, MAX_R, MAX_K, MAX_C = 16, 140, 64, 640  # k may reach n + 3 at the k_fill edge
#: The contract of every float input (``checks.validate``): subnormals included.
DOMAIN = values.Domain("float32", max_abs=checks.MAX_ABS)
#: turbo storage: the quant codec's domain, non-zero magnitudes at least this.
TURBO_MIN_ABS = quant_checks.MIN_ABS
SHAPES = ("gaussian", "clustered", "negative", "integers", "grid")
DATA_KINDS = (("clustered", 5), ("gaussian", 3), ("negative", 2), ("integers", 2), ("grid", 2),
              ("values", 4), ("rows", 3))
#: Decades of the ANN shapes' scale: ordinary, tiny (norms of 1e-11..1e-6: epsilons and
#: clamps swallow them; turbo's codec still takes them), subnormal (every float32 square
#: underflows, every distance ties at 0; turbo storage turns them into zeros) and huge (|x|
#: near the 1e4 bound).
SCALES = (((-2, 2), 6), ((-11, -7), 2), ((-40, -39), 1), ((3, 3), 1))

# Strategies are built once: a fresh strategy object per draw costs Hypothesis a validation
# and a cache entry each time, more than the draw itself.  The constant ones live here, the
# parametrized ones (a range that depends on an earlier draw) are cached per parameters.

#: The usual dimension and stored-vector counts, the count added to a "many" insert, and the
#: few vectors of a "some" insert (1..6 or 3..18 in steps of 3).
DIM_BASE = st.one_of(st.integers(1, 8), st.integers(1, BASE_DIM))
N_BASE = st.one_of(st.integers(1, 12), st.integers(1, 64), st.integers(1, BASE_VECTORS))
N_OLD_BASE = st.one_of(st.integers(1, 12), st.integers(1, 64))
FEW = st.tuples(st.sampled_from([1, 3]), st.integers(1, 6)).map(lambda ab: ab[0] * ab[1])
SEED32 = st.integers(0, 2**32 - 1)
SEED63 = st.integers(0, 2**63 - 1)
C_SMALL = st.sampled_from([1, 2, 3, 5, 8, 16])


@functools.lru_cache(maxsize=4096)
def _sampled(options: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(options)


@functools.lru_cache(maxsize=4096)
def _small_or_upto(small: int, top: int) -> st.SearchStrategy[int]:
    """``1..small`` or ``1..top`` (equally often)."""
    return st.one_of(st.integers(1, small), st.integers(1, top))


@functools.lru_cache(maxsize=4096)
def _c_base(top: int) -> st.SearchStrategy[int]:
    return st.one_of(C_SMALL, st.integers(1, top))


@functools.lru_cache(maxsize=4096)
def _at_most(base: st.SearchStrategy[int], top: int) -> st.SearchStrategy[int]:
    return base.map(lambda v: min(v, top))


@functools.lru_cache(maxsize=4096)
def _as_fill(base: st.SearchStrategy[int], have: int, lo: int, hi: int
             ) -> st.SearchStrategy[int]:
    """``base`` (a parameter value) as its fill size ``have + 1 - v``, clamped to [lo, hi]."""
    return base.map(lambda v: min(hi, max(lo, have + 1 - v)))


# ------------------------------------------------------------------------------------- data


def dataset(kind: str, rows: int, dim: int, scale: float, rng: np.random.Generator,
            centres: np.ndarray) -> np.ndarray:
    """``rows`` vectors of an ANN shape (float64, before rounding to float32)."""
    if kind == "clustered":
        which = rng.integers(0, centres.shape[0], rows)
        return centres[which] + 0.15 * scale * rng.standard_normal((rows, dim))
    if kind == "negative":
        return -6.0 * scale + scale * rng.standard_normal((rows, dim))
    if kind == "integers":
        return rng.integers(-3, 4, (rows, dim)).astype(np.float64)
    if kind == "grid":
        return 0.5 * rng.integers(-4, 5, (rows, dim)).astype(np.float64)
    return scale * rng.standard_normal((rows, dim))


def _value_rows(draw: Draw, rows: int, dim: int, rng: np.random.Generator,
                base: np.ndarray) -> np.ndarray:
    """One :mod:`fuzzkit.values` kind per row for small batches; for big ones, a few rows of
    drawn kinds (a zero, a tiny, a huge vector...) among ``base``."""
    if rows <= 32:
        return values.rows(draw, rows, dim, DOMAIN).astype(np.float64)
    out = base.copy()
    for _ in range(draw(st.integers(1, 8))):
        out[int(rng.integers(0, rows))] = values.array(draw, (dim,), DOMAIN)
    return out


def _with_duplicates(x: np.ndarray, share: float, rng: np.random.Generator) -> np.ndarray:
    """Each row after the first becomes, with probability ``share``, a copy of a uniformly
    chosen earlier row (as that row ends up: copies of copies are copies of the original)."""
    n = x.shape[0]
    if share <= 0.0 or n < 2:
        return x.copy()
    rows = np.arange(n)
    copied = rng.random(n) < share
    copied[0] = False
    earlier = (rng.random(n) * rows).astype(np.int64)  # uniform in 0..i-1
    source = np.where(copied, earlier, rows)
    while True:  # follow copies of copies back to a row that is nobody's copy
        deeper = source[source]
        if np.array_equal(deeper, source):
            return x[source]
        source = deeper


def _finish(x: np.ndarray, storage: str) -> np.ndarray:
    """float32 inside the contract: ``|x| <= MAX_ABS``; with turbo storage non-zero magnitudes
    below the codec's ``MIN_ABS`` become (signed) zeros."""
    out = np.clip(np.asarray(x, dtype=np.float64), -checks.MAX_ABS, checks.MAX_ABS)
    out = out.astype(np.float32)
    if storage != "float32":
        out = np.where(np.abs(out) < TURBO_MIN_ABS, np.copysign(np.float32(0), out), out)
    return out.astype(np.float32)


def _data(draw: Draw, n: int, dim: int, q: int, storage: str) -> tuple[np.ndarray, np.ndarray]:
    """Stored vectors (n, dim) and queries (q, dim), float32 inside the contract."""
    kind = values.choose(draw, DATA_KINDS)
    low, high = values.choose(draw, SCALES)
    scale = 10.0 ** draw(st.integers(low, high))
    rng = np.random.default_rng(draw(SEED32))
    centres = 3.0 * scale * rng.standard_normal((int(rng.integers(1, 6)), dim))
    shape = kind if kind in SHAPES else "gaussian"
    x = dataset(shape, n, dim, scale, rng, centres)
    if kind == "values":
        x = values.array(draw, (n, dim), DOMAIN).astype(np.float64)
    elif kind == "rows":
        x = _value_rows(draw, n, dim, rng, x)
    x = _finish(_with_duplicates(x, values.choose(draw, [(0.0, 2), (0.1, 1), (0.5, 1)]), rng),
                storage)
    if kind == "values" and draw(st.booleans()):
        queries = values.array(draw, (q, dim), DOMAIN).astype(np.float64)
    else:
        queries = dataset(shape, q, dim, scale, rng, centres)
    copy = values.choose(draw, [(0.0, 1), (0.2, 1), (0.4, 1), (0.8, 1)])
    zero = values.choose(draw, [(0.0, 3), (0.2, 1)])
    for i in range(q):
        r = rng.random()
        source = x[rng.integers(0, n)].astype(np.float64)
        if r < copy:
            queries[i] = source
        elif r < 1.5 * copy:
            spread = float(np.abs(source).max(initial=0.0)) or scale
            queries[i] = source + 0.01 * spread * rng.standard_normal(dim)
        elif r < 1.5 * copy + zero:
            queries[i] = 0.0
    return x, _finish(queries, storage)


def _data_scale(x: np.ndarray) -> float:
    """A typical coordinate magnitude (the median non-zero one), for the cell width."""
    nonzero = np.abs(x[x != 0]).astype(np.float64)
    return float(np.median(nonzero)) if nonzero.size else 1.0


# ------------------------------------------------------------------------------------ cells


def _min_width(x: np.ndarray, queries: np.ndarray) -> float:
    """The smallest ``w`` ``checks.validate`` accepts (cell coordinates below 2**40)."""
    reach_ = float(np.abs(np.concatenate([x, queries])).max(initial=0.0)) * x.shape[1] * 8.0
    return reach_ / checks.MAX_CELL_COORD * (1.0 + 1e-6)


def snap_width(y: float, u: float, w: float, fraction: float) -> Optional[float]:
    """A cell width near ``w`` at which the projection ``y`` lands exactly ``fraction`` (0: on a
    grid line, 0.5: mid-cell, equal face costs) into its cell: ``y / w + u == c + fraction`` in
    the model's float64 arithmetic.  None if no nearby float does it."""
    if y == 0.0:
        return None
    z = y / w + u
    for c in (math.floor(z), math.floor(z) + 1, math.floor(z) - 1):
        target = c + fraction
        if (target - u) * y <= 0:
            continue
        guess = y / (target - u)
        for step in range(-4, 5):
            cand = guess
            for _ in range(abs(step)):
                cand = math.nextafter(cand, math.inf if step > 0 else -math.inf)
            if cand > 0 and math.isfinite(cand) and y / cand + u == target:
                return cand
    return None


def _width(draw: Draw, x: np.ndarray, queries: np.ndarray, m: int, L: int, seed: int
           ) -> Optional[float]:
    """``w``: null in about one case in six, else scaled to the data's projected spread (and
    sometimes nudged so that one vector or query sits exactly on a grid line or mid-cell)."""
    if draw(st.integers(0, 5)) == 0:
        return None
    spread = _data_scale(x) * math.sqrt(x.shape[1] / m)
    w = float(np.float32(spread * values.choose(draw, [(0.1, 1), (0.3, 1), (1.0, 1), (3.0, 1)])))
    w = max(w, _min_width(x, queries))
    if draw(st.booleans()):
        rows = queries if draw(st.booleans()) else x
        table = draw(st.integers(0, L - 1))
        a, u = model.table(seed, table, m, x.shape[1])
        j = draw(st.integers(0, m - 1))
        ys = model.project(rows, a)[:, j]
        # a random row, or the most negative / positive projection (far from the origin,
        # where sign-dependent rounding -- floor vs truncation -- parts ways)
        pick = values.choose(draw, [("any", 2), ("min", 1), ("max", 1)])
        i = (draw(st.integers(0, rows.shape[0] - 1)) if pick == "any"
             else int(np.argmin(ys) if pick == "min" else np.argmax(ys)))
        snapped = snap_width(float(ys[i]), float(u[j]), w, draw(_sampled((0.0, 0.5))))
        if snapped is not None and snapped >= _min_width(x, queries):
            w = snapped
    return w


# ----------------------------------------------------------------------------- relative sizes


def _fill(draw: Draw, name: str, ths: Sequence[Threshold], have: int, lo_value: int,
          hi_value: int, base: st.SearchStrategy[int]) -> int:
    """A parameter ``v`` in ``[lo_value, hi_value]`` drawn through its fill size
    ``have - v + 1`` (see :mod:`fuzzkit.targets.ann.thresholds`); ``base`` draws ``v`` the usual way."""
    lo, hi = have + 1 - hi_value, have + 1 - lo_value
    fill = _size(draw, name, ths, lo=lo, hi=hi,
                 base=_as_fill(base, have, lo, hi))
    return have + 1 - fill


def _distinct(ths: Sequence[Threshold]) -> tuple[Threshold, ...]:
    """One threshold per (size, value) -- the largest cap -- so that two edges at one size (the
    distance and the expansion kernel's 4 rows) do not double its share of the draws."""
    best: dict[tuple[str, int], Threshold] = {}
    for t in ths:
        key = (t.size, t.value)
        if key not in best or (best[key].cap or 0) < (t.cap or 0):
            best[key] = t
    return tuple(best.values())


def _edge_values(ths: Sequence[Threshold], size: str, lo: int = 1,
                 hi: Optional[int] = None) -> list[int]:
    """``t + 1, t, t - 1`` of ``size``'s thresholds inside ``[lo, hi]``, in that order:
    Hypothesis favours the first of a choice, and ``reach.size`` lists ``t - 1`` first, so this
    order puts the weight on the other side of the edge."""
    out: list[int] = []
    for t in reach.of_size(ths, size):
        out.extend(v for v in reversed(t.required(lo)) if hi is None or v <= hi)
    return list(dict.fromkeys(out))


def _edges_of(ths: Sequence[Threshold], size: str) -> st.SearchStrategy[int]:
    """The edges of ``size`` (:func:`_edge_values`): the base of a construction whose only
    purpose is to land on them (``reach.size`` adds ``2t +- 1`` and beyond; ordinary values of
    the size arise in the other cases)."""
    return _sampled(tuple(_edge_values(ths, size)))


def _size(draw: Draw, name: str, ths: Sequence[Threshold], *, lo: int, hi: int,
          base: st.SearchStrategy[int]) -> int:
    """``reach.size``, plus one draw in eight straight onto a threshold's ``t + 1, t, t - 1``,
    so that every edge is still reached when Hypothesis' generation repeats itself (it mutates
    earlier cases, which concentrates a run's sizes on a few values)."""
    edge = _edge_values(ths, name, lo, hi)
    if edge and draw(st.integers(0, 7)) == 0:
        return int(draw(_sampled(tuple(edge))))
    return reach.size(draw, name, ths, lo=lo, hi=hi, base=base)


def _factor(draw: Draw, width: int) -> tuple[int, int]:
    """``(E, R)`` with ``E * R == width``, ``E <= MAX_E``: preferably several frontier nodes of
    several neighbours each (with ``E = 1`` or ``R = 1`` a round has no duplicates to drop)."""
    divisors = [e for e in range(1, min(MAX_E, width) + 1) if width % e == 0]
    both = [e for e in divisors if e > 1 and width // e > 1]
    if both and draw(st.integers(0, 3)) > 0:
        divisors = both
    e = divisors[draw(st.integers(0, len(divisors) - 1))]
    return e, width // e


# ----------------------------------------------------------------------------------- inputs


@st.composite
def _inputs(draw: Draw, declared: tuple[Threshold, ...]) -> dict[str, Any]:
    ths = _distinct(declared)
    storage = values.choose(draw, [("float32", 1), ("turbo8", 1), ("turbo16", 1)])
    # drawn up front: a late draw of a long case comes out "simple" (False) far more often
    # than one in two, and the rerank pool's edge needs turbo storage *and* a rerank
    rerank = draw(st.booleans())
    T = draw(st.integers(0, 4))
    dim = reach.size(draw, "D", ths, lo=1, hi=MAX_DIM,
                     base=DIM_BASE)

    # Kernel-width constructions (only where the kernels' thresholds are declared).
    width_case = bool(reach.of_size(ths, "width")) and T >= 1 and draw(st.booleans())
    m_case = bool(reach.of_size(ths, "M")) and not width_case and draw(st.integers(0, 2)) == 0
    E = R = None
    if width_case:
        width = reach.size(draw, "width", ths, lo=1, hi=reach.largest(ths, "width", 64),
                           base=_edges_of(ths, "width"))
        E, R = _factor(draw, width)
    m_target = None
    if m_case:
        m_target = reach.size(draw, "M", ths, lo=1, hi=reach.largest(ths, "M", 64),
                              base=_edges_of(ths, "M"))

    # How many vectors: at build, inserted after it.
    insert_mode = values.choose(draw, [("none", 8), ("some", 6), ("many", 4)])
    if insert_mode == "many":  # the insert's own graph block: many new rows, few old ones
        n_ins = _size(draw, "inserted", ths, lo=1, hi=MAX_VECTORS - 1,
                      base=_edges_of(ths, "inserted") if reach.of_size(ths, "inserted") else FEW)
        n = min(MAX_VECTORS, n_ins + draw(N_OLD_BASE))
    else:
        n = _size(draw, "n", ths, lo=1, hi=MAX_VECTORS, base=N_BASE)
        n_ins = 0
        if insert_mode == "some" and n > 1:
            n_ins = _size(draw, "inserted", ths, lo=1, hi=n - 1,
                          base=_at_most(FEW, n - 1))
    if m_target is not None:
        n = max(n, m_target + draw(st.integers(0, 3)))
        n_ins = min(n_ins, n - 1)

    q_ths = ths
    if R is not None and reach.of_size(ths, "q"):
        rows = tiles.current().rows(E * R)
        q_ths = ths + (Threshold("q", rows, "expansion rows per program at this width",
                                 cap=MAX_QUERIES),)
    q = reach.size(draw, "q", q_ths, lo=1, hi=MAX_QUERIES, base=st.integers(1, BASE_QUERIES))

    x, queries = _data(draw, n, dim, q, storage)
    n_old = n - n_ins

    metric = values.choose(draw, [("l2", 2), ("ip", 1)])
    m = draw(st.integers(1, 4))
    L = draw(st.integers(1, 4))
    seed = draw(SEED63)
    w = _width(draw, x, queries, m, L, seed)
    if m_target is not None:
        L, w = 1, None
    P = _fill(draw, "probe_fill", ths, 2 * m + 1, 1, 2 * m + 1, st.integers(1, 2 * m + 1))
    if w is None:
        P = draw(st.integers(1, 2 * m + 1))

    # R: against n - 1 other ids (at build, or after the insert).
    if R is None:
        have = n if n_ins == 0 or draw(st.booleans()) else n_old
        top = (MAX_R if not reach.of_size(ths, "width")
               else min(MAX_R, reach.largest(ths, "width", 64)))
        R = _fill(draw, "graph_fill", ths, have - 1, 1, top,
                  _small_or_upto(8, min(16, n + 2)))

    params = Params(L=L, m=m, w=w, C=1, R=R, E=1, T=T, P=P, k=1, seed=seed, metric=metric,
                    storage=storage)
    # C: against one cell's population (at build, or after the insert).
    if m_target is not None:
        C = m_target
    else:
        part = x if n_ins == 0 or draw(st.booleans()) else x[:n_old]
        populations = sorted(set(edges.cell_populations(part, params)))
        population = populations[draw(st.integers(0, len(populations) - 1))]
        C = _fill(draw, "cell_fill", ths, population, 1, MAX_C,
                  _c_base(n + 2))
    params = dataclasses.replace(params, C=C)

    # E: against one query's candidate count.
    if E is None:
        counts = edges.candidate_counts(x, queries, params)
        have = counts[draw(st.integers(0, len(counts) - 1))]
        E = _fill(draw, "beam_fill", ths, have, 1, MAX_E, st.integers(1, 8))
        if reach.of_size(ths, "width"):  # keep E * R within the kernels' widest drawn row
            E = max(1, min(E, reach.largest(ths, "width", 64) // R))

    k_base = _small_or_upto(10, min(n + 3, MAX_K))
    if storage != "float32" and rerank:
        # the pool is max(k, E): fill = k - E + 1 grows with k
        lo, hi = 2 - E, MAX_K - E + 1
        k = E - 1 + _size(draw, "rerank_pool", ths, lo=lo, hi=hi,
                          base=_sampled(tuple(v for v in (0, 1, 2, 3) if lo <= v <= hi)))
    else:
        k = _fill(draw, "k_fill", ths, n, 1, n + 3, k_base)
    if m_target is None and draw(st.integers(0, 4)) == 0:
        # a well-provisioned index: every vector listed in a cell, graph rows as long as the
        # result -- where the absolute recall claim (checks.recall_claim) is made
        C = max(C, max(edges.cell_populations(x, params)))
        k = min(k, R)
    return {
        "vectors": x[:n_old],
        "inserted": x[n_old:],
        "queries": queries,
        "L": L, "m": m, "w": w, "C": C, "R": R, "E": E, "T": T, "P": P, "k": k,
        "seed": seed, "metric": metric, "storage": storage, "rerank": rerank,
    }


def inputs(thresholds: tuple = ()) -> st.SearchStrategy[dict[str, Any]]:
    """The target's strategy; ``thresholds`` are the fuzzed implementation's (the engine passes
    ``target.thresholds_for(impl)``).  Called without them (tests, tools) it aims at every
    implementation's."""
    if not thresholds:
        from fuzzkit.targets.ann import target

        thresholds = target().thresholds_for(None)
    return _inputs(tuple(thresholds))
