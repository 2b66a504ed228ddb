"""Hypothesis strategy for Scute cases: small mixed batches of every adapter method.

Shapes: K in {8, 16, 32}, Nout 4..24, rank 1..8, Ntok 1..24, 1..4 adapter slots whose methods
are drawn uniformly from lora, dora, vera, oft, boft, ia3 (kv and ff) and identity, with rsLoRA,
both Cayley variants, 1..4 butterfly factors where the shape allows (the permutations of the
first two factors are involutions; only from the third on is P != Pᵀ).  Tokens: ``decode`` (a
random slot per token, about 15 % base-only -1) or ``prefill`` (runs of one slot, in shuffled
order, -1 runs included).  Storage dtypes float32 / float16 / bfloat16; every value that the
kernels store in that dtype (x, W0, A, B, the VeRA matrices, IA3 ff scales) is rounded to it in
NumPy first (bf16: round to nearest even on the float32 bits), the rest is float32.  Magnitudes
stay moderate (|y| in the tens) so float16 never overflows.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from targets.scute.checks import round_to

DTYPES = ("float32", "float16", "bfloat16")
METHODS = ("identity", "lora", "dora", "vera", "oft", "boft", "ia3-kv", "ia3-ff")


def _f32(a: Any) -> np.ndarray:
    return np.asarray(a, np.float32)


def _skew(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    u = _f32(np.triu(scale * rng.standard_normal(shape), 1))
    return u - np.swapaxes(u, -1, -2)


def make_adapter(method: str, k: int, nout: int, dtype: str,
                 rng: np.random.Generator, w0: np.ndarray) -> dict[str, Any]:
    """One random adapter of ``method`` (see :data:`METHODS`) for a (nout, k) layer."""
    r = int(rng.integers(1, 9))
    if method == "identity":
        return {"method": "identity"}
    if method in ("lora", "dora"):
        a = round_to(0.5 * rng.standard_normal((r, k)), dtype)
        b = round_to(0.5 * rng.standard_normal((nout, r)), dtype)
        alpha = float(rng.choice([1.0, 2.0 * r, 8.0, 16.0, 3.0]))
        ad: dict[str, Any] = {"method": method, "A": a, "B": b, "alpha": alpha,
                              "rslora": bool(rng.random() < 0.4)}
        if method == "dora":
            norms = np.sqrt((np.asarray(w0, np.float64) ** 2).sum(axis=1))
            ad["magnitude"] = _f32(norms * rng.uniform(0.5, 1.5, nout))
        return ad
    if method == "vera":
        kmax = k + int(rng.integers(0, 9))
        nmax = nout + int(rng.integers(0, 9))
        return {"method": "vera",
                "A_shared": round_to(0.5 * rng.standard_normal((r, kmax)), dtype),
                "B_shared": round_to(0.5 * rng.standard_normal((nmax, r)), dtype),
                "lambda_d": _f32(rng.standard_normal(r)),
                "lambda_b": _f32(0.5 * rng.standard_normal(nout))}
    cayley = "exact" if rng.random() < 0.5 else "neumann"
    terms = int(rng.integers(1, 7))
    if method == "oft":
        bs = int(rng.choice([b for b in (1, 2, 4, 8) if k % b == 0]))
        return {"method": "oft", "block_size": bs,
                "Q": _skew(rng, (k // bs, bs, bs), 0.3), "cayley": cayley,
                "neumann_terms": terms}
    if method == "boft":
        bs = int(rng.choice([2, 4, 8]))
        options = [1] + [m for m in (2, 3, 4)
                         if (k // bs) % 2 == 0 and k % (bs * 2 ** (m - 1)) == 0]
        m = int(rng.choice(options))
        return {"method": "boft", "block_size": bs, "factors": m,
                "Q": _skew(rng, (m, k // bs, bs, bs), 0.3),
                "boft_s": _f32(1.0 + 0.3 * rng.standard_normal(nout)),
                "cayley": cayley, "neumann_terms": terms}
    placement = method.split("-")[1]
    if placement == "kv":
        return {"method": "ia3", "placement": "kv", "l": _f32(1.0 + 0.5 * rng.standard_normal(nout))}
    return {"method": "ia3", "placement": "ff",
            "l": round_to(1.0 + 0.5 * rng.standard_normal(k), dtype)}


def token_slots(mode: str, ntok: int, n_slots: int, rng: np.random.Generator) -> np.ndarray:
    choices = np.arange(-1, n_slots)
    probs = np.full(n_slots + 1, 0.85 / max(n_slots, 1))
    probs[0] = 0.15 if n_slots else 1.0
    probs /= probs.sum()
    if mode == "decode":
        return rng.choice(choices, size=ntok, p=probs).astype(np.int64)
    out = []
    while len(out) < ntok:
        run = int(rng.integers(1, 9))
        out.extend([int(rng.choice(choices, p=probs))] * run)
    return np.asarray(out[:ntok], np.int64)


def build(seed: int, *, k: int, nout: int, ntok: int, dtype: str, mode: str,
          methods: list[str]) -> dict[str, Any]:
    """A case from plain parameters (also used by tests)."""
    rng = np.random.default_rng(seed)
    x = round_to(rng.standard_normal((ntok, k)), dtype)
    w0 = round_to(rng.standard_normal((nout, k)) / np.sqrt(k), dtype)
    b0 = _f32(0.5 * rng.standard_normal(nout))
    adapters = [make_adapter(m, k, nout, dtype, rng, w0) for m in methods]
    return {"dtype": dtype, "mode": mode, "x": x, "w0": w0, "b0": b0,
            "token_adapter": token_slots(mode, ntok, len(adapters), rng),
            "adapters": adapters}


@st.composite
def _inputs(draw: Callable[[Any], Any]) -> dict[str, Any]:
    k = draw(st.sampled_from([8, 16, 32]))
    # square layers (q/k/v/o projections) often: some bugs only fit their shapes
    nout = draw(st.one_of(st.integers(4, 24), st.just(k)))
    ntok = draw(st.one_of(st.integers(1, 24), st.integers(1, 4)))
    dtype = draw(st.sampled_from(DTYPES))
    mode = draw(st.sampled_from(["decode", "prefill"]))
    n = draw(st.integers(1, 4))
    methods = draw(st.lists(st.sampled_from(METHODS), min_size=n, max_size=n))
    seed = draw(st.integers(0, 2**32 - 1))
    return build(seed, k=k, nout=nout, ntok=ntok, dtype=dtype, mode=mode, methods=methods)


def inputs() -> Any:
    return _inputs()
