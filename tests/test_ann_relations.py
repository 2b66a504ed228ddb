"""The ann target's metamorphic relations: each holds on the NumPy index (over many seeded and
generated cases) and each fails on an implementation that breaks it -- so none is vacuous."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from fuzzkit.registry import get_target
from fuzzkit.targets.ann import index, properties, strategies
from test_ann import make_case

RELATIONS = {p.name: p.check for p in properties.PROPERTIES}
CASES = [
    make_case(seed=1),
    make_case(seed=2, metric="ip", storage="turbo8", rerank=True, inserted=6),
    make_case(seed=3, storage="turbo16", w=None, C=10, P=1, T=3),
    make_case(seed=4, n=12, k=15, R=20, E=3, T=4, P=5),
    make_case(seed=5, storage="turbo8", w=0.5, m=3, P=7, inserted=3),
]


def _run(inputs: dict[str, Any]) -> dict[str, Any]:
    return index.run(inputs)


@pytest.mark.parametrize("name", sorted(RELATIONS))
@pytest.mark.parametrize("case", range(len(CASES)))
def test_relation_holds_on_the_numpy_index(name: str, case: int) -> None:
    assert RELATIONS[name](_run, CASES[case]) is None


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(inputs=strategies.inputs())
def test_relations_hold_on_generated_cases(inputs: dict[str, Any]) -> None:
    for name, check in RELATIONS.items():
        assert check(_run, inputs) is None, name


def test_recall_claim_is_made_and_met_on_a_covered_case() -> None:
    inputs = make_case(seed=6, n=120, C=120, T=2, R=8, k=5)
    from fuzzkit.targets.ann import checks, model

    out = index.run(inputs)
    covered = np.unique(out["cell_members"]).size == 120
    assert checks.recall_claim(model.Params.from_inputs(inputs), covered) is not None
    assert RELATIONS["recall-claim"](_run, inputs) is None


# ------------------------------------------------------------------ each relation can fail


def _mutated(name: str) -> Callable[[dict[str, Any]], Any]:
    mutant = get_target("ann").mutant(name)

    def run(inputs: dict[str, Any]) -> Any:
        with mutant.applied():
            return index.run(inputs)

    return run


def _dropping(key: str, above: int) -> Callable[[dict[str, Any]], Any]:
    """Loses its best result whenever ``inputs[key] > above``: breaks a nesting relation."""
    def run(inputs: dict[str, Any]) -> Any:
        out = index.run(inputs)
        if inputs[key] > above:
            out["ids"] = np.concatenate([out["ids"][:, 1:], np.full((len(out["ids"]), 1), -1)],
                                        axis=1)
        return out

    return run


def _batch_dependent(inputs: dict[str, Any]) -> Any:
    out = index.run(inputs)
    out["distances"] = out["distances"] + np.float32(len(inputs["queries"]) % 2)
    return out


def _noisy(inputs: dict[str, Any]) -> Any:
    out = index.run(inputs)
    out["visited_count"] = out["visited_count"] + np.random.default_rng().integers(0, 1000)
    return out


def _random_ids(inputs: dict[str, Any]) -> Any:
    out = index.run(inputs)
    n = len(inputs["vectors"]) + len(inputs["inserted"])
    rng = np.random.default_rng(0)
    out["ids"] = np.stack([rng.permutation(n)[:out["ids"].shape[1]] for _ in out["ids"]])
    return out


BREAKERS: dict[str, tuple[Callable[[dict[str, Any]], Any], dict[str, Any]]] = {
    "t-monotone": (_mutated("frontier-returned"), make_case(seed=1, T=1)),
    "l-prefix": (_dropping("L", 3), make_case(seed=1, L=3)),
    "c-nesting": (_dropping("C", 6), make_case(seed=1, C=6)),
    "p-nesting": (_dropping("P", 3), make_case(seed=1, P=3)),
    "all-covering": (_mutated("ip-sign-flipped"), make_case(seed=1, metric="ip")),
    "batch-invariant": (_batch_dependent, make_case(seed=1, q=5)),
    "id-permutation": (_mutated("cell-cap-by-arrival"), make_case(seed=1, C=2, w=None)),
    "insert-equals-build": (_mutated("stale-neighbours-after-insert"),
                            make_case(seed=1, inserted=10)),
    "recall-claim": (_random_ids, make_case(seed=6, n=120, C=120, T=2, R=8, k=5)),
    "deterministic": (_noisy, make_case(seed=1)),
}


def test_every_relation_has_a_breaker() -> None:
    assert set(BREAKERS) == set(RELATIONS)


@pytest.mark.parametrize("name", sorted(BREAKERS))
def test_relation_fails_on_an_implementation_that_breaks_it(name: str) -> None:
    impl, inputs = BREAKERS[name]
    failure = RELATIONS[name](impl, inputs)
    assert failure is not None, name
    assert name in failure.signature
