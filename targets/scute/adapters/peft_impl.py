"""The ``peft`` implementation of ``scute``: Hugging Face PEFT's own layers, one adapter at a time.

Usable as ``--impl peft`` (registered on the target) or ``--impl
fuzzkit.targets.scute.adapters.peft_impl:run``.  The point is to judge PEFT itself with the scute oracle,
so nothing of the slot form is used: every slot's adapter dict becomes a ``torch.nn.Linear``
wrapped by ``peft.get_peft_model`` with the matching config (:func:`build`), its weights copied
in, ``eval()``; the tokens of that slot run through it as one (unbatched across adapters) forward
pass; slot -1 tokens run through the bare base ``Linear``.

Precision.  PEFT computes in the dtype of the module it wraps.  The scute contract is "x, W0, T,
A, B in the storage dtype, float32 accumulation, the result rounded to the storage dtype once",
and :func:`fuzzkit.targets.scute.checks.validate` guarantees that every stored value of a case is
exactly representable in its storage dtype.  So the layers run in float32 on those values --
which *is* storage-dtype operands with float32 arithmetic, the precision the case asks for -- and
the output is rounded to the storage dtype at the end.  Running the modules in float16/bfloat16
instead would round every intermediate (``x·Aᵀ``, the LoRA term, the DoRA norm) to the storage
dtype, arithmetic the oracle's bound does not describe; those runs would be judged against a
contract they do not implement.  PEFT's own float32 arithmetic differs from the slot form (DoRA's
norm is taken in float32 on the fly and its delta is added to the base output, BOFT subtracts and
re-adds the bias, rotations are built in float32 from Q): inside the declared range below, each
difference is covered by the bound's float32 term (the argument is in each gap's docstring;
the campaigns are the evidence); outside it the case is not drawn.

What PEFT cannot express (:func:`unsupported`, the implementation's capability declaration):
BOFT with more than one butterfly factor (PEFT forces one factor unless its CUDA extension
``fbd_cuda`` builds, which it cannot on a CPU machine) and BOFT with the Cayley-Neumann series
(PEFT's BOFT has only the exact Cayley map).  Nor is it judged where PEFT's float32 arithmetic
leaves the slot-form bound for reasons of range, not bugs (:func:`_dora_gap`,
:func:`_rotation_gap`).  The implementation's strategy never draws such a case (:func:`cases`),
counting what it turns away (:func:`fuzzkit.target.count_unsupported`: reports show the count
apart from the cases run); a saved case PEFT cannot build raises
:class:`fuzzkit.target.Unsupported` here -- ``replay`` says it was not run, never a silent
pass.  (Cases derived from a drawn one by the target's properties -- zero-initialised adapters,
token subsets -- stay inside the declared range.)
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import warnings
from typing import Any, Iterator, Mapping

import numpy as np

from fuzzkit.target import Unsupported, count_unsupported

_ROUND = {"float32": None, "float16": "float16", "bfloat16": "bfloat16"}


def unavailable() -> str | None:
    """One line when PEFT (or torch) cannot be imported here, else None."""
    for name in ("torch", "peft"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed (pip install peft)"
    return None


def _room(k: int, r: int = 1) -> float:
    """``n`` of the oracle's ``γ_n`` term for a layer of K inputs and rank r (``2K + r + 8``,
    :func:`fuzzkit.targets.scute.checks.error_bound`; r <= the case's padded rank, so this is the
    smaller, stricter value)."""
    return float(2 * k + r + 8)


#: DoRA's squared row norms must lie in this range (float32: no overflow, no subnormals).
DORA_SQUARES = (2.0 ** -100, float(np.finfo(np.float32).max) / 2)


def _dora_gap(ad: Mapping[str, Any], inputs: Mapping[str, Any], x: np.ndarray) -> str | None:
    """Why PEFT's DoRA arithmetic is outside the slot-form bound for this adapter on its tokens
    ``x``, or None.

    PEFT squares ``W' = W0 + scale·B·A`` in the layer's dtype (``torch.linalg.norm``), so a row
    whose sum of squares leaves float32's normal range gives an inf / imprecise norm -- a value
    range, not a bug.  And PEFT adds the DoRA delta to the base output, ``y = (W0x + b0) +
    (g - 1)·((W0x + b0) - b0) + g·scale·B·A·x``: the round trip costs about
    ``u·((3 + |g|)·|W0x| + (2 + |g|)·|b0|)``, while the slot form scales W0x by g, so its bound
    is ``γ_n·(|g|·|W0||x| + |b0| + ...)`` (``n = 2K + r + 8``).  For ``g`` near 1 the bound
    covers it; for ``|g| << 1`` with a large ``|W0x|`` it does not.  PEFT also takes g from a
    float32 norm of ``W'`` (the slot form: float64), whose relative error grows with the
    cancellation ``‖|W0| + |scale·B·A|‖ / ‖W'‖``.  Admitted: every token and output where these
    extra errors are at most half the bound's float32 term."""
    from fuzzkit.targets.scute.reference import lora_scale

    a, b = np.asarray(ad["A"], np.float64), np.asarray(ad["B"], np.float64)
    if float((np.abs(b) @ np.abs(a)).max()) > DORA_SQUARES[1]:
        return "DoRA's B·A outside float32's range (PEFT forms it for the norm, even at alpha 0)"
    w0 = np.asarray(inputs["w0"], np.float64)
    merged = w0 + lora_scale(ad) * (b @ a)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        squares = np.sum(merged * merged, axis=1)
        base = np.sum(w0 * w0, axis=1)  # W' of the zero-initialised adapter (a property runs it)
        for sq in (squares, base):
            if not (sq.min() >= DORA_SQUARES[0] and sq.max() <= DORA_SQUARES[1]):
                return "DoRA row norm squared outside float32's normal range (PEFT squares W')"
        g = np.abs(np.asarray(ad["magnitude"], np.float64) / np.sqrt(squares))
    if not x.size:
        return None
    b0 = np.abs(np.asarray(inputs["b0"], np.float64))
    k = a.shape[1]
    scale = abs(lora_scale(ad))
    # |W'| as float32 forms it, and how much its row norm can lose to cancellation
    spread = np.abs(w0) + scale * (np.abs(b) @ np.abs(a))
    cond = np.sqrt(np.sum(spread * spread, axis=1) / squares)
    paths = np.abs(x) @ np.abs(w0).T + scale * ((np.abs(x) @ np.abs(a).T) @ np.abs(b).T)
    extra = ((3 + g) * np.abs(x @ w0.T) + (2 + g) * b0      # the base output's round trip
             + g * (k + 2 + cond) * paths                  # g from a float32 norm
             # PEFT multiplies g·(B·A·x) before scaling: that product may land in float32's
             # subnormals (half a spacing, 2^-150, per rounding) and then be scaled up
             + 4.0 * 2.0**-150 * scale / 2.0**-24)
    allowed = 0.5 * _room(k, a.shape[0]) * (g * paths + b0)
    if not np.all(extra <= allowed):
        return "DoRA base-output cancellation beyond the bound (PEFT's g-1 form, |g| << 1)"
    return None


