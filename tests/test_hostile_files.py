"""Hostile case files, one per class an attacker (or a corrupted artifact) can produce.

Each is fed to the real ``fuzzkit`` console script in a subprocess with a deadline: the answer
must be exit code 2 and exactly one line on stderr, nothing imported or executed (marker files),
nothing hangs.  Complements ``test_untrusted_files.py`` (files naming code, in-process) with the
loader's escapes, resource limits, non-regular files and the current directory.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fuzzkit import reach
from fuzzkit.case import Case, canonical_json, encode_value
from fuzzkit.registry import get_target

FUZZKIT = str(Path(sys.executable).with_name("fuzzkit"))
DEADLINE_S = 120


def _fuzzkit(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment.update(env or {})
    done = subprocess.run([FUZZKIT, *argv], cwd=cwd, env=environment, capture_output=True,
                          text=True, timeout=DEADLINE_S)
    return done.returncode, done.stdout, done.stderr


def _refused(*argv: str, cwd: Path, expect: str = "") -> str:
    code, out, err = _fuzzkit(*argv, cwd=cwd)
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fuzzkit: error: "), err
    assert expect in lines[0], lines[0]
    return lines[0]


def _write_raw(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def _case_json(target: str, impl: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """A case file's JSON without an id (so edits need no re-hashing)."""
    data = Case(target, impl, inputs).to_json()
    del data["id"]
    return data


@pytest.fixture(scope="module")
def generated() -> dict[str, dict[str, Any]]:
    """One real generated case per target the oversize classes start from."""
    out = {}
    for name in ("paged_kv", "scheduling", "ann", "compiler"):
        out[name] = reach.generated(get_target(name).strategy_for(), 3, seed=1)[-1]
    return out


# --------------------------------------------------------------------------- loader escapes


PLAIN = {"a": {"__ndarray__": {"dtype": "<f4", "shape": [3], "data": "AACAPwAAgD8AAIA/"}},
         "b": {"__ndarray__": {"dtype": "<f4", "shape": [3], "data": "AACAPwAAgD8AAIA/"}}}


def _plain_case(**changes: Any) -> dict[str, Any]:
    data = {"format": "fuzzkit-case/1", "target": "quant", "implementation": "numpy",
            "seed": 0, "origin": "manual", "inputs": copy.deepcopy(PLAIN), "failure": None}
    data.update(changes)
    return data


