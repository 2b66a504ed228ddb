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
    torch function ``fn`` (layout ops move their inputs' errors with it).

    Integer and bool values have error bounds too, in their own units: 0 where the value is
    certainly the reference's (an exact tie decided exactly, a cast of a value far from an
    integer boundary), else how far it may be off (1 for a bool that may flip)."""

    xs: list[np.ndarray]
    es: list[np.ndarray]
    y: np.ndarray
    ay: np.ndarray
    u: float
    attrs: dict[str, Any]
    same_operands: bool
    fn: Callable[..., Any]
    #: the operands' and the output's value dtypes (:data:`.ops.VALUE_DTYPES`): a cast's rule
    #: depends on them
    in_dtypes: tuple[str, ...] = ()
    out_dtype: str = "float32"


ErrorRule = Callable[[Operands], tuple[Any, Any]]
DependencyRule = Callable[..., np.ndarray]
PartialRule = Callable[..., Any]


def gamma(n: float) -> float:
    """``gamma_n = n u32 / (1 - n u32)``: the relative error of any n-term float32 summation."""
    t = n * U32
    return t / (1.0 - t) if t < 1 else math.inf


def _red(fn: Any, a: np.ndarray, dim: int | tuple[int, ...]) -> np.ndarray:
    """``fn`` along ``dim``, kept; a max / min over a zero-size dim (a dynamic-shape variant's
    empty row) is 0 -- no element, no error -- where NumPy would raise."""
    if a.size == 0 and fn in (np.max, np.min):
        return np.zeros(np.sum(a, axis=dim, keepdims=True).shape)
    return fn(a, axis=dim, keepdims=True)


def _unkeep(a: np.ndarray, dim: Any, keepdim: bool) -> np.ndarray:
    return a if keepdim else np.squeeze(a, axis=dim)


# ---------------------------------------------------------------------------------------------
# error rules: (prop, comp)


def selected(o: Operands) -> tuple[Any, Any]:
    """abs, neg, relu, clamp: the result is (the negation of) an operand or a bound; Lipschitz 1,
    nothing computed."""
    return o.es[0], np.zeros_like(o.ay)


_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16,
                 "bfloat16": torch.bfloat16, "float64": torch.float64}


def _bound_rounding(b: float, dtype: str) -> float:
    """How far a clamp bound moves when rounded to ``dtype`` -- directly, or through float32
    first (a fused half-precision kernel clamps in float32); 0 for a bound it holds exactly."""
    if not math.isfinite(b) or dtype not in _TORCH_DTYPES:
        return 0.0
    t = torch.tensor(b, dtype=torch.float64)
    direct = float(t.to(_TORCH_DTYPES[dtype]).double())
    twice = float(t.to(torch.float32).to(_TORCH_DTYPES[dtype]).double())
    return max(abs(direct - b), abs(twice - b))


def clamped(o: Operands) -> tuple[Any, Any]:
    """clamp: Lipschitz 1 like :func:`selected`, and no error at all where the input is beyond
    a bound by more than its own error -- the computed input is beyond it too, so the result
    is the bound (rounded to the dtype).  Passing the input's error through
    there made a clamp of a far-off value (+-1145 with an error of 30, clamped to +-8) carry
    an error of 30, which a cumprod or an attention downstream grew past the dtype's range
    and left unjudged.  Nowhere more than the width of the interval either (a finite error:
    an infinite one, "no guarantee", may stand for a NaN, which clamp passes on)."""
    x, e = o.xs[0], o.es[0]
    lo, hi = o.attrs.get("min"), o.attrs.get("max")
    prop = np.array(e, dtype=np.float64, copy=True)
    comp = np.zeros_like(o.ay)
    with np.errstate(invalid="ignore"):
        for bound, beyond in ((hi, lambda b: x - e >= b), (lo, lambda b: x + e <= b)):
            if bound is None:
                continue
            b = float(bound)
            prop = np.where(beyond(b), 0.0, prop)
            rounding = _bound_rounding(b, o.out_dtype)
            if rounding > 0:  # the grid's bounds (0, integers, +-inf) round to themselves
                engaged = (x + e >= b) if bound is hi else (x - e <= b)
                comp = np.where(engaged, np.maximum(comp, rounding), comp)
        if lo is not None and hi is not None:
            # an infinite error stays: "no guarantee" may be a NaN, which clamp keeps
            width = max(float(hi) - float(lo), 0.0)
            prop = np.where(np.isfinite(prop), np.minimum(prop, width), prop)
    return prop, comp


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


# ---------------------------------------------------------------------------------------------
# typed ops (:mod:`.ops_typed`): comparisons, logical ops, casts, integer results.  A bool or int
# result is either certain (bound 0: compared exactly) or uncertain (bound = how far it may be
# off); no rounding is added for them (:mod:`.bound`).

_INTEGRAL = ("int32", "int64", "bool")


def _zeros(o: Operands) -> np.ndarray:
    return np.zeros(o.y.shape)


def _flag(uncertain: Any, o: Operands) -> tuple[Any, Any]:
    """A bool result: 1 (it may flip) where ``uncertain``, else 0."""
    return np.where(np.broadcast_to(uncertain, o.y.shape), 1.0, 0.0), _zeros(o)


#: Unit roundoff of the float dtypes a comparison may promote an int or bool operand to.
_FLOAT_ROUNDOFF = {"float32": U32, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def _promoted(names: tuple[str, ...]) -> str:
    """torch's type promotion of tensors of these value dtypes (int64 with bfloat16: bfloat16)."""
    out = getattr(torch, names[0])
    for n in names[1:]:
        out = torch.promote_types(out, getattr(torch, n))
    return str(out).replace("torch.", "")


