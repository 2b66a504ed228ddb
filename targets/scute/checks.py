"""Input validation, the oracle and slot localization for ``scute``.

Oracle: every token's output against the float64 native-form reference (:mod:`.reference`),
elementwise within a forward-error bound derived from the arithmetic the slot form performs
(Higham ch. 3), in float64 from the slot parameters:

``|ŷ - y| <= (γ_n(u_acc) + c·u_s)·M + u_s·|y| + floor``,  ``n = 2K + R + 8``, ``u_acc = 2^-24``

* ``M = |x||T||W0|ᵀ|s| + |b| + ((|x||A|ᵀ)|m|)|B|ᵀ|o|`` (slot -1: ``|x||W0|ᵀ + |b0|``), the
  absolute-value version of the slot form, so the bound holds whatever cancels;
* ``γ_n``: float32 accumulation of x·T (K terms) and of the base GEMM (K), of the shrink (K,
  overlapping) and expand (R), plus the float32 roundings of s, b, m, o and of the few products
  and sums of the epilogue (the +8);
* ``c·u_s``: the storage-dtype roundings that multiply M: T (a float64 rotation) stored in the
  storage dtype, and x·T rounded to the storage dtype before the base GEMM -- c = 2 for OFT/BOFT
  (block / dense T), 1 for a diagonal T (IA3 ff: x ⊙ l rounded, l representable), 0 for T = I and
  base-only tokens.  x, W0, A, B and IA3's ff scale are exactly representable (validated), so
  they add nothing;
* ``u_s·|y|``: the output rounded to the storage dtype;
* ``floor``: underflow, carried through what multiplies it (:func:`underflow_floor`: half the
  subnormal spacing per rounding in float32 and float16, including the float32 roundings of s,
  b, m, o; for bfloat16 the smallest normal per value read or stored -- the Triton interpreter
  mis-converts bf16 subnormals, :func:`storage_eta`).

The bound holds for cases inside the contract's range (:mod:`.ranges`, checked by
:func:`validate`): every intermediate below half its format's largest value (3e4 for float16).

``u_s`` is 2^-24 (float32), 2^-11 (float16), 2^-7 (bfloat16: the Triton interpreter truncates
f32->bf16 instead of rounding, a full ulp).  The comparison goes through
:func:`fuzzkit.oracles.close.close` with this bound as its magnitude.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Mapping, Optional

import numpy as np

from fuzzkit.failure import Failure
from fuzzkit.oracles.close import close, gamma, smallest_normal
from fuzzkit.targets.scute import memo, ranges, reference, slots

DTYPES = ("float32", "float16", "bfloat16")
U_ACC = 2.0 ** -24
U_STORE = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -7}
SIGNATURE = "mismatch:y:close"
#: Largest |value| allowed anywhere in a float16 case's magnitudes (fp16 max is 65504); every
#: dtype's limits are in :mod:`.ranges`.
FP16_LIMIT = ranges.LIMIT_STORE["float16"]


def _representable(a: np.ndarray, dtype: str) -> bool:
    with np.errstate(over="ignore", invalid="ignore"):  # a value beyond float32 is not
        a = np.asarray(a, np.float32)
    if dtype == "float32":
        return True
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return bool(np.array_equal(a.astype(np.float16).astype(np.float32), a))
    return bool(np.all((a.view(np.uint32) & np.uint32(0xFFFF)) == 0))


def round_to(a: Any, dtype: str) -> np.ndarray:
    """Round float values to ``dtype`` (nearest even; bf16 on the float32 bits), as float32
    (values beyond the format become ±inf, which ``validate`` rejects)."""
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.asarray(a, np.float32)
        if dtype == "float16":
            return a.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        bits = a.view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32)
    return a.copy()


def _check_adapter(i: int, ad: Mapping[str, Any], k: int, nout: int, dtype: str) -> Optional[str]:
    if not isinstance(ad, Mapping) or "method" not in ad:
        return f"adapter {i} must be a dict with a 'method'"
    method = ad["method"]
    if method not in reference.METHODS:
        return f"adapter {i}: method must be one of {reference.METHODS}, got {method!r}"
    where = f"adapter {i} ({method})"

    def arr(name: str, shape: Optional[tuple] = None, store: bool = False) -> Any:
        if name not in ad:
            return f"{where} needs {name!r}"
        a = np.asarray(ad[name])
        if a.dtype.kind not in "fiu":
            return f"{where}: {name} must be numeric"
        if shape is not None and a.shape != shape:
            return f"{where}: {name} must have shape {shape}, got {a.shape}"
        if not np.all(np.isfinite(a)):
            return f"{where}: {name} must be finite"
        if store and not _representable(a, dtype):
            return f"{where}: {name} values must be exactly representable in {dtype}"
        return None

    if method == "identity":
        return None
    if method in ("lora", "dora"):
        a = np.asarray(ad.get("A", np.zeros((0, 0))))
        if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] != k:
            return f"{where}: A must have shape (r >= 1, {k}), got {a.shape}"
        r = a.shape[0]
        for name, shape in (("A", (r, k)), ("B", (nout, r))):
            err = arr(name, shape, store=True)
            if err:
                return err
        if not np.isfinite(float(ad.get("alpha", np.nan))):
            return f"{where}: alpha must be a finite number"
        if method == "dora":
            err = arr("magnitude", (nout,))
            if err:
                return err
        return None
    if method == "vera":
        a = np.asarray(ad.get("A_shared", np.zeros((0, 0))))
        b = np.asarray(ad.get("B_shared", np.zeros((0, 0))))
        if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < k:
            return f"{where}: A_shared must have shape (r >= 1, Kmax >= {k}), got {a.shape}"
        r = a.shape[0]
        if b.ndim != 2 or b.shape[0] < nout or b.shape[1] != r:
            return f"{where}: B_shared must have shape (Nmax >= {nout}, {r}), got {b.shape}"
        for name, shape, store in (("A_shared", None, True), ("B_shared", None, True),
                                   ("lambda_d", (r,), False), ("lambda_b", (nout,), False)):
            err = arr(name, shape, store)
            if err:
                return err
        return None
    if method in ("oft", "boft"):
        bs = ad.get("block_size")
        if not isinstance(bs, (int, np.integer)) or bs < 1 or k % int(bs):
            return f"{where}: block_size must be a positive divisor of K={k}, got {bs!r}"
        bs = int(bs)
        if ad.get("cayley", "exact") not in ("exact", "neumann"):
            return f"{where}: cayley must be 'exact' or 'neumann'"
        terms = ad.get("neumann_terms", 5)
        if not isinstance(terms, (int, np.integer)) or terms < 1:
            return f"{where}: neumann_terms must be an integer >= 1"
        q = np.asarray(ad.get("Q", np.zeros(0)))
        if method == "oft":
            shape: tuple = (k // bs, bs, bs)
        else:
            mf = q.shape[0] if q.ndim == 4 else 0
            if mf < 1:
                return f"{where}: Q must have shape (factors, {k // bs}, {bs}, {bs})"
            shape = (mf, k // bs, bs, bs)
            if mf > 1 and (bs % 2 or (k // bs) % 2 or k % (bs * 2 ** (mf - 1))):
                return (f"{where}: {mf} butterfly factors need an even block size, an even "
                        f"block count and K divisible by block_size * 2^(factors-1)")
            err = arr("boft_s", (nout,))
            if err:
                return err
        err = arr("Q", shape)
        if err:
            return err
        if not np.array_equal(q, -np.swapaxes(q, -1, -2)):
            return f"{where}: Q must be skew-symmetric (Q == -Q^T)"
        return None
    if method == "ia3":
        placement = ad.get("placement")
        if placement not in ("kv", "ff"):
            return f"{where}: placement must be 'kv' or 'ff', got {placement!r}"
        return arr("l", (nout,) if placement == "kv" else (k,), store=placement == "ff")
    return None


def validate(inputs: Mapping[str, Any], conversion: Any = None) -> Optional[str]:
    """One line saying what is wrong with a case's inputs, or None.  ``conversion``: the slot
    conversion module to judge the slot parameters with (default :mod:`.slots`; the strategy
    passes the unpatched copy, :func:`fuzzkit.targets.scute.pristine.slots`)."""
    conversion = slots if conversion is None else conversion
    for key in ("dtype", "x", "w0", "b0", "token_adapter", "adapters"):
        if key not in inputs:
            return f"scute inputs need key {key!r}"
    dtype = inputs["dtype"]
    if dtype not in DTYPES:
        return f"dtype must be one of {DTYPES}, got {dtype!r}"
    if inputs.get("mode", "decode") not in ("decode", "prefill"):
        return f"mode must be 'decode' or 'prefill', got {inputs.get('mode')!r}"
    x, w0, b0 = (np.asarray(inputs[k]) for k in ("x", "w0", "b0"))
    ta = np.asarray(inputs["token_adapter"])
    if x.ndim != 2 or w0.ndim != 2 or x.shape[1] != w0.shape[1] or b0.shape != (w0.shape[0],):
        return f"shapes must be x (Ntok,K), w0 (Nout,K), b0 (Nout,); got {x.shape}, {w0.shape}, " \
               f"{b0.shape}"
    if x.shape[0] < 1 or x.shape[1] < 1 or w0.shape[0] < 1:
        return "Ntok, K and Nout must be >= 1"
    for arr, name in ((x, "x"), (w0, "w0"), (b0, "b0")):
        if arr.dtype.kind not in "fiu" or not np.all(np.isfinite(arr)):
            return f"{name} must be finite numbers"
    for arr, name in ((x, "x"), (w0, "w0")):
        if not _representable(arr, dtype):
            return f"{name} values must be exactly representable in {dtype}"
    adapters = inputs["adapters"]
    if not isinstance(adapters, (list, tuple)):
        return "adapters must be a list"
    if ta.shape != (x.shape[0],) or ta.dtype.kind not in "iu":
        return f"token_adapter must be ({x.shape[0]},) integers, got {ta.shape} {ta.dtype}"
    if ta.size and (ta.min() < -1 or ta.max() >= len(adapters)):
        return f"token_adapter values must lie in [-1, {len(adapters)})"
    nout, k = w0.shape
    for i, ad in enumerate(adapters):
        err = _check_adapter(i, ad, k, nout, dtype)
        if err:
            return err
    try:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # judged below
            packed = conversion.pack(inputs)
    except (FloatingPointError, np.linalg.LinAlgError, ValueError) as exc:
        return f"slot conversion failed: {exc}"
    for name in ("t_mat", "s", "b", "m", "o"):
        if not np.all(np.isfinite(getattr(packed, name))):
            return f"slot parameter {name} is not finite (e.g. a zero DoRA weight norm)"
    # every intermediate fits its format (float16: 3e4 as always; others: half the largest)
    return ranges.violation(packed)


def _slot_rows(token_slot: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``(slot, token indices)`` of every slot that has tokens, base-only (-1) included: the
    per-token formulas below are row-wise, so one slot's tokens go through them together."""
    ta = np.asarray(token_slot)
    return [(int(s), np.nonzero(ta == s)[0]) for s in np.unique(ta)]


