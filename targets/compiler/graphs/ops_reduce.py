"""Op family ``reduce`` of the compiler-graph catalogue (:data:`.ops.FAMILIES`): reductions,
scans, normalizations, linear algebra and sorting -- several and non-innermost reduction dims,
var/std/prod/logsumexp/norms, addmm/baddbmm/linear/einsum, scaled_dot_product_attention,
rms-style norms, cumprod/cummax/logcumsumexp, sort and topk values.

Each op is one :class:`~.ops.OpSpec` record made with :func:`.ops._spec` (``fn=`` the
module-level torch function below, whose import path is the op's stable fx target).  Its rules
(error, dependency, value range, partial magnitudes) are the functions of this module; they
compose :mod:`.error_rules` where an op is a composition (sdpa: the matmul rule, the softmax
rule, the matmul rule again).

Why these bounds hold (the model of :mod:`.bound`: ``prop`` from the inputs' errors, ``comp``
the op's own rounding; float32 compute, ``u`` the graph dtype's unit roundoff where an eager
low-precision kernel may round an intermediate step to the dtype):

* selections -- max/min/median/kthvalue along a dim, sort and topk values, cummax/cummin and the
  inf-norm -- are order statistics, 1-Lipschitz in the max norm: the largest input error along
  the dim, nothing computed (ties pick equal values, whichever index wins);
* products (prod, cumprod): ``prod(|x|+e) - prod|x|`` propagated, ``gamma_n`` (in ``u``: CPU
  eager reduces float16 products in float16) of the perturbed magnitude, and an underflow term
  per factor scaled by the largest subset product a tree evaluation could reach;
* var / std: ``|S(x+d) - S(x)| <= 2 sqrt(S) ||d||_2 + ||d||_2^2`` for the centred sum of
  squares ``S`` (centring is a projection, it does not grow ``d``), a one-pass-variance
  cancellation allowance for its evaluation, then the division (and the square root's two-sided
  concavity for std, or -- whichever is smaller -- std's own Lipschitz bound
  ``||e||_2 / sqrt(dof)``, std being a scaled norm of the centred vector); a correction is kept
  only where the reduced count leaves degrees of freedom (``_finalize_var``);
* logsumexp / logcumsumexp: 1-Lipschitz in the max norm; the dtype rounding of ``x - max`` and
  of the exponentials, the sum, the log and the final add (logcumsumexp: one log-add-exp
  rounding per combine, any association);
* vector norms: the triangle inequality, ``||e||_p``, and the sum's ``gamma_n``;
* addmm / baddbmm / linear / einsum: the matmul rule on ``|A| e_B + e_A |B| + e_A e_B``
  (einsum's of the equation's own contraction) with ``gamma`` of the contraction length plus
  the bias and scaling terms;
* sdpa: the scores' matmul rule (inputs scaled by ``sqrt(scale)`` in the dtype, as the math
  path does), :func:`.error_rules.softmax` over the visible keys with those errors, the
  probabilities rounded to the dtype (flash kernels feed the second GEMM in the dtype), then the
  matmul rule of ``P V`` with an online-softmax rescaling allowance;
* rms_norm: ``|r' - r| <= rms(e)`` (``sqrt(mean(x^2) + eps)`` is 1-Lipschitz in the RMS norm),
  hence ``(e_i + |y_i| rms(e)) / (r - rms(e))``, and the relative error of the mean square
  through the reciprocal square root.

:data:`WORK` gives the multiply-adds of every op here that does matmul-like work; the
compiler's resource limits (:mod:`fuzzkit.targets.compiler.limits`) read it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import z3

# absolute imports: a miscompile mutant's private copy of ops.py imports this module by name
from fuzzkit.targets.compiler.graphs import error_rules as er
from fuzzkit.targets.compiler.graphs import intervals as iv
from fuzzkit.targets.compiler.graphs.common import MAX_RANK, Z3_STATE, reduced_dims
from fuzzkit.targets.compiler.graphs.ops import (
    Attr,
    OpSpec,
    SpecError,
    _attrs_dim,
    _attrs_reduce,
    _in_rank,
    _infer_dim,
    _infer_extreme,
    _infer_reduce,
    _rule_reduce,
    _rule_same,
    _spec,
    as_chooser,
    fresh_dim,
    int_val,
)

__all__ = ["RECORDS", "WORK", "EINSUM_FORMS", "SDPA_SCALES", "RMS_EPS"]

U32, FLUSH = er.U32, er.FLUSH
_INF = np.inf

# ----------------------------------------------------------------------------------------------
# torch functions (fx call_function targets; names equal op names, attrs are their kwargs)
# ----------------------------------------------------------------------------------------------


def _dims(dim: Any, rank: int) -> tuple[int, ...]:
    return reduced_dims(dim, rank)


def prod(a, dim, keepdim):
    """torch.prod over one dim, several (one prod per dim, innermost first) or all."""
    if a.ndim == 0:
        return torch.prod(a)
    out = a
    dims = _dims(dim, a.ndim)
    for d in sorted(dims, reverse=True):
        out = torch.prod(out, dim=d, keepdim=True)
    return out if keepdim else out.squeeze(dims)


def var(a, dim, correction, keepdim):
    return torch.var(a, dim=dim, correction=correction, keepdim=keepdim)


def std(a, dim, correction, keepdim):
    return torch.std(a, dim=dim, correction=correction, keepdim=keepdim)


def logsumexp(a, dim, keepdim):
    if a.ndim == 0:
        return torch.logsumexp(a, dim=0)
    return torch.logsumexp(a, dim=_dims(dim, a.ndim), keepdim=keepdim)


def nansum(a, dim, keepdim):
    return torch.nansum(a, dim=dim, keepdim=keepdim)


def norm(a, p, dim, keepdim):
    return torch.linalg.vector_norm(a, ord=p, dim=dim, keepdim=keepdim)


def max_dim_values(a, dim, keepdim):
    return torch.max(a, dim=dim, keepdim=keepdim).values


def min_dim_values(a, dim, keepdim):
    return torch.min(a, dim=dim, keepdim=keepdim).values


def median_values(a, dim, keepdim):
    """The lower median along ``dim`` (a selection: no averaging of the two middle values)."""
    return torch.median(a, dim=dim, keepdim=keepdim).values


def kthvalue_values(a, k, dim, keepdim):
    return torch.kthvalue(a, k, dim=dim, keepdim=keepdim).values


def sort_values(a, dim, descending):
    return torch.sort(a, dim=dim, descending=descending).values


def topk_values(a, k, dim, largest):
    return torch.topk(a, k, dim=dim, largest=largest, sorted=True).values


def cumprod(a, dim):
    return torch.cumprod(a, dim=dim)


def cummax_values(a, dim):
    return torch.cummax(a, dim=dim).values


def cummin_values(a, dim):
    return torch.cummin(a, dim=dim).values


def logcumsumexp(a, dim):
    return torch.logcumsumexp(a, dim=dim)


def addmm(c, a, b, beta, alpha):
    return torch.addmm(c, a, b, beta=beta, alpha=alpha)


def baddbmm(c, a, b, beta, alpha):
    return torch.baddbmm(c, a, b, beta=beta, alpha=alpha)


def linear(a, w, bias):
    return torch.nn.functional.linear(a, w, bias)


#: einsum equations, by ``form`` (an index: append only, a case file names its form by it),
#: with the operand ranks each takes: matmul and its transposed forms, batched forms,
#: contractions over a non-innermost index, row dots, an outer product (nothing summed) and a
#: full contraction to a 0-d value
EINSUM_FORMS: tuple[tuple[str, tuple[int, int]], ...] = (
    ("ij,jk->ik", (2, 2)),
    ("ij,kj->ik", (2, 2)),
    ("ij,ik->jk", (2, 2)),
    ("bij,bjk->bik", (3, 3)),
    ("bij,bkj->bik", (3, 3)),
    ("bij,jk->bik", (3, 2)),
    ("bij,bij->bj", (3, 3)),
    ("ij,ij->i", (2, 2)),
    ("ij,ij->", (2, 2)),
    ("ij,j->i", (2, 1)),
    ("i,j->ij", (1, 1)),
)


def einsum(a, b, form):
    return torch.einsum(EINSUM_FORMS[form][0], a, b)


def sdpa(q, k, v, is_causal, scale):
    """torch.nn.functional.scaled_dot_product_attention (no mask, no dropout); ``is_causal``
    masks top-left aligned (query ``i`` sees keys ``0..i``, also when ``L != S``)."""
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=is_causal, scale=scale
    )


def rms_norm(a, dim, eps):
    """torch.nn.functional.rms_norm over the trailing dims from ``dim`` on (no weight)."""
    return torch.nn.functional.rms_norm(a, tuple(a.shape[dim:]), eps=eps)


# ----------------------------------------------------------------------------------------------
# small helpers
# ----------------------------------------------------------------------------------------------


def gamma_u(n: float, u: float) -> float:
    """``n u / (1 - n u)``: an n-step accumulation rounding in unit roundoff ``u``."""
    t = n * u
    return t / (1.0 - t) if t < 1 else math.inf


#: one underflowed step of an accumulation in the dtype: a flushed float32 subnormal, or (in
#: float16, whose subnormals reach 2**-24) half a float16 subnormal spacing
def _tiny(u: float) -> float:
    return FLUSH + (2.0**-25 if u == 2.0**-11 else 0.0)


def _keep(a: np.ndarray, dims: tuple[int, ...], keepdim: bool) -> np.ndarray:
    return a if keepdim else np.squeeze(a, axis=dims)


def _reduction(o: er.Operands) -> tuple[tuple[int, ...], bool, int]:
    x = o.xs[0]
    dims = reduced_dims(o.attrs["dim"], x.ndim)
    return dims, bool(o.attrs["keepdim"]), math.prod(x.shape[d] for d in dims)


def _safe_pow(m: float, n: int) -> float:
    """``m ** n`` without OverflowError (inf instead)."""
    if n == 0:
        return 1.0
    if m == 0:
        return 0.0
    exponent = n * math.log(m)
    return math.inf if exponent > 700 else math.exp(exponent)


def _mag(ival: tuple[float, float]) -> float:
    return max(abs(ival[0]), abs(ival[1]))


def _reduced_count(attrs: Mapping[str, Any], shape: Sequence[int]) -> int:
    return math.prod(shape[d] for d in reduced_dims(attrs["dim"], len(shape)))


# ----------------------------------------------------------------------------------------------
# reductions over one, several or all dims
# ----------------------------------------------------------------------------------------------


def prod_error(o: er.Operands) -> tuple[Any, Any]:
    """``prod(|x|+e) - prod|x|`` propagated; ``gamma_n`` in the dtype's ``u`` (CPU eager
    multiplies float16 in float16) of the perturbed product; one underflow per factor, which
    later factors may scale up by at most ``prod max(1, |x|+e)``."""
    dims, keep, n = _reduction(o)
    ax, e = np.abs(o.xs[0]), o.es[0]
    hi = np.prod(ax + e, axis=dims, keepdims=True)
    lo = np.prod(ax, axis=dims, keepdims=True)
    grow = np.prod(np.maximum(ax + e, 1.0), axis=dims, keepdims=True)
    comp = gamma_u(n + 1, max(o.u, U32)) * hi + (n + 1) * _tiny(o.u) * grow
    return _keep(hi - lo, dims, keep), _keep(comp, dims, keep)


def _centred(o: er.Operands) -> tuple[tuple[int, ...], bool, int, np.ndarray, np.ndarray, Any]:
    """``(dims, keepdim, n, S, [|S' - S| bound], dof)`` of var / std: ``S`` the centred sum of
    squares (keepdims)."""
    dims, keep, n = _reduction(o)
    x, e = o.xs[0], o.es[0]
    mu = np.mean(x, axis=dims, keepdims=True) if n else np.zeros_like(np.sum(x, axis=dims,
                                                                              keepdims=True))
    s = np.sum((x - mu) ** 2, axis=dims, keepdims=True)
    e2 = np.sqrt(np.sum(e * e, axis=dims, keepdims=True))
    prop_s = 2 * np.sqrt(s) * e2 + e2 * e2
    # any evaluation order, one-pass (E[x^2] - mean^2) included: a few gamma_n of sum (|x|+e)^2
    mag2 = np.sum((np.abs(x) + e) ** 2, axis=dims, keepdims=True)
    comp_s = (4 * er.gamma(n + 4) + 4 * o.u) * mag2 + (n + 1) * FLUSH
    dof = n - int(o.attrs["correction"])
    return dims, keep, n, s, np.stack([prop_s, comp_s]), dof


def var_error(o: er.Operands) -> tuple[Any, Any]:
    """``(2 sqrt(S) ||e||_2 + ||e||_2^2) / dof`` (centring projects the perturbation, which
    does not grow it), a one-pass cancellation allowance on ``sum (|x|+e)^2``, the division."""
    dims, keep, _, s, (prop_s, comp_s), dof = _centred(o)
    if dof <= 0:  # the reference is NaN (no degrees of freedom): no value to bound
        inf = np.full(s.shape, _INF)
        return _keep(inf, dims, keep), _keep(inf, dims, keep)
    prop = prop_s / dof
    comp = comp_s / dof + 2 * U32 * (s / dof + prop)
    return _keep(prop, dims, keep), _keep(comp, dims, keep)


def std_error(o: er.Operands) -> tuple[Any, Any]:
    """The variance's error through the square root, both sides (concave: the downward side
    is larger until the interval reaches 0), then the root's own rounding.

    The propagated part is also at most ``||e||_2 / sqrt(dof)``: ``std = ||P x||_2 /
    sqrt(dof)`` with ``P`` the centring projection, so by the reverse triangle inequality
    ``|std(x + d) - std(x)| <= ||P d||_2 / sqrt(dof) <= ||d||_2 / sqrt(dof)`` -- the upward side
    of the variance route, without its downward side's loss (which matters where a few inputs
    are very uncertain, e.g. behind a ``remainder`` that may wrap); the computed variance's
    error ``c`` then passes through the root at the perturbed value.  The smaller of the two
    routes holds."""
    dims, keep, _, s, (prop_s, comp_s), dof = _centred(o)
    if dof <= 0:
        inf = np.full(s.shape, _INF)
        return _keep(inf, dims, keep), _keep(inf, dims, keep)
    v = s / dof
    p = prop_s / dof
    c = comp_s / dof + 2 * U32 * (v + p)
    root = np.sqrt(v)

    def spread(w: np.ndarray) -> np.ndarray:
        return np.maximum(np.sqrt(v + w) - root, root - np.sqrt(np.maximum(v - w, 0.0)))

    e = o.es[0]
    lipschitz = np.sqrt(np.sum(e * e, axis=dims, keepdims=True) / dof)
    prop = np.minimum(spread(p), lipschitz)
    # the computed variance at the perturbed input is off by at most c; through the root that
    # moves std by at most sqrt(a) - sqrt(a - c) at the smallest perturbed variance ``a`` (the
    # root's downward spread shrinks as its argument grows past c; sqrt(c) is its maximum)
    a = np.maximum(root - lipschitz, 0.0) ** 2
    via_lipschitz = lipschitz + np.where(a >= c, np.sqrt(a) - np.sqrt(np.maximum(a - c, 0.0)),
                                         np.sqrt(c))
    total = np.minimum(spread(p + c), via_lipschitz)
    comp = np.maximum(total - prop, 0.0) + 2 * U32 * (root + total)
    return _keep(prop, dims, keep), _keep(comp, dims, keep)


def logsumexp_error(o: er.Operands) -> tuple[Any, Any]:
    """1-Lipschitz in the max norm: the largest input error.  Eager runs ``max``, ``x - max``,
    ``exp``, ``sum``, ``log`` and ``+ max`` as separate dtype ops: ``u (x_i - m)`` in an
    exponent weighs at most ``u min(spread, n)`` on the sum, whose relative error passes to the
    log as an absolute one; the log's and the add's roundings."""
    dims, keep, n = _reduction(o)
    x, e, u = o.xs[0], o.es[0], o.u
    big_e = np.max(e, axis=dims, keepdims=True) if n else np.zeros(np.shape(np.sum(
        x, axis=dims, keepdims=True)))
    m = np.max(x, axis=dims, keepdims=True) if n else np.full(big_e.shape, -_INF)
    finite = np.isfinite(x) & np.isfinite(m)
    spread = np.max(np.where(finite, np.abs(x - m), 0.0), axis=dims, keepdims=True) if n else 0.0
    y = o.y if keep else np.reshape(o.y, big_e.shape)
    rel = u * (np.minimum(spread, n) + 2 * big_e + 6) + (n + 4) * U32
    rel = np.where(rel < 0.5, rel, _INF)
    comp = 2 * rel + 2 * u * (np.abs(y - m) + np.abs(y)) + 4 * U32
    comp = np.where(np.isfinite(m), comp, 0.0)
    return _keep(big_e, dims, keep), _keep(comp, dims, keep)


def nansum_error(o: er.Operands) -> tuple[Any, Any]:
    """sum's bound over the terms that are not NaN (those add exactly nothing); ``gamma_n``
    in the dtype's ``u``: CPU eager accumulates a float16 nansum in float16 (unlike sum)."""
    dims, keep, n = _reduction(o)
    x, e = o.xs[0], o.es[0]
    there = ~np.isnan(x)
    prop = np.sum(np.where(there, e, 0.0), axis=dims, keepdims=True)
    mag = np.sum(np.where(there, np.abs(x) + e, 0.0), axis=dims, keepdims=True)
    comp = gamma_u(n, max(o.u, U32)) * mag + n * _tiny(o.u)
    return _keep(prop, dims, keep), _keep(comp, dims, keep)


