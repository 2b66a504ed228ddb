"""The default engine: Hypothesis generates and shrinks, fuzzkit judges.

Hypothesis has no wall-clock budget, so a run is a sequence of ``@given`` *chunks* with seeds
derived from the run seed; each chunk is sized from the measured case rate so that the last one
ends near the budget.  Within a chunk, the first failure with a new signature fixes the bug being
chased: its signature is the only one that counts as "failing" while Hypothesis shrinks it, so
shrinking stays on the same bug instead of wandering to an easier one.  Then the run goes on: a
found signature is counted, never chased again, so one false alarm or known difference cannot
hide every other bug of the pair.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Flaky

from fuzzkit.case import Case
from fuzzkit.runner import Verdict, check_case
from fuzzkit.seen import SeenSet
from fuzzkit.shrink.hook import minimize
from fuzzkit.target import UNSUPPORTED, Implementation, Inputs, Target, count_unsupported

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
    #: The first finding (kept for callers that want one); every distinct one is in ``findings``.
    finding: Case | None = None
    seconds_to_first_failure: float | None = None
    cases_to_first_failure: int | None = None
    other_signatures: dict[str, int] = dataclasses.field(default_factory=dict)
    #: (Hypothesis seed, max_examples) of every @given chunk, in order: with these a run's
    #: generated inputs can be regenerated exactly (the overhead benchmark does).
    chunks: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    #: Every distinct finding of the run, one per signature, in the order they were found.
    findings: list[Case] = dataclasses.field(default_factory=list)
    #: Per finding signature: seconds and cases to its first occurrence.
    #: The run was stopped by Ctrl-C (SIGINT): every failure seen so far was kept, those not yet
    #: shrunk as found (origin ``interrupted``).
    interrupted: bool = False
    found_at: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    #: Failures whose signature the user accepted (``--known``), by signature: skipped, counted.
    known_hits: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Case ids of findings that passed in a fresh process, with the sequence of cases that
    #: replays them (a :class:`fuzzkit.sequence.CaseSequence`, or None if none was found).
    sequences: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Operation and ordered-pair counts of the generated cases (stateful targets).
    operations: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Which threshold boundaries the generated cases reached (see :mod:`fuzzkit.reach`).
    reach: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: Cases the implementation cannot express, by reason: turned away by its own strategy or
    #: raising :class:`~fuzzkit.target.Unsupported`; never counted in ``cases``.
    unsupported: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Generated cases equal to one judged earlier in the run (:mod:`fuzzkit.seen`): not judged
    #: again and never counted in ``cases``.
    repeats: int = 0

    @property
    def cases_per_second(self) -> float:
        return self.cases / self.seconds if self.seconds > 0 else 0.0


class _Found(Exception):
    """Raised into Hypothesis to mark the chased failure; carries nothing (state is outside)."""


class _FoundExpensive(BaseException):
    """A timeout: every shrink attempt would cost the whole case time limit (a hang shrinks at
    one attempt per limit), which would blow the campaign's budget.  A BaseException is not
    shrunk by Hypothesis: it stops the test at once and the case is kept as found."""


class _BudgetSpent(BaseException):
    """The budget ran out in the middle of a chunk: stop Hypothesis at once (a chunk sized from
    an earlier rate, or the fixed first chunk of a slow pair, must not overrun the budget)."""


class _ShrinkTimeUp(BaseException):
    """The chased failure's shrinking ran out of time: stop Hypothesis at once and keep the
    smallest failing case seen so far (a BaseException is not caught by Hypothesis)."""


#: How long shrinking one finding may run past the budget: a fraction of the budget, within
#: these bounds (seconds).  Shrinking earlier in the run counts against the budget itself, and
#: one finding shrinks for at most a quarter of the budget (or the grace, if longer).
SHRINK_GRACE = (2.0, 30.0)
#: The first chunk of a run, before any case rate is measured, is sized from the budget at this
#: many cases per second (within these bounds); the deadline stops a chunk in the middle anyway,
#: so a slow pair loses nothing, and a fast one does not pay for a new Hypothesis run every ten
#: cases (the fixed first chunk of 10 was all Inductor ever ran in a short run).
FIRST_CHUNK_RATE = 20.0
FIRST_CHUNK_BOUNDS = (10, 1000)
SHRINK_FRACTION = 0.2
OVERRUN_FRACTION = 0.05


def fuzz(
    target: Target,
    impl: Implementation,
    *,
    budget: float,
    seed: int = 0,
    profile: str = "campaign",
    database_dir: Path | None = DEFAULT_DATABASE,
    shrink: bool = True,
    properties: bool = True,
    case_timeout: float | None = None,
    on_case: Callable[[int], None] | None = None,
    checker: Callable[..., Verdict] | None = None,
    max_findings: int | None = None,
    known: Any | None = None,
    confirm: Callable[..., tuple[Case, Any]] | None = None,
    on_finding: Callable[[Case, Any], None] | None = None,
    on_found: Callable[[Case], None] | None = None,
    history: int = 64,
    steer: Callable[[], float] | None = None,
    max_cases: int | None = None,
    seen: SeenSet | None = None,
    first_chunk: int = 0,
) -> FuzzResult:
    """Fuzz ``impl`` against ``target``'s reference for about ``budget`` seconds (or until
    ``max_cases`` generated cases, whichever comes first).

    The run keeps going after a finding: each *new* signature is chased (Hypothesis shrinks it,
    keeping the signature), polished by ddmin, confirmed, handed to ``on_finding`` at once (so it
    is on disk before anything else can go wrong) and from then on counted, not chased again.
    ``max_findings`` stops the run after that many (``fuzzkit mutants`` stops at the first: it
    measures the time to detect).  ``known`` (a :class:`fuzzkit.known.KnownSignatures`) lists
    signatures the user accepted: counted in ``known_hits``, never chased.  Signatures seen only
    while another was being shrunk become findings at the end, polished by ddmin.

    ``on_found(case)`` sees each new signature's first failing case, before shrinking, so that
    a caller can store it at once (a kill while shrinking then loses only the shrinking).
    ``confirm(case, history, first) -> (case, sequence)`` re-runs a finding in a fresh process
    (see :mod:`fuzzkit.fresh`); ``history`` is the inputs of the cases that ran before it in this
    run (at most ``history`` of them), ``first`` the ``(inputs, history)`` of the signature's
    first occurrence, before shrinking.  ``steer()`` (e.g. :meth:`fuzzkit.branches.Meter.novelty`)
    scores each case for ``hypothesis.target``, so Hypothesis mutates the cases that reached new
    branches.  ``seen`` holds the fingerprints of cases judged already (a fresh set by default;
    pass one to share it between runs of the same item): a generated case equal to one of them is
    counted in ``repeats`` and not judged again.  ``first_chunk`` continues the chunk seeds of an
    earlier run of the same item and seed (the second pass of a worker) instead of replaying
    its cases.  ``checker(target, impl, inputs, *, properties,
    timeout) -> Verdict`` replaces :func:`~fuzzkit.runner.check_case` for every case, e.g. an
    :class:`~fuzzkit.isolation.IsolatedChecker` that runs cases in a child process.
    """
    from fuzzkit import reach
    from fuzzkit.program import OperationCounts

    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from {sorted(PROFILES)}")
    result = FuzzResult(target.name, impl.name, seed)
    unsupported_before = collections.Counter(UNSUPPORTED)
    options = dict(PROFILES[profile])
    if options["database"] == "default":
        # One directory per target and implementation: every chunk runs the same function, so
        # Hypothesis's own database key would not tell implementations apart.
        slot = database_dir / target.name / _safe_name(impl.name) if database_dir else None
        options["database"] = DirectoryBasedExampleDatabase(str(slot)) if slot else None
    phases = (
        [Phase.explicit, Phase.reuse, Phase.generate]
        + ([Phase.target] if steer else [])
        + ([Phase.shrink] if shrink else [])
    )
    strategy = target.strategy_for(impl)
    check = checker if checker is not None else check_case
    operations = OperationCounts()
    thresholds = target.thresholds_for(impl)
    reached = reach.ReachCounter(thresholds, target.sizes) if thresholds and target.sizes else None
    seen = SeenSet() if seen is None else seen
    recent: collections.deque[Inputs] = collections.deque(maxlen=max(1, history))
    others: collections.Counter[str] = collections.Counter()
    known_hits: collections.Counter[str] = collections.Counter()
    #: signature -> (inputs, failure, history) of its first occurrence, while not chased
    first_seen: dict[str, tuple[Inputs, Any, list[Inputs]]] = {}
    found: dict[str, Case] = {}
    chase: dict[str, Any] = {}
    start = time.monotonic()
    deadline = start + budget
    grace = min(max(SHRINK_GRACE[0], SHRINK_FRACTION * budget), SHRINK_GRACE[1])
    #: How far past the deadline a finding made at the very end may still be shrunk: a budget is a
    #: wall-clock promise (the unshrunk finding is kept whatever happens).
    overrun = OVERRUN_FRACTION * budget

    def shrink_until() -> float:
        """When shrinking (or polishing) the finding at hand must stop: after at most a quarter
        of the budget, so that one bug cannot eat the time the next one needs, and at most
        ``grace`` past the deadline."""
        now = time.monotonic()
        return min(now + max(grace, 0.25 * budget), max(deadline, now + min(grace, overrun)))

    def is_known(signature: str) -> bool:
        return known is not None and known.match(target.name, impl.name, signature) is not None

    def run_one(inputs: Inputs) -> None:
        if chase and time.monotonic() > chase["until"]:
            raise _ShrinkTimeUp()
        if not chase and max_cases is not None and result.cases >= max_cases:
            return  # libFuzzer's -runs: the generation budget is spent (shrinking may finish)
        if not chase and result.cases and time.monotonic() >= deadline:
            raise _BudgetSpent()
        # While a failure is being shrunk every attempt is judged: Hypothesis must see it fail.
        if not chase and seen.repeat(inputs):
            result.repeats += 1
            return
        result.cases += 1
        if on_case is not None:
            on_case(result.cases)
        if not chase:
            operations.add(target.operations(inputs))
            if reached is not None:
                reached.add(inputs)
        before = list(recent)
        recent.append(inputs)
        verdict = check(target, impl, inputs, properties=properties, timeout=case_timeout)
        if verdict.unsupported is not None:
            result.cases -= 1  # not run: counted apart, never as a pass
            count_unsupported(verdict.unsupported)
            return
        if steer is not None and not chase:
            hypothesis.target(steer(), label="new branches")
        failure = verdict.failure
        if failure is None:
            return
        signature = failure.signature
        if is_known(signature):
            known_hits[signature] += 1
            return
        if signature in found:
            others[signature] += 1
            return
        if signature not in result.found_at:
            result.found_at[signature] = {
                "seconds": round(time.monotonic() - start, 3),
                "cases": result.cases,
            }
            if on_found is not None:  # stored as first seen, before any shrinking
                on_found(as_case(inputs, failure, "unshrunk"))
        if not chase:
            # where the bug first showed, before shrinking: the generated cases before it are the
            # state a state-dependent bug needs (shrink attempts rarely recreate it)
            chase.update(signature=signature, until=shrink_until(), first=(inputs, before))
        if signature == chase["signature"]:
            chase.update(inputs=inputs, failure=failure, history=before)
            if failure.kind == "timeout":
                raise _FoundExpensive()
            raise _Found()
        others[signature] += 1
        first_seen.setdefault(signature, (inputs, failure, before))

    def as_case(inputs: Inputs, failure: Any, origin: str) -> Case:
        return Case(
            target=target.name,
            implementation=impl.name,
            inputs=inputs,
            seed=seed,
            failure=failure,
            origin=origin,
        )

    def finish(
        inputs: Inputs,
        failure: Any,
        before: list[Inputs],
        origin: str,
        first: tuple[Inputs, list[Inputs]] | None = None,
    ) -> None:
        case = as_case(inputs, failure, origin)
        if shrink and (target.reducible or target.minimize) and failure.kind != "timeout":
            case = _polish(target, impl, case, case_timeout, checker, until=shrink_until())
        sequence = None
        if confirm is not None:
            case, sequence = confirm(case, before, first or (inputs, before))
            if sequence is not None or (case.failure and case.failure.kind == "state-dependent"):
                result.sequences[case.case_id] = sequence
        found[failure.signature] = case
        result.findings.append(case)
        if result.finding is None:
            result.finding = case
            found_first = result.found_at.get(failure.signature, {})
            result.seconds_to_first_failure = found_first.get("seconds")
            cases = found_first.get("cases")
            result.cases_to_first_failure = int(cases) if cases is not None else None
        if on_finding is not None:
            on_finding(case, sequence)

    def enough() -> bool:
        return max_findings is not None and len(found) >= max_findings

    def _search() -> None:
        chunk, rate = first_chunk, None
        while not enough():
            remaining = deadline - time.monotonic()
            if remaining <= 0 and chunk > first_chunk:
                break
            if rate is None:
                examples = first_chunk_size(budget)
            else:
                examples = int(max(1, min(remaining * rate, 5000, max(20, rate * 5))))
            if max_cases is not None:
                if result.cases >= max_cases:
                    break
                # never a chunk of fewer than the first chunk's minimum: Hypothesis opens every
                # chunk with the simplest case, a repeat after the first chunk, so a chunk of
                # one would only repeat (run_one ignores cases past max_cases)
                examples = min(examples, max(max_cases - result.cases, FIRST_CHUNK_BOUNDS[0]))
            before_cases, before_time = result.cases, time.monotonic()
            chunk_seed = seed * 1_000_003 + chunk
            # seed first, settings last: ``hypothesis.seed`` switches the example database off
            # for the settings it finds, so ``--profile campaign`` would never keep an example
            test = hypothesis.seed(chunk_seed)(given(strategy)(run_one))
            test = settings(max_examples=examples, phases=phases, **options)(test)
            result.chunks.append((chunk_seed, examples))
            chase.clear()
            try:
                test()
            except (_Found, _FoundExpensive, _ShrinkTimeUp, _BudgetSpent, Flaky):
                # Flaky: the chased failure did not reproduce during Hypothesis's final replay; keep
                # what we saw last (check_case already labelled it if it is non-deterministic).
                pass
            chunk += 1
            if "failure" in chase:
                finish(
                    chase["inputs"],
                    chase["failure"],
                    chase["history"],
                    "hypothesis",
                    chase.get("first"),
                )
                chase.clear()
                continue  # a finding's chunk says nothing about the case rate
            spent = time.monotonic() - before_time
            done = result.cases - before_cases
            if done and spent > 0:
                rate = done / spent
            if done == 0:
                break  # the strategy is exhausted (tiny search spaces: only repeats left)
        # Signatures seen only while another was being shrunk: findings too, polished by ddmin.
        for signature, (inputs, failure, before) in first_seen.items():
            if enough():
                break
            if signature not in found:
                finish(inputs, failure, before, "hypothesis")

    def _keep_unfinished() -> None:
        """After Ctrl-C: every failure seen and not yet final becomes a finding as it stands
        (the chased one at its smallest so far), saved through ``on_finding`` like the others --
        a bug found must not be lost because shrinking or confirming it was interrupted."""
        pending: list[tuple[Inputs, Any]] = []
        if "failure" in chase:
            pending.append((chase["inputs"], chase["failure"]))
        pending.extend((inputs, failure) for inputs, failure, _ in first_seen.values())
        for inputs, failure in pending:
            if failure.signature in found:
                continue
            case = as_case(inputs, failure, "interrupted")
            found[failure.signature] = case
            result.findings.append(case)
            if result.finding is None:
                result.finding = case
            if on_finding is not None:
                on_finding(case, None)

    try:
        _search()
    except KeyboardInterrupt:
        result.interrupted = True
        _keep_unfinished()
    result.seconds = time.monotonic() - start
    result.other_signatures = {s: n for s, n in others.items()}
    result.known_hits = dict(known_hits)
    result.operations = operations.to_json() if operations.cases else {}
    result.reach = [c.to_json() for c in reached.crossings()] if reached is not None else []
    result.unsupported = dict(collections.Counter(UNSUPPORTED) - unsupported_before)
    return result


def first_chunk_size(budget: float) -> int:
    """How many examples the first chunk of a run of ``budget`` seconds asks for."""
    low, high = FIRST_CHUNK_BOUNDS
    return int(min(high, max(low, budget * FIRST_CHUNK_RATE)))


def _polish(
    target: Target,
    impl: Implementation,
    finding: Case,
    case_timeout: float | None,
    checker: Callable[..., Verdict] | None = None,
    until: float | None = None,
) -> Case:
    """The target's minimize hook (ddmin by default) after Hypothesis: Hypothesis shrinks the
    *choices* behind a case, so structure its strategy imposes (a prefill drawn as
    add+allocate+write+publish) survives; deleting single program steps or array rows directly
    removes what the failure does not need."""
    try:
        shrunk = minimize(
            target, impl, finding, timeout=case_timeout, checker=checker, until=until
        ).case
    except ValueError:  # did not reproduce outside Hypothesis: keep what Hypothesis reported
        return finding
    return dataclasses.replace(shrunk, seed=finding.seed, origin="hypothesis+ddmin")


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
