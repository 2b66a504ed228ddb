"""Op family ``typed`` of the compiler-graph catalogue (:data:`.ops.FAMILIES`): ops whose values
are not (only) the graph's float dtype -- casts, comparisons and logical ops giving bool, integer
tensors (argmax/argmin, integer arithmetic, counts) and mixed-dtype promotion.

Each op is one :class:`~.ops.OpSpec` record made with :func:`.ops._spec` (``fn=`` the
module-level torch function below, whose import path is the op's stable fx target); each states
its own ``dtype_rule`` (NNSmith style: the op declares which operand dtypes it takes and what it
makes).  None of them is fused by the in-project compiler (``fusing=None``: eager there), so
they reach Inductor's lowering of casts, comparisons, bool masks and index reductions.

Why these bounds are sound (:mod:`.error_rules`): a bool or int result is compared exactly where
it is *certain* -- operands exact (a tie is a tie: a ``>`` compiled as ``>=`` is caught) or
separated by more than their errors -- and may be off by its uncertainty elsewhere (1 for a bool
that may flip, the spread of the candidate indices for argmax, the width of ``trunc`` over the
error interval for a cast).  In the float64 reference a cast to a float dtype is the identity
(its rounding is the bound's) and ints / bools stay int64 / bool (:func:`.build.run_reference`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
import z3

from fuzzkit.targets.compiler.graphs import error_rules as er
from fuzzkit.targets.compiler.graphs import intervals as iv
from fuzzkit.targets.compiler.graphs import ops as _ops
from fuzzkit.targets.compiler.graphs.ops import (
    INT_DTYPES,
    MAX_RANK,
    VALUE_DTYPES,
    Attr,
    OpSpec,
    SpecError,
    _spec,
    is_float_dtype,
    promote_dtypes,
    torch_dtype_of,
)

# ----------------------------------------------------------------------------------------------
# torch functions (fx call_function targets; names equal op names)
# ----------------------------------------------------------------------------------------------


def to_dtype(a, dtype):
    return a.to(torch_dtype_of(dtype))


def gt(a, b):
    return torch.gt(a, b)


def ge(a, b):
    return torch.ge(a, b)


def lt(a, b):
    return torch.lt(a, b)


def le(a, b):
    return torch.le(a, b)


def eq(a, b):
    return torch.eq(a, b)


def ne(a, b):
    return torch.ne(a, b)


def logical_and(a, b):
    return torch.logical_and(a, b)


def logical_or(a, b):
    return torch.logical_or(a, b)


def logical_xor(a, b):
    return torch.logical_xor(a, b)


def logical_not(a):
    return torch.logical_not(a)


def where(cond, a, b):
    return torch.where(cond, a, b)


def masked_fill(a, mask, value):
    return torch.masked_fill(a, mask, value)


def argmax(a, dim, keepdim):
    return torch.argmax(a, dim=dim, keepdim=keepdim)


def argmin(a, dim, keepdim):
    return torch.argmin(a, dim=dim, keepdim=keepdim)


def any(a, dim, keepdim):  # the op's name is its fx target's name
    return torch.any(a, dim=dim, keepdim=keepdim)


def all(a, dim, keepdim):
    return torch.all(a, dim=dim, keepdim=keepdim)


def bitwise_and(a, b):
    return torch.bitwise_and(a, b)


def bitwise_or(a, b):
    return torch.bitwise_or(a, b)


def bitwise_xor(a, b):
    return torch.bitwise_xor(a, b)


def floor_divide_int(a, divisor):
    return torch.floor_divide(a, divisor)


def remainder_int(a, divisor):
    return torch.remainder(a, divisor)


def sum_int(a, dim, keepdim):
    return torch.sum(a, dim=dim, keepdim=keepdim)


def cumsum_int(a, dim):
    return torch.cumsum(a, dim=dim)


# ----------------------------------------------------------------------------------------------
# dtype rules
# ----------------------------------------------------------------------------------------------

_INTEGRAL = INT_DTYPES + ("bool",)


def _cast_rule(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    target = attrs.get("dtype")
    return target if target in VALUE_DTYPES and in_dtypes[0] in VALUE_DTYPES else None


def _to_bool(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    """Comparisons: any operands (torch promotes them first) -> bool."""
    return "bool" if all_known(in_dtypes) else None


def all_known(in_dtypes: Sequence[str]) -> bool:
    return bool(in_dtypes) and not [d for d in in_dtypes if d not in VALUE_DTYPES]


def _integral_to_bool(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    """Logical ops: bool / int operands (the truth of a float is a comparison with 0, which the
    comparisons cover) -> bool."""
    return "bool" if in_dtypes and not [d for d in in_dtypes if d not in _INTEGRAL] else None


def _where_rule(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    """where(cond, a, b): a bool condition, branches promoted (an int branch against a float
    one becomes that float)."""
    if in_dtypes[0] != "bool" or not all_known(in_dtypes):
        return None
    return promote_dtypes(list(in_dtypes[1:]))


def _masked_fill_rule(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    return in_dtypes[0] if is_float_dtype(in_dtypes[0]) and in_dtypes[1] == "bool" else None


def _index_rule(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    """argmax / argmin of a float or int value (torch has none for bool) -> int64."""
    return "int64" if in_dtypes[0] in VALUE_DTYPES and in_dtypes[0] != "bool" else None


def _bool_reduce_rule(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    return "bool" if in_dtypes[0] in _INTEGRAL else None


def _bitwise_rule(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    if not in_dtypes or [d for d in in_dtypes if d not in _INTEGRAL]:
        return None
    return promote_dtypes(in_dtypes)


def _int_rule(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    return in_dtypes[0] if in_dtypes[0] in INT_DTYPES else None


def _count_rule(in_dtypes: Sequence[str], attrs: Mapping[str, Any]) -> str | None:
    """sum / cumsum of bools or ints: int64 (torch's accumulation type for them)."""
    return "int64" if in_dtypes[0] in _INTEGRAL else None


# ----------------------------------------------------------------------------------------------
# attributes and shape rules
# ----------------------------------------------------------------------------------------------

def _attrs_cast(ch, ranks):
    return {"dtype": VALUE_DTYPES[ch.integers(0, len(VALUE_DTYPES) - 1)]}


#: masked_fill values: representable in every float dtype, a zero and the attention-mask -4
_FILL_VALUES = (0.0, 1.0, -1.0, 0.5, -4.0, 4.0)


def _attrs_masked_fill(ch, ranks):
    if ranks[1] > ranks[0]:  # the mask broadcasts to the filled value's shape, not beyond it
        return None
    return {"value": _FILL_VALUES[ch.integers(0, len(_FILL_VALUES) - 1)]}


def _attrs_dim_keep(ch, ranks):
    if ranks[0] == 0:
        return None
    return {"dim": ch.integers(0, ranks[0] - 1), "keepdim": ch.boolean()}


_DIVISORS = (2, 3, -2, 5, 7, -3)


def _attrs_divisor(ch, ranks):
    return {"divisor": _DIVISORS[ch.integers(0, len(_DIVISORS) - 1)]}


def _rule_masked_fill(shapes, attrs):
    a, m = shapes
    if len(m) > len(a):
        return [z3.BoolVal(False, _ops._Z3_STATE["ctx"])], list(a)
    cons = [z3.Or(d == 1, d == a[len(a) - len(m) + k]) for k, d in enumerate(m)
            if not _ops._same(d, a[len(a) - len(m) + k])]
    return cons, list(a)


def _infer_masked_fill(shapes, attrs):
    a, m = (list(s) for s in shapes)
    if len(m) > len(a) or [k for k, d in enumerate(m) if d not in (1, a[len(a) - len(m) + k])]:
        raise SpecError(f"mask {m} does not broadcast to {a}")
    return a


def _infer_dim_keep(shapes, attrs):
    s = list(shapes[0])
    _ops._in_rank(attrs["dim"], len(s))
    return _ops._infer_reduce(shapes, attrs)


def _infer_index(shapes, attrs):
    s = list(shapes[0])
    _ops._in_rank(attrs["dim"], len(s))
    if s[attrs["dim"]] == 0:
        raise SpecError(f"no index of an extreme over a zero-size dim of {s}")
    return _ops._infer_reduce(shapes, attrs)


def _infer_divisor(shapes, attrs):
    if int(attrs["divisor"]) == 0:
        raise SpecError("divisor must not be 0")
    return list(shapes[0])


_DIM = Attr("int", 0, MAX_RANK - 1)
_DIM_KEEP = {"dim": _DIM, "keepdim": Attr("bool")}
_BROADCAST = dict(rule=_ops._rule_broadcast, attrs=_ops._attrs_none, infer=_ops._infer_broadcast,
                  reads=er.reads_elementwise, fusing=None, grows=True)
_COMPARE = dict(_BROADCAST, error=er.compared, interval=iv.boolean, dtype_rule=_to_bool,
                compares=True)
_LOGICAL = dict(_BROADCAST, error=er.logical, interval=iv.boolean, dtype_rule=_integral_to_bool)
_BITWISE = dict(_BROADCAST, error=er.bitwise, interval=iv.bitwise, dtype_rule=_bitwise_rule)
_ARG = dict(rule=_ops._rule_reduce, attrs=_attrs_dim_keep, reads=er.reads_arg, fusing=None,
            attributes=_DIM_KEEP)
_UNARY = dict(rule=_ops._rule_same, attrs=_ops._attrs_none, reads=er.reads_elementwise,
              fusing=None)


def _fn(name: str) -> Any:
    return globals()[name]


RECORDS: list[OpSpec] = [
    _spec("to_dtype", 1, "elementwise", _ops._rule_same, _attrs_cast, fn=_fn("to_dtype"),
          error=er.cast, reads=er.reads_elementwise, interval=iv.cast, fusing=None,
          selects=True,
          attributes={"dtype": Attr("dtype")}, dtype_rule=_cast_rule,
          undefined=er.cast_undefined),
    *[_spec(name, 2, "elementwise", fn=_fn(name), **_COMPARE)
      for name in ("gt", "ge", "lt", "le", "eq", "ne")],
    *[_spec(name, 2, "elementwise", fn=_fn(name), **_LOGICAL)
      for name in ("logical_and", "logical_or", "logical_xor")],
    _spec("logical_not", 1, "elementwise", **_UNARY, fn=_fn("logical_not"), error=er.logical,
          interval=iv.boolean, dtype_rule=_integral_to_bool),
    _spec("where", 3, "elementwise", **_BROADCAST, fn=_fn("where"), error=er.where_cond,
          interval=iv.where_cond, selects=True, dtype_rule=_where_rule),
    _spec("masked_fill", 2, "elementwise", _rule_masked_fill, _attrs_masked_fill,
          fn=_fn("masked_fill"), error=er.masked_fill, reads=er.reads_elementwise,
          interval=iv.masked_fill, fusing=None, selects=True,
          attributes={"value": Attr("real", -65504, 65504)}, infer=_infer_masked_fill,
          dtype_rule=_masked_fill_rule),
    *[_spec(name, 1, "reduction", **_ARG, fn=_fn(name), error=er.arg_extreme,
            interval=iv.index, infer=_infer_index, dtype_rule=_index_rule)
      for name in ("argmax", "argmin")],
    *[_spec(name, 1, "reduction", **_ARG, fn=_fn(name), error=er.any_all,
            interval=iv.boolean, infer=_infer_dim_keep, dtype_rule=_bool_reduce_rule)
      for name in ("any", "all")],
    *[_spec(name, 2, "elementwise", fn=_fn(name), **_BITWISE)
      for name in ("bitwise_and", "bitwise_or", "bitwise_xor")],
    # integer division by a nonzero constant (the float forms are ops_elementwise's)
    _spec("floor_divide_int", 1, "elementwise", _ops._rule_same, _attrs_divisor,
          fn=_fn("floor_divide_int"), error=er.floor_divide, reads=er.reads_elementwise,
          interval=iv.floor_divide, fusing=None, infer=_infer_divisor,
          attributes={"divisor": Attr("int", -16, 16)}, dtype_rule=_int_rule),
    _spec("remainder_int", 1, "elementwise", _ops._rule_same, _attrs_divisor,
          fn=_fn("remainder_int"), error=er.remainder, reads=er.reads_elementwise,
          interval=iv.remainder, fusing=None, infer=_infer_divisor,
          attributes={"divisor": Attr("int", -16, 16)}, dtype_rule=_int_rule),
    _spec("sum_int", 1, "reduction", _ops._rule_reduce, _ops._attrs_reduce, fn=_fn("sum_int"),
          error=er.int_total, reads=er.reads_reduced, interval=iv.total, fusing=None,
          attributes={"dim": Attr("dims", 0, MAX_RANK - 1, MAX_RANK), "keepdim": Attr("bool")},
          infer=_ops._infer_reduce, dtype_rule=_count_rule),
    _spec("cumsum_int", 1, "scan", _ops._rule_same, _ops._attrs_dim, fn=_fn("cumsum_int"),
          error=er.int_cumsum, reads=er.reads_scan, interval=iv.cumsum, fusing=None,
          attributes={"dim": _DIM}, infer=_ops._infer_dim, dtype_rule=_count_rule),
]
