"""What a scute case may ask for (:mod:`fuzzkit.limits`), read off the unvalidated inputs.

Where a case's cost comes from: ``Ntok`` tokens of ``K`` features through a layer of ``Nout``
outputs, and the adapter slots:

* validation packs every slot into dense float64 arrays -- a ``K x K`` transform, ``r x K`` and
  ``Nout x r`` factors -- before anything runs, so ``adapters * K**2`` is memory (an identity
  adapter is 30 bytes of JSON and ``8 K**2`` bytes packed; 28 of them at K = 1 024 peaked at
  0.9 GB: ``slot_elements``);
* the torch implementation gathers every token's ``K x K`` transform, the oracle's magnitude and
  the validator's range check apply one per token (4 096 tokens at K = 1 024: 14.6 GB and 70 s:
  ``token_transforms``);
* the float64 reference runs one token at a time through its adapter's native form: BOFT
  multiplies ``3 * factors`` dense ``K x K`` matrices per token, OFT and BOFT under the Neumann
  series run ``neumann_terms`` block products (each a Python-level call), DoRA merges
  ``Nout x r x K`` (:func:`adapter_work`; ``work`` charges every token and every slot conversion
  the dearest adapter's: 2.2e11 took 9 s).

Defaults: 12x to 1 300x the largest values in 2 500 generated cases (seeds 0 and 7, the
strategy for each implementation): tokens 44, K 72, Nout 72, adapters 4, rank 20, Neumann terms
9, BOFT factors 5, elements 21 174, outputs 3 124, slot elements 28 160, token transforms
216 763, work 613 679 616.  A case at the defaults validates and replays in seconds and well
under a gigabyte on one core (the Triton implementation runs the interpreter on top).
"""

from __future__ import annotations

from typing import Any

from fuzzkit import limits
from fuzzkit.limits import Limit, integer, shape as shape_of




def _dim(inputs: dict[str, Any], key: str, axis: int) -> int:
    shape = shape_of(inputs.get(key))
    return shape[axis] if len(shape) > max(axis, -axis - 1) else 0


def _adapters(inputs: dict[str, Any]) -> list[dict[str, Any]]:
    adapters = inputs.get("adapters")
    if not isinstance(adapters, (list, tuple)):
        return []
    return [a for a in adapters if isinstance(a, dict)]


def tokens(inputs: dict[str, Any]) -> int:
    return _dim(inputs, "x", 0)


def in_features(inputs: dict[str, Any]) -> int:
    return max(_dim(inputs, "x", -1), _dim(inputs, "w0", -1))


def out_features(inputs: dict[str, Any]) -> int:
    return max(_dim(inputs, "w0", 0), _dim(inputs, "b0", 0))


def adapters(inputs: dict[str, Any]) -> int:
    value = inputs.get("adapters")
    return len(value) if isinstance(value, (list, tuple)) else 0


def _rank(adapter: dict[str, Any]) -> int:
    return max(_dim(adapter, "A", 0), _dim(adapter, "A_shared", 0))


def rank(inputs: dict[str, Any]) -> int:
    return max([_rank(a) for a in _adapters(inputs)] or [0])


def neumann_terms(inputs: dict[str, Any]) -> int:
    return max([integer(a.get("neumann_terms", 0)) for a in _adapters(inputs)] or [0])


def _factors(adapter: dict[str, Any]) -> int:
    shape = shape_of(adapter.get("Q"))
    return shape[0] if adapter.get("method") == "boft" and len(shape) == 4 else 0


def boft_factors(inputs: dict[str, Any]) -> int:
    return max([_factors(a) for a in _adapters(inputs)] or [0])


def elements(inputs: dict[str, Any]) -> int:
    """Array elements of the case: x, w0, b0, token_adapter and every adapter's arrays."""
    total = sum(limits.elements(inputs.get(k)) for k in ("x", "w0", "b0", "token_adapter"))
    for adapter in _adapters(inputs):
        total += sum(limits.elements(v) for v in adapter.values())
    return total


def slot_elements(inputs: dict[str, Any]) -> int:
    """float64 elements of the packed slots: per adapter a K x K transform, r x K and Nout x r
    factors (padded to the largest rank) and five vectors."""
    k, nout = in_features(inputs), out_features(inputs)
    return adapters(inputs) * (k * k + rank(inputs) * (k + nout) + 4 * nout + 2 * k)


#: A matrix operation's Python-level cost in multiply-adds' worth (about 6 us on one core): a
#: Neumann series of tiny blocks is that many calls per term, whatever the flops.
CALL = 200_000


def adapter_work(adapter: dict[str, Any], k: int, nout: int) -> int:
    """Multiply-adds one token costs through ``adapter`` in the reference (and the oracle's
    slot-form magnitude): the base layer and the K x K transform, the low-rank factors, and the
    method's own: a DoRA merge, BOFT's dense factor products, the Neumann series' block powers
    (each also a Python-level call: :data:`CALL`)."""
    r = _rank(adapter)
    work = k * k + nout * k + r * (k + nout)
    method = adapter.get("method")
    terms = max(1, integer(adapter.get("neumann_terms", 5)))
    block = shape_of(adapter.get("Q"))
    series = terms * ((block[-1] ** 2 * k if block else 0) + CALL)  # (K / bs) bs x bs blocks
    if method == "dora":
        work += nout * r * k
    elif method == "oft":
        work += series
    elif method == "boft":
        work += _factors(adapter) * (3 * k ** 3 + 3 * CALL + series)
    return work


def outputs(inputs: dict[str, Any]) -> int:
    return tokens(inputs) * out_features(inputs)


def token_transforms(inputs: dict[str, Any]) -> int:
    """Tokens times K**2: the torch implementation gathers every token's K x K transform, the
    oracle's magnitude and the validator's range check apply one per token."""
    return tokens(inputs) * in_features(inputs) ** 2


def work(inputs: dict[str, Any]) -> int:
    """(tokens + adapters) times the dearest adapter's per-token work (tokens with no adapter
    pay the base layer's)."""
    k, nout = in_features(inputs), out_features(inputs)
    dearest = max([adapter_work(a, k, nout) for a in _adapters(inputs)] + [k * k + nout * k])
    return (tokens(inputs) + adapters(inputs)) * dearest


LIMITS = (
    Limit("tokens", 4_096, "tokens Ntok (rows of x)", tokens),
    Limit("in_features", 1_024, "input features K", in_features),
    Limit("out_features", 4_096, "output features Nout", out_features),
    Limit("adapters", 256, "adapter slots", adapters),
    Limit("rank", 512, "largest adapter rank r", rank),
    Limit("neumann_terms", 1_000, "Cayley-Neumann series terms", neumann_terms),
    Limit("boft_factors", 64, "BOFT butterfly factors", boft_factors),
    Limit("elements", 8_000_000, "array elements of the case", elements),
    Limit("outputs", 4_000_000, "output elements Ntok * Nout", outputs),
    Limit("slot_elements", 10_000_000, "float64 elements of the packed slots "
          "(adapters * (K*K + r*(K+Nout) + ...))", slot_elements),
    Limit("token_transforms", 10**8, "per-token transform elements Ntok * K**2",
          token_transforms),
    Limit("work", 10**11, "reference multiply-adds ((tokens + adapters) * the dearest "
          "adapter's per-token work)", work),
)
