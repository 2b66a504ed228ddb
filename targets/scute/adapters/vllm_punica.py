"""The ``vllm-punica`` implementation of ``scute``: vLLM's own multi-LoRA Punica Triton kernels.

What runs.  The LoRA path of every token goes through the real ``lora_shrink`` and
``lora_expand`` of the pinned vLLM (:data:`fuzzkit.targets.engine_pins.VLLM`,
``vllm/lora/ops/triton_ops/{lora_shrink_op,lora_expand_op,kernel_utils,utils,
lora_kernel_metadata}.py``), with the batch metadata of vLLM's own ``LoRAKernelMeta``
(``prepare_tensors`` on the token -> slot mapping, ``-1`` = no LoRA; ``meta_args`` with
``specialize_active_lora=True``: the grid's LoRA axis is the batch's active LoRAs, ``-1``
included, not ``max_loras + 1`` -- the same kernels, fewer idle programs), called as
``PunicaWrapperGPU.add_lora_linear`` calls them: a float32 ``buffer[slices, tokens, R]`` for
the shrink (zeroed by the op), then the expand with ``add_inputs=True``.  Weights are laid out
as vLLM stacks them: ``lora_a_stacked`` ``(max_loras, 1, R, K)`` and one ``lora_b_stacked``
``(max_loras, 1, n_i, R)`` per output slice, each adapter zero-padded to the batch's largest
rank ``R`` (vLLM's ``max_lora_rank``); an identity slot is a zeroed stack entry, as vLLM resets
a free slot.  The base layer
``x·W0ᵀ + b0`` is not vLLM's business: it is computed here (float64, rounded to float32) and the
LoRA delta is added to it.

Output slices (:func:`slices`).  vLLM's merged projections (QKV, gate/up) run one shrink and one
expand over several output slices.  The case's single layer is cut into slices from ``Nout``:
three equal ones when ``Nout % 3 == 0`` (``SAME_STRIDE``), a GQA-like (q, k, v) split with
``q != k = v`` when ``Nout % 3 == 1`` (per-slice strides and hidden sizes), else one slice.
Each slice has its own copy of ``A`` and the rows of ``B`` for its columns, which is the same
layer.  vLLM's multi-slice expand reinterprets each ``lora_b`` pointer as the *output's* element
type (``tl.load(lora_ptr + slice_id).to(tl.pointer_type(out_ptr.dtype.element_ty))``), so there
the expand writes into a zeroed output of the weights' dtype (what vLLM's layers pass) and the
base is added afterwards; a single slice expands straight into the float32 base.

Scaling.  vLLM folds each adapter's ``alpha / r`` into ``lora_b`` at load time
(``LoRALayerWeights.optimize``) and passes ``scale = 1.0``.  Folding rounds ``scale·B`` to the
weight dtype, a rounding the scute contract does not have, so an adapter is folded only when that
product is exact (and ``|scale| >= 1``, :func:`_folded`); the others are grouped by scale and
each group gets its own shrink/expand pair with ``scaling`` set (the tokens of the other groups
are ``-1`` in that launch).

What vLLM's kernels cannot express (:func:`inexpressible`, drawn away by :func:`cases` and
counted): storage dtype float32 (both ops assert float16/bfloat16 weights); bfloat16 under
``TRITON_INTERPRET=1`` (the interpreter's ``tl.dot`` multiplies bfloat16's uint16 bit patterns;
natively bfloat16 runs); and every adapter method but LoRA (with rsLoRA's scale) and identity --
Punica has no DoRA magnitude, VeRA vectors, OFT/BOFT rotation or IA3 scale.  :func:`cases`
redraws a drawn case's other slots as LoRA adapters with the scute strategy's own adapter drawing
(counted per method in :data:`SKIPPED`; a batch of only LoRAs is what Punica serves) and turns a
float32 case (or an interpreted bfloat16 one) into float16 by powers of two, then re-fits it; a
saved case it cannot express raises :class:`fuzzkit.target.Unsupported` (never a silent pass).

Precision (:func:`precision_gap`, the protocol gap).  vLLM's expand rounds twice to the weight
dtype where the scute slot form keeps float32: the float32 shrink buffer is cast to the weight
dtype before the ``tl.dot`` (``CAST_TYPE``) and the accumulated delta is cast to it before it is
added (``tiled_c = accumulator.to(lora dtype)``).  Each costs up to ``u_s`` relative, where the
contract's bound has only float32's ``γ_n`` for the LoRA path; this implementation returns the
float32 sum unrounded, which leaves it the contract's output rounding ``u_s·|y|``.  A case is
judged where vLLM's two roundings fit in that budget for every LoRA token and output -- LoRA
deltas not larger than about half the output, as trained adapters are -- and where the rounded
values stay inside the weight dtype's range (vLLM has no float32 fallback: an intermediate above
65504 is ``inf`` in float16).  :func:`cases` scales each adapter's ``alpha`` by a power of two
into that range when it can and turns the rest away (counted).  The cases the target's properties
derive from an admitted one (token subsets, zero-initialised B, merged weights run as base
tokens) stay admitted: the criterion is per token and shrinks with B.

Tiles (:func:`thresholds`).  ``BLOCK_M/N/K`` and ``SPLIT_K`` come from vLLM's
``get_lora_op_configs``.  Natively that is vLLM's default table (or the user's tuned one).  Under
the interpreter every program costs milliseconds (vLLM's default shrink launches ``SPLIT_K = 64``
programs per tile), so the interpreter gets its own tuned table through vLLM's tuned-config hook
``load_lora_op_config`` (which looks the table up by GPU name, which the interpreter has not):
:data:`INTERPRETED_CONFIGS`, small tiles that cheap cases cross.  The thresholds are read back
from ``get_lora_op_configs`` itself.

Shims (installed only while vLLM's modules, or a mutant's edited copy of one, are imported; then
``sys.modules`` gets back what it held, so other vLLM adapters keep their own stand-ins):

* ``vllm.triton_utils`` -- re-exports the real ``triton`` / ``triton.language`` (vLLM's module
  wraps them with placeholders for machines without Triton);
* ``vllm.platforms`` -- ``current_platform`` answering ``is_cuda`` / ``is_device_capability`` /
  ``has_device_capability`` from torch (PDL and the SM90 ``NUM_STAGES`` clamp ask);
* ``vllm.logger`` -- ``init_logger`` returning a :mod:`logging` logger with the ``*_once``
  methods;
* ``vllm.utils.torch_utils`` -- ``direct_register_custom_op`` is a no-op, so
  ``torch.ops.vllm.lora_shrink`` does not exist and the modules bind ``lora_shrink =
  _lora_shrink`` (their own ``except AttributeError`` branch): the ops are plain Python functions
  here, not torch custom ops; ``async_tensor_h2d`` is ``torch.tensor(data, dtype, device)``
  (vLLM stages through pinned memory).

``vllm.envs`` (environment variables) and ``vllm.utils.math_utils`` are vLLM's own.  vLLM caches
the per-slice pointer/stride tables by the weights' ``data_ptr`` (``_LORA_A_PTR_DICT``,
``_LORA_B_PTR_DICT``), valid in vLLM because its stacked weights live for the process; here every
case allocates new weights and freed addresses are reused, so the caches are cleared before each
launch (a stale entry is vLLM #50820's bug class, not this case's).  With vLLM installed
(:func:`fuzzkit.wheelsrc.installed`) its modules are used as they are.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import types
from typing import Any, Iterator, Mapping

import numpy as np

from fuzzkit import triton_support
from fuzzkit.target import Unsupported, count_unsupported
from fuzzkit.targets import vllm_shims

OPS = "vllm.lora.ops.triton_ops"
SHRINK = f"{OPS}.lora_shrink_op"
EXPAND = f"{OPS}.lora_expand_op"
META = f"{OPS}.lora_kernel_metadata"
UTILS = f"{OPS}.utils"
#: Wheel members extracted (the five Punica modules and the two real helpers they import).
MEMBERS = tuple(f"vllm/lora/ops/triton_ops/{name}.py" for name in (
    "kernel_utils", "utils", "lora_shrink_op", "lora_expand_op", "lora_kernel_metadata")) + (
    "vllm/envs.py", "vllm/utils/math_utils.py")
#: Packages whose ``__init__`` must not run (vLLM's imports the whole engine; triton_ops' the
#: fused-MoE and fp8 kernels).
BARE = ("vllm", "vllm.utils", "vllm.lora", "vllm.lora.ops", OPS)
#: Modules registered only while importing (the shims, and vLLM's own envs/math helpers, which
#: another adapter may have shimmed differently) -- ``vllm.utils`` too: bare here, it must not
#: stay in place of the real package the KV-manager adapter imports (its ``__init__`` runs there).
SCOPED = ("vllm.triton_utils", "vllm.platforms", "vllm.logger", "vllm.utils.torch_utils",
          "vllm.envs", "vllm.utils.math_utils", "vllm.utils")

#: The interpreter's tuned table (vLLM's ``config[max_loras][num_slices][m][k][n]`` layout; one
#: entry per level, so every lookup lands on it): tiles small enough that a case of a few dozen
#: tokens, K and Nout up to ~70 and ranks up to ~20 takes every loop's second step.
INTERPRETED_CONFIGS = {
    "shrink": {"block_m": 16, "block_n": 16, "block_k": 16, "split_k": 2, "group_size_m": 2,
               "num_warps": 4, "num_ctas": 1, "num_stages": 2, "max_nreg": None},
    "expand": {"block_m": 16, "block_n": 16, "block_k": 16, "num_warps": 4, "num_ctas": 1,
               "num_stages": 2, "max_nreg": None},
}
#: Largest sizes worth drawing (interpreted / native).
CAPS_INTERPRETED = {"k": 72, "nout": 72, "tokens": 24, "rank": 20}
CAPS_NATIVE = {"k": 300, "nout": 160, "tokens": 80, "rank": 40}

_TORCH_DTYPES = ("float16", "bfloat16")
_LOADED: dict[str, types.ModuleType] = {}


# ----------------------------------------------------------------------------- loading


def _direct_register_custom_op(*args: Any, **kwargs: Any) -> None:
    """No registration: the modules fall back to the plain function (module docstring)."""


def _async_tensor_h2d(data: Any, dtype: Any = None, device: Any = None, **_: Any) -> Any:
    import torch

    return torch.tensor(data, dtype=dtype, device=device)


def _shims() -> dict[str, types.ModuleType]:
    import triton
    import triton.language as tl

    from fuzzkit import wheelsrc

    return {
        "vllm.triton_utils": wheelsrc.shim("vllm.triton_utils", triton=triton, tl=tl,
                                           HAS_TRITON=True),
        "vllm.platforms": vllm_shims.platforms_module(),
        "vllm.logger": vllm_shims.logger_module(),
        "vllm.utils.torch_utils": wheelsrc.shim(
            "vllm.utils.torch_utils", direct_register_custom_op=_direct_register_custom_op,
            async_tensor_h2d=_async_tensor_h2d),
    }


@contextlib.contextmanager
def engine_imports() -> Iterator[None]:
    """While active, vLLM's Punica modules (and a mutant's edited copy of one) import with the
    shims; on exit the scoped names give way to what ``sys.modules`` held before."""
    from fuzzkit import wheelsrc
    from fuzzkit.targets.engine_pins import VLLM

    if wheelsrc.installed("vllm"):  # pragma: no cover - a machine with vLLM installed
        yield
        return
    root = wheelsrc.extract(VLLM, MEMBERS)
    with wheelsrc.scoped(SCOPED):
        wheelsrc.load(root, ("vllm.envs", "vllm.utils.math_utils"), BARE, _shims())
        yield


def _interpreted_table(op_type: str, add_inputs: bool | None) -> dict[str, Any]:
    """vLLM's ``load_lora_op_config`` under the interpreter: :data:`INTERPRETED_CONFIGS` in the
    tuned-table layout ``[max_loras][num_slices][m][k][n]``."""
    leaf = {"1": {"1": {"1": dict(INTERPRETED_CONFIGS[op_type])}}}
    return {"1": {str(s): leaf for s in range(1, 4)}}


def modules() -> dict[str, types.ModuleType]:
    """``{"shrink", "expand", "meta", "utils"}``: the pinned vLLM's Punica modules."""
    if not _LOADED:
        triton_support.prepare()
        with engine_imports():
            for key, name in (("shrink", SHRINK), ("expand", EXPAND), ("meta", META),
                              ("utils", UTILS)):
                _LOADED[key] = importlib.import_module(name)
        if triton_support.interpreted():
            _LOADED["utils"].load_lora_op_config = _interpreted_table
    return _LOADED


