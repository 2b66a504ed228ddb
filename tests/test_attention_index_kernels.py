"""The ``attention_index`` Triton kernels (representative scoring, member scoring with the
in-kernel causal mask, top-k selection) against float64 NumPy references of the hook semantics
(``targets/attention_index/index.py``), their mutants, and the ``triton`` implementation.

Natively on a GPU, under ``TRITON_INTERPRET=1`` without one (``kernels`` calls
``triton_support.prepare`` before Triton is imported).  Shapes are small and hit ragged tiles:
``G`` / ``M`` and ``d`` not multiples of the block, several ``d`` steps (tests pass
``block_g`` / ``block_m`` / ``block_d`` to force many tiles under the interpreter too).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fuzzkit.oracles
from fuzzkit import triton_support

pytestmark = pytest.mark.kernel

if triton_support.unavailable():  # pragma: no cover - torch/triton are dev dependencies
    pytest.skip(triton_support.unavailable() or "", allow_module_level=True)

import torch  # noqa: E402

from fuzzkit.targets.attention_index import kernel_mutants, kernels  # noqa: E402


# ============================================================================ float64 references


def reference_scores(q: np.ndarray, w: np.ndarray, x: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``(I(t, x_g), magnitude)`` float64 ``[T, G]``; magnitude ``sum_h |w| |q|.|x| / sqrt(d)``
    bounds the rounding of every product and sum (ReLU is 1-Lipschitz)."""
    q64, w64, x64 = (a.astype(np.float64) for a in (q, w, x))
    d = q.shape[2]
    dots = np.einsum("thd,gd->thg", q64, x64)
    score = (w64[:, :, None] * np.maximum(dots, 0.0)).sum(1) / np.sqrt(d)
    mag = (np.abs(w64)[:, :, None] * np.einsum("thd,gd->thg", np.abs(q64), np.abs(x64))
           ).sum(1) / np.sqrt(d)
    return score, mag


