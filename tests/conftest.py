"""Shared fixtures: the toy targets registered for the duration of a test session."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from fuzzkit import triton_support  # noqa: E402

# Before any test module imports triton, directly or through torch/peft: Triton picks the
# interpreter for its own language helpers (tl.cdiv ...) when it is imported, so a kernel
# module that calls prepare() later would run interpreted kernels calling compiled helpers
# ("Cannot call @triton.jit'd outside of the scope of a kernel") -- seen when the PEFT tests
# ran before vLLM's Punica kernels in one worker.
triton_support.prepare()

import pytest  # noqa: E402

from fuzzkit import reach, registry  # noqa: E402

import reach_targets  # noqa: E402
import toy_targets  # noqa: E402

pytest_plugins = ["pytester"]

registry.register_target("toy-dot", replace=True)(toy_targets.dot_target)
registry.register_target("toy-alloc", replace=True)(toy_targets.alloc_target)
registry.register_target("toy-tiles", replace=True)(reach_targets.target)


@pytest.fixture(scope="session", autouse=True)
def _generation_independent_of_imports():
    """Seeded generation in a test gives the same cases whatever the process imported before
    (Hypothesis otherwise draws some numbers from constants of every loaded local module, so a
    test's cases would depend on test order under xdist and on the machine)."""
    with reach.without_local_constants():
        yield


@pytest.fixture
def dot() -> registry.Target:
    return registry.get_target("toy-dot")


@pytest.fixture
def alloc() -> registry.Target:
    return registry.get_target("toy-alloc")


@pytest.fixture
def tiles() -> registry.Target:
    return registry.get_target("toy-tiles")


def pytest_configure(config: pytest.Config) -> None:
    """Under ``pytest -n N``, tests marked ``xdist_group`` run on one worker, in order.

    The README's commands are one test each, and the commands of one README section build on
    each other (a later one replays what an earlier one found): split over two workers, each
    worker rebuilt the other's part first, which cost minutes.  xdist's default distribution
    ("load") is changed to "loadgroup", which is "load" for every test without the mark."""
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