def __getattr__(name: str) -> Any:
    """``shrink_op`` / ``expand_op`` / ``meta_module`` / ``utils_module``: the loaded vLLM
    modules, so that mutants can name them without importing vLLM before one is applied."""
    keys = {"shrink_op": "shrink", "expand_op": "expand", "meta_module": "meta",
            "utils_module": "utils"}
    if name in keys:
        return modules()[keys[name]]
    raise AttributeError(name)


def unavailable() -> str | None:
    """One line saying why vLLM's Punica kernels cannot run here (no Triton, no wheel), or
    None."""
    from fuzzkit import wheelsrc
    from fuzzkit.targets.engine_pins import VLLM

    return triton_support.unavailable() or wheelsrc.unavailable(VLLM, "vllm", modules)


# ----------------------------------------------------------------------------- tiles


def tile_configs() -> dict[str, dict[str, Any]]:
    """The shrink and expand launch configs vLLM's ``get_lora_op_configs`` picks for a small
    single-slice batch (the table every case here uses: ``batch < 128``)."""
    utils = modules()["utils"]
    return {
        "shrink": utils.get_lora_op_configs("shrink", max_loras=4, batch=16, hidden_size=32,
                                            rank=8, num_slices=1),
        "expand": utils.get_lora_op_configs("expand", max_loras=4, batch=16, hidden_size=32,
                                            rank=8, num_slices=1, add_inputs=True),
        "expand_sliced": utils.get_lora_op_configs("expand", max_loras=4, batch=16,
                                                   hidden_size=32, rank=8, num_slices=3,
                                                   add_inputs=True),
    }


