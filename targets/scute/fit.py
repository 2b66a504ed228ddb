"""Bring a drawn Scute case inside the contract's range, by powers of two.

Why: the strategy draws every array from the whole value domain (:mod:`fuzzkit.values`: huge
values near the format's largest, tiny norms, subnormals, zeros, ties), one array at a time --
so a huge ``x`` row meets a huge ``W0`` and the product overflows float32, which the contract
(:mod:`.ranges`) excludes.  Rejecting such cases would lose exactly the edge where overflow bugs
live; instead :func:`fit` scales the culprit down by the smallest power of two that makes the
case legal, which keeps it *at* the edge (the largest intermediate ends up within a factor two of
its limit), keeps the other values' kinds (zeros stay zeros, ties stay ties) and is a
deterministic function of the draws, so Hypothesis still shrinks.

Order: the base bias ``b0`` first (it does not scale with ``x``; it gets at most a quarter of
the output's room), then every adapter's own slot parameters (``T`` in the storage dtype, ``s``,
``b``, ``m``, ``o`` in float32: a Neumann series of a huge ``Q``, a DoRA ``g`` over a tiny weight
norm, a VeRA ``λ_b`` near the float32 limit), then each token's row ``x_t`` against everything
that scales with it.  A DoRA slot whose weight norm is exactly zero has no finite ``g`` (PEFT
divides by it too) and becomes the LoRA adapter it was built from.

The slot conversion used here is :func:`fuzzkit.targets.scute.pristine.slots`, which mutants do not
patch.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import numpy as np

from fuzzkit.targets.scute import checks, pristine, ranges

#: slot parameter -> the adapter key that scales it, per method ("b0": the base bias).
CULPRITS: dict[str, dict[str, str]] = {
    "lora": {"o": "alpha", "b": "b0"},
    "dora": {"s": "magnitude", "o": "magnitude", "b": "b0"},
    "vera": {"m": "lambda_d", "o": "lambda_b", "b": "b0"},
    "oft": {"t_mat": "Q", "b": "b0"},
    "boft": {"t_mat": "Q", "s": "boft_s", "b": "b0"},
    "ia3": {"s": "l", "b": "l", "t_diag": "l"},
    "identity": {"b": "b0"},
}
#: adapter keys held in the storage dtype (the rest are float32 or Python floats).
STORED = ("A", "B", "A_shared", "B_shared")
MAX_STEPS = 64


def _scaled(value: Any, exponent: int, fmt: Optional[str]) -> Any:
    if isinstance(value, float):
        return math.ldexp(value, -exponent)
    out = np.ldexp(np.asarray(value, np.float64), -exponent)
    return checks.round_to(out, fmt or "float32")


def _excess(slot: Mapping[str, Any], dtype: str) -> Optional[tuple[str, float]]:
    for name, limit in ranges.parameter_limits(dtype).items():
        top = float(np.max(np.abs(np.asarray(slot[name], np.float64)), initial=0.0))
        if not top <= limit:
            return name, (top / limit if np.isfinite(top) else math.inf)
    return None


def _fit_adapter(ad: dict[str, Any], w0: np.ndarray, b0: np.ndarray, dtype: str
                 ) -> dict[str, Any]:
    method = ad["method"]
    for _ in range(MAX_STEPS):
        try:
            with np.errstate(all="ignore"):
                slot = pristine.slots().to_slot(ad, w0, b0)
            bad = _excess(slot, dtype)
        except np.linalg.LinAlgError:
            # I + Q singular in float64: |Q| so large that the 1 is lost (odd blocks)
            bad = ("t_mat", math.inf)
        if bad is None:
            return ad
        name, ratio = bad
        if method == "dora" and name == "s" and not np.all(np.isfinite(np.asarray(slot["s"]))):
            return {**{k: v for k, v in ad.items() if k != "magnitude"}, "method": "lora"}
        key = CULPRITS[method].get(name, "b0")
        if key == "b0":
            return ad  # the bias is fitted globally
        degree = max(1, int(ad.get("neumann_terms", 5)) - 1) if key == "Q" else 1
        exponent = 16 if not np.isfinite(ratio) else max(1, math.ceil(math.log2(ratio) / degree))
        fmt = dtype if (key in STORED or (method == "ia3" and ad["placement"] == "ff")) else None
        ad = {**ad, key: _scaled(ad[key], min(exponent, 16), fmt)}
    return {"method": "identity"}  # pragma: no cover - 64 steps of up to 2^-16 always suffice


def fit(case: dict[str, Any]) -> dict[str, Any]:
    """``case`` scaled into the contract's range (module docstring); a new dict."""
    case = dict(case)
    dtype = case["dtype"]
    b0 = np.asarray(case["b0"], np.float32)
    room = ranges.LIMIT_STORE[dtype] / 4
    top = float(np.max(np.abs(b0), initial=0.0))
    if top > room:
        b0 = _scaled(b0, math.ceil(math.log2(top / room)), "float32")
    case["b0"] = b0
    w0 = np.asarray(case["w0"], np.float32)
    adapters = [_fit_adapter(dict(a), w0, b0, dtype) for a in case["adapters"]]
    for i, ad in enumerate(adapters):  # IA3 k/v: b = b0 * l must leave room as well
        if ad["method"] == "ia3" and ad["placement"] == "kv":
            lvec = np.asarray(ad["l"], np.float64)
            top = float(np.max(np.abs(b0.astype(np.float64) * lvec), initial=0.0))
            if top > room:
                adapters[i] = {**ad, "l": _scaled(lvec, math.ceil(math.log2(top / room)), None)}
    case["adapters"] = adapters
    x = np.asarray(case["x"], np.float32).copy()
    for _ in range(4):
        case["x"] = x
        with np.errstate(all="ignore"):
            excess = ranges.token_excess(pristine.slots().pack(case))
        over = np.nonzero(~(excess <= 1.0))[0]
        if not len(over):
            break
        for t in over:
            if np.isfinite(excess[t]):
                x[t] = _scaled(x[t], max(1, math.ceil(math.log2(excess[t]))), dtype)
            else:  # no room at all next to the bias (cannot happen with b0 fitted first)
                x[t] = 0.0
    else:
        # Still over after four rounds: huge A and B (and scale) overflow even for the
        # smallest normal x (a bfloat16 subnormal reads as the smallest normal, so scaling
        # further changes nothing).  Such a row becomes zero, which the contract always accepts.
        case["x"] = x
        with np.errstate(all="ignore"):
            excess = ranges.token_excess(pristine.slots().pack(case))
        x[~(excess <= 1.0)] = 0.0
    case["x"] = x
    return case


__all__ = ["fit", "CULPRITS"]
