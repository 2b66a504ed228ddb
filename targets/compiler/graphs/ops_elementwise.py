"""Op family ``elementwise`` of the compiler-graph catalogue (:data:`.ops.FAMILIES`): float
elementwise ops beyond the core -- unary math, activations, rounding and discontinuous ops,
binary and ternary arithmetic.

Each op is one :class:`~.ops.OpSpec` record made with :func:`.ops._spec` (``fn=`` the
module-level torch function below, whose import path is the op's stable fx target).  None is
fused by the in-project compiler (``fusing=None``: it runs them eagerly), so what they reach is
Inductor's lowering and its decompositions (softplus, mish, logaddexp, lerp, round with
``decimals``, remainder, floor_divide, nan_to_num, heaviside, ...), where eager and compiled
code take different paths.

Why the bounds are sound (the model is :mod:`.bound`'s, ``e_y = prop + comp + round``):

* **prop** (the inputs' errors carried through): for a monotone function the exact sup of
  ``|f(x +- e) - f(x)|``, evaluated by the op's own float64 torch function (:func:`_monotone`);
  for a non-monotone smooth one its Lipschitz constant (silu 1.0999, mish 1.0885, hardswish 1.5,
  ... measured on a fine grid and rounded up) times ``e``; for binary ops the partial
  derivatives' sup over the error box (logaddexp: the weights sum to 1; atan2: ``|d| / r_min``;
  xlogy, lerp, addcmul, addcdiv: the product rules).
* **discontinuities** (floor, ceil, trunc, round, frac, sign, sgn, threshold, hardshrink,
  softplus's threshold, fmod, remainder, floor_divide, heaviside, copysign, atan2's branch cut):
  an *exact* input (``e = 0``) is decided exactly -- the reference's decision is the only right
  one, ties included (round half to even: ``round(2.5) = 2``; ``threshold`` keeps ``x`` only for
  ``x > threshold``) -- so a wrong compiled decision is a value error of a whole jump.  Where the
  input's error interval ``[x - e, x + e]`` (widened by one float64 ulp, :func:`_widen`) reaches a
  discontinuity the bound covers the jump: a step function's bound is the sup of
  ``|f(t) - f(x)|`` over the interval's end points (:func:`_steps`, e.g. floor: ``floor(x + e) -
  floor(x)``, at most ``1 + e``); a sawtooth (frac, fmod, remainder) adds the slope part.  A
  zero's *sign* is never taken as certain where it decides a result (copysign's sign operand,
  atan2 on its branch cut): a selection op may return ``-0.0`` where the reference has ``+0.0``.
* **comp** (the op's own float32 evaluation, any formula a compiler might use): a few float32
  ulps of ``|y| + prop`` plus the argument conditioning of the formula (``(4 + 2|x|) u32`` for
  exponentials as :func:`.error_rules.exp` does; ``2x^2 u32`` for erfc's ``exp(-x^2)``), an
  absolute term where a formula cancels (``log1p(exp(-|a - b|))``, ``x - tanh(x)``), and ``u``
  terms (the graph dtype's unit roundoff) for eager kernels that are composites of several ops,
  each rounded to the dtype (softsign, tanhshrink, deg2rad).  Attribute constants not exact in
  float32 (``0.01``, ``pi / 180``) are one more float32 rounding.  Comparisons with an attribute
  (threshold, hardshrink) widen the undecided zone by the attribute's rounding to the dtype,
  in case a kernel compares with the rounded constant.
* **overflow of partial results**: addcmul's product, addcdiv's quotient (and both ops'
  ``value * t1``, eager's first step), lerp's difference, round's ``x * 10^d``, the quotient
  ``a / b`` of fmod, remainder and floor_divide (vectorized Sleef ``fmod`` returns NaN where it
  overflows) and floor_divide's ``a - fmod(a, b)`` may overflow float32 where the result does
  not; their partial-magnitude rules (:func:`_partial_product` ...) let :mod:`.bound` leave
  those elements unjudged.

Domains: log2, log10, log1p and xlogy's second operand are ``positive``; the divisors of fmod,
remainder_tensor, floor_divide_tensor and addcdiv are ``nonzero`` (the generator's ``abs`` +
``add_scalar(0.5)`` guards make both hold).  asin / acos / atanh would need a new ``unit``
domain ([-1, 1]): not declared here (:mod:`.generate` has no guard for it).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch

from fuzzkit.targets.compiler.graphs import error_rules as er
from fuzzkit.targets.compiler.graphs import intervals as iv
from fuzzkit.targets.compiler.graphs.error_rules import U32, Operands
from fuzzkit.targets.compiler.graphs.ops import (
    Attr,
    OpSpec,
    SpecError,
    _attrs_none,
    _infer_broadcast,
    _infer_same,
    _rule_broadcast,
    _rule_same,
    _spec,
    same_float_rule,
)

_F = torch.nn.functional
_INF = np.inf
_PI = math.pi

# ----------------------------------------------------------------------------------------------
# torch functions (fx call_function targets; names equal op names, attrs are kwargs)
# ----------------------------------------------------------------------------------------------


def exp2(a):
    return torch.exp2(a)


def expm1(a):
    return torch.expm1(a)


def log2(a):
    return torch.log2(a)


def log10(a):
    return torch.log10(a)


def log1p(a):
    return torch.log1p(a)


def sinh(a):
    return torch.sinh(a)


def cosh(a):
    return torch.cosh(a)


def atan(a):
    return torch.atan(a)


def asinh(a):
    return torch.asinh(a)


def erf(a):
    return torch.erf(a)


def erfc(a):
    return torch.erfc(a)


def square(a):
    return torch.square(a)


def silu(a):
    return _F.silu(a)


def mish(a):
    return _F.mish(a)


def softplus(a, beta, threshold):
    return _F.softplus(a, beta=beta, threshold=threshold)


def elu(a, alpha):
    return _F.elu(a, alpha=alpha)


def selu(a):
    return _F.selu(a)


def celu(a, alpha):
    return _F.celu(a, alpha=alpha)


def leaky_relu(a, negative_slope):
    return _F.leaky_relu(a, negative_slope=negative_slope)


def hardtanh(a, min_val, max_val):
    return _F.hardtanh(a, min_val=min_val, max_val=max_val)


def hardsigmoid(a):
    return _F.hardsigmoid(a)


def hardswish(a):
    return _F.hardswish(a)


def softsign(a):
    return _F.softsign(a)


def logsigmoid(a):
    return _F.logsigmoid(a)


def tanhshrink(a):
    return _F.tanhshrink(a)


def softshrink(a, lambd):
    return _F.softshrink(a, lambd=lambd)


def hardshrink(a, lambd):
    return _F.hardshrink(a, lambd=lambd)


def deg2rad(a):
    return torch.deg2rad(a)


def rad2deg(a):
    return torch.rad2deg(a)


def sign(a):
    return torch.sign(a)


def sgn(a):
    return torch.sgn(a)


def floor(a):
    return torch.floor(a)


def ceil(a):
    return torch.ceil(a)


def trunc(a):
    return torch.trunc(a)


def round(a, decimals):  # the op's name (its fx target), shadowing the builtin here
    return torch.round(a, decimals=decimals)


def frac(a):
    return torch.frac(a)


def threshold(a, threshold, value):
    return _F.threshold(a, threshold, value)


def nan_to_num(a, nan, posinf, neginf):
    return torch.nan_to_num(a, nan=nan, posinf=posinf, neginf=neginf)


def logaddexp(a, b):
    return torch.logaddexp(a, b)


def logaddexp2(a, b):
    return torch.logaddexp2(a, b)


def atan2(a, b):
    return torch.atan2(a, b)


def hypot(a, b):
    return torch.hypot(a, b)


def copysign(a, b):
    return torch.copysign(a, b)


def fmod(a, b):
    return torch.fmod(a, b)


def remainder_tensor(a, b):
    return torch.remainder(a, b)


def floor_divide_tensor(a, b):
    return torch.floor_divide(a, b)


def xlogy(a, b):
    return torch.xlogy(a, b)


def heaviside(a, b):
    return torch.heaviside(a, b)


def lerp(a, b, c):
    return torch.lerp(a, b, c)


def lerp_scalar(a, b, weight):
    return torch.lerp(a, b, weight)


def addcmul(a, b, c, value):
    return torch.addcmul(a, b, c, value=value)


def addcdiv(a, b, c, value):
    return torch.addcdiv(a, b, c, value=value)


def clamp_tensor(a, b, c):
    return torch.clamp(a, min=b, max=c)


# ----------------------------------------------------------------------------------------------
# shared pieces of the rules
# ----------------------------------------------------------------------------------------------

_DTYPE_OF_U = {2.0**-24: "float32", 2.0**-11: "float16", 2.0**-8: "bfloat16"}


def _f64(fn: Callable[..., torch.Tensor], *xs: Any, **attrs: Any) -> np.ndarray:
    """``fn`` (an op's torch function) on float64 arrays: the reference's own function.  A
    C-ordered copy of each operand *of its own shape*: ``np.ascontiguousarray`` would turn a
    0-d operand (a scalar node, ``x + e`` of one) into shape ``(1,)``, and the bound of a
    scalar node would then no longer broadcast to it."""
    ts = [torch.from_numpy(np.array(x, dtype=np.float64, order="C")) for x in xs]
    return fn(*ts, **attrs).numpy()


def _widen(x: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The interval ``[x - e, x + e]`` rounded outwards (one float64 ulp each side), so a
    discontinuity the true interval reaches is never lost to the float64 rounding of its ends."""
    return np.nextafter(x - e, -_INF), np.nextafter(x + e, _INF)


def _monotone(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``sup |f(t) - f(x)|`` over ``|t - x| <= e`` for a monotone ``f`` (its ends); 0 at exact
    inputs.  Also exact for monotone *step* functions when ``fn`` is applied to the widened
    interval (:func:`_steps`)."""
    fx = fn(x)
    up = np.abs(fn(x + e) - fx)
    down = np.abs(fx - fn(x - e))
    return np.where(e > 0, np.maximum(up, down), 0.0)


def _steps(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The jump of a monotone step function (floor, sign, ...) over the widened error interval:
    ``max(f(hi) - f(x), f(x) - f(lo))``; 0 at exact inputs (decided exactly)."""
    lo, hi = _widen(x, e)
    fx = fn(x)
    return np.where(e > 0, np.maximum(np.abs(fn(hi) - fx), np.abs(fx - fn(lo))), 0.0)


def _rounded_to_dtype(value: float, u: float) -> float:
    """``value`` rounded to the graph dtype (known by its unit roundoff ``u``)."""
    from fuzzkit.values import round_to

    dtype = _DTYPE_OF_U.get(u, "float32")
    return float(np.asarray(round_to(np.array([value]), dtype), dtype=np.float64)[0])


def _constant_zone(c: float, u: float) -> tuple[float, float]:
    """Where a comparison with the attribute ``c`` may go either way because a kernel compares
    with ``c`` rounded to the dtype or to float32 (an attribute from a file need not be exact)."""
    near = [c, _rounded_to_dtype(c, u), float(np.float32(c))]
    return min(near), max(near)


def _within(x: np.ndarray, e: np.ndarray, zone: tuple[float, float]) -> np.ndarray:
    """Where ``[x - e, x + e]`` meets the closed ``zone`` and is not decided exactly: a
    comparison with a point of the zone there may go either way."""
    lo, hi = _widen(x, e)
    exact_point = zone[0] == zone[1]
    meets = (lo <= zone[1]) & (hi >= zone[0])
    return meets & (e > 0) if exact_point else meets


def _mag(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    return np.abs(x) + e


def _bcast(o: Operands, prop: Any, comp: Any) -> tuple[np.ndarray, np.ndarray]:
    return np.broadcast_to(prop, o.y.shape), np.broadcast_to(comp, o.y.shape)


# ----------------------------------------------------------------------------------------------
# error rules: (Operands) -> (prop, comp)
# ----------------------------------------------------------------------------------------------


def _monotone_rule(fn: Callable[..., torch.Tensor], comp: Callable[[Operands, Any], Any]):
    """Error rule of a monotone unary op: the exact sup of its change over the error interval,
    and ``comp(o, prop)``."""

    def rule(o: Operands) -> tuple[Any, Any]:
        f = lambda t: _f64(fn, t, **o.attrs)  # noqa: E731
        prop = _monotone(f, o.xs[0], o.es[0])
        return prop, comp(o, prop)

    rule.__doc__ = f"{fn.__name__}: monotone, the exact change over the error interval."
    return rule


def _lipschitz_rule(lip: float, comp: Callable[[Operands, Any], Any]):
    """Error rule of a smooth unary op that is not monotone: ``lip * e``."""

    def rule(o: Operands) -> tuple[Any, Any]:
        prop = lip * o.es[0]
        return prop, comp(o, prop)

    return rule


def _c_exp(o: Operands, prop: Any) -> Any:
    """exp2, expm1, sinh, cosh: a few ulps plus the argument conditioning ``2|x| u32`` (an
    ``exp(x ln 2)`` or ``exp(x) - exp(-x)`` formula rounds its argument)."""
    return (4 + 2 * np.abs(o.xs[0])) * U32 * (o.ay + prop)


def _c_log(o: Operands, prop: Any) -> Any:
    """log2, log10, log1p: ``log(x) / ln b`` formulas: a few ulps of the result, a few absolute
    (``log`` is only absolutely accurate near 1; ``log(1 + x)`` rounds ``1 + x``)."""
    return 8 * U32 * (o.ay + prop) + 8 * U32


def _c_few(n: float) -> Callable[[Operands, Any], Any]:
    def comp(o: Operands, prop: Any) -> Any:
        return n * U32 * (o.ay + prop)

    return comp


def _cosh(o: Operands) -> tuple[Any, Any]:
    """cosh is even and convex: the largest change over ``[x - e, x + e]`` is towards the larger
    magnitude, ``cosh(|x| + e) - cosh(x)``."""
    x, e = o.xs[0], o.es[0]
    prop = np.where(e > 0, np.cosh(np.abs(x) + e) - np.cosh(x), 0.0)
    return prop, _c_exp(o, prop)


def _square(o: Operands) -> tuple[Any, Any]:
    """``(|x| + e)^2 - x^2``; one product rounding."""
    x, e = o.xs[0], o.es[0]
    prop = (2 * np.abs(x) + e) * e
    return prop, U32 * (o.ay + prop)


def _c_erf(o: Operands, prop: Any) -> Any:
    """erf: ATen's vectorized ``erf`` (Inductor's CPU code) is Abramowitz & Stegun 7.1.26, an
    absolute error of up to 1.5e-7 (``2.5 u32``; measured 3.2e-8 at ``x = 1e-3``, 68 times a
    relative bound), so an absolute ``8 u32`` as the core gelu rule allows for its erf."""
    return 6 * U32 * (o.ay + prop) + 8 * U32


def _c_erfc(o: Operands, prop: Any) -> Any:
    """erfc: ``exp(-x^2)``-based formulas round ``x^2``: relative ``2 x^2 u32``."""
    x = o.xs[0]
    return (8 + 2 * x * x) * U32 * (o.ay + prop)


def _c_sigmoidal(o: Operands, prop: Any) -> Any:
    """silu, mish: ``x * g(x)`` with ``g`` from exp / log1p / tanh: ``exp``'s argument
    conditioning over ``|x|``, a few ulps, an absolute term for ``g``'s own error times
    ``|x|``; ``u`` for an eager low-precision kernel that rounds ``g``."""
    ax = _mag(o.xs[0], o.es[0])
    return ((8 + ax) * U32 + o.u) * (o.ay + prop) + (8 * U32 + o.u) * ax


def _softplus_parts(o: Operands) -> tuple[np.ndarray, np.ndarray]:
    """softplus: the jump at ``beta x = threshold`` and where it may be taken: where ``beta x``
    (with its error, and its float32 rounding unless exact) may be on either side of the
    threshold (or of its rounding to the dtype); a tie of exact values is decided exactly."""
    x, e = o.xs[0], o.es[0]
    beta, th = float(o.attrs["beta"]), float(o.attrs["threshold"])
    jump = math.log1p(math.exp(-th)) / abs(beta) if th > -700 else _INF
    bx = beta * x  # exact in float64 (a float32 times a short constant) ...
    with np.errstate(over="ignore", invalid="ignore"):
        exact = np.float32(bx) == bx  # ... and in float32 unless it needs more bits
    zlo, zhi = _constant_zone(th, o.u)
    slack = abs(beta) * e + np.where(exact, 0.0, 4 * U32 * np.abs(bx))
    near = (bx + slack >= zlo) & (bx - slack <= zhi) & ((slack > 0) | (zlo != zhi))
    return near, np.full(np.shape(x), jump)


def _softplus(o: Operands) -> tuple[Any, Any]:
    """Lipschitz 1 (``sigmoid(beta x)``) on each branch, plus the downward jump
    ``log1p(exp(-threshold)) / |beta|`` where ``beta x`` may fall on either side of
    ``threshold``; the log branch's ``log1p(exp(beta x)) / beta`` rounds ``beta x``
    (``|x| u32`` absolute after the division) and a few ulps."""
    x, e = o.xs[0], o.es[0]
    beta = float(o.attrs["beta"])
    near, jump = _softplus_parts(o)
    prop = e + np.where(near, jump, 0.0)
    comp = (8 + 2 * np.abs(beta * x)) * U32 * (o.ay + prop) + 8 * U32 * (_mag(x, e) + 1 / abs(beta))
    return prop, comp


def _elu(o: Operands) -> tuple[Any, Any]:
    """``alpha expm1(x)`` below 0: Lipschitz ``max(1, |alpha|)``; exact above 0."""
    alpha = float(o.attrs["alpha"])
    prop = max(1.0, abs(alpha)) * o.es[0]
    comp = np.where(o.xs[0] - o.es[0] > 0, 0.0,
                    8 * U32 * (o.ay + prop) + 4 * U32 * abs(alpha))
    return prop, comp


_SELU_SCALE = 1.0507009873554804934193349852946
_SELU_ALPHA = 1.6732632423543772848170429916717


def _selu(o: Operands) -> tuple[Any, Any]:
    """``scale * (x or alpha expm1(x))``: Lipschitz ``scale * alpha``; the constants are not
    float32 values (two more roundings)."""
    prop = _SELU_SCALE * _SELU_ALPHA * o.es[0]
    comp = np.where(o.xs[0] - o.es[0] > 0, 3 * U32 * (o.ay + prop),
                    10 * U32 * (o.ay + prop) + 8 * U32)
    return prop, comp


def _celu(o: Operands) -> tuple[Any, Any]:
    """``alpha expm1(x / alpha)`` below 0 (Lipschitz 1): the quotient's rounding is relative
    ``|x / alpha| u32`` in the exponential."""
    alpha = float(o.attrs["alpha"])
    x, e = o.xs[0], o.es[0]
    prop = e
    comp = np.where(x - e > 0, 0.0,
                    (8 + 2 * _mag(x, e) / alpha) * U32 * (o.ay + prop) + 4 * U32 * alpha)
    return prop, comp


def _leaky_relu(o: Operands) -> tuple[Any, Any]:
    """``slope * x`` below 0 (Lipschitz ``max(1, |slope|)``): the product's rounding and the
    slope's (``0.01`` is not a float32, and may be a dtype constant in an eager kernel)."""
    s = float(o.attrs["negative_slope"])
    prop = max(1.0, abs(s)) * o.es[0]
    comp = np.where(o.xs[0] - o.es[0] > 0, 0.0, (2 * U32 + o.u) * (o.ay + prop))
    return prop, comp


def _hardsigmoid(o: Operands) -> tuple[Any, Any]:
    """``clamp(x / 6 + 1/2, 0, 1)`` (or ``relu6(x + 3) / 6``): Lipschitz 1/6; the sum's and the
    division's roundings."""
    x, e = o.xs[0], o.es[0]
    prop = e / 6
    return prop, 3 * U32 * (o.ay + prop) + 2 * U32 * (_mag(x, e) + 3) / 6


def _hardswish(o: Operands) -> tuple[Any, Any]:
    """``x * relu6(x + 3) / 6``: Lipschitz 1.5 (the slope at ``x = 3``); the roundings of
    ``x + 3``, the product and the division."""
    x, e = o.xs[0], o.es[0]
    prop = 1.5 * e
    m = _mag(x, e)
    return prop, 3 * U32 * (o.ay + prop) + 2 * U32 * m * (m + 3) / 6


def _composite(n32: float, nu: float, absolute: float = 0.0):
    """Comp of an op whose eager low-precision kernel is a composite of ``nu`` dtype-rounded
    steps (and ``n32`` float32 roundings anyway): relative to ``|y| + prop``."""

    def comp(o: Operands, prop: Any) -> Any:
        return (n32 * U32 + nu * o.u) * (o.ay + prop) + absolute * U32

    return comp


def _tanhshrink(o: Operands, prop: Any) -> Any:
    """``x - tanh(x)``: tanh's few ulps (and its rounding to the dtype, eagerly) do not shrink
    with the cancelling result."""
    t = np.minimum(1.0, _mag(o.xs[0], o.es[0]))
    return 2 * U32 * (o.ay + prop) + (6 * U32 + o.u) * t


def _softshrink(o: Operands, prop: Any) -> Any:
    """``x -+ lambd``: one float32 sum; ``lambd`` may be a dtype constant eagerly."""
    return 2 * U32 * (o.ay + prop) + o.u * abs(float(o.attrs["lambd"]))


def _hardshrink(o: Operands) -> tuple[Any, Any]:
    """``x`` where ``|x| > lambd``, else 0 (a selection): the jump ``|x| + e`` where ``|x|`` may
    fall on either side of ``lambd``; else Lipschitz 1 (or 0 inside the dead zone)."""
    x, e = o.xs[0], o.es[0]
    lam = float(o.attrs["lambd"])
    zone = _constant_zone(lam, o.u)
    ax = np.abs(x)
    lo, hi = _widen(ax, e)
    undecided = (lo <= zone[1]) & (hi >= zone[0]) & ((e > 0) | (zone[0] != zone[1]))
    prop = np.where(undecided, ax + e, np.where(ax > lam, e, 0.0))
    return prop, np.zeros_like(o.ay)


def _scaled(c: float):
    """deg2rad, rad2deg: ``x * c`` with a constant that is not a float32 (and may be a dtype
    constant in an eager kernel)."""

    def rule(o: Operands) -> tuple[Any, Any]:
        prop = c * o.es[0]
        return prop, (2 * U32 + o.u) * (o.ay + prop)

    return rule


def _step_rule(fn: Callable[[np.ndarray], np.ndarray]):
    """A monotone step function (floor, ceil, trunc, sign): exact at exact inputs (nothing
    computed: an integer-valued result of a dtype value is a dtype value), the jump over the
    widened error interval elsewhere."""

    def rule(o: Operands) -> tuple[Any, Any]:
        return _steps(fn, o.xs[0], o.es[0]), np.zeros_like(o.ay)

    return rule


def _partial_round(t: list[torch.Tensor], attrs: dict, fn: Any) -> Any:
    """round with ``decimals = d > 0``: eager's ``nearbyint(x 10^d) / 10^d`` and Inductor's
    ``round(x 10^d) (1 / 10^d)`` both form ``|x| 10^d`` first, which overflows float32 (an inf
    result) for a huge finite ``x`` whose result is ``x``; ``d <= 0`` only scales down."""
    d = int(attrs["decimals"])
    if d <= 0:
        return np.zeros(t[0].shape)
    return (t[0] * 10.0**d).numpy()


def _round(o: Operands) -> tuple[Any, Any]:
    """round half to even of ``x * 10^d``, then scaled back.  ``d = 0``: a step function, exact
    at exact inputs.  ``d != 0``: the float32 product ``x * 10^d`` (or Inductor's ``x * 0.1``)
    is rounded unless it is exact in float32 (``d > 0`` and it fits), so a tie of the product
    may be decided either way there; the result is scaled by a reciprocal that is not a
    float32 (``0.1``): three roundings of ``|y|``."""
    x, e = o.xs[0], o.es[0]
    d = int(o.attrs["decimals"])
    if d == 0:
        return _steps(np.round, x, e), np.zeros_like(o.ay)
    s = 10.0**d
    p = x * s
    with np.errstate(over="ignore", invalid="ignore"):
        exact = (np.float32(p) == p) if d > 0 else np.zeros(np.shape(p), dtype=bool)
    ep = e * s * (1 + 2.0**-50) + np.where(exact, 0.0, 4 * U32 * np.abs(p))
    prop = _steps(np.round, p, ep) / s
    return prop, 4 * U32 * (o.ay + prop)


def _frac(o: Operands) -> tuple[Any, Any]:
    """``x - trunc(x)`` (exact in floating point: Sterbenz): slope 1 plus trunc's jumps."""
    x, e = o.xs[0], o.es[0]
    return e + _steps(np.trunc, x, e), np.zeros_like(o.ay)


def _threshold(o: Operands) -> tuple[Any, Any]:
    """``x`` where ``x > threshold``, else ``value`` (a selection): where ``x`` may be on either
    side, ``max(e, |x - value|)``; else ``e`` above, 0 below.  A tie ``x == threshold`` is
    decided exactly (``value``)."""
    x, e = o.xs[0], o.es[0]
    th, value = float(o.attrs["threshold"]), float(o.attrs["value"])
    undecided = _within(x, e, _constant_zone(th, o.u))
    prop = np.where(undecided, np.maximum(e, np.abs(x - value) + e), np.where(x > th, e, 0.0))
    return prop, np.zeros_like(o.ay)


def _nan_to_num(o: Operands) -> tuple[Any, Any]:
    """A finite ``x`` passes with its error; NaN and +-Inf (whose pattern the oracle holds the
    run to, where their bound is not NaN) become the attributes exactly."""
    x, e = o.xs[0], o.es[0]
    return np.where(np.isfinite(x), e, 0.0), np.zeros_like(o.ay)


def _logaddexp(log_of_two: float):
    """logaddexp (``log_of_two = 1``), logaddexp2 (``ln 2``): the partial derivatives are
    positive weights summing to 1, so the change is at most ``max(e_a, e_b)``; the formula
    ``max + log1p(exp(-|a - b|))`` has an absolute error of a few float32 ulps of 1 (the
    argument ``|a - b|``'s rounding is damped by ``exp(-|a - b|)``) and a relative one."""

    def rule(o: Operands) -> tuple[Any, Any]:
        (ea, eb) = o.es
        prop = np.maximum(ea, eb)
        return _bcast(o, prop, 2 * U32 * (o.ay + prop) + 12 * U32 / log_of_two)

    return rule


def _atan2(o: Operands) -> tuple[Any, Any]:
    """atan2(a, b): away from the origin and the branch cut (``a = 0, b < 0``), ``|grad| =
    1 / r``, so the change over the error box is at most ``(e_a + e_b) / r_min``; where the box
    reaches the cut or the origin, any angle: ``2 pi``.  A zero ``a`` on the cut (its sign
    picks ``+-pi``) is never taken as certain."""
    (a, b), (ea, eb) = o.xs, o.es
    amin = np.maximum(np.abs(a) - ea, 0.0)
    bmin = np.maximum(np.abs(b) - eb, 0.0)
    rmin = np.hypot(amin, bmin)
    on_cut = (amin == 0) & (b - eb <= 0)
    prop = np.where(on_cut, 2 * _PI,
                    np.minimum(2 * _PI, (ea + eb) / np.where(rmin > 0, rmin, 1.0)))
    prop = np.where((ea + eb == 0) & ~on_cut, 0.0, prop)
    return _bcast(o, prop, 4 * U32 * (o.ay + prop) + 8 * U32)


def _hypot(o: Operands) -> tuple[Any, Any]:
    """Lipschitz 1 in the Euclidean norm (``<= e_a + e_b``); ``sqrt(a^2 + b^2)``'s roundings."""
    prop = o.es[0] + o.es[1]
    return _bcast(o, prop, 3 * U32 * (o.ay + prop))


def _copysign(o: Operands) -> tuple[Any, Any]:
    """``|a|`` with ``b``'s sign (a selection, like neg): ``e_a`` where ``b``'s sign is certain;
    ``2|a| + e_a`` where ``b`` may be either sign -- its interval reaches 0, it is a zero (whose
    sign a selection op upstream may flip) or NaN (whose sign bit is no value's)."""
    (a, b), (ea, eb) = o.xs, o.es
    unsure = (np.abs(b) <= eb) | np.isnan(b)
    prop = np.where(unsure, 2 * np.abs(a) + ea, ea)
    return _bcast(o, prop, np.zeros(o.y.shape))


def _quotient_box(o: Operands) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The float64 quotient ``a / b`` and the (outward-rounded) range of ``a' / b'`` over the
    error box; infinite where ``b``'s interval reaches 0."""
    (a, b), (ea, eb) = o.xs, o.es
    q = a / b
    corners = [(a + sa * ea) / (b + sb * eb) for sa in (-1, 1) for sb in (-1, 1)]
    qlo = np.minimum.reduce(corners)
    qhi = np.maximum.reduce(corners)
    qlo = qlo - 2.0**-50 * np.abs(qlo)
    qhi = qhi + 2.0**-50 * np.abs(qhi)
    straddle = np.abs(b) <= eb
    return q, np.where(straddle, -_INF, qlo), np.where(straddle, _INF, qhi)


def _sawtooth(cell: Callable[[np.ndarray], np.ndarray], sign_of: str):
    """fmod (``cell = trunc``), remainder (``cell = floor``): ``a - cell(a / b) b``.  Where
    ``cell(a / b)`` is constant over the error box the result moves by ``e_a + |cell| e_b``;
    where it may change, anywhere within ``(-|b|, |b|)`` on the side of ``a`` (fmod) or ``b``
    (remainder): ``|y| + |b| + e_b``.  Exact inputs are decided exactly (``std::fmod`` is
    exact); eager remainder's ``fmod + b`` correction rounds once, Inductor's ``a -
    floor_divide(a, b) * b`` twice at the magnitude of ``a`` (measured: 26 times a bound of
    one rounding of ``|y|``)."""

    def rule(o: Operands) -> tuple[Any, Any]:
        b, (ea, eb) = o.xs[1], o.es
        q, qlo, qhi = _quotient_box(o)
        steady = cell(qlo) == cell(qhi)
        k = np.abs(cell(q))
        prop = np.where(steady, ea + k * eb, o.ay + np.abs(b) + eb)
        prop = np.where((ea == 0) & (eb == 0), 0.0, prop)
        if sign_of == "a":
            comp: Any = 0.0
        else:  # Inductor: a - floor_divide(a, b) * b, two roundings of about |a| + |b|
            comp = U32 * (o.ay + prop) + 2 * U32 * (_mag(o.xs[0], ea) + _mag(b, eb))
        return _bcast(o, prop, comp)

    return rule


def _floor_divide(o: Operands) -> tuple[Any, Any]:
    """Python's floor of ``a / b`` (``(a - fmod(a, b)) / b`` and a correction to the nearest
    integer): exact at exact inputs up to the quotient's own float32 rounding (large
    quotients, ``2 |y| u32``); the jump of floor over the error box elsewhere."""
    q, qlo, qhi = _quotient_box(o)
    fq = np.floor(q)
    prop = np.maximum(np.abs(np.floor(qhi) - fq), np.abs(fq - np.floor(qlo)))
    prop = np.where((o.es[0] == 0) & (o.es[1] == 0), 0.0, prop)
    return _bcast(o, prop, 2 * U32 * (o.ay + prop))


def _xlogy(o: Operands) -> tuple[Any, Any]:
    """``a log(b)`` (0 at ``a = 0``): the product rule with log's change over ``b``'s interval
    (``log(b) - log(b - e_b)``, infinite where it reaches 0); log's few ulps times ``|a|``."""
    (a, b), (ea, eb) = o.xs, o.es
    lb = np.log(b)
    dl = np.where(b - eb > 0, -np.log1p(-eb / b), _INF)
    dl = np.where(eb == 0, 0.0, dl)
    aa = np.abs(a)
    prop = np.abs(lb) * ea + aa * dl + ea * dl
    comp = (aa + ea) * ((4 * U32 + o.u) * (np.abs(lb) + dl) + 4 * U32) + U32 * (o.ay + prop)
    return _bcast(o, prop, comp)


def _heaviside(o: Operands) -> tuple[Any, Any]:
    """0 below 0, ``b`` at 0, 1 above (a selection): where ``a``'s interval reaches 0 any of
    the three; at an exact 0, ``b``'s error; else nothing."""
    (a, b), (ea, eb) = o.xs, o.es
    y = o.y
    undecided = (np.abs(a) <= ea) & (ea > 0)
    spread = np.maximum.reduce([np.abs(y), np.abs(y - 1), np.abs(y - b) + eb])
    prop = np.where(undecided, spread, np.where(a == 0, eb, 0.0))
    return _bcast(o, prop, np.zeros(o.y.shape))


def _lerp_prop(s, e, w, es, ee, ew):
    """``s + w (e - s)``: partials ``1 - w``, ``w``, ``e - s``, and the bilinear term."""
    return np.abs(1 - w) * es + np.abs(w) * ee + np.abs(e - s) * ew + ew * (es + ee)


def _lerp(o: Operands) -> tuple[Any, Any]:
    """lerp with a tensor weight: eager's ``w < 0.5 ? s + w (e - s) : e - (e - s)(1 - w)`` or a
    decomposition's ``(w - 1)(e - s) + e``: each rounding is at most ``u32 (1 + |w|)(|s| +
    |e|)`` or ``u32 |y|``."""
    (s, e, w), (es, ee, ew) = o.xs, o.es
    prop = _lerp_prop(s, e, w, es, ee, ew)
    m = (_mag(s, es) + _mag(e, ee)) * (1 + _mag(w, ew))
    return _bcast(o, prop, 4 * U32 * (m + o.ay + prop))


def _lerp_scalar(o: Operands) -> tuple[Any, Any]:
    (s, e), (es, ee) = o.xs, o.es
    w = float(o.attrs["weight"])
    prop = _lerp_prop(s, e, w, es, ee, 0.0)
    m = (_mag(s, es) + _mag(e, ee)) * (1 + abs(w))
    return _bcast(o, prop, 4 * U32 * (m + o.ay + prop))


def _addcmul(o: Operands) -> tuple[Any, Any]:
    """``a + v b c``: the product rule; three roundings (``b c``, ``v *``, ``+``), each of
    which an eager low-precision kernel may make in the dtype."""
    (b, c), (ea, eb, ec) = o.xs[1:], o.es
    v = abs(float(o.attrs["value"]))
    prop = ea + v * (np.abs(b) * ec + np.abs(c) * eb + eb * ec)
    m = v * _mag(b, eb) * _mag(c, ec)
    return _bcast(o, prop, (3 * U32 + 2 * o.u) * (m + o.ay + prop))


def _addcdiv(o: Operands) -> tuple[Any, Any]:
    """``a + v b / c``: the quotient rule (infinite where ``c``'s interval reaches 0)."""
    (b, c), (ea, eb, ec) = o.xs[1:], o.es
    v = abs(float(o.attrs["value"]))
    ac = np.abs(c)
    dq = np.where(ac > ec, (eb * ac + np.abs(b) * ec) / (ac * np.maximum(ac - ec, 1e-300)), _INF)
    dq = np.where((eb == 0) & (ec == 0), 0.0, dq)
    prop = ea + v * dq
    m = v * (np.abs(b / c) + dq)
    return _bcast(o, prop, (4 * U32 + 2 * o.u) * (m + o.ay + prop))


def _clamp_tensor(o: Operands) -> tuple[Any, Any]:
    """``min(max(x, lo), hi)``: max and min are 1-Lipschitz in the sup norm; a selection."""
    prop = np.maximum.reduce([np.broadcast_to(e, o.y.shape) for e in o.es])
    return prop, np.zeros(o.y.shape)


# ----------------------------------------------------------------------------------------------
# partial-magnitude rules (|inputs|, finite ones only)
# ----------------------------------------------------------------------------------------------


def _partial_product(t: list[torch.Tensor], attrs: dict, fn: Any) -> Any:
    """addcmul: the product ``|b c|`` (and ``|v b c|``) before the sum, and the sum; eager's CPU
    kernel computes ``(v b) c``, so also ``|v b|``, which overflows first where ``|v| > 1``
    and ``|c| < 1`` (Inductor's ``v (b c)`` has ``|b c|`` instead)."""
    v = abs(float(attrs["value"]))
    return (t[0] + t[1] * t[2] * max(1.0, v) + v * t[1]).numpy()


def _partial_quotient(t: list[torch.Tensor], attrs: dict, fn: Any) -> Any:
    """addcdiv: the quotient ``|b / c|`` (and ``|v b / c|``) before the sum, and the sum (a
    zero divisor: infinite); eager's CPU kernel computes ``(v b) / c``, so also ``|v b|``
    (overflows where ``|v| > 1`` even when ``|b / c|`` is small)."""
    v = abs(float(attrs["value"]))
    q = torch.nan_to_num(t[1] / t[2], nan=math.inf)
    return (t[0] + q * max(1.0, v) + v * t[1]).numpy()


def _partial_difference(t: list[torch.Tensor], attrs: dict, fn: Any) -> Any:
    """lerp: ``|e - s| <= |s| + |e|`` (times ``1 + |w|``, which also bounds the result)."""
    w = t[2] if len(t) > 2 else abs(float(attrs["weight"]))
    return ((t[0] + t[1]) * (1 + w)).numpy()


def _partial_quotient_floor(t: list[torch.Tensor], attrs: dict, fn: Any) -> Any:
    """floor_divide_tensor, fmod, remainder_tensor: ``|a - fmod(a, b)| <= |a| + |b|`` (also
    Inductor's remainder ``a - floor(a / b) b``) and the quotient ``|a / b| + 1`` (a zero
    divisor: infinite).  The vectorized CPU ``fmod`` (Sleef, in eager ATen and in Inductor's
    vectorized kernels; remainder is built on it) returns NaN where ``|a / b|`` passes float32's
    largest value, although the scalar ``std::fmod`` and the reference are exact there."""
    q = torch.nan_to_num(t[0] / t[1], nan=math.inf)
    return (t[0] + t[1] + q + 1).numpy()


# ----------------------------------------------------------------------------------------------
# value-range rules
# ----------------------------------------------------------------------------------------------


def _sampled(fn: Callable[..., torch.Tensor],
             breaks: Callable[[dict], Sequence[float]] = lambda a: ()):
    """Value range of an op that is monotone between the points ``breaks(attrs)`` (extrema,
    discontinuities): its float64 torch function at the interval's ends and on both sides of
    every break inside, widened by a float64 rounding."""

    def rule(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
             ) -> iv.Interval:
        lo, hi = ivals[0]
        pts = [lo, hi]
        for b in breaks(attrs):
            if lo < b < hi:
                pts += [b, math.nextafter(b, -math.inf), math.nextafter(b, math.inf)]
        with np.errstate(all="ignore"):
            vals = _f64(fn, np.array(pts, dtype=np.float64), **attrs)
        if np.any(np.isnan(vals)):
            return (-math.inf, math.inf)
        vlo, vhi = float(vals.min()), float(vals.max())
        return (vlo - 1e-12 * (1 + abs(vlo)), vhi + 1e-12 * (1 + abs(vhi)))

    return rule


def _iv_cosh(attrs, ivals, in_shapes, out_shape):
    lo, hi = ivals[0]
    m = max(abs(lo), abs(hi))
    n = 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))
    return (math.cosh(min(n, 710.0)), math.cosh(min(m, 710.0)) if m < 710 else math.inf)


def _iv_square(attrs, ivals, in_shapes, out_shape):
    lo, hi = ivals[0]
    m = max(abs(lo), abs(hi))
    return (0.0 if lo <= 0 <= hi else min(lo * lo, hi * hi), m * m)


def _iv_softplus(attrs, ivals, in_shapes, out_shape):
    """Two increasing branches: ``log1p(exp(beta x)) / beta`` where ``beta x <= threshold``,
    ``x`` beyond; the union of their ranges over the interval."""
    lo, hi = ivals[0]
    beta, th = float(attrs["beta"]), float(attrs["threshold"])
    cut = th / beta

    def g(x: float) -> float:
        z = beta * x
        if z > 700:
            return x
        return math.log1p(math.exp(z)) / beta if z > -700 else 0.0

    parts = []
    log_side = (lo, min(hi, cut)) if beta > 0 else (max(lo, cut), hi)
    x_side = (max(lo, cut), hi) if beta > 0 else (lo, min(hi, cut))
    if log_side[0] <= log_side[1]:
        parts.append((g(log_side[0]), g(log_side[1])))
    if x_side[0] <= x_side[1]:
        parts.append(x_side)
    vlo = min(p[0] for p in parts)
    vhi = max(p[1] for p in parts)
    return (vlo - 1e-12 * (1 + abs(vlo)), vhi + 1e-12 * (1 + abs(vhi)))


def _iv_hardtanh(attrs, ivals, in_shapes, out_shape):
    return iv.clamp({"min": attrs["min_val"], "max": attrs["max_val"]}, ivals, in_shapes,
                    out_shape)


def _iv_round(attrs, ivals, in_shapes, out_shape):
    lo, hi = ivals[0]
    s = 10.0 ** int(attrs["decimals"])
    return (math.floor(lo * s) / s if math.isfinite(lo) else lo,
            math.ceil(hi * s) / s if math.isfinite(hi) else hi)


def _iv_frac(attrs, ivals, in_shapes, out_shape):
    lo, hi = ivals[0]
    return (max(-1.0, min(lo, 0.0)), min(1.0, max(hi, 0.0)))


def _iv_threshold(attrs, ivals, in_shapes, out_shape):
    lo, hi = ivals[0]
    th, value = float(attrs["threshold"]), float(attrs["value"])
    vlo, vhi = value, value
    if hi > th:
        vlo, vhi = min(vlo, max(lo, th)), max(vhi, hi)
    return (vlo, vhi)


def _iv_nan_to_num(attrs, ivals, in_shapes, out_shape):
    lo, hi = ivals[0]
    pos, neg = float(attrs["posinf"]), float(attrs["neginf"])
    vlo = neg if lo == -math.inf else lo
    vhi = pos if hi == math.inf else hi
    nan = float(attrs["nan"])
    return (min(vlo, nan, neg if hi == -math.inf else vlo),
            max(vhi, nan, pos if lo == math.inf else vhi))


def _iv_hardshrink(attrs, ivals, in_shapes, out_shape):
    lo, hi = ivals[0]
    return (min(lo, 0.0), max(hi, 0.0))


def _iv_increasing2(fn: Callable[[float, float], float]):
    """A binary op increasing in both operands (logaddexp, logaddexp2)."""

    def rule(attrs, ivals, in_shapes, out_shape):
        (lo, hi), (lo2, hi2) = ivals
        with np.errstate(all="ignore"):
            v = _f64(fn, np.array([lo, hi]), np.array([lo2, hi2]))
        if np.any(np.isnan(v)):
            return (-math.inf, math.inf)
        return (float(v[0]) - 1e-12 * (1 + abs(v[0])), float(v[1]) + 1e-12 * (1 + abs(v[1])))

    return rule


def _iv_angle(attrs, ivals, in_shapes, out_shape):
    return (-_PI, _PI)


def _abs_range(lo: float, hi: float) -> tuple[float, float]:
    return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))


