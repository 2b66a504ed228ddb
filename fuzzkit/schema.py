"""What an implementation receives and must return, declared as data.

Why: a target's contract used to live only in its docstring, so a newcomer read source for ten
minutes to learn what ``inputs`` holds.  A :class:`Schema` says it once, as plain dataclasses:
each field's name, kind (int, float, bool, str, array with dtype and symbolic shape such as
``("n", "D")``, list, record, mapping, tagged operations), its range or choices where bounded,
and a one-line meaning.  ``fuzzkit describe`` renders it (:mod:`fuzzkit.describe`), and
:meth:`Schema.input_problems` / :meth:`Schema.output_problems` check a value against it -- the
tests draw cases from each target's strategy and run the reference on them, so a declared range
that the strategy or the reference does not honour fails a test instead of misleading a reader.

The validator is generic: it knows kinds, never a target.  Symbolic sizes bind across one case
(inputs and outputs together), so ``vectors (n, D)`` and ``scores (m, n)`` must agree, and each
size must lie in the range its :class:`Size` declares.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

#: The kinds a field may have; ``scalar`` kinds are what ``describe`` lists as config keys.
SCALAR_KINDS = ("int", "float", "bool", "str")
KINDS = (*SCALAR_KINDS, "array", "list", "record", "mapping", "tagged", "any")

#: A bound: inclusive, None for unbounded on that side.
Bound = tuple[float | None, float | None]


@dataclasses.dataclass(frozen=True)
class Field:
    """One named value of a case or of an output.  Build with the helpers below
    (:func:`integer`, :func:`array`, :func:`record`, ...), not by hand."""

    name: str
    kind: str
    meaning: str = ""
    #: May be absent from its record (its default is said in ``meaning``).
    optional: bool = False
    #: May be ``None`` (JSON null).
    nullable: bool = False
    #: Numbers: the value's range; arrays: every finite element's range.
    bounds: Bound | None = None
    #: Ints and strings: the allowed values (empty: any within ``bounds``).
    choices: tuple[Any, ...] = ()
    #: Arrays: allowed dtypes (NumPy names; empty: any); a JSON list is accepted for any.
    dtypes: tuple[str, ...] = ()
    #: Arrays: the shape, each axis an int or a size's symbol (``"n"``) or ``"*"`` (any).
    shape: tuple[int | str, ...] = ()
    #: Lists: the length, as a bound or a size's symbol.
    length: Bound | str | None = None
    #: Records: the fields; tagged: the fields every variant shares.
    fields: tuple[Field, ...] = ()
    #: Lists and mappings: what each item (each value) is.
    items: Field | None = None
    #: Tagged records: variant name (the value of ``tag``) -> the variant's own fields.
    variants: tuple[tuple[str, tuple[Field, ...]], ...] = ()
    tag: str = "op"
    #: Records: whether keys not declared are allowed (an implementation's own diagnostics).
    open: bool = False
    #: Ints: the size symbol this value is (``k`` in ``ids (q, k)``), checked like a shape.
    binds: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"field {self.name!r}: unknown kind {self.kind!r} (known: {KINDS})")

    def type_text(self) -> str:
        """A compact type for a table cell: ``float32 (n, D)``, ``list[record]``, ``int``."""
        if self.kind == "array":
            dtype = " | ".join(self.dtypes) or "array"
            if not self.shape:
                return f"{dtype} (any shape)"
            return (
                f"{dtype} ({', '.join(str(a) for a in self.shape)}{',' * (len(self.shape) == 1)})"
            )
        if self.kind == "list" and self.items is not None:
            inner = self.items.type_text()
            return f"list[{inner}]" + (f" ({self.length})" if isinstance(self.length, str) else "")
        if self.kind == "mapping" and self.items is not None:
            return f"mapping[str, {self.items.type_text()}]"
        if self.kind == "tagged":
            return f"record by {self.tag}"
        text = self.kind
        return f"{text} | null" if self.nullable else text

    def tag_field(self) -> Field:
        """A tagged record's tag as a field of its own: which variant, with every name."""
        names = tuple(name for name, _ in self.variants)
        return Field(self.tag, "str", self.meaning, choices=names)

    def range_text(self) -> str:
        """The range or choices as text (empty when unbounded)."""
        if self.choices:
            return " | ".join(json_text(c) for c in self.choices)
        parts = []
        if self.bounds is not None:
            parts.append(_bound_text(self.bounds))
        if self.length is not None and not isinstance(self.length, str):
            parts.append(f"length {_bound_text(self.length)}")
        return ", ".join(parts)


