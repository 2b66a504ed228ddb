"""The ``fuzzkit`` command.  Exit codes: 0 clean, 1 findings, 2 usage or input error.

Every error a user can mend is one line on stderr ("fuzzkit: error: ...") and exit code 2; a
traceback from here is a bug in fuzzkit.
"""

from __future__ import annotations

import os

# Small eager ops run 100-400x slower with more than one intra-op thread on these machines;
# fuzzing parallelizes with processes instead.  Must happen before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from fuzzkit import __version__
from fuzzkit.errors import FuzzkitError, UsageError

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fuzzkit", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"fuzzkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("list", help="targets with their implementations and mutants")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser(
        "describe",
        help="one target: input/output schema, config keys, implementations, mutants, "
        "properties, limits",
    )
    p.add_argument("target", metavar="TARGET")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="machine-readable output")
    shown.add_argument(
        "--markdown", action="store_true", help="the schema as Markdown (the README's blocks)"
    )

    p = sub.add_parser("run", help="fuzz targets, save minimized findings, write a report")
    p.add_argument("targets", nargs="*", metavar="TARGET", help="target names (`fuzzkit list`)")
    p.add_argument("--all", action="store_true", help="every registered target")
    p.add_argument("--impl", help="implementation name, or module:attr for an outside one")
    p.add_argument(
        "--impl-option",
        action="append",
        default=[],
        metavar="OPT[=VALUE]",
        help="an option of the --impl implementation, the target's to define (repeatable; "
        "the same as --impl 'NAME[OPT,...]'), e.g. paged_kv's guarded",
    )
    p.add_argument(
        "--guarded",
        action="store_true",
        help="short for --impl-option guarded: run the implementation under its target's "
        "guard (paged_kv: KVGuard; the manager must accept guard=)",
    )
    p.add_argument(
        "--budget",
        type=_positive_float,
        default=60.0,
        help="total seconds of fuzzing, split over targets x implementations "
        "(default 60; a run ends within it plus about one case time limit)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the search (default 0)")
    p.add_argument(
        "--profile",
        choices=("ci", "campaign"),
        default=None,
        help="campaign (default; or $HYPOTHESIS_PROFILE when it names one of these) keeps "
        "failing examples in CORPUS/.hypothesis and replays them first; ci keeps none",
    )
    p.add_argument(
        "--report-dir",
        type=Path,
        default=Path("reports"),
        help="where the run's <run-id>/ report directory goes (default ./reports)",
    )
    p.add_argument("--corpus", type=Path, default=None, help="corpus root (default ./corpus)")
    p.add_argument(
        "--case-timeout",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="seconds one case may take before it counts as a timeout (default 60)",
    )
    p.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        help="parallel workers (processes or Ray tasks) sharing corpus and database; "
        "1 (default) fuzzes in this process",
    )
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="where workers run (ray: `pip install 'fuzzkit[ray]'`)",
    )
    p.add_argument("--address", help="Ray cluster address (default: start a local instance)")
    p.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per Ray worker task")
    p.add_argument(
        "--isolate",
        action="store_true",
        help="run every case in a child process: segfaults, hangs and OOMs become "
        "findings instead of killing the worker",
    )
    p.add_argument(
        "--memory-mb",
        type=_positive_int,
        default=None,
        help="address-space limit of an isolated case process (with --isolate)",
    )
    p.add_argument("--engine", choices=("hypothesis", "atheris"), default="hypothesis")
    p.add_argument(
        "--progress",
        choices=("live", "quiet", "jsonl"),
        default=None,
        help="live table (default on a terminal), quiet (final table only) or one "
        "JSON status line per second on stdout",
    )
    p.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue an interrupted campaign with its remaining budget",
    )
    p.add_argument(
        "--coverage",
        action="store_true",
        help="measure branch coverage of the code under test (coverage.py) per "
        "target x implementation: table, summary.json and the HTML report",
    )
    p.add_argument(
        "--steer",
        action="store_true",
        help="with --coverage: reward cases that run new branches "
        "(hypothesis.target), so Hypothesis mutates them further",
    )
    p.add_argument(
        "--known",
        type=Path,
        metavar="FILE",
        help="JSON list of accepted signatures, each with a reason: counted, never "
        "chased (see fuzzkit.known)",
    )
    p.add_argument(
        "--mutant",
        action="append",
        default=[],
        metavar="NAME",
        help="fuzz under this shipped mutant of the (single) target (`fuzzkit list --json` "
        "names them); repeat for several planted bugs at once. Its findings replay with "
        "the same --mutant",
    )
    p.add_argument(
        "--max-findings",
        type=_positive_int,
        default=None,
        metavar="N",
        help="stop a target x implementation after N distinct findings (default: "
        "keep fuzzing for the whole budget)",
    )
    p.add_argument(
        "--max-cases",
        type=_positive_int,
        default=None,
        metavar="N",
        help="stop each target x implementation (per worker) after N generated cases, like "
        "libFuzzer's -runs (default: the budget alone decides)",
    )
    p.add_argument(
        "--no-confirm", action="store_true", help="skip the fresh-process confirmation of findings"
    )

    p = sub.add_parser("report", help="(re)write a campaign's index.html with its plots")
    p.add_argument(
        "run_dir",
        type=Path,
        metavar="RUN_DIR",
        help="a reports/<run-id> directory (with state.json and events.jsonl)",
    )

    p = sub.add_parser("replay", help="re-run case files (or case sequences) and print verdicts")
    p.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="case or sequence files, or directories searched for *.json",
    )
    p.add_argument(
        "--impl",
        help="replay against this implementation instead: a name, or module:attr for an "
        "outside one (a finding of an outside implementation replays only with it, and "
        "only where its module imports)",
    )
    p.add_argument(
        "--mutant",
        action="append",
        default=[],
        metavar="NAME",
        help="replay under this shipped mutant of the case's target (repeatable)",
    )
    _add_file_run_options(p)

    p = sub.add_parser("shrink", help="minimize a failing case file")
    p.add_argument("path", type=Path, metavar="PATH", help="a failing case file")
    p.add_argument(
        "--output",
        type=Path,
        help="directory for the smaller case (default: the directory of PATH)",
    )
    p.add_argument(
        "--impl",
        help="implementation name, or module:attr for an outside one "
        "(default: the registered one the case file names; a file "
        "never chooses code to import)",
    )
    _add_file_run_options(p)

    p = sub.add_parser(
        "bisect",
        help="run the bisection of the case's target (compiler: the first diverging node "
        "of a failing graph case and its smallest failing window)",
    )
    p.add_argument("path", type=Path, metavar="CASE", help="a failing case file")
    p.add_argument("--impl", help="implementation to bisect (default: the case's)")
    p.add_argument(
        "--mutant", metavar="NAME", help="apply this shipped mutant of the target while bisecting"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory for the minimized case and its repro script (default: "
        "./bisected/<case-id>/ in the current directory, outside the corpus)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_file_run_options(p)

    p = sub.add_parser("mutants", help="check that the fuzzer catches every shipped mutant")
    p.add_argument("targets", nargs="*", metavar="TARGET", help="target names (default: all)")
    p.add_argument(
        "--budget", type=_positive_float, default=30.0, help="seconds per mutant (default 30)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the search (default 0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="MUTANT",
        help="run only this mutant (repeatable)",
    )
    p.add_argument(
        "--shrink",
        action="store_true",
        help="minimize each finding and report its size (program steps, rows)",
    )
    p.add_argument(
        "--save-regressions",
        type=Path,
        metavar="CORPUS",
        help="shrink each finding and save it under CORPUS/<target>/regressions/: it "
        "passes on the real implementation and fails if the bug comes back",
    )
    p.add_argument(
        "--no-confirm",
        action="store_true",
        help="skip the fresh-process confirmation (state-dependent mutants then look reproducible)",
    )
    p.add_argument(
        "--known",
        type=Path,
        metavar="FILE",
        help="JSON list of accepted signatures of the implementations' own defects: the "
        "search goes past them (a finding that fails without the mutant too never counts)",
    )
    _add_corpus_parser(sub)
    return parser


def _add_corpus_parser(sub: Any) -> None:
    """``fuzzkit corpus ACTION``: libFuzzer-style corpus tools (:mod:`fuzzkit.corpus_merge`)."""
    p = sub.add_parser("corpus", help="corpus tools: merge (keep a minimal covering set)")
    actions = p.add_subparsers(dest="corpus_action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    p = actions.add_parser(
        "merge",
        help="replay every case under SRC with coverage and add to DST the fewest that keep "
        "every arc and every failure signature (like libFuzzer's -merge=1)",
    )
    p.add_argument("sources", nargs="+", type=Path, metavar="SRC", help="case files or folders")
    p.add_argument(
        "destination",
        type=Path,
        metavar="DST",
        help="a flat folder of case files (e.g. corpus/quant/seeds); its cases count as kept",
    )
    p.add_argument("--impl", help="replay every case against this implementation instead")
    p.add_argument("--target", help="merge only the cases of this target (others are skipped)")
    _add_file_run_options(p)


def _add_file_run_options(p: argparse.ArgumentParser, isolation: bool = True) -> None:
    """What a command that runs cases from files takes: limits the user may raise, a time limit
    per case and (where the command supports it) isolation."""
    p.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="NAME=N",
        help="raise one of the target's resource limits for this file (`fuzzkit list "
        "--json` names them); a file never raises them itself",
    )
    p.add_argument(
        "--case-timeout",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="seconds one case may take before it counts as a timeout (default 60)",
    )
    if isolation:
        p.add_argument(
            "--isolate",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="run cases in a child process so a segfault, hang or OOM is a verdict "
            "(default: only for cases whose recorded failure is a crash, timeout "
            "or oom)",
        )
        p.add_argument(
            "--memory-mb",
            type=_positive_int,
            default=None,
            help="address-space headroom of the isolated case process (implies --isolate)",
        )


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    # The current directory is deliberately not put on sys.path: a module planted there must not
    # be importable by name.  An outside --impl is found on PYTHONPATH, like any import.
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except FuzzkitError as exc:
        print(f"fuzzkit: error: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("fuzzkit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - exit 3, never 0 or 1, whatever went wrong
        import traceback

        traceback.print_exc()
        print(
            f"fuzzkit: internal error: {type(exc).__name__}: {_one_line(str(exc))[:300]} "
            "(exit 3: a failed write or a bug in fuzzkit; the traceback above says where)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


# ---------------------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from fuzzkit.registry import get_target, target_names

    described, broken = [], []
    for name in target_names():
        try:  # one broken plug-in must not hide every other target
            described.append(get_target(name).describe())
        except FuzzkitError as exc:
            broken.append(str(exc))
    for message in broken:
        print(f"fuzzkit: error: {message}", file=sys.stderr)
    status = EXIT_USAGE if broken else EXIT_CLEAN
    if args.json:
        print(json.dumps(described, indent=2))
        return status
    from rich.markup import escape

    table = _table("target", "implementations", "properties", "mutants")
    for d in described:  # names come from plug-ins: data, never rich markup
        impls = ", ".join(
            f"{i['name']} ({i['backend']}{'' if i['available'] else ', unavailable'})"
            for i in d["implementations"]
        )
        table.add_row(
            escape(d["name"]), escape(impls), str(len(d["properties"])), escape(_mutant_names(d))
        )
    _print(table)
    print("every mutant, the input/output schema and more: fuzzkit describe TARGET")
    return status


#: Mutant names ``fuzzkit list`` shows per target; ``describe`` lists them all.
LISTED_MUTANTS = 5


def _mutant_names(described: Any) -> str:
    """``"N: first, second, ..."`` -- the names to pass to ``run --mutant`` / ``mutants
    --only``, the first few of them (a target has up to dozens)."""
    names = [m["name"] for m in described["mutants"]]
    shown = ", ".join(names[:LISTED_MUTANTS])
    more = len(names) - LISTED_MUTANTS
    return f"{len(names)}: {shown}" + (f", ... (+{more})" if more > 0 else "") if names else "0"


def cmd_describe(args: argparse.Namespace) -> int:
    """One target in full (:mod:`fuzzkit.describe`)."""
    from fuzzkit import describe
    from fuzzkit.registry import get_target

    target = get_target(args.target)  # an unknown name: UsageError, one line, exit 2
    if args.json:
        print(json.dumps(target.describe(), indent=2))
    elif args.markdown:
        print(describe.markdown(target), end="")
    else:
        for renderable in describe.renderables(target):
            _print(renderable)
    return EXIT_CLEAN


def cmd_run(args: argparse.Namespace) -> int:
    """Every run goes through one pipeline (:mod:`fuzzkit.campaign`); ``--workers 1`` runs its
    worker in this process."""
    if args.memory_mb is not None and not args.isolate:
        raise UsageError("--memory-mb needs --isolate")
    if args.all and args.targets:
        raise UsageError("give target names or --all, not both")
    options = [*args.impl_option, *(["guarded"] if args.guarded else [])]
    if options:
        if not args.impl:
            raise UsageError(f"--impl-option/--guarded ({', '.join(options)}) needs --impl")
        from fuzzkit.target import with_options

        args.impl = with_options(args.impl, options)
    _require_writable_outputs(args)
    from fuzzkit.campaign import CampaignOptions, run_campaign

    progress = args.progress or ("live" if sys.stdout.isatty() else "quiet")
    profile = args.profile or os.environ.get("HYPOTHESIS_PROFILE", "campaign")
    if profile not in ("ci", "campaign"):
        profile = "campaign"  # a profile of the user's own tests, not one of fuzzkit's
    # every option named alike on the command line and in CampaignOptions is passed as given
    same = {f.name for f in dataclasses.fields(CampaignOptions)} & set(vars(args))
    result = run_campaign(
        CampaignOptions(
            **{name: getattr(args, name) for name in same - {"profile", "progress", "known"}},
            profile=profile,
            progress=progress,
            known=_load_known(args.known),
            mutants=args.mutant,
            confirm=not args.no_confirm,
        )
    )
    if progress != "jsonl":
        print(f"report: {result.summary}")
    found = len(result.findings)
    if result.status == "error":
        for worker, error in result.errors:
            who = "coordinator" if worker < 0 else f"worker {worker}"
            print(f"fuzzkit: internal error in {who}: {error}", file=sys.stderr)
        print(
            f"fuzzkit: the run stopped on an internal error; {found} finding(s) saved",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    if result.status == "interrupted":
        print(f"fuzzkit: interrupted; {found} finding(s) saved", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_FINDINGS if found else EXIT_CLEAN


def _require_writable_outputs(args: argparse.Namespace) -> None:
    """Corpus and report directory take files, checked before any fuzzing (exit 2 otherwise)."""
    from fuzzkit import corpus
    from fuzzkit.report import require_writable

    if args.resume is not None:
        require_writable(args.resume, "run directory", "--resume")
        return
    require_writable(args.corpus or corpus.default_root(), "corpus", "--corpus")
    require_writable(args.report_dir, "report directory", "--report-dir")


def _load_known(path: Path | None) -> Any:
    if path is None:
        return None
    from fuzzkit import known

    return known.load(path)


def cmd_report(args: argparse.Namespace) -> int:
    from fuzzkit.report_html import write_html

    print(f"report: {write_html(args.run_dir)}")
    return EXIT_CLEAN


def _case_implementation(target: Any, case: Any, path: Path, chosen: str | None) -> Any:
    """The implementation to run a case file with: the user's ``--impl`` if given, else the one
    the file names -- registered implementations only (a file never chooses code to import)."""
    from fuzzkit.registry import implementation_named_by_file, resolve_implementation

    if chosen:
        return resolve_implementation(target, chosen)
    return implementation_named_by_file(target, case.implementation, str(path))


def _isolation_of(record: Any, args: argparse.Namespace) -> tuple[bool, int | None]:
    """Whether to run a file's cases isolated, and with what memory headroom."""
    from fuzzkit.admission import isolation

    return isolation(record, args.isolate, args.memory_mb)


def _load_admitted(paths: Sequence[Path], args: argparse.Namespace) -> list[tuple[Path, Any, Any]]:
    """(path, case or sequence, target) for every file, each loaded, bounded and validated
    before any of them runs."""
    from fuzzkit.sequence import load_any

    loaded = [(path, load_any(path)) for path in paths]
    return [(path, record, _admit(path, record, args)) for path, record in loaded]


def _admit(path: Path, record: Any, args: argparse.Namespace) -> Any:
    """The target of a loaded file once its inputs are within limits (``--limit``) and valid."""
    from fuzzkit.admission import admit
    from fuzzkit.limits import parse_overrides

    return admit(record, str(path), parse_overrides(args.limit))


def cmd_replay(args: argparse.Namespace) -> int:
    from fuzzkit import corpus
    from fuzzkit.admission import case_checker, steps_of
    from fuzzkit.case import shown
    from fuzzkit.sequence import CaseSequence

    files = list(corpus.case_files(args.paths))
    if not files:
        raise UsageError(f"no case files under {', '.join(map(str, args.paths))}")
    admitted = _load_admitted(files, args)
    if args.mutant and len({record.target for _, record, _ in admitted}) != 1:
        raise UsageError("--mutant needs case files of one target")
    failed = 0
    for path, record, target in admitted:
        mutants = [target.mutant(m) for m in args.mutant]
        impl = (
            target.implementation(mutants[0].implementation)
            if mutants and not args.impl
            else _case_implementation(target, record, path, args.impl)
        )
        reason = impl.unavailable()
        if reason:
            raise UsageError(f"{path}: implementation {impl.name!r} cannot run here: {reason}")
        isolate, memory_mb = _isolation_of(record, args)
        steps = steps_of(record)
        sequence = isinstance(record, CaseSequence)
        with case_checker(
            target,
            impl,
            isolate=isolate,
            case_timeout=args.case_timeout,
            memory_mb=memory_mb,
            mutants=mutants,
        ) as check:
            # A sequence's earlier steps only set up state: each runs once, as when fuzzing.
            verdict = [check(target, impl, step, confirm=not sequence) for step in steps][-1]
        failure = verdict.failure
        what = f"  (sequence of {len(steps)} cases; verdict of the last)" if sequence else ""
        what += "  (isolated)" if isolate else ""
        if verdict.unsupported is not None:
            # Neither a pass nor a failure: the implementation cannot express this case.
            print(f"SKIP  {path}{what}  not run: {impl.name} {verdict.unsupported}")
        elif failure is None:
            recorded = record.failure
            if recorded is not None and recorded.kind == "state-dependent":
                note = (
                    " (recorded as state-dependent: it fails only after earlier cases; "
                    f"replay its sequence {shown(recorded.details.get('sequence'))})"
                )
            elif recorded is not None:  # good news, and it should read as such
                note = f"  (fixed: the recorded {recorded.signature} no longer fails)"
            else:
                note = ""
            print(f"PASS  {path}{what}{note}")
        else:
            failed += 1
            print(f"FAIL  {path}{what}  {failure.signature}: {failure.message}")
    return EXIT_FINDINGS if failed else EXIT_CLEAN


def cmd_shrink(args: argparse.Namespace) -> int:
    """Minimize a case file with its target's ``minimize`` hook (ddmin by default)."""
    from fuzzkit.admission import case_checker
    from fuzzkit.shrink.hook import CannotMinimize, minimize

    ((path, case, target),) = _load_admitted([args.path], args)
    if not hasattr(case, "inputs"):
        raise UsageError(f"{path}: a case sequence; `fuzzkit shrink` minimizes single cases")
    impl = _case_implementation(target, case, path, args.impl)
    reason = impl.unavailable()
    if reason:
        raise UsageError(f"{path}: implementation {impl.name!r} cannot run here: {reason}")
    isolate, memory_mb = _isolation_of(case, args)
    with case_checker(
        target, impl, isolate=isolate, case_timeout=args.case_timeout, memory_mb=memory_mb
    ) as check:
        try:
            result = minimize(
                target, impl, case, timeout=args.case_timeout, checker=check if isolate else None
            )
        except CannotMinimize as exc:  # the case passes, or the hook does not apply
            raise UsageError(f"{path}: {exc}") from None
    out, companions = _save_minimized(result, args.output or path.parent)
    for line in result.lines:
        print(line)
    print(f"wrote {out}")
    for label, written in companions.items():
        print(f"{label}: {written}")
    return EXIT_CLEAN  # success: the smaller case is written


def _save_minimized(result: Any, directory: Path) -> tuple[Path, dict[str, Path]]:
    """Save a hook's minimized case, then the files it writes beside it (a repro script)."""
    path = _save_case(result.case, directory)
    if result.companions is None:
        return path, {}
    try:
        return path, dict(result.companions(result.case, path))
    except OSError as exc:
        raise UsageError(
            f"cannot write beside {path}: {exc.strerror or exc}; pass a writable directory "
            "(--output/--out)"
        ) from None


def _save_case(case: Any, directory: Path) -> Path:
    try:
        return case.save(directory)
    except OSError as exc:
        raise UsageError(
            f"cannot write the case to {directory}: {exc.strerror or exc}; pass a "
            "writable directory (--output/--out)"
        ) from None


def cmd_bisect(args: argparse.Namespace) -> int:
    """Run the ``bisect`` hook of the case's target (e.g. the compiler's search for the first
    diverging node), save its minimized case and whatever it writes beside it."""
    from fuzzkit.admission import case_checker
    from fuzzkit.case import load
    from fuzzkit.registry import get_target
    from fuzzkit.shrink.hook import CannotMinimize, Minimization, NotFailing, trial_for

    case = load(args.path)
    hook = get_target(case.target).bisect  # an unknown target is named before anything else
    if hook is None:
        raise UsageError(
            f"{args.path}: target {case.target!r} has no bisection; use `fuzzkit shrink`"
        )
    target = _admit(args.path, case, args)
    impl = _case_implementation(target, case, args.path, args.impl)
    mutant = target.mutant(args.mutant) if args.mutant else None
    if mutant is not None and mutant.implementation != impl.name:
        raise UsageError(
            f"mutant {mutant.name!r} patches implementation "
            f"{mutant.implementation!r}, not {impl.name!r}"
        )
    reason = impl.unavailable()
    if reason:
        raise UsageError(f"implementation {impl.name!r} cannot run here: {reason}")
    isolate, memory_mb = _isolation_of(case, args)
    with case_checker(
        target,
        impl,
        isolate=isolate,
        case_timeout=args.case_timeout,
        memory_mb=memory_mb,
        mutants=[mutant] if mutant else [],
    ) as check:
        trial = trial_for(
            target, impl, timeout=args.case_timeout, checker=check if isolate else None
        )
        try:
            result = hook(Minimization(target, impl, case, trial))
        except NotFailing as exc:
            if args.json:
                print(json.dumps({"case": str(args.path), "failed": False, "error": str(exc)}))
            else:
                print(f"{args.path}: {exc}")
            return EXIT_CLEAN  # the case passes: nothing to bisect
        except CannotMinimize as exc:
            raise UsageError(f"{args.path}: {exc}") from None
    case_path, companions = _save_minimized(result, args.out or _default_bisect_dir(case))
    if args.json:
        print(
            json.dumps(
                {
                    **result.details,
                    "case": str(args.path),
                    "failed": True,
                    "minimized_case": str(case_path),
                    **{label: str(path) for label, path in companions.items()},
                    "mutant": args.mutant,
                },
                indent=2,
            )
        )
        return EXIT_FINDINGS  # the divergence reproduces
    for line in result.lines:
        print(line)
    print(f"minimized case: {case_path}")
    for label, path in companions.items():
        print(f"{label}: {path}" + (f" (run with --mutant {args.mutant})" if args.mutant else ""))
    return EXIT_FINDINGS  # the divergence reproduces


def _default_bisect_dir(case: Any) -> Path:
    """``./bisected/<case-id>/``: never beside the case, whose directory is often a corpus
    kind (``regressions/``), where the bisected case would replay as one more regression."""
    return Path("bisected") / case.case_id


def cmd_mutants(args: argparse.Namespace) -> int:
    from fuzzkit import corpus
    from fuzzkit.mutation import run_mutant
    from fuzzkit.registry import get_target, target_names

    targets = [get_target(n) for n in (args.targets or target_names())]
    known_names = {m.name for t in targets for m in t.mutants}
    unknown = sorted(set(args.only) - known_names)
    if unknown:
        raise UsageError(
            f"--only: no such mutant {', '.join(unknown)} (`fuzzkit list --json` names them)"
        )
    known = _load_known(args.known)
    results = []
    for target in targets:
        for mutant in target.mutants:
            if args.only and mutant.name not in args.only:
                continue
            if not args.json:
                _status(f"mutant {target.name}/{mutant.name} ...")
            result = run_mutant(
                target,
                mutant,
                budget=args.budget,
                seed=args.seed,
                shrink=args.shrink or args.save_regressions is not None,
                confirm=not args.no_confirm,
                known=known,
            )
            if result.clean_failure is not None and not args.json:
                _status(f"{target.name}/{mutant.name}: {result.message}")
            if result.detected and result.finding is not None and args.save_regressions is not None:
                corpus.save(result.finding, args.save_regressions, "regressions")
                if result.sequence is not None:
                    result.sequence.save(
                        corpus.directory(args.save_regressions, target.name, "sequences")
                    )
            results.append(result)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
    else:
        from rich.markup import escape

        table = _table(
            "target",
            "mutant",
            "bug class",
            "detected",
            "seconds",
            "signature",
            *(["minimized"] if args.shrink else []),
        )
        for r in results:
            detected = (
                "[yellow]skipped[/]"
                if r.skipped
                else "[green]yes[/]"
                if r.detected
                else "[red]NO[/]"
            )
            table.add_row(  # signatures and names are data: escaped, never rich markup
                escape(r.target),
                escape(r.mutant),
                f"{escape(r.bug_class)}\n[dim]{escape(r.citation)}[/]",
                detected,
                f"{r.seconds:.2f}" if r.seconds is not None else "-",
                escape(
                    r.signature
                    or r.skipped
                    or (
                        f"fails without the mutant too: {r.clean_failure}"
                        if r.clean_failure
                        else "-"
                    )
                ),
                *(
                    [escape(", ".join(f"{k} {v}" for k, v in (r.minimized or {}).items()))]
                    if args.shrink
                    else []
                ),
            )
        _print(table)
        caught = sum(r.detected for r in results)
        print(f"{caught}/{len(results)} mutants detected")
    missed = [r for r in results if not r.detected and not r.skipped]
    return EXIT_FINDINGS if missed else EXIT_CLEAN


def cmd_corpus(args: argparse.Namespace) -> int:
    """``corpus merge``: one line per refused file, then one summary line; exit 0."""
    from fuzzkit.corpus_merge import ReplayOptions, merge
    from fuzzkit.limits import parse_overrides

    missing = [str(p) for p in args.sources if not p.exists()]
    if missing:
        raise UsageError(f"no such SRC: {', '.join(missing)}")
    if args.destination.exists() and not args.destination.is_dir():
        raise UsageError(f"DST {args.destination} is a file; pass a folder")
    if args.target:
        from fuzzkit.registry import get_target

        get_target(args.target)  # an unknown name is a usage error before anything runs
    options = ReplayOptions(
        impl=args.impl,
        limits=parse_overrides(args.limit),
        case_timeout=args.case_timeout,
        isolate=args.isolate,
        memory_mb=args.memory_mb,
    )
    result = merge(
        args.sources,
        args.destination,
        options=options,
        target=args.target,
        on_refused=lambda line: print(f"fuzzkit: {line}", file=sys.stderr),
    )
    print(f"{result.line()} -> {args.destination}")
    return EXIT_CLEAN


COMMANDS = {
    "list": cmd_list,
    "describe": cmd_describe,
    "run": cmd_run,
    "report": cmd_report,
    "replay": cmd_replay,
    "shrink": cmd_shrink,
    "bisect": cmd_bisect,
    "mutants": cmd_mutants,
    "corpus": cmd_corpus,
}


# ---------------------------------------------------------------------------------------------


def _table(*columns: str) -> Any:
    from rich.table import Table

    table = Table(show_lines=False)
    for column in columns:
        table.add_column(column)
    return table


def _print(renderable: Any) -> None:
    from rich.console import Console

    # no emoji codes: a signature such as mismatch:clamp:float16 is data, not ":clamp:"
    Console(width=max(100, _terminal_width()), emoji=False).print(renderable)


def _one_line(message: str) -> str:
    """An error is one line on stderr, whatever text (a module's, a file's) its message quotes."""
    return " ".join(message.split())


def _terminal_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 140


def _status(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":  # pragma: no cover - run as a script, not imported
    raise SystemExit(main())
