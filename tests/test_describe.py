"""``fuzzkit describe`` and the targets' declared schemas.

The schema is what a newcomer reads instead of the source, so it must be *true*: cases drawn
from each target's own strategy must fit its declared inputs, and the reference's outputs on
them its declared outputs (a range narrower than what the strategy draws, a missing optional
key, a wrong dtype fail here).  The README's generated blocks must equal the current rendering.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from fuzzkit import describe, registry
from fuzzkit.cli import main
from fuzzkit.schema import Schema, Size, array, integer, ops, record, tagged, text
from fuzzkit.target import Implementation, Mutant, Target

README = Path(__file__).resolve().parent.parent / "README.md"
#: The targets fuzzkit ships (its own entry points), each of which must declare a schema.
SHIPPED = sorted(
    ep.name
    for ep in importlib.metadata.entry_points(group="fuzzkit.targets")
    if ep.value.startswith("fuzzkit.targets.")
)
#: Cases drawn per target for the schema check: fewer where the reference is dear.
EXAMPLES = {"ann": 10, "compiler": 8, "scute": 12, "paged_kv": 12}


def _run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _drawn(target: Target, count: int) -> list[dict[str, Any]]:
    """``count`` cases of the target's strategy, the same ones on every run."""
    cases: list[dict[str, Any]] = []

    @settings(
        max_examples=count,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(target.strategy_for(None))
    def draw(inputs: dict[str, Any]) -> None:
        cases.append(inputs)

    draw()
    return cases


# ----------------------------------------------------------------------------- the command


def test_every_shipped_target_declares_a_schema() -> None:
    assert len(SHIPPED) >= 8
    for name in SHIPPED:
        assert isinstance(registry.get_target(name).declared_schema(), Schema), name


@pytest.mark.parametrize("name", registry.target_names())
def test_describe_every_registered_target(capsys: Any, name: str) -> None:
    code, out, err = _run(capsys, "describe", name)
    assert (code, err) == (0, "")
    assert name in out and "mutants" in out and "implementations" in out
    code, out, err = _run(capsys, "describe", name, "--json")
    assert (code, err) == (0, "")
    described = json.loads(out)
    assert described["name"] == name
    target = registry.get_target(name)
    assert [m["name"] for m in described["mutants"]] == [m.name for m in target.mutants]
    for m in described["mutants"]:
        assert m["bug_class"] and m["implementation"] in target.implementations
    for impl in described["implementations"]:  # available here, or the one-line reason why not
        assert impl["available"] == (impl["unavailable"] is None)
    if name in SHIPPED:
        schema = described["schema"]
        assert schema["inputs"] and schema["outputs"] and schema["config"]
        code, out, _ = _run(capsys, "describe", "--markdown", name)
        assert code == 0 and "**Inputs**" in out and "**Outputs**" in out


def test_describe_text_shows_every_section(capsys: Any) -> None:
    code, out, _ = _run(capsys, "describe", "quant")
    assert code == 0
    for section in (
        "inputs",
        "outputs",
        "config keys",
        "sizes",
        "implementations",
        "mutants",
        "properties",
        "resource limits",
        "thresholds",
    ):
        assert f"\n{section}" in out, section
    for shown in (
        "rotation_seed",
        "float32 (n, D)",
        "8 | 16",
        "'lloyd_max' | 'uniform'",
        "pad-truncate",
        "rotation-orthogonal",
    ):
        assert shown in out, shown


def test_unknown_target_is_one_line_and_exit_2(capsys: Any) -> None:
    code, out, err = _run(capsys, "describe", "no-such-target")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "unknown target 'no-such-target'" in err


def test_describe_prints_target_text_literally(capsys: Any) -> None:
    """Target text is data: ``[x]`` is not rich markup, ``:clamp:`` not an emoji."""

    def identity(inputs: dict[str, Any]) -> dict[str, Any]:
        return dict(inputs)

    odd = Target(
        name="toy-markup",
        description="keeps [bold]x[/bold] and :clamp: as typed",
        strategy=lambda: None,
        reference=identity,
        implementations={"id": Implementation("id", identity, description="[red]r[/red]")},
        oracle=lambda inputs, expected, actual: None,
        mutants=[Mutant("mismatch:clamp:float16", "id", "[x] bug :smile:", "-", lambda: None)],
        schema=Schema(inputs=(text("[k]", ":clamp: [x]"),), outputs=()),
    )
    registry.register_target(odd, replace=True)
    try:
        code, out, _ = _run(capsys, "describe", "toy-markup")
    finally:
        registry.unregister_target("toy-markup")
    assert code == 0
    flat = " ".join(out.split())
    for literal in (
        "[bold]x[/bold]",
        ":clamp:",
        "[red]r[/red]",
        "mismatch:clamp:float16",
        "[x] bug :smile:",
        "[k]",
        ":clamp: [x]",
    ):
        assert literal in flat, out


def test_list_names_mutants_and_points_at_describe(capsys: Any) -> None:
    code, out, _ = _run(capsys, "list")
    assert code == 0
    assert "drops-last-term" in out  # toy-dot's one mutant, by name
    quant = registry.get_target("quant")
    assert f"{len(quant.mutants)}: {quant.mutants[0].name}" in " ".join(out.split())
    assert "fuzzkit describe TARGET" in out


def test_list_json_keeps_its_keys_and_adds_the_schema(capsys: Any) -> None:
    code, out, _ = _run(capsys, "list", "--json")
    assert code == 0
    listed = {t["name"]: t for t in json.loads(out)}
    for key in (
        "name",
        "description",
        "implementations",
        "thresholds",
        "limits",
        "properties",
        "mutants",
    ):
        assert key in listed["quant"], key
    assert listed["toy-dot"]["schema"] is None
    assert listed["quant"]["schema"]["sizes"][0]["name"] == "n"


# ----------------------------------------------------------------- the schemas are honest


@pytest.mark.parametrize("name", SHIPPED)
def test_drawn_cases_and_reference_outputs_fit_the_schema(name: str) -> None:
    target = registry.get_target(name)
    schema = target.declared_schema()
    assert schema is not None
    for inputs in _drawn(target, EXAMPLES.get(name, 20)):
        assert schema.input_problems(inputs) == [], inputs
        outputs = target.reference(inputs)
        assert schema.output_problems(outputs, inputs) == []


def _narrowed(schema: Schema, field: str, **changes: Any) -> Schema:
    fields = tuple(
        dataclasses.replace(f, **changes) if f.name == field else f for f in schema.inputs
    )
    return dataclasses.replace(schema, inputs=fields)


@pytest.mark.parametrize(
    "narrowing",
    [
        ("bits", {"choices": (8,)}),  # the strategy draws turbo16 too
        ("rotation_seed", {"bounds": (0, 2**32)}),  # ... and seeds up to 2**64 - 1
    ],
)
def test_a_narrowed_range_is_caught(narrowing: tuple[str, dict[str, Any]]) -> None:
    """What the honesty test rests on: a declared range narrower than what the strategy draws
    makes some drawn case fail validation."""
    quant = registry.get_target("quant")
    schema = quant.declared_schema()
    assert schema is not None
    field, changes = narrowing
    narrowed = _narrowed(schema, field, **changes)
    cases = _drawn(quant, 30)
    assert all(schema.input_problems(c) == [] for c in cases)
    assert any(narrowed.input_problems(c) for c in cases)


def test_a_narrowed_size_is_caught() -> None:
    quant = registry.get_target("quant")
    schema = quant.declared_schema()
    assert schema is not None
    narrowed = dataclasses.replace(
        schema, sizes=tuple(Size(s.name, 1, s.hi) if s.name == "n" else s for s in schema.sizes)
    )
    cases = _drawn(quant, 30)
    assert any("n = 0 outside" in " ".join(narrowed.input_problems(c)) for c in cases)


# ------------------------------------------------------------------------------- validator


SMALL = Schema(
    inputs=(
        integer("k", "results", 1, 8, binds="k"),
        array("x", "float32", ("n", "d"), "rows", -1.0, 1.0),
        record(
            "config",
            (text("mode", "", ("a", "b")), integer("w", "", 1, optional=True, nullable=True)),
            "",
        ),
        ops("program", {"add": (integer("rid", "", 0),), "reset": ()}, "steps", (0, 3)),
        tagged("policy", {"fifo": (), "lpm": (integer("limit", "", 0),)}, "", tag="name"),
    ),
    outputs=(array("ids", "int64", ("n", "k"), "", -1),),
    sizes=(Size("n", 0, 4), Size("d", 1, 2), Size("k", 1, 8)),
)


def _small_case(**changes: Any) -> dict[str, Any]:
    case = {
        "k": 2,
        "x": np.zeros((3, 2), np.float32),
        "config": {"mode": "a"},
        "program": [{"op": "add", "rid": 0}, {"op": "reset"}],
        "policy": {"name": "fifo"},
    }
    return {**case, **changes}


def test_validator_accepts_a_fitting_case_and_outputs() -> None:
    assert SMALL.input_problems(_small_case()) == []
    ids = np.zeros((3, 2), np.int64)
    assert SMALL.output_problems({"ids": ids}, _small_case()) == []


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"k": 9}, "outside [1, 8]"),
        ({"k": True}, "expected int"),
        ({"x": np.zeros((3, 2), np.float64)}, "dtype float64"),
        ({"x": np.full((3, 2), 2.0, np.float32)}, "outside [-1, 1]"),
        ({"x": np.zeros((5, 2), np.float32)}, "n = 5 outside"),
        ({"x": np.zeros((3,), np.float32)}, "1 axes"),
        ({"config": {"mode": "c"}}, "not one of"),
        ({"config": {}}, "missing 'mode'"),
        ({"config": {"mode": "a", "w": None, "extra": 1}}, "undeclared key 'extra'"),
        ({"program": [{"op": "jump"}]}, "op 'jump' not one of"),
        ({"program": [{"op": "add"}]}, "missing 'rid'"),
        ({"program": [{"op": "reset"}] * 4}, "length 4 outside"),
        ({"policy": {"name": "lpm"}}, "missing 'limit'"),
        ({"surprise": 1}, "undeclared key 'surprise'"),
    ],
)
def test_validator_names_what_is_wrong(changes: dict[str, Any], needle: str) -> None:
    problems = SMALL.input_problems(_small_case(**changes))
    assert any(needle in p for p in problems), problems