@dataclasses.dataclass(frozen=True)
class Size:
    """A symbolic size (``n``, ``D``) and the range a case may have it in: the strategy draws
    within it (mostly far below ``hi``, which is often the target's resource limit), and a case
    outside it fails validation."""

    name: str
    lo: int
    hi: int | None
    meaning: str = ""


@dataclasses.dataclass(frozen=True)
class Schema:
    """A target's contract: the fields of ``inputs``, of the outputs, and the symbolic sizes.

    ``outputs`` are the fields of the dict an implementation returns; the reference may return
    more (diagnostics for the oracle), declared as optional fields saying so."""

    inputs: tuple[Field, ...]
    outputs: tuple[Field, ...]
    sizes: tuple[Size, ...] = ()
    #: A sentence or two a table cannot say (how fields relate, where the details are).
    notes: str = ""

    def config_keys(self) -> list[tuple[str, Field]]:
        """The scalar knobs of a case, as ``(dotted path, field)``: top-level scalars and the
        scalars of records (not of list items: those are data, not configuration)."""
        return list(_scalars(self.inputs, ""))

    def input_problems(self, inputs: Any) -> list[str]:
        """Every way ``inputs`` breaks the declared input schema (empty: it fits)."""
        return _Checker(self.sizes).record(self.inputs, inputs, "inputs", open_=False)

    def output_problems(self, outputs: Any, inputs: Any = None) -> list[str]:
        """Every way ``outputs`` break the output schema; sizes bound by ``inputs`` (when
        given) must agree with the outputs' shapes."""
        checker = _Checker(self.sizes)
        if inputs is not None:
            checker.record(self.inputs, inputs, "inputs", open_=True)
            checker.problems.clear()  # the inputs bind the sizes; judged elsewhere
        return checker.record(self.outputs, outputs, "outputs", open_=False)

    def to_json(self) -> dict[str, Any]:
        """A JSON form (``fuzzkit describe --json``)."""
        return {
            "inputs": [field_json(f) for f in self.inputs],
            "outputs": [field_json(f) for f in self.outputs],
            "sizes": [dataclasses.asdict(s) for s in self.sizes],
            "config": [
                {"key": path, "type": f.type_text(), "range": f.range_text(), "meaning": f.meaning}
                for path, f in self.config_keys()
            ],
            "notes": self.notes,
        }


# ------------------------------------------------------------------------------- constructors


def integer(
    name: str,
    meaning: str,
    lo: int | None = None,
    hi: int | None = None,
    *,
    choices: Sequence[int] = (),
    **extra: Any,
) -> Field:
    return Field(name, "int", meaning, bounds=_bound(lo, hi), choices=tuple(choices), **extra)


def number(
    name: str, meaning: str, lo: float | None = None, hi: float | None = None, **extra: Any
) -> Field:
    return Field(name, "float", meaning, bounds=_bound(lo, hi), **extra)


def boolean(name: str, meaning: str, **extra: Any) -> Field:
    return Field(name, "bool", meaning, **extra)


def text(name: str, meaning: str, choices: Sequence[str] = (), **extra: Any) -> Field:
    return Field(name, "str", meaning, choices=tuple(choices), **extra)


