"""The contract of a target's minimization hooks, and the one function that runs ``minimize``.

A target knows best what makes its failing cases smaller: ddmin over independent rows or
program steps suits most (the default), a compiler graph is better cut by bisecting to the first
diverging node.  So minimization is a hook on :class:`~fuzzkit.target.Target`:

* ``Target.minimize`` -- what ``fuzzkit shrink`` runs (and what the engines should run after a
  finding); None means ddmin over ``Target.reducible`` (:func:`fuzzkit.shrink.ddmin.by_ddmin`);
* ``Target.bisect`` -- a target-specific search for *where* a case goes wrong, run by
  ``fuzzkit bisect``; None means the target has no bisection.

Both are a :data:`Minimizer`: a :class:`Minimization` in, a :class:`Minimized` out.  A hook never
sees the checker plumbing: it runs candidates through :attr:`Minimization.trial`, which already
knows the implementation, the case timeout, any mutant and whether cases run in this process or
an isolated worker; so one hook works the same in every mode.  A hook signals "nothing to do"
with :class:`NotFailing` (the case passes) or :class:`CannotMinimize` (not a case it handles);
any other exception is a bug.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from fuzzkit.case import Case

if TYPE_CHECKING:
    from fuzzkit.runner import Verdict
    from fuzzkit.target import Implementation, Inputs, Target


class CannotMinimize(ValueError):
    """The hook does not apply to this case (e.g. not a graph); the message is one line."""


class NotFailing(CannotMinimize):
    """The case passes: there is nothing to minimize."""


class Trial(Protocol):
    """Runs the implementation under test on candidate inputs and judges them.

    ``properties``: also check the target's properties (False: the oracle only, e.g. when a
    search compares divergences); ``confirm``: re-run a failure to flag nondeterminism."""

    def __call__(
        self, inputs: Inputs, *, properties: bool = True, confirm: bool = False
    ) -> Verdict: ...


@dataclasses.dataclass(frozen=True)
class Minimization:
    """What a hook is given: the failing ``case`` of ``target``, run with ``implementation``
    through ``trial``; ``until`` (a ``time.monotonic()`` instant, or None) is when to stop and
    return the smallest failing case found so far."""

    target: Target
    implementation: Implementation
    case: Case
    trial: Trial
    until: float | None = None

    def expired(self) -> bool:
        return self.until is not None and time.monotonic() > self.until


#: Files a hook writes beside the saved minimized case (e.g. a standalone repro script):
#: ``(saved case, its path) -> {label: path}``.
Companions = Callable[[Case, Path], dict[str, Path]]


@dataclasses.dataclass
class Minimized:
    """What a hook returns.

    ``case``: the smaller failing case (its ``failure`` the one it fails with, ``origin`` the
    hook's name); ``tests``: implementation runs it took; ``lines``: what it found, for a person
    (printed as they are); ``details``: the same for ``--json``; ``companions``: files to write
    once the case is saved; ``reproduced``: False when the final case did not fail again.
    """

    case: Case
    tests: int
    lines: list[str] = dataclasses.field(default_factory=list)
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    companions: Companions | None = None
    reproduced: bool = True


Minimizer = Callable[[Minimization], Minimized]


def trial_for(
    target: Target,
    impl: Implementation,
    *,
    timeout: float | None = None,
    checker: Callable[..., Any] | None = None,
) -> Trial:
    """The :class:`Trial` of ``impl``: :func:`fuzzkit.runner.check_case` in this process, or
    ``checker`` (the contract of :func:`fuzzkit.admission.case_checker`'s, e.g. an isolated
    worker, which confirms nothing itself)."""
    from fuzzkit.runner import check_case

    def run(inputs: Inputs, *, properties: bool = True, confirm: bool = False) -> Verdict:
        if checker is None:
            return check_case(
                target, impl, inputs, properties=properties, confirm=confirm, timeout=timeout
            )
        verdict: Verdict = checker(target, impl, inputs, properties=properties, timeout=timeout)
        return verdict

    return run


def minimize(
    target: Target,
    impl: Implementation,
    case: Case,
    *,
    timeout: float | None = None,
    checker: Callable[..., Any] | None = None,
    until: float | None = None,
) -> Minimized:
    """Minimize a failing ``case`` with the target's ``minimize`` hook (ddmin over
    ``reducible`` when it has none).  Raises :class:`NotFailing` when the case passes and
    :class:`CannotMinimize` when the hook does not apply."""
    from fuzzkit.shrink.ddmin import by_ddmin

    hook: Minimizer = target.minimize if target.minimize is not None else by_ddmin
    request = Minimization(
        target, impl, case, trial_for(target, impl, timeout=timeout, checker=checker), until
    )
    return hook(request)
