"""Op family ``layout`` of the compiler-graph catalogue (:data:`.ops.FAMILIES`): layout,
indexing, view and in-place ops: slicing with steps, flips, pads, stacks and splits, gathers and
scatters, as_strided views and in-place updates seen through views.

Each op is one :class:`~.ops.OpSpec` record made with :func:`.ops._spec` (``fn=`` the
module-level torch function below, whose import path is the op's stable fx target).

Why these ops: compilers rewrite views and in-place updates (Inductor's functionalization turns
``view.add_(b)`` into a scatter back into the base, reinplacing turns it back), and indexing ops
lower to loops whose bounds come from attributes; those rewrites are where aliasing and
off-by-one bugs live, and a graph of contiguous elementwise ops never reaches them.

Three groups:

* **bit copies** (``kind`` in :data:`.ops.COPY_KINDS`): slices with steps, narrow, select,
  pieces of split / chunk / unbind, flip, roll, movedim, flatten / unflatten, repeat / tile,
  diagonal, tril / triu (the zeros they write are exact), stack, gather, scatter /
  index_copy (duplicate-free indices: a repeated destination has no defined winner in torch),
  as_strided (on a contiguous clone, so the storage is exactly the operand's elements),
  expand_as, and ``inplace_copy_as_strided`` (``copy_`` into a non-overlapping strided view).
  Their error rule is :func:`.error_rules.moved` (the op applied to the error arrays).
* **sums into a destination**: ``scatter_add``, ``index_add``, ``index_put`` (``accumulate``;
  without it duplicate-free), ``inplace_index_put_moved`` -- per destination element a sum of the
  base and every value sent there, bounded by :func:`accumulated` (``gamma`` of the count of
  terms in the dtype's roundoff: eager CPU kernels add in the dtype).
* **in-place arithmetic through a view**: the torch function clones its operand, takes a view
  (transpose, strided slice, diagonal, select, movedim) and updates the view in place, returning
  the base -- so a compiler that loses the mutation (the functionalized write-back) returns the
  clone unchanged, which the error bound does not excuse -- and ``view_sees_add``, a view taken
  *before* its base is mutated, whose values must show the mutation.

Indexing attributes come from files: every index, offset and stride is checked by the op's
concrete shape rule (``infer``) against the operand shapes (:class:`~.ops.SpecError`, one
line), and index lists are bounded by :data:`MAX_INDEX` entries.
"""

from __future__ import annotations

import builtins as _b
import math
from typing import Any, Sequence

import numpy as np
import torch
import z3

from fuzzkit.targets.compiler.graphs import error_rules as er
from fuzzkit.targets.compiler.graphs import intervals as iv
from fuzzkit.targets.compiler.graphs.common import MAX_RANK
from fuzzkit.targets.compiler.graphs.ops import (
    Attr,
    OpSpec,
    SpecError,
    _spec,
    as_chooser,
    fresh_dim,
    int_val,
)

__all__ = ["RECORDS", "MAX_INDEX", "accumulated"]

#: The most entries an index attribute (gather, scatter, index_add, ... ) may hold: the
#: compiler strategy's element cap (``strategies.MAX_ELEMENTS``); a node's output holds at most
#: this many gathered elements, and a file cannot make validation walk a longer list.
MAX_INDEX = 1 << 17
#: Integer attributes torch sees as int64 arguments: kept within int32 so no conversion
#: overflows (shape rules bound offsets and indices by the operand's dims anyway).
_BIG = 2**31 - 1
_INT = Attr("int", 0, _BIG)
_SIGNED = Attr("int", -_BIG, _BIG)
_DIM = Attr("int", 0, MAX_RANK - 1)
_INDEX = Attr("ints", 0, _BIG, MAX_INDEX)
_SIZES = Attr("ints", 0, _BIG, MAX_RANK)
_DIMS = Attr("ints", 0, MAX_RANK - 1, MAX_RANK)
_INF = np.inf


# ----------------------------------------------------------------------------------------------
# torch functions (fx call_function targets): names equal op names, attrs are kwargs
# ----------------------------------------------------------------------------------------------


