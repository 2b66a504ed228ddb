"""``fuzzkit corpus merge``: keep the fewest cases that cover what a pile of cases covers.

Like libFuzzer's ``-merge=1``: every case file under the sources is loaded as untrusted input
(bounded, validated, admitted -- the path ``replay`` takes; a refused file costs one line and is
skipped), replayed with coverage.py measuring the code under test of its target, and reduced to
*features*: the arcs it ran and, if it failed, its failure signature.  A corpus grows by
appending; merging it keeps it fast to replay, without losing a branch or a bug.  A case
sequence counts as one case: the arcs of all its steps, the failure of its last.

Selection, deterministic for the same files (:func:`select`):

1. cases already in the destination are kept, and what they cover counts as covered;
2. every failure signature not yet covered keeps its smallest case;
3. the rest are visited smallest first (size = canonical JSON length, ties by content hash) and
   kept when they run an arc no kept case runs;
4. kept cases made redundant by later ones are dropped again, largest first.

A case recorded as a crash, timeout or OOM runs in a child process (as ``replay`` runs it),
where coverage is not measured: kept by its signature if it still fails, kept outright if it
passes (what it covers is unknown).

The destination is a flat directory of case files (``DST/<id>.json``), the layout of one corpus
kind folder such as ``corpus/quant/seeds``; files are written atomically, re-encoded from the
validated record (never copied byte for byte).

Arcs that only run when a module is imported are not features: which case happens to import a
module first is an accident of order, and would make the result depend on what ran before.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from fuzzkit.errors import FuzzkitError

#: A coverage feature: (target, file, (from line, to line)) -- an arc as coverage.py records it.
Feature = tuple[str, str, Any]
#: The "file" of the one feature a passing case run in a child process gets: its own id.
ISOLATED = "<isolated>"


@dataclasses.dataclass(frozen=True)
class Measured:
    """One case file reduced to what a merge compares."""

    path: Path
    record: Any  # a Case or a CaseSequence
    size: int
    case_id: str
    arcs: frozenset[Feature]
    #: (target, implementation, signature) of the failure it shows now, or None if it passes.
    signature: tuple[str, str, str] | None

    @property
    def order(self) -> tuple[int, str]:
        return (self.size, self.case_id)


@dataclasses.dataclass
class MergeResult:
    kept: list[Measured]  # destination cases first, then the added ones
    added: list[Path]
    considered: int  # source cases measured
    refused: list[str]  # one line per refused file
    skipped: int  # source cases of another target than --target

    @property
    def arcs(self) -> int:
        measured = frozenset().union(*(m.arcs for m in self.kept))
        return sum(1 for _, file, _ in measured if file != ISOLATED)

    @property
    def signatures(self) -> int:
        return len({m.signature for m in self.kept if m.signature is not None})

    def line(self) -> str:
        """The one summary line the command prints."""
        skipped = f", {self.skipped} of another target skipped" if self.skipped else ""
        return (
            f"kept {len(self.added)} of {self.considered} case(s) "
            f"({self.arcs} arcs, {self.signatures} signature(s), "
            f"{len(self.refused)} refused{skipped})"
        )


def select(existing: Sequence[Measured], candidates: Sequence[Measured]) -> list[Measured]:
    """The candidates to add to ``existing`` (see the module docstring), in (size, id) order."""
    covered: set[Feature] = set().union(*(m.arcs for m in existing))
    signatures = {m.signature for m in existing if m.signature is not None}
    known_ids = {m.case_id for m in existing}
    ordered = sorted(
        {m.case_id: m for m in candidates if m.case_id not in known_ids}.values(),
        key=lambda m: m.order,
    )
    chosen: dict[str, Measured] = {}
    for m in ordered:  # smallest case of each new signature
        if m.signature is not None and m.signature not in signatures:
            signatures.add(m.signature)
            chosen[m.case_id] = m
    keepers = set(chosen)
    for m in chosen.values():
        covered |= m.arcs
    for m in ordered:  # smallest first: a case that runs something new
        if m.case_id not in chosen and not m.arcs <= covered:
            covered |= m.arcs
            chosen[m.case_id] = m
    # Drop cases whose every arc a kept case runs too, largest first (signature keepers stay).
    counts: dict[Feature, int] = {}
    for m in [*existing, *chosen.values()]:
        for arc in m.arcs:
            counts[arc] = counts.get(arc, 0) + 1
    for m in sorted(chosen.values(), key=lambda m: m.order, reverse=True):
        if m.case_id not in keepers and all(counts[arc] > 1 for arc in m.arcs):
            for arc in m.arcs:
                counts[arc] -= 1
            del chosen[m.case_id]
    return sorted(chosen.values(), key=lambda m: m.order)


# ---------------------------------------------------------------------------------------------
# Measuring one case


@functools.cache
def import_time_lines(file: str) -> frozenset[int]:
    """Lines of ``file`` that run when it is imported: statements outside function bodies."""
    try:
        tree = ast.parse(Path(file).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return frozenset()
    lines: set[int] = set()
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                lines.add(child.lineno)  # the def itself runs at import; its body does not
                lines.update(d.lineno for d in getattr(child, "decorator_list", ()))
                continue
            if isinstance(child, ast.stmt):
                lines.add(child.lineno)
            pending.append(child)
    return frozenset(lines)


def _case_arcs(data: Any, files: Sequence[str], target: str) -> frozenset[Feature]:
    features: set[Feature] = set()
    for file in files:
        at_import = import_time_lines(file)
        for a, b in data.arcs(file) or ():
            if all(n in at_import for n in (a, b) if n > 0):
                continue
            features.add((target, file, (a, b)))
    return frozenset(features)


def coverage_files(target: Any, impl: Any) -> list[str]:
    """The files measured for ``impl``: its and its target's declared sources, else the module
    that defines the implementation's function (the code under test, when nothing is declared).
    A module without Python source (a built-in, a namespace package) adds nothing: such a case
    is compared by its signature only."""
    from fuzzkit.branches import module_files
    from fuzzkit.runner import _module_of_callable

    modules = list(target.coverage_sources(impl))
    if not modules:
        module = _module_of_callable(impl.fn)
        modules = [module] if module else []
    return sorted(module_files(modules, missing_ok=True))


class _Meter:
    """One coverage.py collector per set of files, restarted empty for every case."""

    def __init__(self) -> None:
        self._collectors: dict[tuple[str, ...], Any] = {}

    def collector(self, files: Sequence[str]) -> Any:
        from fuzzkit.branches import branch_collector

        key = tuple(files)
        if key not in self._collectors:
            self._collectors[key] = branch_collector(files)
        return self._collectors[key]


@dataclasses.dataclass(frozen=True)
class ReplayOptions:
    """How cases run: the user's ``--impl``, limits, time limit and isolation choices."""

    impl: str | None = None
    limits: Mapping[str, int] | None = None
    case_timeout: float | None = 60.0
    isolate: bool | None = None
    memory_mb: int | None = None