def thresholds() -> tuple[Any, ...]:
    """The Punica kernels' edges as launched here, from vLLM's config getter."""
    from fuzzkit.reach import Threshold

    cfg = tile_configs()
    shrink, expand, sliced = cfg["shrink"], cfg["expand"], cfg["expand_sliced"]
    caps = CAPS_INTERPRETED if triton_support.interpreted() else CAPS_NATIVE
    step_k = int(shrink["block_k"]) * int(shrink["split_k"])
    out = [
        Threshold("k", int(shrink["block_k"]), "lora_shrink: K > BLOCK_K puts work on a "
                  "second split-K program (atomic add of partial sums); a K that BLOCK_K does "
                  "not divide takes mm_k's masked tail", cap=caps["k"]),
        Threshold("rank", int(shrink["block_n"]), "lora_shrink: rank > BLOCK_N launches a "
                  "second column program of the buffer", cap=caps["rank"]),
        Threshold("rank", int(expand["block_k"]), "lora_expand: rank > BLOCK_K takes a second "
                  "K step; a rank it does not divide is not EVEN_K (masked loads)",
                  cap=caps["rank"]),
        Threshold("nout", int(expand["block_n"]), "lora_expand (one slice): Nout > BLOCK_N "
                  "launches a second column program", cap=caps["nout"]),
        Threshold("nout", 3 * int(sliced["block_n"]), "lora_expand (three equal slices): "
                  "Nout > 3·BLOCK_N gives each slice a second column program", cap=caps["nout"]),
    ]
    if step_k <= caps["k"]:
        out.append(Threshold("k", step_k, "lora_shrink: K > BLOCK_K·SPLIT_K takes a second "
                             "iteration of each program's K loop", cap=caps["k"]))
    for mode in ("decode", "prefill"):
        for op, cfg_m in (("lora_shrink", shrink), ("lora_expand", expand)):
            out.append(Threshold(f"{mode}_slot_tokens", int(cfg_m["block_m"]),
                                 f"{op}: more than BLOCK_M tokens of one LoRA take a second "
                                 "M tile (rows gathered through token_indices_sorted_by_lora_"
                                 "ids)", cap=caps["tokens"]))
    merged: dict[tuple[str, int], Any] = {}  # one threshold per edge (shrink and expand may share)
    for t in out:
        key = (t.size, t.value)
        merged[key] = t if key not in merged else Threshold(
            t.size, t.value, f"{merged[key].what}; {t.what}", cap=t.cap)
    return tuple(merged.values())


