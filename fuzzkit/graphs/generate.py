"""NNSmith-style random graph generation with z3 shape constraints.

Phase 1 (structure, symbolic shapes): graph inputs get fresh z3 ``Int`` dims (``1 <= d``,
element count <= ``ELEMENT_CAP``).  Each step draws an op, operands (offset from the newest value, so
shrinking moves towards chains) and rank-level attrs; the op's ``shape_rule`` constraints (plus
``d >= 1`` and the element cap for any new tensor shape) are pushed on an incremental solver and the
op is kept only if ``check() == sat`` (else popped and another op is tried).

Phase 2 (concrete shapes): every free dim (input dims, reshape / expand / index_select outputs) has
a preferred value drawn from ``TILE_VALUES`` (tile boundaries); preferences are tried one at a time
as tentative constraints (push / check / keep or pop), then the model gives every dim.

Phase 3 (attrs + guards): shape-dependent attrs are filled (reshape/expand ``shape``, index_select
``index``); then a value-range pass (intervals, inputs within ``[-INPUT_BOUND, INPUT_BOUND]``)
inserts ordinary guard nodes: ``abs`` + ``add_scalar(0.5)`` before every positive / nonzero domain
argument whose range is not provably >= ``POSITIVE_MIN``, and ``clamp(-c, c)`` before operands of
any op whose output magnitude could exceed ``MAGNITUDE_LIMIT`` (keeps float16 finite: exp inputs,
pow, products, sums).  The graph is finally cut to the node budget; outputs are the sinks.

Everything is a function of the chooser's draws (Hypothesis ``data.draw`` or a NumPy Generator),
and each run uses its own z3 context, so the same seed gives the same graph.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import z3

from . import ops as _ops
from .ops import OPS, Chooser, DrawChooser, RngChooser, as_chooser

__all__ = [
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

TILE_VALUES = (1, 7, 15, 16, 17, 63, 64, 65, 127, 128, 129)
ELEMENT_CAP = 4096
INPUT_BOUND = 4.0
MAGNITUDE_LIMIT = 4096.0
POSITIVE_MIN = 0.25
MAX_INPUTS = 3
MAX_INPUT_RANK = 3
_CLAMP_LEVELS = (8.0, 2.0, 1.0)
CHECK_RLIMIT = int(__import__("os").environ.get("FUZZKIT_Z3_RLIMIT", "30000"))  # per check; deterministic (unlike a timeout); "unknown" = rejected


# ----------------------------------------------------------------------------------------------
# value ranges (used for guards)
# ----------------------------------------------------------------------------------------------


def _gelu(x: float) -> float:
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def _safe_exp(x: float) -> float:
    return math.exp(min(x, 700.0))


def interval(op: str, attrs: dict, ivals: Sequence[tuple[float, float]],
             in_shapes: Sequence[Sequence[int]], out_shape: Sequence[int]) -> tuple[float, float]:
    """Conservative ``(lo, hi)`` of ``op``'s output given input intervals (may be infinite)."""
    inf = math.inf
    lo, hi = ivals[0]
    m = max(abs(lo), abs(hi))
    if op == "abs":
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), m)
    if op == "neg":
        return (-hi, -lo)
    if op == "exp":
        return (_safe_exp(lo), _safe_exp(hi))
    if op == "log":
        return (math.log(lo) if lo > 0 else -inf, math.log(hi) if hi > 0 else -inf)
    if op == "sqrt":
        return (math.sqrt(max(lo, 0.0)), math.sqrt(max(hi, 0.0)))
    if op == "rsqrt":
        return (1 / math.sqrt(hi) if hi > 0 else inf, 1 / math.sqrt(lo) if lo > 0 else inf)
    if op == "tanh":
        return (math.tanh(lo), math.tanh(hi))
    if op == "sigmoid":
        return (1 / (1 + _safe_exp(-lo)), 1 / (1 + _safe_exp(-hi)))
    if op == "relu":
        return (max(lo, 0.0), max(hi, 0.0))
    if op == "gelu":
        return (-0.17 if lo < 0 else _gelu(lo), max(hi, 0.0))
    if op in ("sin", "cos"):
        return (-1.0, 1.0)
    if op == "reciprocal":
        if lo > 0:
            return (1 / hi, 1 / lo)
        if hi < 0:
            return (1 / hi, 1 / lo)
        return (-inf, inf)
    if op == "pow":
        e = float(attrs["exponent"])
        if e == 2.0:
            return (0.0 if lo <= 0 <= hi else min(lo * lo, hi * hi), m * m)
        if e == 3.0:
            return (lo**3, hi**3)
        if lo < 0:
            return (-inf, inf)  # invalid domain (guards prevent this)
        return (lo**e, hi**e)
    if op == "clamp":
        a, b = attrs["min"], attrs["max"]
        return (min(max(lo, a), b), min(max(hi, a), b))
    if op == "add_scalar":
        return (lo + attrs["value"], hi + attrs["value"])
    if op in ("add", "sub", "mul", "div", "maximum", "minimum"):
        lo2, hi2 = ivals[1]
        if op == "add":
            return (lo + lo2, hi + hi2)
        if op == "sub":
            return (lo - hi2, hi - lo2)
        if op == "maximum":
            return (max(lo, lo2), max(hi, hi2))
        if op == "minimum":
            return (min(lo, lo2), min(hi, hi2))
        if op == "div":
            if lo2 > 0 or hi2 < 0:
                lo2, hi2 = 1 / hi2, 1 / lo2
            else:
                return (-inf, inf)
        prods = [lo * lo2, lo * hi2, hi * lo2, hi * hi2]
        prods = [0.0 if math.isnan(p) else p for p in prods]
        return (min(prods), max(prods))
    if op == "where_gt":
        return (min(ivals[2][0], ivals[3][0]), max(ivals[2][1], ivals[3][1]))
    if op in ("matmul", "bmm"):
        k = in_shapes[0][-1]
        m2 = max(abs(ivals[1][0]), abs(ivals[1][1]))
        b = k * m * m2
        return (-b, b)
    if op == "softmax":
        return (0.0, 1.0)
    if op == "log_softmax":
        n = in_shapes[0][attrs["dim"]]
        return (-(hi - lo) - math.log(n), 0.0)
    if op == "layer_norm":
        n = in_shapes[0][attrs["dim"]]
        b = math.sqrt(max(n - 1, 1))
        return (-b, b)
    if op in ("sum", "cumsum"):
        n = in_shapes[0][attrs["dim"]]
        return (min(n * lo, lo), max(n * hi, hi))
    if op in ("mean", "amax", "amin", "reshape", "permute", "transpose", "expand", "unsqueeze",
              "squeeze", "index_select"):
        return (lo, hi)
    if op == "cat":
        return (min(lo, ivals[1][0]), max(hi, ivals[1][1]))
    raise KeyError(f"no interval rule for {op!r}")


