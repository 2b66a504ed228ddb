"""Target ``paged_kv``: paged KV cache managers driven by programs, judged semantically.

Inputs::

    config   {"num_blocks": N, "block_size": b, "sliding_window": w or null,
              "eviction": "lru" | "session" | "penelope" (absent: "lru"),
              "window_mode": "trim" | "eager" (absent: "trim"),
              "hashing": "publish" | "allocate" (absent: "publish")}
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
:mod:`.kernel_driver`).  Each implements some variants of the contract
(:class:`.protocol.Capabilities`); it is fuzzed on cases drawn within them
(``Implementation.cases``) and turns any other case away with
:class:`fuzzkit.target.Unsupported` (counted as skipped, never as passed).  The guarded driver
runs the default window and hashing modes only (:data:`GUARDED_CAPABILITIES`).  Each declares
the sizes where its code changes path (``thresholds``: the block tables' rows and width; the
kernels' tiles as launched, the guard's request rows); :mod:`.sizes` measures them in a case,
and :mod:`.strategies` aims at them.  Your own manager plugs in with ``fuzzkit run paged_kv
--impl your_module:YourManager`` (the protocol is :mod:`.protocol`; see the README for an
adapter).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional

from fuzzkit import triton_support
from fuzzkit.target import Implementation, Target, Unsupported, lazy
from fuzzkit.targets.paged_kv import checks
from fuzzkit.targets.paged_kv.driver import run_program
from fuzzkit.targets.paged_kv.protocol import ALL_CAPABILITIES, Capabilities, capabilities_of, unsupported
from fuzzkit.targets.paged_kv.reference import ReferenceManager

#: What the guarded driver runs: every policy, fork, extra keys and reset, but only the default
#: window and hashing modes (the kernel driver writes per request, not the whole step that
#: allocate hashing needs; KVGuard's model has no eager removal).
GUARDED_CAPABILITIES = dataclasses.replace(ALL_CAPABILITIES, windows=("trim",),
                                           hashing=("publish",))


@dataclasses.dataclass(frozen=True)
class ManagerImplementation(Implementation):
    """An implementation driving a manager class.  The runner calls ``fn``, which raises
    :class:`~fuzzkit.target.Unsupported` for a case outside the class's capabilities (the
    engines count it as skipped, never as passed); calling the implementation itself returns
    the older ``{"steps": [], "violation": None, "unsupported": reason}`` output instead (the
    oracle passes it), for code that calls it directly."""

    def __call__(self, inputs: dict[str, Any]) -> Any:
        try:
            return self.fn(inputs)
        except Unsupported as exc:
            return {"steps": [], "violation": None, "unsupported": str(exc)}


def turned_away(name: str, capabilities: Capabilities, inputs: dict[str, Any]) -> None:
    """Raise :class:`~fuzzkit.target.Unsupported` when ``inputs`` needs a variant that
    ``capabilities`` lack (a saved case of another implementation, a replay)."""
    reason = unsupported(capabilities, inputs)
    if reason is not None:
        raise Unsupported(f"{name}: {reason}")


def cases_for(capabilities: Capabilities) -> Optional[Callable[..., Any]]:
    """An implementation's own strategy: cases within ``capabilities`` (None for the whole
    contract: the target's strategy draws those)."""
    if capabilities == ALL_CAPABILITIES:
        return None
    return functools.partial(_strategy, capabilities=capabilities)


def _under_guard(capabilities: Capabilities, name: str) -> Capabilities:
    """``capabilities`` limited to what the guarded driver runs (:data:`GUARDED_CAPABILITIES`)."""
    hashing = tuple(h for h in capabilities.hashing if h in GUARDED_CAPABILITIES.hashing)
    if not hashing:
        from fuzzkit.errors import UsageError

        raise UsageError(f"--impl {name}: the guarded driver runs hashing "
                         f"{GUARDED_CAPABILITIES.hashing[0]!r} only, and the class declares "
                         f"{', '.join(capabilities.hashing)}")
    windows = tuple(w for w in capabilities.windows if w in GUARDED_CAPABILITIES.windows)
    return dataclasses.replace(capabilities, windows=windows, hashing=hashing)