def _iv_hypot(attrs, ivals, in_shapes, out_shape):
    (alo, ahi), (blo, bhi) = _abs_range(*ivals[0]), _abs_range(*ivals[1])
    return (math.hypot(alo, blo), math.hypot(ahi, bhi))


def _iv_copysign(attrs, ivals, in_shapes, out_shape):
    mlo, mhi = _abs_range(*ivals[0])
    lo2, hi2 = ivals[1]
    if lo2 > 0:
        return (mlo, mhi)
    if hi2 < 0:
        return (-mhi, -mlo)
    return (-mhi, mhi)


def _iv_fmod(attrs, ivals, in_shapes, out_shape):
    (lo, hi), (lo2, hi2) = ivals
    big = max(abs(lo2), abs(hi2))
    return (min(0.0, max(lo, -big)), max(0.0, min(hi, big)))


def _iv_remainder(attrs, ivals, in_shapes, out_shape):
    lo2, hi2 = ivals[1]
    big = max(abs(lo2), abs(hi2))
    if lo2 > 0:
        return (0.0, big)
    if hi2 < 0:
        return (-big, 0.0)
    return (-big, big)


def _iv_floor_divide(attrs, ivals, in_shapes, out_shape):
    lo, hi = iv.div(attrs, ivals, in_shapes, out_shape)
    return (math.floor(lo) if math.isfinite(lo) else lo,
            math.floor(hi) if math.isfinite(hi) else hi)


