"""Case files: plain, self-contained, content-addressed JSON.  Never pickle.

A case is what it takes to replay one run anywhere: the target, the implementation, the seed of
the run that made it, the inputs (JSON values and NumPy arrays) and, for findings, the failure.
Arrays are encoded as ``{"__ndarray__": {"dtype": "<f4", "shape": [2, 3], "data": base64}}``;
non-finite floats as ``{"__float__": "nan"}``.  The canonical form (sorted keys, no spaces, ASCII)
is hashed to name the file, so the same reproducer always lands in the same file.

Loading someone else's file must be safe: the text is parsed as JSON only (``json.loads`` never
executes anything), checked against the schema, and bounded in size, depth and array bytes.  Any
problem is a :class:`CaseFileError` with one line that says what is wrong.
"""

from __future__ import annotations

import base64
import contextlib
import binascii
import dataclasses
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from fuzzkit import __version__
from fuzzkit.errors import CaseFileError
from fuzzkit.failure import KINDS, Failure

FORMAT = "fuzzkit-case/1"
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_ARRAY_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 32
MAX_ARRAY_DIMS = 8
#: Only plain numeric and boolean dtypes; object, void and string dtypes are refused outright.
ALLOWED_DTYPES = frozenset(
    np.dtype(t).str
    for t in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
) | frozenset(np.dtype(t).newbyteorder(">").str for t in (
    "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "float32", "float64",
))
_TOP_KEYS = {"format", "fuzzkit_version", "target", "implementation", "seed", "inputs", "failure",
             "origin", "id"}


class SavedAsJson:
    """A record saved as one canonical JSON file named by its id (cases and case sequences):
    the subclass supplies ``case_id`` and ``to_json``."""

    case_id: str

    def to_json(self) -> dict[str, Any]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def dumps(self) -> str:
        return canonical_json(self.to_json())

    def save(self, directory: os.PathLike[str] | str) -> Path:
        """Write atomically to ``directory/<id>.json`` and return the path."""
        path = Path(directory) / f"{self.case_id}.json"
        atomic_write_text(path, self.dumps() + "\n")
        return path


@dataclasses.dataclass
class Case(SavedAsJson):
    """One replayable input for one target and implementation."""

    target: str
    implementation: str
    inputs: dict[str, Any]
    seed: Optional[int] = None
    failure: Optional[Failure] = None
    origin: str = "unknown"  # hypothesis, atheris, shrink, manual, ...
    fuzzkit_version: str = __version__

    @property
    def case_id(self) -> str:
        """Content hash of what makes the reproducer: target, implementation and inputs."""
        key = {"target": self.target, "implementation": self.implementation,
               "inputs": encode_value(self.inputs)}
        return hashlib.sha256(canonical_json(key).encode("ascii")).hexdigest()[:20]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "id": self.case_id,
            "fuzzkit_version": self.fuzzkit_version,
            "target": self.target,
            "implementation": self.implementation,
            "seed": self.seed,
            "origin": self.origin,
            "inputs": encode_value(self.inputs),
            "failure": self.failure.to_json() if self.failure else None,
        }


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def atomic_write_text(path: Path, text: str) -> None:
    """Temp file in the same directory + fsync + rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------------------------------------
# Encoding


def encode_value(value: Any) -> Any:
    """Inputs -> JSON values.  Tuples become lists (JSON has no tuples; document this)."""
    if isinstance(value, np.ndarray):
        if value.dtype.str not in ALLOWED_DTYPES:
            raise TypeError(f"cannot store arrays of dtype {value.dtype} in a case file")
        data = np.ascontiguousarray(value)
        return {"__ndarray__": {
            "dtype": data.dtype.str,
            "shape": list(data.shape),
            "data": base64.b64encode(data.tobytes()).decode("ascii"),
        }}
    if isinstance(value, np.generic):
        return encode_value(value.item())
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"case input keys must be strings, got {key!r}")
            out[key] = encode_value(item)
        return out
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} in a case file")


def decode_value(value: Any, path: str = "inputs", depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise CaseFileError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return _decode_array(value, path)
        if "__float__" in value:
            if set(value) != {"__float__"} or value["__float__"] not in ("nan", "inf", "-inf"):
                raise CaseFileError(f"{path}: bad non-finite float {value!r}")
            return float(value["__float__"])
        return {k: decode_value(v, f"{path}.{k}", depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_value(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    return value


def _decode_array(value: dict[str, Any], path: str) -> np.ndarray:
    spec = value["__ndarray__"]
    if set(value) != {"__ndarray__"} or not isinstance(spec, dict) or set(spec) != {
            "dtype", "shape", "data"}:
        raise CaseFileError(f"{path}: an array needs exactly dtype, shape and data")
    dtype_text, shape, data = spec["dtype"], spec["shape"], spec["data"]
    if not isinstance(dtype_text, str) or dtype_text not in ALLOWED_DTYPES:
        raise CaseFileError(f"{path}: dtype {dtype_text!r} is not allowed in a case file")
    if (not isinstance(shape, list) or len(shape) > MAX_ARRAY_DIMS
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise CaseFileError(f"{path}: shape must be a list of at most {MAX_ARRAY_DIMS} "
                            "non-negative integers")
    dtype = np.dtype(dtype_text)
    count = math.prod(shape)
    if count * dtype.itemsize > MAX_ARRAY_BYTES:
        raise CaseFileError(f"{path}: array of {count * dtype.itemsize} bytes exceeds the "
                            f"{MAX_ARRAY_BYTES}-byte limit")
    if not isinstance(data, str):
        raise CaseFileError(f"{path}: array data must be a base64 string")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise CaseFileError(f"{path}: array data is not valid base64") from None
    if len(raw) != count * dtype.itemsize:
        raise CaseFileError(f"{path}: array data has {len(raw)} bytes, shape {shape} of {dtype} "
                            f"needs {count * dtype.itemsize}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


# ---------------------------------------------------------------------------------------------
# Loading


def loads(text: str | bytes, source: str = "<case>") -> Case:
    """Parse and validate a case file's contents.  Raises :class:`CaseFileError`."""
    data = parse_json(text, source)
    if isinstance(data, dict) and isinstance(data.get("format"), str) and data["format"].startswith(
            "fuzzkit-sequence/"):
        raise CaseFileError(f"{source}: a case sequence, not a single case; `fuzzkit replay` "
                            "runs it")
    return from_json(data, source)


