"""What every per-op rule of the graph catalogue shares (:mod:`.ops` and the rule modules
:mod:`.error_rules` and :mod:`.intervals` import it, so it imports none of them)."""

from __future__ import annotations

from typing import Any

#: The largest rank of a value of a graph.
MAX_RANK = 4
#: ``eps`` of every ``layer_norm`` (the torch function and its error rule must agree).
LAYER_NORM_EPS = 1e-5


def reduced_dims(dim: Any, rank: int) -> tuple[int, ...]:
    """The dims a reduction's ``dim`` attr reduces: one int, a list of ints, or None (all)."""
    if dim is None:
        return tuple(range(rank))
    if isinstance(dim, (list, tuple)):
        return tuple(sorted({int(d) % rank for d in dim})) if rank else ()
    return (int(dim) % rank,) if rank else ()
