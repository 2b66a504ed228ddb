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
  for layer_norm (``sigma = sqrt(var + eps)``), and for ``where(a > b, c, d)``: the selected
  branch's
  error, or ``|c - d| + max(e_c, e_d)`` where the comparison is uncertain (``|a-b| <= e_a+e_b``
  with ``e_a + e_b > 0``).  A comparison of exactly known operands (``e_a = e_b = 0``: graph
  inputs, or selections of them) is decided exactly -- a tie is a tie, so ``>`` evaluated as
  ``>=`` is caught -- and so is a value compared with itself (``where(a > a, ...)``: false in
  every evaluation, NaN included).
  An infinite bound means "no guarantee" (e.g. a denominator whose range reaches 0).
* ``comp`` — the op's own computation error (float32, except that softmax / log_softmax /
  layer_norm may round their internal steps — max, exp, lse, mean, rsqrt — to the dtype, as
  eager CPU float16 kernels do, so those terms use ``u``), evaluated on the perturbed magnitudes
  ``|y| + prop``: 1 ulp for add/sub/mul, 2 for div/reciprocal/sqrt, a few ulp plus argument
  conditioning for transcendentals (``exp``: ``(4 + 2|x|) u32``, also covering ``exp2``-based
  approximations), ``gamma_n (|x| + e)`` summed for reductions, scans and matmul (``n`` = length),
  and formula-based terms for softmax / log_softmax / layer_norm (including the cancellation of a
  one-pass variance).
* ``round`` — the final rounding to the dtype, ``u (|y| + prop + comp) + eta`` (``eta`` = a few
  half subnormal spacings plus one flushed float32 subnormal, :data:`FLUSH`; accumulations add
  one :data:`FLUSH` per term, since flush-to-zero kernels flush every subnormal product or
  partial sum), for every op except pure layout ops (reshape, permute, transpose, expand,
  unsqueeze, squeeze, cat, index_select), whose values are bit copies of their inputs, and
  except *selection* ops (abs, neg, relu, clamp, maximum, minimum, where, amax, amin) at elements
  whose operands are exact: their result is one of the operands (or a clamp bound) and, where it
  is a value of the dtype, needs no rounding -- so exact stays exact through them.

Overflow.  Where a finite ``|y| + e_y`` -- or a partial result on the way, such as the running
sum of a mean -- exceeds half the dtype's largest value, an evaluation may overflow to inf (and
to NaN after it, e.g. ``inf - inf``, even where the reference is a clean ``-inf``).  Such an
element, and every element downstream that reads it (:func:`dependents`: the same element of an
elementwise op, the row of a reduction or softmax, the rows and columns of a matmul), get a NaN
bound: "nothing can be said here", not even the NaN/Inf pattern.  Every other element keeps its
bound, so one huge input element does not switch off the judgement of a whole graph.  (An
infinite bound, by contrast, leaves the value free but the reference's NaN/Inf pattern still
binding.)  Only cases with huge inputs, Inf or NaN reach this.

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

from .ops import LAYER_NORM_EPS, OPS, reduced_dims

__all__ = [
    "UNIT_ROUNDOFF",
    "LARGEST_FINITE",
    "U32",
    "FLUSH",
    "error_bounds",
    "node_bound",
    "LAYOUT_OPS",
    "SELECTION_OPS",
    "dependents",
    "representable",
]

U32 = 2.0**-24
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
#: The smallest normal float32: a float32 result below it may be flushed to zero (CPU kernels
#: run with flush-to-zero / denormals-are-zero, e.g. oneDNN's bfloat16 matmul).
FLUSH = 2.0**-126
# absolute underflow allowance per op: a few half-subnormal spacings of the dtype and of float32,
# and one flushed float32 result
_ETA = {
    k: 4 * v + 4 * 2.0**-150 + FLUSH
    for k, v in {"float32": 2.0**-150, "float16": 2.0**-25, "bfloat16": 2.0**-134}.items()
}
#: The largest finite value of each dtype.
LARGEST_FINITE = {
    "float32": 3.4028234663852886e38,
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
}
#: Half the largest finite value of the dtype (float32 for the compute): beyond it a result may
#: overflow in some evaluation order.
_OVERFLOW = {k: 0.5 * v for k, v in LARGEST_FINITE.items()}
LAYOUT_OPS = frozenset(
    {"reshape", "permute", "transpose", "expand", "unsqueeze", "squeeze", "cat", "index_select"}
)
#: Ops whose result is one of their operands' values (or a clamp bound), never a new rounding:
#: exact where everything they select from is exact.
SELECTION_OPS = frozenset(
    {"abs", "neg", "relu", "clamp", "maximum", "minimum", "where_gt", "amax", "amin"}
)
_INF = np.inf


