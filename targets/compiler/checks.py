"""Oracle and input validation for ``compiler``.

Per output (in topological order of the nodes that make them), the compiled result in the case
dtype is compared with the eager float64 reference under the forward-error bound of that node
(:func:`fuzzkit.targets.compiler.graphs.bound.error_bounds`: each op's own rounding plus its
inputs' errors propagated through ``|f'|``; sound for eager, which rounds after every op, and
for compilers that keep float32 intermediates).  Error classes, checked in this order:

* ``shape`` -- the output has the wrong shape;
* ``nan`` / ``inf`` -- position-wise: where the reference is NaN (or +-Inf) the result must be
  the same non-finite value; a NaN (Inf) where the reference is finite is class ``nan``
  (``inf``); a finite value where the reference is NaN is ``nan``, where it is Inf ``inf``;
  elements whose bound is NaN (an overflow upstream: special-value cases) are not judged, nor
  are finite-reference elements whose bound is infinite;
* ``value`` -- a finite element off by more than ``bound + floor`` (the derived bound as is, no
  fudge factor; ``floor`` = 4 smallest normals of the dtype, for flushed subnormals).

The failure's signature is the *divergence signature* ``mismatch:<op>:<dtype>:<error_class>``
of the first diverging output (the op that made it; ``input`` for a graph input passed
through): it contains no sizes or values, so it stays fixed while a case shrinks and while
bisection cuts the graph down, and it deduplicates findings by (op, dtype, class).

A case runs once per value set -- its ``values``, then each of its ``variants`` (other input
shapes through the same compile: dynamic shapes); every run is judged, and a failure's
``details["run"]`` and message say which variant diverged.  Classes the float bound cannot see
(issue 23), after it:

* ``error-class:<Type>`` -- the compiled run raised where eager in the case dtype runs the same
  graph and values (:func:`error_failure`; where eager raises too, not a finding);
* ``dtype:<op>`` -- an output's dtype differs from eager's in the case dtype
  (:func:`dtype_failure`);
* ``nondeterministic:<op>`` -- two runs of one compiled callable on the same inputs differ in a
  bit (:func:`determinism_failure`).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from fuzzkit.failure import Failure
from fuzzkit.oracles.close import smallest_normal, ulp

INPUT_KEYS = ("graph", "dtype", "values")
#: keys a case may carry besides INPUT_KEYS: Dynamo's dynamic mode, the strategy's special flag,
#: other input shapes run through the same compile, and the inputs' memory layouts
OPTIONAL_KEYS = ("dynamic", "special", "variants", "layouts")
DTYPES = ("float32", "float16", "bfloat16")
#: Most variants (extra input-shape sets) a case may carry: each is one more run of the compiled
#: graph and one more float64 reference (they count towards the element limits too).
MAX_VARIANTS = 4


def reshaped(graph: Mapping[str, Any], shapes: Any) -> dict:
    """``graph`` with its inputs of ``shapes`` (one per input) and every node's shape from its
    op's shape rule -- the same ops and attributes on other input shapes (a dynamic-shape
    variant); raises :class:`~.graphs.build.GraphError` (one line) where a shape rule refuses
    them or the result is not a valid graph."""
    import copy

    from fuzzkit.targets.compiler.graphs import build
    from fuzzkit.targets.compiler.graphs.ops import OPS, SpecError

    if not isinstance(shapes, (list, tuple)) or len(shapes) != len(graph["inputs"]):
        raise build.GraphError(f"a variant needs {len(graph['inputs'])} input shapes")
    out = copy.deepcopy(dict(graph))
    known: dict[str, list[int]] = {}
    for inp, shape in zip(out["inputs"], shapes):
        if len(shape) != len(inp["shape"]):
            raise build.GraphError(f"input {inp['name']}: a variant keeps the rank "
                                   f"{len(inp['shape'])}, got shape {list(shape)}")
        inp["shape"] = [int(d) for d in shape]
        known[inp["name"]] = inp["shape"]
    for node in out["nodes"]:
        spec = OPS.get(node.get("op")) if isinstance(node, Mapping) else None
        if spec is None or not all(isinstance(a, str) and a in known for a in node["args"]):
            break  # graph_shapes below names what is wrong
        try:
            node["shape"] = list(spec.out_shape([known[a] for a in node["args"]], node["attrs"]))
        except SpecError as exc:
            raise build.GraphError(f"node {node['name']!r}: {exc}") from None
        known[node["name"]] = node["shape"]
    build.graph_shapes(out)
    return out


def validate(inputs: Any) -> str | None:
    """One line saying what is wrong with a case's inputs, or None; never raises (inputs come
    from files: anything may be of the wrong type).

    The graph must pass :func:`fuzzkit.targets.compiler.graphs.build.validate_graph`: names
    are plain identifiers, every node record has exactly the keys of the data model and exactly
    the attributes its op declares (:mod:`fuzzkit.targets.compiler.graphs.ops`), arguments are
    earlier names, shapes follow the ops' shape rules; then one floating value array per input,
    of its shape; ``dynamic`` is a bool or ``"marked"``; at most :data:`MAX_VARIANTS`
    ``variants`` whose shapes the same graph accepts (:func:`reshaped`); one known layout per
    input (``layouts``, :data:`fuzzkit.targets.compiler.LAYOUTS`) of a rank it applies to.
    """
    try:
        return _problem(inputs)
    except Exception as exc:  # noqa: BLE001 - a last resort: garbage is refused, never raised
        return f"malformed compiler inputs: {type(exc).__name__}: {ascii(str(exc))[1:61]}"


def _problem(inputs: Any) -> str | None:
    from fuzzkit.targets.compiler.graphs import build
    from fuzzkit.targets.compiler.graphs.ops import shown

    if not isinstance(inputs, Mapping):
        return "compiler inputs must be an object with keys graph, dtype, values"
    for key in INPUT_KEYS:
        if key not in inputs:
            return f"compiler inputs need key {key!r}"
    unknown = [k for k in inputs if k not in INPUT_KEYS + OPTIONAL_KEYS]
    if unknown:
        return (f"compiler inputs have unknown key {shown(unknown[0])} (allowed: "
                f"{', '.join(INPUT_KEYS + OPTIONAL_KEYS)})")
    if not isinstance(inputs["dtype"], str) or inputs["dtype"] not in DTYPES:
        return f"dtype must be one of {DTYPES}, got {shown(inputs['dtype'])}"
    if "special" in inputs and not isinstance(inputs["special"], (bool, np.bool_)):
        return f"special must be a bool, got {shown(inputs['special'])}"
    dynamic = inputs.get("dynamic", False)
    if not (isinstance(dynamic, (bool, np.bool_)) or (isinstance(dynamic, str)
                                                      and dynamic == "marked")):
        return f"dynamic must be true, false or \"marked\", got {shown(dynamic)}"
    graph = inputs["graph"]
    # with the case dtype: an input's "dtype" key must be the dtype the case runs in (a graph
    # declared for float16 inputs is refused in a float32 case, not silently re-typed)
    problem = build.validate_graph(graph, inputs["dtype"])
    if problem is not None:
        return problem
    problem = _values_problem(graph, inputs["values"], "values")
    if problem is not None:
        return problem
    return _variants_problem(graph, inputs.get("variants")) or _layouts_problem(
        graph, inputs.get("layouts"))


def _values_problem(graph: Mapping[str, Any], values: Any, what: str) -> str | None:
    """The value arrays of one run: one floating array per input, of the input's shape."""
    from fuzzkit.targets.compiler.graphs.ops import shown

    if not isinstance(values, (list, tuple)):
        return f"{what} must be a list of arrays, one per graph input"
    if len(values) != len(graph["inputs"]):
        return (f"graph has {len(graph['inputs'])} inputs but {len(values)} value arrays were "
                f"given{'' if what == 'values' else ' in ' + what}")
    for spec, value in zip(graph["inputs"], values):
        where = f"input {spec['name']}" + ("" if what == "values" else f" of {what}")
        if not isinstance(value, (np.ndarray, list, tuple)):
            return f"{where}: values must be an array, got {type(value).__name__}"
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError, OverflowError):
            return f"{where}: values are not a rectangular array of numbers"
        if list(arr.shape) != [int(s) for s in spec["shape"]]:
            return (f"{where}: shape {shown(list(arr.shape))} does not match the graph's "
                    f"{list(spec['shape'])}")
        if arr.dtype.kind != "f":
            return f"{where}: values must be floating, got {arr.dtype}"
    return None


