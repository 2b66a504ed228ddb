"""The coverage-guided engine: atheris (libFuzzer) mutates bytes, Hypothesis turns them into inputs.

Every target's Hypothesis strategy serves both engines: the test function is the same ``@given``
test the Hypothesis engine builds, and atheris's bytes go through
``test.hypothesis.fuzz_one_input``, which decodes them into a strategy draw.  libFuzzer sees the
coverage of the target's modules because they are imported under ``atheris.instrument_imports()``.

``atheris.Fuzz()`` never returns (libFuzzer exits the process), so the fuzzing runs in a
subprocess (``python -m fuzzkit.engines.atheris CONFIG``).  Its test function never raises: the
first case of each failure signature is shrunk (ddmin, when the target is reducible) and saved
as a regular case file under ``<corpus>/<target>/findings/``; a line naming the file is then
appended to a results file that the parent reads.  A case that kills the process outright
(without ``checker``, i.e. without isolation) leaves libFuzzer's crash artifact; the parent
decodes those bytes with the same strategy (in a subprocess that does not run the case) into a
case file with a ``crash`` failure.

With an :class:`~fuzzkit.isolation.IsolatedChecker` as ``checker`` the subprocess builds its own
isolated checker with the same settings; cases then run in a grandchild, so libFuzzer's coverage
sees the strategy's code only, not the target's (crashes and hangs are caught either way).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from fuzzkit.case import Case, atomic_write_text
from fuzzkit.engines.hypothesis import FuzzResult
from fuzzkit.errors import UsageError
from fuzzkit.isolation import load_target_modules, target_source_spec
from fuzzkit.target import UNSUPPORTED, Implementation, Target, count_unsupported

MISSING = (
    "atheris is not installed (pip install 'fuzzkit[atheris]'; it needs CPython 3.8-3.11 on "
    "Linux/macOS)"
)
#: Seconds the parent waits beyond the budget (start-up, shrinking, libFuzzer's exit).
GRACE_S = 120.0


@dataclasses.dataclass
class AtherisResult(FuzzResult):
    """A :class:`FuzzResult` (``finding`` = the first finding) plus every distinct finding."""

    findings: list[Case] = dataclasses.field(default_factory=list)
    finding_paths: list[Path] = dataclasses.field(default_factory=list)
    exit_code: int | None = None


def require_atheris() -> None:
    """Raise the one-line :class:`UsageError` when atheris cannot be imported here."""
    try:
        import atheris  # noqa: F401
    except Exception:  # noqa: BLE001 - ImportError, or a build that does not load on this Python
        raise UsageError(MISSING) from None


def fuzz_atheris(
    target: Target,
    impl: Implementation,
    budget: float,
    seed: int = 0,
    corpus_root: os.PathLike[str] | str = Path("corpus"),
    checker: Any = None,
    *,
    case_timeout: float | None = None,
    properties: bool = True,
    shrink: bool = True,
    mutant: str | None = None,
    preload: Sequence[str] = (),
) -> AtherisResult:
    """Fuzz ``impl`` with atheris for about ``budget`` seconds (at least 1).

    ``target`` and ``impl`` are looked up again by name in the subprocess (``preload``: modules
    it imports first, for targets registered at run time; ``mutant``: a shipped mutant to apply
    there).  ``checker`` is None (in-process checks) or an IsolatedChecker, whose settings the
    subprocess copies.  Findings land in ``corpus_root/<target>/findings/``.
    """
    require_atheris()
    corpus_root = Path(corpus_root)
    result = AtherisResult(target.name, impl.name, seed)
    work = Path(tempfile.mkdtemp(prefix="fuzzkit-atheris-"))
    isolation: dict[str, Any] | None = None
    if checker is not None:
        isolation = {
            "case_timeout": getattr(checker, "case_timeout", case_timeout),
            "memory_mb": getattr(checker, "memory_mb", None),
            "inflight_dir": str(getattr(checker, "inflight_dir", work / "inflight")),
            "mutant": getattr(checker, "mutant", None),
            "preload": list(getattr(checker, "preload", ())),
        }
        mutant = mutant or isolation["mutant"]
        preload = tuple(preload) or tuple(isolation["preload"])
    config = {
        "target": target.name,
        "impl": impl.name,
        "seed": seed,
        "budget": budget,
        "corpus_root": str(corpus_root.resolve()),
        "case_timeout": case_timeout,
        "properties": properties,
        "shrink": shrink,
        "mutant": mutant,
        "preload": list(preload),
        "target_spec": target_source_spec(target.name),
        "isolation": isolation,
        "results": str(work / "results.jsonl"),
        "stats": str(work / "stats.json"),
        "artifacts": str(work / "artifacts") + os.sep,
        "corpus_dir": str(work / "libfuzzer-corpus"),
    }
    (work / "artifacts").mkdir()
    (work / "libfuzzer-corpus").mkdir()
    config_path = work / "config.json"
    config_path.write_text(json.dumps(config))
    try:
        return _run(result, config, config_path, work, target, impl, budget)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(
    result: AtherisResult,
    config: dict[str, Any],
    config_path: Path,
    work: Path,
    target: Target,
    impl: Implementation,
    budget: float,
) -> AtherisResult:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "fuzzkit.engines.atheris", str(config_path)],
        cwd=work,
        env=_child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        timeout=max(1.0, budget) + GRACE_S,
    )
    result.seconds = time.monotonic() - start
    result.exit_code = proc.returncode
    stats = _read_json(Path(config["stats"])) or {}
    result.cases = int(stats.get("cases", 0))
    unsupported = stats.get("unsupported")
    if isinstance(unsupported, dict):
        result.unsupported = {str(k): int(v) for k, v in unsupported.items() if isinstance(v, int)}
    seen = _lines(Path(config["results"]))
    for line in seen:
        _add_finding(result, line)
    if proc.returncode != 0:
        # The case that took the process down: libFuzzer saved its bytes (one artifact).
        artifacts = [
            p
            for p in sorted((work / "artifacts").iterdir())
            if p.name.split("-", 1)[0] in ("crash", "oom", "timeout")
        ]
        if artifacts:
            lines = _decode_artifact(config, config_path, artifacts[0], proc.returncode)
            for line in lines[len(seen) :]:
                if line["signature"] not in {
                    f.failure.signature for f in result.findings if f.failure
                }:
                    _add_finding(result, line)
    first = result.finding.failure.signature if result.finding and result.finding.failure else None
    hits = dict(stats.get("hits", {}))
    result.other_signatures = {sig: n for sig, n in hits.items() if sig != first}
    if not result.findings and proc.returncode not in (0, None):
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        raise RuntimeError(
            f"atheris run for {target.name}/{impl.name} failed with exit code "
            f"{proc.returncode}:\n{tail}"
        )
    return result


def _add_finding(result: AtherisResult, line: dict[str, Any]) -> None:
    from fuzzkit import case as case_io

    path = Path(line["case"])
    found = case_io.loads(path.read_text(), str(path))
    result.findings.append(found)
    result.finding_paths.append(path)
    if result.finding is None:
        result.finding = found
        result.seconds_to_first_failure = line.get("elapsed")
        result.cases_to_first_failure = line.get("cases")


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [p for p in sys.path if p] + [str(Path(__file__).resolve().parents[2])]
    env["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    )
    return env


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for raw in text.splitlines():
        try:
            out.append(json.loads(raw))
        except ValueError:  # a line cut short by a hard kill
            continue
    return out


def _decode_artifact(
    config: dict[str, Any], config_path: Path, artifact: Path, code: int
) -> list[dict[str, Any]]:
    """Turn libFuzzer's crash bytes into a case file, without running the case again."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzzkit.engines.atheris",
            str(config_path),
            "--decode",
            str(artifact),
            str(code),
        ],
        cwd=config_path.parent,
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=GRACE_S,
    )
    if proc.returncode != 0:
        return []
    return _lines(Path(config["results"]))


