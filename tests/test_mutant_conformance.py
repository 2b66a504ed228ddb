"""One conformance test for the mutants of every shipped target, and the vocabulary they use.

A mutant is only evidence about the oracles if applying it really changes the code under test,
leaves nothing behind, and still edits the code it claims to edit.  Every target declares its
mutants through :mod:`fuzzkit.mutants`, so these checks run unchanged over all of them: a
target that goes back to a hand-written context manager, patches a renamed function, or keeps an
anchor line that has drifted fails here.  Each check has a negative test below showing that it
fails on a deliberately bad mutant.

The targets are the ones the project ships (the ``fuzzkit.targets`` entry points); the toy
targets the test suite registers in-process are fixtures of other tests, not shipped mutants.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

from fuzzkit.mutants import Patch, derived, patch, source_edit
from fuzzkit.registry import get_target
from fuzzkit.target import Mutant, Target

SHIPPED = sorted({ep.name for ep in importlib.metadata.entry_points(group="fuzzkit.targets")})
_MISSING = object()


# ============================================================================ the checks


def check_names(mutants: Sequence[Mutant]) -> None:
    names = [m.name for m in mutants]
    repeated = sorted({n for n in names if names.count(n) > 1})
    assert not repeated, f"mutant names used twice: {repeated}"


def check_record(target: Target, mutant: Mutant) -> None:
    assert mutant.bug_class.strip(), f"{mutant.name}: empty bug_class"
    assert mutant.citation.strip(), f"{mutant.name}: empty citation"
    assert mutant.implementation in target.implementations, (
        f"{mutant.name}: implementation {mutant.implementation!r} is not one of "
        f"{sorted(target.implementations)}"
    )


def check_vocabulary(mutant: Mutant) -> None:
    assert isinstance(mutant.patch, Patch), (
        f"{mutant.name}: patch is {type(mutant.patch).__name__}, not a fuzzkit.mutants.Patch "
        "(declare it with patch(...) or source_edit(...))"
    )


def check_anchors(p: Patch) -> None:
    """Each ``old`` line of each source edit occurs exactly once in the source as edited so far
    (counted here, independently of the vocabulary's own refusal)."""
    for edit in p.edits:
        if not edit.lines:
            continue
        module = edit.resolve()
        source = Path(module.__file__).read_text()
        for old, new in edit.lines:
            found = source.count(old)
            assert found == 1, (
                f"{module.__name__}.{edit.attribute}: anchor {old.strip()!r} occurs {found} "
                "times (expected once)"
            )
            source = source.replace(old, new)


def _snapshot(sites: list[tuple[Any, str]]) -> list[Any]:
    """What each owner itself holds under each name (``vars``, not ``getattr``: a classmethod
    gives a new bound method per lookup, an inherited method is not the owner's own)."""
    return [vars(owner).get(name, _MISSING) for owner, name in sites]


def _same(a: list[Any], b: list[Any]) -> bool:
    return all(x is y for x, y in zip(a, b))


def check_applies_and_restores(p: Patch) -> None:
    sites = p.sites()
    before = _snapshot(sites)
    with p():
        during = _snapshot(sites)
    after = _snapshot(sites)
    assert not _same(before, during), f"{p!r} changes nothing: the mutant is a no-op"
    assert _same(before, after), f"{p!r} does not restore every patched attribute"


def check_nesting(p: Patch) -> None:
    """Two applications nest (the inner one restores the outer one's state, the outer one the
    original), and entering one application twice at once is refused without touching
    anything."""
    sites = p.sites()
    before = _snapshot(sites)
    with p():
        outer = _snapshot(sites)
        with p():
            pass
        assert _same(outer, _snapshot(sites)), f"{p!r}: the inner application broke the outer"
    assert _same(before, _snapshot(sites)), f"{p!r}: nested applications left changes behind"
    applied = p()
    with applied:
        during = _snapshot(sites)
        with pytest.raises(RuntimeError, match="already applied"):
            applied.__enter__()
        assert _same(during, _snapshot(sites)), f"{p!r}: a refused re-entry changed something"
    assert _same(before, _snapshot(sites)), f"{p!r}: a refused re-entry left changes behind"


# ============================================================================ every shipped mutant


def _mutant_params() -> Iterator[Any]:
    for name in SHIPPED:
        for mutant in get_target(name).mutants:
            yield pytest.param(name, mutant.name, id=f"{name}/{mutant.name}")


@pytest.mark.parametrize("target_name", SHIPPED)
def test_mutant_names_are_unique(target_name: str) -> None:
    mutants = get_target(target_name).mutants
    assert mutants, f"{target_name} ships no mutants"
    check_names(mutants)


@pytest.mark.parametrize("target_name, mutant_name", list(_mutant_params()))
def test_mutant_conforms(target_name: str, mutant_name: str) -> None:
    target = get_target(target_name)
    mutant = target.mutant(mutant_name)
    check_record(target, mutant)
    check_vocabulary(mutant)
    reason = target.implementation(mutant.implementation).unavailable()
    if reason:
        pytest.skip(f"{mutant.implementation} unavailable here: {reason}")
    check_anchors(mutant.patch)
    check_applies_and_restores(mutant.patch)
    check_nesting(mutant.patch)


# ============================================================================ each check can fail


class _Component:
    """Stands in for the module or class a mutant patches."""

    @staticmethod
    def step(x: int) -> int:
        return x + 1

    @classmethod
    def build(cls) -> str:
        return cls.__name__


class _Derived(_Component):
    pass


def _buggy_step(x: int) -> int:
    return x


def _toy_target(*mutants: Mutant) -> Target:
    from fuzzkit.target import Implementation

    return Target(
        name="toy-conformance",
        description="",
        strategy=lambda: None,
        reference=lambda inputs: None,
        implementations={"fast": Implementation("fast", lambda inputs: None)},
        oracle=lambda inputs, expected, actual: None,
        mutants=list(mutants),
    )


def _mutant(p: Any, **fields: str) -> Mutant:
    record = {"implementation": "fast", "bug_class": "a bug", "citation": "somewhere"}
    record.update(fields)
    return Mutant(fields.get("name", "m"), record["implementation"], record["bug_class"],
                  record["citation"], p)


def test_repeated_names_fail() -> None:
    good = patch(_Component, step=_buggy_step)
    with pytest.raises(AssertionError, match="used twice"):
        check_names([_mutant(good, name="a"), _mutant(good, name="a")])
    check_names([_mutant(good, name="a"), _mutant(good, name="b")])


@pytest.mark.parametrize("fields, message", [
    ({"bug_class": " "}, "empty bug_class"),
    ({"citation": ""}, "empty citation"),
    ({"implementation": "slow"}, "is not one of"),
])
def test_incomplete_records_fail(fields: dict[str, str], message: str) -> None:
    target = _toy_target()
    with pytest.raises(AssertionError, match=message):
        check_record(target, _mutant(patch(_Component, step=_buggy_step), **fields))
    check_record(target, _mutant(patch(_Component, step=_buggy_step)))


def test_a_raw_context_manager_fails() -> None:
    @contextlib.contextmanager
    def hand_written() -> Iterator[None]:
        yield

    with pytest.raises(AssertionError, match="not a fuzzkit.mutants.Patch"):
        check_vocabulary(_mutant(hand_written))
    check_vocabulary(_mutant(patch(_Component, step=_buggy_step)))


def test_a_no_op_patch_fails() -> None:
    same = vars(_Component)["step"]
    with pytest.raises(AssertionError, match="changes nothing"):
        check_applies_and_restores(patch(_Component, step=same))


def test_a_patch_that_does_not_restore_fails() -> None:
    class Leaky(Patch):
        def __call__(self) -> Any:
            @contextlib.contextmanager
            def leak() -> Iterator[None]:
                for owner, name in self.sites():
                    setattr(owner, name, _buggy_step)
                yield

            return leak()

    clean = vars(_Component)["step"]
    try:
        with pytest.raises(AssertionError, match="does not restore"):
            check_applies_and_restores(Leaky(patch(_Component, step=_buggy_step).edits))
    finally:
        _Component.step = clean  # type: ignore[method-assign]


def test_a_patch_that_does_not_nest_fails() -> None:
    class SharedSlot(Patch):
        """Keeps the original in one slot per patch, as hand-written patchers often did: an
        inner application overwrites it with the outer one's replacement."""

        def __call__(self) -> Any:
            @contextlib.contextmanager
            def apply() -> Iterator[None]:
                (owner, name), = self.sites()
                self.saved = vars(owner)[name]
                setattr(owner, name, staticmethod(_buggy_step))
                yield
                setattr(owner, name, self.saved)

            return apply()

    clean = vars(_Component)["step"]
    try:
        with pytest.raises(AssertionError, match="left changes behind"):
            check_nesting(SharedSlot(patch(_Component, step=_buggy_step).edits))
    finally:
        _Component.step = clean  # type: ignore[method-assign]


def test_a_missing_attribute_fails() -> None:
    with pytest.raises(AttributeError, match="no attribute 'stepp'"):
        patch(_Component, stepp=_buggy_step)
    by_name = patch("json", no_such_function=_buggy_step)  # checked when applied
    with pytest.raises(AttributeError, match="no attribute 'no_such_function'"):
        check_applies_and_restores(by_name)


@pytest.fixture
def editable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A module on disk whose source a source edit can read."""
    (tmp_path / "conformance_editable.py").write_text(textwrap.dedent("""\
        def step(x):
            y = x + 1
            return y


        def other(x):
            y = x + 1
            return y * 2
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("conformance_editable")
    sys.modules.pop("conformance_editable", None)


def test_an_anchor_that_occurs_twice_fails(editable: Any) -> None:
    twice = source_edit(editable, "    y = x + 1\n", "    y = x\n", attribute="other")
    with pytest.raises(AssertionError, match="occurs 2 times"):
        check_anchors(twice)
    with pytest.raises(RuntimeError, match="occurs 2 times"), twice():
        pass
    absent = source_edit(editable, "    y = x + 2\n", "    y = x\n", attribute="other")
    with pytest.raises(AssertionError, match="occurs 0 times"):
        check_anchors(absent)


def test_a_source_edit_swaps_in_the_edited_attribute(editable: Any) -> None:
    once = source_edit(editable, "    return y * 2\n", "    return y * 3\n", attribute="other")
    check_anchors(once)
    check_applies_and_restores(once)
    check_nesting(once)
    assert editable.other(1) == 4
    with once():
        assert editable.other(1) == 6
        assert editable.step(1) == 2  # only the named attribute is swapped
    assert editable.other(1) == 4


# ============================================================================ the vocabulary


def test_descriptors_and_inherited_attributes_come_back_identical() -> None:
    static, klass = vars(_Component)["step"], vars(_Component)["build"]
    p = patch(_Component, step=_buggy_step, build=lambda: "mutated")
    check_applies_and_restores(p)
    assert vars(_Component)["step"] is static and vars(_Component)["build"] is klass
    inherited = patch(_Derived, step=staticmethod(_buggy_step))
    with inherited():
        assert _Derived.step(1) == 1 and _Component.step(1) == 2
    assert "step" not in vars(_Derived)  # inherited again, not a copy left on the subclass


def test_derived_values_are_built_at_each_application_from_the_original() -> None:
    built: list[Any] = []

    def wrap(original: Any) -> Any:
        built.append(original)
        return staticmethod(lambda x: original(x) * 10)

    p = patch(_Component, step=derived(wrap))
    with p():
        assert _Component.step(1) == 20
    with p():
        assert _Component.step(1) == 20
    assert len(built) == 2 and all(f is _Component.step for f in built)


def test_patches_need_something_to_replace_and_keep_their_doc() -> None:
    with pytest.raises(ValueError, match="at least one"):
        patch(_Component)
    p = patch(_Component, step=_buggy_step)
    assert "_Component.step" in (p.__doc__ or "")
    documented = p.documented("Bug class: drops the increment.")
    assert documented.__doc__ == "Bug class: drops the increment." and documented.edits == p.edits