#: Largest ‖Q_i‖_∞ (max absolute row sum of a block) for which PEFT's float32 rotation is
#: inside the slot-form bound.
Q_NORM = 1.0


def _rotation_gap(ad: Mapping[str, Any]) -> str | None:
    """Why PEFT's OFT/BOFT rotation arithmetic is outside the slot-form bound, or None.

    The slot form builds each rotation T once in float64 and stores it (one storage rounding,
    ``c·u_s`` in the bound); PEFT rebuilds it in float32 on every forward -- the Cayley-Neumann
    series from float32 powers of Q (error ``~n·u·Σ|2Q^j|``, unbounded next to ``|T|`` once the
    powers grow and cancel) or an LU solve of ``I + Q`` (error ``~b·κ(I + Q)·u``; it overflows to
    NaN for ``|Q|`` near float32's largest value).  With every block's ``‖Q_i‖_∞ <= 1`` every
    power of Q is no larger than I and ``κ(I + Q) <= 2``, so both stay within a few ``u·|T|``,
    inside the bound's float32 term (measured: nothing outside the bound over thousands of cases
    even at limits up to 16; the failures seen had ``|Q|`` from 1e20 to 3e38).  Larger Q is
    float32's range, not a PEFT bug; real OFT/BOFT Q start at 0 and stay small."""
    q = np.abs(np.asarray(ad["Q"], np.float64))
    if q.size and float(q.sum(axis=-1).max()) > Q_NORM:
        return (f"{ad['method'].upper()} rotation with a block's ‖Q‖_∞ > {Q_NORM} (PEFT builds "
                "it in float32)")
    if ad["method"] == "boft":
        # PEFT scales ((W0·xR + b0) - b0)·boft_s + b0: the bias round trip costs ~2u·|b0|·|s|,
        # which the bound's γ_n·|b0| covers for |s| <= n/2 - 1
        s = np.abs(np.asarray(ad["boft_s"], np.float64))
        top = _room(int(np.asarray(ad["Q"]).shape[1] * int(ad["block_size"]))) / 2 - 1
        if s.size and float(s.max()) > top:
            return "BOFT |boft_s| > n/2 - 1 (PEFT's bias round trip)"
    return None


