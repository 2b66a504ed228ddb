"""The range precondition of the Scute contract: every intermediate of the slot form fits the
format the implementations hold it in.

Why: the oracle's forward-error bound (:mod:`.checks`) is a bound on *rounding*; a value that
overflows its format has no bounded error at all.  The slot form holds

* in the **storage dtype**: ``T`` (``t_diag`` / ``t_mat``), ``x·T`` (rounded before the base
  GEMM) and the output ``y``;
* in **float32**: the slot parameters ``s``, ``b``, ``m``, ``o``, the base GEMM ``(x·T)·W0ᵀ``
  and its scaled value, the shrink ``x·Aᵀ``, ``⊙ m``, the expand ``·Bᵀ`` and ``⊙ o``.

A case is inside the contract when the absolute-value version of each of them (what the value
can be at most, whatever cancels) stays below :data:`LIMIT_ACC` / :data:`LIMIT_STORE`: half
the format's largest finite value (3·10^4 for float16, the limit the contract always had), which
leaves the computed values -- at most a relative ``γ_n ≪ 1`` above the exact ones -- room below
the overflow threshold.  A bfloat16 subnormal counts as the smallest normal (:func:`read_abs`:
it may be read as anything below it).  :func:`violation` is what ``validate`` reports;
:func:`token_excess` tells the strategy by how much each token's row must be scaled down to fit
(everything but the bias is linear in ``x``), so that generated cases sit *at* the edge instead
of beyond it.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from fuzzkit.values import LARGEST, SMALLEST_NORMAL
from fuzzkit.targets.scute import memo, slots

F32_MAX = LARGEST["float32"]
BF16_MAX = LARGEST["bfloat16"]
SMALLEST_NORMAL_BF16 = SMALLEST_NORMAL["bfloat16"]
#: Largest magnitude of anything held in float32 (accumulators and the f32 slot parameters).
LIMIT_ACC = F32_MAX / 2
#: Largest magnitude of anything held in the storage dtype (T, x·T, the output).
LIMIT_STORE = {"float32": F32_MAX / 2, "bfloat16": BF16_MAX / 2, "float16": 3.0e4}

#: intermediate -> (limit kind, linear in x?)
_LIMITS = {"xT": ("store", True), "acc": ("acc", True), "scaled": ("acc", True),
           "shrink": ("acc", True), "h": ("acc", True), "expand": ("acc", True),
           "low": ("acc", True)}


def _limit(kind: str, dtype: str) -> float:
    return LIMIT_ACC if kind == "acc" else LIMIT_STORE[dtype]


def read_abs(values: np.ndarray, dtype: str) -> np.ndarray:
    """``|values|`` as a kernel may read them from ``dtype``: a bfloat16 subnormal is only known
    to lie below the smallest normal (the Triton interpreter's bf16 conversion mis-reads
    subnormals, flush-to-zero hardware reads 0; see ``checks.storage_eta``), so it counts as
    the smallest normal itself; zero stays zero."""
    a = np.abs(np.asarray(values, np.float64))
    if dtype != "bfloat16":
        return a
    tiny = SMALLEST_NORMAL_BF16
    return np.where((a > 0) & (a < tiny), tiny, a)


#: Intermediates of packed cases seen before (:mod:`.memo`): the strategy's fit and its
#: validate measure the same final case.
_MEASURED = memo.Cache(64)
_FIELDS = ("dtype", "x", "w0", "b0", "token_slot", "t_kind", "t_diag", "t_mat", "s", "b", "A",
           "m", "B", "o")


def intermediates(packed: slots.Packed) -> dict[str, np.ndarray]:
    """Per token, the largest absolute-value magnitude of every intermediate (module doc), plus
    ``out`` (the output's ``M``) and ``bias`` (its part that does not scale with ``x``).
    Storage-dtype operands count as read (:func:`read_abs`).  A new dict, read-only arrays."""
    return dict(_MEASURED.get(
        lambda: memo.key([getattr(packed, name) for name in _FIELDS]),
        lambda: memo.frozen(_intermediates(packed))))


def _intermediates(packed: slots.Packed) -> dict[str, np.ndarray]:
    dtype = packed.dtype
    x = read_abs(packed.x, dtype)
    w0 = read_abs(packed.w0, dtype)
    b0 = np.abs(np.asarray(packed.b0, np.float64))
    ntok = x.shape[0]
    out = {name: np.zeros(ntok) for name in (*_LIMITS, "out", "bias", "out_x")}
    kinds = np.asarray(packed.t_kind)
    ta = np.asarray(packed.token_slot)
    for s in np.unique(ta):  # the per-token formulas are row-wise: one slot's tokens together
        rows = np.nonzero(ta == s)[0]
        xs = x[rows]
        if s < 0:
            acc = xs @ w0.T
            values = {"acc": acc, "scaled": acc, "out_x": acc, "bias": b0, "out": acc + b0}
        else:
            transform = read_abs(packed.t_diag[s], dtype)[:, None] * read_abs(packed.t_mat[s],
                                                                               dtype)
            xt = xs @ transform
            acc = xt @ w0.T
            scaled = acc * np.abs(packed.s[s])
            shrink = xs @ read_abs(packed.A[s], dtype).T
            h = shrink * np.abs(packed.m[s])
            expand = h @ read_abs(packed.B[s], dtype).T
            low = expand * np.abs(packed.o[s])
            bias = np.abs(packed.b[s])
            values = {"xT": xt if kinds[s] > 0 else np.zeros(1), "acc": acc,
                      "scaled": scaled, "shrink": shrink, "h": h, "expand": expand, "low": low,
                      "out_x": scaled + low, "bias": bias, "out": scaled + bias + low}
        for name, v in values.items():
            out[name][rows] = np.max(v, axis=-1, initial=0.0)  # per row (bias: per slot)
    return out


def parameter_limits(dtype: str) -> dict[str, float]:
    """Largest magnitude of each slot parameter: ``T`` is stored in ``dtype``, the rest in
    float32 (checked in this order)."""
    store = LIMIT_STORE[dtype]
    return {"t_diag": store, "t_mat": store, "s": LIMIT_ACC, "b": LIMIT_ACC, "m": LIMIT_ACC,
            "o": LIMIT_ACC}


def _bad_parameter(packed: slots.Packed) -> Optional[str]:
    for name, limit in parameter_limits(packed.dtype).items():
        values = np.asarray(getattr(packed, name), np.float64)
        if values.size and not float(np.max(np.abs(values))) <= limit:
            return name
    return None


def violation(packed: slots.Packed) -> Optional[str]:
    """One line naming the first slot parameter or intermediate that leaves its format's range
    (module doc), or None when the case is inside the contract."""
    name = _bad_parameter(packed)
    if name is not None:
        stored = name.startswith("t_")
        fmt = packed.dtype if stored else "float32"
        limit = _limit("store" if stored else "acc", packed.dtype)
        return f"slot parameter {name} has magnitudes above {limit:g}: would overflow {fmt}"
    values = intermediates(packed)
    checks = [(name, _limit(kind, packed.dtype)) for name, (kind, _) in _LIMITS.items()]
    checks.append(("out", LIMIT_STORE[packed.dtype]))
    for name, limit in checks:
        top = float(np.max(values[name], initial=0.0))
        if not top <= limit:
            fmt = packed.dtype if name in ("xT", "out") else "float32"
            return f"magnitudes above {limit:g} would overflow {fmt} (intermediate {name})"
    return None


def token_excess(packed: slots.Packed) -> np.ndarray:
    """Per token, the factor by which its row ``x_t`` exceeds the range (> 1: scale it down by at
    least that much; the bias, which does not scale with ``x``, gets the room that is left)."""
    values = intermediates(packed)
    ratios = [values[name] / _limit(kind, packed.dtype)
              for name, (kind, linear) in _LIMITS.items() if linear]
    room = LIMIT_STORE[packed.dtype] - values["bias"]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios.append(np.where(room > 0, values["out_x"] / np.maximum(room, 1e-300), np.inf))
    return np.max(np.stack(ratios), axis=0)


__all__ = ["LIMIT_ACC", "LIMIT_STORE", "intermediates", "parameter_limits", "read_abs",
           "violation", "token_excess"]
