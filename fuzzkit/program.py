"""Programs: how stateful components (KV cache managers, schedulers) become cases.

A program is a list of operation records ``{"op": name, **arguments}`` — plain data, so it is
stored in case files, shrunk by dropping steps, and replayed anywhere.  An implementation of a
stateful target is a class with one method per operation; :func:`drive` applies a program to a
fresh instance and returns one observation per step, so the ``trace`` oracle can name the first
step where the reference and the implementation part ways.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from hypothesis import strategies as st

Program = list[dict[str, Any]]
Observation = dict[str, Any]


def drive(machine: Any, program: Program) -> list[Observation]:
    """Apply every step to ``machine``; an exception in a step is an observation, not a crash.

    Recording ``{"op": ..., "error": "ExceptionType"}`` lets a program that makes the reference
    raise (say, "does not fit") still be compared step by step with the implementation, and
    lets the program continue, as a real serving engine would.
    """
    observations: list[Observation] = []
    for step in program:
        name = step["op"]
        arguments = {k: v for k, v in step.items() if k != "op"}
        method = getattr(machine, name, None)
        if method is None or name.startswith("_"):
            raise ValueError(f"program step uses unknown operation {name!r}")
        try:
            result = method(**arguments)
        except Exception as exc:  # noqa: BLE001 - part of the observable behaviour
            observations.append({"op": name, "error": type(exc).__name__})
        else:
            observations.append({"op": name, "result": result})
    return observations


def program_runner(
    factory: Callable[[Mapping[str, Any]], Any],
) -> Callable[[dict[str, Any]], list[Observation]]:
    """An implementation ``inputs -> observations`` from a class or factory taking the config.

    ``inputs`` holds ``"program"`` and optionally ``"config"`` (passed to the factory).
    """

    def run(inputs: dict[str, Any]) -> list[Observation]:
        return drive(factory(inputs.get("config", {})), inputs["program"])

    run.__doc__ = f"Drive {getattr(factory, '__name__', factory)!s} through the program."
    return run


def programs(
    operations: Mapping[str, st.SearchStrategy[dict[str, Any]]],
    *,
    min_steps: int = 1,
    max_steps: int = 40,
) -> st.SearchStrategy[Program]:
    """Programs drawn from ``operations`` (op name -> strategy for its arguments).

    Hypothesis shrinks such lists by deleting steps and simplifying arguments, so a failing
    program comes back as a handful of steps.
    """
    step = st.one_of(*[args.map(_tagged(name)) for name, args in operations.items()])
    return st.lists(step, min_size=min_steps, max_size=max_steps)


def _tagged(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Arguments -> the step record ``{"op": name, **arguments}``."""

    def tag(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"op": name, **arguments}

    return tag


# ------------------------------------------------------------------------------------- swarm


def swarm(
    draw: Callable[[Any], Any], table: Sequence[tuple[str, int]], *, keep: Sequence[str] = ()
) -> dict[str, int]:
    """A swarm configuration (Groce et al., ISSTA 2012): each program enables a random subset of
    its operations, each with a random weight, so that some programs are dominated by a rare
    operation (many forks, many preemptions) and some never run an operation that would mask a
    bug (a reset that wipes the state the bug needs).

    ``table`` holds ``(name, default weight)``; in about a third of the programs every operation
    keeps its default weight (the shrink target: Hypothesis shrinks the first draw to 0), else
    each is enabled with probability 3/4 and weighted 1, the default, or 8x the default.  Names in
    ``keep`` stay enabled (e.g. the operation that makes the others meaningful).
    """
    if draw(st.integers(0, 2)) == 0:
        return {name: weight for name, weight in table}
    config: dict[str, int] = {}
    for name, weight in table:
        enabled = name in keep or draw(st.integers(0, 3)) > 0
        if enabled:
            config[name] = (weight, 1, 8 * weight)[draw(st.integers(0, 2))]
    if not config:
        name, weight = table[draw(st.integers(0, len(table) - 1))]
        config[name] = weight
    return config


def weighted(
    config: Mapping[str, int], strategies: Mapping[str, st.SearchStrategy[Any]]
) -> st.SearchStrategy[Any]:
    """One draw from ``strategies``, chosen with the weights of a :func:`swarm` configuration
    (names missing from ``config`` are disabled)."""
    table = [(name, w) for name, w in config.items() if w > 0 and name in strategies]
    if not table:
        raise ValueError("a swarm configuration enables no operation")
    total = sum(w for _, w in table)

    def pick(k: int) -> st.SearchStrategy[Any]:
        for name, w in table:
            if k < w:
                return strategies[name]
            k -= w
        return strategies[table[-1][0]]  # pragma: no cover - unreachable: k < total

    return st.integers(0, total - 1).flatmap(pick)


class OperationCounts:
    """How often each operation and each ordered pair of consecutive operations occurred in the
    cases of a run (the reach report of a stateful target)."""

    def __init__(self) -> None:
        self.ops: dict[str, int] = {}
        self.pairs: dict[str, int] = {}
        self.cases = 0

    def add(self, operations: Sequence[str]) -> None:
        if not operations:
            return
        self.cases += 1
        previous = None
        for op in operations:
            self.ops[op] = self.ops.get(op, 0) + 1
            if previous is not None:
                key = f"{previous}>{op}"
                self.pairs[key] = self.pairs.get(key, 0) + 1
            previous = op

    def to_json(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "operations": dict(sorted(self.ops.items(), key=lambda kv: (-kv[1], kv[0]))),
            "pairs": dict(sorted(self.pairs.items(), key=lambda kv: (-kv[1], kv[0]))),
        }
