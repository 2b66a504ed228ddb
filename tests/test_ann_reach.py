"""The ann target's reach: the declared thresholds are where the code really changes path, the
strategy crosses every one of them, and its values cover the contract (zeros, tiny and
subnormal coordinates, huge ones, duplicates, exact copies, points exactly on a cell's grid
line or in its middle) -- with an oracle that stays quiet on them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzkit import reach
from fuzzkit.registry import get_target
from fuzzkit.target import Target
from fuzzkit.targets.ann import checks, index, model, reference, strategies, thresholds, tiles
from test_ann import make_case


@pytest.fixture(scope="module")
def ann() -> Target:
    return get_target("ann")


# ------------------------------------------------------------------------------ crossing


@pytest.mark.parametrize("name", ["numpy", "triton"])
def test_every_threshold_is_crossed(ann: Target, name: str) -> None:
    impl = ann.implementation(name)
    reason = impl.unavailable()
    if reason:
        pytest.skip(reason)
    reach.assert_crossed(ann, impl, cases=300)


def test_every_declared_size_is_measured(ann: Target) -> None:
    declared = {t.size for t in ann.thresholds_for(None)}
    assert declared <= set(ann.sizes)
    inputs = make_case(inserted=3, storage="turbo8", rerank=True)
    for name, size in ann.sizes.items():
        assert all(isinstance(v, int) for v in size.measure(inputs)), name


# ------------------------------------------------------------------- thresholds are real


def _programs(threshold: reach.Threshold, value: int, t: tiles.Tiles) -> int:
    """How many programs / loop steps the launch a threshold describes takes at ``value``."""
    what = threshold.what
    if threshold.size == "q" and what.startswith("distance"):
        return math.ceil(value / tiles.distance_config(value, 1, 1, t)[0])
    if threshold.size == "q":  # expansion rows, at the width the threshold names
        width = 2 * t.chunk
        return math.ceil(value / tiles.expand_config(value, width, t)[0])
    if threshold.size == "M":
        return math.ceil(value / tiles.distance_config(1, value, 1, t)[1])
    if threshold.size == "D":
        return math.ceil(value / tiles.distance_config(1, 1, value, t)[2])
    assert threshold.size == "width" and "chunks" in what
    return math.ceil(value / tiles.expand_config(1, value, t)[2])


@pytest.mark.parametrize("mode", ["interpreter", "gpu"])
def test_kernel_thresholds_are_where_the_launch_changes(mode: str) -> None:
    t = tiles.INTERPRETED if mode == "interpreter" else tiles.GPU
    declared = thresholds.kernel_thresholds(t)
    assert {d.size for d in declared} == {"q", "M", "D", "width"}
    for d in declared:
        if "lane budget" in d.what:  # past it the comparison chunk shrinks
            chunk = [tiles.expand_config(1, w, t)[2] for w in (d.value, d.value + 1)]
            assert chunk[0] > chunk[1], d.name
            continue
        before, after = _programs(d, d.value, t), _programs(d, d.value + 1, t)
        assert (before, after) == (1, 2), (d.name, before, after)


def test_interpreter_launches_stay_small() -> None:
    """The interpreter's cost is programs x operations: at most two programs per dimension of
    a distance launch and two expansion chunks per row, whatever the size."""
    t = tiles.INTERPRETED
    for size in range(1, 700):
        bq, bm, bd = tiles.distance_config(size, size, size, t)
        assert math.ceil(size / bq) <= 2 and math.ceil(size / bm) <= 2
        assert math.ceil(size / bd) <= 2
        rows, bp, bj = tiles.expand_config(size, size, t)
        assert math.ceil(size / rows) <= 2 and math.ceil(min(size, bp) / bj) <= 2


def test_graph_block_threshold_is_the_build_block() -> None:
    (graph_block,) = [t for t in thresholds.INDEX_THRESHOLDS if t.size == "n"]
    assert graph_block.value == index.GRAPH_BLOCK
    rng = np.random.default_rng(2)
    x = rng.integers(-2, 3, (index.GRAPH_BLOCK + 3, 3)).astype(np.float32)  # ties everywhere
    p = model.Params.from_inputs(make_case(R=5))
    np.testing.assert_array_equal(index.knn_graph(x, 5, "l2"), reference.build_graph(x, p))


def test_fill_sizes_measure_the_relative_edges() -> None:
    inputs = make_case(n=10, inserted=3, R=9, k=11, E=4, w=None, L=1, C=10, storage="turbo8",
                       rerank=True)
    sizes = thresholds.SIZES
    assert sorted(sizes["graph_fill"].measure(inputs)) == [-2, 1]  # n_old - R, n - R
    assert sorted(sizes["cell_fill"].measure(inputs)) == [-2, 1]   # 7 - C + 1, 10 - C + 1
    assert list(sizes["k_fill"].measure(inputs)) == [0]
    assert list(sizes["rerank_pool"].measure(inputs)) == [8]
    assert set(sizes["beam_fill"].measure(inputs)) == {10 - 4 + 1}
    assert list(sizes["M"].measure(inputs)) == [10, 4 * 9]


# ---------------------------------------------------------------------------------- values


def _generated(ann: Target, count: int, name: str = "numpy", seed: int = 3
               ) -> list[dict[str, Any]]:
    """``count`` cases of the strategy, seeded and without Hypothesis' pool of constants from
    the loaded modules (:func:`fuzzkit.reach.without_local_constants`), so that they do not
    depend on which test modules ran before in this process (pytest-xdist, ordering)."""
    return reach.generated(ann.strategy_for(ann.implementation(name)), count, seed=seed)


def _on_boundary(inputs: dict[str, Any]) -> set[float]:
    """The face fractions 0 and 0.5 that occur exactly (vectors and queries, every table)."""
    if inputs["w"] is None:
        return set()
    p = model.Params.from_inputs(inputs)
    rows = np.concatenate([reference.all_vectors(inputs), inputs["queries"]])
    found = set()
    for l in range(p.L):
        a, u = model.table(p.seed, l, p.m, rows.shape[1])
        y = model.project(rows, a)
        f = model.face_fraction(y, u, p.w, model.cell_coords(y, u, p.w))
        found |= {v for v in (0.0, 0.5) if np.any(f == v)}
    return found


def test_values_cover_the_contract(ann: Target) -> None:
    cases = _generated(ann, 300)
    seen: dict[str, int] = {}

    def count(what: str, hit: bool) -> None:
        seen[what] = seen.get(what, 0) + int(bool(hit))

    for inputs in cases:
        assert checks.validate(inputs) is None
        x = reference.all_vectors(inputs)
        q = inputs["queries"]
        both = np.concatenate([x, q])
        count("zero vector", np.any(np.all(x == 0, axis=1)))
        count("zero query", np.any(np.all(q == 0, axis=1)))
        count("negative zero", np.any((both == 0) & np.signbit(both)))
        count("subnormal", np.any((both != 0) & (np.abs(both) < np.finfo(np.float32).tiny)))
        norms = np.sqrt(model.squared_norm(x))
        count("tiny norm", np.any((norms > 0) & (norms < 1e-7)))
        count("huge", np.abs(both).max() >= 1e3)
        count("duplicate vectors", np.unique(x, axis=0).shape[0] < x.shape[0])
        count("query copies a vector", any(np.any(np.all(x == row, axis=1)) for row in q))
        count("ip metric", inputs["metric"] == "ip")
        count("turbo rerank", inputs["storage"] != "float32" and inputs["rerank"])
        count("inserts", inputs["inserted"].shape[0] > 0)
        count("T = 0", inputs["T"] == 0)
        count("w = null", inputs["w"] is None)
        on = _on_boundary(inputs)
        count("on a grid line", 0.0 in on)
        count("mid-cell", 0.5 in on)
    missing = {k: v for k, v in seen.items() if v < 3}
    assert not missing, f"rare in 300 cases: {missing} (all: {seen})"


def test_turbo_cases_stay_in_the_codec_domain(ann: Target) -> None:
    for inputs in _generated(ann, 120):
        if inputs["storage"] != "float32":
            both = np.concatenate([reference.all_vectors(inputs), inputs["queries"]])
            nonzero = np.abs(both[both != 0])
            assert nonzero.size == 0 or nonzero.min() >= strategies.TURBO_MIN_ABS


@settings(max_examples=200, deadline=None, database=None)
@given(y=st.floats(-1e4, 1e4, allow_nan=False), u=st.floats(0, 1, exclude_max=True),
       w=st.floats(1e-3, 1e3), fraction=st.sampled_from([0.0, 0.5]))
def test_snap_width_lands_exactly(y: float, u: float, w: float, fraction: float) -> None:
    snapped = strategies.snap_width(y, u, w, fraction)
    if snapped is None:
        return
    z = y / snapped + u
    assert snapped > 0 and z - math.floor(z) == fraction


def test_snapped_width_puts_a_vector_on_its_cell_edge() -> None:
    inputs = make_case(seed=4, L=1, m=1, P=1)
    a, u = model.table(inputs["seed"], 0, 1, inputs["vectors"].shape[1])
    y = float(model.project(inputs["vectors"][0], a)[0])
    w = strategies.snap_width(y, float(u[0]), 2.0, 0.0)
    assert w is not None
    coords = model.cell_coords(np.array([y]), u, w)
    assert model.face_fraction(np.array([y]), u, w, coords)[0] == 0.0


# -------------------------------------------------------------------------- honest bounds


def test_underflowing_distances_pass_and_wrong_ones_do_not() -> None:
    """Coordinates near 1e-30 square to 1e-60, below float32's subnormals: float32 returns 0.
    The oracle's bound allows that (D 2^-149 absolute), and still catches a distance that is
    off by more."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((20, 4)) * 1e-30).astype(np.float32)
    inputs = make_case(n=20, dim=4, q=3, w=None, C=20, k=4)
    inputs.update(vectors=x, inserted=np.zeros((0, 4), np.float32),
                  queries=(rng.standard_normal((3, 4)) * 1e-30).astype(np.float32))
    expected, actual = reference.run(inputs), index.run(inputs)
    assert np.all(actual["distances"][np.isfinite(actual["distances"])] == 0)
    assert checks.oracle(inputs, expected, actual) is None
    wrong = dict(actual, distances=np.array(actual["distances"], copy=True))
    wrong["distances"][0, 0] = np.float32(1e-40)  # 4 * 2^-149 = 5.6e-45 allowed
    failure = checks.oracle(inputs, expected, wrong)
    assert failure is not None and failure.signature.startswith("mismatch:ann:results")


