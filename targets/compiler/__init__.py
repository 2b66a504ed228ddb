"""Target ``compiler``: graph compilers against an eager float64 reference.

Inputs: ``{"graph": graph, "dtype": "float32"|"float16"|"bfloat16", "dynamic": false | true |
"marked", "values": [float32 arrays, one per graph input, exactly representable in dtype],
"variants": [more value lists, other input shapes] (optional), "layouts": [one of
:data:`LAYOUTS` per input] (optional)}`` -- the graph is plain JSON
(:mod:`fuzzkit.targets.compiler.graphs`), built into a ``torch.fx.GraphModule`` whose
call_function targets are :mod:`fuzzkit.targets.compiler.graphs.ops` functions.

Dynamic shapes (issue 23): a case's ``variants`` are value sets whose input shapes differ from
the case's but satisfy the same graph with the same attributes (:func:`.checks.reshaped`); the
graph is compiled *once* and the same compiled callable runs the main values and then every
variant (:func:`run_compiled`), so Dynamo's guards, recompiles and 0/1 specialisation are
exercised, and the oracle judges every run.  ``layouts`` lay each input out in memory
(:func:`laid_out`: transposed, strided, offset, channels-last) with the same values.

Implementations (each call compiles the case's graph once, with the inputs cast to ``dtype``):

* ``inductor``: ``torch.compile(backend="inductor", dynamic=..., fullgraph=True)`` with
  ``dynamic`` False, True or (``"marked"``) None after ``maybe_mark_dynamic`` on the dims that
  vary across the variants (:mod:`.inductor`; C++ on CPU, Triton on GPU);
* ``fusing``: the in-project fusing compiler (:mod:`.fusing`): elementwise chains and last-dim
  reductions fused into generated Triton kernels, everything else eager.  Its miscompile
  mutants live in :mod:`.mutants`.

Case files come from strangers: :func:`.checks.validate` accepts only graphs whose names are
plain identifiers and whose nodes carry exactly the attributes their op declares
(:mod:`.graphs.ops`), and the resource limits of :mod:`.limits` (nodes, inputs, the
largest and total tensor sizes the shape rules give, matmul work) are checked before it.

Outputs: ``{"outputs": [float64 arrays]}`` (the compiled result in ``dtype``, widened), plus
``meta`` (each output's dtype and shape before widening), ``again`` (a second run on fresh
copies: determinism), ``variants`` (the same per variant), ``compiles`` (Dynamo's compiles for
the case, informational) and, when a run raised, ``error`` (the exception type and whether
eager runs the case: the error-class oracle; the driver catches it so the engine stays
target-agnostic).  The reference (eager float64, :func:`.graphs.build.run_reference`) adds
``"intermediates"`` (every input and node) and ``meta`` (eager in the case dtype on meta
tensors), per variant too, which the oracle (:mod:`.checks`) uses for per-node error bounds,
the divergence signature ``mismatch:<op>:<dtype>:<error_class>`` and the ``error-class:``,
``dtype:`` and ``nondeterministic:`` classes.

:func:`compile_calls` counts compiles in this process (bisection reports it).

``fuzzkit bisect`` runs this target's ``bisect`` hook (:func:`.bisect.bisection`): the graph
machinery (:mod:`.graphs`), the bisection and its repro scripts (:mod:`.repro`) are the
compiler's own; the engine knows nothing of graphs.

Reach (:mod:`.thresholds`): each implementation declares where its code changes path -- the
fusing compiler's ``MAX_BLOCK`` tiles as launched (interpreter / GPU), Inductor's C++ vector
widths, reduction cut-offs and realization threshold, Dynamo's 0/1 specialisation -- and the
strategy (:mod:`.strategies`) aims its sizes at them; ``Target.sizes`` measures those sizes in a
case.  Coverage measures the fusing package (``fuzzkit.targets.compiler.fusing``), Inductor's
wrapper and the driver here.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

from fuzzkit import triton_support
from fuzzkit.target import Implementation, Target, lazy

_COUNT = [0]
_LOCK = threading.Lock()

DTYPES = ("float32", "float16", "bfloat16")


def count_compile() -> None:
    with _LOCK:
        _COUNT[0] += 1


def compile_calls() -> int:
    """How many graph compiles (any implementation) this process has made."""
    return _COUNT[0]


def torch_dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


#: Memory layouts a case may give a graph input (``"layouts"``, one per input): the values are
#: the same, only the strides and the storage offset differ, so the reference ignores them.
LAYOUTS = ("contiguous", "transposed", "strided", "offset", "channels_last")
#: The least rank each layout needs (``transposed`` swaps the last two dims, ``strided`` steps
#: along the last dim, ``channels_last`` is a rank-4 memory format).
LAYOUT_RANK = {"contiguous": 0, "transposed": 2, "strided": 1, "offset": 0, "channels_last": 4}
#: Dynamo modes of ``"dynamic"``: static, ``dynamic=True``, or the varying dims marked.
DYNAMIC_MODES = (False, True, "marked")


def laid_out(tensor: Any, layout: str) -> Any:
    """``tensor``'s values in the memory layout ``layout`` (:data:`LAYOUTS`).  Memory a layout
    skips (the gaps of ``strided``, the element before an ``offset`` view) holds NaN, so a kernel
    that reads an element it should not shows a NaN where the reference has a number."""
    import torch

    if layout == "contiguous":
        return tensor.contiguous()
    if layout == "transposed":
        return tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "channels_last":
        return tensor.contiguous(memory_format=torch.channels_last)
    if layout == "strided":
        shape = list(tensor.shape)
        buffer = torch.full(shape[:-1] + [2 * shape[-1]], float("nan"), dtype=tensor.dtype,
                            device=tensor.device)
        view = buffer[..., ::2]
        view.copy_(tensor)
        return view
    if layout == "offset":
        buffer = torch.full((tensor.numel() + 1,), float("nan"), dtype=tensor.dtype,
                            device=tensor.device)
        view = buffer[1:].view(tensor.shape)
        view.copy_(tensor)
        return view
    raise ValueError(f"unknown layout {layout!r}")


def dynamic_mode(inputs: Mapping[str, Any]) -> bool | str:
    """The case's Dynamo mode (:data:`DYNAMIC_MODES`); absent or false: static."""
    value = inputs.get("dynamic", False)
    return "marked" if value == "marked" else bool(value) if isinstance(value, bool) else False


