"""Exact comparison of nested outputs, reporting where they first differ.

Integer codes, ids, block tables and scheduler decisions have exactly one right answer, so any
difference is a bug.  What makes this oracle useful is *where*: the message and details name the
path of the first difference (``codes[2, 5]``, ``steps[3]['table'][1]``), and the signature keeps
only the part of that path that survives shrinking -- string keys stay, positions between them
become ``[]`` and positions after the last key disappear -- so ``steps[3]['table'][1]`` and
``steps[0]['table'][7]`` are the same bug: ``mismatch:exact:steps[]['table']``.
"""

from __future__ import annotations

import numbers
from typing import Any, Mapping, Sequence

import numpy as np

from fuzzkit.failure import Failure

# A path is a list of steps: ("key", k), ("item", i) or ("index", (i, j, ...)).
_Path = list


def exact(expected: Any, actual: Any, *, name: str = "output") -> Failure | None:
    """Return None when ``actual`` equals ``expected`` exactly, else the first difference.

    Supported values: dicts (same keys), lists and tuples (interchangeable, since JSON turns
    tuples into lists), NumPy arrays (same dtype kind and shape, then values; NaN equals NaN in
    the same place), Python and NumPy scalars, strings, bytes and None.  Scalars must be of the
    same kind (bool, int, float, complex, str, bytes, None): ``1`` and ``1.0`` differ, because
    for an exact output a changed type is a changed answer.  A NumPy scalar meeting an array is
    compared as a 0-d array.  Anything else falls back to ``==`` on equal types.

    ``details`` holds ``path``, ``reason`` (value, type, dtype, shape, length, missing, extra),
    ``expected`` and ``actual`` at that path, and for arrays ``index`` and ``count`` (number of
    differing elements).
    """
    return _compare(expected, actual, [], name)


def _compare(e: Any, a: Any, path: _Path, name: str) -> Failure | None:
    if isinstance(e, np.ndarray) or isinstance(a, np.ndarray):
        if isinstance(e, (np.ndarray, np.generic)) and isinstance(a, (np.ndarray, np.generic)):
            return _compare_arrays(np.asarray(e), np.asarray(a), path, name)
        return _type_failure(e, a, path, name)

    if isinstance(e, Mapping) or isinstance(a, Mapping):
        if not (isinstance(e, Mapping) and isinstance(a, Mapping)):
            return _type_failure(e, a, path, name)
        return _compare_dicts(e, a, path, name)

    if _is_sequence(e) or _is_sequence(a):
        if not (_is_sequence(e) and _is_sequence(a)):
            return _type_failure(e, a, path, name)
        if len(e) != len(a):
            return _fail(
                name,
                path,
                "length",
                len(e),
                len(a),
                f"expected length {len(e)}, got {len(a)}",
            )
        for i, (ei, ai) in enumerate(zip(e, a)):
            failure = _compare(ei, ai, path + [("item", i)], name)
            if failure is not None:
                return failure
        return None

    ek, ak = _scalar_kind(e), _scalar_kind(a)
    if ek != ak or (ek is None and type(e) is not type(a)):
        return _type_failure(e, a, path, name)
    if _scalar_equal(e, a, ek):
        return None
    return _fail(name, path, "value", e, a, f"expected {_short(e)}, got {_short(a)}")


def _compare_dicts(e: Mapping, a: Mapping, path: _Path, name: str) -> Failure | None:
    for key in e:
        if key not in a:
            return _fail(
                name,
                path + [("key", key)],
                "missing",
                _brief(e[key]),
                None,
                "key missing from actual output",
            )
    for key in a:
        if key not in e:
            return _fail(
                name,
                path + [("key", key)],
                "extra",
                None,
                _brief(a[key]),
                "unexpected key in actual output",
            )
    for key in e:
        failure = _compare(e[key], a[key], path + [("key", key)], name)
        if failure is not None:
            return failure
    return None


