"""The quant target (turbo8 / turbo16): reference invariants, NumPy agreement, mutant detection
and the statistical recall claims.  Triton tests live in test_quant_kernels.py."""

from __future__ import annotations

import copy
import math
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzzkit.oracles
from fuzzkit import reach, registry
from fuzzkit.runner import check_case
from fuzzkit.target import Target
from fuzzkit.testing import first_failure
from fuzzkit.targets.quant import checks, numpy_impl, reference, strategies, tiles
from fuzzkit.targets.quant import target as make_target

SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def quant() -> Target:
    return make_target()


def case(bits: int = 8, book: str = "lloyd_max", dim: int = 16, n: int = 5, m: int = 2,
         seed: int = 0, precision: str = "float32") -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "bits": bits, "codebook": book, "rotation_seed": seed + 1, "precision": precision,
        "vectors": rng.standard_normal((n, dim)).astype(np.float32),
        "queries": rng.standard_normal((m, dim)).astype(np.float32),
    }


# ---------------------------------------------------------------------------- target wiring


def test_target_is_registered_and_describes_itself(quant: Target) -> None:
    built = registry.get_target("quant")
    assert built.name == "quant"
    info = quant.describe()
    assert {i["name"] for i in info["implementations"]} == {"numpy", "triton"}
    assert len(info["mutants"]) >= 6
    assert {p.name for p in quant.properties} >= {
        "rotation-orthogonal", "deterministic", "scale-equivariant", "self-score",
        "zero-vector", "encoded-size"}
    assert tuple(quant.reducible) == ("vectors", "queries")


def test_validate_names_the_problem(quant: Target) -> None:
    good = case()
    assert quant.validate(good) is None
    assert "bits" in quant.validate({**good, "bits": 4})
    assert "codebook" in quant.validate({**good, "codebook": "pq"})
    assert "float32" in quant.validate({**good, "vectors": good["vectors"].astype(np.float64)})
    nan = good["vectors"].copy()
    nan[0, 0] = np.nan
    assert "finite" in quant.validate({**good, "vectors": nan})
    assert "dimension" in quant.validate({**good, "queries": good["queries"][:, :3]})


def test_dropping_rows_keeps_a_valid_case(quant: Target) -> None:
    """``reducible`` rows may be dropped down to nothing: every implementation copes."""
    inputs = case(n=0, m=0)
    inputs["vectors"] = inputs["vectors"][:0]
    inputs["queries"] = inputs["queries"][:0]
    assert quant.validate(inputs) is None
    assert check_case(quant, quant.implementation("numpy"), inputs).failure is None


# ------------------------------------------------------------------------------ reach, values


def test_numpy_strategy_crosses_every_threshold(quant: Target) -> None:
    reach.assert_crossed(quant, quant.implementation("numpy"), cases=300)


