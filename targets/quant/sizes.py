"""The named sizes of a quant case (``Target.sizes``): where ``n``, ``m`` and ``D`` are found.

Why: a threshold names a size (:mod:`fuzzkit.reach`); this module says where each size is in a
case, so ``reach.crossings`` and the run reports can tell which edges the strategy reaches.  The
shared encoder's threshold is :data:`fuzzkit.targets.quant.numpy_impl.ENCODER_THRESHOLDS`, the kernel's
tiles :func:`fuzzkit.targets.quant.tiles.thresholds`.  No Hypothesis, torch or triton here: building the
target must stay light.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from fuzzkit import reach


def vector_rows(inputs: Mapping[str, Any]) -> list[int]:
    """``n``: stored vectors (the asymmetric launch's ``N``; both axes of the symmetric one)."""
    return [int(np.shape(inputs["vectors"])[0])]


def query_rows(inputs: Mapping[str, Any]) -> list[int]:
    """``m``: queries (the asymmetric launch's ``M``)."""
    return [int(np.shape(inputs["queries"])[0])]


def dimension(inputs: Mapping[str, Any]) -> list[int]:
    """``D``: the dimension (the encoder's Hadamard blocks, the kernel's ``D`` steps)."""
    return [int(np.shape(inputs["vectors"])[1])]


SIZES: dict[str, reach.Size] = {
    "n": reach.Size(vector_rows, lo=0),
    "m": reach.Size(query_rows, lo=0),
    "D": reach.Size(dimension, lo=1),
}
