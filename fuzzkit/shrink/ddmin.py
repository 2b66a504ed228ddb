"""Delta debugging (Zeller's ddmin) and the case shrinker built on it.

Hypothesis shrinks the cases it generates itself; a case that came from anywhere else (a corpus
file, atheris bytes, a user's bug report) is shrunk here by dropping items from the target's
``reducible`` inputs — the steps of a program, the rows of an array — while the failure keeps
its signature.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from fuzzkit.case import Case
from fuzzkit.failure import Failure
from fuzzkit.shrink.hook import Minimization, Minimized, NotFailing, Trial, trial_for
from fuzzkit.target import Implementation, Inputs, Target

T = TypeVar("T")


def ddmin(items: Sequence[T], fails: Callable[[list[T]], bool]) -> list[T]:
    """A 1-minimal sublist of ``items`` for which ``fails`` still holds.

    ``fails(list(items))`` must be true.  Order is kept.  Results of ``fails`` are cached by the
    chosen indices, since a test can be expensive (a kernel launch, a compile).
    """
    cache: dict[tuple[int, ...], bool] = {}

    def test(indices: list[int]) -> bool:
        key = tuple(indices)
        if key not in cache:
            cache[key] = fails([items[i] for i in indices])
        return cache[key]

    current = list(range(len(items)))
    granularity = 2
    while len(current) >= 2:
        chunks = _split(current, granularity)
        reduced = False
        for chunk in chunks:  # try each subset
            if len(chunk) < len(current) and test(chunk):
                current, granularity, reduced = chunk, 2, True
                break
        if not reduced:
            for chunk in chunks:  # then each complement
                dropped = set(chunk)
                complement = [i for i in current if i not in dropped]
                if complement and test(complement):
                    current, granularity, reduced = complement, max(granularity - 1, 2), True
                    break
        if not reduced:
            if granularity >= len(current):
                break
            granularity = min(len(current), granularity * 2)
    if len(current) == 1 and test([]):
        current = []
    return [items[i] for i in current]


def _split(indices: list[int], parts: int) -> list[list[int]]:
    size, extra = divmod(len(indices), parts)
    out, start = [], 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        if end > start:
            out.append(indices[start:end])
        start = end
    return out


@dataclasses.dataclass
class ShrinkResult:
    case: Case
    tests: int
    before: dict[str, int]
    after: dict[str, int]


def _still_failing(
    still_fails: Callable[[Inputs], bool], inputs: Inputs, group: tuple[str, ...]
) -> Callable[[list[int]], bool]:
    """ddmin's test for one group of reducible inputs: keep these items, does it still fail?"""
    return lambda keep: still_fails(_take(inputs, group, keep))


def shrink_case(
    target: Target,
    impl: Implementation,
    case: Case,
    *,
    timeout: float | None = None,
    checker: Callable[..., Any] | None = None,
    until: float | None = None,
) -> ShrinkResult:
    """Shrink a failing case along the target's reducible inputs, keeping its signature.

    ``until`` (a ``time.monotonic()`` instant) ends the search early: every candidate after it
    counts as passing, so ddmin stops with the smallest failing case found so far.

    ``checker`` (same contract as :func:`fuzzkit.engines.hypothesis.fuzz`'s) replaces
    :func:`fuzzkit.runner.check_case`, e.g. to shrink a crash inside an isolated worker process.
    Raises :class:`~fuzzkit.shrink.hook.NotFailing` (a ValueError) when the case does not fail.
    """
    trial = trial_for(target, impl, timeout=timeout, checker=checker)
    return shrink_with(target, case, trial, until=until)


def shrink_with(
    target: Target, case: Case, trial: Trial, *, until: float | None = None
) -> ShrinkResult:
    """:func:`shrink_case` with candidates run by ``trial`` (see :mod:`fuzzkit.shrink.hook`)."""

    def check(candidate: Inputs, confirm: bool = True) -> Failure | None:
        return trial(candidate, confirm=confirm).failure

    first = check(case.inputs)
    if first is None:
        raise NotFailing("the case passes; there is nothing to shrink")
    signature = first.signature
    inputs = dict(case.inputs)
    tests = 0
    last_failure: list[Failure] = [first]

    def still_fails(candidate: Inputs) -> bool:
        nonlocal tests
        if until is not None and time.monotonic() > until:
            return False
        if target.validate is not None and target.validate(candidate) is not None:
            return False
        tests += 1
        failure = check(candidate, confirm=False)
        if failure is not None and failure.signature == signature:
            last_failure[0] = failure
            return True
        return False

    groups = [(g,) if isinstance(g, str) else tuple(g) for g in target.reducible]
    groups = [g for g in groups if all(k in inputs for k in g)]
    before = {k: _length(inputs[k]) for g in groups for k in g}
    changed = True
    while changed:  # a cut in one input can enable a cut in another: repeat to a fixpoint
        changed = False
        for group in groups:
            length = _length(inputs[group[0]])
            keep = ddmin(list(range(length)), _still_failing(still_fails, inputs, group))
            if len(keep) < length:
                inputs = _take(inputs, group, keep)
                changed = True
    final = check(inputs) or last_failure[0]
    shrunk = Case(
        target=case.target,
        implementation=case.implementation,
        inputs=inputs,
        seed=case.seed,
        failure=final,
        origin="shrink",
    )
    return ShrinkResult(shrunk, tests, before, {k: _length(inputs[k]) for k in before})


def by_ddmin(request: Minimization) -> Minimized:
    """The default ``Target.minimize`` hook: :func:`shrink_with` over ``Target.reducible``."""
    result = shrink_with(request.target, request.case, request.trial, until=request.until)
    sizes = ", ".join(f"{k}: {result.before[k]} -> {result.after[k]}" for k in result.before)
    failure = result.case.failure
    return Minimized(
        case=result.case,
        tests=result.tests,
        lines=[
            f"shrunk in {result.tests} tests ({sizes or 'nothing reducible'}); "
            f"{failure.signature if failure else ''}"
        ],
        details={"tests": result.tests, "before": result.before, "after": result.after},
    )


def _length(value: object) -> int:
    return int(value.shape[0]) if isinstance(value, np.ndarray) else len(value)  # type: ignore[arg-type]


def _take(inputs: Inputs, keys: Sequence[str], indices: list[int]) -> Inputs:
    out = dict(inputs)
    for key in keys:
        value = inputs[key]
        if isinstance(value, np.ndarray):
            out[key] = value[np.asarray(indices, dtype=np.int64)]
        else:
            out[key] = [value[i] for i in indices]
    return out