def inexpressible(inputs: Mapping[str, Any]) -> str | None:
    """Why PEFT cannot build an adapter of this case at all (a BOFT variant it lacks), or None."""
    for i, ad in enumerate(inputs.get("adapters", ())):
        if not isinstance(ad, Mapping) or ad.get("method") != "boft":
            continue
        factors = np.asarray(ad.get("Q", np.zeros((1,)))).shape[0]
        if factors > 1:
            return (f"adapter {i}: BOFT with {factors} butterfly factors (PEFT runs one without "
                    "its CUDA extension fbd_cuda)")
        if ad.get("cayley", "exact") != "exact":
            return f"adapter {i}: BOFT with the Cayley-Neumann series (PEFT's BOFT is exact only)"
    return None


def unsupported(inputs: Mapping[str, Any]) -> str | None:
    """Why this case is outside what the ``peft`` implementation is judged on: an adapter PEFT
    cannot build (:func:`inexpressible`), or values where PEFT's float32 arithmetic leaves the
    slot-form bound (:func:`_dora_gap`, :func:`_rotation_gap`), or None."""
    reason = inexpressible(inputs)
    if reason is not None:
        return reason
    token_slot = np.asarray(inputs.get("token_adapter", ()), np.int64)
    for i, ad in enumerate(inputs.get("adapters", ())):
        if isinstance(ad, Mapping) and ad.get("method") == "dora":
            x = np.asarray(inputs["x"], np.float64)[token_slot == i]
            gap = _dora_gap(ad, inputs, x)
            if gap is not None:
                return f"adapter {i}: {gap}"
        if isinstance(ad, Mapping) and ad.get("method") in ("oft", "boft"):
            gap = _rotation_gap(ad)
            if gap is not None:
                return f"adapter {i}: {gap}"
    return None


def _admit(inputs: Mapping[str, Any]) -> bool:
    reason = unsupported(inputs)
    if reason is not None:
        count_unsupported(f"peft: {reason.split(': ', 1)[1]}")
    return reason is None


def _rotations_in_range(case: dict[str, Any]) -> dict[str, Any]:
    """The case with each OFT/BOFT ``Q`` scaled by a power of two (exact, keeps it skew) into
    PEFT's float32 rotation range ``‖Q_i‖_∞ <= Q_NORM`` -- so that rotations at the edge of that
    range are drawn often instead of turned away; kept only if the case stays valid."""
    from fuzzkit.targets.scute import checks

    out = dict(case, adapters=[dict(ad) for ad in case["adapters"]])
    changed = False
    for ad in out["adapters"]:
        if ad.get("method") not in ("oft", "boft"):
            continue
        q = np.asarray(ad["Q"], np.float32)
        norm = float(np.abs(q.astype(np.float64)).sum(axis=-1).max()) if q.size else 0.0
        if norm > Q_NORM:
            ad["Q"] = q * np.float32(2.0 ** -int(np.ceil(np.log2(norm / Q_NORM))))
            changed = True
    return out if changed and checks.validate(out) is None else case


