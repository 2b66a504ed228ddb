"""Content-keyed caches for pure derived data of a Scute case (slot conversions, references,
error bounds).

Why: one fuzzed case is converted, referenced and bounded many times -- the runner gives the
reference, the implementation and every property their own deep copy of the inputs, and the
properties re-run the slot conversion and the float64 reference on the same adapters (batch
invariance, merged weights, zero-init) -- so identity (``id``) never matches twice, but the
*contents* do.  A key here is the full content of what the computation reads (every array's
dtype, shape and bytes; every scalar exactly, ``-0.0`` apart from ``0.0``), compared in full by
the dict on a hit, plus the functions the computation calls (:func:`functions`): a mutant
patches ``slots.dora_slot`` and friends, and a result computed before the patch must not be
served under it, nor the other way round.

Values are returned as copies (:func:`copied`) or with read-only arrays, so no caller can
change what a later hit returns.
"""

from __future__ import annotations

import collections
import operator
import struct
from types import ModuleType
from typing import Any, Callable, Hashable, Mapping

import numpy as np

#: Entries kept per cache: a case's work touches a handful of keys (its adapters, its
#: sub-cases); the oldest go first.
MAXSIZE = 256


class Unkeyable(Exception):
    """A value that has no exact content key (an unknown type): compute without the cache."""


def key(value: Any) -> Hashable:
    """The exact content of ``value`` as a hashable key (raises :class:`Unkeyable`)."""
    kind = type(value)
    if kind is np.ndarray and not value.dtype.hasobject:
        return ("a", value.dtype.str, value.shape, value.tobytes())
    if kind is dict:  # the common containers first: isinstance against Mapping is slow
        return ("d", tuple(sorted([(str(k), key(v)) for k, v in value.items()])))
    if kind is list or kind is tuple:
        return ("l", tuple([key(v) for v in value]))
    if kind is float:
        return ("f", struct.pack("<d", value))
    if kind is int or kind is str or kind is bool or value is None:
        return (kind.__name__, value)
    if isinstance(value, Mapping):
        return ("d", tuple(sorted([(str(k), key(v)) for k, v in value.items()])))
    if isinstance(value, (np.generic, np.ndarray)) and not np.asarray(value).dtype.hasobject:
        return key(np.array(value))
    raise Unkeyable(kind.__name__)


class Functions:
    """The callables bound in some namespaces (module ``vars``) right now, as a tuple that
    holds them (so an id is never reused): the part of a key that changes when a mutant or a
    test patches one of them.  The names are fixed at the first call, when the modules are
    complete; a patch replaces a value, it adds no name that the code would read."""

    def __init__(self, *namespaces: Mapping[str, Any]) -> None:
        self._namespaces = namespaces
        self._getters: list[Callable[[Mapping[str, Any]], Any]] | None = None

    def __call__(self) -> tuple[Any, ...]:
        if self._getters is None:
            self._getters = [
                _getter([k for k, v in ns.items() if callable(v) and not isinstance(v, ModuleType)])
                for ns in self._namespaces
            ]
        return tuple(get(ns) for get, ns in zip(self._getters, self._namespaces))


def _getter(names: list[str]) -> Callable[[Mapping[str, Any]], Any]:
    """``ns -> (ns[name] for name in names)`` as one C call (a tuple whatever the count)."""
    if len(names) > 1:
        return operator.itemgetter(*names)
    return lambda ns: tuple(ns[n] for n in names)


class Cache:
    """A small least-recently-used map from content keys to results."""

    def __init__(self, maxsize: int = MAXSIZE) -> None:
        self._data: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._maxsize = maxsize

    def get(self, make_key: Callable[[], Hashable], compute: Callable[[], Any]) -> Any:
        """``compute()``, or what it returned for an equal key before (not copied)."""
        try:
            k: Hashable | None = make_key()
        except Unkeyable:
            k = None
        if k is None:
            return compute()
        try:
            self._data.move_to_end(k)
            return self._data[k]
        except KeyError:
            pass
        value = compute()
        self._data[k] = value
        if len(self._data) > self._maxsize:
            self._data.popitem(last=False)
        return value

    def clear(self) -> None:
        self._data.clear()


def frozen(value: Any) -> Any:
    """``value`` with every array (in dicts, lists and tuples) made read-only, in place."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, dict):
        for v in value.values():
            frozen(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            frozen(v)
    return value


__all__ = ["Cache", "Functions", "Unkeyable", "frozen", "key"]