def _iv_xlogy(attrs, ivals, in_shapes, out_shape):
    log_b = iv.log(attrs, [ivals[1]], in_shapes, out_shape)
    lo, hi = iv.mul(attrs, [ivals[0], log_b], in_shapes, out_shape)
    return (min(lo, 0.0), max(hi, 0.0))


def _iv_heaviside(attrs, ivals, in_shapes, out_shape):
    return (min(0.0, ivals[1][0]), max(1.0, ivals[1][1]))


def _scale(ival: iv.Interval, c: float) -> iv.Interval:
    return iv._products(ival[0], ival[1], c, c)


def _iv_lerp(attrs, ivals, in_shapes, out_shape):
    s, e, w = ivals
    diff = iv.sub(attrs, [e, s], in_shapes, out_shape)
    return iv.add(attrs, [s, iv.mul(attrs, [w, diff], in_shapes, out_shape)], in_shapes, out_shape)


def _iv_lerp_scalar(attrs, ivals, in_shapes, out_shape):
    w = float(attrs["weight"])
    s, e = ivals
    return iv.add(attrs, [_scale(s, 1 - w), _scale(e, w)], in_shapes, out_shape)


def _iv_addcmul(attrs, ivals, in_shapes, out_shape):
    a, b, c = ivals
    prod = _scale(iv.mul(attrs, [b, c], in_shapes, out_shape), float(attrs["value"]))
    return iv.add(attrs, [a, prod], in_shapes, out_shape)


