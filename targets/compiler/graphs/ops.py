"""Operator catalogue of the compiler-graph fuzzer: one record (:class:`OpSpec`) per op.

An op's whole contract lives in its record, so adding or changing an op is one entry in
:data:`OPS` and nothing else dispatches on op names:

* ``torch_fn`` -- a module-level function of this module (stable import path
  ``fuzzkit.targets.compiler.graphs.ops.<name>`` for fx graphs, repros and ``fx_minifier``); attrs are
  its kwargs.  The float64 reference and eager runs call it.
* **shape rules** -- ``shape_rule(in_shapes, attrs) -> (constraints, out_shape)``, NNSmith style:
  ``in_shapes`` are lists of z3 integer expressions (symbolic dims), the rule returns the z3
  constraints under which the op is well formed and the symbolic output shape (fresh z3 variables
  where the output dim is a new unknown, e.g. reshape / expand / index_select / broadcast
  results); and ``infer(in_shapes, attrs) -> out_shape``, the concrete rule on plain Python ints,
  which raises :class:`SpecError` (one line) where the op is not well formed.
* **attributes** -- ``attributes``: the public attributes a node carries, each an :class:`Attr`
  (its kind and range); ``sample_attrs(chooser, in_ranks) -> attrs | None``: attribute draws that
  only depend on ranks (None: the op does not apply to operands of these ranks); ``finalize``
  fills the attributes that need concrete dims once shapes are solved (reshape's and expand's
  ``shape``, index_select's ``index``).  Attributes and ``infer`` are what a graph from a file may
  say: :func:`fuzzkit.targets.compiler.graphs.build.graph_shapes` checks every node against them without
  allocating anything (validation, resource limits).
* **dtypes** -- ``dtype_rule(in_dtypes, attrs) -> dtype | None``: every value of a graph has a
  dtype of :data:`VALUE_DTYPES`; the rule gives the op's output dtype for its operands' dtypes,
  or None where it does not take them (default :func:`default_dtype_rule`: floats only,
  promoted for elementwise ops, of one dtype for the others; layout ops any one dtype).
  ``undefined`` marks output elements whose value is implementation-defined (NaN cast to int).
* **input domain** -- ``domain``: ``"positive"`` (log, sqrt, rsqrt, fractional pow) or
  ``"nonzero"`` (reciprocal, div's denominator) for the argument positions ``domain_args(attrs)``;
  the generator inserts guard nodes so this always holds; ``interval``: the op's value-range rule
  (:mod:`.intervals`), from which those guards are placed.
* **error rule** -- ``error`` (the op's propagated and computed float error), ``reads`` (which
  output elements read which input elements) and ``partial`` (how large partial results get):
  :mod:`.error_rules`, applied by :mod:`.bound`; ``selects`` (the result is one of the operands:
  exact stays exact) and ``copies`` (layout: bit copies, nothing rounded) refine the model.
* **fusing** -- how the in-project fusing compiler (:mod:`fuzzkit.targets.compiler.fusing`) lowers the
  op, and the Triton text it lowers it to: ``"elementwise"`` (one float32 expression in a
  generated kernel: ``template``, whose ``{a}``..``{d}`` are the operand temps and any other field
  an attr's literal; or, for an expression put together from the attrs, ``builder`` over the
  record's ``cases``: pow's form per exponent, clamp's per bound), ``"reduction"`` (a last-dim
  reduction closing a kernel: ``reduction_body``, the lines that reduce the tile ``{src}`` into
  ``acc``) or None (run eagerly; no template).  Codegen keeps only the kernel assembly and reads
  the record through :data:`OPS` each time it writes an expression, so the compiler's miscompile
  mutants that edit one template line of *this* file (a private copy of it, swapped in for
  ``OPS``) take effect; such a copy keeps this module's torch functions (:func:`_torch_fn`), so
  fx graphs, repros and :func:`op_of` see one function per op whichever records are in force.
  ``tests/test_graph_ops.py`` checks that template, torch function and reference agree.

:func:`missing_parts` says what a record lacks (nothing, for every op: the test asserts it).

Choosers: ``sample_attrs`` accepts a NumPy ``Generator``, a Hypothesis ``data.draw`` callable or a
:class:`Chooser`; :func:`as_chooser` normalises them.
"""

from __future__ import annotations

import builtins as _b
import math
import numbers
import string
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import z3

# absolute imports: a miscompile mutant imports a private copy of this file, outside the package
from fuzzkit.targets.compiler.graphs import error_rules as er
from fuzzkit.targets.compiler.graphs import intervals as iv
from fuzzkit.targets.compiler.graphs.common import LAYER_NORM_EPS, MAX_RANK, Z3_STATE, reduced_dims

__all__ = [
    "OpSpec",
    "OPS",
    "Attr",
    "SpecError",
    "Chooser",
    "as_chooser",
    "fresh_dim",
    "missing_parts",
    "op_of",
    "reduced_dims",
    "FUSING",
    "LAYER_NORM_EPS",
    "MAX_RANK",
]


# ----------------------------------------------------------------------------------------------
# choosers: one interface over NumPy generators and Hypothesis draws
# ----------------------------------------------------------------------------------------------


class Chooser:
    """Minimal choice interface: ``integers(lo, hi)`` (inclusive), ``choice(seq)``,
    ``boolean()``."""

    def integers(self, lo: int, hi: int) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def choice(self, seq: Sequence[Any]) -> Any:
        return seq[self.integers(0, len(seq) - 1)]

    def boolean(self) -> bool:
        return bool(self.integers(0, 1))


class RngChooser(Chooser):
    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def integers(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))


class DrawChooser(Chooser):
    """Hypothesis: every choice is a ``data.draw(st.integers(...))`` so Hypothesis can shrink it."""

    def __init__(self, draw: Callable[..., Any]):
        from hypothesis import strategies as st

        self._st = st
        self.draw = draw

    def integers(self, lo: int, hi: int) -> int:
        if lo == hi:
            return lo
        return int(self.draw(self._st.integers(lo, hi)))


def as_chooser(x: Any) -> Chooser:
    if isinstance(x, Chooser):
        return x
    if isinstance(x, np.random.Generator):
        return RngChooser(x)
    if hasattr(x, "draw") and callable(x.draw):  # hypothesis DataObject
        return DrawChooser(x.draw)
    if callable(x):
        return DrawChooser(x)
    raise TypeError(f"cannot make a chooser from {type(x).__name__}")


_Z3_STATE = Z3_STATE  # shared with the copies mutants import (see common.Z3_STATE)


def reset_z3(ctx: z3.Context | None = None) -> None:
    """Use ``ctx`` (None: z3's main context) for fresh dims and restart their numbering, so a
    generation run is independent of earlier ones (determinism)."""
    _Z3_STATE["ctx"] = ctx
    _Z3_STATE["counter"] = 0


def fresh_dim(prefix: str = "d") -> z3.ArithRef:
    _Z3_STATE["counter"] += 1
    return z3.Int(f"{prefix}{_Z3_STATE['counter']}", _Z3_STATE["ctx"])


def int_val(v: int) -> z3.ArithRef:
    return z3.IntVal(v, _Z3_STATE["ctx"])


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, z3.ExprRef) and isinstance(b, z3.ExprRef):
        return a.eq(b)
    return False


def _prod(dims: Sequence[Any]) -> Any:
    out: Any = 1
    for d in dims:
        out = out * d
    return out


# ----------------------------------------------------------------------------------------------
# torch functions (fx call_function targets).  Names equal op names; builtins are reached via _b.
# ----------------------------------------------------------------------------------------------


def abs(a):
    return torch.abs(a)


def neg(a):
    return torch.neg(a)


def exp(a):
    return torch.exp(a)


