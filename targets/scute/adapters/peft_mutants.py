"""Planted bugs in PEFT's own code (``peft`` implementation of ``scute``), each a patch of one
PEFT class attribute, modelled on a bug class PEFT (or a library copying its conventions) really
shipped.  Owners are named ``"module:Class"`` so that declaring them imports no PEFT; applying
one imports it.  ``tests/test_scute_peft_impl.py`` shows each caught from scratch.
"""

from __future__ import annotations

from typing import Any, Callable

from fuzzkit.mutants import derived, patch
from fuzzkit.target import Mutant

_LORA = "peft.tuners.lora.layer:LoraLayer"
_DORA = "peft.tuners.lora.dora:DoraLinearLayer"
_IA3 = "peft.tuners.ia3.layer:Linear"
_OFT = "peft.tuners.oft.layer:OFTRotationModule"


def _rslora_ignored(original: Callable[..., Any]) -> Callable[..., Any]:
    """``update_layer`` that sets ``scaling = alpha / r`` whatever ``use_rslora`` says."""

    def update_layer(self: Any, adapter_name: str, r: int, lora_alpha: float, config: Any,
                     **kwargs: Any) -> None:
        original(self, adapter_name, r, lora_alpha, config, **kwargs)
        self.scaling[adapter_name] = lora_alpha / r

    return update_layer


def _norm_of_base(self: Any, weight: Any, lora_weight: Any, scaling: Any,
                  adapter_name: Any = None) -> Any:
    """DoRA's row norm of the base weight ``‖W0‖`` instead of ``‖W0 + scale·B·A‖``."""
    import torch

    weight = weight.T if self.fan_in_fan_out else weight
    return torch.linalg.norm(weight, dim=1).to(weight.dtype)


def _ia3_bias_unscaled(original: Callable[..., Any]) -> Callable[..., Any]:
    """IA3 ``Linear.forward`` whose k/v (non-feed-forward) scale misses the bias."""

    def forward(self: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, x, *args, **kwargs)
        bias = self.base_layer.bias
        if self.is_feedforward or bias is None or self.disable_adapters or self.merged:
            return result
        scale = 1
        for name in self.active_adapters:
            if name in self.ia3_l.keys():
                scale = scale * self.ia3_l[name].flatten()
        return result - bias * scale + bias

    return forward


def _neumann_short(original: Callable[..., Any]) -> Callable[..., Any]:
    """``_cayley_batch`` whose Cayley-Neumann series stops one term early."""

    def cayley_batch(self: Any, q: Any, block_size: int, use_cayley_neumann: bool = True,
                     num_neumann_terms: int = 5) -> Any:
        terms = max(1, num_neumann_terms - 1) if use_cayley_neumann else num_neumann_terms
        return original(self, q, block_size, use_cayley_neumann, terms)

    return cayley_batch


MUTANTS: tuple[Mutant, ...] = (
    Mutant("peft-rslora-scale-ignored", "peft",
           "rsLoRA scaling alpha/r instead of alpha/sqrt(r)",
           "huggingface/peft#2733 (LoraLayer.set_scale ignored use_rslora) and #3449 "
           "(add_weighted_adapter lost the rsLoRA scaling); NVIDIA/TensorRT-LLM#1668",
           patch(_LORA, update_layer=derived(_rslora_ignored))),
    Mutant("peft-dora-norm-of-base", "peft",
           "DoRA normalises by the base weight's norm ‖W0‖, not ‖W0 + scale·B·A‖",
           "Comfy-Org/ComfyUI#15458 (output-axis DoRA normalised with the base weight); "
           "huggingface/peft#2348 (which axis and which weight DoRA's norm uses)",
           patch(_DORA, get_weight_norm=_norm_of_base)),
    Mutant("peft-ia3-kv-bias-unscaled", "peft",
           "IA3 k/v scale applied before the bias add (bias not scaled)",
           "huggingface/peft#972 (IA3 with is_feedforward=False ignored the bias when merging) "
           "and #3216 (IA3 ConvNd unmerge mis-scaled the bias)",
           patch(_IA3, forward=derived(_ia3_bias_unscaled))),
    Mutant("peft-oft-neumann-short", "peft",
           "Cayley-Neumann series truncated one term early (loop bound off by one)",
           "huggingface/peft#2575 (OFT's Cayley-Neumann series, loop range(3, n - 1) with the "
           "last power added outside it)",
           patch(_OFT, _cayley_batch=derived(_neumann_short))),
)
