"""The verdict an oracle hands back when a reference and an implementation disagree.

A :class:`Failure` is plain data so that it can be stored in a case file and compared across
machines.  Its ``signature`` is what keeps shrinking on the *same* bug and what deduplicates
findings: it must not contain anything that changes while the input shrinks (sizes, indices,
values), only the *class* of the divergence (which output, which kind of error, which op).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

KINDS = (
    "mismatch",
    "invariant",
    "guard",
    "crash",
    "timeout",
    "nondeterministic",
    "oom",
    "state-dependent",
)


@dataclasses.dataclass(frozen=True)
class Failure:
    """One disagreement, with enough structure for a human and for a machine.

    kind:      one of :data:`KINDS`.
    message:   one human sentence (or a few lines) that says what differs and where.
    signature: a stable key for the bug class, e.g. ``"mismatch:scores:close"``.
    details:   JSON-compatible structured facts (first diverging step, worst element, ...).
    """

    kind: str
    message: str
    signature: str
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown failure kind {self.kind!r}; expected one of {KINDS}")
        object.__setattr__(self, "details", jsonable(dict(self.details)))

    def to_json(self) -> dict[str, Any]:
        # Case files refuse longer messages (fuzzkit.case.MAX_MESSAGE_CHARS): a finding must load.
        message = (
            self.message
            if len(self.message) <= 60_000
            else (self.message[:60_000] + "\n... (message cut at 60,000 characters)")
        )
        return {
            "kind": self.kind,
            "message": message,
            "signature": self.signature,
            "details": dict(self.details),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Failure:
        return cls(
            kind=str(data["kind"]),
            message=str(data["message"]),
            signature=str(data["signature"]),
            details=dict(data.get("details") or {}),
        )

    def with_kind(self, kind: str, prefix: str = "") -> Failure:
        """The same divergence re-labelled (used to mark a failure as non-deterministic)."""
        return Failure(kind, prefix + self.message, f"{kind}:{self.signature}", self.details)


def jsonable(value: Any) -> Any:
    """Turn NumPy scalars, tuples and small arrays in failure details into JSON values.

    Details are for humans and dashboards; big arrays do not belong there, so anything with
    more than 64 elements is summarised by its shape.
    """
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a hard dependency
        np = None  # type: ignore[assignment]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if np is not None and isinstance(value, np.ndarray):
        if value.size > 64:
            return {"shape": list(value.shape), "dtype": str(value.dtype)}
        return jsonable(value.tolist())
    if np is not None and isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)
