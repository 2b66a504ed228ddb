"""Miscompiles of the fusing compiler, each a one-line edit of its source.

Every mutant is the current source of one file with exactly one line replaced (quoted in each
docstring), imported privately and swapped in for the attribute the compiler looks up at call
time (:func:`fuzzkit.mutants.source_edit`: an anchor line that no longer occurs exactly once
raises instead of silently testing the clean compiler).  A bug in the kernel assembly edits
``targets/compiler/fusing/codegen.py`` and swaps ``codegen.compile_group`` (the runtime looks it
up at compile time); a bug in one op's lowering edits that op's template in its record,
``targets/compiler/graphs/ops.py``, and swaps ``ops.OPS`` (codegen looks the record up at each
expression it writes; the copy keeps the original torch functions, so graphs built before the
mutant was applied still compile under it).  They act on the ``fusing``
implementation; ``with target.mutant(name).applied(): ...`` works for any caller (the bisection
benchmark drives the minifier under them).

Two are *fusion-only*: the miscompile appears only when two specific ops share a kernel, so a
prefix bisection that cuts the graph between them makes it disappear.

Six are *reach* mutants: each lives only past a threshold the strategy now aims at
(:mod:`.thresholds`) or at a value it now draws -- a tie between exactly known operands
(``where-gt-as-ge``), NaN reaching a maximum or a clamp (``maximum-drops-nan``,
``clamp-min-drops-nan``), an elementwise group one element past MAX_BLOCK
(``elementwise-grid-floor``), a row one column past it (``long-row-truncated``), a reduction grid
one row past a program (``reduction-store-drops-program-offset``).

Three more act on the ``inductor`` implementation, i.e. on real Inductor, patched in-process
(:data:`INDUCTOR_MUTANTS`, see the comment above them): ``inductor-gt-as-ge`` (aten.gt lowered
as aten.ge), ``inductor-maximum-drops-nan`` (aten.maximum lowered as fmax) and
``inductor-clamp-min-drops-nan`` (aten.clamp_min lowered as a select that turns NaN into the
bound).  They exist to show, end to end, that the oracle judges what is exactly determined: a
tie of exact operands, and the NaN/Inf pattern of special-value cases away from the elements that
may overflow.
"""

from __future__ import annotations

from typing import Any, Callable

from fuzzkit.mutants import Patch, derived, patch, source_edit
from fuzzkit.target import Mutant

#: Where a mutant's line is, and the attribute its edit swaps (each module imported only when a
#: mutant is applied): the kernel assembly, or the op records holding each op's template.
_CODEGEN = ("fuzzkit.targets.compiler.fusing.codegen", "compile_group")
_RECORDS = ("fuzzkit.targets.compiler.graphs.ops", "OPS")