def value_intervals(graph: dict, input_bound: float = INPUT_BOUND) -> dict[str, tuple[float, float]]:
    """Interval of every input and node of a graph (inputs within ``[-input_bound, input_bound]``)."""
    iv: dict[str, tuple[float, float]] = {}
    shapes: dict[str, list[int]] = {}
    for inp in graph["inputs"]:
        iv[inp["name"]] = (-input_bound, input_bound)
        shapes[inp["name"]] = list(inp["shape"])
    for n in graph["nodes"]:
        iv[n["name"]] = interval(n["op"], n["attrs"], [iv[a] for a in n["args"]],
                                 [shapes[a] for a in n["args"]], n["shape"])
        shapes[n["name"]] = list(n["shape"])
    return iv


# ----------------------------------------------------------------------------------------------
# generator
# ----------------------------------------------------------------------------------------------


class _Gen:
    def __init__(self, ch: Chooser, op_names: Sequence[str], max_tries: int = 12):
        self.ch = ch
        self.op_names = list(op_names)
        self.max_tries = max_tries
        self.ctx = z3.Context()
        _ops.reset_z3(self.ctx)
        self.solver = z3.Solver(ctx=self.ctx)
        self.solver.set("rlimit", CHECK_RLIMIT)
        # values: (name, symbolic shape); node records: (op, arg names, attrs, symbolic shape)
        self.values: list[tuple[str, list]] = []
        self.nodes: list[tuple[str, list[str], dict, list]] = []
        self.free: list[tuple[Any, int]] = []  # (z3 var, preferred value)
        # assumption literal: input dims stay >= min(pref, 7) (so ops that would force the graph's
        # inputs to be tiny, e.g. long cat chains under the element cap, are rejected)
        self.wanted = z3.Bool("wanted", self.ctx)
        self.wanted_terms: list = []

    # -- draws --------------------------------------------------------------------------------
    def _pref(self) -> int:
        return TILE_VALUES[self.ch.integers(0, len(TILE_VALUES) - 1)]

    def _new_free(self, v) -> None:
        self.free.append((v, self._pref()))

    def _operand(self) -> int:
        n = len(self.values)
        if isinstance(self.ch, RngChooser):
            rng = self.ch.rng
            if rng.random() < 0.75:
                k = min(int(rng.geometric(0.3)) - 1, n - 1)
            else:
                k = int(rng.integers(0, n))
        else:
            k = self.ch.integers(0, n - 1)
        return n - 1 - k

    # -- constraints --------------------------------------------------------------------------
    def _cap(self, shape: list) -> list:
        syms = [d for d in shape if not (isinstance(d, int) or z3.is_int_value(d))]
        if not syms:
            return []
        cons = []
        if len(shape) >= 2:
            cons.append(_ops._prod(shape) <= ELEMENT_CAP)
        else:
            cons.append(shape[0] <= ELEMENT_CAP)
        return cons

    def add_inputs(self) -> None:
        k = self.ch.integers(1, MAX_INPUTS)
        for i in range(k):
            r = self.ch.integers(1, MAX_INPUT_RANK)
            shape = [_ops.fresh_dim("x") for _ in range(r)]
            for d in shape:
                self.solver.add(d >= 1)
                self._new_free(d)
                self.wanted_terms.append(d >= min(self.free[-1][1], 7))
            self.solver.add(*self._cap(shape))
            self.values.append((f"x{i}", shape))
        self.solver.add(z3.Implies(self.wanted, z3.And(*self.wanted_terms)))
        if self.solver.check(self.wanted) != z3.sat:  # pragma: no cover - inputs alone are easy
            raise RuntimeError("input shape constraints are not satisfiable")
        self.model = self.solver.model()

    def try_op(self) -> bool:
        ch = self.ch
        op = self.op_names[ch.integers(0, len(self.op_names) - 1)]
        spec = OPS[op]
        idx = [self._operand() for _ in range(spec.arity)]
        shapes = [self.values[i][1] for i in idx]
        attrs = spec.sample_attrs(ch, [len(s) for s in shapes])
        if attrs is None:
            return False
        _ops._Z3_STATE["ctx"] = self.ctx
        n_free_before = _ops._Z3_STATE["counter"]
        cons, out = spec.shape_rule(shapes, attrs)
        if not (1 <= len(out) <= _ops.MAX_RANK):
            return False
        new_vars = [d for d in out if z3.is_const(d) and not z3.is_int_value(d)
                    and d.decl().name()[0] in "reib"
                    and int(d.decl().name()[1:]) > n_free_before]
        cons = list(cons) + [d >= 1 for d in new_vars]
        grows = op in ("add", "sub", "mul", "div", "maximum", "minimum", "where_gt", "matmul", "bmm",
                       "expand", "cat", "index_select")
        if grows:
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
        name = f"t{len(self.nodes)}"
        self.nodes.append((op, [self.values[i][0] for i in idx], attrs, out))
        self.values.append((name, out))
        return True

    def solve(self) -> z3.ModelRef:
        s = self.solver
        s.add(self.wanted)
        for v, pref in self.free:
            i = TILE_VALUES.index(pref)
            ladder = [pref] + [TILE_VALUES[j] for j in sorted({i // 2, i // 4}) if j < i][::-1]
            for val in ladder:
                s.push()
                s.add(v == val)
                if s.check() == z3.sat:
                    self.model = s.model()
                    break
                s.pop()
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
    inputs = []
    n_inputs = len(gen.values) - len(gen.nodes)
    for name, sh in gen.values[:n_inputs]:
        shapes[name] = _concrete(model, sh)
        inputs.append({"name": name, "shape": shapes[name]})
    ivals: dict[str, tuple[float, float]] = {i["name"]: (-INPUT_BOUND, INPUT_BOUND) for i in inputs}
    rename: dict[str, str] = {}
    nodes: list[dict] = []

    def emit(op: str, args: list[str], attrs: dict, shape: list[int]) -> str:
        name = f"n{len(nodes)}"
        iv = interval(op, attrs, [ivals[a] for a in args], [shapes[a] for a in args], shape)
        nodes.append({"name": name, "op": op, "args": list(args), "attrs": attrs, "shape": list(shape)})
        shapes[name] = list(shape)
        ivals[name] = iv
        return name

    for (op, args, attrs, sym_out), (tname, _) in zip(gen.nodes, gen.values[n_inputs:]):
        spec = OPS[op]
        args = [rename.get(a, a) for a in args]
        in_shapes = [shapes[a] for a in args]
        out_shape = _concrete(model, sym_out)
        pub = _ops.finalize_attrs(op, attrs, in_shapes, out_shape, ch)
        check = _ops.eval_shape(op, pub, in_shapes)
        if check != out_shape:  # pragma: no cover - shape rules mirror torch
            raise AssertionError(f"{op}: solved shape {out_shape} but torch gives {check}")
        # domain guards
        for pos in spec.domain_args(pub):
            lo, hi = ivals[args[pos]]
            if not lo >= POSITIVE_MIN or not math.isfinite(hi):
                a = emit("abs", [args[pos]], {}, shapes[args[pos]])
                args[pos] = emit("add_scalar", [a], {"value": 0.5}, shapes[a])
        # magnitude guards
        for c in _CLAMP_LEVELS:
            lo, hi = interval(op, pub, [ivals[a] for a in args], [shapes[a] for a in args], out_shape)
            if max(abs(lo), abs(hi)) <= MAGNITUDE_LIMIT:
                break
            for pos, a in enumerate(args):
                alo, ahi = ivals[a]
                if max(abs(alo), abs(ahi)) > c:
                    args[pos] = emit("clamp", [a], {"min": -c, "max": c}, shapes[a])
        rename[tname] = emit(op, args, pub, out_shape)

    nodes = nodes[:max_nodes]
    used = {a for n in nodes for a in n["args"]}
    outputs = [n["name"] for n in nodes if n["name"] not in used]
    return {"inputs": inputs, "nodes": nodes, "outputs": outputs}


def generate(chooser: Any, n_nodes: int, ops: Sequence[str] | None = None) -> dict:
    """Generate a graph with at most ``n_nodes`` nodes (at least one) from a chooser's draws."""
    ch = as_chooser(chooser)
    names = [o for o in (ops or _ops.DEFAULT_OPS)]
    for o in names:
        if o not in OPS:
            raise KeyError(f"unknown op {o!r}")
    n_nodes = max(1, int(n_nodes))
    gen = _Gen(ch, names)
    gen.add_inputs()
    fails = 0
    while len(gen.nodes) < n_nodes and fails < gen.max_tries * max(4, n_nodes):
        if not gen.try_op():
            fails += 1
    if not gen.nodes:  # always at least one node
        OPS_FALLBACK = "neg"
        gen.nodes.append((OPS_FALLBACK, [gen.values[0][0]], {}, gen.values[0][1]))
        gen.values.append(("t0", gen.values[0][1]))
    model = gen.solve()
    try:
        return _finish(gen, model, n_nodes)
    finally:
        _ops.reset_z3(None)


def random_graph(rng: np.random.Generator | int, n_nodes: int, ops: Sequence[str] | None = None) -> dict:
    """A graph of at most ``n_nodes`` nodes (usually exactly) from a NumPy Generator (or a seed)."""
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    return generate(RngChooser(rng), n_nodes, ops)


def graph_strategy(max_nodes: int = 12, ops: Sequence[str] | None = None, min_nodes: int = 1):
    """Hypothesis strategy of graphs: node count, op, operand, attr and preferred-dim choices are
    all ``data.draw`` draws, so Hypothesis shrinks them (towards fewer nodes, earlier ops in the op
    list, chains of the newest values, and dims of 1)."""
    from hypothesis import strategies as st

    @st.composite
    def _graphs(draw):
        n = draw(st.integers(min_nodes, max_nodes))
        return generate(DrawChooser(draw), n, ops)

    return _graphs()