def _gamma(n: float) -> float:
    t = n * U32
    return t / (1.0 - t) if t < 1 else math.inf


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, torch.dtype):
        return str(dtype).replace("torch.", "")
    return str(dtype)


def _red(fn: Any, a: np.ndarray, dim: int | tuple[int, ...]) -> np.ndarray:
    return fn(a, axis=dim, keepdims=True)


def _unkeep(a: np.ndarray, dim: Any, keepdim: bool) -> np.ndarray:
    return a if keepdim else np.squeeze(a, axis=dim)


def representable(y: np.ndarray, dtype: str) -> np.ndarray:
    """Where ``y`` (float64) is exactly a value of ``dtype`` (NaN: never)."""
    from fuzzkit.values import round_to

    with np.errstate(all="ignore"):
        return np.asarray(round_to(y, dtype), dtype=np.float64) == y


def node_bound(
    op: str,
    attrs: dict,
    xs: list[np.ndarray],
    es: list[np.ndarray],
    y: np.ndarray,
    dtype: str,
    same_operands: bool = False,
) -> np.ndarray:
    """Error bound of one node's output (see the module docstring).  ``same_operands``: the
    node compares one value with itself (``where_gt(a, a, c, d)``), which every evaluation
    decides the same way (``a > a`` is false, NaN included)."""
    u = UNIT_ROUNDOFF[dtype]
    eta = _ETA[dtype]
    ay = np.abs(y)
    with np.errstate(all="ignore"):
        if op in LAYOUT_OPS:
            t = [torch.from_numpy(np.array(e, dtype=np.float64, order="C")) for e in es]
            return OPS[op].torch_fn(*t, **attrs).contiguous().numpy().copy()
        prop, comp = _prop_comp(op, attrs, xs, es, y, ay, u, same_operands)
        prop = np.where(np.isnan(prop), _INF, prop)
        comp = np.where(np.isnan(comp), _INF, comp)
        tot = prop + comp
        rounding = u * (ay + tot) + eta
        if op in SELECTION_OPS:
            # the result is one of the operands (or a clamp bound): exact operands give an
            # exact result wherever it is a value of the dtype -- nothing to round
            rounding = np.where((tot == 0) & representable(y, dtype), 0.0, rounding)
        return tot + rounding


def _prop_comp(op, attrs, xs, es, y, ay, u, same_operands=False):
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
        if p == math.floor(p) and p >= 0:
            prop = np.abs((ax + e) ** p - ax**p)
            base = ax
        elif p == math.floor(p):  # a negative power grows fastest towards 0
            prop = np.where(ax > e, np.abs(np.maximum(ax - e, 1e-300) ** p - ax**p), _INF)
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
        # a comparison is uncertain where the operands' error intervals touch; exactly known
        # operands (no error, e.g. graph inputs) and a value compared with itself are decided
        # exactly: a tie there is a tie, and ``a > a`` is false in every evaluation
        uncertain = (np.abs(a - b) <= ea + eb) & (ea + eb > 0) & (not same_operands)
        prop = np.where(uncertain, np.abs(c - d) + np.maximum(ec, ed), np.where(a > b, ec, ed))
        return np.broadcast_to(prop, y.shape), np.zeros_like(ay)
    if op in ("matmul", "bmm"):
        b, eb = xs[1], es[1]
        ab = np.abs(b)
        prop = ax @ eb + e @ ab + e @ eb
        k = x.shape[-1]
        return prop, _gamma(k) * ((ax + e) @ (ab + eb)) + k * FLUSH
    if op in ("sum", "mean", "amax", "amin"):
        dim, keep = reduced_dims(attrs["dim"], x.ndim), attrs["keepdim"]
        n = math.prod(x.shape[d] for d in dim)
        if op in ("amax", "amin"):
            return _unkeep(_red(np.max, e, dim), dim, keep), np.zeros_like(ay)
        prop = _red(np.sum, e, dim)
        comp = _gamma(n) * _red(np.sum, ax + e, dim) + n * FLUSH
        if op == "mean":
            prop = prop / n
            comp = comp / n
            comp = comp + 2 * U32 * (np.abs(_red(np.mean, x, dim)) + prop)
        return _unkeep(prop, dim, keep), _unkeep(comp, dim, keep)
    if op == "cumsum":
        dim = attrs["dim"]
        n = x.shape[dim]
        prop = np.cumsum(e, axis=dim)
        return prop, _gamma(n) * np.cumsum(ax + e, axis=dim) + n * FLUSH
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
        t = [
            torch.from_numpy(np.where(np.isfinite(x), np.abs(np.asarray(x, np.float64)), 0.0))
            for x in xs
        ]
        if op == "mean":
            total = OPS["sum"].torch_fn(*t, **attrs).numpy()
        elif op == "layer_norm":
            total = (t[0] * t[0]).sum(dim=attrs["dim"], keepdim=True).numpy()
        else:
            total = OPS[op].torch_fn(*t, **attrs).numpy()
    return np.broadcast_to(total, y.shape)


