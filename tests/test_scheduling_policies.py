"""Prefill-ordering policies (targets/scheduling/policies): reference vs optimized, Fairway's
invariants, and one hand-computed example per policy documenting its semantics.

Programs are lists of operations a simulator could issue: pushes in ascending
``(arrival, rid)`` order (duplicate arrivals included), reprices of a waiting request (named by
an index into the waiting list, resolved when the program runs) and pops at a non-decreasing
``now`` that is never before a pushed arrival.  Costs come mostly from a small set, so equal
costs and equal response ratios (ties) are common, and sometimes are large.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from fuzzkit.targets.scheduling.policies import optimized, reference
from fuzzkit.targets.scheduling.policies.base import Waiting

SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = ["fcfs", "lpm", "spf", "fairway"]
HUGE = 10**15

SMALL_COSTS = st.sampled_from([1, 2, 3, 4, 6, 12])
COSTS = st.one_of(SMALL_COSTS, SMALL_COSTS, SMALL_COSTS, st.integers(1, 10**9))
HITS = st.one_of(st.sampled_from([0, 16, 32, 48]), st.integers(0, 10**6))
PARAMS = {
    "fcfs": st.just({}),
    "spf": st.just({}),
    "lpm": st.sampled_from([{}, {"fallback_len": None}, {"fallback_len": 0}, {"fallback_len": 2}]),
    "fairway": st.fixed_dictionaries({"beta": st.sampled_from([0, 3, 40, HUGE]),
                                      "short_queue": st.sampled_from([None, 0, 2, 5])}),
}

Op = tuple  # ("push", Waiting) | ("reprice", index, cost, hit) | ("pop", now)


# ------------------------------------------------------------------------------ programs


@st.composite
def programs(draw: Callable[..., Any], max_ops: int = 60, costs: st.SearchStrategy[int] = COSTS,
             reprice: bool = True) -> list[Op]:
    """A valid operation sequence (see the module docstring)."""
    ops: list[Op] = []
    arrival, now, last_rid, used = 0, 0, -1, set()
    # some programs grow deep queues (more pushes than pops), some stay short
    kinds = ["push"] * draw(st.integers(1, 3)) + ["pop", "pop"] + (["reprice"] if reprice else [])
    length = draw(st.one_of(st.integers(0, 8), st.integers(max_ops // 2, max_ops)))
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=length, max_size=length)):
        if kind == "push":
            step = draw(st.sampled_from([0, 0, 1, 2, 5, 40]))
            rid = draw(st.integers(0, 60))
            if step == 0:
                rid = max(rid, last_rid + 1)  # same arrival: (arrival, rid) must still ascend
            while rid in used:
                rid += 1
            arrival, last_rid = arrival + step, rid
            used.add(rid)
            ops.append(("push", Waiting(rid, arrival, draw(costs), draw(HITS))))
        elif kind == "reprice":
            ops.append(("reprice", draw(st.integers(0, 100)), draw(costs), draw(HITS)))
        else:
            now = max(now, arrival) + draw(st.sampled_from([0, 0, 1, 2, 5, 100]))
            ops.append(("pop", now))
    return ops


def scaled(ops: list[Op], c: int) -> list[Op]:
    """The same program with every tick (arrivals, nows, costs) multiplied by ``c``."""
    out: list[Op] = []
    for op in ops:
        if op[0] == "push":
            w = op[1]
            out.append(("push", Waiting(w.rid, w.arrival * c, w.cost * c, w.hit)))
        elif op[0] == "reprice":
            out.append(("reprice", op[1], op[2] * c, op[3]))
        else:
            out.append(("pop", op[1] * c))
    return out


def run(policy: Any, ops: list[Op], after_pop: Callable[[Any, dict], None] | None = None) -> list[int]:
    """Replay ``ops`` on one policy; returns the popped rids.  ``after_pop(policy, state)`` sees
    ``state = {"waiting": {rid: Waiting}, "dispatched": [(key, cost at dispatch)]}``."""
    state: dict[str, Any] = {"waiting": {}, "dispatched": []}
    waiting: dict[int, Waiting] = state["waiting"]
    popped: list[int] = []
    for op in ops:
        if op[0] == "push":
            policy.push(op[1])
            waiting[op[1].rid] = op[1]
        elif op[0] == "reprice":
            if waiting:
                rid = list(waiting)[op[1] % len(waiting)]
                policy.reprice(rid, op[2], op[3])
                waiting[rid] = Waiting(rid, waiting[rid].arrival, op[2], op[3])
        elif waiting:
            rid = policy.pop(op[1])
            popped.append(rid)
            state["dispatched"].append((waiting[rid].key, waiting[rid].cost))
            del waiting[rid]
            if after_pop:
                after_pop(policy, state)
        assert len(policy) == len(waiting)
    return popped


def run_lockstep(name: str, params: dict, ops: list[Op]) -> None:
    """Reference and optimized side by side: the same rid on every pop, the same lengths, the
    same IndexError on an empty queue and (fairway) the same bypass accounting."""
    ref, opt = reference.make_policy(name, **params), optimized.make_policy(name, **params)
    waiting: list[int] = []
    for step, op in enumerate(ops):
        if op[0] == "push":
            ref.push(op[1])
            opt.push(op[1])
            waiting.append(op[1].rid)
        elif op[0] == "reprice":
            if waiting:
                rid = waiting[op[1] % len(waiting)]
                ref.reprice(rid, op[2], op[3])
                opt.reprice(rid, op[2], op[3])
        elif not waiting:
            for policy in (ref, opt):
                with pytest.raises(IndexError):
                    policy.pop(op[1])
        else:
            got_ref, got_opt = ref.pop(op[1]), opt.pop(op[1])
            assert got_ref == got_opt, f"step {step}: reference popped {got_ref}, optimized {got_opt}"
            waiting.remove(got_ref)
        assert len(ref) == len(opt) == len(waiting)
        if name == "fairway":
            assert ref.oldest_bypass() == opt.oldest_bypass()
            assert [ref.bypass_of(r) for r in waiting] == [opt.bypass_of(r) for r in waiting]


# ------------------------------------------------------------------------------ differential


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=150, **SETTINGS)
@given(data=st.data(), ops=programs())
def test_optimized_matches_reference(name: str, data: st.DataObject, ops: list[Op]) -> None:
    run_lockstep(name, data.draw(PARAMS[name], label="params"), ops)


@settings(max_examples=40, **SETTINGS)
@given(params=PARAMS["fairway"], ops=programs(max_ops=400))
def test_fairway_long_programs_match(params: dict, ops: list[Op]) -> None:
    """Long programs: queues deep enough for the tournament tree to grow and reuse slots, and
    many certificate failures between pops."""
    run_lockstep("fairway", params, ops)


@settings(max_examples=200, **SETTINGS)
@given(a=st.tuples(st.integers(0, 50), SMALL_COSTS), b=st.tuples(st.integers(0, 50), SMALL_COSTS),
       start=st.integers(0, 60))
def test_overtake_tick_is_the_first_tick_the_loser_wins(a: tuple, b: tuple, start: int) -> None:
    """The certificate of a match against a brute-force scan with exact fractions."""
    tree = optimized.KineticTournament()
    arrival, cost, slot = {}, {}, {}
    for age, (rid, (arr, c)) in enumerate(zip((10, 11), (a, b))):
        slot[rid] = tree.insert(rid, arr, c, age)
        arrival[rid], cost[rid] = arr, c
    tree.advance(start)

    def beats(i: int, j: int, t: int) -> bool:  # age order = rid order here
        ri, rj = Fraction(t - arrival[i], cost[i]), Fraction(t - arrival[j], cost[j])
        return ri > rj or (ri == rj and i < j)

    winner = tree.leader()
    loser = 21 - winner
    assert beats(winner, loser, start)
    first = next((t for t in range(start, start + 800) if beats(loser, winner, t)), optimized.NEVER)
    assert tree.overtake_tick(slot[winner], slot[loser]) == first


def test_fairway_tie_exactly_at_a_crossing_tick() -> None:
    """An older, cheaper request can only trail a newer one before either arrived (the tree is
    kept at the last pop's tick): 2 and 3 both arrive at 10, after a pop at 0.  At 0 rid 3 leads
    (-10/4 > -10/1); the lines meet exactly at 10, where the tie goes to the older rid 2.  A
    certificate that ignores the tie rule fails one tick late and serves 3."""
    ops: list[Op] = [("push", Waiting(1, 0, 5, 0)), ("pop", 0), ("push", Waiting(2, 10, 1, 0)),
                     ("push", Waiting(3, 10, 4, 0)), ("pop", 10), ("pop", 10)]
    run_lockstep("fairway", {"beta": HUGE}, ops)
    assert pops("fairway", ops, beta=HUGE) == [1, 2, 3]


def test_pop_before_an_arrival_matches() -> None:
    """Outside the protocol (a pop earlier than a waiting arrival) the ratios are negative but
    still exact, and the optimized tree rebuilds rather than drift from the reference."""
    ops: list[Op] = [("push", Waiting(1, 10, 1, 0)), ("push", Waiting(2, 10, 4, 0)), ("pop", 5), ("pop", 5)]
    run_lockstep("fairway", {"beta": HUGE}, ops)
    assert pops("fairway", ops, beta=HUGE) == [2, 1]


def test_reused_rid_after_dispatch_matches() -> None:
    """A rid that comes back after being served is a new request (a fresh age)."""
    ops: list[Op] = [("push", Waiting(1, 0, 1, 9)), ("push", Waiting(2, 0, 5, 0)), ("pop", 3),
                     ("push", Waiting(1, 4, 1, 50)), ("push", Waiting(3, 4, 9, 0)), ("pop", 9),
                     ("pop", 9), ("pop", 20)]
    for name in NAMES:
        run_lockstep(name, {"beta": 4} if name == "fairway" else {}, ops)


# ------------------------------------------------------------------------------ fairway invariants


def bypass_from_history(state: dict, key: tuple[int, int]) -> int:
    """``bypass(q)`` straight from its definition: the dispatched cost of everything younger."""
    return sum(cost for k, cost in state["dispatched"] if k > key)


def check_bypass_capped(beta: int) -> Callable[[Any, dict], None]:
    """After each pop: the oldest waiter's bypass, recomputed from the dispatch history, is at
    most beta, and the policy's own counters agree with that history."""

    def check(policy: Any, state: dict) -> None:
        waiting = state["waiting"]
        for rid, w in waiting.items():
            assert policy.bypass_of(rid) == bypass_from_history(state, w.key)
        if waiting:
            oldest = min(waiting.values(), key=lambda w: w.key)
            bypass = bypass_from_history(state, oldest.key)
            assert bypass <= beta, f"oldest {oldest.rid} bypassed by {bypass} > beta {beta}"
            assert policy.oldest_bypass() == bypass

    return check


@settings(max_examples=150, **SETTINGS)
@given(params=PARAMS["fairway"], ops=programs())
def test_fairway_bypass_never_exceeds_beta(params: dict, ops: list[Op]) -> None:
    run(reference.make_policy("fairway", **params), ops, check_bypass_capped(params["beta"]))


@settings(max_examples=100, **SETTINGS)
@given(short_queue=PARAMS["fairway"].map(lambda p: p["short_queue"]), ops=programs())
def test_fairway_beta_zero_is_fcfs(short_queue: int | None, ops: list[Op]) -> None:
    fairway = reference.make_policy("fairway", beta=0, short_queue=short_queue)
    assert run(fairway, ops) == run(reference.make_policy("fcfs"), ops)


@settings(max_examples=100, **SETTINGS)
@given(params=PARAMS["fairway"], cost=COSTS, data=st.data())
def test_fairway_equal_costs_is_fcfs(params: dict, cost: int, data: st.DataObject) -> None:
    """With one cost the longest wait has the highest ratio: the oldest always wins."""
    ops = data.draw(programs(costs=st.just(cost)), label="ops")
    assert run(reference.make_policy("fairway", **params), ops) == run(reference.make_policy("fcfs"), ops)


@settings(max_examples=100, **SETTINGS)
@given(params=PARAMS["fairway"], c=st.integers(2, 1000), ops=programs())
def test_fairway_is_scale_invariant(params: dict, c: int, ops: list[Op]) -> None:
    """Scaling every tick and beta by c scales every ratio's numerator and denominator alike."""
    base = run(reference.make_policy("fairway", **params), ops)
    big = dict(params, beta=params["beta"] * c)
    assert run(reference.make_policy("fairway", **big), scaled(ops, c)) == base


class ResetWhenOldestServed(reference.FairwayPolicy):
    """The tempting simplification: one counter, reset to 0 whenever the oldest is served."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._since_oldest = 0

    def _bypass_of_oldest(self, oldest: Waiting) -> int:
        return self._since_oldest

    def _dispatch(self, chosen: Waiting) -> None:
        was_oldest = chosen.rid == self._oldest().rid
        super()._dispatch(chosen)
        self._since_oldest = 0 if was_oldest else self._since_oldest + chosen.cost


# A (1) and B (2) cost 100, D (3) and E (4) cost 10; beta = 10.  At 10 D has ratio 1, A and B
# 0.1: D goes first (bypass 10 <= 10), bypassing both A and B.  At 20 E (ratio 1) would exceed
# A's budget, so A is served; then E against B: B has already been bypassed by D's 10, so the
# real rule serves B, while the reset counter (0 after A) lets E through: bypass(B) = 20.
RESET_TRAP: list[Op] = [("push", Waiting(1, 0, 100, 0)), ("push", Waiting(2, 0, 100, 0)),
                        ("push", Waiting(3, 0, 10, 0)), ("pop", 10), ("push", Waiting(4, 10, 10, 0)),
                        ("pop", 20), ("pop", 20), ("pop", 20)]


def test_reset_variant_exceeds_beta_and_the_check_catches_it() -> None:
    assert run(reference.make_policy("fairway", beta=10), RESET_TRAP, check_bypass_capped(10)) == [3, 1, 2, 4]
    with pytest.raises(AssertionError, match="bypassed by 20 > beta 10"):
        run(ResetWhenOldestServed(beta=10), RESET_TRAP, check_bypass_capped(10))


def test_random_programs_find_the_reset_variant() -> None:
    """The generic property, not just the hand-made trap, exposes the reset variant."""

    def violates(case: tuple[int, list[Op]]) -> bool:
        beta, ops = case
        try:
            run(ResetWhenOldestServed(beta=beta), ops, check_bypass_capped(beta))
        except AssertionError:
            return True
        return False

    beta, ops = find(st.tuples(st.sampled_from([3, 40]), programs()), violates,
                     settings=settings(max_examples=3000, database=None, derandomize=True,
                                       phases=[Phase.generate]))
    assert violates((beta, ops))


# ------------------------------------------------------------------------------ hand examples


def pops(name: str, ops: list[Op], **params: Any) -> list[int]:
    """The pop sequence of both implementations (asserted equal)."""
    got = run(reference.make_policy(name, **params), ops)
    assert run(optimized.make_policy(name, **params), ops) == got
    return got


def test_fcfs_example() -> None:
    """Arrival first, rid only breaks arrival ties; prices are ignored."""
    ops: list[Op] = [("push", Waiting(5, 0, 9, 0)), ("push", Waiting(7, 0, 1, 99)),
                     ("push", Waiting(2, 1, 1, 99)), ("reprice", 0, 1, 500),
                     ("pop", 1), ("pop", 1), ("pop", 1)]
    assert pops("fcfs", ops) == [5, 7, 2]


def test_lpm_example() -> None:
    """Largest hit first, older on equal hits; a reprice re-ranks; past fallback_len, FCFS."""
    queue: list[Op] = [("push", Waiting(1, 0, 5, 0)), ("push", Waiting(2, 1, 5, 64)),
                       ("push", Waiting(3, 2, 5, 64)), ("push", Waiting(4, 3, 5, 10))]
    ops = queue + [("pop", 3), ("reprice", 2, 5, 100), ("pop", 3), ("pop", 3), ("pop", 3)]
    # after popping 2 the waiting list is [1, 3, 4]: index 2 is rid 4, now hit 100
    assert pops("lpm", ops) == [2, 4, 3, 1]
    # rid 4 repriced to hit 100; four waiting > fallback_len 3: the oldest (1) first, then with
    # three waiting the longest prefix again
    fallback = queue + [("reprice", 3, 5, 100)] + [("pop", 3)] * 4
    assert pops("lpm", fallback, fallback_len=3) == [1, 4, 2, 3]
    assert pops("lpm", fallback) == [4, 2, 3, 1]


def test_spf_example() -> None:
    """Smallest predicted cost first, older on equal costs; a reprice re-ranks."""
    ops: list[Op] = [("push", Waiting(1, 0, 30, 0)), ("push", Waiting(2, 1, 10, 0)),
                     ("push", Waiting(3, 2, 10, 0)), ("push", Waiting(4, 3, 20, 0)),
                     ("reprice", 0, 5, 0), ("pop", 3), ("pop", 3), ("pop", 3), ("pop", 3)]
    assert pops("spf", ops) == [1, 2, 3, 4]


def test_fairway_examples() -> None:
    """Response ratio wait/cost (exact), ties to the older; beta bounds bypassing; a long
    queue falls back to the oldest."""
    aging: list[Op] = [("push", Waiting(1, 0, 10, 0)), ("push", Waiting(2, 95, 1, 0)), ("pop", 100),
                        ("pop", 100)]
    # at 100: 1 has waited 100/10 = 10 per unit of cost, 2 only 5/1 = 5 -- ageing beats cheapness
    assert pops("fairway", aging, beta=HUGE) == [1, 2]
    assert pops("spf", aging) == [2, 1]
    tie: list[Op] = [("push", Waiting(1, 0, 4, 0)), ("push", Waiting(2, 2, 2, 0))]
    assert pops("fairway", tie + [("pop", 4)], beta=HUGE)[0] == 1  # 4/4 == 2/2: the older
    assert pops("fairway", tie + [("pop", 6)], beta=HUGE)[0] == 2  # 6/4 < 4/2
    assert pops("fairway", tie + [("pop", 6)], beta=1)[0] == 1  # 0 + 2 > 1: protect the oldest
    assert pops("fairway", tie + [("pop", 6)], beta=HUGE, short_queue=1)[0] == 1  # 2 waiting > 1
    # the reset trap: with a large budget the cheap ones simply go first
    assert pops("fairway", RESET_TRAP, beta=10) == [3, 1, 2, 4]
    assert pops("fairway", RESET_TRAP, beta=HUGE) == [3, 4, 1, 2]


# ------------------------------------------------------------------------------ API


@pytest.mark.parametrize("module", [reference, optimized])
def test_registry_and_errors(module: Any) -> None:
    assert set(module.POLICIES) == set(NAMES)
    for name in NAMES:
        policy = module.make_policy(name)
        assert policy.name == name and len(policy) == 0
        with pytest.raises(IndexError):
            policy.pop(0)
    bad = [("nope", {}), ("fcfs", {"beta": 1}), ("fairway", {"beta": -1}), ("fairway", {"beta": 1.5}),
           ("fairway", {"short_queue": "2"}), ("lpm", {"fallback": 3}), ("lpm", {"fallback_len": True})]
    for name, params in bad:
        with pytest.raises(ValueError) as err:
            module.make_policy(name, **params)
        assert "\n" not in str(err.value)
    fairway = module.make_policy("fairway", beta=5)
    fairway.push(Waiting(3, 5, 1, 0))
    for request in (Waiting(2, 5, 1, 0), Waiting(4, 4, 1, 0), Waiting(3, 5, 1, 0), Waiting(9, 6, 0, 0)):
        with pytest.raises(ValueError):
            fairway.push(request)
    with pytest.raises(ValueError):
        fairway.reprice(3, 2.5, 0)
    with pytest.raises(KeyError):
        fairway.reprice(99, 1, 0)
