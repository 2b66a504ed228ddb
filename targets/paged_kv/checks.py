"""The paged KV oracle: first violation of the semantic KV model or of the structure, else the
first step whose logical observation differs from the reference.

Whichever comes *first* in the program is reported: a divergence at step 3 explains a violation
at step 9 better than the other way round.
"""

from __future__ import annotations

from typing import Any, Optional

import fuzzkit.oracles
from fuzzkit.failure import Failure
from fuzzkit.targets.paged_kv.protocol import EVICTIONS, HASHINGS, WINDOW_MODES


def oracle(inputs: dict[str, Any], expected: dict[str, Any], actual: dict[str, Any]) -> Optional[Failure]:
    ref_violation = expected["violation"]
    if ref_violation is not None:
        return Failure(
            "invariant",
            f"the reference manager itself broke {ref_violation['check']} at step "
            f"{ref_violation['step']} ({ref_violation['op']}): {ref_violation['message']}",
            f"invariant:paged_kv:reference:{ref_violation['check']}",
            ref_violation,
        )
    if actual.get("unsupported"):  # a direct call of a manager without this variant: not run
        return None
    return fuzzkit.oracles.program_trace(inputs["program"], expected, actual, target="paged_kv")


def validate(inputs: dict[str, Any]) -> Optional[str]:
    config = inputs.get("config", {})
    if config.get("num_blocks", 0) < 2 or config.get("block_size", 0) < 1:
        return "config needs num_blocks >= 2 and block_size >= 1"
    window = config.get("sliding_window")
    if window is not None and (not isinstance(window, int) or window < 1):
        return "config sliding_window must be null or an integer >= 1"
    if config.get("eviction", "lru") not in EVICTIONS:
        return f"config eviction must be one of {', '.join(EVICTIONS)}"
    if config.get("window_mode", "trim") not in WINDOW_MODES:
        return f"config window_mode must be one of {', '.join(WINDOW_MODES)}"
    if config.get("hashing", "publish") not in HASHINGS:
        return f"config hashing must be one of {', '.join(HASHINGS)}"
    if config.get("window_mode") == "eager" and config.get("eviction") == "penelope":
        return "config window_mode eager is not defined with eviction penelope"
    if not isinstance(inputs.get("program"), list):
        return "program must be a list of operation records"
    for index, step in enumerate(inputs["program"]):
        problem = _validate_step(step)
        if problem is not None:
            return f"program step {index}: {problem}"
    return _validate_values(inputs.get("kv_values"))


#: Each operation's arguments: required, then optional (the driver's method signatures).
_STEP_ARGUMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "add": (("rid", "tokens"), ("adapter", "salt")),
    "allocate": (("rid", "n"), ()),
    "append": (("rid", "tokens"), ()),
    "fork": (("src", "dst"), ()),
    "forward": ((), ()),
    "reset": ((), ()),
    **{op: (("rid",), ()) for op in ("write", "publish", "preempt", "trim", "finish")},
}
_INT_LIMIT = 1 << 63


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -_INT_LIMIT < value < _INT_LIMIT


def _validate_step(step: Any) -> Optional[str]:
    """Why ``step`` is not an operation record the driver can run, or None -- so that a
    malformed case file is refused as such instead of crashing the manager under test (a crash
    there would be reported as the manager's bug)."""
    if not isinstance(step, dict) or step.get("op") not in _STEP_ARGUMENTS:
        return f"must be a record with an op among {', '.join(sorted(_STEP_ARGUMENTS))}"
    required, optional = _STEP_ARGUMENTS[step["op"]]
    arguments = {k: v for k, v in step.items() if k != "op"}
    missing = [name for name in required if name not in arguments]
    extra = sorted(set(arguments) - set(required) - set(optional))
    if missing or extra:
        return (f"{step['op']} takes {', '.join(required + optional) or 'no arguments'} "
                f"(missing {missing}, unknown {extra})")
    for name, value in arguments.items():
        if name == "tokens":
            if not isinstance(value, list) or not all(_is_int(t) for t in value):
                return f"{step['op']} tokens must be a list of integers"
        elif name in ("adapter", "salt"):
            if value is not None and not _is_int(value):
                return f"{step['op']} {name} must be an integer or null"
        elif not _is_int(value):  # a negative ``n`` is an edge the strategies probe on purpose
            return f"{step['op']} {name} must be an integer"
    return None


def _validate_values(kv_values: Any) -> Optional[str]:
    """Why ``kv_values`` (the guarded driver's vector kinds) is not a valid
    ``{"q"|"k"|"v": [kind, ...]}``, or None (absent: standard normal vectors)."""
    from fuzzkit.targets.paged_kv.kernel_driver import KINDS, ROLE_DOMAINS

    if kv_values is None:
        return None
    if not isinstance(kv_values, dict) or not set(kv_values) <= set(ROLE_DOMAINS):
        return 'kv_values must map "q", "k", "v" to lists of value kinds'
    for role, kinds in kv_values.items():
        if not isinstance(kinds, list) or not all(k in KINDS for k in kinds):
            return f"kv_values[{role!r}] must be a list of kinds among {', '.join(KINDS)}"
    return None
