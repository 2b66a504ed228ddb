"""Kernel mutants as one-line source edits of the real kernel module.

A buggy kernel written out by hand drifts from the kernel it claims to mutate; a mutant made by
replacing one line of the *current* source stays one line away from it forever.  The edited
source is written to a private temporary module (Triton reads a kernel's source from its file)
and imported once per process and mutant; the mutant swaps the module attribute a launcher looks
up at call time.  An anchor line that no longer occurs exactly once raises ``RuntimeError``
instead of silently testing the clean kernel.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import shutil
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator
from unittest import mock

from fuzzkit import triton_support

_BUILT: dict[tuple[str, str], ModuleType] = {}
_TMPDIR: list[Path] = []


def _module_dir() -> Path:
    if not _TMPDIR:
        path = Path(tempfile.mkdtemp(prefix="fuzzkit_kernel_mutants_"))
        atexit.register(shutil.rmtree, path, True)
        _TMPDIR.append(path)
    return _TMPDIR[0]


def source_variant(
    module: ModuleType, name: str, replacements: tuple[tuple[str, str], ...]
) -> ModuleType:
    """``module`` with each ``(old, new)`` line replacement applied, imported privately."""
    key = (module.__name__, name)
    if key in _BUILT:
        return _BUILT[key]
    assert module.__file__ is not None
    source = Path(module.__file__).read_text()
    for old, new in replacements:
        found = source.count(old)
        if found != 1:
            raise RuntimeError(
                f"kernel mutant {name!r} no longer applies: {old.strip()!r} occurs "
                f"{found} times in {module.__file__} (expected once)"
            )
        source = source.replace(old, new)
    module_name = "_fuzzkit_mutant_" + "".join(
        c if c.isalnum() else "_" for c in f"{module.__name__}_{name}"
    )
    variant = triton_support.import_source(module_name, source, _module_dir())
    _BUILT[key] = variant
    return variant


@contextlib.contextmanager
def swapped(
    module: ModuleType, attribute: str, name: str, *replacements: tuple[str, str]
) -> Iterator[None]:
    """Inside the block, ``module.<attribute>`` is the mutated variant's ``<attribute>``."""
    variant = source_variant(module, name, tuple(replacements))
    with mock.patch.object(module, attribute, getattr(variant, attribute)):
        yield


def device_mutants(module: str, implementation: str = "triton") -> list[Any]:
    """The mutants of a target's Triton kernels, from ``module``'s ``KERNEL_MUTANTS``
    (``{name: (patch, bug_class, citation)}``), as ``kernel-<name>`` on ``implementation``;
    none while that module cannot be imported (no Triton here)."""
    from fuzzkit.target import Mutant

    try:
        kernel_mutants = importlib.import_module(module)
    except ImportError:
        return []
    return [
        Mutant(f"kernel-{name}", implementation, bug_class, citation, patch)
        for name, (patch, bug_class, citation) in kernel_mutants.KERNEL_MUTANTS.items()
    ]
