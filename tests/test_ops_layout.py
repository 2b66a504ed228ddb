"""The ``layout`` op family (``targets/compiler/graphs/ops_layout.py``): views, indexing and
in-place updates seen through views.

What the generic per-op tests (``tests/test_graph_ops.py``) cannot show:

* indexing attributes come from case files -- an index past its dim, a strided view past the
  storage (or one that writes an element twice), a repeated scatter destination, an index list
  longer than :data:`~ops_layout.MAX_INDEX` -- and each is refused with one line before any
  tensor exists;
* the oracle sees a mutation that a compiler loses: an in-place update through a view whose
  write-back into the base is dropped returns the base unchanged, which no error bound excuses;
  a sum into a destination that keeps only the last value sent is caught the same way, and the
  accumulated bound still holds for a float16 eager sum of many terms;
* real Inductor (functionalization and reinplacing) agrees with the reference on one-node
  graphs of the in-place-through-view ops (a few compiles).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest.importorskip("torch")

from fuzzkit import triton_support

triton_support.prepare()

import torch  # noqa: E402

import fuzzkit.targets.compiler as tc  # noqa: E402
from fuzzkit.registry import get_target  # noqa: E402
from fuzzkit.runner import check_case  # noqa: E402
from fuzzkit.targets.compiler import checks  # noqa: E402
from fuzzkit.targets.compiler.graphs import bound, build, error_rules  # noqa: E402
from fuzzkit.targets.compiler.graphs import ops_layout as layout  # noqa: E402
from fuzzkit.targets.compiler.graphs.ops import OPS, SpecError, missing_parts, op_of  # noqa: E402
from fuzzkit.targets.compiler.graphs.values import round_to_dtype  # noqa: E402


def _graph(op: str, shapes: list[list[int]], attrs: dict) -> dict:
    """A one-node graph of ``op`` over fresh inputs of ``shapes``; its declared output shape is
    the op's own concrete rule (a refused node gets shape [] -- validation says why)."""
    try:
        out = OPS[op].out_shape(shapes, attrs)
    except SpecError:
        out = []
    inputs = [{"name": f"x{k}", "shape": list(s)} for k, s in enumerate(shapes)]
    node = {"name": "n0", "op": op, "args": [i["name"] for i in inputs], "attrs": attrs,
            "shape": out}
    return {"inputs": inputs, "nodes": [node], "outputs": ["n0"]}


def _case(op: str, shapes: list[list[int]], attrs: dict, dtype: str = "float32",
          seed: int = 0) -> dict:
    """Compiler inputs of a one-node graph, values exact in every dtype (bfloat16 numbers of
    magnitude 0.5..2, either sign)."""
    rng = np.random.default_rng(seed)
    values = [round_to_dtype(rng.uniform(0.5, 2.0, s) * rng.choice([-1.0, 1.0], s), "bfloat16")
              for s in shapes]
    return {"graph": _graph(op, shapes, attrs), "dtype": dtype, "dynamic": False,
            "values": [np.asarray(v, dtype=np.float32) for v in values]}


def test_the_family_registers_complete_records_under_their_own_functions() -> None:
    """Every record of the family is in the catalogue, complete, and run by the module-level
    function of its name in ``ops_layout`` (the stable fx target repros import)."""
    assert len(layout.RECORDS) >= 20
    for spec in layout.RECORDS:
        assert OPS[spec.name] is spec
        assert missing_parts(spec) == [], spec.name
        assert spec.torch_fn is getattr(layout, spec.name)
        assert spec.torch_fn.__module__ == layout.__name__ and op_of(spec.torch_fn) == spec.name
        # bit copies move their errors; everything else states its own rule
        assert (spec.error is error_rules.moved) == spec.copies, spec.name


# ---------------------------------------------------------------------------------------------
# attributes from a file: refused with one line


