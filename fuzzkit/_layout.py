"""``fuzzkit.targets`` and ``fuzzkit.oracles`` in a source checkout that was never installed.

Installed (``pip install .`` or ``-e .``), setuptools maps the repository's top-level
``targets/`` and ``oracles/`` folders under the ``fuzzkit`` name (see ``setup.py``).  A bare
checkout -- a GPU node that received the tree without its virtual environment, ``PYTHONPATH=.``
-- has no such mapping; this finder supplies exactly those two names and nothing else, so the
same imports work in both and no generic top-level package is ever importable by accident.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Sequence

MAPPED = ("targets", "oracles")


class _SiblingFolders(importlib.abc.MetaPathFinder):
    """Finds ``fuzzkit.<name>`` in the folder ``<name>/`` beside the ``fuzzkit`` package."""

    def __init__(self, folders: dict[str, Path]) -> None:
        self.folders = folders

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def install() -> None:
    """Add the finder when the package has no ``targets``/``oracles`` of its own (it has them
    when installed as a wheel) and the checkout has the folders.  Appended last, so an
    installer's own finder (an editable install's) is asked first; idempotent."""
    package = Path(__file__).resolve().parent
    root = package.parent
    folders = {
        f"fuzzkit.{name}": root / name
        for name in MAPPED
        if not (package / name).is_dir() and (root / name / "__init__.py").is_file()
    }
    if folders and not any(isinstance(f, _SiblingFolders) for f in sys.meta_path):
        sys.meta_path.append(_SiblingFolders(folders))


install()