def manager_implementation(manager_class: Any, name: str, backend: str = "external",
                           description: str = "", **options: Any) -> Implementation:
    """An implementation that drives ``manager_class`` (the protocol) through each program.

    The class's capabilities (``capabilities``, or the older ``eviction_policies``: see
    :func:`~fuzzkit.targets.paged_kv.protocol.capabilities_of`) choose the cases it is fuzzed on
    (``Implementation.cases``); a case outside them is not run (:class:`Unsupported`: counted
    as skipped, never as passed), so a manager written for tail-LRU without fork is fuzzed on
    the cases it implements instead of failing every other one.  A class may
    declare ``thresholds`` (:class:`fuzzkit.reach.Threshold` records, or a zero-argument
    callable returning them: its table capacities, growth points, batch limits) for the
    strategy to aim at.

    ``options`` come from the implementation spec (``--impl 'NAME[guarded]'``, ``--impl-option``,
    ``--guarded``): ``guarded`` runs the class under KVGuard (it must accept ``guard=`` and emit
    the events of "KVGuard events" in :mod:`.protocol`) with every forward pass through the
    guarded Triton kernels.  Any other option, or ``guarded`` for a class without ``guard=``,
    is refused with one line."""
    guarded = _guarded_option(manager_class, name, options)
    if not callable(manager_class):
        from fuzzkit.errors import UsageError

        raise UsageError(f"--impl {name}: expected a KV cache manager class (see "
                         f"targets/paged_kv/protocol.py), got a {type(manager_class).__name__}")
    capabilities = capabilities_of(manager_class)
    if guarded:
        capabilities = _under_guard(capabilities, name)

    def run(inputs: dict[str, Any]) -> dict[str, Any]:
        turned_away(name, capabilities, inputs)  # not run: skipped, never passed
        return run_program(manager_class, inputs, guarded=guarded)

    # a crash inside the engine an adapter drives is blamed on the engine (fuzzkit.runner)
    declared = getattr(manager_class, "code_under_test", ())
    run.code_under_test = declared  # type: ignore[attr-defined]
    return ManagerImplementation(name, run, backend="triton" if guarded else backend,
                          description=description or (manager_class.__doc__ or "").strip()
                          .split("\n")[0],
                          unavailable=triton_support.unavailable if guarded else lambda: None,
                          thresholds=getattr(manager_class, "thresholds", ()),
                          cases=cases_for(capabilities),
                          options=lambda spec, **more: manager_implementation(
                              manager_class, spec, backend, description, **more))


def _guarded_option(manager_class: Any, name: str, options: dict[str, Any]) -> bool:
    """Whether ``options`` ask for KVGuard; refuses unknown options and a guard for a class
    whose constructor takes no ``guard=`` (exit 2, one line)."""
    import inspect

    from fuzzkit.errors import UsageError

    unknown = sorted(set(options) - {"guarded"})
    if unknown:
        raise UsageError(f"--impl {name}: unknown option {unknown[0]!r} (paged_kv managers take "
                         "only 'guarded')")
    if options.get("guarded") not in (None, True):
        raise UsageError(f"--impl {name}: 'guarded' takes no value")
    if not options.get("guarded"):
        return False
    try:
        parameters = inspect.signature(manager_class).parameters.values()
    except (TypeError, ValueError):
        parameters = ()  # type: ignore[assignment]
    if not any(p.name == "guard" or p.kind is p.VAR_KEYWORD for p in parameters):
        raise UsageError(f"--impl {name}: {getattr(manager_class, '__name__', manager_class)} "
                         "does not accept guard=, so it cannot run under KVGuard (see \"KVGuard "
                         "events\" in targets/paged_kv/protocol.py)")
    return True


def _reference(inputs: dict[str, Any]) -> dict[str, Any]:
    return run_program(ReferenceManager, inputs, trusted=True)


def _optimized(inputs: dict[str, Any]) -> dict[str, Any]:
    from fuzzkit.targets.paged_kv.optimized import OptimizedManager

    return run_program(OptimizedManager, inputs)


def _guarded(inputs: dict[str, Any]) -> dict[str, Any]:
    from fuzzkit.targets.paged_kv.optimized import OptimizedManager

    turned_away("guarded", GUARDED_CAPABILITIES, inputs)
    return run_program(OptimizedManager, inputs, guarded=True)