def array(
    name: str,
    dtypes: str | Sequence[str],
    shape: Sequence[int | str],
    meaning: str,
    lo: float | None = None,
    hi: float | None = None,
    **extra: Any,
) -> Field:
    listed = (dtypes,) if isinstance(dtypes, str) else tuple(dtypes)
    return Field(
        name, "array", meaning, dtypes=listed, shape=tuple(shape), bounds=_bound(lo, hi), **extra
    )


def listing(
    name: str,
    item: Field,
    meaning: str,
    length: Bound | str | None = None,
    **extra: Any,
) -> Field:
    return Field(name, "list", meaning, items=item, length=length, **extra)


def record(name: str, fields: Sequence[Field], meaning: str, **extra: Any) -> Field:
    return Field(name, "record", meaning, fields=tuple(fields), **extra)


def mapping(name: str, values: Field, meaning: str, **extra: Any) -> Field:
    return Field(name, "mapping", meaning, items=values, **extra)


def tagged(
    name: str,
    variants: Mapping[str, Sequence[Field]],
    meaning: str,
    tag: str = "op",
    shared: Sequence[Field] = (),
    **extra: Any,
) -> Field:
    """A record whose ``tag`` key says which variant it is (an operation, a policy, an adapter
    method), each variant with its own fields besides the ``shared`` ones."""
    return Field(
        name,
        "tagged",
        meaning,
        variants=tuple((op, tuple(fields)) for op, fields in variants.items()),
        fields=tuple(shared),
        tag=tag,
        **extra,
    )


def ops(
    name: str,
    variants: Mapping[str, Sequence[Field]],
    meaning: str,
    length: Bound | str | None = None,
    tag: str = "op",
    **extra: Any,
) -> Field:
    """A program: a list of records tagged by ``tag``, each operation with its own fields."""
    return listing(
        name, tagged("step", variants, "the operation", tag=tag), meaning, length, **extra
    )


def anything(name: str, meaning: str, **extra: Any) -> Field:
    return Field(name, "any", meaning, **extra)


# ---------------------------------------------------------------------------------- rendering


def field_json(field: Field) -> dict[str, Any]:
    """One field as JSON (nested fields included)."""
    out: dict[str, Any] = {
        "name": field.name,
        "kind": field.kind,
        "type": field.type_text(),
        "meaning": field.meaning,
    }
    if field.optional:
        out["optional"] = True
    if field.nullable:
        out["nullable"] = True
    if field.bounds is not None:
        out["range"] = list(field.bounds)
    if field.binds is not None:
        out["size"] = field.binds
    if field.choices:
        out["choices"] = list(field.choices)
    if field.kind == "array":
        out["dtypes"] = list(field.dtypes)
        out["shape"] = list(field.shape)
    if field.length is not None:
        out["length"] = field.length if isinstance(field.length, str) else list(field.length)
    if field.fields:
        out["fields"] = [field_json(f) for f in field.fields]
    if field.items is not None:
        out["items"] = field_json(field.items)
    if field.variants:
        out["tag"] = field.tag
        out["variants"] = {op: [field_json(f) for f in fs] for op, fs in field.variants}
    return out


def walk(fields: Sequence[Field], prefix: str = "") -> Iterator[tuple[str, Field]]:
    """Every field with its dotted path (``config.block_size``, ``requests[].rid``,
    ``program[op=add].tokens``), depth first: what the tables list row by row."""
    for f in fields:
        path = f"{prefix}{f.name}"
        yield path, f
        yield from _inside(f, path)


def _inside(f: Field, path: str) -> Iterator[tuple[str, Field]]:
    """The fields nested in ``f``: a record's, a tagged record's per variant, and those of a
    list's or a mapping's items (``path[]`` / ``path{}``) without a row for the item itself."""
    if f.kind == "tagged":
        yield f"{path}.{f.tag}", f.tag_field()
    yield from walk(f.fields, f"{path}.")
    for variant, variant_fields in f.variants:  # program[op=add].rid, not program[][op=add]
        yield from walk(variant_fields, f"{path.removesuffix('[]')}[{f.tag}={variant}].")
    if f.items is not None:
        yield from _inside(f.items, f"{path}{'[]' if f.kind == 'list' else '{}'}")


