"""The wheel installs everything under the ``fuzzkit`` name.

Generic top-level packages called ``targets`` and ``oracles`` in a user's site-packages would
collide with their own; ``setup.py`` maps the repository's folders to ``fuzzkit.targets`` and
``fuzzkit.oracles``.  Built here from the checkout, without network or build isolation.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("wheel")
    # A copy of the checkout's files: building in place would reuse (and be fooled by) a stale
    # build/ folder from an earlier build.
    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True,
        cwd=ROOT, check=True,
    ).stdout.split("\n")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=300, cwd=source,
        env={**__import__("os").environ, "PIP_NO_INDEX": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("fuzzkit-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_no_generic_top_level_packages(wheel_names: list[str]) -> None:
    tops = {name.split("/")[0] for name in wheel_names}
    assert "targets" not in tops and "oracles" not in tops, sorted(tops)
    assert {t for t in tops if not t.endswith(".dist-info")} == {"fuzzkit"}


def test_every_target_and_oracle_module_is_in_the_wheel(wheel_names: list[str]) -> None:
    """Every module of the folders is shipped under its ``fuzzkit.`` name: a sub-package that
    setup.py's listing missed would be absent from a user's install but present in a checkout."""
    shipped = set(wheel_names)
    for folder in ("targets", "oracles"):
        for path in (ROOT / folder).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT).as_posix()
            assert f"fuzzkit/{rel}" in shipped, rel


def test_entry_points_name_the_fuzzkit_modules(wheel_names: list[str]) -> None:
    import importlib.metadata

    eps = importlib.metadata.entry_points(group="fuzzkit.targets")
    assert eps, "fuzzkit is not installed (pip install -e .)"
    for ep in eps:
        if ep.dist is not None and ep.dist.name == "fuzzkit":
            assert ep.value.startswith("fuzzkit.targets."), ep


def test_a_bare_checkout_imports_the_mapped_packages(tmp_path: Path) -> None:
    """Without any install (a GPU node that received only the tree), ``fuzzkit.targets`` and
    ``fuzzkit.oracles`` still import -- from the checkout's folders -- and nothing else does."""
    code = (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path\n"
        "                    if not getattr(f, '__module__', '').startswith('__editable__')]\n"
        "sys.path[:0] = [sys.argv[1]]\n"
        "import importlib.util\n"
        "import fuzzkit.targets.quant, fuzzkit.oracles\n"
        "assert fuzzkit.targets.quant.__file__.startswith(sys.argv[1]), fuzzkit.targets.__file__\n"
        "assert importlib.util.find_spec('fuzzkit.tests') is None\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]
