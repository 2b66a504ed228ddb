"""``fuzzkit corpus merge``: fewer cases, the same arcs, every signature; deterministic; merges
into a non-empty destination; hostile files refused one line each; bad destinations exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable

import coverage
import pytest

import corpus_targets
from fuzzkit import registry
from fuzzkit.case import Case
from fuzzkit.cli import main
from fuzzkit.corpus import case_files
from fuzzkit.runner import check_case
from fuzzkit.sequence import load_any

registry.register_target("toy-branches", replace=True)(corpus_targets.target)

#: Redundant on purpose: four negatives, three small, two large, the two bugs twice each.
XS = (-40, -5, -3, -1, 0, 1, 4, 9, 7, 7, 13, 13, 12, 44)


def _write(directory: Path, xs: Iterable[int], origin: str = "manual") -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    # the same x twice differs only in seed, which is outside the content hash: one file
    return [
        Case("toy-branches", "branchy", {"x": x}, seed=i, origin=origin).save(directory)
        for i, x in enumerate(xs)
    ]


def _xs(directory: Path) -> list[int]:
    return sorted(load_any(p).inputs["x"] for p in case_files([directory]))


def _arcs_and_signatures(directory: Path) -> tuple[set, set]:
    """Measured here, without fuzzkit.corpus_merge: coverage.py around check_case."""
    target = registry.get_target("toy-branches")
    impl = target.implementation("branchy")
    cov = coverage.Coverage(
        branch=True, include=[corpus_targets.__file__], data_file=None, config_file=False
    )
    signatures = set()
    cov.start()
    try:
        for path in case_files([directory]):
            failure = check_case(target, impl, load_any(path).inputs).failure
            if failure is not None:
                signatures.add(failure.signature)
    finally:
        cov.stop()
    return set(cov.get_data().arcs(corpus_targets.__file__) or ()), signatures


def _merge(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["corpus", "merge", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    _write(root / "findings", XS[: len(XS) // 2])
    _write(root / "seeds", XS[len(XS) // 2 :])
    return root


def test_merge_keeps_fewer_cases_with_the_same_arcs_and_signatures(capsys, src, tmp_path) -> None:
    dst = tmp_path / "dst"
    code, out, err = _merge(capsys, str(src), str(dst))
    assert code == 0, err
    before_arcs, before_signatures = _arcs_and_signatures(src)
    after_arcs, after_signatures = _arcs_and_signatures(dst)
    assert after_arcs == before_arcs
    assert after_signatures == before_signatures and len(after_signatures) == 2
    kept = _xs(dst)
    # one case per class (negative, zero, small, large) plus one per bug
    assert len(kept) == 6 < len(set(XS)), kept
    assert 7 in kept and 13 in kept and 0 in kept
    assert re.fullmatch(
        rf"kept 6 of {len(set(XS))} case\(s\) \(\d+ arcs, 2 signature\(s\), "
        rf"0 refused\) -> {re.escape(str(dst))}",
        out.strip(),
    ), out


def test_merge_is_deterministic(capsys, src, tmp_path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert _merge(capsys, str(src), str(first))[0] == 0
    assert _merge(capsys, str(src), str(second))[0] == 0
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert all((first / n).read_bytes() == (second / n).read_bytes() for n in names)
    # the smallest case of a class is the one kept: "-5", "-3" and "-1" are shorter than "-40"
    assert [x for x in _xs(first) if x < 0] in ([-5], [-3], [-1])
    # merging again adds nothing: everything is covered by what DST holds
    code, out, _ = _merge(capsys, str(src), str(first))
    assert code == 0 and out.startswith("kept 0 of ")
    assert sorted(p.name for p in first.iterdir()) == names


def test_merge_into_a_non_empty_destination(capsys, src, tmp_path) -> None:
    dst = tmp_path / "dst"
    existing = _write(dst, [-2, 7])  # covers the negative branch and the mismatch already
    code, out, err = _merge(capsys, str(src), str(dst))
    assert code == 0, err
    kept = _xs(dst)
    assert kept.count(7) == 1 and [x for x in kept if x < 0] == [-2], kept
    assert all(p.exists() for p in existing)
    arcs, signatures = _arcs_and_signatures(dst)
    all_arcs = _arcs_and_signatures(src)[0] | _arcs_and_signatures(dst)[0]
    assert arcs == all_arcs and len(signatures) == 2
    assert out.startswith("kept 4 of ")  # zero, small, large, the crash


def test_hostile_files_are_refused_one_line_each_and_the_rest_merged(capsys, src, tmp_path) -> None:
    (src / "seeds" / "pickle.json").write_bytes(b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00.")
    (src / "seeds" / "truncated.json").write_text('{"format": "fuzzkit-case/1", "inp')
    good = load_any(next(case_files([src / "seeds"])))
    tampered = good.to_json() | {"id": "0" * 20}
    (src / "seeds" / "tampered.json").write_text(json.dumps(tampered))
    dst = tmp_path / "dst"
    code, out, err = _merge(capsys, str(src), str(dst))
    assert code == 0, err
    lines = err.splitlines()
    assert len(lines) == 3 and all(line.startswith("fuzzkit: refused ") for line in lines), err
    assert any("pickle" in line for line in lines)
    assert any("content hash mismatch" in line for line in lines)
    assert "3 refused" in out and len(_xs(dst)) == 6


def test_a_file_naming_an_outside_implementation_is_refused_not_imported(
    capsys, tmp_path, src
) -> None:
    hostile = Case("toy-branches", "os:system", {"x": 3})
    hostile.save(src / "seeds")
    code, out, err = _merge(capsys, str(src), str(tmp_path / "dst"))
    assert code == 0
    assert err.count("\n") == 1 and "outside implementation 'os:system'" in err


@pytest.mark.parametrize(
    "make_dst",
    [
        lambda tmp: tmp / "file.txt",  # a file, not a folder
        lambda tmp: tmp / "file.txt" / "below",  # a folder that cannot exist
    ],
)
def test_a_bad_destination_exits_2_with_one_line(capsys, src, tmp_path, make_dst) -> None:
    (tmp_path / "file.txt").write_text("x")
    code, out, err = _merge(capsys, str(src), str(make_dst(tmp_path)))
    assert code == 2 and err.count("\n") == 1 and err.startswith("fuzzkit: error:"), err
    assert out == ""


def test_a_missing_source_exits_2(capsys, tmp_path) -> None:
    code, _, err = _merge(capsys, str(tmp_path / "nothing"), str(tmp_path / "dst"))
    assert code == 2 and "no such SRC" in err and err.count("\n") == 1
    assert not (tmp_path / "dst").exists()


def test_target_option_skips_other_targets(capsys, src, tmp_path) -> None:
    Case("toy-dot", "numpy", {"a": [1.0], "b": [2.0]}).save(src / "seeds")
    code, out, err = _merge(capsys, str(src), str(tmp_path / "dst"), "--target", "toy-branches")
    assert code == 0, err
    assert "1 of another target skipped" in out


def _measured(name: str, size: int, arcs: set, signature: str | None = None):
    from fuzzkit.corpus_merge import Measured

    return Measured(
        Path(name), None, size, name, frozenset(arcs), ("t", "i", signature) if signature else None
    )


def test_select_keeps_the_smallest_case_of_every_signature_even_without_new_arcs() -> None:
    from fuzzkit.corpus_merge import select

    cases = [
        _measured("big-a", 30, {1, 2}, "crash:x"),
        _measured("small-a", 10, {1, 2}, "crash:x"),
        _measured("b", 20, {1, 2}, "mismatch:y"),
        _measured("c", 5, {1}),
        _measured("d", 6, {2}),
    ]
    kept = [m.case_id for m in select([], cases)]
    # small-a and b cover every arc; c and d, though smaller, add nothing once they are kept
    assert kept == ["small-a", "b"]
    # an existing case with the signature: only what it lacks is added
    assert [m.case_id for m in select([_measured("old", 1, {1}, "crash:x")], cases)] == ["b"]


def test_select_drops_small_cases_a_larger_kept_one_makes_redundant() -> None:
    from fuzzkit.corpus_merge import select

    cases = [_measured("c", 5, {1}), _measured("d", 6, {2}), _measured("e", 7, {1, 2, 3})]
    assert [m.case_id for m in select([], cases)] == ["e"]


def test_arcs_that_run_at_import_are_not_features(tmp_path) -> None:
    """Which case first imports a module is an accident of order: its module-level lines are
    not a case's coverage, function bodies are."""
    from fuzzkit.corpus_merge import import_time_lines

    source = tmp_path / "lazy_module.py"
    source.write_text(
        "import os\n\n\n@staticmethod\ndef f(x):\n    if x:\n        return 1\n"
        "    return 2\n\n\nclass C:\n    y = 1\n\n    def g(self):\n"
        "        return 3\n\n\nif os.sep:\n    Z = 1\n"
    )
    assert import_time_lines(str(source)) == {1, 4, 5, 11, 12, 14, 18, 19}


def test_cases_recorded_as_crashes_run_isolated_and_are_kept_by_signature_or_outright(
    capsys, tmp_path
) -> None:
    """Coverage cannot see into the child process: a crash that still fails is kept by its
    signature, one that passes now is kept outright (what it covers is unknown)."""
    from fuzzkit.failure import Failure

    crashed = Failure("crash", "recorded", "crash:ValueError@somewhere")
    src = tmp_path / "src"
    for x in (13, 3):
        Case("toy-branches", "branchy", {"x": x}, failure=crashed).save(src)
    _write(src, [1, 2])  # in process, x=3 would cover nothing these do not
    code, out, err = _merge(capsys, str(src), str(tmp_path / "dst"))
    assert code == 0, err
    kept = _xs(tmp_path / "dst")
    assert kept in ([1, 3, 13], [2, 3, 13]), out
    assert "1 signature(s)" in out
