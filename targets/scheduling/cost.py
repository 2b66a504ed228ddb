"""The prefill/decode cost model of the simulator, in integer nanosecond ticks.

Prefill of ``u`` uncached tokens after ``h`` cached ones costs ``k0 + k1·u + k2·u·(h + u/2)``
(docs/COMPONENTS.md §2): a fixed launch overhead, linear work (MLPs, projections) and attention work
over the context.  We store ``k2`` as the coefficient of ``u·(2h + u)`` (that is, half the
textbook one) so that every cost is an exact integer: the reference and optimized policies can
then be required to agree bit for bit, and scaling every constant by ``c`` scales every time by
exactly ``c`` (the scale-invariance relation).

A chunk of ``c`` tokens that starts after ``done`` tokens (cached or already prefilled) costs
``k1·c + k2·c·(2·done + c)`` and the chunks of one request add up exactly to its prefill cost
minus ``k0``: the step pays ``k0`` once, however many chunks and decodes it carries.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True)
class CostModel:
    k0: int = 4_000_000  # ticks per step (launch, scheduling, sampling): 4 ms
    k1: int = 40_000  # ticks per prefilled token: 25k tokens/s
    k2: int = 1  # ticks per unit of u·(2h + u): attention over the context
    decode: int = 150_000  # ticks per sequence in a decode step

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CostModel":
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - fields
        if unknown:  # pragma: no cover - validate() rejects it
            raise ValueError(f"unknown cost model fields {sorted(unknown)}; known: {sorted(fields)}")
        model = cls(**{k: int(v) for k, v in data.items()})
        out_of_range = model.k0 < 1 or min(model.k1, model.k2, model.decode) < 0
        if out_of_range:  # pragma: no cover - validate() rejects it
            raise ValueError("cost model needs k0 >= 1 and k1, k2, decode >= 0")
        return model

    def prefill(self, uncached: int, cached: int) -> int:
        """Predicted cost of prefilling a request on its own: what policies order by."""
        return self.k0 + self.chunk(uncached, cached)

    def chunk(self, tokens: int, done: int) -> int:
        """Cost of ``tokens`` prefill tokens after ``done`` (step overhead not included)."""
        return self.k1 * tokens + self.k2 * tokens * (2 * done + tokens)

    def scaled(self, factor: int) -> "CostModel":
        return CostModel(self.k0 * factor, self.k1 * factor, self.k2 * factor,
                         self.decode * factor)
