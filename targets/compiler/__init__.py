"""Target ``compiler``: graph compilers against an eager float64 reference.

Inputs: ``{"graph": graph, "dtype": "float32"|"float16"|"bfloat16", "dynamic": bool,
"values": [float32 arrays, one per graph input, exactly representable in dtype]}`` -- the graph
is plain JSON (:mod:`fuzzkit.targets.compiler.graphs`), built into a ``torch.fx.GraphModule`` whose
call_function targets are :mod:`fuzzkit.targets.compiler.graphs.ops` functions.

Implementations (each call compiles the case's graph once, with the inputs cast to ``dtype``):

* ``inductor``: ``torch.compile(backend="inductor", dynamic=case["dynamic"], fullgraph=True)``
  (:mod:`.inductor`; C++ on CPU, Triton on GPU);
* ``fusing``: the in-project fusing compiler (:mod:`.fusing`): elementwise chains and last-dim
  reductions fused into generated Triton kernels, everything else eager.  Its miscompile
  mutants live in :mod:`.mutants`.

Case files come from strangers: :func:`.checks.validate` accepts only graphs whose names are
plain identifiers and whose nodes carry exactly the attributes their op declares
(:mod:`.graphs.ops`), and the resource limits of :mod:`.limits` (nodes, inputs, the
largest and total tensor sizes the shape rules give, matmul work) are checked before it.

Outputs: ``{"outputs": [float64 arrays]}`` (the compiled result in ``dtype``, widened).  The
reference (eager float64, :func:`.graphs.build.run_reference`) adds ``"intermediates"``
(every input and node), which the oracle (:mod:`.checks`) uses for per-node error bounds and the
divergence signature ``mismatch:<op>:<dtype>:<error_class>``.

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


def run_compiled(
    compile_fx: Callable[..., Any],
    inputs: Mapping[str, Any],
    device: str,
    reuse: Any = None,
    **options: Any,
) -> dict[str, Any]:
    """Build the case's graph, compile it with ``compile_fx`` and run it on the case's values.

    ``reuse`` (Inductor's :class:`.inductor.CompiledGraphs`) skips building and compiling when a
    case with the same structure (:func:`.inductor.structure_key`: everything but the values)
    was compiled before in this process; the compiled callable then runs on this case's
    values."""
    import numpy as np
    import torch

    from fuzzkit.targets.compiler.graphs import build

    dtype = torch_dtype(inputs["dtype"])
    tensors = [
        torch.as_tensor(np.asarray(v, dtype=np.float32)).to(device=device, dtype=dtype)
        for v in inputs["values"]
    ]
    compiled, key = None, None
    if reuse is not None:
        from fuzzkit.targets.compiler.inductor import structure_key

        key = structure_key(inputs["graph"], inputs["dtype"], device, **options)
        compiled = reuse.get(key)
    if compiled is None:
        gm = build.to_graph_module(inputs["graph"])
        compiled = compile_fx(gm, tensors, **options)
        if reuse is not None:
            reuse.put(key, compiled)
    outs = compiled(*tensors)
    return {"outputs": [o.detach().to(device="cpu", dtype=torch.float64).numpy() for o in outs]}


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

    return run_compiled(fusing.compile_fx, inputs, triton_support.device())


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
        dynamic=bool(inputs.get("dynamic")),
    )


def reference(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Eager float64: every output plus every intermediate (inputs and nodes)."""
    from fuzzkit.targets.compiler.graphs import build

    graph = inputs["graph"]
    values = build.run_reference(graph, inputs["values"])
    return {"outputs": [values[name] for name in graph["outputs"]], "intermediates": values}


def _inductor_unavailable() -> Any:
    try:
        import torch  # noqa: F401
    except ImportError:
        return "needs torch: pip install torch"
    return None


def target() -> Target:
    """The ``compiler`` target (entry point ``fuzzkit.targets.compiler:target``)."""
    from fuzzkit.targets.compiler import checks, thresholds
    from fuzzkit.targets.compiler.limits import LIMITS
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
        limits=LIMITS,
        schema=lazy("fuzzkit.targets.compiler.schema:schema"),  # what describe shows
        sizes=thresholds.SIZES,
        # the driver every implementation runs through (build, compile, run, widen)
        sources=("fuzzkit.targets.compiler.__init__",),
    )