def run_values(inputs: Mapping[str, Any]) -> list[list[Any]]:
    """The input value sets of a case: its ``values``, then each of its ``variants``."""
    return [list(inputs["values"])] + [list(v) for v in inputs.get("variants") or ()]


def run_graphs(inputs: Mapping[str, Any]) -> list[dict]:
    """The graph of every run (:func:`run_values`): the case's, then the case's graph with each
    variant's input shapes (:func:`.checks.reshaped`)."""
    from fuzzkit.targets.compiler.checks import reshaped

    graph = inputs["graph"]
    runs = run_values(inputs)
    return [graph] + [reshaped(graph, [list(np_shape(v)) for v in values])
                      for values in runs[1:]]


def np_shape(value: Any) -> tuple[int, ...]:
    import numpy as np

    return tuple(int(d) for d in np.shape(value))


def varying_dims(runs: list[list[Any]]) -> list[list[int]]:
    """Per input, the dims whose size differs between the runs (what ``"marked"`` marks)."""
    shapes = [[np_shape(v) for v in values] for values in runs]
    out = []
    for i, first in enumerate(shapes[0]):
        out.append([d for d in range(len(first)) if len({s[i][d] for s in shapes}) > 1])
    return out


def dynamo_compiles() -> int:
    """Graphs Dynamo has compiled in this process (``counters["stats"]["unique_graphs"]``; 0
    before torch is imported)."""
    import sys

    utils = sys.modules.get("torch._dynamo.utils")
    return int(utils.counters["stats"]["unique_graphs"]) if utils is not None else 0