def test_recall_is_tie_aware_up_to_float32_resolution() -> None:
    """Distances a float32 search cannot tell apart count as ties; farther ones do not."""
    from fuzzkit.targets.ann import brute

    exact = np.array([[0.0, 1e-80, 2e-80, 3.0]])
    slack = np.array([[4e-45, 4e-45, 4e-45, 3e-7]])
    assert brute.recall(exact, np.array([[2]]), 1).tolist() == [0.0]
    assert brute.recall(exact, np.array([[2]]), 1, slack).tolist() == [1.0]
    assert brute.recall(exact, np.array([[3]]), 1, slack).tolist() == [0.0]
    normal = np.array([[1.0, 1.0 + 1e-9, 1.5]])
    assert brute.recall(normal, np.array([[1]]), 1, 1e-7 * normal).tolist() == [1.0]
    assert brute.recall(normal, np.array([[2]]), 1, 1e-7 * normal).tolist() == [0.0]


def test_recall_claim_holds_on_subnormal_data(ann: Target) -> None:
    """Subnormal coordinates: every float32 squared distance underflows to 0, so the search
    ranks by id -- the recall claim must not call that a loss."""
    from fuzzkit.targets.ann import properties

    rng = np.random.default_rng(1)
    x = (rng.standard_normal((80, 6)) * 1e-39).astype(np.float32)
    inputs = make_case(n=80, dim=6, q=4, C=80, R=6, k=3, T=1, w=1e-38)
    inputs.update(vectors=x, inserted=np.zeros((0, 6), np.float32), queries=x[:4].copy())
    assert checks.validate(inputs) is None
    assert properties.recall_claim(index.run, inputs) is None
