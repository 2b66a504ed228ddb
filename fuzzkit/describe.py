"""``fuzzkit describe TARGET``: everything a newcomer needs to know about a target, from the
Target itself.

Why generated: a contract written once in a docstring and again in the README drifts.  Here
the text, JSON and Markdown views all come from the :class:`~fuzzkit.target.Target` and its
:class:`~fuzzkit.schema.Schema`; the README's "Inputs and outputs" blocks are this module's
Markdown between marker comments (:func:`sync_readme` rewrites them, a test checks they are
current).

Every piece of text a target supplies is data: the terminal view escapes rich markup in it, so
``[x]`` and ``:name:`` print literally.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from fuzzkit.schema import Field, Schema, walk

#: The README's generated blocks: ``<!-- describe:NAME -->`` ... ``<!-- /describe:NAME -->``.
BLOCK = re.compile(
    r"(<!-- describe:(?P<name>[A-Za-z0-9_.-]+) -->\n)(?P<body>.*?)(<!-- /describe:(?P=name) -->)",
    re.DOTALL,
)


def field_rows(fields: Sequence[Field]) -> list[tuple[str, str, str, str]]:
    """``(path, type, range, meaning)`` per field, nested fields by dotted path; optional and
    nullable fields say so in the type."""
    rows = []
    for path, f in walk(fields):
        kind = f.type_text()
        if f.nullable and "null" not in kind:
            kind += " | null"
        if f.optional:
            kind += ", optional"
        rows.append((path, kind, f.range_text(), f.meaning))
    return rows


# ------------------------------------------------------------------------------------ Markdown


def markdown(target: Any) -> str:
    """The schema part of ``describe`` as Markdown (what the README's blocks hold)."""
    schema: Schema | None = target.declared_schema()
    name = target.name
    if schema is None:
        return f"Target `{name}` declares no schema; `fuzzkit describe {name}` shows the rest.\n"
    out = ["**Inputs** (what an implementation receives):", ""]
    out += _md_table(("field", "type", "range", "meaning"), field_rows(schema.inputs))
    out += ["", "**Outputs** (what it must return):", ""]
    out += _md_table(("field", "type", "range", "meaning"), field_rows(schema.outputs))
    if schema.sizes:
        out += ["", "**Sizes** (symbols in the shapes above):", ""]
        out += _md_table(
            ("size", "range", "meaning"),
            [(s.name, _size_range(s.lo, s.hi), s.meaning) for s in schema.sizes],
        )
    if schema.notes:
        out += ["", schema.notes.replace("<", "&lt;")]
    return "\n".join(out) + "\n"


def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [
            _md_cell(cell, code=i < 2 or (i == 2 and len(header) == 4))
            for i, cell in enumerate(row)
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _md_cell(text: str, code: bool) -> str:
    if not text:
        return ""
    if code:
        return "`" + text.replace("`", "'").replace("|", "\\|") + "`"
    # "<R q, c>" would be read as an HTML tag, "|" as a column break
    return text.replace("<", "&lt;").replace("|", "\\|").replace("\n", " ")


def _size_range(lo: int, hi: int | None) -> str:
    return f"{lo}..{hi}" if hi is not None else f">= {lo}"


def sync_readme(text: str, render: Any = None) -> str:
    """``text`` with every ``describe:NAME`` block's body replaced by the current Markdown of
    target NAME (``render(name)``; default: :func:`markdown` of the registered target)."""
    if render is None:
        from fuzzkit.registry import get_target

        def render(name: str) -> str:
            return markdown(get_target(name))

    return BLOCK.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)


def readme_blocks(text: str) -> dict[str, str]:
    """The README's generated blocks: target name -> body."""
    return {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}


# ------------------------------------------------------------------------------------ terminal


def renderables(target: Any) -> list[Any]:
    """The terminal view: a header and one rich table per section, all target text escaped."""
    from rich.text import Text

    info = target.describe()
    schema: Schema | None = target.declared_schema()
    out: list[Any] = [Text(f"{target.name}: {target.description}", style="bold")]
    if schema is None:
        out.append(Text("no input/output schema declared"))
    else:
        out.append(
            _table("inputs", ("field", "type", "range", "meaning"), field_rows(schema.inputs))
        )
        out.append(
            _table("outputs", ("field", "type", "range", "meaning"), field_rows(schema.outputs))
        )
        out.append(
            _table(
                "config keys",
                ("key", "type", "range", "meaning"),
                [
                    (path, f.type_text(), f.range_text(), f.meaning)
                    for path, f in schema.config_keys()
                ],
            )
        )
        if schema.sizes:
            out.append(
                _table(
                    "sizes",
                    ("size", "range", "meaning"),
                    [(s.name, _size_range(s.lo, s.hi), s.meaning) for s in schema.sizes],
                )
            )
        if schema.notes:
            out.append(Text(schema.notes))
    out.append(
        _table(
            "implementations",
            ("name", "backend", "here", "options", "description"),
            [
                (
                    i["name"],
                    i["backend"],
                    _availability(i),
                    "yes" if i["takes_options"] else "",
                    i["description"],
                )
                for i in info["implementations"]
            ],
        )
    )
    out.append(
        _table(
            "mutants",
            ("name", "implementation", "bug class"),
            [(m["name"], m["implementation"], m["bug_class"]) for m in info["mutants"]],
        )
    )
    described = info["property_descriptions"]
    out.append(
        _table(
            "properties",
            ("name", "checks"),
            [(name, described.get(name, "")) for name in info["properties"]],
        )
    )
    out.append(
        _table(
            "resource limits",
            ("name", "default", "what"),
            [(lim["name"], str(lim["default"]), lim["what"]) for lim in info["limits"]],
        )
    )
    out.append(_table("thresholds", ("where", "size", "value", "what"), _threshold_rows(info)))
    return out


def _availability(impl: Mapping[str, Any]) -> str:
    return "available" if impl["available"] else f"unavailable: {impl['unavailable']}"


def _threshold_rows(info: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    rows = [("target", t["size"], str(t["value"]), t["what"]) for t in info["thresholds"]]
    for impl in info["implementations"]:
        rows += [(impl["name"], t["size"], str(t["value"]), t["what"]) for t in impl["thresholds"]]
    return rows


def _table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title), title_justify="left", show_lines=False)
    for column in columns:
        table.add_column(escape(column), overflow="fold")
    for row in rows:
        table.add_row(*(escape(str(cell)) for cell in row))
    return table
