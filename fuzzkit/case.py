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
import binascii
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from fuzzkit import __version__
from fuzzkit.errors import CaseFileError
from fuzzkit.failure import KINDS, Failure

FORMAT = "fuzzkit-case/1"
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_ARRAY_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 32
MAX_ARRAY_DIMS = 8
#: The largest extent of one array axis (numpy refuses larger shapes even when they hold nothing).
MAX_AXIS = 2**31 - 1
#: JSON values in one file: 31 MB of ``{}`` would otherwise decode to more than 2 GB of objects.
MAX_JSON_VALUES = 1_000_000
#: Integers beyond uint64 have no meaning in a case (a 5,000-digit one only costs time).
MAX_INT_DIGITS = 20
#: Strings fuzzkit shows to people (names, messages, signatures) stay readable and one line long.
MAX_LABEL_CHARS = 256
MAX_SIGNATURE_CHARS = 1024
MAX_MESSAGE_CHARS = 64 * 1024
#: Only plain numeric and boolean dtypes; object, void and string dtypes are refused outright.
ALLOWED_DTYPES = frozenset(
    np.dtype(t).str
    for t in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
) | frozenset(
    np.dtype(t).newbyteorder(">").str
    for t in (
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
)
_TOP_KEYS = {
    "format",
    "fuzzkit_version",
    "target",
    "implementation",
    "seed",
    "inputs",
    "failure",
    "origin",
    "id",
}


class SavedAsJson:
    """A record saved as one canonical JSON file named by its id (cases and case sequences):
    the subclass supplies ``case_id`` and ``to_json``."""

    @property
    def case_id(self) -> str:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

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
    seed: int | None = None
    failure: Failure | None = None
    origin: str = "unknown"  # hypothesis, atheris, shrink, manual, ...
    fuzzkit_version: str = __version__

    @property
    def case_id(self) -> str:
        """Content hash of what makes the reproducer: target, implementation and inputs."""
        key = {
            "target": self.target,
            "implementation": self.implementation,
            "inputs": encode_value(self.inputs),
        }
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
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def atomic_write_text(path: Path, text: str) -> None:
    """Temp file in the same directory + fsync + rename: readers never see half a file."""
    atomic_write_bytes(path, text.encode("ascii"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """The one atomic write of fuzzkit (case files, reports, plots): a temp file in the same
    directory, fsync, rename.  The file gets the mode any ordinary write would (0666 less the
    umask), not mkstemp's 0600: reports and corpus files are shared with colleagues and CI."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _create_temp_beside(path: Path) -> tuple[int, str]:
    """A new, exclusive temp file next to ``path``, opened for writing with mode 0666 so the
    kernel applies the umask (reading the umask would mean changing it, racing other threads)."""
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temporary file name for {path.name}")


# ---------------------------------------------------------------------------------------------
# Encoding


def encode_value(value: Any) -> Any:
    """Inputs -> JSON values.  Tuples become lists (JSON has no tuples; document this)."""
    if isinstance(value, np.ndarray):
        if value.dtype.str not in ALLOWED_DTYPES:
            raise TypeError(f"cannot store arrays of dtype {value.dtype} in a case file")
        data = np.ascontiguousarray(value)  # (makes a 0-d array 1-d: the shape is value's)
        return {
            "__ndarray__": {
                "dtype": data.dtype.str,
                "shape": list(value.shape),
                "data": base64.b64encode(data.tobytes()).decode("ascii"),
            }
        }
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
                raise CaseFileError(f"{path}: bad non-finite float {shown(value)}")
            return float(value["__float__"])
        return {k: decode_value(v, f"{path}.{k}", depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_value(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    return value


def shown(value: Any, limit: int = 80) -> str:
    """A value from a file as one short, escaped line for an error message: control characters
    and non-ASCII escaped (no terminal escapes reach the screen), long values cut."""
    text = ascii(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _decode_array(value: dict[str, Any], path: str) -> np.ndarray:
    spec = value["__ndarray__"]
    if (
        set(value) != {"__ndarray__"}
        or not isinstance(spec, dict)
        or set(spec) != {"dtype", "shape", "data"}
    ):
        raise CaseFileError(f"{path}: an array needs exactly dtype, shape and data")
    dtype_text, shape, data = spec["dtype"], spec["shape"], spec["data"]
    if not isinstance(dtype_text, str) or dtype_text not in ALLOWED_DTYPES:
        raise CaseFileError(f"{path}: dtype {shown(dtype_text)} is not allowed in a case file")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_ARRAY_DIMS
        or not all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_AXIS for n in shape
        )
    ):
        raise CaseFileError(
            f"{path}: shape must be a list of at most {MAX_ARRAY_DIMS} "
            f"integers in 0..{MAX_AXIS}, got {shown(shape)}"
        )
    dtype = np.dtype(dtype_text)
    count = math.prod(shape)
    if count * dtype.itemsize > MAX_ARRAY_BYTES:
        raise CaseFileError(
            f"{path}: array of {count * dtype.itemsize} bytes exceeds the "
            f"{MAX_ARRAY_BYTES}-byte limit"
        )
    if not isinstance(data, str):
        raise CaseFileError(f"{path}: array data must be a base64 string")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise CaseFileError(f"{path}: array data is not valid base64") from None
    if len(raw) != count * dtype.itemsize:
        raise CaseFileError(
            f"{path}: array data has {len(raw)} bytes, shape {shape} of {dtype} "
            f"needs {count * dtype.itemsize}"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


# ---------------------------------------------------------------------------------------------
# Loading


def loads(text: str | bytes, source: str = "<case>") -> Case:
    """Parse and validate a case file's contents.  Raises :class:`CaseFileError`."""
    data = parse_json(text, source)
    if (
        isinstance(data, dict)
        and isinstance(data.get("format"), str)
        and data["format"].startswith("fuzzkit-sequence/")
    ):
        raise CaseFileError(
            f"{source}: a case sequence, not a single case; `fuzzkit replay` runs it"
        )
    return from_json(data, source)


def parse_json(text: str | bytes, source: str = "<case>") -> Any:
    """The JSON value of a fuzzkit file (case or sequence), refusing pickles, bare NaN, duplicate
    keys, non-finite or absurdly long numbers, and more values or nesting than a case can need --
    before the decoded value can cost more memory than the file's bytes."""
    if len(text) > MAX_FILE_BYTES:
        raise CaseFileError(
            f"{source}: {len(text)} bytes exceeds the {MAX_FILE_BYTES}-byte limit for case files"
        )
    if isinstance(text, bytes):
        if text[:1] == b"\x80":  # every binary pickle protocol (2-5) starts with PROTO 0x80
            raise CaseFileError(
                f"{source}: looks like a pickle payload, not a fuzzkit case file; "
                "case files are JSON and are never unpickled"
            )
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise CaseFileError(f"{source}: not UTF-8 text; a fuzzkit case file is JSON") from None
    if not text.strip():
        raise CaseFileError(f"{source}: empty file; a fuzzkit case file is JSON")
    stripped = text.strip()
    if stripped[0] in "c(]}" and stripped.endswith(".") and "\n" in stripped:
        raise CaseFileError(
            f"{source}: looks like a text pickle payload, not a fuzzkit case file; "
            "case files are JSON and are never unpickled"
        )
    # Every JSON value but the first follows a comma or opens a container: an upper bound on the
    # number of values, counted before json builds any of them.
    values = text.count(",") + text.count("[") + text.count("{")
    if values > MAX_JSON_VALUES:
        raise CaseFileError(
            f"{source}: about {values} JSON values exceed the limit of "
            f"{MAX_JSON_VALUES}; arrays belong in base64 ndarray records"
        )
    try:
        data = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError as exc:
        hint = " (truncated?)" if exc.pos >= len(text.rstrip()) - 1 else ""
        raise CaseFileError(
            f"{source}: not valid JSON{hint}: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise CaseFileError(f"{source}: JSON nested too deeply") from None
    except CaseFileError as exc:
        raise CaseFileError(f"{source}: {exc}") from None
    deepest = _depth(data)
    if deepest > MAX_FILE_DEPTH:
        raise CaseFileError(
            f"{source}: JSON nested {deepest} levels deep; a case file has at most {MAX_FILE_DEPTH}"
        )
    return data


#: Nesting of a whole file: inputs (``MAX_DEPTH``) sit a few levels below the top.
MAX_FILE_DEPTH = MAX_DEPTH + 8


def _depth(value: Any) -> int:
    """The nesting depth of a JSON value, without recursion (a hostile file may nest deeply)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_FILE_DEPTH:  # deeper than that is refused anyway; stop walking
                stack.extend(
                    (child, level + 1)
                    for child in (item.values() if isinstance(item, dict) else item)
                )
    return deepest


def _refuse_constant(name: str) -> Any:
    raise CaseFileError(
        f'bare {name} is not allowed; non-finite floats are written as {{"__float__": "nan"}}'
    )


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise CaseFileError(
            f"an integer of {len(text.lstrip('-'))} digits; a case file's "
            f"integers have at most {MAX_INT_DIGITS}"
        )
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise CaseFileError(
            f"number {shown(text, 40)} overflows a float; non-finite floats are "
            'written as {"__float__": "inf"}'
        )
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing duplicate keys (json would silently keep the last one, so two
    readers of the same file could see different cases)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore
        raise CaseFileError(f"duplicate key {shown(duplicate)} in one JSON object")
    return out


# ---------------------------------------------------------------------------------------------
# The parts every fuzzkit file shares: header fields and the failure block


@dataclasses.dataclass(frozen=True)
class Header:
    """The validated fields every case and sequence file carries besides its inputs."""

    target: str
    implementation: str
    origin: str
    fuzzkit_version: str
    failure: Failure | None
    file_id: str | None


def parse_header(data: Any, source: str, format_name: str, keys: set[str]) -> Header:
    """Check the shared fields of a case or sequence file (``keys``: every key the format
    allows).  Inputs are each format's own; everything else in the file is validated here, so a
    file has no part that is neither checked nor hashed."""
    if not isinstance(data, dict):
        raise CaseFileError(f"{source}: top level must be a JSON object")
    if data.get("format") != format_name:
        raise CaseFileError(
            f"{source}: format is {shown(data.get('format'))}, expected "
            f"{format_name!r} (is this a fuzzkit file?)"
        )
    extra = set(data) - keys
    if extra:
        raise CaseFileError(f"{source}: unknown keys {shown(sorted(extra))}")
    for key in ("target", "implementation"):
        _label(data.get(key), f"{source}: {key!r}", required=True)
    for key in ("origin", "fuzzkit_version"):
        _label(data.get(key), f"{source}: {key!r}", required=False)
    file_id = data.get("id")
    if file_id is not None and (
        not isinstance(file_id, str)
        or len(file_id) != 20
        or any(c not in "0123456789abcdef" for c in file_id)
    ):
        raise CaseFileError(f"{source}: 'id' must be 20 lowercase hex digits, got {shown(file_id)}")
    return Header(
        target=data["target"],
        implementation=data["implementation"],
        origin=data.get("origin") or "unknown",
        fuzzkit_version=data.get("fuzzkit_version") or "unknown",
        failure=parse_failure(data.get("failure"), source),
        file_id=file_id,
    )


def _label(value: Any, what: str, required: bool, limit: int = MAX_LABEL_CHARS) -> None:
    if value is None and not required:
        return
    if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
        raise CaseFileError(
            f"{what} must be a non-empty printable string of at most "
            f"{limit} characters, got {shown(value)}"
        )


def parse_failure(raw: Any, source: str) -> Failure | None:
    """The recorded failure of a file.  It is outside the content hash (the same inputs are the
    same reproducer whatever was recorded), so it is validated field by field instead: a kind
    fuzzkit knows, a printable signature, a bounded message and JSON details."""
    if raw is None:
        return None
    needs = (
        f"{source}: 'failure' needs kind (one of {', '.join(KINDS)}), message, signature "
        "and details"
    )
    if not isinstance(raw, dict) or set(raw) - {"kind", "message", "signature", "details"}:
        raise CaseFileError(needs)
    if raw.get("kind") not in KINDS or not isinstance(raw.get("message"), str):
        raise CaseFileError(needs)
    details = raw.get("details", {})
    if not isinstance(details, dict):
        raise CaseFileError(needs)
    _label(
        raw.get("signature"),
        f"{source}: failure 'signature'",
        required=True,
        limit=MAX_SIGNATURE_CHARS,
    )
    if len(raw["message"]) > MAX_MESSAGE_CHARS:
        raise CaseFileError(
            f"{source}: failure 'message' is longer than {MAX_MESSAGE_CHARS} characters"
        )
    return Failure.from_json(raw)


def from_json(data: Any, source: str = "<case>") -> Case:
    header = parse_header(data, source, FORMAT, _TOP_KEYS)
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise CaseFileError(f"{source}: 'seed' must be an integer or null")
    if not isinstance(data.get("inputs"), dict):
        raise CaseFileError(f"{source}: 'inputs' must be a JSON object")
    inputs = decode_inputs(data["inputs"], "inputs", source)
    case = Case(
        target=header.target,
        implementation=header.implementation,
        inputs=inputs,
        seed=seed,
        failure=header.failure,
        origin=header.origin,
        fuzzkit_version=header.fuzzkit_version,
    )
    check_id(header.file_id, case.case_id, source)
    return case


def decode_inputs(raw: Any, path: str, source: str) -> dict[str, Any]:
    """Inputs of a file (one case, or one step of a sequence) as Python values; one-line errors."""
    try:
        return decode_value(raw, path)
    except RecursionError:  # pragma: no cover - parse_json bounds the depth first
        raise CaseFileError(f"{source}: {path} nested too deeply") from None
    except CaseFileError as exc:
        raise CaseFileError(f"{source}: {exc}") from None


def check_id(file_id: str | None, content_id: str, source: str) -> None:
    if file_id is not None and file_id != content_id:
        raise CaseFileError(
            f"{source}: content hash mismatch (file says {file_id}, content "
            f"hashes to {content_id}); the file was edited or corrupted"
        )


def load(path: os.PathLike[str] | str) -> Case:
    """Read a case file safely.  Raises :class:`CaseFileError` with a one-line message."""
    p = Path(path)
    return loads(read_bounded(p), str(p))


def read_bounded(p: Path) -> bytes:
    """The bytes of ``p``: a regular file of at most :data:`MAX_FILE_BYTES` (one-line errors).

    The file is opened non-blocking and checked on the open descriptor, so a FIFO, a device or a
    socket named ``x.json`` is refused instead of hanging the reader, and a file swapped between
    the check and the read cannot slip through."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise CaseFileError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise CaseFileError(f"{p}: is a directory, expected a case file") from None
    except PermissionError:
        raise CaseFileError(f"{p}: permission denied") from None
    except OSError as exc:
        raise CaseFileError(f"{p}: cannot open: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    problem = None
    if stat.S_ISDIR(info.st_mode):
        problem = "is a directory, expected a case file"
    elif not stat.S_ISREG(info.st_mode):
        problem = "not a regular file (a FIFO, device or socket); case files are plain files"
    elif info.st_size > MAX_FILE_BYTES:
        problem = f"{info.st_size} bytes exceeds the {MAX_FILE_BYTES}-byte limit for case files"
    if problem is not None:
        os.close(fd)
        raise CaseFileError(f"{p}: {problem}")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise CaseFileError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise CaseFileError(f"{p}: grew past the {MAX_FILE_BYTES}-byte limit while being read")
    return data
