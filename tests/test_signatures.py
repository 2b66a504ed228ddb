"""Crash signatures name the code under test wherever it is installed; saved paths are relative.

The code under test here is a fake engine installed in a folder that looks like site-packages
(and lies in the temporary directory: both are "library" locations to a path rule), driven by
this module acting as the target's driver, the way ``targets/paged_kv/driver.py`` drives a
pip-installed engine.  Each test below fails under the old rule (skip site-packages and the
temporary directory, blame the innermost frame left), except the fallback test, which pins
down that the old behaviour stays where no frame of the implementation exists.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from fuzzkit.registry import get_target, resolve_implementation
from fuzzkit.runner import check_case
from fuzzkit.target import Implementation, Target
from fuzzkit.targets.paged_kv import manager_implementation
from fuzzkit.targets.paged_kv.driver import ProtocolTypeError, checked_inspection, run_program
from fuzzkit.targets.paged_kv.reference import ReferenceManager

ENGINE = '''
import numpy as np


class Engine:
    def __init__(self, callback=None):
        self.callback = callback

    def step(self, inputs):
        mode = inputs["mode"]
        if mode == "key":
            return free_blocks({}, 7)
        if mode == "numpy":
            return reshape_kv(3)
        if mode == "callback":
            return self.callback(inputs)
        return {"ok": True}


def free_blocks(pool, block):
    del pool[block]


def reshape_kv(n):
    return np.reshape(np.arange(n), (2, 2))
'''

ADAPTER = '''
from fakeengine.core import Engine


class PlainAdapter:
    def __init__(self, callback=None):
        self.engine = Engine(callback)

    def step(self, inputs):
        return self.engine.step(inputs)


class DeclaringAdapter(PlainAdapter):
    code_under_test = ("fakeengine",)
'''

PROJECT = Path(__file__).resolve().parent.parent
HERE = "tests/test_signatures.py"


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """``fakeengine`` and ``fakeadapter`` in a site-packages folder on sys.path."""
    site = tmp_path / "lib" / "python3" / "site-packages"
    for package, module, source in (("fakeengine", "core", ENGINE),
                                    ("fakeadapter", "adapter", ADAPTER)):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
        (site / package / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(site))
    yield site
    for name in [m for m in sys.modules if m.split(".")[0] in ("fakeengine", "fakeadapter")]:
        del sys.modules[name]


# ------------------------------------------------------------------ the driver (this module)


def _drive(engine_class, inputs):
    if inputs["mode"] == "driver":
        _prepare(inputs)
    return engine_class(callback=_driver_callback).step(inputs)


def _prepare(inputs):
    raise ValueError(f"the driver rejects program {inputs['mode']!r}")


def _driver_callback(inputs):
    return {}["missing"]


def _adapt(engine_class, spec):
    """Like a stateful target's ``adapt_external``: a wrapper that drives the named class."""
    return Implementation(spec, lambda inputs: _drive(engine_class, inputs), backend="external")


def _target() -> Target:
    return Target(name="sigs", description="signature tests", strategy=lambda: None,
                  reference=lambda inputs: {"ok": True}, implementations={},
                  oracle=lambda inputs, expected, actual: None, adapt_external=_adapt,
                  sources=(__name__,))


def _crash(spec, mode):
    target = _target()
    failure = check_case(target, resolve_implementation(target, spec), {"mode": mode}).failure
    assert failure is not None and failure.kind == "crash", failure
    return failure


# ------------------------------------------------------------------ signatures


def test_crash_in_installed_package_names_the_package_not_the_driver(installed) -> None:
    failure = _crash("fakeengine.core:Engine", "key")
    assert failure.signature == "crash:KeyError@fakeengine/core.py:free_blocks"
    assert failure.details["frame"] == "fakeengine/core.py:free_blocks"


def test_crash_inside_numpy_names_the_implementation_frame(installed) -> None:
    failure = _crash("fakeengine.core:Engine", "numpy")
    assert failure.signature == "crash:ValueError@fakeengine/core.py:reshape_kv"
    # numpy's own frames were there to be skipped
    assert re.search(r'File "numpy/[\w/]+\.py"', failure.details["traceback"])


def test_driver_frame_inside_the_implementation_is_not_blamed(installed) -> None:
    # the engine calls back into the driver, which raises: the engine's frame is blamed
    failure = _crash("fakeengine.core:Engine", "callback")
    assert failure.signature == "crash:KeyError@fakeengine/core.py:step"


