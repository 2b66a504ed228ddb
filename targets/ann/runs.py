"""One run per distinct case within a case's properties: the property checks rerun the
implementation on many variants of a case, and several variants are the same inputs (the case
itself for ``t-monotone``, ``batch-invariant``, ``insert-equals-build``, ``recall-claim`` and
the black-box contract; ``T = 0, k = n`` for the three nesting relations' smaller side).

The runner hands every property of a case one implementation callable, made for that case
(``runner._copying``), so the memo is kept per callable (weakly: it goes with the case) and
keyed by the inputs' content.  Only such per-case callables (closures) are memoized: a
module-level function lives across cases, and across patches of the module it runs (a test
that applies a mutant and then checks the clean code with the same function must not see the
mutant's outputs again).  Only the relations
that compare *different* inputs go through it; ``deterministic`` calls the implementation
itself, twice, so a nondeterministic implementation is still caught there.  The outputs are
shared between the properties, which only read them.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Hashable, Mapping

from fuzzkit.seen import fingerprint

Impl = Callable[[Mapping[str, Any]], Mapping[str, Any]]

#: Runs kept per callable (a case makes about a dozen distinct ones).
MAX_RUNS = 32
_MEMOS: weakref.WeakKeyDictionary[Any, dict[Hashable, Mapping[str, Any]]] = (
    weakref.WeakKeyDictionary()
)


def content_key(value: Any) -> Hashable:
    """A hashable stand-in for ``value``, equal exactly when the content is (dtypes, shapes,
    bytes, scalar types and bits: ``1``, ``True`` and ``1.0`` differ, so do ``0.0`` and
    ``-0.0``): the engine's case fingerprint (:func:`fuzzkit.seen.fingerprint`).  Raises
    TypeError for a value it cannot encode."""
    key = fingerprint(value)
    if key is None:
        raise TypeError(f"no content key for a {type(value).__name__}")
    return key


def run(impl: Impl, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    """``impl(inputs)``, or the outputs of an earlier call of the same callable on inputs of
    the same content."""
    if "<locals>" not in getattr(impl, "__qualname__", ""):
        return impl(inputs)
    try:
        memo = _MEMOS.setdefault(impl, {})
    except TypeError:  # pragma: no cover - a callable that cannot be weakly referenced
        return impl(inputs)
    try:
        key = content_key(inputs)
    except TypeError:  # an input value without a content key: not shared
        return impl(inputs)
    if key not in memo:
        if len(memo) >= MAX_RUNS:
            memo.clear()
        memo[key] = impl(inputs)
    return memo[key]


__all__ = ["content_key", "run"]
