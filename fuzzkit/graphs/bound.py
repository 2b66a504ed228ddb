r"""Forward-error bounds for compiler graphs (absolute, elementwise, per node).

Model.  Let ``y`` be a node's float64 reference value, ``x`` its inputs' reference values and
``e_x`` their error bounds (graph inputs are exact in the dtype: ``e = 0``).  Let ``u`` be the
unit roundoff of the graph dtype (float32 ``2^-24``, float16 ``2^-11``, bfloat16 ``2^-8``),
``u32 = 2^-24`` (every op is computed in float32, reductions and matmul accumulate in float32) and
``gamma_n = n u32 / (1 - n u32)``.  The bound of a node is

    e_y = prop + comp + round

* ``prop`` — propagation of the input errors, as the sup of ``|f(x + d) - f(x)|`` over
  ``|d| <= e_x`` (mean-value form, so it also covers the non-first-order part): exact for monotone
  unaries (``exp(x)(e^{e}-1)``, ``log(x) - log(x-e)``, ...), ``|a| e_b + |b| e_a + e_a e_b`` for
  mul, ``(e_a|b| + |a| e_b) / (|b| (|b|-e_b))`` for div, ``|A| e_B + e_A |B| + e_A e_B`` for matmul,
  sums of errors for sum/mean/cumsum, max of errors for amax/amin, Lipschitz constants for
  tanh/sigmoid/gelu/sin/cos/relu/abs/clamp/maximum/minimum, ``y (e^{2E}-1)`` for softmax and
  ``e_i + E`` for log_softmax (``E`` = max error along the dim), ``(e_i + E + |y_i| E)/(sigma-E)``
  for layer_norm (``sigma = sqrt(var + eps)``), and for ``where(a > b, c, d)``: the selected branch's
  error, or ``|c - d| + max(e_c, e_d)`` where the comparison is uncertain (``|a-b| <= e_a+e_b``).
  An infinite bound means "no guarantee" (e.g. a denominator whose range reaches 0).
* ``comp`` — the op's own computation error (float32, except that softmax / log_softmax /
  layer_norm may round their internal steps — max, exp, lse, mean, rsqrt — to the dtype, as
  eager CPU float16 kernels do, so those terms use ``u``), evaluated on the perturbed magnitudes
  ``|y| + prop``: 1 ulp for add/sub/mul, 2 for div/reciprocal/sqrt, a few ulp plus argument
  conditioning for transcendentals (``exp``: ``(4 + 2|x|) u32``, also covering ``exp2``-based
  approximations), ``gamma_n (|x| + e)`` summed for reductions, scans and matmul (``n`` = length),
  and formula-based terms for softmax / log_softmax / layer_norm (including the cancellation of a
  one-pass variance).
* ``round`` — the final rounding to the dtype, ``u (|y| + prop + comp) + eta`` (``eta`` = half the
  smallest subnormal), for every op except pure layout ops (reshape, permute, transpose, expand,
  unsqueeze, squeeze, cat, index_select), whose values are bit copies of their inputs.

Overflow.  Where a finite ``|y| + e_y`` -- or a partial result on the way, such as the running
sum of a mean -- exceeds half the dtype's largest value, an evaluation may overflow to inf (and
to NaN after it, e.g. ``inf - inf``, even where the reference is a clean ``-inf``).  Such a node
and every node downstream of it get a NaN bound: "nothing can be said here", not even the
NaN/Inf pattern.  (An infinite bound, by contrast, leaves the value free but the reference's
NaN/Inf pattern still binding.)  Only cases that ask for special values (huge inputs,
Inf, NaN) reach this.

Soundness for both execution models: eager (rounds after every op) and Inductor / fusing compilers
(fp32 intermediates inside a kernel, rounding only where a buffer is stored): skipping a rounding
only removes a term, and a rounding moved to a later op is covered because the later op's bound
contains the earlier ``u |x|`` term propagated through a Lipschitz-1 (or exactly modelled) map.
Any summation order is covered by ``gamma_n``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .ops import LAYER_NORM_EPS, OPS

__all__ = ["UNIT_ROUNDOFF", "LARGEST_FINITE", "U32", "error_bounds", "node_bound", "LAYOUT_OPS"]

U32 = 2.0**-24
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
# absolute underflow allowance per op: a few half-subnormal spacings of the dtype and of float32
_ETA = {k: 4 * v + 4 * 2.0**-150 for k, v in
        {"float32": 2.0**-150, "float16": 2.0**-25, "bfloat16": 2.0**-134}.items()}
#: The largest finite value of each dtype.
LARGEST_FINITE = {"float32": 3.4028234663852886e38, "float16": 65504.0,
                  "bfloat16": 3.3895313892515355e38}
#: Half the largest finite value of the dtype (float32 for the compute): beyond it a result may
#: overflow in some evaluation order.
_OVERFLOW = {k: 0.5 * v for k, v in LARGEST_FINITE.items()}
LAYOUT_OPS = frozenset(
    {"reshape", "permute", "transpose", "expand", "unsqueeze", "squeeze", "cat", "index_select"}
)
_INF = np.inf


def _gamma(n: float) -> float:
    t = n * U32
    return t / (1.0 - t) if t < 1 else math.inf


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, torch.dtype):
        return str(dtype).replace("torch.", "")
    return str(dtype)


def _red(fn, a: np.ndarray, dim: int) -> np.ndarray:
    return fn(a, axis=dim, keepdims=True)


def _unkeep(a: np.ndarray, dim: int, keepdim: bool) -> np.ndarray:
    return a if keepdim else np.squeeze(a, axis=dim)


def node_bound(op: str, attrs: dict, xs: list[np.ndarray], es: list[np.ndarray], y: np.ndarray,
               dtype: str) -> np.ndarray:
    """Error bound of one node's output (see the module docstring)."""
    u = UNIT_ROUNDOFF[dtype]
    eta = _ETA[dtype]
    ay = np.abs(y)
    with np.errstate(all="ignore"):
        if op in LAYOUT_OPS:
            t = [torch.from_numpy(np.ascontiguousarray(e)) for e in es]
            return OPS[op].torch_fn(*t, **attrs).contiguous().numpy().copy()
        prop, comp = _prop_comp(op, attrs, xs, es, y, ay, u)
        prop = np.where(np.isnan(prop), _INF, prop)
        comp = np.where(np.isnan(comp), _INF, comp)
        tot = prop + comp
        return tot + u * (ay + tot) + eta


