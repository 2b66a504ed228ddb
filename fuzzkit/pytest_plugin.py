"""pytest plugin (entry point ``pytest11``): corpus regressions, fuzz items, fixtures.

* Every ``**/regressions/*.json`` case file under a collected directory becomes a test item that
  replays it; it fails with the oracle's message and the command that replays it by hand.
* ``--fuzzkit-budget SECONDS`` adds one fuzz item per target x implementation.
* ``@pytest.mark.fuzzkit_target("quant")`` with the ``fuzzkit_target`` fixture gives a test the
  Target; a test that also asks for ``fuzzkit_impl`` is parametrized over the target's
  implementations that can run here.  :func:`fuzzkit.testing.target_inputs` gives the
  target's Hypothesis strategy for writing properties.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fuzzkit")
    group.addoption(
        "--fuzzkit-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="add one fuzz item per target x implementation, each fuzzing this long",
    )
    group.addoption(
        "--fuzzkit-seed",
        type=int,
        default=0,
        metavar="N",
        help="seed for --fuzzkit-budget fuzz items (default 0)",
    )
    group.addoption(
        "--fuzzkit-targets",
        default=None,
        metavar="NAMES",
        help="comma-separated targets for --fuzzkit-budget (default: all)",
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fuzzkit_target(name): the target for `fuzzkit_target`")
    config.addinivalue_line("markers", "kernel: runs a Triton kernel")


class CaseFailed(Exception):
    """A replayed or fuzzed case failed; carries the text to show instead of a traceback."""


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".json" and file_path.parent.name == "regressions":
        return RegressionFile.from_parent(parent, path=file_path)
    return None


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


class FuzzItem(_FuzzkitItem):
    def __init__(self, *, target_name: str, impl_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target_name, self.impl_name = target_name, impl_name

    def runtest(self) -> None:
        from fuzzkit import corpus
        from fuzzkit.engines.hypothesis import fuzz
        from fuzzkit.registry import get_target

        config = self.config
        target = get_target(self.target_name)
        impl = target.implementation(self.impl_name)
        reason = impl.unavailable()
        if reason:
            pytest.skip(f"{impl.name} unavailable: {reason}")
        saved: list[tuple[Any, Any]] = []

        def keep(case: Any, sequence: Any) -> None:  # on disk as soon as it is final
            saved.append((case, corpus.save(case, corpus.default_root())))

        result = fuzz(
            target,
            impl,
            budget=config.getoption("fuzzkit_budget"),
            seed=config.getoption("fuzzkit_seed"),
            on_finding=keep,
        )
        if saved:
            lines = [f"{len(saved)} finding(s) after {result.cases} cases"]
            for case, path in saved:
                failure = case.failure
                lines += [
                    f"{failure.signature}: {failure.message}",
                    f"  minimized case: {path}",
                    f"  replay: fuzzkit replay {path}",
                ]
            raise CaseFailed("\n".join(lines))

    def reportinfo(self) -> tuple[str, int, str]:
        return "fuzzkit", 0, f"fuzz {self.target_name}/{self.impl_name}"


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    budget = config.getoption("fuzzkit_budget")
    if not budget:
        return
    from fuzzkit.registry import get_target, target_names

    wanted = config.getoption("fuzzkit_targets")
    names = wanted.split(",") if wanted else target_names()
    for name in names:
        target = get_target(name)
        for impl_name in target.implementations:
            items.append(
                FuzzItem.from_parent(
                    session,
                    name=f"fuzzkit[{name}-{impl_name}]",
                    target_name=name,
                    impl_name=impl_name,
                )
            )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Provide ``fuzzkit_target`` and ``fuzzkit_impl`` as direct parameters.

    Direct parameters rather than fixtures: a function-scoped fixture would trip Hypothesis's
    health check in ``@given`` tests, and a Target is read-only, so sharing it is safe.
    """
    wants_target = "fuzzkit_target" in metafunc.fixturenames
    wants_impl = "fuzzkit_impl" in metafunc.fixturenames
    if not (wants_target or wants_impl):
        return
    target = _marked_target(metafunc.definition)
    if wants_target:
        metafunc.parametrize("fuzzkit_target", [target], ids=[target.name])
    if wants_impl:
        impls = [i for i in target.implementations.values() if i.unavailable() is None]
        metafunc.parametrize("fuzzkit_impl", impls, ids=[i.name for i in impls])


def _marked_target(node: Any) -> Any:
    from fuzzkit.registry import get_target

    marker = node.get_closest_marker("fuzzkit_target")
    if marker is None or not marker.args:
        raise pytest.UsageError(
            f"{node.nodeid}: fuzzkit_target and fuzzkit_impl need "
            '@pytest.mark.fuzzkit_target("name")'
        )
    return get_target(marker.args[0])
