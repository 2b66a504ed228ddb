"""The Scute slot form: every adapter method as one set of slot parameters.

``y = ((x·T)·W0ᵀ) ⊙ s + b + (((x·Aᵀ) ⊙ m)·Bᵀ) ⊙ o``; tokens with slot -1 get ``x·W0ᵀ + b0``.

| method | T | s | b | m | o |
|---|---|---|---|---|---|
| LoRA | I | 1 | b0 | 1 | α/r (α/√r rsLoRA) |
| DoRA | I | g | b0 | 1 | g·α/r |
| VeRA | I | 1 | b0 | λ_d | λ_b |
| OFT | blockdiag(R_i) | 1 | b0 | — | — |
| BOFT | butterfly | boft_s | b0 | — | — |
| IA3 kv | I | l | b0⊙l | — | — |
| IA3 ff | diag(l) | 1 | b0 | — | — |

DoRA's ``g = magnitude / ‖W0 + (α/r)·B·A‖_row`` is computed here, offline, in float64.  The
rotations come from the same float64 Cayley maps as the reference (:mod:`.reference`); the
module-level helpers below are what the mutants patch.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from fuzzkit.targets.scute import memo, reference

KIND_IDENTITY, KIND_DIAG, KIND_BLOCK, KIND_DENSE = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class Packed:
    """Float64 slot parameters of every adapter, padded to a common rank R >= 1."""

    dtype: str
    x: np.ndarray           # (Ntok, K) float32
    w0: np.ndarray          # (Nout, K) float32
    b0: np.ndarray          # (Nout,) float32
    token_slot: np.ndarray  # (Ntok,) int64 in [-1, S)
    t_kind: np.ndarray      # (S,) int32
    t_block: np.ndarray     # (S,) int32
    t_diag: np.ndarray      # (S, K)
    t_mat: np.ndarray       # (S, K, K)
    s: np.ndarray           # (S, Nout)
    b: np.ndarray           # (S, Nout)
    rank: np.ndarray        # (S,) int32
    A: np.ndarray           # (S, R, K)
    m: np.ndarray           # (S, R)
    B: np.ndarray           # (S, Nout, R)
    o: np.ndarray           # (S, Nout)


def lora_scale(adapter: Mapping[str, Any]) -> float:
    r = np.asarray(adapter["A"]).shape[0]
    alpha = float(adapter["alpha"])
    return alpha / math.sqrt(r) if adapter.get("rslora", False) else alpha / r


def block_rotations(q: np.ndarray, cayley: str, terms: int) -> np.ndarray:
    """The per-block rotations R_i (x_blk · R_i) for PEFT's Cayley variant ``cayley``."""
    if cayley == "exact":
        return reference.cayley_exact(q)
    return reference.cayley_neumann(q, terms)