def _prop_comp(op, attrs, xs, es, y, ay, u):
    x = xs[0]
    e = es[0]
    ax = np.abs(x)
    if op in ("abs", "neg", "relu", "clamp"):
        return e, np.zeros_like(ay)
    if op == "add_scalar":
        return e, U32 * ay
    if op == "exp":
        prop = np.exp(x) * np.expm1(e)
        return prop, (4 + 2 * ax) * U32 * (ay + prop)
    if op == "log":
        prop = np.where(x - e > 0, -np.log1p(-e / x), _INF)
        return prop, 4 * U32 * (ay + prop) + 4 * U32
    if op == "sqrt":
        prop = np.sqrt(x) - np.sqrt(np.maximum(x - e, 0.0))
        return prop, 2 * U32 * (ay + prop)
    if op == "rsqrt":
        prop = np.where(x - e > 0, 1 / np.sqrt(np.maximum(x - e, 1e-300)) - 1 / np.sqrt(x), _INF)
        return prop, (4 * U32 + u) * (ay + prop)  # 1/sqrt(x) with a dtype rounding of sqrt
    if op == "tanh":
        prop = np.minimum(e, 2.0)
        return prop, 4 * U32 * (ay + prop + 1)
    if op == "sigmoid":
        prop = np.minimum(e / 4, 1.0)
        return prop, ((4 + ax) * U32 + u) * (ay + prop) + 2 * U32
    if op == "gelu":
        prop = 1.13 * e
        return prop, 8 * U32 * (ay + prop + ax + e + 1)
    if op in ("sin", "cos"):
        prop = np.minimum(e, 2.0)
        return prop, 8 * U32 * (ay + prop + 1)
    if op == "reciprocal":
        prop = np.where(ax > e, e / (ax * (ax - e)), _INF)
        return prop, 2 * U32 * (ay + prop)
    if op == "pow":
        p = float(attrs["exponent"])
        if p == math.floor(p):
            prop = np.abs((ax + e) ** p - ax**p)
            base = ax
        else:
            lo = x - e
            up = np.abs((x + e) ** p - x**p)
            down = np.where(lo >= 0, np.abs(x**p - np.maximum(lo, 0.0) ** p), _INF)
            prop = np.maximum(up, down)
            base = x
        c = 4 + 2 * np.abs(p * np.log(np.maximum(base, 1e-300)))
        c = np.where(base > 0, c, 4.0)
        # eager low-precision kernels may evaluate x**3 as (x*x)*x with a dtype rounding in between
        return prop, (c * U32 + 2 * u) * (ay + prop)
    if op in ("add", "sub", "mul", "div", "maximum", "minimum"):
        b, eb = xs[1], es[1]
        ab = np.abs(b)
        if op in ("add", "sub"):
            prop = e + eb
            return prop, U32 * (ay + prop)
        if op == "mul":
            prop = ax * eb + ab * e + e * eb
            return prop, U32 * (ay + prop)
        if op == "div":
            prop = np.where(ab > eb, (e * ab + ax * eb) / (ab * (ab - eb)), _INF)
            return prop, 2 * U32 * (ay + prop)
        prop = np.maximum(e, eb)
        return np.broadcast_to(prop, y.shape), np.zeros_like(ay)
    if op == "where_gt":
        a, b, c, d = xs
        ea, eb, ec, ed = es
        uncertain = np.abs(a - b) <= ea + eb
        prop = np.where(uncertain, np.abs(c - d) + np.maximum(ec, ed), np.where(a > b, ec, ed))
        return np.broadcast_to(prop, y.shape), np.zeros_like(ay)
    if op in ("matmul", "bmm"):
        b, eb = xs[1], es[1]
        ab = np.abs(b)
        prop = ax @ eb + e @ ab + e @ eb
        k = x.shape[-1]
        return prop, _gamma(k) * ((ax + e) @ (ab + eb))
    if op in ("sum", "mean", "amax", "amin"):
        dim, keep = attrs["dim"], attrs["keepdim"]
        n = x.shape[dim]
        if op in ("amax", "amin"):
            return _unkeep(_red(np.max, e, dim), dim, keep), np.zeros_like(ay)
        prop = _red(np.sum, e, dim)
        comp = _gamma(n) * _red(np.sum, ax + e, dim)
        if op == "mean":
            prop = prop / n
            comp = comp / n
            comp = comp + 2 * U32 * (np.abs(_red(np.mean, x, dim)) + prop)
        return _unkeep(prop, dim, keep), _unkeep(comp, dim, keep)
    if op == "cumsum":
        dim = attrs["dim"]
        n = x.shape[dim]
        prop = np.cumsum(e, axis=dim)
        return prop, _gamma(n) * np.cumsum(ax + e, axis=dim)
    if op == "softmax":
        dim = attrs["dim"]
        n = x.shape[dim]
        big_e = _red(np.max, e, dim)
        prop = ay * np.expm1(2 * big_e)
        m = _red(np.max, x, dim)
        comp = ((12 + 3 * np.abs(x - m) + 2 * big_e) * u + (n + 4) * U32) * (ay + prop)
        return prop, comp
    if op == "log_softmax":
        dim = attrs["dim"]
        n = x.shape[dim]
        big_e = _red(np.max, e, dim)
        prop = e + big_e
        m = _red(np.max, x, dim)
        lse = x - y
        spread = _red(np.max, np.abs(x - m), dim)
        comp = u * (2 * ax + 2 * np.abs(lse) + ay + 8 + spread + 3 * big_e) + U32 * (n + 4)
        return prop, comp
    if op == "layer_norm":
        dim = attrs["dim"]
        n = x.shape[dim]
        big_e = _red(np.max, e, dim)
        mu = _red(np.mean, x, dim)
        var = _red(np.mean, (x - mu) ** 2, dim)
        sig = np.sqrt(var + LAYER_NORM_EPS)
        den = sig - big_e
        prop = np.where(den > 0, (e + big_e + ay * big_e) / np.maximum(den, 1e-300), _INF)
        mag = ax + e
        err_mu = _gamma(n) * _red(np.mean, mag, dim) + u * _red(np.mean, mag, dim)
        m2 = _red(np.mean, mag**2, dim)
        err_var = ((n + 8) * U32 + 4 * u) * m2 + 2 * (np.abs(mu) + big_e) * err_mu
        rel_sig = err_var / (2 * np.maximum(den, 1e-300) ** 2) + 3 * u
        comp = (u * (np.abs(x - mu) + e) + err_mu) / np.maximum(den, 1e-300) + (ay + prop) * rel_sig
        comp = np.where((den > 0) & (rel_sig < 0.25), comp * (1 + 2 * rel_sig), _INF)
        return prop, comp
    raise KeyError(f"no error rule for op {op!r}")


