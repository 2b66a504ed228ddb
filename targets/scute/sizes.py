"""The named sizes of a Scute case (``Target.sizes``) and the thresholds of the code that every
implementation runs through (``Target.thresholds``: the slot conversion of :mod:`.slots`).

Why: a threshold names a size (``fuzzkit.reach``); this module says where each size is found in
a case, so ``reach.crossings`` and the run reports can tell which edges the strategy reaches.
Kernel tiles are declared by the ``triton`` implementation (:func:`fuzzkit.targets.scute.tiles.thresholds`),
the torch implementation's own branches by :data:`TORCH_THRESHOLDS`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from fuzzkit import reach

#: Shared by every implementation (the slot conversion in :mod:`.slots` and the launchers).
SHARED_THRESHOLDS: tuple[reach.Threshold, ...] = (
    reach.Threshold("slots", 1, "no adapter slot at all: the triton launcher packs one identity "
                    "slot so masked loads have an address, torch skips the gathered path",
                    cap=4),
    reach.Threshold("boft_factors", 2, "BOFT butterfly: one factor is block-diagonal (identity "
                    "permutation), the permutations of factors 1-2 are involutions, from the "
                    "3rd P != P^T; the packed block widens to bs*2^(m-1)", cap=5),
    reach.Threshold("neumann_terms", 4, "PEFT Cayley-Neumann series: 1 term = I, 2 = I + 2Q, "
                    "3 and 4 the same cubic (PEFT quirk); the power loop runs from 5 terms",
                    cap=9),
)

#: The torch implementation's own branches.
TORCH_THRESHOLDS: tuple[reach.Threshold, ...] = (
    reach.Threshold("base_tokens", 1, "torch: tokens of slot -1 take the masked base path; "
                    "with none that branch is skipped", cap=8),
)


def _tokens(inputs: Mapping[str, Any], mode: str) -> Iterable[int]:
    if inputs.get("mode", "decode") != mode:
        return []
    _, counts = np.unique(np.asarray(inputs["token_adapter"]), return_counts=True)
    return [int(c) for c in counts]


def _rank(inputs: Mapping[str, Any]) -> Iterable[int]:
    ranks = [np.asarray(a["A"]).shape[0] for a in inputs["adapters"]
             if a["method"] in ("lora", "dora")]
    ranks += [np.asarray(a["A_shared"]).shape[0] for a in inputs["adapters"]
              if a["method"] == "vera"]
    return [max([1] + ranks)]  # the padded R that BLOCK_R depends on


def _span(inputs: Mapping[str, Any]) -> Iterable[int]:
    from fuzzkit.targets.scute import pristine

    slots = pristine.slots()  # what the real conversion packs, whatever a mutant patched
    k = np.asarray(inputs["w0"]).shape[1]
    out = []
    for ad in inputs["adapters"]:
        if ad["method"] == "oft":
            out.append(int(ad["block_size"]))
        elif ad["method"] == "boft":
            slot = slots.to_slot(ad, inputs["w0"], inputs["b0"])
            out.append(int(slot["t_block"]) if slot["t_kind"] == slots.KIND_BLOCK else k)
    return out


SIZES: dict[str, reach.Size] = {
    "k": reach.Size(lambda c: [np.asarray(c["w0"]).shape[1]], lo=1),
    "nout": reach.Size(lambda c: [np.asarray(c["w0"]).shape[0]], lo=1),
    "decode_slot_tokens": reach.Size(lambda c: _tokens(c, "decode"), lo=1),
    "prefill_slot_tokens": reach.Size(lambda c: _tokens(c, "prefill"), lo=1),
    "base_tokens": reach.Size(
        lambda c: [int(np.sum(np.asarray(c["token_adapter"]) < 0))], lo=0),
    "slots": reach.Size(lambda c: [len(c["adapters"])], lo=0),
    "rank": reach.Size(_rank, lo=1),
    "span": reach.Size(_span, lo=1),
    "boft_factors": reach.Size(
        lambda c: [np.asarray(a["Q"]).shape[0] for a in c["adapters"] if a["method"] == "boft"],
        lo=1),
    "neumann_terms": reach.Size(
        lambda c: [int(a.get("neumann_terms", 5)) for a in c["adapters"]
                   if a["method"] in ("oft", "boft") and a.get("cayley") == "neumann"], lo=1),
}

__all__ = ["SIZES", "SHARED_THRESHOLDS", "TORCH_THRESHOLDS"]
