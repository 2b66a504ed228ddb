"""The quant target's Triton scoring kernel: natively on a GPU, under TRITON_INTERPRET=1 without.

Each test calls ``triton_support`` (through the kernel module) before Triton is imported, so the
same tests run in CI without a GPU.  Sizes stay small: every interpreted program costs
milliseconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzzkit.oracles
from fuzzkit.runner import check_case
from fuzzkit.target import Target
from fuzzkit.targets.quant import reference, tiles
from fuzzkit.targets.quant import target as make_target

pytestmark = pytest.mark.kernel

SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def quant() -> Target:
    target = make_target()
    reason = target.implementation("triton").unavailable()
    if reason:
        pytest.skip(reason)
    return target


def _kernel_case(m: int, n: int, dim: int, bits: int, seed: int = 0) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    queries = rng.standard_normal((m, dim)).astype(np.float32)
    codes = rng.integers(0, 1 << bits, (n, dim)).astype(reference.codes_dtype(bits))
    scales = rng.uniform(0.1, 2.0, n).astype(np.float32)
    book = reference.codebook("lloyd_max", bits)
    return queries, codes, scales, book.centroids


@pytest.mark.parametrize(
    "m, n, dim",
    [(1, 1, 1), (3, 5, 7), (6, 40, 33), (17, 65, 80), (64, 64, 64), (70, 130, 96)],
)
@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("config", ["native", "interpreted"])
def test_kernel_scores_match_float64(quant: Target, m: int, n: int, dim: int, bits: int,
                                     config: str) -> None:
    """Ragged M, N and D, several programs per axis: within the float32 dot-product bound --
    with both tile configurations, whichever mode this runs in (so CI checks the GPU's tiles
    under the interpreter, and a GPU checks the interpreter's)."""
    from fuzzkit.targets.quant import kernels

    queries, codes, scales, centroids = _kernel_case(m, n, dim, bits, seed=m * n + dim)
    launched = tiles.NATIVE if config == "native" else tiles.INTERPRETED
    ops = kernels.to_device(queries, codes, scales, centroids, tiles=launched)
    got = kernels.launch(ops, kernels.empty_scores(ops)).cpu().numpy()
    decoded = centroids[codes.astype(np.int64)]
    q = queries.astype(np.float64)
    s = scales.astype(np.float64)[None, :]
    expected = (q @ decoded.T) * s
    magnitude = (np.abs(q) @ np.abs(decoded).T) * s
    failure = fuzzkit.oracles.close(expected, got, dtype="float32", reduction_length=dim + 2,
                            magnitude=magnitude, name="kernel_scores")
    assert failure is None, failure.message


def test_kernel_widens_high_uint16_codes_without_sign_extension(quant: Target) -> None:
    from fuzzkit.targets.quant import kernels

    book = reference.codebook("uniform", 16)
    codes = np.full((2, 5), 65535, dtype=np.uint16)
    codes[1] = 32768
    got = kernels.score(np.ones((1, 5), np.float32), codes, np.ones(2, np.float32),
                        book.centroids)
    np.testing.assert_allclose(got[0], 5 * book.centroids[[65535, 32768]], rtol=1e-6)


def test_kernel_handles_empty_blocks(quant: Target) -> None:
    from fuzzkit.targets.quant import kernels

    queries, codes, scales, centroids = _kernel_case(0, 4, 8, 8)
    assert kernels.score(queries, codes, scales, centroids).shape == (0, 4)


@settings(max_examples=25, **SETTINGS)
@given(st.data())
def test_triton_agrees_with_reference(quant: Target, data: st.DataObject) -> None:
    inputs = data.draw(quant.strategy_for(quant.implementation("triton")))
    failure = check_case(quant, quant.implementation("triton"), inputs).failure
    assert failure is None, f"{failure.signature}: {failure.message}"


def _block() -> tiles.Tiles:
    """The tiles the kernel launches in this mode."""
    return tiles.current()


def _case(dim: int, n: int = 12, m: int = 3, bits: int = 8) -> dict[str, Any]:
    rng = np.random.default_rng(dim)
    return {"bits": bits, "codebook": "lloyd_max", "rotation_seed": 7,
            "vectors": rng.standard_normal((n, dim)).astype(np.float32),
            "queries": rng.standard_normal((m, dim)).astype(np.float32)}


def test_hoisted_mask_mutant_is_caught(quant: Target) -> None:
    from test_quant import first_failure

    with quant.mutant("hoisted-d-mask").applied():
        failure = first_failure(quant, quant.implementation("triton"), max_examples=60)
    assert failure is not None, "the hoisted-d-mask kernel escaped 60 generated cases"


#: ``D`` as (whole blocks, extra coordinates) of the launched ``BLOCK_D``, and whether the
#: hoisted mask shows: only a ragged block after the first one reads past a row.
HOISTED_DIMS = [((0, 16), False), ((1, 0), False), ((2, 0), False), ((1, 1), True),
                ((2, 16), True)]


@pytest.mark.parametrize("blocks, shows", HOISTED_DIMS)
def test_hoisted_mask_shows_only_on_a_ragged_later_block(quant: Target, blocks: tuple[int, int],
                                                         shows: bool) -> None:
    whole, extra = blocks
    dim = whole * _block().block_d + extra
    impl = quant.implementation("triton")
    with quant.mutant("hoisted-d-mask").applied():
        failure = check_case(quant, impl, _case(dim), properties=False).failure
    assert (failure is not None) == shows


@pytest.mark.parametrize("name, axis", [("kernel-scale-tile-offset", "n"),
                                        ("kernel-query-not-advanced", "D"),
                                        ("kernel-query-rows-tile-local", "m")])
def test_kernel_mutants_show_only_past_their_tile(quant: Target, name: str, axis: str) -> None:
    """Each kernel mutant is silent up to its tile (one program along M or N, one step along D)
    and caught one past it -- the sizes the strategy's thresholds aim at."""
    block = _block()
    tile = {"m": block.block_m, "n": block.block_n, "D": block.block_d}[axis]
    impl = quant.implementation("triton")

    def shaped(size: int) -> dict[str, Any]:
        # one axis at ``size``, the others inside one tile (12 stored rows: the symmetric
        # launch runs them along M as well)
        return _case(dim=size if axis == "D" else 24, n=size if axis == "n" else 12,
                     m=size if axis == "m" else 3)

    with quant.mutant(name).applied():
        assert check_case(quant, impl, shaped(tile), properties=False).failure is None
        failure = check_case(quant, impl, shaped(tile + 1), properties=False).failure
    assert failure is not None and failure.signature == "mismatch:close:scores"


def test_every_kernel_mutant_is_caught_by_the_strategy(quant: Target) -> None:
    from test_quant import first_failure

    for mutant in quant.mutants:
        if not mutant.name.startswith("kernel-"):
            continue
        with mutant.applied():
            failure = first_failure(quant, quant.implementation("triton"), max_examples=40)
        assert failure is not None, f"{mutant.name} escaped 40 generated cases"
