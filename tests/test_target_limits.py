"""Resource limits of the six component targets (``targets/<name>/limits.py``).

* every limit is far above what the target's strategy generates: 300 generated cases pass;
* every limit refuses a case past it, by name, without the measure allocating what the case
  claims (arrays are zero-stride views, lists repeat one object), and the same case passes once
  that one limit is raised -- each crafted case exceeds exactly its own limit;
* garbage inputs never make :func:`fuzzkit.limits.check` raise.
"""

from __future__ import annotations

import copy
import tracemalloc
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzkit import limits, reach
from fuzzkit.registry import get_target

TARGETS = ("paged_kv", "scheduling", "ann", "quant", "scute", "attention_index")
#: How far below its default every limit's largest generated value must stay (``bits`` is the
#: quant codec's largest width, not a size with headroom).
MARGIN = 4
NO_MARGIN = {("quant", "bits")}


def _view(shape: tuple[int, ...], value: float = 0.5) -> np.ndarray:
    """A float32 array of ``shape`` that takes no memory (every element is one value)."""
    return np.broadcast_to(np.float32(value), shape)


# ---------------------------------------------------------------------------------------------
# 1. generated cases pass


@pytest.fixture(scope="module", params=TARGETS)
def generated(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    target = get_target(request.param)
    return request.param, reach.generated(target.strategy_for(None), 300, seed=0)


def test_generated_cases_pass_the_limits(generated: tuple[str, list[dict[str, Any]]]) -> None:
    name, cases = generated
    target = get_target(name)
    assert len(cases) == 300
    most = {lim.name: 0 for lim in target.limits}
    for inputs in cases:
        assert limits.check(name, target.limits, inputs) is None
        for lim in target.limits:
            most[lim.name] = max(most[lim.name], lim.measure(inputs))
    for lim in target.limits:
        if (name, lim.name) not in NO_MARGIN:
            assert most[lim.name] * MARGIN <= lim.default, (name, lim.name, most[lim.name])


def test_every_target_declares_limits() -> None:
    for name in TARGETS:
        target = get_target(name)
        names = [lim.name for lim in target.limits]
        assert names and len(set(names)) == len(names), name
        assert all(lim.default > 0 and lim.what for lim in target.limits), name
        assert target.describe()["limits"][0]["name"] == names[0]


# ---------------------------------------------------------------------------------------------
# 2. one crafted case per limit

Case = dict[str, Any]
Change = Callable[[Case], None]


def _paged_kv_base() -> Case:
    return {"config": {"num_blocks": 8, "block_size": 2, "sliding_window": None,
                       "eviction": "lru"},
            "program": [{"op": "add", "rid": 0, "tokens": [1, 2, 3], "adapter": None,
                         "salt": None},
                        {"op": "allocate", "rid": 0, "n": 3}, {"op": "write", "rid": 0},
                        {"op": "publish", "rid": 0}, {"op": "finish", "rid": 0}]}


def _add(rid: int, tokens: list[int]) -> dict[str, Any]:
    return {"op": "add", "rid": rid, "tokens": tokens, "adapter": None, "salt": None}


def _config(**changes: Any) -> Change:
    def change(inputs: Case) -> None:
        inputs["config"].update(changes)
    return change


def _program(steps: list[Any]) -> Change:
    def change(inputs: Case) -> None:
        inputs["program"] += steps
    return change


def _both(*changes: Change) -> Change:
    def change(inputs: Case) -> None:
        for c in changes:
            c(inputs)
    return change


PAGED_KV: dict[str, Change] = {
    "steps": _program([{"op": "reset"}] * 10**6),
    "blocks": _config(num_blocks=8_192),
    "block_size": _config(num_blocks=2, block_size=8_192),
    "slots": _config(num_blocks=1_024, block_size=256),
    "tokens": _program([_add(rid, [0] * 2_000) for rid in range(1, 1_001)]),
    "request_tokens": _program([_add(1, [0] * 19_000)]),
    "kv_reads": _program([_add(1, [0] * 2_000)] + [{"op": "allocate", "rid": 1, "n": 2_000}]
                         * 1_000),
    "check_work": _both(_config(num_blocks=1_024), _program([{"op": "reset"}] * 1_995)),
}


def _scheduling_base() -> Case:
    return {"config": {"block_size": 2, "instances": 1,
                       "router": {"name": "prefix", "vnodes": 4}},
            "requests": [{"rid": 0, "arrival": 0, "prompt": 3, "output": 1, "blocks": [0, 1]}]}


def _requests(count: int, prompt: int, output: int) -> Change:
    def change(inputs: Case) -> None:
        inputs["requests"] = [{"rid": 0, "arrival": 0, "prompt": prompt, "output": output,
                               "blocks": []}] * count
    return change


def _router(**router: Any) -> Change:
    def change(inputs: Case) -> None:
        inputs["config"]["router"] = router
    return change


SCHEDULING: dict[str, Change] = {
    "requests": _requests(10**6, 0, 0),
    "instances": _both(_config(instances=10**9), _router(name="round_robin")),
    "tokens": _requests(1, 1, 10**7),
    "ring_points": _router(name="prefix", vnodes=10**7),
    "route_work": _both(_requests(2_000, 0, 0), _router(name="prefix", vnodes=8_192)),
    "queue_work": _both(_requests(2_000, 50, 50), _router(name="round_robin")),
}


def _ann_base() -> Case:
    rng = np.random.default_rng(0)
    return {"vectors": rng.standard_normal((8, 4)).astype(np.float32),
            "queries": rng.standard_normal((2, 4)).astype(np.float32),
            "L": 1, "m": 1, "w": 1.0, "C": 4, "R": 2, "E": 2, "T": 1, "P": 1, "k": 2, "seed": 0,
            "metric": "l2", "storage": "float32", "rerank": False}


def _set(**changes: Any) -> Change:
    def change(inputs: Case) -> None:
        inputs.update(changes)
    return change


ANN: dict[str, Change] = {
    "vectors": _set(vectors=_view((4_097, 4)), queries=_view((0, 4))),
    "queries": _set(queries=_view((200_000, 4))),
    "dim": _set(vectors=_view((8, 90_000)), queries=_view((2, 90_000))),
    "elements": _set(vectors=_view((1, 1_024)), queries=_view((2_048, 1_024))),
    "pairs": _set(vectors=_view((4_096, 4)), queries=_view((2_048, 4))),
    "distance_work": _set(vectors=_view((900, 1_024)), queries=_view((2, 1_024))),
    "tables": _set(L=100_000),
    "proj_dims": _set(m=100_000),
    "projections": _set(L=128, m=128, queries=_view((992, 4))),
    "cell_cap": _set(C=10**9),
    "graph_degree": _set(R=2_000_000),
    "beam": _set(E=2_000_000),
    "rounds": _set(T=1_000_000),
    "probes": _set(P=10**9),
    "k": _set(k=10**9),
    "expansion": _set(queries=_view((2_048, 4)), T=1_024, E=1_024, R=4_096),
}


def _quant_base() -> Case:
    rng = np.random.default_rng(0)
    return {"bits": 8, "codebook": "lloyd_max", "rotation_seed": 1,
            "vectors": rng.standard_normal((4, 8)).astype(np.float32),
            "queries": rng.standard_normal((2, 8)).astype(np.float32)}


QUANT: dict[str, Change] = {
    "vectors": _set(vectors=_view((2_049, 8))),
    "queries": _set(queries=_view((200_000, 8))),
    "dim": _set(vectors=_view((4, 300_000)), queries=_view((2, 300_000))),
    "elements": _set(queries=_view((2_048, 1_024)), vectors=_view((4, 1_024))),
    "scores": _set(vectors=_view((2_048, 8)), queries=_view((500, 8))),
    "score_work": _set(vectors=_view((1_500, 1_333)), queries=_view((0, 1_333))),
    "bits": _set(bits=10**9),
}


def _scute_base() -> Case:
    from fuzzkit.targets.scute import strategies

    return strategies.build(0, k=8, nout=4, ntok=2, dtype="float32", mode="decode",
                            methods=["lora"])


def _layer(tokens: int = 2, k: int = 8, nout: int = 4) -> Change:
    def change(inputs: Case) -> None:
        inputs.update(x=_view((tokens, k)), w0=_view((nout, k)), b0=_view((nout,)),
                      token_adapter=np.broadcast_to(np.int64(0), (tokens,)))
    return change


def _adapters(adapters: list[dict[str, Any]]) -> Change:
    def change(inputs: Case) -> None:
        inputs["adapters"] = adapters
    return change


def _lora(rank: int) -> Change:
    def change(inputs: Case) -> None:
        inputs["adapters"][0].update(A=_view((rank, 8)), B=_view((4, rank)))
    return change


SCUTE: dict[str, Change] = {
    "tokens": _layer(tokens=800_000),
    "in_features": _layer(k=3_000),
    "out_features": _layer(nout=500_000),
    "adapters": _adapters([{"method": "identity"}] * 100_000),
    "rank": _lora(600_000),
    "neumann_terms": _adapters([{"method": "oft", "block_size": 1, "Q": _view((8, 1, 1), 0.0),
                                 "cayley": "neumann", "neumann_terms": 100_000}]),
    "boft_factors": _adapters([{"method": "boft", "block_size": 2, "factors": 10_000,
                                "Q": _view((10_000, 4, 2, 2), 0.0), "boft_s": _view((4,)),
                                "cayley": "exact", "neumann_terms": 5}]),
    "elements": _adapters([{"method": "vera", "A_shared": _view((2, 5_000_000)),
                            "B_shared": _view((4, 2)), "lambda_d": _view((2,)),
                            "lambda_b": _view((4,))}]),
    "outputs": _layer(tokens=4_096, nout=1_024),
    "slot_elements": _both(_layer(k=256), _adapters([{"method": "identity"}] * 200)),
    "token_transforms": _layer(tokens=4_096, k=200),
    "work": _both(_layer(tokens=50, k=1_024),
                  _adapters([{"method": "boft", "block_size": 2, "factors": 10,
                              "Q": _view((10, 512, 2, 2), 0.0), "boft_s": _view((4,)),
                              "cayley": "exact", "neumann_terms": 5}])),
}


def _attention_index_base() -> Case:
    rng = np.random.default_rng(0)
    return {"q": rng.standard_normal((2, 1, 4)).astype(np.float32),
            "w": rng.random((2, 1)).astype(np.float32),
            "k": rng.standard_normal((6, 4)).astype(np.float32), "topk": 2, "method": "dense"}


def _shapes(t: int = 2, h: int = 1, d: int = 4, s: int = 6) -> Change:
    return _set(q=_view((t, h, d)), w=_view((t, h)), k=_view((s, d)))


ATTENTION_INDEX: dict[str, Change] = {
    "queries": _shapes(t=600_000),
    "heads": _shapes(h=300_000),
    "dim": _shapes(d=400_000),
    "keys": _shapes(s=900_000),
    "elements": _shapes(d=1_024, s=8_192),
    "pairs": _shapes(t=2_000, h=1, d=1, s=4_000),
    "score_work": _shapes(t=4, h=256, d=256, s=256),
    "group_work": _both(_shapes(t=8, s=8_192), _set(method="hisa", block=1)),
    "kmeans_work": _both(_shapes(d=16, s=8_192),
                         _set(method="attention_index", groups=1_024, iters=2)),
    **{key: _set(**{key: 10**9}) for key in ("topk", "iters", "block", "top_m", "groups",
                                              "chunk", "top_g", "sink", "local")},
}

CRAFTED: dict[str, tuple[Callable[[], Case], dict[str, Change]]] = {
    "paged_kv": (_paged_kv_base, PAGED_KV),
    "scheduling": (_scheduling_base, SCHEDULING),
    "ann": (_ann_base, ANN),
    "quant": (_quant_base, QUANT),
    "scute": (_scute_base, SCUTE),
    "attention_index": (_attention_index_base, ATTENTION_INDEX),
}


@pytest.mark.parametrize("name", TARGETS)
def test_the_base_cases_are_valid_and_within_the_limits(name: str) -> None:
    target = get_target(name)
    base, crafted = CRAFTED[name]
    inputs = base()
    assert target.validate(inputs) is None
    assert limits.check(name, target.limits, inputs) is None
    assert sorted(crafted) == sorted(lim.name for lim in target.limits)


def _check_measured(name: str, inputs: Case, overrides: dict[str, int] | None = None
                    ) -> tuple[Any, int]:
    """``limits.check`` and the peak memory it took (bytes, tracemalloc)."""
    target = get_target(name)
    tracemalloc.start()
    try:
        result = limits.check(name, target.limits, inputs, overrides)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak


CASES = [(name, lim) for name in TARGETS for lim in CRAFTED[name][1]]


@pytest.mark.parametrize(("name", "limit"), CASES, ids=[f"{n}-{lim}" for n, lim in CASES])
def test_each_limit_refuses_a_case_past_it(name: str, limit: str) -> None:
    target = get_target(name)
    base, crafted = CRAFTED[name]
    inputs = base()
    crafted[limit](inputs)
    declared = {lim.name: lim for lim in target.limits}
    size = declared[limit].measure(inputs)
    over = [lim.name for lim in target.limits if lim.measure(inputs) > lim.default]
    assert over == [limit], (over, size)
    message, peak = _check_measured(name, inputs)
    assert isinstance(message, str) and "\n" not in message
    assert f" {limit}={declared[limit].default} " in message, message
    assert f"--limit {limit}={size}" in message, message
    assert peak < 1_000_000, peak  # nothing the size of the claim (zero-stride views, repeats)
    assert limits.check(name, target.limits, inputs, {limit: size}) is None
    assert limits.check(name, target.limits, inputs, {limit: size - 1}) is not None


@pytest.mark.parametrize("name", TARGETS)
def test_huge_claims_are_refused_cheaply(name: str) -> None:
    """Every crafted change at once: refused (by some limit), in little memory."""
    base, crafted = CRAFTED[name]
    inputs = base()
    for change in crafted.values():
        change(inputs)
    message, peak = _check_measured(name, inputs)
    assert isinstance(message, str) and "exceeds the limit" in message, message
    assert peak < 1_000_000, peak


# ---------------------------------------------------------------------------------------------
# 3. garbage never raises

GARBAGE: list[Any] = [
    {}, {"config": []}, {"program": 5}, {"program": "abc"}, {"requests": "abc"},
    {"config": "x", "requests": [1, "a", None, [], {"prompt": "1e9"}]},
    {"config": {"num_blocks": "12", "block_size": float("inf")}, "program": [5, "a", None]},
    {"config": {"num_blocks": float("nan"), "block_size": True}},
    {"config": {"instances": "3", "scale_ups": "abc", "router": {"name": "prefix",
                                                                 "vnodes": [1]}}},
    {"program": [{"op": "add", "rid": [1], "tokens": "abcdef"}, {"op": "fork", "src": {},
                                                                   "dst": []},
                 {"op": "allocate", "rid": [1], "n": "x"}]},
    {"requests": [{"prompt": "9" * 5000, "output": -5}, {"prompt": None}]},
    {"vectors": "abc", "queries": [[1, 2], [3]], "inserted": "x", "L": "2", "T": None},
    {"vectors": [[]], "queries": [], "k": 2.5, "R": -3},
    {"x": "abc", "w0": [[1.0]], "adapters": "xyz"},
    {"x": [[1.0, 2.0]], "w0": [[1.0, 2.0]], "adapters": [5, "a", {"method": "boft", "Q": "x"},
                                                          {"A": [[[1]]], "neumann_terms": "5"}]},
    {"q": "x", "w": None, "k": [[1.0]], "method": "hisa", "block": "0", "groups": None},
    {"q": [[[1.0]]], "k": [[1.0]], "method": "attention_index", "chunk": -1, "iters": -5},
    {"vectors": np.zeros((0,)), "queries": np.float32(1.0), "bits": np.int64(8)},
    [], "inputs", None, 7,
]


@pytest.mark.parametrize("name", TARGETS)
@pytest.mark.parametrize("inputs", GARBAGE, ids=[f"g{i}" for i in range(len(GARBAGE))])
def test_garbage_never_raises(name: str, inputs: Any) -> None:
    target = get_target(name)
    result = limits.check(name, target.limits, copy.deepcopy(inputs))
    assert result is None or (isinstance(result, str) and "\n" not in result)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)
KEYS = ("config", "program", "requests", "vectors", "queries", "inserted", "x", "w0", "b0",
        "adapters", "token_adapter", "q", "w", "k", "L", "m", "C", "R", "E", "T", "P", "method",
        "topk", "block", "groups", "chunk", "iters", "bits", "op", "rid", "tokens", "prompt",
        "num_blocks", "block_size", "instances", "router", "vnodes", "A", "Q", "neumann_terms")
#: Values with the keys the measures read, nested: dicts that look like a case, at any depth.
LOOKALIKE = st.recursive(
    JSON, lambda inner: st.dictionaries(st.sampled_from(KEYS), inner, max_size=6)
    | st.lists(inner, max_size=3), max_leaves=30)


@pytest.mark.parametrize("name", TARGETS)
def test_arbitrary_json_never_raises(name: str) -> None:
    target = get_target(name)

    @settings(max_examples=150, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.dictionaries(st.sampled_from(KEYS), LOOKALIKE, max_size=8))
    def check(inputs: dict[str, Any]) -> None:
        result = limits.check(name, target.limits, inputs)
        assert result is None or (isinstance(result, str) and "\n" not in result)

    check()