def json_text(value: Any) -> str:
    return "null" if value is None else repr(value) if isinstance(value, str) else str(value)


def _bound_text(bound: Bound) -> str:
    lo, hi = bound
    if lo is not None and hi is not None:
        return f"[{_num(lo)}, {_num(hi)}]"
    if lo is not None:
        return f">= {_num(lo)}"
    return f"<= {_num(hi)}" if hi is not None else ""


def _num(value: float) -> str:
    if isinstance(value, int) and value >= 2**16 and value & (value - 1) == 0:
        return f"2**{value.bit_length() - 1}"
    if isinstance(value, int) and value + 1 >= 2**16 and (value + 1) & value == 0:
        return f"2**{value.bit_length()} - 1"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bound(lo: float | None, hi: float | None) -> Bound | None:
    return None if lo is None and hi is None else (lo, hi)


def _scalars(fields: Sequence[Field], prefix: str) -> Iterator[tuple[str, Field]]:
    for f in fields:
        if f.kind in SCALAR_KINDS:
            yield f"{prefix}{f.name}", f
        elif f.kind == "record":
            yield from _scalars(f.fields, f"{prefix}{f.name}.")
        elif f.kind == "tagged":
            yield f"{prefix}{f.name}.{f.tag}", f.tag_field()
            yield from _scalars(f.fields, f"{prefix}{f.name}.")
            for variant, variant_fields in f.variants:
                yield from _scalars(variant_fields, f"{prefix}{f.name}[{f.tag}={variant}].")


# ---------------------------------------------------------------------------------- validator


