"""Session admission (targets/scheduling/admission.py): the Basin invariants on random programs,
one mutant per rule that the checkers must catch, and hand examples documenting AIMD.

A *program* is what a simulator could do to a controller: sessions arrive (with a predicted
peak), admitted sessions finish, congestion signals come, and periodic ticks report the free KV
fraction, at non-decreasing times.  After the program every admitted session is driven to its
end (admitting more as room frees up), so the log must drain and nobody may be left held.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable, Optional
from unittest import mock

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from fuzzkit.targets.scheduling import admission as adm
from fuzzkit.targets.scheduling.admission import Basin, make_admission
from fuzzkit.targets.scheduling.admission_checks import check_liveness, check_log
from fuzzkit.targets.scheduling.admission_predictors import (MeanPredictor, OraclePredictor,
                                                     QuantilePredictor, make_predictor,
                                                     peak_blocks)

SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
TOTAL_KV = 100

PARAMS = {
    "none": st.just({}),
    "static_cap": st.fixed_dictionaries({"max_sessions": st.integers(1, 4)}),
    "basin": st.fixed_dictionaries({
        "b_min": st.integers(1, 30),
        "b_max": st.integers(30, 80),
        "increase": st.sampled_from([0, 1, 5, 20]),
        "increase_every": st.sampled_from([0, 1, 3, 10]),
        "decrease": st.sampled_from([0, Fraction(1, 2), 0.7, "2/3", 1]),
        "cooldown": st.sampled_from([0, 2, 10]),
        "watermark": st.sampled_from([0, Fraction(1, 10), 0.3, 1]),
    }),
}

# ("arrive", dt, peak) | ("finish", dt, index into the live sessions) | ("signal", dt, kind)
# | ("tick", dt, free KV blocks of TOTAL_KV); dt = ticks since the previous op
Op = tuple

ARRIVE = st.tuples(st.just("arrive"), st.sampled_from([0, 1, 2]),
                  st.one_of(st.integers(0, 40), st.integers(0, 200)))
OPS = st.one_of(  # arrivals weighted up so that hold queues actually form
    ARRIVE, ARRIVE, ARRIVE,
    st.tuples(st.just("finish"), st.sampled_from([0, 1, 3]), st.integers(0, 50)),
    st.tuples(st.just("signal"), st.sampled_from([0, 1, 5]), st.sampled_from(adm.SIGNALS)),
    st.tuples(st.just("tick"), st.sampled_from([0, 1, 4]), st.integers(0, TOTAL_KV)),
)
# short programs for the corner cases, long ones so that queues, decreases and increases pile up
PROGRAMS = st.one_of(st.lists(OPS, max_size=8), st.lists(OPS, min_size=30, max_size=80))


def run(controller: Any, ops: list[Op]) -> dict[str, Any]:
    """Play ``ops`` on ``controller``, then finish every admitted session (oldest first) until
    none is left, as a simulator whose sessions all end would.  Returns what the checkers need."""
    now, arrivals, ever, live, returned = 0, [], [], [], []

    def took(out: list[int]) -> None:
        ever.extend(out)
        live.extend(out)
        returned.extend(out)

    for kind, dt, arg in ops:
        now += dt
        if kind == "arrive":
            arrivals.append(len(arrivals))
            took(controller.arrive(arrivals[-1], arg, now))
        elif kind == "finish" and live:
            took(controller.finish(live.pop(arg % len(live)), now))
        elif kind == "signal":
            took(controller.signal(arg, now))
        elif kind == "tick":
            took(controller.tick(now, arg, TOTAL_KV))
    while live:
        now += 1
        took(controller.finish(live.pop(0), now))
    return {"arrivals": arrivals, "ever": ever, "returned": returned}


def verdict(controller: Any, ops: list[Op]) -> Optional[str]:
    """The first invariant broken by ``ops`` (log checker, then liveness), or None."""
    seen = run(controller, ops)
    return (check_log(controller.log, b_min=controller.b_min, b_max=controller.b_max,
                      all_finished=True)
            or check_liveness(seen["arrivals"], seen["ever"], finished_all=True))


# ------------------------------------------------------------------------------ clean policies


@pytest.mark.parametrize("name", list(PARAMS))
@settings(max_examples=150, **SETTINGS)
@given(data=st.data(), ops=PROGRAMS)
def test_invariants_hold_on_random_programs(name: str, data: st.DataObject, ops: list[Op]) -> None:
    params = data.draw(PARAMS[name])
    controller = make_admission(name, **params)
    seen = run(controller, ops)
    assert check_log(controller.log, b_min=controller.b_min, b_max=controller.b_max,
                     all_finished=True) is None
    assert check_liveness(seen["arrivals"], seen["ever"], finished_all=True) is None
    # what the calls returned is exactly what the log admitted, in order, once each
    assert seen["returned"] == [e["sid"] for e in controller.log if e["op"] == "admit"]
    assert sorted(seen["returned"]) == seen["arrivals"]
    assert not controller.held and not controller.admitted and controller.reserved == 0
    if name == "none":
        assert all(e["op"] != "budget" for e in controller.log)
    if name == "basin":  # the clamp that liveness rests on
        assert all(e["amount"] <= controller.b_min for e in controller.log if e["op"] == "hold")


@settings(max_examples=100, **SETTINGS)
@given(ops=PROGRAMS, cap=st.integers(1, 4))
def test_static_cap_never_exceeds_its_cap(ops: list[Op], cap: int) -> None:
    controller = make_admission("static_cap", max_sessions=cap)
    run(controller, ops)
    running, most = 0, 0
    for event in controller.log:
        running += {"admit": 1, "release": -1}.get(event["op"], 0)
        most = max(most, running)
    assert most <= cap


@settings(max_examples=100, **SETTINGS)
@given(ops=PROGRAMS)
def test_partial_runs_pass_without_the_drain_flag(ops: list[Op]) -> None:
    """Mid-run (sessions still admitted or held) the log is still valid; only ``all_finished``
    demands a drained end."""
    controller = Basin(b_min=20, b_max=60, increase=5, increase_every=2, cooldown=3,
                       watermark=Fraction(1, 5))
    now = 0
    for i, (kind, dt, arg) in enumerate(ops):
        now += dt
        if kind == "arrive":
            controller.arrive(i, arg, now)
        elif kind == "tick":
            controller.tick(now, arg, TOTAL_KV)
        elif kind == "signal":
            controller.signal(arg, now)
    assert check_log(controller.log, b_min=20, b_max=60) is None


# ------------------------------------------------------------------------------ mutants


def release_twice(self: Basin, sid: int, now: int) -> None:
    amount = self.admitted.pop(sid)
    for _ in range(2):
        self.reserved -= amount
        self._record(now, "release", sid, amount)


def release_never(self: Basin, sid: int, now: int) -> None:
    """The session ends but its reservation is kept."""


def fits_before_adding(self: Basin, reservation: int) -> bool:
    return self.reserved <= self.budget


def any_that_fits(self: Basin) -> Optional[int]:
    return next((sid for sid in self.held if self._fits(self._pending[sid])), None)


def decrease_without_floor(self: Basin, now: int, cause: str) -> None:
    self._set_budget(self.budget * self.decrease.numerator // self.decrease.denominator, now,
                     cause)


MUTANTS: dict[str, tuple[str, Callable[..., Any], str]] = {
    "release_twice": ("_release", release_twice, "release_once"),
    "release_never": ("_release", release_never, "drained"),
    "fits_before_adding": ("_fits", fits_before_adding, "admit_budget"),
    "out_of_fifo": ("_next_to_admit", any_that_fits, "fifo"),
    "no_floor": ("_decrease", decrease_without_floor, "budget_range"),
}
MUTANT_PARAMS = dict(b_min=10, b_max=60, increase=5, increase_every=3, decrease=Fraction(1, 2),
                     cooldown=2, watermark=Fraction(1, 10))


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_each_mutant_is_caught_on_random_programs(mutant: str) -> None:
    """Random programs find a counterexample (the first one, unshrunk: shrinking long programs
    costs seconds and proves nothing more), and the message names the broken invariant."""
    hook, impl, invariant = MUTANTS[mutant]
    with mock.patch.object(Basin, hook, impl):
        ops = find(PROGRAMS, lambda ops: verdict(Basin(**MUTANT_PARAMS), ops) is not None,
                   settings=settings(max_examples=2000, phases=[Phase.generate], **SETTINGS))
        message = verdict(Basin(**MUTANT_PARAMS), ops)
    assert message is not None and message.startswith(invariant), message
    assert verdict(Basin(**MUTANT_PARAMS), ops) is None  # the clean controller passes it


def test_mutants_on_hand_programs() -> None:
    """The smallest programs that show each mutant, spelled out."""
    two = [("arrive", 0, 10), ("arrive", 0, 10)]
    cases = {
        "release_twice": [("arrive", 0, 5)],  # the drain finishes it: released twice
        "release_never": [("arrive", 0, 5)],  # reservation 5 left at the end
        # B = 60 -> 30 -> 15: the first 10 is admitted, the second must wait (20 > 15); the
        # mutant sees reserved 10 <= 15 and admits it anyway
        "fits_before_adding": [("signal", 0, "preemption"), ("signal", 2, "preemption")] + two,
        # B = 15: 9 admitted, 10 waits (19 > 15), the mutant lets 1 overtake it
        "out_of_fifo": [("signal", 0, "preemption"), ("signal", 2, "preemption"),
                        ("arrive", 0, 9), ("arrive", 0, 10), ("arrive", 0, 1)],
        "no_floor": [("signal", 0, "preemption"), ("signal", 2, "preemption"),
                     ("signal", 2, "preemption")],
    }
    for mutant, ops in cases.items():
        hook, impl, invariant = MUTANTS[mutant]
        assert verdict(Basin(**MUTANT_PARAMS), ops) is None, mutant
        with mock.patch.object(Basin, hook, impl):
            message = verdict(Basin(**MUTANT_PARAMS), ops)
        assert message is not None and message.startswith(invariant), (mutant, message)


def test_no_floor_also_breaks_liveness() -> None:
    """Without the floor, decrease 0 takes B(t) to 0 and a held session is never admitted, even
    with the server empty: the liveness check sees it too."""
    with mock.patch.object(Basin, "_decrease", decrease_without_floor):
        basin = Basin(b_min=10, b_max=40, decrease=0, increase=0)
        basin.signal("preemption", 0)
        assert basin.arrive(0, 5, 1) == []
    assert check_liveness([0], [], finished_all=True).startswith("liveness")


# ------------------------------------------------------------------------------ hand examples


def test_aimd_decrease_halves_down_to_the_floor() -> None:
    basin = Basin(b_min=30, b_max=100, decrease=0.5, cooldown=10)
    assert basin.budget == 100  # b_init defaults to b_max: start open, back off on congestion
    basin.signal("preemption", 0)
    assert basin.budget == 50
    basin.signal("active_eviction", 10)
    assert basin.budget == 30  # floor(50 / 2) = 25 < b_min
    basin.signal("preemption", 20)
    assert basin.budget == 30
    assert [(e["t"], e["amount"], e["cause"]) for e in basin.log] == [
        (0, -50, "preemption"), (10, -20, "active_eviction")]  # no event when nothing changes


def test_aimd_cooldown_merges_a_burst_of_signals() -> None:
    basin = Basin(b_min=1, b_max=64, decrease=Fraction(1, 2), cooldown=100)
    for t in range(0, 100, 7):  # a burst of preemptions within one cooldown
        basin.signal("preemption", t)
    assert basin.budget == 32
    basin.signal("preemption", 100)  # cooldown elapsed since the decrease at 0
    assert basin.budget == 16


def test_aimd_exact_fractions() -> None:
    """0.7 means 7/10, not the binary double; floors are exact."""
    assert Basin(b_min=0, b_max=10, decrease=0.7).decrease == Fraction(7, 10)
    for decrease, expected in [(0.7, 7), ("2/3", 6), (Fraction(1, 3), 3), (1, 10), (0, 0)]:
        basin = Basin(b_min=0, b_max=10, decrease=decrease)
        basin.signal("preemption", 0)
        assert basin.budget == expected, decrease
    big = Basin(b_min=0, b_max=10**30, decrease=Fraction(1, 3))
    big.signal("preemption", 0)
    assert big.budget == 10**30 // 3


def test_aimd_additive_increase_after_a_quiet_period() -> None:
    basin = Basin(b_min=10, b_max=45, b_init=10, increase=10, increase_every=5,
                  watermark=Fraction(1, 4))
    for sid in range(6):  # one admitted (10 of 10), five held: the budget binds
        basin.arrive(sid, 10, 0)
    assert list(basin.admitted) == [0] and len(basin.held) == 5
    basin.tick(0, 100, 100)  # first report: the quiet period starts
    basin.tick(4, 100, 100)
    assert basin.budget == 10
    assert basin.tick(5, 100, 100) == [1]  # grown, and the head fits now
    assert basin.budget == 20
    basin.tick(9, 100, 100)  # the quiet period restarted at 5
    assert basin.budget == 20
    basin.tick(10, 25, 100)  # free exactly at the watermark: not low, may grow
    assert basin.budget == 30
    for t in (15, 20, 25):
        basin.tick(t, 100, 100)
    assert basin.budget == 45  # capped at b_max
    basin.signal("preemption", 26)  # congestion restarts the quiet period
    assert basin.budget == 22
    basin.tick(30, 100, 100)
    assert basin.budget == 22
    basin.tick(31, 100, 100)
    assert basin.budget == 32


def test_aimd_does_not_grow_while_nobody_is_held() -> None:
    """A quiet period with an empty hold queue leaves B(t) alone: a budget inflated while
    nobody needed it would let the next surge in wholesale."""
    basin = Basin(b_min=10, b_max=100, b_init=20, increase=10, increase_every=5)
    assert basin.arrive(0, 10, 0) == [0]
    for t in range(0, 60, 5):
        basin.tick(t, 100, 100)
    assert basin.budget == 20 and not any(e["op"] == "budget" for e in basin.log)
    assert basin.arrive(1, 10, 60) == [1]
    assert basin.arrive(2, 10, 60) == []  # 30 > 20: held, now the budget binds
    basin.tick(65, 100, 100)
    assert basin.budget == 30 and list(basin.admitted) == [0, 1, 2]


def test_low_free_kv_is_raised_by_tick() -> None:
    basin = Basin(b_min=10, b_max=80, decrease=Fraction(1, 2), cooldown=0,
                  watermark=Fraction(1, 10), increase_every=0, increase=5)
    for sid in range(9):  # eight admitted (80 of 80), the ninth held throughout: B binds
        basin.arrive(sid, 10, 0)
    basin.tick(0, 9, 100)  # 9 % free < 10 %
    assert basin.budget == 40 and basin.log[-1]["cause"] == "low_free_kv"
    basin.tick(1, 10, 100)  # at the watermark: not low, grows (increase_every 0)
    assert basin.budget == 45 and basin.log[-1]["cause"] == "increase"
    basin.tick(2, 0, 0)  # no KV reported at all: no signal
    assert basin.budget == 50


def test_fifo_head_of_line_blocking_and_no_revocation() -> None:
    basin = Basin(b_min=40, b_max=100, decrease=Fraction(1, 2), cooldown=0, increase=0)
    assert basin.arrive(1, 60, 0) == [1]  # clamped to b_min = 40, fits in 100
    assert basin.admitted == {1: 40}
    assert basin.arrive(2, 40, 1) == [2]
    assert basin.arrive(3, 30, 2) == []  # 80 + 30 > 100: held
    assert basin.arrive(4, 5, 3) == []  # would fit, but 3 is ahead of it
    basin.signal("preemption", 4)  # B = 50 < reserved 80: nobody is evicted, admission stops
    assert basin.budget == 50 and basin.reserved == 80 and basin.admitted == {1: 40, 2: 40}
    assert basin.finish(1, 5) == []  # 40 + 30 > 50
    assert basin.finish(2, 6) == [3, 4]  # 30 + 5 <= 50, in FIFO order
    assert list(basin.held) == [] and basin.reserved == 35
    assert [e["op"] for e in basin.log].count("hold") == 4
    assert check_log(basin.log, b_min=40, b_max=100) is None


def test_clamp_keeps_an_oversized_session_admissible() -> None:
    """A predicted peak above b_min would never fit once B(t) sits at b_min; clamped, it is
    admitted as soon as the server is empty."""
    basin = Basin(b_min=20, b_max=100, decrease=0, cooldown=0, increase=0)
    basin.signal("preemption", 0)
    assert basin.budget == 20
    assert basin.arrive(1, 15, 1) == [1]
    assert basin.arrive(2, 500, 2) == []
    assert basin.finish(1, 3) == [2]
    assert basin.admitted == {2: 20}


def test_none_and_static_cap() -> None:
    none = make_admission("none")
    assert [none.arrive(i, 10**9, i) for i in range(3)] == [[0], [1], [2]]
    assert none.reserved == 0 and none.signal("preemption", 3) == [] and none.budget == 0
    cap = make_admission("static_cap", max_sessions=2)
    assert [cap.arrive(i, 1, 0) for i in range(4)] == [[0], [1], [], []]
    assert cap.tick(1, 0, 10) == [] and cap.signal("low_free_kv", 1) == []
    assert cap.finish(1, 2) == [2] and cap.finish(0, 3) == [3]
    assert check_log(cap.log, b_min=2, b_max=2) is None


def test_protocol_errors_are_one_line_value_errors() -> None:
    bad: list[Callable[[], Any]] = [
        lambda: make_admission("lifo"),
        lambda: make_admission("basin", bmin=3),
        lambda: make_admission("none", max_sessions=3),
        lambda: make_admission("static_cap", max_sessions=0),
        lambda: Basin(b_min=50, b_max=40),
        lambda: Basin(b_init=10_000),
        lambda: Basin(decrease=1.5),
        lambda: Basin(decrease="half"),
        lambda: Basin(watermark=-0.1),
        lambda: make_predictor("median"),
        lambda: make_predictor("mean", q=0.5),
    ]
    for call in bad:
        with pytest.raises(ValueError) as err:
            call()
        assert "\n" not in str(err.value)
    basin = Basin()
    basin.arrive(1, 10, 5)
    for call in [lambda: basin.arrive(1, 10, 6), lambda: basin.arrive(2, -1, 6),
                 lambda: basin.arrive(2, 1.5, 6), lambda: basin.finish(7, 6),
                 lambda: basin.signal("oom", 6), lambda: basin.tick(4, 0, 10),
                 lambda: basin.tick(6, 11, 10)]:
        with pytest.raises(ValueError):
            call()


def test_check_log_messages_on_hand_made_logs() -> None:
    def ev(op: str, sid: Any, amount: int, budget: int, reserved: int) -> dict[str, Any]:
        return {"t": 0, "op": op, "sid": sid, "amount": amount, "budget": budget,
                "reserved": reserved}

    ok = [ev("hold", 1, 5, 10, 0), ev("admit", 1, 5, 10, 5), ev("release", 1, 5, 10, 0)]
    assert check_log(ok, b_min=0, b_max=10, all_finished=True) is None
    cases = {
        "budget_range": [ev("budget", None, 5, 15, 0)],
        "fifo": [ev("hold", 1, 1, 10, 0), ev("hold", 2, 1, 10, 0), ev("admit", 2, 1, 10, 1)],
        "admit_budget": [ev("hold", 1, 11, 10, 0), ev("admit", 1, 11, 10, 11)],
        "release_once": [ev("release", 3, 1, 10, -1)],
        "bookkeeping": [ev("hold", 1, 5, 10, 0), ev("admit", 1, 5, 10, 4)],
        "drained": [ev("hold", 1, 5, 10, 0)],
    }
    for invariant, log in cases.items():
        message = check_log(log, b_min=0, b_max=10, all_finished=True)
        assert message is not None and message.startswith(invariant + ":"), (invariant, message)
        assert "\n" not in message
    twice = check_log(ok + ok[2:], b_min=0, b_max=10)
    assert twice is not None and twice.startswith("release_once: session 1 released twice")
    assert check_liveness([1, 2], [1], finished_all=False) is None
    assert check_liveness([1, 2], [1], finished_all=True).startswith("liveness")
    assert check_liveness([1], [1, 9], finished_all=False).startswith("liveness")


def test_predictors() -> None:
    oracle = OraclePredictor({1: 7, 2: 300})
    assert oracle.predict(2) == 300
    mean = MeanPredictor(window=3, default=50)
    assert mean.predict(0) == 50
    for peak in (10, 11, 20, 30):
        mean.observe(0, peak)
    assert mean.predict(0) == 21  # ceil((11 + 20 + 30) / 3): the window forgot 10
    quant = QuantilePredictor(q=0.9, window=10, default=8)
    assert quant.predict(0) == 8
    for peak in range(1, 11):
        quant.observe(0, peak)
    assert quant.predict(0) == 9  # 9 of the 10 peaks are <= 9
    assert QuantilePredictor(q=1, window=4).predict(0) == 64
    top = QuantilePredictor(q=1, window=4)
    for peak in (3, 1, 2):
        top.observe(0, peak)
    assert top.predict(0) == 3
    zero = make_predictor("quantile", q=0, window=4)
    zero.observe(0, 5)
    zero.observe(0, 2)
    assert zero.predict(0) == 2
    assert peak_blocks(33, 16) == 3 and peak_blocks(32, 16) == 2