#: (op, operand shapes, attrs, what the refusal says): each an index or view a file may hold
#: that torch would reject, read out of bounds with, or resolve nondeterministically
REFUSED = [
    ("slice", [[3, 4]], {"dim": 1, "start": 1, "end": 5, "step": 2}, "does not fit"),
    ("slice", [[3, 4]], {"dim": 2, "start": 0, "end": 1, "step": 1}, "out of range"),
    ("slice", [[3, 4]], {"dim": 1, "start": 0, "end": 2, "step": 0}, "must be in [1"),
    ("narrow", [[3, 4]], {"dim": 0, "start": 2, "length": 2}, "does not fit"),
    ("select", [[3, 4]], {"dim": 1, "index": 4}, "out of range"),
    ("select", [[3, 4]], {"dim": 1, "index": -1}, "must be in [0"),
    ("unbind_piece", [[3, 4]], {"dim": 0, "piece": 3}, "out of range"),
    ("split_piece", [[3, 4]], {"dim": 1, "split_size": 2, "piece": 2}, "has no piece"),
    ("chunk_piece", [[5, 4]], {"dim": 0, "chunks": 4, "piece": 3}, "has no piece"),
    ("flip", [[3, 4]], {"dims": [1, 1]}, "repeat a dim"),
    ("roll", [[3, 4]], {"shifts": [1], "dims": [0, 1]}, "one shift per dim"),
    ("diagonal", [[3, 4]], {"offset": 0, "dim1": 1, "dim2": 1}, "two different dims"),
    ("pad", [[3, 1]], {"pad": [2, -2], "value": 0.0}, "crops"),
    ("pad", [[3, 4]], {"pad": [1, 1, 1], "value": 0.0}, "2 entries per padded dim"),
    ("unflatten", [[3, 4]], {"dim": 1, "sizes": [3, 2]}, "cannot unflatten"),
    ("gather", [[3, 4]], {"dim": 1, "index": [0, 4], "shape": [1, 2]}, "index 4 is out of range"),
    ("gather", [[3, 4]], {"dim": 1, "index": [0, 1], "shape": [4, 1]}, "does not fit"),
    ("gather", [[3, 4]], {"dim": 0, "index": [0, 1, 2], "shape": [1, 2]}, "has 3 entries"),
    ("scatter", [[3, 4], [1, 2]], {"dim": 1, "index": [0, 9]}, "index 9 is out of range"),
    ("scatter", [[3, 4], [2, 1]], {"dim": 0, "index": [1, 1]}, "repeats a destination"),
    ("scatter_add", [[3, 4], [1, 2]], {"dim": 1, "index": [0, 4]}, "out of range"),
    ("index_add", [[3, 4], [3, 2]], {"dim": 1, "index": [4, 0]}, "out of range"),
    ("index_copy", [[3, 4], [3, 2]], {"dim": 1, "index": [2, 2]}, "repeats a destination"),
    ("index_put", [[3, 4], [2, 4]], {"index": [0, 3], "accumulate": True}, "out of range"),
    ("index_put", [[3, 4], [2, 4]], {"index": [1, 1], "accumulate": False}, "repeats"),
    ("inplace_index_put_moved", [[3, 4], [2, 3]], {"dim": 1, "index": [4, 0],
                                                   "accumulate": True}, "out of range"),
    ("inplace_fill_select", [[3, 4]], {"dim": 0, "index": 3, "value": 1.0}, "out of range"),
    ("inplace_mul_sliced", [[6, 4], [2, 4]], {"dim": 0, "start": 7, "step": 2}, "beyond dim"),
    ("view_sees_add", [[6, 4], [6, 4]], {"dim": 0, "start": 7, "step": 1}, "beyond dim"),
    # as_strided: past the storage (stride, offset), mismatched lengths, negative stride
    ("as_strided", [[3, 4]], {"size": [3, 4], "stride": [5, 1], "storage_offset": 0},
     "reaches element 13 of a 12-element storage"),
    ("as_strided", [[3, 4]], {"size": [2, 2], "stride": [1, 1], "storage_offset": 11},
     "reaches element 13"),
    ("as_strided", [[3, 4]], {"size": [2, 2], "stride": [1], "storage_offset": 0},
     "differ in length"),
    ("as_strided", [[3, 4]], {"size": [2, 2], "stride": [1, -1], "storage_offset": 0},
     "must be in [0"),
    # a view written through: also no element twice (a broadcast or an overlapping stride)
    ("inplace_copy_as_strided", [[3, 4], [2, 2]],
     {"size": [2, 2], "stride": [0, 1], "storage_offset": 0}, "overlaps itself"),
    ("inplace_copy_as_strided", [[3, 4], [2, 3]],
     {"size": [2, 3], "stride": [2, 1], "storage_offset": 0}, "overlaps itself"),
    ("inplace_copy_as_strided", [[3, 4], [2, 2]],
     {"size": [2, 2], "stride": [6, 2], "storage_offset": 4}, "reaches element 12"),
    # index lists longer than any node needs: refused by the attribute's length
    ("gather", [[3, 4]], {"dim": 0, "index": [0] * (layout.MAX_INDEX + 1),
                          "shape": [1, layout.MAX_INDEX + 1]}, "more than 131072 entries"),
    ("index_add", [[3, 4], [layout.MAX_INDEX + 1, 4]],
     {"dim": 0, "index": [0] * (layout.MAX_INDEX + 1)}, "more than 131072 entries"),
]