def log(a):
    return torch.log(a)


def sqrt(a):
    return torch.sqrt(a)


def rsqrt(a):
    return torch.rsqrt(a)


def tanh(a):
    return torch.tanh(a)


def sigmoid(a):
    return torch.sigmoid(a)


def relu(a):
    return torch.relu(a)


def gelu(a):
    return torch.nn.functional.gelu(a)


def sin(a):
    return torch.sin(a)


def cos(a):
    return torch.cos(a)


def reciprocal(a):
    return torch.reciprocal(a)


def pow(a, exponent):
    return torch.pow(a, exponent)


def clamp(a, min, max):
    return torch.clamp(a, min=min, max=max)


def add_scalar(a, value):
    return torch.add(a, value)


def add(a, b):
    return torch.add(a, b)


def sub(a, b):
    return torch.sub(a, b)


def mul(a, b):
    return torch.mul(a, b)


def div(a, b):
    return torch.div(a, b)


def maximum(a, b):
    return torch.maximum(a, b)


def minimum(a, b):
    return torch.minimum(a, b)


def where_gt(a, b, c, d):
    return torch.where(a > b, c, d)


def matmul(a, b):
    return torch.matmul(a, b)


def bmm(a, b):
    return torch.bmm(a, b)


def softmax(a, dim):
    return torch.softmax(a, dim=dim)


def log_softmax(a, dim):
    return torch.log_softmax(a, dim=dim)


def layer_norm(a, dim):
    x = torch.movedim(a, dim, -1)
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=LAYER_NORM_EPS)
    return torch.movedim(y, -1, dim)


def sum(a, dim, keepdim):
    return torch.sum(a, dim=dim, keepdim=keepdim)


def mean(a, dim, keepdim):
    return torch.mean(a, dim=dim, keepdim=keepdim)


def amax(a, dim, keepdim):
    return torch.amax(a, dim=dim, keepdim=keepdim)


def amin(a, dim, keepdim):
    return torch.amin(a, dim=dim, keepdim=keepdim)


def cumsum(a, dim):
    return torch.cumsum(a, dim=dim)


def reshape(a, shape):
    return torch.reshape(a, tuple(shape))


def permute(a, perm):
    return torch.permute(a, tuple(perm))


def transpose(a, dim0, dim1):
    return torch.transpose(a, dim0, dim1)


def expand(a, shape):
    return a.expand(tuple(shape))


def unsqueeze(a, dim):
    return torch.unsqueeze(a, dim)


def squeeze(a, dim):
    return torch.squeeze(a, dim)


def cat(a, b, dim):
    return torch.cat([a, b], dim=dim)


def index_select(a, dim, index):
    return torch.index_select(a, dim, torch.tensor(index, dtype=torch.long, device=a.device))


# ----------------------------------------------------------------------------------------------
# shape rules
# ----------------------------------------------------------------------------------------------

Shape = list  # list of z3 expressions / ints


def _rule_same(shapes, attrs):
    return [], list(shapes[0])


def _broadcast(shapes: Sequence[Shape]):
    rank = _b.max(len(s) for s in shapes)
    cons: list = []
    out: list = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        uniq: list = []
        for d in dims:
            if not _b.any(_same(d, u) for u in uniq):
                uniq.append(d)
        if len(uniq) == 1:
            out.append(uniq[0])
            continue
        o = fresh_dim("b")
        for d in uniq:
            cons.append(z3.Or(d == 1, d == o))
        cons.append(z3.Or(*[d == o for d in uniq]))
        out.append(o)
    return cons, out


def _rule_broadcast(shapes, attrs):
    return _broadcast(shapes)


def _rule_matmul(shapes, attrs):
    a, b = shapes
    return [a[1] == b[0]], [a[0], b[1]]


def _rule_bmm(shapes, attrs):
    a, b = shapes
    return [a[0] == b[0], a[2] == b[1]], [a[0], a[1], b[2]]


def _rule_reduce(shapes, attrs):
    s = list(shapes[0])
    dims = reduced_dims(attrs["dim"], len(s))
    if attrs["keepdim"]:
        return [], [int_val(1) if k in dims else d for k, d in enumerate(s)]
    return [], [d for k, d in enumerate(s) if k not in dims]


def _rule_reshape(shapes, attrs):
    """Modes: ``general`` (fresh dims, product constraint — nonlinear), ``flatten`` (one dim),
    ``merge`` (two adjacent dims into their product), ``split`` (dim = k * fresh, k drawn)."""
    s = list(shapes[0])
    mode = attrs["_mode"]
    if mode == "flatten":
        return [], [_prod(s)]
    if mode == "merge":
        i = attrs["_at"]
        if i + 1 >= len(s):
            return [z3.BoolVal(False, _Z3_STATE["ctx"])], s
        return [], s[:i] + [s[i] * s[i + 1]] + s[i + 2 :]
    if mode == "split":
        i = attrs["_at"]
        k = attrs["_k"]
        q = fresh_dim("r")
        return [s[i] == k * q], s[:i] + [int_val(k), q] + s[i + 1 :]
    rank = attrs["_rank"]
    out = [fresh_dim("r") for _ in range(rank)]
    return [_prod(out) == _prod(s)], out


def _rule_permute(shapes, attrs):
    s = shapes[0]
    return [], [s[p] for p in attrs["perm"]]


def _rule_transpose(shapes, attrs):
    s = list(shapes[0])
    i, j = attrs["dim0"], attrs["dim1"]
    s[i], s[j] = s[j], s[i]
    return [], s


def _rule_expand(shapes, attrs):
    s = shapes[0]
    cons = []
    out = [fresh_dim("e") for _ in range(attrs["_new"])]
    for d in s:
        o = fresh_dim("e")
        cons.append(z3.Or(d == 1, o == d))
        out.append(o)
    return cons, out


def _rule_unsqueeze(shapes, attrs):
    s = list(shapes[0])
    s.insert(attrs["dim"], int_val(1))
    return [], s


def _rule_squeeze(shapes, attrs):
    s = list(shapes[0])
    d = attrs["dim"]
    cons = [s[d] == 1]
    del s[d]
    return cons, s


def _rule_cat(shapes, attrs):
    a, b = shapes
    d = attrs["dim"]
    cons = [a[k] == b[k] for k in range(len(a)) if k != d and not _same(a[k], b[k])]
    out = list(a)
    out[d] = a[d] + b[d]
    return cons, out


def _rule_index_select(shapes, attrs):
    s = list(shapes[0])
    o = fresh_dim("i")
    s[attrs["dim"]] = o
    return [], s


# ----------------------------------------------------------------------------------------------
# attribute samplers
# ----------------------------------------------------------------------------------------------


def _attrs_none(ch, ranks):
    return {}


def _attrs_same_rank(ch, ranks):
    return {} if len(set(ranks)) == 1 else None


def _attrs_dim(ch, ranks):
    if ranks[0] == 0:  # a 0-d value (a full reduction's result) has no dim to pick
        return None
    return {"dim": ch.integers(0, ranks[0] - 1)}


#: The forms of a reduction's ``dim`` (:func:`_attrs_reduce`), each drawn on its own so every
#: one comes up: an int (most draws: the fusing compiler fuses exactly the last dim), a list of
#: one dim (the same reduction through the list path of torch and the compilers), a list of
#: several or all dims (any subset, in order), and ``None`` (every dim).
REDUCE_FORMS = ("int", "int", "int", "int", "int", "one-list", "subset", "none")


def reduce_form(dim: Any, rank: int) -> str:
    """The form (:data:`REDUCE_FORMS`) of a drawn ``dim`` -- a list naming every dim is
    ``"all-list"``, a subset of two or more ``"subset"`` (tests count the forms drawn)."""
    if dim is None:
        return "none"
    if isinstance(dim, int):
        return "int"
    if len(dim) == 1:
        return "one-list"
    return "all-list" if len(dim) == rank else "subset"