# ----------------------------------------------------------------------------- the contract


def _scale(adapter: Mapping[str, Any]) -> float:
    from fuzzkit.targets.scute.reference import lora_scale

    return float(lora_scale(adapter))


def inexpressible(inputs: Mapping[str, Any]) -> str | None:
    """Why vLLM's Punica kernels cannot run this case at all, or None (module docstring)."""
    dtype = inputs.get("dtype")
    if dtype not in _TORCH_DTYPES:
        return f"storage dtype {dtype} (Punica's ops take float16/bfloat16 weights only)"
    if dtype == "bfloat16" and triton_support.interpreted():
        return "bfloat16 under TRITON_INTERPRET=1 (the interpreter's tl.dot is wrong on bf16)"
    for i, ad in enumerate(inputs.get("adapters", ())):
        method = ad.get("method") if isinstance(ad, Mapping) else None
        if method not in ("lora", "identity"):
            return f"adapter {i}: {method} (Punica serves plain LoRA only)"
    return None


def precision_gap(inputs: Mapping[str, Any]) -> str | None:
    """Why vLLM's two weight-dtype roundings of the LoRA path (module docstring) may leave the
    scute bound on this case, or None.

    Per LoRA token ``t`` and output ``j``, with ``h = scale·A·x_t`` and ``δ = B·h`` (float64):
    the cast of ``h`` costs ``u_s·Σ_i |B_ji||h_i|``, the cast of ``δ`` ``u_s·|δ_j|`` (each
    ``(1 + 2u_s)`` for the float32 error they round, plus half a subnormal spacing per value
    rounded).  Admitted when that is at most ``0.75·u_s·|y_j|``, the output rounding this
    implementation leaves unspent (the float32 arithmetic stays within the bound's ``γ_n``
    term), and every rounded value is inside half the weight dtype's range."""
    from fuzzkit.targets.scute import checks, ranges

    dtype = str(inputs["dtype"])
    u = checks.U_STORE[dtype]
    eta = checks.storage_eta(dtype)
    limit = ranges.LIMIT_STORE[dtype]
    x = np.asarray(inputs["x"], np.float64)
    w0 = np.asarray(inputs["w0"], np.float64)
    b0 = np.asarray(inputs["b0"], np.float64)
    token_slot = np.asarray(inputs["token_adapter"], np.int64)
    for slot, ad in enumerate(inputs["adapters"]):
        rows = np.nonzero(token_slot == slot)[0]
        if ad["method"] != "lora" or not rows.size:
            continue
        a, b = np.asarray(ad["A"], np.float64), np.asarray(ad["B"], np.float64)
        h = _scale(ad) * (x[rows] @ a.T)  # (T, r)
        delta = h @ b.T  # (T, N)
        spread = np.abs(h) @ np.abs(b).T
        cast = np.abs(x[rows] @ a.T) if _folded(ad, dtype) else np.abs(h)  # what is cast
        if max(float(cast.max(initial=0.0)), float(spread.max(initial=0.0))) > limit:
            return f"adapter {slot}: LoRA intermediate beyond {dtype}'s range (vLLM casts it)"
        y = x[rows] @ w0.T + b0 + delta
        extra = (u * (1 + 2 * u) * (spread + np.abs(delta))
                 + eta * (np.abs(b).sum(axis=1)[None, :] + 1.0))
        if not np.all(extra <= 0.75 * u * np.abs(y)):
            return (f"adapter {slot}: LoRA delta not small against the output (vLLM rounds "
                    f"the shrink and the delta to {dtype})")
    return None