def _variants_problem(graph: Mapping[str, Any], variants: Any) -> str | None:
    """At most :data:`MAX_VARIANTS` value sets, each one array per input of the input's rank,
    whose shapes the graph's ops accept (:func:`reshaped`) and whose values pass like the main
    values."""
    from fuzzkit.targets.compiler.graphs import build

    if variants is None:
        return None
    if not isinstance(variants, (list, tuple)):
        return "variants must be a list of value lists (other input shapes of the same graph)"
    if len(variants) > MAX_VARIANTS:
        return f"at most {MAX_VARIANTS} variants, got {len(variants)}"
    for k, values in enumerate(variants):
        what = f"variant {k}"
        if not isinstance(values, (list, tuple)) or len(values) != len(graph["inputs"]):
            return f"{what} must be a list of {len(graph['inputs'])} arrays, one per graph input"
        shapes = []
        for spec, value in zip(graph["inputs"], values):
            if not isinstance(value, (np.ndarray, list, tuple)):
                return f"input {spec['name']} of {what}: values must be an array"
            try:
                shapes.append(list(np.shape(value)))
            except (TypeError, ValueError, OverflowError):
                return f"input {spec['name']} of {what}: values are not a rectangular array"
        try:
            other = reshaped(graph, shapes)
        except build.GraphError as exc:
            return f"{what}: {exc}"
        problem = _values_problem(other, values, what)
        if problem is not None:
            return problem
    return None