def _attrs_reduce(ch, ranks):
    """A form from :data:`REDUCE_FORMS`, then its dims: an int dim (uniform over the dims), a
    list of one dim, a non-empty subset of the dims (uniform over the ``2^r - 1`` subsets: the
    full list included), or ``None`` (every dim: a full reduction, a 0-d result without
    keepdim; the only form a 0-d operand takes); keepdim either way."""
    r = ranks[0]
    form = REDUCE_FORMS[ch.integers(0, len(REDUCE_FORMS) - 1)] if r else "none"
    if form == "int":
        dim: Any = ch.integers(0, r - 1)
    elif form == "one-list":
        dim = [ch.integers(0, r - 1)]
    elif form == "subset":
        mask = ch.integers(1, (1 << r) - 1)
        dim = [d for d in range(r) if mask >> d & 1]
    else:
        dim = None
    return {"dim": dim, "keepdim": ch.boolean()}


_INT_EXPONENTS = (2.0, 3.0)
_FRAC_EXPONENTS = (0.5, 1.5)
#: the rarer exponents compilers special-case: x**0 (1 even for NaN and Inf), x**1, and the
#: reciprocal powers
_EDGE_EXPONENTS = (0.0, 1.0, -1.0, -2.0, -0.5)


#: Every exponent the generator draws (each has its fusing form in the record's ``cases``).
POW_EXPONENTS = _INT_EXPONENTS + _FRAC_EXPONENTS + _EDGE_EXPONENTS


def _attrs_pow(ch, ranks):
    """One exponent of :data:`POW_EXPONENTS`, each equally likely: the edge ones (0, 1, the
    negative and reciprocal powers) as often as the common ones."""
    return {"exponent": POW_EXPONENTS[ch.integers(0, len(POW_EXPONENTS) - 1)]}


_CLAMP_BOUNDS = (-math.inf, -4.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 4.0, math.inf)
#: The two axes of clamp's grid: a lower bound is absent (``None``: torch's ``clamp_max``),
#: ``-inf`` or a finite grid value; an upper bound a finite grid value, ``+inf`` or absent.
CLAMP_LOWER: tuple[float | None, ...] = (None,) + _CLAMP_BOUNDS[:-1]
CLAMP_UPPER: tuple[float | None, ...] = _CLAMP_BOUNDS[1:] + (None,)


def _attrs_clamp(ch, ranks):
    """Two bounds ``min < max`` (infinite ones included), or one side only (``None``: torch's
    ``clamp_min`` / ``clamp_max``), never neither.

    The grid is walked one axis at a time: a coin picks the bound to anchor, drawn uniformly
    from its axis (:data:`CLAMP_LOWER` / :data:`CLAMP_UPPER`), and the other bound is drawn
    uniformly from the values compatible with it.  So every value of each axis -- 0 and the
    extreme +-4 on either side, the infinite and the absent bounds -- has probability at least
    1/22 per clamp (drawing the pair at once left a lower bound of 4 and an upper bound of -4
    unreachable, and the infinite / absent ones rare)."""
    if ch.boolean():
        lo = CLAMP_LOWER[ch.integers(0, len(CLAMP_LOWER) - 1)]
        his = [h for h in CLAMP_UPPER
               if (h is None and lo is not None) or (h is not None and (lo is None or h > lo))]
        hi = his[ch.integers(0, len(his) - 1)]
    else:
        hi = CLAMP_UPPER[ch.integers(0, len(CLAMP_UPPER) - 1)]
        los = [v for v in CLAMP_LOWER
               if (v is None and hi is not None) or (v is not None and (hi is None or v < hi))]
        lo = los[ch.integers(0, len(los) - 1)]
    return {"min": lo, "max": hi}


def _attrs_add_scalar(ch, ranks):
    return {"value": ch.choice((0.5, 1.0, -1.0, 2.0))}


def _attrs_matmul(ch, ranks):
    return {} if ranks == [2, 2] or tuple(ranks) == (2, 2) else None


def _attrs_bmm(ch, ranks):
    return {} if tuple(ranks) == (3, 3) else None


_RESHAPE_MODES = ("split", "merge", "flatten", "general")


def _attrs_reshape(ch, ranks):
    r = ranks[0]
    mode = _RESHAPE_MODES[ch.integers(0, len(_RESHAPE_MODES) - 1)]
    if mode == "split":
        if r >= MAX_RANK or r == 0:
            return None
        return {"_mode": mode, "_at": ch.integers(0, r - 1), "_k": ch.choice((2, 3, 4, 8))}
    if mode == "merge":
        if r < 2:
            return None
        return {"_mode": mode, "_at": ch.integers(0, r - 2)}
    if mode == "flatten":
        return {"_mode": mode}
    return {"_mode": mode, "_rank": ch.integers(1, 3)}


def _attrs_permute(ch, ranks):
    r = ranks[0]
    if r < 2:
        return None
    perm = list(range(r))
    for i in range(r - 1, 0, -1):  # Fisher-Yates with chooser draws
        j = ch.integers(0, i)
        perm[i], perm[j] = perm[j], perm[i]
    return {"perm": perm}


def _attrs_transpose(ch, ranks):
    r = ranks[0]
    if r < 2:
        return None
    i = ch.integers(0, r - 1)
    j = ch.integers(0, r - 2)
    if j >= i:
        j += 1
    return {"dim0": i, "dim1": j}


def _attrs_expand(ch, ranks):
    r = ranks[0]
    new = ch.integers(0, _b.min(1, MAX_RANK - r))
    return {"_new": new}


def _attrs_unsqueeze(ch, ranks):
    r = ranks[0]
    if r >= MAX_RANK:
        return None
    return {"dim": ch.integers(0, r)}


def _attrs_squeeze(ch, ranks):
    r = ranks[0]
    if r < 2:
        return None
    return {"dim": ch.integers(0, r - 1)}


def _attrs_cat(ch, ranks):
    if ranks[0] != ranks[1] or ranks[0] == 0:
        return None
    return {"dim": ch.integers(0, ranks[0] - 1)}


def _attrs_index_select(ch, ranks):
    if ranks[0] == 0:
        return None
    return {"dim": ch.integers(0, ranks[0] - 1)}


# ----------------------------------------------------------------------------------------------
# what a node may say: attribute kinds and ranges, concrete shape rules (plain Python ints)
# ----------------------------------------------------------------------------------------------


class SpecError(ValueError):
    """A node its op's spec does not allow (one line)."""


def shown(value: Any, limit: int = 60) -> str:
    """A value from a file as one short escaped line (no control characters, no non-ASCII)."""
    text = ascii(value)
    return text if len(text) <= limit else text[:limit] + "..."


