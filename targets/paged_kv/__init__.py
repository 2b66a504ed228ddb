"""Target ``paged_kv``: paged KV cache managers driven by programs, judged semantically.

Inputs::

    config   {"num_blocks": N, "block_size": b, "sliding_window": w or null,
              "eviction": "lru" | "session" | "penelope" (absent: "lru")}
    program  [{"op": "add", "rid": 0, "tokens": [...], "adapter": null, "salt": null},
              {"op": "allocate", "rid": 0, "n": 4}, {"op": "write", "rid": 0},
              {"op": "publish", "rid": 0}, {"op": "append", "rid": 0, "tokens": [...]},
              {"op": "fork", "src": 0, "dst": 1}, {"op": "preempt"|"trim"|"finish", "rid": 0},
              {"op": "reset"}, ...]
    kv_values (optional) {"q"|"k"|"v": [kind, ...]}: the value kinds (fuzzkit.values) of the
              guarded driver's query / key / value vectors; absent: standard normal

Outputs: ``{"steps": [{"op", "result", "free"}...], "violation": null | {...}}`` — logical
observations only (no block ids), plus the first violation of the semantic KV model or of the
structural invariants (:mod:`.driver`).

Implementations: ``optimized`` (vLLM v1 style, :mod:`.optimized`) and ``guarded`` (the same
manager under KVGuard, every forward pass through the guarded Triton kernels,
:mod:`.kernel_driver`).  Each declares the sizes where its code changes path (``thresholds``:
the block tables' rows and width; the kernels' tiles as launched, the guard's request rows);
:mod:`.sizes` measures them in a case, and :mod:`.strategies` aims at them.  Your own manager plugs in
with ``fuzzkit run paged_kv --impl your_module:YourManager`` (the protocol is
:mod:`.protocol`; see the README for an adapter).
"""

from __future__ import annotations

from typing import Any

from fuzzkit import triton_support
from fuzzkit.target import Implementation, Target
from targets.paged_kv import checks
from targets.paged_kv.driver import run_program
from targets.paged_kv.protocol import Config, supports
from targets.paged_kv.reference import ReferenceManager


def manager_implementation(manager_class: Any, name: str, backend: str = "external",
                           description: str = "") -> Implementation:
    """An implementation that drives ``manager_class`` (the protocol) through each program.

    A case whose eviction policy the class does not declare (``eviction_policies``; "lru" only
    without it) is not run: the output says so and the oracle passes it, so a manager written
    for tail-LRU is fuzzed on the "lru" cases instead of failing every other one.  A class may
    declare ``thresholds`` (:class:`fuzzkit.reach.Threshold` records, or a zero-argument
    callable returning them: its table capacities, growth points, batch limits) for the
    strategy to aim at."""
    if not callable(manager_class):
        from fuzzkit.errors import UsageError

        raise UsageError(f"--impl {name}: expected a KV cache manager class (see "
                         f"targets/paged_kv/protocol.py), got a {type(manager_class).__name__}")

    def run(inputs: dict[str, Any]) -> dict[str, Any]:
        eviction = Config.from_json(inputs["config"]).eviction
        if not supports(manager_class, eviction):
            return {"steps": [], "violation": None,
                    "unsupported": f"{name} does not declare eviction {eviction!r}"}
        return run_program(manager_class, inputs)

    return Implementation(name, run, backend=backend,
                          description=description or (manager_class.__doc__ or "").strip()
                          .split("\n")[0],
                          thresholds=getattr(manager_class, "thresholds", ()))


def _reference(inputs: dict[str, Any]) -> dict[str, Any]:
    return run_program(ReferenceManager, inputs)


def _optimized(inputs: dict[str, Any]) -> dict[str, Any]:
    from targets.paged_kv.optimized import OptimizedManager

    return run_program(OptimizedManager, inputs)


def _guarded(inputs: dict[str, Any]) -> dict[str, Any]:
    from targets.paged_kv.optimized import OptimizedManager

    return run_program(OptimizedManager, inputs, guarded=True)


def _strategy(thresholds: tuple[Any, ...] = ()) -> Any:
    from targets.paged_kv.strategies import inputs

    return inputs(thresholds=thresholds)


def _optimized_thresholds() -> tuple[Any, ...]:
    from targets.paged_kv.optimized import thresholds

    return thresholds()


def _guarded_thresholds() -> tuple[Any, ...]:
    """The manager's (the same optimized manager runs) and the kernel driver's, as launched in
    this mode (interpreter or GPU)."""
    from targets.paged_kv.kernel_driver import thresholds

    return _optimized_thresholds() + thresholds()


MANAGER_SOURCES = ("targets.paged_kv.optimized", "targets.paged_kv.hashing")


def target() -> Target:
    """The ``paged_kv`` target (entry point ``targets.paged_kv:target``)."""
    from targets.paged_kv.limits import LIMITS
    from targets.paged_kv.mutants import DEVICE_MUTANTS, MUTANTS
    from targets.paged_kv.sizes import SIZES

    return Target(
        name="paged_kv",
        description="paged KV cache managers: prefix caching, eviction, fork/CoW, windows; "
                    "semantic KV oracle + structural invariants",
        strategy=_strategy,
        reference=_reference,
        implementations={
            "optimized": Implementation(
                "optimized", _optimized, backend="python",
                description="vLLM v1 style: linked LRU free queue, hash map, NumPy tables",
                thresholds=_optimized_thresholds, sources=MANAGER_SOURCES),
            "guarded": Implementation(
                "guarded", _guarded, backend="triton",
                description="the optimized manager under KVGuard, forward passes through the "
                            "guarded Triton write and paged-attention kernels",
                unavailable=triton_support.unavailable,
                thresholds=_guarded_thresholds,
                sources=(*MANAGER_SOURCES, "targets.paged_kv.kernel_driver",
                         "targets.paged_kv.kernels")),
        },
        oracle=checks.oracle,
        mutants=[*MUTANTS, *DEVICE_MUTANTS],
        reducible=("program",),
        validate=checks.validate,
        adapt_external=manager_implementation,
        sizes=SIZES,
        sources=("targets.paged_kv.driver", "targets.paged_kv.protocol"),
        limits=LIMITS,
    )