def unsupported(inputs: Mapping[str, Any]) -> str | None:
    """Why this case is outside what ``vllm-punica`` is judged on, or None."""
    return inexpressible(inputs) or precision_gap(inputs)


#: What the ``vllm-punica`` strategy converted (slots redrawn, dtypes changed) or turned away,
#: by reason; only cases turned away are also counted as unsupported (never run).
SKIPPED: collections.Counter[str] = collections.Counter()


def _to_half(case: dict[str, Any]) -> dict[str, Any] | None:
    """The case in float16: every storage array scaled by a power of two into float16's range
    (exact), rounded to it, then re-fitted; None when that leaves the contract."""
    from fuzzkit.targets.scute import checks, pristine
    from fuzzkit.targets.scute.fit import fit

    def half(a: Any) -> np.ndarray:
        v = np.asarray(a, np.float64)
        top = float(np.abs(v).max(initial=0.0))
        if top > checks.FP16_LIMIT:
            v = v * 2.0 ** -int(np.ceil(np.log2(top / checks.FP16_LIMIT)))
        return checks.round_to(v, "float16")

    out = dict(case, dtype="float16", x=half(case["x"]), w0=half(case["w0"]),
               adapters=[dict(ad) for ad in case["adapters"]])
    for ad in out["adapters"]:
        if ad["method"] == "lora":
            ad["A"], ad["B"] = half(ad["A"]), half(ad["B"])
    out = fit(out)
    return out if checks.validate(out, conversion=pristine.slots()) is None else None