def test_crash_in_driver_before_the_implementation_names_the_driver(installed) -> None:
    failure = _crash("fakeengine.core:Engine", "driver")
    assert failure.signature == f"crash:ValueError@{HERE}:_prepare"


def test_adapter_package_is_blamed_unless_it_declares_the_engine(installed) -> None:
    plain = _crash("fakeadapter.adapter:PlainAdapter", "key")
    assert plain.signature == "crash:KeyError@fakeadapter/adapter.py:step"
    declaring = _crash("fakeadapter.adapter:DeclaringAdapter", "key")
    assert declaring.signature == "crash:KeyError@fakeengine/core.py:free_blocks"


def test_shipped_implementation_signatures_keep_project_paths() -> None:
    impl = Implementation("inline", lambda inputs: _drive(_LocalEngine, inputs))
    failure = check_case(_target(), impl, {"mode": "key"}).failure
    assert failure.signature == f"crash:KeyError@{HERE}:free"


class _LocalEngine:
    def __init__(self, callback=None):
        pass

    def step(self, inputs):
        return free({})


def free(pool):
    return pool[1]


@pytest.mark.parametrize("mode", ["key", "numpy", "callback", "driver"])
def test_saved_traceback_has_no_absolute_paths(installed, mode) -> None:
    text = _crash("fakeengine.core:Engine", mode).details["traceback"]
    files = re.findall(r'File "([^"]+)"', text)
    assert files, text
    assert not [f for f in files if f.startswith("/") or re.match(r"[A-Za-z]:\\", f)], text
    assert str(installed) not in text and str(PROJECT) not in text
    if mode != "driver":
        assert "fakeengine/core.py" in files


# ------------------------------------------------------------------ paged_kv inspect() types


class StringHashManager(ReferenceManager):
    """A plug-in whose ``inspect()`` reports hashes as strings (e.g. hex digests)."""

    def inspect(self):
        state = super().inspect()
        state["block_hash"] = {b: None if h is None else f"{h:x}"
                               for b, h in state["block_hash"].items()}
        state["cached"] = {f"{h:x}": blocks for h, blocks in state["cached"].items()}
        return state


PROGRAM = {
    "config": {"num_blocks": 8, "block_size": 2, "sliding_window": None},
    "program": [{"op": "add", "rid": 0, "tokens": [1, 2, 3, 4, 5], "adapter": None,
                 "salt": None},
                {"op": "allocate", "rid": 0, "n": 5}, {"op": "write", "rid": 0},
                {"op": "publish", "rid": 0}],
}


def test_string_hashes_raise_one_error_naming_the_field() -> None:
    with pytest.raises(ProtocolTypeError, match=r"inspect\(\)\['block_hash'\] must be "
                                                r"\{block id \(int\): block hash \(int\)"):
        run_program(StringHashManager, PROGRAM)
    assert run_program(ReferenceManager, PROGRAM)["violation"] is None


def test_string_hashes_are_a_crash_at_the_type_check() -> None:
    target = get_target("paged_kv")
    failure = check_case(target, manager_implementation(StringHashManager, "strings"),
                         PROGRAM).failure
    assert failure.kind == "crash" and failure.details["exception"] == "ProtocolTypeError"
    assert "'block_hash'" in failure.message and "(str)" in failure.message
    assert failure.signature.endswith("@targets/paged_kv/driver.py:checked_inspection")


@pytest.mark.parametrize("state, field", [
    ([], "inspect() returned a list"),
    ({"ref_cnt": {}}, "no field"),
    ({"ref_cnt": {1: True}, "block_hash": {}, "free_queue": [], "cached": {}, "tables": {},
      "tokens_in_table": {}}, "'ref_cnt'"),
    ({"ref_cnt": {}, "block_hash": {}, "free_queue": "12", "cached": {}, "tables": {},
      "tokens_in_table": {}}, "'free_queue'"),
    ({"ref_cnt": {}, "block_hash": {}, "free_queue": [], "cached": {}, "tables": {0: [1.0]},
      "tokens_in_table": {}}, "'tables'"),
])
def test_inspection_type_errors_name_the_field(state, field) -> None:
    with pytest.raises(ProtocolTypeError) as raised:
        checked_inspection(state)
    assert field in str(raised.value)


def test_numpy_integers_are_ints() -> None:
    np = pytest.importorskip("numpy")
    state = {"ref_cnt": {np.int64(1): np.int32(0)}, "block_hash": {1: None},
             "free_queue": np.array([1]), "cached": {}, "tables": {0: np.array([], np.int64)},
             "tokens_in_table": {0: 0}}
    assert checked_inspection(state)["ref_cnt"] == {1: 0}
