"""Mutation testing of fuzzkit itself: every shipped mutant must be caught.

An undetected mutant means an oracle or property is too weak (or the strategy never reaches the
inputs where the bug shows) — a defect of fuzzkit, reported as such.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fuzzkit.case import Case
from fuzzkit.engines.hypothesis import fuzz
from fuzzkit.runner import check_case
from fuzzkit.target import Mutant, Target


@dataclasses.dataclass
class MutantResult:
    target: str
    mutant: str
    implementation: str
    bug_class: str
    citation: str
    detected: bool
    seconds: float | None
    signature: str | None
    cases: int
    #: The failure's human message (targets with a ``localize`` hook name the culprit in it).
    message: str | None = None
    skipped: str | None = None
    #: With ``shrink``: the length of each reducible input of the minimized case.
    minimized: dict[str, int] | None = None
    finding: Case | None = dataclasses.field(default=None, repr=False)
    #: For a state-dependent finding: the case sequence that replays it (or None).
    sequence: Any | None = dataclasses.field(default=None, repr=False)
    #: The signature of the search's finding when it fails on the implementation *without*
    #: the mutant too: a defect of the implementation itself, so it does not count as the
    #: mutant detected (accept it with ``known`` to search past it).  None otherwise.
    clean_failure: str | None = None

    def to_json(self) -> dict[str, object]:
        row = dataclasses.asdict(self)
        row.pop("finding")
        row.pop("sequence")
        row["sequence_steps"] = len(self.sequence.steps) if self.sequence is not None else None
        return row


def run_mutant(
    target: Target,
    mutant: Mutant,
    *,
    budget: float,
    seed: int = 0,
    shrink: bool = False,
    confirm: bool = False,
    max_cases: int | None = None,
    known: Any | None = None,
) -> MutantResult:
    """Fuzz the mutated implementation until the first failure or the budget runs out.

    No example database: this measures how fast the *search* finds the bug, from a fixed seed,
    so the table is reproducible.  ``shrink`` minimizes the finding (for saving it as a
    regression case: it passes on the real implementation and fails if the bug comes back).
    ``confirm`` replays the finding in a fresh process with the mutant applied there too: a
    mutant whose bug needs state from earlier cases is reported ``state-dependent``, with the
    sequence that replays it.  ``max_cases`` also stops the run after that many generated
    cases: a test bounded by cases rather than seconds searches the same cases on a slow or
    loaded machine as on a fast one.

    A mutant counts as detected only when its finding passes on the implementation without the
    mutant: the search can reach a defect of the implementation itself first (the compiler
    target's ATen baddbmm defect did, under a comparison mutant), and such a finding says
    nothing about the mutant -- saved as a regression it would fail on the real code forever.
    It is reported in ``clean_failure``; ``known`` (a :class:`fuzzkit.known.KnownSignatures`)
    accepts such signatures so the search goes past them.
    """
    impl = target.implementation(mutant.implementation)
    base: dict[str, Any] = dict(
        target=target.name,
        mutant=mutant.name,
        implementation=impl.name,
        bug_class=mutant.bug_class,
        citation=mutant.citation,
    )
    reason = impl.unavailable()
    if reason:
        return MutantResult(
            **base, detected=False, seconds=None, signature=None, cases=0, skipped=reason
        )
    confirmer = None
    if confirm:
        from fuzzkit.fresh import FreshConfirmer, FreshContext
        from fuzzkit.isolation import target_source_spec

        spec = target_source_spec(target.name)
        confirmer = FreshConfirmer(
            FreshContext(
                target.name,
                impl.name,
                mutants=(mutant.name,),
                target_spec=spec,
                preload=(spec.partition(":")[0],) if spec else (),
            )
        )
    with mutant.applied():
        result = fuzz(
            target,
            impl,
            budget=budget,
            seed=seed,
            profile="ci",
            database_dir=None,
            shrink=shrink,
            max_findings=1,
            confirm=confirmer,
            max_cases=max_cases,
            known=known,
        )
    finding = result.finding
    if finding is not None:
        clean = check_case(target, impl, finding.inputs).failure
        if clean is not None:
            note = (
                f"the finding fails without the mutant too ({clean.signature}): a defect of "
                f"{impl.name} itself, not the mutant's; accept it with --known to search past it"
            )
            return MutantResult(
                **base,
                detected=False,
                seconds=None,
                signature=None,
                cases=result.cases,
                message=note,
                finding=finding,
                clean_failure=clean.signature,
            )
    if finding is not None:
        finding = dataclasses.replace(finding, origin=f"mutant:{mutant.name}")
    failure = finding.failure if finding else None
    sequence = result.sequences.get(result.finding.case_id) if result.finding else None
    if sequence is not None:
        sequence = dataclasses.replace(sequence, origin=f"mutant:{mutant.name}")
    return MutantResult(
        **base,
        detected=failure is not None,
        seconds=result.seconds_to_first_failure,
        signature=failure.signature if failure else None,
        cases=result.cases,
        message=failure.message if failure else None,
        minimized=_sizes(target, finding) if shrink and finding is not None else None,
        finding=finding,
        sequence=sequence,
    )


def _sizes(target: Target, case: Case) -> dict[str, int]:
    keys = [
        k for group in target.reducible for k in ((group,) if isinstance(group, str) else group)
    ]
    return {k: len(case.inputs[k]) for k in keys if k in case.inputs}
