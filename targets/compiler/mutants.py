"""Miscompiles of the fusing compiler, each a one-line edit of :mod:`.fusing.codegen`.

Every mutant is the current source of ``targets/compiler/fusing/codegen.py`` with exactly one
line replaced (quoted in each docstring), imported privately and swapped in for
``codegen.compile_group``, which the runtime looks up at compile time
(:func:`fuzzkit.kernel_mutation.swapped`: an anchor line that no longer occurs exactly once
raises instead of silently testing the clean compiler).  They act on the ``fusing``
implementation; ``with target.mutant(name).applied(): ...`` works for any caller (the bisection
benchmark drives the minifier under them).

Two are *fusion-only*: the miscompile appears only when two specific ops share a kernel, so a
prefix bisection that cuts the graph between them makes it disappear.
"""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager, Iterator

from fuzzkit.target import Mutant


def _swap(name: str, old: str, new: str) -> ContextManager[None]:
    from fuzzkit.kernel_mutation import swapped
    from targets.compiler.fusing import codegen

    return swapped(codegen, "compile_group", name, (old, new))


def _mutant(name: str, old: str, new: str) -> Callable[[], ContextManager[None]]:
    @contextlib.contextmanager
    def patch() -> Iterator[None]:
        with _swap(name, old, new):
            yield

    return patch


MUTANTS_SPEC: list[tuple[str, str, str, str, str, str]] = [
    # name, bug class, citation, old line, new line, docstring
    ("broadcast-collapsed",
     "wrong broadcast in a fused op: a broadcast operand indexed by the innermost index only",
     "pytorch/pytorch#181695 (torch.where with broadcast shapes reads wrong values for the "
     "broadcast dim under inductor); NVIDIA/Fuser#2762",
     '    terms = [f"i{d} * s{j}_{d}" for d in range(rank)]\n',
     '    terms = [f"i{d} * s{j}_{d}" for d in range(rank) if not broadcast or d == rank - 1]\n',
     "A leaf whose shape differs from the group's (a broadcast operand) keeps only the "
     "innermost index term: a [R, 1] column read as element 0 for every row."),
    ("reduction-wrong-axis",
     "reduction over the wrong axis (reduction index mapped as if the reduced dim were leading)",
     "pytorch/pytorch#112297 (first-level reduction reused the wrong reduction ranges); "
     "torch-spyre/torch-spyre#867",
     '    "    flat = rows * N + cols",\n',
     '    "    flat = cols * R + rows",\n',
     "The reduction tile's flat index is column-major: every row sums a strided slice."),
    ("fast-exp",
     "fast approximate exp: exp2 with a truncated log2(e) constant",
     "pytorch/pytorch#161829 (inductor exp codegen precision, fast-math "
     "exp2(x*1.4426950408889634)); triton-lang/triton#5735",
     '    "exp": "tl.exp({a})",\n',
     '    "exp": "tl.exp2({a} * 1.4427)",\n',
     "Relative error ~3.4e-6 |x|: ~50 ulp at float32 for |x| ~ 1, invisible at float16/bf16."),
    ("dropped-clamp-max",
     "dropped clamp: the upper bound of clamp ignored",
     "pytorch/pytorch#113641 (compiled double clamp loses one clamp, wrong result)",
     'CLAMP_MAX = "tl.where({a} > {hi}, {hi}, {a})"\n',
     'CLAMP_MAX = "({a})"\n',
     "clamp(x, lo, hi) becomes max(x, lo)."),
    ("fp16-accumulator",
     "wrong accumulation dtype: float16 accumulator in a fused sum",
     "pytorch/pytorch#93708 (inductor float16 sum on CPU accumulated in float16); "
     "pytorch/pytorch#182697",
     '    "sum": ["    acc = tl.sum(tl.where(mask, {src}, 0.0), axis=1)"],\n',
     '    "sum": ["    acc = tl.sum(tl.where(mask, {src}, 0.0).to(tl.float16), axis=1)'
     '.to(tl.float32)"],\n',
     "Terms are rounded to float16 and summed there; visible at float32 and on long float16 "
     "rows."),
    ("tail-off-by-one",
     "off-by-one tail mask: the last element of an elementwise kernel is never computed",
     "pytorch/pytorch#168939 (inductor combo kernels missing store masks)",
     '    "    mask = offs < N",\n',
     '    "    mask = offs < N - 1",\n',
     "The last flat element of every fused elementwise group stays 0."),
    ("permute-as-contiguous",
     "wrong stride after a permute: a dense permuted input treated as contiguous",
     "pytorch/pytorch#185515 (stale non-contiguous stride after transpose); "
     "pytorch/pytorch#77600",
     '    strides = list(torch.broadcast_to(t, tuple(full)).stride())\n',
     '    strides = _dense_strides(t.shape, full) if _is_dense(t) '
     'else list(torch.broadcast_to(t, tuple(full)).stride())\n',
     "The host checks 'dense' where it meant 'contiguous': a permuted/transposed leaf (dense "
     "but not row-major) is read with row-major strides."),
    ("sub-operands-swapped",
     "re-ordered non-commutative op: a - b emitted as b - a",
     "operand-order bugs of commutativity-assuming canonicalization (see also "
     "ROCm/AMDMIGraphX#3679: fused kernel assumes the first argument)",
     '    "sub": "({a} - {b})",\n',
     '    "sub": "({b} - {a})",\n',
     "Every fused sub is negated."),
    ("div-operands-swapped",
     "re-ordered non-commutative op: a / b emitted as b / a",
     "operand-order bugs of commutativity-assuming canonicalization (see also "
     "ROCm/AMDMIGraphX#3679)",
     '    "div": "({a} / {b})",\n',
     '    "div": "({b} / {a})",\n',
     "Every fused div is inverted."),
    ("fused-sub-mul-stale-temp",
     "fusion-only: a mul fused after a sub reads the sub's first operand (stale register)",
     "register/temp reuse bugs in fused codegen, cf. pytorch/pytorch#182697 (fused path "
     "bypassed the materialized value)",
     '        args = [temp[a] for a in arg_names]\n',
     '        args = [first[a] if op == "mul" and ops_of.get(a) == "sub" else temp[a] '
     'for a in arg_names]\n',
     "Only when a sub and the mul consuming it share a kernel: (a - b) * c computes a * c.  "
     "Split into separate kernels (as prefix bisection does) it disappears."),
    ("fused-reduction-reads-input",
     "fusion-only: a reduction fused after elementwise ops reduces the untransformed input",
     "pytorch/pytorch#182131 / pytorch/pytorch#182697 (fused reductions used pre-transform "
     "values instead of the producer's result)",
     '        src = temp[red_arg]\n',
     '        src = loads[0]\n',
     "Only when the reduction shares a kernel with its producer: sum(relu(x)) computes "
     "sum(x).  A reduction-only kernel reads its input correctly."),
]


def _doc(old: str, new: str, text: str) -> str:
    return f"{text}\n\n``{old.strip()}`` -> ``{new.strip()}``"


MUTANTS: list[Mutant] = []
for _name, _cls, _cite, _old, _new, _text in MUTANTS_SPEC:
    _patch = _mutant(_name, _old, _new)
    _patch.__doc__ = _doc(_old, _new, _text)
    _patch.__name__ = _name.replace("-", "_")
    MUTANTS.append(Mutant(_name, "fusing", _cls, _cite, _patch))

FUSION_ONLY = ("fused-sub-mul-stale-temp", "fused-reduction-reads-input")

__all__ = ["FUSION_ONLY", "MUTANTS", "MUTANTS_SPEC"]
