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
  BOFT are orthogonal in float64 up to what the solve can keep, ``max|TᵀT - I| <= (1 + e)^(2m)
  - 1`` with ``e = 1e-10·K·κ(I + Q)`` (:func:`cayley_tolerance`; does not run the
  implementation).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional

import numpy as np

from fuzzkit.failure import Failure
from fuzzkit.target import Property
from fuzzkit.oracles.close import smallest_normal
from fuzzkit.targets.scute import checks, reference, slots

Impl = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def _invariant(name: str, message: str, **details: Any) -> Failure:
    return Failure("invariant", f"scute {name}: {message}", f"invariant:scute:{name}", details)


def _bound(inputs: Mapping[str, Any]) -> np.ndarray:
    return checks.case_bound(inputs, reference.run(inputs)["y"])


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


def batch_invariance(run: Impl, inputs: Mapping[str, Any],
                     output: Optional[Mapping[str, Any]] = None) -> Optional[Failure]:
    """``output``: the implementation's run of ``inputs`` the runner has just judged (run here
    when not given)."""
    out = run(inputs) if output is None else output
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
            # a row norm past float32's range becomes inf: validate() then rejects the
            # zero-initialised case and the property does not apply (no warning needed)
            with np.errstate(over="ignore"):
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
    tol = 2 * _bound(case) + _zero_init_offset(case)
    return _compare("zero-init-is-base", "zero-initialised adapters vs base layer", case,
                    np.asarray(zero), base, np.arange(len(zero)), tol, False)


def _zero_init_offset(case: Mapping[str, Any]) -> np.ndarray:
    """How far the zero-initialised forward may legitimately be from the base layer: a DoRA
    magnitude "= the row norms of W0" is stored in float32, so ``g = fl(‖W0‖)/‖W0‖`` is 1 only
    up to that rounding (relative ``2^-24``, but a whole subnormal spacing for a row norm below
    float32's smallest normal) -- ``|x·W0ᵀ|·|g - 1|`` per element.  Every other zero
    initialisation is exact (``s = 1``, ``T = I``, no low-rank term)."""
    packed = slots.pack(case)
    x = np.abs(np.asarray(packed.x, np.float64))
    w0 = np.abs(np.asarray(packed.w0, np.float64))
    out = np.zeros((x.shape[0], w0.shape[0]))
    ta = np.asarray(packed.token_slot)
    for s in np.unique(ta[ta >= 0]):  # row-wise: one slot's tokens together
        rows = np.nonzero(ta == s)[0]
        out[rows] = ((np.abs(packed.t_diag[s]) * x[rows]) @ np.abs(packed.t_mat[s]) @ w0.T
                     ) * np.abs(np.asarray(packed.s[s]) - 1.0)
    return out


def merged_equals_unmerged(run: Impl, inputs: Mapping[str, Any],
                           output: Optional[Mapping[str, Any]] = None) -> Optional[Failure]:
    """``output`` as in :func:`batch_invariance`."""
    ta = np.asarray(inputs["token_adapter"])
    used = sorted({int(s) for s in ta if s >= 0})
    if not used:
        return None
    out = np.asarray((run(inputs) if output is None else output)["y"])
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
        # W' rounded to storage: relative u_s, and half a subnormal spacing per entry (η_s)
        eta_s = smallest_normal(dtype) * u_s
        tol = (bound[rows] + _bound(case) + u_s * (x_abs[rows] @ np.abs(w_m).T)
               + eta_s * x_abs[rows].sum(axis=1)[:, None])
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
        tol = cayley_tolerance(np.asarray(ad["Q"], np.float64), k)
        if not err <= tol:
            return _invariant("cayley-orthogonal",
                              f"slot {i} ({ad['method']}): exact Cayley T has max|T^T T - I| = "
                              f"{err:.3g} > {tol:.3g}", slot=i, method=ad["method"])
    return None


def cayley_tolerance(q: np.ndarray, k: int) -> float:
    """How far from orthogonal the float64 exact Cayley of ``q`` may come out.

    ``R = (I - Q)(I + Q)^-1`` is orthogonal in exact arithmetic; the solve that computes it has a
    normwise forward error ``e`` proportional to ``κ(I + Q) = sqrt(1 + ‖Q‖₂²)`` (``I + Q`` is
    normal with singular values ``sqrt(1 + λ²)``, ``±iλ`` the eigenvalues of Q): ``e = 1e-10·K·κ``
    (the constant this property always used, for κ about 1).  Then ``‖R̂ᵀR̂ - I‖ <= 2e + e²``, and
    a BOFT product of ``m`` such factors ``(1 + e)^(2m) - 1``.  For the moderate Q of trained
    adapters that is ``2m·1e-10·K``; once ``e`` reaches 1 (a legal Q of norm 1e10 and more) the
    float64 solve keeps no digit of R and the property has nothing to check (infinity)."""
    blocks = q.reshape(-1, q.shape[-2], q.shape[-1])
    norm = max((float(np.linalg.norm(b, 2)) for b in blocks), default=0.0)
    factors = q.shape[0] if q.ndim == 4 else 1
    e = 1e-10 * k * float(np.hypot(1.0, norm))
    if e >= 1.0:  # the solve keeps no digit of R: there is nothing to check
        return math.inf
    return float(np.expm1(2 * factors * np.log1p(e)))


PROPERTIES: tuple[Property, ...] = (
    Property("batch-invariance", batch_invariance,
             "a token's row does not depend on its batch mates (bitwise if promised)",
             uses_output=True),
    Property("zero-init-is-base", zero_init_is_base,
             "zero-initialised adapters of every method reproduce the base layer"),
    Property("merged-equals-unmerged", merged_equals_unmerged,
             "the merged weight W' run as a base layer equals the adapter path",
             uses_output=True),
    Property("cayley-orthogonal", cayley_orthogonal,
             "exact Cayley rotations built by the slot conversion are orthogonal"),
)
