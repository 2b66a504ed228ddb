"""Every oracle passes correct outputs and catches realistic wrong ones (numpy only, seeded)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fuzzkit.oracles import (
    close,
    compare_recall,
    error_bound,
    exact,
    recall,
    recall_at_k,
    topk,
    trace,
    ulp,
    unit_roundoff,
)
from fuzzkit.oracles.close import gamma


def _json_ok(failure) -> None:
    json.dumps(failure.to_json())


# --------------------------------------------------------------------------------------- exact


def test_exact_equal_structures_pass():
    value = {
        "codes": np.arange(12, dtype=np.int32).reshape(3, 4),
        "steps": [{"op": "alloc", "table": [1, 2]}, ("x", None, 2.5)],
        "nan": np.array([1.0, np.nan]),
        "scalar": np.float32(0.5),
        "name": "abc",
    }
    other = {
        "codes": np.arange(12, dtype=np.int64).reshape(3, 4),  # same kind, other width
        "steps": [{"op": "alloc", "table": (1, 2)}, ["x", None, 2.5]],  # tuple == list
        "nan": np.array([1.0, np.nan]),
        "scalar": np.float32(0.5),
        "name": "abc",
    }
    assert exact(value, other) is None
    assert exact(np.int64(3), 3) is None
    assert exact(float("nan"), np.float64("nan")) is None
    assert exact(np.float64(2.0), np.array(2.0)) is None


def test_exact_reports_array_path_and_count():
    e = np.zeros((4, 8), dtype=np.int8)
    a = e.copy()
    a[2, 5] = 1
    a[3, 0] = 7
    f = exact(e, a, name="codes")
    assert f is not None and f.kind == "mismatch"
    assert "codes[2, 5]" in f.message
    assert f.details["path"] == "codes[2, 5]"
    assert f.details["expected"] == 0 and f.details["actual"] == 1
    assert f.details["count"] == 2
    assert f.signature == "mismatch:exact:codes"
    _json_ok(f)


def test_exact_reports_nested_path():
    e = {"steps": [{"table": [1, 2]}, {"table": [3, 4]}, {"table": [5, 6]}, {"table": [7, 8]}]}
    a = json.loads(json.dumps(e))
    a["steps"][3]["table"][1] = 9
    f = exact(e, a, name="out")
    assert f.details["path"] == "out['steps'][3]['table'][1]"
    assert f.signature == "mismatch:exact:out['steps'][]['table']"
    e2 = {"steps": [{"table": np.array(s["table"])} for s in e["steps"]]}
    a = {"steps": [{"table": s["table"].copy()} for s in e2["steps"]]}
    a["steps"][3]["table"][1] = 9
    f = exact(e2, a, name="steps_out")
    assert f.details["path"] == "steps_out['steps'][3]['table'][1]"
    assert f.signature == "mismatch:exact:steps_out['steps'][]['table']"


def test_exact_signature_stable_across_sizes():
    signatures = set()
    rng = np.random.default_rng(0)
    for size in (3, 10, 57, 200):
        e = rng.integers(0, 16, size=(size, 4))
        a = e.copy()
        i = int(rng.integers(size))
        a[i, 2] += 1
        steps_e = [{"op": "x", "table": list(range(size))} for _ in range(size)]
        steps_a = json.loads(json.dumps(steps_e))
        steps_a[i]["table"][size - 1] = -1
        signatures.add(exact(e, a, name="codes").signature)
        signatures.add(exact(steps_e, steps_a, name="steps").signature)
    assert signatures == {"mismatch:exact:codes", "mismatch:exact:steps[]['table']"}


def test_exact_structural_differences():
    f = exact({"a": 1, "b": 2}, {"a": 1})
    assert f.details["reason"] == "missing" and f.details["path"] == "output['b']"
    assert f.signature == "mismatch:exact:output['b']:missing"
    f = exact({"a": 1}, {"a": 1, "c": 3})
    assert f.details["reason"] == "extra" and f.signature.endswith(":extra")
    f = exact([1, 2, 3], [1, 2])
    assert f.details["reason"] == "length" and (f.details["expected"], f.details["actual"]) == (3, 2)
    f = exact(np.zeros(3, np.int32), np.zeros(3, np.float32))
    assert f.details["reason"] == "dtype"
    f = exact(np.zeros((2, 3)), np.zeros((3, 2)))
    assert f.details["reason"] == "shape" and f.details["actual"] == [3, 2]
    f = exact(1, 1.0)
    assert f.details["reason"] == "type"
    f = exact(True, 1)
    assert f.details["reason"] == "type"
    f = exact(None, 0)
    assert f.details["reason"] == "type"
    f = exact(np.zeros(2), [0.0, 0.0])
    assert f.details["reason"] == "type"
    f = exact("abc", "abd")
    assert f.details["reason"] == "value"
    f = exact(np.array([1.0, np.nan]), np.array([np.nan, 1.0]))
    assert f.details["path"] == "output[0]" and f.details["count"] == 2
    for failure in (exact({"a": 1}, {"a": 2}), exact([np.zeros(100)], [np.ones(100)])):
        _json_ok(failure)


def test_exact_integer_dict_keys_are_not_in_signature():
    f1 = exact({"blocks": {3: [1, 2]}}, {"blocks": {3: [1, 5]}})
    f2 = exact({"blocks": {17: [1, 2]}}, {"blocks": {17: [1, 5]}})
    assert f1.details["path"] == "output['blocks'][3][1]"
    assert f1.signature == f2.signature == "mismatch:exact:output['blocks']"
    f3 = exact({"blocks": {3: {"ref": 1}}}, {"blocks": {3: {"ref": 2}}})
    assert f3.signature == "mismatch:exact:output['blocks'][]['ref']"
    assert exact([[1, 2], [3, 4]], [[1, 2], [3, 5]]).signature == "mismatch:exact:output"


# --------------------------------------------------------------------------------------- close


def test_unit_roundoff_and_names():
    assert unit_roundoff(np.float64) == 2.0**-53
    assert unit_roundoff("float32") == unit_roundoff("fp32") == unit_roundoff(np.dtype("f4")) == 2.0**-24
    assert unit_roundoff("float16") == unit_roundoff("fp16") == unit_roundoff("half") == 2.0**-11
    assert unit_roundoff("bfloat16") == unit_roundoff("bf16") == unit_roundoff("torch.bfloat16") == 2.0**-8
    assert unit_roundoff("torch.float32") == 2.0**-24
    with pytest.raises(ValueError, match="unknown floating dtype"):
        unit_roundoff("int8")
    with pytest.raises(ValueError):
        unit_roundoff("nonsense")


def test_ulp_matches_numpy_spacing():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(size=200) * 10.0 ** rng.integers(-30, 30, 200), [1.0, 2.0, 0.75]])
    for dt in (np.float32, np.float64, np.float16):
        with np.errstate(over="ignore"):
            xs = x.astype(dt)
        finite = np.isfinite(xs) & (xs != 0)
        expected = np.spacing(np.abs(xs[finite])).astype(np.float64)
        assert np.array_equal(ulp(xs[finite].astype(np.float64), dt), expected)
    assert ulp(0.0, "float32") == 2.0**-149
    assert ulp(1.0, "bfloat16") == 2.0**-7
    assert ulp(1e-45, "float16") == 2.0**-24


def test_error_bound_formula():
    u = 2.0**-24
    n = 100 + 3
    assert error_bound("float32", 100, 2.0) == pytest.approx(2.0 * n * u / (1 - n * u) + n * 2.0**-126)
    assert np.shape(error_bound("float32", 8, np.ones((2, 3)))) == (2, 3)
    with pytest.raises(ValueError, match="vacuous"):
        error_bound("bfloat16", 1000, 1.0)
    mixed = error_bound("bfloat16", 1000, 1.0, accumulate="float32")
    assert gamma(3, 2.0**-8) < mixed < 2 * gamma(3, 2.0**-8)


def _matmul_inputs(rng, kind, m, n, p):
    if kind == "normal":
        a, b = rng.normal(size=(m, n)), rng.normal(size=(n, p))
    elif kind == "large":
        a, b = rng.normal(size=(m, n)) * 1e15, rng.normal(size=(n, p)) * 1e16
    elif kind == "tiny":  # products are float32 subnormals
        a, b = rng.normal(size=(m, n)) * 1e-20, rng.normal(size=(n, p)) * 1e-21
    elif kind == "mixed":  # magnitudes spanning many binades within one dot product
        a = rng.normal(size=(m, n)) * 2.0 ** rng.integers(-20, 20, (m, n))
        b = rng.normal(size=(n, p)) * 2.0 ** rng.integers(-20, 20, (n, p))
    elif kind == "cancel":  # exact result is zero: second half negates the first
        half = max(n // 2, 1)
        x, y = rng.normal(size=(m, half)) * 1e3, rng.normal(size=(half, p))
        a, b = np.concatenate([x, x], axis=1), np.concatenate([y, -y], axis=0)
    else:
        raise AssertionError(kind)
    return a, b


def _float32_products(a32, b32):
    """Several float32 summation orders: BLAS, einsum, and plain left-to-right accumulation."""
    yield a32 @ b32
    yield np.einsum("ij,jk->ik", a32, b32)
    terms = a32[:, :, None] * b32[None, :, :]  # (m, n, p), rounded products
    yield np.cumsum(terms, axis=1, dtype=np.float32)[:, -1, :]


@pytest.mark.parametrize("kind", ["normal", "large", "tiny", "mixed", "cancel"])
def test_close_float32_matmul_never_false_alarms(kind):
    rng = np.random.default_rng(["normal", "large", "tiny", "mixed", "cancel"].index(kind))
    for trial in range(40):
        m, n, p = (int(v) for v in rng.integers(1, 24, 3))
        n = int(rng.choice([n, 64, 257, 1000])) if trial % 4 == 0 else n
        a, b = _matmul_inputs(rng, kind, m, n, p)
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        a64, b64 = a32.astype(np.float64), b32.astype(np.float64)
        ref = a64 @ b64
        mag = np.abs(a64) @ np.abs(b64)
        for actual in _float32_products(a32, b32):
            assert close(ref, actual, dtype="float32", reduction_length=n, magnitude=mag) is None
        # The implementation may also receive float64 inputs and round them itself.
        ref_unrounded = a @ b
        mag_unrounded = np.abs(a) @ np.abs(b)
        f = close(ref_unrounded, a32 @ b32, dtype=np.float32, reduction_length=n,
                  magnitude=mag_unrounded)
        assert f is None


def test_close_float16_and_emulated_bfloat16_never_false_alarm():
    def to_bf16(x):  # round-to-nearest-even to bfloat16, held in float32
        bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32)

    rng = np.random.default_rng(7)
    for _ in range(30):
        m, n, p = (int(v) for v in rng.integers(1, 40, 3))
        a, b = rng.normal(size=(m, n)), rng.normal(size=(n, p))
        ref, mag = a @ b, np.abs(a) @ np.abs(b)
        h = np.cumsum(a.astype(np.float16)[:, :, None] * b.astype(np.float16)[None], axis=1,
                      dtype=np.float16)[:, -1, :]
        assert close(ref, h, dtype="fp16", reduction_length=n, magnitude=mag) is None
        # bf16 inputs, float32 accumulation, bf16 output: the tensor-core recipe.
        acc = np.cumsum(to_bf16(a)[:, :, None] * to_bf16(b)[None], axis=1, dtype=np.float32)
        out = to_bf16(acc[:, -1, :])
        assert close(ref, out, dtype="bf16", reduction_length=n, magnitude=mag,
                     accumulate="float32") is None


def _mutant_setup(seed, n=48):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, n)).astype(np.float32)
    b = rng.normal(size=(n, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    return a, b, ref, mag


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mutant", ["drop_term", "transpose", "off_by_one_row"])
def test_close_catches_matmul_mutants(seed, mutant):
    a, b, ref, mag = _mutant_setup(seed)
    n = a.shape[1]
    if mutant == "drop_term":  # a loop bound off by one skips the last reduction term
        actual = a[:, :-1] @ b[:-1, :]
    elif mutant == "transpose":  # wrong stride: A read as A^T
        actual = a.T @ b
    else:  # output rows written one row down
        actual = np.roll(a @ b, 1, axis=0)
    f = close(ref, actual, dtype="float32", reduction_length=n, magnitude=mag, name="c")
    assert f is not None and f.signature == "mismatch:close:c"
    assert f.details["worst"]["ratio"] > 1
    _json_ok(f)


def test_close_error_just_above_and_below_bound():
    a, b, ref, mag = _mutant_setup(11)
    n = a.shape[1]
    bound = error_bound("float32", n, mag)
    assert close(ref, ref + 0.99 * bound, dtype="float32", reduction_length=n, magnitude=mag) is None
    actual = (a @ b).astype(np.float64)
    actual[7, 3] = ref[7, 3] + 4 * bound[7, 3]
    f = close(ref, actual, dtype="float32", reduction_length=n, magnitude=mag, name="y")
    assert f is not None and f.details["count"] == 1
    worst = f.details["worst"]
    assert worst["index"] == [7, 3]
    assert worst["ratio"] == pytest.approx(4.0, rel=1e-6)
    assert worst["bound"] == pytest.approx(bound[7, 3])
    assert worst["ulps"] > 1 and f.details["max_ulps"] >= worst["ulps"]
    assert "[7, 3]" in f.message and "ulp" in f.message
    # factor loosens the bound
    assert close(ref, actual, dtype="float32", reduction_length=n, magnitude=mag, factor=5) is None


def test_close_default_magnitude_is_abs_expected():
    ref = np.array([1.0, -2.0, 1e-3])
    ok = ref * (1 + 2.0**-24)
    assert close(ref, ok, dtype="float32", reduction_length=1) is None
    assert close(ref, ref * 1.01, dtype="float32", reduction_length=1) is not None


def test_close_nonfinite_handling():
    a, b, ref, mag = _mutant_setup(3, n=16)
    actual = (a @ b).astype(np.float64)
    for bad in (np.nan, np.inf, -np.inf):
        injected = actual.copy()
        injected[2, 9] = bad
        f = close(ref, injected, dtype="float32", reduction_length=16, magnitude=mag, name="o")
        assert f is not None and f.signature == "mismatch:close:o:nonfinite"
        assert f.details["index"] == [2, 9]
        _json_ok(f)
    e = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert close(e, e.copy(), dtype="float32", reduction_length=0) is None
    f = close(e, np.array([np.nan, -np.inf, -np.inf, 1.0]), dtype="float32", reduction_length=0)
    assert f.signature.endswith(":nonfinite") and f.details["index"] == [1]
    f = close(e, np.array([0.0, np.inf, -np.inf, 1.0]), dtype="float32", reduction_length=0)
    assert f.signature.endswith(":nonfinite") and f.details["index"] == [0]


def test_close_shape_mismatch():
    f = close(np.zeros((2, 3)), np.zeros((3, 2)), dtype="float32", reduction_length=1, name="z")
    assert f.signature == "mismatch:close:z:shape"


# ---------------------------------------------------------------------------------------- topk


def test_topk_accepts_every_tie_break():
    scores = np.array([5.0, 3.0, 3.0, 3.0, 1.0])
    for ids in ([0, 1], [0, 2], [3, 0], [2, 0]):
        assert topk(scores, ids, k=2) is None
    for ids in ([0, 1], [0, 3]):
        assert topk(scores, ids, k=2, require_sorted=True) is None
    f = topk(scores, [3, 0], k=2, require_sorted=True)
    assert f.signature == "mismatch:topk:topk:order" and f.details["position"] == 1


def test_topk_catches_wrong_duplicate_out_of_range_and_count():
    scores = np.array([5.0, 3.0, 3.0, 3.0, 1.0])
    f = topk(scores, [0, 4], k=2)
    assert f.signature == "mismatch:topk:topk:not_topk"
    assert (f.details["id"], f.details["score"], f.details["threshold"]) == (4, 1.0, 3.0)
    f = topk(scores, [1, 1], k=2, name="idx")
    assert f.signature == "mismatch:topk:idx:duplicate" and f.details["id"] == 1
    assert f.details["position"] == 1 and f.details["first_position"] == 0
    f = topk(scores, [0, 5], k=2)
    assert f.signature.endswith(":out_of_range") and f.details["id"] == 5
    f = topk(scores, [0, -2], k=2)
    assert f.signature.endswith(":out_of_range")
    f = topk(scores, [0], k=2)
    assert f.signature.endswith(":count") and f.details["expected_count"] == 2
    f = topk(scores, [0, -1], k=2)  # padding although 5 candidates exist
    assert f.signature.endswith(":count")
    _json_ok(f)


def test_topk_smallest_tolerance_padding_and_masks():
    dist = np.array([0.5, 0.1, 0.2, 0.2000001, 9.0])
    assert topk(dist, [1, 2], k=2, largest=False) is None
    assert topk(dist, [1, 3], k=2, largest=False) is not None
    assert topk(dist, [1, 3], k=2, largest=False, tolerance=1e-6) is None
    f = topk(dist, [1, 4], k=2, largest=False)
    assert f.signature.endswith(":not_topk") and f.details["threshold"] == 0.2
    # causal mask: only 3 candidates for k=5, so pad with -1
    scores = np.array([[1.0, 2.0, 3.0, -np.inf, -np.inf], [1.0, 2.0, 3.0, 4.0, 5.0]])
    ids = np.array([[2, 1, 0, -1, -1], [4, 3, 2, 1, 0]])
    assert topk(scores, ids, k=5, require_sorted=True) is None
    masked = ids.copy()
    masked[0, 3] = 3  # returns a masked key
    f = topk(scores, masked, k=5)
    assert f.details["row"] == 0 and f.signature.endswith(":count")
    bad_padding = np.array([[2, -1, 1, 0, -1], [4, 3, 2, 1, 0]])
    assert topk(scores, bad_padding, k=5) is None  # padding position is free unless sorted
    assert topk(scores, bad_padding, k=5, require_sorted=True).signature.endswith(":order")


def test_topk_reports_first_failing_row_and_scores():
    rng = np.random.default_rng(5)
    scores = rng.normal(size=(6, 30))
    ids = np.argsort(-scores, axis=1)[:, :4]
    assert topk(scores, ids, k=4, require_sorted=True) is None
    actual = np.take_along_axis(scores, ids, axis=1)
    assert topk(scores, ids, k=4, actual_scores=actual) is None
    wrong = ids.copy()
    wrong[2, 1] = np.argsort(-scores[2])[10]
    wrong[4, 0] = np.argsort(-scores[4])[20]
    f = topk(scores, wrong, k=4)
    assert f.details["row"] == 2 and f.details["position"] == 1 and f.details["rows_failing"] == 2
    assert "row 2" in f.message
    off = actual.copy()
    off[3, 2] += 1e-3
    assert topk(scores, ids, k=4, actual_scores=off, score_tolerance=1e-2) is None
    f = topk(scores, ids, k=4, actual_scores=off, score_tolerance=1e-6)
    assert f.signature.endswith(":score") and (f.details["row"], f.details["position"]) == (3, 2)


def test_topk_random_ties_and_mutants():
    rng = np.random.default_rng(9)
    for _ in range(100):
        rows, n = int(rng.integers(1, 5)), int(rng.integers(2, 40))
        k = int(rng.integers(1, n + 1))
        scores = rng.integers(0, 5, size=(rows, n)).astype(np.float64)  # many ties
        # a valid answer: sort with a random tie-break
        keys = np.lexsort((rng.random((rows, n)), -scores), axis=1)
        ids = keys[:, :k]
        assert topk(scores, ids, k=k, require_sorted=True) is None
        shuffled = rng.permuted(ids, axis=1)
        assert topk(scores, shuffled, k=k) is None
        if k < n:
            r = int(rng.integers(rows))
            worst = keys[r, -1]
            if scores[r, worst] < scores[r, keys[r, k - 1]]:
                mutant = ids.copy()
                mutant[r, 0] = worst  # may also duplicate nothing: worst is not in the top k
                f = topk(scores, mutant, k=k)
                assert f is not None and f.signature.endswith(":not_topk")


def test_topk_float32_implementation_with_derived_tolerance():
    rng = np.random.default_rng(13)
    for _ in range(20):
        q = rng.normal(size=(8, 64)).astype(np.float32)
        keys = rng.normal(size=(300, 64)).astype(np.float32)
        keys[50:60] = keys[40]  # exact duplicates: exact ties
        ref = q.astype(np.float64) @ keys.astype(np.float64).T
        mag = np.abs(q.astype(np.float64)) @ np.abs(keys.astype(np.float64)).T
        per_row = 2 * error_bound("float32", 64, mag).max(axis=1)
        impl_scores = q @ keys.T
        ids = np.argsort(-impl_scores, axis=1, kind="stable")[:, :16]
        assert topk(ref, ids, k=16, tolerance=per_row) is None


# -------------------------------------------------------------------------------------- recall


def test_recall_at_k_basic_duplicates_padding_and_ties():
    true = np.array([[1, 2, 3], [4, 5, 6], [7, -1, -1], [-1, -1, -1]])
    found = np.array([[3, 2, 9], [4, 4, 4], [8, 7, 0], [1, 2, 3]])
    np.testing.assert_allclose(recall_at_k(true, found, 3), [2 / 3, 1 / 3, 1.0, 1.0])
    np.testing.assert_allclose(recall_at_k([1, 2, 3], [1, 2, 3], 3), [1.0])
    assert recall_at_k(true, found, 3).dtype == np.float64
    # only the first k found ids count
    np.testing.assert_allclose(recall_at_k([[1, 2]], [[9, 1, 2]], 2), [0.5])
    # ties: ids 2 and 3 share the k-th best score; the reference chose 2
    scores = np.array([[9.0, 8.0, 5.0, 5.0, 1.0]])
    np.testing.assert_allclose(recall_at_k([[0, 1, 2]], [[0, 1, 3]], 3), [2 / 3])
    np.testing.assert_allclose(recall_at_k([[0, 1, 2]], [[0, 1, 3]], 3, ref_scores=scores), [1.0])
    np.testing.assert_allclose(recall_at_k(None, [[0, 1, 3]], 3, ref_scores=scores), [1.0])
    np.testing.assert_allclose(recall_at_k(None, [[0, 1, 4]], 3, ref_scores=scores), [2 / 3])
    np.testing.assert_allclose(
        recall_at_k(None, [[4, 3, 2]], 3, ref_scores=-scores, largest=False), [2 / 3]
    )


def test_recall_perfect_passes_random_fails_borderline_passes():
    rng = np.random.default_rng(21)
    n, k, q = 1000, 10, 200
    scores = rng.normal(size=(q, n))
    true = np.argsort(-scores, axis=1)[:, :k]
    assert recall(recall_at_k(true, true, k), bound=0.99) is None
    # an index that finds about 30 % of the neighbours
    found = true.copy()
    miss = rng.random((q, k)) > 0.3
    found[miss] = n + np.arange(miss.sum())  # ids that are never neighbours
    per_query = recall_at_k(true, found, k)
    assert 0.25 < per_query.mean() < 0.35
    f = recall(per_query, bound=0.9, name="octex")
    assert f is not None and f.signature == "mismatch:recall:octex"
    assert f.details["queries"] == q and f.details["upper_bound"] < 0.9
    assert f.details["confidence"] == 0.99 and f.details["mean"] == pytest.approx(per_query.mean())
    _json_ok(f)
    # a few queries with a low mean are not enough evidence
    assert recall([0.6, 0.7, 0.5, 0.6, 0.6], bound=0.9) is None
    assert recall([], bound=0.9) is None
    with pytest.raises(ValueError):
        recall([0.5, 1.5], bound=0.9)


def test_recall_false_alarm_rate_and_power():
    false_alarms = 0
    for seed in range(300):
        rng = np.random.default_rng(seed)
        sample = (rng.random(100) < 0.9).astype(float)  # true mean exactly at the bound
        false_alarms += recall(sample, bound=0.9, confidence=0.99) is not None
    assert false_alarms <= 3
    rng = np.random.default_rng(0)
    assert recall((rng.random(2000) < 0.8).astype(float), bound=0.9) is not None


def test_compare_recall():
    rng = np.random.default_rng(4)
    base = rng.random(500)
    better = np.minimum(base + 0.1, 1.0)
    assert compare_recall(better, base) is None
    assert compare_recall(base, base) is None
    f = compare_recall(np.maximum(base - 0.3, 0.0), base, name="turbo16>=turbo8")
    assert f is not None and f.signature == "mismatch:recall:turbo16>=turbo8"
    assert f.details["mean_difference"] < 0 and f.details["queries"] == 500
    assert compare_recall(np.maximum(base - 0.3, 0.0), base, margin=0.35) is None
    assert compare_recall([0.1, 0.2], [0.9, 0.8]) is None  # two queries prove nothing
    with pytest.raises(ValueError):
        compare_recall([0.1, 0.2], [0.3])


# --------------------------------------------------------------------------------------- trace


def _program(n_steps=8):
    return [{"op": ("alloc" if i % 3 else "free"), "free_blocks": list(range(i, 10))}
            for i in range(n_steps)]


def test_trace_passes_identical_and_names_first_divergence():
    expected = _program()
    assert trace(expected, json.loads(json.dumps(expected))) is None
    actual = json.loads(json.dumps(expected))
    actual[5]["free_blocks"][1] = 99
    actual[7]["free_blocks"][0] = 99
    f = trace(expected, actual, name="kv")
    assert f.details["step"] == 5 and f.details["op"] == "alloc"
    assert "step 5" in f.message and "alloc" in f.message
    assert f.details["path"] == "step['free_blocks'][1]"
    assert f.details["expected"] == expected[5] and f.details["actual"] == actual[5]
    assert f.signature == "mismatch:trace:alloc:exact:step['free_blocks']"
    _json_ok(f)
    # removing earlier steps keeps the signature
    g = trace(expected[3:], actual[3:])
    assert g.details["step"] == 2 and g.signature == f.signature


def test_trace_lengths_ops_and_custom_compare():
    expected = _program()
    f = trace(expected, expected[:6])
    assert f.details["step"] == 6 and f.signature == "mismatch:trace:free:missing_step"
    f = trace(expected[:6], expected)
    assert f.signature == "mismatch:trace:free:extra_step"
    actual = json.loads(json.dumps(expected))
    actual[4]["op"] = "free"
    f = trace(expected, actual)
    assert f.signature == "mismatch:trace:alloc:exact:step['op']"

    steps_e = [{"op": "matmul", "y": np.array([1.0, 2.0])}, {"op": "add", "y": np.array([3.0])}]
    steps_a = [{"op": "matmul", "y": np.array([1.0, 2.0 + 1e-9])}, {"op": "add", "y": np.array([3.5])}]

    def cmp(e, a):
        return close(e["y"], a["y"], dtype="float32", reduction_length=4, name="y")

    f = trace(steps_e, steps_a, compare=cmp)
    assert f.details["step"] == 1 and f.signature == "mismatch:trace:add:close:y"
    assert trace(steps_e, steps_a) is not None  # exact would flag step 0
    assert trace(steps_e, steps_a).details["step"] == 0
