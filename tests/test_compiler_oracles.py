"""The compiler oracle's classes beyond the float bound (issue 23): error class, output dtype,
determinism -- each caught on a deliberately wrong implementation and quiet on a clean one.

The implementations here are fakes run through the target's own driver
(:func:`fuzzkit.targets.compiler.run_compiled`): eager fx execution of the graph (no Inductor
compile), wrapped to raise, to change a dtype, to flip a bit on the second run, to read the
storage without its offset.  So every test exercises the real driver, reference and oracle.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

import torch

import fuzzkit.targets.compiler as tc
from fuzzkit.targets.compiler import checks

GRAPH = {
    "inputs": [{"name": "x0", "shape": [3, 5]}, {"name": "x1", "shape": [3, 5]}],
    "nodes": [
        {"name": "n0", "op": "add", "args": ["x0", "x1"], "attrs": {}, "shape": [3, 5]},
        {"name": "n1", "op": "sum", "args": ["n0"], "attrs": {"dim": 1, "keepdim": False},
         "shape": [3]},
    ],
    "outputs": ["n0", "n1"],
}


def case(**extra: Any) -> dict:
    rng = np.random.default_rng(3)
    values = [rng.integers(-8, 8, (3, 5)).astype(np.float32) / 4 for _ in range(2)]
    return {"graph": copy.deepcopy(GRAPH), "dtype": "float32", "dynamic": False,
            "values": values, **extra}


def eager_compile(gm: Any, example_inputs: Any, **options: Any) -> Any:
    """A 'compiler' that runs the fx graph as it is: right by construction."""
    def run(*xs: Any) -> tuple:
        out = gm(*xs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return run


def judge(inputs: dict, compile_fx: Any = eager_compile) -> Any:
    actual = tc.run_compiled(compile_fx, inputs, "cpu")
    return checks.oracle(inputs, tc.reference(inputs), actual), actual


def test_a_clean_implementation_passes_every_class() -> None:
    failure, actual = judge(case())
    assert failure is None
    assert actual["meta"] == [["float32", [3, 5]], ["float32", [3]]]
    assert len(actual["again"]) == 2 and "error" not in actual


# -- error class ------------------------------------------------------------------------------


class Wrapper(Exception):
    """Like Dynamo's BackendCompilerFailed: the backend's exception as ``inner_exception``."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__(f"backend failed at 0x7f00deadbeef: {inner}")
        self.inner_exception = inner


def raising_compile(gm: Any, example_inputs: Any, **options: Any) -> Any:
    raise Wrapper(IndexError("index 7 is out of bounds in /tmp/x.cpp"))


def test_a_compiled_run_that_raises_where_eager_runs_is_an_error_class() -> None:
    failure, actual = judge(case(), raising_compile)
    assert actual["error"]["eager"] == "ok" and actual["outputs"] == []
    assert failure is not None and failure.kind == "crash"
    # the innermost type, nothing of the message (addresses, paths) in the signature
    assert failure.signature == "error-class:IndexError"
    assert "eager (float32) runs it" in failure.message


