"""Float64 reference paged attention -- computed *without* the cache -- and its error bound.

The reference takes each request's K/V sequence directly (positions ``0 .. seq_len-1``,
``[seq_len, H_kv, D]``), so it shares nothing with the kernels under test: not the block table,
not the slot arithmetic, not the online softmax.  Queries ``[q_len, H, D]`` sit at positions
``seq_len - q_len .. seq_len - 1``; a query at position ``t`` attends keys ``0..t`` (or
``t-w+1 .. t`` with a sliding window ``w``); query head ``h`` uses kv head ``h // (H // H_kv)``;
scores are scaled by ``c = 1/sqrt(D)``; softmax and the weighted sum are exact float64 (with
the row max subtracted).

Error bound
-----------

What is bounded: a kernel that reads exactly-representable storage-dtype inputs ``q, k, v``
(float32, float16 or bfloat16), computes scores with float32 accumulation of ``D`` products,
runs an online softmax in float32 (``exp2`` with ``log2 e`` folded into the scale, running max
``m``, running sum ``l``, accumulator rescaled by ``exp2(m_old - m_new)``, any tiling of the
keys), accumulates ``P @ V`` in float32 -- optionally with ``P`` rounded to the storage dtype
first, as tensor-core kernels do -- divides by ``l`` and rounds the output to the storage dtype
once.  Per query row let ``n`` be the number of keys it attends, ``p_j`` the exact softmax
weights, ``sigma = max_j c * sum_d |q_d k_jd|`` (bounds every ``|score|``), and per output
element ``W_d = sum_j p_j |v_jd|`` (the ``|P| |V|`` magnitude).

Unit roundoffs: ``u = 2**-24`` (float32), ``u_s`` of the storage dtype.  Every float32 operation
is charged ``v = 2u``, which covers round-to-nearest, truncating accumulators (tensor cores),
the approximate ``ex2.approx.f32`` (relative error <= 2**-22 = 2v) and ``div.full.f32``
(<= 2 ulp <= 2v); ``gamma_k(x) = k x / (1 - k x)``.

1. *Scores.*  Any-order float32 summation of ``D`` products (exact for 16-bit inputs, one
   rounding each for float32), times the rounded constant ``c log2 e`` (two more roundings):
   ``|t^_j - t_j| <= gamma_{D+2}(v) * log2e * sigma``.
2. *Exponent arguments.*  ``fl(t^_j - m^)`` adds ``v |t^_j - m^| <= 2 v log2e sigma~`` with
   ``sigma~ = sigma (1 + gamma_{D+2}(v))`` (both terms are computed scores).  The rescale
   factors ``exp2(fl(m_old - m_new))`` add ``v |m_old - m_new|`` each; the running max only
   grows, so these telescope to at most ``2 v log2e sigma~`` in total.  ``m^`` itself is a
   common shift and cancels in ``acc / l``.
3. *exp2.*  One relative error ``<= 2v`` for a key's own weight and one per rescale it lives
   through (at most ``n - 1``: a tile without a used key leaves ``m`` unchanged and
   ``exp2(0) = 1`` exactly).
   Items 1-3 perturb key ``j``'s weight by a factor ``e^{delta_j}`` (natural log units; a
   relative error ``eta`` is an exponent shift ``|log(1+eta)| <= eta/(1-eta)``) with
   ``|delta_j| <= E = gamma_{D+2}(v) sigma + 4 v sigma~ + n * 2v/(1-2v)``.
4. *Sums.*  ``acc = sum_j w^_j v_j (1 + theta_j)``: one product rounding, at most ``n - 1``
   additions in the tile dots, one rescale multiply and one add per tile (at most ``n`` tiles):
   ``|theta_j| <= gamma_a = gamma_{3n+1}(v)`` -- composed with ``u_s`` when ``P`` is rounded
   to the storage dtype.  Likewise ``l = sum_j w^_j (1 + phi_j)``, ``|phi_j| <= gamma_l =
   gamma_{3n}(v)``.  The division adds ``(1 + rho)``, ``|rho| <= 2v``; the final rounding to
   the storage dtype ``(1 + tau)``, ``|tau| <= 2 u_s`` (round-to-nearest needs ``u_s``; 2 covers
   the truncating float32 -> bfloat16 cast of the Triton interpreter).
5. *Together.*  ``y^_d - y_d = sum_j p_j v_jd (X_j - 1)`` with
   ``X_j = e^{delta_j} (1+theta_j)(1+rho)(1+tau) / sum_i p_i e^{delta_i} (1+phi_i)``, and the
   denominator lies in ``[e^{-E}(1-gamma_l), e^{E}(1+gamma_l)]``, so
   ``|X_j - 1| <= kappa = max(X_hi - 1, 1 - X_lo)``,
   ``X_hi = e^{2E} (1+gamma_a)(1+2v)(1+2u_s) / (1-gamma_l)``,
   ``X_lo = e^{-2E} (1-gamma_a)(1-2v)(1-2u_s) / (1+gamma_l)``, and

       |y^_d - y_d| <= kappa * W_d + U_d.

6. *Underflow.*  The relative model fails for weights that underflow: float32 weights below
   ``2**-126`` (flushed to zero on a GPU), and, when ``P`` is rounded to float16, weights in
   float16's subnormal range (absolute error ``<= 2**-25``).  The max key's weight is ``~1``, so
   ``l >= ~1`` and ``U_d = 2 n (2**-126 + h_s) max_j |v_jd|`` (``h_s = 2**-25`` float16,
   ``2**-134`` bfloat16, ``0`` float32; the 2 absorbs ``1/l`` and the output rounding).  The
   values' side underflows too when ``V`` is tiny or subnormal: a GPU flushes subnormal
   float32 inputs and results to zero, an absolute error below ``2**-126`` in each product
   ``p_j v_jd``, each partial sum and each rescale of the accumulator (at most ``3n`` of them)
   and in the division -- ``(3n + 1) 2**-126`` more in ``U_d`` (``l >= 1``: the max key's
   weight is ``exp2(0) = 1``).  Without it, a tiny ``V`` (norms near ``1e-37``) attended
   over a few dozen keys would exceed the bound on a GPU while being right.

The reference's own float64 error (~1e-16 relative) is negligible next to ``kappa >= 2 u_s``.
For 16-bit storage ``kappa ~ 3 u_s`` (output rounding, ``P`` rounding); for float32 it is
dominated by the score term ``~ 2 (D + 6) v sigma``: the softmax amplifies absolute score
errors, so large score ranges need a larger bound, and it grows with ``sigma``, not with ``n``.

What is passed to ``close``
---------------------------

:meth:`Reference.close_arguments` returns ``dtype`` = the storage dtype,
``reduction_length = 0`` (``close``'s relative factor is then ``gamma_3(u_s)`` and its floor
``3 * smallest_normal``), ``factor = kappa_max / gamma_3(u_s)`` with ``kappa_max`` the largest
``kappa`` of the case, and ``magnitude = W + U / kappa_max``, so that ``close``'s bound is
``kappa_max * W + U + factor * 3 * smallest_normal >= kappa * W + U`` element by element.  A
``reduction_length`` > 0 would only add ``close``'s per-term underflow floor (``(n+3) * 2**-14``
per element in float16 -- larger than the whole float16 bound at ``n ~ 20``).

What the bound still sees: a wrong key block, a wrong kv head, a missing causal mask or a wrong
row moves an output by ``O(W)``; a dropped key among ``n`` near-uniform keys by about
``W / n``, against a bound of ``~3 u_s W`` (float16/bfloat16; float32 ``~1e-5 W`` at
moderate scores) -- visible whenever ``n << 1 / (3 u_s)`` (~85 keys in bfloat16, ~680 in
float16).  ``tests/test_paged_kv_kernels.py`` measures both sides.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

import numpy as np

from fuzzkit.failure import Failure
from fuzzkit.oracles.close import close, format_name, gamma, smallest_normal, unit_roundoff

U32 = 2.0**-24
#: Charge per float32 operation (see the module docstring).
V32 = 2.0 * U32
_HALF_SUBNORMAL = {"float32": 0.0, "float16": 2.0**-25, "bfloat16": 2.0**-134}


def _dtype_name(dtype: Any) -> str:
    """The storage format's name (``fuzzkit.oracles.close`` knows every alias); only three are valid."""
    try:
        text = format_name(dtype)
    except ValueError:
        text = str(dtype)
    if text not in _HALF_SUBNORMAL:
        raise ValueError(f"storage dtype must be float32, float16 or bfloat16, got {dtype!r}")
    return text