@pytest.mark.parametrize("op,shapes,attrs,says", REFUSED,
                         ids=[f"{r[0]}-{k}" for k, r in enumerate(REFUSED)])
def test_untrusted_indexing_attributes_are_refused_in_one_line(
    op: str, shapes: list[list[int]], attrs: dict, says: str
) -> None:
    with pytest.raises(SpecError) as refused:
        OPS[op].out_shape(shapes, attrs)
    message = str(refused.value)
    assert says in message and "\n" not in message, message
    # the same node in a case file: refused by validation, never run
    problem = checks.validate(_case(op, shapes, attrs))
    assert problem is not None and says in problem and "\n" not in problem, problem


def test_the_refused_nodes_are_one_fix_away_from_accepted() -> None:
    """The refusals are about the one bad attribute: the same nodes with it repaired pass (a
    rule that refused everything would pass the refusal test)."""
    fixed = [
        ("slice", [[3, 4]], {"dim": 1, "start": 1, "end": 4, "step": 2}, [3, 2]),
        ("select", [[3, 4]], {"dim": 1, "index": 3}, [3]),
        ("split_piece", [[3, 4]], {"dim": 1, "split_size": 3, "piece": 1}, [3, 1]),
        ("chunk_piece", [[5, 4]], {"dim": 0, "chunks": 4, "piece": 2}, [1, 4]),
        ("pad", [[3, 2]], {"pad": [2, -2], "value": 0.0}, [3, 2]),
        ("gather", [[3, 4]], {"dim": 1, "index": [0, 3], "shape": [1, 2]}, [1, 2]),
        ("scatter", [[3, 4], [2, 1]], {"dim": 0, "index": [1, 2]}, [3, 4]),
        ("scatter_add", [[3, 4], [2, 1]], {"dim": 0, "index": [1, 1]}, [3, 4]),
        ("index_put", [[3, 4], [2, 4]], {"index": [1, 1], "accumulate": True}, [3, 4]),
        ("as_strided", [[3, 4]], {"size": [3, 4], "stride": [4, 1], "storage_offset": 0},
         [3, 4]),
        ("as_strided", [[3, 4]], {"size": [2, 2], "stride": [0, 1], "storage_offset": 10},
         [2, 2]),
        ("inplace_copy_as_strided", [[3, 4], [2, 2]],
         {"size": [2, 2], "stride": [1, 2], "storage_offset": 8}, [3, 4]),
    ]
    for op, shapes, attrs, out in fixed:
        assert OPS[op].out_shape(shapes, attrs) == out, op
        case = _case(op, shapes, attrs)
        assert checks.validate(case) is None, op
        assert list(build.run_reference(case["graph"], case["values"])["n0"].shape) == out, op


# ---------------------------------------------------------------------------------------------
# the oracle sees a lost mutation


def _judge(case: dict, outputs: list[np.ndarray]) -> dict | None:
    expected = tc.reference(case)
    return checks.divergence(case, expected, {"outputs": [np.asarray(o, np.float64)
                                                          for o in outputs]})


def _eager(case: dict) -> np.ndarray:
    graph = case["graph"]
    return build.run_eager(graph, case["values"], case["dtype"])[graph["outputs"][0]]