MUTANTS_SPEC: list[tuple[str, str, str, tuple[str, str], str, str, str]] = [
    # name, bug class, citation, (module, attribute), old line, new line, docstring
    ("broadcast-collapsed",
     "wrong broadcast in a fused op: a broadcast operand indexed by the innermost index only",
     "pytorch/pytorch#181695 (torch.where with broadcast shapes reads wrong values for the "
     "broadcast dim under inductor); NVIDIA/Fuser#2762",
     _CODEGEN,
     '    terms = [f"i{d} * s{j}_{d}" for d in range(rank)]\n',
     '    terms = [f"i{d} * s{j}_{d}" for d in range(rank) if not broadcast or d == rank - 1]\n',
     "A leaf whose shape differs from the group's (a broadcast operand) keeps only the "
     "innermost index term: a [R, 1] column read as element 0 for every row."),
    ("reduction-wrong-axis",
     "reduction over the wrong axis (reduction index mapped as if the reduced dim were leading)",
     "pytorch/pytorch#112297 (first-level reduction reused the wrong reduction ranges); "
     "torch-spyre/torch-spyre#867",
     _CODEGEN,
     '    "    flat = rows * N + cols",\n',
     '    "    flat = cols * R + rows",\n',
     "The reduction tile's flat index is column-major: every row sums a strided slice."),
    ("fast-exp",
     "fast approximate exp: exp2 with a truncated log2(e) constant",
     "pytorch/pytorch#161829 (inductor exp codegen precision, fast-math "
     "exp2(x*1.4426950408889634)); triton-lang/triton#5735",
     _RECORDS,
     '              template="tl.exp({a})"),\n',
     '              template="tl.exp2({a} * 1.4427)"),\n',
     "Relative error ~3.4e-6 |x|: ~50 ulp at float32 for |x| ~ 1, invisible at float16/bf16."),
    ("dropped-clamp-max",
     "dropped clamp: the upper bound of clamp ignored",
     "pytorch/pytorch#113641 (compiled double clamp loses one clamp, wrong result)",
     _RECORDS,
     '                  "max": "tl.where({a} > {max}, {max}, {a})",\n',
     '                  "max": "({a})",\n',
     "clamp(x, lo, hi) becomes max(x, lo)."),
    ("fp16-accumulator",
     "wrong accumulation dtype: float16 accumulator in a fused sum",
     "pytorch/pytorch#93708 (inductor float16 sum on CPU accumulated in float16); "
     "pytorch/pytorch#182697",
     _RECORDS,
     '              reduction_body=["acc = tl.sum(tl.where(mask, {src}, 0.0), axis=1)"]),\n',
     '              reduction_body=["acc = tl.sum(tl.where(mask, {src}, 0.0).to(tl.float16), '
     'axis=1).to(tl.float32)"]),\n',
     "Terms are rounded to float16 and summed there; visible at float32 and on long float16 "
     "rows."),
    ("tail-off-by-one",
     "off-by-one tail mask: the last element of an elementwise kernel is never computed",
     "pytorch/pytorch#168939 (inductor combo kernels missing store masks)",
     _CODEGEN,
     '    "    mask = offs < N",\n',
     '    "    mask = offs < N - 1",\n',
     "The last flat element of every fused elementwise group stays 0."),
    ("permute-as-contiguous",
     "wrong stride after a permute: a dense permuted input treated as contiguous",
     "pytorch/pytorch#185515 (stale non-contiguous stride after transpose); "
     "pytorch/pytorch#77600",
     _CODEGEN,
     '    strides = list(torch.broadcast_to(t, tuple(full)).stride())\n',
     '    strides = _dense_strides(t.shape, full) if _is_dense(t) '
     'else list(torch.broadcast_to(t, tuple(full)).stride())\n',
     "The host checks 'dense' where it meant 'contiguous': a permuted/transposed leaf (dense "
     "but not row-major) is read with row-major strides."),
    ("sub-operands-swapped",
     "re-ordered non-commutative op: a - b emitted as b - a",
     "operand-order bugs of commutativity-assuming canonicalization (see also "
     "ROCm/AMDMIGraphX#3679: fused kernel assumes the first argument)",
     _RECORDS,
     '              template="({a} - {b})"),\n',
     '              template="({b} - {a})"),\n',
     "Every fused sub is negated."),
    ("div-operands-swapped",
     "re-ordered non-commutative op: a / b emitted as b / a",
     "operand-order bugs of commutativity-assuming canonicalization (see also "
     "ROCm/AMDMIGraphX#3679)",
     _RECORDS,
     '              template="({a} / {b})"),\n',
     '              template="({b} / {a})"),\n',
     "Every fused div is inverted."),
    ("fused-sub-mul-stale-temp",
     "fusion-only: a mul fused after a sub reads the sub's first operand (stale register)",
     "register/temp reuse bugs in fused codegen, cf. pytorch/pytorch#182697 (fused path "
     "bypassed the materialized value)",
     _CODEGEN,
     '        args = [temp[a] for a in arg_names]\n',
     '        args = [first[a] if op == "mul" and ops_of.get(a) == "sub" else temp[a] '
     'for a in arg_names]\n',
     "Only when a sub and the mul consuming it share a kernel: (a - b) * c computes a * c.  "
     "Split into separate kernels (as prefix bisection does) it disappears."),
    ("fused-reduction-reads-input",
     "fusion-only: a reduction fused after elementwise ops reduces the untransformed input",
     "pytorch/pytorch#182131 / pytorch/pytorch#182697 (fused reductions used pre-transform "
     "values instead of the producer's result)",
     _CODEGEN,
     '        src = temp[red_arg]\n',
     '        src = loads[0]\n',
     "Only when the reduction shares a kernel with its producer: sum(relu(x)) computes "
     "sum(x).  A reduction-only kernel reads its input correctly."),
    # -- reach: each needs a size past a threshold or a value the old strategy never drew ----
    ("where-gt-as-ge",
     "comparison strictness: a > b lowered as a >= b (wrong only on ties)",
     "pytorch/pytorch#113014 (torch.gt differs under torch.compile on CPU, tied values); "
     "pytorch/pytorch#95695 (torch.ge wrong under torch.compile)",
     _RECORDS,
     '              template="tl.where({a} > {b}, {c}, {d})"),\n',
     '              template="tl.where({a} >= {b}, {c}, {d})"),\n',
     "``where(a > b, c, d)`` picks ``c`` where ``a == b``.  Needs an exact tie between the "
     "compared operands (equal inputs, one value compared with itself) and an oracle that "
     "judges exactly known comparisons exactly."),
    ("maximum-drops-nan",
     "NaN propagation: elementwise maximum lowered to Triton's NaN-dropping tl.maximum",
     "pytorch/torchdynamo#1572 ([inductor] maximum op does not respect nans); "
     "pytorch/pytorch#93784, pytorch/pytorch#89612",
     _RECORDS,
     '              template="tl.where({a} != {a}, {a}, tl.where({a} > {b}, {a}, {b}))"),\n',
     '              template="tl.maximum({a}, {b})"),\n',
     "``maximum(NaN, x)`` returns ``x`` (torch: NaN).  Needs NaN reaching a fused maximum."),
    ("clamp-min-drops-nan",
     "NaN propagation: clamp's lower bound as tl.maximum, a NaN input becomes the bound",
     "pytorch/pytorch#93784 (clamp_min doesn't propagate nans under inductor); "
     "tracel-ai/burn#5718; tile-ai/tilelang#3024",
     _RECORDS,
     '                  "min": "tl.where({a} < {min}, {min}, {a})",\n',
     '                  "min": "tl.maximum({a}, {min})",\n',
     "``clamp(NaN, lo, hi)`` returns ``lo`` (torch: NaN).  Needs NaN reaching a clamp with a "
     "lower bound."),
    ("elementwise-grid-floor",
     "launch grid by floor division: the tail block of a long elementwise kernel never runs",
     "pytorch/pytorch#195546 (grid too small: half the elements never written); "
     "triton-lang/triton#7840 (cdiv fix)",
     _CODEGEN,
     '                grid = (triton.cdiv(n, consts["BLOCK"]),)\n',
     '                grid = (max(1, n // consts["BLOCK"]),)\n',
     "Only past MAX_BLOCK elements (4096 under the interpreter) that are not a multiple of it: "
     "the last partial block stays 0."),
    ("long-row-truncated",
     "reduction block capped without a loop: columns past the cap never reduced",
     "pytorch/pytorch#162296 (persistent reduction RBLOCK capped at min(rnumel, 32768)); "
     "pytorch/pytorch#193801 (persistent-reduction block vs emitted R0_BLOCK)",
     _CODEGEN,
     '        block = next_pow2(n)\n',
     '        block = min(MAX_BLOCK, next_pow2(n))\n',
     "Only for rows longer than MAX_BLOCK (4096 under the interpreter): the tile covers the "
     "first MAX_BLOCK columns of each row."),
    ("reduction-store-drops-program-offset",
     "reduction result stored at the tile's row index, not the program's: every program "
     "writes rows 0..ROWS-1",
     "bledden/triton-msl#5 (a 1-D store after a 2-D axis=1 reduce dropped the program "
     "offset)",
     _CODEGEN,
     '    "    tl.store(out_ptr + r1, acc, mask=r1 < R)",\n',
     '    "    tl.store(out_ptr + r1 % ROWS, acc, mask=r1 < R)",\n',
     "Only when a fused reduction needs more than one program (rows x next_pow2(n) past "
     "MAX_BLOCK): later programs overwrite the first rows, the other rows stay 0."),
]


