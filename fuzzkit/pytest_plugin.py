"""pytest plugin (entry point ``pytest11``): fuzz your implementation, replay regressions.

* ``@pytest.mark.fuzzkit_target("quant", impl=my_impl)`` on a test that asks for
  ``fuzzkit_fuzz`` makes one test per implementation (``test_x[quant-my_impl]``, selectable by
  node id); calling ``fuzzkit_fuzz()`` fuzzes it: a short deterministic run on a plain
  ``pytest``, ``--fuzzkit-budget SECONDS`` each with the option.  A finding fails the test with a
  short report: signature, message, the minimized case file (saved under ``corpus/``) and the
  command that replays it.
* The same marker gives a test the Target as ``fuzzkit_target``; ``fuzzkit_impl`` is
  parametrized over the marker's ``impl=`` (or, without one, the target's own implementations
  that run here).  A Hypothesis test with the marker runs without a deadline unless it has its
  own ``@settings`` (a first case pays for imports and JIT compilation).
* Every ``**/regressions/*.json`` *fuzzkit case file* under a collected directory becomes a test
  item that replays it (other JSON files there are left alone).
* ``--fuzzkit-targets quant,ann`` (or ``all``) adds one fuzz item per built-in target x
  implementation: fuzzkit's own CI.  Nothing is fuzzed that the user did not ask for.

The plugin changes nothing in a session beyond its own items (no environment variables, no
global Hypothesis profile).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pytest

#: Test runs without ``--fuzzkit-budget``: this many generated cases per implementation.  At
#: most 30 keeps the run deterministic (the engine's first two chunks have fixed sizes).
DEFAULT_CASES = 30
#: Seconds a run without ``--fuzzkit-budget`` may take at most (a safety cap, not a target).
DEFAULT_CAP_S = 60.0
#: Findings a failure report lists (the rest are counted), and lines of each one's message: a
#: report stays under 25 lines, whatever the implementation does.
SHOWN_FINDINGS = 2
MESSAGE_LINES = 2


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fuzzkit")
    group.addoption(
        "--fuzzkit-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="fuzz each implementation of a `fuzzkit_fuzz` test this long (default: a short "
        f"deterministic run of {DEFAULT_CASES} cases)",
    )
    group.addoption(
        "--fuzzkit-seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the fuzz runs (default 0)",
    )
    group.addoption(
        "--fuzzkit-targets",
        default=None,
        metavar="NAMES",
        help="also fuzz fuzzkit's built-in implementations of these targets (comma-separated, "
        "or 'all'), one item each; your own marked implementations need no option",
    )
    group.addoption(
        "--fuzzkit-corpus",
        default=None,
        metavar="DIR",
        help="where findings are saved (DIR/<target>/findings/; default: the fuzzkit_corpus "
        "ini option, else $FUZZKIT_CORPUS, else corpus/ in the rootdir)",
    )
    group.addoption(
        "--fuzzkit-impl",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="outside implementation that corpus regressions may name (repeatable; "
        "also the fuzzkit_impl ini list); a case file alone never chooses code",
    )
    parser.addini(
        "fuzzkit_impl",
        "outside implementations (module:attr) that corpus regressions may name",
        type="linelist",
        default=[],
    )
    parser.addini("fuzzkit_corpus", "where fuzz findings are saved (default: corpus)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fuzzkit_target(name, impl=None): the fuzzkit target of a test; impl= (a callable, a "
        "'module:attr' string or a list of them) is what `fuzzkit_fuzz` and `fuzzkit_impl` run",
    )
    config.addinivalue_line("markers", "kernel: runs a Triton kernel")


class CaseFailed(Exception):
    """A replayed or fuzzed case failed; carries the text to show instead of a traceback."""


# ---------------------------------------------------------------------------------------------
# Corpus regressions

#: A fuzzkit case file names its format in its first key (``Case.to_json``); peek this far.
_PEEK_BYTES = 4096
_CASE_FORMAT = re.compile(rb'"format"\s*:\s*"fuzzkit-case/')


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if (
        file_path.suffix == ".json"
        and file_path.parent.name == "regressions"
        and _is_case_file(file_path)
    ):
        return RegressionFile.from_parent(parent, path=file_path)
    return None


def _is_case_file(path: Path) -> bool:
    """Whether ``path`` claims to be a fuzzkit case file: a user's own ``regressions/*.json``
    is not ours to run.  A cheap, bounded peek (a regular file's first bytes only); a file
    that claims the format but is broken is collected, to fail with the loader's message."""
    try:
        if not path.is_file():
            return False
        with path.open("rb") as handle:
            head = handle.read(_PEEK_BYTES)
    except OSError:
        return False
    return _CASE_FORMAT.search(head) is not None


class RegressionFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        yield RegressionItem.from_parent(self, name=self.path.stem)


class _FuzzkitItem(pytest.Item):
    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)


