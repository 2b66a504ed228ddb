"""NNSmith-style random graph generation with z3 shape constraints.

Phase 1 (structure, symbolic shapes): graph inputs get fresh z3 ``Int`` dims (``1 <= d``,
element count <= ``ELEMENT_CAP``).  Each step draws an op, operands (offset from the newest value,
so shrinking moves towards chains) and rank-level attrs; the op's ``shape_rule`` constraints (plus
``d >= 1`` and the element cap for any new tensor shape) are pushed on an incremental solver and the
op is kept only if ``check() == sat`` (else popped and another op is tried).

Phase 2 (concrete shapes): every free dim (input dims, reshape / expand / index_select outputs) has
a preferred value drawn from ``TILE_VALUES`` (tile boundaries), or from a :class:`Sizing`'s ``dim``
draw (a strategy aiming at an implementation's thresholds).  A :class:`Sizing` may also *wish*
for sizes -- an element count for ``x0``, the row length and row count of the first reducing ops
(the graph is closed with one if none was drawn), a value read by many consumers -- and caps the
element count of every tensor.  Wishes, then the inputs' wanted minimum sizes, then the
preferences are tried one at a time as tentative constraints (push / check / keep or pop), then
the model gives every dim.

Phase 3 (attrs + guards): shape-dependent attrs are filled (reshape/expand ``shape``, index_select
``index``); then a value-range pass (intervals, inputs within ``[-INPUT_BOUND, INPUT_BOUND]``)
inserts ordinary guard nodes: ``abs`` + ``add_scalar(0.5)`` before every positive / nonzero domain
argument whose range is not provably >= ``POSITIVE_MIN``, and ``clamp(-c, c)`` before operands of
any op whose output magnitude could exceed ``MAGNITUDE_LIMIT`` (keeps float16 finite: exp inputs,
pow, products, sums).  The graph is finally cut to the node budget; outputs are the sinks.

Operands are offset from the newest value (chains, which compilers fuse); comparisons
(:data:`COMPARE_OPS`) get the same value on both sides or two graph inputs in a stated share.
Reductions may take one dim, a list of dims or all of them; a full reduction without keepdim
makes a 0-d value, which elementwise ops, broadcasting and reshapes accept.

Dtypes (NNSmith style, each op's ``dtype_rule``): every value carries a dtype next to its
symbolic shape (inputs: the case dtype); an op is drawn only with operands its rule takes -- the
drawn operands, else others of fitting dtypes, else a bool / int value made first (a comparison,
or a cast of a float value: :data:`ADAPTERS`).  Emitted inputs and nodes carry ``"dtype"``.
Guards are only placed on float values; a float cast to an integer is clamped by the magnitude
guard like any op whose result could grow too large (its interval is the truncated input's), so
it stays far inside int32.

Everything is a function of the chooser's draws (Hypothesis ``data.draw`` or a NumPy Generator),
and each run uses its own z3 context, so the same seed gives the same graph.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Callable, Sequence

import numpy as np
import z3

from . import ops as _ops
from .ops import OPS, VALUE_DTYPES, Chooser, DrawChooser, RngChooser, as_chooser, is_float_dtype

__all__ = [
    "Sizing",
    "factorize",
    "TILE_VALUES",
    "ELEMENT_CAP",
    "INPUT_BOUND",
    "MAGNITUDE_LIMIT",
    "graph_strategy",
    "random_graph",
    "generate",
    "interval",
    "value_intervals",
]

def _takes_ranks(spec: Any, ranks: list[int]) -> bool:
    """Whether an op's attrs take operands of ``ranks`` at all, asked without spending a draw
    of the case: ``sample_attrs`` answers None or not by the ranks alone, so a fixed-seed
    generator of its own stands in for the case's chooser (a NumPy Generator, which every
    copy of the ops module -- a source-patched mutant's too -- turns into a chooser)."""
    return spec.sample_attrs(np.random.default_rng(0), list(ranks)) is not None


TILE_VALUES = (1, 7, 15, 16, 17, 63, 64, 65, 127, 128, 129)
ELEMENT_CAP = 4096
INPUT_BOUND = 4.0
MAGNITUDE_LIMIT = 4096.0
POSITIVE_MIN = 0.25
MAX_INPUTS = 3
MAX_INPUT_RANK = 3
_CLAMP_LEVELS = (8.0, 2.0, 1.0)
CHECK_RLIMIT = int(
    __import__("os").environ.get("FUZZKIT_Z3_RLIMIT", "30000")
)  # per check; deterministic (unlike a timeout); "unknown" = rejected


