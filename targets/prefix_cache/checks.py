"""The prefix_cache oracle: the adapter's first semantic violation, or the first step whose
observation differs from the reference model, whichever comes first in the program.

A violation (:mod:`fuzzkit.targets.prefix_cache.adapters.sglang_impl`: KV values, slots, locks, sizes,
tree links) is judged on the implementation alone; the step trace (each step's result and the
cache's evictable / protected / available / cached token counts) against the model of SGLang's
documented policy (:mod:`fuzzkit.targets.prefix_cache.reference`).
"""

from __future__ import annotations

from typing import Any

import fuzzkit.oracles
from fuzzkit.failure import Failure
from fuzzkit.targets.prefix_cache.program import OPS, REQUEST_OPS


def oracle(inputs: dict[str, Any], expected: dict[str, Any],
           actual: dict[str, Any]) -> Failure | None:
    return fuzzkit.oracles.program_trace(inputs["program"], expected, actual, target="prefix_cache")


def validate(inputs: dict[str, Any]) -> str | None:
    config = inputs.get("config")
    if not isinstance(config, dict):
        return "config must be an object"
    ps, pages = config.get("page_size"), config.get("num_pages")
    if not isinstance(ps, int) or not 1 <= ps <= 64:
        return "config page_size must be an integer in 1..64"
    if not isinstance(pages, int) or not 1 <= pages <= 4096:
        return "config num_pages must be an integer in 1..4096"
    if not isinstance(config.get("need_sort", False), bool):
        return "config need_sort must be a boolean"
    program = inputs.get("program")
    if not isinstance(program, list):
        return "program must be a list of operation records"
    for i, op in enumerate(program):
        if not isinstance(op, dict) or op.get("op") not in OPS:
            return f"program[{i}] must be an object with op among {', '.join(OPS)}"
        kind = op["op"]
        if kind in ("add", "append", "match", "lock"):
            tokens = op.get("tokens")
            if not isinstance(tokens, list) or not all(
                    isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**63
                    for t in tokens):
                return f"program[{i}].tokens must be a list of integers in [0, 2**63)"
        if kind == "append" and not op.get("tokens"):
            return f"program[{i}]: append needs at least one token"
        if kind in ("add", *REQUEST_OPS) and not isinstance(op.get("rid"), int):
            return f"program[{i}].rid must be an integer"
        if kind in ("lock", "unlock") and not isinstance(op.get("pin"), int):
            return f"program[{i}].pin must be an integer"
        if kind == "evict" and not (isinstance(op.get("n"), int) and op["n"] >= 0):
            return f"program[{i}].n must be an integer >= 0"
    return None