def _doc(old: str, new: str, text: str) -> str:
    return f"{text}\n\n``{old.strip()}`` -> ``{new.strip()}``"


MUTANTS: list[Mutant] = []
for _name, _cls, _cite, (_module, _attribute), _old, _new, _text in MUTANTS_SPEC:
    _patch = source_edit(_module, _old, _new, attribute=_attribute).documented(
        _doc(_old, _new, _text))
    MUTANTS.append(Mutant(_name, "fusing", _cls, _cite, _patch))

FUSION_ONLY = ("fused-sub-mul-stale-temp", "fused-reduction-reads-input")
REACH = ("where-gt-as-ge", "maximum-drops-nan", "clamp-min-drops-nan", "elementwise-grid-floor",
         "long-row-truncated", "reduction-store-drops-program-offset")
#: The fusing compiler's mutants (everything above); :data:`INDUCTOR_MUTANTS` act on Inductor.
FUSING_MUTANTS: list[Mutant] = list(MUTANTS)


# -- real Inductor -----------------------------------------------------------------------------
#
# Inductor's source cannot be copied and edited like the fusing compiler's (its modules import
# each other relatively), so these mutants replace what Inductor looks up at compile time: the
# table of lowerings its graph lowering reads (``torch._inductor.graph.lowerings``, the same dict
# as ``torch._inductor.lowering.lowerings``), swapped for a copy with one entry changed -- the
# copy is made afresh at each application (:func:`fuzzkit.mutants.derived`), the real table is
# never written.  A lowering is backend-agnostic, so each bug shows in the C++ code on CPU and in
# the Triton code on a GPU alike.
#
# Every Inductor mutant also turns off what would let a compile made under the mutant and one
# made without it stand in for each other: Inductor's FX-graph cache and AOTAutograd's cache
# (keyed by graph and config, not by a patched lowering table -- a clean compile found there
# hides the mutant, a mutant compile left there becomes a false finding of the clean compiler
# later in the same process), and the driver's table of compiled graphs
# (:data:`fuzzkit.targets.compiler.inductor.COMPILED`: a fresh, empty one per application).