class RegressionItem(_FuzzkitItem):
    """One corpus regression file: loaded, bounded and validated like ``fuzzkit replay`` does
    (the file may come from anyone), run with a time limit, and isolated in a child process when
    its recorded failure is a crash, hang or OOM -- so a regression that comes back is a failed
    test, not a dead pytest."""

    #: Seconds one regression case may take.
    CASE_TIMEOUT_S = 60.0

    def runtest(self) -> None:
        from fuzzkit.admission import admit, case_checker, isolation
        from fuzzkit.case import load
        from fuzzkit.errors import FuzzkitError
        from fuzzkit.registry import implementation_named_by_file

        try:
            case = load(self.path)
            target = admit(case, str(self.path))
            allowed = [*self.config.getoption("fuzzkit_impl"), *self.config.getini("fuzzkit_impl")]
            impl = implementation_named_by_file(
                target, case.implementation, str(self.path), allowed=allowed
            )
        except FuzzkitError as exc:
            raise CaseFailed(f"cannot replay: {exc}") from None
        reason = impl.unavailable()
        if reason:
            pytest.skip(f"{impl.name} unavailable: {reason}")
        isolate, memory_mb = isolation(case)
        with case_checker(
            target, impl, isolate=isolate, case_timeout=self.CASE_TIMEOUT_S, memory_mb=memory_mb
        ) as check:
            failure = check(target, impl, case.inputs).failure
        if failure is not None:
            raise CaseFailed(
                f"{failure.signature}\n{failure.message}\nreplay: fuzzkit replay {self.path}"
            )

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"fuzzkit regression {self.path.name}"


# ---------------------------------------------------------------------------------------------
# Fuzzing


def fuzz_and_report(
    config: pytest.Config, target: Any, impl: Any, *, cases: int | None = None
) -> Any:
    """Fuzz ``impl``; on findings, raise :class:`CaseFailed` with the short report.

    Without ``--fuzzkit-budget`` the run is ``cases`` generated cases (default
    :data:`DEFAULT_CASES`), seeded and without an example database, so a plain ``pytest`` run
    sees the same cases every time; with it, a budgeted run that remembers failing examples under
    ``<rootdir>/.fuzzkit/hypothesis``.  Findings are saved as soon as they are final."""
    from fuzzkit.case import Case
    from fuzzkit.engines.hypothesis import fuzz

    reason = impl.unavailable()
    if reason:
        pytest.skip(f"{impl.name} unavailable: {reason}")
    budget = config.getoption("fuzzkit_budget")
    root = corpus_root(config)
    saved: list[tuple[Case, Path]] = []

    def keep(case: Case, sequence: Any) -> None:  # on disk as soon as it is final
        saved.append((case, case.save(root / case.target / "findings")))

    if budget:
        run = dict(budget=budget, database_dir=config.rootpath / ".fuzzkit" / "hypothesis")
    else:
        run = dict(budget=DEFAULT_CAP_S, max_cases=cases or DEFAULT_CASES, profile="ci")
    result = fuzz(target, impl, seed=config.getoption("fuzzkit_seed"), on_finding=keep, **run)
    report = "\n".join(failure_report(config, result, saved)) if saved else ""
    if result.interrupted:  # Ctrl-C: the engine kept every finding; stop the session too
        pytest.exit(f"interrupted while fuzzing {impl.name}\n{report}".rstrip(), returncode=2)
    if saved:
        raise CaseFailed(report)
    return result


