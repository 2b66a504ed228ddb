"""Triton source for one fused group, written to a content-hashed file and imported.

A group (see :mod:`.partition`) is an expression tree of elementwise ops over its *leaves* (the
tensors it reads), optionally ending in one last-dim reduction.  The generated kernel

* walks the flattened index of the group's full (broadcast) shape, unravels it into one index
  per dimension with the shape baked in as constants, and loads every leaf at
  ``sum_d i_d * stride_d`` where the strides are those of the leaf *broadcast to the full shape*,
  computed on the host at launch time: a broadcast dimension has stride 0 and a permuted
  (non-contiguous) leaf keeps its real strides, so neither needs a copy;
* evaluates the expression tree in float32 registers (one temp per node, its expression the
  op's template from its record in :mod:`fuzzkit.targets.compiler.graphs.ops`);
* stores float32 (the host rounds to the case dtype with torch, which rounds to nearest even --
  the Triton interpreter truncates float32 -> bfloat16 casts);
* for a reduction group: a tile of ``ROWS`` rows x ``BLOCK = next_pow2(n)`` columns per program,
  masked columns set to the reduction's identity, a float32 accumulator, ``mean`` divided by n
  (the record's ``reduction_body``).

Under the interpreter every program costs milliseconds, so elementwise blocks cover up to 4096
elements and reduction tiles up to 4096 cells: most groups are one program.

This module holds only the kernel assembly, none of the ops' own text: an op's lowering is its
record's, looked up as ``ops.OPS[op]`` each time an expression is written.  The assembly lines are
module constants on purpose: :mod:`fuzzkit.targets.compiler.mutants` makes each miscompile by replacing
exactly one line of a file (:func:`fuzzkit.mutants.source_edit`) -- of this one for the assembly,
swapping :func:`compile_group` (looked up by the runtime at call time), or of the records' file
for an op's template, swapping ``ops.OPS`` (looked up here at call time).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from fuzzkit import triton_support
from fuzzkit.targets.compiler.graphs import ops

triton_support.prepare()

HEADER = [
    "import triton",
    "import triton.language as tl",
    "",
    "",
    "@triton.jit",
]

ELEMENTWISE_PROLOGUE = [
    "    pid = tl.program_id(0)",
    "    offs = pid * BLOCK + tl.arange(0, BLOCK)",
    "    mask = offs < N",
    "    flat = offs",
]

ELEMENTWISE_EPILOGUE = [
    "    tl.store(out_ptr + offs, {result}, mask=mask)",
]

REDUCTION_PROLOGUE = [
    "    pid = tl.program_id(0)",
    "    r1 = pid * ROWS + tl.arange(0, ROWS)",
    "    rows = r1[:, None]",
    "    cols = tl.arange(0, BLOCK)[None, :]",
    "    cmask = cols < N",
    "    mask = (rows < R) & cmask",
    "    flat = rows * N + cols",
]

REDUCTION_EPILOGUE = [
    "    tl.store(out_ptr + r1, acc, mask=r1 < R)",
]

#: Cells per program: elementwise block and reduction tile (rows x next_pow2(n)).
MAX_BLOCK = 4096 if triton_support.interpreted() else 1024


@dataclasses.dataclass
class GroupSpec:
    """What codegen needs to know about a group (built by :mod:`.partition`).

    ``nodes``: (name, op, arg names, attrs) in topological order, the last one the group's
    result; ``leaves``: names of the tensors read (graph inputs or values made outside);
    ``leaf_shapes``: their shapes; ``shape``: the full (broadcast) shape of the elementwise part
    -- for a reduction group, the shape of the reduced tensor; ``reduction``: None or the last
    node's op (a last-dim sum/mean/amax/amin).
    """

    nodes: list[tuple[str, str, list[str], dict[str, Any]]]
    leaves: list[str]
    leaf_shapes: list[tuple[int, ...]]
    shape: tuple[int, ...]
    reduction: Optional[str] = None


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _dense_strides(shape: Sequence[int], full: Sequence[int]) -> list[int]:  # pragma: no cover - called only by the permute-as-contiguous mutant
    """Strides of a contiguous tensor of ``shape`` right-aligned in ``full``; broadcast dims 0."""
    strides, step = [], 1
    shape = [1] * (len(full) - len(shape)) + list(shape)
    for size, target in zip(reversed(shape), reversed(list(full))):
        strides.append(step if size == target and size != 1 else 0)
        step *= size
    return list(reversed(strides))


def _is_dense(t: Any) -> bool:  # pragma: no cover - called only by the permute-as-contiguous mutant
    """Whether ``t`` covers its storage span exactly (contiguous in *some* dimension order)."""
    expected = 1
    for d in sorted(range(t.dim()), key=t.stride):
        if t.shape[d] == 1:
            continue
        if t.stride(d) != expected:
            return False
        expected *= t.shape[d]
    return True


def _leaf_strides(t: Any, full: Sequence[int]) -> list[int]:
    """Element strides of leaf ``t`` viewed at the group's full shape (broadcast dims 0)."""
    import torch

    strides = list(torch.broadcast_to(t, tuple(full)).stride())
    return strides