_INDUCTOR_GRAPH = "torch._inductor.graph"


def _lowerings_with(*swaps: tuple[str, str]) -> Callable[[dict], dict]:
    """A builder of a copy of Inductor's lowering table in which each ``aten.<target>`` overload
    is lowered by ``aten.<source>``'s lowering of the same overload name (``("gt", "ge")``:
    ``gt.Tensor`` by ``ge.Tensor``, ``gt.Scalar`` by ``ge.Scalar``, ...)."""

    def build(table: dict) -> dict:
        import torch

        aten = torch.ops.aten
        copy = dict(table)
        swapped = 0
        for target, source in swaps:
            target_op, source_op = getattr(aten, target), getattr(aten, source)
            if target_op in table and source_op in table:
                copy[target_op] = table[source_op]
            for overload in target_op.overloads():
                t = getattr(target_op, overload)
                s = getattr(source_op, overload, None)
                if t in table and s is not None and s in table:
                    copy[t] = table[s]
                    swapped += 1
        if not swapped:  # a renamed op would silently test the clean compiler
            raise RuntimeError(f"Inductor lowers none of {swaps}: the mutant would be a no-op")
        return copy

    return build


def _maximum_ignoring_nan(table: dict) -> dict:
    """A copy of the lowering table whose ``aten.maximum`` is ``fmax``: ``where(isnan(a), b,
    where(isnan(b), a, maximum(a, b)))``, built from Inductor's own ``isnan``, ``where`` and
    ``maximum`` lowerings (so broadcasting and type promotion stay Inductor's) -- what Triton's
    ``tl.maximum`` (PTX ``max.f32``) and C's ``fmaxf`` compute: a NaN operand is dropped
    whenever the other one is a number."""
    import torch

    aten = torch.ops.aten
    isnan, where, maximum = table[aten.isnan.default], table[aten.where.self], table[
        aten.maximum.default]

    def fmax(a: Any, b: Any) -> Any:
        return where(isnan(a), b, where(isnan(b), a, maximum(a, b)))

    copy = dict(table)
    copy[aten.maximum.default] = fmax
    return copy


