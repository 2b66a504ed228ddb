"""fuzzkit.wheelsrc: a pinned wheel is used only with its pinned hash, only the named .py
members are extracted (never outside the cache), bare packages never run their __init__, and
shims stand in for the helpers they name."""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path

import pytest

from fuzzkit import wheelsrc
from fuzzkit.errors import UsageError

NAME = "fkdemo-1.0-py3-none-any.whl"


def _wheel(directory: Path) -> tuple[Path, str]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / NAME
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("fkdemo/__init__.py", "raise RuntimeError('heavy package init ran')\n")
        archive.writestr("fkdemo/core/__init__.py", "")
        archive.writestr("fkdemo/core/pool.py",
                         "from fkdemo.logger import get\nVALUE = get() + 1\n")
        archive.writestr("fkdemo/core/other.py", "X = 1\n")
        archive.writestr("../escape.py", "X = 1\n")
        archive.writestr("fkdemo/core/data.bin", b"\x00")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FUZZKIT_CACHE", str(tmp_path / "cache"))
    yield tmp_path / "cache"
    for name in [m for m in sys.modules if m == "fkdemo" or m.startswith("fkdemo.")]:
        del sys.modules[name]


def test_loads_named_modules_behind_shims(cache: Path) -> None:
    _, digest = _wheel(cache / "wheels")
    pin = wheelsrc.PinnedWheel("fkdemo", "1.0", {NAME: digest})
    root = wheelsrc.extract(pin, ["fkdemo/core/"])
    assert (root / "fkdemo/core/pool.py").is_file()
    assert not (root / "fkdemo/__init__.py").exists()  # only what was named
    assert not (cache / "src" / "escape.py").exists() and not (cache / "escape.py").exists()
    assert not (root / "fkdemo/core/data.bin").exists()
    assert not wheelsrc.installed("fkdemo")
    [pool] = wheelsrc.load(root, ["fkdemo.core.pool"], ["fkdemo"],
                           {"fkdemo.logger": wheelsrc.shim("fkdemo.logger", get=lambda: 41)})
    assert pool.VALUE == 42
    assert pool.__file__ == str(root / "fkdemo/core/pool.py")  # real names, real files
    assert not wheelsrc.installed("fkdemo")  # fuzzkit's own loading is not an installed engine


def test_refuses_a_wheel_whose_hash_is_not_pinned(cache: Path) -> None:
    _wheel(cache / "wheels")
    pin = wheelsrc.PinnedWheel("fkdemo", "1.0", {NAME: "0" * 64})
    with pytest.raises(UsageError, match="sha256 does not match"):
        wheelsrc.extract(pin, ["fkdemo/core/pool.py"])


def test_missing_member_is_one_line(cache: Path) -> None:
    _, digest = _wheel(cache / "wheels")
    pin = wheelsrc.PinnedWheel("fkdemo", "1.0", {NAME: digest})
    with pytest.raises(UsageError, match="has no fkdemo/core/absent.py"):
        wheelsrc.extract(pin, ["fkdemo/core/absent.py"])


def test_download_failure_is_one_line(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    class Failed:
        returncode, stderr, stdout = 1, "ERROR: network is unreachable\n", ""

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Failed())
    pin = wheelsrc.PinnedWheel("fkdemo", "1.0", {NAME: "0" * 64})
    with pytest.raises(UsageError, match=r"cannot get fkdemo==1.0 \(ERROR: network is unr"):
        wheelsrc.fetch(pin)


def test_missing_says_how_to_fetch_and_downloads_nothing(cache: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("downloaded"))
    pin = wheelsrc.PinnedWheel("fkdemo", "1.0", {NAME: "0" * 64})
    reason = wheelsrc.missing(pin)
    assert reason is not None and "pip download --no-deps" in reason and "fkdemo==1.0" in reason
    _wheel(cache / "wheels")
    assert wheelsrc.missing(pin) is None


def test_unavailable_is_one_line_and_never_downloads(cache: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("downloaded"))
    _, digest = _wheel(cache / "wheels")
    pin = wheelsrc.PinnedWheel("fkdemo", "1.0", {NAME: digest})
    assert wheelsrc.unavailable(pin, "fkdemo", lambda: None) is None

    def broken() -> None:
        raise AttributeError("module 'fkdemo.logger' has no attribute 'get'\nmore")

    reason = wheelsrc.unavailable(pin, "fkdemo", broken)
    assert reason == ("fkdemo==1.0: the adapter cannot load it (module 'fkdemo.logger' has no "
                      "attribute 'get'")
    other = wheelsrc.PinnedWheel("fkother", "2.0", {"fkother-2.0-py3-none-any.whl": "0" * 64})
    assert "pip download" in (wheelsrc.unavailable(other, "fkother", broken) or "")


def test_describing_every_target_downloads_nothing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`fuzzkit list` / `describe` with an empty cache: the real-engine implementations are
    unavailable, with the fetch command, and nothing is fetched."""
    from fuzzkit.registry import get_target, target_names

    monkeypatch.setenv("FUZZKIT_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(wheelsrc, "fetch", lambda pin: pytest.fail(f"fetched {pin.project}"))
    monkeypatch.setattr(wheelsrc, "installed", lambda package: False)
    for name in target_names():
        get_target(name).describe()
    impls = get_target("paged_kv").implementations
    assert "pip download" in (impls["vllm"].unavailable() or "")