def _iv_addcdiv(attrs, ivals, in_shapes, out_shape):
    a, b, c = ivals
    q = _scale(iv.div(attrs, [b, c], in_shapes, out_shape), float(attrs["value"]))
    return iv.add(attrs, [a, q], in_shapes, out_shape)


def _iv_clamp_tensor(attrs, ivals, in_shapes, out_shape):
    (la, ha), (lb, hb), (lc, hc) = ivals
    return (min(max(la, lb), lc), min(max(ha, hb), hc))


# ----------------------------------------------------------------------------------------------
# attributes: declarations, grids (edge values: 0, 1, negative, integer and half-integer), checks
# ----------------------------------------------------------------------------------------------

#: Every value below is exact in bfloat16 (so in every dtype) unless noted: a comparison with
#: the attribute is then the same in every kernel.
_BETAS = (1.0, 2.0, 0.5, 1.5, -1.0)
_THRESHOLDS = (20.0, 1.0, 0.0, 5.0, -2.0)
_ALPHAS = (1.0, 0.5, 2.0, 0.0, -1.0, 1.5)
_CELU_ALPHAS = (1.0, 0.5, 2.0, 1.5)
_SLOPES = (0.01, 0.2, 0.0, 1.0, -0.5, 2.0, 1.5)  # 0.01: torch's default, not a float32
_BOUNDS = (-4.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 4.0)
_LAMBDS = (0.5, 1.0, 0.0, 2.0, 0.25)
_DECIMALS = (0, 0, 0, 1, 2, -1)
_TH_VALUES = (0.0, -1.0, 1.0, 0.5, 20.0)
_NAN_FILL = (0.0, 1.0, -1.0, 2.5)
# no None (torch's default: the largest finite value *of the tensor's dtype*): the float64
# reference would put float64's largest there and the run its own dtype's -- a difference of
# formats, not of compilers (a campaign reported it as a mismatch:nan_to_num:float32:value)
_POSINF = (4.0, 65504.0, 0.0)
_NEGINF = (-4.0, -65504.0, 0.0)
_VALUES = (1.0, 0.5, -1.0, 2.0, 0.0, -0.25)
_WEIGHTS = (0.5, 0.0, 1.0, 0.25, 0.75, -0.5, 1.5, 2.0)