def test_no_finding_when_eager_raises_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from fuzzkit.targets.compiler.graphs import build

    def eager_fails(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError('"add" not implemented for this dtype')

    monkeypatch.setattr(build, "run_eager", eager_fails)
    failure, actual = judge(case(), raising_compile)
    assert actual["error"]["eager"] == "raises RuntimeError"
    assert failure is None  # outside the ops' domain: not a compiler bug


def test_a_case_timeout_or_oom_is_never_an_error_class() -> None:
    from fuzzkit.runner import CaseTimeout

    def slow(gm: Any, example_inputs: Any, **options: Any) -> Any:
        try:
            raise CaseTimeout()
        except CaseTimeout as exc:
            raise RuntimeError("compile interrupted") from exc

    with pytest.raises(CaseTimeout):
        tc.run_compiled(slow, case(), "cpu")

    def hungry(gm: Any, example_inputs: Any, **options: Any) -> Any:
        raise Wrapper(MemoryError())

    with pytest.raises(Wrapper):  # the runner's oom verdict, not an error class
        tc.run_compiled(hungry, case(), "cpu")


def test_a_variant_that_raises_is_named_and_the_runs_before_it_judged() -> None:
    inputs = case(variants=[[np.ones((4, 5), np.float32)] * 2, [np.ones((2, 5), np.float32)] * 2])

    def fails_on_two_rows(gm: Any, example_inputs: Any, **options: Any) -> Any:
        inner = eager_compile(gm, example_inputs)

        def run(*xs: Any) -> tuple:
            if xs[0].shape[0] == 2:
                raise ValueError("guard failed")
            return inner(*xs)
        return run

    failure, actual = judge(inputs, fails_on_two_rows)
    assert actual["error"]["run"] == 2 and len(actual["variants"]) == 1
    assert failure.signature == "error-class:ValueError"
    assert "variant 1 (input shapes [[2, 5], [2, 5]])" in failure.message


# -- dtype and shape of outputs ---------------------------------------------------------------


def widening_compile(gm: Any, example_inputs: Any, **options: Any) -> Any:
    """Right values, wrong dtype: the second output comes back in float64."""
    inner = eager_compile(gm, example_inputs)

    def run(*xs: Any) -> tuple:
        a, b = inner(*xs)
        return a, b.double()
    return run


def test_an_output_of_the_wrong_dtype_is_caught() -> None:
    failure, _ = judge(case(), widening_compile)
    assert failure is not None and failure.signature == "dtype:sum"
    assert failure.details["expected_dtype"] == "float32"
    assert failure.details["actual_dtype"] == "float64"
    # the bisector keys a mismatch on (kind, dtype, error class)
    assert (failure.kind, failure.details["dtype"], failure.details["error_class"]) == (
        "mismatch", "float32", "dtype")


def test_eager_meta_gives_the_case_dtype_and_shapes() -> None:
    assert tc.eager_meta(GRAPH, "bfloat16") == [["bfloat16", [3, 5]], ["bfloat16", [3]]]


def test_an_output_of_the_wrong_shape_is_the_shape_class() -> None:
    def squeezing(gm: Any, example_inputs: Any, **options: Any) -> Any:
        inner = eager_compile(gm, example_inputs)
        return lambda *xs: (inner(*xs)[0], inner(*xs)[1][:2])

    failure, _ = judge(case(), squeezing)
    assert failure.signature == "mismatch:sum:float32:shape"


# -- determinism ------------------------------------------------------------------------------


def flaky(change: Any) -> Any:
    """A compiler whose every second call changes one element of the first output."""
    calls = [0]

    def compile_fx(gm: Any, example_inputs: Any, **options: Any) -> Any:
        inner = eager_compile(gm, example_inputs)

        def run(*xs: Any) -> tuple:
            a, b = inner(*xs)
            calls[0] += 1
            if calls[0] % 2 == 0:
                a = a.clone()
                a[1, 2] = change(a[1, 2])
            return a, b
        return run
    return compile_fx


def test_a_bit_that_differs_between_two_runs_is_caught() -> None:
    # one ulp: far inside the float bound, so only the determinism class can see it
    failure, _ = judge(case(), flaky(lambda v: torch.nextafter(v, v + 1)))
    assert failure is not None and failure.signature == "nondeterministic:add"
    assert failure.details["index"] == [1, 2]


def test_determinism_tells_signed_zeros_apart_but_not_nan_payloads() -> None:
    inputs = case()
    inputs["values"][0][1, 2] = 0.0
    inputs["values"][1][1, 2] = 0.0
    failure, _ = judge(inputs, flaky(lambda v: -v))  # +0.0 then -0.0
    assert failure is not None and failure.signature == "nondeterministic:add"
    nan_a = np.array([np.float64(np.nan)])
    nan_b = np.frombuffer(np.array([0x7FF8000000000001], np.uint64).tobytes(), np.float64)
    assert checks._same_bits(nan_a, nan_b)  # NaN-aware: any NaN equals any NaN


# -- layouts ----------------------------------------------------------------------------------


def test_layouts_keep_the_values_and_change_the_memory() -> None:
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    for layout in tc.LAYOUTS:
        y = tc.laid_out(x, layout)
        assert torch.equal(y, x), layout
    assert not tc.laid_out(x, "transposed").is_contiguous()
    assert tc.laid_out(x, "strided").stride()[-1] == 2
    assert tc.laid_out(x, "offset").storage_offset() == 1
    assert tc.laid_out(x, "channels_last").is_contiguous(memory_format=torch.channels_last)


def test_a_compiler_that_ignores_the_storage_offset_is_caught() -> None:
    def offsetless(gm: Any, example_inputs: Any, **options: Any) -> Any:
        inner = eager_compile(gm, example_inputs)

        def run(*xs: Any) -> tuple:
            return inner(*(torch.as_strided(x, x.shape, x.stride(), 0) for x in xs))
        return run

    assert judge(case(), offsetless)[0] is None  # contiguous inputs: nothing to see
    failure, _ = judge(case(layouts=["offset", "contiguous"]), offsetless)
    assert failure is not None and failure.signature == "mismatch:add:float32:nan"


# -- variants in the float oracle -------------------------------------------------------------


def test_a_divergence_in_a_variant_only_names_the_variant() -> None:
    inputs = case(variants=[[np.ones((4, 9), np.float32)] * 2, [np.ones((1, 5), np.float32)] * 2])

    def wrong_for_one_row(gm: Any, example_inputs: Any, **options: Any) -> Any:
        inner = eager_compile(gm, example_inputs)

        def run(*xs: Any) -> tuple:
            a, b = inner(*xs)
            return (a, b + 1) if xs[0].shape[0] == 1 else (a, b)
        return run

    failure, actual = judge(inputs, wrong_for_one_row)
    assert [len(v["outputs"]) for v in actual["variants"]] == [2, 2]
    assert failure.signature == "mismatch:sum:float32:value"
    assert failure.details["run"] == 2 and failure.message.startswith("variant 1 ")
    assert judge(inputs)[0] is None