def _deep(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = {"x": value}
    return value


LOADER_ESCAPES = {
    "shape 2**63": (_plain_case(inputs={"a": {"__ndarray__": {
        "dtype": "<f4", "shape": [2**63, 0], "data": ""}}}), "shape must be"),
    "shape 1e30": (_plain_case(inputs={"a": {"__ndarray__": {
        "dtype": "<f4", "shape": [1e30, 0], "data": ""}}}), "shape must be"),
    "details 600 deep": (_plain_case(failure={"kind": "crash", "message": "m", "signature": "s",
                                              "details": _deep(600)}), "nested"),
    "inputs 600 deep": (_plain_case(inputs={"a": _deep(600)}), "nested"),
    "object dtype": (_plain_case(inputs={"a": {"__ndarray__": {
        "dtype": "|O", "shape": [1], "data": "AAAAAAAAAAA="}}}), "not allowed"),
    "failure kind": (_plain_case(failure={"kind": "pwned", "message": "", "signature": "s"}),
                     "'failure' needs"),
    "failure extra key": (_plain_case(failure={"kind": "crash", "message": "", "signature": "s",
                                               "run": "os:system"}), "'failure' needs"),
    "escape codes in signature": (_plain_case(failure={"kind": "crash", "message": "",
                                                       "signature": "\x1b]2;owned\x07"}),
                                  "printable"),
    "escape codes in target": (_plain_case(target="\x1b[2J"), "printable"),
    "bad id": (_plain_case(id="../../etc/passwd"), "'id' must be"),
    "unknown key": (_plain_case(run="os:system"), "unknown keys"),
}


@pytest.mark.parametrize("name", sorted(LOADER_ESCAPES))
def test_loader_escapes_are_one_line(tmp_path: Path, name: str) -> None:
    data, expect = LOADER_ESCAPES[name]
    path = _write_raw(tmp_path / "case.json", data)
    _refused("replay", str(path), cwd=tmp_path, expect=expect)


@pytest.mark.parametrize("text, expect", [
    ('{"format": "fuzzkit-case/1", "format": "fuzzkit-case/1"}', "duplicate key"),
    ('{"format": "fuzzkit-case/1", "seed": ' + "9" * 5000 + "}", "5000 digits"),
    ('{"format": "fuzzkit-case/1", "seed": 1e400}', "overflows a float"),
    ('{"format": "fuzzkit-case/1", "seed": NaN}', "bare NaN"),
    ("[" * 100000, "nested too deeply"),
    ("\x80\x04\x95pickle", "pickle"),
    ("cos\nsystem\n(S'touch pwned'\ntR.", "pickle"),
])
def test_malformed_json_is_one_line(tmp_path: Path, text: str, expect: str) -> None:
    path = tmp_path / "case.json"
    path.write_bytes(text.encode("latin-1"))
    _refused("replay", str(path), cwd=tmp_path, expect=expect)
    assert not (tmp_path / "pwned").exists()


def test_31_megabytes_of_empty_objects_are_refused_before_decoding(tmp_path: Path) -> None:
    """31 MB of ``{}`` decode to more than 2 GB of Python objects: refused on a count."""
    path = tmp_path / "case.json"
    path.write_text("[" + ",".join(["{}"] * (31 * 1024 * 1024 // 3)) + "]")
    _refused("replay", str(path), cwd=tmp_path, expect="JSON values exceed")


def test_the_failure_block_cannot_be_edited_unseen(tmp_path: Path) -> None:
    """The failure block is outside the hash: every field of it is validated instead (kind,
    signature, message length, details type) -- and the rest of the file is hashed."""
    case = Case("quant", "numpy", {"x": 1})
    data = case.to_json()
    data["inputs"]["x"] = 2  # an edit of the hashed part
    path = _write_raw(tmp_path / "case.json", data)
    _refused("replay", str(path), cwd=tmp_path, expect="content hash mismatch")
    data = case.to_json()
    data["failure"] = {"kind": "crash", "message": "x" * (65 * 1024), "signature": "s",
                       "details": {}}
    path = _write_raw(tmp_path / "case.json", data)
    _refused("replay", str(path), cwd=tmp_path, expect="longer than")
    data["failure"] = {"kind": "crash", "message": "", "signature": "s", "details": []}
    path = _write_raw(tmp_path / "case.json", data)
    _refused("replay", str(path), cwd=tmp_path, expect="'failure' needs")


@pytest.mark.parametrize("command", ["replay", "shrink", "bisect"])
def test_a_fifo_is_refused_instead_of_hanging(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    _refused(command, str(fifo), cwd=tmp_path, expect="not a regular file")


def test_a_device_and_a_directory_are_refused(tmp_path: Path) -> None:
    _refused("replay", "/dev/zero", cwd=tmp_path, expect="not a regular file")
    _refused("shrink", str(tmp_path), cwd=tmp_path, expect="is a directory")


# ---------------------------------------------------------------- the current directory


PLANTED = '''
import pathlib
pathlib.Path({marker!r}).write_text("imported")


def run(inputs):
    return {{}}
'''


def test_a_module_in_the_current_directory_is_not_importable(tmp_path: Path) -> None:
    """Not even when the user names it: fuzzkit puts nothing on sys.path by itself, so a module
    an attacker drops into the directory a user works in is never imported by name."""
    marker = tmp_path / "marker"
    (tmp_path / "planted_evil.py").write_text(PLANTED.format(marker=str(marker)))
    inputs = reach.generated(get_target("quant").strategy_for(), 2, seed=3)[-1]
    path = Case("quant", "planted_evil:run", inputs).save(tmp_path)
    _refused("replay", str(path), cwd=tmp_path, expect="cannot choose code")
    _refused("replay", str(path), "--impl", "planted_evil:run", cwd=tmp_path,
             expect="PYTHONPATH=.")
    _refused("run", "quant", "--impl", "planted_evil:run", "--budget", "1", cwd=tmp_path,
             expect="PYTHONPATH=.")
    assert not marker.exists()
    # The user opts in explicitly: then it is their code and it is imported.
    code, _, err = _fuzzkit("replay", str(path), "--impl", "planted_evil:run", cwd=tmp_path,
                            env={"PYTHONPATH": str(tmp_path)})
    assert marker.exists(), err


# ------------------------------------------------------------------------- oversize cases


def _oversize(generated: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str, Any]]:
    paged = generated["paged_kv"]
    sched = generated["scheduling"]
    ann = generated["ann"]

    def edited(inputs: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
        out = copy.deepcopy(inputs)
        node = out
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return out

    # A small step (three JSON values), so that the case stays under the loader's JSON-value cap
    # and the target's own step limit is what refuses it.
    step = {"op": "write", "rid": 0}
    return {
        "paged_kv 300k steps": ("paged_kv", "optimized",
                                edited(paged, ("program",), [step] * 300_000)),
        "paged_kv 1e9 blocks": ("paged_kv", "optimized",
                                edited(paged, ("config", "num_blocks"), 10**9)),
        "scheduling 1e6 instances": ("scheduling", "simulator",
                                     edited(sched, ("config", "instances"), 10**6)),
        "ann T 1e9": ("ann", "numpy", edited(ann, ("T",), 10**9)),
    }


def _compiler_oversize() -> dict[str, tuple[str, str, Any]]:
    x0 = {"name": "x0", "shape": [2]}
    values = [np.ones(2, np.float32)]
    chain = [{"name": f"n{i}", "op": "neg", "args": [f"n{i - 1}" if i else "x0"], "attrs": {},
              "shape": [2]} for i in range(100_000)]
    expand = [{"name": "n0", "op": "expand", "args": ["x0"], "attrs": {"shape": [31623, 31623, 2]},
               "shape": [31623, 31623, 2]}]
    return {
        "compiler 1e5 nodes": ("compiler", "fusing", {
            "graph": {"inputs": [x0], "nodes": chain, "outputs": ["n99999"]},
            "values": values, "dtype": "float32"}),
        "compiler expand to 2e9": ("compiler", "fusing", {
            "graph": {"inputs": [x0], "nodes": expand, "outputs": ["n0"]},
            "values": values, "dtype": "float32"}),
    }


OVERSIZE = ["paged_kv 300k steps", "paged_kv 1e9 blocks", "scheduling 1e6 instances",
            "ann T 1e9", "compiler 1e5 nodes", "compiler expand to 2e9"]


@pytest.mark.parametrize("name", OVERSIZE)
def test_oversize_cases_are_refused_naming_the_limit(tmp_path: Path, name: str,
                                                     generated: dict[str, Any]) -> None:
    target, impl, inputs = {**_oversize(generated), **_compiler_oversize()}[name]
    impl = next(iter(get_target(target).implementations)) if impl not in get_target(
        target).implementations else impl
    path = _write_raw(tmp_path / "case.json", _case_json(target, impl, inputs))
    for command in ("replay", "shrink") + (("bisect",) if target == "compiler" else ()):
        line = _refused(command, str(path), cwd=tmp_path, expect="--limit ")
        assert "exceeds the limit" in line or "JSON values exceed" in line


def test_a_raised_limit_is_the_users_choice(tmp_path: Path, generated: dict[str, Any]) -> None:
    """The limit, not something else, refuses a case: lowered on the command line it refuses a
    normal case; the same case replays without it; an unknown limit name is a usage error."""
    inputs = generated["paged_kv"]
    path = Case("paged_kv", "optimized", inputs).save(tmp_path)
    steps = len(inputs["program"])
    _refused("replay", str(path), "--limit", f"steps={steps - 1}", cwd=tmp_path,
             expect=f"--limit steps={steps}")
    code, out, err = _fuzzkit("replay", str(path), "--limit", f"steps={steps}", cwd=tmp_path)
    assert code in (0, 1) and out.startswith(("PASS", "FAIL")), err
    _refused("replay", str(path), "--limit", "bogus=3", cwd=tmp_path, expect="no limit named")
    _refused("replay", str(path), "--limit", "steps", cwd=tmp_path, expect="NAME=INTEGER")


@pytest.mark.parametrize("name", [
    'n0"""; __import__("pathlib").Path("MARKER").write_text("x"); """',
    "n0\nimport os", "__class__", "n 0", "a" * 100, "for",
])
def test_a_crafted_node_name_is_refused_by_bisect(tmp_path: Path, name: str,
                                                  generated: dict[str, Any]) -> None:
    """Node names reach fx-generated code and repro scripts: only plain identifiers pass."""
    inputs = copy.deepcopy(generated["compiler"])
    old = inputs["graph"]["nodes"][0]["name"]
    text = json.dumps(_case_json("compiler", "fusing", inputs)).replace(f'"{old}"',
                                                                        json.dumps(name))
    marker = tmp_path / "MARKER"
    path = tmp_path / "case.json"
    path.write_text(text.replace("MARKER", str(marker)))
    for command in ("bisect", "replay", "shrink"):
        _refused(command, str(path), cwd=tmp_path, expect="not a plain identifier")
    assert not marker.exists()


def test_an_invalid_case_is_refused_not_reported_as_a_reference_crash(tmp_path: Path) -> None:
    """A missing input used to be a "crash of the reference", which shrink then minimized into
    a finding: now validate refuses it on every path, and shrink writes nothing."""
    path = Case("quant", "numpy", {"bits": 4}).save(tmp_path / "in")
    for command in ("replay", "shrink"):
        _refused(command, str(path), cwd=tmp_path, expect="not a valid quant case")
    assert sorted(p.name for p in (tmp_path / "in").iterdir()) == [path.name]


def test_a_hostile_canonical_file_still_replays_its_own_way(tmp_path: Path) -> None:
    """Sanity for the tests above: a well-formed file of a real case replays (exit 0 or 1)."""
    target = get_target("quant")
    inputs = reach.generated(target.strategy_for(), 2, seed=3)[-1]
    path = tmp_path / "case.json"
    path.write_text(canonical_json(Case("quant", "numpy", inputs).to_json()))
    code, out, err = _fuzzkit("replay", str(path), cwd=tmp_path)
    assert code in (0, 1) and out.startswith(("PASS", "FAIL")), err
    assert encode_value(np.zeros(1, np.float32))  # the encoder is what wrote the arrays