def is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class Attr:
    """One public attribute of an op (NNSmith style: the op declares its own constraints).

    ``kind``:

    * ``int``   -- an integer in ``[lo, hi]``;
    * ``bool``  -- ``True`` or ``False``;
    * ``dtype`` -- a name of :data:`VALUE_DTYPES`;
    * ``real``  -- a finite number in ``[lo, hi]``;
    * ``bound`` -- ``None`` (no bound) or a number in ``[lo, hi]``, ``+-inf`` included (not NaN);
    * ``dims``  -- ``None`` (every dim), an integer, or a non-empty list of distinct integers,
      each in ``[lo, hi]``, at most ``length`` of them;
    * ``ints``  -- a list of integers in ``[lo, hi]``, at most ``length`` of them (``None``: as
      many as the shape rule allows; the ``elements`` limit bounds what they make).

    Rank-dependent ranges (a dim below the operand's rank) are the shape rule's to check."""

    kind: str
    lo: float = -math.inf
    hi: float = math.inf
    length: int | None = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed, or None."""
        if self.kind == "bool":
            return None if isinstance(value, (bool, np.bool_)) else "must be true or false"
        if self.kind == "int":
            return self._int(value)
        if self.kind == "dtype":
            ok = isinstance(value, str) and value in VALUE_DTYPES
            return None if ok else f"must be one of {', '.join(VALUE_DTYPES)}"
        if self.kind in ("real", "bound"):
            if value is None and self.kind == "bound":
                return None
            if not is_real(value):
                return "must be a number" + (" or null" if self.kind == "bound" else "")
            try:
                number = float(value)
            except OverflowError:  # an integer beyond any float
                return "is too large"
            if math.isnan(number):
                return "must not be NaN"
            if self.kind == "real" and not math.isfinite(number):
                return "must be finite"
            if not self.lo <= number <= self.hi:
                return f"must be in [{self.lo:g}, {self.hi:g}]"
            return None
        if self.kind == "dims":
            if value is None:
                return None
            if is_int(value):
                return self._int(value)
            if not isinstance(value, (list, tuple)) or not value:
                return "must be null, an integer or a non-empty list of integers"
            bad = self._ints(value)
            if bad is None and len({int(v) for v in value}) != len(value):
                return "repeats a dim"
            return bad
        if self.kind == "ints":
            if not isinstance(value, (list, tuple)):
                return "must be a list of integers"
            return self._ints(value)
        raise AssertionError(
            f"unknown attribute kind {self.kind!r}"
        )  # pragma: no cover - all kinds above

    def _ints(self, value: Any) -> str | None:
        """What is wrong with a list of integers (its length, then each entry), or None."""
        if self.length is not None and len(value) > self.length:
            return f"has more than {self.length} entries"
        for v in value:
            bad = self._int(v)
            if bad:
                return f"entry {bad}"
        return None

    def _int(self, value: Any) -> str | None:
        if not is_int(value):
            return "must be an integer"
        if not self.lo <= int(value) <= self.hi:
            hi = "" if math.isinf(self.hi) else f"{self.hi:g}"
            return f"must be in [{self.lo:g}, {hi}]" if hi else f"must be >= {self.lo:g}"
        return None


#: a dim of an operand (the shape rule checks it against the operand's rank)
_DIM = Attr("int", 0, MAX_RANK - 1)
_SHAPE = Attr("ints", 0, math.inf, MAX_RANK)


def _in_rank(dim: int, rank: int, what: str = "dim") -> int:
    if not 0 <= dim < rank:
        raise SpecError(f"{what} {dim} is out of range for a rank-{rank} operand")
    return int(dim)


def _elements(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def _infer_same(shapes, attrs):
    return list(shapes[0])


def broadcast_shapes(shapes: Sequence[Sequence[int]]) -> list[int]:
    """torch's broadcasting of concrete shapes (right-aligned; a dim is 1 or the common size)."""
    rank = _b.max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        dims = {int(s[len(s) - rank + k]) for s in shapes if len(s) - rank + k >= 0}
        sizes = dims - {1}
        if len(sizes) > 1:
            raise SpecError(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return out


def _infer_broadcast(shapes, attrs):
    return broadcast_shapes(shapes)


def _infer_matmul(shapes, attrs):
    a, b = shapes
    if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        raise SpecError(f"matmul needs [m, k] x [k, n], got {list(a)} x {list(b)}")
    return [a[0], b[1]]


def _infer_bmm(shapes, attrs):
    a, b = shapes
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        raise SpecError(f"bmm needs [b, m, k] x [b, k, n], got {list(a)} x {list(b)}")
    return [a[0], a[1], b[2]]


def _infer_dim(shapes, attrs):
    s = list(shapes[0])
    _in_rank(attrs["dim"], len(s))
    return s


def _infer_reduce(shapes, attrs):
    s = list(shapes[0])
    dim = attrs["dim"]
    for d in [] if dim is None else dim if isinstance(dim, (list, tuple)) else [dim]:
        _in_rank(d, len(s))
    dims = reduced_dims(dim, len(s))
    if attrs["keepdim"]:
        return [1 if k in dims else d for k, d in enumerate(s)]
    return [d for k, d in enumerate(s) if k not in dims]


def _infer_extreme(shapes, attrs):
    """amax / amin: like the other reductions, but a zero-size reduced dim has no extreme."""
    s = list(shapes[0])
    out = _infer_reduce(shapes, attrs)
    if any(s[d] == 0 for d in reduced_dims(attrs["dim"], len(s))):
        raise SpecError(f"cannot take the extreme over a zero-size dim of {s}")
    return out


def _infer_clamp(shapes, attrs):
    if attrs["min"] is None and attrs["max"] is None:
        raise SpecError("clamp needs min or max (or both)")
    return list(shapes[0])


def _infer_reshape(shapes, attrs):
    shape = [int(d) for d in attrs["shape"]]
    if _elements(shape) != _elements(shapes[0]):
        raise SpecError(f"cannot reshape {list(shapes[0])} to {shape}")
    return shape


def _infer_permute(shapes, attrs):
    s = list(shapes[0])
    perm = [int(p) for p in attrs["perm"]]
    if sorted(perm) != list(range(len(s))):
        raise SpecError(f"perm {perm} is not a permutation of the {len(s)} dims")
    return [s[p] for p in perm]


def _infer_transpose(shapes, attrs):
    s = list(shapes[0])
    i, j = _in_rank(attrs["dim0"], len(s), "dim0"), _in_rank(attrs["dim1"], len(s), "dim1")
    s[i], s[j] = s[j], s[i]
    return s


def _infer_expand(shapes, attrs):
    s = list(shapes[0])
    shape = [int(d) for d in attrs["shape"]]
    new = len(shape) - len(s)
    if new < 0 or any(d != 1 and d != o for d, o in zip(s, shape[new:])):
        raise SpecError(f"cannot expand {s} to {shape}")
    return shape


def _infer_unsqueeze(shapes, attrs):
    s = list(shapes[0])
    if not 0 <= attrs["dim"] <= len(s):
        raise SpecError(
            f"dim {attrs['dim']} is out of range for unsqueezing a rank-{len(s)} operand"
        )
    s.insert(int(attrs["dim"]), 1)
    return s


def _infer_squeeze(shapes, attrs):
    s = list(shapes[0])
    d = _in_rank(attrs["dim"], len(s))
    if s[d] != 1:
        raise SpecError(f"dim {d} of {s} is not 1")
    del s[d]
    return s


def _infer_cat(shapes, attrs):
    a, b = (list(x) for x in shapes)
    d = _in_rank(attrs["dim"], len(a))
    if len(a) != len(b) or any(x != y for k, (x, y) in enumerate(zip(a, b)) if k != d):
        raise SpecError(f"cannot cat {a} and {b} along dim {d}")
    out = list(a)
    out[d] = a[d] + b[d]
    return out


def _infer_index_select(shapes, attrs):
    s = list(shapes[0])
    d = _in_rank(attrs["dim"], len(s))
    index = attrs["index"]
    if any(int(i) >= s[d] for i in index):
        raise SpecError(f"an index is out of range for dim {d} of size {s[d]}")
    s[d] = len(index)
    return s


# ----------------------------------------------------------------------------------------------
# the record
# ----------------------------------------------------------------------------------------------

#: How the fusing compiler may lower an op: into an elementwise kernel, as the last-dim reduction
#: closing a kernel, or not at all (None: the op runs eagerly).
FUSING = ("elementwise", "reduction", None)
#: Kinds whose values are bit copies of their inputs (nothing computed, nothing rounded).
COPY_KINDS = ("layout", "concat", "gather")

# ----------------------------------------------------------------------------------------------
# value dtypes: every value of a graph has one; each op says which operand dtypes it takes
# ----------------------------------------------------------------------------------------------

#: The dtypes a value of a graph may have.  Graph inputs are floating (the case dtype); ints and
#: bools come from casts, comparisons, argmax and the like (:mod:`.ops_typed`).
VALUE_DTYPES = ("float32", "float16", "bfloat16", "int32", "int64", "bool")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
INT_DTYPES = ("int32", "int64")

#: ``dtype_rule(in_dtypes, attrs) -> out dtype | None`` (None: not these operand dtypes)
DtypeRule = Callable[[Sequence[str], Mapping[str, Any]], "str | None"]


def is_float_dtype(name: str) -> bool:
    return name in FLOAT_DTYPES


def torch_dtype_of(name: str) -> torch.dtype:
    """The torch dtype of a :data:`VALUE_DTYPES` name (KeyError for any other name: names come
    from files and are checked against the tuple, never looked up on ``torch``)."""
    return {
        "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
        "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
    }[name]


def dtype_name(dtype: torch.dtype) -> str:
    """:data:`VALUE_DTYPES` name of a torch dtype (``torch.float64`` etc. are not one)."""
    return str(dtype).replace("torch.", "")


def promote_dtypes(names: Sequence[str]) -> str:
    """torch's type promotion of tensors of these dtypes (float16 with bfloat16: float32)."""
    out = torch_dtype_of(names[0])
    for n in names[1:]:
        out = torch.promote_types(out, torch_dtype_of(n))
    return dtype_name(out)


def float_rule(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    """The default of elementwise ops: floating operands only, the result in their promoted
    dtype (torch's elementwise kernels promote) -- every op whose error rule reasons about float
    rounding (an int or bool operand would make it a different computation, which an op states
    by its own rule)."""
    if not in_dtypes or not all(is_float_dtype(d) for d in in_dtypes):
        return None
    return promote_dtypes(in_dtypes)


def same_float_rule(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    """The default of every other kind: floating operands of one dtype (matmul, bmm, addmm,
    layer_norm's weights and the like refuse mixed dtypes in torch: no promotion to draw)."""
    if not in_dtypes or not is_float_dtype(in_dtypes[0]):
        return None
    return in_dtypes[0] if all(d == in_dtypes[0] for d in in_dtypes) else None


def default_dtype_rule(kind: str) -> DtypeRule:
    """The rule of an op that states none: elementwise ops promote floats
    (:func:`float_rule`), layout ops copy any one dtype (:func:`same_dtype_rule`), the rest
    take floats of one dtype (:func:`same_float_rule`)."""
    if kind in COPY_KINDS:
        return same_dtype_rule
    return float_rule if kind == "elementwise" else same_float_rule


def same_dtype_rule(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    """Layout ops (bit copies): any dtype, operands of one dtype (cat of two dtypes would
    promote, i.e. round: not a copy)."""
    if not in_dtypes or any(d != in_dtypes[0] for d in in_dtypes):
        return None
    return in_dtypes[0] if in_dtypes[0] in VALUE_DTYPES else None


@dataclass(frozen=True)
class OpSpec:
    """Everything the graph machinery and the fusing compiler know about one op (see the module
    docstring for each part)."""

    name: str
    arity: int
    #: "elementwise", "matmul", "normalization", "reduction", "scan", "layout", "concat",
    #: "gather"
    kind: str
    # -- shapes and attributes
    shape_rule: Callable[[Sequence[Shape], dict], tuple[list, Shape]]
    sample_attrs: Callable[[Any, Sequence[int]], dict | None]
    #: the public attributes of a node of this op (every one required, no others allowed)
    attributes: Mapping[str, Attr]
    #: concrete shape rule ``(in_shapes, attrs) -> out_shape`` on Python ints (SpecError)
    infer: Callable[[Sequence[Sequence[int]], dict], list]
    #: fills shape-dependent attrs once shapes are solved (None: nothing to fill)
    finalize: Callable[..., dict] | None
    torch_fn: Callable[..., torch.Tensor]
    # -- input domain and value ranges
    domain: str | None  # "positive" | "nonzero" | None
    #: ``attrs -> argument positions`` that need ``domain``
    domain_rule: Callable[[dict], tuple[int, ...]]
    interval: iv.IntervalRule
    # -- float error
    error: er.ErrorRule
    reads: er.DependencyRule
    partial: er.PartialRule | None
    selects: bool  # the result is one of the operands' values (or a clamp bound)
    # -- fusing compiler
    fusing: str | None
    #: elementwise: the float32 Triton expression (``{a}``..``{d}``: operand temps; any other
    #: field: the literal of the attr of that name)
    template: str | None = None
    #: elementwise, put together from the attrs: ``builder(cases, fields, attrs)`` over the
    #: record's ``cases`` (``fields``: operand temps and attr literals as for ``template``)
    cases: Mapping[Any, str] = field(default_factory=dict)
    builder: Callable[[Mapping[Any, str], dict[str, str], dict], str] | None = None
    #: reduction: the kernel lines that reduce the masked tile ``{src}`` into ``acc`` (a row each)
    reduction_body: tuple[str, ...] = ()
    # -- generation
    compares: bool = False  # a comparison of its first two operands (ties matter)
    grows: bool = False  # may make a tensor larger than its operands (the element cap applies)
    guard_only: bool = False  # only inserted by the generator as a guard, never drawn
    # -- dtypes
    #: the output dtype for operand dtypes (:data:`VALUE_DTYPES`), None where the op does not
    #: take them (default :func:`float_rule`; layout ops :func:`same_dtype_rule`)
    dtype_rule: DtypeRule = float_rule
    #: ``(xs, attrs, in_dtypes) -> mask`` of output elements whose value is
    #: implementation-defined (a NaN or Inf cast to an integer): left unjudged; None: none
    undefined: Callable[..., np.ndarray] | None = None

    @property
    def copies(self) -> bool:
        """Layout ops: their values are bit copies of their inputs."""
        return self.kind in COPY_KINDS

    def domain_args(self, attrs: dict) -> tuple[int, ...]:
        """Argument positions that need ``domain`` (pow: only for fractional or negative
        exponents)."""
        return self.domain_rule(attrs)

    def sample(self, chooser: Any, in_ranks: Sequence[int]) -> dict | None:
        return self.sample_attrs(chooser, in_ranks)

    def public_attrs(self, attrs: dict) -> dict:
        """Attrs without generator-private keys (those starting with ``_``)."""
        return {k: v for k, v in attrs.items() if not k.startswith("_")}

    def attrs_problem(self, attrs: Any) -> str | None:
        """Why ``attrs`` (a node's public attrs, from a file) are not this op's, or None."""
        if not isinstance(attrs, Mapping):
            return "attrs must be an object"
        unknown = [k for k in attrs if k not in self.attributes]
        if unknown:
            return f"{self.name} has no attribute {shown(unknown[0])}"
        missing = [k for k in self.attributes if k not in attrs]
        if missing:
            return f"{self.name} needs attribute {missing[0]!r}"
        for key, attr in self.attributes.items():
            bad = attr.problem(attrs[key])
            if bad:
                return f"{self.name} attribute {key!r} {bad}, got {shown(attrs[key])}"
        return None

    def out_shape(self, in_shapes: Sequence[Sequence[int]], attrs: Any) -> list[int]:
        """The output shape on concrete input shapes (Python ints, nothing allocated); raises
        :class:`SpecError` with one line when the node is not well formed."""
        if len(in_shapes) != self.arity:
            raise SpecError(f"{self.name} takes {self.arity} argument(s), got {len(in_shapes)}")
        bad = self.attrs_problem(attrs)
        if bad:
            raise SpecError(bad)
        out = [int(d) for d in self.infer([list(s) for s in in_shapes], dict(attrs))]
        if len(out) > MAX_RANK:
            raise SpecError(f"{self.name} would make a rank-{len(out)} value (at most {MAX_RANK})")
        return out


#: The parts every record must have as callables.
RULES = ("torch_fn", "shape_rule", "sample_attrs", "infer", "domain_rule", "interval",
         "dtype_rule", "error", "reads")
#: Input domains an op may need at its ``domain_args``.
DOMAINS = (None, "positive", "nonzero")


def missing_parts(spec: OpSpec) -> list[str]:
    """What ``spec`` lacks or declares inconsistently (empty for a complete record): a rule that
    is not callable, attributes that are not :class:`Attr`, an unknown domain or fusing, a fused
    lowering its kind does not allow, a domain without positions or positions without one."""
    problems = [f"{part} is not callable" for part in RULES if not callable(getattr(spec, part))]
    for part in ("partial", "finalize", "builder", "undefined"):
        value = getattr(spec, part)
        if value is not None and not callable(value):
            problems.append(f"{part} is neither None nor callable")
    # a family's records are made by the home module's _spec, whose Attr a miscompile
    # mutant's private copy of this file does not share: either class is an Attr
    attr_classes = (Attr, getattr(sys.modules.get(_HOME), "Attr", Attr))
    if not isinstance(spec.attributes, Mapping) or not all(
        isinstance(a, attr_classes) for a in spec.attributes.values()
    ):
        problems.append("attributes are not Attr declarations")
    if spec.domain not in DOMAINS:
        problems.append(f"unknown domain {spec.domain!r}")
    if spec.fusing not in FUSING:
        problems.append(f"unknown fusing {spec.fusing!r}")
    elif spec.fusing is not None and spec.fusing != spec.kind:
        problems.append(f"a {spec.kind} op cannot be fused as {spec.fusing!r}")
    if spec.copies and spec.error is not er.moved:
        problems.append("a layout op's error must move with its values (error_rules.moved)")
    return problems + _lowering_problems(spec)


def _lowering_problems(spec: OpSpec) -> list[str]:
    """What is wrong with the record's fusing templates: the lowering its ``fusing`` names has
    its parts (and no other lowering's), and every template names only the op's operands and
    attributes (a reduction body: only ``{src}``) -- a misspelt field would otherwise surface as
    a KeyError in the middle of a compile, taken for an unsupported node."""
    given = [
        part
        for part, there in (
            ("template", spec.template is not None),
            ("cases", bool(spec.cases)),
            ("builder", spec.builder is not None),
            ("reduction_body", bool(spec.reduction_body)),
        )
        if there
    ]
    fields: set[str] = set()
    if spec.fusing == "elementwise":
        if "template" not in given and "builder" not in given:
            return ["fused as elementwise without a template (or a builder and its cases)"]
        fields = set("abcd"[: spec.arity]) | set(spec.attributes)
        # one expression, or one put together from cases: not both
        wanted = ["template"] if "template" in given else ["cases", "builder"]
    elif spec.fusing == "reduction":
        fields, wanted = {"src"}, ["reduction_body"]
    elif spec.fusing is None:
        wanted = []
    else:  # an unknown lowering (missing_parts names it): no parts to expect
        return []
    lowering = f"{spec.fusing} lowering" if spec.fusing else "op that is not fused"
    problems = [f"{part} is missing" for part in wanted if part not in given]
    problems += [f"{part} does not belong to this {lowering}" for part in given
                 if part not in wanted]
    texts = {
        "template": [spec.template],
        "cases": list(spec.cases.values()),
        "reduction_body": list(spec.reduction_body),
    }
    for text in (t for part in wanted for t in texts.get(part, ()) if t is not None):
        if not isinstance(text, str):
            problems.append(f"template {shown(text)} is not text")
            continue
        try:
            names = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
        except ValueError:
            problems.append(f"template {text!r} is not a format string")
            continue
        unknown = sorted(names - fields)
        if unknown:
            problems.append(f"template {text!r} names {unknown[0]!r}, no operand or attribute")
    return problems


def _positions(*positions: int) -> Callable[[dict], tuple[int, ...]]:
    return lambda attrs: positions


def _pow_domain(attrs: dict) -> tuple[int, ...]:
    """Only fractional and negative exponents need a positive base."""
    e = float(attrs.get("exponent", 2.0))
    return (0,) if e != math.floor(e) or e < 0 else ()


def _finalize_shape(attrs: dict, in_shapes: Any, out_shape: Sequence[int], chooser: Any) -> dict:
    """reshape / expand: the solved output shape."""
    return {"shape": [int(d) for d in out_shape]}


def _finalize_index(
    attrs: dict, in_shapes: Sequence[Sequence[int]], out_shape: Sequence[int], chooser: Any
) -> dict:
    """index_select: a strided (possibly reversed, wrapping) index of the solved length."""
    ch = as_chooser(chooser)
    dim = attrs["dim"]
    n_in = int(in_shapes[0][dim])
    n_out = int(out_shape[dim])
    step = ch.integers(0, n_in - 1) if n_in > 1 else 0
    start = ch.integers(0, n_in - 1) if n_in > 1 else 0
    rev = ch.boolean()
    idx = [(start + step * j) % n_in for j in range(n_out)]
    return {"index": idx[::-1] if rev else idx}


#: the stable import path of the torch functions (fx graphs, repros and ``fx_minifier`` name
#: them by it)
_HOME = "fuzzkit.targets.compiler.graphs.ops"


def _torch_fn(name: str) -> Callable[..., torch.Tensor]:
    """The torch function of op ``name``: the one in :data:`_HOME`, even when this is a
    miscompile mutant's private copy of the module, whose records would otherwise carry copies
    of every function -- graphs built before the mutant was applied, :func:`op_of` and repros
    must find one function per op whichever records are in force."""
    home = sys.modules.get(_HOME)
    return getattr(home, name) if home is not None else globals()[name]


def _lower_pow(cases: Mapping[Any, str], fields: dict[str, str], attrs: dict) -> str:
    """The form of the node's exponent (KeyError: none for it, the node runs eagerly)."""
    return cases[float(attrs["exponent"])].format(**fields)


def _lower_clamp(cases: Mapping[Any, str], fields: dict[str, str], attrs: dict) -> str:
    """One ``where`` per bound given, the lower one inside (a ``None`` bound: that side is
    left out, torch's ``clamp_min`` / ``clamp_max``)."""
    expr = fields["a"]
    for side in ("min", "max"):
        if attrs.get(side) is not None:
            expr = cases[side].format(**dict(fields, a=expr))
    return expr


def _spec(
    name: str,
    arity: int,
    kind: str,
    rule: Callable[..., Any],
    attrs: Callable[..., Any],
    *,
    error: er.ErrorRule,
    reads: er.DependencyRule,
    interval: iv.IntervalRule,
    fusing: str | None,
    domain: str | None = None,
    positions: tuple[int, ...] | Callable[[dict], tuple[int, ...]] = (),
    partial: er.PartialRule | None = None,
    selects: bool = False,
    compares: bool = False,
    grows: bool = False,
    finalize: Callable[..., dict] | None = None,
    guard_only: bool = False,
    attributes: Mapping[str, Attr] | None = None,
    infer: Callable[..., list] = _infer_same,
    template: str | None = None,
    cases: Mapping[Any, str] | None = None,
    builder: Callable[[Mapping[Any, str], dict[str, str], dict], str] | None = None,
    reduction_body: Sequence[str] = (),
    fn: Callable[..., torch.Tensor] | None = None,
    dtype_rule: DtypeRule | None = None,
    undefined: Callable[..., np.ndarray] | None = None,
) -> OpSpec:
    """One record; the torch function is this module's function of the same name, or ``fn``
    (an op of a family module, :data:`FAMILIES`: a module-level function of that module, its
    stable import path).  The error, dependency and interval rules and the fusing lowering have
    no default: an op states them."""
    fn = _torch_fn(name) if fn is None else fn

    def sample_attrs(chooser, in_ranks, _f=attrs):
        return _f(as_chooser(chooser), list(in_ranks))

    return OpSpec(
        name=name,
        arity=arity,
        kind=kind,
        shape_rule=rule,
        sample_attrs=sample_attrs,
        attributes=dict(attributes or {}),
        infer=infer,
        finalize=finalize,
        torch_fn=fn,
        domain=domain,
        domain_rule=positions if callable(positions) else _positions(*positions),
        interval=interval,
        error=error,
        reads=reads,
        partial=partial,
        selects=selects,
        fusing=fusing,
        template=template,
        cases=dict(cases or {}),
        builder=builder,
        reduction_body=tuple(reduction_body),
        compares=compares,
        grows=grows,
        guard_only=guard_only,
        dtype_rule=dtype_rule or default_dtype_rule(kind),
        undefined=undefined,
    )


#: parts shared by ops of one family
_EW = dict(reads=er.reads_elementwise, fusing="elementwise")
_UNARY = dict(_EW, rule=_rule_same, attrs=_attrs_none)
_BINARY = dict(_EW, rule=_rule_broadcast, attrs=_attrs_none, infer=_infer_broadcast, grows=True)
_ROW = dict(
    rule=_rule_same, attrs=_attrs_dim, reads=er.reads_row, fusing=None,
    attributes={"dim": _DIM}, infer=_infer_dim,
)
_REDUCE = dict(
    rule=_rule_reduce, attrs=_attrs_reduce, reads=er.reads_reduced, fusing="reduction",
    attributes={"dim": Attr("dims", 0, MAX_RANK - 1, MAX_RANK), "keepdim": Attr("bool")},
    infer=_infer_reduce,
)
_LAYOUT = dict(error=er.moved, reads=er.reads_moved, interval=iv.same, fusing=None)
#: amax / amin reduction bodies end here: torch.amax / amin propagate NaN and Triton's max / min
#: reductions do not promise to (a NaN row came back as its largest number: found by fuzzing with
#: special values), so a row that holds a NaN is set to NaN explicitly
_NAN_ROW = "acc = tl.where(tl.max((vals != vals).to(tl.int32), axis=1) > 0, float('nan'), acc)"

OPS: dict[str, OpSpec] = {
    s.name: s
    for s in [
        _spec("abs", 1, "elementwise", **_UNARY, error=er.selected, interval=iv.absolute,
              selects=True,
              template="tl.abs({a})"),
        _spec("neg", 1, "elementwise", **_UNARY, error=er.selected, interval=iv.neg,
              selects=True,
              template="(-{a})"),
        _spec("exp", 1, "elementwise", **_UNARY, error=er.exp, interval=iv.exp,
              template="tl.exp({a})"),
        _spec("log", 1, "elementwise", **_UNARY, error=er.log, interval=iv.log,
              domain="positive", positions=(0,),
              template="tl.log({a})"),
        _spec("sqrt", 1, "elementwise", **_UNARY, error=er.sqrt, interval=iv.sqrt,
              domain="positive", positions=(0,),
              template="tl.sqrt({a})"),
        _spec("rsqrt", 1, "elementwise", **_UNARY, error=er.rsqrt, interval=iv.rsqrt,
              domain="positive", positions=(0,),
              template="(1.0 / tl.sqrt({a}))"),
        # no fusing template: the fusing compiler leaves tanh to eager torch
        _spec("tanh", 1, "elementwise", **dict(_UNARY, fusing=None), error=er.tanh,
              interval=iv.tanh),
        _spec("sigmoid", 1, "elementwise", **_UNARY, error=er.sigmoid, interval=iv.sigmoid,
              template="(1.0 / (1.0 + tl.exp(-{a})))"),
        _spec("relu", 1, "elementwise", **_UNARY, error=er.selected, interval=iv.relu,
              selects=True,
              template="tl.where({a} < 0.0, 0.0, {a})"),
        _spec("gelu", 1, "elementwise", **_UNARY, error=er.gelu, interval=iv.gelu,
              template="(0.5 * {a} * (1.0 + tl.erf({a} * 0.7071067811865476)))"),
        _spec("sin", 1, "elementwise", **_UNARY, error=er.periodic, interval=iv.unit,
              template="tl.sin({a})"),
        _spec("cos", 1, "elementwise", **_UNARY, error=er.periodic, interval=iv.unit,
              template="tl.cos({a})"),
        _spec("reciprocal", 1, "elementwise", **_UNARY, error=er.reciprocal,
              interval=iv.reciprocal, domain="nonzero", positions=(0,),
              template="(1.0 / {a})"),
        # small integer powers by repeated multiplication, the half-integer ones by sqrt
        _spec("pow", 1, "elementwise", _rule_same, _attrs_pow, **_EW, error=er.power,
              interval=iv.power, domain="positive", positions=_pow_domain,
              attributes={"exponent": Attr("real", -16, 16)},
              builder=_lower_pow, cases={
                  0.0: "tl.where({a} == {a}, 1.0, 1.0)",  # x**0 is 1 for NaN and Inf too
                  1.0: "({a})",
                  2.0: "({a} * {a})",
                  3.0: "({a} * {a} * {a})",
                  -1.0: "(1.0 / {a})",
                  -2.0: "(1.0 / ({a} * {a}))",
                  0.5: "tl.sqrt({a})",
                  1.5: "({a} * tl.sqrt({a}))",
                  -0.5: "(1.0 / tl.sqrt({a}))",
              }),
        _spec("clamp", 1, "elementwise", _rule_same, _attrs_clamp, **_EW, error=er.clamped,
              interval=iv.clamp, selects=True,
              attributes={"min": Attr("bound"), "max": Attr("bound")}, infer=_infer_clamp,
              builder=_lower_clamp, cases={
                  "min": "tl.where({a} < {min}, {min}, {a})",
                  "max": "tl.where({a} > {max}, {max}, {a})",
              }),
        _spec("add_scalar", 1, "elementwise", _rule_same, _attrs_add_scalar, **_EW,
              error=er.add_scalar, interval=iv.add_scalar, guard_only=True,
              attributes={"value": Attr("real", -65504, 65504)},
              template="({a} + {value})"),
        _spec("add", 2, "elementwise", **_BINARY, error=er.add_sub, interval=iv.add,
              template="({a} + {b})"),
        _spec("sub", 2, "elementwise", **_BINARY, error=er.add_sub, interval=iv.sub,
              template="({a} - {b})"),
        _spec("mul", 2, "elementwise", **_BINARY, error=er.mul, interval=iv.mul,
              template="({a} * {b})"),
        _spec("div", 2, "elementwise", **_BINARY, error=er.div, interval=iv.div,
              domain="nonzero", positions=(1,),
              template="({a} / {b})"),
        # NaN-propagating forms: torch.maximum / minimum propagate NaN, tl.maximum does not
        _spec("maximum", 2, "elementwise", **_BINARY, error=er.extreme_of_two,
              interval=iv.maximum, selects=True, compares=True,
              template="tl.where({a} != {a}, {a}, tl.where({a} > {b}, {a}, {b}))"),
        _spec("minimum", 2, "elementwise", **_BINARY, error=er.extreme_of_two,
              interval=iv.minimum, selects=True, compares=True,
              template="tl.where({a} != {a}, {a}, tl.where({a} < {b}, {a}, {b}))"),
        _spec("where_gt", 4, "elementwise", **_BINARY, error=er.where_gt, interval=iv.where,
              selects=True, compares=True,
              template="tl.where({a} > {b}, {c}, {d})"),
        _spec("matmul", 2, "matmul", _rule_matmul, _attrs_matmul, error=er.matmul,
              reads=er.reads_matmul, interval=iv.matmul, partial=er.partial_through,
              fusing=None, grows=True, infer=_infer_matmul),
        _spec("bmm", 2, "matmul", _rule_bmm, _attrs_bmm, error=er.matmul,
              reads=er.reads_matmul, interval=iv.matmul, partial=er.partial_through,
              fusing=None, grows=True, infer=_infer_bmm),
        _spec("softmax", 1, "normalization", **_ROW, error=er.softmax, interval=iv.softmax),
        _spec("log_softmax", 1, "normalization", **_ROW, error=er.log_softmax,
              interval=iv.log_softmax),
        _spec("layer_norm", 1, "normalization", **_ROW, error=er.layer_norm,
              interval=iv.layer_norm, partial=er.partial_squares),
        _spec("sum", 1, "reduction", **_REDUCE, error=er.total, interval=iv.total,
              partial=er.partial_through,
              reduction_body=["acc = tl.sum(tl.where(mask, {src}, 0.0), axis=1)"]),
        _spec("mean", 1, "reduction", **_REDUCE, error=er.mean, interval=iv.same,
              partial=er.partial_sum,
              reduction_body=["acc = tl.sum(tl.where(mask, {src}, 0.0), axis=1) / N"]),
        _spec("amax", 1, "reduction", **dict(_REDUCE, infer=_infer_extreme), error=er.extreme,
              interval=iv.same, selects=True,
              reduction_body=["vals = tl.where(mask, {src}, float('-inf'))",
                              "acc = tl.max(vals, axis=1)", _NAN_ROW]),
        _spec("amin", 1, "reduction", **dict(_REDUCE, infer=_infer_extreme), error=er.extreme,
              interval=iv.same, selects=True,
              reduction_body=["vals = tl.where(mask, {src}, float('inf'))",
                              "acc = tl.min(vals, axis=1)", _NAN_ROW]),
        _spec("cumsum", 1, "scan", _rule_same, _attrs_dim, error=er.cumsum,
              reads=er.reads_scan, interval=iv.cumsum, partial=er.partial_through, fusing=None,
              attributes={"dim": _DIM}, infer=_infer_dim),
        _spec("reshape", 1, "layout", _rule_reshape, _attrs_reshape, **_LAYOUT,
              finalize=_finalize_shape, attributes={"shape": _SHAPE}, infer=_infer_reshape),
        _spec("permute", 1, "layout", _rule_permute, _attrs_permute, **_LAYOUT,
              attributes={"perm": Attr("ints", 0, MAX_RANK - 1, MAX_RANK)},
              infer=_infer_permute),
        _spec("transpose", 1, "layout", _rule_transpose, _attrs_transpose, **_LAYOUT,
              attributes={"dim0": _DIM, "dim1": _DIM}, infer=_infer_transpose),
        _spec("expand", 1, "layout", _rule_expand, _attrs_expand, **_LAYOUT, grows=True,
              finalize=_finalize_shape, attributes={"shape": _SHAPE}, infer=_infer_expand),
        _spec("unsqueeze", 1, "layout", _rule_unsqueeze, _attrs_unsqueeze, **_LAYOUT,
              attributes={"dim": _DIM}, infer=_infer_unsqueeze),
        _spec("squeeze", 1, "layout", _rule_squeeze, _attrs_squeeze, **_LAYOUT,
              attributes={"dim": _DIM}, infer=_infer_squeeze),
        _spec("cat", 2, "concat", _rule_cat, _attrs_cat, **dict(_LAYOUT, interval=iv.cat),
              grows=True, attributes={"dim": _DIM}, infer=_infer_cat),
        _spec("index_select", 1, "gather", _rule_index_select, _attrs_index_select, **_LAYOUT,
              grows=True, finalize=_finalize_index,
              attributes={"dim": _DIM, "index": Attr("ints", 0)}, infer=_infer_index_select),
    ]
}

#: Op families beyond the core records above: each module defines its torch functions at module
#: level (their stable fx import path) and a ``RECORDS`` list of :class:`OpSpec` made with
#: :func:`_spec` (``fn=`` its own function) -- one record per op all the same, a family just keeps
#: this file from growing without bound.  Absolute names: a miscompile mutant's private copy of
#: this file registers the same families.
FAMILIES: tuple[str, ...] = tuple(
    f"fuzzkit.targets.compiler.graphs.ops_{family}"
    for family in ("elementwise", "layout", "reduce", "typed")
)


def _family_records() -> list[OpSpec]:
    import importlib

    out: list[OpSpec] = []
    for module in FAMILIES:
        out.extend(importlib.import_module(module).RECORDS)
    return out


for _record in _family_records():
    if _record.name in OPS:  # pragma: no cover - a programming error, caught at import
        raise RuntimeError(f"op {_record.name!r} is declared twice")
    OPS[_record.name] = _record

#: ops the generators draw from by default (guard-only helpers excluded)
DEFAULT_OPS: tuple[str, ...] = tuple(n for n, s in OPS.items() if not s.guard_only)

_BY_FUNCTION: dict[Any, str] = {s.torch_fn: n for n, s in OPS.items()}


def op_of(fn: Any) -> str | None:
    """The op whose torch function ``fn`` is (an fx ``call_function`` target), or None."""
    try:
        return _BY_FUNCTION.get(fn)
    except TypeError:  # an unhashable target is no op of ours
        return None


def finalize_attrs(
    op: str, attrs: dict, in_shapes: Sequence[Sequence[int]], out_shape: Sequence[int], chooser: Any
) -> dict:
    """Public attrs of a node once concrete shapes are known (the record's ``finalize`` fills
    shape / index attrs)."""
    spec = OPS[op]
    out = spec.public_attrs(attrs)
    if spec.finalize is not None:
        out.update(spec.finalize(attrs, in_shapes, out_shape, chooser))
    return out


def accepted_dtypes(op: str, attrs: Mapping[str, Any], arity: int | None = None
                    ) -> list[tuple[str, ...]]:
    """Every operand dtype combination (of :data:`VALUE_DTYPES`) ``op``'s dtype rule takes
    with ``attrs``, float32-first (the generator's search for operands; shape checks)."""
    import itertools

    spec = OPS[op]
    n = spec.arity if arity is None else arity
    return [c for c in itertools.product(VALUE_DTYPES, repeat=n)
            if spec.dtype_rule(list(c), attrs) is not None]


def eval_shape(op: str, attrs: dict, in_shapes: Sequence[Sequence[int]],
               in_dtypes: Sequence[str] | None = None) -> list[int]:
    """Concrete output shape of ``op`` on concrete input shapes (public attrs), via torch meta
    (operands of ``in_dtypes``; default float32, else the first combination the op takes)."""
    if in_dtypes is None:
        floats = ["float32"] * len(in_shapes)
        ok = OPS[op].dtype_rule(floats, attrs) is not None
        in_dtypes = floats if ok else accepted_dtypes(op, attrs, len(in_shapes))[0]
    metas = [torch.empty(tuple(s), device="meta", dtype=torch_dtype_of(d))
             for s, d in zip(in_shapes, in_dtypes)]
    return list(OPS[op].torch_fn(*metas, **attrs).shape)
