"""The float64 reference against PEFT itself: torch.nn.Linear layers wrapped by peft for LoRA,
rsLoRA, DoRA, VeRA, OFT (exact Cayley and the Cayley-Neumann series), BOFT and IA3 (k/v and
feed-forward), their weights set from our adapter dicts, forward in float64."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any

import numpy as np
import pytest

peft = pytest.importorskip("peft")
torch = pytest.importorskip("torch")

from targets.scute import reference, slots, strategies  # noqa: E402
from test_scute import forward64  # noqa: E402

K, NOUT, KMAX, NMAX = 16, 12, 24, 20


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(K, NOUT)
        self.big = torch.nn.Linear(KMAX, NMAX)  # sizes VeRA's shared matrices past lin's

    def forward(self, x: Any) -> Any:
        return self.lin(x)


def _t(a: Any) -> Any:
    return torch.as_tensor(np.asarray(a, np.float64))


def _wrap(config: Any, w0: np.ndarray, b0: np.ndarray) -> Any:
    net = Net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.get_peft_model(net, config)
    model = model.double()
    lin = model.base_model.model.lin
    with torch.no_grad():
        lin.base_layer.weight.copy_(_t(w0))
        lin.base_layer.bias.copy_(_t(b0))
    model.eval()
    return model, lin


def _peft_forward(adapter: dict[str, Any], w0: np.ndarray, b0: np.ndarray) -> Any:
    method = adapter["method"]
    if method in ("lora", "dora"):
        r = adapter["A"].shape[0]
        cfg = peft.LoraConfig(r=r, lora_alpha=adapter["alpha"], target_modules=["lin"],
                              lora_dropout=0.0, use_rslora=adapter["rslora"],
                              use_dora=method == "dora", init_lora_weights=False)
        model, lin = _wrap(cfg, w0, b0)
        with torch.no_grad():
            lin.lora_A["default"].weight.copy_(_t(adapter["A"]))
            lin.lora_B["default"].weight.copy_(_t(adapter["B"]))
            if method == "dora":
                lin.lora_magnitude_vector["default"].weight.copy_(_t(adapter["magnitude"]))
        return model
    if method == "vera":
        r = adapter["A_shared"].shape[0]
        cfg = peft.VeraConfig(r=r, target_modules=["lin", "big"], vera_dropout=0.0)
        model, lin = _wrap(cfg, w0, b0)
        assert tuple(lin.vera_A["default"].shape) == adapter["A_shared"].shape
        with torch.no_grad():
            lin.vera_A["default"].copy_(_t(adapter["A_shared"]))
            lin.vera_B["default"].copy_(_t(adapter["B_shared"]))
            lin.vera_lambda_d["default"].copy_(_t(adapter["lambda_d"]))
            lin.vera_lambda_b["default"].copy_(_t(adapter["lambda_b"]))
        return model
    if method == "oft":
        bs = adapter["block_size"]
        cfg = peft.OFTConfig(r=0, oft_block_size=bs, target_modules=["lin"], module_dropout=0.0,
                             use_cayley_neumann=adapter["cayley"] == "neumann",
                             num_cayley_neumann_terms=adapter["neumann_terms"])
        model, lin = _wrap(cfg, w0, b0)
        rows, cols = np.triu_indices(bs, 1)
        with torch.no_grad():
            lin.oft_R["default"].weight.copy_(_t(np.asarray(adapter["Q"])[:, rows, cols]))
        return model
    if method == "boft":
        cfg = peft.BOFTConfig(boft_block_size=adapter["block_size"], boft_n_butterfly_factor=1,
                              target_modules=["lin"], boft_dropout=0.0)
        model, lin = _wrap(cfg, w0, b0)
        with torch.no_grad():
            lin.boft_R["default"].copy_(_t(adapter["Q"]))
            lin.boft_s["default"].copy_(_t(adapter["boft_s"]).reshape(-1, 1))
        return model
    if method == "ia3":
        ff = adapter["placement"] == "ff"
        cfg = peft.IA3Config(target_modules=["lin"], feedforward_modules=["lin"] if ff else [])
        model, lin = _wrap(cfg, w0, b0)
        with torch.no_grad():
            shape = (1, K) if ff else (NOUT, 1)
            lin.ia3_l["default"].copy_(_t(adapter["l"]).reshape(shape))
        return model
    raise AssertionError(method)


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
            theirs = model(_t(x)).numpy()
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