def butterfly_factor(q_i: np.ndarray, k: int, index: int, factors: int, cayley: str,
                     terms: int) -> np.ndarray:
    """Factor ``P_i · blockdiag(R) · P_iᵀ`` of the BOFT rotation."""
    nb, bs, _ = q_i.shape
    bd = reference.block_diag(block_rotations(q_i, cayley, terms))
    p = reference.perm_matrix(reference.butterfly_perm(k, nb // 2 ** index, bs // 2, factors - 1))
    return p @ bd @ p.T


def row_norms(w: np.ndarray) -> np.ndarray:
    """‖W‖ over the input features of each output row (DoRA's weight norm)."""
    return np.sqrt(np.sum(w * w, axis=1))


def _identity(k: int, nout: int, b0: np.ndarray) -> dict[str, Any]:
    return {"t_kind": KIND_IDENTITY, "t_block": 0, "t_diag": np.ones(k), "t_mat": np.eye(k),
            "s": np.ones(nout), "b": b0.copy(), "rank": 0, "A": np.zeros((0, k)),
            "m": np.zeros(0), "B": np.zeros((nout, 0)), "o": np.zeros(nout)}


def lora_slot(adapter: Mapping[str, Any], w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    a, b = (np.asarray(adapter[n], np.float64) for n in ("A", "B"))
    out = _identity(w0.shape[1], w0.shape[0], b0)
    out.update(rank=a.shape[0], A=a, B=b, m=np.ones(a.shape[0]),
               o=np.full(w0.shape[0], lora_scale(adapter)))
    return out


def dora_slot(adapter: Mapping[str, Any], w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    out = lora_slot(adapter, w0, b0)
    merged = w0 + lora_scale(adapter) * (out["B"] @ out["A"])
    g = np.asarray(adapter["magnitude"], np.float64) / row_norms(merged)
    out.update(s=g, b=b0.copy(), o=g * lora_scale(adapter))
    return out


def vera_slot(adapter: Mapping[str, Any], w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    nout, k = w0.shape
    a = np.asarray(adapter["A_shared"], np.float64)[:, :k]
    b = np.asarray(adapter["B_shared"], np.float64)[:nout, :]
    out = _identity(k, nout, b0)
    out.update(rank=a.shape[0], A=a, B=b, m=np.asarray(adapter["lambda_d"], np.float64),
               o=np.asarray(adapter["lambda_b"], np.float64).copy())
    return out


def oft_slot(adapter: Mapping[str, Any], w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    nout, k = w0.shape
    bs = int(adapter["block_size"])
    rot = block_rotations(np.asarray(adapter["Q"], np.float64), adapter.get("cayley", "exact"),
                          int(adapter.get("neumann_terms", 5)))
    out = _identity(k, nout, b0)
    out.update(t_kind=KIND_BLOCK, t_block=bs, t_mat=reference.block_diag(rot))
    return out


def boft_slot(adapter: Mapping[str, Any], w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    nout, k = w0.shape
    q = np.asarray(adapter["Q"], np.float64)
    total = np.eye(k)
    for i in range(q.shape[0]):
        total = butterfly_factor(q[i], k, i, q.shape[0], adapter.get("cayley", "exact"),
                                 int(adapter.get("neumann_terms", 5))) @ total
    out = _identity(k, nout, b0)
    block = diagonal_block(total, int(adapter["block_size"]))
    out.update(t_kind=KIND_BLOCK if block < k else KIND_DENSE, t_block=block if block < k else 0,
               t_mat=total, s=np.asarray(adapter["boft_s"], np.float64).copy(), b=b0.copy())
    return out


def diagonal_block(t: np.ndarray, block: int) -> int:
    """The smallest ``block * 2**j`` whose diagonal blocks hold every non-zero of ``t`` (``K``
    when none does).  A butterfly product with few factors only mixes neighbouring blocks, and
    PEFT's default single factor is plain block-diagonal: packing it as such lets the kernel
    skip the zero blocks instead of paying a dense ``K x K`` transform."""
    k = t.shape[0]
    size = block
    while size < k:
        # validate() makes bs * 2^(m-1) divide K and the butterfly product is block-diagonal
        # there, so every size tried before it divides K as well
        if k % size == 0:  # pragma: no branch - a non-dividing size is never reached (above)
            mask = np.kron(np.eye(k // size, dtype=bool), np.ones((size, size), bool))
            if not np.any(t[~mask]):
                return size
        size *= 2
    return k


def ia3_slot(adapter: Mapping[str, Any], w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    nout, k = w0.shape
    lvec = np.asarray(adapter["l"], np.float64)
    out = _identity(k, nout, b0)
    if adapter["placement"] == "kv":
        out.update(s=lvec.copy(), b=b0 * lvec)
    else:
        out.update(t_kind=KIND_DIAG, t_diag=lvec.copy())
    return out


#: Method -> name of its converter in this module (looked up at call time, so patches apply).
CONVERTERS = {"lora": "lora_slot", "dora": "dora_slot", "vera": "vera_slot", "oft": "oft_slot",
              "boft": "boft_slot", "ia3": "ia3_slot"}


#: Slot conversions done before, by content (:mod:`.memo`): one case converts the same adapters
#: a dozen times (reference bound, implementation, every property, the strategy's fit).
_CONVERTED = memo.Cache()
#: What a conversion calls: a patched converter (a mutant) is another key.
_CONVERTERS_NOW = memo.Functions(globals(), vars(reference))


def to_slot(adapter: Mapping[str, Any], w0: Any, b0: Any) -> dict[str, Any]:
    """One adapter -> its slot arrays (float64): t_kind, t_block, t_diag (K,), t_mat (K, K),
    s, b, o (Nout,), rank, A (r, K), m (r,), B (Nout, r).

    A new dict each call, its arrays read-only: equal adapters, ``w0`` and ``b0`` under the
    same converters share one conversion."""
    w0 = np.asarray(w0, np.float64)
    b0 = np.asarray(b0, np.float64)
    return dict(_converted(adapter, w0, b0, (memo.key(w0), memo.key(b0), _CONVERTERS_NOW())))


def _converted(adapter: Mapping[str, Any], w0: np.ndarray, b0: np.ndarray,
               context: tuple) -> dict[str, Any]:
    """The cached conversion (not copied); ``context``: the key of ``w0``, ``b0`` and the
    converters, made once per case by :func:`pack`."""
    return _CONVERTED.get(
        lambda: (memo.key(adapter), context),
        lambda: memo.frozen({name: np.array(v) if isinstance(v, np.ndarray) else v
                             for name, v in _convert(adapter, w0, b0).items()}))


def _convert(adapter: Mapping[str, Any], w0: np.ndarray, b0: np.ndarray) -> dict[str, Any]:
    method = adapter["method"]
    if method == "identity":
        return _identity(w0.shape[1], w0.shape[0], b0)
    return globals()[CONVERTERS[method]](adapter, w0, b0)


def transform(slot: Mapping[str, Any]) -> np.ndarray:
    """The full matrix T of ``x·T`` (diag(t_diag) · t_mat)."""
    return np.asarray(slot["t_diag"])[:, None] * np.asarray(slot["t_mat"])


def merged_weight(slot: Mapping[str, Any], w0: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(W', b')`` with ``x·W'ᵀ + b'`` equal to the slot's forward:
    ``W' = diag(s)·W0·Tᵀ + diag(o)·B·diag(m)·A``, ``b' = b``."""
    w0 = np.asarray(w0, np.float64)
    merged = np.asarray(slot["s"])[:, None] * (w0 @ transform(slot).T)
    if int(slot["rank"]) > 0:
        merged = merged + np.asarray(slot["o"])[:, None] * (
            (np.asarray(slot["B"]) * np.asarray(slot["m"])[None, :]) @ np.asarray(slot["A"]))
    return merged, np.asarray(slot["b"], np.float64).copy()


#: The stacked slot arrays of adapter lists seen before (:mod:`.memo`), read-only.
_PACKED = memo.Cache()


def pack(inputs: Mapping[str, Any]) -> Packed:
    """All slots of a case, padded to a common rank R >= 1.

    The slot arrays (``t_kind`` .. ``o``) are read-only and shared by every case with equal
    adapters, ``w0`` and ``b0`` under the same converters; ``x``, ``w0``, ``b0`` and
    ``token_slot`` are the case's own."""
    x = np.asarray(inputs["x"], np.float32)
    w0 = np.asarray(inputs["w0"], np.float32)
    b0 = np.asarray(inputs["b0"], np.float32)
    w64, b64 = w0.astype(np.float64), b0.astype(np.float64)
    context = (memo.key(w64), memo.key(b64), _CONVERTERS_NOW())
    adapters = inputs["adapters"]
    stacked = _PACKED.get(lambda: (memo.key(adapters), context),
                          lambda: memo.frozen(_stacked(adapters, w64, b64, context)))
    return Packed(dtype=str(inputs.get("dtype", "float32")), x=x, w0=w0, b0=b0,
                  token_slot=np.asarray(inputs["token_adapter"], np.int64), **stacked)


def _stacked(adapters: Any, w0: np.ndarray, b0: np.ndarray, context: tuple
             ) -> dict[str, np.ndarray]:
    """The slot arrays of :class:`Packed` for ``adapters`` (float64 ``w0``, ``b0``)."""
    nout, k = w0.shape
    slots = [_converted(a, w0, b0, context) for a in adapters]
    n = len(slots)
    r = max([1] + [int(s["rank"]) for s in slots])
    a_pad = np.zeros((n, r, k))
    m_pad = np.zeros((n, r))
    b_pad = np.zeros((n, nout, r))
    for i, s in enumerate(slots):
        rk = int(s["rank"])
        a_pad[i, :rk] = s["A"]
        m_pad[i, :rk] = s["m"]
        b_pad[i, :, :rk] = s["B"]

    def stack(key: str, shape: tuple[int, ...]) -> np.ndarray:
        if not slots:
            return np.zeros((0, *shape))
        return np.stack([np.asarray(s[key], np.float64) for s in slots])

    return dict(
        t_kind=np.array([s["t_kind"] for s in slots], np.int32),
        t_block=np.array([s["t_block"] for s in slots], np.int32),
        t_diag=stack("t_diag", (k,)), t_mat=stack("t_mat", (k, k)),
        s=stack("s", (nout,)), b=stack("b", (nout,)),
        rank=np.array([s["rank"] for s in slots], np.int32),
        A=a_pad, m=m_pad, B=b_pad, o=stack("o", (nout,)),
    )
