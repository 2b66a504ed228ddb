"""The one way a target declares how a mutant is applied: a :class:`Patch`.

A mutant's bug is written out as plain code (a buggy function, a one-line edit of a kernel's
source); *applying* it is always the same operation -- for the duration of a block, replace some
attributes of some modules or classes, then put back exactly what was there.  Declaring every
mutant through this one vocabulary lets one conformance test check all of them (each changes
something, restores every attribute to the identical object, nests, and still applies to the
current code), which hand-written context managers could not promise.

* :func:`patch` ``(owner, **attrs)`` replaces attributes of a module or class.  An attribute the
  owner lacks raises ``AttributeError`` -- a renamed function must not turn a mutant into a
  silent no-op.  A value wrapped in :func:`derived` is built from the original at each
  application (a wrapper around it, or state that must start fresh every time).
* :func:`source_edit` ``(module, old, new, ..., attribute=...)`` swaps ``module.<attribute>`` for
  the same attribute of a private copy of the module whose source has each ``old`` line replaced
  by ``new``.  A buggy kernel written out by hand drifts from the kernel it claims to mutate; one
  made by replacing a line of the *current* source stays one line away from it forever.  An
  anchor that does not occur exactly once raises ``RuntimeError`` instead of silently testing the
  clean code.
* :func:`device_mutants` turns a ``KERNEL_MUTANTS`` table of such patches into
  :class:`~fuzzkit.target.Mutant` records.

An owner may be given as a dotted module name, imported only when the patch is applied, so that
declaring a mutant of a Triton kernel or a torch implementation imports neither.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import importlib
import shutil
import tempfile
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Callable
from unittest import mock

if TYPE_CHECKING:
    from fuzzkit.target import Mutant

#: ``(old, new)``: one replacement in a module's source.
LineEdit = tuple[str, str]

_VARIANTS: dict[tuple[str, tuple[LineEdit, ...]], ModuleType] = {}
_TMPDIR: list[Path] = []


@dataclasses.dataclass(frozen=True)
class derived:  # noqa: N801 - used like a function: patch(owner, name=derived(fn))
    """A replacement built by ``fn(original)`` each time the patch is applied.

    For a wrapper around the attribute it replaces, or for buggy state (a cache) that must start
    empty at every application so that nothing leaks from one run of the mutant into the next.
    """

    fn: Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class Edit:
    """One attribute a patch replaces.

    ``owner`` is a module or class, or a dotted module name imported at application.  Exactly one
    of ``value`` (a replacement or a :class:`derived`) and ``lines`` (the source edit whose
    variant supplies the replacement) is meaningful: ``lines`` non-empty marks a source edit.
    """

    owner: Any
    attribute: str
    value: Any = None
    lines: tuple[LineEdit, ...] = ()

    def resolve(self) -> Any:
        """The owner object (imports it when it was given by name: ``"pkg.mod"`` or, for a class
        of an optional package that must not be imported until the mutant runs,
        ``"pkg.mod:Class"``)."""
        if isinstance(self.owner, str):
            module, _, path = self.owner.partition(":")
            owner: Any = importlib.import_module(module)
            for name in filter(None, path.split(".")):
                owner = getattr(owner, name)
            return owner
        return self.owner

    def replacement(self, owner: Any) -> Any:
        """What the attribute becomes, given its owner (built now: the original is current)."""
        if self.lines:
            return getattr(source_variant(owner, self.lines), self.attribute)
        if isinstance(self.value, derived):
            return self.value.fn(getattr(owner, self.attribute))
        return self.value

    def describe(self) -> str:
        owner = self.owner if isinstance(self.owner, str) else _name_of(self.owner)
        what = f"{len(self.lines)} source line edit(s)" if self.lines else "replaced"
        return f"{owner}.{self.attribute} ({what})"


class Patch:
    """A zero-argument factory of a context manager that applies one mutant.

    Each call returns a fresh manager, so applications nest (an inner one restores what the
    outer one installed); entering one manager twice at once is refused.  ``edits`` is public
    for checks that inspect what a mutant touches (see :meth:`sites`).
    """

    def __init__(self, edits: tuple[Edit, ...], doc: str = "") -> None:
        if not edits:
            raise ValueError("a patch must replace at least one attribute")
        self.edits = edits
        self.__doc__ = doc or "Replaces " + ", ".join(e.describe() for e in edits) + "."

    def __call__(self) -> _Applied:
        return _Applied(self)

    def __repr__(self) -> str:
        return f"Patch({', '.join(e.describe() for e in self.edits)})"

    def documented(self, doc: str) -> Patch:
        """The same patch carrying ``doc`` (the bug it models) as its docstring."""
        return Patch(self.edits, doc)

    def sites(self) -> list[tuple[Any, str]]:
        """``(owner, attribute)`` of every replacement, owners resolved (and imported)."""
        return [(edit.resolve(), edit.attribute) for edit in self.edits]


class _Applied:
    """One application of a :class:`Patch` (``unittest.mock.patch.object`` per edit, which
    restores the original object exactly, inherited and descriptor attributes included)."""

    def __init__(self, patch: Patch) -> None:
        self._patch = patch
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> None:
        if self._stack is not None:
            raise RuntimeError(
                f"{self._patch!r} is already applied by this context manager; call the patch "
                "again for a nested application"
            )
        with contextlib.ExitStack() as stack:
            for edit in self._patch.edits:
                owner = edit.resolve()
                _require(owner, edit.attribute)
                value = edit.replacement(owner)
                stack.enter_context(mock.patch.object(owner, edit.attribute, value))
            self._stack = stack.pop_all()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.__exit__(exc_type, exc, tb)


def patch(owner: Any, /, **attrs: Any) -> Patch:
    """Replace ``owner.<name>`` by each ``value`` of ``attrs`` while the patch is applied.

    ``owner`` is a module or class (checked now: a missing attribute raises
    ``AttributeError``), or a dotted module name, optionally ``"pkg.mod:Class"`` (checked when
    applied).
    """
    if not attrs:
        raise ValueError("patch() needs at least one attribute to replace")
    if not isinstance(owner, str):
        for name in attrs:
            _require(owner, name)
    return Patch(tuple(Edit(owner, name, value) for name, value in attrs.items()))


def source_edit(
    module: ModuleType | str, old: str, new: str, *more: LineEdit, attribute: str
) -> Patch:
    """Swap ``module.<attribute>`` for that of a copy of ``module`` with ``old`` replaced by
    ``new`` (and each further ``(old, new)`` pair, in order) in its source.

    The copy is written to a private temporary file (Triton reads a kernel's source from its
    file) and imported once per process and edit.  Each ``old`` must occur exactly once in the
    source as edited so far, else applying the patch raises ``RuntimeError``.
    """
    lines = ((old, new), *more)
    return Patch((Edit(module, attribute, lines=lines),))


def edited_source(module: ModuleType, lines: tuple[LineEdit, ...]) -> str:
    """``module``'s source with each ``(old, new)`` applied in turn; ``RuntimeError`` when an
    anchor does not occur exactly once (the edit no longer says what it meant)."""
    if module.__file__ is None:
        raise RuntimeError(f"{module.__name__} has no source file to edit")
    source = Path(module.__file__).read_text()
    for old, _new in lines:
        found = source.count(old)
        if found != 1:
            raise RuntimeError(
                f"source edit no longer applies: {old.strip()!r} occurs {found} times in "
                f"{module.__file__} (expected once)"
            )
        source = source.replace(old, _new)
    return source


def source_variant(module: ModuleType, lines: tuple[LineEdit, ...]) -> ModuleType:
    """``module`` with ``lines`` applied, imported privately (built once per process)."""
    from fuzzkit import triton_support

    key = (module.__name__, lines)
    if key not in _VARIANTS:
        source = edited_source(module, lines)
        digest = hashlib.sha1(repr(lines).encode()).hexdigest()[:10]
        safe = "".join(c if c.isalnum() else "_" for c in module.__name__)
        name = f"_fuzzkit_mutant_{safe}_{digest}"
        _VARIANTS[key] = triton_support.import_source(name, source, _module_dir())
    return _VARIANTS[key]


def device_mutants(module: str, implementation: str = "triton") -> list[Mutant]:
    """The mutants of a target's kernels, from ``module``'s ``KERNEL_MUTANTS``
    (``{name: (patch, bug_class, citation)}``), as ``kernel-<name>`` on ``implementation``;
    none while that module cannot be imported."""
    from fuzzkit.target import Mutant

    try:
        kernel_mutants = importlib.import_module(module)
    except ImportError:
        return []
    return [
        Mutant(f"kernel-{name}", implementation, bug_class, citation, patch)
        for name, (patch, bug_class, citation) in kernel_mutants.KERNEL_MUTANTS.items()
    ]


def _require(owner: Any, name: str) -> None:
    if not hasattr(owner, name):
        raise AttributeError(
            f"{_name_of(owner)} has no attribute {name!r} to patch (renamed? the mutant would "
            "silently test the clean code)"
        )


def _name_of(owner: Any) -> str:
    return str(getattr(owner, "__qualname__", None) or getattr(owner, "__name__", repr(owner)))


def _module_dir() -> Path:
    if not _TMPDIR:
        path = Path(tempfile.mkdtemp(prefix="fuzzkit_kernel_mutants_"))
        atexit.register(shutil.rmtree, path, True)
        _TMPDIR.append(path)
    return _TMPDIR[0]
