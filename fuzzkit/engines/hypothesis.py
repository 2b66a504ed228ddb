"""The default engine: Hypothesis generates and shrinks, fuzzkit judges.

Hypothesis has no wall-clock budget, so a run is a sequence of ``@given`` *chunks* with seeds
derived from the run seed; each chunk is sized from the measured case rate so that the last one
ends near the budget.  The first failure fixes the bug being chased: its signature is the only
one that counts as "failing" afterwards, so shrinking stays on the same bug instead of wandering
to an easier one (other signatures are counted and reported, not shrunk).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Optional

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Flaky

from fuzzkit.case import Case
from fuzzkit.runner import Verdict, check_case
from fuzzkit.shrink.ddmin import shrink_case
from fuzzkit.target import Implementation, Inputs, Target

DEFAULT_DATABASE = Path(".fuzzkit") / "hypothesis"

_COMMON = dict(
    deadline=None,
    verbosity=Verbosity.quiet,
    print_blob=False,
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
)
#: ``ci``: quick, derandomized, no database — a pull request sees the same cases every time.
#: ``campaign``: random from the run seed, remembers failing examples under ``.fuzzkit/``.
PROFILES: dict[str, dict[str, Any]] = {
    "ci": dict(_COMMON, derandomize=False, database=None),
    "campaign": dict(_COMMON, derandomize=False, database="default"),
}


@dataclasses.dataclass
class FuzzResult:
    target: str
    implementation: str
    seed: int
    cases: int = 0
    seconds: float = 0.0
    finding: Optional[Case] = None
    seconds_to_first_failure: Optional[float] = None
    cases_to_first_failure: Optional[int] = None
    other_signatures: dict[str, int] = dataclasses.field(default_factory=dict)
    #: (Hypothesis seed, max_examples) of every @given chunk, in order: with these a run's
    #: generated inputs can be regenerated exactly (the overhead benchmark does).
    chunks: list[tuple[int, int]] = dataclasses.field(default_factory=list)

    @property
    def cases_per_second(self) -> float:
        return self.cases / self.seconds if self.seconds > 0 else 0.0


class _Found(Exception):
    """Raised into Hypothesis to mark the chased failure; carries nothing (state is outside)."""


class _FoundExpensive(BaseException):
    """A timeout: every shrink attempt would cost the whole case time limit (a hang shrinks at
    one attempt per limit), which would blow the campaign's budget.  A BaseException is not
    shrunk by Hypothesis: it stops the test at once and the case is kept as found."""


def fuzz(
    target: Target,
    impl: Implementation,
    *,
    budget: float,
    seed: int = 0,
    profile: str = "campaign",
    database_dir: Optional[Path] = DEFAULT_DATABASE,
    shrink: bool = True,
    properties: bool = True,
    case_timeout: Optional[float] = None,
    on_case: Optional[Callable[[int], None]] = None,
    checker: Optional[Callable[..., Verdict]] = None,
) -> FuzzResult:
    """Fuzz ``impl`` against ``target``'s reference for about ``budget`` seconds.

    Stops at the first failure (then shrinks it, which may take longer than the budget).
    ``checker(target, impl, inputs, *, properties, timeout) -> Verdict`` replaces
    :func:`~fuzzkit.runner.check_case` for every case, e.g. an
    :class:`~fuzzkit.isolation.IsolatedChecker` that runs cases in a child process.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from {sorted(PROFILES)}")
    result = FuzzResult(target.name, impl.name, seed)
    options = dict(PROFILES[profile])
    if options["database"] == "default":
        # One directory per target and implementation: every chunk runs the same function, so
        # Hypothesis's own database key would not tell implementations apart.
        slot = database_dir / target.name / _safe_name(impl.name) if database_dir else None
        options["database"] = DirectoryBasedExampleDatabase(str(slot)) if slot else None
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    strategy = target.strategy()
    chased: dict[str, Any] = {"signature": None, "inputs": None, "failure": None}
    others: collections.Counter[str] = collections.Counter()
    check = checker if checker is not None else check_case
    start = time.monotonic()

    def run_one(inputs: Inputs) -> None:
        result.cases += 1
        if on_case is not None:
            on_case(result.cases)
        verdict = check(target, impl, inputs, properties=properties, timeout=case_timeout)
        failure = verdict.failure
        if failure is None:
            return
        if chased["signature"] is None:
            chased["signature"] = failure.signature
            result.seconds_to_first_failure = time.monotonic() - start
            result.cases_to_first_failure = result.cases
        if failure.signature == chased["signature"]:
            chased["inputs"], chased["failure"] = inputs, failure
            if failure.kind == "timeout":
                raise _FoundExpensive()
            raise _Found()
        others[failure.signature] += 1

    chunk, rate = 0, None
    while True:
        elapsed = time.monotonic() - start
        remaining = budget - elapsed
        if remaining <= 0 and chunk > 0:
            break
        if rate is None:
            examples = 10
        else:
            examples = int(max(1, min(remaining * rate, 5000, max(20, rate * 5))))
        before_cases, before_time = result.cases, time.monotonic()
        test = given(strategy)(run_one)
        test = settings(max_examples=examples, phases=phases, **options)(test)
        chunk_seed = seed * 1_000_003 + chunk
        test = hypothesis.seed(chunk_seed)(test)
        result.chunks.append((chunk_seed, examples))
        try:
            test()
        except (_Found, _FoundExpensive):
            break
        except Flaky:
            # The chased failure did not reproduce during Hypothesis's final replay: keep what we
            # saw last; check_case already labelled it if it is non-deterministic.
            break
        chunk += 1
        spent = time.monotonic() - before_time
        done = result.cases - before_cases
        if done and spent > 0:
            rate = done / spent
        if done == 0:
            break  # the strategy is exhausted (tiny search spaces)
    result.seconds = time.monotonic() - start
    result.other_signatures = dict(others)
    if chased["failure"] is not None:
        result.finding = Case(
            target=target.name,
            implementation=impl.name,
            inputs=chased["inputs"],
            seed=seed,
            failure=chased["failure"],
            origin="hypothesis",
        )
        if shrink and target.reducible and chased["failure"].kind != "timeout":
            result.finding = _polish(target, impl, result.finding, case_timeout, checker)
    return result


def _polish(target: Target, impl: Implementation, finding: Case,
            case_timeout: Optional[float],
            checker: Optional[Callable[..., Verdict]] = None) -> Case:
    """ddmin after Hypothesis: Hypothesis shrinks the *choices* behind a case, so structure its
    strategy imposes (a prefill drawn as add+allocate+write+publish) survives; deleting single
    program steps or array rows directly removes what the failure does not need."""
    try:
        shrunk = shrink_case(target, impl, finding, timeout=case_timeout, checker=checker).case
    except ValueError:  # did not reproduce outside Hypothesis: keep what Hypothesis reported
        return finding
    return dataclasses.replace(shrunk, seed=finding.seed, origin="hypothesis+ddmin")


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
