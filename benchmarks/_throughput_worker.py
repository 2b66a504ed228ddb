"""The measuring process of ``benchmarks/throughput.py``: one per source tree, kept alive.

Run as ``python -I benchmarks/_throughput_worker.py TREE_ROOT``.  It imports fuzzkit and the
targets of ``TREE_ROOT`` only (never the installed checkout's): the editable install's finder is
taken off ``sys.meta_path`` and ``TREE_ROOT`` goes first on ``sys.path``.  Each target of the
tree's ``targets/`` folder is imported from that tree (``targets.<name>`` in the old layout,
``fuzzkit.targets.<name>`` in the new one) and registered by hand; entry points are never used,
since they name the installed tree's modules.

Protocol: one JSON request per line on stdin, one JSON answer per line on the *original* stdout
(fd 1 is pointed at stderr once started, so that whatever a target prints cannot corrupt it).

* ``{"op": "list"}`` -> ``{"pairs": [{"target", "impl", "backend", "unavailable"}, ...]}``
* ``{"op": "run", "target", "impl", "budget", "seed"}`` -> cases, seconds, found, loop and case
  CPU seconds, repeated cases not judged (see ``throughput.py`` for what they mean).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(sys.argv[1]).resolve()
sys.meta_path[:] = [
    f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")
]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]
sys.path.insert(0, str(ROOT))
for name in [m for m in sys.modules if m.split(".")[0] in ("fuzzkit", "targets", "oracles")]:
    del sys.modules[name]

_answer = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import fuzzkit  # noqa: E402
from fuzzkit import registry, runner  # noqa: E402
from fuzzkit.engines import hypothesis as engine  # noqa: E402

if not str(Path(fuzzkit.__file__).resolve()).startswith(str(ROOT) + os.sep):
    raise SystemExit(f"fuzzkit came from {fuzzkit.__file__}, not from {ROOT}")

#: New layout: targets/ is installed as fuzzkit.targets (setup.py maps it).
NEW_LAYOUT = (ROOT / "fuzzkit" / "_layout.py").exists()


def _targets() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for folder in sorted((ROOT / "targets").iterdir()):
        if not (folder / "__init__.py").exists():
            continue
        module_name = ("fuzzkit.targets." if NEW_LAYOUT else "targets.") + folder.name
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - reported as unavailable, not fatal
            found[folder.name] = f"import failed: {type(exc).__name__}: {exc}"
            continue
        factory = getattr(module, "target", None)
        if factory is None:
            continue
        registry.register_target(folder.name, replace=True)(factory)
        try:
            found[folder.name] = registry.get_target(folder.name)
        except Exception as exc:  # noqa: BLE001
            found[folder.name] = f"build failed: {type(exc).__name__}: {exc}"
    return found


TARGETS = _targets()
FUZZ_PARAMS = set(inspect.signature(engine.fuzz).parameters)


def _list() -> dict[str, Any]:
    pairs = []
    for name, target in TARGETS.items():
        if isinstance(target, str):
            pairs.append({"target": name, "impl": "*", "backend": "?", "unavailable": target})
            continue
        for impl_name, impl in target.implementations.items():
            try:
                reason = impl.unavailable()
            except Exception as exc:  # noqa: BLE001
                reason = f"{type(exc).__name__}: {exc}"
            pairs.append(
                {"target": name, "impl": impl_name, "backend": impl.backend, "unavailable": reason}
            )
    prefix = "fuzzkit.targets." if NEW_LAYOUT else "targets."
    origin = sys.modules.get(prefix + next(iter(TARGETS), ""))
    return {
        "pairs": pairs,
        "fuzzkit": str(Path(fuzzkit.__file__).parent),
        "targets": str(Path(getattr(origin, "__file__", "?")).parent.parent),
    }


#: Pairs this worker has warmed up (see :func:`_warm_up`).
WARM: set[tuple[str, str]] = set()


def _warm_up(target: Any, impl: Any) -> None:
    """Judge one drawn case outside the timing, once per pair and worker: the first case of a
    pair pays for imports, Triton's interpreter setup and Inductor's first compile (over 15 s
    for Inductor), which says nothing about how fast the pair fuzzes, and would otherwise be
    spread over one tree's cases differently from the other's (the old engine always ran a
    first chunk of 10 cases, however long they took)."""
    import warnings

    from hypothesis.errors import NonInteractiveExampleWarning

    strategy = target.strategy_for(impl) if hasattr(target, "strategy_for") else target.strategy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonInteractiveExampleWarning)
        inputs = strategy.example()
    try:
        runner.check_case(target, impl, inputs)
    except Exception:  # noqa: BLE001 - a warm-up only; the measured run reports errors
        pass


def _run(request: dict[str, Any]) -> dict[str, Any]:
    target = TARGETS[request["target"]]
    impl = target.implementations[request["impl"]]
    budget, seed = float(request["budget"]), int(request["seed"])
    if (request["target"], request["impl"]) not in WARM:
        WARM.add((request["target"], request["impl"]))
        _warm_up(target, impl)
    case_cpu = [0.0]

    def timed_check(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return runner.check_case(*args, **kwargs)
        finally:
            case_cpu[0] += time.process_time() - t0

    options: dict[str, Any] = dict(
        profile="ci", database_dir=None, shrink=False, checker=timed_check
    )
    options = {k: v for k, v in options.items() if k in FUZZ_PARAMS}
    cases, runs, found, repeats = 0, 0, [], 0
    cpu0, wall0 = time.process_time(), time.monotonic()
    # The old engine stops at its first finding: start again (next seed) until the time is up,
    # so that a finding never shortens the measurement; cases/s is cases / elapsed either way.
    while True:
        remaining = budget - (time.monotonic() - wall0)
        if remaining <= 0:
            break
        result = engine.fuzz(target, impl, budget=remaining, seed=seed + runs, **options)
        runs += 1
        cases += result.cases
        repeats += getattr(result, "repeats", 0)  # generated again, not judged (seen-set)
        findings = getattr(result, "findings", None) or (
            [result.finding] if result.finding is not None else []
        )
        for case in findings:
            signature = getattr(case.failure, "signature", "?")
            if signature not in found:
                found.append(signature)
        if result.cases == 0:
            break  # nothing generated (exhausted strategy): do not spin
    seconds = time.monotonic() - wall0
    loop_cpu = time.process_time() - cpu0
    return {
        "cases": cases,
        "seconds": seconds,
        "runs": runs,
        "found": found[:5],
        "loop_cpu": loop_cpu,
        "case_cpu": case_cpu[0],
        "repeats": repeats,
    }


def main() -> None:
    _answer.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            answer = _list() if request["op"] == "list" else _run(request)
        except Exception as exc:  # noqa: BLE001 - the parent reports it and goes on
            answer = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        _answer.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
