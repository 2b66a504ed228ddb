"""Real-engine code from a pinned wheel, imported module by module behind import shims.

Why this exists: fuzzkit's adapters drive the *real* code of serving engines (vLLM's KV cache
manager and Triton kernels, SGLang's radix cache) on a CPU-only machine, in CI, at a pinned
version.  Installing those engines pulls CUDA builds and hundreds of dependencies, and their
package ``__init__`` files import half of the engine.  The few modules under test are plain
Python (or Triton) that import a handful of helpers.  So an adapter names the wheel (project,
version, sha256 of every accepted file), the source files it needs, the packages whose
``__init__`` must not run, and shim modules for the helpers it replaces; this module

1. finds the wheel in the cache (``$FUZZKIT_CACHE``, default ``~/.cache/fuzzkit``) or downloads
   it once with ``pip download --no-deps`` -- and refuses it unless its sha256 is pinned;
2. extracts only the named ``.py`` members (no absolute or ``..`` paths) into the cache;
3. registers bare package modules and the shims in :data:`sys.modules`, then imports the real
   modules under their real names, so tracebacks and crash signatures name the engine's files.

A user who has the engine installed (a vLLM developer with their own build) sets nothing: an
adapter calls :func:`installed` first and uses that package instead.  Nothing here reads a case
file; the wheel is a dependency pinned by hash, like a lock file entry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, Iterator, Mapping

from fuzzkit.errors import UsageError


@dataclasses.dataclass(frozen=True)
class PinnedWheel:
    """One release of a project, and the sha256 of every wheel file of it we accept."""

    project: str
    version: str
    sha256: Mapping[str, str]  # wheel file name -> hex digest

    @property
    def requirement(self) -> str:
        return f"{self.project}=={self.version}"


def cache_root() -> Path:
    """Where wheels and extracted sources live (``$FUZZKIT_CACHE``, else ``~/.cache/fuzzkit``)."""
    configured = os.environ.get("FUZZKIT_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "fuzzkit"


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def _cached_wheel(wheel: PinnedWheel, directory: Path) -> Path | None:
    for name, expected in wheel.sha256.items():
        path = directory / name
        if path.is_file():
            if _digest(path) != expected:
                raise UsageError(
                    f"{path}: sha256 does not match the pinned {wheel.requirement}; delete the "
                    f"file and fuzzkit downloads it again"
                )
            return path
    return None


def fetch(wheel: PinnedWheel) -> Path:
    """The pinned wheel file, downloaded into the cache once (``pip download --no-deps``).

    Raises :class:`UsageError` (one line: what failed and how to fix it) when the download
    fails or yields a file whose name or hash is not pinned."""
    directory = cache_root() / "wheels"
    found = _cached_wheel(wheel, directory)
    if found is not None:
        return found
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create the wheel cache {directory} ({exc.strerror}); set FUZZKIT_CACHE "
            f"to a writable directory"
        ) from None
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(directory),
        wheel.requirement,
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    found = _cached_wheel(wheel, directory)
    if found is None:
        last = (result.stderr.strip().splitlines() or ["no wheel with a pinned sha256"])[-1]
        raise UsageError(
            f"cannot get {wheel.requirement} ({last}); download it with `pip download "
            f"--no-deps -d {directory} {wheel.requirement}` where the network allows"
        )
    return found


def _safe_member(name: str) -> bool:
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and name.endswith(".py")


def extract(wheel: PinnedWheel, members: Iterable[str]) -> Path:
    """Extract the ``.py`` files ``members`` (paths inside the wheel, or directory prefixes
    ending in ``/``) of the pinned wheel into the cache and return the source root.

    Re-extracts only what is missing, so a shared cache serves several adapters."""
    wanted = tuple(members)
    root = cache_root() / "src" / f"{wheel.project}-{wheel.version}"
    missing = [m for m in wanted if not m.endswith("/") and not (root / m).is_file()]
    if not missing and all((root / m).is_dir() for m in wanted if m.endswith("/")):
        return root
    path = fetch(wheel)
    with zipfile.ZipFile(path) as archive:
        names = [
            n
            for n in archive.namelist()
            if _safe_member(n)
            and any(n == m or (m.endswith("/") and n.startswith(m)) for m in wanted)
        ]
        absent = [m for m in wanted if not m.endswith("/") and m not in names]
        if absent:
            raise UsageError(
                f"{path.name} has no {absent[0]}; the adapter and the pinned "
                f"{wheel.requirement} disagree"
            )
        for name in names:
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".part")
            partial.write_bytes(archive.read(name))
            partial.replace(target)
    return root


def missing(wheel: PinnedWheel) -> str | None:
    """One line saying how to get ``wheel`` when neither it nor sources extracted from it are in
    the cache, else None.  Downloads nothing: asking whether an implementation is available
    (``fuzzkit list``, ``run --all``) must not pull hundreds of megabytes as a side effect."""
    root = cache_root()
    if (root / "src" / f"{wheel.project}-{wheel.version}").is_dir():
        return None
    if any((root / "wheels" / name).is_file() for name in wheel.sha256):
        return None
    return (
        f"the pinned {wheel.requirement} wheel is not in the cache; fetch it with `pip download "
        f"--no-deps -d {root / 'wheels'} {wheel.requirement}` (or set FUZZKIT_CACHE)"
    )


def unavailable(wheel: PinnedWheel, package: str, load: Callable[[], object]) -> str | None:
    """An adapter's ``unavailable()``: None when ``package`` is installed or the pinned wheel is
    cached and ``load()`` (the adapter's own import of the engine's modules) succeeds; else one
    line saying why -- without downloading anything."""
    if not installed(package):
        reason = missing(wheel)
        if reason is not None:
            return reason
    try:
        load()
    except UsageError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a wheel that no longer fits the adapter's shims
        return f"{wheel.requirement}: the adapter cannot load it ({exc})".splitlines()[0]
    return None


def installed(package: str) -> bool:
    """Whether ``package`` is importable as installed (not loaded by :func:`load` here)."""
    module = sys.modules.get(package)
    if module is not None:
        return not getattr(module, "__fuzzkit_wheelsrc__", False)
    return importlib.util.find_spec(package) is not None


def load(
    root: Path,
    modules: Iterable[str],
    bare_packages: Iterable[str],
    shims: Mapping[str, types.ModuleType],
) -> list[types.ModuleType]:
    """Import ``modules`` (dotted names) from the extracted tree ``root``.

    ``bare_packages`` are registered as empty packages rooted in ``root`` so their
    ``__init__`` never runs (sub-packages not listed run their own ``__init__``); ``shims``
    replace the named modules outright.  Both are marked as fuzzkit's, so :func:`installed`
    does not mistake them for an installed engine.  Already-loaded names are left alone: a
    second adapter of the same engine shares the first one's modules."""
    for name in bare_packages:
        if name in sys.modules:
            continue
        package = types.ModuleType(name)
        package.__path__ = [str(root.joinpath(*name.split(".")))]
        package.__package__ = name
        package.__fuzzkit_wheelsrc__ = True  # type: ignore[attr-defined]
        sys.modules[name] = package
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, package)
    for name, shim in shims.items():
        if name in sys.modules:
            continue
        shim.__fuzzkit_wheelsrc__ = True  # type: ignore[attr-defined]
        sys.modules[name] = shim
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, shim)
    return [importlib.import_module(name) for name in modules]


@contextlib.contextmanager
def scoped(names: Iterable[str]) -> Iterator[None]:
    """While active, ``sys.modules`` entries ``names`` (and their parents' attributes) may be
    replaced -- by :func:`load`'s shims and bare packages; on exit each gives way to what was
    there before.  Why: two adapters of one engine may need different stand-ins for the same
    helper module at import time; the engine modules they import keep the ones they saw."""
    names = tuple(names)
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    absent = object()
    attributes: dict[str, Any] = {}
    for name in names:
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            attributes[name] = getattr(sys.modules[parent], child, absent)
    try:
        yield
    finally:
        for name in names:
            sys.modules.pop(name, None)
            parent, _, child = name.rpartition(".")
            owner = sys.modules.get(parent)
            if owner is None or name not in attributes:
                continue
            if attributes[name] is absent:
                with contextlib.suppress(AttributeError):
                    delattr(owner, child)
            else:
                setattr(owner, child, attributes[name])
        sys.modules.update(saved)


def shim(name: str, **attributes: object) -> types.ModuleType:
    """A module named ``name`` holding ``attributes``: the stand-in for a helper module."""
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module