def _p(attrs: Mapping[str, Any]) -> float:
    return float(attrs["p"])


def norm_error(o: er.Operands) -> tuple[Any, Any]:
    """``| ||x+d||_p - ||x||_p | <= ||e||_p`` (triangle inequality); the sum of ``|x|`` or
    ``x^2`` in float32 (``gamma_n``), the square root halving its relative error; the inf-norm
    selects (nothing computed)."""
    dims, keep, n = _reduction(o)
    x, e = o.xs[0], o.es[0]
    p = _p(o.attrs)
    ax = np.abs(x)
    if p == math.inf:
        prop = np.max(e, axis=dims, keepdims=True) if n else np.zeros(np.shape(np.sum(
            x, axis=dims, keepdims=True)))
        return _keep(prop, dims, keep), np.zeros_like(o.ay)
    if p == 1.0:
        prop = np.sum(e, axis=dims, keepdims=True)
        comp = er.gamma(n) * np.sum(ax + e, axis=dims, keepdims=True) + n * FLUSH
        return _keep(prop, dims, keep), _keep(comp, dims, keep)
    prop = np.sqrt(np.sum(e * e, axis=dims, keepdims=True))
    mag = np.sqrt(np.sum((ax + e) ** 2, axis=dims, keepdims=True))
    comp = (er.gamma(n + 1) + 2 * U32) * mag + math.sqrt((n + 1) * FLUSH)
    return _keep(prop, dims, keep), _keep(comp, dims, keep)


