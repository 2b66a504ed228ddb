"""Where the compilers under test change path, as data (:mod:`fuzzkit.reach`), and the sizes of a
case those thresholds apply to.

Sizes of a case (:data:`SIZES`, measured on the graph's solved shapes):

* ``numel``     element count of every elementwise node (what one fused elementwise kernel
                walks);
* ``row``       reduced length of every sum/mean/amax/amin over exactly the last dim (the
                fusing compiler's fused reductions);
* ``cells``     ``rows * next_pow2(row)`` of those reductions: the cells of their tile grid;
* ``reduction`` reduced element count of every reducing node (sum/mean/amax/amin over any dims,
                softmax, log_softmax, layer_norm, cumsum);
* ``fanout``    users of every node (consumer nodes, plus one if it is a graph output);
* ``inner``     the last dim of every value (inputs and nodes);
* ``dim``       every dim of every graph input (what Dynamo makes symbolic).

The fusing compiler's thresholds follow ``codegen.MAX_BLOCK`` as launched: 4096 under the Triton
interpreter, 1024 on a GPU (:func:`fusing_thresholds` reads it when called, so a GPU run aims at
the GPU's tiles).  Inductor's are those of torch 2.13's C++ backend (``torch/_inductor``: vector
ISA lane counts, ``unroll_reductions_threshold``, ``cpp.use_two_step_variance_threshold``, the
CascadeSumHelper chunk, ``realize_reads_threshold``) and of Dynamo's dynamic shapes, plus, only
where CUDA is present, the split-reduction cut-off of its Triton backend.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping

from fuzzkit import reach
from fuzzkit.reach import Threshold

#: Largest sizes a case may have (one case must stay about a second under the interpreter).
NUMEL_CAP = 20480
ROW_CAP = 65536
CELLS_CAP = 32768
FANOUT_CAP = 9
DIM_CAP = 4096


def _record(op: Any) -> Any:
    """The op's record (None for an op the catalogue does not know); imported on first use, so
    importing the target stays cheap."""
    from fuzzkit.targets.compiler.graphs.ops import OPS

    return OPS.get(op) if isinstance(op, str) else None


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _reduced(node: Mapping[str, Any], in_shape: list[int]) -> tuple[int, ...]:
    from fuzzkit.targets.compiler.graphs.ops import reduced_dims

    spec = _record(node["op"])
    if spec is not None and spec.kind == "reduction":  # dim: one, a list or None
        return reduced_dims(node["attrs"].get("dim"), len(in_shape))
    return (int(node["attrs"]["dim"]) % max(1, len(in_shape)),)


def _shapes(graph: Mapping[str, Any]) -> dict[str, list[int]]:
    out = {i["name"]: [int(d) for d in i["shape"]] for i in graph["inputs"]}
    out.update({n["name"]: [int(d) for d in n["shape"]] for n in graph["nodes"]})
    return out


def _fused_rows(graph: Mapping[str, Any]) -> Iterator[tuple[int, int]]:
    """(row length, rows) of every reduction the fusing compiler fuses (exactly the last dim)."""
    shapes = _shapes(graph)
    for n in graph["nodes"]:
        spec = _record(n["op"])
        if spec is None or spec.fusing != "reduction":
            continue
        shape = shapes[n["args"][0]]
        if shape and _reduced(n, shape) == (len(shape) - 1,):
            yield shape[-1], math.prod(shape[:-1])


def numels(inputs: Mapping[str, Any]) -> Iterator[int]:
    from fuzzkit.targets.compiler.graphs.ops import OPS

    for n in inputs["graph"]["nodes"]:
        if OPS[n["op"]].kind == "elementwise":
            yield math.prod(n["shape"])


def rows(inputs: Mapping[str, Any]) -> Iterator[int]:
    for n, _ in _fused_rows(inputs["graph"]):
        yield n


def cells(inputs: Mapping[str, Any]) -> Iterator[int]:
    for n, r in _fused_rows(inputs["graph"]):
        yield r * next_pow2(n)


def reductions(inputs: Mapping[str, Any]) -> Iterator[int]:
    from fuzzkit.targets.compiler.graphs.generate import REDUCING_OPS

    graph = inputs["graph"]
    shapes = _shapes(graph)
    for n in graph["nodes"]:
        if n["op"] in REDUCING_OPS:
            shape = shapes[n["args"][0]]
            yield math.prod(shape[d] for d in _reduced(n, shape)) if shape else 1


def fanouts(inputs: Mapping[str, Any]) -> Iterator[int]:
    graph = inputs["graph"]
    users = {n["name"]: 0 for n in graph["nodes"]}
    for n in graph["nodes"]:
        for a in set(n["args"]):
            if a in users:
                users[a] += 1
    for o in set(graph["outputs"]):
        if o in users:
            users[o] += 1
    yield from users.values()


def inner_dims(inputs: Mapping[str, Any]) -> Iterator[int]:
    for shape in _shapes(inputs["graph"]).values():
        if shape:
            yield shape[-1]


def input_dims(inputs: Mapping[str, Any]) -> Iterator[int]:
    for i in inputs["graph"]["inputs"]:
        yield from (int(d) for d in i["shape"])


SIZES: dict[str, reach.Size] = {
    "numel": reach.Size(numels, lo=1),
    "row": reach.Size(rows, lo=1),
    "cells": reach.Size(cells, lo=1),
    "reduction": reach.Size(reductions, lo=1),
    "fanout": reach.Size(fanouts, lo=1),
    "inner": reach.Size(inner_dims, lo=1),
    "dim": reach.Size(input_dims, lo=1),
}


def fusing_thresholds() -> tuple[Threshold, ...]:
    """The fusing compiler's tiles as launched in this process (interpreter or GPU)."""
    try:
        from fuzzkit.targets.compiler.fusing import codegen
    except ImportError:  # no triton: the implementation is unavailable anyway
        return ()
    block = int(codegen.MAX_BLOCK)
    return (
        Threshold("numel", block,
                  "fused elementwise kernel: BLOCK = min(MAX_BLOCK, next_pow2(numel)); past "
                  "MAX_BLOCK the group launches cdiv(numel, MAX_BLOCK) programs, the last one "
                  "masked", cap=NUMEL_CAP),
        Threshold("row", block,
                  "fused reduction: past MAX_BLOCK the row tile next_pow2(n) outgrows "
                  "MAX_BLOCK (ROWS clamped to 1: one oversized tile per row)", cap=ROW_CAP),
        Threshold("row", block // 2,
                  "fused reduction: ROWS = MAX_BLOCK // next_pow2(n) rows per program, 2 up to "
                  "MAX_BLOCK/2, 1 past it", cap=4 * block),
        Threshold("cells", block,
                  "fused reduction grid: rows x next_pow2(n) cells fit one program up to "
                  "MAX_BLOCK; past it the rows spread over cdiv(rows, ROWS) programs",
                  cap=CELLS_CAP),
        Threshold("fanout", 1,
                  "partition: a producer joins its consumer's kernel only when that consumer is "
                  "its single user; a second user (or being a graph output) ends the group",
                  cap=FANOUT_CAP),
    )


