"""Every non-kernel ann mutant is caught -- by the oracle itself on a small case, and by the full
check (oracle + relations) -- so the oracle can fail; and some bugs show only where the real bug
would (floor truncation needs negative coordinates, a stale insert needs an insert)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fuzzkit.registry import get_target
from fuzzkit.runner import check_case
from fuzzkit.target import Target
from fuzzkit.targets.ann import checks, index, model, reference, strategies
from fuzzkit.targets.ann.mutants import MUTANTS
from test_ann import make_case


def on_negative_grid_line(**params: Any) -> dict[str, Any]:
    """A case whose ``w`` puts a stored vector's projection exactly on a negative grid line
    (``y / w + u`` a negative integer), found with the strategy's own ``snap_width``."""
    inputs = make_case(seed=1, L=1, m=1, P=1, **params)
    a, u = model.table(inputs["seed"], 0, 1, inputs["vectors"].shape[1])
    y = model.project(inputs["vectors"], a)[:, 0]
    for i in np.argsort(y):
        w = strategies.snap_width(float(y[i]), float(u[0]), 2.0, 0.0)
        if w is not None and y[i] / w + u[0] <= -1:
            return {**inputs, "w": w}
    raise AssertionError("no vector could be snapped to a negative grid line")


def tiny(**params: Any) -> dict[str, Any]:
    """A case at the scale of 1e-9 (norms far below 1e-6; inside turbo's codec domain)."""
    inputs = make_case(seed=1, **params)
    for key in ("vectors", "inserted", "queries"):
        inputs[key] = (inputs[key] * np.float32(1e-9)).astype(np.float32)
    return inputs


@pytest.fixture(scope="module")
def ann() -> Target:
    return get_target("ann")


#: A case on which the *oracle alone* (no relation) catches each mutant, and the signature.
ORACLE_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "floor-truncation": (make_case(seed=1), "mismatch:ann:cells:occupied"),
    "centre-without-offset": (make_case(seed=1), "mismatch:ann:cells"),
    "centre-without-half": (make_case(seed=1), "mismatch:ann:cells"),
    "seed-reused": (make_case(seed=1), "mismatch:ann:cells:occupied"),
    "frontier-returned": (make_case(seed=1, T=3, E=2), "mismatch:ann:results"),
    "visited-not-updated": (make_case(seed=1, T=3), "mismatch:ann:results:duplicate"),
    "ip-sign-flipped": (make_case(seed=1, metric="ip"), "mismatch:ann:results"),
    "stale-neighbours-after-insert": (make_case(seed=1, inserted=10), "mismatch:ann:graph"),
    "probe-wrong-direction": (make_case(seed=1, P=3, T=0), "mismatch:ann:visited-count"),
    "cell-cap-by-arrival": (make_case(seed=1, C=2), "mismatch:ann:cells"),
    "rerank-with-estimates": (make_case(seed=1, storage="turbo8", rerank=True),
                              "mismatch:ann:results"),
    "graph-block-offset": (make_case(seed=1, n=index.GRAPH_BLOCK + 14, q=4),
                           "mismatch:ann:graph"),
    "fast-floor": (on_negative_grid_line(), "mismatch:ann:cells"),
    "norm-epsilon": (tiny(storage="turbo16", T=0, w=None, C=60), "mismatch:ann:results"),
    "full-cell-insert": (make_case(seed=1, inserted=20, C=2), "mismatch:ann:cells"),
}


def test_every_numpy_mutant_has_a_case() -> None:
    assert {m.name for m in MUTANTS} == set(ORACLE_CASES)
    assert len(MUTANTS) >= 7


@pytest.mark.parametrize("name", sorted(ORACLE_CASES))
def test_oracle_catches_mutant(name: str, ann: Target) -> None:
    inputs, signature = ORACLE_CASES[name]
    expected = reference.run(inputs)
    assert checks.oracle(inputs, expected, index.run(inputs)) is None
    with ann.mutant(name).applied():
        failure = checks.oracle(inputs, expected, index.run(inputs))
    assert failure is not None, f"{name} escaped the oracle"
    assert failure.signature.startswith(signature), failure.signature