def _partial_magnitude(op: str, attrs: dict, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """How large an op's partial results can get on the way to ``y`` (per output element):
    ``sum |x|`` for sums, means and scans, ``|A| |B|`` for matmul, ``sum x^2`` for layer_norm's
    variance.  A mean of huge values is in range while its running sum is not."""
    if op not in ("sum", "mean", "cumsum", "matmul", "bmm", "layer_norm"):
        return np.zeros(y.shape)
    with np.errstate(all="ignore"):
        # finite inputs only: two huge finite terms can overflow a float32 running sum to inf
        # and meet a -inf term as NaN, where float64 just gives -inf
        t = [torch.from_numpy(np.where(np.isfinite(x), np.abs(np.asarray(x, np.float64)), 0.0))
             for x in xs]
        if op == "mean":
            total = OPS["sum"].torch_fn(*t, **attrs).numpy()
        elif op == "layer_norm":
            total = (t[0] * t[0]).sum(dim=attrs["dim"], keepdim=True).numpy()
        else:
            total = OPS[op].torch_fn(*t, **attrs).numpy()
    return np.broadcast_to(total, y.shape)


def error_bounds(graph: dict, intermediates: dict[str, np.ndarray], dtype: Any) -> dict[str, np.ndarray]:
    """Absolute error bound of every input (0: inputs are exact in the dtype) and node, elementwise,
    for a run of ``graph`` in ``dtype`` against the float64 ``intermediates``
    (:func:`fuzzkit.graphs.build.run_reference`)."""
    dt = _dtype_name(dtype)
    if dt not in UNIT_ROUNDOFF:
        raise ValueError(f"unknown dtype {dtype!r}")
    out: dict[str, np.ndarray] = {}
    for inp in graph["inputs"]:
        out[inp["name"]] = np.zeros(np.shape(intermediates[inp["name"]]), dtype=np.float64)
    overflowed: set[str] = set()
    for n in graph["nodes"]:
        y = np.asarray(intermediates[n["name"]], dtype=np.float64)
        if any(a in overflowed for a in n["args"]):
            overflowed.add(n["name"])
            out[n["name"]] = np.full(y.shape, np.nan)
            continue
        xs = [np.asarray(intermediates[a], dtype=np.float64) for a in n["args"]]
        es = [out[a] for a in n["args"]]
        b = np.broadcast_to(node_bound(n["op"], n["attrs"], xs, es, y, dt), y.shape)
        with np.errstate(invalid="ignore", over="ignore"):
            # a finite value that (with its error, or a partial result on the way) may leave
            # the dtype's or float32's range: an overflow to inf, and NaN after it, is legitimate
            partial = _partial_magnitude(n["op"], n["attrs"], xs, y)
            reach = np.abs(y) + b
            # partial results live in float32 (the compute type); the result in the dtype
            # (an infinite bound is "no guarantee" already: not an overflow)
            may_overflow = ((np.isfinite(y) & np.isfinite(reach) & (reach > _OVERFLOW[dt]))
                            | (partial > _OVERFLOW["float32"]))
        if may_overflow.any():
            overflowed.add(n["name"])
            out[n["name"]] = np.full(y.shape, np.nan)
            continue
        # a NaN from the formulas (a NaN or infinite reference) means "unbounded", not "unjudged"
        out[n["name"]] = np.where(np.isnan(b), _INF, b).astype(np.float64)
    return out