#: one-node cases of the in-place-through-view ops, and what a compiler that drops the write
#: back into the base returns: the clone unchanged (``view_sees_add``: the view of it)
LOST = [
    ("inplace_add_transposed", [[3, 5], [5, 3]], {"dim0": 0, "dim1": 1},
     lambda a, b: a),
    ("inplace_mul_sliced", [[7, 4], [3, 4]], {"dim": 0, "start": 1, "step": 2},
     lambda a, b: a),
    ("inplace_fill_select", [[3, 4]], {"dim": 1, "index": 2, "value": 0.5},
     lambda a: a),
    ("inplace_clamp_diagonal", [[4, 4]], {"offset": 0, "min": -0.25, "max": 0.25},
     lambda a: a),
    ("inplace_index_put_moved", [[3, 4], [2, 3]], {"dim": 1, "index": [3, 0],
                                                   "accumulate": False}, lambda a, b: a),
    ("inplace_copy_as_strided", [[3, 4], [2, 2]],
     {"size": [2, 2], "stride": [1, 4], "storage_offset": 5}, lambda a, b: a),
    ("view_sees_add", [[6, 4], [6, 4]], {"dim": 0, "start": 1, "step": 2},
     lambda a, b: a[1::2]),
]


@pytest.mark.parametrize("op,shapes,attrs,lost", LOST, ids=[r[0] for r in LOST])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_oracle_catches_a_mutation_lost_through_a_view(
    op: str, shapes: list[list[int]], attrs: dict, lost, dtype: str
) -> None:
    case = _case(op, shapes, attrs, dtype)
    assert checks.validate(case) is None
    # an honest run (eager in the dtype) passes ...
    assert _judge(case, [_eager(case)]) is None
    # ... the base returned without the update through the view does not
    wrong = lost(*[np.asarray(v, np.float64) for v in case["values"]])
    div = _judge(case, [wrong])
    assert div is not None, op
    assert (div["op"], div["error_class"], div["dtype"]) == (op, "value", dtype), div


def test_a_sum_that_keeps_only_the_last_value_sent_is_caught() -> None:
    """index_add / scatter_add / index_put(accumulate) with repeated destinations: a compiler
    that stores instead of adding (last write wins) is caught; adding is within the bound."""
    for op, shapes, attrs in [
        ("index_add", [[3, 4], [3, 3]], {"dim": 1, "index": [2, 0, 2]}),
        ("scatter_add", [[3, 4], [2, 3]], {"dim": 0, "index": [1, 1, 0, 1, 1, 2]}),
        ("index_put", [[3, 4], [3, 4]], {"index": [0, 2, 0], "accumulate": True}),
    ]:
        case = _case(op, shapes, attrs)
        a, b = (torch.from_numpy(np.asarray(v, np.float64)) for v in case["values"])
        assert _judge(case, [_eager(case)]) is None, op
        if op == "index_add":
            wrong = a.index_copy(1, torch.tensor([2, 0, 2]).flip(0), b.flip(1))
        elif op == "scatter_add":
            wrong = a.scatter(0, torch.tensor(attrs["index"]).reshape(2, 3), b)
        else:
            wrong = a.index_put((torch.tensor(attrs["index"]),), b, accumulate=False)
        div = _judge(case, [wrong.numpy()])
        assert div is not None and (div["op"], div["error_class"]) == (op, "value"), op


def test_the_accumulated_bound_holds_for_a_long_float16_sum_and_is_tight_enough() -> None:
    """Many values sent to one destination, added in float16 by eager CPU (a rounding per
    addition): within :func:`ops_layout.accumulated`'s bound, which is still far below one of
    the terms (a dropped term is caught)."""
    n = 12
    attrs = {"dim": 0, "index": [0] * n}
    case = _case("index_add", [[2, 3], [n, 3]], attrs, "float16", seed=3)
    case["values"][1] = np.asarray(round_to_dtype(np.abs(case["values"][1]), "bfloat16"),
                                   np.float32)
    ref = build.run_reference(case["graph"], case["values"])
    eager = _eager(case)
    b = bound.error_bounds(case["graph"], ref, "float16")["n0"]
    assert np.all(np.abs(eager - ref["n0"]) <= b)
    assert np.any(np.abs(eager - ref["n0"])[0] > 0)  # float16 rounding happened
    assert np.all(b[0] < 0.5 * np.min(np.abs(case["values"][1])))
    assert np.all(b[1] == 0)  # nothing sent to row 1: a copy, exact