def _promotion_error(x: np.ndarray, e: np.ndarray, dtype: str) -> np.ndarray:
    """How far an int / bool operand (reference ``x``, error ``e``) may move when a comparison
    promotes it to the float ``dtype``: torch converts it first (``int64 > bfloat16`` compares
    in bfloat16: 257 becomes 256), the float64 reference does not.  0 where the value is
    certainly one of the dtype (``e == 0`` and representable: exact ties stay strict); else
    one ulp of ``|x| + e`` (``2 u (|x| + e)``: either neighbour, whatever the rounding mode or
    a double rounding through float32), or the rounding's own distance past the dtype's range
    (inf: a float16 overflow).  An evaluation that compares without the rounding (a float32
    or exact compare) lies inside that interval too."""
    from fuzzkit.values import round_to

    with np.errstate(all="ignore"):
        top = np.abs(x) + e
        exact = (e == 0) & (np.asarray(round_to(x, dtype), np.float64) == x)
        past = np.abs(np.asarray(round_to(top, dtype), np.float64) - top)
        step = np.maximum(2 * _FLOAT_ROUNDOFF[dtype] * top, past)
    return np.where(exact, 0.0, step)


def decided(o: Operands) -> np.ndarray:
    """Where a comparison of the first two operands comes out as in the reference: both
    operands exact (a tie is a tie: ``>`` evaluated as ``>=`` is caught there), their error
    intervals separated, or one value compared with itself (``gt``, ``lt``: always; the
    others where its error is finite, so that it cannot be NaN).  An int or bool operand against a
    float one is first rounded to the promoted float dtype (:func:`_promotion_error`): that
    rounding is part of its error, so an int the dtype cannot hold is never exact there."""
    (a, b), (ea, eb) = o.xs[:2], o.es[:2]
    if o.same_operands:
        # ``a > a`` and ``a < a`` are false in every evaluation, NaN included; ``a == a``,
        # ``>=``, ``<=`` and ``!=`` flip where an evaluation may be NaN at a finite reference
        # (an infinite bound: ``0 / 0`` reachable), so only a finite error decides them
        if getattr(o.fn, "__name__", "") in ("gt", "lt"):
            return np.ones(o.y.shape, dtype=bool)
        return np.broadcast_to(np.isfinite(ea), o.y.shape)
    if len(o.in_dtypes) >= 2:
        promoted = _promoted(tuple(o.in_dtypes[:2]))
        if promoted in _FLOAT_ROUNDOFF:
            if o.in_dtypes[0] in _INTEGRAL:
                ea = ea + _promotion_error(a, ea, promoted)
            if o.in_dtypes[1] in _INTEGRAL:
                eb = eb + _promotion_error(b, eb, promoted)
    with np.errstate(invalid="ignore"):
        separated = np.abs(a - b) > ea + eb  # NaN (inf - inf, NaN operands): not separated
    return np.broadcast_to(((ea == 0) & (eb == 0)) | separated, o.y.shape)


