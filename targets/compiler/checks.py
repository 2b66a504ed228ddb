"""Oracle and input validation for ``compiler``.

Per output (in topological order of the nodes that make them), the compiled result in the case
dtype is compared with the eager float64 reference under the forward-error bound of that node
(:func:`fuzzkit.targets.compiler.graphs.bound.error_bounds`: each op's own rounding plus its inputs' errors
propagated through ``|f'|``; sound for eager, which rounds after every op, and for compilers that
keep float32 intermediates).  Error classes, checked in this order:

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
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from fuzzkit.failure import Failure
from fuzzkit.oracles.close import smallest_normal, ulp

INPUT_KEYS = ("graph", "dtype", "values")
#: keys a case may carry besides INPUT_KEYS: Dynamo's dynamic shapes, the strategy's special flag
OPTIONAL_KEYS = ("dynamic", "special")
DTYPES = ("float32", "float16", "bfloat16")


def validate(inputs: Any) -> Optional[str]:
    """One line saying what is wrong with a case's inputs, or None; never raises (inputs come
    from files: anything may be of the wrong type).

    The graph must pass :func:`fuzzkit.targets.compiler.graphs.build.validate_graph`: names are plain
    identifiers, every node record has exactly the keys of the data model and exactly the
    attributes its op declares (:mod:`fuzzkit.targets.compiler.graphs.ops`), arguments are earlier names,
    shapes follow the ops' shape rules; then one floating value array per input, of its shape.
    """
    try:
        return _problem(inputs)
    except Exception as exc:  # noqa: BLE001 - a last resort: garbage is refused, never raised
        return f"malformed compiler inputs: {type(exc).__name__}: {ascii(str(exc))[1:61]}"


def _problem(inputs: Any) -> Optional[str]:
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
    for key in OPTIONAL_KEYS:
        if key in inputs and not isinstance(inputs[key], (bool, np.bool_)):
            return f"{key} must be a bool, got {shown(inputs[key])}"
    graph = inputs["graph"]
    problem = build.validate_graph(graph)
    if problem is not None:
        return problem
    values = inputs["values"]
    if not isinstance(values, (list, tuple)):
        return "values must be a list of arrays, one per graph input"
    if len(values) != len(graph["inputs"]):
        return f"graph has {len(graph['inputs'])} inputs but {len(values)} value arrays were given"
    for spec, value in zip(graph["inputs"], values):
        if not isinstance(value, (np.ndarray, list, tuple)):
            return f"input {spec['name']}: values must be an array, got {type(value).__name__}"
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError, OverflowError):
            return f"input {spec['name']}: values are not a rectangular array of numbers"
        if list(arr.shape) != [int(s) for s in spec["shape"]]:
            return (f"input {spec['name']}: shape {list(arr.shape)} does not match the graph's "
                    f"{list(spec['shape'])}")
        if arr.dtype.kind != "f":
            return f"input {spec['name']}: values must be floating, got {arr.dtype}"
    return None


def _ops_by_name(graph: Mapping[str, Any]) -> dict[str, str]:
    ops = {i["name"]: "input" for i in graph["inputs"]}
    ops.update({n["name"]: n["op"] for n in graph["nodes"]})
    return ops


def _topo_order(graph: Mapping[str, Any]) -> dict[str, int]:
    order = {i["name"]: -1 for i in graph["inputs"]}
    order.update({n["name"]: k for k, n in enumerate(graph["nodes"])})
    return order


def compare(name: str, expected: np.ndarray, actual: Any, bound: Any, dtype: str
            ) -> Optional[dict[str, Any]]:
    """None when ``actual`` matches ``expected`` within ``bound``; else the error class and the
    worst element."""
    e = np.asarray(expected, dtype=np.float64)
    a = np.asarray(actual)
    if a.shape != e.shape:
        return {"error_class": "shape", "expected_shape": list(e.shape),
                "actual_shape": list(a.shape)}
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
    floor = 4.0 * smallest_normal(dtype)
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
                      "ulps": float(error[index] / ulp(e[index], dtype))}}


def divergence(inputs: Mapping[str, Any], expected: Mapping[str, Any],
               actual: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The first diverging output (topological order of its node): ``{"node", "op", "dtype",
    "error_class", "worst", "output_index", ...}``, or None when every output is within bounds.
    ``expected`` must carry ``intermediates`` (the float64 reference)."""
    from fuzzkit.targets.compiler.graphs import bound as bounds

    graph = inputs["graph"]
    dtype = str(inputs["dtype"])
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
    for k in sorted(range(len(names)), key=lambda i: (order.get(names[i], -1), i)):
        name = names[k]
        result = compare(name, expected["outputs"][k], outs[k],
                         error_bounds.get(name, 0.0), dtype)
        if result is not None:
            return {"node": name, "op": ops.get(name, "input"), "dtype": dtype,
                    "output_index": k, **result}
    return None


def signature(div: Mapping[str, Any]) -> str:
    return f"mismatch:{div['op']}:{div['dtype']}:{div['error_class']}"


def oracle(inputs: Mapping[str, Any], expected: Mapping[str, Any], actual: Mapping[str, Any]
           ) -> Optional[Failure]:
    div = divergence(inputs, expected, actual)
    if div is None:
        return None
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
    message = f"output {div['node']} ({div['op']}, {div['dtype']}): {text}"
    return Failure("mismatch", message, signature(div), div)


__all__ = ["compare", "divergence", "oracle", "signature", "validate"]