class _Checker:
    """Checks values against fields, binding symbolic sizes as it meets them."""

    def __init__(self, sizes: Sequence[Size]) -> None:
        self.sizes = {s.name: s for s in sizes}
        self.found: dict[str, tuple[int, str]] = {}
        self.problems: list[str] = []

    def record(self, fields: Sequence[Field], value: Any, where: str, open_: bool) -> list[str]:
        self._record(fields, value, where, open_)
        return self.problems

    def _say(self, where: str, message: str) -> None:
        if len(self.problems) < 20:  # the first few say enough; a broken case says thousands
            self.problems.append(f"{where}: {message}")

    def _record(self, fields: Sequence[Field], value: Any, where: str, open_: bool) -> None:
        if not isinstance(value, Mapping):
            self._say(where, f"expected a record, got {type(value).__name__}")
            return
        declared = {f.name for f in fields}
        for f in fields:
            if f.name not in value:
                if not f.optional:
                    self._say(where, f"missing {f.name!r}")
                continue
            self._value(f, value[f.name], f"{where}.{f.name}")
        if not open_:
            for key in value:
                if key not in declared:
                    self._say(where, f"undeclared key {key!r}")

    def _value(self, f: Field, value: Any, where: str) -> None:
        if value is None:
            if not f.nullable and f.kind != "any":
                self._say(where, "is null")
            return
        check = getattr(self, f"_check_{f.kind}")
        check(f, value, where)

    def _check_any(self, f: Field, value: Any, where: str) -> None:
        pass

    def _check_bool(self, f: Field, value: Any, where: str) -> None:
        if not isinstance(value, (bool, np.bool_)):
            self._say(where, f"expected bool, got {value!r:.40}")

    def _check_int(self, f: Field, value: Any, where: str) -> None:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            self._say(where, f"expected int, got {value!r:.40}")
            return
        self._number(f, int(value), where)
        if f.binds is not None:
            self._size(f.binds, int(value), where)

    def _check_float(self, f: Field, value: Any, where: str) -> None:
        if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)
        ):
            self._say(where, f"expected a number, got {value!r:.40}")
            return
        self._number(f, float(value), where)

    def _number(self, f: Field, value: float, where: str) -> None:
        if f.choices and value not in f.choices:
            self._say(where, f"{value} not one of {list(f.choices)}")
        if f.bounds is not None and not _within(value, f.bounds):
            self._say(where, f"{value} outside {_bound_text(f.bounds)}")

    def _check_str(self, f: Field, value: Any, where: str) -> None:
        if not isinstance(value, str):
            self._say(where, f"expected str, got {value!r:.40}")
        elif f.choices and value not in f.choices:
            self._say(where, f"{value!r} not one of {list(f.choices)}")

    def _check_array(self, f: Field, value: Any, where: str) -> None:
        if isinstance(value, np.ndarray):
            if f.dtypes and value.dtype.name not in f.dtypes:
                self._say(where, f"dtype {value.dtype.name} not one of {list(f.dtypes)}")
            data = value
        else:
            try:
                data = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                self._say(where, "expected an array (or a nested list of numbers)")
                return
        if f.shape and data.ndim != len(f.shape):
            self._say(where, f"{data.ndim} axes, expected {len(f.shape)} {tuple(f.shape)}")
            return
        for axis, (symbol, actual) in enumerate(zip(f.shape, data.shape)):
            self._size(symbol, int(actual), f"{where} axis {axis}")
        if f.bounds is not None and data.size and data.dtype.kind in "biuf":
            finite = data[np.isfinite(data)] if data.dtype.kind == "f" else data
            if finite.size:
                lo, hi = float(finite.min()), float(finite.max())
                if not (_within(lo, f.bounds) and _within(hi, f.bounds)):
                    self._say(where, f"elements [{lo:g}, {hi:g}] outside {_bound_text(f.bounds)}")

    def _check_list(self, f: Field, value: Any, where: str) -> None:
        if not isinstance(value, (list, tuple)):
            self._say(where, f"expected a list, got {type(value).__name__}")
            return
        self._length(f, len(value), where)
        if f.items is not None:
            for i, item in enumerate(value):
                self._value(f.items, item, f"{where}[{i}]")

    def _check_record(self, f: Field, value: Any, where: str) -> None:
        self._record(f.fields, value, where, f.open)

    def _check_mapping(self, f: Field, value: Any, where: str) -> None:
        if not isinstance(value, Mapping):
            self._say(where, f"expected a mapping, got {type(value).__name__}")
            return
        if f.items is not None:
            for key, item in value.items():
                self._value(f.items, item, f"{where}[{key!r}]")

    def _check_tagged(self, f: Field, value: Any, where: str) -> None:
        variants = dict(f.variants)
        variant = value.get(f.tag) if isinstance(value, Mapping) else None
        if variant not in variants:
            self._say(where, f"{f.tag} {variant!r} not one of {list(variants)}")
            return
        fields = (f.tag_field(), *f.fields, *variants[variant])
        self._record(fields, value, where, f.open)

    def _length(self, f: Field, length: int, where: str) -> None:
        if isinstance(f.length, str):
            self._size(f.length, length, f"{where} length")
        elif f.length is not None and not _within(length, f.length):
            self._say(where, f"length {length} outside {_bound_text(f.length)}")

    def _size(self, symbol: int | str, actual: int, where: str) -> None:
        if symbol == "*":
            return
        if isinstance(symbol, int):
            if actual != symbol:
                self._say(where, f"is {actual}, expected {symbol}")
            return
        if symbol in self.found and self.found[symbol][0] != actual:
            value, first = self.found[symbol]
            self._say(where, f"{symbol} = {actual}, but {symbol} = {value} at {first}")
            return
        self.found.setdefault(symbol, (actual, where))
        size = self.sizes.get(symbol)
        if size is None:
            self._say(where, f"size {symbol!r} is not declared in the schema's sizes")
        elif not _within(actual, (size.lo, size.hi)):
            self._say(where, f"{symbol} = {actual} outside {_bound_text((size.lo, size.hi))}")


def _within(value: float, bound: Bound) -> bool:
    lo, hi = bound
    if isinstance(value, float) and math.isnan(value):
        return False
    return (lo is None or value >= lo) and (hi is None or value <= hi)
