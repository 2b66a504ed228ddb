"""What every per-op rule of the graph catalogue shares (:mod:`.ops` and the rule modules
:mod:`.error_rules` and :mod:`.intervals` import it, so it imports none of them)."""

from __future__ import annotations

from typing import Any

#: The largest rank of a value of a graph.
MAX_RANK = 4
#: ``eps`` of every ``layer_norm`` (the torch function and its error rule must agree).
LAYER_NORM_EPS = 1e-5
#: The z3 context and dim counter of the shape rules (:func:`.ops.reset_z3`). It lives here, not
#: in :mod:`.ops`, because a miscompile mutant runs the rules of a private copy of ``ops.py``:
#: a copy's own state would keep z3's main context while the generator reset the original's
#: ("context mismatch" in every generated case).
Z3_STATE: dict[str, Any] = {"ctx": None, "counter": 0}


def reduced_dims(dim: Any, rank: int) -> tuple[int, ...]:
    """The dims a reduction's ``dim`` attr reduces: one int, a list of ints, or None (all)."""
    if dim is None:
        return tuple(range(rank))
    if isinstance(dim, (list, tuple)):
        return tuple(sorted({int(d) % rank for d in dim})) if rank else ()
    return (int(dim) % rank,) if rank else ()