def _long(index: Sequence[int], like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(list(index), dtype=torch.long, device=like.device)


def _strided(t: torch.Tensor, dim: int, start: int, end: int | None, step: int) -> torch.Tensor:
    """``t[..., start:end:step, ...]`` along ``dim`` (a view)."""
    where = [_b.slice(None)] * dim + [_b.slice(start, end, step)]
    return t[tuple(where)]


def slice(a, dim, start, end, step):
    return _strided(a, dim, start, end, step)


def narrow(a, dim, start, length):
    return torch.narrow(a, dim, start, length)


def select(a, dim, index):
    return torch.select(a, dim, index)


def unbind_piece(a, dim, piece):
    return torch.unbind(a, dim)[piece]


def flip(a, dims):
    return torch.flip(a, list(dims))


def roll(a, shifts, dims):
    return torch.roll(a, list(shifts), list(dims))


def pad(a, pad, value):
    return torch.nn.functional.pad(a, list(pad), mode="constant", value=value)


def stack(a, b, dim):
    return torch.stack([a, b], dim=dim)


def split_piece(a, dim, split_size, piece):
    return torch.split(a, split_size, dim)[piece]


def chunk_piece(a, dim, chunks, piece):
    return torch.chunk(a, chunks, dim)[piece]


def movedim(a, source, destination):
    return torch.movedim(a, source, destination)


def flatten(a, start_dim, end_dim):
    return torch.flatten(a, start_dim, end_dim)


def unflatten(a, dim, sizes):
    return torch.unflatten(a, dim, tuple(sizes))


def repeat(a, repeats):
    return a.repeat(*repeats)


def tile(a, dims):
    return torch.tile(a, tuple(dims))


def diagonal(a, offset, dim1, dim2):
    return torch.diagonal(a, offset, dim1, dim2)


def tril(a, diagonal):
    return torch.tril(a, diagonal)


def triu(a, diagonal):
    return torch.triu(a, diagonal)


def gather(a, dim, index, shape):
    return torch.gather(a, dim, _long(index, a).reshape(tuple(shape)))


def scatter(a, b, dim, index):
    return torch.scatter(a, dim, _long(index, a).reshape(b.shape), b)


def scatter_add(a, b, dim, index):
    return torch.scatter_add(a, dim, _long(index, a).reshape(b.shape), b)


def index_add(a, b, dim, index):
    return torch.index_add(a, dim, _long(index, a), b)


def index_copy(a, b, dim, index):
    return torch.index_copy(a, dim, _long(index, a), b)


def index_put(a, b, index, accumulate):
    return torch.index_put(a, (_long(index, a),), b, accumulate)


def as_strided(a, size, stride, storage_offset):
    base = a.clone(memory_format=torch.contiguous_format)  # storage: exactly a's elements
    return torch.as_strided(base, tuple(size), tuple(stride), storage_offset)


def expand_as(a, b):
    return a.expand_as(b)


def inplace_copy_as_strided(a, b, size, stride, storage_offset):
    c = a.clone(memory_format=torch.contiguous_format)
    c.as_strided(tuple(size), tuple(stride), storage_offset).copy_(b)
    return c


def inplace_add_transposed(a, b, dim0, dim1):
    c = a.clone()
    c.transpose(dim0, dim1).add_(b)
    return c


def inplace_mul_sliced(a, b, dim, start, step):
    c = a.clone()
    _strided(c, dim, start, None, step).mul_(b)
    return c


def inplace_clamp_diagonal(a, offset, min, max):
    c = a.clone()
    c.diagonal(offset, -2, -1).clamp_(min=min, max=max)
    return c


def inplace_fill_select(a, dim, index, value):
    c = a.clone()
    c.select(dim, index).fill_(value)
    return c


def inplace_index_put_moved(a, b, dim, index, accumulate):
    c = a.clone()
    c.movedim(dim, 0).index_put_((_long(index, c),), b, accumulate)
    return c


def view_sees_add(a, b, dim, start, step):
    c = a.clone()
    view = _strided(c, dim, start, None, step)  # taken before the mutation
    c.add_(b)
    return view


# ----------------------------------------------------------------------------------------------
# shared checks (concrete shape rules: plain Python ints, SpecError with one line)
# ----------------------------------------------------------------------------------------------


def _in_rank(dim: Any, rank: int, what: str = "dim") -> int:
    if not 0 <= int(dim) < rank:
        raise SpecError(f"{what} {dim} is out of range for a rank-{rank} operand")
    return int(dim)


def _ranked(shape: Sequence[int], least: int, op: str) -> list[int]:
    if len(shape) < least:
        raise SpecError(f"{op} needs an operand of rank >= {least}, got rank {len(shape)}")
    return [int(d) for d in shape]


def _distinct(dims: Sequence[int], rank: int, what: str = "dims") -> list[int]:
    out = [_in_rank(d, rank, what) for d in dims]
    if len(set(out)) != len(out):
        raise SpecError(f"{what} {list(out)} repeat a dim")
    return out


def _indices(index: Sequence[int], size: int, what: str) -> list[int]:
    """Every entry of an index attr below ``size`` (the indexed dim's length)."""
    bad = next((int(i) for i in index if int(i) >= size), None)
    if bad is not None:
        raise SpecError(f"{what}: index {bad} is out of range for a dim of size {size}")
    return [int(i) for i in index]


def _columns_distinct(index: Sequence[int], shape: Sequence[int], dim: int, what: str) -> None:
    """No two entries of ``index`` (of ``shape``) that differ only along ``dim`` are equal: each
    destination is written once (torch leaves repeated destinations' winner undefined)."""
    if not index:
        return
    arr = np.moveaxis(np.asarray(index, dtype=np.int64).reshape(tuple(shape)), dim, -1)
    arr = np.sort(arr.reshape(-1, arr.shape[-1]), axis=1)
    if arr.shape[1] > 1 and np.any(arr[:, 1:] == arr[:, :-1]):
        raise SpecError(f"{what}: an index repeats a destination (allowed only when adding)")


def _same_except(a: Sequence[int], b: Sequence[int], dim: int | None, op: str, how: str) -> None:
    if len(a) != len(b) or any(x != y for k, (x, y) in enumerate(zip(a, b)) if k != dim):
        raise SpecError(f"{op}: operand shapes {list(a)} and {list(b)} {how}")


def _numel(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def _stride_problem(size: Sequence[int], stride: Sequence[int], offset: int, numel: int,
                    disjoint: bool) -> str | None:
    """Why an as_strided view ``(size, stride, offset)`` does not fit a contiguous storage of
    ``numel`` elements (or, ``disjoint``, may write one element twice), or None."""
    if len(size) != len(stride):
        return f"size {list(size)} and stride {list(stride)} differ in length"
    if _numel(size) == 0:
        return None
    last = int(offset) + _b.sum((int(n) - 1) * int(s) for n, s in zip(size, stride))
    if last >= numel:
        return (f"the view (size {list(size)}, stride {list(stride)}, offset {offset}) reaches "
                f"element {last} of a {numel}-element storage")
    if disjoint:  # sorted by stride, each stride passes everything the smaller ones span
        span = 0
        for n, s in sorted(((int(n), int(s)) for n, s in zip(size, stride) if n > 1),
                           key=lambda p: p[1]):
            if s <= span:
                return f"stride {list(stride)} overlaps itself for size {list(size)}"
            span += (n - 1) * s
    return None


def _seeded(ch: Any) -> np.random.Generator:
    """A NumPy generator seeded by one chooser draw: index lists of thousands of entries are one
    draw (a shrinkable one under Hypothesis), not thousands."""
    return np.random.default_rng(as_chooser(ch).integers(0, 2**31 - 1))


# ----------------------------------------------------------------------------------------------
# error, dependency and interval rules of the ops that are not bit copies
# ----------------------------------------------------------------------------------------------


def _t(x: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(x, dtype=np.float64, order="C"))


def _gamma(n: np.ndarray, u: float) -> np.ndarray:
    """``gamma_n`` elementwise in roundoff ``u`` (infinite where ``n u >= 1``)."""
    t = n * u
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(t < 1, t / np.maximum(1 - t, 1e-300), _INF)


def accumulated(o: er.Operands) -> tuple[Any, Any]:
    """scatter_add / index_add / index_put / inplace_index_put_moved: each destination is its
    base value plus every value sent to it (``accumulate=False``: replaced by the one value
    sent, a bit copy).  The errors add up the same way (the op on the error arrays); the sum of
    ``c + 1`` terms (``c`` sent values) costs ``gamma_c`` of the terms' magnitudes in the
    dtype's roundoff (eager CPU kernels add in the dtype, not float32) and one flush per term;
    elements nothing is sent to are copies of the base: nothing computed."""
    (a, b), (ea, eb) = o.xs, o.es
    attrs = o.attrs
    prop = o.fn(_t(ea), _t(eb), **attrs).numpy()
    if not attrs.get("accumulate", True):
        return prop, np.zeros_like(o.ay)
    count = o.fn(torch.zeros(a.shape, dtype=torch.float64), torch.ones(b.shape,
                 dtype=torch.float64), **attrs).numpy()
    mag = o.fn(_t(np.abs(a) + ea), _t(np.abs(b) + eb), **attrs).numpy()
    u = _b.max(o.u, er.U32)
    comp = np.where(count > 0, _gamma(count, u) * mag + (count + 1) * er.FLUSH, 0.0)
    return prop, comp


def _reads_any(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """Ops whose output reads its operands through the op itself on the 0/1 masks (a sum is
    positive where any term is)."""
    t = [_t(m) for m in masks]
    return fn(*t, **attrs).contiguous().numpy() > 0


def _union(attrs: dict, ivals: Any, in_shapes: Any, out_shape: Any) -> iv.Interval:
    return (_b.min(i[0] for i in ivals), _b.max(i[1] for i in ivals))


def _with_zero(attrs: dict, ivals: Any, in_shapes: Any, out_shape: Any) -> iv.Interval:
    """tril / triu: the operand's values and the zeros written."""
    lo, hi = ivals[0]
    return (_b.min(lo, 0.0), _b.max(hi, 0.0))


def _with_value(attrs: dict, ivals: Any, in_shapes: Any, out_shape: Any) -> iv.Interval:
    """pad / inplace_fill_select: the operand's values and the constant written."""
    lo, hi = ivals[0]
    v = float(attrs["value"])
    return (_b.min(lo, v), _b.max(hi, v))


def _sums(attrs: dict, ivals: Any, in_shapes: Any, out_shape: Any) -> iv.Interval:
    """A base value plus at most ``k`` sent values, ``k`` the sent operand's length along the
    indexed dim (every one of them sent to one destination)."""
    (lo, hi), (blo, bhi) = ivals
    if not attrs.get("accumulate", True):
        return _union(attrs, ivals, in_shapes, out_shape)
    dim = attrs.get("dim", 0)
    shape = in_shapes[1]
    k = int(shape[dim]) if len(shape) > dim else 1
    return (lo + k * _b.min(blo, 0.0), hi + k * _b.max(bhi, 0.0))


def _sums_moved(attrs: dict, ivals: Any, in_shapes: Any, out_shape: Any) -> iv.Interval:
    """inplace_index_put_moved: as :func:`_sums`, but ``b`` lives in the moved frame
    ``[rows, *a.movedim(dim, 0).shape[1:]]``, so the values that can reach one destination
    are ``b``'s rows, ``b.shape[0]`` (``b.shape[dim]`` is an unrelated length there and would
    under-estimate the sum, hiding an overflow from :mod:`.bound` and the generator's guard)."""
    return _sums(dict(attrs, dim=0), ivals, in_shapes, out_shape)


def _add_then_base(attrs: dict, ivals: Any, in_shapes: Any, out_shape: Any) -> iv.Interval:
    """In-place add on a view of the base: added elements and untouched ones."""
    s = iv.add(attrs, ivals, in_shapes, out_shape)
    return (_b.min(s[0], ivals[0][0]), _b.max(s[1], ivals[0][1]))


def _mul_then_base(attrs: dict, ivals: Any, in_shapes: Any, out_shape: Any) -> iv.Interval:
    s = iv.mul(attrs, ivals, in_shapes, out_shape)
    return (_b.min(s[0], ivals[0][0]), _b.max(s[1], ivals[0][1]))


def _clamp_then_base(attrs: dict, ivals: Any, in_shapes: Any, out_shape: Any) -> iv.Interval:
    s = iv.clamp(attrs, ivals, in_shapes, out_shape)
    return (_b.min(s[0], ivals[0][0]), _b.max(s[1], ivals[0][1]))


#: the graph dtype of a unit roundoff (:data:`.bound.UNIT_ROUNDOFF`, which imports the ops)
_DTYPE_OF_U = {2.0**-24: "float32", 2.0**-11: "float16", 2.0**-8: "bfloat16"}


def _constant_error(value: float, u: float) -> float:
    """The computed error of writing the constant ``value``: none where it is a value of the
    dtype (the padded / filled elements are then judged exactly), else one float32 rounding on
    the way (kernels that hold it as float32 round twice; the final rounding is the bound's)."""
    from fuzzkit.values import round_to

    dtype = _DTYPE_OF_U.get(u)
    if dtype is not None and float(np.asarray(round_to(np.float64(value), dtype))) == value:
        return 0.0
    return er.U32 * _b.abs(value)


def _pad_error(o: er.Operands) -> tuple[Any, Any]:
    """pad: the moved errors (the operand's elements are copies); the padded elements are the
    constant (:func:`_constant_error`)."""
    attrs = dict(o.attrs, value=0.0)
    prop = o.fn(_t(o.es[0]), **attrs).numpy()
    padded = o.fn(torch.ones(o.xs[0].shape, dtype=torch.float64), **attrs).numpy() == 0
    return prop, np.where(padded, _constant_error(float(o.attrs["value"]), o.u), 0.0)


def _pad_reads(masks: list[np.ndarray], xs: Any, y: np.ndarray, attrs: Any, fn: Any) -> Any:
    """pad: moved masks; a padded element reads nothing, counted (conservatively) as reading
    the whole operand, so every output element depends on some input."""
    attrs = dict(attrs, value=0.0)
    moved = fn(_t(masks[0]), **attrs).numpy() > 0
    padded = fn(torch.ones(masks[0].shape, dtype=torch.float64), **attrs).numpy() == 0
    return moved | (padded & bool(np.any(masks[0])))


def _fill_error(o: er.Operands) -> tuple[Any, Any]:
    """inplace_fill_select: the operand's errors, the filled elements the constant (as pad)."""
    attrs = o.attrs
    filled = o.fn(_t(np.zeros(o.xs[0].shape)), **dict(attrs, value=1.0)).numpy() > 0
    prop = np.where(filled, 0.0, o.es[0])
    return prop, np.where(filled, _constant_error(float(attrs["value"]), o.u), 0.0)


def _viewed(o: er.Operands, view: Any, update: Any) -> tuple[np.ndarray, np.ndarray]:
    """An error rule of an in-place update through a view of a clone of operand 0: ``update``
    maps the view's (values, errors) and operand 1's (values, errors) to the updated elements'
    (prop, comp); every other element keeps operand 0's error, nothing computed."""
    a, b = (_t(x) for x in o.xs)
    ea, eb = (_t(e) for e in o.es)
    prop, comp = ea.clone(), torch.zeros_like(ea)
    y = _t(o.y)
    p, c = update(view(a), view(ea), b, eb, view(y))
    view(prop).copy_(p)
    view(comp).copy_(c)
    return prop.numpy(), comp.numpy()


def _add_update(va, ea, b, eb, y):
    prop = ea + eb
    return prop, er.U32 * (y.abs() + prop)


def _mul_update(va, ea, b, eb, y):
    prop = va.abs() * eb + b.abs() * ea + ea * eb
    return prop, er.U32 * (y.abs() + prop)


def _transposed_add_error(o: er.Operands) -> tuple[Any, Any]:
    d0, d1 = o.attrs["dim0"], o.attrs["dim1"]
    return _viewed(o, lambda t: t.transpose(d0, d1), _add_update)


def _sliced_mul_error(o: er.Operands) -> tuple[Any, Any]:
    at = o.attrs
    return _viewed(o, lambda t: _strided(t, at["dim"], at["start"], None, at["step"]),
                   _mul_update)


def _view_sees_add_error(o: er.Operands) -> tuple[Any, Any]:
    """The view of ``a + b``: the add's bound, sliced."""
    at = o.attrs
    prop = _strided(_t(o.es[0] + o.es[1]), at["dim"], at["start"], None, at["step"]).numpy()
    return prop, er.U32 * (o.ay + prop)


def _reads_transposed(masks, xs, y, attrs, fn):
    a, b = (_t(m) for m in masks)
    return (a + b.transpose(attrs["dim0"], attrs["dim1"])).numpy() > 0


def _reads_sliced(masks, xs, y, attrs, fn):
    """inplace_mul_sliced: the updated elements read both operands (the mul's mask is their
    sum: add the masks through the same view)."""
    a, b = (_t(m) for m in masks)
    _strided(a, attrs["dim"], attrs["start"], None, attrs["step"]).add_(b)
    return a.numpy() > 0


def _reads_view_sees_add(masks, xs, y, attrs, fn):
    return fn(*(_t(m) for m in masks), **attrs).contiguous().numpy() > 0


# ----------------------------------------------------------------------------------------------
# per-op shape rules (z3), concrete rules (ints), attribute draws and finalizers
# ----------------------------------------------------------------------------------------------


def _lt(ch: Any, n: int) -> int:
    """A draw in ``[0, n)`` (0 when ``n <= 1``)."""
    return ch.integers(0, n - 1) if n > 1 else 0


def _attrs_dim(ch, ranks):
    return {"dim": ch.integers(0, ranks[0] - 1)} if ranks[0] else None


# -- slice / narrow: a fresh output length along dim, at most the operand's


def _rule_shorter(shapes, attrs):
    s = list(shapes[0])
    d = attrs["dim"]
    o = fresh_dim("i")
    out = s[:d] + [o] + s[d + 1:]
    return [o <= s[d]], out


def _steps(ch: Any, n: int, m: int) -> tuple[int, int]:
    """(start, step) of a strided slice ``start::step`` of a length-``n`` dim with ``m``
    elements (``1 <= m <= n``)."""
    step = ch.integers(1, _b.max(1, (n - 1) // (m - 1))) if m > 1 else ch.integers(1, n)
    lo = _b.max(0, n - m * step)
    return ch.integers(lo, n - 1 - (m - 1) * step), step


def _finalize_slice(attrs, in_shapes, out_shape, chooser):
    ch = as_chooser(chooser)
    d = attrs["dim"]
    n, m = int(in_shapes[0][d]), int(out_shape[d])
    if m == 0:
        start = _lt(ch, n + 1)
        return {"start": start, "end": start, "step": 1}
    step = ch.integers(1, _b.max(1, (n - 1) // (m - 1))) if m > 1 else ch.integers(1, n)
    start = ch.integers(0, n - 1 - (m - 1) * step)
    first_end = start + (m - 1) * step + 1
    return {"start": start, "end": ch.integers(first_end, _b.min(n, start + m * step)),
            "step": step}


def _infer_slice(shapes, attrs):
    s = list(shapes[0])
    d = _in_rank(attrs["dim"], len(s))
    start, end, step = int(attrs["start"]), int(attrs["end"]), int(attrs["step"])
    if not start <= end <= s[d]:
        raise SpecError(f"slice {start}:{end} does not fit dim {d} of size {s[d]}")
    s[d] = -(-(end - start) // step)
    return s


def _finalize_narrow(attrs, in_shapes, out_shape, chooser):
    d = attrs["dim"]
    n, m = int(in_shapes[0][d]), int(out_shape[d])
    return {"start": as_chooser(chooser).integers(0, n - m), "length": m}


def _infer_narrow(shapes, attrs):
    s = list(shapes[0])
    d = _in_rank(attrs["dim"], len(s))
    start, length = int(attrs["start"]), int(attrs["length"])
    if start + length > s[d]:
        raise SpecError(f"narrow {start}+{length} does not fit dim {d} of size {s[d]}")
    s[d] = length
    return s


# -- select / unbind_piece: one index of dim, the dim dropped


def _rule_drop(shapes, attrs):
    s = list(shapes[0])
    return [], s[: attrs["dim"]] + s[attrs["dim"] + 1:]


def _finalize_select(attrs, in_shapes, out_shape, chooser):
    return {"index": _lt(as_chooser(chooser), int(in_shapes[0][attrs["dim"]]))}


def _finalize_piece(attrs, in_shapes, out_shape, chooser):
    return {"piece": _lt(as_chooser(chooser), int(in_shapes[0][attrs["dim"]]))}


def _dropping(key: str):
    def infer(shapes, attrs):
        s = list(shapes[0])
        d = _in_rank(attrs["dim"], len(s))
        if int(attrs[key]) >= s[d]:
            raise SpecError(f"{key} {attrs[key]} is out of range for dim {d} of size {s[d]}")
        return s[:d] + s[d + 1:]

    return infer


# -- flip / roll / movedim / tril / triu / diagonal


def _attrs_flip(ch, ranks):
    r = ranks[0]
    if r == 0:
        return None
    dims = sorted({ch.integers(0, r - 1) for _ in range(ch.integers(1, r))})
    return {"dims": dims}


def _infer_flip(shapes, attrs):
    _distinct(attrs["dims"], len(shapes[0]))
    return list(shapes[0])


def _attrs_roll(ch, ranks):
    r = ranks[0]
    if r == 0:
        return None
    dims = sorted({ch.integers(0, r - 1) for _ in range(ch.integers(1, r))})
    return {"shifts": [ch.integers(-5, 5) for _ in dims], "dims": dims}


def _infer_roll(shapes, attrs):
    if not attrs["dims"] or len(attrs["dims"]) != len(attrs["shifts"]):
        raise SpecError("roll needs one shift per dim (at least one)")
    _distinct(attrs["dims"], len(shapes[0]))
    return list(shapes[0])


def _attrs_movedim(ch, ranks):
    r = ranks[0]
    if r < 2:
        return None
    src = ch.integers(0, r - 1)
    dst = ch.integers(0, r - 2)
    return {"source": src, "destination": dst + (dst >= src)}


def _moved(s: list, src: int, dst: int) -> list:
    s = list(s)
    s.insert(dst, s.pop(src))
    return s


def _rule_movedim(shapes, attrs):
    return [], _moved(shapes[0], attrs["source"], attrs["destination"])


def _infer_movedim(shapes, attrs):
    r = len(shapes[0])
    src = _in_rank(attrs["source"], r, "source")
    return _moved(shapes[0], src, _in_rank(attrs["destination"], r, "destination"))


def _attrs_triangle(ch, ranks):
    return {"diagonal": ch.integers(-2, 2)} if ranks[0] >= 2 else None


def _infer_triangle(shapes, attrs):
    return _ranked(shapes[0], 2, "tril/triu")


def _attrs_diagonal(ch, ranks):
    r = ranks[0]
    if r < 2:
        return None
    d1 = ch.integers(0, r - 1)
    d2 = ch.integers(0, r - 2)
    return {"offset": ch.integers(-2, 2), "dim1": d1, "dim2": d2 + (d2 >= d1)}


def _diag_len(n1: Any, n2: Any, offset: int) -> Any:
    if offset >= 0:
        return z3.If(n1 <= n2 - offset, n1, n2 - offset)
    return z3.If(n1 + offset <= n2, n1 + offset, n2)


def _rule_diagonal(shapes, attrs):
    s = list(shapes[0])
    d1, d2 = attrs["dim1"], attrs["dim2"]
    n = _diag_len(s[d1], s[d2], attrs["offset"])
    return [n >= 1], [d for k, d in enumerate(s) if k not in (d1, d2)] + [n]


def _infer_diagonal(shapes, attrs):
    s = _ranked(shapes[0], 2, "diagonal")
    d1, d2 = _in_rank(attrs["dim1"], len(s), "dim1"), _in_rank(attrs["dim2"], len(s), "dim2")
    if d1 == d2:
        raise SpecError("diagonal needs two different dims")
    off = int(attrs["offset"])
    n = _b.min(s[d1], s[d2] - off) if off >= 0 else _b.min(s[d1] + off, s[d2])
    return [d for k, d in enumerate(s) if k not in (d1, d2)] + [_b.max(n, 0)]


# -- pad


def _attrs_pad(ch, ranks):
    r = ranks[0]
    if r == 0:
        return None
    k = ch.integers(1, _b.min(r, 2))
    return {"pad": [ch.integers(-2, 3) for _ in range(2 * k)],
            "value": ch.choice((0.0, -1.0, 0.5, 2.0, -0.25, 3.0))}


def _padded(s: list, pads: Sequence[int]) -> list:
    s = list(s)
    for j in range(len(pads) // 2):
        s[len(s) - 1 - j] = s[len(s) - 1 - j] + int(pads[2 * j]) + int(pads[2 * j + 1])
    return s


def _cropped(s: list, pads: Sequence[int]) -> list:
    """What is left of each padded dim once its negative pads have cropped it (torch crops
    first: this may not be negative)."""
    return [s[len(s) - 1 - j] + _b.min(int(pads[2 * j]), 0) + _b.min(int(pads[2 * j + 1]), 0)
            for j in range(len(pads) // 2)]


def _rule_pad(shapes, attrs):
    s = list(shapes[0])
    out = _padded(s, attrs["pad"])
    cons = [d >= 1 for d, old in zip(out, s) if d is not old]
    return cons + [c >= 0 for c in _cropped(s, attrs["pad"])], out


def _infer_pad(shapes, attrs):
    s = list(shapes[0])
    pads = attrs["pad"]
    if not pads or len(pads) % 2 or len(pads) // 2 > len(s):
        raise SpecError(f"pad needs 2 entries per padded dim (at most {len(s)} dims), "
                        f"got {len(pads)}")
    out = _padded(s, pads)
    if any(d < 1 for d, old in zip(out, s) if d != old) or min(_cropped(s, pads)) < 0:
        raise SpecError(f"pad {list(pads)} crops {s} to nothing")
    return out


# -- stack / split / chunk


def _attrs_stack(ch, ranks):
    r = ranks[0]
    if ranks[1] != r or r >= MAX_RANK:
        return None
    return {"dim": ch.integers(0, r)}


def _rule_stack(shapes, attrs):
    a, b = shapes
    out = list(a)
    out.insert(attrs["dim"], int_val(2))
    return [x == y for x, y in zip(a, b) if not x.eq(y)], out


def _infer_stack(shapes, attrs):
    a, b = (list(x) for x in shapes)
    if a != b:
        raise SpecError(f"cannot stack {a} and {b}")
    if not 0 <= attrs["dim"] <= len(a):
        raise SpecError(f"dim {attrs['dim']} is out of range for stacking rank-{len(a)} values")
    out = list(a)
    out.insert(int(attrs["dim"]), 2)
    return out


def _attrs_split(ch, ranks):
    if not ranks[0]:
        return None
    return {"dim": ch.integers(0, ranks[0] - 1), "split_size": ch.choice((1, 2, 3, 4, 8, 16)),
            "piece": ch.integers(0, 3)}


def _rule_split(shapes, attrs):
    s = list(shapes[0])
    d, k, p = attrs["dim"], attrs["split_size"], attrs["piece"]
    rest = s[d] - p * k
    return [rest >= 1], s[:d] + [z3.If(rest >= k, int_val(k), rest)] + s[d + 1:]


def _infer_split(shapes, attrs):
    s = list(shapes[0])
    d = _in_rank(attrs["dim"], len(s))
    k, p = int(attrs["split_size"]), int(attrs["piece"])
    if p * k >= s[d]:
        raise SpecError(f"split of size {s[d]} into {k}s has no piece {p}")
    s[d] = _b.min(k, s[d] - p * k)
    return s


def _attrs_chunk(ch, ranks):
    if not ranks[0]:
        return None
    return {"dim": ch.integers(0, ranks[0] - 1), "chunks": ch.integers(1, 5),
            "piece": ch.integers(0, 3)}


def _rule_chunk(shapes, attrs):
    s = list(shapes[0])
    d, k, p = attrs["dim"], attrs["chunks"], attrs["piece"]
    c = fresh_dim("c")  # ceil(n / chunks), the chunk length
    rest = s[d] - p * c
    cons = [c >= 1, k * (c - 1) < s[d], s[d] <= k * c, rest >= 1]
    return cons, s[:d] + [z3.If(rest >= c, c, rest)] + s[d + 1:]


def _infer_chunk(shapes, attrs):
    s = list(shapes[0])
    d = _in_rank(attrs["dim"], len(s))
    k, p = int(attrs["chunks"]), int(attrs["piece"])
    c = -(-s[d] // k)
    if p * c >= s[d]:
        raise SpecError(f"chunk of size {s[d]} into {k} has no piece {p}")
    s[d] = _b.min(c, s[d] - p * c)
    return s


# -- flatten / unflatten / repeat / tile


def _attrs_flatten(ch, ranks):
    r = ranks[0]
    if r == 0:
        return None
    start = ch.integers(0, r - 1)
    return {"start_dim": start, "end_dim": ch.integers(start, r - 1)}


def _rule_flatten(shapes, attrs):
    s = list(shapes[0])
    i, j = attrs["start_dim"], attrs["end_dim"]
    merged: Any = s[i]
    for d in s[i + 1: j + 1]:
        merged = merged * d
    return [], s[:i] + [merged] + s[j + 1:]


def _infer_flatten(shapes, attrs):
    s = _ranked(shapes[0], 1, "flatten")
    i = _in_rank(attrs["start_dim"], len(s), "start_dim")
    j = _in_rank(attrs["end_dim"], len(s), "end_dim")
    if j < i:
        raise SpecError(f"end_dim {j} is before start_dim {i}")
    return s[:i] + [_numel(s[i: j + 1])] + s[j + 1:]


def _attrs_unflatten(ch, ranks):
    r = ranks[0]
    if r == 0 or r >= MAX_RANK:
        return None
    return {"dim": ch.integers(0, r - 1), "_k": ch.choice((2, 3, 4))}


def _rule_unflatten(shapes, attrs):
    s = list(shapes[0])
    d, k = attrs["dim"], attrs["_k"]
    q = fresh_dim("r")
    return [s[d] == k * q], s[:d] + [int_val(k), q] + s[d + 1:]


def _finalize_unflatten(attrs, in_shapes, out_shape, chooser):
    d = attrs["dim"]
    return {"sizes": [int(out_shape[d]), int(out_shape[d + 1])]}


def _infer_unflatten(shapes, attrs):
    s = list(shapes[0])
    d = _in_rank(attrs["dim"], len(s))
    sizes = [int(x) for x in attrs["sizes"]]
    if not sizes or _numel(sizes) != s[d]:
        raise SpecError(f"cannot unflatten dim {d} of size {s[d]} into {sizes}")
    return s[:d] + sizes + s[d + 1:]


def _attrs_repeat(ch, ranks):
    r = ranks[0]
    extra = ch.integers(0 if r else 1, 1) if r < MAX_RANK else 0  # a 0-d value: one at least
    return {"repeats": [ch.integers(1, 3) for _ in range(r + extra)]}


def _rule_repeat(shapes, attrs):
    s = list(shapes[0])
    reps = attrs["repeats"]
    lead = len(reps) - len(s)
    return [], [int_val(r) for r in reps[:lead]] + [d * r for d, r in zip(s, reps[lead:])]


def _infer_repeat(shapes, attrs):
    s = list(shapes[0])
    reps = [int(r) for r in attrs["repeats"]]
    if len(reps) < _b.max(len(s), 1):
        raise SpecError(f"repeat needs at least {_b.max(len(s), 1)} repeats, got {len(reps)}")
    lead = len(reps) - len(s)
    return reps[:lead] + [d * r for d, r in zip(s, reps[lead:])]


def _attrs_tile(ch, ranks):
    n = ch.integers(1, MAX_RANK)
    if _b.max(n, ranks[0]) > MAX_RANK:
        return None
    return {"dims": [ch.integers(1, 3) for _ in range(n)]}


def _tiled(s: list, reps: list, one: Any) -> list:
    n = _b.max(len(s), len(reps))
    s = [one] * (n - len(s)) + list(s)
    reps = [1] * (n - len(reps)) + list(reps)
    return [d * r for d, r in zip(s, reps)]


def _rule_tile(shapes, attrs):
    return [], _tiled(shapes[0], attrs["dims"], int_val(1))


def _infer_tile(shapes, attrs):
    if not attrs["dims"]:
        raise SpecError("tile needs at least one repeat")
    return _tiled(list(shapes[0]), [int(r) for r in attrs["dims"]], 1)


# -- gather / scatter / index ops


def _rule_gather(shapes, attrs):
    s = list(shapes[0])
    out = [fresh_dim("i") for _ in s]
    return [o <= d for k, (o, d) in enumerate(zip(out, s)) if k != attrs["dim"]], out


def _finalize_gather(attrs, in_shapes, out_shape, chooser):
    n = int(in_shapes[0][attrs["dim"]])
    index = _seeded(chooser).integers(0, n, _numel(out_shape)).tolist()
    return {"index": index, "shape": [int(d) for d in out_shape]}


def _infer_gather(shapes, attrs):
    s = _ranked(shapes[0], 1, "gather")
    d = _in_rank(attrs["dim"], len(s))
    shape = [int(x) for x in attrs["shape"]]
    if len(shape) != len(s) or any(o > x for k, (o, x) in enumerate(zip(shape, s)) if k != d):
        raise SpecError(f"gather index shape {shape} does not fit operand {s} (dim {d})")
    if _numel(shape) != len(attrs["index"]):
        raise SpecError(f"gather index has {len(attrs['index'])} entries, shape {shape} needs "
                        f"{_numel(shape)}")
    _indices(attrs["index"], s[d], "gather")
    return shape


def _attrs_scatter(ch, ranks):
    return {"dim": ch.integers(0, ranks[0] - 1)} if ranks[0] and ranks[0] == ranks[1] else None


def _rule_scatter(shapes, attrs):
    """scatter / scatter_add: the sent operand fits in the base (along dim too without adding:
    each destination once)."""
    a, b = shapes
    return [y <= x for x, y in zip(a, b)], list(a)


def _rule_scatter_add(shapes, attrs):
    a, b = shapes
    return [y <= x for k, (x, y) in enumerate(zip(a, b)) if k != attrs["dim"]], list(a)


def _distinct_columns(rng: np.random.Generator, shape: Sequence[int], dim: int, n: int) -> list:
    """An index of ``shape`` whose entries along ``dim`` are distinct and below ``n`` (each
    column a prefix of a permutation)."""
    moved = [d for k, d in enumerate(shape) if k != dim] + [int(shape[dim])]
    cols = _numel(moved[:-1])
    rows = [rng.permutation(n)[: moved[-1]] for _ in range(cols)]
    arr = np.array(rows, dtype=np.int64).reshape(moved)
    return np.moveaxis(arr, -1, dim).reshape(-1).tolist()


def _finalize_scatter(attrs, in_shapes, out_shape, chooser):
    d = attrs["dim"]
    return {"index": _distinct_columns(_seeded(chooser), in_shapes[1], d, int(in_shapes[0][d]))}


def _finalize_scatter_add(attrs, in_shapes, out_shape, chooser):
    n = int(in_shapes[0][attrs["dim"]])
    return {"index": _seeded(chooser).integers(0, n, _numel(in_shapes[1])).tolist()}


def _scatter_infer(distinct: bool):
    def infer(shapes, attrs):
        a, b = (list(x) for x in shapes)
        d = _in_rank(attrs["dim"], len(a))
        if len(a) != len(b) or any(y > x for k, (x, y) in enumerate(zip(a, b))
                                   if k != d or distinct):
            raise SpecError(f"scatter source {b} does not fit {a} (dim {d})")
        if len(attrs["index"]) != _numel(b):
            raise SpecError(f"scatter index has {len(attrs['index'])} entries, source {b} "
                            f"needs {_numel(b)}")
        _indices(attrs["index"], a[d], "scatter")
        if distinct:
            _columns_distinct(attrs["index"], b, d, "scatter")
        return a

    return infer


def _rule_index_add(shapes, attrs):
    a, b = shapes
    return [x == y for k, (x, y) in enumerate(zip(a, b)) if k != attrs["dim"]], list(a)


def _rule_index_copy(shapes, attrs):
    a, b = shapes
    d = attrs["dim"]
    return [x == y if k != d else y <= x for k, (x, y) in enumerate(zip(a, b))], list(a)


def _finalize_index_add(attrs, in_shapes, out_shape, chooser):
    d = attrs["dim"]
    n = int(in_shapes[0][d])
    return {"index": _seeded(chooser).integers(0, n, int(in_shapes[1][d])).tolist()}


def _finalize_index_copy(attrs, in_shapes, out_shape, chooser):
    d = attrs["dim"]
    n = int(in_shapes[0][d])
    return {"index": _seeded(chooser).permutation(n)[: int(in_shapes[1][d])].tolist()}


def _index_infer(distinct: bool):
    def infer(shapes, attrs):
        a, b = (list(x) for x in shapes)
        d = _in_rank(attrs["dim"], len(a))
        _same_except(a, b, d, "index_add/index_copy", "differ outside dim")
        if len(attrs["index"]) != b[d]:
            raise SpecError(f"index has {len(attrs['index'])} entries, source has {b[d]} along "
                            f"dim {d}")
        index = _indices(attrs["index"], a[d], "index_add/index_copy")
        if distinct and len(set(index)) != len(index):
            raise SpecError("index_copy: an index repeats a destination")
        return a

    return infer


def _attrs_index_put(ch, ranks):
    if not ranks[0] or ranks[0] != ranks[1]:
        return None
    return {"accumulate": ch.boolean()}


def _rule_index_put(shapes, attrs):
    a, b = shapes
    cons = [x == y for x, y in zip(a[1:], b[1:])]
    if not attrs["accumulate"]:
        cons.append(b[0] <= a[0])
    return cons, list(a)


def _finalize_put(rows: int, n: int, accumulate: bool, chooser: Any) -> list:
    rng = _seeded(chooser)
    if accumulate:
        return rng.integers(0, n, rows).tolist()
    return rng.permutation(n)[:rows].tolist()


def _finalize_index_put(attrs, in_shapes, out_shape, chooser):
    a, b = in_shapes
    return {"index": _finalize_put(int(b[0]), int(a[0]), attrs["accumulate"], chooser)}


def _put_index(index: Sequence[int], size: int, rows: int, accumulate: bool, op: str) -> None:
    if len(index) != rows:
        raise SpecError(f"{op} index has {len(index)} entries for {rows} rows of values")
    index = _indices(index, size, op)
    if not accumulate and len(set(index)) != len(index):
        raise SpecError(f"{op}: an index repeats a destination (allowed only with accumulate)")


def _infer_index_put(shapes, attrs):
    a, b = (list(x) for x in shapes)
    _ranked(a, 1, "index_put")
    _same_except(a, b, 0, "index_put", "differ outside dim 0")
    _put_index(attrs["index"], a[0], b[0], bool(attrs["accumulate"]), "index_put")
    return a


def _attrs_index_put_moved(ch, ranks):
    if not ranks[0] or ranks[0] != ranks[1]:
        return None
    return {"dim": ch.integers(0, ranks[0] - 1), "accumulate": ch.boolean()}


def _rule_index_put_moved(shapes, attrs):
    a, b = shapes
    am = _moved(a, attrs["dim"], 0)
    cons = [x == y for x, y in zip(am[1:], b[1:])]
    if not attrs["accumulate"]:
        cons.append(b[0] <= am[0])
    return cons, list(a)


def _finalize_index_put_moved(attrs, in_shapes, out_shape, chooser):
    a, b = in_shapes
    n = int(a[attrs["dim"]])
    return {"index": _finalize_put(int(b[0]), n, attrs["accumulate"], chooser)}


def _infer_index_put_moved(shapes, attrs):
    a, b = (list(x) for x in shapes)
    d = _in_rank(attrs["dim"], len(a))
    am = _moved(a, d, 0)
    _same_except(am, b, 0, "inplace_index_put_moved", "differ outside the indexed dim")
    _put_index(attrs["index"], am[0], b[0], bool(attrs["accumulate"]),
               "inplace_index_put_moved")
    return a


# -- as_strided / expand_as


def _attrs_as_strided(ch, ranks):
    return {"_rank": ch.integers(1, 3)}


def _rule_as_strided(shapes, attrs):
    return [], [fresh_dim("i") for _ in range(attrs["_rank"])]


def _strides_within(ch: Any, size: Sequence[int], room: int) -> list[int]:
    """Strides for ``size`` whose view spans at most ``room + 1`` elements: a dense layout of
    the dims in a drawn order (with a drawn step) where it fits, else drawn strides that do
    (0 included: a broadcast)."""
    size = [int(n) for n in size]
    inner = _numel(size) - 1
    if inner <= room and ch.boolean():
        step = ch.integers(1, _b.max(1, room // inner)) if inner else 1
        order = list(range(len(size)))
        for i in range(len(order) - 1, 0, -1):
            j = ch.integers(0, i)
            order[i], order[j] = order[j], order[i]
        stride = [0] * len(size)
        run = step
        for k in reversed(order):
            stride[k] = run
            run *= _b.max(size[k], 1)
        return stride
    stride = [0] * len(size)
    for k in range(len(size)):
        top = room // (size[k] - 1) if size[k] > 1 else 3
        stride[k] = ch.integers(0, _b.min(top, 2 * _b.max(size[k:] + [1])))
        room -= (size[k] - 1) * stride[k] if size[k] > 1 else 0
    return stride


def _finalize_as_strided(attrs, in_shapes, out_shape, chooser):
    ch = as_chooser(chooser)
    n = _numel(in_shapes[0])
    offset = ch.integers(0, _b.max(0, n - 1) // 2)
    return {"size": [int(d) for d in out_shape],
            "stride": _strides_within(ch, out_shape, n - 1 - offset),
            "storage_offset": offset}


def _infer_as_strided(shapes, attrs):
    size = [int(d) for d in attrs["size"]]
    bad = _stride_problem(size, attrs["stride"], int(attrs["storage_offset"]),
                          _numel(shapes[0]), disjoint=False)
    if bad:
        raise SpecError(f"as_strided: {bad}")
    return size


def _attrs_copy_strided(ch, ranks):
    return {}


def _rule_copy_strided(shapes, attrs):
    a, b = shapes
    return [_prod(b) <= _prod(a)], list(a)


def _prod(dims: Sequence[Any]) -> Any:
    out: Any = int_val(1)
    for d in dims:
        out = out * d
    return out


def _finalize_copy_strided(attrs, in_shapes, out_shape, chooser):
    """A non-overlapping view of ``b``'s shape: the dims densely in a drawn order, with a drawn
    step between neighbouring elements, at a drawn offset."""
    ch = as_chooser(chooser)
    n = _numel(in_shapes[0])
    size = [int(d) for d in in_shapes[1]]
    inner = _numel(size) - 1
    step = ch.integers(1, _b.max(1, (n - 1) // inner)) if inner > 0 else 1
    order = list(range(len(size)))
    for i in range(len(order) - 1, 0, -1):
        j = ch.integers(0, i)
        order[i], order[j] = order[j], order[i]
    stride = [0] * len(size)
    run = step
    for k in reversed(order):
        stride[k] = run
        run *= _b.max(size[k], 1)
    offset = ch.integers(0, _b.max(0, n - 1 - inner * step))
    return {"size": size, "stride": stride, "storage_offset": offset}


def _infer_copy_strided(shapes, attrs):
    a, b = (list(x) for x in shapes)
    size = [int(d) for d in attrs["size"]]
    if size != b:
        raise SpecError(f"inplace_copy_as_strided: view size {size} is not the source's {b}")
    bad = _stride_problem(size, attrs["stride"], int(attrs["storage_offset"]), _numel(a),
                          disjoint=True)
    if bad:
        raise SpecError(f"inplace_copy_as_strided: {bad}")
    return a


def _attrs_expand_as(ch, ranks):
    return {} if ranks[0] <= ranks[1] else None


def _rule_expand_as(shapes, attrs):
    a, b = shapes
    lead = len(b) - len(a)
    return [z3.Or(x == 1, x == y) for x, y in zip(a, b[lead:]) if not x.eq(y)], list(b)


def _infer_expand_as(shapes, attrs):
    a, b = (list(x) for x in shapes)
    lead = len(b) - len(a)
    if lead < 0 or any(x != 1 and x != y for x, y in zip(a, b[lead:])):
        raise SpecError(f"cannot expand {a} as {b}")
    return b


# -- in-place through views


def _attrs_transposed(ch, ranks):
    r = ranks[0]
    if r < 2 or ranks[1] != r:
        return None
    i = ch.integers(0, r - 1)
    j = ch.integers(0, r - 2)
    return {"dim0": i, "dim1": j + (j >= i)}


def _rule_transposed(shapes, attrs):
    a, b = shapes
    t = list(a)
    i, j = attrs["dim0"], attrs["dim1"]
    t[i], t[j] = t[j], t[i]
    return [x == y for x, y in zip(t, b) if not x.eq(y)], list(a)


def _infer_transposed(shapes, attrs):
    a, b = (list(x) for x in shapes)
    i = _in_rank(attrs["dim0"], len(a), "dim0")
    j = _in_rank(attrs["dim1"], len(a), "dim1")
    t = list(a)
    t[i], t[j] = t[j], t[i]
    if t != b:
        raise SpecError(f"cannot add {b} into the transposed view {t}")
    return a


def _attrs_sliced(ch, ranks):
    return {"dim": ch.integers(0, ranks[0] - 1)} if ranks[0] and ranks[1] == ranks[0] else None


def _rule_sliced(shapes, attrs):
    a, b = shapes
    d = attrs["dim"]
    return [x == y if k != d else y <= x for k, (x, y) in enumerate(zip(a, b))], list(a)


def _finalize_sliced(attrs, in_shapes, out_shape, chooser):
    d = attrs["dim"]
    start, step = _steps(as_chooser(chooser), int(in_shapes[0][d]), int(in_shapes[1][d]))
    return {"start": start, "step": step}


def _sliced_shape(a: list, attrs: dict) -> tuple[int, list]:
    d = _in_rank(attrs["dim"], len(a))
    start, step = int(attrs["start"]), int(attrs["step"])
    if start > a[d]:
        raise SpecError(f"start {start} is beyond dim {d} of size {a[d]}")
    view = list(a)
    view[d] = -(-(a[d] - start) // step)
    return d, view


def _infer_sliced(shapes, attrs):
    a, b = (list(x) for x in shapes)
    _, view = _sliced_shape(a, attrs)
    if view != b:
        raise SpecError(f"cannot multiply {b} into the strided view {view}")
    return a


def _attrs_clamp_diagonal(ch, ranks):
    if ranks[0] < 2:
        return None
    bounds = (-1.0, -0.5, 0.0, 0.5, 1.0)
    lo = ch.integers(0, len(bounds) - 2)
    hi = ch.integers(lo + 1, len(bounds) - 1)
    side = ch.integers(0, 3)
    return {"offset": ch.integers(-1, 1), "min": None if side == 1 else bounds[lo],
            "max": None if side == 2 else bounds[hi]}


def _infer_clamp_diagonal(shapes, attrs):
    s = _ranked(shapes[0], 2, "inplace_clamp_diagonal")
    if attrs["min"] is None and attrs["max"] is None:
        raise SpecError("inplace_clamp_diagonal needs min or max (or both)")
    return s


def _attrs_fill_select(ch, ranks):
    if not ranks[0]:
        return None
    return {"dim": ch.integers(0, ranks[0] - 1), "value": ch.choice((0.0, -1.0, 0.5, 2.0))}


def _infer_fill_select(shapes, attrs):
    s = list(shapes[0])
    d = _in_rank(attrs["dim"], len(s))
    if int(attrs["index"]) >= s[d]:
        raise SpecError(f"index {attrs['index']} is out of range for dim {d} of size {s[d]}")
    return s


def _rule_view_sees_add(shapes, attrs):
    a, b = shapes
    d = attrs["dim"]
    o = fresh_dim("i")
    return [x == y for x, y in zip(a, b) if not x.eq(y)] + [o <= a[d]], \
        list(a[:d]) + [o] + list(a[d + 1:])


def _finalize_view_sees_add(attrs, in_shapes, out_shape, chooser):
    d = attrs["dim"]
    start, step = _steps(as_chooser(chooser), int(in_shapes[0][d]), int(out_shape[d]))
    return {"start": start, "step": step}


def _infer_view_sees_add(shapes, attrs):
    a, b = (list(x) for x in shapes)
    if a != b:
        raise SpecError(f"view_sees_add adds {b} to {a}: the shapes must be equal")
    return _sliced_shape(a, attrs)[1]


# ----------------------------------------------------------------------------------------------
# the records
# ----------------------------------------------------------------------------------------------

_LAYOUT = dict(error=er.moved, reads=er.reads_moved, interval=iv.same, fusing=None)
_COPY2 = dict(_LAYOUT, interval=_union)
_SUMS = dict(error=accumulated, reads=_reads_any, interval=_sums, fusing=None,
             partial=er.partial_through)
_STEP = {"dim": _DIM, "start": _INT, "step": Attr("int", 1, _BIG)}


def _op(name: str, arity: int, kind: str, rule: Any, attrs: Any, **parts: Any) -> OpSpec:
    return _spec(name, arity, kind, rule, attrs, fn=globals()[name], **parts)


RECORDS: list[OpSpec] = [
    _op("slice", 1, "layout", _rule_shorter, _attrs_dim, **_LAYOUT,
        finalize=_finalize_slice, infer=_infer_slice,
        attributes={"dim": _DIM, "start": _INT, "end": _INT, "step": Attr("int", 1, _BIG)}),
    _op("narrow", 1, "layout", _rule_shorter, _attrs_dim, **_LAYOUT,
        finalize=_finalize_narrow, infer=_infer_narrow,
        attributes={"dim": _DIM, "start": _INT, "length": _INT}),
    _op("select", 1, "layout", _rule_drop, _attrs_dim, **_LAYOUT,
        finalize=_finalize_select, infer=_dropping("index"),
        attributes={"dim": _DIM, "index": _INT}),
    _op("unbind_piece", 1, "layout", _rule_drop, _attrs_dim, **_LAYOUT,
        finalize=_finalize_piece, infer=_dropping("piece"),
        attributes={"dim": _DIM, "piece": _INT}),
    _op("flip", 1, "layout", lambda s, a: ([], list(s[0])), _attrs_flip, **_LAYOUT,
        infer=_infer_flip, attributes={"dims": _DIMS}),
    _op("roll", 1, "layout", lambda s, a: ([], list(s[0])), _attrs_roll, **_LAYOUT,
        infer=_infer_roll,
        attributes={"shifts": Attr("ints", -_BIG, _BIG, MAX_RANK), "dims": _DIMS}),
    _op("movedim", 1, "layout", _rule_movedim, _attrs_movedim, **_LAYOUT,
        infer=_infer_movedim, attributes={"source": _DIM, "destination": _DIM}),
    _op("flatten", 1, "layout", _rule_flatten, _attrs_flatten, **_LAYOUT,
        infer=_infer_flatten, attributes={"start_dim": _DIM, "end_dim": _DIM}),
    _op("unflatten", 1, "layout", _rule_unflatten, _attrs_unflatten, **_LAYOUT,
        finalize=_finalize_unflatten, infer=_infer_unflatten,
        attributes={"dim": _DIM, "sizes": _SIZES}),
    _op("repeat", 1, "layout", _rule_repeat, _attrs_repeat, **_LAYOUT, grows=True,
        infer=_infer_repeat, attributes={"repeats": _SIZES}),
    _op("tile", 1, "layout", _rule_tile, _attrs_tile, **_LAYOUT, grows=True,
        infer=_infer_tile, attributes={"dims": _SIZES}),
    _op("diagonal", 1, "layout", _rule_diagonal, _attrs_diagonal, **_LAYOUT,
        infer=_infer_diagonal, attributes={"offset": _SIGNED, "dim1": _DIM, "dim2": _DIM}),
    # the zeros they write are exact: bit copies all the same; an element zeroed reads nothing,
    # counted as reading its own place (every output element reads some input)
    _op("tril", 1, "layout", lambda s, a: ([], list(s[0])), _attrs_triangle,
        **dict(_LAYOUT, reads=er.reads_elementwise, interval=_with_zero),
        infer=_infer_triangle, attributes={"diagonal": _SIGNED}),
    _op("triu", 1, "layout", lambda s, a: ([], list(s[0])), _attrs_triangle,
        **dict(_LAYOUT, reads=er.reads_elementwise, interval=_with_zero),
        infer=_infer_triangle, attributes={"diagonal": _SIGNED}),
    _op("stack", 2, "concat", _rule_stack, _attrs_stack, **_COPY2, grows=True,
        infer=_infer_stack, attributes={"dim": _DIM}),
    _op("split_piece", 1, "layout", _rule_split, _attrs_split, **_LAYOUT, infer=_infer_split,
        attributes={"dim": _DIM, "split_size": Attr("int", 1, _BIG), "piece": _INT}),
    _op("chunk_piece", 1, "layout", _rule_chunk, _attrs_chunk, **_LAYOUT, infer=_infer_chunk,
        attributes={"dim": _DIM, "chunks": Attr("int", 1, _BIG), "piece": _INT}),
    _op("gather", 1, "gather", _rule_gather, _attrs_dim, **_LAYOUT, grows=True,
        finalize=_finalize_gather, infer=_infer_gather,
        attributes={"dim": _DIM, "index": _INDEX, "shape": _SIZES}),
    _op("scatter", 2, "gather", _rule_scatter, _attrs_scatter, **_COPY2,
        finalize=_finalize_scatter, infer=_scatter_infer(distinct=True),
        attributes={"dim": _DIM, "index": _INDEX}),
    _op("index_copy", 2, "gather", _rule_index_copy, _attrs_scatter, **_COPY2,
        finalize=_finalize_index_copy, infer=_index_infer(distinct=True),
        attributes={"dim": _DIM, "index": _INDEX}),
    _op("as_strided", 1, "layout", _rule_as_strided, _attrs_as_strided, **_LAYOUT, grows=True,
        finalize=_finalize_as_strided, infer=_infer_as_strided,
        attributes={"size": _SIZES, "stride": _SIZES, "storage_offset": _INT}),
    _op("expand_as", 2, "layout", _rule_expand_as, _attrs_expand_as, **_LAYOUT, grows=True,
        infer=_infer_expand_as),
    _op("inplace_copy_as_strided", 2, "layout", _rule_copy_strided, _attrs_copy_strided,
        **_COPY2, finalize=_finalize_copy_strided, infer=_infer_copy_strided,
        attributes={"size": _SIZES, "stride": _SIZES, "storage_offset": _INT}),
    # -- not bit copies: a constant written, sums, arithmetic through views
    _op("pad", 1, "pad", _rule_pad, _attrs_pad, error=_pad_error, reads=_pad_reads,
        interval=_with_value, fusing=None, selects=True, grows=True, infer=_infer_pad,
        attributes={"pad": Attr("ints", -_BIG, _BIG, 2 * MAX_RANK),
                    "value": Attr("real", -65504, 65504)}),
    _op("scatter_add", 2, "scatter", _rule_scatter_add, _attrs_scatter, **_SUMS, selects=True,
        finalize=_finalize_scatter_add, infer=_scatter_infer(distinct=False),
        attributes={"dim": _DIM, "index": _INDEX}),
    _op("index_add", 2, "scatter", _rule_index_add, _attrs_scatter, **_SUMS, selects=True,
        finalize=_finalize_index_add, infer=_index_infer(distinct=False),
        attributes={"dim": _DIM, "index": _INDEX}),
    _op("index_put", 2, "scatter", _rule_index_put, _attrs_index_put, **_SUMS, selects=True,
        finalize=_finalize_index_put, infer=_infer_index_put,
        attributes={"index": _INDEX, "accumulate": Attr("bool")}),
    _op("inplace_index_put_moved", 2, "scatter", _rule_index_put_moved, _attrs_index_put_moved,
        **dict(_SUMS, interval=_sums_moved), selects=True, finalize=_finalize_index_put_moved,
        infer=_infer_index_put_moved,
        attributes={"dim": _DIM, "index": _INDEX, "accumulate": Attr("bool")}),
    _op("inplace_add_transposed", 2, "inplace", _rule_transposed, _attrs_transposed,
        error=_transposed_add_error, reads=_reads_transposed, interval=_add_then_base,
        fusing=None, partial=None, infer=_infer_transposed,
        attributes={"dim0": _DIM, "dim1": _DIM}),
    _op("inplace_mul_sliced", 2, "inplace", _rule_sliced, _attrs_sliced,
        error=_sliced_mul_error, reads=_reads_sliced, interval=_mul_then_base, fusing=None,
        finalize=_finalize_sliced, infer=_infer_sliced, attributes=dict(_STEP)),
    _op("inplace_clamp_diagonal", 1, "inplace", lambda s, a: ([], list(s[0])),
        _attrs_clamp_diagonal, error=er.selected, reads=er.reads_elementwise,
        interval=_clamp_then_base, fusing=None, selects=True, infer=_infer_clamp_diagonal,
        attributes={"offset": _SIGNED, "min": Attr("bound"), "max": Attr("bound")}),
    _op("inplace_fill_select", 1, "inplace", lambda s, a: ([], list(s[0])), _attrs_fill_select,
        error=_fill_error, reads=er.reads_elementwise, interval=_with_value, fusing=None,
        selects=True, finalize=_finalize_select, infer=_infer_fill_select,
        attributes={"dim": _DIM, "index": _INT, "value": Attr("real", -65504, 65504)}),
    _op("view_sees_add", 2, "inplace", _rule_view_sees_add, _attrs_sliced,
        error=_view_sees_add_error, reads=_reads_view_sees_add, interval=iv.add, fusing=None,
        finalize=_finalize_view_sees_add, infer=_infer_view_sees_add, attributes=dict(_STEP)),
]