# ----------------------------------------------------------------------------------------------
# selections along one dim: extremes, medians, k-th values, sort, topk, cummax/cummin
# ----------------------------------------------------------------------------------------------


def row_selection(o: er.Operands) -> tuple[Any, Any]:
    """sort and topk values: the j-th order statistic of ``x + d`` is within ``max |d|`` along
    the dim of the j-th of ``x`` (1-Lipschitz in the max norm); nothing computed."""
    dim = int(o.attrs["dim"])
    e = o.es[0]
    if e.shape[dim] == 0:
        return np.zeros(o.y.shape), np.zeros(o.y.shape)
    big = np.max(e, axis=dim, keepdims=True)
    return np.broadcast_to(big, o.y.shape).copy(), np.zeros(o.y.shape)


def running_selection(o: er.Operands) -> tuple[Any, Any]:
    """cummax / cummin: the running max of the input errors (each prefix's extreme is
    1-Lipschitz in the max norm over that prefix); nothing computed."""
    return np.maximum.accumulate(o.es[0], axis=int(o.attrs["dim"])), np.zeros_like(o.ay)


# ----------------------------------------------------------------------------------------------
# scans
# ----------------------------------------------------------------------------------------------


def cumprod_error(o: er.Operands) -> tuple[Any, Any]:
    """Each prefix a product: as :func:`prod_error`, with ``n`` the scan length (any
    association of a parallel scan)."""
    dim = int(o.attrs["dim"])
    ax, e = np.abs(o.xs[0]), o.es[0]
    n = ax.shape[dim]
    hi = np.cumprod(ax + e, axis=dim)
    lo = np.cumprod(ax, axis=dim)
    grow = np.cumprod(np.maximum(ax + e, 1.0), axis=dim)
    comp = gamma_u(n + 1, max(o.u, U32)) * hi + (n + 1) * _tiny(o.u) * grow
    return hi - lo, comp


def logcumsumexp_error(o: er.Operands) -> tuple[Any, Any]:
    """The running max of the input errors (each prefix's log-sum-exp is 1-Lipschitz in the max
    norm).  Every log-add-exp combine averages its operands' errors (weights in [0, 1] summing
    to 1) and adds its own few ulp of ``|partial| + 1``; a scan of ``n`` has at most ``n`` of
    them on any path, and every partial is within ``max |x| + log n``."""
    dim = int(o.attrs["dim"])
    x, e = o.xs[0], o.es[0]
    n = x.shape[dim]
    prop = np.maximum.accumulate(e, axis=dim)
    big = np.maximum.accumulate(np.where(np.isfinite(x), np.abs(x), 0.0), axis=dim)
    comp = (n + 2) * (8 * U32 + o.u) * (big + prop + math.log(max(n, 1)) + 2)
    return prop, comp


# ----------------------------------------------------------------------------------------------
# matmul-like ops
# ----------------------------------------------------------------------------------------------


def _scaled(o: er.Operands, bias: np.ndarray | None, e_bias: np.ndarray | None,
            prod: Callable[[np.ndarray, np.ndarray], np.ndarray], a: np.ndarray, b: np.ndarray,
            ea: np.ndarray, eb: np.ndarray, k: int, beta: float, alpha: float
            ) -> tuple[Any, Any]:
    """``beta C + alpha prod(A, B)``: the matmul rule scaled by ``|alpha|``, the bias error by
    ``|beta|`` (beta 0: the bias is ignored, NaN and Inf in it included); ``gamma_{k+3}`` of
    every term's magnitude (the scalings and the bias add may be fused into the accumulation)
    plus ``2u`` (an eager kernel may round the product to the dtype before adding the bias)."""
    aa, ab = np.abs(a), np.abs(b)
    prop = abs(alpha) * (prod(aa, eb) + prod(ea, ab) + prod(ea, eb))
    mag = abs(alpha) * prod(aa + ea, ab + eb)
    if beta != 0 and bias is not None:
        prop = prop + abs(beta) * e_bias
        mag = mag + abs(beta) * (np.abs(bias) + e_bias)
    comp = (er.gamma(k + 3) + 2 * o.u) * mag + (k + 2) * FLUSH * max(1.0, abs(alpha))
    return np.broadcast_to(prop, o.y.shape), np.broadcast_to(comp, o.y.shape)


def addmm_error(o: er.Operands) -> tuple[Any, Any]:
    """addmm, baddbmm: ``beta C + alpha A B`` (see :func:`_scaled`)."""
    (c, a, b), (ec, ea, eb) = o.xs, o.es
    return _scaled(o, c, ec, np.matmul, a, b, ea, eb, a.shape[-1],
                   float(o.attrs["beta"]), float(o.attrs["alpha"]))


def addmm_undefined(xs: list[np.ndarray], attrs: Mapping[str, Any], in_dtypes: Any
                    ) -> np.ndarray:
    """addmm with ``alpha == 0``: float64 and float32 (BLAS gemm) skip ``A @ B``, Inf and NaN
    in A or B included (the reference is ``beta C``), while eager float16 / bfloat16 multiply
    out and give NaN (``0 * inf``) in the rows of A and the columns of B that hold one -- as
    does a compiled ``beta C + alpha (A @ B)`` in any dtype.  torch disagrees with itself
    there, so those output elements are unjudged (an infinite bound would still let a bounded
    op after it, ``tanh``, judge eager's NaN).  Not baddbmm: it multiplies out in every dtype,
    float64 included, so its reference is NaN there as well."""
    c, a, b = xs
    out_shape = np.broadcast_shapes(np.shape(c), (a.shape[0], b.shape[1]))
    if float(attrs["alpha"]) != 0:
        return np.zeros(out_shape, dtype=bool)
    bad_a = (~np.isfinite(a)).astype(np.float64)
    bad_b = (~np.isfinite(b)).astype(np.float64)
    hit = (bad_a @ np.ones(b.shape) + np.ones(a.shape) @ bad_b) > 0
    return np.broadcast_to(hit, out_shape)


