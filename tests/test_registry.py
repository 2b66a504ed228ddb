"""Targets and implementations from the decorator and from entry points."""

from __future__ import annotations

import importlib.metadata

import pytest

from fuzzkit import registry
from fuzzkit.errors import UsageError

import toy_targets


@pytest.fixture
def fake_entry_points(monkeypatch):
    points = {
        "fuzzkit.targets": [importlib.metadata.EntryPoint(
            "plugged-dot", "toy_targets:plugged_dot_target", "fuzzkit.targets")],
        "fuzzkit.implementations": [importlib.metadata.EntryPoint(
            "plugged-dot.theirs", "toy_targets:_outside_buggy", "fuzzkit.implementations")],
    }
    monkeypatch.setattr(registry.importlib.metadata, "entry_points",
                        lambda group: points.get(group, []))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    yield
    registry.unregister_target("plugged-dot")


def test_entry_points_add_targets_and_implementations(fake_entry_points) -> None:
    assert "plugged-dot" in registry.target_names()
    target = registry.get_target("plugged-dot")
    assert set(target.implementations) == {"numpy", "theirs"}
    assert target.implementations["theirs"].backend == "external"
    assert registry.get_target("plugged-dot") is target  # built once


def test_decorator_forms() -> None:
    @registry.register_target("deco-a")
    def factory():
        return toy_targets.dot_target()

    registry.register_target(toy_targets.alloc_target(), replace=True)
    try:
        assert registry.get_target("deco-a").name == "toy-dot"
        with pytest.raises(ValueError, match="already registered"):
            registry.register_target("deco-a")(lambda: toy_targets.dot_target())
    finally:
        registry.unregister_target("deco-a")
        registry.register_target("toy-alloc", replace=True)(toy_targets.alloc_target)


def test_resolve_implementation_and_errors(dot) -> None:
    impl = registry.resolve_implementation(dot, "toy_targets:_outside_buggy")
    assert impl.name == "toy_targets:_outside_buggy" and impl.backend == "external"
    with pytest.raises(UsageError, match="not of the form module:attr"):
        registry.load_object("toy_targets:")
    with pytest.raises(UsageError, match="not a callable"):
        registry.resolve_implementation(dot, "toy_targets:__name__")


def test_shipped_targets_come_from_entry_points_only(monkeypatch) -> None:
    """The engine names no target: without the ``fuzzkit.targets`` entry points there are none
    but the ones registered in-process, and with them each shipped one is an entry point."""
    shipped = {ep.name: ep.value
               for ep in importlib.metadata.entry_points(group="fuzzkit.targets")}
    assert {"compiler", "quant", "scheduling"} <= set(shipped)
    assert not hasattr(registry, "BUILTIN_TARGETS")
    for name in shipped:
        assert registry.from_entry_point(name) and name in registry.target_names()
    assert not registry.from_entry_point("toy-dot")  # registered by conftest, in-process

    monkeypatch.setattr(registry, "_sources", {})
    monkeypatch.setattr(registry, "_built", {})
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    monkeypatch.setattr(registry.importlib.metadata, "entry_points", lambda group: [])
    assert registry.target_names() == []
    with pytest.raises(UsageError, match="unknown target 'compiler'"):
        registry.get_target("compiler")


def test_no_entry_points_at_all_says_to_install(monkeypatch) -> None:
    """A checkout run without installing has no entry points: the error says how to fix it."""
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [])
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    monkeypatch.setattr(registry, "_sources", {})
    monkeypatch.setattr(registry, "_built", {})
    with pytest.raises(UsageError, match="pip install -e ."):
        registry.get_target("quant")