def cases(thresholds: tuple = ()) -> Any:
    """The scute strategy narrowed to the cases PEFT can express: rotations scaled into PEFT's
    range (:func:`_rotations_in_range`), the rest of what it cannot express turned away --
    counted by :func:`fuzzkit.target.count_unsupported`, and by Hypothesis as invalid, never as
    run."""
    from fuzzkit.targets.scute import strategies

    return strategies.inputs(thresholds).map(_rotations_in_range).filter(_admit)


class _Net:
    """Builds the module tree PEFT wraps: ``lin`` (the layer under test) and, for VeRA only,
    ``big`` -- a second Linear whose sizes make PEFT allocate the shared ``vera_A``/``vera_B`` at
    the case's ``(r, Kmax)`` / ``(Nmax, r)`` (PEFT sizes them to the largest targeted layer)."""

    @staticmethod
    def make(k: int, nout: int, big: tuple[int, int] | None) -> Any:
        import torch

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lin = torch.nn.Linear(k, nout)
                if big is not None:
                    self.big = torch.nn.Linear(*big)

            def forward(self, x: Any) -> Any:
                return self.lin(x)

        return Net()


def _config(adapter: Mapping[str, Any], k: int, nout: int) -> tuple[Any, tuple | None]:
    """The PEFT config for ``adapter`` and the extra layer's (in, out) sizes, if any."""
    import peft

    method = adapter["method"]
    if method in ("lora", "dora"):
        return peft.LoraConfig(r=int(np.asarray(adapter["A"]).shape[0]),
                               lora_alpha=float(adapter["alpha"]), target_modules=["lin"],
                               lora_dropout=0.0, use_rslora=bool(adapter.get("rslora", False)),
                               use_dora=method == "dora", init_lora_weights=False), None
    if method == "vera":
        a, b = np.asarray(adapter["A_shared"]), np.asarray(adapter["B_shared"])
        return (peft.VeraConfig(r=int(a.shape[0]), target_modules=["lin", "big"],
                                vera_dropout=0.0), (int(a.shape[1]), int(b.shape[0])))
    if method == "oft":
        return peft.OFTConfig(r=0, oft_block_size=int(adapter["block_size"]),
                              target_modules=["lin"], module_dropout=0.0,
                              use_cayley_neumann=adapter.get("cayley", "exact") == "neumann",
                              num_cayley_neumann_terms=int(adapter.get("neumann_terms", 5))), None
    if method == "boft":
        return peft.BOFTConfig(boft_block_size=int(adapter["block_size"]),
                               boft_n_butterfly_factor=1, target_modules=["lin"],
                               boft_dropout=0.0), None
    if method == "ia3":
        ff = adapter["placement"] == "ff"
        return peft.IA3Config(target_modules=["lin"], feedforward_modules=["lin"] if ff else [],
                              init_ia3_weights=True), None
    raise ValueError(f"no PEFT config for method {method!r}")