def attention_request(keys: np.ndarray, values: np.ndarray, queries: np.ndarray, *,
                      sliding_window: Optional[int] = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One request in float64.

    ``keys``/``values``: ``[seq_len, H_kv, D]`` (positions ``0..seq_len-1``); ``queries``:
    ``[q_len, H, D]`` at positions ``seq_len - q_len ..``.  Returns ``(out, weight, sigma,
    keys_used, vmax)``: ``out`` and ``weight = sum_j p_j |v_j|`` are ``[q_len, H, D]``,
    ``sigma`` (max absolute-score magnitude) is ``[q_len, H]``, ``keys_used`` ``[q_len]``,
    ``vmax = max_j |v_jd|`` over the attended keys ``[q_len, H, D]``.
    """
    k = np.asarray(keys, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    q = np.asarray(queries, dtype=np.float64)
    if k.ndim != 3 or v.shape != k.shape or q.ndim != 3 or q.shape[2] != k.shape[2]:
        raise ValueError(f"expected keys/values [L, H_kv, D] and queries [q, H, D]; got "
                         f"{k.shape}, {v.shape}, {q.shape}")
    seq_len, kv_heads, dim = k.shape
    q_len, heads, _ = q.shape
    if not 1 <= q_len <= seq_len or heads % kv_heads:
        raise ValueError(f"need 1 <= q_len ({q_len}) <= seq_len ({seq_len}) and H ({heads}) a "
                         f"multiple of H_kv ({kv_heads})")
    if sliding_window is not None and sliding_window < 1:
        raise ValueError(f"sliding_window must be >= 1, got {sliding_window}")
    group = heads // kv_heads
    c = 1.0 / math.sqrt(dim)
    kv_of = np.arange(heads) // group
    kh = k[:, kv_of, :]  # [L, H, D]
    vh = v[:, kv_of, :]
    scores = np.einsum("qhd,lhd->qhl", q, kh) * c
    magnitudes = np.einsum("qhd,lhd->qhl", np.abs(q), np.abs(kh)) * c
    pos = seq_len - q_len + np.arange(q_len)
    keys_pos = np.arange(seq_len)
    mask = keys_pos[None, :] <= pos[:, None]
    if sliding_window is not None:
        mask &= keys_pos[None, :] > pos[:, None] - sliding_window
    m3 = mask[:, None, :]
    scores = np.where(m3, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=2, keepdims=True))
    weights /= weights.sum(axis=2, keepdims=True)
    out = np.einsum("qhl,lhd->qhd", weights, vh)
    weight = np.einsum("qhl,lhd->qhd", weights, np.abs(vh))
    sigma = np.where(m3, magnitudes, 0.0).max(axis=2)
    vmax = np.where(m3[..., None], np.abs(vh).transpose(1, 0, 2)[None], 0.0).max(axis=2)
    return out, weight, sigma, mask.sum(axis=1), vmax


def kappa(dtype: Any, head_dim: int, keys_used: Any, sigma: Any) -> np.ndarray:
    """The relative factor ``kappa`` of the module docstring (elementwise in the arrays)."""
    name = _dtype_name(dtype)
    us = unit_roundoff(name)
    n = np.asarray(keys_used, dtype=np.float64)
    s = np.asarray(sigma, dtype=np.float64)
    g = lambda k: (k * V32) / (1.0 - k * V32)  # noqa: E731  (gamma_k(v), elementwise)
    g_score = g(head_dim + 2)
    sigma_t = s * (1.0 + g_score)
    e = g_score * s + 4.0 * V32 * sigma_t + n * 2.0 * V32 / (1.0 - 2.0 * V32)
    g_a = g(3.0 * n + 1.0)
    g_a = (1.0 + g_a) * (1.0 + us) - 1.0  # P rounded to the storage dtype (tensor cores)
    g_l = g(3.0 * n)
    # Score magnitudes beyond ~1e8 (huge queries and keys) make exp(2E) overflow: kappa = inf,
    # the bound is vacuous there -- float32 scores that large carry absolute errors beyond 1.
    with np.errstate(over="ignore"):
        x_hi = np.exp(2 * e) * (1 + g_a) * (1 + 2 * V32) * (1 + 2 * us) / (1 - g_l)
    x_lo = np.exp(-2 * e) * (1 - g_a) * (1 - 2 * V32) * (1 - 2 * us) / (1 + g_l)
    return np.maximum(x_hi - 1.0, 1.0 - x_lo)


@dataclasses.dataclass(frozen=True)
class Reference:
    """Float64 attention of a batch plus what the error bound needs, row-aligned with
    ``query`` (``[T_total, H, D]`` / ``[T_total, H]`` / ``[T_total]``)."""

    out: np.ndarray
    weight: np.ndarray
    sigma: np.ndarray
    keys_used: np.ndarray
    vmax: np.ndarray
    head_dim: int

    def underflow(self, dtype: Any) -> np.ndarray:
        """``U_d`` of the module docstring."""
        h = _HALF_SUBNORMAL[_dtype_name(dtype)]
        n = self.keys_used.astype(np.float64)[:, None, None]
        flushed = (3.0 * n + 1.0) * 2.0**-126  # subnormal products and sums flushed (FTZ)
        return 2.0 * n * (2.0**-126 + h) * self.vmax + flushed

    def kappa(self, dtype: Any) -> np.ndarray:
        """``kappa`` per row ``[T_total, H]``."""
        return kappa(dtype, self.head_dim, self.keys_used[:, None], self.sigma)

    def bound(self, dtype: Any) -> np.ndarray:
        """The derived elementwise bound ``kappa * W + U``."""
        return self.kappa(dtype)[..., None] * self.weight + self.underflow(dtype)

    def close_arguments(self, dtype: Any) -> dict[str, Any]:
        """Keyword arguments for :func:`fuzzkit.oracles.close` (with ``expected=self.out``) whose bound
        dominates :meth:`bound` (see the module docstring)."""
        name = _dtype_name(dtype)
        k_max = float(self.kappa(name).max()) if self.out.size else 1.0
        return {
            "dtype": name,
            "reduction_length": 0,
            "magnitude": self.weight + self.underflow(name) / k_max,
            "factor": k_max / gamma(3, unit_roundoff(name)),
        }

    def close_bound(self, dtype: Any) -> np.ndarray:
        """The bound :func:`fuzzkit.oracles.close` applies with :meth:`close_arguments`."""
        args = self.close_arguments(dtype)
        u = unit_roundoff(args["dtype"])
        return args["factor"] * (gamma(3, u) * args["magnitude"]
                                 + 3 * smallest_normal(args["dtype"]))

    def check(self, actual: Any, dtype: Optional[Any] = None,
              name: str = "attention") -> Optional[Failure]:
        """``close`` of ``actual`` (NumPy or torch, ``[T_total, H, D]``) against :attr:`out`."""
        actual, inferred = _to_numpy(actual)
        return close(self.out, actual, name=name, **self.close_arguments(dtype or inferred))


def _to_numpy(x: Any) -> tuple[np.ndarray, str]:
    if hasattr(x, "detach"):  # torch
        name = _dtype_name(x.dtype)
        return x.detach().float().cpu().numpy(), name
    arr = np.asarray(x)
    return arr, _dtype_name(arr.dtype)


def reference_attention(keys: Sequence[np.ndarray], values: Sequence[np.ndarray],
                        query: np.ndarray, query_start_loc: Sequence[int], *,
                        sliding_window: Optional[int] = None) -> Reference:
    """Batch reference: request ``r`` has K/V ``keys[r]``, ``values[r]`` (``[seq_len_r, H_kv,
    D]``) and the packed query rows ``query[query_start_loc[r] : query_start_loc[r+1]]``."""
    query = np.asarray(query, dtype=np.float64)
    starts = [int(x) for x in query_start_loc]
    if len(starts) != len(keys) + 1 or len(values) != len(keys):
        raise ValueError("need one K/V sequence per request and len(query_start_loc) == R + 1")
    parts = [attention_request(keys[r], values[r], query[starts[r]:starts[r + 1]],
                               sliding_window=sliding_window) for r in range(len(keys))]
    cat = lambda i: np.concatenate([p[i] for p in parts], axis=0)  # noqa: E731
    if not parts:
        empty = np.zeros((0,) + query.shape[1:])
        return Reference(empty, empty, np.zeros(query.shape[:2]), np.zeros(0, np.int64), empty,
                         query.shape[-1])
    return Reference(cat(0), cat(1), cat(2), cat(3), cat(4), query.shape[-1])


def check(queries: Any, keys: Any, values: Any, actual: Any, *,
          sliding_window: Optional[int] = None, dtype: Optional[Any] = None,
          name: str = "attention") -> Optional[Failure]:
    """One request: ``queries [q_len, H, D]`` (the last ``q_len`` positions), ``keys`` /
    ``values [seq_len, H_kv, D]``, the kernel's ``actual [q_len, H, D]``.  ``dtype`` (the
    storage dtype) defaults to ``actual``'s.  ``None`` when within the bound."""
    q, _ = _to_numpy(queries)
    k, _ = _to_numpy(keys)
    v, _ = _to_numpy(values)
    ref = reference_attention([k], [v], q, [0, q.shape[0]], sliding_window=sliding_window)
    return ref.check(actual, dtype, name=name)


__all__ = ["Reference", "attention_request", "check", "kappa", "reference_attention"]