def _layouts_problem(graph: Mapping[str, Any], layouts: Any) -> str | None:
    """One known layout per input, of a rank it applies to."""
    from fuzzkit.targets.compiler import LAYOUT_RANK, LAYOUTS
    from fuzzkit.targets.compiler.graphs.ops import shown

    if layouts is None:
        return None
    if not isinstance(layouts, (list, tuple)) or len(layouts) != len(graph["inputs"]):
        return f"layouts must be a list of {len(graph['inputs'])} names, one per graph input"
    for spec, layout in zip(graph["inputs"], layouts):
        if not isinstance(layout, str) or layout not in LAYOUTS:
            return f"input {spec['name']}: layout must be one of {LAYOUTS}, got {shown(layout)}"
        if len(spec["shape"]) < LAYOUT_RANK[layout] or (layout == "channels_last"
                                                        and len(spec["shape"]) != 4):
            return (f"input {spec['name']}: layout {layout} needs rank "
                    f"{LAYOUT_RANK[layout]}{'' if layout == 'channels_last' else ' or more'}, "
                    f"got {len(spec['shape'])}")
    return None


def _ops_by_name(graph: Mapping[str, Any]) -> dict[str, str]:
    ops = {i["name"]: "input" for i in graph["inputs"]}
    ops.update({n["name"]: n["op"] for n in graph["nodes"]})
    return ops


def _topo_order(graph: Mapping[str, Any]) -> dict[str, int]:
    order = {i["name"]: -1 for i in graph["inputs"]}
    order.update({n["name"]: k for k, n in enumerate(graph["nodes"])})
    return order


