"""Target ``scute``: exact-mix adapter kernels -- one batched linear layer serving tokens whose
adapters are of different methods -- against a float64 per-token reference.

The model (read literally by :mod:`.reference`; slot form in :mod:`.slots`)
--------------------------------------------------------------------------
A base linear layer ``W0`` (Nout, K), bias ``b0``; tokens ``x`` (Ntok, K), each carrying an
adapter slot index (``token_adapter``, -1 = base layer only; tokens unsorted; ``mode`` "decode"
= one token per request, "prefill" = runs of one slot).  Every slot holds one adapter of a
method: LoRA (rsLoRA option), DoRA, VeRA (shared, sliced A/B), OFT (block-diagonal Cayley
rotation of the input, exact or PEFT's Neumann series), BOFT (butterfly product of permuted
block-diagonal rotations, output scale), IA3 (k/v: output scale incl. bias; feed-forward: input
scale), or identity.  The reference computes each method in its native PEFT form, in float64,
one token at a time.  Implementations compute the unified slot form

``y = ((x·T)·W0ᵀ) ⊙ s + b + (((x·Aᵀ) ⊙ m)·Bᵀ) ⊙ o``

with x, W0, T, A, B in the storage dtype (``dtype``: float32 / float16 / bfloat16) and float32
accumulation.  Outputs: ``y`` float32 (Ntok, Nout) and ``bitwise_batch_invariant``.

Oracle (:mod:`.checks`): per element within a forward-error bound from the storage dtype and the
reduction lengths; a failure names the worst token, its slot and method, and :func:`checks.localize`
re-runs with one slot at a time replaced by identity to name the guilty slot.  Properties
(:mod:`.properties`): batch invariance, zero-initialised adapters = base layer, merged weight =
unmerged, exact Cayley orthogonal.

Implementations: ``triton`` (:mod:`.triton_impl`, one Scute kernel launch for the mixed batch),
``torch`` (:mod:`.torch_impl`, Punica-style gather + batched matmuls) and ``peft``
(:mod:`.adapters.peft_impl`: PEFT's own layers, one adapter at a time, on the cases PEFT can
express) and ``vllm-punica`` (:mod:`.adapters.vllm_punica`: vLLM's own Punica ``lora_shrink`` /
``lora_expand`` kernels from the pinned wheel, on the LoRA cases they serve).

Reach: the kernel's tiles as launched in this mode (:mod:`.tiles`), the slot conversion's edges
and torch's branches (:mod:`.sizes`) are declared thresholds; the strategy (:mod:`.strategies`)
draws sizes at them and values from the whole contract (:mod:`.ranges`: nothing overflows its
format), scaled to the range edge by :mod:`.fit`.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

from fuzzkit import triton_support
from fuzzkit.target import Implementation, Target, lazy
from fuzzkit.targets.scute import checks, reference, sizes


def _kernel_thresholds() -> tuple:
    """The Scute kernel's tiles as launched in this mode (imports no torch/triton until asked)."""
    from fuzzkit.targets.scute import tiles

    return tiles.thresholds()


def _torch_unavailable() -> Optional[str]:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install torch)"
    return None


def _peft_unavailable() -> Optional[str]:
    from fuzzkit.targets.scute.adapters import peft_impl

    return peft_impl.unavailable()


def _punica_unavailable() -> str | None:
    from fuzzkit.targets.scute.adapters import vllm_punica

    return vllm_punica.unavailable()


def _punica_thresholds() -> tuple:
    """vLLM's Punica tiles from its own config getter (loads the pinned modules when asked;
    none where they cannot be loaded)."""
    from fuzzkit.targets.scute.adapters import vllm_punica

    return vllm_punica.thresholds() if vllm_punica.unavailable() is None else ()


def target() -> Target:
    """The ``scute`` target (entry point ``fuzzkit.targets.scute:target``)."""
    from fuzzkit.targets.scute.adapters.peft_mutants import MUTANTS as PEFT_MUTANTS
    from fuzzkit.targets.scute.adapters.vllm_punica_mutants import MUTANTS as PUNICA_MUTANTS
    from fuzzkit.targets.scute.limits import LIMITS
    from fuzzkit.targets.scute.mutants import DEVICE_MUTANTS, MUTANTS
    from fuzzkit.targets.scute.properties import PROPERTIES

    return Target(
        name="scute",
        description="exact-mix adapter kernels: LoRA, rsLoRA, DoRA, VeRA, OFT, BOFT, IA3 and "
                    "base-only tokens in one batch, slot form vs float64 native PEFT forms",
        strategy=lazy("fuzzkit.targets.scute.strategies:inputs"),
        reference=reference.run,
        implementations={
            "triton": Implementation(
                "triton", lazy("fuzzkit.targets.scute.triton_impl:run"), backend="triton",
                description="one Scute kernel launch for the mixed batch (bitwise batch "
                            "invariant natively)",
                unavailable=triton_support.unavailable_with("fuzzkit.targets.scute.triton_impl"),
                thresholds=_kernel_thresholds,
                sources=("fuzzkit.targets.scute.triton_impl", "fuzzkit.targets.scute.kernels",
                         "fuzzkit.targets.scute.batching", "fuzzkit.targets.scute.tiles"),
            ),
            "torch": Implementation(
                "torch", lazy("fuzzkit.targets.scute.torch_impl:run"), backend="torch",
                description="Punica-style gather by slot + batched matmuls, fp32 shrink buffer",
                unavailable=_torch_unavailable,
                thresholds=sizes.TORCH_THRESHOLDS,
                sources=("fuzzkit.targets.scute.torch_impl",),
            ),
            "peft": Implementation(
                "peft", lazy("fuzzkit.targets.scute.adapters.peft_impl:run"), backend="external",
                description="Hugging Face PEFT's own wrapped Linear layers, one adapter at a "
                            "time (float32 on storage-dtype values)",
                unavailable=_peft_unavailable,
                cases=lazy("fuzzkit.targets.scute.adapters.peft_impl:cases"),
                sources=("fuzzkit.targets.scute.adapters.peft_impl",),
            ),
            "vllm-punica": Implementation(
                "vllm-punica", lazy("fuzzkit.targets.scute.adapters.vllm_punica:run"),
                backend="triton",
                description="vLLM's Punica LoRA kernels (lora_shrink / lora_expand with "
                            "LoRAKernelMeta), pinned wheel, on the LoRA cases they serve",
                unavailable=_punica_unavailable,
                thresholds=_punica_thresholds,
                cases=lazy("fuzzkit.targets.scute.adapters.vllm_punica:cases"),
                sources=("fuzzkit.targets.scute.adapters.vllm_punica",),
            ),
        },
        oracle=checks.oracle,
        properties=PROPERTIES,
        mutants=[*MUTANTS, *DEVICE_MUTANTS, *PEFT_MUTANTS, *PUNICA_MUTANTS],
        reducible=(("x", "token_adapter"),),  # token rows shrink together
        validate=checks.validate,
        localize=checks.localize,
        thresholds=sizes.SHARED_THRESHOLDS,
        sizes=sizes.SIZES,
        sources=("fuzzkit.targets.scute.slots",),
        limits=LIMITS,
        schema=lazy("fuzzkit.targets.scute.schema:schema"),  # what describe shows
    )
