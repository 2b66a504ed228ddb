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

Dtypes.  ``u`` (and ``eta``, the overflow threshold) is that of the node's *output* dtype
(:func:`.build.value_dtypes`): a float32 value inside a float16 graph rounds with ``2^-24``.
Int and bool values round nothing; their bound is an uncertainty in their own units
(:mod:`.error_rules`' typed rules): 0 where the result is *certain* -- a comparison of exact
operands (a tie is a tie) or of operands whose error intervals are separated, a cast far from
an integer boundary, argmax of an exact row (its first index) -- and elsewhere how far it may be
off (1 for a bool that may flip, the width of ``trunc`` over ``[x - e, x + e]``, the spread of
the candidate indices).  Ops that consume an uncertain bool cover either outcome (``where``:
``|a - b| + max(e_a, e_b)``).  A NaN, Inf or out-of-range float cast to an integer is
implementation-defined: unjudged, like an overflow (the record's ``undefined``).

Overflow.  Where a finite ``|y| + e_y`` -- or a partial result on the way, such as the running
sum of a mean -- exceeds half the dtype's largest value, an evaluation may overflow to inf (and
to NaN after it, e.g. ``inf - inf``, even where the reference is a clean ``-inf``).  Such an
element, and every element downstream that reads it (:func:`dependents`: the same element of an
elementwise op, the row of a reduction or softmax, the rows and columns of a matmul), get a NaN
bound: "nothing can be said here", not even the NaN/Inf pattern.  Not where the op's own value
range (its record's interval rule on the inputs' ``[x - e, x + e]``) stays within half the
largest value: softmax's result never passes 1, however wide its bound, so a wide bound there
is just loose, never an overflow.  Every other element keeps its
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

from typing import Any

import numpy as np
import torch

from .error_rules import FLUSH, U32, Operands
from .ops import OPS

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

UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
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
#: Ops whose values are bit copies of their inputs (the records' ``copies``).
LAYOUT_OPS = frozenset(n for n, s in OPS.items() if s.copies)
#: Ops whose result is one of their operands' values (or a clamp bound), never a new rounding:
#: exact where everything they select from is exact (the records' ``selects``).
SELECTION_OPS = frozenset(n for n, s in OPS.items() if s.selects)
_INF = np.inf


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, torch.dtype):
        return str(dtype).replace("torch.", "")
    return str(dtype)


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
    in_dtypes: list[str] | None = None,
) -> np.ndarray:
    """Error bound of one node's output (see the module docstring), from its op's error rule.
    ``dtype`` is the node's *output* dtype (its rounding unit; an int or bool output rounds
    nothing), ``in_dtypes`` its operands' (default: ``dtype`` each).
    ``same_operands``: the node compares one value with itself (``where_gt(a, a, c, d)``), which
    every evaluation decides the same way (``a > a`` is false, NaN included)."""
    spec = OPS[op]
    rounds = dtype in UNIT_ROUNDOFF
    u = UNIT_ROUNDOFF.get(dtype, 0.0)
    eta = _ETA.get(dtype, 0.0)
    ay = np.abs(y)
    ins = tuple(in_dtypes) if in_dtypes is not None else (dtype,) * len(xs)
    with np.errstate(all="ignore"):
        operands = Operands(xs, es, y, ay, u, attrs, same_operands, spec.torch_fn, ins, dtype)
        prop, comp = spec.error(operands)
        if spec.copies:  # bit copies: the moved input errors, nothing computed or rounded
            return prop
        prop = np.where(np.isnan(prop), _INF, prop)
        comp = np.where(np.isnan(comp), _INF, comp)
        tot = prop + comp
        if not rounds:  # an int or bool result: its uncertainty, no rounding
            return np.broadcast_to(tot, y.shape)
        rounding = u * (ay + tot) + eta
        if spec.selects:
            # the result is one of the operands (or a clamp bound): exact operands give an
            # exact result wherever it is a value of the dtype -- nothing to round
            rounding = np.where((tot == 0) & representable(y, dtype), 0.0, rounding)
        return tot + rounding


