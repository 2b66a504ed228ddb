"""Input values for compiler graphs.

A *recipe* per graph input — ``("normal", scale)``, ``("uniform", lo, hi)``, ``("ints", lo, hi)``
or, only with ``special=True``, ``("special", p)`` (NaN / ±Inf / ±0 / the dtype's largest finite
value mixed into normal values) — is drawn by Hypothesis, then the array is made from a drawn seed
and rounded to the dtype (bfloat16: round-to-nearest-even on float32 bits in NumPy).  Non-special
values lie in ``[-INPUT_BOUND, INPUT_BOUND]``, the range the generator's guards assume, so any input
may feed any op: positive-domain ops always get their operand through guard nodes
(``abs`` + ``add_scalar(0.5)``), never directly from an input.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .bound import LARGEST_FINITE
from .generate import INPUT_BOUND

__all__ = ["round_to_dtype", "make_array", "random_values", "value_strategy", "recipe_strategy",
           "DTYPES"]

DTYPES = ("float32", "float16", "bfloat16")


def round_to_dtype(x: Any, dtype: str) -> np.ndarray:
    """float32 array whose values are exactly representable in ``dtype`` (round to nearest even)."""
    a = np.asarray(x, dtype=np.float32)
    if dtype == "float32":
        return a.copy()
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return a.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        bits = a.view(np.uint32).astype(np.uint64)
        rounding = ((bits >> 16) & 1) + 0x7FFF
        out = ((bits + rounding) & 0xFFFF0000).astype(np.uint32).view(np.float32)
        return np.where(np.isnan(a), np.float32(np.nan), out).astype(np.float32)
    raise ValueError(f"unknown dtype {dtype!r}")


def make_array(recipe: Sequence[Any], shape: Sequence[int], seed: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in shape)
    kind = recipe[0]
    if kind == "normal":
        a = np.clip(rng.normal(0.0, recipe[1], size=shape), -INPUT_BOUND, INPUT_BOUND)
    elif kind == "uniform":
        a = rng.uniform(recipe[1], recipe[2], size=shape)
    elif kind == "ints":
        a = rng.integers(recipe[1], recipe[2] + 1, size=shape).astype(np.float64)
    elif kind == "special":
        a = np.clip(rng.normal(0.0, 1.0, size=shape), -INPUT_BOUND, INPUT_BOUND)
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, LARGEST_FINITE[dtype], -LARGEST_FINITE[dtype]])
        mask = rng.random(shape) < recipe[1]
        a = np.where(mask, specials[rng.integers(0, len(specials), size=shape)], a)
    else:
        raise ValueError(f"unknown recipe {recipe!r}")
    return round_to_dtype(a, dtype)


_SCALES = (1.0, 0.1, 2.0, 0.01)
_GRID = (-4.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 4.0)


def recipe_strategy(special: bool = False):
    from hypothesis import strategies as st

    normal = st.tuples(st.just("normal"), st.sampled_from(_SCALES))
    uniform = st.tuples(st.integers(0, len(_GRID) - 2), st.integers(1, len(_GRID) - 1)).map(
        lambda ij: ("uniform", _GRID[ij[0]], _GRID[max(ij[0] + 1, ij[1])])
    )
    ints = st.tuples(st.just("ints"), st.integers(-4, 0), st.integers(0, 4))
    options = [normal, uniform, ints]
    if special:
        options.append(st.tuples(st.just("special"), st.sampled_from((0.1, 0.5, 1.0))))
    return st.one_of(*options)


def value_strategy(graph: dict, dtype: str, special: bool = False):
    """Hypothesis strategy of ``[np.ndarray float32]``, one per graph input, exact in ``dtype``."""
    from hypothesis import strategies as st

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}")

    @st.composite
    def _values(draw):
        out = []
        for inp in graph["inputs"]:
            recipe = draw(recipe_strategy(special))
            seed = draw(st.integers(0, 2**32 - 1))
            out.append(make_array(recipe, inp["shape"], seed, dtype))
        return out

    return _values()


def random_values(graph: dict, rng: np.random.Generator | int, dtype: str = "float32") -> list[np.ndarray]:
    """Non-special values from a NumPy Generator (benchmarks): a random recipe per input."""
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    out = []
    for inp in graph["inputs"]:
        k = int(rng.integers(0, 3))
        if k == 0:
            recipe: tuple = ("normal", float(_SCALES[int(rng.integers(0, len(_SCALES)))]))
        elif k == 1:
            i = int(rng.integers(0, len(_GRID) - 1))
            j = int(rng.integers(i + 1, len(_GRID)))
            recipe = ("uniform", _GRID[i], _GRID[j])
        else:
            recipe = ("ints", -4, 4)
        out.append(make_array(recipe, inp["shape"], int(rng.integers(0, 2**32 - 1)), dtype))
    return out