@pytest.mark.parametrize("name", sorted(ORACLE_CASES))
def test_full_check_catches_mutant(name: str, ann: Target) -> None:
    inputs, _ = ORACLE_CASES[name]
    impl = ann.implementation("numpy")
    with ann.mutant(name).applied():
        assert check_case(ann, impl, inputs, confirm=False).failure is not None


def _passes_with(ann: Target, name: str, inputs: dict[str, Any]) -> bool:
    with ann.mutant(name).applied():
        return check_case(ann, ann.implementation("numpy"), inputs, confirm=False).failure is None


def test_floor_truncation_needs_negative_coordinates(ann: Target) -> None:
    # One table projecting D = 1 to m = 1 with a positive factor: positive data stays on the
    # positive side, where truncation and floor agree.
    seed = next(s for s in range(100) if model.table(s, 0, 1, 1)[0][0, 0] > 0)
    rng = np.random.default_rng(0)
    x = rng.uniform(0.0, 5.0, (30, 1)).astype(np.float32)
    q = rng.uniform(0.0, 5.0, (4, 1)).astype(np.float32)
    inputs = make_case(seed=1, L=1, m=1, P=1, w=0.7)
    inputs.update(seed=seed, vectors=x, inserted=np.zeros((0, 1), np.float32), queries=q)
    assert _passes_with(ann, "floor-truncation", inputs)
    assert not _passes_with(ann, "floor-truncation", {**inputs, "vectors": -x, "queries": -q})


def test_stale_neighbours_need_an_insert(ann: Target) -> None:
    assert _passes_with(ann, "stale-neighbours-after-insert", make_case(seed=1, inserted=0))
    assert not _passes_with(ann, "stale-neighbours-after-insert", make_case(seed=1, inserted=4))


def test_ip_sign_needs_the_ip_metric(ann: Target) -> None:
    assert _passes_with(ann, "ip-sign-flipped", make_case(seed=1, metric="l2"))


def test_rerank_mutant_needs_a_rerank(ann: Target) -> None:
    # The oracle sees it only on a rerank (the all-covering relation turns one on by itself).
    inputs = make_case(seed=1, storage="turbo8")
    expected = reference.run(inputs)
    with ann.mutant("rerank-with-estimates").applied():
        assert checks.oracle(inputs, expected, index.run(inputs)) is None


# ------------------------------------------------- bugs past an edge: absent below it, caught past it


def test_graph_block_offset_needs_a_second_block(ann: Target) -> None:
    block = index.GRAPH_BLOCK
    assert _passes_with(ann, "graph-block-offset", make_case(seed=1, n=block, q=2, k=2))
    assert not _passes_with(ann, "graph-block-offset", make_case(seed=1, n=block + 1, q=2, k=2))
    # an insert builds its new rows in blocks of their own: the index of 10 vectors grown by
    # 256 is right, by 257 wrong (the oracle alone: the relations also build over everything)
    for inserted, right in ((block, True), (block + 1, False)):
        inputs = make_case(seed=1, n=inserted + 10, inserted=inserted, q=2, k=2)
        with ann.mutant("graph-block-offset").applied():
            failure = checks.oracle(inputs, reference.run(inputs), index.run(inputs))
        assert (failure is None) == right, (inserted, failure)


def test_fast_floor_needs_a_point_on_a_negative_grid_line(ann: Target) -> None:
    snapped = on_negative_grid_line()
    assert _passes_with(ann, "fast-floor", {**snapped, "w": snapped["w"] * (1 + 1e-9)})
    assert not _passes_with(ann, "fast-floor", snapped)


def test_norm_epsilon_needs_tiny_norms(ann: Target) -> None:
    case = dict(storage="turbo16", T=0, w=None, C=60)
    assert _passes_with(ann, "norm-epsilon", make_case(seed=1, **case))
    assert not _passes_with(ann, "norm-epsilon", tiny(**case))


def test_full_cell_insert_needs_an_insert(ann: Target) -> None:
    assert _passes_with(ann, "full-cell-insert", make_case(seed=1, inserted=0, C=2))
    assert not _passes_with(ann, "full-cell-insert", make_case(seed=1, inserted=20, C=2))
