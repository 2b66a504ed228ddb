"""The atheris engine: libFuzzer's bytes through Hypothesis's fuzz_one_input, findings as case
files; and the one-line message when atheris is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fuzzkit import case as case_io
from fuzzkit.errors import UsageError
from fuzzkit.registry import get_target
from fuzzkit.runner import check_case

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux signals")


def test_toy_mutant_is_found_and_its_case_file_replays(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    from fuzzkit.engines.atheris import fuzz_atheris

    target = get_target("toy-dot")
    impl = target.implementation("numpy")
    result = fuzz_atheris(target, impl, budget=4, seed=7, corpus_root=tmp_path / "corpus",
                          mutant="drops-last-term")  # toy-dot: registered by conftest
    assert result.exit_code == 0 and result.cases > 50
    assert result.finding is not None and result.finding.origin.startswith("atheris")
    (path,) = [p for p in result.finding_paths if p == result.finding_paths[0]]
    assert path.parent == tmp_path / "corpus" / "toy-dot" / "findings"
    loaded = case_io.loads(path.read_text(), str(path))
    assert loaded.failure.signature == result.finding.failure.signature
    # Replays: fails the same way with the mutant, passes without it.
    with target.mutant("drops-last-term").applied():
        replayed = check_case(target, impl, loaded.inputs)
    assert replayed.failure is not None
    assert replayed.failure.signature == loaded.failure.signature
    assert check_case(target, impl, loaded.inputs).passed


@linux
def test_segfault_under_atheris_is_saved_with_and_without_isolation(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    import crash_targets
    from fuzzkit.engines.atheris import fuzz_atheris
    from fuzzkit.isolation import IsolatedChecker

    target = get_target("crash-segv")
    impl = target.implementation("ctypes")
    # In-process: the crash kills the atheris process; libFuzzer's crash bytes are decoded into
    # the inputs (without running them again) and saved as a case file.
    bare = fuzz_atheris(target, impl, budget=2, seed=1, corpus_root=tmp_path / "a",
                        preload=["crash_targets"])
    assert bare.finding is not None and bare.finding.failure.kind == "crash"
    assert bare.finding.inputs["n"] >= crash_targets.TRIGGER
    assert bare.finding_paths[0].exists()
    # Isolated: the signal is named and fuzzing goes on after it.
    with IsolatedChecker("crash-segv", "ctypes", case_timeout=1.0,
                         inflight_dir=tmp_path / "inflight", preload=["crash_targets"]) as checker:
        isolated = fuzz_atheris(target, impl, budget=2, seed=1, corpus_root=tmp_path / "b",
                                checker=checker)
    assert isolated.exit_code == 0
    assert isolated.finding.failure.signature == "crash:signal:SIGSEGV"
    assert isolated.cases > isolated.cases_to_first_failure
    loaded = case_io.loads(isolated.finding_paths[0].read_text())
    assert loaded.inputs["n"] >= crash_targets.TRIGGER


def test_missing_atheris_is_a_one_line_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "atheris", None)  # `import atheris` now raises ImportError
    from fuzzkit.engines import atheris as engine

    target = get_target("toy-dot")
    with pytest.raises(UsageError) as info:
        engine.fuzz_atheris(target, target.implementation("numpy"), budget=1)
    message = str(info.value)
    assert "\n" not in message
    assert message == ("atheris is not installed (pip install 'fuzzkit[atheris]'; it needs "
                       "CPython 3.8-3.11 on Linux/macOS)")
