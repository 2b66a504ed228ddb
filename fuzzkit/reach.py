"""Thresholds as data: the sizes where the code under test changes path, and sizes that land there.

Random sizes stay below every interesting edge of an optimized implementation: a kernel's second
tile, a block table's first growth, a heap's first compaction, a policy's queue-length cut-off.
A bug that lives past such an edge is unreachable for a strategy that never draws the size, however
strong the oracle.  So every implementation *declares* its edges as :class:`Threshold` records
(``Implementation.thresholds``; target-wide ones, such as a driver's, on ``Target.thresholds``),
and the target's strategy draws each named size with :func:`size`, which puts a stated share of
draws on ``t-1, t, t+1, 2t-1, 2t, 2t+1`` of every threshold of that size and a smaller share well
above them (up to the threshold's ``cap``, the largest size that still runs in about a second on
one core under the Triton interpreter).

The shares are stated once, here: :data:`BASE_SHARE` of the mode draws fall on the strategy's own
distribution, the rest on the boundaries and :data:`ABOVE_SHARE` above them.  Hypothesis favours
small integers, so the *measured* share of boundary sizes is what ``tests/test_reach.py`` checks
(at least a quarter); :func:`crossings` measures, for any target, which boundaries its strategy
reaches in its first few hundred cases, and every target has a test that all are crossed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from hypothesis import strategies as st

#: Mode draws ``k`` in ``0..99``: ``k < BASE_CUT`` -> the strategy's own size (Hypothesis shrinks
#: ``k`` towards 0, i.e. towards the plain distribution), ``k >= ABOVE_CUT`` -> well above a
#: threshold, otherwise one of a threshold's boundary values.  With Hypothesis's bias to small
#: integers this gives about 55 % plain, 37 % boundary and 7 % above (``tests/test_reach.py``).
BASE_CUT = 40
ABOVE_CUT = 92
BASE_SHARE = BASE_CUT / 100
ABOVE_SHARE = (100 - ABOVE_CUT) / 100
#: Offsets of the boundary values of a threshold ``t``: ``(multiple, delta)`` -> ``m*t + d``.
BOUNDARY = ((1, -1), (1, 0), (1, 1), (2, -1), (2, 0), (2, 1))


@dataclasses.dataclass(frozen=True)
class Threshold:
    """One size at which the code under test takes another path.

    ``size``  the name of the input size it applies to (a key of ``Target.sizes``, e.g. ``"n"``);
    ``value`` ``t``: the code changes path between ``t`` and ``t + 1`` (a tile of ``t`` rows:
              ``t + 1`` rows need a second program);
    ``what``  why: the kernel, table or policy and what changes there;
    ``cap``   the largest size worth drawing above it (runtime), or None for the strategy's max.
    """

    size: str
    value: int
    what: str
    cap: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.value, int) or self.value < 1:
            raise ValueError(
                f"threshold {self.what!r}: value must be a positive int, got {self.value!r}"
            )

    @property
    def name(self) -> str:
        return f"{self.size}={self.value} ({self.what})"

    def boundaries(self, lo: int = 0, hi: int | None = None) -> tuple[int, ...]:
        """``t-1, t, t+1, 2t-1, 2t, 2t+1`` inside ``[lo, hi]`` (and ``cap``), without repeats."""
        top = _top(self, hi)
        values = [m * self.value + d for m, d in BOUNDARY]
        return tuple(dict.fromkeys(v for v in values if lo <= v and (top is None or v <= top)))

    def required(self, lo: int = 0, hi: int | None = None) -> tuple[int, ...]:
        """The boundary values a strategy must reach: ``t-1, t, t+1`` (inside the range) and, if
        the range allows, one of ``2t-1, 2t, 2t+1`` (see :func:`crossings`)."""
        return tuple(v for v in self.boundaries(lo, hi) if v <= self.value + 1)


Thresholds = Sequence[Threshold] | Callable[[], Sequence[Threshold]]


@dataclasses.dataclass(frozen=True)
class Size:
    """How to find one named size in a case: ``measure(inputs)`` yields every occurrence (the row
    counts of several arrays, the lengths of several requests); ``lo`` is the smallest legal
    value (a threshold's ``t - 1`` below it is not required)."""

    measure: Callable[[Mapping[str, Any]], Iterable[int]]
    lo: int = 0


def as_size(spec: Size | Callable[[Mapping[str, Any]], Iterable[int]]) -> Size:
    return spec if isinstance(spec, Size) else Size(spec)


def resolve(thresholds: Thresholds | None) -> tuple[Threshold, ...]:
    """A declaration (a sequence, or a callable that computes one -- e.g. tile sizes that differ
    under the interpreter and natively) as a tuple."""
    if thresholds is None:
        return ()
    if callable(thresholds):
        thresholds = thresholds()
    out = tuple(thresholds)
    for t in out:
        if not isinstance(t, Threshold):
            raise TypeError(f"thresholds must be fuzzkit.reach.Threshold records, got {t!r}")
    return out


def of_size(thresholds: Iterable[Threshold], name: str) -> tuple[Threshold, ...]:
    return tuple(t for t in thresholds if t.size == name)


def largest(thresholds: Iterable[Threshold], name: str, default: int) -> int:
    """The largest ``name`` worth drawing: ``default`` (the strategy's plain range), or past the
    highest threshold of that size -- its ``cap``, or ``2t + 1`` where it has none."""
    return max(
        [default]
        + [t.cap if t.cap is not None else 2 * t.value + 1 for t in of_size(thresholds, name)]
    )


def _top(threshold: Threshold, hi: int | None) -> int | None:
    if threshold.cap is None:
        return hi
    return threshold.cap if hi is None else min(threshold.cap, hi)


def size(
    draw: Callable[[Any], Any],
    name: str,
    thresholds: Sequence[Threshold],
    *,
    lo: int,
    hi: int,
    base: st.SearchStrategy[int] | None = None,
) -> int:
    """Draw the size ``name``: the strategy's own ``base`` (default ``integers(lo, hi)``) in about
    half the draws, otherwise a boundary value of one of ``name``'s thresholds or a size well
    above one (up to its ``cap``), always inside ``[lo, hi]``.  ``hi`` is the largest size a case
    may have at all; ``base`` is the usual, cheap distribution (which may stop far below ``hi``).
    """
    plan = _size_plan(tuple(thresholds), name, lo, hi)
    if plan is None:
        return int(draw(st.integers(lo, hi) if base is None else base))
    mode = draw(_PERCENT)
    if mode < BASE_CUT:
        return int(draw(plan.base if base is None else base))
    k = draw(plan.which)
    if mode >= ABOVE_CUT and plan.above[k] is not None:
        return int(draw(plan.above[k]))
    return int(draw(plan.boundaries[k]))


_PERCENT = st.integers(0, 99)


@dataclasses.dataclass(frozen=True)
class _SizePlan:
    """The strategies :func:`size` draws from for one size and range, built once: a case draws
    dozens of sizes, and building strategies per draw cost a visible share of generation."""

    base: st.SearchStrategy[int]
    which: st.SearchStrategy[int]  # index of the threshold
    above: tuple[st.SearchStrategy[int] | None, ...]  # sizes well above each, if any
    boundaries: tuple[st.SearchStrategy[int], ...]


@functools.lru_cache(maxsize=4096)
def _size_plan(thresholds: tuple[Threshold, ...], name: str, lo: int, hi: int) -> _SizePlan | None:
    mine = [t for t in of_size(thresholds, name) if t.boundaries(lo, hi)]
    if not mine:
        return None
    above: list[st.SearchStrategy[int] | None] = []
    for threshold in mine:
        top = _top(threshold, hi)
        start = max(lo, 2 * threshold.value + 2)
        above.append(st.integers(start, top) if top is not None and top > start else None)
    return _SizePlan(
        base=st.integers(lo, hi),
        which=st.integers(0, len(mine) - 1),
        above=tuple(above),
        boundaries=tuple(st.sampled_from(t.boundaries(lo, hi)) for t in mine),
    )


def sizes(
    name: str,
    thresholds: Sequence[Threshold],
    *,
    lo: int,
    hi: int,
    base: st.SearchStrategy[int] | None = None,
) -> st.SearchStrategy[int]:
    """:func:`size` as a strategy."""

    @st.composite
    def _size(draw: Callable[[Any], Any]) -> int:
        return size(draw, name, thresholds, lo=lo, hi=hi, base=base)

    return _size()


# ------------------------------------------------------------------------------------ measuring


@dataclasses.dataclass
class Crossing:
    """What a strategy reached of one threshold: the boundary values seen, and how often."""

    threshold: Threshold
    required: tuple[int, ...]
    seen: dict[int, int]
    above: int  # cases with a size > 2t + 1
    at_double: int  # cases with a size in 2t-1 .. 2t+1
    cases: int

    @property
    def missing(self) -> list[int]:
        return [v for v in self.required if not self.seen.get(v)]

    @property
    def crossed(self) -> bool:
        """``t-1, t, t+1`` all reached, and the second multiple (``2t±1``) or beyond too, where
        the range allows it."""
        t = self.threshold
        double_possible = t.cap is None or t.cap >= 2 * t.value - 1
        return not self.missing and (not double_possible or self.at_double + self.above > 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.threshold.size,
            "value": self.threshold.value,
            "what": self.threshold.what,
            "required": list(self.required),
            "seen": {str(k): v for k, v in sorted(self.seen.items())},
            "at_double": self.at_double,
            "above": self.above,
            "cases": self.cases,
            "crossed": self.crossed,
        }


class ReachCounter:
    """Counts, case by case, which threshold boundaries the generated inputs land on.

    ``sizes`` maps a size name to a :class:`Size` (or just its ``measure`` function).
    """

    def __init__(self, thresholds: Sequence[Threshold], sizes: Mapping[str, Any]) -> None:
        self.thresholds = tuple(thresholds)
        self.sizes = {name: as_size(spec) for name, spec in sizes.items()}
        unknown = sorted({t.size for t in self.thresholds} - set(self.sizes))
        if unknown:
            raise ValueError(
                f"thresholds name sizes the target does not measure: {unknown} "
                f"(Target.sizes has {sorted(self.sizes)})"
            )
        self.cases = 0
        self._seen: list[dict[int, int]] = [{} for _ in self.thresholds]
        self._above = [0] * len(self.thresholds)
        self._double = [0] * len(self.thresholds)

    def add(self, inputs: Mapping[str, Any]) -> None:
        self.cases += 1
        measured: dict[str, set[int]] = {}
        for i, t in enumerate(self.thresholds):
            if t.size not in measured:
                try:
                    measured[t.size] = {int(v) for v in self.sizes[t.size].measure(inputs)}
                except Exception:  # noqa: BLE001 - an invalid case is judged elsewhere
                    measured[t.size] = set()
            values = measured[t.size]
            for v in t.boundaries(0, None):
                if v in values:
                    self._seen[i][v] = self._seen[i].get(v, 0) + 1
            if any(2 * t.value - 1 <= v <= 2 * t.value + 1 for v in values):
                self._double[i] += 1
            if any(v > 2 * t.value + 1 for v in values):
                self._above[i] += 1

    def crossings(self) -> list[Crossing]:
        return [
            Crossing(
                t,
                t.required(self.sizes[t.size].lo, None),
                dict(self._seen[i]),
                self._above[i],
                self._double[i],
                self.cases,
            )
            for i, t in enumerate(self.thresholds)
        ]


@contextlib.contextmanager
def without_local_constants() -> Iterator[None]:
    """Turn off Hypothesis's pool of constants found in the *loaded* local modules.

    Hypothesis draws about 5 % of its numbers from constants it finds in the project's modules
    that happen to be imported, so one seeded generation differs with what the process imported
    before (other test modules, their order under pytest-xdist, the machine's import paths).  A
    measurement of what a strategy reaches must depend on the strategy and the seed only; fuzzing
    itself keeps the pool (constants of the code under test are good guesses)."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - Hypothesis moved its internals
        yield
        return
    getter = getattr(providers, "_get_local_constants", None)
    pool = getattr(providers, "_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if getter is None or pool is None or cache is None:  # pragma: no cover - older Hypothesis
        yield
        return
    empty = type(pool)(
        integers=type(pool.integers)(),
        floats=type(pool.floats)(key=providers.float_to_int),
        bytes=type(pool.bytes)(),
        strings=type(pool.strings)(),
    )
    cache.cache.clear()
    providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        providers._get_local_constants = getter
        cache.cache.clear()


def generated(strategy: st.SearchStrategy[Any], cases: int, *, seed: int = 0) -> list[Any]:
    """The first ``cases`` values Hypothesis generates from ``strategy``: seeded, no database,
    generation only, no local-constant pool (:func:`without_local_constants`) -- the same list
    on every machine and in any test order, for measuring what a strategy reaches."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    out: list[Any] = []

    @hypothesis_seed(seed)
    @settings(
        max_examples=cases,
        phases=[Phase.generate],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: Any) -> None:
        out.append(value)

    with without_local_constants():
        collect()
    return out


def crossings(target: Any, impl: Any = None, *, cases: int = 300, seed: int = 0) -> list[Crossing]:
    """Generate ``cases`` inputs with ``target``'s strategy for ``impl`` (:func:`generated`) and
    report, per declared threshold, which boundaries it reached.
    """
    counter = ReachCounter(target.thresholds_for(impl), target.sizes)
    for inputs in generated(target.strategy_for(impl), cases, seed=seed):
        counter.add(inputs)
    return counter.crossings()


def assert_crossed(target: Any, impl: Any = None, *, cases: int = 300, seed: int = 0) -> None:
    """Fail (AssertionError naming every threshold and the boundaries it missed) unless the
    target's strategy crosses every declared threshold within ``cases`` cases."""
    result = crossings(target, impl, cases=cases, seed=seed)
    if not result:
        raise AssertionError(f"{target.name}: no thresholds declared")
    missed = [c for c in result if not c.crossed]
    if missed:
        lines = [
            f"{c.threshold.name}: missing {c.missing}, 2t±1 {c.at_double}, above "
            f"{c.above} in {c.cases} cases"
            for c in missed
        ]
        raise AssertionError(f"{target.name}: thresholds not crossed:\n" + "\n".join(lines))
