"""Where targets and implementations come from: entry points and a decorator.

The engine imports no target: the targets shipped in this repository are found exactly like a
third party's, through the entry points declared in ``pyproject.toml``.  Plugging in never
touches fuzzkit, pytest-style:

* ``fuzzkit.targets`` entry points: ``name = "pkg.module:factory"`` (a zero-argument callable
  returning a :class:`~fuzzkit.target.Target`, or a Target itself);
* ``fuzzkit.implementations`` entry points: ``"<target>.<impl>" = "pkg.module:callable"`` adds an
  implementation to an existing target;
* ``--impl module:attr`` at the command line: a one-off outside implementation;
* :func:`register_target` for code that runs in-process (tests, conftest files).

Targets are built lazily and once per process: importing fuzzkit must not import torch.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Callable, Sequence

from fuzzkit.errors import UsageError
from fuzzkit.target import Implementation, Target, accepts_keywords, split_options

#: A target as registered: the object, a factory, or an entry point's "module:attr" (kept as a
#: string so that nothing is imported until the target is asked for).
TargetSource = Target | Callable[[], Target] | str

_sources: dict[str, TargetSource] = {}
_built: dict[str, Target] = {}
_entry_points_loaded = False


def register_target(name_or_source: Any = None, *, replace: bool = False) -> Any:
    """Register a Target, or a factory, by decorator or by call.

    ``@register_target("name")`` on a factory, ``@register_target`` on a factory whose Target
    carries the name, or ``register_target(target)`` for a ready object.
    """
    if isinstance(name_or_source, Target):
        _add(name_or_source.name, name_or_source, replace)
        return name_or_source
    if callable(name_or_source) and not isinstance(name_or_source, str):
        factory = name_or_source
        target = factory()
        _add(target.name, target, replace)
        return factory

    def decorator(factory: Callable[[], Target]) -> Callable[[], Target]:
        _add(name_or_source or factory.__name__, factory, replace)
        return factory

    return decorator


def unregister_target(name: str) -> None:
    _sources.pop(name, None)
    _built.pop(name, None)


def _add(name: str, source: TargetSource, replace: bool) -> None:
    if name in _sources and not replace and _sources[name] is not source:
        raise ValueError(f"a target named {name!r} is already registered")
    _sources[name] = source
    _built.pop(name, None)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in importlib.metadata.entry_points(group="fuzzkit.targets"):
        _sources.setdefault(ep.name, ep.value)


def from_entry_point(name: str) -> bool:
    """Whether target ``name`` is known through a ``fuzzkit.targets`` entry point (any fresh
    process finds it by name) rather than registered in this process (tests, conftest files)."""
    _load_entry_points()
    return isinstance(_sources.get(name), str)


def target_names() -> list[str]:
    _load_entry_points()
    return sorted(_sources)


def get_target(name: str) -> Target:
    """The target called ``name``, with any entry-point implementations attached."""
    _load_entry_points()
    if name in _built:
        return _built[name]
    if name not in _sources:
        if not target_names():  # a checkout run without installing: no entry points at all
            raise UsageError(
                f"unknown target {name!r}: no targets are registered, because targets come from "
                "the `fuzzkit.targets` entry points of installed packages; install fuzzkit "
                "(`pip install -e .` in a checkout)"
            )
        known = ", ".join(target_names())
        raise UsageError(f"unknown target {name!r} (known: {known}); `fuzzkit list` shows them")
    source = _sources[name]
    if isinstance(source, str):
        source = load_object(source, what=f"target {name!r}")
    target = source if isinstance(source, Target) else source()
    if not isinstance(target, Target):
        raise UsageError(
            f"target {name!r} did not produce a fuzzkit Target (got {type(target).__name__})"
        )
    for ep in importlib.metadata.entry_points(group="fuzzkit.implementations"):
        target_name, _, impl_name = ep.name.partition(".")
        if target_name == name and impl_name:
            target.implementations[impl_name] = as_implementation(
                load_object(ep.value, what=f"implementation {ep.name!r}"), impl_name
            )
    _built[name] = target
    return target


def source_packages(names: Any) -> list[str]:
    """The packages the targets ``names`` come from, *without importing them* (``--coverage``
    starts measuring before any target module is imported): ``"pkg.mod"`` for the entry point
    ``"pkg.mod:factory"``; a target registered in-process gives its factory's module."""
    _load_entry_points()
    packages: list[str] = []
    for name in names:
        source = _sources.get(name)
        if isinstance(source, str):
            module = source.partition(":")[0]
        else:
            module = getattr(source, "__module__", None) or ""
        if module and module not in packages:
            packages.append(module)
    return packages


