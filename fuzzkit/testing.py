"""Helpers for testing your own implementation against a fuzzkit target in pytest.

import pytest
from hypothesis import given
from fuzzkit.testing import target_inputs, assert_agrees

@pytest.mark.fuzzkit_target("quant", impl=my_kernel)
def test_fuzz_my_kernel(fuzzkit_fuzz):      # fuzzes my_kernel, see fuzzkit.pytest_plugin
    fuzzkit_fuzz()

@pytest.mark.fuzzkit_target("quant", impl=my_kernel)
@given(inputs=target_inputs("quant"))
def test_my_kernel(fuzzkit_target, fuzzkit_impl, inputs):
    assert_agrees(fuzzkit_target, fuzzkit_impl, inputs)

:func:`user_implementations` turns what a marker's ``impl=`` names into implementations and
:func:`replay_hint` writes the command that replays a finding of one.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path
from typing import Any, Callable

from fuzzkit.errors import UsageError
from fuzzkit.failure import Failure
from fuzzkit.registry import as_implementation, get_target, resolve_implementation
from fuzzkit.runner import check_case
from fuzzkit.target import Implementation, Inputs, Target


def target_inputs(name: str) -> Any:
    """The Hypothesis strategy that makes ``inputs`` for target ``name``."""
    return get_target(name).strategy_for()


def assert_agrees(
    target: Target | str,
    impl: Implementation | Callable[[Inputs], Any],
    inputs: Inputs,
    *,
    properties: bool = True,
) -> None:
    """Fail the test (AssertionError with the oracle's message) unless ``impl`` agrees."""
    # pytest leaves this frame out of the report: the user's line and the message are the news,
    # not fuzzkit's source.
    __tracebackhide__ = True
    target = get_target(target) if isinstance(target, str) else target
    implementation = impl if isinstance(impl, Implementation) else as_implementation(impl, "test")
    failure = check_case(target, implementation, inputs, properties=properties).failure
    if failure is not None:
        raise AssertionError(f"{failure.signature}: {bounded(failure.message)}")


#: How much of a failure message a test report shows: an oracle message may list every
#: differing element, and a pytest report is read, not grepped.
MESSAGE_CHARS = 400
MESSAGE_LINES = 4


def bounded(message: str, lines: int = MESSAGE_LINES, chars: int = MESSAGE_CHARS) -> str:
    """``message`` cut to ``lines`` lines of at most ``chars`` characters in all."""
    kept = message.splitlines() or [""]
    text = "\n".join(kept[:lines])
    if len(text) > chars:
        text = text[: chars - 3].rstrip() + "..."
    elif len(kept) > lines:
        text += " ..."
    return text


def user_implementations(target: Target, impl: Any) -> list[Implementation]:
    """The implementations a marker's ``impl=`` names: a callable (or a class, for a target
    whose ``adapt_external`` takes one), a ``"module:attr"`` string, a registered name, an
    :class:`Implementation`, or a list of these.

    A callable defined at module level is named ``module:qualname``, the name ``--impl`` takes,
    so that a finding records it and ``fuzzkit replay --impl`` can run it again; one defined
    inside a function keeps its bare name (it cannot be replayed from the command line)."""
    items = list(impl) if isinstance(impl, (list, tuple)) else [impl]
    if not items:
        raise UsageError(f"target {target.name!r}: impl= names no implementation")
    return [_one_implementation(target, item) for item in items]


def _one_implementation(target: Target, item: Any) -> Implementation:
    if isinstance(item, Implementation):
        return item
    if isinstance(item, str):
        return resolve_implementation(target, item)
    if not callable(item):
        raise UsageError(
            f"impl= takes a callable, a 'module:attr' string or a list of them, not "
            f"{type(item).__name__}"
        )
    name = importable_name(item) or str(getattr(item, "__name__", type(item).__name__))
    if target.adapt_external is not None:
        return target.adapt_external(item, name)
    return as_implementation(item, name)


def importable_name(obj: Any) -> str | None:
    """``module:qualname`` when ``obj`` can be found again by importing (None for a lambda, a
    nested function or one defined in ``__main__``)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def short_id(impl: Implementation) -> str:
    """The test id of an implementation: ``my_impl`` for ``mypkg.scoring:my_impl``."""
    return impl.name.rpartition(":")[2].rpartition(".")[2] or impl.name


def replay_hint(path: Path, impl_name: str, *, cwd: Path) -> list[str]:
    """The command that replays the case at ``path`` from ``cwd`` (the words every report uses,
    :mod:`fuzzkit.replay_hint`), and for an outside implementation the note that it replays
    only where that module imports.

    A module that was not imported from an installed location (a project's own package, which
    pytest finds from its rootdir and ``fuzzkit`` does not) needs its import root on
    ``PYTHONPATH``: the command then sets it, so it runs as printed (harmless where it is not
    needed)."""
    from fuzzkit import replay_hint as hint

    command = hint.replay_command(shown_path(path, cwd), impl_name)
    module = hint.outside_module(impl_name)
    if module is None:
        return [command]
    root = _import_root(module)
    if root is not None and not _installed(root):
        command = f"PYTHONPATH={shlex.quote(shown_path(root, cwd))} {command}"
    return [command, f"({hint.replay_note(impl_name)})"]


def _import_root(module: str) -> Path | None:
    """The ``sys.path`` entry ``module`` was imported from, or None if unknown."""
    loaded = sys.modules.get(module)
    origin = getattr(loaded, "__file__", None)
    if origin is None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec is not None else None
    if not origin:
        return None
    root = Path(origin).resolve().parent
    depth = module.count(".") + (1 if Path(origin).name == "__init__.py" else 0)
    for _ in range(depth):
        root = root.parent
    return root


def _installed(root: Path) -> bool:
    """Whether ``root`` is where a fresh interpreter finds modules by itself: the standard
    library or a site-packages directory."""
    import site
    import sysconfig

    places = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    places.update(site.getsitepackages())
    places.add(site.getusersitepackages())
    return root.resolve() in {Path(p).resolve() for p in places if p}


def shown_path(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when under it (what a user types), else absolute."""
    path = path.resolve()
    try:
        return str(path.relative_to(cwd.resolve())) or "."
    except ValueError:
        return str(path)


class _Found(Exception):
    """Stops the Hypothesis loop at the first failure (no shrinking wanted)."""


def first_failure(
    target: Target,
    impl: Implementation,
    max_examples: int,
    *,
    seed: int | None = None,
    properties: bool = True,
) -> Failure | None:
    """Fuzz ``impl`` with the target's strategy until the oracle (or, with ``properties``, a
    property) fails; that failure, or None after ``max_examples`` clean cases.  Deterministic:
    Hypothesis is derandomized, or seeded with ``seed``; generation only, no shrinking and no
    example database, so a test that proves "this mutant is caught" cannot pass by replaying an
    old find."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    found: list[Failure] = []

    @settings(
        max_examples=max_examples,
        derandomize=seed is None,
        phases=[Phase.generate],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(target.strategy_for(impl))
    def search(inputs: Inputs) -> None:
        failure = check_case(target, impl, inputs, properties=properties, confirm=False).failure
        if failure is not None:
            found.append(failure)
            raise _Found

    if seed is not None:
        search = hypothesis_seed(seed)(search)
    try:
        search()
    except _Found:
        pass
    return found[0] if found else None
