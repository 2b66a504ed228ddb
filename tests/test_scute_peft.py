"""The float64 reference against PEFT itself: torch.nn.Linear layers wrapped by peft for LoRA,
rsLoRA, DoRA, VeRA, OFT (exact Cayley and the Cayley-Neumann series), BOFT and IA3 (k/v and
feed-forward), their weights set from our adapter dicts, forward in float64.  The layers are
built by the shipped ``peft`` implementation (:func:`fuzzkit.targets.scute.adapters.peft_impl.build`)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import pytest

peft = pytest.importorskip("peft")
torch = pytest.importorskip("torch")

from test_scute import forward64  # noqa: E402

from fuzzkit.targets.scute import reference, slots, strategies  # noqa: E402
from fuzzkit.targets.scute.adapters import peft_impl  # noqa: E402

K, NOUT, KMAX, NMAX = 16, 12, 24, 20


def _peft_forward(adapter: dict[str, Any], w0: np.ndarray, b0: np.ndarray) -> Any:
    """PEFT's own layer for ``adapter``, in float64 (built by the shipped ``peft`` adapter)."""
    return peft_impl.build(adapter, w0, b0, dtype=torch.float64)


def _adapter(kind: str, seed: int) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w0 = strategies.round_to(rng.standard_normal((NOUT, K)) / 4, "float32")
    b0 = np.asarray(rng.standard_normal(NOUT), np.float32)
    x = np.asarray(rng.standard_normal((5, K)), np.float32)
    method = {"rslora": "lora", "oft-exact": "oft", "oft-neumann": "oft", "oft-neumann3": "oft",
              "ia3-kv": "ia3-kv", "ia3-ff": "ia3-ff"}.get(kind, kind)
    ad = strategies.make_adapter(method, K, NOUT, "float32", rng, w0)
    if method in ("lora", "dora"):
        ad["rslora"] = kind == "rslora"
        ad["alpha"] = 6.0
    if method == "vera":
        r = ad["A_shared"].shape[0]
        ad["A_shared"] = np.asarray(rng.standard_normal((r, KMAX)), np.float32)
        ad["B_shared"] = np.asarray(rng.standard_normal((NMAX, r)), np.float32)
    if method == "oft":
        ad["block_size"] = 4
        u = np.triu(0.3 * rng.standard_normal((K // 4, 4, 4)), 1).astype(np.float32)
        ad["Q"] = u - np.swapaxes(u, -1, -2)
        ad["cayley"] = "exact" if kind == "oft-exact" else "neumann"
        ad["neumann_terms"] = 3 if kind == "oft-neumann3" else 5
    if method == "boft":  # PEFT without its CUDA extension forces one butterfly factor
        u = np.triu(0.3 * rng.standard_normal((1, K // 4, 4, 4)), 1).astype(np.float32)
        ad.update(block_size=4, factors=1, Q=u - np.swapaxes(u, -1, -2), cayley="exact")
    return ad, w0, b0, x


KINDS = ["lora", "rslora", "dora", "vera", "oft-exact", "oft-neumann", "oft-neumann3", "boft",
         "ia3-kv", "ia3-ff"]


@pytest.mark.parametrize("kind", KINDS)
def test_reference_matches_peft(kind: str) -> None:
    if kind.startswith("oft-neumann") and "use_cayley_neumann" not in {
            f.name for f in dataclasses.fields(peft.OFTConfig)}:
        pytest.skip("this peft has no use_cayley_neumann switch")
    for seed in range(2):
        ad, w0, b0, x = _adapter(kind, seed)
        model = _peft_forward(copy.deepcopy(ad), w0, b0)
        with torch.no_grad():
            theirs = model(torch.as_tensor(np.asarray(x, np.float64))).numpy()
        case = {"dtype": "float32", "mode": "decode", "x": x, "w0": w0, "b0": b0,
                "token_adapter": np.zeros(len(x), np.int64), "adapters": [ad]}
        ours = reference.run(case)["y"]
        scale = np.abs(theirs).max() + 1.0
        assert np.abs(ours - theirs).max() <= 1e-10 * scale, kind
        # and the slot form agrees with both
        np.testing.assert_allclose(forward64(slots.pack(case)), theirs,
                                   rtol=0, atol=1e-10 * scale)


def test_peft_neumann_is_the_transposed_rotation() -> None:
    """The two PEFT Cayley switches give (approximately) transposed rotations of the input:
    x·R_neumann ~ x·R_exactᵀ (exact only as the series length grows)."""
    ad, w0, b0, x = _adapter("oft-neumann", 0)
    ad["neumann_terms"] = 40
    q = np.asarray(ad["Q"], np.float64) * 0.2
    ad["Q"] = q
    neumann = reference.rotations(q, "neumann", 40)
    exact = reference.rotations(q, "exact", 5)
    assert np.abs(neumann - np.swapaxes(exact, -1, -2)).max() < 1e-12