def magnitude(packed: slots.Packed) -> np.ndarray:
    """``M`` (Ntok, Nout): the absolute-value slot form per token (see the module docstring)."""
    x = np.abs(np.asarray(packed.x, np.float64))
    w0 = np.abs(np.asarray(packed.w0, np.float64))
    b0 = np.abs(np.asarray(packed.b0, np.float64))
    out = x @ w0.T + b0
    for s, rows in _slot_rows(packed.token_slot):
        if s < 0:
            continue
        xs = x[rows]
        xt = (xs * np.abs(packed.t_diag[s])) @ np.abs(packed.t_mat[s])
        lo = ((xs @ np.abs(packed.A[s]).T) * np.abs(packed.m[s])) @ np.abs(packed.B[s]).T
        out[rows] = (xt @ w0.T) * np.abs(packed.s[s]) + np.abs(packed.b[s]) \
            + lo * np.abs(packed.o[s])
    return out


#: Bounds of cases seen before, by content (:mod:`.memo`): the oracle and two properties bound
#: the same case against the same reference.
_BOUNDS = memo.Cache(64)
#: What a bound calls (a mutant patches the slot conversion: another key).
_BOUND_FUNCTIONS = memo.Functions(globals(), vars(slots), vars(reference))


def case_bound(inputs: Mapping[str, Any], ref_y: Any) -> np.ndarray:
    """``error_bound(slots.pack(inputs), ref_y)``, computed once per content (read-only)."""
    ref_y = np.asarray(ref_y, np.float64)
    return _BOUNDS.get(
        lambda: (memo.key([inputs.get("dtype", "float32")] + [
            inputs[name] for name in ("x", "w0", "b0", "token_adapter", "adapters")]),
                 memo.key(ref_y), _BOUND_FUNCTIONS()),
        lambda: memo.frozen(error_bound(slots.pack(inputs), ref_y)))


