"""An in-project fusing compiler for the compiler target's graphs (fx GraphModules over
:mod:`fuzzkit.targets.compiler.graphs.ops`).

:mod:`.partition` groups elementwise chains (optionally ending in a last-dim reduction),
:mod:`.codegen` writes one Triton kernel per group, :mod:`.runtime` runs the rest eagerly.
``compile_fx(gm, example_inputs)`` returns a callable ``(*tensors) -> tuple[Tensor]``.
"""

from __future__ import annotations

from typing import Any, Sequence

from fuzzkit import triton_support

triton_support.prepare()


def compile_fx(gm: Any, example_inputs: Sequence[Any]) -> Any:
    from fuzzkit.targets.compiler.fusing import runtime

    return runtime.compile_fx(gm, example_inputs)


__all__ = ["compile_fx"]