def _linear_prod(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.matmul(x, np.swapaxes(w, -1, -2))


def linear_error(o: er.Operands) -> tuple[Any, Any]:
    """``x W^T + bias``: :func:`_scaled` with ``alpha = beta = 1``."""
    (x, w, bias), (ex, ew, eb) = o.xs, o.es
    return _scaled(o, bias, eb, _linear_prod, x, w, ex, ew, x.shape[-1], 1.0, 1.0)


def _einsum_contracted(form: int, a_shape: Sequence[int], b_shape: Sequence[int]) -> int:
    """How many products each output element of the einsum sums."""
    eq = EINSUM_FORMS[form][0]
    ins, out = eq.split("->")
    sizes = _letter_sizes(ins.split(","), [a_shape, b_shape])
    return math.prod(size for letter, size in sizes.items() if letter not in out)


def einsum_error(o: er.Operands) -> tuple[Any, Any]:
    """The matmul rule in the equation's own contraction: ``|A| e_B + e_A |B| + e_A e_B``
    contracted the same way, ``gamma_K`` of ``(|A|+e_A)(|B|+e_B)`` with ``K`` the number of
    products per output element (1 for an outer product: one rounding)."""
    (a, b), (ea, eb) = o.xs, o.es
    form = int(o.attrs["form"])
    eq = EINSUM_FORMS[form][0]
    k = _einsum_contracted(form, a.shape, b.shape)

    def prod(p: np.ndarray, q: np.ndarray) -> np.ndarray:
        return np.einsum(eq, p, q)

    return _scaled(o, None, None, prod, a, b, ea, eb, k, 0.0, 1.0)


# ----------------------------------------------------------------------------------------------
# scaled dot product attention
# ----------------------------------------------------------------------------------------------


def _sdpa_parts(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]
                ) -> tuple[np.ndarray, np.ndarray, float]:
    """(scores, visible mask, |scale|) of an sdpa node in float64."""
    q, k = xs[0], xs[1]
    scale = attrs["scale"]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = float(scale) * np.matmul(q, np.swapaxes(k, -1, -2))
    length, keys = q.shape[-2], k.shape[-2]
    visible = np.ones((length, keys), dtype=bool)
    if attrs["is_causal"]:
        visible = np.tril(visible)
    return scores, np.broadcast_to(visible, scores.shape), abs(float(scale))


def _sdpa_chain(o: er.Operands, compute: bool) -> np.ndarray:
    """The bound of the output of ``softmax(scale Q K^T) V`` composed from the rules of its
    steps; ``compute`` False: only the operands' errors propagated (no rounding anywhere)."""
    (q, k, v), (eq, ek, ev) = o.xs, o.es
    u = o.u if compute else 0.0
    scores, visible, sc = _sdpa_parts(o.xs, o.attrs)
    dim_e, keys = q.shape[-1], k.shape[-2]
    kt, ekt = np.swapaxes(k, -1, -2), np.swapaxes(ek, -1, -2)
    # 1. scores: the matmul rule, scaled; the math path scales q and k by sqrt(scale) in the
    # dtype (the factor itself rounded too) and may store the scores in the dtype
    err_s = sc * (np.abs(q) @ ekt + eq @ np.abs(kt) + eq @ ekt)
    if compute:
        mag = sc * ((np.abs(q) + eq) @ (np.abs(kt) + ekt))
        err_s = err_s + (er.gamma(dim_e + 2) + 6 * o.u) * mag + (dim_e + 2) * FLUSH * max(sc, 1)
    err_s = np.where(visible, err_s, 0.0)
    masked = np.where(visible, scores, -_INF)
    # 2. softmax over the visible keys (masked ones are exactly 0 in every evaluation)
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(masked, axis=-1, keepdims=True)
        w = np.where(visible, np.exp(masked - m), 0.0)
        p = w / np.sum(w, axis=-1, keepdims=True)
        soft = er.Operands([masked], [err_s], p, np.abs(p), o.u, {"dim": -1}, False, o.fn)
        prop_p, comp_p = er.softmax(soft)
        if not compute:
            comp_p = np.zeros_like(p)
        e_p = np.where(visible, prop_p + comp_p, 0.0)
        # flash kernels feed P to the second GEMM in the dtype
        e_p = e_p + u * (p + e_p) + (FLUSH if compute else 0.0)
        # 3. P V: the matmul rule; online softmax rescales its accumulator once per key block
        out = p @ ev + e_p @ np.abs(v) + e_p @ ev
        if compute:
            rescale = er.gamma(keys) + (4 * keys + 8) * U32 + 2 * o.u
            out = out + rescale * ((p + e_p) @ (np.abs(v) + ev)) + (keys + 2) * FLUSH
    return out


def sdpa_error(o: er.Operands) -> tuple[Any, Any]:
    """``softmax(scale Q K^T) V``, composed: the scores' matmul rule, :func:`.error_rules.softmax`
    over the visible keys with those score errors, the probabilities' rounding to the dtype,
    then the matmul rule of ``P V`` (module docstring).  ``prop``: the chain with no rounding;
    ``comp``: the rest."""
    prop = _sdpa_chain(o, compute=False)
    total = _sdpa_chain(o, compute=True)
    return prop, np.maximum(total - prop, 0.0)


# ----------------------------------------------------------------------------------------------
# rms_norm
# ----------------------------------------------------------------------------------------------


def _trailing(attrs: Mapping[str, Any], rank: int) -> tuple[int, ...]:
    return tuple(range(int(attrs["dim"]), rank))


def rms_norm_error(o: er.Operands) -> tuple[Any, Any]:
    """``y = x / r``, ``r = sqrt(mean(x^2) + eps)``.  ``r`` is 1-Lipschitz in the RMS norm, so
    ``|r' - r| <= rms(e) =: R`` and ``|y' - y| <= (e_i + |y_i| R) / (r - R)``.  The mean square
    has ``gamma_{n+2}`` relative error (positive terms) plus flushed squares; through the
    reciprocal square root ``t / (1 - t)``; the rsqrt and the product a few ulp (``u``: eager
    low-precision kernels may round steps to the dtype)."""
    x, e, u = o.xs[0], o.es[0], o.u
    dims = _trailing(o.attrs, x.ndim)
    eps = float(o.attrs["eps"])
    n = math.prod(x.shape[d] for d in dims)
    ms = np.mean(x * x, axis=dims, keepdims=True)
    r = np.sqrt(ms + eps)
    big_r = np.sqrt(np.mean(e * e, axis=dims, keepdims=True))
    den = r - big_r
    safe = np.maximum(den, 1e-300)
    prop = np.where(den > 0, (e + o.ay * big_r) / safe, _INF)
    mag2 = np.mean((np.abs(x) + e) ** 2, axis=dims, keepdims=True) + eps
    rel_ms = ((er.gamma(n + 2) + 2 * u) * mag2 + FLUSH) / (safe * safe)
    rel = np.where(rel_ms < 0.5, rel_ms / (1 - rel_ms), _INF)
    comp = np.where(den > 0, (o.ay + prop) * (rel + 6 * U32 + 2 * u), _INF)
    return prop, comp


#: Below this many smallest float32 normals per averaged element, a row's mean square may
#: evaluate to 0 in float32 (see :func:`rms_norm_undefined`).
_RMS_FLUSH_MARGIN = 16