def _partial_magnitude(op: str, attrs: dict, xs: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """How large an op's partial results can get on the way to ``y`` (per output element), by
    its record's partial-magnitude rule; zero for ops without partial results."""
    spec = OPS[op]
    if spec.partial is None:
        return np.zeros(y.shape)
    with np.errstate(all="ignore"):
        # finite inputs only: two huge finite terms can overflow a float32 running sum to inf
        # and meet a -inf term as NaN, where float64 just gives -inf
        t = [
            torch.from_numpy(np.where(np.isfinite(x), np.abs(np.asarray(x, np.float64)), 0.0))
            for x in xs
        ]
        total = spec.partial(t, attrs, spec.torch_fn)
    return np.broadcast_to(total, y.shape)


def _range_within(
    op: str, attrs: dict, xs: list[np.ndarray], es: list[np.ndarray], y: np.ndarray,
    limit: float,
) -> bool:
    """Whether the op's value-range rule (its record's ``interval``, the generator's guard
    rule) puts every output of the op, on any inputs within ``[x - e, x + e]``, at most
    ``limit`` (half the dtype's largest value) in magnitude: then no evaluation can overflow
    to inf, however wide the error bound ``|y| + e_y`` is (softmax of inputs with errors of a
    few units: ``y (e^{2E} - 1)`` may pass half float16's range, its value never passes 1).

    Only the output's range counts here: partial results on the way have their own rule.
    Sound with a margin: an evaluation overflows only past the largest value, twice
    ``limit``.  The input ranges are the hull of ``[x - e, x + e]`` over every element; a NaN
    anywhere (a NaN input or error) makes them infinite, and a rule that cannot say (a NaN or
    infinite range, an arithmetic error on ranges it was not written for) gives False, the
    per-element overflow test as before."""
    ivals = []
    for x, e in zip(xs, es):
        x = np.asarray(x, dtype=np.float64)
        e = np.broadcast_to(np.asarray(e, dtype=np.float64), x.shape)
        if x.size == 0:
            ivals.append((0.0, 0.0))
        elif np.isnan(x).any() or np.isnan(e).any():
            ivals.append((-np.inf, np.inf))
        else:
            ivals.append((float(np.min(x - e)), float(np.max(x + e))))
    try:
        lo, hi = OPS[op].interval(attrs, ivals, [list(np.shape(x)) for x in xs],
                                  list(np.shape(y)))
    except (ArithmeticError, ValueError):
        return False
    return bool(max(abs(lo), abs(hi)) <= limit)  # NaN: False


def dependents(
    op: str, attrs: dict, masks: list[np.ndarray], xs: list[np.ndarray], y: np.ndarray
) -> np.ndarray:
    """Which output elements of a node read at least one masked input element, by its record's
    dependency rule (elementwise ops element by element, layout ops move the mask with the
    values, reductions and row-wise ops along their dim, cumsum from the masked element on,
    matmul along rows of A and columns of B)."""
    if not any(np.any(m) for m in masks):
        return np.zeros(y.shape, dtype=bool)
    spec = OPS[op]
    return spec.reads(masks, xs, y, attrs, spec.torch_fn)


def error_bounds(
    graph: dict, intermediates: dict[str, np.ndarray], dtype: Any
) -> dict[str, np.ndarray]:
    """Absolute error bound of every input (0: inputs are exact in the dtype) and node, elementwise,
    for a run of ``graph`` in ``dtype`` against the float64 ``intermediates``
    (:func:`.build.run_reference`).

    NaN marks an element that is not judged at all: it may overflow (see the module docstring),
    or it reads (through :func:`dependents`) an element that may; every other element of the
    same node keeps its bound."""
    from .build import infer_dtypes

    dt = _dtype_name(dtype)
    if dt not in UNIT_ROUNDOFF:
        raise ValueError(f"unknown dtype {dtype!r}")
    # each value's own dtype (a float32 value of a float16 graph rounds with 2^-24; ints and
    # bools round nothing), from the ops' dtype rules with the inputs in ``dtype``
    dtypes = infer_dtypes(graph, dt)
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
        # a comparison of one value with itself: every evaluation decides it the same way
        spec = OPS[n["op"]]
        same = spec.compares and n["args"][0] == n["args"][1]
        out_dt = dtypes[n["name"]]
        in_dts = [dtypes[a] for a in n["args"]]
        b = np.broadcast_to(
            node_bound(n["op"], n["attrs"], xs, es, y, out_dt, same, in_dts), y.shape
        )
        with np.errstate(invalid="ignore", over="ignore"):
            # a finite value that (with its error, or a partial result on the way) may leave
            # the dtype's or float32's range: an overflow to inf, and NaN after it, is legitimate
            partial = _partial_magnitude(n["op"], n["attrs"], xs, y)
            reach = np.abs(y) + b
            # partial results live in float32 (the compute type); the result in its dtype
            # (an infinite bound is "no guarantee" already: not an overflow; ints and bools
            # stay far inside their range: the generator's guards)
            limit = _OVERFLOW.get(out_dt, np.inf)
            reach_over = np.isfinite(y) & np.isfinite(reach) & (reach > limit)
            if reach_over.any() and _range_within(n["op"], n["attrs"], xs, es, y, limit):
                # the op's value range (e.g. softmax's [0, 1]) keeps every evaluation on
                # inputs within their errors far from the dtype's largest value: a wide
                # bound there is a loose value, not a possible overflow
                reach_over = np.zeros_like(reach_over)
            may_overflow = reach_over | (partial > _OVERFLOW["float32"])
            if spec.undefined is not None:  # e.g. NaN cast to int: implementation-defined
                may_overflow = may_overflow | np.broadcast_to(
                    spec.undefined(xs, n["attrs"], in_dts), y.shape
                )
        mask = np.asarray(dependents(n["op"], n["attrs"], masks, xs, y) | may_overflow)
        unjudged[n["name"]] = mask
        # a NaN from the formulas (a NaN or infinite reference) means "unbounded", not "unjudged"
        b = np.where(np.isnan(b), _INF, b)
        out[n["name"]] = np.where(mask, np.nan, b).astype(np.float64)
    return out
