"""Hypothesis strategy for ``compiler`` cases: graph + dtype + dynamic + values.

The op mix is weighted (an op listed k times is drawn k times as often) towards what compilers
fuse and miscompile: binary elementwise ops with broadcasting (non-commutative ``sub``/``div``
included), ``exp``, ``clamp``, reductions (which the fusing compiler fuses over the last dim),
and layout ops (``transpose``/``permute``) that hand non-contiguous tensors to fused kernels.
Every op of :data:`fuzzkit.graphs.ops.DEFAULT_OPS` stays reachable.

Ordinary cases whose float64 reference leaves the dtype's range (an intermediate above half its
largest finite value, or non-finite) are rejected: a low-precision overflow there is the
format's limit, not a compiler bug.  One case in eight (``"special": True``) asks for special
input values -- NaN, +-Inf, +-0, the dtype's largest finite -- and keeps them: the oracle then
demands the reference's NaN/Inf pattern and judges nothing where an overflow is legitimate.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from targets.compiler.checks import DTYPES

WEIGHTS: dict[str, int] = {
    "sub": 4, "mul": 4, "exp": 3, "sum": 4, "div": 3, "clamp": 3, "add": 3, "transpose": 3,
    "permute": 2, "mean": 2, "amax": 2, "amin": 1, "maximum": 1, "minimum": 1,
}
MAX_NODES = 12


def op_mix() -> list[str]:
    """The weighted op list, weighted ops first: Hypothesis draws small indices more often and
    shrinks towards index 0, so the order matters as much as the counts."""
    from fuzzkit.graphs import ops

    order = list(WEIGHTS) + [name for name in ops.DEFAULT_OPS if name not in WEIGHTS]
    names: list[str] = []
    for name in order:
        if name in ops.DEFAULT_OPS:
            names += [name] * WEIGHTS.get(name, 1)
    return names


def in_range(graph: dict, values: Sequence[np.ndarray], dtype: str) -> bool:
    from fuzzkit.graphs import build
    from fuzzkit.graphs.bound import LARGEST_FINITE

    limit = 0.5 * LARGEST_FINITE[dtype]
    ref = build.run_reference(graph, values)
    return all(np.all(np.isfinite(v)) and (v.size == 0 or np.max(np.abs(v)) <= limit)
               for v in ref.values())


def value_strategy(graph: dict, dtype: str, special: bool = False) -> Any:
    from fuzzkit.graphs import values

    return values.value_strategy(graph, dtype, special=special)


@st.composite
def _inputs(draw: Any, max_nodes: int = MAX_NODES, dtypes: Sequence[str] = DTYPES) -> dict:
    from fuzzkit.graphs import generate

    try:
        graph = draw(generate.graph_strategy(max_nodes=max_nodes, ops=op_mix()))
    except RuntimeError:  # the generator's final shape solve failed: not a case, draw again
        assume(False)
    dtype = draw(st.sampled_from(list(dtypes)))
    dynamic = draw(st.booleans())
    # one case in eight asks for special values (NaN, +-Inf, +-0, the largest finite): NaN
    # propagation and overflow are where compilers and eager disagree most often
    special = draw(st.integers(0, 7)) == 7
    values = [np.asarray(v, dtype=np.float32)
              for v in draw(value_strategy(graph, dtype, special=special))]
    if not special:
        assume(in_range(graph, values, dtype))
    return {"graph": graph, "dtype": dtype, "dynamic": dynamic, "values": values,
            "special": special}


def inputs(max_nodes: int = MAX_NODES, dtypes: Sequence[str] = DTYPES) -> Any:
    """Strategy of ``compiler`` case inputs."""
    return _inputs(max_nodes=max_nodes, dtypes=tuple(dtypes))