def rms_norm_undefined(xs: list[np.ndarray], attrs: Mapping[str, Any], in_dtypes: Any
                       ) -> np.ndarray:
    """rms_norm with ``eps`` below float32's smallest normal (0, or an eps a flush-to-zero
    kernel may drop) on a row whose mean square may evaluate to 0 in float32: ``rsqrt(0)``
    is inf, so every float32 implementation (eager included, for float32 and bfloat16 inputs)
    gives +-inf there, NaN at the row's zeros, while the reference is finite.  The whole row is
    unjudged (an infinite bound would still let a bounded op after it, ``sin``, judge eager's
    NaN).

    Threshold: a float32 mean square of ``n`` nonnegative terms is 0 only if every term was
    lost to underflow or flushing -- each square, or each ``x^2 / n``, below :data:`FLUSH`
    (under ``FLUSH`` lost per term), or the final mean below it; normal partial sums never fall
    back to 0 -- so only if the evaluated inputs' true mean square is below ``(n + 2) FLUSH``.
    The hook sees no input errors: for evaluated inputs within ``|x| / 2`` plus a flushed
    subnormal of the reference's (any input whose bound is not already wide), the reference's
    mean square is then below ``8 (n + 2) FLUSH``; twice that is the margin.  An ``eps`` of at
    least ``FLUSH`` is a float32 normal: ``ms + eps >= eps > 0``, nothing to mark."""
    x = xs[0]
    eps = float(attrs["eps"])
    if not eps < FLUSH or x.size == 0:
        return np.zeros(np.shape(x), dtype=bool)
    dims = _trailing(attrs, x.ndim)
    n = math.prod(x.shape[d] for d in dims)
    with np.errstate(all="ignore"):
        ms = np.mean(x * x, axis=dims, keepdims=True)
    return np.broadcast_to(ms < _RMS_FLUSH_MARGIN * (n + 2) * FLUSH, x.shape)


# ----------------------------------------------------------------------------------------------
# dependency rules
# ----------------------------------------------------------------------------------------------