def reference_members(q: np.ndarray, w: np.ndarray, keys: np.ndarray, cand: np.ndarray,
                      positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    full, mag = reference_scores(q, w, keys)
    rows = np.arange(q.shape[0])[:, None]
    live = (cand >= 0) & (cand <= positions[:, None])
    safe = np.maximum(cand, 0)
    return (np.where(live, full[rows, safe], -np.inf), np.where(live, mag[rows, safe], 0.0))


def reference_topk(scores: np.ndarray, cand: np.ndarray, k: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Plain loops: (score desc, id asc, lane asc), ``-inf`` / ``-1`` never selected."""
    t = scores.shape[0]
    ids = np.full((t, k), -1, np.int64)
    vals = np.full((t, k), -np.inf, np.float64)
    for i in range(t):
        live = [(-float(scores[i, j]), int(cand[i, j]), j) for j in range(scores.shape[1])
                if cand[i, j] >= 0 and scores[i, j] > -np.inf]
        for r, (neg, c, _) in enumerate(sorted(live)[:k]):
            ids[i, r], vals[i, r] = c, -neg
    return ids, vals


# ============================================================================ helpers


def _dev(array: np.ndarray) -> torch.Tensor:
    if array.dtype == np.float32:
        return kernels.guarded(array, torch.float32)
    return torch.from_numpy(np.ascontiguousarray(array)).to(triton_support.device())


def _case(rng: np.random.Generator, t: int, h: int, d: int, s: int
          ) -> tuple[np.ndarray, ...]:
    q = rng.standard_normal((t, h, d)).astype(np.float32)
    w = rng.standard_normal((t, h)).astype(np.float32)
    keys = rng.standard_normal((s, d)).astype(np.float32)
    return q, w, keys


def _cand(rng: np.random.Generator, t: int, m: int, s: int, pad: float = 0.2) -> np.ndarray:
    cand = rng.integers(0, s, (t, m)).astype(np.int32)
    cand[rng.random((t, m)) < pad] = -1
    return cand


def rep_failure(q: np.ndarray, w: np.ndarray, reps: np.ndarray, **blocks: int) -> Any:
    got = kernels.score_representatives(_dev(q), _dev(w), _dev(reps), **blocks).cpu().numpy()
    want, mag = reference_scores(q, w, reps)
    return fuzzkit.oracles.close(want, got, dtype="float32", reduction_length=q.shape[2] + q.shape[1] + 2,
                         magnitude=mag, name="score_representatives")


def member_failure(q: np.ndarray, w: np.ndarray, keys: np.ndarray, cand: np.ndarray,
                   positions: np.ndarray, **blocks: int) -> Any:
    got = kernels.score_members(_dev(q), _dev(w), _dev(keys), _dev(cand),
                                _dev(positions.astype(np.int64)), **blocks).cpu().numpy()
    want, mag = reference_members(q, w, keys, cand, positions)
    return fuzzkit.oracles.close(want, got, dtype="float32", reduction_length=q.shape[2] + q.shape[1] + 2,
                         magnitude=mag, name="score_members")


def run_topk(scores: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    ids, vals = kernels.select_topk(_dev(scores), _dev(cand), k)
    return ids.cpu().numpy(), vals.cpu().numpy()


def topk_failure(scores: np.ndarray, cand: np.ndarray, k: int) -> Any:
    got_ids, got_vals = run_topk(scores, cand, k)
    want_ids, want_vals = reference_topk(scores, cand, k)
    if got_ids.dtype != np.int64 or got_vals.dtype != np.float32:
        return f"dtypes {got_ids.dtype}, {got_vals.dtype}"
    if not np.array_equal(got_ids, want_ids):
        r, c = np.argwhere(got_ids != want_ids)[0]
        return f"ids differ at ({r}, {c}): got {got_ids[r, c]}, want {want_ids[r, c]}"
    if not np.array_equal(got_vals.astype(np.float64), want_vals):
        return "scores differ"
    return None


# ======================================================================= representative scoring

SHAPES = [  # (T, H, d, G): ragged G and d; d spans several 16-wide (and 64-wide) steps
    (1, 1, 1, 1), (3, 2, 7, 5), (5, 4, 37, 70), (17, 3, 80, 33), (4, 2, 64, 64), (2, 1, 129, 9),
]


@pytest.mark.parametrize("t, h, d, g", SHAPES)
def test_score_representatives_match_float64(t: int, h: int, d: int, g: int) -> None:
    rng = np.random.default_rng(t * 1000 + h * 100 + d + g)
    q, w, reps = _case(rng, t, h, d, g)
    failure = rep_failure(q, w, reps)
    assert failure is None, failure.message


@pytest.mark.parametrize("block_g, block_d", [(8, 16), (4, 128)])
def test_score_representatives_with_many_tiles(block_g: int, block_d: int) -> None:
    rng = np.random.default_rng(block_g + block_d)
    q, w, reps = _case(rng, 6, 3, 2 * block_d + 3 if block_d < 64 else 45, 3 * block_g + 5)
    failure = rep_failure(q, w, reps, block_g=block_g, block_d=block_d)
    assert failure is None, failure.message


def test_score_representatives_relu_zero_and_empty() -> None:
    q = np.ones((2, 2, 3), np.float32)
    w = np.array([[1.0, 2.0], [-1.0, 0.5]], np.float32)
    reps = np.array([[-1, -1, -1], [1, 0, 0], [0, 0, 0]], np.float32)
    got = kernels.score_representatives(_dev(q), _dev(w), _dev(reps)).cpu().numpy()
    np.testing.assert_allclose(got, [[0, 3 / np.sqrt(3), 0], [0, -0.5 / np.sqrt(3), 0]],
                               rtol=1e-6, atol=0)
    assert kernels.score_representatives(_dev(q), _dev(w), _dev(reps[:0])).shape == (2, 0)


# ============================================================================ member scoring


@pytest.mark.parametrize("t, h, d, m", SHAPES)
def test_score_members_match_float64(t: int, h: int, d: int, m: int) -> None:
    rng = np.random.default_rng(t * 777 + d + m)
    s = max(t, 40)
    q, w, keys = _case(rng, t, h, d, s)
    positions = np.arange(s - t, s)
    positions[: t // 2] = rng.integers(0, s, t // 2)  # early rows: many future candidates
    failure = member_failure(q, w, keys, _cand(rng, t, m, s), positions)
    assert failure is None, failure.message


def test_score_members_with_many_tiles() -> None:
    rng = np.random.default_rng(5)
    t, h, d, s = 7, 2, 35, 50
    q, w, keys = _case(rng, t, h, d, s)
    positions = rng.integers(0, s, t)
    for block_m, block_d in ((8, 16), (4, 32)):
        failure = member_failure(q, w, keys, _cand(rng, t, 3 * block_m + 5, s), positions,
                                 block_m=block_m, block_d=block_d)
        assert failure is None, failure.message


def test_score_members_causal_mask_and_padding() -> None:
    rng = np.random.default_rng(2)
    q, w, keys = _case(rng, 3, 2, 5, 8)
    cand = np.array([[0, 3, 4, -1], [-1, -1, -1, -1], [7, 6, 0, 5]], np.int32)
    positions = np.array([3, 7, 0], np.int64)
    got = kernels.score_members(_dev(q), _dev(w), _dev(keys), _dev(cand),
                                _dev(positions)).cpu().numpy()
    dead = np.array([[0, 0, 1, 1], [1, 1, 1, 1], [1, 1, 0, 1]], bool)
    assert (np.isneginf(got) == dead).all()
    assert member_failure(q, w, keys, cand, positions) is None


def test_kernels_validate_arguments() -> None:
    rng = np.random.default_rng(0)
    q, w, keys = _case(rng, 2, 2, 4, 6)
    qt, wt, kt = _dev(q), _dev(w), _dev(keys)
    cand = _dev(np.zeros((2, 3), np.int32))
    pos = _dev(np.array([4, 5], np.int64))
    with pytest.raises(ValueError, match="q must be float32"):
        kernels.score_representatives(qt.double(), wt, kt)
    with pytest.raises(ValueError, match=r"w must be \[2, 2\]"):
        kernels.score_representatives(qt, wt[:1], kt)
    with pytest.raises(ValueError, match="q has d=4, reps d=3"):
        kernels.score_representatives(qt, wt, kt[:, :3].contiguous())
    with pytest.raises(ValueError, match="cand must be int32"):
        kernels.score_members(qt, wt, kt, cand.long(), pos)
    with pytest.raises(ValueError, match=r"cand must hold ids in \[-1, 6\)"):
        kernels.score_members(qt, wt, kt, cand + 6, pos)
    with pytest.raises(ValueError, match="positions has 1 rows"):
        kernels.score_members(qt, wt, kt, cand, pos[:1])
    with pytest.raises(ValueError, match="k must be an int >= 0"):
        kernels.select_topk(_dev(np.zeros((2, 3), np.float32)), cand, -1)
    assert kernels.select_topk(_dev(np.zeros((2, 3), np.float32)), cand, 0)[0].shape == (2, 0)
    with pytest.raises(ValueError, match=r"cand must be \[2, 3\]"):
        kernels.select_topk(_dev(np.zeros((2, 3), np.float32)), cand[:, :2].contiguous(), 1)


# ============================================================================ top-k


def _tied_scores(rng: np.random.Generator, t: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Few distinct values (ties everywhere), zeros, ``-inf``, padding, ids in random order."""
    scores = rng.choice(np.array([-1.5, 0.0, 0.0, 0.25, 2.0, -np.inf], np.float32), (t, m))
    cand = np.stack([rng.permutation(4 * m)[:m] for _ in range(t)]).astype(np.int32)
    cand[rng.random((t, m)) < 0.15] = -1
    scores[cand < 0] = -np.inf
    if t > 1:
        scores[1] = -np.inf  # an all -inf row
    return scores, cand


@pytest.mark.parametrize("t, m, k", [(1, 1, 1), (3, 5, 2), (6, 21, 7), (5, 9, 20),
                                     (33, 70, 16), (2, 130, 5)])
def test_select_topk_matches_reference(t: int, m: int, k: int) -> None:
    rng = np.random.default_rng(t * m + k)
    scores, cand = _tied_scores(rng, t, m)
    assert topk_failure(scores, cand, k) is None
    cont = rng.standard_normal((t, m)).astype(np.float32)
    assert topk_failure(cont, np.tile(np.arange(m, dtype=np.int32), (t, 1)), k) is None


def test_select_topk_padding_k_larger_than_m_and_duplicates() -> None:
    scores = np.array([[1.0, 1.0, -np.inf, 3.0], [-np.inf] * 4, [0.0, 0.0, 0.0, 0.0]],
                      np.float32)
    cand = np.array([[5, 2, 1, -1], [0, 1, 2, 3], [9, 9, 4, 7]], np.int32)
    ids, vals = run_topk(scores, cand, 6)
    np.testing.assert_array_equal(ids, [[2, 5, -1, -1, -1, -1], [-1] * 6,
                                        [4, 7, 9, 9, -1, -1]])
    assert np.isneginf(vals[:, 2:][ids[:, 2:] < 0]).all() and vals[0, 0] == 1.0
    ids, vals = run_topk(scores[:, :0].copy(), cand[:, :0].copy(), 2)
    assert (ids == -1).all() and np.isneginf(vals).all() and ids.shape == (3, 2)


# ============================================================================ mutants


def test_every_kernel_mutant_is_listed_with_a_citation() -> None:
    assert len(kernel_mutants.KERNEL_MUTANTS) >= 2
    for name, (cm, bug_class, citation) in kernel_mutants.KERNEL_MUTANTS.items():
        assert callable(cm) and bug_class and citation, name


def test_stale_member_list_mutant_is_caught() -> None:
    rng = np.random.default_rng(3)
    t, s = 5, 30
    q, w, keys = _case(rng, t, 2, 9, s)
    positions = np.arange(s - t, s)
    cand = _cand(rng, t, 12, s)
    shared = np.tile(cand[:1], (t, 1))
    with kernel_mutants.stale_member_list():
        assert member_failure(q, w, keys, cand, positions) is not None
        assert member_failure(q, w, keys, shared, positions) is None  # one shared list: hidden
    assert member_failure(q, w, keys, cand, positions) is None  # restored


def test_topk_tie_break_mutant_is_caught_only_on_ties() -> None:
    rng = np.random.default_rng(4)
    scores, cand = _tied_scores(rng, 4, 12)
    distinct = rng.standard_normal((4, 12)).astype(np.float32)
    with kernel_mutants.topk_tie_break():
        assert topk_failure(scores, cand, 6) is not None
        assert topk_failure(distinct, cand, 6) is None
    assert topk_failure(scores, cand, 6) is None


def test_partial_tile_mask_mutant_is_caught_only_on_a_partial_tile() -> None:
    rng = np.random.default_rng(6)
    t, s = 4, 30
    for d, shows in ((37, True), (16, False), (32, False), (5, True)):
        q, w, keys = _case(rng, t, 2, d, s)
        cand = _cand(rng, t, 10, s, pad=0.0)
        positions = np.full(t, s - 1)
        with kernel_mutants.partial_tile_mask():
            failure = member_failure(q, w, keys, cand, positions, block_d=16)
        assert (failure is not None) == shows, (d, failure)
    assert member_failure(q, w, keys, cand, positions, block_d=16) is None


def test_member_dot_overwritten_shows_only_past_the_d_tile() -> None:
    rng = np.random.default_rng(7)
    t, s = 3, 20
    for d, shows in ((8, False), (5, False), (9, True), (16, True)):
        q, w, keys = _case(rng, t, 2, d, s)
        w = np.abs(w)
        cand = _cand(rng, t, 10, s, pad=0.0)
        positions = np.full(t, s - 1)
        with kernel_mutants.member_dot_overwritten():
            failure = member_failure(q, w, keys, cand, positions, block_d=8)
        assert (failure is not None) == shows, (d, failure)


def test_member_gather_first_tile_shows_only_past_the_column_tile() -> None:
    rng = np.random.default_rng(8)
    t, s, d = 3, 40, 5
    q, w, keys = _case(rng, t, 2, d, s)
    positions = np.full(t, s - 1)
    for m, shows in ((8, False), (3, False), (9, True), (20, True)):
        cand = np.stack([rng.permutation(s)[:m] for _ in range(t)]).astype(np.int32)
        with kernel_mutants.member_gather_first_tile():
            failure = member_failure(q, w, keys, cand, positions, block_m=8)
        assert (failure is not None) == shows, (m, failure)


def test_member_weight_local_row_shows_only_past_the_row_tile() -> None:
    """Rows per program as launched in this mode: one program holds them all -- hidden; one row
    more needs a second program -- its rows read the first program's weights."""
    from fuzzkit.targets.attention_index import tiles

    rows = tiles.current().score_t
    rng = np.random.default_rng(9)
    s, d = 30, 4
    for t, shows in ((rows, False), (rows + 1, True)):
        q, w, keys = _case(rng, t, 2, d, s)
        w[rows:] += np.float32(3.0)  # later rows' weights differ from the first rows'
        cand = _cand(rng, t, 6, s, pad=0.0)
        positions = np.full(t, s - 1)
        with kernel_mutants.member_weight_local_row():
            failure = member_failure(q, w, keys, cand, positions)
        assert (failure is not None) == shows, (t, failure)


# ============================================================================ the implementation


def _index_module() -> Any:
    return pytest.importorskip("fuzzkit.targets.attention_index.index")


def _inputs(method: str, seed: int = 0, t: int = 6) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    s, h, d = 40, 2, 11
    return dict(q=rng.standard_normal((t, h, d)).astype(np.float32),
                w=rng.standard_normal((t, h)).astype(np.float32),
                k=rng.standard_normal((s, d)).astype(np.float32),
                topk=8, method=method, block=6, top_m=3, groups=5, iters=3, chunk=16,
                top_g=2, sink=2, local=3, seed=seed + 1)


@pytest.mark.parametrize("method", ["dense", "hisa", "attention_index"])
def test_triton_search_matches_numpy_search(method: str) -> None:
    """Same shared NumPy selection logic: the kernel hooks give the NumPy hooks' ids
    (continuous random data: no near ties)."""
    index = _index_module()
    from fuzzkit.targets.attention_index import triton_impl

    inputs = _inputs(method, seed=len(method))
    want = index.search(inputs)
    got = triton_impl.run(inputs)
    np.testing.assert_array_equal(got["ids"], want["ids"])
    np.testing.assert_array_equal(got["candidates"], want["candidates"])
    np.testing.assert_allclose(np.asarray(got["scores"], np.float64),
                               np.asarray(want["scores"], np.float64), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, method", [("stale-member-list", "hisa"),
                                          ("topk-tie-break", "dense"),
                                          ("partial-tile-mask", "attention_index")])
def test_kernel_mutants_change_the_search(name: str, method: str) -> None:
    """Through the whole implementation: each mutant changes the returned ids or scores on a
    small case (negative head weights for the tie-break: every key's score <= 0, many exact
    ReLU zeros tie at the top), and the clean kernels are restored."""
    index = _index_module()
    from fuzzkit.targets.attention_index import triton_impl

    inputs = _inputs(method, seed=3)
    if name == "topk-tie-break":
        inputs["w"] = -np.abs(inputs["w"])
    want = index.search(inputs)
    with kernel_mutants.KERNEL_MUTANTS[name][0]():
        got = triton_impl.run(inputs)
    differs = (not np.array_equal(got["ids"], want["ids"])
               or not np.allclose(got["scores"], want["scores"], rtol=1e-4, atol=1e-5))
    assert differs, name
    np.testing.assert_array_equal(triton_impl.run(inputs)["ids"], want["ids"])


# ============================================================================ through the target


@pytest.fixture(scope="module")
def attention_index() -> Any:
    make_target = pytest.importorskip("fuzzkit.targets.attention_index").target
    target = make_target()
    reason = target.implementation("triton").unavailable()
    if reason:
        pytest.skip(reason)
    return target


def test_triton_passes_the_oracle_on_generated_cases(attention_index: Any) -> None:
    """The clean kernels pass the target's float32-vs-float64 oracle (properties are left to
    the target's own tests: each runs the implementation several times, seconds under the
    interpreter)."""
    from fuzzkit.testing import first_failure

    failure = first_failure(attention_index, attention_index.implementation("triton"),
                            max_examples=12, seed=0, properties=False)
    assert failure is None, f"{failure.signature}: {failure.message}"


@pytest.mark.parametrize("name", sorted(kernel_mutants.KERNEL_MUTANTS))
def test_kernel_mutant_is_caught_through_the_target(attention_index: Any, name: str) -> None:
    """Each kernel mutant is listed on the ``triton`` implementation and fails the target's
    oracle within a bounded number of generated cases."""
    from fuzzkit.testing import first_failure

    mutant = next(m for m in attention_index.mutants if m.name.endswith(name))
    assert mutant.implementation == "triton"
    with mutant.applied():
        failure = first_failure(attention_index, attention_index.implementation("triton"),
                                max_examples=60, seed=1, properties=False)
    assert failure is not None, f"{mutant.name} escaped 60 generated cases"
