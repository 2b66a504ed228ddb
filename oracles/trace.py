"""Step-by-step comparison of stateful targets (KV cache managers, schedulers).

A stateful target runs a *program* (a list of operation records) and returns one observation
per step.  Comparing only the final state would hide *when* things went wrong; this oracle names
the first step whose observation differs, which is what a human needs to debug and what lets
delta debugging cut every later step.  The signature carries the op and the inner difference but
no step index, so it stays the same while the shrinker removes earlier steps.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from fuzzkit.failure import Failure
from fuzzkit.oracles.exact import exact

Compare = Callable[[Any, Any], Failure | None]


def trace(
    expected_steps: Sequence[Any],
    actual_steps: Sequence[Any],
    *,
    compare: Compare | None = None,
    name: str = "trace",
) -> Failure | None:
    """Return None when every step's observation agrees, else the first diverging step.

    ``compare(expected_step, actual_step)`` defaults to :func:`fuzzkit.oracles.exact.exact`
    (whose paths are then rooted at ``step``, e.g. ``step['free_blocks'][2]``).  When all common
    steps agree but the lengths differ, the first missing or extra step is reported with the tail
    ``missing_step`` or ``extra_step``.  The op is the ``"op"`` key of the reference's step (of
    the actual step for an extra one), or ``step`` when there is none.

    Signature: ``<inner kind>:trace:<op>:<inner signature without its kind>``, e.g.
    ``mismatch:trace:alloc:exact:step['free_blocks']``.  ``name`` appears in the message only.
    """
    if compare is None:
        compare = _exact_step
    for index, (expected, actual) in enumerate(zip(expected_steps, actual_steps)):
        inner = compare(expected, actual)
        if inner is None:
            continue
        op = _op(expected)
        tail = inner.signature.split(":", 1)[1] if ":" in inner.signature else inner.signature
        details = {
            "step": index,
            "op": op,
            "path": inner.details.get("path"),
            "inner_signature": inner.signature,
            "inner": dict(inner.details),
            "expected": expected,
            "actual": actual,
        }
        return Failure(
            inner.kind,
            f"{name}: first divergence at step {index} (op {op!r}): {inner.message}",
            f"{inner.kind}:trace:{op}:{tail}",
            details,
        )

    n_expected, n_actual = len(expected_steps), len(actual_steps)
    if n_expected == n_actual:
        return None
    index = min(n_expected, n_actual)
    if n_actual < n_expected:
        op, tail, what = _op(expected_steps[index]), "missing_step", "ended early"
        expected, actual = expected_steps[index], None
    else:
        op, tail, what = _op(actual_steps[index]), "extra_step", "has extra steps"
        expected, actual = None, actual_steps[index]
    return Failure(
        "mismatch",
        f"{name}: actual trace {what} at step {index} (op {op!r}): "
        f"{n_expected} steps expected, {n_actual} observed",
        f"mismatch:trace:{op}:{tail}",
        {
            "step": index,
            "op": op,
            "expected_steps": n_expected,
            "actual_steps": n_actual,
            "expected": expected,
            "actual": actual,
        },
    )


def _exact_step(expected: Any, actual: Any) -> Failure | None:
    return exact(expected, actual, name="step")


def _op(step: Any) -> str:
    if isinstance(step, Mapping) and "op" in step:
        return str(step["op"])
    return "step"


__all__ = ["trace"]


def program_trace(
    program: Sequence[Mapping[str, Any]],
    expected: Mapping[str, Any],
    actual: Mapping[str, Any],
    *,
    target: str,
) -> Failure | None:
    """The oracle of a target driven by a program whose runs return ``{"steps": [...],
    "violation": None | {"step", "op", "check", "message", ["kind"]}}`` (a driver that checks
    invariants after every step and stops at the first one broken).

    The steps compare with :func:`trace` -- only up to where the implementation stopped, when
    it stopped on a violation, so the violation itself is what gets reported; then the
    violation, naming the program step that broke it.  Signature:
    ``<kind>:<target>:<check>:<op>`` (kind ``invariant`` unless the violation says otherwise)."""
    violation = actual["violation"]
    steps = actual["steps"]
    expected_steps = expected["steps"][: len(steps)] if violation else expected["steps"]
    diverged = trace(expected_steps, steps)
    if diverged is not None or violation is None:
        return diverged
    step = program[violation["step"]]
    args = ", ".join(f"{k}={v}" for k, v in step.items() if k != "op")
    kind = violation.get("kind", "invariant")
    return Failure(
        kind,
        f"step {violation['step']} ({step['op']}({args})): {violation['check']}: "
        f"{violation['message']}",
        f"{kind}:{target}:{violation['check']}:{violation['op']}",
        {**violation, "operation": step},
    )
