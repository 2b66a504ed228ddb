"""Between a file someone else wrote and the first line of code under test.

``replay``, ``shrink``, ``bisect`` and the pytest regression items load cases from files that may
come from a stranger.  The loader (:mod:`fuzzkit.case`) makes sure a file is well-formed JSON of
bounded size; this module makes sure what it *asks for* is acceptable before anything runs:

* the target is a registered one and the implementation a registered one of it, unless the user
  named an outside one (:func:`fuzzkit.registry.implementation_named_by_file`);
* every input is within the target's declared resource limits (:mod:`fuzzkit.limits`), which the
  user -- not the file -- may raise;
* the target's own ``validate`` accepts every input (a file is not generated: a missing input
  would otherwise surface as a "crash of the reference" and be minimized as a finding);

and it chooses how a case runs: in this process under a time limit, or in an isolated child
process when the user asks for it or the recorded failure is a process death (crash, timeout,
oom) -- so that replaying a segfault gives a verdict instead of a dead replayer.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from fuzzkit import limits
from fuzzkit.case import Case
from fuzzkit.errors import CaseFileError
from fuzzkit.runner import Verdict, check_case
from fuzzkit.sequence import CaseSequence
from fuzzkit.target import Implementation, Inputs, Target

#: Recorded failure kinds that mean the process died or hung: replayed isolated by default.
PROCESS_DEATHS = ("crash", "timeout", "oom")
#: Address-space headroom (MiB) for an OOM finding replayed isolated without ``--memory-mb``.
DEFAULT_OOM_HEADROOM_MB = 4096

Checker = Callable[..., Verdict]


def steps_of(record: Case | CaseSequence) -> list[Inputs]:
    return list(record.steps) if isinstance(record, CaseSequence) else [record.inputs]


def admit(
    record: Case | CaseSequence, source: str, overrides: Mapping[str, int] | None = None
) -> Target:
    """The target of a loaded file, after checking every input against the target's limits and
    its ``validate``.  Raises :class:`CaseFileError` (one line) for a case that must not run."""
    from fuzzkit.registry import get_target

    target = get_target(record.target)
    steps = steps_of(record)
    for i, inputs in enumerate(steps):
        where = f" (step {i + 1} of {len(steps)})" if len(steps) > 1 else ""
        problem = limits.check(target.name, target.limits, inputs, overrides)
        if problem is not None:
            raise CaseFileError(f"{source}{where}: {problem}")
        problem = limits.validation_problem(target, inputs)
        if problem is not None:
            raise CaseFileError(f"{source}{where}: not a valid {target.name} case: {problem}")
    return target


def isolation(
    record: Case | CaseSequence, isolate: bool | None = None, memory_mb: int | None = None
) -> tuple[bool, int | None]:
    """Whether a file's cases run isolated, and with what memory headroom.

    ``isolate``: the user's ``--isolate``/``--no-isolate`` (None: isolated when the recorded
    failure is a process death, or when ``memory_mb`` asks for a limit).  ``memory_mb``: the
    user's ``--memory-mb``; an OOM finding replayed isolated gets a default headroom, so it
    reproduces as an ``oom`` verdict instead of exhausting the machine."""
    from fuzzkit.errors import UsageError

    failure = record.failure
    if memory_mb is not None:
        if isolate is False:
            raise UsageError("--memory-mb limits an isolated case process: drop --no-isolate")
        return True, memory_mb
    if isolate is None:
        isolate = failure is not None and failure.kind in PROCESS_DEATHS
    if isolate and failure is not None and failure.kind == "oom":
        return True, DEFAULT_OOM_HEADROOM_MB
    return isolate, None


@contextlib.contextmanager
def case_checker(
    target: Target,
    impl: Implementation,
    *,
    isolate: bool,
    case_timeout: float | None,
    memory_mb: int | None = None,
    mutants: Sequence[Any] = (),
) -> Iterator[Checker]:
    """A ``checker(target, impl, inputs, *, properties, timeout) -> Verdict`` that runs cases
    with ``case_timeout`` -- in this process (mutants applied around it), or in one isolated
    child process that keeps its state from case to case, as a sequence needs."""
    if not isolate:
        with contextlib.ExitStack() as stack:
            for mutant in mutants:
                stack.enter_context(mutant.applied())

            def in_process(
                t: Target,
                i: Implementation,
                inputs: Inputs,
                *,
                properties: bool = True,
                timeout: float | None = None,
                confirm: bool = True,
            ) -> Verdict:
                return check_case(
                    t,
                    i,
                    inputs,
                    properties=properties,
                    confirm=confirm,
                    timeout=timeout if timeout is not None else case_timeout,
                )

            yield in_process
        return
    if len(mutants) > 1:
        from fuzzkit.errors import UsageError

        raise UsageError(
            "an isolated replay applies at most one --mutant; drop --isolate or name one mutant"
        )
    from fuzzkit.isolation import IsolatedChecker, WorkerStartupError, target_source_spec

    spec = target_source_spec(target.name)
    preload = (spec.partition(":")[0],) if spec else ()
    with tempfile.TemporaryDirectory(prefix="fuzzkit-replay-") as inflight:
        checker = IsolatedChecker(
            target.name,
            impl.name,
            case_timeout=case_timeout,
            memory_mb=memory_mb,
            inflight_dir=Path(inflight),
            mutant=mutants[0].name if mutants else None,
            preload=preload,
        )
        try:

            def isolated(
                t: Target,
                i: Implementation,
                inputs: Inputs,
                *,
                properties: bool = True,
                timeout: float | None = None,
                confirm: bool = True,
            ) -> Verdict:
                try:
                    return checker(t, i, inputs, properties=properties, timeout=timeout)
                except WorkerStartupError as exc:
                    from fuzzkit.errors import UsageError

                    raise UsageError(str(exc)) from None

            yield isolated
        finally:
            checker.close()