def failure_report(config: pytest.Config, result: Any, saved: list[tuple[Any, Path]]) -> list[str]:
    """A few lines per finding (signature, bounded message, case file, replay command): what
    a user needs to act, never the case's inputs or a traceback through fuzzkit."""
    from fuzzkit.testing import bounded, replay_hint, shown_path

    cwd = config.invocation_params.dir
    first = result.cases_to_first_failure
    lines = [
        f"fuzzkit: {len(saved)} finding(s) in {result.implementation} ({result.target})"
        + (f", first failure at case {first}" if first is not None else "")
        + f", {result.cases} cases run with shrinking, seed {result.seed}"
    ]
    for case, path in saved[:SHOWN_FINDINGS]:
        failure = case.failure
        lines.append(f"{failure.signature}")
        message = bounded(failure.message, lines=MESSAGE_LINES)
        lines += [f"  {line}" for line in message.splitlines()]
        lines.append(f"  minimized case: {shown_path(path, cwd)}")
        hint = replay_hint(path, case.implementation, cwd=cwd)
        lines.append(f"  replay: {hint[0]}")
        lines += [f"  {note}" for note in hint[1:]]
    if len(saved) > SHOWN_FINDINGS:
        folder = shown_path(saved[0][1].parent, cwd)
        lines.append(f"... and {len(saved) - SHOWN_FINDINGS} more finding(s) under {folder}")
    return lines


def corpus_root(config: pytest.Config) -> Path:
    """Where findings go: ``--fuzzkit-corpus``, the ``fuzzkit_corpus`` ini option (relative to
    the rootdir), ``$FUZZKIT_CORPUS``, or ``corpus/`` in the rootdir -- the project's corpus,
    wherever pytest was started."""
    import os

    chosen = config.getoption("fuzzkit_corpus")
    if chosen:
        return Path(chosen)
    configured = config.getini("fuzzkit_corpus")
    if configured:
        return config.rootpath / str(configured)
    if os.environ.get("FUZZKIT_CORPUS"):
        return Path(os.environ["FUZZKIT_CORPUS"])
    return config.rootpath / "corpus"