def compare(name: str, expected: np.ndarray, actual: Any, bound: Any, dtype: str,
            value_dtype: str | None = None, actual_dtype: str | None = None
            ) -> dict[str, Any] | None:
    """None when ``actual`` matches ``expected`` within ``bound``; else the error class and the
    worst element.

    ``value_dtype``: the output's own dtype (:func:`.graphs.build.value_dtypes`; default the
    case ``dtype``).  An int or bool output is compared exactly where its bound is 0 (a decided
    comparison, an exact cast) and within the bound elsewhere (an uncertain one) -- no subnormal
    floor.  ``actual_dtype``: the dtype the compiled run reports for this output, if it does;
    one other than ``value_dtype`` is error class ``dtype`` (after ``shape``)."""
    e = np.asarray(expected, dtype=np.float64)
    a = np.asarray(actual)
    if a.shape != e.shape:
        return {"error_class": "shape", "expected_shape": list(e.shape),
                "actual_shape": list(a.shape)}
    value_dtype = value_dtype or dtype
    if actual_dtype is not None and str(actual_dtype).replace("torch.", "") != value_dtype:
        return {"error_class": "dtype", "expected_dtype": value_dtype,
                "actual_dtype": str(actual_dtype).replace("torch.", "")}
    integral = value_dtype in ("int32", "int64", "bool")
    a = a.astype(np.float64)
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), e.shape)
    # NaN bound: an overflow upstream makes every outcome legitimate (special-value cases);
    # infinite bound at a finite reference: a near-zero denominator may round to inf
    judged = ~np.isnan(b) & ~(np.isfinite(e) & np.isinf(b))
    e_nan, a_nan = np.isnan(e), np.isnan(a)
    e_inf, a_inf = np.isinf(e), np.isinf(a)
    # NaN first, then Inf: where each class disagrees position-wise
    bad_nan = ((e_nan & ~a_nan) | (a_nan & ~e_nan)) & judged
    bad_inf = ((e_inf & ~(a == e)) | (a_inf & ~e_inf)) & ~bad_nan & judged
    for cls, bad in (("nan", bad_nan), ("inf", bad_inf)):
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            return {"error_class": cls, "count": int(bad.sum()), "size": int(e.size),
                    "worst": {"index": list(index), "expected": float(e[index]),
                              "actual": float(a[index])}}
    finite = np.isfinite(e) & judged
    if not finite.any():
        return None
    floor = 0.0 if integral else 4.0 * smallest_normal(value_dtype)
    limit = b + floor
    with np.errstate(invalid="ignore"):
        error = np.where(finite, np.abs(a - e), 0.0)
        over = error > limit
    if not over.any():
        return None
    ratio = np.where(over, error / np.maximum(limit, np.finfo(np.float64).tiny), 0.0)
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), e.shape))
    return {"error_class": "value", "count": int(over.sum()), "size": int(e.size),
            "worst": {"index": list(index), "expected": float(e[index]),
                      "actual": float(a[index]), "error": float(error[index]),
                      "bound": float(limit[index]), "ratio": float(ratio[index]),
                      "ulps": float(error[index] / ulp(e[index], value_dtype))
                      if not integral else float(error[index])}}