def measure(path: Path, record: Any, options: ReplayOptions, meter: _Meter) -> Measured:
    """Admit ``record`` (loaded from ``path``) and replay it with coverage on; raises a one-line
    :class:`FuzzkitError` for a file that must not or cannot run."""
    from fuzzkit.admission import admit, case_checker, isolation, steps_of
    from fuzzkit.errors import UsageError
    from fuzzkit.registry import implementation_named_by_file, resolve_implementation
    from fuzzkit.sequence import CaseSequence

    target = admit(record, str(path), options.limits)
    if options.impl:
        impl = resolve_implementation(target, options.impl)
    else:
        impl = implementation_named_by_file(target, record.implementation, str(path))
    reason = impl.unavailable()
    if reason:
        raise UsageError(f"{path}: implementation {impl.name!r} cannot run here: {reason}")
    isolate, memory_mb = isolation(record, options.isolate, options.memory_mb)
    files = [] if isolate else coverage_files(target, impl)
    cov = meter.collector(files) if files else None
    steps = steps_of(record)
    sequence = isinstance(record, CaseSequence)
    with case_checker(
        target, impl, isolate=isolate, case_timeout=options.case_timeout, memory_mb=memory_mb
    ) as check:
        if cov is not None:
            cov.erase()
            cov.start()
        try:
            verdicts = [check(target, impl, step, confirm=not sequence) for step in steps]
        finally:
            if cov is not None:
                cov.stop()
    failure = verdicts[-1].failure
    if cov is not None:
        arcs = _case_arcs(cov.get_data(), files, target.name)
    elif isolate and failure is None:
        # ran in a child process, out of coverage's sight: what it covers is unknown, so it is
        # kept (a feature of its own) rather than dropped as covering nothing
        arcs = frozenset({(target.name, ISOLATED, record.case_id)})
    else:
        arcs = frozenset()
    return Measured(
        path=path,
        record=record,
        size=len(record.dumps()),
        case_id=record.case_id,
        arcs=arcs,
        signature=(target.name, impl.name, failure.signature) if failure is not None else None,
    )


# ---------------------------------------------------------------------------------------------
# The command


def merge(
    sources: Sequence[Path],
    destination: Path,
    *,
    options: ReplayOptions = ReplayOptions(),
    target: str | None = None,
    on_refused: Callable[[str], None] = lambda line: None,
) -> MergeResult:
    """Merge the case files under ``sources`` into the flat directory ``destination``."""
    from fuzzkit import corpus
    from fuzzkit.report import require_writable

    require_writable(destination, "destination", "DST")
    refused: list[str] = []

    def refuse(line: str) -> None:
        refused.append(line)
        on_refused(line)

    meter = _Meter()
    in_destination = list(corpus.case_files([destination]))
    existing = _measured(in_destination, options, meter, None, refuse)[0]
    dst_files = {p.resolve() for p in in_destination}
    src_files = [p for p in corpus.case_files(list(sources)) if p.resolve() not in dst_files]
    candidates, skipped = _measured(src_files, options, meter, target, refuse)
    added = select(existing, candidates)
    written = []
    for m in added:
        try:
            written.append(m.record.save(destination))
        except OSError as exc:
            raise FuzzkitError(
                f"cannot write to {destination}: {exc.strerror or exc}; pass a writable DST"
            ) from None
    return MergeResult(
        kept=[*existing, *added],
        added=written,
        considered=len(candidates),
        refused=refused,
        skipped=skipped,
    )


def _measured(
    files: Iterable[Path],
    options: ReplayOptions,
    meter: _Meter,
    target: str | None,
    refuse: Callable[[str], None],
) -> tuple[list[Measured], int]:
    from fuzzkit.sequence import load_any

    out: list[Measured] = []
    skipped = 0
    for path in files:
        try:
            record = load_any(path)
            if target is not None and record.target != target:
                skipped += 1
                continue
            out.append(measure(Path(path), record, options, meter))
        except FuzzkitError as exc:
            refuse(f"refused {exc}")
    return out, skipped
