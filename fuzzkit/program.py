"""Programs: how stateful components (KV cache managers, schedulers) become cases.

A program is a list of operation records ``{"op": name, **arguments}`` — plain data, so it is
stored in case files, shrunk by dropping steps, and replayed anywhere.  An implementation of a
stateful target is a class with one method per operation; :func:`drive` applies a program to a
fresh instance and returns one observation per step, so the ``trace`` oracle can name the first
step where the reference and the implementation part ways.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

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


def program_runner(factory: Callable[[Mapping[str, Any]], Any]) -> Callable[[dict[str, Any]], list[Observation]]:
    """An implementation ``inputs -> observations`` from a class or factory taking the config.

    ``inputs`` holds ``"program"`` and optionally ``"config"`` (passed to the factory).
    """

    def run(inputs: dict[str, Any]) -> list[Observation]:
        return drive(factory(inputs.get("config", {})), inputs["program"])

    run.__doc__ = f"Drive {getattr(factory, '__name__', factory)!s} through the program."
    return run


def programs(operations: Mapping[str, st.SearchStrategy[dict[str, Any]]], *,
             min_steps: int = 1, max_steps: int = 40) -> st.SearchStrategy[Program]:
    """Programs drawn from ``operations`` (op name -> strategy for its arguments).

    Hypothesis shrinks such lists by deleting steps and simplifying arguments, so a failing
    program comes back as a handful of steps.
    """
    step = st.one_of(*[
        args.map(lambda a, name=name: {"op": name, **a}) for name, args in operations.items()
    ])
    return st.lists(step, min_size=min_steps, max_size=max_steps)