@pytest.mark.parametrize("mode", ["interpreter", "native"])
def test_triton_strategy_crosses_every_threshold(quant: Target, mode: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's tiles as launched in each mode (generation only: nothing is launched)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1" if mode == "interpreter" else "0")
    impl = quant.implementation("triton")
    want = tiles.INTERPRETED if mode == "interpreter" else tiles.NATIVE
    declared = {(t.size, t.value) for t in quant.thresholds_for(impl)}
    assert {("m", want.block_m), ("n", want.block_n), ("D", want.block_d)} <= declared
    # 600: the native tiles add three thresholds of the same sizes, so each boundary gets fewer
    # of the (mostly mutated, repeated) cases; at 300 one seed in six misses D=33
    reach.assert_crossed(quant, impl, cases=600)


def _generated(quant: Target, impl: str, cases: int) -> list[dict[str, Any]]:
    return reach.generated(quant.strategy_for(quant.implementation(impl)), cases, seed=3)


def test_strategy_covers_the_contract_and_stays_inside_it(quant: Target) -> None:
    """Every case is valid, and the edges of the validator's range show up: exact and signed
    zeros, norms below 1e-7 and at the smallest magnitude, magnitudes at the largest, empty
    sides, float64 and the default precision, seeds in the upper half of the 64-bit range."""
    cases = _generated(quant, "numpy", 300)
    for inputs in cases:
        assert quant.validate(inputs) is None, quant.validate(inputs)
    rows = np.concatenate([np.concatenate([c["vectors"], c["queries"]]).ravel() for c in cases])
    norms = np.array([np.linalg.norm(r.astype(np.float64)) for c in cases
                      for r in np.concatenate([c["vectors"], c["queries"]])])
    assert (rows == 0).any() and np.signbit(rows[rows == 0]).any()
    assert (np.abs(rows) == strategies.MIN_ABS).any()
    assert (np.abs(rows) == strategies.MAX_ABS).any()
    assert ((norms > 0) & (norms < 1e-7)).sum() >= 20
    assert (norms > 1e11).sum() >= 20
    assert any(c["vectors"].shape[0] == 0 for c in cases)
    assert any(c["queries"].shape[0] == 0 for c in cases)
    assert {c.get("precision") for c in cases} == {"float32", "float64", None}
    assert any(c["rotation_seed"] >= 2**63 for c in cases)
    assert max(c["vectors"].shape[1] for c in cases) <= checks.MAX_DIM


# ---------------------------------------------------------------------------------- reference


def test_rotation_plan_is_pinned() -> None:
    """The rotation is part of the stored format: it must never change silently."""
    plan = reference.rotation_plan(8, 0)
    assert plan[0][0].tolist() == [3, 5, 0, 2, 4, 1, 7, 6]
    assert plan[0][1].astype(int).tolist() == [-1, -1, -1, 1, 1, -1, -1, 1]
    assert plan[2][0].tolist() == [0, 1, 4, 5, 6, 3, 2, 7]


@pytest.mark.parametrize("dim", [1, 2, 3, 7, 8, 33, 64, 80, 96])
def test_reference_rotation_is_orthogonal(dim: int) -> None:
    assert sum(reference.hadamard_chunks(dim)) == dim
    for seed in (0, 12345):
        r = reference.rotation_matrix(dim, seed)
        assert np.abs(r @ r.T - np.eye(dim)).max() < 1e-13


@pytest.mark.parametrize("book", ["lloyd_max", "uniform"])
@pytest.mark.parametrize("bits", [8, 16])
def test_codebooks_are_symmetric_with_zero_boundary(book: str, bits: int) -> None:
    cb = reference.codebook(book, bits)
    assert cb.centroids.size == 1 << bits
    np.testing.assert_array_equal(cb.centroids, -cb.centroids[::-1])
    assert cb.zero_code == (1 << bits) // 2
    # Boundaries are centroid midpoints (the nearest-neighbour condition), for both books.
    np.testing.assert_allclose(cb.boundaries, 0.5 * (cb.centroids[1:] + cb.centroids[:-1]),
                               rtol=0, atol=1e-12)


def _gaussian_mse(cb: reference.Codebook) -> float:
    """Exact N(0,1) distortion: E[x^2] - 2 sum c_k E[x; cell k] + sum c_k^2 P(cell k)."""
    edges = np.concatenate([[-np.inf], cb.boundaries, [np.inf]])
    cdf = np.array([0.5 * math.erfc(-e / math.sqrt(2)) for e in edges])
    pdf = np.array([0.0 if np.isinf(e) else math.exp(-e * e / 2) / math.sqrt(2 * math.pi)
                    for e in edges])
    p = np.diff(cdf)
    first = pdf[:-1] - pdf[1:]
    return float(1.0 - 2.0 * np.sum(cb.centroids * first) + np.sum(cb.centroids**2 * p))


def test_lloyd_max_is_a_fixed_point_and_beats_uniform() -> None:
    cb = reference.codebook("lloyd_max", 8)
    # Centroid condition: each centroid is its cell's conditional mean (to Lloyd's tolerance).
    means = reference._gaussian_centroids(np.concatenate([cb.boundaries[127:], [np.inf]]))
    np.testing.assert_allclose(cb.centroids[128:], means, rtol=1e-4)
    lloyd, flat = _gaussian_mse(cb), _gaussian_mse(reference.codebook("uniform", 8))
    assert lloyd < flat
    assert 2.6 < lloyd * 256**2 < 2.75  # Panter-Dite: sqrt(3) pi / 2 = 2.72 at high resolution


@settings(max_examples=40, **SETTINGS)
@given(st.data())
def test_reference_satisfies_every_property(data: st.DataObject) -> None:
    """The properties hold on the reference itself (so they can only flag real bugs)."""
    target = make_target()
    inputs = data.draw(target.strategy_for(target.implementation("numpy")))
    for prop in target.properties:
        failure = prop.check(reference.run, copy.deepcopy(inputs))
        assert failure is None, f"{prop.name}: {failure.message}"


def test_reference_scores_approximate_float_scores() -> None:
    inputs = case(bits=16, dim=80, n=20, m=4)
    out = reference.run(inputs)
    exact = inputs["queries"].astype(np.float64) @ inputs["vectors"].astype(np.float64).T
    scale = np.outer(np.linalg.norm(inputs["queries"], axis=1),
                     np.linalg.norm(inputs["vectors"], axis=1))
    assert np.abs(out["scores"] - exact).max() < 1e-3 * scale.max()
    norms2 = np.sum(inputs["vectors"].astype(np.float64) ** 2, axis=1)
    np.testing.assert_allclose(np.diag(out["symmetric_scores"]), norms2, rtol=1e-13)


def test_zero_vector_is_defined() -> None:
    inputs = case(n=3)
    inputs["vectors"][1] = 0.0
    out = reference.run(inputs)
    assert np.all(out["codes"][1] == 128) and out["scales"][1] == 0.0
    assert np.all(out["scores"][:, 1] == 0.0)
    assert all(np.all(np.isfinite(out[k])) for k in ("scales", "scores", "symmetric_scores"))


# -------------------------------------------------------------------------------------- oracle


def test_oracle_excuses_codes_only_inside_the_rounding_band(quant: Target) -> None:
    inputs = case(bits=16, dim=32, n=6)
    expected = reference.run(inputs)
    actual = numpy_impl.run(inputs)
    assert quant.oracle(inputs, expected, actual) is None
    aux = expected["aux"]
    # Pick a coordinate whose band spans two cells and move the code to the other one.
    j, d = (int(i) for i in np.argwhere(aux["codes_high"] > aux["codes_low"])[0])
    moved = {**actual, "codes": actual["codes"].copy()}
    other = aux["codes_high"][j, d] if actual["codes"][j, d] == aux["codes_low"][j, d] \
        else aux["codes_low"][j, d]
    moved["codes"][j, d] = other
    # Scales and scores must then follow the moved code (recomputed from the actual codes).
    derived = reference.scores_from_codes(inputs, moved["codes"].astype(np.int64))
    moved["scales"] = derived["scales"].astype(np.float32)
    moved["scores"] = derived["scores"].astype(np.float32)
    moved["symmetric_scores"] = derived["symmetric_scores"].astype(np.float32)
    assert quant.oracle(inputs, expected, moved) is None
    moved["codes"][j, d] = aux["codes_high"][j, d] + 1
    failure = quant.oracle(inputs, expected, moved)
    assert failure is not None and failure.signature == "mismatch:quant:codes"
    assert failure.details["index"] == [j, d]


def test_oracle_rejects_wrong_storage_dtype(quant: Target) -> None:
    inputs = case(bits=8)
    actual = numpy_impl.run(inputs)
    actual["codes"] = actual["codes"].astype(np.uint16)
    failure = quant.oracle(inputs, reference.run(inputs), actual)
    assert failure is not None and failure.signature == "mismatch:quant:codes:dtype"


# ----------------------------------------------------------------------------- numpy agreement


@settings(max_examples=100, **SETTINGS)
@given(st.data())
def test_numpy_agrees_with_reference(data: st.DataObject) -> None:
    target = make_target()
    inputs = data.draw(target.strategy_for(target.implementation("numpy")))
    failure = check_case(target, target.implementation("numpy"), inputs).failure
    assert failure is None, f"{failure.signature}: {failure.message}"


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("bits", [8, 16])
def test_numpy_agrees_on_larger_gaussian_case(quant: Target, bits: int, precision: str) -> None:
    inputs = case(bits=bits, dim=80, n=40, m=6, precision=precision, seed=bits)
    assert check_case(quant, quant.implementation("numpy"), inputs).failure is None


# ------------------------------------------------------------------------------------- mutants

NUMPY_MUTANTS = [m.name for m in make_target().mutants if m.implementation == "numpy"]


@pytest.mark.parametrize("name", NUMPY_MUTANTS)
def test_numpy_mutant_is_caught(quant: Target, name: str) -> None:
    mutant = quant.mutant(name)
    with mutant.applied():
        failure = first_failure(quant, quant.implementation("numpy"), max_examples=150)
    assert failure is not None, f"mutant {name} escaped 150 generated cases"


def _passes(target: Target, inputs: dict[str, Any], mutant: str) -> bool:
    with target.mutant(mutant).applied():
        return check_case(target, target.implementation("numpy"), inputs,
                          properties=False).failure is None


def test_mutants_show_only_where_the_real_bug_would(quant: Target) -> None:
    """Conditional bugs stay silent outside their situation (the oracle alone, no properties:
    the zero-vector property deliberately adds the situation to every case)."""
    pow2 = case(dim=64, n=10)
    assert _passes(quant, pow2, "hadamard-norm-padded-size")
    assert _passes(quant, pow2, "pad-truncate")
    assert not _passes(quant, case(dim=48, n=10), "pad-truncate")
    assert _passes(quant, case(bits=8, dim=40), "turbo16-codes-in-u8")
    assert not _passes(quant, case(bits=16, dim=40), "turbo16-codes-in-u8")
    assert _passes(quant, case(bits=16, dim=40), "query-quantized")
    assert not _passes(quant, case(bits=8, dim=40), "query-quantized")
    assert _passes(quant, case(dim=40), "zero-vector-nan")
    gaussian = case(dim=32, n=20)
    assert _passes(quant, gaussian, "top-cell-dropped")
    spike = copy.deepcopy(gaussian)  # R v = e_3: z_3 = sqrt(32) lies in the top cell (> 4.40)
    spike["vectors"][0] = reference.rotation_matrix(32, spike["rotation_seed"])[3]
    assert not _passes(quant, spike, "top-cell-dropped")


@pytest.mark.parametrize("dim, shows", [(64, False), (80, False), (127, False), (128, True),
                                        (129, True)])
def test_capped_hadamard_shows_only_from_a_128_block(quant: Target, dim: int,
                                                     shows: bool) -> None:
    assert _passes(quant, case(dim=dim, n=4), "hadamard-block-capped-64") != shows


def test_eps_floor_shows_only_below_its_eps(quant: Target) -> None:
    inputs = case(dim=24, n=4)
    inputs["vectors"][1] = 0.0  # the zero vector: the clamp guards it as well as the where()
    inputs["vectors"][2] *= np.float32(1e-6)  # norm ~5e-6: far above eps, scaled exactly
    assert _passes(quant, inputs, "norm-eps-floor")
    tiny = copy.deepcopy(inputs)
    tiny["vectors"][3] = np.where(tiny["vectors"][3] < 0, -2e-10, 2e-10)  # norm ~1e-9
    assert quant.validate(tiny) is None
    assert not _passes(quant, tiny, "norm-eps-floor")


def test_rotation_cache_mutant_needs_an_earlier_case(quant: Target) -> None:
    """Keyed by dimension only: a case passes alone (and on a fresh cache) and fails right
    after another seed of its dimension; the real cache (keyed by the seed too) never does."""
    impl = quant.implementation("numpy")
    first, second = case(dim=24, seed=1), case(dim=24, seed=2)
    other_dim = case(dim=25, seed=3)
    mutant = quant.mutant("rotation-cache-keyed-by-dim")
    with mutant.applied():
        assert check_case(quant, impl, second, properties=False).failure is None
    with mutant.applied():
        assert check_case(quant, impl, first, properties=False).failure is None
        assert check_case(quant, impl, other_dim, properties=False).failure is None
        failure = check_case(quant, impl, second, properties=False).failure
        assert failure is not None and failure.signature == "mismatch:close:rotated_vectors"
    for inputs in (first, second, other_dim, first):
        assert check_case(quant, impl, inputs, properties=False).failure is None


def test_cached_state_is_keyed_by_everything_it_depends_on() -> None:
    """The real caches: one entry per (dim, seed, dtype) and per (codebook object, dtype)."""
    a = numpy_impl.rotation(16, 1, np.dtype(np.float32))
    assert numpy_impl.rotation(16, 1, np.dtype(np.float32)) is a
    assert numpy_impl.rotation(16, 2, np.dtype(np.float32)) is not a
    assert numpy_impl.rotation(16, 1, np.dtype(np.float64))[0][1].dtype == np.float64
    assert not a[0][1].flags.writeable
    book = reference.codebook("uniform", 8)
    other = reference.uniform(8, radius=3.0)  # same name and bits, other centroids
    np.testing.assert_array_equal(numpy_impl.centroid_table(book, np.dtype(np.float32)),
                                  book.centroids.astype(np.float32))
    np.testing.assert_array_equal(numpy_impl.centroid_table(other, np.dtype(np.float32)),
                                  other.centroids.astype(np.float32))


# ------------------------------------------------------------------------------ recall claims

RECALL_K = 10
RECALL_SEEDS = range(4)
TURBO8_RECALL_BOUND = 0.95
CONFIDENCE = 0.99


def _recall(bits: int, seed: int, n: int = 1000, m: int = 100, dim: int = 96) -> np.ndarray:
    """Per-query recall@10 of the NumPy implementation's scores on Gaussian data, against
    float64 brute force (tie-aware through the reference scores)."""
    rng = np.random.default_rng(1000 + seed)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    queries = rng.standard_normal((m, dim)).astype(np.float32)
    out = numpy_impl.run({"bits": bits, "codebook": "lloyd_max", "rotation_seed": seed,
                          "vectors": vectors, "queries": queries})
    exact = queries.astype(np.float64) @ vectors.astype(np.float64).T
    true = np.argsort(-exact, axis=1, kind="stable")[:, :RECALL_K]
    found = np.argsort(-np.asarray(out["scores"]), axis=1, kind="stable")[:, :RECALL_K]
    return fuzzkit.oracles.recall_at_k(true, found, RECALL_K, ref_scores=exact)


@pytest.fixture(scope="module")
def turbo_recalls() -> dict[int, np.ndarray]:
    return {bits: np.concatenate([_recall(bits, s) for s in RECALL_SEEDS]) for bits in (8, 16)}


def test_turbo16_recall_at_least_turbo8(turbo_recalls: dict[int, np.ndarray]) -> None:
    failure = fuzzkit.oracles.compare_recall(turbo_recalls[16], turbo_recalls[8], confidence=CONFIDENCE,
                                     name="turbo16>=turbo8")
    assert failure is None, failure.message


def test_turbo8_recall_above_bound(turbo_recalls: dict[int, np.ndarray]) -> None:
    """Claim: turbo8 (Lloyd-Max) recall@10 >= 0.95 on Gaussian data, D = 96, 1000 vectors."""
    failure = fuzzkit.oracles.recall(turbo_recalls[8], bound=TURBO8_RECALL_BOUND, confidence=CONFIDENCE,
                             name="turbo8")
    assert failure is None, failure.message


def test_bad_quantizer_fails_the_recall_oracle(turbo_recalls: dict[int, np.ndarray]) -> None:
    """A 1-bit (sign) quantizer in turbo8's clothes: the recall oracle must reject it, and the
    comparison oracle must say it is worse than turbo16."""
    one_bit = reference.lloyd_max(1)
    with mock.patch.object(reference, "codebook", lambda name, bits: one_bit):
        bad = np.concatenate([_recall(8, s) for s in RECALL_SEEDS])
    failure = fuzzkit.oracles.recall(bad, bound=TURBO8_RECALL_BOUND, confidence=CONFIDENCE, name="1-bit")
    assert failure is not None and failure.signature == "mismatch:recall:1-bit"
    assert fuzzkit.oracles.compare_recall(bad, turbo_recalls[16], confidence=CONFIDENCE) is not None