def _clamp_min_as_gt_select(table: dict) -> dict:
    """A copy of the lowering table whose ``aten.clamp_min(x, lo)`` (what Inductor's
    decomposition makes of a clamp's lower bound) is ``where(x > lo, x, lo)``, from Inductor's
    own ``gt`` and ``where`` lowerings: ``x > lo`` is false for NaN, so a NaN becomes ``lo``."""
    import torch

    aten = torch.ops.aten
    gt_scalar, gt_tensor, where = table[aten.gt.Scalar], table[aten.gt.Tensor], table[
        aten.where.self]

    def clamp_min(x: Any, lo: Any) -> Any:
        gt = gt_scalar if isinstance(lo, (int, float)) else gt_tensor
        return where(gt(x, lo), x, lo)

    copy = dict(table)
    copy[aten.clamp_min.default] = clamp_min
    return copy


def _fresh_compiled(_original: Any) -> Any:
    from fuzzkit.targets.compiler.inductor import CompiledGraphs

    return CompiledGraphs()


def _inductor_patch(lowerings: Callable[[dict], dict], doc: str) -> Patch:
    """Inductor's lowering table rebuilt by ``lowerings`` at each application, with the caches
    that would mix mutant and clean compiles switched off (see above)."""
    edits = (
        patch(_INDUCTOR_GRAPH, lowerings=derived(lowerings)).edits
        + patch("torch._inductor.config", fx_graph_cache=False).edits
        + patch("torch._functorch.config", enable_autograd_cache=False).edits
        + patch("fuzzkit.targets.compiler.inductor", COMPILED=derived(_fresh_compiled)).edits
    )
    return Patch(edits, doc)


INDUCTOR_SPEC: list[tuple[str, str, str, Callable[[dict], dict], str]] = [
    # name, bug class, citation, lowering-table builder, docstring
    ("inductor-gt-as-ge",
     "comparison strictness: aten.gt lowered as aten.ge (wrong only on ties)",
     "pytorch/pytorch#113014 (torch.gt differs under torch.compile on CPU, tied values); "
     "pytorch/pytorch#95695 (torch.ge wrong under torch.compile)",
     _lowerings_with(("gt", "ge")),
     "Inductor lowers every ``aten.gt`` overload with ``aten.ge``'s lowering: ``where(a > b, c, "
     "d)`` picks ``c`` where ``a == b``.  Caught only where the oracle decides a tie of exactly "
     "known operands exactly (``where_gt`` of a value with itself, of two graph inputs that "
     "share values)."),
    ("inductor-maximum-drops-nan",
     "NaN propagation: elementwise maximum lowered as fmax (a NaN operand dropped)",
     "pytorch/torchdynamo#1572 ([inductor] maximum op does not respect nans: Triton's "
     "tl.maximum); pytorch/pytorch#89612",
     _maximum_ignoring_nan,
     "Inductor lowers ``aten.maximum(a, b)`` as ``fmax``: ``maximum(x, NaN)`` and "
     "``maximum(NaN, x)`` are ``x`` (torch: NaN).  Needs a NaN reaching exactly one operand of "
     "a maximum, in a special-value case whose NaN pattern is still judged there."),
    ("inductor-clamp-min-drops-nan",
     "NaN propagation: clamp's lower bound lowered as a compare-and-select, a NaN becomes the "
     "bound",
     "pytorch/pytorch#93784 (clamp_min doesn't propagate nans under inductor); "
     "tracel-ai/burn#5718",
     _clamp_min_as_gt_select,
     "Inductor lowers ``aten.clamp_min(x, lo)`` as ``where(x > lo, x, lo)``: ``clamp(NaN, lo, "
     "hi)`` is ``lo`` (torch: NaN).  Needs a NaN reaching a clamp with a finite lower bound."),
]

INDUCTOR_MUTANTS: list[Mutant] = [
    Mutant(name, "inductor", cls, cite, _inductor_patch(build, text))
    for name, cls, cite, build, text in INDUCTOR_SPEC
]
MUTANTS += INDUCTOR_MUTANTS

__all__ = ["FUSING_MUTANTS", "FUSION_ONLY", "INDUCTOR_MUTANTS", "INDUCTOR_SPEC", "MUTANTS",
           "MUTANTS_SPEC", "REACH"]
