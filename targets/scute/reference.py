"""Float64 reference for ``scute``: every adapter method in its NATIVE form, token by token
(the tokens of one adapter go through :func:`forward_rows` together; no row mixes with another,
so each is what :func:`forward_token` gives it alone, to float64 rounding).

Nothing here uses the slot form of :mod:`fuzzkit.targets.scute.slots`; each method is written the way
PEFT (0.17+) computes its forward pass (checked by ``tests/test_scute_peft.py``):

* ``identity``: the base layer ``y = W0 x + b0``.
* ``lora``: ``y = W0 x + b0 + scale * B (A x)``, ``scale = alpha / r`` (``alpha / sqrt(r)``
  with rsLoRA).
* ``dora``: ``W' = W0 + scale * B A``; ``y = (W' x) * magnitude / ||W'||_row + b0`` where the
  norm runs over the input features of each output row; the bias is NOT scaled (PEFT adds the
  DoRA term to the base result, whose bias stays as it is).
* ``vera``: shared ``A_shared (r, Kmax)`` / ``B_shared (Nmax, r)`` sliced to ``A_shared[:, :K]``
  and ``B_shared[:Nout, :]``; ``y = W0 x + b0 + lambda_b * (B (lambda_d * (A x)))``; no alpha.
* ``oft``: the input is rotated block by block, ``x_blk <- x_blk R_i`` (PEFT's
  ``einsum("...rk,rkc->...rc")``), then ``y = W0 x_rot + b0``.  ``R_i`` comes from the
  skew-symmetric ``Q_i`` by

  - ``cayley="exact"``: :func:`cayley_exact`, ``R = (I - Q)(I + Q)^-1`` (PEFT's
    ``use_cayley_neumann=False`` branch, ``solve(I + Q, I - Q, left=False)``);
  - ``cayley="neumann"``: :func:`cayley_neumann`, PEFT's default truncated series
    ``I + 2Q + 2Q^2 + ... + 2Q^(n-2) + Q^(n-1)`` (n = ``neumann_terms``), which approximates
    ``(I + Q)(I - Q)^-1`` -- the TRANSPOSE (= inverse) of the exact rotation, not the exact
    rotation itself.  PEFT's loop has a quirk kept here: n = 3 gives the same series as n = 4
    (``I + 2Q + 2Q^2 + Q^3``).
* ``boft``: ``m`` butterfly factors; factor i is ``P_i BD_i P_i^T`` with ``BD_i`` the
  block-diagonal Cayley rotations of ``Q[i]`` and ``P_i`` PEFT's block butterfly permutation
  (:func:`butterfly_perm`, ``P[j, perm[j]] = 1``); the rotation is
  ``M = F_{m-1} ... F_1 F_0`` and ``y = (W0 (x M)) * boft_s + b0`` (the scale multiplies the
  output before the bias, PEFT subtracts and re-adds the bias).  PEFT's BOFT always uses the
  exact Cayley; ``cayley="neumann"`` here uses :func:`cayley_neumann` per block (an extension).
  Without its CUDA extension PEFT forces ``m = 1``.
* ``ia3``: ``placement="kv"``: ``y = (W0 x + b0) * l`` (bias included); ``"ff"``:
  ``y = W0 (x * l) + b0``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from fuzzkit.targets.scute import memo

METHODS = ("identity", "lora", "dora", "vera", "oft", "boft", "ia3")


def lora_scale(adapter: Mapping[str, Any]) -> float:
    r = np.asarray(adapter["A"]).shape[0]
    alpha = float(adapter["alpha"])
    return alpha / math.sqrt(r) if adapter.get("rslora", False) else alpha / r


def cayley_exact(q: np.ndarray) -> np.ndarray:
    """``(I - Q)(I + Q)^-1`` for a stack (..., b, b) of skew-symmetric matrices (orthogonal)."""
    q = np.asarray(q, np.float64)
    eye = np.broadcast_to(np.eye(q.shape[-1]), q.shape)
    # R (I + Q) = I - Q  <=>  (I + Q)^T R^T = (I - Q)^T
    rt = np.linalg.solve(np.swapaxes(eye + q, -1, -2), np.swapaxes(eye - q, -1, -2))
    return np.swapaxes(rt, -1, -2)


def cayley_neumann(q: np.ndarray, terms: int) -> np.ndarray:
    """PEFT's truncated Cayley-Neumann series (see the module docstring), ~ ``(I+Q)(I-Q)^-1``."""
    q = np.asarray(q, np.float64)
    r = np.broadcast_to(np.eye(q.shape[-1]), q.shape).copy()
    n = int(terms)
    if n > 1:
        r += 2.0 * q
        if n > 2:
            power = q @ q
            r += 2.0 * power
            for _ in range(3, n - 1):
                power = power @ q
                r += 2.0 * power
            power = power @ q
            r += power
    return r


def rotations(q: np.ndarray, cayley: str, terms: int) -> np.ndarray:
    return cayley_exact(q) if cayley == "exact" else cayley_neumann(q, terms)


def block_diag(blocks: np.ndarray) -> np.ndarray:
    nb, bs, _ = blocks.shape
    out = np.zeros((nb * bs, nb * bs))
    for i in range(nb):
        out[i * bs:(i + 1) * bs, i * bs:(i + 1) * bs] = blocks[i]
    return out


