"""What a campaign fuzzes and who fuzzes what: (target, implementation) pairs split over workers."""

from __future__ import annotations

import pickle
from typing import Any, Optional, Sequence

from fuzzkit.errors import UsageError

Item = tuple[str, str]  # (target name, implementation name or module:attr spec)


def build_plan(names: Sequence[str], all_targets: bool,
               impl: Optional[str]) -> tuple[list[Item], list[dict[str, str]]]:
    """The runnable (target, impl) pairs and the skipped ones, validated here (fails fast)."""
    from fuzzkit.registry import get_target, resolve_implementation, target_names

    if all_targets and names:
        raise UsageError("give target names or --all, not both")
    names = target_names() if all_targets else list(names)
    if not names:
        raise UsageError("name at least one target, or pass --all (`fuzzkit list` shows them)")
    targets = [get_target(n) for n in names]
    plan: list[Item] = []
    skipped: list[dict[str, str]] = []
    for target in targets:
        impls = ([(impl, resolve_implementation(target, impl))] if impl
                 else [(i.name, i) for i in target.implementations.values()])
        for spec, implementation in impls:
            reason = implementation.unavailable()
            if reason:
                skipped.append({"target": target.name, "implementation": implementation.name,
                                "reason": reason})
            else:
                plan.append((target.name, spec))
    if not plan:
        raise UsageError("nothing to run: every selected implementation is unavailable here")
    return plan, skipped


def assign(plan: Sequence[Item], workers: int) -> list[list[Item]]:
    """Worker i gets items i, i+N, ...; with more workers than items, items are shared (each
    worker fuzzes with its own seed, all of them with the same corpus and database)."""
    if workers <= len(plan):
        return [list(plan[i::workers]) for i in range(workers)]
    return [[plan[i % len(plan)]] for i in range(workers)]


def target_sources(names: Sequence[str]) -> bytes:
    """Pickled registry sources of targets registered in this process (tests, conftest files)
    so that spawned workers can register them too; built-ins and entry points need nothing."""
    from fuzzkit import registry

    sources: dict[str, Any] = {}
    for name in names:
        source = registry._sources.get(name)
        if source is None or isinstance(source, str):
            continue
        if registry.BUILTIN_TARGETS.get(name) == source:
            continue
        try:
            pickle.dumps(source)
        except Exception:  # noqa: BLE001 - a lambda factory etc.: the worker must find it itself
            continue
        sources[name] = source
    return pickle.dumps(sources)


def register_sources(blob: bytes) -> None:
    from fuzzkit import registry

    for name, source in pickle.loads(blob).items():
        if name not in registry._sources:
            registry._add(name, source, replace=True)


def source_modules(blob: bytes) -> list[str]:
    """Modules that define the pickled in-process targets (isolated children import them)."""
    modules = []
    for source in pickle.loads(blob).values():
        module = getattr(source, "__module__", None)
        if module and module not in ("__main__", "__mp_main__") and module not in modules:
            modules.append(module)
    return modules
