"""Hypothesis strategy for ``compiler`` cases: graph + dtype + dynamic + values (+ variants,
layouts).

The op mix is weighted (an op listed k times is drawn k times as often) towards what compilers
fuse and miscompile: binary elementwise ops with broadcasting (non-commutative ``sub``/``div``
included), ``exp``, ``clamp``, comparisons (``maximum``/``minimum``/``where_gt``), reductions
(which the fusing compiler fuses over the last dim), and layout ops (``transpose``/``permute``)
that hand non-contiguous tensors to fused kernels; with the 173 ops of issue 23 also the typed
comparisons and selections (``gt``..``ne``, ``where``, ``masked_fill``, ``argmax``, value
reductions over ties) and the issue's headline ops (matmul / addmm, softmax, norms, attention,
cat): :data:`WEIGHTS`.  Every op of :data:`fuzzkit.targets.compiler.graphs.ops.DEFAULT_OPS`
stays reachable.  A case's matmul work is capped (:data:`MAX_MATMUL_WORK`).

Sizes (:class:`.graphs.generate.Sizing`, drawn with :func:`fuzzkit.reach.size` from the
thresholds of the implementation under test, :mod:`.thresholds`): every free dim's preference
(``inner`` for an input's last dim, ``dim`` for the others; the plain draw is a tile-edge value),
the element count of input ``x0`` (``numel``: an elementwise kernel's second program), the
length and row count of the first reduction (``row`` / ``cells`` for the fusing compiler's
fused last-dim reductions, ``reduction`` for Inductor's, up to tens of thousands of elements),
and the users of the first node (``fanout``).  The plain draw (about half of each) leaves the
size to the generator.  The element cap grows with what is asked, up to :data:`MAX_ELEMENTS`.

Values (:mod:`fuzzkit.targets.compiler.graphs.values`): :data:`SPECIAL_SHARE` of the cases
("special") draw from the whole dtype range with NaN and +-Inf (one input always holds NaN/Inf);
the others stay finite within the generator's input bound and are rejected if the float64
reference leaves half the dtype's range (a low-precision overflow there is the format's limit,
not a compiler bug). Comparisons see equal operands through three routes: one value on both
sides and graph inputs compared directly
(:data:`fuzzkit.targets.compiler.graphs.generate.COMPARE_SAME_SHARE`, ``COMPARE_INPUTS_SHARE``),
and inputs that share small values (:data:`fuzzkit.targets.compiler.graphs.values.TIE_SHARE`);
``tests/test_graphs.py`` measures the resulting share of comparison nodes that see a tie and
that see NaN.

Dynamic shapes and layouts (issue 23): in :data:`VARIANT_SHARE` of the Inductor cases the
inputs' dims are changed in groups (:func:`dim_groups`: equal sizes across inputs change
together) to other sizes (:func:`new_sizes`: 0 and 1, vector-width edges) and the shapes the
graph accepts become ``variants`` -- 2 to 4 more shapes run through one compile, in
``dynamic`` mode true, ``"marked"`` or false; in :data:`LAYOUT_SHARE` of the cases the inputs get
memory layouts (transposed, strided, offset, channels-last); in :data:`SINGLE_OP_SHARE` of the
cases the graph is cut to one op or a prefix (:func:`narrowed`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from fuzzkit import reach
from fuzzkit.targets.compiler.checks import DTYPES

#: Op weights (an op listed k times in :func:`op_mix`; the others once).  The first block is the
#: fused core the weights were tuned for with 41 ops; with 173 ops it is held near two fifths of
#: the drawn (non-guard) nodes, the comparing ops of issue 23 (bool comparisons, selections,
#: index and value reductions over ties) are weighted so each is drawn often enough for the
#: tie / NaN shares ``tests/test_compiler.py`` states, and the ops the issue names first
#: (matmul / addmm, softmax, norms, attention, cat) so that 300 cases reach each of them.
WEIGHTS: dict[str, int] = {
    "sub": 4, "mul": 4, "exp": 3, "sum": 4, "div": 3, "clamp": 3, "add": 3, "transpose": 4,
    "permute": 3, "mean": 2, "amax": 2, "amin": 2, "maximum": 4, "minimum": 3, "where_gt": 3,
    "relu": 3,
    # comparisons and selections of the typed family (bool / int values)
    "gt": 2, "ge": 2, "lt": 2, "le": 2, "eq": 2, "ne": 2, "where": 2, "masked_fill": 2,
    "argmax": 2, "argmin": 2, "max_dim_values": 2, "min_dim_values": 2, "clamp_tensor": 2,
    # the headline ops
    "matmul": 2, "addmm": 2, "softmax": 2, "log_softmax": 2, "layer_norm": 2, "sdpa": 2,
    "cat": 2, "cumsum": 2,
}
MAX_NODES = 12
#: Share of cases with NaN / +-Inf / huge values.
SPECIAL_SHARE = 0.25
#: Largest tensor a case may hold (a long reduction of a few rows).
MAX_ELEMENTS = 1 << 17
#: Most multiply-adds of a case's matmul-like nodes (:func:`.limits.matmul_work`), variants
#: together: the element cap bounds each tensor, not ``m * n * k`` (a [512, 256] x [256, 256]
#: product is 2^25), and with matmul / addmm / sdpa weighted up a float64 reference of that
#: size costs as much as the compile; 2^22 keeps the limit's default 12x above what is drawn.
MAX_MATMUL_WORK = 1 << 22
#: Plain preferences of a free dim: tile edges and small sizes (1 comes from the solver, the
#: broadcasting rules and Dynamo's threshold often enough: as a preference it made layout ops
#: trivial).
DIM_BASE = (2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129)
#: Share of Inductor cases that run other input shapes through the same compile (variants).
VARIANT_SHARE = 0.5
#: Shape draws per wanted variant before giving up (the shape rules refuse many).
VARIANT_TRIES = 4
#: Elements of all variants' tensors together (each is one more float64 reference).
VARIANT_ELEMENTS = 1 << 20
#: Share of cases whose inputs get drawn memory layouts.
LAYOUT_SHARE = 0.25
#: Share of cases cut down to one op or a prefix of the generated graph.
SINGLE_OP_SHARE = 0.125


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
    # the dtype first: the generator records every value's dtype (a cast to float32 inside a
    # float16 graph is a float32 value)
    dtype = draw(st.sampled_from(list(dtypes)))
    n = draw(st.integers(min(fewest, max_nodes), max_nodes))
    try:
        # a wide fan-out keeps a few more nodes: the guards in front of its consumers count
        graph = generate.generate(DrawChooser(draw), max(n, fewest), op_mix(), sizing=sizing,
                                  dtype=dtype, keep=fewest + 6 if sizing.fanout else None,
                                  more=lambda count: generate.more_ops(draw, count, fewest))
    except RuntimeError:  # the generator's final shape solve failed: not a case, draw again
        assume(False)
    graph = narrowed(draw, graph)
    assume(matmul_work(graph) <= MAX_MATMUL_WORK)
    special = draw(st.integers(0, 99)) < round(SPECIAL_SHARE * 100)
    values = graph_values.draw_values(draw, graph, dtype, special=special)
    if not special:
        assume(in_range(graph, values, dtype))
    # the fusing compiler specialises on shapes (a variant is one more compile under the
    # interpreter, not a dynamic-shape run): variants are drawn for Inductor and plain draws
    dynamic_target = not reach.of_size(thresholds, "row")
    variants: list[list[np.ndarray]] = []
    if dynamic_target and draw(st.integers(0, 99)) < round(VARIANT_SHARE * 100):
        variants = draw_variants(draw, graph, dtype, special)
    dynamic: bool | str = (draw(st.sampled_from([True, "marked", False])) if variants
                           else draw(st.booleans()))
    if dynamic is False:
        # static: every shape is a compile of its own (minutes under load for four); three
        # shapes still reach the recompile-on-new-shape path
        variants = variants[:2]
    case: dict[str, Any] = {"graph": graph, "dtype": dtype, "dynamic": dynamic,
                            "values": values, "special": special}
    if variants:
        case["variants"] = variants
    if draw(st.integers(0, 99)) < round(LAYOUT_SHARE * 100):
        case["layouts"] = draw_layouts(draw, graph)
    return case


def matmul_work(graph: dict) -> int:
    """Multiply-adds of ``graph``'s matmul-like nodes (the resource limit's own measure)."""
    from fuzzkit.targets.compiler import limits

    return int(limits.matmul_work({"graph": graph}))


def narrowed(draw: Any, graph: dict) -> dict:
    """In :data:`SINGLE_OP_SHARE` of the cases, a single op of ``graph`` (its arguments become
    the inputs) or a prefix of it (:func:`.graphs.build.prefix`): each op alone with the whole
    size and value range, no guard or neighbour in front of it."""
    from fuzzkit.targets.compiler.graphs import build

    nodes = graph["nodes"]
    if not nodes or draw(st.integers(0, 99)) >= round(SINGLE_OP_SHARE * 100):
        return graph
    i = draw(st.integers(0, len(nodes) - 1))
    if draw(st.booleans()):
        return build.prefix(graph, i)
    name = nodes[i]["name"]
    single = build.subgraph(graph, [name], [name])
    # a cut-off input of a value the model cannot declare as an input (an int or bool
    # intermediate): the prefix up to the op instead, which keeps the graph's own inputs
    return single if build.validate_graph(single) is None else build.prefix(graph, i)


def dim_groups(graph: dict) -> list[list[tuple[int, int]]]:
    """The input dims as groups that likely share one symbolic dim: dims of equal size >= 2
    across all inputs together (a broadcast or an elementwise op ties them), each dim of size
    0 or 1 on its own (a lone 1 may grow only where broadcasting allows: the shape rules say)."""
    by_size: dict[int, list[tuple[int, int]]] = {}
    lone: list[list[tuple[int, int]]] = []
    for i, inp in enumerate(graph["inputs"]):
        for d, size in enumerate(inp["shape"]):
            if int(size) >= 2:
                by_size.setdefault(int(size), []).append((i, d))
            else:
                lone.append([(i, d)])
    return list(by_size.values()) + lone


def new_sizes(size: int) -> list[int]:
    """Sizes a dim of ``size`` may take in a variant: 0 and 1 first (Dynamo specialises them:
    a recompile), then the neighbours, the vector widths' edges (:mod:`.thresholds`: 8/16/32/64
    lanes), the reduction unroll cut-off (8) and a doubling."""
    from fuzzkit.targets.compiler import thresholds as th

    out = [0, 1, 2, 3, size - 1, size + 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 2 * size]
    seen: list[int] = []
    for n in out:
        if 0 <= n <= th.DIM_CAP and n != size and n not in seen:
            seen.append(n)
    return seen


def draw_variants(draw: Any, graph: dict, dtype: str, special: bool) -> list[list[np.ndarray]]:
    """2 to :data:`.checks.MAX_VARIANTS` value sets for other input shapes of ``graph`` (groups
    of :func:`dim_groups` set to :func:`new_sizes`), each one the shape rules accept
    (:func:`.checks.reshaped`), within the element budget, with values of the same recipes as
    the main values and a reference that runs (and, unless special, stays in range); fewer than
    two found: none (a dynamic-shape case runs at least three shapes through one compile)."""
    import math

    from fuzzkit.targets.compiler.checks import MAX_VARIANTS, reshaped
    from fuzzkit.targets.compiler.graphs import build
    from fuzzkit.targets.compiler.graphs import values as graph_values

    groups = dim_groups(graph)
    if not groups:
        return []
    want = draw(st.integers(2, MAX_VARIANTS))
    seen = {tuple(tuple(i["shape"]) for i in graph["inputs"])}
    budget = VARIANT_ELEMENTS
    work = MAX_MATMUL_WORK - matmul_work(graph)
    found: list[list[np.ndarray]] = []
    for _ in range(VARIANT_TRIES * want):
        if len(found) == want:
            break
        chosen = draw(st.lists(st.integers(0, len(groups) - 1), min_size=1,
                               max_size=min(3, len(groups)), unique=True))
        shapes = [list(i["shape"]) for i in graph["inputs"]]
        for g in chosen:
            i0, d0 = groups[g][0]
            size = draw(st.sampled_from(new_sizes(int(shapes[i0][d0]))))
            for i, d in groups[g]:
                shapes[i][d] = size
        key = tuple(tuple(s) for s in shapes)
        if key in seen:
            continue
        seen.add(key)
        try:
            other = reshaped(graph, shapes)
        except build.GraphError:
            continue
        sizes = [math.prod(s) for s in build.shapes_of(other).values()]
        if max(sizes, default=0) > MAX_ELEMENTS or sum(sizes) > budget:
            continue
        other_work = matmul_work(other)
        if other_work > work:
            continue
        values = graph_values.draw_values(draw, other, dtype, special=special)
        try:
            ok = in_range(other, values, dtype) if not special else bool(
                build.run_reference(other, values) is not None)
        except Exception:  # noqa: BLE001 - eager refuses these shapes (an empty amax): no variant
            ok = False
        if ok:
            budget -= sum(sizes)
            work -= other_work
            found.append(values)
    return found if len(found) >= 2 else []


def draw_layouts(draw: Any, graph: dict) -> list[str]:
    """A memory layout per input (:data:`fuzzkit.targets.compiler.LAYOUTS`), one its rank
    allows; contiguous weighs as much as the others together."""
    from fuzzkit.targets.compiler import LAYOUT_RANK, LAYOUTS

    out = []
    for inp in graph["inputs"]:
        rank = len(inp["shape"])
        allowed = [lay for lay in LAYOUTS[1:] if LAYOUT_RANK[lay] <= rank
                   and (lay != "channels_last" or rank == 4)]
        if not allowed or draw(st.booleans()):
            out.append("contiguous")
        else:
            out.append(draw(st.sampled_from(allowed)))
    return out


def inputs(max_nodes: int = MAX_NODES, dtypes: Sequence[str] = DTYPES,
           thresholds: Sequence[reach.Threshold] = ()) -> Any:
    """Strategy of ``compiler`` case inputs, aimed at ``thresholds`` (:mod:`.thresholds`)."""
    return _inputs(max_nodes=max_nodes, dtypes=tuple(dtypes), thresholds=tuple(thresholds))
