"""FAISS IVF-Flat and HNSW as black-box ``ann`` implementations (fuzzkit.targets.ann.adapters).

The adapters run the real faiss-cpu; they are judged by validity and recall only.  Shown here:
clean results are valid and reach the stated recall on small cases, the black-box oracle fails a
deliberately broken index (both its validity and its recall layer), every planted mutant of the
FAISS usage is found by the fuzzer within a small budget, a short clean run finds nothing, and
fuzzkit's own implementations are still judged structurally.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

pytest.importorskip("faiss", reason="faiss-cpu is not installed (pip install 'fuzzkit[faiss]')")

from test_ann import make_case

from fuzzkit.campaign import CampaignOptions, run_campaign
from fuzzkit.mutation import run_mutant
from fuzzkit.registry import get_target
from fuzzkit.runner import check_case
from fuzzkit.target import Target
from fuzzkit.targets.ann import reference
from fuzzkit.targets.ann.adapters import faiss_impl, judge
from fuzzkit.targets.ann.adapters.faiss_mutants import MUTANTS

IMPLS = ("faiss-ivf", "faiss-hnsw")


@pytest.fixture(scope="module")
def ann() -> Target:
    return get_target("ann")


def _judge(inputs: dict[str, Any], actual: dict[str, Any]) -> Any:
    return judge.oracle(inputs, reference.run(inputs), actual)


@pytest.mark.parametrize("name", IMPLS)
@pytest.mark.parametrize("params", [
    {}, {"metric": "ip"}, {"n": 7, "k": 10}, {"inserted": 12, "k": 8}, {"n": 200, "q": 30},
])
def test_clean_results_are_valid(ann: Target, name: str, params: dict[str, Any]) -> None:
    inputs = make_case(seed=3, **params)
    out = ann.implementation(name)(inputs)
    assert out[judge.KEY] == name
    assert np.shape(out["ids"]) == (inputs["queries"].shape[0], inputs["k"])
    assert _judge(inputs, out) is None
    assert check_case(ann, ann.implementation(name), inputs, confirm=False).failure is None


@pytest.mark.parametrize("name", IMPLS)
def test_replays_the_same(ann: Target, name: str) -> None:
    inputs = make_case(seed=5, n=120)
    a, b = ann.implementation(name)(inputs), ann.implementation(name)(inputs)
    assert np.array_equal(a["ids"], b["ids"]) and np.array_equal(a["distances"], b["distances"])


def test_ivf_parameters_follow_the_case() -> None:
    assert faiss_impl.ivf_params(2000, 1, 5) == (32, 16)  # half the lists at least
    assert faiss_impl.ivf_params(2000, 30, 5) == (32, 30)  # the case's P
    assert faiss_impl.ivf_params(2000, 1, 600) == (32, 32)  # k >= n / 4: exhaustive
    assert faiss_impl.ivf_params(200, 1, 5) == (5, 3)  # 39 training points per centroid
    assert faiss_impl.ivf_params(3, 1, 1) == (1, 1)
    x = np.repeat(np.eye(3, dtype=np.float32), 50, axis=0)
    assert faiss_impl.distinct_rows(x) == 3  # copies do not count


# ------------------------------------------------------------------- the oracle can fail


def _broken(inputs: dict[str, Any], how: str) -> dict[str, Any]:
    out = dict(get_target("ann").implementation("faiss-hnsw")(inputs))
    ids, dist = out["ids"].copy(), out["distances"].copy()
    if how == "random-ids":  # a broken index returning arbitrary (valid) ids
        rng = np.random.default_rng(0)
        n = reference.all_vectors(inputs).shape[0]
        exact = reference.run(inputs)["aux"]["exact"]
        for r in range(ids.shape[0]):
            ids[r] = rng.choice(n, ids.shape[1], replace=False)
            dist[r] = np.sort(exact[r, ids[r]]).astype(np.float32)
            ids[r] = ids[r][np.argsort(exact[r, ids[r]], kind="stable")]
    elif how == "duplicate":
        ids[0, 1] = ids[0, 0]
        dist[0, 1] = dist[0, 0]
    elif how == "unsorted":
        ids[0, :2], dist[0, :2] = ids[0, 1::-1], dist[0, 1::-1]
    elif how == "early-padding":
        ids[0, 0], dist[0, 0] = -1, np.inf
    elif how == "out-of-range":
        ids[0, -1] = 10_000
    return {**out, "ids": ids, "distances": dist}


@pytest.mark.parametrize("how, signature", [
    ("random-ids", "mismatch:ann:black-box:recall"),
    ("duplicate", "mismatch:ann:black-box:duplicate"),
    ("unsorted", "mismatch:ann:black-box:order"),
    ("early-padding", "mismatch:ann:black-box:padding"),
    ("out-of-range", "mismatch:ann:black-box:range"),
])
def test_oracle_fails_a_broken_index(how: str, signature: str) -> None:
    inputs = make_case(seed=1, n=300, q=40, k=5)
    failure = _judge(inputs, _broken(inputs, how))
    assert failure is not None and failure.signature == signature, failure


def test_recall_needs_evidence_not_one_bad_query() -> None:
    """One query with recall 0 among many good ones is no evidence against the target."""
    inputs = make_case(seed=1, n=300, q=40, k=5)
    out = _broken(make_case(seed=1, n=300, q=40, k=5), "none")
    assert _judge(inputs, out) is None
    bad = _broken(inputs, "random-ids")
    mixed = {**out, "ids": out["ids"].copy(), "distances": out["distances"].copy()}
    mixed["ids"][0], mixed["distances"][0] = bad["ids"][0], bad["distances"][0]
    assert _judge(inputs, mixed) is None


def test_recall_is_not_claimed_under_ip_nor_for_hnsw_on_duplicates() -> None:
    x = make_case(seed=1)["vectors"]
    assert judge.recall_target("faiss-hnsw", {"metric": "l2"}, x) == 0.8
    assert judge.recall_target("faiss-hnsw", {"metric": "ip"}, x) is None
    assert judge.recall_target("faiss-ivf", {"metric": "ip"}, x) is None
    assert judge.recall_target("faiss-hnsw", {"metric": "l2"}, np.zeros_like(x)) is None
    assert judge.recall_target("faiss-ivf", {"metric": "l2"}, np.zeros_like(x)) == 0.8


def test_own_implementations_keep_the_structural_oracle(ann: Target) -> None:
    """A numpy output that claimed to be a black box would skip the cell checks: the dispatch
    keys on the declaration only, and fuzzkit's own outputs never carry it."""
    inputs = make_case(seed=1)
    out = ann.implementation("numpy")(inputs)
    assert judge.KEY not in out
    out["cell_members"] = out["cell_members"][::-1].copy()
    failure = ann.oracle(inputs, reference.run(inputs), out)
    assert failure is not None and failure.signature.startswith("mismatch:ann:cells")


# --------------------------------------------------------------- mutants and a clean run


def test_mutants_are_planted_on_both_indexes() -> None:
    per_impl = {name: [m for m in MUTANTS if m.implementation == name] for name in IMPLS}
    assert all(len(found) >= 3 for found in per_impl.values()), per_impl


@pytest.mark.parametrize("name", [m.name for m in MUTANTS])
def test_mutant_is_found_by_the_fuzzer(ann: Target, name: str) -> None:
    result = run_mutant(ann, ann.mutant(name), budget=900.0, seed=0, max_cases=400)
    assert result.detected, f"{name} escaped a hunt of 400 cases"  # the slowest needs 215
    assert result.signature and "black-box" in result.signature


def test_short_clean_run_finds_nothing(ann: Target, tmp_path: Any) -> None:
    started = time.monotonic()
    for name in IMPLS:
        summary = run_campaign(CampaignOptions(
            targets=["ann"], impl=name, budget=8.0, seed=0, corpus=tmp_path / "corpus",
            report_dir=tmp_path / "reports", profile="ci", progress="quiet"))
        assert summary.cases > 20, summary
        assert not summary.findings, summary.findings
    assert time.monotonic() - started < 40