def _redrawn(draw: Any, case: dict[str, Any], thresholds: tuple) -> dict[str, Any] | None:
    """A drawn case made expressible: float16 storage where the kernels cannot take the drawn
    dtype (:func:`_to_half`), every slot of another method redrawn as a LoRA adapter by the
    scute strategy's own adapter drawing (counted per method), re-fitted."""
    from hypothesis import strategies as st

    from fuzzkit.targets.scute import checks, pristine, strategies
    from fuzzkit.targets.scute.fit import fit

    out = dict(case, adapters=[dict(ad) for ad in case["adapters"]])
    others = [i for i, ad in enumerate(out["adapters"]) if ad["method"] not in ("lora", "identity")]
    for i in others:
        SKIPPED[f"{out['adapters'][i]['method']} slot redrawn as LoRA"] += 1
        out["adapters"][i] = {"method": "identity"}
    if inexpressible(out) is not None:
        SKIPPED[f"{out['dtype']} case converted to float16"] += 1
        converted = _to_half(out)
        if converted is None:
            return None
        out = converted
    if others:
        nout, k = np.asarray(out["w0"]).shape
        ranks = [np.asarray(ad["A"]).shape[0] for ad in out["adapters"] if ad["method"] == "lora"]
        rank = max(ranks) if ranks else strategies._size(draw, "rank", thresholds, lo=1,
                                                          base=st.integers(1, 8))
        for i in others:
            out["adapters"][i] = strategies._adapter(draw, "lora", k, nout, out["dtype"],
                                                     out["w0"], thresholds, -rank)
        out = fit(out)
        if checks.validate(out, conversion=pristine.slots()) is not None:
            return None
    return out