def test_sizes_bind_across_inputs_and_outputs() -> None:
    wrong = {"ids": np.zeros((3, 5), np.int64)}  # k is 2 in the inputs
    problems = SMALL.output_problems(wrong, _small_case())
    assert any("k = 5, but k = 2" in p for p in problems), problems


# ---------------------------------------------------------------------------------- README


def test_readme_blocks_are_current() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = describe.readme_blocks(text)
    assert sorted(blocks) == SHIPPED, "every shipped target needs a <!-- describe:NAME --> block"
    for name, body in blocks.items():
        assert body == describe.markdown(registry.get_target(name)), (
            f"README block {name} is stale: run python scripts/readme_describe.py"
        )
        assert f"fuzzkit describe {name}" in text


def test_sync_readme_replaces_only_the_blocks() -> None:
    text = (
        "intro\n<!-- describe:a -->\nold\n<!-- /describe:a -->\nmiddle\n"
        "<!-- describe:b -->\n<!-- /describe:b -->\nend\n"
    )
    synced = describe.sync_readme(text, render=lambda name: f"new {name}\n")
    assert synced == (
        "intro\n<!-- describe:a -->\nnew a\n<!-- /describe:a -->\nmiddle\n"
        "<!-- describe:b -->\nnew b\n<!-- /describe:b -->\nend\n"
    )
    assert describe.readme_blocks(synced) == {"a": "new a\n", "b": "new b\n"}