_FINITE = Attr("real", -65504, 65504)
_SMALL = Attr("real", -16, 16)


def _one_of(**grids: Sequence[Any]) -> Callable[..., dict]:
    """An attribute sampler: each attribute drawn from its grid (any ranks)."""

    def sample(ch: Any, ranks: Sequence[int]) -> dict:
        return {k: grid[ch.integers(0, len(grid) - 1)] for k, grid in grids.items()}

    return sample


def _attrs_hardtanh(ch: Any, ranks: Sequence[int]) -> dict:
    """``min_val <= max_val`` from the clamp grid; equal bounds (a constant) now and then."""
    i = ch.integers(0, len(_BOUNDS) - 1)
    j = ch.integers(i, len(_BOUNDS) - 1)
    return {"min_val": _BOUNDS[i], "max_val": _BOUNDS[j]}


def _infer_softplus(shapes, attrs):
    if float(attrs["beta"]) == 0:
        raise SpecError("softplus needs a nonzero beta")
    return list(shapes[0])


def _infer_hardtanh(shapes, attrs):
    if float(attrs["min_val"]) > float(attrs["max_val"]):
        raise SpecError("hardtanh needs min_val <= max_val")
    return list(shapes[0])


# ----------------------------------------------------------------------------------------------
# the records
# ----------------------------------------------------------------------------------------------

