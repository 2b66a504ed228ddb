"""Hypothesis strategy for ``compiler`` cases: graph + dtype + dynamic + values.

The op mix is weighted (an op listed k times is drawn k times as often) towards what compilers
fuse and miscompile: binary elementwise ops with broadcasting (non-commutative ``sub``/``div``
included), ``exp``, ``clamp``, comparisons (``maximum``/``minimum``/``where_gt``), reductions
(which the fusing compiler fuses over the last dim), and layout ops (``transpose``/``permute``)
that hand non-contiguous tensors to fused kernels.  Every op of
:data:`fuzzkit.targets.compiler.graphs.ops.DEFAULT_OPS` stays reachable.

Sizes (:class:`.graphs.generate.Sizing`, drawn with :func:`fuzzkit.reach.size` from the
thresholds of the implementation under test, :mod:`.thresholds`): every free dim's preference
(``inner`` for an input's last dim, ``dim`` for the others; the plain draw is a tile-edge value),
the element count of input ``x0`` (``numel``: an elementwise kernel's second program), the
length and row count of the first reduction (``row`` / ``cells`` for the fusing compiler's
fused last-dim reductions, ``reduction`` for Inductor's, up to tens of thousands of elements),
and the users of the first node (``fanout``).  The plain draw (about half of each) leaves the
size to the generator.  The element cap grows with what is asked, up to :data:`MAX_ELEMENTS`.

Values (:mod:`fuzzkit.targets.compiler.graphs.values`): :data:`SPECIAL_SHARE` of the cases ("special") draw
from the whole dtype range with NaN and +-Inf (one input always holds NaN/Inf); the others stay
finite within the generator's input bound and are rejected if the float64 reference leaves half
the dtype's range (a low-precision overflow there is the format's limit, not a compiler bug).
Comparisons see equal operands through three routes: one value on both sides and graph inputs
compared directly (:data:`fuzzkit.targets.compiler.graphs.generate.COMPARE_SAME_SHARE`,
``COMPARE_INPUTS_SHARE``), and inputs that share small values
(:data:`fuzzkit.targets.compiler.graphs.values.TIE_SHARE`); ``tests/test_graphs.py`` measures the resulting
share of comparison nodes that see a tie and that see NaN.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from fuzzkit import reach
from fuzzkit.targets.compiler.checks import DTYPES

WEIGHTS: dict[str, int] = {
    "sub": 4, "mul": 4, "exp": 3, "sum": 4, "div": 3, "clamp": 3, "add": 3, "transpose": 4,
    "permute": 3, "mean": 2, "amax": 2, "amin": 2, "maximum": 3, "minimum": 3, "where_gt": 3,
    "relu": 2,
}
MAX_NODES = 12
#: Share of cases with NaN / +-Inf / huge values.
SPECIAL_SHARE = 0.25
#: Largest tensor a case may hold (a long reduction of a few rows).
MAX_ELEMENTS = 1 << 17
#: Plain preferences of a free dim: tile edges and small sizes (1 comes from the solver, the
#: broadcasting rules and Dynamo's threshold often enough: as a preference it made layout ops
#: trivial).
DIM_BASE = (2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129)


def op_mix() -> list[str]:
    """The weighted op list, weighted ops first: Hypothesis draws small indices more often and
    shrinks towards index 0, so the order matters as much as the counts."""
    from fuzzkit.targets.compiler.graphs import ops

    order = list(WEIGHTS) + [name for name in ops.DEFAULT_OPS if name not in WEIGHTS]
    names: list[str] = []
    for name in order:
        if name in ops.DEFAULT_OPS:
            names += [name] * WEIGHTS.get(name, 1)
    return names


def in_range(graph: dict, values: Sequence[np.ndarray], dtype: str) -> bool:
    from fuzzkit.targets.compiler.graphs import build
    from fuzzkit.targets.compiler.graphs.bound import LARGEST_FINITE

    limit = 0.5 * LARGEST_FINITE[dtype]
    ref = build.run_reference(graph, values)
    return all(np.all(np.isfinite(v)) and (v.size == 0 or np.max(np.abs(v)) <= limit)
               for v in ref.values())


def value_strategy(graph: dict, dtype: str, special: bool = False) -> Any:
    from fuzzkit.targets.compiler.graphs import values

    return values.value_strategy(graph, dtype, special=special)


def aim(draw: Any, name: str, thresholds: Sequence[reach.Threshold], *, lo: int, hi: int,
        base: Any) -> int:
    """:func:`fuzzkit.reach.size`, plus: one draw in eight lands on ``t-1``, ``t`` or ``t+1`` of
    one of ``name``'s thresholds directly (the boundaries themselves, whatever bias the index
    draws inside ``reach.size`` have)."""
    mine = [t for t in reach.of_size(thresholds, name) if lo <= t.value - 1 and t.value + 1 <= hi]
    if mine and draw(st.integers(0, 7)) == 7:
        t = mine[draw(st.integers(0, len(mine) - 1))]
        return t.value + draw(st.integers(-1, 1))
    return reach.size(draw, name, thresholds, lo=lo, hi=hi, base=base)


def _sizing(draw: Any, thresholds: Sequence[reach.Threshold]) -> tuple[Any, int]:
    """A :class:`~.graphs.generate.Sizing` for one graph, and the fewest nodes it needs."""
    from fuzzkit import values
    from fuzzkit.targets.compiler import thresholds as th
    from fuzzkit.targets.compiler.graphs.generate import ELEMENT_CAP, Sizing

    def dim(ch: Any, where: str) -> int:
        name = "inner" if where == "inner" else "dim"
        return aim(draw, name, thresholds, lo=1, hi=th.DIM_CAP, base=st.sampled_from(DIM_BASE))

    none = st.just(0)
    # shape wishes: an element count for x0 (numel), and two reductions' rows (row,
    # reduction) or tile grids (cells), each size chosen in proportion to its thresholds
    numel = aim(draw, "numel", thresholds, lo=0, hi=th.NUMEL_CAP, base=none)
    caps = {"row": th.ROW_CAP, "reduction": th.ROW_CAP, "cells": th.CELLS_CAP}
    table = [(name, len(reach.of_size(thresholds, name))) for name in caps]
    table = [(name, k) for name, k in table if k]
    # the fused path of the fusing compiler: sum/mean/amax/amin over exactly the last dim
    last_dim = bool(reach.of_size(thresholds, "row") or reach.of_size(thresholds, "cells"))
    wishes: list[tuple[int, int]] = []
    for _ in range(2 if table else 0):
        name = str(values.choose(draw, table))
        # the plain draw: no wish, or (rows and reductions) sometimes any length up to the
        # cap, so long reductions come up between the thresholds too
        base = none if name == "cells" else st.integers(0, 3).flatmap(
            lambda k: st.integers(2, th.ROW_CAP) if k == 3 else none)
        size = aim(draw, name, thresholds, lo=0, hi=caps[name], base=base)
        if size and name == "cells":
            if size % 2:  # an odd cell count: rows of one element (next_pow2(1) = 1)
                wishes.append((1, size))
            else:
                row = draw(st.sampled_from(DIM_BASE))
                wishes.append((row, max(1, size // th.next_pow2(row))))
        elif size:
            wishes.append((size, 0))
    row, rows = wishes[0] if wishes else (0, 0)
    fanout = aim(draw, "fanout", thresholds, lo=0, hi=th.FANOUT_CAP, base=none)
    # room for a few ops that grow a tensor (cat, broadcasting) past the wished sizes
    largest = max([numel] + [r * max(n, 1) for r, n in wishes])
    cap = min(MAX_ELEMENTS, max(ELEMENT_CAP, 4 * largest))
    sizing = Sizing(cap=cap, dim=dim, numel=numel or None, row=row or None, rows=rows or None,
                    more_rows=tuple(wishes[1:]), last_dim=last_dim, fanout=fanout)
    return sizing, fanout + 2 if fanout else 1


@st.composite
def _inputs(draw: Any, max_nodes: int = MAX_NODES, dtypes: Sequence[str] = DTYPES,
            thresholds: Sequence[reach.Threshold] = ()) -> dict:
    from fuzzkit.targets.compiler.graphs import generate
    from fuzzkit.targets.compiler.graphs import values as graph_values
    from fuzzkit.targets.compiler.graphs.ops import DrawChooser

    sizing, fewest = _sizing(draw, thresholds)
    n = draw(st.integers(min(fewest, max_nodes), max_nodes))
    try:
        # a wide fan-out keeps a few more nodes: the guards in front of its consumers count
        graph = generate.generate(DrawChooser(draw), max(n, fewest), op_mix(), sizing=sizing,
                                  keep=fewest + 6 if sizing.fanout else None,
                                  more=lambda count: generate.more_ops(draw, count, fewest))
    except RuntimeError:  # the generator's final shape solve failed: not a case, draw again
        assume(False)
    dtype = draw(st.sampled_from(list(dtypes)))
    dynamic = draw(st.booleans())
    special = draw(st.integers(0, 99)) < round(SPECIAL_SHARE * 100)
    values = graph_values.draw_values(draw, graph, dtype, special=special)
    if not special:
        assume(in_range(graph, values, dtype))
    return {"graph": graph, "dtype": dtype, "dynamic": dynamic, "values": values,
            "special": special}


def inputs(max_nodes: int = MAX_NODES, dtypes: Sequence[str] = DTYPES,
           thresholds: Sequence[reach.Threshold] = ()) -> Any:
    """Strategy of ``compiler`` case inputs, aimed at ``thresholds`` (:mod:`.thresholds`)."""
    return _inputs(max_nodes=max_nodes, dtypes=tuple(dtypes), thresholds=tuple(thresholds))