def _strategy(thresholds: tuple[Any, ...] = (),
              capabilities: Optional[Capabilities] = None) -> Any:
    from fuzzkit.targets.paged_kv.strategies import inputs

    return inputs(thresholds=thresholds, capabilities=capabilities)


def _optimized_thresholds() -> tuple[Any, ...]:
    from fuzzkit.targets.paged_kv.optimized import thresholds

    return thresholds()


def _guarded_thresholds() -> tuple[Any, ...]:
    """The manager's (the same optimized manager runs) and the kernel driver's, as launched in
    this mode (interpreter or GPU)."""
    from fuzzkit.targets.paged_kv.kernel_driver import thresholds

    return _optimized_thresholds() + thresholds()


def _vllm_triton(inputs: dict[str, Any]) -> dict[str, Any]:
    from fuzzkit.targets.paged_kv.adapters.vllm_kernels import run

    turned_away("vllm-triton", GUARDED_CAPABILITIES, inputs)  # the guarded driver's modes
    return run(inputs)


def _vllm_triton_unavailable() -> str | None:
    from fuzzkit.targets.paged_kv.adapters.vllm_kernels import unavailable

    return unavailable()


def _vllm_triton_thresholds() -> tuple[Any, ...]:
    """The manager's and those of vLLM's kernels as launched (:mod:`.adapters.vllm_kernels`;
    none where the kernels cannot be loaded: describing the target must not fetch the wheel)."""
    from fuzzkit.targets.paged_kv.adapters.vllm_kernels import thresholds, unavailable

    return _optimized_thresholds() + (thresholds() if unavailable() is None else ())


MANAGER_SOURCES = ("fuzzkit.targets.paged_kv.optimized", "fuzzkit.targets.paged_kv.hashing")


def target() -> Target:
    """The ``paged_kv`` target (entry point ``fuzzkit.targets.paged_kv:target``)."""
    from fuzzkit.targets.paged_kv.adapters import vllm_manager
    from fuzzkit.targets.paged_kv.adapters.vllm_mutants import MUTANTS as VLLM_MUTANTS
    from fuzzkit.targets.paged_kv.limits import LIMITS
    from fuzzkit.targets.paged_kv.adapters.vllm_kernel_mutants import MUTANTS as VLLM_KERNEL_MUTANTS
    from fuzzkit.targets.paged_kv.mutants import DEVICE_MUTANTS, MUTANTS, VARIANT_MUTANTS
    from fuzzkit.targets.paged_kv.sizes import SIZES

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
                thresholds=_guarded_thresholds, cases=cases_for(GUARDED_CAPABILITIES),
                sources=(*MANAGER_SOURCES, "fuzzkit.targets.paged_kv.kernel_driver",
                         "fuzzkit.targets.paged_kv.kernels")),
            # vLLM's real KVCacheManager from the pinned wheel (fuzzkit.targets.paged_kv.adapters)
            "vllm": vllm_manager.implementation("vllm"),
            # vLLM's real Triton write + attention kernels from the pinned wheel
            "vllm-triton": Implementation(
                "vllm-triton", _vllm_triton, backend="triton",
                description="the guarded driver, forward passes through vLLM's own Triton "
                            "kernels (reshape_and_cache_flash, unified_attention)",
                unavailable=_vllm_triton_unavailable, thresholds=_vllm_triton_thresholds,
                cases=cases_for(GUARDED_CAPABILITIES),
                sources=(*MANAGER_SOURCES, "fuzzkit.targets.paged_kv.kernel_driver",
                         "fuzzkit.targets.paged_kv.adapters.vllm_kernels")),
        },
        oracle=checks.oracle,
        mutants=[*MUTANTS, *VARIANT_MUTANTS, *DEVICE_MUTANTS, *VLLM_KERNEL_MUTANTS, *VLLM_MUTANTS],
        reducible=("program",),
        validate=checks.validate,
        adapt_external=manager_implementation,
        sizes=SIZES,
        sources=("fuzzkit.targets.paged_kv.driver", "fuzzkit.targets.paged_kv.protocol"),
        limits=LIMITS,
        schema=lazy("fuzzkit.targets.paged_kv.schema:schema"),  # what describe shows
    )
