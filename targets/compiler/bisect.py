"""Bisect a failing compiler-graph case down to the first diverging node and its smallest window.

A "graph target" takes inputs ``{"graph": ..., "values": [...], "dtype": ..., ...}`` (see
:mod:`fuzzkit.targets.compiler.graphs`) and its reference returns
``{"outputs": [...], "intermediates": {name: ...}}`` in float64.  Delta debugging over a whole
graph (what ``torch._functorch.fx_minifier`` does) costs many compiles; with the float64
intermediates in hand the search can be a bisection instead:

1. **Prefix bisection.**  ``prefix(graph, i)`` keeps nodes ``0..i`` and makes every value that is
   still live (plus node ``i``) an output.  The smallest failing ``i`` is found by binary search:
   ``O(log n)`` compiles.  A failing run also says *which* of its outputs diverged first (the
   failure's ``details["node"]``, or the oracle re-asked per output, which costs no compile): the
   divergence starts at that node or upstream of it, so the search continues over that node and
   its ancestors only (after the last passing prefix).
2. **Window.**  The node ``i`` alone, its arguments fed with the reference values rounded to the
   dtype (1 compile).  When that passes the bug needs more context (a fusion-only bug): the
   window grows over ``i``'s ancestors by DAG distance (1, 2, 4, ...; then a binary search of
   the distance), then ddmin drops window nodes (a dropped node's value comes from the
   reference) down to the smallest group that still fails.
3. **Confirmation.**  The final window is run once more and must fail the same way again; if the
   two runs disagree the result is flagged ``nondeterministic``.

Every candidate must fail with the *same* dtype and error class as the original failure (the
divergence signature ``mismatch:<op>:<dtype>:<class>``; the op may differ while searching), so the
search stays on one bug.  Each implementation call is one compile; they are counted through
:func:`fuzzkit.targets.compiler.compile_calls`, else (an implementation that does not go
through it) by counting implementation calls.

A case's ``variants`` (other input shapes through one compile), ``dynamic`` mode and input
``layouts`` go with every candidate: a window's inputs take, in each variant, that variant's
input values or its own float64 reference values rounded to the dtype, and an original input
keeps its layout (a value cut off upstream is passed contiguous); so a bug that needs a
variant, a mode or a layout stays reproducible while the graph is cut down.  The oracle's other
classes bisect the same way: an error class (a ``crash`` failure) like a crash, a dtype or a
determinism failure (``mismatch`` kind, ``error_class`` ``dtype`` / ``nondeterministic``) like
a divergence.

:func:`bisection` is the ``compiler`` target's ``Target.bisect`` hook (:mod:`fuzzkit.shrink.hook`),
which ``fuzzkit bisect`` runs; any other graph target may name it as its own hook too.  It writes
a standalone reproducer (:mod:`.repro`) beside the minimized case.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from typing import Any, Callable

import numpy as np

from fuzzkit.case import Case
from fuzzkit.failure import Failure
from fuzzkit.shrink.ddmin import ddmin
from fuzzkit.shrink.hook import (
    CannotMinimize,
    Minimization,
    Minimized,
    NotFailing,
    Trial,
    trial_for,
)
from fuzzkit.target import Implementation, Inputs, Target
from fuzzkit.targets.compiler import compile_calls
from fuzzkit.targets.compiler.graphs.build import prefix, subgraph
from fuzzkit.targets.compiler.graphs.values import round_to_dtype

GRAPH_KEYS = ("graph", "values", "dtype")

__all__ = ["BisectResult", "NotAGraphCase", "NotFailing", "bisect", "bisection", "same_bug"]


class NotAGraphCase(CannotMinimize):
    """The inputs are not those of a graph target (no graph / values / dtype)."""


@dataclasses.dataclass
class BisectResult:
    first_node: str
    op: str
    window: list[str]
    minimized_inputs: Inputs
    compile_calls: int
    signature: str
    confirmed: bool
    nondeterministic: bool
    steps: list[tuple[str, str, bool]]
    seconds: float
    original_nodes: int = 0
    first_index: int = -1
    failure: Failure | None = None  # the final window's failure
    original_failure: Failure | None = None
    #: A divergence of *another* class seen in a shorter prefix (e.g. a "value" error upstream
    #: of the original "inf"): the search stays on the original class, but this is reported.
    other_divergence: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "first_node": self.first_node,
            "op": self.op,
            "window": list(self.window),
            "compile_calls": self.compile_calls,
            "signature": self.signature,
            "confirmed": self.confirmed,
            "nondeterministic": self.nondeterministic,
            "original_nodes": self.original_nodes,
            "first_index": self.first_index,
            "seconds": round(self.seconds, 3),
            "steps": [{"stage": s, "description": d, "failed": f} for s, d, f in self.steps],
            "failure": self.failure.to_json() if self.failure else None,
            "other_divergence": self.other_divergence,
        }


    def lines(self) -> list[str]:
        """The result for a person: where it diverges, the window, the signature, the cost."""
        status = (
            "NONDETERMINISTIC"
            if self.nondeterministic
            else "confirmed"
            if self.confirmed
            else "not confirmed"
        )
        out = [
            f"first diverging node: {self.first_node} ({self.op}), node "
            f"{self.first_index + 1} of {self.original_nodes}",
            f"window: {len(self.window)} node(s): {', '.join(self.window)}",
            f"signature: {self.signature}",
        ]
        if self.other_divergence:
            o = self.other_divergence
            out.append(
                f"note: an earlier divergence of another class at {o['node']} ({o['op']}): "
                f"{o['signature']}; bisect stayed on {self.signature}"
            )
        out.append(f"compile calls: {self.compile_calls} in {self.seconds:.1f} s; {status}")
        return out


# ---------------------------------------------------------------------------------------------


def is_graph_case(inputs: Any) -> bool:
    return (
        isinstance(inputs, dict)
        and all(k in inputs for k in GRAPH_KEYS)
        and isinstance(inputs["graph"], dict)
        and "nodes" in inputs["graph"]
    )


def _parts(failure: Failure) -> tuple[str, str | None, str | None]:
    """(kind, dtype, error_class) of a failure; from details, else from the compiler oracle's
    signature ``mismatch:<op>:<dtype>:<error_class>``."""
    d = failure.details or {}
    dtype, cls = d.get("dtype"), d.get("error_class")
    if (dtype is None or cls is None) and failure.kind == "mismatch":
        bits = failure.signature.split(":")
        if len(bits) >= 4:
            dtype = dtype or bits[-2]
            cls = cls or bits[-1]
    return failure.kind, dtype, cls


def same_bug(original: Failure, candidate: Failure | None) -> bool:
    """Same divergence class: same kind, dtype and error class (the op may differ)."""
    if candidate is None:
        return False
    if original.kind != "mismatch":
        return candidate.signature == original.signature
    return _parts(candidate) == _parts(original)


# ---------------------------------------------------------------------------------------------


def bisect(
    target: Target,
    impl: Implementation,
    inputs: Inputs,
    *,
    confirm: bool = True,
    failure: Failure | None = None,
    timeout: float | None = None,
    checker: Callable[..., Any] | None = None,
    trial: Trial | None = None,
) -> BisectResult:
    """Find the first diverging node of a failing graph case and the smallest failing window.

    ``failure``: the original failure when the caller already has it (then the whole case is not
    re-run first).  ``checker`` (the contract of :func:`fuzzkit.engines.hypothesis.fuzz`'s)
    replaces :func:`fuzzkit.runner.check_case` for every compile-and-run, e.g. an isolated
    worker process so a compiler that segfaults or hangs on a window is a verdict; ``trial``
    (:class:`fuzzkit.shrink.hook.Trial`, what a hook is given) replaces both.  Raises
    :class:`NotFailing` when the case passes and :class:`NotAGraphCase` for inputs without a
    graph.
    """
    if not is_graph_case(inputs):
        raise NotAGraphCase("not a graph case: inputs need 'graph', 'values' and 'dtype'")
    if target.validate is not None:  # inputs from a file: refused before anything runs
        from fuzzkit.limits import validation_problem

        problem = validation_problem(target, inputs)
        if problem is not None:
            raise NotAGraphCase(f"not a valid {target.name} case: {problem}")
    started = time.perf_counter()
    if trial is None:
        trial = trial_for(target, impl, timeout=timeout, checker=checker)
    calls_at_start = compile_calls()
    impl_calls = 0
    steps: list[tuple[str, str, bool]] = []
    graph = inputs["graph"]
    dtype = str(inputs["dtype"])
    nodes = graph["nodes"]
    index = {n["name"]: k for k, n in enumerate(nodes)}
    by_name = {n["name"]: n for n in nodes}
    input_values = {x["name"]: np.asarray(v) for x, v in zip(graph["inputs"], inputs["values"])}

    expected = target.reference(copy.deepcopy(inputs))
    intermediates: dict[str, np.ndarray] = expected["intermediates"]
    rounded: dict[str, np.ndarray] = {}

    def value_of(name: str) -> np.ndarray:
        if name in input_values:
            return input_values[name]
        if name not in rounded:
            rounded[name] = round_to_dtype(intermediates[name], dtype)
        return rounded[name]

    # variants (other input shapes through the same compile) go along: a window's inputs in
    # each variant are that variant's own input values or its reference values rounded
    variant_inputs = [
        {x["name"]: np.asarray(v) for x, v in zip(graph["inputs"], values)}
        for values in inputs.get("variants") or ()
    ]
    variant_refs = [dict(r.get("intermediates") or {}) for r in expected.get("variants") or ()]
    variant_rounded: list[dict[str, np.ndarray]] = [{} for _ in variant_inputs]
    layout_of = dict(zip((x["name"] for x in graph["inputs"]), inputs.get("layouts") or ()))

    def variant_value(k: int, name: str) -> np.ndarray:
        if name in variant_inputs[k]:
            return variant_inputs[k][name]
        if name not in variant_rounded[k]:
            variant_rounded[k][name] = round_to_dtype(variant_refs[k][name], dtype)
        return variant_rounded[k][name]

    def case_for(sub: dict) -> Inputs:
        out = {k: v for k, v in inputs.items()
               if k not in ("graph", "values", "variants", "layouts")}
        out["graph"] = sub
        out["values"] = [value_of(x["name"]) for x in sub["inputs"]]
        if variant_inputs:
            out["variants"] = [[variant_value(k, x["name"]) for x in sub["inputs"]]
                               for k in range(len(variant_inputs))]
        if layout_of:  # an original input keeps its layout, a cut-off value comes contiguous
            out["layouts"] = [layout_of.get(x["name"], "contiguous") for x in sub["inputs"]]
        return out

    last: dict[str, Any] = {}

    def run(case: Inputs) -> Failure | None:
        nonlocal impl_calls
        if target.validate is not None and target.validate(case) is not None:
            return None
        impl_calls += 1
        verdict = trial(case, properties=False, confirm=False)
        last["verdict"] = verdict
        return verdict.failure

    # Step 0: the original failure.
    if failure is None:
        failure = run(inputs)
        steps.append(
            (
                "original",
                f"whole graph ({len(nodes)} nodes): {failure.signature if failure else 'passes'}",
                failure is not None,
            )
        )
        if failure is None:
            raise NotFailing("the case passes; there is nothing to bisect")
        hint = _first_diverging(target, inputs, last.get("verdict"), index)
    else:
        steps.append(("original", f"recorded failure {failure.signature} (not re-run)", True))
        hint = None
    original = failure
    if original.kind == "nondeterministic":
        raise NotFailing("the recorded failure is nondeterministic; bisect needs a repeatable one")

    # Step 1: binary search over prefixes for the smallest failing end i.  The candidates are
    # node `hi` (a node whose value diverged: the oracle names it) and its ancestors after `lo`
    # (prefix(lo) passes): a divergence starts at the diverging node or upstream of it.
    lo, hi = -1, len(nodes) - 1
    if hint is not None:
        hi = min(hi, hint)

    # A crash (or hang) has no diverging value to follow upstream: every node kept in a
    # candidate graph stays an output (so nothing is dead code a compiler could drop), and the
    # prefix search considers every node, not the ancestors of a diverging one.
    crashing = original.kind != "mismatch"

    def candidates(end: int) -> list[int]:
        if crashing:
            return list(range(lo + 1, end + 1))
        if hint is None and end == len(nodes) - 1 and lo == -1 and not narrowed:
            return list(range(len(nodes)))
        cone = {index[a] for a in _depths(nodes[end]["name"], by_name)} | {end}
        return sorted(k for k in cone if lo < k <= end)

    narrowed = False
    other: dict[str, Any] | None = None
    cands = candidates(hi)
    while len(cands) > 1:
        mid = cands[(len(cands) - 1) // 2]
        case = case_for(prefix(graph, mid))
        got = run(case)
        ok = same_bug(original, got)
        steps.append(
            (
                "prefix",
                f"nodes[0..{mid}] ({nodes[mid]['op']} {nodes[mid]['name']}): "
                f"{got.signature if got else 'passes'}",
                ok,
            )
        )
        if ok:
            hi = mid
            h = _first_diverging(target, case, last.get("verdict"), index)
            if h is not None and lo < h < hi:
                hi = h
            narrowed = True
            cands = candidates(hi)
        else:
            lo = mid
            cands = [k for k in cands if k > mid]
            if got is not None and got.kind != "timeout":
                node = (got.details or {}).get("node")
                at = index.get(node, mid) if isinstance(node, str) else mid
                if other is None or at < other["index"]:
                    other = {
                        "node": nodes[at]["name"],
                        "op": nodes[at]["op"],
                        "index": at,
                        "signature": got.signature,
                        "prefix_end": mid,
                    }
    first = cands[0] if cands else hi
    first_name = nodes[first]["name"]

    # Step 2: the window feeding node `first`.
    tried: dict[tuple[str, ...], Failure | None] = {}

    def window_fails(keep: list[str]) -> bool:
        ordered = sorted(set(keep) | {first_name}, key=index.__getitem__)
        key = tuple(ordered)
        if key not in tried:
            got = run(case_for(subgraph(graph, ordered, ordered if crashing else [first_name])))
            tried[key] = got if same_bug(original, got) else None
            steps.append(
                (
                    "window",
                    f"{len(ordered)} node(s) {', '.join(ordered[:6])}"
                    f"{' ...' if len(ordered) > 6 else ''}: "
                    f"{got.signature if got else 'passes'}",
                    tried[key] is not None,
                )
            )
        return tried[key] is not None

    window: list[str] = [first_name]
    if not window_fails([]):
        # Grow by DAG distance from node i (fused groups are local in the graph, not in the
        # node order): distance <= 1, 2, 4, ... until a window fails, then binary-search the
        # distance, then ddmin over that window's nodes.
        depth = _depths(first_name, by_name)
        max_d = max(depth.values(), default=0)

        def ring(d: int) -> list[str]:
            return sorted((v for v, k in depth.items() if k <= d), key=index.__getitem__)

        start: list[str] = []
        lo_d, d = 0, 1
        while max_d and d < 2 * max_d:
            d = min(d, max_d)
            if window_fails(ring(d)):
                hi_d = d
                while hi_d - lo_d > 1:  # ring(lo_d) passes, ring(hi_d) fails
                    m = (lo_d + hi_d) // 2
                    if window_fails(ring(m)):
                        hi_d = m
                    else:
                        lo_d = m
                start = ring(hi_d)
                break
            if d == max_d:
                break
            lo_d, d = d, 2 * d
        if not start:  # the bug needs nodes outside the ancestor cone: try the whole prefix
            whole = [n["name"] for n in nodes[:first]]
            if whole and window_fails(whole):
                start = whole
        if start:
            kept = ddmin(start, lambda sub: window_fails(list(sub)))
            window = sorted(set(kept) | {first_name}, key=index.__getitem__)
        else:  # nothing smaller than the prefix reproduces: keep the prefix itself
            window = [n["name"] for n in nodes[: first + 1]]

    final_key = tuple(window)
    final_case = case_for(subgraph(graph, window, window if crashing else [first_name]))
    final_failure = tried.get(final_key)
    if final_key not in tried:  # the prefix fallback: run it once
        got = run(final_case)
        final_failure = got if same_bug(original, got) else None
        steps.append(
            (
                "window",
                f"prefix fallback ({len(window)} nodes): {got.signature if got else 'passes'}",
                final_failure is not None,
            )
        )

    # Step 3: confirmation.
    confirmed, nondeterministic = final_failure is not None, False
    if confirm:
        again = run(final_case)
        ok = same_bug(original, again)
        steps.append(
            ("confirm", f"re-run of the final window: {again.signature if again else 'passes'}", ok)
        )
        if ok != (final_failure is not None):
            nondeterministic = True
        confirmed = ok and final_failure is not None
        if final_failure is None and ok:
            final_failure = again
    calls = compile_calls() - calls_at_start
    if calls <= 0:  # an implementation that does not go through the compiler counter
        calls = impl_calls
    return BisectResult(
        first_node=first_name,
        op=by_name[first_name]["op"],
        window=window,
        minimized_inputs=final_case,
        compile_calls=calls,
        signature=(final_failure or original).signature,
        confirmed=confirmed,
        nondeterministic=nondeterministic,
        steps=steps,
        seconds=time.perf_counter() - started,
        original_nodes=len(nodes),
        first_index=first,
        failure=final_failure,
        original_failure=original,
        other_divergence=other if other is not None and other["index"] < first else None,
    )


def _depths(name: str, by_name: dict[str, dict]) -> dict[str, int]:
    """Every ancestor node of ``name`` with its shortest distance (in edges) from it."""
    depth: dict[str, int] = {}
    frontier = [name]
    d = 0
    while frontier:
        d += 1
        nxt = []
        for v in frontier:
            for a in by_name[v]["args"]:
                if a in by_name and a not in depth:
                    depth[a] = d
                    nxt.append(a)
        frontier = nxt
    return depth


def _first_diverging(
    target: Target, case: Inputs, verdict: Any, index: dict[str, int]
) -> int | None:
    """Index of a diverging output of ``case``: the node the failure names (``details["node"]``;
    the ``compiler`` oracle names the topologically first diverging output), else the
    topologically first output that the oracle flags on its own (re-asked per output: no compile,
    no implementation call).  A target whose oracle does not accept such a slice gives no hint.
    """
    if verdict is None or verdict.failure is None:
        return None
    named = (verdict.failure.details or {}).get("node")
    if isinstance(named, str) and named in index and named in case["graph"]["outputs"]:
        return index[named]  # the oracle names the diverging output itself
    if verdict.expected is None or verdict.actual is None:
        return None
    try:
        outs = list(case["graph"]["outputs"])
        exp_outs, act_outs = verdict.expected["outputs"], verdict.actual["outputs"]
        order = sorted((index[o], k) for k, o in enumerate(outs) if o in index)
        for pos, k in order:
            sub_case = dict(case)
            sub_case["graph"] = dict(case["graph"], outputs=[outs[k]])
            exp = dict(verdict.expected, outputs=[exp_outs[k]])
            act = dict(verdict.actual, outputs=[act_outs[k]])
            got = target.oracle(sub_case, exp, act)
            if got is not None and same_bug(verdict.failure, got):
                return pos
    except Exception:  # noqa: BLE001 - a hint only
        return None
    return None


def log2_budget(n: int) -> float:
    """The goal for single-op bugs: log2(n) + 3 compile calls."""
    return math.log2(max(n, 1)) + 3


def bisection(request: Minimization) -> Minimized:
    """The ``Target.bisect`` hook of graph targets: :func:`bisect` the case, and write a
    standalone reproducer (:func:`.repro.write_repro`) beside the minimized case once it is
    saved."""
    from fuzzkit.targets.compiler.repro import write_repro

    case = request.case
    result = bisect(request.target, request.implementation, case.inputs, trial=request.trial)
    minimized = Case(
        target=case.target,
        implementation=request.implementation.name,
        inputs=result.minimized_inputs,
        seed=case.seed,
        failure=result.failure,
        origin="bisect",
    )

    def repro(saved: Case, path: Any) -> dict[str, Any]:
        script = write_repro(
            saved,
            path,
            first_node=result.first_node,
            op=result.op,
            window=result.window,
            signature=result.signature,
        )
        return {"repro": script}

    return Minimized(
        case=minimized,
        tests=result.compile_calls,
        lines=result.lines(),
        details=result.to_json(),
        companions=repro,
        reproduced=result.confirmed,
    )
