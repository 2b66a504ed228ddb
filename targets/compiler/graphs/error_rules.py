r"""The per-op parts of the forward-error bound: each op's error rule, dependency rule and
partial-magnitude rule, which its record in :mod:`.ops` names.

:mod:`.bound` holds the model (``e_y = prop + comp + round``, overflow, what is left unjudged)
and applies it node by node; the functions here are what differs from op to op, so an op's
whole numerical contract is found through its one record instead of string dispatches:

* an **error rule** ``(Operands) -> (prop, comp)``: the propagated input error and the op's own
  computation error (see :mod:`.bound`);
* a **dependency rule** ``(masks, xs, y, attrs, fn) -> mask``: which output elements read at
  least one masked input element;
* a **partial-magnitude rule** ``(|xs| as float64 tensors, attrs, fn) -> array``: how large the
  op's partial results get on the way to its output (a running sum), or None on the record when
  only the output itself can overflow.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np
import torch

from .common import LAYER_NORM_EPS, reduced_dims

#: float32's unit roundoff: every op computes in float32 (reductions and matmul accumulate there).
U32 = 2.0**-24
#: The smallest normal float32: a float32 result below it may be flushed to zero (CPU kernels
#: run with flush-to-zero / denormals-are-zero, e.g. oneDNN's bfloat16 matmul).
FLUSH = 2.0**-126
_INF = np.inf


@dataclasses.dataclass(frozen=True)
class Operands:
    """One node as an error rule sees it: its inputs' float64 reference values ``xs`` and error
    bounds ``es``, its own reference value ``y`` (and ``|y|``), the unit roundoff ``u`` of the
    graph dtype, its attrs, whether it compares one value with itself (``same_operands``) and its
    torch function ``fn`` (layout ops move their inputs' errors with it)."""

    xs: list[np.ndarray]
    es: list[np.ndarray]
    y: np.ndarray
    ay: np.ndarray
    u: float
    attrs: dict[str, Any]
    same_operands: bool
    fn: Callable[..., Any]


ErrorRule = Callable[[Operands], tuple[Any, Any]]
DependencyRule = Callable[..., np.ndarray]
PartialRule = Callable[..., Any]


def gamma(n: float) -> float:
    """``gamma_n = n u32 / (1 - n u32)``: the relative error of any n-term float32 summation."""
    t = n * U32
    return t / (1.0 - t) if t < 1 else math.inf


def _red(fn: Any, a: np.ndarray, dim: int | tuple[int, ...]) -> np.ndarray:
    return fn(a, axis=dim, keepdims=True)


def _unkeep(a: np.ndarray, dim: Any, keepdim: bool) -> np.ndarray:
    return a if keepdim else np.squeeze(a, axis=dim)


# ---------------------------------------------------------------------------------------------
# error rules: (prop, comp)


def selected(o: Operands) -> tuple[Any, Any]:
    """abs, neg, relu, clamp: the result is (the negation of) an operand or a bound; Lipschitz 1,
    nothing computed."""
    return o.es[0], np.zeros_like(o.ay)


def moved(o: Operands) -> tuple[Any, Any]:
    """Layout ops: the values are bit copies of the inputs, so their errors move with them (the
    op itself applied to the error arrays); nothing computed, nothing rounded."""
    t = [torch.from_numpy(np.array(e, dtype=np.float64, order="C")) for e in o.es]
    return o.fn(*t, **o.attrs).contiguous().numpy().copy(), np.zeros_like(o.ay)


def add_scalar(o: Operands) -> tuple[Any, Any]:
    return o.es[0], U32 * o.ay


def exp(o: Operands) -> tuple[Any, Any]:
    x, e = o.xs[0], o.es[0]
    prop = np.exp(x) * np.expm1(e)
    # also covers exp2-based approximations
    return prop, (4 + 2 * np.abs(x)) * U32 * (o.ay + prop)


def log(o: Operands) -> tuple[Any, Any]:
    x, e = o.xs[0], o.es[0]
    prop = np.where(x - e > 0, -np.log1p(-e / x), _INF)
    return prop, 4 * U32 * (o.ay + prop) + 4 * U32


def sqrt(o: Operands) -> tuple[Any, Any]:
    x, e = o.xs[0], o.es[0]
    prop = np.sqrt(x) - np.sqrt(np.maximum(x - e, 0.0))
    return prop, 2 * U32 * (o.ay + prop)


def rsqrt(o: Operands) -> tuple[Any, Any]:
    x, e = o.xs[0], o.es[0]
    prop = np.where(x - e > 0, 1 / np.sqrt(np.maximum(x - e, 1e-300)) - 1 / np.sqrt(x), _INF)
    return prop, (4 * U32 + o.u) * (o.ay + prop)  # 1/sqrt(x) with a dtype rounding of sqrt


def tanh(o: Operands) -> tuple[Any, Any]:
    prop = np.minimum(o.es[0], 2.0)
    return prop, 4 * U32 * (o.ay + prop + 1)


def sigmoid(o: Operands) -> tuple[Any, Any]:
    prop = np.minimum(o.es[0] / 4, 1.0)
    return prop, ((4 + np.abs(o.xs[0])) * U32 + o.u) * (o.ay + prop) + 2 * U32


def gelu(o: Operands) -> tuple[Any, Any]:
    e = o.es[0]
    prop = 1.13 * e
    return prop, 8 * U32 * (o.ay + prop + np.abs(o.xs[0]) + e + 1)


def periodic(o: Operands) -> tuple[Any, Any]:
    """sin, cos: Lipschitz 1, bounded by 1."""
    prop = np.minimum(o.es[0], 2.0)
    return prop, 8 * U32 * (o.ay + prop + 1)


def reciprocal(o: Operands) -> tuple[Any, Any]:
    ax, e = np.abs(o.xs[0]), o.es[0]
    prop = np.where(ax > e, e / (ax * (ax - e)), _INF)
    return prop, 2 * U32 * (o.ay + prop)


def power(o: Operands) -> tuple[Any, Any]:
    x, e = o.xs[0], o.es[0]
    ax = np.abs(x)
    p = float(o.attrs["exponent"])
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
    return prop, (c * U32 + 2 * o.u) * (o.ay + prop)


def add_sub(o: Operands) -> tuple[Any, Any]:
    prop = o.es[0] + o.es[1]
    return prop, U32 * (o.ay + prop)


def mul(o: Operands) -> tuple[Any, Any]:
    (a, b), (ea, eb) = o.xs, o.es
    prop = np.abs(a) * eb + np.abs(b) * ea + ea * eb
    return prop, U32 * (o.ay + prop)


def div(o: Operands) -> tuple[Any, Any]:
    (a, b), (ea, eb) = o.xs, o.es
    ab = np.abs(b)
    prop = np.where(ab > eb, (ea * ab + np.abs(a) * eb) / (ab * (ab - eb)), _INF)
    return prop, 2 * U32 * (o.ay + prop)


def extreme_of_two(o: Operands) -> tuple[Any, Any]:
    """maximum, minimum: Lipschitz 1 in each operand, nothing computed."""
    prop = np.maximum(o.es[0], o.es[1])
    return np.broadcast_to(prop, o.y.shape), np.zeros_like(o.ay)


def where_gt(o: Operands) -> tuple[Any, Any]:
    """The selected branch's error, or ``|c - d| + max(e_c, e_d)`` where the comparison is
    uncertain: the operands' error intervals touch.  Exactly known operands (no error, e.g.
    graph inputs) and a value compared with itself are decided exactly: a tie there is a tie,
    and ``a > a`` is false in every evaluation."""
    a, b, c, d = o.xs
    ea, eb, ec, ed = o.es
    uncertain = (np.abs(a - b) <= ea + eb) & (ea + eb > 0) & (not o.same_operands)
    prop = np.where(uncertain, np.abs(c - d) + np.maximum(ec, ed), np.where(a > b, ec, ed))
    return np.broadcast_to(prop, o.y.shape), np.zeros_like(o.ay)


def matmul(o: Operands) -> tuple[Any, Any]:
    """matmul, bmm: ``|A| e_B + e_A |B| + e_A e_B`` and ``gamma_k`` of the accumulation."""
    (a, b), (ea, eb) = o.xs, o.es
    aa, ab = np.abs(a), np.abs(b)
    prop = aa @ eb + ea @ ab + ea @ eb
    k = a.shape[-1]
    return prop, gamma(k) * ((aa + ea) @ (ab + eb)) + k * FLUSH


def _reduction(o: Operands) -> tuple[tuple[int, ...], bool, int]:
    x = o.xs[0]
    dim = reduced_dims(o.attrs["dim"], x.ndim)
    return dim, bool(o.attrs["keepdim"]), math.prod(x.shape[d] for d in dim)


def extreme(o: Operands) -> tuple[Any, Any]:
    """amax, amin: the largest input error along the reduced dims; nothing computed."""
    dim, keep, _ = _reduction(o)
    return _unkeep(_red(np.max, o.es[0], dim), dim, keep), np.zeros_like(o.ay)


def total(o: Operands) -> tuple[Any, Any]:
    """sum: errors add up; ``gamma_n`` of the terms' magnitudes, one flush per term."""
    dim, keep, n = _reduction(o)
    x, e = o.xs[0], o.es[0]
    prop = _red(np.sum, e, dim)
    comp = gamma(n) * _red(np.sum, np.abs(x) + e, dim) + n * FLUSH
    return _unkeep(prop, dim, keep), _unkeep(comp, dim, keep)


def mean(o: Operands) -> tuple[Any, Any]:
    """The sum's bound over n, plus the division."""
    dim, keep, n = _reduction(o)
    x, e = o.xs[0], o.es[0]
    prop = _red(np.sum, e, dim) / n
    comp = (gamma(n) * _red(np.sum, np.abs(x) + e, dim) + n * FLUSH) / n
    comp = comp + 2 * U32 * (np.abs(_red(np.mean, x, dim)) + prop)
    return _unkeep(prop, dim, keep), _unkeep(comp, dim, keep)


def cumsum(o: Operands) -> tuple[Any, Any]:
    x, e = o.xs[0], o.es[0]
    dim = o.attrs["dim"]
    n = x.shape[dim]
    prop = np.cumsum(e, axis=dim)
    return prop, gamma(n) * np.cumsum(np.abs(x) + e, axis=dim) + n * FLUSH


def softmax(o: Operands) -> tuple[Any, Any]:
    """``y (e^{2E}-1)`` with ``E`` the largest error along the dim; internal steps (max, exp,
    sum) may round to the dtype, as eager CPU float16 kernels do."""
    x, e, u = o.xs[0], o.es[0], o.u
    dim = o.attrs["dim"]
    n = x.shape[dim]
    big_e = _red(np.max, e, dim)
    prop = o.ay * np.expm1(2 * big_e)
    m = _red(np.max, x, dim)
    comp = ((12 + 3 * np.abs(x - m) + 2 * big_e) * u + (n + 4) * U32) * (o.ay + prop)
    return prop, comp


def log_softmax(o: Operands) -> tuple[Any, Any]:
    """``e_i + E``; the log-sum-exp rounded in the dtype."""
    x, e, u = o.xs[0], o.es[0], o.u
    dim = o.attrs["dim"]
    n = x.shape[dim]
    big_e = _red(np.max, e, dim)
    prop = e + big_e
    m = _red(np.max, x, dim)
    lse = x - o.y
    spread = _red(np.max, np.abs(x - m), dim)
    comp = u * (2 * np.abs(x) + 2 * np.abs(lse) + o.ay + 8 + spread + 3 * big_e) + U32 * (n + 4)
    return prop, comp


def layer_norm(o: Operands) -> tuple[Any, Any]:
    """``(e_i + E + |y_i| E) / (sigma - E)``, with the cancellation of a one-pass variance."""
    x, e, u = o.xs[0], o.es[0], o.u
    dim = o.attrs["dim"]
    n = x.shape[dim]
    big_e = _red(np.max, e, dim)
    mu = _red(np.mean, x, dim)
    var = _red(np.mean, (x - mu) ** 2, dim)
    sig = np.sqrt(var + LAYER_NORM_EPS)
    den = sig - big_e
    prop = np.where(den > 0, (e + big_e + o.ay * big_e) / np.maximum(den, 1e-300), _INF)
    mag = np.abs(x) + e
    err_mu = gamma(n) * _red(np.mean, mag, dim) + u * _red(np.mean, mag, dim)
    m2 = _red(np.mean, mag**2, dim)
    err_var = ((n + 8) * U32 + 4 * u) * m2 + 2 * (np.abs(mu) + big_e) * err_mu
    rel_sig = err_var / (2 * np.maximum(den, 1e-300) ** 2) + 3 * u
    comp = (u * (np.abs(x - mu) + e) + err_mu) / np.maximum(den, 1e-300) + (o.ay + prop) * rel_sig
    comp = np.where((den > 0) & (rel_sig < 0.25), comp * (1 + 2 * rel_sig), _INF)
    return prop, comp


# ---------------------------------------------------------------------------------------------
# dependency rules: which output elements read a masked input element


def reads_elementwise(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """Element by element (broadcasting)."""
    out = np.zeros(y.shape, dtype=bool)
    for m in masks:
        out = out | np.broadcast_to(m, y.shape)
    return out


def reads_moved(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """Layout ops move the mask with the values."""
    t = [torch.from_numpy(np.array(m, dtype=np.float64, order="C")) for m in masks]
    return fn(*t, **attrs).contiguous().numpy() > 0


def reads_reduced(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """Reductions: along the reduced dims."""
    m = masks[0]
    dims = reduced_dims(attrs["dim"], m.ndim)
    return np.broadcast_to(
        _unkeep(np.any(m, axis=dims, keepdims=True), dims, attrs["keepdim"]), y.shape
    )


def reads_row(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """Row-wise ops (softmax, log_softmax, layer_norm): the whole row along their dim."""
    return np.broadcast_to(np.any(masks[0], axis=attrs["dim"], keepdims=True), y.shape)


def reads_scan(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """cumsum: from the masked element on."""
    return np.logical_or.accumulate(masks[0], axis=attrs["dim"])


def reads_matmul(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """matmul, bmm: along the rows of A and the columns of B."""
    a = masks[0].astype(np.float64)
    b = masks[1].astype(np.float64)
    return (a @ np.ones(xs[1].shape) + np.ones(xs[0].shape) @ b) > 0


# ---------------------------------------------------------------------------------------------
# partial-magnitude rules: how large partial results get (|inputs|, finite ones only)


def partial_through(t: list[torch.Tensor], attrs: dict[str, Any], fn: Any) -> Any:
    """The op itself on ``|x|``: ``sum |x|`` of sums and scans, ``|A| |B|`` of matmul."""
    return fn(*t, **attrs).numpy()


def partial_sum(t: list[torch.Tensor], attrs: dict[str, Any], fn: Any) -> Any:
    """mean: its running sum (a mean of huge values is in range while the sum is not)."""
    return torch.sum(t[0], dim=attrs["dim"], keepdim=attrs["keepdim"]).numpy()


def partial_squares(t: list[torch.Tensor], attrs: dict[str, Any], fn: Any) -> Any:
    """layer_norm: ``sum x^2`` of its variance."""
    return (t[0] * t[0]).sum(dim=attrs["dim"], keepdim=True).numpy()