def _compare_arrays(e: np.ndarray, a: np.ndarray, path: _Path, name: str) -> Failure | None:
    if e.dtype.kind != a.dtype.kind:
        return _fail(
            name,
            path,
            "dtype",
            str(e.dtype),
            str(a.dtype),
            f"expected dtype {e.dtype}, got {a.dtype}",
        )
    if e.shape != a.shape:
        return _fail(
            name,
            path,
            "shape",
            list(e.shape),
            list(a.shape),
            f"expected shape {e.shape}, got {a.shape}",
        )
    if e.dtype.kind == "O":
        for index in np.ndindex(e.shape):
            failure = _compare(e[index], a[index], path + [("index", index)], name)
            if failure is not None:
                return failure
        return None
    if e.dtype.kind in "fc":
        differ = ~((e == a) | (np.isnan(e) & np.isnan(a)))
    else:
        differ = e != a
    differ = np.asarray(differ, dtype=bool)
    if not differ.any():
        return None
    index = tuple(int(i) for i in np.argwhere(differ)[0])
    count = int(differ.sum())
    ev, av = e[index], a[index]
    return _fail(
        name,
        path + [("index", index)] if index else path,
        "value",
        ev,
        av,
        f"expected {_short(ev)}, got {_short(av)} ({count} of {e.size} elements differ)",
        index=list(index),
        count=count,
    )


def _fail(
    name: str, path: _Path, reason: str, expected: Any, actual: Any, what: str, **extra: Any
) -> Failure:
    where = render_path(name, path)
    signature = f"mismatch:exact:{signature_path(name, path)}"
    if reason != "value":
        signature += f":{reason}"
    details = {"path": where, "reason": reason, "expected": expected, "actual": actual, **extra}
    return Failure("mismatch", f"{where}: {what}", signature, details)


def _type_failure(e: Any, a: Any, path: _Path, name: str) -> Failure:
    te, ta = type(e).__name__, type(a).__name__
    return _fail(name, path, "type", te, ta, f"expected {te}, got {ta}")


def render_path(name: str, path: _Path) -> str:
    """The full path for humans: ``steps[3]['table'][1, 2]``."""
    out = [name]
    for kind, value in path:
        if kind == "index":
            out.append("[" + ", ".join(str(i) for i in value) + "]")
        else:
            out.append(f"[{value!r}]")
    return "".join(out)


def signature_path(name: str, path: _Path) -> str:
    """The shrink-stable path: string keys stay; list positions, non-string keys and array
    indices become ``[]`` between keys and vanish after the last one, so the signature names the
    container holding the difference (``steps[3]['table'][1]`` -> ``steps[]['table']``)."""
    named = [i for i, (kind, value) in enumerate(path) if _is_name(kind, value)]
    out = [name]
    for kind, value in path[: named[-1] + 1] if named else []:
        out.append(f"[{value!r}]" if _is_name(kind, value) else "[]")
    return "".join(out)


def _is_name(kind: str, value: Any) -> bool:
    return kind == "key" and isinstance(value, str)


def _is_sequence(x: Any) -> bool:
    return isinstance(x, (list, tuple))


def _scalar_kind(x: Any) -> str | None:
    if x is None:
        return "none"
    if isinstance(x, (bool, np.bool_)):
        return "bool"
    if isinstance(x, numbers.Integral):
        return "int"
    if isinstance(x, (float, np.floating)):
        return "float"
    if isinstance(x, (complex, np.complexfloating)):
        return "complex"
    if isinstance(x, str):
        return "str"
    if isinstance(x, bytes):
        return "bytes"
    return None


def _scalar_equal(e: Any, a: Any, kind: str | None) -> bool:
    if kind in ("float", "complex"):
        return bool(e == a or (np.isnan(e) and np.isnan(a)))
    result = e == a
    if isinstance(result, (bool, np.bool_)):
        return bool(result)
    return False  # an object whose == is not a plain truth value cannot be compared exactly


def _short(x: Any, limit: int = 80) -> str:
    text = repr(x.item() if isinstance(x, np.generic) else x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _brief(x: Any) -> Any:
    """A value small enough for failure details (arrays are summarised by Failure itself)."""
    if isinstance(x, (np.ndarray, np.generic)) or _scalar_kind(x) not in (None, "str", "bytes"):
        return x
    text = repr(x)
    return x if len(text) <= 200 else text[:197] + "..."


__all__: Sequence[str] = ["exact", "render_path", "signature_path"]