# --------------------------------------------------------------------------- the subprocess


def _load(config: dict[str, Any], instrument: bool) -> tuple[Target, Implementation]:
    import contextlib

    from fuzzkit.registry import get_target, resolve_implementation

    hook: Any = contextlib.nullcontext()
    include = _instrumented_packages(config)
    if instrument and include:
        import atheris

        hook = atheris.instrument_imports(include=include)
    with hook:
        load_target_modules(config["target"], config["preload"], config.get("target_spec"))
        target = get_target(config["target"])
        impl = resolve_implementation(target, config["impl"])
    return target, impl


def _instrumented_packages(config: dict[str, Any]) -> list[str]:
    """Packages (``fuzzkit.runner.package_of``) of the target's code: its registry source, its
    factory, the preloaded modules and an outside implementation (only those: instrumenting
    torch or numpy would make every case slow for no useful coverage)."""
    from fuzzkit import registry
    from fuzzkit.runner import package_of

    registry.target_names()  # loads built-ins and entry points into the registry
    source = registry._sources.get(config["target"])
    specs = [
        source if isinstance(source, str) else None,
        config.get("target_spec"),
        *config["preload"],
        config["impl"] if ":" in config["impl"] else None,
    ]
    return sorted({package_of(spec.split(":")[0]) for spec in specs if spec})


def _build_test(config: dict[str, Any], target: Target, impl: Implementation, run_one: Any) -> Any:
    from hypothesis import HealthCheck, Verbosity, given, settings

    test = given(target.strategy_for(impl))(run_one)
    return settings(
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )(test)


