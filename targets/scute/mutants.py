"""Realistic bugs in multi-adapter serving, each a patch of one module attribute of the ``torch``
implementation (:mod:`.torch_impl`) or of the shared slot conversion (:mod:`.slots`; the float64
reference in :mod:`.reference` is never touched).

``tests/test_scute_mutants.py`` shows each one caught on a fixed case with the method and slot
named; ``fuzzkit mutants scute`` finds them from scratch.  The Triton kernel's own mutants live
in :mod:`fuzzkit.targets.scute.kernel_mutants` (wired in below as ``kernel-*`` when importable).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fuzzkit.mutants import derived, device_mutants, patch
from fuzzkit.target import Mutant
from fuzzkit.targets.scute import reference, slots

_LORA_SCALE = slots.lora_scale
_DORA_SLOT = slots.dora_slot
_VERA_SLOT = slots.vera_slot
_IA3_SLOT = slots.ia3_slot
_BOFT_SLOT = slots.boft_slot
_BLOCK_ROTATIONS = slots.block_rotations


def _gather_sorted(token_slot: np.ndarray) -> np.ndarray:
    """Tokens read the slot at their position in the adapter-SORTED order while the rows stay in
    request order (sort indices computed, permutation not applied to the rows)."""
    return np.sort(token_slot, kind="stable")


def _no_base_mask(token_slot: np.ndarray) -> np.ndarray:
    """-1 tokens not skipped: they go through the gather, where index -1 reads the LAST slot."""
    return np.zeros(token_slot.shape, bool)


def _dora_bias_scaled(adapter: Any, w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    """DoRA's magnitude/norm scale applied to the whole base output, bias included."""
    out = _DORA_SLOT(adapter, w0, b0)
    out["b"] = out["s"] * b0
    return out


def _column_norms(w: np.ndarray) -> np.ndarray:
    """Weight norm over the output axis (per input column), as with a transposed
    (fan_in_fan_out / Conv1D) weight, read back as a flat buffer of Nout values."""
    return np.resize(np.sqrt(np.sum(w * w, axis=0)), w.shape[0])


def _float32_norms(w: np.ndarray) -> np.ndarray:
    """DoRA's weight norm computed in float32, the plain way (``sqrt(sum(w*w))``, no scaling):
    squares of |w| > 1.8e19 overflow to inf (g = 0: the base path vanishes) and squares below
    ~1e-23 underflow (g blows up) -- exact to float32 rounding for every ordinary row."""
    w32 = np.asarray(w, np.float32)
    with np.errstate(over="ignore", under="ignore"):
        return np.sqrt(np.sum(w32 * w32, axis=1, dtype=np.float32)).astype(np.float64)


def _alpha_twice(adapter: Any) -> float:
    """alpha/r already folded into B at load time and applied again by the layer."""
    return _LORA_SCALE(adapter) ** 2


def _rslora_ignored(adapter: Any) -> float:
    return _LORA_SCALE({**dict(adapter), "rslora": False})


def _rotation_transposed(q: np.ndarray, cayley: str, terms: int) -> np.ndarray:
    """R_i used as R_iᵀ: rotating x·Rᵀ (the weight-side W·R convention) instead of x·R."""
    return np.swapaxes(_BLOCK_ROTATIONS(q, cayley, terms), -1, -2)


def _cayley_confused(q: np.ndarray, cayley: str, terms: int) -> np.ndarray:
    """The exact Cayley asked for, the Neumann series computed, and vice versa."""
    if cayley == "exact":
        return reference.cayley_neumann(q, terms)
    return reference.cayley_exact(q)