def butterfly_perm(n: int, blocks: int, half: int, factors_minus_one: int) -> np.ndarray:
    """PEFT's ``block_butterfly_perm(n, b, r, n_butterfly_factor)`` semantics: within every
    group of ``n // blocks`` indices, chunks of ``half`` indices are reordered even chunks first,
    then odd ones.  Identity when there is a single factor."""
    if factors_minus_one == 0:
        return np.arange(n)
    group = n // blocks
    chunks = group // half
    order = [c for c in range(0, chunks, 2)] + [c for c in range(1, chunks, 2)]
    within = np.concatenate([np.arange(c * half, (c + 1) * half) for c in order])
    return np.concatenate([g + within for g in range(0, n, group)])


def perm_matrix(perm: np.ndarray) -> np.ndarray:
    n = perm.shape[0]
    p = np.zeros((n, n))
    p[np.arange(n), perm] = 1.0
    return p


def boft_rotation(adapter: Mapping[str, Any], k: int) -> np.ndarray:
    q = np.asarray(adapter["Q"], np.float64)
    m, nb, bs, _ = q.shape
    total = np.eye(k)
    for i in range(m):
        bd = block_diag(rotations(q[i], adapter.get("cayley", "exact"),
                                  int(adapter.get("neumann_terms", 5))))
        p = perm_matrix(butterfly_perm(k, nb // 2 ** i, bs // 2, m - 1))
        total = (p @ bd @ p.T) @ total
    return total


def forward_token(x: np.ndarray, adapter: Mapping[str, Any] | None, w0: np.ndarray,
                  b0: np.ndarray) -> np.ndarray:
    """One token (K,) through the base layer and ``adapter`` (None = base only), float64."""
    return forward_rows(np.asarray(x, np.float64)[None, :], adapter, w0, b0)[0]


def forward_rows(x: np.ndarray, adapter: Mapping[str, Any] | None, w0: np.ndarray,
                 b0: np.ndarray) -> np.ndarray:
    """Tokens (n, K) of one adapter (None = base only) through the base layer and it, float64:
    each row exactly as :func:`forward_token` would take it alone (the rows never mix), the
    adapter's weights (DoRA's merged norm, the OFT/BOFT rotations) built once for all of them."""
    method = "identity" if adapter is None else adapter["method"]
    n, k = x.shape
    if method == "identity":
        return x @ w0.T + b0
    if method == "lora":
        a, b = (np.asarray(adapter[n_], np.float64) for n_ in ("A", "B"))
        return x @ w0.T + b0 + lora_scale(adapter) * ((x @ a.T) @ b.T)
    if method == "dora":
        a, b = (np.asarray(adapter[n_], np.float64) for n_ in ("A", "B"))
        merged = w0 + lora_scale(adapter) * (b @ a)
        norm = np.sqrt(np.sum(merged * merged, axis=1))
        return (x @ merged.T) * (np.asarray(adapter["magnitude"], np.float64) / norm) + b0
    if method == "vera":
        nout = w0.shape[0]
        a = np.asarray(adapter["A_shared"], np.float64)[:, :k]
        b = np.asarray(adapter["B_shared"], np.float64)[:nout, :]
        ld = np.asarray(adapter["lambda_d"], np.float64)
        lb = np.asarray(adapter["lambda_b"], np.float64)
        return x @ w0.T + b0 + lb * ((ld * (x @ a.T)) @ b.T)
    if method == "oft":
        bs = int(adapter["block_size"])
        rot = rotations(np.asarray(adapter["Q"], np.float64), adapter.get("cayley", "exact"),
                        int(adapter.get("neumann_terms", 5)))
        xr = np.einsum("nrk,rkc->nrc", x.reshape(n, k // bs, bs), rot).reshape(n, k)
        return xr @ w0.T + b0
    if method == "boft":
        xr = x @ boft_rotation(adapter, k)
        return (xr @ w0.T) * np.asarray(adapter["boft_s"], np.float64) + b0
    if method == "ia3":
        lvec = np.asarray(adapter["l"], np.float64)
        if adapter["placement"] == "kv":
            return (x @ w0.T + b0) * lvec
        return (x * lvec) @ w0.T + b0
    raise ValueError(f"unknown adapter method {method!r}")


#: Outputs for inputs seen before, by content (:mod:`.memo`): the runner, the oracle's bound and
#: the properties' bounds all reference the same case.
_OUTPUTS = memo.Cache()
#: What the reference calls (a test that patches one gets fresh outputs).
_FUNCTIONS_NOW = memo.Functions(globals())


def run(inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    x = np.asarray(inputs["x"], np.float64)
    w0 = np.asarray(inputs["w0"], np.float64)
    b0 = np.asarray(inputs["b0"], np.float64)
    slots = np.asarray(inputs["token_adapter"], np.int64)
    adapters = inputs["adapters"]
    y = _OUTPUTS.get(
        lambda: (memo.key(x), memo.key(w0), memo.key(b0), memo.key(slots), memo.key(adapters),
                 _FUNCTIONS_NOW()),
        lambda: memo.frozen(_run(x, w0, b0, slots, adapters)))
    return {"y": y.copy()}


def _run(x: np.ndarray, w0: np.ndarray, b0: np.ndarray, slots: np.ndarray,
         adapters: Any) -> np.ndarray:
    """Every token through its own adapter (tokens of one slot together, rows independent)."""
    y = np.zeros((x.shape[0], w0.shape[0]))
    for s in np.unique(slots):
        rows = np.nonzero(slots == s)[0]
        y[rows] = forward_rows(x[rows], None if s < 0 else adapters[int(s)], w0, b0)
    return y