def _offset(j: int, rank: int, broadcast: bool) -> str:
    """The load offset of leaf ``j`` from the per-dimension indices ``i0..i{rank-1}``."""
    terms = [f"i{d} * s{j}_{d}" for d in range(rank)]
    return " + ".join(terms) if terms else "flat * 0"


def _expr(op: str, args: list[str], attrs: dict[str, Any]) -> str:
    """The float32 expression of elementwise ``op`` on operand temps ``args``, from the op's
    record (KeyError: the record has no lowering for these attrs)."""
    spec = ops.OPS[op]
    fields = dict(zip("abcd", args))
    fields.update({k: _literal(v) for k, v in attrs.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if spec.builder is not None:
        return spec.builder(spec.cases, fields, attrs)
    if spec.template is None:
        raise KeyError(f"{op} has no fusing template")
    return spec.template.format(**fields)


def _literal(value: Any) -> str:
    value = float(value)
    if math.isinf(value):
        return "float('inf')" if value > 0 else "float('-inf')"
    return repr(value)


def supported(op: str, attrs: dict[str, Any]) -> bool:
    """Whether the elementwise op (with these attrs) has a template: its expression builds."""
    try:
        _expr(op, ["a", "b", "c", "d"], attrs)
    except (KeyError, TypeError, ValueError, IndexError):
        return False
    return True


def kernel_source(spec: GroupSpec, name: str = "fused_kernel") -> tuple[str, dict[str, int]]:
    """The Triton source of ``spec`` and its launch constants (BLOCK, ROWS)."""
    full = tuple(int(s) for s in spec.shape)
    rank = len(full)
    params = ["out_ptr"] + [f"in{j}" for j in range(len(spec.leaves))]
    for j in range(len(spec.leaves)):
        params += [f"s{j}_{d}" for d in range(rank)]
    lines = list(HEADER)
    if spec.reduction is None:
        n = max(1, math.prod(full))
        block = min(MAX_BLOCK, next_pow2(n))
        consts = {"BLOCK": block, "ROWS": 1}
        lines.append(f"def {name}({', '.join(params + ['N', 'BLOCK: tl.constexpr'])}):")
        lines += ELEMENTWISE_PROLOGUE
    else:
        n = full[-1] if rank else 1
        block = next_pow2(n)
        rows = max(1, math.prod(full[:-1]) if rank else 1)
        consts = {"BLOCK": block, "ROWS": max(1, min(next_pow2(rows), MAX_BLOCK // block))}
        params += ["N", "R", "BLOCK: tl.constexpr", "ROWS: tl.constexpr"]
        lines.append(f"def {name}({', '.join(params)}):")
        lines += REDUCTION_PROLOGUE
    # unravel the flat index (row-major over the full shape)
    for d in range(rank - 1, -1, -1):
        if d == 0:
            lines.append(f"    i{d} = flat")
        else:
            lines.append(f"    i{d} = flat % {full[d]}")
            lines.append(f"    flat = flat // {full[d]}")
    temp: dict[str, str] = {}
    loads: list[str] = []
    for j, (leaf, shape) in enumerate(zip(spec.leaves, spec.leaf_shapes)):
        broadcast = tuple(int(s) for s in shape) != full
        offset = _offset(j, rank, broadcast)
        lines.append(f"    x{j} = tl.load(in{j} + {offset}, mask=mask, other=0.0).to(tl.float32)")
        temp[leaf] = f"x{j}"
        loads.append(f"x{j}")
    ops_of: dict[str, str] = {}
    first: dict[str, str] = {}
    elementwise = spec.nodes[:-1] if spec.reduction is not None else spec.nodes
    for k, (node, op, arg_names, attrs) in enumerate(elementwise):
        args = [temp[a] for a in arg_names]
        lines.append(f"    t{k} = {_expr(op, args, attrs)}")
        temp[node] = f"t{k}"
        ops_of[node] = op
        first[node] = args[0]
    if spec.reduction is None:
        result = temp[spec.nodes[-1][0]]
        lines += [line.format(result=result) for line in ELEMENTWISE_EPILOGUE]
    else:
        red_arg = spec.nodes[-1][2][0]
        src = temp[red_arg]
        body = ops.OPS[spec.reduction].reduction_body
        lines += ["    " + line.format(src=src) for line in body]
        lines += REDUCTION_EPILOGUE
    return "\n".join(lines) + "\n", consts


# --------------------------------------------------------------------------------------------
# source files and imports

_MODULES: dict[str, Any] = {}
_CACHE: list[Path] = []


def cache_dir() -> Path:
    """Where generated kernels live: ``$FUZZKIT_FUSING_CACHE`` or a per-process temp dir."""
    if not _CACHE:
        root = os.environ.get("FUZZKIT_FUSING_CACHE")
        path = Path(root) if root else Path(tempfile.gettempdir()) / f"fuzzkit_fusing_{os.getpid()}"
        path.mkdir(parents=True, exist_ok=True)
        _CACHE.append(path)
    return _CACHE[0]


def load_kernel(source: str, name: str = "fused_kernel") -> Any:
    """Write ``source`` to ``<cache>/fk_<sha>.py`` (once) and return its ``name`` function."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    module_name = f"fk_{digest}"
    if module_name not in _MODULES:
        _MODULES[module_name] = triton_support.import_source(module_name, source, cache_dir())
    return getattr(_MODULES[module_name], name)


def compile_group(spec: GroupSpec) -> Callable[..., Any]:
    """A launcher ``(*leaf_tensors) -> float32 tensor`` (the group's result shape, flattened
    for reductions: ``prod(shape[:-1])`` values) for ``spec``; the source is on ``.source``."""
    import numpy as np
    import torch
    import triton

    source, consts = kernel_source(spec)
    kernel = load_kernel(source)
    full = tuple(int(s) for s in spec.shape)
    rank = len(full)

    def launch(*leaves: Any) -> Any:
        device = leaves[0].device if leaves else torch.device(triton_support.device())
        args: list[Any] = []
        for t in leaves:
            args += _leaf_strides(t, full) if rank else []
        # masked-off lanes compute on the ``other`` value (log(0), 1/0): harmless, but the
        # interpreter's NumPy would warn about them
        with np.errstate(all="ignore"):
            if spec.reduction is None:
                n = max(1, math.prod(full))
                out = torch.zeros(n, dtype=torch.float32, device=device)
                grid = (triton.cdiv(n, consts["BLOCK"]),)
                kernel[grid](out, *leaves, *args, n, BLOCK=consts["BLOCK"])
                return out.reshape(full)
            n = full[-1] if rank else 1
            rows = max(1, math.prod(full[:-1]) if rank else 1)
            out = torch.zeros(rows, dtype=torch.float32, device=device)
            grid = (triton.cdiv(rows, consts["ROWS"]),)
            kernel[grid](out, *leaves, *args, n, rows, BLOCK=consts["BLOCK"],
                         ROWS=consts["ROWS"])
            return out

    launch.source = source  # type: ignore[attr-defined]
    return launch