def reads_along(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """sort, topk: every output element of a row reads the whole row along ``dim``."""
    return np.broadcast_to(np.any(masks[0], axis=int(attrs["dim"]), keepdims=True), y.shape)


def reads_trailing(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """rms_norm: the trailing dims it normalizes."""
    m = masks[0]
    return np.broadcast_to(np.any(m, axis=_trailing(attrs, m.ndim), keepdims=True), y.shape)


def _ones(x: Any) -> np.ndarray:
    return np.ones(np.shape(x))


def reads_affine(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """addmm, baddbmm: the bias element broadcast there, the row of A, the column of B
    (the op on masks as 0/1 values: any masked operand element makes a nonzero)."""
    mc, ma, mb = (m.astype(np.float64) for m in masks)
    c, a, b = (torch.from_numpy(np.asarray(m)) for m in (mc, ma, mb))
    ones = [torch.from_numpy(_ones(x)) for x in xs]
    total = fn(c, ones[1], ones[2], beta=1.0, alpha=0.0) + fn(
        ones[0] * 0, a, ones[2], beta=0.0, alpha=1.0) + fn(ones[0] * 0, ones[1], b, beta=0.0,
                                                           alpha=1.0)
    return np.broadcast_to(total.numpy() > 0, y.shape)


def reads_linear(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """linear: the row of x, the row of W, the bias element."""
    mx, mw, mb = (torch.from_numpy(m.astype(np.float64)) for m in masks)
    ox, ow, ob = (torch.from_numpy(_ones(x)) for x in xs)
    total = fn(mx, ow, ob * 0) + fn(ox, mw, ob * 0) + fn(ox * 0, ow, mb)
    return np.broadcast_to(total.numpy() > 0, y.shape)


def reads_einsum(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """einsum: the operand elements its equation combines into each output element."""
    eq = EINSUM_FORMS[int(attrs["form"])][0]
    ma, mb = (m.astype(np.float64) for m in masks)
    total = np.einsum(eq, ma, _ones(xs[1])) + np.einsum(eq, _ones(xs[0]), mb)
    return np.broadcast_to(total > 0, y.shape)


def reads_sdpa(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """sdpa: the query's row, and every key and value of its batch (conservative for a causal
    query, which does not read later keys: a masked element there only marks more output
    elements unjudged, never fewer)."""
    mq, mk, mv = masks
    row = np.any(mq, axis=-1, keepdims=True)
    batch = np.any(mk, axis=(-1, -2), keepdims=True) | np.any(mv, axis=(-1, -2), keepdims=True)
    return np.broadcast_to(row | batch, y.shape)


# ----------------------------------------------------------------------------------------------
# partial-magnitude rules (|inputs| as float64 tensors, finite ones only)
# ----------------------------------------------------------------------------------------------


def partial_product(t: list[torch.Tensor], attrs: dict[str, Any], fn: Any) -> Any:
    """prod, cumprod: a tree of products may reach the product of every factor above 1."""
    return fn(torch.clamp(t[0], min=1.0), **attrs).numpy()


def partial_squares_reduced(t: list[torch.Tensor], attrs: dict[str, Any], fn: Any) -> Any:
    """var, std, 2-norm: their sum of squares (and the root, for values below 1)."""
    x = t[0]
    dims = reduced_dims(attrs["dim"], x.ndim)
    s = (x * x).sum(dim=dims, keepdim=bool(attrs["keepdim"])) if x.ndim else x * x
    return torch.maximum(s, torch.sqrt(s)).numpy()


def partial_norm(t: list[torch.Tensor], attrs: dict[str, Any], fn: Any) -> Any:
    p = _p(attrs)
    if p == 2.0:
        return partial_squares_reduced(t, attrs, fn)
    return fn(t[0], **attrs).numpy()  # sum |x| (p = 1), max |x| (p = inf)


def partial_affine(t: list[torch.Tensor], attrs: dict[str, Any], fn: Any) -> Any:
    """addmm, baddbmm: ``|beta| |C| + max(1, |alpha|) |A| |B|`` (the unscaled product
    is accumulated before alpha scales it)."""
    beta, alpha = abs(float(attrs["beta"])), max(1.0, abs(float(attrs["alpha"])))
    return fn(t[0], t[1], t[2], beta=beta, alpha=alpha).numpy()


def partial_sdpa(t: list[torch.Tensor], attrs: dict[str, Any], fn: Any) -> Any:
    """sdpa: the largest score of the query's row, and the largest ``|V|`` of its batch (the
    output is a convex combination of V's rows).  The scores count at float16's scale (times
    float32's largest value over float16's): a math-path evaluation in float16 stores them in
    the dtype, where they overflow (and the softmax turns inf into NaN) long before float32's
    range ends -- this rule only knows float32's limit, so it states them that much larger."""
    q, k, v = (x.numpy() for x in t)
    scores, visible, _ = _sdpa_parts([q, k], attrs)
    row = np.max(np.where(visible, np.abs(scores), 0.0), axis=-1, keepdims=True)
    scaled = row * (3.4028234663852886e38 / 65504.0)
    values = np.max(v, axis=(-1, -2), keepdims=True)
    out_shape = q.shape[:-1] + v.shape[-1:]
    return np.broadcast_to(np.maximum(scaled, values), out_shape)


def partial_rms(t: list[torch.Tensor], attrs: dict[str, Any], fn: Any) -> Any:
    x = t[0]
    dims = _trailing(attrs, x.ndim)
    return (x * x).sum(dim=dims, keepdim=True).numpy() if dims else (x * x).numpy()


# ----------------------------------------------------------------------------------------------
# value-range rules
# ----------------------------------------------------------------------------------------------


def _product_range(ival: iv.Interval, n: int) -> iv.Interval:
    """``n`` factors of magnitude at most ``m``: ``m^n`` (or ``m`` below 1); nonnegative
    factors make a nonnegative product; an empty product is 1."""
    if n == 0:
        return (1.0, 1.0)
    m = _mag(ival)
    b = max(m, _safe_pow(m, n))
    return (0.0 if ival[0] >= 0 else -b, b)


def interval_prod(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
                  ) -> iv.Interval:
    return _product_range(ivals[0], _reduced_count(attrs, in_shapes[0]))


def interval_cumprod(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
                     ) -> iv.Interval:
    """Every prefix is a product of at most the dim's length of factors."""
    return _product_range(ivals[0], in_shapes[0][int(attrs["dim"])])


def interval_var(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
                 ) -> iv.Interval:
    """The largest variance of values in ``[lo, hi]``: ``(hi - lo)^2 / 4`` (population),
    ``n / dof`` times that with a correction."""
    lo, hi = ivals[0]
    n = _reduced_count(attrs, in_shapes[0])
    dof = n - int(attrs["correction"])
    if dof <= 0:  # a NaN result (0/0): never generated (_finalize_var), only from a file
        return (0.0, _INF)
    return (0.0, (hi - lo) ** 2 / 4 * n / dof)


def interval_std(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
                 ) -> iv.Interval:
    lo, hi = interval_var(attrs, ivals, in_shapes, out_shape)
    return (0.0, math.sqrt(hi))


def _lse_range(ival: iv.Interval, n: int) -> iv.Interval:
    """A log-sum-exp of ``n`` values in ``[lo, hi]``: at least their max (at least ``lo``), at
    most ``hi + log n``; of none, -inf."""
    if n == 0:
        return (-_INF, -_INF)
    return (ival[0], ival[1] + math.log(n))


def interval_lse(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
                 ) -> iv.Interval:
    return _lse_range(ivals[0], _reduced_count(attrs, in_shapes[0]))


def interval_lcse(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
                  ) -> iv.Interval:
    """logcumsumexp: each prefix a log-sum-exp of at most the dim's length of values."""
    return _lse_range(ivals[0], in_shapes[0][int(attrs["dim"])])


def interval_norm(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
                  ) -> iv.Interval:
    n = _reduced_count(attrs, in_shapes[0])
    m = _mag(ivals[0])
    p = _p(attrs)
    factor = 1.0 if p == math.inf else (n if p == 1.0 else math.sqrt(n))
    return (0.0, factor * m)


def interval_affine(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
                    ) -> iv.Interval:
    """``beta [c] + alpha k m m2``: the bias range scaled, plus ``k`` products of the largest
    magnitudes (either sign)."""
    beta, alpha = float(attrs.get("beta", 1.0)), float(attrs.get("alpha", 1.0))
    if len(ivals) == 3 and "beta" in attrs:
        (clo, chi), a_iv, b_iv, k = ivals[0], ivals[1], ivals[2], in_shapes[1][-1]
    else:  # linear: x, w, bias
        a_iv, b_iv, (clo, chi), k = ivals[0], ivals[1], ivals[2], in_shapes[0][-1]
    prods = k * _mag(a_iv) * _mag(b_iv) * abs(alpha)
    if beta == 0:
        clo = chi = 0.0
    else:
        clo, chi = sorted((beta * clo, beta * chi))
    return (clo - prods, chi + prods)


def interval_einsum(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
                    ) -> iv.Interval:
    k = _einsum_contracted(int(attrs["form"]), in_shapes[0], in_shapes[1])
    b = k * _mag(ivals[0]) * _mag(ivals[1])
    return (-b, b)


def interval_sdpa(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
                  ) -> iv.Interval:
    """The output is a convex combination of V's rows: V's range.  It is widened to the
    scores' range too (an intermediate), so the generator's magnitude guards clamp Q and K
    until the scores stay far inside float16's range (a math-path evaluation stores them in
    the dtype)."""
    e = in_shapes[0][-1]
    scale = attrs["scale"]
    sc = abs(float(scale)) if scale is not None else (1.0 / math.sqrt(e) if e else 0.0)
    scores = sc * e * _mag(ivals[0]) * _mag(ivals[1])
    lo, hi = ivals[2]
    return (min(lo, -scores), max(hi, scores))


def interval_rms(attrs: dict, ivals: Sequence[iv.Interval], in_shapes: Any, out_shape: Any
                 ) -> iv.Interval:
    """``|y_i| <= sqrt(n)`` (``x_i^2 <= n mean(x^2)``), with the input's sign."""
    shape = in_shapes[0]
    n = math.prod(shape[int(attrs["dim"]):])
    b = math.sqrt(max(n, 1))
    lo, hi = ivals[0]
    return (0.0 if lo >= 0 else -b, 0.0 if hi <= 0 else b)


# ----------------------------------------------------------------------------------------------
# shape rules (z3) and concrete rules
# ----------------------------------------------------------------------------------------------


def _bias_cons(bias: Sequence[Any], target: Sequence[Any]) -> list:
    """A bias broadcast (right-aligned) to ``target``: each of its dims 1 or the target's."""
    cons = []
    for d, t in zip(reversed(list(bias)), reversed(list(target))):
        cons.append(z3.Or(d == 1, d == t))
    return cons


def _bias_ok(bias: Sequence[int], target: Sequence[int]) -> bool:
    return len(bias) <= len(target) and all(
        d in (1, t) for d, t in zip(reversed(list(bias)), reversed(list(target))))


def _rule_addmm(shapes, attrs):
    c, a, b = shapes
    out = [a[0], b[1]]
    return [a[1] == b[0]] + _bias_cons(c, out), out


def _infer_addmm(shapes, attrs):
    c, a, b = shapes
    if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        raise SpecError(f"addmm needs [m, k] x [k, n], got {list(a)} x {list(b)}")
    out = [a[0], b[1]]
    if not _bias_ok(c, out):
        raise SpecError(f"addmm's bias {list(c)} does not broadcast to {out}")
    return out


def _rule_baddbmm(shapes, attrs):
    c, a, b = shapes
    out = [a[0], a[1], b[2]]
    return [a[0] == b[0], a[2] == b[1]] + _bias_cons(c, out), out


def _infer_baddbmm(shapes, attrs):
    c, a, b = shapes
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        raise SpecError(f"baddbmm needs [b, m, k] x [b, k, n], got {list(a)} x {list(b)}")
    out = [a[0], a[1], b[2]]
    if not _bias_ok(c, out):
        raise SpecError(f"baddbmm's bias {list(c)} does not broadcast to {out}")
    return out


def _linear_bias_targets(x: Sequence[Any], n: Any) -> list[list[Any]]:
    """The shapes linear's bias must broadcast to, each (torch 2.x CPU, checked on real
    tensors -- meta tensors accept more, e.g. a 3-d bias for a 3-d input, so they are no
    guide here).  The output ``[*x[:-1], n]`` always (the bias is added to it, in place on
    the matmul path, so it may not grow it); for an input of rank >= 3 also the flattened
    ``[prod(x[:-1]), n]``, since a contiguous input (a 3-d one, or any with a 1-d bias) is
    run as ``addmm(bias, x.reshape(-1, k), w.t())``.  Which path torch takes depends on the
    input's layout (a case may draw a non-contiguous one), so a bias is accepted only where
    every path takes it: rank <= 2 and broadcast to both (a ``[2, 1]`` bias for x
    ``[2, 2, k]`` broadcasts to the output ``[2, 2, n]`` but not to ``[4, n]``)."""
    out = list(x[:-1]) + [n]
    if len(x) < 3:
        return [out]
    return [out, [math.prod(x[:-1]), n]]


def _rule_linear(shapes, attrs):
    x, w, bias = shapes
    out = list(x[:-1]) + [w[0]]
    targets = _linear_bias_targets(x, w[0])
    if any(len(bias) > len(t) for t in targets):
        return [z3.BoolVal(False, Z3_STATE["ctx"])], out
    cons = [x[-1] == w[1]]
    for t in targets:
        cons += _bias_cons(bias, t)
    return cons, out


def _infer_linear(shapes, attrs):
    x, w, bias = shapes
    if not 1 <= len(x) or len(w) != 2 or x[-1] != w[1]:
        raise SpecError(f"linear needs [..., k] x [n, k], got {list(x)} x {list(w)}")
    out = list(x[:-1]) + [w[0]]
    for t in _linear_bias_targets(x, w[0]):
        if not _bias_ok(bias, t):
            raise SpecError(f"linear's bias {list(bias)} does not broadcast to {t}")
    return out


def _letter_sizes(terms: Sequence[str], shapes: Sequence[Sequence[Any]]) -> dict[str, Any]:
    sizes: dict[str, Any] = {}
    for term, shape in zip(terms, shapes):
        for letter, d in zip(term, shape):
            sizes.setdefault(letter, d)
    return sizes


def _rule_einsum(shapes, attrs):
    eq, _ = EINSUM_FORMS[int(attrs["form"])]
    ins, out = eq.split("->")
    terms = ins.split(",")
    sizes = _letter_sizes(terms, shapes)
    cons = [d == sizes[letter] for term, shape in zip(terms, shapes)
            for letter, d in zip(term, shape) if d is not sizes[letter]]
    return cons, [sizes[letter] for letter in out]


def _infer_einsum(shapes, attrs):
    form = int(attrs["form"])
    eq, ranks = EINSUM_FORMS[form]
    if tuple(len(s) for s in shapes) != ranks:
        raise SpecError(f"einsum {eq!r} needs operands of ranks {list(ranks)}, got "
                        f"{[len(s) for s in shapes]}")
    ins, out = eq.split("->")
    terms = ins.split(",")
    sizes = _letter_sizes(terms, shapes)
    for term, shape in zip(terms, shapes):
        if any(sizes[letter] != d for letter, d in zip(term, shape)):
            raise SpecError(
                f"einsum {eq!r}: sizes of one index differ in {[list(s) for s in shapes]}"
            )
    return [sizes[letter] for letter in out]


def _rule_sdpa(shapes, attrs):
    q, k, v = shapes
    cons = [q[j] == k[j] for j in range(len(q) - 2)] + [q[j] == v[j] for j in range(len(q) - 2)]
    cons += [q[-1] == k[-1], k[-2] == v[-2]]
    return cons, list(q[:-1]) + [v[-1]]


def _infer_sdpa(shapes, attrs):
    q, k, v = (list(s) for s in shapes)
    if not (len(q) == len(k) == len(v) and len(q) in (3, 4)):
        raise SpecError(f"sdpa needs q, k, v of one rank, 3 or 4, got ranks "
                        f"{[len(q), len(k), len(v)]}")
    if q[:-2] != k[:-2] or q[:-2] != v[:-2] or q[-1] != k[-1] or k[-2] != v[-2]:
        raise SpecError(f"sdpa needs q [..., L, E], k [..., S, E], v [..., S, Ev], got {q}, "
                        f"{k}, {v}")
    if k[-2] == 0:
        raise SpecError("sdpa needs at least one key")
    if q[-1] == 0 and attrs["scale"] is None:
        raise SpecError("sdpa's default scale 1/sqrt(E) needs E > 0")
    return q[:-1] + [v[-1]]


def _infer_norm(shapes, attrs):
    p = _p(attrs)
    if p not in (1.0, 2.0, math.inf):
        raise SpecError(f"norm takes p 1, 2 or inf, got {p!r}")
    if p == math.inf:
        return _infer_extreme(shapes, attrs)
    return _infer_reduce(shapes, attrs)


def _infer_one_dim(shapes, attrs):
    """max/min/median values: one dim, a non-empty one."""
    s = list(shapes[0])
    _in_rank(attrs["dim"], len(s))
    return _infer_extreme(shapes, attrs)


def _infer_kth(shapes, attrs):
    s = list(shapes[0])
    d = _in_rank(attrs["dim"], len(s))
    if not 1 <= int(attrs["k"]) <= s[d]:
        raise SpecError(f"k {attrs['k']} is out of range for dim {d} of size {s[d]}")
    return _infer_reduce(shapes, attrs)


def _rule_topk(shapes, attrs):
    s = list(shapes[0])
    d = attrs["dim"]
    mode = attrs["_k"]
    if mode == "one":
        s[d] = int_val(1)
        return [], s
    if mode == "all":
        return [], s
    o = fresh_dim("i")
    cons = [o <= s[d]]
    s[d] = o
    return cons, s


def _infer_topk(shapes, attrs):
    s = list(shapes[0])
    d = _in_rank(attrs["dim"], len(s))
    if not 1 <= int(attrs["k"]) <= s[d]:
        raise SpecError(f"k {attrs['k']} is out of range for dim {d} of size {s[d]}")
    s[d] = int(attrs["k"])
    return s


def _infer_rms(shapes, attrs):
    s = list(shapes[0])
    _in_rank(attrs["dim"], len(s))
    return s


# ----------------------------------------------------------------------------------------------
# attribute samplers (rank-level draws; edge values on purpose)
# ----------------------------------------------------------------------------------------------


def _attrs_prod(ch, ranks):
    """One dim (a file may ask for several or all): a product of many generated values under
    the test draws, unclamped, would leave float32's range on the way (its partial rule)."""
    if ranks[0] == 0:
        return {"dim": None, "keepdim": ch.boolean()}
    return {"dim": ch.integers(0, ranks[0] - 1), "keepdim": ch.boolean()}


def _attrs_var(ch, ranks):
    out = _attrs_reduce(ch, ranks)
    out["correction"] = ch.integers(0, 1)
    return out


def _finalize_var(attrs: dict, in_shapes: Sequence[Sequence[int]], out_shape: Sequence[int],
                  chooser: Any) -> dict:
    """var / std's correction once the reduced count ``n`` is solved: Bessel's correction
    needs ``n >= 2`` -- over one element (a size-1 dim, a 0-d input) ``n - 1 = 0`` degrees of
    freedom make the result NaN (0/0), which is no value to test a compiler on and no finite
    range for the guards (:func:`interval_var`), so there the population form (correction 0:
    exactly 0) is used instead.  No draw: the stream of the chooser is unchanged."""
    n = _reduced_count(attrs, in_shapes[0])
    return {"correction": int(attrs["correction"]) if n - int(attrs["correction"]) > 0 else 0}


_NORM_PS = (1.0, 2.0, math.inf)


def _attrs_norm(ch, ranks):
    out = _attrs_reduce(ch, ranks)
    out["p"] = _NORM_PS[ch.integers(0, len(_NORM_PS) - 1)]
    return out


def _attrs_one_dim(ch, ranks):
    if ranks[0] == 0:
        return None
    return {"dim": ch.integers(0, ranks[0] - 1), "keepdim": ch.boolean()}


#: where k lands in its dim: 1, the whole dim, the middle, or anywhere
_K_MODES = ("one", "all", "mid", "any")


def _attrs_kth(ch, ranks):
    out = _attrs_one_dim(ch, ranks)
    if out is not None:
        out["_k"] = _K_MODES[ch.integers(0, len(_K_MODES) - 1)]
    return out


def _finalize_kth(attrs: dict, in_shapes: Sequence[Sequence[int]], out_shape: Sequence[int],
                  chooser: Any) -> dict:
    """kthvalue's k from the solved dim size (1, n, the middle, or any)."""
    n = int(in_shapes[0][attrs["dim"]])
    mode = attrs["_k"]
    if mode == "one" or n <= 1:
        return {"k": 1}
    if mode == "all":
        return {"k": n}
    if mode == "mid":
        return {"k": (n + 1) // 2}
    return {"k": as_chooser(chooser).integers(1, n)}


def _attrs_sort(ch, ranks):
    if ranks[0] == 0:
        return None
    return {"dim": ch.integers(0, ranks[0] - 1), "descending": ch.boolean()}


def _attrs_topk(ch, ranks):
    if ranks[0] == 0:
        return None
    return {"dim": ch.integers(0, ranks[0] - 1), "largest": ch.boolean(),
            "_k": ("one", "all", "any")[ch.integers(0, 2)]}


def _finalize_topk(attrs: dict, in_shapes: Any, out_shape: Sequence[int], chooser: Any) -> dict:
    return {"k": int(out_shape[attrs["dim"]])}


#: alpha / beta draws: 0 and 1 (the forms compilers special-case), a fraction, a negative
_SCALARS = (1.0, 0.0, 0.5, -1.0, 2.0)


def _attrs_scaled(ranks_ok: Callable[[Sequence[int]], bool]) -> Callable[..., dict | None]:
    def draw(ch, ranks):
        if not ranks_ok(ranks):
            return None
        return {"beta": ch.choice(_SCALARS), "alpha": ch.choice(_SCALARS)}

    return draw


def _attrs_linear(ch, ranks):
    """x of any rank from 1, W a matrix, a bias that may broadcast (at most the output's
    rank and at most 2: :func:`_linear_bias_targets`)."""
    return {} if ranks[0] >= 1 and ranks[1] == 2 and ranks[2] <= min(ranks[0], 2) else None


def _attrs_einsum(ch, ranks):
    forms = [f for f, (_, r) in enumerate(EINSUM_FORMS) if tuple(r) == tuple(ranks)]
    return {"form": ch.choice(forms)} if forms else None


#: sdpa scales: the default 1/sqrt(E) (None, twice as likely), 1, fractions, 0 (uniform
#: attention) and a large one (peaked)
SDPA_SCALES: tuple[float | None, ...] = (None, None, 1.0, 0.5, 0.125, 0.0, 4.0)


def _attrs_sdpa(ch, ranks):
    if not (ranks[0] == ranks[1] == ranks[2] and ranks[0] in (3, 4)):
        return None
    return {"is_causal": ch.boolean(), "scale": ch.choice(SDPA_SCALES)}


#: rms_norm eps draws (an explicit eps: the default, finfo(dtype).eps, differs between the
#: float64 reference and the run), 0 included
RMS_EPS = (1e-6, 1e-5, 1e-3, 0.0)


def _attrs_rms(ch, ranks):
    if ranks[0] == 0:
        return None
    return {"dim": ch.integers(0, ranks[0] - 1), "eps": ch.choice(RMS_EPS)}


# ----------------------------------------------------------------------------------------------
# work (multiply-adds) of the matmul-like ops, for the resource limits
# ----------------------------------------------------------------------------------------------


def _work_addmm(shapes: Sequence[Sequence[int]], attrs: Mapping[str, Any]) -> int:
    _, a, b = shapes
    return math.prod(a) * int(b[-1])  # (batch *) m * k, times n


def _work_linear(shapes: Sequence[Sequence[int]], attrs: Mapping[str, Any]) -> int:
    x, w, _ = shapes
    return math.prod(x) * int(w[0])


def _work_einsum(shapes: Sequence[Sequence[int]], attrs: Mapping[str, Any]) -> int:
    eq = EINSUM_FORMS[int(attrs["form"])][0]
    sizes = _letter_sizes(eq.split("->")[0].split(","), shapes)
    return math.prod(int(d) for d in sizes.values())


def _work_sdpa(shapes: Sequence[Sequence[int]], attrs: Mapping[str, Any]) -> int:
    q, k, v = shapes
    return math.prod(q[:-1]) * int(k[-2]) * (int(q[-1]) + int(v[-1]))


#: op name -> ``(in_shapes, attrs) -> multiply-adds`` on shapes the ops' concrete rules
#: accepted (:mod:`fuzzkit.targets.compiler.limits` sums them over a graph)
WORK: dict[str, Callable[[Sequence[Sequence[int]], Mapping[str, Any]], int]] = {
    "addmm": _work_addmm,
    "baddbmm": _work_addmm,
    "linear": _work_linear,
    "einsum": _work_einsum,
    "sdpa": _work_sdpa,
}


# ----------------------------------------------------------------------------------------------
# the records
# ----------------------------------------------------------------------------------------------

_DIMS = Attr("dims", 0, MAX_RANK - 1, MAX_RANK)
_DIM = Attr("int", 0, MAX_RANK - 1)
_BOOL = Attr("bool")
_SCALAR = Attr("real", -16, 16)

_REDUCE = dict(rule=_rule_reduce, reads=er.reads_reduced, fusing=None,
               attributes={"dim": _DIMS, "keepdim": _BOOL}, infer=_infer_reduce)
_ONE_DIM = dict(rule=_rule_reduce, reads=er.reads_reduced, fusing=None, selects=True,
                attributes={"dim": _DIM, "keepdim": _BOOL}, infer=_infer_one_dim,
                error=er.extreme, interval=iv.same)
_SCAN = dict(rule=_rule_same, attrs=_attrs_dim, reads=er.reads_scan, fusing=None,
             attributes={"dim": _DIM}, infer=_infer_dim)
_AFFINE = dict(error=addmm_error, reads=reads_affine, interval=interval_affine,
               partial=partial_affine, fusing=None, grows=True,
               attributes={"beta": _SCALAR, "alpha": _SCALAR})

RECORDS: list[OpSpec] = [
    _spec("prod", 1, "reduction", attrs=_attrs_prod, **_REDUCE, error=prod_error,
          interval=interval_prod, partial=partial_product, fn=prod),
    _spec("var", 1, "reduction", attrs=_attrs_var,
          **dict(_REDUCE, attributes={"dim": _DIMS, "correction": Attr("int", 0, 1),
                                      "keepdim": _BOOL}),
          finalize=_finalize_var, error=var_error, interval=interval_var,
          partial=partial_squares_reduced, fn=var),
    _spec("std", 1, "reduction", attrs=_attrs_var,
          **dict(_REDUCE, attributes={"dim": _DIMS, "correction": Attr("int", 0, 1),
                                      "keepdim": _BOOL}),
          finalize=_finalize_var, error=std_error, interval=interval_std,
          partial=partial_squares_reduced, fn=std),
    _spec("logsumexp", 1, "reduction", attrs=_attrs_reduce, **_REDUCE, error=logsumexp_error,
          interval=interval_lse, fn=logsumexp),
    _spec("nansum", 1, "reduction", attrs=_attrs_reduce, **_REDUCE, error=nansum_error,
          interval=iv.total, partial=er.partial_through, fn=nansum),
    _spec("norm", 1, "reduction", attrs=_attrs_norm,
          **dict(_REDUCE, attributes={"p": Attr("bound", 1, math.inf), "dim": _DIMS,
                                      "keepdim": _BOOL}, infer=_infer_norm),
          error=norm_error, interval=interval_norm, partial=partial_norm, fn=norm),
    _spec("max_dim_values", 1, "reduction", attrs=_attrs_one_dim, **_ONE_DIM,
          fn=max_dim_values),
    _spec("min_dim_values", 1, "reduction", attrs=_attrs_one_dim, **_ONE_DIM,
          fn=min_dim_values),
    _spec("median_values", 1, "reduction", attrs=_attrs_one_dim, **_ONE_DIM, fn=median_values),
    _spec("kthvalue_values", 1, "reduction", attrs=_attrs_kth,
          **dict(_ONE_DIM, attributes={"k": Attr("int", 1), "dim": _DIM, "keepdim": _BOOL},
                 infer=_infer_kth),
          finalize=_finalize_kth, fn=kthvalue_values),
    _spec("sort_values", 1, "sort", _rule_same, _attrs_sort, error=row_selection,
          reads=reads_along, interval=iv.same, fusing=None, selects=True,
          attributes={"dim": _DIM, "descending": _BOOL}, infer=_infer_dim, fn=sort_values),
    _spec("topk_values", 1, "sort", _rule_topk, _attrs_topk, error=row_selection,
          reads=reads_along, interval=iv.same, fusing=None, selects=True,
          finalize=_finalize_topk,
          attributes={"k": Attr("int", 1), "dim": _DIM, "largest": _BOOL}, infer=_infer_topk,
          fn=topk_values),
    _spec("cumprod", 1, "scan", **_SCAN, error=cumprod_error, interval=interval_cumprod,
          partial=partial_product, fn=cumprod),
    _spec("cummax_values", 1, "scan", **_SCAN, error=running_selection, interval=iv.same,
          selects=True, fn=cummax_values),
    _spec("cummin_values", 1, "scan", **_SCAN, error=running_selection, interval=iv.same,
          selects=True, fn=cummin_values),
    _spec("logcumsumexp", 1, "scan", **_SCAN, error=logcumsumexp_error,
          interval=interval_lcse, fn=logcumsumexp),
    _spec("addmm", 3, "matmul", _rule_addmm,
          _attrs_scaled(lambda r: r[0] <= 2 and r[1] == 2 and r[2] == 2), **_AFFINE,
          infer=_infer_addmm, fn=addmm, undefined=addmm_undefined),
    _spec("baddbmm", 3, "matmul", _rule_baddbmm,
          _attrs_scaled(lambda r: r[0] <= 3 and r[1] == 3 and r[2] == 3), **_AFFINE,
          infer=_infer_baddbmm, fn=baddbmm),
    _spec("linear", 3, "matmul", _rule_linear, _attrs_linear, error=linear_error,
          reads=reads_linear, interval=interval_affine, partial=er.partial_through,
          fusing=None, grows=True, infer=_infer_linear, fn=linear),
    _spec("einsum", 2, "matmul", _rule_einsum, _attrs_einsum, error=einsum_error,
          reads=reads_einsum, interval=interval_einsum, partial=er.partial_through,
          fusing=None, grows=True, attributes={"form": Attr("int", 0, len(EINSUM_FORMS) - 1)},
          infer=_infer_einsum, fn=einsum),
    _spec("sdpa", 3, "attention", _rule_sdpa, _attrs_sdpa, error=sdpa_error, reads=reads_sdpa,
          interval=interval_sdpa, partial=partial_sdpa, fusing=None, grows=True,
          attributes={"is_causal": _BOOL, "scale": Attr("bound", -16, 16)},
          infer=_infer_sdpa, fn=sdpa),
    _spec("rms_norm", 1, "normalization", _rule_same, _attrs_rms, error=rms_norm_error,
          reads=reads_trailing, interval=interval_rms, partial=partial_rms, fusing=None,
          attributes={"dim": _DIM, "eps": Attr("real", 0, 1)}, infer=_infer_rms, fn=rms_norm,
          undefined=rms_norm_undefined),
]