_UN = dict(rule=_rule_same, attrs=_attrs_none, reads=er.reads_elementwise, fusing=None,
           infer=_infer_same)
_BIN = dict(rule=_rule_broadcast, attrs=_attrs_none, reads=er.reads_elementwise, fusing=None,
            infer=_infer_broadcast, grows=True)


def _unary(name: str, fn: Callable[..., torch.Tensor], error: er.ErrorRule,
           interval: iv.IntervalRule, **kw: Any) -> OpSpec:
    parts = dict(_UN)
    parts.update(kw)
    return _spec(name, 1, "elementwise", fn=fn, error=error, interval=interval, **parts)


def _binary(name: str, fn: Callable[..., torch.Tensor], error: er.ErrorRule,
            interval: iv.IntervalRule, arity: int = 2, **kw: Any) -> OpSpec:
    parts = dict(_BIN)
    parts.update(kw)
    return _spec(name, arity, "elementwise", fn=fn, error=error, interval=interval, **parts)


def _at(*points: float) -> Callable[[dict], Sequence[float]]:
    return lambda attrs: points


def _mono(fn: Callable[..., torch.Tensor], comp: Callable[[Operands, Any], Any],
          breaks: Callable[[dict], Sequence[float]] = _at()) -> dict:
    return dict(error=_monotone_rule(fn, comp), interval=_sampled(fn, breaks))


