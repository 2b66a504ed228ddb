"""Metamorphic relations of the Scute implementations (one implementation each):

* ``batch-invariance``: a token's output does not depend on its batch mates -- the same tokens
  alone (every other token dropped) and in reversed order give the same rows: bitwise when the
  implementation says ``bitwise_batch_invariant``, otherwise within twice the oracle bound.
* ``zero-init-is-base``: every adapter replaced by its zero initialisation (LoRA/DoRA ``B = 0``
  with DoRA's magnitude = the row norms of W0, VeRA ``lambda_b = 0``, OFT/BOFT ``Q = 0`` and
  ``boft_s = 1``, IA3 ``l = 1``) reproduces the base layer (the same tokens run as -1), within
  twice the bound.
* ``merged-equals-unmerged``: per used slot, the merged layer ``W' = diag(s)·W0·Tᵀ +
  diag(o)·B·diag(m)·A``, ``b' = b`` (:func:`slots.merged_weight`, rounded to the storage dtype)
  run as a plain base layer (tokens -1) equals the adapter path within the two runs' bounds plus
  the rounding of W'.
* ``cayley-orthogonal``: the exact Cayley rotations that the slot conversion builds for OFT and
  BOFT are orthogonal, ``max|TᵀT - I| <= 1e-10·K`` in float64 (does not run the implementation).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import numpy as np

from fuzzkit.failure import Failure
from fuzzkit.target import Property
from targets.scute import checks, reference, slots

Impl = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def _invariant(name: str, message: str, **details: Any) -> Failure:
    return Failure("invariant", f"scute {name}: {message}", f"invariant:scute:{name}", details)


def _bound(inputs: Mapping[str, Any]) -> np.ndarray:
    ref = reference.run(inputs)["y"]
    return checks.error_bound(slots.pack(inputs), ref)


def _sub(inputs: Mapping[str, Any], rows: np.ndarray) -> dict[str, Any]:
    case = dict(inputs)
    case["x"] = np.asarray(inputs["x"])[rows]
    case["token_adapter"] = np.asarray(inputs["token_adapter"])[rows]
    return case


def _compare(name: str, what: str, inputs: Mapping[str, Any], full: np.ndarray,
             other: np.ndarray, rows: np.ndarray, tol: np.ndarray, bitwise: bool
             ) -> Optional[Failure]:
    a = np.asarray(full, np.float32)[rows]
    b = np.asarray(other, np.float32)
    if a.shape != b.shape:
        return _invariant(name, f"{what}: shape {b.shape} != {a.shape}")
    bad = (a != b) if bitwise else ~(np.abs(a.astype(np.float64) - b) <= tol)
    if not bad.any():
        return None
    i, j = (int(v) for v in np.argwhere(bad)[0])
    t = int(rows[i])
    slot = int(np.asarray(inputs["token_adapter"])[t])
    method = "base" if slot < 0 else inputs["adapters"][slot]["method"]
    kind = "bitwise" if bitwise else "within bound"
    return _invariant(
        name, f"{what}: token {t} (slot {slot}, {method}) column {j}: {a[i, j]!r} vs "
              f"{b[i, j]!r} (expected equal {kind})",
        token=t, slot=slot, method=method, bitwise=bitwise)


def batch_invariance(run: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    out = run(inputs)
    full = np.asarray(out["y"])
    bitwise = bool(out.get("bitwise_batch_invariant", False))
    ntok = full.shape[0]
    tol = 2 * _bound(inputs)
    if ntok >= 2:
        rows = np.arange(0, ntok, 2)
        alone = run(_sub(inputs, rows))["y"]
        f = _compare("batch-invariance", "every other token dropped", inputs, full, alone,
                     rows, tol[rows], bitwise)
        if f:
            return f
        rows = np.arange(ntok)[::-1]
        rev = run(_sub(inputs, rows))["y"]
        return _compare("batch-invariance", "tokens reversed", inputs, full, rev, rows,
                        tol[rows], bitwise)
    return None


def zero_adapter(adapter: Mapping[str, Any], w0: np.ndarray) -> dict[str, Any]:
    """The zero initialisation of ``adapter`` (a no-op adapter of the same method and shapes)."""
    ad = dict(adapter)
    method = ad["method"]
    if method in ("lora", "dora"):
        ad["B"] = np.zeros_like(np.asarray(ad["B"]))
        if method == "dora":
            ad["magnitude"] = np.sqrt((np.asarray(w0, np.float64) ** 2).sum(axis=1)
                                      ).astype(np.float32)
    elif method == "vera":
        ad["lambda_b"] = np.zeros_like(np.asarray(ad["lambda_b"]))
    elif method in ("oft", "boft"):
        ad["Q"] = np.zeros_like(np.asarray(ad["Q"]))
        if method == "boft":
            ad["boft_s"] = np.ones_like(np.asarray(ad["boft_s"]))
    elif method == "ia3":
        ad["l"] = np.ones_like(np.asarray(ad["l"]))
    return ad


def zero_init_is_base(run: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    w0 = np.asarray(inputs["w0"])
    case = dict(inputs)
    case["adapters"] = [zero_adapter(a, w0) for a in inputs["adapters"]]
    if checks.validate(case) is not None:
        return None
    zero = run(case)["y"]
    base_case = dict(case)
    base_case["token_adapter"] = np.full_like(np.asarray(inputs["token_adapter"]), -1)
    base = run(base_case)["y"]
    tol = 2 * _bound(case)
    return _compare("zero-init-is-base", "zero-initialised adapters vs base layer", case,
                    np.asarray(zero), base, np.arange(len(zero)), tol, False)


def merged_equals_unmerged(run: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    ta = np.asarray(inputs["token_adapter"])
    used = sorted({int(s) for s in ta if s >= 0})
    if not used:
        return None
    out = np.asarray(run(inputs)["y"])
    bound = _bound(inputs)
    dtype = inputs["dtype"]
    u_s = checks.U_STORE[dtype]
    x_abs = np.abs(np.asarray(inputs["x"], np.float64))
    for s in used:
        slot = slots.to_slot(inputs["adapters"][s], inputs["w0"], inputs["b0"])
        w_m, b_m = slots.merged_weight(slot, inputs["w0"])
        rows = np.nonzero(ta == s)[0]
        case = {"dtype": dtype, "mode": inputs.get("mode", "decode"),
                "x": np.asarray(inputs["x"])[rows],
                "w0": checks.round_to(w_m, dtype), "b0": b_m.astype(np.float32),
                "token_adapter": np.full(len(rows), -1, np.int64),
                "adapters": [{"method": "identity"}]}
        if checks.validate(case) is not None:
            continue
        merged = run(case)["y"]
        tol = bound[rows] + _bound(case) + u_s * (x_abs[rows] @ np.abs(w_m).T)
        f = _compare("merged-equals-unmerged", f"slot {s} merged into W0", inputs, out,
                     merged, rows, tol, False)
        if f:
            return f
    return None


def cayley_orthogonal(run: Impl, inputs: Mapping[str, Any]) -> Optional[Failure]:
    k = np.asarray(inputs["w0"]).shape[1]
    for i, ad in enumerate(inputs["adapters"]):
        if ad["method"] not in ("oft", "boft") or ad.get("cayley", "exact") != "exact":
            continue
        t = slots.transform(slots.to_slot(ad, inputs["w0"], inputs["b0"]))
        err = float(np.max(np.abs(t.T @ t - np.eye(k))))
        if not err <= 1e-10 * k:
            return _invariant("cayley-orthogonal",
                              f"slot {i} ({ad['method']}): exact Cayley T has max|T^T T - I| = "
                              f"{err:.3g} > {1e-10 * k:.3g}", slot=i, method=ad["method"])
    return None


PROPERTIES: tuple[Property, ...] = (
    Property("batch-invariance", batch_invariance,
             "a token's row does not depend on its batch mates (bitwise if promised)"),
    Property("zero-init-is-base", zero_init_is_base,
             "zero-initialised adapters of every method reproduce the base layer"),
    Property("merged-equals-unmerged", merged_equals_unmerged,
             "the merged weight W' run as a base layer equals the adapter path"),
    Property("cayley-orthogonal", cayley_orthogonal,
             "exact Cayley rotations built by the slot conversion are orthogonal"),
)