def _in_precision_range(case: dict[str, Any]) -> dict[str, Any]:
    """Each LoRA's ``alpha`` scaled by a power of two until :func:`precision_gap` admits its
    tokens (kept as drawn when no power does): the edge of the range, drawn often."""
    out = dict(case, adapters=[dict(ad) for ad in case["adapters"]])
    for slot, ad in enumerate(out["adapters"]):
        if ad["method"] != "lora":
            continue
        alone = dict(out, adapters=[a if j == slot else {"method": "identity"}
                                    for j, a in enumerate(out["adapters"])])
        alpha = float(ad["alpha"])
        for shift in range(0, 64, 2):
            ad["alpha"] = alpha * 2.0 ** -shift
            if precision_gap(alone) is None:
                break
        else:
            ad["alpha"] = alpha
    return out


def _punica_cases(thresholds: tuple) -> Any:
    from hypothesis import strategies as st

    from fuzzkit.targets.scute import strategies

    @st.composite
    def draw_case(draw: Any) -> dict[str, Any] | None:
        case = _redrawn(draw, draw(strategies.inputs(thresholds)), thresholds)
        return None if case is None else _in_precision_range(case)

    return draw_case()


def _admit(case: dict[str, Any] | None) -> bool:
    if case is None:
        SKIPPED["float16 conversion left the contract"] += 1
        count_unsupported("vllm-punica: float16 conversion left the contract")
        return False
    reason = unsupported(case)
    if reason is not None:
        key = reason.split(": ", 1)[-1]
        SKIPPED[key] += 1
        count_unsupported(f"vllm-punica: {key}")
    return reason is None


def cases(thresholds: tuple = ()) -> Any:
    """The scute strategy narrowed to what vLLM's Punica kernels serve (:func:`_redrawn`,
    :func:`_in_precision_range`),
    the rest turned away -- counted in :data:`SKIPPED` and as unsupported, never as run."""
    return _punica_cases(tuple(thresholds)).filter(_admit)


# ----------------------------------------------------------------------------- running