RECORDS: list[OpSpec] = [
    # -- smooth unary math
    _unary("exp2", exp2, **_mono(exp2, _c_exp)),
    _unary("expm1", expm1, **_mono(expm1, _c_exp)),
    _unary("log2", log2, **_mono(log2, _c_log), domain="positive", positions=(0,)),
    _unary("log10", log10, **_mono(log10, _c_log), domain="positive", positions=(0,)),
    _unary("log1p", log1p, **_mono(log1p, _c_log), domain="positive", positions=(0,)),
    _unary("sinh", sinh, **_mono(sinh, _c_exp)),
    _unary("cosh", cosh, error=_cosh, interval=_iv_cosh),
    _unary("atan", atan, **_mono(atan, _c_few(4))),
    _unary("asinh", asinh, **_mono(asinh, _c_few(6))),
    _unary("erf", erf, **_mono(erf, _c_erf)),
    _unary("erfc", erfc, **_mono(erfc, _c_erfc)),
    _unary("square", square, error=_square, interval=_iv_square),
    # -- activations
    _unary("silu", silu, error=_lipschitz_rule(1.1, _c_sigmoidal),
           interval=_sampled(silu, _at(-1.2784645))),
    _unary("mish", mish, error=_lipschitz_rule(1.09, _c_sigmoidal),
           interval=_sampled(mish, _at(-1.1924))),
    _unary("softplus", softplus, error=_softplus, interval=_iv_softplus,
           attrs=_one_of(beta=_BETAS, threshold=_THRESHOLDS), infer=_infer_softplus,
           attributes={"beta": _SMALL, "threshold": Attr("real", -64, 64)}),
    _unary("elu", elu, error=_elu, interval=_sampled(elu, _at(0.0)),
           attrs=_one_of(alpha=_ALPHAS), attributes={"alpha": _SMALL}),
    _unary("selu", selu, error=_selu, interval=_sampled(selu)),
    _unary("celu", celu, error=_celu, interval=_sampled(celu),
           attrs=_one_of(alpha=_CELU_ALPHAS), attributes={"alpha": Attr("real", 2.0**-6, 16)}),
    _unary("leaky_relu", leaky_relu, error=_leaky_relu, interval=_sampled(leaky_relu, _at(0.0)),
           attrs=_one_of(negative_slope=_SLOPES), attributes={"negative_slope": _SMALL}),
    _unary("hardtanh", hardtanh, error=er.selected, interval=_iv_hardtanh, selects=True,
           attrs=_attrs_hardtanh, infer=_infer_hardtanh,
           attributes={"min_val": _FINITE, "max_val": _FINITE}),
    _unary("hardsigmoid", hardsigmoid, error=_hardsigmoid, interval=_sampled(hardsigmoid)),
    _unary("hardswish", hardswish, error=_hardswish,
           interval=_sampled(hardswish, _at(-1.5))),
    _unary("softsign", softsign, **_mono(softsign, _composite(3, 2))),
    _unary("logsigmoid", logsigmoid, **_mono(logsigmoid, _composite(4, 0, 8))),
    _unary("tanhshrink", tanhshrink, **_mono(tanhshrink, _tanhshrink)),
    _unary("softshrink", softshrink, attrs=_one_of(lambd=_LAMBDS),
           attributes={"lambd": Attr("real", 0, 65504)},
           error=_monotone_rule(softshrink, _softshrink), interval=_sampled(softshrink)),
    _unary("hardshrink", hardshrink, error=_hardshrink, interval=_iv_hardshrink, selects=True,
           attrs=_one_of(lambd=_LAMBDS), attributes={"lambd": Attr("real", 0, 65504)}),
    _unary("deg2rad", deg2rad, error=_scaled(_PI / 180), interval=_sampled(deg2rad)),
    _unary("rad2deg", rad2deg, error=_scaled(180 / _PI), interval=_sampled(rad2deg)),
    # -- rounding and other discontinuous unary ops
    _unary("sign", sign, error=_step_rule(np.sign), interval=_sampled(sign, _at(0.0))),
    _unary("sgn", sgn, error=_step_rule(np.sign), interval=_sampled(sgn, _at(0.0))),
    _unary("floor", floor, error=_step_rule(np.floor), interval=_sampled(floor)),
    _unary("ceil", ceil, error=_step_rule(np.ceil), interval=_sampled(ceil)),
    _unary("trunc", trunc, error=_step_rule(np.trunc), interval=_sampled(trunc)),
    _unary("round", round, error=_round, interval=_iv_round, attrs=_one_of(decimals=_DECIMALS),
           attributes={"decimals": Attr("int", -3, 3)}, partial=_partial_round),
    _unary("frac", frac, error=_frac, interval=_iv_frac),
    _unary("threshold", threshold, error=_threshold, interval=_iv_threshold, selects=True,
           attrs=_one_of(threshold=_BOUNDS, value=_TH_VALUES),
           attributes={"threshold": _FINITE, "value": _FINITE}),
    _unary("nan_to_num", nan_to_num, error=_nan_to_num, interval=_iv_nan_to_num, selects=True,
           attrs=_one_of(nan=_NAN_FILL, posinf=_POSINF, neginf=_NEGINF),
           attributes={"nan": _FINITE, "posinf": _FINITE, "neginf": _FINITE}),
    # -- binary
    _binary("logaddexp", logaddexp, error=_logaddexp(1.0),
            interval=_iv_increasing2(logaddexp)),
    _binary("logaddexp2", logaddexp2, error=_logaddexp(math.log(2.0)),
            interval=_iv_increasing2(logaddexp2)),
    _binary("atan2", atan2, error=_atan2, interval=_iv_angle),
    _binary("hypot", hypot, error=_hypot, interval=_iv_hypot),
    _binary("copysign", copysign, error=_copysign, interval=_iv_copysign, selects=True),
    _binary("fmod", fmod, error=_sawtooth(np.trunc, "a"), interval=_iv_fmod,
            domain="nonzero", positions=(1,), partial=_partial_quotient_floor),
    _binary("remainder_tensor", remainder_tensor, error=_sawtooth(np.floor, "b"),
            interval=_iv_remainder, domain="nonzero", positions=(1,),
            partial=_partial_quotient_floor),
    _binary("floor_divide_tensor", floor_divide_tensor, error=_floor_divide,
            interval=_iv_floor_divide, domain="nonzero", positions=(1,),
            partial=_partial_quotient_floor),
    _binary("xlogy", xlogy, error=_xlogy, interval=_iv_xlogy, domain="positive",
            positions=(1,)),
    # torch.heaviside refuses operands of two float dtypes (no promotion)
    _binary("heaviside", heaviside, error=_heaviside, interval=_iv_heaviside, selects=True,
            dtype_rule=same_float_rule),
    # torch.lerp refuses an ``end`` of another dtype than ``start`` (no promotion), as lerp
    _binary("lerp_scalar", lerp_scalar, error=_lerp_scalar, interval=_iv_lerp_scalar,
            attrs=_one_of(weight=_WEIGHTS), attributes={"weight": _SMALL},
            partial=_partial_difference, dtype_rule=same_float_rule),
    # -- ternary
    _binary("lerp", lerp, error=_lerp, interval=_iv_lerp, arity=3, dtype_rule=same_float_rule,
            partial=_partial_difference),
    _binary("addcmul", addcmul, error=_addcmul, interval=_iv_addcmul, arity=3,
            attrs=_one_of(value=_VALUES), attributes={"value": _SMALL},
            partial=_partial_product),
    _binary("addcdiv", addcdiv, error=_addcdiv, interval=_iv_addcdiv, arity=3,
            attrs=_one_of(value=_VALUES), attributes={"value": _SMALL},
            domain="nonzero", positions=(2,), partial=_partial_quotient),
    _binary("clamp_tensor", clamp_tensor, error=_clamp_tensor, interval=_iv_clamp_tensor,
            arity=3, selects=True),
]