def inductor_thresholds() -> tuple[Threshold, ...]:
    """torch.compile (Inductor) on this machine: its C++ backend, plus its Triton backend's
    split reductions where CUDA is present."""
    found = [
        Threshold("inner", 8, "Inductor C++ vector loop on AVX2: 8 float32 lanes, then a masked "
                              "tail", cap=64),
        Threshold("inner", 16, "Inductor C++ vector loop on AVX-512: 16 float32 lanes (and 16x16 "
                               "transpose tiles), then a masked tail", cap=128),
        Threshold("inner", 32, "Inductor C++ on AVX-512: 32 float16/bfloat16 lanes; shorter "
                               "ranges use 16", cap=256),
        Threshold("reduction", 4096, "Inductor C++ float32 sum: past 4096 elements the "
                                     "accumulator is a CascadeSumHelper of 4096-element chunks",
                  cap=ROW_CAP),
        Threshold("reduction", 1024, "Inductor C++ var_mean (layer_norm): two-step variance up "
                                     "to 1024 elements (cpp.use_two_step_variance_threshold), "
                                     "Welford past it", cap=8192),
        Threshold("reduction", 7, "Inductor unrolls reductions of fewer than 8 elements "
                                  "(unroll_reductions_threshold) into pointwise code"),
        Threshold("fanout", 4, "Inductor realize_reads_threshold: a pointwise value read by "
                               "more than 4 consumers is stored instead of recomputed inline",
                  cap=FANOUT_CAP),
        Threshold("dim", 1, "Dynamo dynamic shapes: input dims of size 1 are specialised, 2 and "
                            "more become symbols"),
    ]
    from fuzzkit import triton_support

    if triton_support.gpu_available():  # pragma: no cover - only on a GPU
        found.append(Threshold("reduction", 8192,
                               "Inductor Triton split reduction: an inner reduction longer than "
                               "8192 with few outputs runs in two passes", cap=ROW_CAP))
    return tuple(found)


__all__ = ["SIZES", "fusing_thresholds", "inductor_thresholds", "next_pow2", "NUMEL_CAP",
           "ROW_CAP", "CELLS_CAP", "FANOUT_CAP", "DIM_CAP"]
