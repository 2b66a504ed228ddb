"""Planted bugs in vLLM's own Punica LoRA code (``vllm-punica`` implementation of ``scute``),
each modelled on a bug class vLLM really shipped or had reported.

Two kinds of patch.  Host-side ones wrap a method of the loaded module (``LoRAKernelMeta``).
The others are one-line source edits of a pinned vLLM module (the ``(old, new)`` lines below): the
edited copy is imported privately (:func:`fuzzkit.mutants.source_variant`, with this adapter's
import shims active) and its function installed on the module the launch path looks it up in at
call time -- the ``lora_shrink`` and ``_get_lora_b_ptr`` the adapter and ``_lora_expand`` call
(a replaced op brings its own fresh kernel ``JITFunction``; a patched helper kernel would not do:
natively Triton keys its compiled binaries on the kernel's dependencies as first seen, so it
would silently run the clean binary).  No mutant reads out of bounds: under the interpreter a
wild pointer is a segmentation fault of the whole campaign, natively a poisoned CUDA context.
An edit whose anchor no longer occurs exactly once raises ``RuntimeError`` instead of testing the
clean code.  Owners are named through :mod:`.vllm_punica`'s module attributes, so declaring the
mutants imports no vLLM.  ``tests/test_scute_vllm_punica.py`` shows each caught on a mixed
batch, and fuzzing from scratch (``fuzzkit mutants scute --only NAME`` for all four).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from fuzzkit.mutants import derived, patch, source_variant
from fuzzkit.target import Mutant

_ADAPTER = "fuzzkit.targets.scute.adapters.vllm_punica"
_META = f"{_ADAPTER}:meta_module.LoRAKernelMeta"


def _edited(module_attr: str, attribute: str, *lines: tuple[str, str]) -> Callable[[Any], Any]:
    """A :class:`derived` factory: ``attribute`` of a copy of the loaded vLLM module
    ``module_attr`` (``shrink_op`` / ``expand_op`` / ``utils_module`` of the adapter) with
    ``lines`` applied, imported under the adapter's shims."""

    def build(original: Any) -> Any:
        from fuzzkit.targets.scute.adapters import vllm_punica

        module = getattr(vllm_punica, module_attr)
        with vllm_punica.engine_imports():
            variant = source_variant(sys.modules[module.__name__], tuple(lines))
        return getattr(variant, attribute)

    return build


def _no_lora_as_slot_zero(original: Callable[..., Any]) -> Callable[..., Any]:
    """``prepare_tensors`` that clamps the token mapping at 0: a ``-1`` (no LoRA) token is
    batched with LoRA slot 0."""

    def prepare_tensors(self: Any, token_lora_mapping: Any) -> None:
        original(self, token_lora_mapping.clamp(min=0))

    return prepare_tensors


def _ids_out_of_order(original: Callable[..., Any]) -> Callable[..., Any]:
    """``prepare_tensors`` whose active-LoRA id list is reversed after the segments (counts and
    start locations) were laid out in sorted order -- every segment stays in bounds, only the
    id it is served with is wrong."""

    def prepare_tensors(self: Any, token_lora_mapping: Any) -> None:
        original(self, token_lora_mapping)
        active = int(token_lora_mapping.unique().numel())
        if not bool(self.no_lora_flag_cpu[0]) and active > 1:
            self.active_lora_ids[:active] = self.active_lora_ids[:active].flip(0).clone()

    return prepare_tensors


MUTANTS: tuple[Mutant, ...] = (
    Mutant("vllm-punica-no-lora-as-slot-0", "vllm-punica",
           "no-LoRA tokens (-1) not skipped: the metadata clamps them into LoRA slot 0",
           "vllm-project/vllm#42008 (base-model requests got LoRA deltas from stale LoRA token "
           "ids); NVIDIA/TensorRT-LLM#2096 (garbage for base requests batched with LoRA ones)",
           patch(_META, prepare_tensors=derived(_no_lora_as_slot_zero))),
    Mutant("vllm-punica-expand-slice-offset", "vllm-punica",
           "multi-slice expand: each slice's output offset one column short of the previous "
           "slices' width (`slice_offset += size(1) - 1` in _get_lora_b_ptr)",
           "vllm-project/vllm#50820 (_get_lora_b_ptr's cached slice offsets ignored "
           "offset_start: later expands wrote into the first call's columns) and #42718 "
           "(fused-MoE W13 expand used the wrong slice offset)",
           patch(f"{_ADAPTER}:expand_op", _get_lora_b_ptr=derived(_edited(
               "utils_module", "_get_lora_b_ptr",
               ("        slice_offset += lora_b_weight.size(1)\n",
                "        slice_offset += lora_b_weight.size(1) - 1\n"))))),
    Mutant("vllm-punica-shrink-scaling-dropped", "vllm-punica",
           "the LoRA scale never reaches the shrink kernel (launched with scaling 1.0)",
           "vllm-project/vllm#10798 and #6909 (rsLoRA's alpha/sqrt(r) not applied: outputs "
           "differ from PEFT) and #55545 (rsLoRA scaling ignored for MoE expert adapters)",
           patch(f"{_ADAPTER}:shrink_op", lora_shrink=derived(_edited(
               "shrink_op", "lora_shrink",
               ("        lora_ids,\n        scaling,\n        inputs.stride(0),\n",
                "        lora_ids,\n        1.0,\n        inputs.stride(0),\n"))))),
    Mutant("vllm-punica-lora-ids-out-of-order", "vllm-punica",
           "the active-LoRA id list out of step with the token segments (ids in another order "
           "than token_indices_sorted_by_lora_ids): each LoRA serves another LoRA's tokens",
           "vllm-project/vllm#15979 (Punica kernels processed LoRAs in an order that did not "
           "match the sorted token segments, so a LoRA's weights met another LoRA's tokens; "
           "fixed by #16040)",
           patch(_META, prepare_tensors=derived(_ids_out_of_order))),
)
