"""What a campaign fuzzes and who fuzzes what: (target, implementation) pairs split over workers."""

from __future__ import annotations

import importlib
import json
from typing import Any, Sequence

from fuzzkit.errors import UsageError

Item = tuple[str, str]  # (target name, implementation name or module:attr spec)


def build_plan(
    names: Sequence[str], all_targets: bool, impl: str | None
) -> tuple[list[Item], list[dict[str, str]]]:
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
        impls = (
            [(impl, resolve_implementation(target, impl))]
            if impl
            else [(i.name, i) for i in target.implementations.values()]
        )
        for spec, implementation in impls:
            reason = implementation.unavailable()
            if reason:
                skipped.append(
                    {"target": target.name, "implementation": implementation.name, "reason": reason}
                )
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
    """Where the targets registered in this process (tests, conftest files) come from, as JSON
    ``{name: "module:qualname"}`` of their factories, so that spawned workers can import and
    register them too (plain data: nothing is unpickled).  Entry-point targets (the shipped
    ones too) need nothing; a factory that cannot be named (a lambda, a local function, a
    Target object) is left out and the worker must find the target itself."""
    from fuzzkit import registry

    sources: dict[str, str] = {}
    for name in names:
        source = registry._sources.get(name)
        if source is None or registry.from_entry_point(name):
            continue
        module = getattr(source, "__module__", None)
        qualname = getattr(source, "__qualname__", "")
        if not module or module in ("__main__", "__mp_main__") or not qualname or "<" in qualname:
            continue
        sources[name] = f"{module}:{qualname}"
    return json.dumps(sources, sort_keys=True).encode()


def _named(blob: bytes) -> dict[str, str]:
    data = json.loads(blob.decode()) if blob else {}
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and ":" in v for k, v in data.items()
    ):
        raise ValueError("target sources must be a JSON object of name -> 'module:qualname'")
    return data


def register_sources(blob: bytes) -> None:
    from fuzzkit import registry

    for name, path in _named(blob).items():
        if name in registry._sources:
            continue
        module, _, qualname = path.partition(":")
        factory: Any = importlib.import_module(module)  # importing may register it already
        if name in registry._sources:
            continue
        for part in qualname.split("."):
            factory = getattr(factory, part)
        registry._add(name, factory, replace=True)


def source_modules(blob: bytes) -> list[str]:
    """Modules that define the in-process targets (isolated children import them)."""
    modules: list[str] = []
    for path in _named(blob).values():
        module = path.partition(":")[0]
        if module not in modules:
            modules.append(module)
    return modules