def divergence(inputs: Mapping[str, Any], expected: Mapping[str, Any],
               actual: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first diverging output (topological order of its node) of the first run that has
    one -- the main values, then each variant: ``{"node", "op", "dtype", "error_class",
    "worst", "output_index", "run", ...}`` (``run`` 0 is the main values, ``k`` variant
    ``k - 1``), or None when every output of every run is within bounds.  ``expected`` must
    carry ``intermediates`` (the float64 reference; per variant under ``variants``)."""
    graphs = _run_graphs(inputs)
    for k, (graph, exp, act) in enumerate(zip(graphs, _runs(expected), _runs(actual))):
        div = _run_divergence(graph, str(inputs["dtype"]), exp, act)
        if div is not None:
            return {**div, "run": k}
    return None


def _run_graphs(inputs: Mapping[str, Any]) -> list[dict]:
    from fuzzkit.targets.compiler import run_graphs

    return run_graphs(inputs) if inputs.get("variants") else [inputs["graph"]]


def _runs(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A result's runs: itself (the main values), then its ``variants`` records."""
    return [result] + list(result.get("variants") or ())


def _run_divergence(graph: Mapping[str, Any], dtype: str, expected: Mapping[str, Any],
                    actual: Mapping[str, Any]) -> dict[str, Any] | None:
    from fuzzkit.targets.compiler.graphs import bound as bounds
    from fuzzkit.targets.compiler.graphs import build

    outs = list(actual["outputs"])
    names = list(graph["outputs"])
    if len(outs) != len(names):
        return {"node": names[0] if names else "", "op": "graph", "dtype": dtype,
                "error_class": "shape", "output_index": -1,
                "message": f"expected {len(names)} outputs, got {len(outs)}"}
    intermediates = expected["intermediates"]
    error_bounds = bounds.error_bounds(graph, intermediates, dtype)
    ops = _ops_by_name(graph)
    order = _topo_order(graph)
    # each output's own dtype (a comparison's bool, an argmax's int64): judged exactly where its
    # bound is 0, with no subnormal floor (:func:`compare`)
    value_dtypes = build.infer_dtypes(graph, dtype)
    for k in sorted(range(len(names)), key=lambda i: (order.get(names[i], -1), i)):
        name = names[k]
        result = compare(name, expected["outputs"][k], outs[k],
                         error_bounds.get(name, 0.0), dtype,
                         value_dtype=value_dtypes.get(name, dtype))
        if result is not None:
            return {"node": name, "op": ops.get(name, "input"), "dtype": dtype,
                    "output_index": k, **result}
    return None


def signature(div: Mapping[str, Any]) -> str:
    return f"mismatch:{div['op']}:{div['dtype']}:{div['error_class']}"


def _run_name(run: int, inputs: Mapping[str, Any]) -> str:
    """How a message names a run: the variant and its input shapes (run 0: nothing)."""
    if not run:
        return ""
    from fuzzkit.targets.compiler import np_shape

    shapes = [list(np_shape(v)) for v in inputs["variants"][run - 1]]
    return f"variant {run - 1} (input shapes {shapes}): "


def error_failure(inputs: Mapping[str, Any], actual: Mapping[str, Any]) -> Failure | None:
    """*Error class*: the compiled run raised (``actual["error"]``, :func:`.run_compiled`)
    where eager in the case dtype ran the same graph and values -> ``error-class:<Type>`` (the
    innermost exception type: short and stable, no message, address or path in it, like the
    runner's crash signatures' first part).  Where eager raises too the case is outside the
    ops' domain: not a finding."""
    error = actual.get("error")
    if not isinstance(error, Mapping) or error.get("eager") != "ok":
        return None
    run = int(error.get("run", 0))
    kind = str(error.get("type", "Exception"))
    message = (f"{_run_name(run, inputs)}the compiled graph raised {error.get('message', kind)}"
               f" where eager ({inputs['dtype']}) runs it")
    # kind "crash" (a failure kind of :mod:`fuzzkit.failure`): the compiler raised; the
    # signature says it is the error-class oracle's (eager ran the same case)
    return Failure("crash", message[:600], f"error-class:{kind}",
                   {**error, "exception": kind, "where": "compiled", "error_class": "error"})


def dtype_failure(inputs: Mapping[str, Any], expected: Mapping[str, Any],
                  actual: Mapping[str, Any]) -> Failure | None:
    """*Dtype of outputs*: each output's torch dtype before widening must be eager's in the
    case dtype (``meta``: eager on meta tensors) -> ``dtype:<op>``; shapes are the ``shape``
    class of :func:`compare`.  Runs without ``meta`` on either side are not judged."""
    for k, (graph, exp, act) in enumerate(zip(_run_graphs(inputs), _runs(expected),
                                              _runs(actual))):
        want, got = exp.get("meta"), act.get("meta")
        if not isinstance(want, list) or not isinstance(got, list) or len(want) != len(got):
            continue
        ops = _ops_by_name(graph)
        for index, (name, w, g) in enumerate(zip(graph["outputs"], want, got)):
            if w[0] != g[0]:
                op = ops.get(name, "input")
                return Failure(
                    "mismatch",
                    f"{_run_name(k, inputs)}output {name} ({op}): dtype {g[0]}, eager in "
                    f"{inputs['dtype']} gives {w[0]}",
                    f"dtype:{op}",
                    {"node": name, "op": op, "run": k, "output_index": index,
                     "dtype": str(inputs["dtype"]), "error_class": "dtype",
                     "expected_dtype": w[0], "actual_dtype": g[0]})
    return None


def _same_bits(a: Any, b: Any) -> bool:
    """Bitwise equal in the case dtype: the float64 widening is exact and one-to-one except
    NaN payloads, so equal values with equal signs (``-0.0`` vs ``0.0`` differ) and NaN
    where the other is NaN."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.array_equal(a, b, equal_nan=True)
                    and np.array_equal(np.signbit(a), np.signbit(b)))


def determinism_failure(inputs: Mapping[str, Any], actual: Mapping[str, Any]
                        ) -> Failure | None:
    """*Determinism*: two runs of the same compiled callable on fresh copies of the same
    inputs (``outputs`` and ``again``) must agree bit for bit -> ``nondeterministic:<op>``
    (the topologically first output that differs)."""
    graphs = _run_graphs(inputs)
    for k, (graph, act) in enumerate(zip(graphs, _runs(actual))):
        again = act.get("again")
        if not isinstance(again, list) or len(again) != len(act["outputs"]):
            continue
        ops, order = _ops_by_name(graph), _topo_order(graph)
        names = list(graph["outputs"])
        for index in sorted(range(len(names)), key=lambda i: (order.get(names[i], -1), i)):
            first, second = act["outputs"][index], again[index]
            if not _same_bits(first, second):
                name, op = names[index], ops.get(names[index], "input")
                a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
                where: list[int] = []
                if a.shape == b.shape:
                    with np.errstate(invalid="ignore"):
                        differ = ~((a == b) & (np.signbit(a) == np.signbit(b))
                                   | (np.isnan(a) & np.isnan(b)))
                    where = [int(i) for i in np.argwhere(differ)[0]]
                return Failure(
                    "mismatch",
                    f"{_run_name(k, inputs)}output {name} ({op}) differs between two runs of "
                    f"the same compiled graph on the same inputs"
                    + (f", first at {where}: {a[tuple(where)]!r} then {b[tuple(where)]!r}"
                       if where else ""),
                    f"nondeterministic:{op}",
                    {"node": name, "op": op, "run": k, "output_index": index, "index": where,
                     "dtype": str(inputs["dtype"]), "error_class": "nondeterministic"})
    return None


def oracle(inputs: Mapping[str, Any], expected: Mapping[str, Any], actual: Mapping[str, Any]
           ) -> Failure | None:
    """Every run of the case, class by class: error class (a compiled run raised), the float
    bound (:func:`divergence`), output dtypes, determinism.  Outputs of an older shape (only
    ``outputs``: repro scripts of earlier versions) are judged by the float bound alone."""
    if "error" in actual:
        # the runs before the one that raised are judged too: their divergence came first
        failure = error_failure(inputs, actual)
        done = int((actual.get("error") or {}).get("run", 0))
        if done == 0:
            return failure
        kept = dict(inputs, variants=list(inputs["variants"])[: done - 1])
        head = {**actual, "variants": list(actual.get("variants") or ())[: done - 1]}
        head.pop("error")
        exp = {**expected, "variants": list(expected.get("variants") or ())[: done - 1]}
        return oracle(kept, exp, head) or failure
    div = divergence(inputs, expected, actual)
    if div is None:
        return dtype_failure(inputs, expected, actual) or determinism_failure(inputs, actual)
    worst = div.get("worst") or {}
    where = f"{div['node']}{worst.get('index', '')}"
    if div["error_class"] == "shape":
        text = div.get("message") or (f"expected shape {div.get('expected_shape')}, got "
                                      f"{div.get('actual_shape')}")
    elif div["error_class"] == "value":
        text = (f"{div['count']} of {div['size']} elements exceed the error bound; worst "
                f"{where}: expected {worst['expected']:.9g}, got {worst['actual']:.9g} "
                f"(error {worst['error']:.3g} = {worst['ratio']:.3g} x bound)")
    else:
        text = (f"{div['count']} of {div['size']} elements are {div['error_class']} "
                f"disagreements; first {where}: expected {worst['expected']!r}, got "
                f"{worst['actual']!r}")
    message = (f"{_run_name(int(div.get('run', 0)), inputs)}output {div['node']} ({div['op']}, "
               f"{div['dtype']}): {text}")
    return Failure("mismatch", message, signature(div), div)


__all__ = ["compare", "determinism_failure", "divergence", "dtype_failure", "error_failure",
           "oracle", "reshaped", "signature", "validate", "MAX_VARIANTS"]
