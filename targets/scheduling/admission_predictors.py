"""Peak predictors for session admission control: what a session will hold at its largest.

Basin (:mod:`.admission`) reserves a session's predicted lifetime peak context in KV blocks when
it arrives; these predictors make the prediction (the simulator itself knows its workload and
passes the true peak, which is :class:`OraclePredictor`'s answer).  Kept apart from the
controllers: the simulator runs none of them, so they are not part of what a scheduling run
measures.
"""

from __future__ import annotations

import collections
import inspect
import math
from fractions import Fraction
from typing import Any, Mapping, Protocol

from fuzzkit.targets.scheduling.admission import _fraction, _int


class Predictor(Protocol):
    """Predicts a session's lifetime peak context in KV blocks when it arrives; learns the true
    peak when it ends (``observe``)."""

    def predict(self, sid: int) -> int: ...

    def observe(self, sid: int, peak: int) -> None: ...


class OraclePredictor:
    """The true peak, given up front (the simulator knows its workload): the upper bound on what
    prediction can buy, and the setting where "no preemption when predictions hold" applies."""

    def __init__(self, peaks: Mapping[int, int]) -> None:
        self.peaks = dict(peaks)

    def predict(self, sid: int) -> int:
        return self.peaks[sid]

    def observe(self, sid: int, peak: int) -> None:
        """Nothing to learn."""


class _Window:
    """The last ``window`` observed peaks; ``default`` until the first one arrives."""

    def __init__(self, window: int, default: int) -> None:
        self.window, self.default = _int(window, "window"), _int(default, "default")
        if self.window < 1 or self.default < 0:
            raise ValueError("need window >= 1 and default >= 0")
        self.seen: collections.deque[int] = collections.deque(maxlen=self.window)

    def observe(self, sid: int, peak: int) -> None:
        self.seen.append(_int(peak, "peak"))


class MeanPredictor(_Window):
    """Running mean of the last ``window`` finished sessions' peaks, rounded up (a reservation
    is whole blocks, and rounding down would under-reserve the typical session)."""

    def __init__(self, window: int = 64, default: int = 64) -> None:
        super().__init__(window, default)

    def predict(self, sid: int) -> int:
        if not self.seen:
            return self.default
        return -(-sum(self.seen) // len(self.seen))


class QuantilePredictor(_Window):
    """The empirical ``q``-quantile of the last ``window`` peaks: the smallest observed peak that
    at least a fraction ``q`` of them do not exceed (``q = 1``: the window's maximum).  Exact:
    the index is ``ceil(q * n) - 1`` in Fraction arithmetic."""

    def __init__(self, q: Any = Fraction(9, 10), window: int = 64, default: int = 64) -> None:
        super().__init__(window, default)
        self.q = _fraction(q, "q")
        if not 0 <= self.q <= 1:
            raise ValueError(f"q must be in [0, 1], got {self.q}")

    def predict(self, sid: int) -> int:
        if not self.seen:
            return self.default
        ordered = sorted(self.seen)
        return ordered[max(0, math.ceil(self.q * len(ordered)) - 1)]


def make_predictor(name: str, **params: Any) -> Predictor:
    """``oracle`` (needs ``peaks``), ``mean`` or ``quantile`` by name; ValueError otherwise."""
    classes: dict[str, type] = {"oracle": OraclePredictor, "mean": MeanPredictor,
                                "quantile": QuantilePredictor}
    cls = classes.get(name)
    if cls is None:
        raise ValueError(f"unknown peak predictor {name!r}; known: {', '.join(classes)}")
    allowed = list(inspect.signature(cls).parameters)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"peak predictor {name!r} got unknown parameter(s) {', '.join(unknown)};"
                         f" it takes {', '.join(allowed)}")
    return cls(**params)


def peak_blocks(peak_tokens: int, block_size: int) -> int:
    """A session's peak context in whole KV blocks (what reservations are counted in)."""
    return -(-peak_tokens // block_size)