def error_bound(packed: slots.Packed, ref_y: np.ndarray) -> np.ndarray:
    """The per-element bound (Ntok, Nout) of the module docstring."""
    k = packed.w0.shape[1]
    r = packed.A.shape[1] if packed.A.ndim == 3 else 1
    u_s = U_STORE[packed.dtype]
    mag = magnitude(packed)
    ta = np.asarray(packed.token_slot)
    kinds = np.asarray(packed.t_kind)
    # storage roundings that multiply M, per token: none for T = I (x is representable), one for
    # a diagonal T (x ⊙ l rounded; l is representable), two for block/dense T (T and x·T).
    c = np.zeros(len(ta))
    if kinds.size:
        c = np.where(ta < 0, 0, np.minimum(kinds[np.maximum(ta, 0)], 2)).astype(np.float64)
    c = c[:, None]
    return ((gamma(2 * k + r + 8, U_ACC) + c * u_s) * mag + u_s * np.abs(ref_y)
            + underflow_floor(packed, c))


#: Absolute error of one value held in (stored to or read from) the storage dtype when it is
#: below the smallest normal: half the subnormal spacing for float32 / float16 (exact IEEE
#: conversions); for bfloat16 the whole smallest normal -- the Triton interpreter's bf16 <->
#: float32 conversion mis-converts subnormals (Triton 3.x ``_convert_float``: 1.10e-38 reads as
#: 1.03e-38, 1.0e-39 as 4.4e-39), as flush-to-zero hardware would, and a GPU kernel is free to
#: flush them, so a bf16 subnormal is only known to lie in the subnormal range.
def storage_eta(dtype: str) -> float:
    if dtype == "bfloat16":
        return smallest_normal("bfloat16")
    return smallest_normal(dtype) * U_STORE[dtype]