def dependents(
    op: str, attrs: dict, masks: list[np.ndarray], xs: list[np.ndarray], y: np.ndarray
) -> np.ndarray:
    """Which output elements of a node read at least one masked input element: elementwise ops
    element by element (broadcasting), layout ops move the mask with the values, reductions
    and row-wise ops (softmax, log_softmax, layer_norm) along their dim, cumsum from the masked
    element on, matmul along rows of A and columns of B."""
    if not any(np.any(m) for m in masks):
        return np.zeros(y.shape, dtype=bool)
    spec = OPS[op]
    if spec.kind == "elementwise":
        out = np.zeros(y.shape, dtype=bool)
        for m in masks:
            out = out | np.broadcast_to(m, y.shape)
        return out
    if op in LAYOUT_OPS:
        t = [torch.from_numpy(np.array(m, dtype=np.float64, order="C")) for m in masks]
        return OPS[op].torch_fn(*t, **attrs).contiguous().numpy() > 0
    m = masks[0]
    if op in ("sum", "mean", "amax", "amin"):
        dims = reduced_dims(attrs["dim"], m.ndim)
        return np.broadcast_to(
            _unkeep(np.any(m, axis=dims, keepdims=True), dims, attrs["keepdim"]), y.shape
        )
    if op in ("softmax", "log_softmax", "layer_norm"):
        return np.broadcast_to(np.any(m, axis=attrs["dim"], keepdims=True), y.shape)
    if op == "cumsum":
        return np.logical_or.accumulate(m, axis=attrs["dim"])
    if op in ("matmul", "bmm"):
        a = masks[0].astype(np.float64)
        b = masks[1].astype(np.float64)
        return (a @ np.ones(xs[1].shape) + np.ones(xs[0].shape) @ b) > 0
    raise KeyError(f"no dependency rule for op {op!r}")


def error_bounds(
    graph: dict, intermediates: dict[str, np.ndarray], dtype: Any
) -> dict[str, np.ndarray]:
    """Absolute error bound of every input (0: inputs are exact in the dtype) and node, elementwise,
    for a run of ``graph`` in ``dtype`` against the float64 ``intermediates``
    (:func:`fuzzkit.graphs.build.run_reference`).

    NaN marks an element that is not judged at all: it may overflow (see the module docstring),
    or it reads (through :func:`dependents`) an element that may; every other element of the
    same node keeps its bound."""
    dt = _dtype_name(dtype)
    if dt not in UNIT_ROUNDOFF:
        raise ValueError(f"unknown dtype {dtype!r}")
    out: dict[str, np.ndarray] = {}
    unjudged: dict[str, np.ndarray] = {}
    for inp in graph["inputs"]:
        out[inp["name"]] = np.zeros(np.shape(intermediates[inp["name"]]), dtype=np.float64)
        unjudged[inp["name"]] = np.zeros(np.shape(intermediates[inp["name"]]), dtype=bool)
    for n in graph["nodes"]:
        y = np.asarray(intermediates[n["name"]], dtype=np.float64)
        xs = [np.asarray(intermediates[a], dtype=np.float64) for a in n["args"]]
        masks = [unjudged[a] for a in n["args"]]
        # unjudged input elements only feed unjudged output elements: bound the rest as usual
        es = [np.where(m, 0.0, out[a]) for a, m in zip(n["args"], masks)]
        same = n["op"] == "where_gt" and n["args"][0] == n["args"][1]
        b = np.broadcast_to(node_bound(n["op"], n["attrs"], xs, es, y, dt, same), y.shape)
        with np.errstate(invalid="ignore", over="ignore"):
            # a finite value that (with its error, or a partial result on the way) may leave
            # the dtype's or float32's range: an overflow to inf, and NaN after it, is legitimate
            partial = _partial_magnitude(n["op"], n["attrs"], xs, y)
            reach = np.abs(y) + b
            # partial results live in float32 (the compute type); the result in the dtype
            # (an infinite bound is "no guarantee" already: not an overflow)
            may_overflow = (np.isfinite(y) & np.isfinite(reach) & (reach > _OVERFLOW[dt])) | (
                partial > _OVERFLOW["float32"]
            )
        mask = np.asarray(dependents(n["op"], n["attrs"], masks, xs, y) | may_overflow)
        unjudged[n["name"]] = mask
        # a NaN from the formulas (a NaN or infinite reference) means "unbounded", not "unjudged"
        b = np.where(np.isnan(b), _INF, b)
        out[n["name"]] = np.where(mask, np.nan, b).astype(np.float64)
    return out