def _append(path: str, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="ascii") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _main(argv: list[str]) -> int:
    from fuzzkit.isolation import _die_with_parent

    _die_with_parent()
    config = json.loads(Path(argv[0]).read_text())
    if len(argv) >= 3 and argv[1] == "--decode":
        return _decode_main(config, Path(argv[2]), int(argv[3]) if len(argv) > 3 else -1)
    import contextlib

    import atheris

    from fuzzkit import corpus
    from fuzzkit.runner import check_case
    from fuzzkit.shrink.hook import minimize

    target, impl = _load(config, instrument=config["isolation"] is None)
    mutant_cm: Any = contextlib.nullcontext()
    checker: Any = None
    if config["isolation"] is not None:
        from fuzzkit.isolation import IsolatedChecker

        iso = dict(config["isolation"])
        iso["mutant"] = config["mutant"]
        iso["preload"] = config["preload"]
        checker = IsolatedChecker(target.name, impl.name, **iso)
    elif config["mutant"]:
        mutant_cm = target.mutant(config["mutant"]).applied()
    mutant_cm.__enter__()
    timeout, properties = config["case_timeout"], config["properties"]
    check = checker if checker is not None else check_case
    seen: set[str] = set()
    state: dict[str, Any] = {"cases": 0, "hits": {}, "last_stats": 0.0}
    root = Path(config["corpus_root"])
    start = time.monotonic()

    def write_stats(force: bool = False) -> None:
        now = time.monotonic()
        if force or now - state["last_stats"] >= 0.5:
            state["last_stats"] = now
            atomic_write_text(
                Path(config["stats"]),
                json.dumps(
                    {
                        "cases": state["cases"],
                        "hits": state["hits"],
                        # this process's count: its own strategy's and the verdicts' turn-aways
                        "unsupported": dict(UNSUPPORTED),
                        "elapsed": now - start,
                    }
                )
                + "\n",
            )

    def run_one(inputs: Any) -> None:
        state["cases"] += 1
        verdict = check(target, impl, inputs, properties=properties, timeout=timeout)
        if verdict.unsupported is not None:  # not run: counted apart, never as a pass
            state["cases"] -= 1
            count_unsupported(verdict.unsupported)
            return
        failure = verdict.failure
        if failure is not None:
            state["hits"][failure.signature] = state["hits"].get(failure.signature, 0) + 1
            if failure.signature not in seen:
                seen.add(failure.signature)
                found = Case(
                    target=target.name,
                    implementation=impl.name,
                    inputs=inputs,
                    seed=config["seed"],
                    failure=failure,
                    origin="atheris",
                )
                if config["shrink"] and (target.reducible or target.minimize):
                    try:
                        found = dataclasses.replace(
                            minimize(target, impl, found, timeout=timeout, checker=checker).case,
                            seed=config["seed"],
                            origin="atheris+ddmin",
                        )
                    except ValueError:
                        pass
                path = corpus.save(found, root, "findings")
                _append(
                    config["results"],
                    {
                        "case": str(path),
                        "signature": failure.signature,
                        "kind": failure.kind,
                        "message": failure.message,
                        "cases": state["cases"],
                        "elapsed": time.monotonic() - start,
                    },
                )
        write_stats()

    test = _build_test(config, target, impl, run_one)
    fuzz_one_input = test.hypothesis.fuzz_one_input

    def one_input(data: bytes) -> None:
        fuzz_one_input(data)

    import atexit

    atexit.register(write_stats, True)
    budget = max(1, int(round(float(config["budget"]))))
    seed = int(config["seed"]) % (2**31 - 2) + 1  # libFuzzer treats -seed=0 as "random"
    args = [
        sys.argv[0],
        f"-max_total_time={budget}",
        f"-seed={seed}",
        "-rss_limit_mb=0",
        "-timeout=86400",
        f"-artifact_prefix={config['artifacts']}",
        "-print_final_stats=1",
        config["corpus_dir"],
    ]
    atheris.Setup(args, one_input)
    atheris.Fuzz()
    return 0


def _decode_main(config: dict[str, Any], artifact: Path, code: int) -> int:
    """Decode crash bytes into inputs with the strategy (the case itself is not run)."""
    from fuzzkit import corpus
    from fuzzkit.failure import Failure

    target, impl = _load(config, instrument=False)
    if code < 0:
        import signal

        try:
            reason = signal.Signals(-code).name
        except ValueError:
            reason = f"signal {-code}"
    else:
        reason = f"exit status {code}"
    kind_tag = artifact.name.split("-", 1)[0]
    if kind_tag == "oom":
        failure = Failure(
            "oom",
            f"{impl.name} ran out of memory under atheris",
            f"oom:{target.name}:{impl.name}",
            {"artifact": artifact.name},
        )
    elif kind_tag == "timeout":
        failure = Failure(
            "timeout",
            f"{impl.name} hung under atheris",
            f"timeout:{target.name}:{impl.name}",
            {"artifact": artifact.name},
        )
    else:
        failure = Failure(
            "crash",
            f"{impl.name} crashed the atheris process ({reason}; "
            "run with --isolate for the signal)",
            "crash:atheris:process",
            {"artifact": artifact.name, "exit": code},
        )
    saved: list[Path] = []

    def decode_one(inputs: Any) -> None:
        if not saved:
            found = Case(
                target=target.name,
                implementation=impl.name,
                inputs=inputs,
                seed=config["seed"],
                failure=failure,
                origin="atheris",
            )
            saved.append(corpus.save(found, Path(config["corpus_root"]), "findings"))

    test = _build_test(config, target, impl, decode_one)
    test.hypothesis.fuzz_one_input(artifact.read_bytes())
    if not saved:
        return 1
    _append(
        config["results"],
        {
            "case": str(saved[0]),
            "signature": failure.signature,
            "kind": failure.kind,
            "message": failure.message,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
