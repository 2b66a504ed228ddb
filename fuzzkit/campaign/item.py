"""``run_item``: fuzz one (target, implementation) for a share of the budget -- the one place
where an engine is called, findings are stored and events are written, whatever the backend.

A new failure is stored as it is first seen (``found``, a pending file), *before* shrinking it,
so a kill in the middle of shrinking leaves it on disk; the final case (``finding``) replaces it.
Shrinking is bounded by the engine to a share of the budget.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from fuzzkit.campaign.channel import Channel
from fuzzkit.campaign.model import WorkerSpec
from fuzzkit.case import Case
from fuzzkit.runner import Verdict
from fuzzkit.target import Implementation, Target


class Engine(Protocol):
    """Generates cases for one item until its budget is spent (hypothesis, atheris)."""

    def __call__(self, job: ItemJob) -> Any:
        """Run the item; returns a :class:`fuzzkit.engines.hypothesis.FuzzResult`."""
        ...


class Checker(Protocol):
    """Judges one case: in this process (:func:`fuzzkit.runner.check_case`) or in a child
    process (:class:`fuzzkit.isolation.IsolatedChecker`)."""

    def __call__(
        self,
        target: Target,
        impl: Implementation,
        inputs: Any,
        *,
        properties: bool = True,
        timeout: float | None = None,
    ) -> Verdict: ...


class ItemJob:
    """One item as the engine sees it: what to fuzz, for how long, and the callbacks that
    count cases and store findings."""

    def __init__(
        self,
        spec: WorkerSpec,
        target: Target,
        impl: Implementation,
        impl_spec: str,
        share: float,
        channel: Channel,
        meter: Any = None,
    ) -> None:
        self.spec = spec
        self.plan = spec.plan
        self.target = target
        self.impl = impl
        self.impl_spec = impl_spec
        self.share = share
        #: the seconds of the pass being run (``share`` sums the passes)
        self.pass_share = share
        self.channel = channel
        self.meter = meter
        self.checker: Checker | None = None
        self.started = time.monotonic()
        self._last_progress = 0.0
        self._pending: dict[str, str] = {}  # signature -> pending case path
        self._reported: set[str] = set()
        self.found_at: dict[str, dict[str, float]] = {}
        self.findings = 0
        self.cases = 0
        #: signatures this item claimed: its own repeats are counted by the engine, not "known"
        self.claimed_here: set[str] = set()
        # An item may be fuzzed in two passes (see :mod:`fuzzkit.campaign.worker`): the engine
        # counts cases and seconds per pass, the item's events count them over both.
        self.cases_before = 0
        self.seconds_before = 0.0
        self.chunks_before = 0
        #: the cases this pass may still generate (None: no limit; ``--max-cases`` otherwise)
        self.max_cases: int | None = self.plan.max_cases
        #: the engine's seen-set, shared by the passes so a second pass judges no repeat
        self.seen: Any = None

    def next_pass(self, share: float, max_cases: int | None) -> None:
        """Start another pass over the item with ``share`` more seconds."""
        self.share += share
        self.pass_share = share
        self.max_cases = max_cases
        self.started = time.monotonic()

    def close_pass(self, result: Any) -> None:
        self.cases_before += result.cases
        self.seconds_before += result.seconds
        self.chunks_before += len(getattr(result, "chunks", []) or [])

    # ---------------------------------------------------------------- callbacks of the engine

    def elapsed(self) -> float:
        """Seconds spent on this item, over its passes."""
        return self.seconds_before + time.monotonic() - self.started

    def on_case(self, n: int, final: bool = False) -> None:
        self.cases = self.cases_before + n
        now = time.monotonic()
        if self.meter is not None:
            self.meter.tick(force=final)
        if final or now - self._last_progress >= self.spec.heartbeat:
            self._last_progress = now
            self.channel.emit(
                "progress",
                target=self.target.name,
                impl=self.impl.name,
                cases=self.cases,
                elapsed=round(self.elapsed(), 3),
                share=round(self.share, 3),
            )

    def on_found(self, case: Case) -> None:
        """A failure with a new signature, as first seen: on disk before anything else."""
        failure = case.failure
        if failure is None or failure.signature in self._pending:
            return
        self.found_at.setdefault(
            failure.signature, {"seconds": round(self.elapsed(), 3), "cases": self.cases}
        )
        path = self.channel.save_case(case.dumps() + "\n", case.target, case.case_id, "pending")
        self._pending[failure.signature] = path
        self.channel.emit(
            "found",
            target=self.target.name,
            impl=self.impl.name,
            signature=failure.signature,
            kind=failure.kind,
            message=failure.message[:2000],
            case=path,
            case_id=case.case_id,
        )

    def on_finding(self, case: Case, sequence: Any = None) -> None:
        """A final finding: saved in the corpus, claimed for the run, logged."""
        failure = case.failure
        if failure is None or case.case_id in self._reported:
            return
        self._reported.add(case.case_id)
        path = self.channel.save_case(case.dumps() + "\n", case.target, case.case_id, "findings")
        if sequence is not None:
            self.channel.save_case(
                sequence.dumps() + "\n", case.target, sequence.case_id, "sequences"
            )
        inner = failure.signature.split(":", 1)[-1]  # state-dependent:/nondeterministic: X
        first = self.found_at.get(failure.signature) or self.found_at.get(inner) or {}
        event: dict[str, Any] = {
            "t": time.time(),
            "worker": self.channel.worker,
            "type": "finding",
            "target": self.target.name,
            "impl": self.impl.name,
            "signature": failure.signature,
            "kind": failure.kind,
            "message": failure.message,
            "case": path,
            "case_id": case.case_id,
            "origin": case.origin,
            "sequence": sequence.case_id if sequence is not None else None,
            "seconds_to_first_failure": first.get("seconds"),
            "cases_to_first_failure": first.get("cases"),
        }
        if self.plan.mutants:
            event["mutants"] = list(self.plan.mutants)
        if self.channel.claim(event):
            self.claimed_here.add(failure.signature)
            fields = {k: v for k, v in event.items() if k not in ("t", "worker", "type")}
            self.channel.emit("finding", **fields)
            self.findings += 1
        else:
            self.channel.emit(
                "duplicate",
                target=self.target.name,
                impl=self.impl.name,
                signature=failure.signature,
                case=path,
            )
        for signature in {failure.signature, failure.signature.split(":", 1)[-1]}:
            pending = self._pending.pop(signature, None)
            if pending is not None and pending != path:
                self.channel.discard_case(pending)


# -------------------------------------------------------------------------------- engines


def hypothesis_engine(job: ItemJob) -> Any:
    from fuzzkit.engines.hypothesis import fuzz

    steer = job.meter.novelty if job.meter is not None and job.plan.steer else None
    if job.seen is None:
        from fuzzkit.seen import SeenSet

        job.seen = SeenSet()
    return fuzz(
        job.target,
        job.impl,
        budget=job.pass_share,
        seed=job.spec.seed,
        profile=job.plan.profile,
        database_dir=example_database(job.plan),
        case_timeout=job.plan.case_timeout,
        on_case=job.on_case,
        checker=job.checker,
        known=_SkipFound(job.plan.known_signatures(), job.channel, job.claimed_here),
        confirm=_confirmer(job),
        on_found=job.on_found,
        on_finding=job.on_finding,
        max_findings=_findings_left(job),
        max_cases=job.max_cases,
        steer=steer,
        seen=job.seen,
        first_chunk=job.chunks_before,
    )


def _findings_left(job: ItemJob) -> int | None:
    if job.plan.max_findings is None:
        return None
    return max(1, job.plan.max_findings - job.findings)


def atheris_engine(job: ItemJob) -> Any:
    from fuzzkit.engines.atheris import fuzz_atheris

    return fuzz_atheris(
        job.target,
        job.impl,
        budget=job.share,
        seed=job.spec.seed,
        corpus_root=Path(job.plan.corpus),
        checker=job.checker,
        case_timeout=job.plan.case_timeout,
        preload=job.spec.preload,
        mutant=job.plan.mutants[0] if job.plan.mutants else None,
    )


ENGINES: dict[str, Engine] = {"hypothesis": hypothesis_engine, "atheris": atheris_engine}


def example_database(plan: Any) -> Path | None:
    """Where Hypothesis keeps the examples of ``--profile campaign``: beside the corpus, so a
    later run (any mode, any worker on this machine) starts from what earlier runs found."""
    if plan.profile != "campaign":
        return None
    return Path(plan.corpus) / ".hypothesis"


# --------------------------------------------------------------------------------- run_item


def run_item(job: ItemJob) -> Any:
    """Fuzz one item for ``job.share`` seconds; every result goes through ``job.channel``.

    Raises KeyboardInterrupt after storing everything when the engine was interrupted."""
    spec, plan, target, impl = job.spec, job.plan, job.target, job.impl
    channel, meter = job.channel, job.meter
    if meter is not None:
        from fuzzkit.registry import source_packages

        meter.pair(
            f"{target.name}/{impl.name}",
            target.coverage_sources(impl) or source_packages([target.name]),
        )
    job.on_case(0, final=True)
    with contextlib.ExitStack() as stack:
        if plan.isolate:
            from fuzzkit.isolation import IsolatedChecker

            job.checker = stack.enter_context(
                contextlib.closing(
                    IsolatedChecker(
                        target.name,
                        impl.name,
                        case_timeout=plan.case_timeout,
                        memory_mb=plan.memory_mb,
                        inflight_dir=Path(spec.run_dir) / "inflight",
                        preload=spec.preload,
                        mutant=plan.mutants[0] if plan.mutants else None,
                    )
                )
            )
        elif plan.engine != "atheris":
            for name in plan.mutants:
                stack.enter_context(target.mutant(name).applied())
        result = ENGINES[plan.engine](job)
    for signature, first in (getattr(result, "found_at", {}) or {}).items():
        job.found_at.setdefault(  # the engine counts from the start of this pass
            signature,
            {
                "seconds": round(job.seconds_before + first["seconds"], 3),
                "cases": job.cases_before + first["cases"],
            },
        )
    job.on_case(result.cases, final=True)
    found = list(getattr(result, "findings", None) or [])
    sequences = getattr(result, "sequences", None) or {}
    for finding in found:  # the ones not reported as they were found (atheris)
        job.on_finding(finding, sequences.get(finding.case_id))
    # Failures the engine chose not to report (past --max-findings): a pending file left on
    # disk means "the worker died before finishing this one", so these go.
    for path in job._pending.values():
        channel.discard_case(path)
    _emit_totals(job, result)
    if getattr(result, "interrupted", False):
        raise KeyboardInterrupt
    return result


def _emit_totals(job: ItemJob, result: Any) -> None:
    target, impl = job.target.name, job.impl.name
    if getattr(result, "operations", None) or getattr(result, "reach", None):
        job.channel.emit(
            "reach",
            target=target,
            impl=impl,
            operations=getattr(result, "operations", {}),
            reach=getattr(result, "reach", []),
        )
    for sig, count in (getattr(result, "other_signatures", None) or {}).items():
        job.channel.emit("other_signature", target=target, impl=impl, signature=sig, count=count)
    coverage = None
    if job.meter is not None:
        job.meter.tick(force=True)
        coverage = job.meter.report(f"{target}/{impl}")
    job.channel.emit(
        "item_done",
        target=target,
        impl=impl,
        cases=result.cases,
        seconds=round(result.seconds, 3),
        known_hits=dict(getattr(result, "known_hits", {}) or {}),
        unsupported=dict(getattr(result, "unsupported", {}) or {}),
        repeats=int(getattr(result, "repeats", 0) or 0),
        found_at=job.found_at,
        mutants=list(job.plan.mutants),
        coverage=coverage,
        interrupted=bool(getattr(result, "interrupted", False)),
    )


# ------------------------------------------------------------------------ what not to chase


class _SkipFound:
    """The signatures a worker does not chase: the user's accepted ones (``--known``) and those
    another worker of this run (or an earlier session of it) has claimed already -- shrinking a
    bug twice would cost the second worker its share of the budget."""

    def __init__(self, user_known: Any, channel: Channel, own: set[str]) -> None:
        self.user_known = user_known
        self.channel = channel
        self.own = own

    def match(self, target: str, impl: str, signature: str) -> Any:
        from fuzzkit.known import KnownSignature

        if self.user_known is not None:
            hit = self.user_known.match(target, impl, signature)
            if hit is not None:
                return hit
        if signature in self.own:
            return None
        inner = signature.removeprefix("nondeterministic:")
        for claimed in (signature, inner, f"state-dependent:{inner}", f"nondeterministic:{inner}"):
            if self.channel.claimed(target, impl, claimed):
                return KnownSignature(signature, "found by another worker of this run")
        return None


def _confirmer(job: ItemJob) -> Callable[..., Any] | None:
    """Fresh-process confirmation (state-dependent findings); minimizing a sequence may take a
    quarter of the item's share (10 s at least, 120 s at most)."""
    plan = job.plan
    if not plan.confirm or plan.isolate:
        return None
    from fuzzkit.fresh import FreshConfirmer, FreshContext
    from fuzzkit.isolation import target_source_spec

    spec = target_source_spec(job.target.name)
    preload = tuple(job.spec.preload) or ((spec.partition(":")[0],) if spec else ())
    return FreshConfirmer(
        FreshContext(
            target=job.target.name,
            implementation=job.impl_spec or job.impl.name,
            mutants=tuple(plan.mutants),
            preload=preload,
            target_spec=spec,
            case_timeout=plan.case_timeout,
            time_limit=max(10.0, min(120.0, job.share / 4)),
        )
    )
