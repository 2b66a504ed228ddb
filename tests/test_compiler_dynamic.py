"""Dynamic shapes and layouts in the compiler target (issue 23): variants (other input shapes
run through one compile), the ``"marked"`` mode, memory layouts, their validation and limits,
the strategy's draws, and bisection / repro scripts that carry them along."""

from __future__ import annotations

import collections
import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

import fuzzkit.targets.compiler as tc
from fuzzkit.targets.compiler import checks, strategies, thresholds

ROOT = Path(__file__).resolve().parent.parent

GRAPH = {
    "inputs": [{"name": "x0", "shape": [4, 8]}, {"name": "x1", "shape": [4, 8]}],
    "nodes": [
        {"name": "n0", "op": "mul", "args": ["x0", "x1"], "attrs": {}, "shape": [4, 8]},
        {"name": "n1", "op": "sum", "args": ["n0"], "attrs": {"dim": 1, "keepdim": False},
         "shape": [4]},
    ],
    "outputs": ["n0", "n1"],
}


def vals(*shape: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.integers(-8, 8, shape) / 4).astype(np.float32) for _ in range(2)]


def case(**extra: Any) -> dict:
    return {"graph": copy.deepcopy(GRAPH), "dtype": "float32", "dynamic": False,
            "values": vals(4, 8), **extra}


# -- validation and limits --------------------------------------------------------------------


def test_valid_variants_layouts_and_modes_pass() -> None:
    good = case(variants=[vals(3, 17), vals(1, 8), vals(0, 8)], dynamic="marked",
                layouts=["transposed", "strided"])
    assert checks.validate(good) is None
    for mode in (True, False):  # old case files: JSON booleans stay valid
        assert checks.validate(case(dynamic=mode)) is None


@pytest.mark.parametrize("extra, words", [
    ({"dynamic": "yes"}, 'dynamic must be true, false or "marked"'),
    ({"variants": "x"}, "variants must be a list"),
    ({"variants": [vals(3, 8)] * 5}, "at most 4 variants"),
    ({"variants": [[np.ones((3, 8), np.float32)]]}, "variant 0 must be a list of 2 arrays"),
    ({"variants": [[np.ones((3, 8, 1), np.float32)] * 2]}, "keeps the rank 2"),
    ({"variants": [[np.ones((3, 8), np.float32), np.ones((2, 8), np.float32)]]},
     "variant 0: node 'n0'"),
    ({"variants": [[np.ones((3, 8), np.int64)] * 2]}, "values must be floating"),
    ({"variants": [[np.ones((3, 8), np.float32), "abc"]]}, "values must be an array"),
    ({"layouts": ["contiguous"]}, "layouts must be a list of 2 names"),
    ({"layouts": ["contiguous", "sideways"]}, "layout must be one of"),
    ({"layouts": ["contiguous", "channels_last"]}, "layout channels_last needs rank 4"),
    ({"layouts": [3, "contiguous"]}, "layout must be one of"),
])
def test_bad_variants_and_layouts_are_refused_in_one_line(extra: dict, words: str) -> None:
    problem = checks.validate(case(**extra))
    assert problem is not None and words in problem, problem
    assert "\n" not in problem


def test_variants_count_towards_the_element_limits() -> None:
    from fuzzkit import limits

    target = tc.target()
    by_name = {lim.name: lim for lim in target.limits}
    plain, more = case(), case(variants=[vals(64, 8), vals(3, 8)])
    assert by_name["total_elements"].measure(more) > by_name["total_elements"].measure(plain)
    assert by_name["elements"].measure(more) == 64 * 8
    assert limits.check("compiler", target.limits, more, {"elements": 100}) is not None
    assert limits.check("compiler", target.limits, more) is None
    hostile = case(variants=[[[[1.0]]] * 2] * 9)
    assert "at most 4" in limits.check("compiler", target.limits, hostile)


# -- the strategy -----------------------------------------------------------------------------