def _load(lin: Any, adapter: Mapping[str, Any], k: int, nout: int, to: Any) -> None:
    """Copy the adapter dict's parameters into PEFT's ``default`` adapter of ``lin``."""
    import torch

    method = adapter["method"]
    with torch.no_grad():
        if method in ("lora", "dora"):
            lin.lora_A["default"].weight.copy_(to(adapter["A"]))
            lin.lora_B["default"].weight.copy_(to(adapter["B"]))
            if method == "dora":
                lin.lora_magnitude_vector["default"].weight.copy_(to(adapter["magnitude"]))
        elif method == "vera":
            lin.vera_A["default"].copy_(to(adapter["A_shared"]))
            lin.vera_B["default"].copy_(to(adapter["B_shared"]))
            lin.vera_lambda_d["default"].copy_(to(adapter["lambda_d"]))
            lin.vera_lambda_b["default"].copy_(to(adapter["lambda_b"]))
        elif method == "oft":
            bs = int(adapter["block_size"])
            rows, cols = np.triu_indices(bs, 1)
            lin.oft_R["default"].weight.copy_(to(np.asarray(adapter["Q"])[:, rows, cols]))
        elif method == "boft":
            lin.boft_R["default"].copy_(to(adapter["Q"]))
            lin.boft_s["default"].copy_(to(adapter["boft_s"]).reshape(-1, 1))
        elif method == "ia3":
            shape = (1, k) if adapter["placement"] == "ff" else (nout, 1)
            lin.ia3_l["default"].copy_(to(adapter["l"]).reshape(shape))


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """Put ``os.environ`` back as it was.  PEFT's BOFT layer tries to build its CUDA extension
    inside its own ``patch_environment(CC="gcc", CXX="gcc")``, which restores nothing when the
    build raises (no ``finally``): on a machine without CUDA every BOFT model left ``CXX=gcc``
    in the process, and every later compiler -- Inductor's C++ kernels in the same process and
    in every child it starts -- linked without libstdc++ (undefined ``basic_ostringstream``
    symbols: false alarms of the compiler target, in the test suite and in mixed campaigns)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


def build(adapter: Mapping[str, Any] | None, w0: np.ndarray, b0: np.ndarray,
          dtype: Any = None) -> Any:
    """A callable ``x -> y`` running ``adapter`` (None or identity: the bare base layer) through
    PEFT's own wrapped ``Linear`` with base weight ``w0``/bias ``b0``, in torch ``dtype``
    (default float32), in eval mode.  Built afresh per call, so that a patch of PEFT's
    construction code (a mutant) always takes effect."""
    import torch

    dtype = torch.float32 if dtype is None else dtype
    nout, k = np.asarray(w0).shape

    def to(a: Any) -> Any:
        return torch.as_tensor(np.asarray(a, np.float64)).to(dtype)

    if adapter is None or adapter["method"] == "identity":
        base = torch.nn.Linear(k, nout).to(dtype)
        with torch.no_grad():
            base.weight.copy_(to(w0))
            base.bias.copy_(to(b0))
        return base.eval()
    import peft

    config, big = _config(adapter, k, nout)
    with warnings.catch_warnings(), _environment_kept():
        warnings.simplefilter("ignore")  # PEFT warns about fbd_cuda, ranks, dropout, ...
        model = peft.get_peft_model(_Net.make(k, nout, big), config)
    model = model.to(dtype)
    lin = model.base_model.model.lin
    with torch.no_grad():
        lin.base_layer.weight.copy_(to(w0))
        lin.base_layer.bias.copy_(to(b0))
    _load(lin, adapter, k, nout, to)
    return model.eval()


def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Every token through its slot's PEFT layer (tokens grouped by slot, one forward per
    slot), the result rounded to the storage dtype once; outputs as the scute target expects."""
    import torch

    reason = inexpressible(inputs)
    if reason is not None:
        raise Unsupported(f"cannot express this case: {reason}")
    x = torch.as_tensor(np.asarray(inputs["x"], np.float32))
    w0 = np.asarray(inputs["w0"], np.float32)
    b0 = np.asarray(inputs["b0"], np.float32)
    token_slot = np.asarray(inputs["token_adapter"], np.int64)
    adapters = inputs["adapters"]
    y = torch.zeros((x.shape[0], w0.shape[0]), dtype=torch.float32)
    with torch.no_grad():
        for slot in np.unique(token_slot):
            rows = torch.as_tensor(np.nonzero(token_slot == slot)[0])
            layer = build(None if slot < 0 else adapters[int(slot)], w0, b0)
            y[rows] = layer(x[rows]).to(torch.float32)
    store = _ROUND[inputs["dtype"]]
    if store is not None:
        y = y.to(getattr(torch, store)).to(torch.float32)
    return {"y": y.numpy().astype(np.float32), "bitwise_batch_invariant": False}
