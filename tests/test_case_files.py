"""Case files: round trips, canonical hashing, atomic writes, and hostile input."""

from __future__ import annotations

import base64
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fuzzkit import case as casefile
from fuzzkit.case import Case, CaseFileError
from fuzzkit.failure import Failure

DTYPES = ["bool", "int8", "uint16", "int64", "float16", "float32", "float64", "complex64"]


def _sample() -> Case:
    return Case(
        target="toy-dot",
        implementation="numpy",
        inputs={"a": np.arange(6, dtype=np.float32).reshape(2, 3), "n": 3, "x": float("nan"),
                "nested": {"l": [1, 2.5, "s", None, True]}},
        seed=7,
        failure=Failure("mismatch", "differs", "mismatch:close:dot", {"worst": [0, 1]}),
        origin="hypothesis",
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_arrays_round_trip_bit_exactly(dtype: str) -> None:
    rng = np.random.default_rng(0)
    arr = (rng.standard_normal((3, 4)) * 50).astype(dtype)
    back = casefile.loads(Case("t", "i", {"x": arr}).dumps()).inputs["x"]
    assert back.dtype == arr.dtype and back.shape == arr.shape
    assert back.tobytes() == arr.tobytes()


def test_round_trip_keeps_everything(tmp_path: Path) -> None:
    case = _sample()
    path = case.save(tmp_path)
    assert path.name == f"{case.case_id}.json"
    back = casefile.load(path)
    assert back.target == case.target and back.seed == 7 and back.origin == "hypothesis"
    assert np.isnan(back.inputs["x"]) and back.inputs["nested"] == case.inputs["nested"]
    assert back.failure == case.failure
    assert back.case_id == case.case_id
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp files left behind


def test_hash_is_canonical_and_content_addressed() -> None:
    a = Case("t", "i", {"x": np.ones(3, np.float32), "k": 1})
    b = Case("t", "i", {"k": 1, "x": np.ones(3, np.float32)})
    c = Case("t", "i", {"k": 1, "x": np.ones(3, np.float64)})
    assert a.case_id == b.case_id and a.dumps() == b.dumps()
    assert a.case_id != c.case_id
    assert a.case_id == Case("t", "i", a.inputs, seed=99).case_id  # the seed is provenance


def test_refuses_to_store_objects() -> None:
    with pytest.raises(TypeError):
        Case("t", "i", {"x": np.array([object()])}).dumps()
    with pytest.raises(TypeError):
        Case("t", "i", {"x": {1, 2}}).dumps()


class _Boom:
    def __reduce__(self):  # noqa: D105 - executes a command if anybody ever unpickles it
        return (os.system, ("touch PWNED",))


def _hostile_payloads() -> dict[str, bytes]:
    good = json.loads(_sample().dumps())
    arr = good["inputs"]["a"]["__ndarray__"]

    def variant(**change) -> bytes:
        data = json.loads(_sample().dumps())
        for path, value in change.items():
            node = data
            keys = path.split("/")
            for k in keys[:-1]:
                node = node[k]
            node[keys[-1]] = value
        data.pop("id")
        return json.dumps(data).encode()

    deep = b'{"a":' * 5000 + b"1" + b"}" * 5000
    return {
        "pickle-protocol-4": pickle.dumps(_Boom(), protocol=4),
        "pickle-protocol-0": pickle.dumps(_Boom(), protocol=0),
        "truncated": _sample().dumps().encode()[:-40],
        "empty": b"",
        "binary": bytes(range(256)),
        "not-an-object": b"[1, 2, 3]",
        "wrong-format": variant(format="something-else/9"),
        "unknown-key": variant(__reduce__="x"),
        "object-dtype": variant(**{"inputs/a/__ndarray__/dtype": "|O"}),
        "size-mismatch": variant(**{"inputs/a/__ndarray__/shape": [5, 5]}),
        "huge-shape": variant(**{"inputs/a/__ndarray__/shape": [1 << 30, 1 << 30]}),
        "bad-base64": variant(**{"inputs/a/__ndarray__/data": "!!notbase64!!"}),
        "negative-shape": variant(**{"inputs/a/__ndarray__/shape": [-2, 3]}),
        "bad-failure": variant(failure={"kind": "explode", "message": 1}),
        "edited-content": json.dumps(dict(good, seed=1, target="other")).encode(),
        "deep-nesting": deep,
        "bare-nan": _sample().dumps().replace('"seed":7', '"seed":NaN').encode(),
        "array-extra-key": variant(**{"inputs/a": {"__ndarray__": dict(arr, extra=1)}}),
    }


@pytest.mark.parametrize("name", sorted(_hostile_payloads()))
def test_hostile_and_corrupt_files_raise_one_clear_error(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.json"
    path.write_bytes(_hostile_payloads()[name])
    with pytest.raises(CaseFileError) as info:
        casefile.load(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message


def test_cli_replay_of_hostile_files_exits_2_with_one_line(tmp_path: Path) -> None:
    payloads = _hostile_payloads()
    for name in ("pickle-protocol-4", "pickle-protocol-0", "truncated", "object-dtype"):
        path = tmp_path / f"{name}.json"
        path.write_bytes(payloads[name])
        proc = subprocess.run([sys.executable, "-m", "fuzzkit.cli", "replay", str(path)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (name, proc.stderr)
        assert proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fuzzkit: error:"), proc.stderr
        assert not (tmp_path / "PWNED").exists()


def test_missing_file_and_directory_are_clear(tmp_path: Path) -> None:
    with pytest.raises(CaseFileError, match="no such file"):
        casefile.load(tmp_path / "nope.json")
    with pytest.raises(CaseFileError, match="directory"):
        casefile.load(tmp_path)


def test_oversized_file_is_refused_before_reading(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "big.json"
    path.write_text(_sample().dumps())
    monkeypatch.setattr(casefile, "MAX_FILE_BYTES", 100)
    with pytest.raises(CaseFileError, match="limit"):
        casefile.load(path)


def test_atomic_write_leaves_old_file_on_failure(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "c.json"
    casefile.atomic_write_text(path, "old")

    def explode(*args):
        raise OSError("disk full")

    monkeypatch.setattr(casefile.os, "replace", explode)
    with pytest.raises(OSError):
        casefile.atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_base64_payload_is_plain_bytes() -> None:
    data = json.loads(Case("t", "i", {"x": np.array([1.5], np.float64)}).dumps())
    raw = base64.b64decode(data["inputs"]["x"]["__ndarray__"]["data"])
    assert np.frombuffer(raw, "<f8")[0] == 1.5


def test_a_finding_with_a_huge_message_still_loads(tmp_path) -> None:
    """The loader bounds messages; saving cuts them first, so fuzzkit never writes a finding its
    own loader refuses."""
    from fuzzkit import case as case_io
    from fuzzkit.failure import Failure

    failure = Failure("crash", "x" * 200_000, "crash:ValueError:here", {"deep": {"a": [1, 2]}})
    path = case_io.Case("quant", "numpy", {"n": 1}, failure=failure).save(tmp_path)
    loaded = case_io.load(path)
    assert loaded.failure.message.endswith("(message cut at 60,000 characters)")
    assert loaded.failure.signature == failure.signature