def underflow_floor(packed: slots.Packed, c: np.ndarray) -> np.ndarray:
    """The absolute part of the bound (Ntok, Nout): underflow, which no relative term covers.

    Every rounding ``fl(v) = v(1 + δ) + η`` has an absolute part ``|η|`` that matters only below
    the smallest normal: ``η = 2^-150`` in float32 (half the subnormal spacing) and
    :func:`storage_eta` in the storage dtype; an ``η`` is carried through everything that
    multiplies it afterwards (Higham §2.1).  Per token and output column ``j``:

    * storage roundings: the output (``η_s``); ``x·T`` rounded (``η_s·Σ|W0_j|·|s_j|`` when T is
      not the identity); T itself (block/dense: each entry, ``η_s·‖x‖₁·Σ|W0_j|·|s_j|``);
    * bfloat16 reads (``η_s`` per operand read, see :func:`storage_eta`): every x, W0, A and B
      entry, carried through the rest of its path -- the absolute-value slot form with that one
      factor replaced by ``η_s``;
    * float32: ``K`` products per element of ``x·T`` carried through ``W0`` and ``s``, ``K``
      products of the base GEMM times ``s``, the ``·s`` itself; ``K`` products per shrink element
      through ``m``, the ``⊙ m``, ``R`` expand products, all through ``o``, and the ``⊙ o``;
    * the slot parameters ``s``, ``b``, ``m``, ``o`` rounded to float32 (a DoRA ``g`` of 1e-57
      is 0 there, an ``o`` of 1e-40 a subnormal): ``η`` times what each multiplies.

    Without it a legal case with tiny values (a DoRA ``g`` of 1e30 over a W0 row of 1e-30, a
    VeRA ``λ_b`` near the float32 limit over a shrink that underflows) would cry wolf.
    """
    k = packed.w0.shape[1]
    r = packed.A.shape[1] if packed.A.ndim == 3 else 1
    eta_s = storage_eta(packed.dtype)
    eta_read = eta_s if packed.dtype == "bfloat16" else 0.0
    eta = smallest_normal("float32") * U_ACC
    x_abs = np.abs(np.asarray(packed.x, np.float64))
    w0_abs = np.abs(np.asarray(packed.w0, np.float64))
    w_abs = w0_abs.sum(axis=1)
    x1 = x_abs.sum(axis=1)
    ta = np.asarray(packed.token_slot)
    ntok, nout = len(ta), w_abs.shape[0]
    s_abs = np.ones((ntok, nout))
    low = np.zeros((ntok, nout))
    read = np.zeros((ntok, nout))
    params = np.zeros((ntok, nout))
    for s, rows in _slot_rows(ta):
        if s < 0:
            read[rows] = w_abs + x1[rows, None]  # x and W0 entries read
            continue
        xs = x_abs[rows]
        s_abs[rows] = np.abs(packed.s[s])
        m_abs = np.abs(packed.m[s])
        b_abs = np.abs(packed.B[s])
        a_abs = np.abs(packed.A[s])
        o_abs = np.abs(packed.o[s])
        m_max = float(np.max(m_abs, initial=0.0))
        low[rows] = o_abs * ((k * m_max + 1.0) * b_abs.sum(axis=1) + r) + 1.0
        shrink = xs @ a_abs.T
        xt = (xs * np.abs(packed.t_diag[s])) @ np.abs(packed.t_mat[s])
        # rounding s, b, m, o to float32: η times |x·T·W0ᵀ|, 1, |B|(|x·Aᵀ|)·|o|, |B|(|x·Aᵀ||m|)
        params[rows] = xt @ w0_abs.T + 1.0 + o_abs * (shrink @ b_abs.T) \
            + (shrink * m_abs) @ b_abs.T
        if eta_read:
            t_abs = np.abs(packed.t_diag[s])[:, None] * np.abs(packed.t_mat[s])
            base = w0_abs @ t_abs.sum(axis=0) + (xs @ t_abs).sum(axis=1)[:, None]
            lowr = b_abs @ (m_abs * a_abs.sum(axis=1)) + x1[rows, None] * (b_abs @ m_abs) \
                + (shrink * m_abs).sum(axis=1)[:, None]
            read[rows] = s_abs[rows] * base + o_abs * lowr
    transformed = np.minimum(c, 1.0) * w_abs[None, :]
    storage = eta_s * (1.0 + (np.minimum(c, 1.0) + (c >= 2) * x1[:, None]) * w_abs[None, :]
                       * s_abs)
    accumulate = eta * (s_abs * (k * (1.0 + transformed) + 1.0) + 2.0 + low + params)
    return storage + eta_read * read + accumulate


