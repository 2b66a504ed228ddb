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

    p = sub.add_parser("run", help="fuzz targets, save minimized findings, write a report")
    p.add_argument("targets", nargs="*", metavar="TARGET")
    p.add_argument("--all", action="store_true", help="every registered target")
    p.add_argument("--impl", help="implementation name, or module:attr for an outside one")
    p.add_argument(
        "--budget",
        type=_positive_float,
        default=60.0,
        help="total seconds of fuzzing, split over targets x implementations "
        "(default 60; a run ends within it plus about one case time limit)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", choices=("ci", "campaign"), default="campaign")
    p.add_argument("--report-dir", type=Path, default=Path("reports"))
    p.add_argument("--corpus", type=Path, default=None, help="corpus root (default ./corpus)")
    p.add_argument(
        "--case-timeout",
        type=_positive_float,
        default=60.0,
        help="seconds one case may take before it counts as a timeout",
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
        help="fuzz under this shipped mutant of the (single) target; repeat for "
        "several planted bugs at once",
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
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    p.add_argument("--impl", help="replay against this implementation instead")
    p.add_argument(
        "--mutant",
        action="append",
        default=[],
        metavar="NAME",
        help="replay under this shipped mutant of the case's target (repeatable)",
    )
    _add_file_run_options(p)

    p = sub.add_parser("shrink", help="minimize a failing case file")
    p.add_argument("path", type=Path, metavar="PATH")
    p.add_argument("--output", type=Path, help="directory for the smaller case (default: beside)")
    p.add_argument(
        "--impl",
        help="implementation name, or module:attr for an outside one "
        "(default: the registered one the case file names; a file "
        "never chooses code to import)",
    )
    _add_file_run_options(p)

    p = sub.add_parser(
        "bisect",
        help="find the first diverging node of a failing graph case "
        "and its smallest failing window",
    )
    p.add_argument("path", type=Path, metavar="CASE")
    p.add_argument("--impl", help="implementation to bisect (default: the case's)")
    p.add_argument("--mutant", help="apply this shipped mutant of the target while bisecting")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory for the minimized case and its repro script "
        "(default: bisected/ beside CASE)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_file_run_options(p)

    p = sub.add_parser("mutants", help="check that the fuzzer catches every shipped mutant")
    p.add_argument("targets", nargs="*", metavar="TARGET")
    p.add_argument(
        "--budget", type=_positive_float, default=30.0, help="seconds per mutant (default 30)"
    )
    p.add_argument("--seed", type=int, default=0)
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
    return parser


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
        print(f"fuzzkit: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("fuzzkit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - exit 3, never 0 or 1, whatever went wrong
        import traceback

        traceback.print_exc()
        print(
            f"fuzzkit: internal error: {type(exc).__name__}: {str(exc)[:300]} (exit 3: a failed "
            "write or a bug in fuzzkit; the traceback above says where)",
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
    table = _table("target", "implementations", "properties", "mutants")
    for d in described:
        impls = ", ".join(
            f"{i['name']} ({i['backend']}{'' if i['available'] else ', unavailable'})"
            for i in d["implementations"]
        )
        table.add_row(d["name"], impls, str(len(d["properties"])), str(len(d["mutants"])))
    _print(table)
    return status


def cmd_run(args: argparse.Namespace) -> int:
    if args.steer and not args.coverage:
        raise UsageError("--steer rewards new branches, which --coverage measures: add --coverage")
    if args.memory_mb is not None and not args.isolate:
        raise UsageError("--memory-mb needs --isolate")
    _require_writable_outputs(args)
    if (
        args.workers > 1
        or args.backend == "ray"
        or args.resume is not None
        or args.isolate
        or args.engine != "hypothesis"
    ):
        if args.coverage or args.mutant:
            raise UsageError(
                "--coverage and --mutant run in one process: drop "
                "--workers/--backend/--isolate/--engine/--resume to use them"
            )
        return _run_campaign(args)
    from fuzzkit import corpus
    from fuzzkit.registry import target_names

    if args.all and args.targets:
        raise UsageError("give target names or --all, not both")
    names = target_names() if args.all else args.targets
    if not names:
        raise UsageError("name at least one target, or pass --all (`fuzzkit list` shows them)")
    known = _load_known(args.known)
    # Coverage starts before any target module is imported, so definitions count as run.
    meter = _coverage_meter(names, args.impl) if args.coverage else None
    try:
        plan, skipped, mutants = _run_plan(names, args)
        root = args.corpus or corpus.default_root()
        return _run_plan_in_process(args, plan, skipped, mutants, root, known, meter)
    finally:
        if meter is not None:
            meter.stop()


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


def _coverage_meter(names: Sequence[str], impl_spec: str | None) -> Any:
    from fuzzkit import branches, registry

    modules = registry.source_packages(names)
    if impl_spec and ":" in impl_spec:
        modules.append(impl_spec.partition(":")[0])
    meter = branches.Meter([m for m in modules if branches.module_file(m) is not None])
    meter.start()
    return meter


def _run_plan(
    names: Sequence[str], args: argparse.Namespace
) -> tuple[list[Any], list[Any], list[Any]]:
    """(target, impl) pairs to fuzz, the skipped ones, and the mutants to apply."""
    from fuzzkit.registry import get_target, resolve_implementation

    targets = [get_target(n) for n in names]  # unknown names fail here, before any work
    mutants: list[Any] = []
    if args.mutant:
        if len(targets) != 1:
            raise UsageError("--mutant plants bugs in one target: name exactly one")
        mutants = [targets[0].mutant(m) for m in args.mutant]
        patched = {m.implementation for m in mutants}
        if len(patched) != 1:
            raise UsageError(
                f"the mutants patch different implementations ({sorted(patched)}); "
                "plant bugs of one implementation per run"
            )
        if args.impl and args.impl not in patched:
            raise UsageError(
                f"--mutant patches implementation {patched.pop()!r}, not {args.impl!r}"
            )
        args.impl = next(iter(patched))
    plan, skipped = [], []
    for target in targets:
        impls = (
            [resolve_implementation(target, args.impl)]
            if args.impl
            else list(target.implementations.values())
        )
        for impl in impls:
            reason = impl.unavailable()
            if reason:
                skipped.append(
                    {"target": target.name, "implementation": impl.name, "reason": reason}
                )
            else:
                plan.append((target, impl))
    if not plan:
        raise UsageError("nothing to run: every selected implementation is unavailable here")
    return plan, skipped, mutants


def _run_plan_in_process(
    args: argparse.Namespace,
    plan: list[Any],
    skipped: list[Any],
    mutants: list[Any],
    root: Path,
    known: Any,
    meter: Any,
) -> int:
    import contextlib
    import time

    from fuzzkit import corpus
    from fuzzkit.campaign import RunRecorder, write_html_if_available
    from fuzzkit.engines.hypothesis import fuzz
    from fuzzkit.report import new_run_dir, result_row, write_report

    # Each pair's share comes from what is left: a pair that ran over (a slow first case) is paid
    # for by the ones after it, so the whole run keeps to its budget.
    run_deadline = time.monotonic() + args.budget
    rows: list[dict[str, Any]] = []
    findings: list[tuple[str, str]] = []
    run_dir = new_run_dir(args.report_dir, args.seed)
    run_id = run_dir.name
    interrupted = False
    recorder = RunRecorder(
        run_dir,
        seed=args.seed,
        budget=args.budget,
        plan=[[t.name, i.name] for t, i in plan],
        corpus=root,
        profile=args.profile,
        case_timeout=args.case_timeout,
    )
    coverage: dict[str, Any] = {}
    try:
        for target, impl in plan:
            pairs_left = len(plan) - len(rows)
            share = max(0.0, run_deadline - time.monotonic()) / pairs_left
            _status(f"fuzzing {target.name}/{impl.name} for {share:.1f} s ...")
            on_case = recorder.progress_callback(target.name, impl.name)
            if meter is not None:
                from fuzzkit.registry import source_packages

                meter.pair(
                    f"{target.name}/{impl.name}",
                    target.coverage_sources(impl) or source_packages([target.name]),
                )

            def counted(n: int, on_case: Any = on_case) -> None:
                on_case(n)
                if meter is not None:
                    meter.tick()

            saved: list[tuple[Any, Path]] = []

            def on_finding(
                case: Any,
                sequence: Any,
                target: Any = target,
                saved: list[tuple[Any, Path]] = saved,
            ) -> None:
                path = corpus.save(case, root)
                if sequence is not None:
                    sequence.save(corpus.directory(root, target.name, "sequences"))
                saved.append((case, path))
                recorder.found(case, path, sequence)
                _status(f"  found {case.failure.signature} -> {path}")

            confirm = None if args.no_confirm else _confirmer(target, impl, args, mutants, share)
            with contextlib.ExitStack() as stack:
                for mutant in mutants:
                    stack.enter_context(mutant.applied())
                result = fuzz(
                    target,
                    impl,
                    budget=share,
                    seed=args.seed,
                    profile=args.profile,
                    case_timeout=args.case_timeout,
                    on_case=counted,
                    known=known,
                    confirm=confirm,
                    on_finding=on_finding,
                    max_findings=args.max_findings,
                    max_cases=args.max_cases,
                    steer=meter.novelty if meter is not None and args.steer else None,
                )
            on_case(result.cases, final=True)
            for case, _path in saved:
                findings.append((case.case_id, case.dumps() + "\n"))
            row = result_row(result, [path for _, path in saved])
            if mutants:
                row["mutants"] = [m.name for m in mutants]
            if meter is not None:
                meter.tick(force=True)
                row["coverage"] = coverage[f"{target.name}/{impl.name}"] = meter.report(
                    f"{target.name}/{impl.name}"
                )
            rows.append(row)
            if result.interrupted:  # Ctrl-C: the unfinished findings were saved as they stood
                interrupted = True
                break
    except KeyboardInterrupt:  # between cases or while saving: what is on disk stays, say so
        interrupted = True
    status = "interrupted" if interrupted else "done"
    recorder.finish(status=status)
    summary = write_report(
        args.report_dir,
        run_id,
        args.seed,
        args.budget,
        rows,
        skipped,
        findings,
        known=known,
        status=status,
    )
    from fuzzkit.case import atomic_write_text

    if coverage:
        atomic_write_text(
            args.report_dir / run_id / "coverage.json",
            json.dumps(coverage, indent=1, sort_keys=True) + "\n",
        )
    reach = {
        f"{r['target']}/{r['implementation']}": {
            "operations": r.get("operations"),
            "thresholds": r.get("reach"),
        }
        for r in rows
        if r.get("operations") or r.get("reach")
    }
    if reach:
        atomic_write_text(
            args.report_dir / run_id / "reach.json",
            json.dumps(reach, indent=1, sort_keys=True) + "\n",
        )
    write_html_if_available(args.report_dir / run_id)
    _print(_summary_table(rows, skipped))
    if coverage:
        _print(_coverage_table(coverage))
    print(f"report: {summary}")
    if interrupted:
        print(f"fuzzkit: interrupted; {len(findings)} finding(s) saved", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_FINDINGS if findings else EXIT_CLEAN


def _confirmer(
    target: Any, impl: Any, args: argparse.Namespace, mutants: list[Any], share: float
) -> Any:
    """Fresh-process confirmation for one pair; minimizing a state-dependent finding's sequence
    may take a quarter of the pair's share (10 s at least, 120 s at most)."""
    from fuzzkit.fresh import FreshConfirmer, FreshContext
    from fuzzkit.isolation import target_source_spec

    spec = target_source_spec(target.name)
    preload = (spec.partition(":")[0],) if spec else ()
    return FreshConfirmer(
        FreshContext(
            target=target.name,
            implementation=args.impl or impl.name,
            mutants=tuple(m.name for m in mutants),
            preload=preload,
            target_spec=spec,
            case_timeout=args.case_timeout,
            time_limit=max(10.0, min(120.0, share / 4)),
        )
    )


def _summary_table(rows: list[dict[str, Any]], skipped: list[dict[str, Any]]) -> Any:
    from rich.markup import escape

    table = _table("target", "impl", "cases", "cases/s", "verdict")
    for row in rows:
        found = row.get("findings") or []
        if not found:
            verdict = "[green]clean[/]"
        else:
            verdict = "\n".join(
                f"[red]{escape(f['signature'])}[/]\n{escape(str(f['case']))}" for f in found
            )
        if row.get("known_hits"):
            verdict += f"\n[dim]known: {sum(row['known_hits'].values())} case(s) skipped[/]"
        table.add_row(
            row["target"],
            row["implementation"],
            str(row["cases"]),
            f"{row['cases_per_second']:.1f}",
            verdict,
        )
    for s in skipped:
        table.add_row(s["target"], s["implementation"], "-", "-", f"skipped: {s['reason']}")
    return table


def _coverage_table(coverage: dict[str, Any]) -> Any:
    table = _table("target/impl", "branches", "branch %", "line %", "missed branches", "excluded")
    for label, c in coverage.items():
        table.add_row(
            label,
            f"{c['covered_branches']}/{c['branches']}",
            f"{c['branch_percent']:.1f}",
            f"{c['line_percent']:.1f}",
            str(len(c["missing_branches"])),
            str(len(c["excluded"])),
        )
    return table


def cmd_report(args: argparse.Namespace) -> int:
    from fuzzkit.report_html import write_html

    print(f"report: {write_html(args.run_dir)}")
    return EXIT_CLEAN


def _run_campaign(args: argparse.Namespace) -> int:
    from fuzzkit.campaign import CampaignOptions, run_campaign

    if args.resume is not None and (args.targets or args.all):
        raise UsageError("--resume continues a run's own plan; give no targets")
    progress = args.progress or ("live" if sys.stdout.isatty() else "quiet")
    result = run_campaign(
        CampaignOptions(
            targets=args.targets,
            all=args.all,
            impl=args.impl,
            budget=args.budget,
            seed=args.seed,
            profile=args.profile,
            report_dir=args.report_dir,
            corpus=args.corpus,
            case_timeout=args.case_timeout,
            workers=args.workers,
            backend=args.backend,
            address=args.address,
            num_gpus=args.num_gpus,
            isolate=args.isolate,
            memory_mb=args.memory_mb,
            engine=args.engine,
            progress=progress,
            resume=args.resume,
            known=_load_known(args.known),
            max_cases=args.max_cases,
            confirm=not args.no_confirm,
        )
    )
    if progress != "jsonl":
        print(f"report: {result.summary}")
    if result.status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_FINDINGS if result.findings else EXIT_CLEAN


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
            failure = [check(target, impl, step, confirm=not sequence).failure for step in steps][
                -1
            ]
        what = f"  (sequence of {len(steps)} cases; verdict of the last)" if sequence else ""
        what += "  (isolated)" if isolate else ""
        if failure is None:
            recorded = record.failure
            if recorded is not None and recorded.kind == "state-dependent":
                note = (
                    " (recorded as state-dependent: it fails only after earlier cases; "
                    f"replay its sequence {shown(recorded.details.get('sequence'))})"
                )
            elif recorded is not None:
                note = " (the recorded failure is fixed)"
            else:
                note = ""
            print(f"PASS  {path}{what}{note}")
        else:
            failed += 1
            print(f"FAIL  {path}{what}  {failure.signature}: {failure.message}")
    return EXIT_FINDINGS if failed else EXIT_CLEAN


def cmd_shrink(args: argparse.Namespace) -> int:
    from fuzzkit.admission import case_checker
    from fuzzkit.shrink.ddmin import shrink_case

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
            result = shrink_case(
                target, impl, case, timeout=args.case_timeout, checker=check if isolate else None
            )
        except ValueError as exc:
            raise UsageError(f"{path}: {exc}") from None
    out = _save_case(result.case, args.output or path.parent)
    sizes = ", ".join(f"{k}: {result.before[k]} -> {result.after[k]}" for k in result.before)
    print(
        f"shrunk in {result.tests} tests ({sizes or 'nothing reducible'}); "
        f"{result.case.failure.signature if result.case.failure else ''}"
    )
    print(f"wrote {out}")
    return EXIT_CLEAN  # success: the smaller case is written


def _save_case(case: Any, directory: Path) -> Path:
    try:
        return case.save(directory)
    except OSError as exc:
        raise UsageError(
            f"cannot write the case to {directory}: {exc.strerror or exc}; pass a "
            "writable directory (--output/--out)"
        ) from None


def cmd_bisect(args: argparse.Namespace) -> int:
    from fuzzkit.admission import case_checker
    from fuzzkit.case import Case, load
    from fuzzkit.registry import get_target
    from fuzzkit.shrink.bisect import NotFailing, bisect, is_graph_case
    from fuzzkit.shrink.repro import write_repro

    case = load(args.path)
    get_target(case.target)  # an unknown target is named before anything else
    if not is_graph_case(case.inputs):
        raise UsageError(
            f"{args.path}: not a graph case (target {case.target!r}; bisect needs "
            "inputs with graph, values and dtype); use `fuzzkit shrink`"
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
        try:
            result = bisect(
                target,
                impl,
                case.inputs,
                timeout=args.case_timeout,
                checker=check if isolate else None,
            )
        except NotFailing as exc:
            if args.json:
                print(json.dumps({"case": str(args.path), "failed": False, "error": str(exc)}))
            else:
                print(f"{args.path}: {exc}")
            return EXIT_CLEAN  # the case passes: nothing to bisect
    out_dir = args.out or args.path.parent / "bisected"
    minimized = Case(
        target=case.target,
        implementation=impl.name,
        inputs=result.minimized_inputs,
        seed=case.seed,
        failure=result.failure,
        origin="bisect",
    )
    case_path = _save_case(minimized, out_dir)
    repro = write_repro(
        minimized,
        case_path,
        first_node=result.first_node,
        op=result.op,
        window=result.window,
        signature=result.signature,
    )
    if args.json:
        print(
            json.dumps(
                {
                    **result.to_json(),
                    "case": str(args.path),
                    "failed": True,
                    "minimized_case": str(case_path),
                    "repro": str(repro),
                    "mutant": args.mutant,
                },
                indent=2,
            )
        )
        return EXIT_FINDINGS  # the divergence reproduces
    status = (
        "NONDETERMINISTIC"
        if result.nondeterministic
        else "confirmed"
        if result.confirmed
        else "not confirmed"
    )
    print(
        f"first diverging node: {result.first_node} ({result.op}), node "
        f"{result.first_index + 1} of {result.original_nodes}"
    )
    print(f"window: {len(result.window)} node(s): {', '.join(result.window)}")
    print(f"signature: {result.signature}")
    if result.other_divergence:
        o = result.other_divergence
        print(
            f"note: an earlier divergence of another class at {o['node']} ({o['op']}): "
            f"{o['signature']}; bisect stayed on {result.signature}"
        )
    print(f"compile calls: {result.compile_calls} in {result.seconds:.1f} s; {status}")
    print(f"minimized case: {case_path}")
    print(f"repro: {repro}" + (f" (run with --mutant {args.mutant})" if args.mutant else ""))
    return EXIT_FINDINGS  # the divergence reproduces


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
            )
            if result.finding is not None and args.save_regressions is not None:
                corpus.save(result.finding, args.save_regressions, "regressions")
                if result.sequence is not None:
                    result.sequence.save(
                        corpus.directory(args.save_regressions, target.name, "sequences")
                    )
            results.append(result)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
    else:
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
            table.add_row(
                r.target,
                r.mutant,
                f"{r.bug_class}\n[dim]{r.citation}[/]",
                detected,
                f"{r.seconds:.2f}" if r.seconds is not None else "-",
                r.signature or (r.skipped or "-"),
                *(
                    [", ".join(f"{k} {v}" for k, v in (r.minimized or {}).items())]
                    if args.shrink
                    else []
                ),
            )
        _print(table)
        caught = sum(r.detected for r in results)
        print(f"{caught}/{len(results)} mutants detected")
    missed = [r for r in results if not r.detected and not r.skipped]
    return EXIT_FINDINGS if missed else EXIT_CLEAN


COMMANDS = {
    "list": cmd_list,
    "run": cmd_run,
    "report": cmd_report,
    "replay": cmd_replay,
    "shrink": cmd_shrink,
    "bisect": cmd_bisect,
    "mutants": cmd_mutants,
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

    Console(width=max(100, _terminal_width())).print(renderable)


def _terminal_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 140


def _status(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":  # pragma: no cover - run as a script, not imported
    raise SystemExit(main())