def _where(exc: BaseException) -> str:
    """``SyntaxError: '(' was never closed (badmod.py:3)``: the exception and the innermost
    place that raised it, on one line (a module's own error message may span several)."""
    import traceback

    if isinstance(exc, SyntaxError):
        place = f"{exc.filename}:{exc.lineno}"
        message = exc.msg
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        place = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        message = str(exc)
    message = " ".join(message.split())[:300]
    return f"{type(exc).__name__}: {message}" + (f" ({place})" if place else "")


def load_object(spec: str, *, what: str = "object") -> Any:
    """Import ``module:attr`` (attr may be dotted).  Errors become one-line UsageErrors."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(
            f"{what}: {spec!r} is not of the form module:attr (e.g. mypkg.kernels:my_impl)"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"{what}: cannot import {module_name!r} ({exc}); is it installed or on "
            "PYTHONPATH? (fuzzkit never imports from the current directory by "
            "itself: for a module here, run with PYTHONPATH=.)"
        ) from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed: their bug, not fuzzkit's
        raise UsageError(
            f"{what}: importing {module_name!r} raised {_where(exc)}; fix the module, "
            f"then check with: python -c 'import {module_name}'"
        ) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{what}: module {module_name!r} has no attribute {attr!r}") from None
    return obj


def as_implementation(obj: Any, name: str) -> Implementation:
    if isinstance(obj, Implementation):
        return obj
    if not callable(obj):
        raise UsageError(
            f"implementation {name!r} is a {type(obj).__name__}, not a callable inputs -> outputs"
        )
    return Implementation(
        name=name,
        fn=obj,
        backend="external",
        description=(obj.__doc__ or "").strip().split("\n")[0],
    )


def implementation_named_by_file(
    target: Target, name: str, source: str, *, allowed: str | Sequence[str] | None = None
) -> Implementation:
    """The implementation a case, sequence or state file names: a *registered* one only.

    A file is data, possibly from a stranger: were its ``module:attr`` imported and called with
    its inputs, a 500-byte case file could run ``subprocess:Popen``.  An outside implementation
    is chosen by the person at the command line (``--impl``), never by a file; ``allowed`` is
    that command-line choice (or the list the user configured), which a file may repeat."""
    chosen = [allowed] if isinstance(allowed, str) else list(allowed or ())
    if ":" in name and name not in chosen:
        raise UsageError(
            f"{source}: names the outside implementation {name!r}; a file cannot choose code to "
            f"import -- if you trust it, pass --impl {name} on the command line"
        )
    if ":" in name:
        return resolve_implementation(target, name)
    return target.implementation(name)


def resolve_implementation(target: Target, spec: str) -> Implementation:
    """An implementation by registered name, or an outside one given as ``module:attr``; either
    may carry options, ``SPEC[opt,key=value]`` (:func:`fuzzkit.target.split_options`), which an
    outside one gets as keywords of the target's ``adapt_external``."""
    base, options = split_options(spec)
    if ":" in base:
        obj = load_object(base, what=f"--impl {base}")
        if target.adapt_external is not None:
            if options and not accepts_keywords(target.adapt_external, options, var_keyword=True):
                raise UsageError(
                    f"--impl {spec}: target {target.name!r} does not take the "
                    f"option(s) {', '.join(sorted(options))}"
                )
            return target.adapt_external(obj, spec, **options)
        if options:
            raise UsageError(
                f"--impl {spec}: target {target.name!r} takes no options for an "
                "outside implementation"
            )
        return as_implementation(obj, spec)
    return target.implementation(spec)