def _method(inputs: Mapping[str, Any], slot: int) -> str:
    if slot < 0:
        return "base"
    ad = inputs["adapters"][slot]
    return ad["method"] + (f"-{ad['placement']}" if ad["method"] == "ia3" else "")


def oracle(inputs: Mapping[str, Any], ref: Mapping[str, Any], out: Mapping[str, Any]
           ) -> Optional[Failure]:
    """None when every token's output is within the bound of the float64 reference."""
    ref_y = np.asarray(ref["y"], np.float64)
    bound = case_bound(inputs, ref_y)
    scaled = bound / gamma(3, U_ACC)  # close() bounds by gamma_3(u32) * magnitude (+ ~1e-37)
    failure = close(ref_y, np.asarray(out["y"]), dtype="float32", reduction_length=0,
                    magnitude=scaled, name="y")
    if failure is None:
        return None
    details = dict(failure.details)
    signature = SIGNATURE if failure.signature == "mismatch:close:y" else \
        failure.signature.replace("mismatch:close:y", "mismatch:y")
    message = failure.message
    worst = details.get("worst")
    index = (worst or {}).get("index") or details.get("index")
    if worst is not None:
        details["dtype"] = inputs["dtype"]
        details.pop("reduction_length", None)
        details.pop("factor", None)
        details.pop("max_ulps", None)
        worst.pop("ulps", None)
        message = (f"y: {details['count']} of {details['size']} elements exceed the "
                   f"{inputs['dtype']} slot-form error bound; worst y{list(index)}: expected "
                   f"{worst['expected']:.17g}, got {worst['actual']:.9g}, error "
                   f"{worst['error']:.3g} = {worst['ratio']:.3g} x bound {worst['bound']:.3g}")
    if index is not None and len(index) == 2:
        t = int(index[0])
        slot = int(np.asarray(inputs["token_adapter"])[t])
        details.update(token=t, slot=slot, method=_method(inputs, slot))
        message = (f"scute: token {t} (slot {slot}, {_method(inputs, slot)}) "
                   f"[{inputs['dtype']}] -- {message}")
    mism = mismatching_slots(inputs, ref_y, out, bound)
    if mism is not None:
        details["mismatching_slots"] = mism
    return Failure("mismatch", message, signature, details)


