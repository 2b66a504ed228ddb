"""The serving simulator, its cost model, cache and workloads, and the invariant checks.

Each invariant check has a test where it fires on a run that breaks it (a hand-edited output or
a deliberately broken policy), so none of them can pass vacuously.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fuzzkit.targets.scheduling import checks, workload
from fuzzkit.targets.scheduling.cache import PrefixCache
from fuzzkit.targets.scheduling.cost import CostModel
from fuzzkit.targets.scheduling.policies import reference as policies
from fuzzkit.targets.scheduling.routers import reference as routers
from fuzzkit.targets.scheduling.sim import simulate
from fuzzkit.targets.scheduling.workload import Request, Trie


def request(rid: int, arrival: int, prompt: int, output: int = 1, blocks: tuple[int, ...] = (),
            block_size: int = 2, **kw: Any) -> Request:
    if not blocks:
        blocks = tuple(1000 * (rid + 1) + j for j in range((prompt + output) // block_size))
    return Request(rid, arrival, prompt, output, blocks, **kw)


def config(**kw: Any) -> dict[str, Any]:
    base = {"block_size": 2, "instances": 1, "token_budget": 64, "max_running": 8,
            "cache_blocks": 0, "cost": {"k0": 10, "k1": 1, "k2": 0, "decode": 1}}
    base.update(kw)
    return base


def run(cfg: dict[str, Any], requests: list[Request], pol: Any = policies) -> dict[str, Any]:
    return simulate(cfg, requests, pol, routers)


# ------------------------------------------------------------------------------- cost model


def test_chunks_add_up_to_the_prefill_cost() -> None:
    model = CostModel(k0=7, k1=3, k2=2, decode=1)
    u, h = 37, 11
    done, total = h, 0
    for c in (5, 1, 20, 11):
        total += model.chunk(c, done)
        done += c
    assert done == h + u and total + model.k0 == model.prefill(u, h)
    # the formula of docs/COMPONENTS.md: k0 + k1 u + k2' u (h + u/2) with k2' = 2 k2
    assert model.prefill(u, h) == 7 + 3 * u + 2 * 2 * u * (h + u / 2)


def test_unknown_cost_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown cost model fields"):
        CostModel.from_json({"k3": 1})


# ------------------------------------------------------------------------------------ cache


def test_cache_hits_count_leading_blocks_and_evict_leaves_first() -> None:
    cache = PrefixCache(4)
    cache.insert([1, 2, 3])
    assert cache.match([1, 2, 3, 4]) == 3 and cache.match([7, 1]) == 0
    cache.insert([1, 5])  # chain 1-5 now most recent; 3 is the least recent leaf
    cache.insert([9])  # over capacity: the leaf 3 goes, not the shared root 1
    assert 3 not in cache and cache.match([1, 2]) == 2 and len(cache) == 4


def test_zero_capacity_cache_never_hits() -> None:
    cache = PrefixCache(0)
    cache.insert([1, 2])
    assert cache.match([1, 2]) == 0 and cache.version == 0


# -------------------------------------------------------------------------------- simulator


def test_single_request_timeline() -> None:
    # prompt 6 tokens, output 3: prefill step 10 + 6 = 16; two decode steps of 10 + 1
    out = run(config(), [request(0, 5, 6, 3)])
    rec = out["requests"]["0"]
    assert rec == {"release": 5, "instance": 0, "dispatch": 5, "hit": 0, "first_token": 21,
                   "finish": 43}
    assert [e["op"] for e in out["events"]] == ["route", "dispatch"]
    assert checks.first_violation({"config": config()}, out) is None


def test_chunked_prefill_respects_the_token_budget() -> None:
    cfg = config(token_budget=4, max_running=2)
    out = run(cfg, [request(0, 0, 9), request(1, 0, 3)])
    assert all(s["decodes"] + s["prefill_tokens"] <= 4 for s in out["steps"])
    # 4 + 4 tokens of request 0, then its last token and request 1's three share a step
    assert [s["prefill_tokens"] for s in out["steps"]] == [4, 4, 4]
    assert out["requests"]["1"]["dispatch"] > out["requests"]["0"]["dispatch"]
    assert checks.first_violation({"config": cfg}, out) is None


def test_second_turn_hits_the_first_turns_blocks() -> None:
    trie = Trie()
    first = Request(0, 0, 6, 2, tuple(trie.path(["a", "b", "c", "d"])))
    second = Request(1, 0, 10, 2, tuple(trie.path(["a", "b", "c", "d", "e", "f"])),
                     after=0, think=3)
    cfg = config(cache_blocks=16)
    out = run(cfg, [first, second])
    r0, r1 = out["requests"]["0"], out["requests"]["1"]
    assert r1["release"] == r0["finish"] + 3
    assert r1["hit"] == 8  # the 4 full blocks of turn 1's prompt + output


def test_serial_mode_serves_one_whole_request_per_step() -> None:
    cfg = config(serial=True, token_budget=2, max_running=1)
    out = run(cfg, [request(0, 0, 5, 4), request(1, 0, 3, 4)])
    assert out["requests"]["0"]["first_token"] == 15 and out["requests"]["1"]["first_token"] == 28
    assert out["requests"]["1"]["finish"] == 28  # decoding is not modelled in serial mode


def test_runs_are_deterministic_and_scale_ups_join_the_cluster() -> None:
    rng = np.random.default_rng(3)
    reqs = workload.renumber(workload.spike(
        rng, Trie(), base_rate=50, spike_rate=200, duration=workload.SECOND // 5,
        spike_start=workload.SECOND // 20, spike_end=workload.SECOND // 10, block_size=16,
        documents=5, doc_tokens=(32, 200), query_tokens=(1, 40), output=(1, 8)))
    cfg = config(block_size=16, instances=2, cache_blocks=64, scale_ups=[workload.SECOND // 10],
                 router={"name": "least_loaded"}, cost={})
    a, b = run(cfg, reqs), run(copy.deepcopy(cfg), reqs)
    assert a == b
    assert {e["inst"] for e in a["events"] if e["op"] == "route"} == {0, 1, 2}
    assert checks.first_violation({"config": cfg}, a) is None


def test_generators_are_reproducible_from_the_seed() -> None:
    def make(seed: int) -> list[Request]:
        return workload.agent_sessions(
            np.random.default_rng(seed), Trie(), sessions=3, turns=3, start=0, spread=100,
            block_size=4, system_tokens=16, first_prompt=(4, 20), turn_tokens=(1, 9),
            output=(1, 5), think=(0, 10))
    assert make(1) == make(1) and make(1) != make(2)
    reqs = make(1)
    assert workload.validate_requests(reqs, 4) is None
    # each turn resends the previous turn's blocks
    for r in reqs:
        if r.after is not None:
            prev = reqs[r.after]
            assert r.blocks[: len(prev.blocks)] == prev.blocks


def test_validate_names_a_broken_workload() -> None:
    bad = [request(0, 0, 4), request(0, 1, 4)]
    assert "appears twice" in workload.validate_requests(bad, 2)
    assert "blocks" in workload.validate_requests([Request(0, 0, 4, 1, (1,))], 2)


# ------------------------------------------------------------------- invariants can fail


class _Idle:
    """A policy that holds its queue: the work-conservation and liveness checks must fire."""

    name = "fcfs"

    def __init__(self, **_: Any) -> None:
        self.n = 0

    def push(self, w: Any) -> None:
        self.n += 1

    def reprice(self, *a: Any) -> None:
        pass

    def pop(self, now: int) -> None:
        return None

    def __len__(self) -> int:
        return self.n


class _Twice(_Idle):
    """Dispatches the same request again: the simulator must stop."""

    def push(self, w: Any) -> None:
        self.first = w.rid

    def pop(self, now: int) -> int:
        return self.first


def _module(cls: type) -> Any:
    return SimpleNamespace(make_policy=lambda name, **params: cls())


def test_idle_policy_breaks_work_conservation() -> None:
    cfg = config()
    out = run(cfg, [request(0, 0, 4)], _module(_Idle))
    violation = checks.first_violation({"config": cfg}, out)
    assert violation["check"] == "work_conservation"


def test_liveness_fires_on_a_stuck_request() -> None:
    cfg = config()
    out = run(cfg, [request(0, 0, 4)], _module(_Idle))
    out["steps"] = []  # hide the step record: the request still never finishes
    assert checks.first_violation({"config": cfg}, out)["check"] == "liveness"


def test_double_dispatch_stops_the_simulation() -> None:
    cfg = config(token_budget=64)
    out = run(cfg, [request(0, 0, 2), request(1, 0, 2)], _module(_Twice))
    assert out["violation"]["check"] == "dispatch_unknown"


def test_bypass_check_fires_above_beta() -> None:
    cfg = config(policy={"name": "fairway", "beta": 5})
    out = run(cfg, [request(0, 0, 40), request(1, 1, 2), request(2, 1, 2)])
    assert checks.first_violation({"config": cfg}, out) is None
    events = out["events"]
    # forge a trace where request 0 (oldest) is overtaken by more than β of work
    dispatches = [e for e in events if e["op"] == "dispatch"]
    forged = copy.deepcopy(out)
    forged["events"] = [e for e in events if e["op"] == "route"] + [
        {**dispatches[0], "rid": 1, "cost": 4}, {**dispatches[0], "rid": 2, "cost": 4},
        {**dispatches[0], "rid": 0}]
    assert checks.first_violation({"config": cfg}, forged)["check"] == "bypass"


def test_fcfs_order_check_fires_on_an_out_of_order_dispatch() -> None:
    cfg = config(policy={"name": "fcfs"})
    out = run(cfg, [request(0, 0, 2), request(1, 0, 2)])
    forged = copy.deepcopy(out)
    routes = [e for e in out["events"] if e["op"] == "route"]
    d = [e for e in out["events"] if e["op"] == "dispatch"]
    forged["events"] = routes + [d[1], d[0]]
    assert checks.first_violation({"config": cfg}, forged)["check"] == "fcfs_order"


def test_token_budget_check_fires() -> None:
    cfg = config(token_budget=4, max_running=2)
    out = run(cfg, [request(0, 0, 9)])
    forged = copy.deepcopy(out)
    forged["steps"][0]["prefill_tokens"] = 5
    assert checks.first_violation({"config": cfg}, forged)["check"] == "token_budget"


def test_routing_check_fires_on_a_full_instance() -> None:
    cfg = config(instances=2, router={"name": "least_loaded"})
    out = run(cfg, [request(0, 0, 9), request(1, 0, 2)])
    forged = copy.deepcopy(out)
    second = [e for e in forged["events"] if e["op"] == "route"][1]
    second["inst"] = 0  # instance 0 already holds request 0; instance 1 is empty
    assert checks.first_violation({"config": cfg}, forged)["check"] == "routing"


# ------------------------------------------------------------------------ session KV memory


def _two_sessions(eviction: str, cpu_blocks: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """Session A (17 tokens: 9 blocks, the last partial) goes idle, session B needs 7 of the 12
    blocks, so 4 of A's go; then A returns with a 20-token prompt."""
    trie = Trie()
    a1 = Request(0, 0, 16, 1, tuple(trie.path([("a", i) for i in range(8)])))
    b1 = Request(1, 30, 12, 1, tuple(trie.path([("b", i) for i in range(6)])))
    a2 = Request(2, 0, 20, 1, tuple(trie.path([("a", i) for i in range(10)])), after=0, think=200)
    cfg = config(memory={"kv_blocks": 12, "eviction": eviction, "cpu_blocks": cpu_blocks,
                         "reload_per_block": 0})
    return cfg, run(cfg, [a1, b1, a2])


def test_penelope_keeps_the_suffix_and_recomputes_only_the_front_hole() -> None:
    cfg, out = _two_sessions("penelope")
    evictions = [e for e in out["events"] if e["op"] == "evict"]
    assert evictions and evictions[0]["sid"] == 0 and evictions[0]["blocks"] == [0, 1, 2, 3]
    assert checks.first_violation({"config": cfg}, out) is None
    # kept [8, 17); recomputed: the hole [0, 8) at its positions and the new tokens [17, 20)
    assert out["requests"]["2"]["hit"] == 9


def test_tail_eviction_loses_the_later_history() -> None:
    cfg, out = _two_sessions("tail_lru")
    evictions = [e for e in out["events"] if e["op"] == "evict"]
    assert evictions[0]["blocks"] == [5, 6, 7, 8]
    assert out["requests"]["2"]["hit"] == 10  # blocks 0..4 kept, [10, 20) recomputed
    assert checks.first_violation({"config": cfg}, out) is None


def test_cpu_tier_turns_the_hole_into_a_reload() -> None:
    cfg, out = _two_sessions("penelope", cpu_blocks=8)
    assert out["requests"]["2"]["hit"] == 17  # the hole came back from the CPU tier
    assert checks.first_violation({"config": cfg}, out) is None
