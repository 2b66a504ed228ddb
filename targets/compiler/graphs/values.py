"""Input values for compiler graphs, drawn with the shared value domains of :mod:`fuzzkit.values`.

Two contracts, one per case:

* **ordinary** (:func:`ordinary_domain`): finite values within ``[-INPUT_BOUND, INPUT_BOUND]``,
  the range the generator's guards assume (any input may feed any op: positive-domain ops get
  their operand through ``abs`` + ``add_scalar(0.5)``).  Every finite kind of
  :data:`fuzzkit.values.KINDS`: normal (scaled ``10**k``, clipped -- so also ties at ``+-4``),
  small integers, repeated values, all-zero with ``+-0``, sparse, tiny (norms below 1e-7 for
  float32 / bfloat16), subnormals of the dtype, "huge" (here: near ``+-4`` and at
  ``sqrt(4)``), Hypothesis-drawn elements and elementwise mixtures.
* **special** (:func:`special_domain`): the whole dtype range with NaN and ``+-Inf`` (the
  validator accepts any floating value): huge finite values overflow in float32 or the dtype,
  and the oracle leaves exactly the elements that may overflow unjudged
  (:func:`fuzzkit.targets.compiler.graphs.bound.error_bounds`).

Shares (per case, :func:`value_plan`; ``tests/test_graphs.py`` measures them):

* :data:`TIE_SHARE` of the cases give *every* input the same small-value kind (``ints`` or
  ``repeated``), so inputs share values and comparisons between them tie;
* in a special case one input (drawn) is of kind ``special`` (NaN and +-Inf among finite
  values: :data:`fuzzkit.values.KINDS`), the others draw their kind from
  :data:`SPECIAL_KINDS`, where ``special`` and ``huge`` weigh more.  The forced input is drawn
  among the inputs that reach a comparing op (:data:`COMPARING`, :func:`compared_inputs`) when
  the graph has one, and every such input holds at least one NaN (:func:`with_nan`; without
  one the forced input does): with 173 ops many inputs of a graph never reach its
  comparisons, and a NaN placed elsewhere left the NaN-at-a-comparison share
  (``tests/test_compiler.py`` states it) to the chance of the draws.

Every array is float32 holding values exactly representable in the case dtype
(:func:`fuzzkit.values.round_to`, round to nearest even; :func:`round_to_dtype` is the same
function under its old name).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fuzzkit import values as fv

from .generate import INPUT_BOUND

__all__ = [
    "round_to_dtype",
    "ordinary_domain",
    "special_domain",
    "value_plan",
    "compared_inputs",
    "with_nan",
    "COMPARING",
    "draw_values",
    "make_array",
    "random_values",
    "value_strategy",
    "DTYPES",
    "TIE_SHARE",
    "SPECIAL_KINDS",
    "ORDINARY_KINDS",
]

DTYPES = ("float32", "float16", "bfloat16")

#: ``fuzzkit.values.round_to``: one rounding routine for the whole project.
round_to_dtype = fv.round_to

#: Share of cases whose inputs all draw one small-value kind (ties between inputs).
TIE_SHARE = 0.25
_TIE_KINDS = ("ints", "repeated")

#: Ops whose result depends on an order decision between values (a tie or a NaN there is
#: where a compiler's ``>`` vs ``>=`` or its NaN propagation shows): the forced special input
#: of a special case is drawn among the inputs that reach one of them.
COMPARING = frozenset(
    ("maximum", "minimum", "where_gt", "gt", "ge", "lt", "le", "eq", "ne", "clamp",
     "clamp_tensor", "relu", "amax", "amin", "argmax", "argmin", "max_dim_values",
     "min_dim_values", "where", "masked_fill")
)

#: Kind weights of an ordinary input (every finite kind, weights of fuzzkit.values).
ORDINARY_KINDS: tuple[tuple[str, int], ...] = tuple((k, w) for k, w in fv.KINDS if k != "special")
#: Kind weights of the inputs of a special case besides the one forced to ``special``.
SPECIAL_KINDS: tuple[tuple[str, int], ...] = tuple(
    (k, w * 4 if k in ("special", "huge") else w) for k, w in fv.KINDS
)


def ordinary_domain(dtype: str) -> fv.Domain:
    """Finite values within the generator's input bound, every finite kind."""
    return fv.Domain(dtype, nan=False, inf=False, max_abs=INPUT_BOUND)


def special_domain(dtype: str) -> fv.Domain:
    """The whole dtype range, NaN and +-Inf included."""
    return fv.Domain(dtype, nan=True, inf=True)


