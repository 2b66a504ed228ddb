"""The attribute samplers walk their grids: every grid point comes up in a modest number of
draws, at the level of the sampler and of whole generated graphs (issue 23, item 3).

A compiler special-cases attribute values -- a clamp bound of 0 or +-inf, a missing bound, the
exponents 0, 1, -1 and 1/2, a reduction over a list of dims or over everything -- so a sampler
that draws such a value rarely, or (as clamp's once did: a lower bound of 4, an upper bound of
-4) never, leaves those paths untested.  These tests draw with fixed seeds and check that every
value of every grid axis appears; each has a counterpart showing the check fails on a sampler
that skips a grid point.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable

import numpy as np
import pytest

from fuzzkit.targets.compiler.graphs import generate, ops

REDUCTIONS = ("sum", "mean", "amax", "amin")
#: every (form, keepdim) a reduction's attributes may take on a rank-3 operand
REDUCE_GRID = {(form, keep) for form in ("int", "one-list", "subset", "all-list", "none")
               for keep in (False, True)}
#: the guard clamps the generator inserts itself (``clamp(-c, c)``): not sampler draws
GUARDS = {(-c, c) for c in generate._CLAMP_LEVELS}


def _clamp_axes(draws: list[dict]) -> tuple[set, set]:
    return {d["min"] for d in draws}, {d["max"] for d in draws}


def _sample(sampler: Callable[..., Any], ranks: list[int], n: int, seed: int = 0) -> list[dict]:
    ch = ops.RngChooser(np.random.default_rng(seed))
    return [sampler(ch, ranks) for _ in range(n)]


# ============================================================================ samplers alone


def test_clamp_sampler_reaches_every_value_of_both_axes() -> None:
    draws = _sample(ops._attrs_clamp, [2], 300)
    lows, highs = _clamp_axes(draws)
    assert lows == set(ops.CLAMP_LOWER) and highs == set(ops.CLAMP_UPPER)
    assert {0.0, None, -math.inf, 4.0} <= lows and {0.0, None, math.inf, -4.0} <= highs
    for d in draws:  # well formed: at least one bound, and min < max
        assert d["min"] is not None or d["max"] is not None
        assert d["min"] is None or d["max"] is None or d["min"] < d["max"]


def test_clamp_grid_check_fails_on_the_old_pairwise_sampler() -> None:
    """The old sampler drew the pair at once (``i`` then ``j > i`` over the finite bounds): a
    lower bound of 4 and an upper bound of -4 never came up -- the check above says so."""

    def pairwise(ch: Any, ranks: list[int]) -> dict:
        b = ops._CLAMP_BOUNDS
        i = ch.integers(1, len(b) - 3)
        j = ch.integers(i + 1, len(b) - 2)
        return {"min": b[i], "max": b[j]}

    lows, highs = _clamp_axes(_sample(pairwise, [2], 300))
    assert 4.0 not in lows and -4.0 not in highs
    assert lows != set(ops.CLAMP_LOWER) and highs != set(ops.CLAMP_UPPER)


def test_pow_sampler_draws_every_exponent_evenly() -> None:
    drawn = Counter(d["exponent"] for d in _sample(ops._attrs_pow, [2], 450))
    assert set(drawn) == set(ops.POW_EXPONENTS)
    assert {0.0, 1.0, -1.0, -2.0, 0.5, -0.5, 1.5} <= set(drawn)  # integer, half-integer, <= 0
    assert min(drawn.values()) >= 450 / len(ops.POW_EXPONENTS) / 2  # none starved


def test_reduce_sampler_reaches_every_form_with_and_without_keepdim() -> None:
    draws = _sample(ops._attrs_reduce, [3], 300)
    assert {(ops.reduce_form(d["dim"], 3), d["keepdim"]) for d in draws} == REDUCE_GRID
    assert {d["dim"] for d in draws if isinstance(d["dim"], int)} == {0, 1, 2}
    subsets = {tuple(d["dim"]) for d in draws if isinstance(d["dim"], list)}
    assert subsets == {(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)}
    # a 0-d operand: only the full reduction
    assert {ops.reduce_form(d["dim"], 0) for d in _sample(ops._attrs_reduce, [0], 20)} == {"none"}


def test_reduce_grid_check_fails_without_the_list_forms() -> None:
    """A sampler drawing only an int dim or None (no list path) misses grid points."""

    def no_lists(ch: Any, ranks: list[int]) -> dict:
        return {"dim": ch.integers(0, ranks[0] - 1) if ch.boolean() else None,
                "keepdim": ch.boolean()}

    forms = {(ops.reduce_form(d["dim"], 3), d["keepdim"]) for d in _sample(no_lists, [3], 300)}
    assert forms != REDUCE_GRID and ("one-list", True) not in forms


# ============================================================================ whole graphs


@pytest.fixture(scope="module")
def graphs() -> list[dict]:
    """100 graphs of up to 8 nodes over the attributed ops, fixed seeds (~5 s)."""
    return [generate.random_graph(seed, 8, ops=["clamp", "pow", *REDUCTIONS])
            for seed in range(100)]


def _shapes(graph: dict) -> dict[str, list[int]]:
    out = {i["name"]: i["shape"] for i in graph["inputs"]}
    out.update({n["name"]: n["shape"] for n in graph["nodes"]})
    return out


def test_generated_graphs_walk_every_attribute_grid(graphs: list[dict]) -> None:
    """Over 100 seeded graphs every clamp-axis value (guards aside), every exponent and every
    reduction form with and without keepdim is drawn -- the grids the samplers walk reach the
    graphs the fuzzer runs."""
    clamps, exponents, forms = [], set(), set()
    for g in graphs:
        shapes = _shapes(g)
        for n in g["nodes"]:
            a = n["attrs"]
            if n["op"] == "clamp" and (a["min"], a["max"]) not in GUARDS:
                clamps.append(a)
            elif n["op"] == "pow":
                exponents.add(a["exponent"])
            elif n["op"] in REDUCTIONS:
                rank = len(shapes[n["args"][0]])
                forms.add((ops.reduce_form(a["dim"], rank) if rank else "none", a["keepdim"]))
    lows, highs = _clamp_axes(clamps)
    assert lows == set(ops.CLAMP_LOWER), set(ops.CLAMP_LOWER) - lows
    assert highs == set(ops.CLAMP_UPPER), set(ops.CLAMP_UPPER) - highs
    assert exponents == set(ops.POW_EXPONENTS)
    assert forms >= REDUCE_GRID - {("subset", False), ("subset", True)}
    assert forms & {("subset", False), ("subset", True)}  # needs rank >= 3 operands
