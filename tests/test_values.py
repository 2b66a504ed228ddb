"""Shared value domains: every kind the contract allows shows up, nothing it forbids does."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from fuzzkit import values


def _arrays(domain: values.Domain, cases: int = 600, shape: tuple[int, ...] = (24,),
            per_row: bool = False) -> list[np.ndarray]:
    out: list[np.ndarray] = []

    @hypothesis_seed(7)
    @settings(max_examples=cases, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data: Any) -> None:
        if per_row:
            out.append(values.rows(data.draw, 4, shape[0], domain))
        else:
            out.append(values.array(data.draw, shape, domain))

    draw()
    return out


def test_float32_contract_without_specials_covers_its_edges() -> None:
    domain = values.Domain("float32")
    arrays = _arrays(domain)
    flat = np.concatenate([a.ravel() for a in arrays])
    assert not np.isnan(flat).any() and np.isfinite(flat).all()
    tiny = np.finfo(np.float32).tiny
    assert (flat == 0).any() and np.signbit(flat[flat == 0]).any()  # exact zeros, and -0.0
    assert ((flat != 0) & (np.abs(flat) < tiny)).any()  # subnormals
    norms = [float(np.linalg.norm(a.astype(np.float64))) for a in arrays]
    assert any(0 < n < 1e-7 for n in norms)  # tiny norms
    assert any(np.abs(a).max() >= np.float32(3.4e38) / 4 for a in arrays)  # huge
    assert any(np.abs(a).max() > 1e18 and np.abs(a).max() < 1e20 for a in arrays)  # sqrt(max)
    ties = sum(len(np.unique(a)) < a.size for a in arrays) / len(arrays)
    assert ties >= 0.3  # repeated values / exact ties in a good share of arrays


def test_specials_only_where_the_contract_has_them() -> None:
    with_nan = _arrays(values.Domain("float32", nan=True, inf=True), cases=400)
    flat = np.concatenate([a.ravel() for a in with_nan])
    assert np.isnan(flat).any() and np.isposinf(flat).any() and np.isneginf(flat).any()
    share = sum(bool(np.isnan(a).any()) for a in with_nan) / len(with_nan)
    assert share >= 0.05
    only_inf = np.concatenate([a.ravel() for a in _arrays(values.Domain("float32", inf=True),
                                                          cases=300)])
    assert not np.isnan(only_inf).any() and np.isinf(only_inf).any()


@pytest.mark.parametrize("dtype, top", [("float32", 0.5), ("float32", 1e12 + 1),
                                         ("bfloat16", 1.01), ("float16", 1000.3)])
def test_max_abs_bounds_every_kind_after_rounding(dtype: str, top: float) -> None:
    flat = np.concatenate([a.ravel() for a in _arrays(values.Domain(dtype, max_abs=top),
                                                      cases=300)])
    assert np.abs(flat.astype(np.float64)).max() <= top
    assert np.abs(flat.astype(np.float64)).max() >= top * 0.99  # and reaches it


def test_max_abs_and_no_subnormals_are_respected() -> None:
    domain = values.Domain("float32", max_abs=1e3, subnormal=False)
    flat = np.concatenate([a.ravel() for a in _arrays(domain, cases=400)])
    assert np.abs(flat).max() <= 1e3
    assert not ((flat != 0) & (np.abs(flat) < np.finfo(np.float32).tiny)).any()
    assert (np.abs(flat) >= 250).any()  # huge means near the contract's largest


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_values_are_exactly_representable(dtype: str) -> None:
    import torch

    flat = np.concatenate([a.ravel() for a in _arrays(values.Domain(dtype), cases=300)])
    torch_dtype = getattr(torch, dtype)
    back = torch.from_numpy(flat).to(torch_dtype).to(torch.float32).numpy()
    assert np.array_equal(back, flat, equal_nan=True)
    assert np.isfinite(flat).all() and np.abs(flat).max() <= values.LARGEST[dtype]


def test_rows_mix_kinds_within_one_batch() -> None:
    batches = _arrays(values.Domain("float32"), cases=200, shape=(8,), per_row=True)
    mixed = 0
    for batch in batches:
        norms = np.linalg.norm(batch.astype(np.float64), axis=1)
        if (norms == 0).any() and (norms > 0).any():
            mixed += 1
    assert mixed > 0


def test_kinds_follow_the_stated_weights() -> None:
    counts: collections.Counter[str] = collections.Counter()

    @hypothesis_seed(11)
    @settings(max_examples=2000, phases=[Phase.generate], database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data(), st.integers(0, 10**6))
    def draw(data: Any, _noise: int) -> None:
        counts[values.kind(data.draw, values.Domain("float32", nan=True))] += 1

    draw()
    total = sum(counts.values())
    for name, weight in values.KINDS:
        share = weight / sum(w for _, w in values.KINDS)
        assert counts[name] / total >= share / 3, (name, counts[name] / total, share)


def test_domain_validation() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        values.Domain("float8")
    with pytest.raises(ValueError, match="unknown value kinds"):
        values.Domain("float32", kinds=("gaussian",))
    with pytest.raises(ValueError, match="no value kind"):
        values.Domain("float32", kinds=("special",)).allowed()
    assert [k for k, _ in values.Domain("float32", kinds=("zero", "ints")).allowed()] == [
        "ints", "zero"]


def test_round_to_rounds_to_nearest_even() -> None:
    x = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 65520.0, np.nan])
    assert values.round_to(x, "bfloat16")[:2].tolist() == [1.0, 1 + 2 * 2.0**-7]
    assert np.isinf(values.round_to(x, "float16")[2])
    assert np.isnan(values.round_to(x, "bfloat16")[3])