class FuzzItem(_FuzzkitItem):
    """One built-in target x implementation pair (``--fuzzkit-targets``)."""

    def __init__(self, *, target_name: str, impl_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target_name, self.impl_name = target_name, impl_name

    def runtest(self) -> None:
        from fuzzkit.registry import get_target

        target = get_target(self.target_name)
        fuzz_and_report(self.config, target, target.implementation(self.impl_name))

    def reportinfo(self) -> tuple[str, int, str]:
        return "fuzzkit", 0, f"fuzz {self.target_name}/{self.impl_name}"


class Fuzz:
    """What ``fuzzkit_fuzz`` gives a test: call it to fuzz the test's implementation."""

    def __init__(self, config: pytest.Config, target: Any, impl: Any) -> None:
        self.config, self.target, self.implementation = config, target, impl

    def __call__(self, *, cases: int | None = None) -> Any:
        """Fuzz; the run's :class:`~fuzzkit.engines.hypothesis.FuzzResult` when clean, a failed
        test with the short report otherwise.  ``cases``: generated cases of a run without
        ``--fuzzkit-budget`` (default 30; more than 30 may vary with the machine's speed)."""
        try:
            return fuzz_and_report(self.config, self.target, self.implementation, cases=cases)
        except CaseFailed as exc:
            report = str(exc)
        pytest.fail(report, pytrace=False)  # outside the except: no "during handling" chain

    def __repr__(self) -> str:
        return f"<fuzzkit_fuzz {self.target.name}/{self.implementation.name}>"


@pytest.fixture
def fuzzkit_fuzz(request: pytest.FixtureRequest, fuzzkit_target: Any, fuzzkit_impl: Any) -> Fuzz:
    """Call it to fuzz the marked implementation (one test per ``impl=``)."""
    return Fuzz(request.config, fuzzkit_target, fuzzkit_impl)


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    for item in items:
        if item.get_closest_marker("fuzzkit_target") is not None:
            _without_deadline(item)
    wanted = config.getoption("fuzzkit_targets")
    if not wanted:
        return
    from fuzzkit.errors import UsageError
    from fuzzkit.registry import get_target, target_names

    names = target_names() if wanted.strip() == "all" else [n for n in wanted.split(",") if n]
    for name in names:
        try:
            target = get_target(name.strip())
        except UsageError as exc:
            raise pytest.UsageError(f"--fuzzkit-targets: {exc}") from None
        for impl_name in target.implementations:
            items.append(
                FuzzItem.from_parent(
                    session,
                    name=f"fuzzkit[{target.name}-{impl_name}]",
                    target_name=target.name,
                    impl_name=impl_name,
                )
            )


#: Hypothesis profiles that are Hypothesis's own: a test under one of them gets fuzzkit's
#: settings; a profile the user loaded is theirs and is left alone.
_BUILTIN_PROFILES = (None, "default", "ci", "dev", "debug")


def _without_deadline(item: pytest.Item) -> None:
    """A marked Hypothesis test without its own ``@settings`` runs with no deadline and without
    the too-slow / data-too-large health checks: a target's first case pays for imports and
    kernel compilation, and its inputs are arrays (Hypothesis's 200 ms deadline failed the
    README's own example on a first run)."""
    from hypothesis import HealthCheck, settings

    function = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
    if not getattr(function, "is_hypothesis_test", False):
        return
    if hasattr(function, "_hypothesis_internal_settings_applied"):
        return  # the user's own @settings (or ours, from an earlier item of the same function)
    if getattr(settings, "_current_profile", None) not in _BUILTIN_PROFILES:
        return
    current = settings()  # the active profile's settings
    suppressed = [*current.suppress_health_check, HealthCheck.too_slow, HealthCheck.data_too_large]
    settings(current, deadline=None, suppress_health_check=suppressed)(function)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Provide ``fuzzkit_target`` and ``fuzzkit_impl`` as direct parameters.

    Direct parameters rather than fixtures: a function-scoped fixture would trip Hypothesis's
    health check in ``@given`` tests, and a Target is read-only, so sharing it is safe.
    """
    wants_target = "fuzzkit_target" in metafunc.fixturenames
    wants_impl = "fuzzkit_impl" in metafunc.fixturenames
    if not (wants_target or wants_impl):
        return
    from fuzzkit.errors import UsageError
    from fuzzkit.registry import get_target
    from fuzzkit.testing import short_id, user_implementations

    node = metafunc.definition
    marker = node.get_closest_marker("fuzzkit_target")
    if marker is None or not marker.args:
        pytest.fail(
            f"{node.nodeid}: fuzzkit_target, fuzzkit_impl and fuzzkit_fuzz need "
            '@pytest.mark.fuzzkit_target("name", impl=your_implementation)',
            pytrace=False,
        )
    try:
        target = get_target(str(marker.args[0]))
        if "impl" in marker.kwargs:
            impls = user_implementations(target, marker.kwargs["impl"])
        elif "fuzzkit_fuzz" in metafunc.fixturenames:
            raise UsageError(
                f"fuzzkit_fuzz fuzzes your implementation: @pytest.mark.fuzzkit_target("
                f'"{target.name}", impl=your_implementation)'
            )
        else:
            impls = [i for i in target.implementations.values() if i.unavailable() is None]
    except UsageError as exc:
        pytest.fail(f"{node.nodeid}: {exc}", pytrace=False)
    if wants_target:
        metafunc.parametrize("fuzzkit_target", [target], ids=[target.name])
    if wants_impl:  # ids read test_x[quant-my_impl]: select one with pytest's node id
        metafunc.parametrize("fuzzkit_impl", impls, ids=[short_id(i) for i in impls])
