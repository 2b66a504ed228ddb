"""An "outside" quant implementation, plugged in without editing fuzzkit:

    PYTHONPATH=. fuzzkit run quant --impl examples.quant_outside_impl:run --budget 20

It wraps fuzzkit's own NumPy implementation and re-introduces a classic bug on purpose: the
query is quantized like a stored vector before scoring (symmetric instead of asymmetric
distance), which only shows at 8 bits.  fuzzkit finds it, shrinks it and saves the case.
"""

from __future__ import annotations

from typing import Any

from fuzzkit.targets.quant import numpy_impl


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    """turbo8/16 encode + scoring, with the query quantized before scoring (the bug)."""
    from fuzzkit.targets.quant.mutants import MUTANTS

    [query_quantized] = [m for m in MUTANTS if m.name == "query-quantized"]
    with query_quantized.applied():
        return numpy_impl.run(inputs)
