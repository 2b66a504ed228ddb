"""The one model everything reduces to: a Target is a contract for one component.

A target names a Hypothesis strategy that makes ``inputs`` (a dict of JSON values and NumPy
arrays), a ``reference`` (slow, obviously correct, float64), named ``implementations`` under
test, an ``oracle`` that compares reference and implementation outputs, optional
``properties`` that need only one implementation, and named ``mutants`` that prove the oracle
and properties catch realistic bugs.

Nothing here knows about engines, files or the command line; those live elsewhere and only
call into these plain objects.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ContextManager,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)

from fuzzkit.failure import Failure

if TYPE_CHECKING:
    from fuzzkit.schema import Schema
    from fuzzkit.shrink.hook import Minimizer

Inputs = dict[str, Any]
Outputs = Any
Oracle = Callable[[Inputs, Outputs, Outputs], Failure | None]
#: A property runs one implementation (possibly several times, for metamorphic relations):
#: ``check(run, inputs)``, or ``check(run, inputs, output)`` with ``Property.uses_output``.
PropertyCheck = Callable[..., Failure | None]


class Unsupported(Exception):
    """Raised by an implementation for a case it cannot express (a variant of the target's
    contract it does not implement: a policy, fork, a window mode, an adapter form).

    Why an exception and not a passing output: a case the implementation never ran must be
    neither a pass nor a failure.  The runner turns it into a verdict marked ``unsupported``,
    the engines count it apart from the cases run, and ``replay`` says the case was not run."""


#: Cases turned away in this process, by reason: by an implementation's own strategy
#: (:attr:`Implementation.cases`, through :func:`count_unsupported`) or by :class:`Unsupported`.
#: The engines report the difference over a run, so reports count them separately.
UNSUPPORTED: collections.Counter[str] = collections.Counter()


def count_unsupported(reason: str) -> None:
    """Count one case turned away for ``reason`` (keep reasons short and few: they are keys)."""
    UNSUPPORTED[reason[:200]] += 1


@dataclasses.dataclass(frozen=True)
class lazy:  # noqa: N801 - used like a function: lazy("pkg.mod:attr")
    """``module:attr``, imported and looked up on every call.

    Targets name their implementations, strategies and hooks this way so that importing a target
    imports neither torch nor triton, and a mutant that patches the attribute takes effect.
    """

    path: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import importlib

        module, _, attr = self.path.partition(":")
        return getattr(importlib.import_module(module), attr)(*args, **kwargs)


def _described_thresholds(declared: Any) -> list[dict[str, Any]]:
    from fuzzkit import reach

    return [
        {"size": t.size, "value": t.value, "what": t.what, "cap": t.cap}
        for t in reach.resolve(declared)
    ]


def split_options(spec: str) -> tuple[str, dict[str, Any]]:
    """``"NAME[opt,key=value]"`` -> ``("NAME", {"opt": True, "key": "value"})``.

    Options travel inside the implementation spec (``--impl 'vllm[guarded]'``, or ``--impl
    mod:Class`` with ``--impl-option guarded``), so that every place that resolves a spec -- the
    plan, workers, isolated runs, replays of saved cases -- gets them without knowing what they
    mean: the target gives them a meaning (:attr:`Implementation.options`, or its
    ``adapt_external`` as keywords)."""
    if not spec.endswith("]") or "[" not in spec:
        return spec, {}
    base, _, listed = spec[:-1].partition("[")
    options: dict[str, Any] = {}
    for item in (part.strip() for part in listed.split(",")):
        key, eq, value = item.partition("=")
        if not key.isidentifier():
            from fuzzkit.errors import UsageError

            raise UsageError(
                f"implementation {spec!r}: bad option {item!r} (expected "
                "NAME[option,key=value,...])"
            )
        options[key] = value if eq else True
    return base, options


def with_options(spec: str, options: Sequence[str]) -> str:
    """``spec`` with ``options`` (``"opt"`` or ``"key=value"``) added to its own."""
    if not options:
        return spec
    base, own = split_options(spec)
    listed = [key if value is True else f"{key}={value}" for key, value in own.items()]
    return f"{base}[{','.join([*listed, *options])}]"


def accepts_keywords(fn: Any, names: Iterable[str], *, var_keyword: bool = False) -> bool:
    """Whether ``fn`` (or the function a :class:`lazy` names) takes every keyword in ``names``
    -- by name, or, with ``var_keyword``, through a ``**kwargs`` too."""
    import importlib
    import inspect

    if isinstance(fn, lazy):
        module, _, attr = fn.path.partition(":")
        fn = getattr(importlib.import_module(module), attr)
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    if var_keyword and any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return True
    return all(name in parameters for name in names)


@dataclasses.dataclass(frozen=True)
class Implementation:
    """An implementation under test: a plain callable ``inputs -> outputs``.

    ``backend`` says what it runs on ("numpy", "triton", "torch", "python", "external");
    ``unavailable`` returns a one-line reason when it cannot run here (a missing optional
    package), or None when it can.  ``fn`` is looked up by the runner at call time, so a mutant
    that patches the module attribute behind it takes effect.
    """

    name: str
    fn: Callable[[Inputs], Outputs]
    backend: str = "python"
    description: str = ""
    unavailable: Callable[[], str | None] = lambda: None
    #: The sizes where this implementation's code changes path (tiles, table growth, heap
    #: compaction, policy cut-offs), as :class:`fuzzkit.reach.Threshold` records or a callable
    #: returning them (tile sizes may differ under the interpreter); strategies aim at them.
    thresholds: Any = ()
    #: Modules (``"pkg.mod"``) that make up this implementation: what ``--coverage`` measures.
    sources: Sequence[str] = ()
    #: For an implementation that can express only some of the target's cases (a real library
    #: without one of the target's variants): its own strategy, called like ``Target.strategy``,
    #: drawing only the cases it supports.  Cases it turns away are never run, so never counted
    #: as passed (a filter calls :func:`count_unsupported` for each, and reports show the
    #: count); None: every case of the target's strategy.
    cases: Callable[..., Any] | None = None
    #: How this implementation takes options (``--impl 'NAME[opt,key=value]'``, see
    #: :func:`split_options`): called with the whole spec and the options as keywords, returns
    #: the implementation so configured (raising ``UsageError`` for an option it does not
    #: take); None: it takes none.
    options: Callable[..., Implementation] | None = None

    def __call__(self, inputs: Inputs) -> Outputs:
        return self.fn(inputs)

    def __repr__(self) -> str:
        # short: Hypothesis prints a failing test's arguments, pytest its parameters
        return f"<Implementation {self.name!r}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # Hypothesis's printer lists a dataclass's fields otherwise


@dataclasses.dataclass(frozen=True)
class Property:
    """An invariant or metamorphic relation checked on one implementation's behaviour."""

    name: str
    check: PropertyCheck
    description: str = ""
    #: ``check(run, inputs, output)``: also given the implementation's output on ``inputs``,
    #: which the runner has just computed and judged -- a relation comparing a variant with the
    #: unchanged case need not run the case again.  The output is shared: read it, never change it.
    uses_output: bool = False


