"""Private copies of a case for each run of it, made cheaply.

The runner gives the reference, the implementation and every property run their own copy of the
inputs (one that writes into its inputs must not change what the others see, nor the case that
gets saved).  ``copy.deepcopy`` did that at a cost of up to a tenth of a scheduling case's CPU:
it keeps a memo of every object and dispatches through ``__deepcopy__`` lookups.  Inputs are
almost always the plain JSON-like values a strategy or a case file builds -- dicts, lists,
tuples, numbers, strings, numpy arrays -- which this copies directly; anything else (a tensor, a
dataclass, a dict subclass) still goes through ``copy.deepcopy``.

One difference from ``deepcopy``: two references to one list become two equal lists.  That is
what a case saved and loaded again looks like (JSON has no aliasing), so every run of a case sees
it the way its replay will.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

#: Immutable values returned as they are.
_ATOMS = (int, float, complex, str, bytes, bool, type(None), np.generic)


def copy_inputs(value: Any) -> Any:
    """A copy of ``value`` that shares nothing mutable with it."""
    kind = type(value)
    if kind is dict:
        return {key: copy_inputs(item) for key, item in value.items()}
    if kind is list:
        return [copy_inputs(item) for item in value]
    if kind is tuple:
        return tuple(copy_inputs(item) for item in value)
    if kind is np.ndarray:
        return value.copy(order="K")
    if isinstance(value, _ATOMS):
        return value
    return copy.deepcopy(value)