def parse_json(text: str | bytes, source: str = "<case>") -> Any:
    """The JSON value of a fuzzkit file (case or sequence), refusing pickles and bare NaN."""
    if isinstance(text, bytes):
        if text[:1] == b"\x80":  # every binary pickle protocol (2-5) starts with PROTO 0x80
            raise CaseFileError(f"{source}: looks like a pickle payload, not a fuzzkit case file; "
                                "case files are JSON and are never unpickled")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise CaseFileError(f"{source}: not UTF-8 text; a fuzzkit case file is JSON") from None
    if not text.strip():
        raise CaseFileError(f"{source}: empty file; a fuzzkit case file is JSON")
    stripped = text.strip()
    if stripped[0] in "c(]}" and stripped.endswith(".") and "\n" in stripped:
        raise CaseFileError(f"{source}: looks like a text pickle payload, not a fuzzkit case file; "
                            "case files are JSON and are never unpickled")
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        hint = " (truncated?)" if exc.pos >= len(text.rstrip()) - 1 else ""
        raise CaseFileError(f"{source}: not valid JSON{hint}: {exc.msg} at line {exc.lineno} "
                            f"column {exc.colno}") from None
    except RecursionError:
        raise CaseFileError(f"{source}: JSON nested too deeply") from None
    except CaseFileError as exc:
        raise CaseFileError(f"{source}: {exc}") from None


def _refuse_constant(name: str) -> Any:
    raise CaseFileError(f"bare {name} is not allowed; non-finite floats are written as "
                        '{"__float__": "nan"}')


def from_json(data: Any, source: str = "<case>") -> Case:
    if not isinstance(data, dict):
        raise CaseFileError(f"{source}: top level must be a JSON object")
    if data.get("format") != FORMAT:
        raise CaseFileError(f"{source}: format is {data.get('format')!r}, expected {FORMAT!r} "
                            "(is this a fuzzkit case file?)")
    extra = set(data) - _TOP_KEYS
    if extra:
        raise CaseFileError(f"{source}: unknown keys {sorted(extra)}")
    for key in ("target", "implementation"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise CaseFileError(f"{source}: {key!r} must be a non-empty string")
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise CaseFileError(f"{source}: 'seed' must be an integer or null")
    if not isinstance(data.get("inputs"), dict):
        raise CaseFileError(f"{source}: 'inputs' must be a JSON object")
    try:
        inputs = decode_value(data["inputs"])
    except RecursionError:
        raise CaseFileError(f"{source}: inputs nested too deeply") from None
    except CaseFileError as exc:
        raise CaseFileError(f"{source}: {exc}") from None
    failure = None
    if data.get("failure") is not None:
        raw = data["failure"]
        if (not isinstance(raw, dict) or raw.get("kind") not in KINDS
                or not isinstance(raw.get("message"), str)
                or not isinstance(raw.get("signature"), str)
                or not isinstance(raw.get("details", {}), dict)):
            raise CaseFileError(f"{source}: 'failure' needs kind (one of {', '.join(KINDS)}), "
                                "message, signature and details")
        failure = Failure.from_json(raw)
    case = Case(
        target=data["target"],
        implementation=data["implementation"],
        inputs=inputs,
        seed=seed,
        failure=failure,
        origin=str(data.get("origin", "unknown")),
        fuzzkit_version=str(data.get("fuzzkit_version", "unknown")),
    )
    if "id" in data and data["id"] != case.case_id:
        raise CaseFileError(f"{source}: content hash mismatch (file says {data['id']}, content "
                            f"hashes to {case.case_id}); the file was edited or corrupted")
    return case


def load(path: os.PathLike[str] | str) -> Case:
    """Read a case file safely.  Raises :class:`CaseFileError` with a one-line message."""
    p = Path(path)
    return loads(read_bounded(p), str(p))


def read_bounded(p: Path) -> bytes:
    """The bytes of ``p``, refusing files over :data:`MAX_FILE_BYTES` (one-line errors)."""
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise CaseFileError(f"{p}: {size} bytes exceeds the {MAX_FILE_BYTES}-byte limit "
                                "for case files")
        with p.open("rb") as handle:
            return handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise CaseFileError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise CaseFileError(f"{p}: is a directory, expected a case file") from None
    except PermissionError:
        raise CaseFileError(f"{p}: permission denied") from None