def slices(nout: int) -> list[int]:
    """Output slice widths of the layer (module docstring): ``[n, n, n]`` when ``Nout % 3 ==
    0``, GQA-like ``[q, kv, kv]`` with ``q != kv`` when ``Nout % 3 == 1`` and ``Nout >= 4``,
    else ``[Nout]``."""
    if nout >= 3 and nout % 3 == 0:
        return [nout // 3] * 3
    if nout >= 4 and nout % 3 == 1:
        kv = (nout - 1) // 3
        return [nout - 2 * kv, kv, kv]
    return [nout]


def _folded(adapter: Mapping[str, Any], dtype: str) -> bool:
    """Whether vLLM's ``optimize`` fold is used: ``scale·B`` exact in ``dtype`` and ``|scale| >=
    1`` -- a smaller scale folded into B would leave the shrink buffer unscaled, and its cast to
    ``dtype`` could overflow where the scaled one does not (a zero-initialised B folds exactly
    at any scale)."""
    from fuzzkit.targets.scute import checks, ranges

    scale = _scale(adapter)
    folded = scale * np.asarray(adapter["B"], np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(abs(scale) >= 1.0 and np.all(np.abs(folded) <= ranges.LIMIT_STORE[dtype])
                    and np.array_equal(checks.round_to(folded, dtype), folded))


def _groups(inputs: Mapping[str, Any], dtype: str) -> dict[float, dict[int, np.ndarray]]:
    """``scaling -> {slot: B as stacked}``: folded adapters (``scale·B`` exact) and identity
    slots under 1.0 (vLLM's ``optimize``), the others under their own float32 scale."""
    groups: dict[float, dict[int, np.ndarray]] = {}
    nout = np.asarray(inputs["w0"]).shape[0]
    for slot, ad in enumerate(inputs["adapters"]):
        if ad["method"] != "lora":
            groups.setdefault(1.0, {})[slot] = np.zeros((nout, 1))
            continue
        b = np.asarray(ad["B"], np.float64)
        scale = _scale(ad)
        if _folded(ad, dtype):
            groups.setdefault(1.0, {})[slot] = scale * b
        else:
            groups.setdefault(float(np.float32(scale)), {})[slot] = b
    return groups


def _clear_pointer_caches(shrink_op: Any, expand_op: Any) -> None:
    """Empty the ``data_ptr``-keyed tables of the helpers the ops will call (module doc)."""
    for fn, table in ((shrink_op._get_lora_a_ptr, "_LORA_A_PTR_DICT"),
                      (expand_op._get_lora_b_ptr, "_LORA_B_PTR_DICT")):
        cache = getattr(fn, "__globals__", {}).get(table)
        if isinstance(cache, dict):
            cache.clear()


def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs -> {"y": float32 (Ntok, Nout), "bitwise_batch_invariant": False}`` (split-K
    shrink programs add their partial sums atomically, in no fixed order on a GPU)."""
    reason = inexpressible(inputs)
    if reason is not None:
        raise Unsupported(f"vllm-punica cannot express this case: {reason}")
    import torch

    mods = modules()
    shrink_op, expand_op, meta_mod = mods["shrink"], mods["expand"], mods["meta"]
    device = triton_support.device()
    dtype = str(inputs["dtype"])
    tdtype = getattr(torch, dtype)
    x = np.asarray(inputs["x"], np.float64)
    w0 = np.asarray(inputs["w0"], np.float64)
    b0 = np.asarray(inputs["b0"], np.float64)
    token_slot = np.asarray(inputs["token_adapter"], np.int64)
    adapters = inputs["adapters"]
    ntok, k = x.shape
    nout = w0.shape[0]
    widths = slices(nout)
    starts = np.cumsum([0, *widths])
    max_loras = max(1, len(adapters))
    rank = max([1] + [np.asarray(ad["A"]).shape[0] for ad in adapters if ad["method"] == "lora"])

    base = torch.tensor((x @ w0.T + b0).astype(np.float32), device=device)
    x_dev = torch.tensor(x.astype(np.float32), device=device).to(tdtype)
    y = base.clone()
    for scaling, members in _groups(inputs, dtype).items():
        lora_a = torch.zeros((max_loras, 1, rank, k), dtype=tdtype, device=device)
        lora_b = [torch.zeros((max_loras, 1, n, rank), dtype=tdtype, device=device)
                  for n in widths]
        for slot, b in members.items():
            ad = adapters[slot]
            if ad["method"] != "lora":
                continue
            a = np.asarray(ad["A"], np.float32)
            lora_a[slot, 0, : a.shape[0]] = torch.tensor(a, device=device).to(tdtype)
            for i, n in enumerate(widths):
                part = np.asarray(b[starts[i]: starts[i] + n], np.float32)
                lora_b[i][slot, 0, :, : part.shape[1]] = torch.tensor(part, device=device).to(
                    tdtype)
        mapping = np.where(np.isin(token_slot, list(members)), token_slot, -1)
        meta = meta_mod.LoRAKernelMeta.make(max_loras, ntok, device=device)
        meta.prepare_tensors(torch.tensor(mapping, dtype=torch.int32, device=device))
        args = meta.meta_args(ntok, True)
        buffer = torch.empty((len(widths), ntok, rank), dtype=torch.float32, device=device)
        _clear_pointer_caches(shrink_op, expand_op)
        shrink_op.lora_shrink(x_dev, [lora_a.clone() for _ in widths], buffer, *args, scaling)
        if len(widths) == 1:
            expand_op.lora_expand(buffer, lora_b, y, *args, offset_start=0, add_inputs=True)
        else:
            out = torch.zeros((ntok, nout), dtype=tdtype, device=device)
            expand_op.lora_expand(buffer, lora_b, out, *args, offset_start=0, add_inputs=True)
            y = y + out.to(torch.float32)
    return {"y": y.cpu().numpy().astype(np.float32), "bitwise_batch_invariant": False}