def innermost_error(exc: BaseException) -> BaseException:
    """The exception a compiler's wrapper hides: Dynamo's ``BackendCompilerFailed`` and
    Inductor's ``InductorError`` carry what the backend raised as ``inner_exception``."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "inner_exception", None)
        if not isinstance(inner, BaseException):
            break
        exc = inner
    return exc


def _reraise_timeout(exc: BaseException) -> None:
    """A case's time limit (:class:`fuzzkit.runner.CaseTimeout`), however wrapped, and running
    out of memory are the runner's verdicts (a timeout, an ``oom``), never an error class of
    the compiler."""
    from fuzzkit.runner import CaseTimeout

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, CaseTimeout):
            raise current
        if isinstance(current, MemoryError) or type(current).__name__ == "OutOfMemoryError":
            raise exc
        seen.add(id(current))
        inner = getattr(current, "inner_exception", None)
        current = (inner if isinstance(inner, BaseException)
                   else current.__cause__ or current.__context__)


def _error_marker(exc: BaseException, graph: dict, values: list[Any], dtype: str, run: int
                  ) -> dict[str, Any]:
    """What a run that raised reports: the exception's type (the innermost one) and whether
    eager, in the case dtype, runs the same graph and values (then it is a finding:
    :func:`.checks.oracle`; when eager raises too, the case is outside the ops' domain)."""
    from fuzzkit.targets.compiler.graphs import build

    inner = innermost_error(exc)
    try:
        build.run_eager(graph, values, dtype)
        eager = "ok"
    except Exception as eager_exc:  # noqa: BLE001 - eager's verdict is data here
        _reraise_timeout(eager_exc)
        eager = f"raises {type(eager_exc).__name__}"
    message = f"{type(inner).__name__}: {inner}".splitlines()[0][:300] if str(inner) else \
        type(inner).__name__
    return {"run": run, "type": type(inner).__name__, "wrapper": type(exc).__name__,
            "message": message, "eager": eager}


def _widened(outs: Any) -> tuple[list[Any], list[list[Any]]]:
    """Outputs as float64 NumPy arrays, and each output's torch dtype and shape before
    widening (the dtype/shape oracle compares them with eager's)."""
    import torch

    arrays, meta = [], []
    for o in outs:
        meta.append([str(o.dtype).removeprefix("torch."), [int(d) for d in o.shape]])
        arrays.append(o.detach().to(device="cpu", dtype=torch.float64).numpy())
    return arrays, meta


def run_compiled(
    compile_fx: Callable[..., Any],
    inputs: Mapping[str, Any],
    device: str,
    reuse: Any = None,
    *,
    per_shape: bool = False,
    **options: Any,
) -> dict[str, Any]:
    """Build the case's graph, compile it once with ``compile_fx`` and run it on the case's
    values, then on each of its ``variants`` (other input shapes of the same graph: dynamic
    shapes), each input in its ``layouts`` memory layout; every run twice, on fresh copies of
    its inputs (``again``: the determinism oracle compares them bit for bit).

    Returns ``outputs`` (the main run, float64), ``meta`` (each output's dtype and shape before
    widening), ``again``, ``variants`` (per variant the same three), and ``compiles`` (graphs
    compiled for this case: Dynamo's recompiles included; informational).  A run that raises
    ends the case with ``error`` (:func:`_error_marker`) instead of raising: whether it is a
    finding depends on eager, which the oracle reads there.

    ``per_shape``: the compiler specialises on its example inputs' shapes (the fusing
    compiler): each new input-shape set is compiled anew.  ``reuse`` (Inductor's
    :class:`.inductor.CompiledGraphs`) skips building and compiling when a case with the same
    structure (:func:`.inductor.structure_key`: everything but the values -- the dynamic mode,
    the layouts and the variants' shapes included) was compiled before in this process."""
    import numpy as np
    import torch

    from fuzzkit.targets.compiler.graphs import build

    dtype = torch_dtype(inputs["dtype"])
    graph = inputs["graph"]
    runs = run_values(inputs)
    layouts = list(inputs.get("layouts") or ["contiguous"] * len(graph["inputs"]))

    def tensors(values: list[Any]) -> list[Any]:
        return [laid_out(torch.as_tensor(np.asarray(v, dtype=np.float32)).to(device=device,
                                                                              dtype=dtype), lay)
                for v, lay in zip(values, layouts)]

    calls_before, graphs_before = compile_calls(), dynamo_compiles()
    compiled, key, gm = None, None, None
    shapes = [tuple(np_shape(v) for v in values) for values in runs]
    if reuse is not None:
        from fuzzkit.targets.compiler.inductor import structure_key

        key = structure_key(graph, inputs["dtype"], device, **options,
                            layouts=tuple(layouts), run_shapes=tuple(shapes[1:]))
        compiled = reuse.get(key)
    result: dict[str, Any] = {"outputs": [], "meta": [], "again": [], "variants": []}
    by_shape: dict[Any, Any] = {}
    for k, values in enumerate(runs):
        xs = tensors(values)
        try:
            if compiled is None or (per_shape and shapes[k] not in by_shape):
                if gm is None:
                    gm = build.to_graph_module(graph)
                if k == 0 and options.get("dynamic") == "marked":
                    for x, dims in zip(xs, varying_dims(runs)):
                        for d in dims:
                            # maybe_: a marked dim the graph forces to a constant (broadcast
                            # against a fixed size) is specialised instead of refused
                            torch._dynamo.maybe_mark_dynamic(x, d)
                compiled = compile_fx(gm, xs, **options)
                by_shape[shapes[k]] = compiled
                if reuse is not None and k == 0:
                    reuse.put(key, compiled)
                xs = tensors(values)  # the compile ran on xs (an in-place op may change them)
            run_fn = by_shape.get(shapes[k], compiled) if per_shape else compiled
            outs, meta = _widened(run_fn(*xs))
            again, _ = _widened(run_fn(*tensors(values)))
        except Exception as exc:  # noqa: BLE001 - judged by the oracle against eager
            _reraise_timeout(exc)
            graphs = run_graphs(inputs)
            result["error"] = _error_marker(exc, graphs[k], values, str(inputs["dtype"]), k)
            break
        record = {"outputs": outs, "meta": meta, "again": again}
        if k == 0:
            result.update(record)
        else:
            result["variants"].append(record)
    result["compiles"] = max(compile_calls() - calls_before, dynamo_compiles() - graphs_before)
    return result


#: The built-in compilers: implementation name -> the module whose ``compile_fx(gm,
#: example_inputs, **options)`` it runs.  A fixed allow-list: a name read from a file (a repro
#: script's case, ``--impl``) selects among these modules, never names one.
COMPILERS: dict[str, str] = {
    "fusing": "fuzzkit.targets.compiler.fusing",
    "inductor": "fuzzkit.targets.compiler.inductor",
}


def compile_function(name: str) -> Callable[..., Any] | None:
    """``compile_fx`` of the built-in compiler ``name`` (:data:`COMPILERS`), None for any other
    name (an implementation registered from outside runs through its own callable)."""
    import importlib

    module = COMPILERS.get(name) if isinstance(name, str) else None
    return None if module is None else importlib.import_module(module).compile_fx


def _fusing_run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    from fuzzkit.targets.compiler import fusing

    # the fusing compiler specialises on its example inputs' shapes: one compile per shape set
    return run_compiled(fusing.compile_fx, inputs, triton_support.device(), per_shape=True)


def _inductor_run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    from fuzzkit.targets.compiler import inductor

    device = "cuda" if torch.cuda.is_available() else "cpu"
    inductor.configure()  # before the first structure key: it holds Inductor's config hash
    return run_compiled(
        inductor.compile_fx,
        inputs,
        device,
        reuse=inductor.COMPILED,
        dynamic=dynamic_mode(inputs),
    )


def _each_run(inputs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Each run of an unvalidated case as ``{"graph": ...}`` for the resource limits: the case,
    then each variant's graph (its input shapes through the ops' shape rules; the variants are
    counted before anything is computed from them)."""
    from fuzzkit.limits import length
    from fuzzkit.targets.compiler.checks import MAX_VARIANTS, reshaped

    variants = inputs.get("variants") or []
    if not isinstance(variants, (list, tuple)) or length(variants) > MAX_VARIANTS:
        raise ValueError(f"variants must be a list of at most {MAX_VARIANTS} value lists")
    from fuzzkit.targets.compiler.graphs.build import graph_shapes

    graph = inputs.get("graph")
    graph_shapes(graph)  # a malformed graph: GraphError (one line) before any variant is read
    runs: list[Mapping[str, Any]] = [inputs]
    for values in variants:
        if not isinstance(values, (list, tuple)):
            raise TypeError("a variant must be a list of arrays")
        runs.append({"graph": reshaped(graph, [list(np_shape(v)) for v in values])})
    return runs


def run_limits() -> tuple[Any, ...]:
    """:data:`.limits.LIMITS` with the tensor sizes counted over every run of a case: the
    largest tensor of any run, and the total elements and matmul work of all runs together
    (every variant is one more compiled run and one more float64 reference)."""
    import dataclasses

    from fuzzkit.targets.compiler import limits

    over = {
        "elements": lambda inputs: max(limits.largest_tensor(r) for r in _each_run(inputs)),
        "total_elements": lambda inputs: sum(limits.total_elements(r)
                                             for r in _each_run(inputs)),
        "matmul_work": lambda inputs: sum(limits.matmul_work(r) for r in _each_run(inputs)),
    }
    return tuple(dataclasses.replace(limit, measure=over[limit.name]) if limit.name in over
                 else limit for limit in limits.LIMITS)


def run_builtin(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Run ``inputs`` through the built-in implementation ``name`` (:data:`COMPILERS`) exactly
    as a campaign does (repro scripts call this); any other name raises ValueError."""
    runs = {"inductor": _inductor_run, "fusing": _fusing_run}
    if not isinstance(name, str) or name not in runs:
        raise ValueError(f"not a built-in compiler: {ascii(name)}")
    return runs[name](inputs)


def reference(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Eager float64: every output plus every intermediate (inputs and nodes); ``meta``: each
    output's dtype and shape from eager in the case dtype on meta tensors (no data: what the
    dtype/shape oracle expects; None when an op cannot run on meta tensors); ``variants``: the
    same for each variant's values and shapes."""
    from fuzzkit.targets.compiler.graphs import build

    out: dict[str, Any] = {}
    for k, (graph, values) in enumerate(zip(run_graphs(inputs), run_values(inputs))):
        ref = build.run_reference(graph, values)
        record = {"outputs": [ref[name] for name in graph["outputs"]], "intermediates": ref,
                  "meta": eager_meta(graph, str(inputs["dtype"]))}
        if k == 0:
            out.update(record, variants=[])
        else:
            out["variants"].append(record)
    if not out["variants"]:
        del out["variants"]
    return out


def eager_meta(graph: dict, dtype: str) -> list[list[Any]] | None:
    """``[dtype, shape]`` of each output of ``graph`` run eagerly in ``dtype`` on meta tensors
    (no data, no compute), or None when some op cannot run on meta tensors."""
    import torch

    from fuzzkit.targets.compiler.graphs import build

    try:
        gm = build.eager_module(graph)
        xs = [torch.empty([int(d) for d in i["shape"]], dtype=torch_dtype(dtype), device="meta")
              for i in graph["inputs"]]
        with torch.no_grad():
            outs = gm(*xs)
    except Exception:  # noqa: BLE001 - data-dependent ops (nonzero, .item()): no meta answer
        return None
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    return [[str(o.dtype).removeprefix("torch."), [int(d) for d in o.shape]] for o in outs]


def _inductor_unavailable() -> Any:
    try:
        import torch  # noqa: F401
    except ImportError:
        return "needs torch: pip install torch"
    return None


def target() -> Target:
    """The ``compiler`` target (entry point ``fuzzkit.targets.compiler:target``)."""
    from fuzzkit.targets.compiler import checks, thresholds
    from fuzzkit.targets.compiler.mutants import MUTANTS

    return Target(
        name="compiler",
        description="random fx graphs compiled by torch.compile (Inductor) and an in-project "
        "fusing Triton compiler, in float32/float16/bfloat16, vs eager float64",
        strategy=lazy("fuzzkit.targets.compiler.strategies:inputs"),
        reference=reference,
        implementations={
            "fusing": Implementation(
                "fusing",
                _fusing_run,
                backend="triton",
                description="in-project fusing compiler: elementwise chains + last-dim "
                "reductions as generated Triton kernels, the rest eager",
                unavailable=triton_support.unavailable_with(
                    "fuzzkit.targets.compiler.fusing.runtime"
                ),
                thresholds=thresholds.fusing_thresholds,
                sources=("fuzzkit.targets.compiler.fusing",),
            ),
            "inductor": Implementation(
                "inductor",
                _inductor_run,
                backend="torch",
                description="torch.compile(backend='inductor', fullgraph=True), static or "
                "dynamic shapes (C++ on CPU, Triton on GPU)",
                unavailable=_inductor_unavailable,
                thresholds=thresholds.inductor_thresholds,
                sources=("fuzzkit.targets.compiler.inductor",),
            ),
        },
        oracle=checks.oracle,
        mutants=MUTANTS,
        reducible=(),
        # `fuzzkit bisect`: the first diverging node and its smallest failing window, plus a
        # standalone repro script (:mod:`.bisect`, :mod:`.repro`)
        bisect=lazy("fuzzkit.targets.compiler.bisect:bisection"),
        validate=checks.validate,
        limits=run_limits(),  # .limits.LIMITS, every variant counted
        schema=lazy("fuzzkit.targets.compiler.schema:schema"),  # what describe shows
        sizes=thresholds.SIZES,
        # the driver every implementation runs through (build, compile, run, widen)
        sources=("fuzzkit.targets.compiler.__init__",),
    )