def compared_inputs(graph: dict) -> list[int]:
    """Indices of the graph inputs from which some :data:`COMPARING` node is reachable."""
    index = {i["name"]: k for k, i in enumerate(graph["inputs"])}
    reach: dict[str, set[int]] = {name: {k} for name, k in index.items()}
    out: set[int] = set()
    for n in graph["nodes"]:
        mine = set().union(*(reach.get(a, set()) for a in n["args"]))
        reach[n["name"]] = mine
        if n["op"] in COMPARING:
            out |= mine
    return sorted(out)


def value_plan(draw: Callable[[Any], Any], n_inputs: int, special: bool,
               prefer: Sequence[int] = ()) -> list[str | None]:
    """The value kind of each input (None: drawn per input from the domain's weights);
    ``prefer``: the inputs the forced special one of a special case is drawn from (default:
    any)."""
    from hypothesis import strategies as st

    if special:
        among = [k for k in prefer if 0 <= k < n_inputs] or list(range(n_inputs))
        forced = among[draw(st.integers(0, len(among) - 1))]
        return [
            ("special" if i == forced else str(fv.choose(draw, SPECIAL_KINDS)))
            for i in range(n_inputs)
        ]
    if draw(st.integers(0, 99)) < round(TIE_SHARE * 100):
        kind = _TIE_KINDS[draw(st.integers(0, len(_TIE_KINDS) - 1))]
        return [kind] * n_inputs
    return [str(fv.choose(draw, ORDINARY_KINDS)) for _ in range(n_inputs)]


def _clip(a: np.ndarray, domain: fv.Domain) -> np.ndarray:
    # fuzzkit.values' "repeated" kind draws from a fixed list (7.25, -3, ...) whatever the
    # domain's max_abs: keep ordinary values inside the bound the guards assume
    if domain.max_abs is None:
        return a
    with np.errstate(invalid="ignore"):
        return np.clip(a, -domain.max_abs, domain.max_abs).astype(np.float32)


def draw_values(
    draw: Callable[[Any], Any], graph: dict, dtype: str, special: bool = False
) -> list[np.ndarray]:
    """One float32 array per graph input, exact in ``dtype`` (see the module docstring)."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}")
    domain = special_domain(dtype) if special else ordinary_domain(dtype)
    prefer = compared_inputs(graph)
    plan = value_plan(draw, len(graph["inputs"]), special, prefer)
    # special: every input that reaches a comparison holds a NaN (else the forced one does)
    nan_at = set(prefer) or {k for k, kind in enumerate(plan) if kind == "special"}
    out = []
    for k, (inp, kind) in enumerate(zip(graph["inputs"], plan)):
        a = _clip(np.asarray(fv.array(draw, inp["shape"], domain, kind), dtype=np.float32),
                  domain)
        if special and k in nan_at:
            a = with_nan(draw, a)
        out.append(a)
    return out


def with_nan(draw: Callable[[Any], Any], a: np.ndarray) -> np.ndarray:
    """``a`` with a NaN at a drawn element unless it holds one (``fuzzkit.values``' special
    kind masks 5% of the elements in some arrays, and picks NaN for a third of them: a small
    input often had none)."""
    from hypothesis import strategies as st

    if a.size == 0 or np.isnan(a).any():
        return a
    out = np.array(a, dtype=np.float32, copy=True)
    out.reshape(-1)[draw(st.integers(0, a.size - 1))] = np.nan
    return out


def value_strategy(graph: dict, dtype: str, special: bool = False) -> Any:
    """Hypothesis strategy of ``[np.ndarray float32]``, one per graph input, exact in ``dtype``."""
    from hypothesis import strategies as st

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}")

    @st.composite
    def _values(draw: Callable[[Any], Any]) -> list[np.ndarray]:
        return draw_values(draw, graph, dtype, special)

    return _values()


def make_array(
    kind: str, shape: Sequence[int], seed: int, dtype: str, special: bool = False
) -> np.ndarray:
    """An array of one :data:`fuzzkit.values.KINDS` kind from a seed (no Hypothesis; ``drawn``
    becomes ``mixed``), exact in ``dtype``."""
    domain = special_domain(dtype) if special else ordinary_domain(dtype)
    kind = "mixed" if kind == "drawn" else kind
    a = fv.round_to(fv.fill(kind, shape, domain, int(seed)), dtype)
    return _clip(np.asarray(a, dtype=np.float32), domain)


def random_values(
    graph: dict, rng: np.random.Generator | int, dtype: str = "float32"
) -> list[np.ndarray]:
    """Ordinary values from a NumPy Generator (benchmarks, tests): a weighted kind per input."""
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    kinds = [k for k, _ in ORDINARY_KINDS]
    weights = np.array([w for _, w in ORDINARY_KINDS], dtype=np.float64)
    out = []
    for inp in graph["inputs"]:
        kind = kinds[int(rng.choice(len(kinds), p=weights / weights.sum()))]
        out.append(make_array(kind, inp["shape"], int(rng.integers(0, 2**32 - 1)), dtype))
    return out