# ----------------------------------------------------------------------------------------------
# value ranges (used for guards)
# ----------------------------------------------------------------------------------------------


def interval(
    op: str,
    attrs: dict,
    ivals: Sequence[tuple[float, float]],
    in_shapes: Sequence[Sequence[int]],
    out_shape: Sequence[int],
) -> tuple[float, float]:
    """Conservative ``(lo, hi)`` of ``op``'s output given input intervals (may be infinite): the
    op record's value-range rule (:mod:`.intervals`)."""
    return OPS[op].interval(attrs, ivals, in_shapes, out_shape)


def value_intervals(
    graph: dict, input_bound: float = INPUT_BOUND
) -> dict[str, tuple[float, float]]:
    """Interval of every input and node of a graph (inputs within
    ``[-input_bound, input_bound]``)."""
    iv: dict[str, tuple[float, float]] = {}
    shapes: dict[str, list[int]] = {}
    for inp in graph["inputs"]:
        iv[inp["name"]] = (-input_bound, input_bound)
        shapes[inp["name"]] = list(inp["shape"])
    for n in graph["nodes"]:
        iv[n["name"]] = interval(
            n["op"],
            n["attrs"],
            [iv[a] for a in n["args"]],
            [shapes[a] for a in n["args"]],
            n["shape"],
        )
        shapes[n["name"]] = list(n["shape"])
    return iv


# ----------------------------------------------------------------------------------------------
# generator
# ----------------------------------------------------------------------------------------------


#: Comparison ops (``maximum``, ``minimum`` and ``where_gt``'s ``a > b``): one in four sees the
#: *same* value on both sides (``where(a > a, ...)``, ``maximum(a, a)``: a tie at every element),
#: one in four compares graph inputs directly (exactly known operands: the oracle judges those
#: comparisons exactly, and value recipes with small integers make ties there).
COMPARE_OPS = tuple(n for n, s in OPS.items() if s.compares)


def _takes_floats(name: str) -> bool:
    """Whether op ``name`` takes float32 operands (the rules of the reducing ops below)."""
    try:
        return OPS[name].dtype_rule(["float32"] * OPS[name].arity, {}) is not None
    except (KeyError, TypeError):  # a rule that needs its attrs: not one of those
        return False


#: Ops that make a value of a dtype no value of the graph has yet: a comparison makes a bool,
#: a cast (``to_dtype``) of a float value any other dtype.
ADAPTERS = tuple(n for n in ("gt", "lt", "ge", "le", "eq", "ne") if n in OPS)
COMPARE_SAME_SHARE = 0.25
COMPARE_INPUTS_SHARE = 0.25
#: Ops that reduce along a dim (the first one created takes a :class:`Sizing` row wish):
#: reductions, then row-wise normalizations, then scans.
REDUCING_OPS = tuple(
    n
    for kind in ("reduction", "normalization", "scan")
    for n, s in OPS.items()
    if s.kind == kind and _takes_floats(n)
)
#: The reductions the fusing compiler fuses (``dim`` may be a list or None), which a
#: :class:`Sizing` with ``last_dim`` points at the last dim.
_LAST_DIM_REDUCTIONS = tuple(n for n, s in OPS.items() if s.fusing == "reduction")


@dataclasses.dataclass
class Sizing:
    """What a strategy asks of one graph's sizes; the defaults are plain generation.

    ``cap``       element cap of every tensor (inputs and ops that make larger tensors);
    ``dim``       ``dim(chooser, where) -> int``: the preferred value of a free dim, ``where``
                  ``"inner"`` (an input's last dim) or ``"outer"`` (any other free dim); None:
                  a :data:`TILE_VALUES` draw;
    ``numel``     preferred element count of input ``x0`` (its dims factorise it);
    ``row``       preferred element count of the first reducing op's reduced dim(s);
    ``rows``      preferred product of that op's other dims (the rows of a row-wise reduction);
    ``more_rows`` further ``(row, rows)`` wishes (``rows`` 0: any) for the next reducing ops;
    ``last_dim``  the first sum/mean/amax/amin reduces exactly the last dim (a fused reduction
                  of the fusing compiler);
    ``fanout``    after the first op, this many ops each take that op's result as an operand
                  (a value read by many consumers).

    Wishes are tentative: the solver tries them first and drops any it cannot satisfy.
    """

    cap: int = ELEMENT_CAP
    dim: Callable[[Chooser, str], int] | None = None
    numel: int | None = None
    row: int | None = None
    rows: int | None = None
    more_rows: tuple[tuple[int, int], ...] = ()
    last_dim: bool = False
    fanout: int = 0