def mismatching_slots(inputs: Mapping[str, Any], ref_y: np.ndarray, out: Mapping[str, Any],
                      bound: np.ndarray) -> Optional[list[int]]:
    y = np.asarray(out["y"], np.float64)
    if y.shape != ref_y.shape:
        return None
    bad = ~(np.abs(y - ref_y) <= bound)
    rows = np.nonzero(bad.any(axis=1))[0]
    ta = np.asarray(inputs["token_adapter"])
    return sorted({int(ta[t]) for t in rows})


def _with_identity(inputs: Mapping[str, Any], slot: int) -> dict[str, Any]:
    case = dict(inputs)
    adapters = [dict(a) for a in inputs["adapters"]]
    adapters[slot] = {"method": "identity"}
    case["adapters"] = adapters
    return case


def localize(run: Callable[[Mapping[str, Any]], Any], inputs: Mapping[str, Any],
             failure: Failure) -> Failure:
    """Re-run with one slot at a time replaced by identity; name the slots whose removal clears
    the failure (``details["guilty"]``) and the slots whose tokens mismatch."""
    ref_y = np.asarray(reference.run(inputs)["y"], np.float64)
    details = dict(failure.details)
    if "mismatching_slots" not in details:
        try:
            out = run(copy.deepcopy(dict(inputs)))
            details["mismatching_slots"] = mismatching_slots(
                inputs, ref_y, out, case_bound(inputs, ref_y))
        except Exception:  # noqa: BLE001 - a crash is reported by the runner itself
            pass
    candidates = [i for i, a in enumerate(inputs["adapters"]) if a["method"] != "identity"]

    def fails(case: Mapping[str, Any]) -> bool:
        try:
            return oracle(case, reference.run(case), run(copy.deepcopy(case))) is not None
        except Exception:  # noqa: BLE001 - still failing, differently
            return True

    # Phase 0: every slot identity and it still fails -> the base path / batching is wrong.
    bare = dict(inputs)
    bare["adapters"] = [{"method": "identity"} for _ in inputs["adapters"]]
    if candidates and fails(bare):
        guilty = [{"slot": -1, "method": "base"}]
        how = "fails with every slot set to identity"
        candidates = []
    else:
        # Phase 1: the slots whose removal (-> identity) clears the failure.
        guilty = [{"slot": i, "method": _method(inputs, i)} for i in candidates
                  if not fails(_with_identity(inputs, i))]
        how = "removing it clears the failure"
    if not guilty and len(candidates) > 1:
        # Phase 2 (several slots are wrong): the slots that still fail when kept alone.
        guilty = []
        for i in candidates:
            case = dict(inputs)
            case["adapters"] = [a if j == i else {"method": "identity"}
                                for j, a in enumerate(inputs["adapters"])]
            if fails(case):
                guilty.append({"slot": i, "method": _method(inputs, i)})
        how = "fails kept alone"
    mism = details.get("mismatching_slots")
    leaked = [g for g in guilty if g["slot"] >= 0]
    if mism == [-1] and leaked:
        # only base-only tokens are wrong, and neutralising an adapter fixes them: the -1 path
        # picks up that adapter (an index -1 that wrapped or was clamped instead of skipped)
        guilty = [{"slot": -1, "method": "base", "leaks": leaked}]
        how = "base-only tokens pick up " + ", ".join(
            f"slot {g['slot']} ({g['method']})" for g in leaked)
    details["guilty"] = guilty
    if guilty:
        names = ", ".join(f"slot {g['slot']} ({g['method']})" for g in guilty)
        note = f"guilty {names} ({how})"
    else:
        note = "no single slot explains the failure (base-only path or batch structure?)"
    if mism is not None:
        note += "; mismatching slots " + ", ".join(
            f"{s} ({_method(inputs, s)})" for s in mism)
    return Failure(failure.kind, f"{failure.message} [{note}]", failure.signature, details)