@dataclasses.dataclass(frozen=True)
class Mutant:
    """A realistic bug, applied to one implementation by a context manager.

    ``bug_class`` is a short phrase naming the real-world bug class and ``citation`` points at
    the upstream issue or paper it is modelled on.  ``patch()`` returns a context manager; inside
    it the implementation named by ``implementation`` behaves buggily.
    """

    name: str
    implementation: str
    bug_class: str
    citation: str
    patch: Callable[[], ContextManager[Any]]

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        with self.patch():
            yield


@dataclasses.dataclass
class Target:
    """One component contract.  See the module docstring.

    ``strategy`` is a zero-argument callable returning a Hypothesis strategy for ``inputs``; it is
    a callable so that importing a target does not build strategies (or import heavy modules).

    ``reducible`` names the input keys whose first axis (array rows, list items such as the steps
    of a program) are independent enough for delta debugging to drop items; the default
    ``minimize`` hook (what ``fuzzkit shrink`` runs) uses it for cases that did not come from
    Hypothesis.  Stateful targets put their operation list under ``"program"`` and list it here.

    ``minimize`` and ``bisect`` are the target's minimization hooks (:mod:`fuzzkit.shrink.hook`):
    a target that knows a better way to cut its cases than ddmin says so here, and the engine
    never needs to know the shape of its inputs.
    """

    name: str
    description: str
    strategy: Callable[..., Any]
    reference: Callable[[Inputs], Outputs]
    implementations: dict[str, Implementation]
    oracle: Oracle
    properties: Sequence[Property] = ()
    mutants: Sequence[Mutant] = ()
    reducible: Sequence[str] = ()
    validate: Callable[[Inputs], str | None] | None = None
    #: How an outside object given with ``--impl module:attr`` becomes an implementation; None
    #: means it must already be a callable ``inputs -> outputs``.  Stateful targets use it to
    #: accept a manager *class* and drive it through programs.
    adapt_external: Callable[[Any, str], Implementation] | None = None
    #: Where a failure of a batched input comes from: given the implementation (as a callable),
    #: the failing inputs and the failure, return the same failure with the culprit named (e.g.
    #: re-run with one batch slot at a time neutralised).  The runner calls it after an oracle
    #: failure or a crash of the implementation; it must keep the failure's kind and signature.
    localize: Callable[[Callable[[Inputs], Outputs], Inputs, Failure], Failure] | None = None
    #: Thresholds of code every implementation runs through (a driver, a shared encoder); see
    #: :class:`Implementation.thresholds`.
    thresholds: Any = ()
    #: Named sizes of a case: ``name -> Size`` (or ``inputs -> iterable of ints``), so reports and
    #: tests can tell which threshold boundaries the generated cases reach.
    sizes: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: The operations a case performs, in order (stateful targets: the program's ops), for the
    #: per-operation and per-pair counts of a run; None: ``op`` of each ``inputs["program"]`` step.
    events: Callable[[Inputs], Sequence[str]] | None = None
    #: Modules every implementation runs through (drivers, shared layers): measured by
    #: ``--coverage`` together with the implementation's own ``sources``.
    sources: Sequence[str] = ()
    #: What a case may ask for (:class:`fuzzkit.limits.Limit`: steps, blocks, nodes, elements,
    #: ...): every path that loads a case from a file refuses one beyond them before anything
    #: runs, so a small hostile file cannot take gigabytes or hours.
    limits: Sequence[Any] = ()
    #: Makes a failing case smaller (:data:`fuzzkit.shrink.hook.Minimizer`: a Minimization in,
    #: a Minimized out); None: ddmin over ``reducible``.  ``fuzzkit shrink`` runs it.
    minimize: Minimizer | None = None
    #: Finds where a failing case goes wrong (the same contract; e.g. the compiler's bisection
    #: to the first diverging node and its smallest failing window); ``fuzzkit bisect`` runs it.
    #: None: the target has no bisection.
    bisect: Minimizer | None = None
    #: What an implementation receives and must return (:class:`fuzzkit.schema.Schema`), or a
    #: zero-argument callable building it (so building the target stays light); None: not
    #: declared.  ``fuzzkit describe`` renders it; the tests check the strategy and the
    #: reference against it.
    schema: Any = None

    def __post_init__(self) -> None:
        names = [m.name for m in self.mutants]
        if len(set(names)) != len(names):
            raise ValueError(f"target {self.name}: duplicate mutant names {names}")
        for m in self.mutants:
            if m.implementation not in self.implementations:
                raise ValueError(
                    f"target {self.name}: mutant {m.name} patches unknown implementation "
                    f"{m.implementation!r}"
                )

    def __repr__(self) -> str:
        # short: a falsifying example's arguments once printed the whole contract (~100 lines)
        return f"<Target {self.name!r}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # Hypothesis's printer lists a dataclass's fields otherwise

    def thresholds_for(self, impl: Implementation | None = None) -> tuple[Any, ...]:
        """The thresholds a strategy aims at when fuzzing ``impl``: the target's own plus the
        implementation's (every implementation's, when ``impl`` is None)."""
        from fuzzkit import reach

        impls = [impl] if impl is not None else list(self.implementations.values())
        found = list(reach.resolve(self.thresholds))
        for i in impls:
            found.extend(reach.resolve(i.thresholds))
        return tuple(dict.fromkeys(found))

    def strategy_for(self, impl: Implementation | None = None) -> Any:
        """The Hypothesis strategy for fuzzing ``impl``: ``strategy(thresholds=...)`` when the
        strategy takes them, else ``strategy()``; ``impl.cases`` instead when it declares one."""
        strategy = impl.cases if impl is not None and impl.cases is not None else self.strategy
        if accepts_keywords(strategy, ("thresholds",)):
            return strategy(thresholds=self.thresholds_for(impl))
        return strategy()

    def operations(self, inputs: Inputs) -> Sequence[str]:
        """The operations of one case, in order (see ``events``)."""
        if self.events is not None:
            return self.events(inputs)
        program = inputs.get("program") if isinstance(inputs, Mapping) else None
        if isinstance(program, list):
            return [str(step.get("op")) for step in program if isinstance(step, Mapping)]
        return ()

    def coverage_sources(self, impl: Implementation) -> tuple[str, ...]:
        """Modules ``--coverage`` measures for ``impl``: its own plus the target's."""
        return tuple(dict.fromkeys([*impl.sources, *self.sources]))

    def implementation(self, name: str) -> Implementation:
        """A registered implementation by name; ``NAME[options]`` configures it (see
        :func:`split_options`)."""
        from fuzzkit.errors import UsageError

        base, options = split_options(name)
        try:
            impl = self.implementations[base]
        except KeyError:
            known = ", ".join(sorted(self.implementations)) or "none"
            raise UsageError(
                f"target {self.name!r} has no implementation {base!r} (known: {known}); "
                "use --impl module:attr for an outside implementation"
            ) from None
        if not options:
            return impl
        if impl.options is None:
            raise UsageError(f"implementation {base!r} of target {self.name!r} takes no options")
        return impl.options(name, **options)

    def mutant(self, name: str) -> Mutant:
        for m in self.mutants:
            if m.name == name:
                return m
        from fuzzkit.errors import UsageError

        raise UsageError(f"target {self.name!r} has no mutant {name!r}")

    def declared_schema(self) -> Schema | None:
        """The target's :class:`~fuzzkit.schema.Schema` (built on first use), or None."""
        from fuzzkit.schema import Schema

        if self.schema is None or isinstance(self.schema, Schema):
            return self.schema
        built = self.schema()
        if not isinstance(built, Schema):
            raise TypeError(f"target {self.name}: schema() returned {type(built).__name__}")
        self.schema = built
        return built

    def describe(self) -> Mapping[str, Any]:
        """A JSON summary for ``fuzzkit list --json`` and ``fuzzkit describe --json``: the
        implementations (available here or why not, options), mutants with their bug classes,
        properties, limits, thresholds and the input/output schema (null where undeclared)."""
        schema = self.declared_schema()
        described = []
        for impl in self.implementations.values():
            reason = impl.unavailable()
            described.append(
                {
                    "name": impl.name,
                    "backend": impl.backend,
                    "description": impl.description,
                    "available": reason is None,
                    "unavailable": reason,
                    "takes_options": impl.options is not None,
                    "own_cases": impl.cases is not None,
                    "thresholds": _described_thresholds(impl.thresholds),
                }
            )
        return {
            "name": self.name,
            "description": self.description,
            "schema": schema.to_json() if schema is not None else None,
            "implementations": described,
            "thresholds": _described_thresholds(self.thresholds),
            "limits": [
                {"name": lim.name, "default": lim.default, "what": lim.what} for lim in self.limits
            ],
            "properties": [p.name for p in self.properties],
            "property_descriptions": {p.name: p.description for p in self.properties},
            "mutants": [
                {
                    "name": m.name,
                    "implementation": m.implementation,
                    "bug_class": m.bug_class,
                    "citation": m.citation,
                }
                for m in self.mutants
            ],
        }