def factorize(n: int, rank: int, ch: Chooser) -> list[int]:
    """``rank`` dims whose product is ``n``: small divisors drawn for the leading dims, the rest
    in the last (so a prime ``n`` becomes ``[1, ..., n]``)."""
    dims = []
    rest = int(n)
    for _ in range(rank - 1):
        # proper divisors first (a dim of 1 makes layout ops trivial), 1 last
        divisors = [d for d in range(2, min(rest - 1, 64) + 1) if rest % d == 0] + [1]
        d = divisors[ch.integers(0, len(divisors) - 1)]
        dims.append(d)
        rest //= d
    return dims + [rest]


class _Gen:
    def __init__(
        self,
        ch: Chooser,
        op_names: Sequence[str],
        max_tries: int = 12,
        sizing: Sizing | None = None,
        dtype: str = "float32",
    ):
        self.ch = ch
        self.dtype = dtype
        #: the dtype of each value (parallel to ``values``)
        self.dtypes: list[str] = []
        #: the dtype of each value were the inputs each float dtype (``dtype`` first): an op is
        #: kept only where its rule takes its operands in every one, so a graph stays valid
        #: whatever case dtype it is run in (a float32 cast meets float16 inputs in one case,
        #: float32 ones in another, and matmul takes only one dtype)
        self.cases = (dtype,) + tuple(d for d in _ops.FLOAT_DTYPES if d != dtype)
        self.case_dtypes: list[tuple[str, ...]] = []
        self.adapting = False
        self.op_names = list(op_names)
        self.max_tries = max_tries
        self.sizing = sizing or Sizing()
        self.ctx = z3.Context()
        _ops.reset_z3(self.ctx)
        self.solver = z3.Solver(ctx=self.ctx)
        self.solver.set("rlimit", CHECK_RLIMIT)
        # values: (name, symbolic shape); node records: (op, arg names, attrs, symbolic shape)
        self.values: list[tuple[str, list]] = []
        self.nodes: list[tuple[str, list[str], dict, list]] = []
        self.free: list[tuple[Any, int]] = []  # (z3 var, preferred value)
        # tentative constraint sets the solver tries before the per-dim preferences
        self.wishes: list[list] = []
        self.n_inputs = 0
        # reduction wishes still to give out, (row, rows); the nodes that took one
        self.row_wishes: list[tuple[int, int]] = (
            [(int(self.sizing.row), int(self.sizing.rows or 0))] if self.sizing.row else []
        )
        self.row_wishes += [(int(r), int(n)) for r, n in self.sizing.more_rows if r]
        self.row_nodes: list[int] = []
        self.hub_left = self.sizing.fanout
        # assumption literal: input dims stay >= min(pref, 7) (so ops that would force the graph's
        # inputs to be tiny, e.g. long cat chains under the element cap, are rejected)
        self.wanted = z3.Bool("wanted", self.ctx)
        self.wanted_terms: list = []

    # -- draws --------------------------------------------------------------------------------
    def _pref(self, where: str = "outer") -> int:
        if self.sizing.dim is not None:
            return int(self.sizing.dim(self.ch, where))
        return TILE_VALUES[self.ch.integers(0, len(TILE_VALUES) - 1)]

    def _new_free(self, v, where: str = "outer", pref: int | None = None) -> None:
        self.free.append((v, self._pref(where) if pref is None else int(pref)))

    def _operand(self, chain: bool = False) -> int:
        n = len(self.values)
        if isinstance(self.ch, RngChooser):
            rng = self.ch.rng
            if rng.random() < 0.75:
                k = min(int(rng.geometric(0.3)) - 1, n - 1)
            else:
                k = int(rng.integers(0, n))
        else:
            # half the first operands are the newest value: chains, which the compilers fuse
            k = 0 if chain and n > 1 and self.ch.boolean() else self.ch.integers(0, n - 1)
        return n - 1 - k

    # -- constraints --------------------------------------------------------------------------
    def _cap(self, shape: list) -> list:
        syms = [d for d in shape if not (isinstance(d, int) or z3.is_int_value(d))]
        if not syms:
            return []
        cons = []
        if len(shape) >= 2:
            cons.append(_ops._prod(shape) <= self.sizing.cap)
        else:
            cons.append(shape[0] <= self.sizing.cap)
        return cons

    def add_inputs(self) -> None:
        k = self.ch.integers(1, MAX_INPUTS)
        # the reduction wishes shape inputs from the last one back (x0 keeps a numel wish)
        free_inputs = [i for i in reversed(range(k)) if not (i == 0 and self.sizing.numel)]
        shaped = dict(zip(free_inputs, self.row_wishes))
        for i in range(k):
            r = self.ch.integers(1, MAX_INPUT_RANK)
            if i in shaped and shaped[i][1] > 1:
                r = max(r, 2)  # room for the rows
            shape = [_ops.fresh_dim("x") for _ in range(r)]
            prefs: list[int | None] = [None] * r
            if i == 0 and self.sizing.numel:
                prefs = list(factorize(self.sizing.numel, r, self.ch))
                self.wishes.append([d == p for d, p in zip(shape, prefs)])
            elif i in shaped:
                # shaped like the wished reduction: rows (if wished), then the row
                row, rows = shaped[i]
                lead: list[int | None] = [None] * (r - 1)
                if rows:
                    lead = list(factorize(rows, r - 1, self.ch))
                prefs = lead + [row]
                self.wishes.append([d == p for d, p in zip(shape, prefs) if p is not None])
            for j, d in enumerate(shape):
                self.solver.add(d >= 1)
                self._new_free(d, "inner" if j == r - 1 else "outer", prefs[j])
                self.wanted_terms.append(d >= min(self.free[-1][1], 7))
            self.solver.add(*self._cap(shape))
            self.values.append((f"x{i}", shape))
            self.dtypes.append(self.dtype)
            self.case_dtypes.append(self.cases)
        self.n_inputs = k
        self.solver.add(z3.Implies(self.wanted, z3.And(*self.wanted_terms)))
        if self.solver.check(self.wanted) != z3.sat:  # pragma: no cover - inputs alone are easy
            raise RuntimeError("input shape constraints are not satisfiable")
        self.model = self.solver.model()

    def _operands(self, op: str, arity: int) -> list[int]:
        ch = self.ch
        idx = [self._operand(chain=j == 0) for j in range(arity)]
        if not self.nodes and self.sizing.numel:
            idx[0] = 0  # the first op reads x0, the input of the wished element count
        if OPS[op].compares:
            mode = ch.integers(0, 3)  # COMPARE_SAME_SHARE, COMPARE_INPUTS_SHARE: 1/4 each
            if mode == 0:  # one value on both sides of the comparison
                idx[1] = idx[0]
            elif mode == 1:  # graph inputs compared directly
                idx[0] = ch.integers(0, self.n_inputs - 1)
                idx[1] = ch.integers(0, self.n_inputs - 1)
        if self.hub_left > 0 and len(self.nodes) >= 1:
            idx[ch.integers(0, arity - 1)] = self.n_inputs  # the first node's result
        return idx

    def _row_wish(self, op: str, shape: list, attrs: dict) -> list:
        """Constraints that give this reducing op the next wished row length (and row count)."""
        s = self.sizing
        if not self.row_wishes or not shape:
            return []
        row, rows = self.row_wishes[0]
        if op not in (_LAST_DIM_REDUCTIONS if s.last_dim else REDUCING_OPS):
            return []
        if OPS[op].kind == "reduction":  # any dims (a list, None); the others reduce one
            if s.last_dim:
                attrs["dim"] = len(shape) - 1
            dims = _ops.reduced_dims(attrs["dim"], len(shape))
        else:
            dims = (int(attrs["dim"]),)
        wish = [_ops._prod([shape[d] for d in dims]) == row]
        if rows:
            wish.append(_ops._prod([shape[d] for d in range(len(shape)) if d not in dims]) == rows)
        return wish

    def close_with_reduction(self, tries: int = 4) -> None:
        """Row wishes whose reductions were never drawn: end the graph with them (over the newest
        value, else over the last input)."""
        ops = _LAST_DIM_REDUCTIONS if self.sizing.last_dim else REDUCING_OPS
        for k in range(tries * len(self.row_wishes)):
            if not self.row_wishes:
                return
            op = ops[self.ch.integers(0, len(ops) - 1)]
            operand = len(self.values) - 1 if k % 2 == 0 else self.n_inputs - 1
            self.try_op(op, operand)

    def _fit_ranks(self, op: str, idx: list[int], keep_first: bool) -> list[int] | None:
        """Operands of ranks ``op`` takes, when the drawn ones have none it takes (matmul wants
        two 2-d values, bmm two 3-d ones, addmm a 2-d pair): a drawn rank combination that the
        op's attrs accept, each operand the newest value of its rank or one of the two before.
        Drawn operands are rank-blind, so without this the ops with rank rules were drawn as
        often as any other but almost never kept (20 matmul draws in 300 cases, none kept).
        Draws happen only where the op was refused before, so graphs that needed no refit are
        drawn exactly as before."""
        spec = OPS[op]
        by_rank = self._by_rank()
        first = len(self.values[idx[0]][1])
        # ranks the graph has, or makes by unsqueezing / flattening a value it has
        reachable = set(by_rank) | set(range(1, _ops.MAX_RANK + 1))
        choices = [
            combo
            for combo in itertools.product(sorted(reachable), repeat=len(idx))
            if (not keep_first or combo[0] == first)
            and _takes_ranks(spec, list(combo))
        ]
        if not choices:
            return None
        combo = choices[self.ch.integers(0, len(choices) - 1)]
        out = list(idx)
        for j, rank in enumerate(combo):
            if keep_first and j == 0:
                continue
            if not self._produce_rank(rank):
                return None
            cands = self._by_rank()[rank]
            out[j] = cands[len(cands) - 1 - self.ch.integers(0, min(len(cands), 3) - 1)]
        return out

    def _by_rank(self) -> dict[int, list[int]]:
        by_rank: dict[int, list[int]] = {}
        for i, (_, shape) in enumerate(self.values):
            by_rank.setdefault(len(shape), []).append(i)
        return by_rank

    def _produce_rank(self, rank: int) -> bool:
        """Make a value of ``rank`` from the newest value of the nearest rank the graph has:
        ``unsqueeze`` steps up from a lower one (NNSmith inserts such ops to fit an operand),
        else ``flatten`` steps (two dims into one) down from a higher one."""
        by_rank = self._by_rank()
        if rank in by_rank:
            return True
        lower = [r for r in by_rank if 1 <= r < rank]
        higher = [r for r in by_rank if r > rank >= 1]
        # from the nearest rank the graph has, one step at a time
        if lower and (not higher or rank - max(lower) <= min(higher) - rank):
            if not self._produce_rank(rank - 1) or "unsqueeze" not in OPS:
                return False
            source = self._by_rank()[rank - 1][-1]
            attrs = {"dim": self.ch.integers(0, rank - 1)}
            op = "unsqueeze"
        elif higher and "flatten" in OPS:
            if not self._produce_rank(rank + 1):
                return False
            source = self._by_rank()[rank + 1][-1]
            start = self.ch.integers(0, rank - 1)
            attrs = {"start_dim": start, "end_dim": start + 1}
            op = "flatten"
        else:
            return False
        self.adapting = True
        try:
            return self.try_op(op, source, attrs=attrs)
        finally:
            self.adapting = False

    def _fit_dtypes(self, op: str, idx: list[int], attrs: dict, keep_first: bool
                    ) -> list[int] | None:
        """Operands of ``op`` whose dtypes its rule takes: ``idx`` if it does, else operands of
        a drawn fitting dtype combination (the newest values of each dtype preferred; a value of
        a dtype the graph lacks is made first, :meth:`_produce`), or None."""
        spec = OPS[op]
        have = [self.dtypes[i] for i in idx]
        if spec.dtype_rule(have, attrs) is not None:
            return idx

        def fitting(dtypes: Sequence[str]) -> list[tuple[str, ...]]:
            return [
                c
                for c in itertools.product(dtypes, repeat=len(idx))
                if (not keep_first or c[0] == have[0]) and spec.dtype_rule(list(c), attrs)
            ]

        present = [d for d in VALUE_DTYPES if d in self.dtypes]
        combos = fitting(present)
        if not combos:
            if self.adapting:
                return None
            wanted = fitting(VALUE_DTYPES)
            if not wanted:
                return None
            combo = wanted[self.ch.integers(0, len(wanted) - 1)]
            for d in [d for d in VALUE_DTYPES if d in combo and d not in present]:
                if not self._produce(d):
                    return None
            combos = [combo]
        combo = combos[self.ch.integers(0, len(combos) - 1)]
        out = list(idx)
        for j, want in enumerate(combo):
            if (keep_first and j == 0) or self.dtypes[out[j]] == want:
                continue
            cands = [i for i, d in enumerate(self.dtypes) if d == want]
            out[j] = cands[len(cands) - 1 - self.ch.integers(0, min(len(cands), 3) - 1)]
        if spec.compares and idx[0] == idx[1] and combo[0] == combo[1]:
            out[1] = out[0]  # one value on both sides stays one value
        return out

    def _produce(self, dtype: str) -> bool:
        """Make a value of ``dtype`` from what the graph has: a comparison for a bool (it
        also makes ties, :data:`COMPARE_SAME_SHARE`), else a cast of the newest float value."""
        self.adapting = True
        try:
            if dtype == "bool" and ADAPTERS:
                if self.try_op(ADAPTERS[self.ch.integers(0, len(ADAPTERS) - 1)]):
                    return True
            floats = [i for i, d in enumerate(self.dtypes) if is_float_dtype(d)]
            if not floats or "to_dtype" not in OPS:
                return False
            return self.try_op("to_dtype", floats[-1], attrs={"dtype": dtype})
        finally:
            self.adapting = False

    def try_op(
        self, op: str | None = None, operand: int | None = None, attrs: dict | None = None
    ) -> bool:
        """Draw (or take) an op, its operands and attrs (``attrs``: given, for an adapter) and
        keep it if its shape constraints are satisfiable."""
        ch = self.ch
        if op is None:
            names = self.op_names
            if not self.nodes and self.sizing.numel:  # an elementwise op reads x0 first
                names = [o for o in names if OPS[o].kind == "elementwise"] or names
            op = names[ch.integers(0, len(names) - 1)]
        spec = OPS[op]
        idx = self._operands(op, spec.arity)
        if operand is not None:
            idx[0] = operand
        given = attrs
        shapes = [self.values[i][1] for i in idx]
        ranks = [len(s) for s in shapes]
        attrs = dict(given) if given is not None else spec.sample_attrs(ch, ranks)
        if attrs is None and given is None:
            refit = self._fit_ranks(op, idx, keep_first=operand is not None)
            if refit is None:
                return False
            idx = refit
            shapes = [self.values[i][1] for i in idx]
            attrs = spec.sample_attrs(ch, [len(s) for s in shapes])
        if attrs is None:
            return False
        fitted = self._fit_dtypes(op, idx, attrs, keep_first=operand is not None)
        if fitted is None:
            return False
        if fitted != idx:  # other operands: the attrs drawn for their ranks
            idx = fitted
            shapes = [self.values[i][1] for i in idx]
            if given is None:
                attrs = spec.sample_attrs(ch, [len(s) for s in shapes])
            if attrs is None:
                return False
        made = tuple(
            spec.dtype_rule([self.case_dtypes[i][c] for i in idx], attrs)
            for c in range(len(self.cases))
        )
        if None in made:
            return False
        out_dtype = made[0]
        wish = self._row_wish(op, shapes[0], attrs)
        _ops._Z3_STATE["ctx"] = self.ctx
        n_free_before = _ops._Z3_STATE["counter"]
        cons, out = spec.shape_rule(shapes, attrs)
        if not (0 <= len(out) <= _ops.MAX_RANK):
            return False
        new_vars = [
            d
            for d in out
            if z3.is_const(d)
            and not z3.is_int_value(d)
            and d.decl().name()[0] in "reib"
            and int(d.decl().name()[1:]) > n_free_before
        ]
        cons = list(cons) + [d >= 1 for d in new_vars]
        if spec.grows:  # a tensor larger than its operands: the element cap applies
            cons += self._cap(out)
        if cons:
            self.solver.push()
            self.solver.add(*cons)
            if self.solver.check(self.wanted) != z3.sat:
                self.solver.pop()
                return False
            # the last satisfying model stays valid for everything kept so far (ops without
            # constraints add no variables), so solve() never depends on a final check
            self.model = self.solver.model()
        for d in new_vars:
            if d.decl().name()[0] in "rei":  # reshape / expand / index_select outputs are free
                self._new_free(d)
        if wish and self._satisfiable(wish):
            self.wishes.insert(len(self.row_nodes), wish)  # before the inputs' shape wishes
            self.row_wishes.pop(0)
            self.row_nodes.append(len(self.nodes))
        if self.hub_left > 0 and len(self.nodes) >= 1:
            self.hub_left -= 1
        name = f"t{len(self.nodes)}"
        self.nodes.append((op, [self.values[i][0] for i in idx], attrs, out))
        self.values.append((name, out))
        self.dtypes.append(out_dtype)
        self.case_dtypes.append(made)
        return True

    def _satisfiable(self, cons: list) -> bool:
        """Whether ``cons`` can hold together with everything so far (a wish an op cannot
        take is left for a later op)."""
        self.solver.push()
        self.solver.add(*cons)
        ok = self.solver.check() == z3.sat
        self.solver.pop()
        return ok

    def _try(self, cons: list) -> bool:
        s = self.solver
        s.push()
        s.add(*cons)
        if s.check() == z3.sat:
            self.model = s.model()
            return True
        s.pop()
        return False

    def solve(self) -> z3.ModelRef:
        # wishes first (all of one, else its first constraint alone), then the inputs' wanted
        # minimum sizes, then one preferred dim at a time
        for wish in self.wishes:
            if not self._try(wish) and len(wish) > 1:
                self._try(wish[:1])
        self._try([self.wanted])
        for v, pref in self.free:
            ladder = dict.fromkeys([pref, max(1, pref // 2), max(1, pref // 8), 1])
            for val in ladder:
                if self._try([v == val]):
                    break
        return self.model


def _concrete(model: z3.ModelRef, shape: list) -> list[int]:
    out = []
    for d in shape:
        if isinstance(d, int):
            out.append(d)
        else:
            out.append(model.eval(d, model_completion=True).as_long())
    return out


def _finish(gen: _Gen, model: z3.ModelRef, max_nodes: int) -> dict:
    ch = gen.ch
    shapes: dict[str, list[int]] = {}
    inputs: list[dict[str, Any]] = []
    n_inputs = len(gen.values) - len(gen.nodes)
    dtypes: dict[str, str] = {}
    for name, sh in gen.values[:n_inputs]:
        shapes[name] = _concrete(model, sh)
        dtypes[name] = gen.dtype
        inputs.append({"name": name, "shape": shapes[name], "dtype": gen.dtype})
    ivals: dict[str, tuple[float, float]] = {i["name"]: (-INPUT_BOUND, INPUT_BOUND) for i in inputs}
    rename: dict[str, str] = {}
    nodes: list[dict] = []
    protected = ""  # the wished reductions survive the cut to max_nodes

    def emit(op: str, args: list[str], attrs: dict, shape: list[int]) -> str:
        name = f"n{len(nodes)}"
        iv = interval(op, attrs, [ivals[a] for a in args], [shapes[a] for a in args], shape)
        dtype = OPS[op].dtype_rule([dtypes[a] for a in args], attrs)
        if dtype is None:  # pragma: no cover - phase 1 drew operands the rule takes
            raise AssertionError(f"{op} does not take {[dtypes[a] for a in args]}")
        nodes.append(
            {"name": name, "op": op, "args": list(args), "attrs": attrs, "shape": list(shape),
             "dtype": dtype}
        )
        shapes[name] = list(shape)
        dtypes[name] = dtype
        ivals[name] = iv
        return name

    for (op, args, attrs, sym_out), (tname, _) in zip(gen.nodes, gen.values[n_inputs:]):
        spec = OPS[op]
        args = [rename.get(a, a) for a in args]
        in_shapes = [shapes[a] for a in args]
        out_shape = _concrete(model, sym_out)
        pub = _ops.finalize_attrs(op, attrs, in_shapes, out_shape, ch)
        # the solved shape against the op's concrete rule (plain ints; tests/test_graph_ops.py
        # holds every rule to torch's meta kernels, which cost a Dynamo import and ~50 us a
        # node here)
        check = spec.out_shape(in_shapes, pub)
        if check != out_shape:  # pragma: no cover - the symbolic and concrete rules agree
            raise AssertionError(f"{op}: solved shape {out_shape} but its rule gives {check}")
        # domain guards (on float operands: ints and bools are what they are)
        for pos in spec.domain_args(pub):
            lo, hi = ivals[args[pos]]
            if not is_float_dtype(dtypes[args[pos]]):
                continue
            if not lo >= POSITIVE_MIN or not math.isfinite(hi):
                a = emit("abs", [args[pos]], {}, shapes[args[pos]])
                args[pos] = emit("add_scalar", [a], {"value": 0.5}, shapes[a])
        # magnitude guards (one guard per distinct operand: ``maximum(a, a)`` stays a
        # comparison of one value with itself)
        for c in _CLAMP_LEVELS:
            lo, hi = interval(
                op, pub, [ivals[a] for a in args], [shapes[a] for a in args], out_shape
            )
            if max(abs(lo), abs(hi)) <= MAGNITUDE_LIMIT:
                break
            guarded: dict[str, str] = {}
            for pos, a in enumerate(args):
                alo, ahi = ivals[a]
                if a in guarded:
                    args[pos] = guarded[a]
                elif max(abs(alo), abs(ahi)) > c and is_float_dtype(dtypes[a]):
                    args[pos] = guarded[a] = emit("clamp", [a], {"min": -c, "max": c}, shapes[a])
        rename[tname] = emit(op, args, pub, out_shape)
        if any(tname == f"t{k}" for k in gen.row_nodes):
            protected = rename[tname]

    names = [n["name"] for n in nodes]
    nodes = nodes[: max(max_nodes, names.index(protected) + 1 if protected else 0)]
    used = {a for n in nodes for a in n["args"]}
    outputs = [n["name"] for n in nodes if n["name"] not in used]
    return {"inputs": inputs, "nodes": nodes, "outputs": outputs}


def generate(
    chooser: Any,
    n_nodes: int,
    ops: Sequence[str] | None = None,
    sizing: Sizing | None = None,
    keep: int | None = None,
    more: Callable[[int], bool] | None = None,
    dtype: str = "float32",
) -> dict:
    """Generate a graph from a chooser's draws: ``n_nodes`` drawn ops (at least one), guard nodes
    inserted, then cut to ``keep`` nodes (default ``n_nodes``); ``sizing`` steers its sizes.

    ``more(count)``, asked after each op, may end the graph early: a Hypothesis draw there makes
    every op its own deletable span (like the elements of ``st.lists``), so a failing graph
    shrinks op by op.  ``dtype``: the case dtype (the inputs' ``"dtype"``; node dtypes follow
    from the ops' rules).  ``ops`` are the ops drawn; the generator adds its own around them
    (guards, a comparison or cast for a bool / int operand, an unsqueeze or flatten for an
    operand of a rank the graph lacks)."""
    ch = as_chooser(chooser)
    names = [o for o in (ops or _ops.DEFAULT_OPS)]
    for o in names:
        if o not in OPS:
            raise KeyError(f"unknown op {o!r}")
    n_nodes = max(1, int(n_nodes))
    if dtype not in VALUE_DTYPES or not is_float_dtype(dtype):
        raise ValueError(f"inputs are floating: unknown case dtype {dtype!r}")
    gen = _Gen(ch, names, sizing=sizing, dtype=dtype)
    gen.add_inputs()
    fails = 0
    asked = 0
    while len(gen.nodes) < n_nodes and fails < gen.max_tries * max(4, n_nodes):
        if more is not None and asked < len(gen.nodes):
            asked = len(gen.nodes)
            if not more(asked):
                break
        if not gen.try_op():
            fails += 1
    gen.close_with_reduction()
    if not gen.nodes:  # always at least one node
        ops_fallback = "neg"
        gen.nodes.append((ops_fallback, [gen.values[0][0]], {}, gen.values[0][1]))
        gen.values.append(("t0", gen.values[0][1]))
        gen.dtypes.append(gen.dtype)
        gen.case_dtypes.append(gen.cases)
    model = gen.solve()
    try:
        return _finish(gen, model, max(n_nodes, int(keep or 0)))
    finally:
        _ops.reset_z3(None)


def random_graph(
    rng: np.random.Generator | int, n_nodes: int, ops: Sequence[str] | None = None
) -> dict:
    """A graph of at most ``n_nodes`` nodes (usually exactly) from a NumPy Generator (or a seed)."""
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    return generate(RngChooser(rng), n_nodes, ops)


def more_ops(draw: Callable[[Any], Any], count: int, min_nodes: int = 1) -> bool:
    """Whether a Hypothesis-drawn graph gets another op after ``count`` (one in sixteen stops it
    early; shrinking turns these draws into stops)."""
    from hypothesis import strategies as st

    return count < min_nodes or draw(st.integers(0, 15)) != 0


def graph_strategy(max_nodes: int = 12, ops: Sequence[str] | None = None, min_nodes: int = 1):
    """Hypothesis strategy of graphs: node count, op, operand, attr and preferred-dim choices are
    all ``data.draw`` draws, so Hypothesis shrinks them (towards fewer nodes, earlier ops in the op
    list, chains of the newest values, and dims of 1)."""
    from hypothesis import strategies as st

    @st.composite
    def _graphs(draw):
        n = draw(st.integers(min_nodes, max_nodes))
        return generate(
            DrawChooser(draw), n, ops, more=lambda count: more_ops(draw, count, min_nodes)
        )

    return _graphs()
