"""Resource limits of a case: what a file from someone else may make fuzzkit spend.

A case file is small; what it asks for need not be.  A paged_kv program of 10**6 steps, a cache of
10**9 blocks, a graph that expands to 10**9 elements: each is a few bytes of JSON and gigabytes or
hours to replay.  So every target declares :class:`Limit` records -- a name (``steps``,
``blocks``, ``nodes``, ``elements``, ...), a default that is far above anything its strategy
generates, and a ``measure`` that reads the size off the inputs *without running anything* -- and
every path that loads a case (``replay``, ``shrink``, ``bisect``, pytest regression items) checks
them before the target's ``validate`` and before any code under test runs.

A case beyond a limit is refused with one line naming the limit and how to raise it
(``--limit NAME=VALUE``): the user decides to spend more, never the file.

``measure`` functions see unvalidated inputs: anything may be missing or of the wrong type.  One
that raises means the inputs are malformed; :func:`check` says so in one line rather than letting
the exception escape.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Sequence

Inputs = dict[str, Any]


#: What reading unvalidated inputs raises when they are malformed (not a bug of the reader).
MALFORMED = (
    ArithmeticError,
    AttributeError,
    IndexError,
    KeyError,
    TypeError,
    ValueError,
    RecursionError,
)


@dataclasses.dataclass(frozen=True)
class Limit:
    """One resource of a case: ``measure(inputs)`` must stay at or below ``default`` unless the
    user raises it."""

    name: str
    default: int
    what: str
    measure: Callable[[Inputs], int]


def parse_overrides(texts: Sequence[str]) -> dict[str, int]:
    """``["steps=100000", ...]`` -> ``{"steps": 100000}``; a bad entry is a one-line
    :class:`~fuzzkit.errors.UsageError`."""
    from fuzzkit.errors import UsageError

    out: dict[str, int] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        try:
            number = int(value)
        except ValueError:
            number = -1
        if not sep or not name or number < 0:
            raise UsageError(f"--limit {text!r}: expected NAME=INTEGER, e.g. --limit steps=100000")
        out[name.strip()] = number
    return out


def check(
    target_name: str,
    limits: Sequence[Limit],
    inputs: Any,
    overrides: Mapping[str, int] | None = None,
) -> str | None:
    """One line naming the first limit ``inputs`` exceed (and how to raise it), or None."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - {limit.name for limit in limits})
    if unknown:
        names = ", ".join(limit.name for limit in limits) or "none"
        return (
            f"target {target_name!r} has no limit named {', '.join(unknown)} (its limits: {names})"
        )
    if not isinstance(inputs, dict):
        return f"inputs of a {target_name} case must be a JSON object"
    for limit in limits:
        try:
            size = int(limit.measure(inputs))
        except MALFORMED as exc:
            return (
                f"inputs are malformed for target {target_name!r} (measuring {limit.what}: "
                f"{type(exc).__name__}: {_short(exc)})"
            )
        bound = overrides.get(limit.name, limit.default)
        if size > bound:
            return (
                f"{limit.what}: {size} exceeds the limit {limit.name}={bound} of target "
                f"{target_name!r}; if you trust this file, raise it with --limit "
                f"{limit.name}={size}"
            )
    return None


def validation_problem(target: Any, inputs: Any) -> str | None:
    """The target's ``validate`` verdict on inputs from a file, one line; a validator that raises
    on malformed inputs counts as refusing them (files are not generated, anything goes)."""
    if target.validate is None:
        return None
    try:
        problem = target.validate(inputs)
    except Exception as exc:  # noqa: BLE001 - any exception is a refusal of hostile input
        return f"{type(exc).__name__}: {_short(exc)}"
    return None if problem is None else str(problem)


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return ascii(text[:200])[1:-1]


# ---------------------------------------------------------------------------------------------
# Measuring helpers shared by targets: sizes read off JSON values without trusting them.


def length(value: Any) -> int:
    """How many items ``list(value)`` makes of a list, tuple, dict or string; 0 for anything
    else."""
    return len(value) if isinstance(value, (list, tuple, dict, str)) else 0


def integer(value: Any) -> int:
    """What a target's ``int(value)`` makes of a number (a float such as ``1e9`` or a numeric
    string passes ``int()``), 0 where that fails (then the target's validate refuses it too)."""
    import numpy as np

    if isinstance(value, (str, int, float, np.integer, np.floating)):
        try:
            return int(value)
        except (OverflowError, ValueError):
            return 0
    return 0


def field(key: str) -> Callable[[Inputs], int]:
    """A measure that reads the integer ``inputs[key]``."""

    def measure(inputs: Inputs) -> int:
        return integer(inputs.get(key))

    measure.__name__ = key
    return measure


def shape(value: Any) -> tuple[int, ...]:
    """An array's shape (a nested list's: from its first items), () for anything else."""
    found = getattr(value, "shape", None)
    if isinstance(found, tuple):
        return tuple(int(s) for s in found)
    dims: list[int] = []
    while isinstance(value, (list, tuple)) and len(dims) < 32:
        dims.append(len(value))
        value = value[0] if value else None
    return tuple(dims)


def elements(value: Any) -> int:
    """The element count of an array (or nested list), 0 for anything else."""
    found = shape(value)
    return math.prod(found) if found else 0