def _ia3_bias_unscaled(adapter: Any, w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    """IA3 k/v scale applied to x·W0ᵀ before the bias is added (bias left unscaled)."""
    out = _IA3_SLOT(adapter, w0, b0)
    out["b"] = np.asarray(b0, np.float64).copy()
    return out


def _ia3_placement_swapped(adapter: Any, w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    """IA3's feed-forward flag read inverted: k/v vectors scale the input, feed-forward vectors
    the output.  On square layers (q/k/v/o projections) the shapes fit and the result is just
    wrong; elsewhere it fails on the shape, as a loader would."""
    flipped = {"kv": "ff", "ff": "kv"}[adapter["placement"]]
    return _IA3_SLOT({**dict(adapter), "placement": flipped}, w0, b0)


def _vera_lambda_after_expand(adapter: Any, w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    """VeRA's per-rank lambda_d applied after the expand (as a scalar, its mean), where a
    per-output scale would go, instead of between shrink and expand."""
    out = _VERA_SLOT(adapter, w0, b0)
    out["o"] = out["o"] * float(np.mean(out["m"]))
    out["m"] = np.ones_like(out["m"])
    return out


def _vera_slice_from_end(adapter: Any, w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    """Shared VeRA matrices sliced from the wrong end (last K columns / Nout rows)."""
    nout, k = np.asarray(w0).shape
    a = np.asarray(adapter["A_shared"])
    b = np.asarray(adapter["B_shared"])
    return _VERA_SLOT({**dict(adapter), "A_shared": a[:, a.shape[1] - k:],
                       "B_shared": b[b.shape[0] - nout:, :]}, w0, b0)


def _boft_scale_on_bias(adapter: Any, w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    """BOFT's output scale boft_s applied after the bias add (bias scaled too)."""
    out = _BOFT_SLOT(adapter, w0, b0)
    out["b"] = out["s"] * np.asarray(b0, np.float64)
    return out


def _butterfly_perm_transposed(q_i: np.ndarray, k: int, index: int, factors: int, cayley: str,
                               terms: int) -> np.ndarray:
    """Butterfly factor built as Pᵀ·BD·P instead of P·BD·Pᵀ (permutation inverted)."""
    nb, bs, _ = q_i.shape
    bd = reference.block_diag(slots.block_rotations(q_i, cayley, terms))
    p = reference.perm_matrix(reference.butterfly_perm(k, nb // 2 ** index, bs // 2,
                                                       factors - 1))
    return p.T @ bd @ p


#: Patched by name: imported only when the mutant is applied (torch is optional).
_TORCH_IMPL = "fuzzkit.targets.scute.torch_impl"


def _float16(_original: Any) -> Any:
    import torch

    return torch.float16


MUTANTS: tuple[Mutant, ...] = (
    Mutant("gather-sorted-position", "torch",
           "wrong adapter gather: a token reads the slot at its position in the adapter-sorted "
           "order, its row is not permuted",
           "Punica/vLLM sgmv/bgmv: token_lora_indices vs sorted segment metadata mix-ups "
           "(vLLM LoRA 'wrong adapter applied in mixed batches' reports)",
           patch(_TORCH_IMPL, gather_index=_gather_sorted)),
    Mutant("minus-one-not-skipped", "torch",
           "-1 (no adapter) tokens not skipped: index -1 wraps to the last adapter",
           "vLLM LoRA: lora index -1 for base-model requests; a plain tensor gather with -1 "
           "silently reads the last slot",
           patch(_TORCH_IMPL, base_mask=_no_base_mask)),
    Mutant("dora-bias-scaled", "torch",
           "DoRA magnitude scale applied to the bias",
           "PEFT DoRA (lora/dora.py): the bias must stay outside magnitude/||W'|| "
           "(DoRA paper, Liu et al. 2024)",
           patch(slots, dora_slot=_dora_bias_scaled)),
    Mutant("dora-norm-wrong-axis", "torch",
           "DoRA weight norm over the wrong axis",
           "PEFT DoRA get_weight_norm with fan_in_fan_out / transposed weights: the norm must "
           "run over the input features of each output row",
           patch(slots, row_norms=_column_norms)),
    Mutant("dora-norm-float32", "torch",
           "DoRA weight norm ||W0 + sBA||_row computed in float32 without scaling: squares "
           "overflow for huge rows and underflow for tiny ones",
           "huggingface/peft#2049 and #3237 (DoRA inf/NaN from zero or near-zero weight rows, "
           "fp32 upcast of get_weight_norm); torch.linalg.norm sums plain squares",
           patch(slots, row_norms=_float32_norms)),
    Mutant("alpha-applied-twice", "torch",
           "LoRA scaling alpha/r applied twice",
           "vLLM folds the LoRA scaling into B at load time; a layer that multiplies by "
           "alpha/r again double-scales",
           patch(slots, lora_scale=_alpha_twice)),
    Mutant("rslora-ignored", "torch",
           "rsLoRA's alpha/sqrt(r) replaced by alpha/r",
           "PEFT use_rslora (Kalajdzievski 2023): loaders that ignore the flag mis-scale",
           patch(slots, lora_scale=_rslora_ignored)),
    Mutant("rotation-transposed", "torch",
           "OFT/BOFT block rotation transposed (x·Rᵀ instead of x·R)",
           "PEFT OFT rotates the input x·R (W' = W·Rᵀ); merging code and kernels that use the "
           "weight-side convention transpose it",
           patch(slots, block_rotations=_rotation_transposed)),
    Mutant("cayley-variant-confused", "torch",
           "exact Cayley and the Cayley-Neumann series confused",
           "PEFT OFT use_cayley_neumann (default True) approximates (I+Q)(I-Q)^-1, the "
           "transpose of the exact (I-Q)(I+Q)^-1 branch",
           patch(slots, block_rotations=_cayley_confused)),
    Mutant("ia3-kv-bias-unscaled", "torch",
           "IA3 k/v scale applied before the bias add (bias not scaled)",
           "PEFT IA3 (ia3/layer.py): non-feed-forward layers scale the whole base output, "
           "bias included (Liu et al. 2022)",
           patch(slots, ia3_slot=_ia3_bias_unscaled)),
    Mutant("ia3-placement-swapped", "torch",
           "IA3 on the wrong side: k/v scale applied to the input, feed-forward scale to the "
           "output",
           "PEFT IA3 is_feedforward: feed-forward layers scale the input x*l, k/v layers the "
           "output (Liu et al. 2022); a loader that inverts the target-module match swaps them",
           patch(slots, ia3_slot=_ia3_placement_swapped)),
    Mutant("vera-lambda-after-expand", "torch",
           "per-rank scale m applied after expand (lambda_d folded wrongly)",
           "VeRA (Kopiczko et al. 2024): lambda_d scales the shrink result; Punica-style "
           "expand epilogues only have a per-output scale",
           patch(slots, vera_slot=_vera_lambda_after_expand)),
    Mutant("vera-slice-from-end", "torch",
           "shared VeRA matrices sliced from the wrong end",
           "PEFT VeRA slices vera_A[:, :in_features] and vera_B[:out_features, :] of the "
           "largest layer's shared matrices",
           patch(slots, vera_slot=_vera_slice_from_end)),
    Mutant("boft-scale-on-bias", "torch",
           "BOFT output scale applied to the bias",
           "PEFT BOFT forward subtracts the bias, scales by boft_s, re-adds the bias",
           patch(slots, boft_slot=_boft_scale_on_bias)),
    Mutant("butterfly-perm-inverted", "torch",
           "butterfly permutation inverted (Pᵀ·BD·P)",
           "BOFT (Liu et al. 2024) / PEFT boft_P: factors are P·BD·Pᵀ",
           patch(slots, butterfly_factor=_butterfly_perm_transposed)),
    Mutant("fp16-shrink-buffer", "torch",
           "shrink buffer x·Aᵀ kept in float16 instead of float32",
           "Punica/vLLM LoRA kernels keep the intermediate buffer in float32; a half buffer "
           "loses precision (and overflows) for float32/bf16 models",
           patch(_TORCH_IMPL, SHRINK_DTYPE=derived(_float16))),
)

#: The Triton kernel's mutants, on the ``triton`` implementation.
DEVICE_MUTANTS: list[Mutant] = device_mutants("fuzzkit.targets.scute.kernel_mutants")