def test_pad_writes_its_value_exactly() -> None:
    """pad's constant is a value of the dtype: the padded elements are judged exactly, so a
    compiler that pads with 0 instead is caught; the moved elements keep their (zero) error."""
    case = _case("pad", [[3, 4]], {"pad": [1, 2, 0, 1], "value": 2.0})
    ref = build.run_reference(case["graph"], case["values"])["n0"]
    b = bound.error_bounds(case["graph"], build.run_reference(case["graph"], case["values"]),
                           "float32")["n0"]
    assert ref.shape == (4, 7) and np.all(b == 0)
    wrong = np.asarray(torch.nn.functional.pad(torch.from_numpy(
        np.asarray(case["values"][0], np.float64)), [1, 2, 0, 1]))
    div = _judge(case, [wrong])
    assert div is not None and div["op"] == "pad"
    assert _judge(case, [_eager(case)]) is None


# ---------------------------------------------------------------------------------------------
# real Inductor


#: one-node cases of the in-place-through-view ops (a compile each: few)
INDUCTOR = [
    ("inplace_add_transposed", [[5, 3, 4], [5, 4, 3]], {"dim0": 1, "dim1": 2}),
    ("inplace_mul_sliced", [[9, 6], [9, 2]], {"dim": 1, "start": 1, "step": 3}),
    ("view_sees_add", [[7, 5], [7, 5]], {"dim": 0, "start": 2, "step": 2}),
]


@pytest.mark.parametrize("op,shapes,attrs", INDUCTOR, ids=[r[0] for r in INDUCTOR])
def test_inductor_keeps_the_mutation_through_the_view(
    op: str, shapes: list[list[int]], attrs: dict
) -> None:
    target = get_target("compiler")
    impl = target.implementation("inductor")
    if impl.unavailable() is not None:
        pytest.skip(impl.unavailable())
    case = _case(op, shapes, attrs)
    verdict = check_case(target, impl, case, properties=False, confirm=False)
    assert verdict.failure is None, verdict.failure.message
    # and the compiled output is the mutated base, not the clone (the oracle above would say
    # so; this says it without the bound)
    a = np.asarray(case["values"][0], np.float64)
    out = np.asarray(verdict.actual["outputs"][0])
    assert out.shape == verdict.expected["outputs"][0].shape
    assert not np.array_equal(out, a if op != "view_sees_add" else a[2::2])


def test_inductor_index_copy_from_itself_is_caught() -> None:
    """An upstream Inductor defect this family found (torch 2.13, CPU): ``index_copy`` (and
    ``index_put``) of an intermediate into itself, ``index_copy(e, 0, idx, e)``, is re-inplaced
    into ``e``'s buffer, so later rows read sources already overwritten.  The oracle names the
    op; this test expects the defect on the pinned torch and says so the day a fix lands."""
    target = get_target("compiler")
    impl = target.implementation("inductor")
    if impl.unavailable() is not None:
        pytest.skip(impl.unavailable())
    graph = {
        "inputs": [{"name": "x0", "shape": [7]}],
        "nodes": [
            {"name": "n0", "op": "neg", "args": ["x0"], "attrs": {}, "shape": [7]},
            {"name": "n1", "op": "index_copy", "args": ["n0", "n0"],
             "attrs": {"dim": 0, "index": [0, 4, 2, 5, 3, 6, 1]}, "shape": [7]},
        ],
        "outputs": ["n1"],
    }
    case = {"graph": graph, "dtype": "float32", "dynamic": False,
            "values": [np.arange(7, dtype=np.float32)]}
    assert checks.validate(case) is None
    assert _judge(case, [_eager(case)]) is None  # eager copies: no defect there
    verdict = check_case(target, impl, case, properties=False, confirm=False)
    assert verdict.failure is not None, "fixed upstream? index_copy from itself now compiles right"
    assert verdict.failure.signature == "mismatch:index_copy:float32:value"