def compared(o: Operands) -> tuple[Any, Any]:
    """gt, ge, lt, le, eq, ne: certain where :func:`decided`, else a flipped bool (1)."""
    return _flag(~decided(o), o)


def _truth(x: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(certainly nonzero, certainly zero) of an int / bool / float value with error ``e``."""
    with np.errstate(invalid="ignore"):
        unsure = (e > 0) & ~(np.abs(x) > e)
    nonzero = (x != 0) & ~unsure
    return nonzero, (x == 0) & ~unsure


def logical(o: Operands) -> tuple[Any, Any]:
    """logical_and / or / xor / not: certain where the operands' truths are, or where one
    certain operand decides (``and`` with a certain False, ``or`` with a certain True)."""
    truths = [_truth(x, e) for x, e in zip(o.xs, o.es)]
    certain = [t | f for t, f in truths]
    known = np.ones(o.y.shape, dtype=bool)
    for c in certain:
        known = known & np.broadcast_to(c, o.y.shape)
    name = getattr(o.fn, "__name__", "")
    if name == "logical_and" and len(truths) == 2:
        known = known | np.broadcast_to(truths[0][1] | truths[1][1], o.y.shape)
    elif name == "logical_or" and len(truths) == 2:
        known = known | np.broadcast_to(truths[0][0] | truths[1][0], o.y.shape)
    return _flag(~known, o)


def cast(o: Operands) -> tuple[Any, Any]:
    """to_dtype.  To a float: the value's error moves (the rounding to the target is the
    bound's, :mod:`.bound`, as for a selection).  Float to int truncates: the result may be any
    ``trunc`` over ``[x - e, x + e]`` (0 where that interval stays inside one integer cell).
    To bool: 1 where the value may be zero or not.  Int to int: the value's error."""
    x, e = o.xs[0], o.es[0]
    src = o.in_dtypes[0] if o.in_dtypes else "float32"
    out = o.out_dtype
    if out == "bool":
        nonzero, zero = _truth(x, e)
        return _flag(~(nonzero | zero), o)
    if out in _INTEGRAL and src not in _INTEGRAL:
        with np.errstate(invalid="ignore"):
            width = np.trunc(x + e) - np.trunc(x - e)
        return np.where(e == 0, 0.0, width), _zeros(o)
    return np.broadcast_to(e, o.y.shape), _zeros(o)


#: Magnitudes from which a float cast to an integer may leave its range (half of it: the
#: value's error comes on top): the conversion is undefined behaviour in C++ there.
_INT_RANGE = {"int32": 2.0**30, "int64": 2.0**62}


def cast_undefined(xs: list[np.ndarray], attrs: dict, in_dtypes: Any) -> np.ndarray:
    """A NaN, an Inf or a value beyond the integer's range cast to an integer is
    implementation-defined (special-value cases reach it past the generator's clamp):
    unjudged, never a finding."""
    target = attrs.get("dtype")
    if target in _INT_RANGE and in_dtypes and in_dtypes[0] not in _INTEGRAL:
        with np.errstate(invalid="ignore"):
            return ~(np.abs(xs[0]) < _INT_RANGE[target])
    return np.zeros(np.shape(xs[0]), dtype=bool)


def where_cond(o: Operands) -> tuple[Any, Any]:
    """where(cond, a, b): the selected branch's error where ``cond`` is certain, else either
    branch: ``|a - b| + max(e_a, e_b)``."""
    (c, a, b), (ec, ea, eb) = o.xs, o.es
    with np.errstate(invalid="ignore"):
        prop = np.where(ec > 0, np.abs(a - b) + np.maximum(ea, eb), np.where(c != 0, ea, eb))
    return np.broadcast_to(prop, o.y.shape), _zeros(o)


def masked_fill(o: Operands) -> tuple[Any, Any]:
    """masked_fill(a, mask, value): ``value`` (exact up to its rounding to the dtype, which the
    bound adds) where the mask is certainly set, ``a``'s error where certainly not, else either:
    ``|a - value| + e_a``."""
    (a, m), (ea, em) = o.xs, o.es
    v = float(o.attrs["value"])
    with np.errstate(invalid="ignore"):
        prop = np.where(em > 0, np.abs(a - v) + ea, np.where(m != 0, 0.0, ea))
    return np.broadcast_to(prop, o.y.shape), _zeros(o)


def arg_extreme(o: Operands) -> tuple[Any, Any]:
    """argmax / argmin along ``dim``: exact rows (every error 0) are decided exactly -- the
    first index of a tie, as torch documents; elsewhere the index may be that of any element
    that may be the extreme (``x_i + e_i >= max_j (x_j - e_j)`` for argmax), so the bound is
    the distance from the reference's index to the farthest of those indices (a row with a NaN
    or an infinite error: the whole row)."""
    x, e = o.xs[0], o.es[0]
    dim = int(o.attrs["dim"]) % max(x.ndim, 1)
    if x.size == 0:  # nothing to pick (torch refuses an empty dim; a variant may have one)
        return np.zeros(o.y.shape), _zeros(o)
    sign = 1.0 if getattr(o.fn, "__name__", "") == "argmax" else -1.0
    with np.errstate(invalid="ignore"):
        v = sign * x
        best_low = np.max(v - e, axis=dim, keepdims=True)
        may = v + e >= best_low
    idx = np.arange(x.shape[dim]).reshape([-1 if k == dim else 1 for k in range(x.ndim)])
    hi = np.max(np.where(may, idx, -1), axis=dim, keepdims=True)
    lo = np.min(np.where(may, idx, x.shape[dim]), axis=dim, keepdims=True)
    # the reference's index is a candidate: the result is off by at most the farther end
    ref = o.y if o.attrs["keepdim"] else np.expand_dims(o.y, dim)
    spread = np.maximum(np.maximum(hi - ref, ref - lo), 0).astype(np.float64)
    exact = np.all(e == 0, axis=dim, keepdims=True)
    wild = np.any(np.isnan(x) | ~np.isfinite(e), axis=dim, keepdims=True)
    out = np.where(exact, 0.0, np.where(wild, float(x.shape[dim] - 1), spread))
    return _unkeep(out, dim, bool(o.attrs["keepdim"])), _zeros(o)


def any_all(o: Operands) -> tuple[Any, Any]:
    """any / all along ``dim``: certain where every element's truth is, or where one certain
    element decides (a certain True for any, a certain False for all)."""
    x, e = o.xs[0], o.es[0]
    dim = int(o.attrs["dim"]) % max(x.ndim, 1)
    nonzero, zero = _truth(x, e)
    known = np.all(nonzero | zero, axis=dim, keepdims=True)
    decider = nonzero if getattr(o.fn, "__name__", "") == "any" else zero
    known = known | np.any(decider, axis=dim, keepdims=True)
    return _unkeep(np.where(known, 0.0, 1.0), dim, bool(o.attrs["keepdim"])), _zeros(o)


def bitwise(o: Operands) -> tuple[Any, Any]:
    """bitwise_and / or / xor: exact operands give an exact result; otherwise a bool may flip
    (1) and an integer may be anything (no guarantee)."""
    exact = np.ones(o.y.shape, dtype=bool)
    for e in o.es:
        exact = exact & np.broadcast_to(e == 0, o.y.shape)
    worst = 1.0 if o.out_dtype == "bool" else _INF
    return np.where(exact, 0.0, worst), _zeros(o)


def floor_divide(o: Operands) -> tuple[Any, Any]:
    """``floor(x / d)`` of an integer ``x`` off by at most ``e``: off by at most
    ``e / |d| + 1``."""
    e = o.es[0]
    d = abs(float(o.attrs["divisor"]))
    return np.where(e == 0, 0.0, e / d + 1.0), _zeros(o)


def remainder(o: Operands) -> tuple[Any, Any]:
    """``x mod d`` (the sign of ``d``): any two results differ by less than ``|d|``."""
    e = o.es[0]
    return np.where(e == 0, 0.0, abs(float(o.attrs["divisor"])) - 1.0), _zeros(o)


def int_total(o: Operands) -> tuple[Any, Any]:
    """sum of bools / ints (int64): errors add up, nothing rounds."""
    dim, keep, _ = _reduction(o)
    return _unkeep(_red(np.sum, o.es[0], dim), dim, keep), _zeros(o)


def int_cumsum(o: Operands) -> tuple[Any, Any]:
    return np.cumsum(o.es[0], axis=int(o.attrs["dim"])), _zeros(o)


def reads_arg(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """argmax / argmin / any / all along their one ``dim``."""
    m = masks[0]
    dim = int(attrs["dim"]) % max(m.ndim, 1)
    return np.broadcast_to(_unkeep(np.any(m, axis=dim, keepdims=True), dim, attrs["keepdim"]),
                           y.shape)