def _drawn(n: int, thresholds_: Any, seeds: tuple[int, ...] = (5,)) -> list[dict]:
    """``n`` cases from each seed (a campaign's chunks: a share stated over one Hypothesis run
    rides on the few graphs it mutates)."""
    from hypothesis import HealthCheck, given, seed, settings

    out: list[dict] = []
    for s in seeds:

        @seed(s)
        @settings(max_examples=n, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(strategies.inputs(thresholds=thresholds_))
        def collect(inputs: dict) -> None:
            out.append(inputs)

        collect()
    return out


def test_inductor_cases_draw_variants_of_at_least_three_shapes_per_compile() -> None:
    # three chunks of 30: one run's share swings (2, 18 and 12 of 30 at seeds 5-7)
    cases = _drawn(30, thresholds.inductor_thresholds(), seeds=(5, 6, 7))
    with_variants = [c for c in cases if c.get("variants")]
    assert len(with_variants) >= len(cases) // 4
    sizes_seen: set[int] = set()
    for c in with_variants:
        assert checks.validate(c) is None
        assert 2 <= len(c["variants"]) <= checks.MAX_VARIANTS  # >= 3 shapes per compile
        shapes = {tuple(tuple(np.shape(v)) for v in run) for run in tc.run_values(c)}
        assert len(shapes) == 1 + len(c["variants"])  # every run a new shape
        sizes_seen |= {d for run in tc.run_values(c) for v in run for d in np.shape(v)}
    assert {0, 1} & sizes_seen  # Dynamo's 0/1 specialisation is reached
    modes = collections.Counter(str(c["dynamic"]) for c in with_variants)
    assert set(modes) <= {"True", "False", "marked"} and len(modes) >= 2
    assert any(c.get("layouts") for c in cases)
    assert any(len(c["graph"]["nodes"]) == 1 for c in cases)  # single-op graphs


def test_fusing_cases_draw_no_variants() -> None:
    pytest.importorskip("triton")
    assert not any(c.get("variants") for c in _drawn(10, thresholds.fusing_thresholds()))


def test_dims_of_equal_size_change_together() -> None:
    graph = {"inputs": [{"name": "a", "shape": [4, 1, 8]}, {"name": "b", "shape": [8, 4]}],
             "nodes": [], "outputs": ["a"]}
    groups = strategies.dim_groups(graph)
    assert sorted(map(sorted, groups)) == [[(0, 0), (1, 1)], [(0, 1)], [(0, 2), (1, 0)]]
    sizes = strategies.new_sizes(8)
    assert sizes[:2] == [0, 1] and 8 not in sizes and {7, 9, 16, 17, 32, 33} <= set(sizes)


def test_reshaped_recomputes_every_node_shape() -> None:
    other = checks.reshaped(GRAPH, [[2, 3], [2, 3]])
    assert [n["shape"] for n in other["nodes"]] == [[2, 3], [2]]
    assert GRAPH["nodes"][0]["shape"] == [4, 8]  # the case's graph is untouched


# -- Inductor: one compile, several shapes ----------------------------------------------------


def test_inductor_runs_every_variant_through_one_compile_in_each_mode() -> None:
    runs = {True: [vals(3, 17, seed=1), vals(0, 5, seed=3)],
            "marked": [vals(3, 17, seed=1), vals(1, 8, seed=2)]}
    for mode, variants in runs.items():
        inputs = case(dynamic=mode, variants=variants, layouts=["transposed", "offset"])
        before = tc.compile_calls()
        actual = tc._inductor_run(inputs)
        assert tc.compile_calls() == before + 1  # one torch.compile for three shapes
        assert "error" not in actual and len(actual["variants"]) == 2
        assert actual["compiles"] >= 2  # Dynamo's recompile for the 0 / 1 size counted in
        assert [np.shape(v["outputs"][1]) for v in actual["variants"]] == [
            (3,), (np.shape(variants[1][0])[0],)]
        assert checks.oracle(inputs, tc.reference(inputs), actual) is None
        # the same structure again reuses the compiled callable; other layouts do not
        before = tc.compile_calls()
        tc._inductor_run(inputs)
        assert tc.compile_calls() == before
        if mode is True:
            tc._inductor_run({**inputs, "layouts": ["contiguous", "offset"]})
            assert tc.compile_calls() == before + 1


def test_structure_key_tells_modes_layouts_and_variant_shapes_apart() -> None:
    from fuzzkit.targets.compiler.inductor import structure_key

    def key(mode: Any, layouts: Any = (), shapes: Any = ()) -> Any:
        return structure_key(GRAPH, "float32", "cpu", dynamic=mode, layouts=tuple(layouts),
                             run_shapes=tuple(shapes))

    keys = {key(False), key(True), key("marked"), key(True, ["strided", "contiguous"]),
            key(True, shapes=[((3, 8), (3, 8))])}
    assert len(keys) == 5


# -- bisection and repro scripts --------------------------------------------------------------


def test_bisect_keeps_the_variant_that_fails() -> None:
    """A compiler wrong only on a variant's shape: every bisection candidate carries the
    variants (cut to the window's inputs), so the search finds the node and the minimized case
    still fails on that variant."""
    from fuzzkit.target import Implementation
    from fuzzkit.targets.compiler.bisect import bisect

    graph = copy.deepcopy(GRAPH)
    graph["nodes"].append({"name": "n2", "op": "exp", "args": ["n1"], "attrs": {},
                           "shape": [4]})
    graph["outputs"] = ["n2"]

    def compile_fx(gm: Any, example_inputs: Any, **options: Any) -> Any:
        def run(*xs: Any) -> tuple:
            out = gm(*xs)
            out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            # the planted bug: one-element results come out doubled (only a variant has them)
            return tuple(o * 2 if o.shape == (1,) else o for o in out)
        return run

    impl = Implementation("fake", lambda inputs: tc.run_compiled(compile_fx, inputs, "cpu"))
    inputs = {"graph": graph, "dtype": "float32", "dynamic": True, "values": vals(4, 8),
              "variants": [vals(3, 8, seed=1), vals(1, 8, seed=2)],
              "layouts": ["strided", "contiguous"]}
    target = tc.target()
    result = bisect(target, impl, inputs)
    assert result.original_failure.details["run"] == 2  # variant 1: shapes [1, 8]
    assert result.first_node == "n1" and result.window == ["n1"]
    final = result.minimized_inputs
    assert checks.validate(final) is None
    # the window's input n0 in each variant: that variant's own reference value
    assert [np.shape(v[0]) for v in final["variants"]] == [(3, 8), (1, 8)]
    assert final["layouts"] == ["contiguous"] and final["dynamic"] is True
    assert result.failure.details["run"] == 2 and result.confirmed
    short = {**final, "variants": final["variants"][:1]}
    assert target.oracle(short, target.reference(short), impl.fn(short)) is None  # not without


def test_repro_script_replays_variants_layouts_and_mode(tmp_path: Path) -> None:
    from fuzzkit.case import Case
    from fuzzkit.targets.compiler.repro import write_repro

    inputs = case(dynamic="marked", variants=[vals(2, 8, seed=1), vals(5, 8, seed=2)],
                  layouts=["transposed", "contiguous"])
    saved = Case("compiler", "inductor", inputs)
    path = saved.save(tmp_path)
    script = write_repro(saved, path, first_node="n1", op="sum", window=["n1"],
                         signature="mismatch:sum:float32:value")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dynamic 'marked', 2 variant(s), layouts ['transposed', 'contiguous']" in done.stdout
    assert "oracle: pass" in done.stdout
