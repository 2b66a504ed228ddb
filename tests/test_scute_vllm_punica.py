"""The ``vllm-punica`` implementation of ``scute`` (vLLM's own Punica ``lora_shrink`` /
``lora_expand`` from the pinned wheel): within the scute bound on multi-LoRA batches of every
slice layout, the cases it cannot serve declared and never run, its tiles read from vLLM's config
getter, every planted vLLM mutant caught, and a short clean fuzzing run.  Natively on a GPU when
there is one (``scripts/gpu_check.sh`` runs the ``kernel`` tests), under the interpreter
otherwise."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from fuzzkit import triton_support

pytestmark = pytest.mark.kernel
triton_support.prepare()
pytest.importorskip("torch")
pytest.importorskip("triton")

from fuzzkit.engines.hypothesis import fuzz  # noqa: E402
from fuzzkit.registry import get_target  # noqa: E402
from fuzzkit.target import Unsupported  # noqa: E402
from fuzzkit.targets.engine_pins import VLLM  # noqa: E402
from fuzzkit.targets.scute import checks, reference, strategies  # noqa: E402
from tests.engine_support import require_engine  # noqa: E402


@pytest.fixture(scope="module")
def vp() -> Any:
    """The adapter; its sources already extracted into the cache are enough (a GPU machine
    carries ``$FUZZKIT_CACHE/src``), else the pinned wheel."""
    from fuzzkit.targets.scute.adapters import vllm_punica

    if vllm_punica.unavailable() is not None:
        require_engine(VLLM)  # skips, or fails under FUZZKIT_REQUIRE_ENGINES=1
        assert vllm_punica.unavailable() is None, vllm_punica.unavailable()
    return vllm_punica


def _case(vp: Any, seed: int, nout: int, methods: list[str], **kw: Any) -> dict[str, Any]:
    """A float16 multi-LoRA case in the declared range (alphas scaled into it)."""
    params = dict(k=40, ntok=20, dtype="float16", mode="decode") | kw
    case = vp._in_precision_range(strategies.build(seed, nout=nout, methods=methods, **params))
    assert vp.unsupported(case) is None, vp.unsupported(case)
    return case


def _judge(vp: Any, case: dict[str, Any]) -> Any:
    return checks.oracle(case, reference.run(case), vp.run(copy.deepcopy(case)))


@pytest.mark.parametrize("nout", [12, 13, 14], ids=["3-equal-slices", "gqa-slices", "1-slice"])
def test_multi_lora_batches_within_the_bound(vp: Any, nout: int) -> None:
    assert [len(vp.slices(nout))] == [{12: 3, 13: 3, 14: 1}[nout]]
    for seed in range(2):
        case = _case(vp, seed, nout, ["lora", "identity", "lora"], mode="prefill", ntok=24)
        case["adapters"][2]["rslora"] = True
        case = vp._in_precision_range(case)
        assert _judge(vp, case) is None, (nout, seed)


def test_scale_groups_and_folding(vp: Any) -> None:
    """Adapters whose scale folds exactly into B go to the scale-1 launch (vLLM's optimize);
    the others get their own ``scaling``; every token still gets its own delta."""
    case = strategies.build(3, k=24, nout=16, ntok=20, dtype="float16", mode="decode",
                            methods=["lora", "lora", "lora"])
    rank = np.asarray(case["adapters"][0]["A"]).shape[0]
    case["adapters"][0].update(alpha=float(rank), rslora=False)  # scale 1
    case["adapters"][1].update(alpha=0.0)  # scale 0
    case["adapters"][2].update(alpha=3.0 * np.asarray(case["adapters"][2]["A"]).shape[0] / 7,
                               rslora=False)  # 3/7: never exact
    groups = vp._groups(case, "float16")
    # scale 1 folds; scale 0 does not (|scale| < 1: the unscaled buffer could overflow its cast)
    assert set(groups[1.0]) == {0} and set(groups[0.0]) == {1}
    assert [2] in [list(g) for s, g in groups.items() if s not in (0.0, 1.0)]
    case = vp._in_precision_range(case)
    assert vp.unsupported(case) is None
    assert _judge(vp, case) is None


def test_base_only_batches(vp: Any) -> None:
    case = _case(vp, 5, 8, ["identity"], k=16, ntok=6)
    case["token_adapter"][:] = -1
    assert _judge(vp, case) is None
    case["adapters"] = []
    assert _judge(vp, case) is None


def test_unsupported_cases_are_declared_not_run(vp: Any) -> None:
    f32 = strategies.build(1, k=16, nout=8, ntok=4, dtype="float32", mode="decode",
                           methods=["lora"])
    assert "float32" in (vp.inexpressible(f32) or "")
    with pytest.raises(Unsupported):
        vp.run(f32)
    dora = strategies.build(1, k=16, nout=8, ntok=4, dtype="float16", mode="decode",
                            methods=["lora", "dora"])
    assert "dora" in (vp.inexpressible(dora) or "")
    with pytest.raises(Unsupported):
        vp.run(dora)
    if triton_support.interpreted():
        bf16 = dict(f32, dtype="bfloat16")
        assert "bfloat16" in (vp.inexpressible(bf16) or "")
    # a LoRA delta that dominates an output: vLLM's float16 roundings leave the bound
    big = strategies.build(2, k=40, nout=12, ntok=10, dtype="float16", mode="decode",
                           methods=["lora"])
    big["adapters"][0]["alpha"] = 64.0
    big["token_adapter"][:] = 0
    assert "not small against the output" in (vp.precision_gap(big) or "")


def test_thresholds_come_from_vllms_config_getter(vp: Any) -> None:
    cfg = vp.tile_configs()
    if triton_support.interpreted():
        assert cfg["shrink"] == vp.INTERPRETED_CONFIGS["shrink"]
        assert cfg["expand"] == vp.INTERPRETED_CONFIGS["expand"]
    else:  # vLLM's default table: small batches use BLOCK_K 256 with 64 K splits
        assert (cfg["shrink"]["block_k"], cfg["shrink"]["split_k"]) == (256, 64)
    values = {(t.size, t.value) for t in vp.thresholds()}
    assert ("k", cfg["shrink"]["block_k"]) in values
    assert ("rank", cfg["expand"]["block_k"]) in values
    assert ("nout", cfg["expand"]["block_n"]) in values


def test_registered_with_its_own_strategy(vp: Any) -> None:
    target = get_target("scute")
    impl = target.implementations["vllm-punica"]
    assert impl.unavailable() is None and impl.cases is not None
    from hypothesis import HealthCheck, given, settings

    seen: list[Any] = []
    before = sum(vp.SKIPPED.values())

    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(target.strategy_for(impl))
    def draw(case: dict[str, Any]) -> None:
        seen.append((vp.unsupported(case), [a["method"] for a in case["adapters"]]))

    draw()
    assert seen and all(reason is None for reason, _ in seen)
    assert any("lora" in methods for _, methods in seen)
    assert sum(vp.SKIPPED.values()) > before  # redrawn slots / turned-away cases are counted


MUTANT_NAMES = ["vllm-punica-no-lora-as-slot-0", "vllm-punica-expand-slice-offset",
                "vllm-punica-shrink-scaling-dropped", "vllm-punica-lora-ids-out-of-order"]


def test_every_mutant_is_tested() -> None:
    from fuzzkit.targets.scute.adapters.vllm_punica_mutants import MUTANTS

    assert sorted(m.name for m in MUTANTS) == sorted(MUTANT_NAMES)


@pytest.mark.parametrize("name", MUTANT_NAMES)
def test_mutant_caught_on_a_mixed_batch(vp: Any, name: str) -> None:
    """Each mutant fails the scute oracle on one typical batch (three LoRAs, base tokens,
    three output slices; ``fuzzkit mutants scute --only NAME`` finds each from scratch)."""
    mutant = get_target("scute").mutant(name)
    case = _case(vp, 1, 12, ["lora", "lora", "lora"], k=24, ntok=20)
    case["adapters"][1]["alpha"] *= 3.0  # a scale that does not fold exactly
    case = vp._in_precision_range(case)
    assert (case["token_adapter"] == -1).any()
    assert _judge(vp, case) is None
    with mutant.applied():
        failure = _judge(vp, case)
    assert failure is not None and failure.signature.startswith("mismatch:y"), name
    assert _judge(vp, case) is None  # restored


@pytest.mark.parametrize("name", MUTANT_NAMES[1:])  # the first takes ~25 s: the CLI shows it
def test_mutant_caught_from_scratch(vp: Any, name: str) -> None:
    """Fuzzing from scratch finds the mutant (``fuzzkit mutants scute --only NAME``).

    Bounded by cases, not seconds: a time budget ran 33 cases on CI's slower machine and missed
    the slice-offset mutant that seed 0 first reaches at its 37th case (20-40 s here)."""
    from fuzzkit.mutation import run_mutant

    target = get_target("scute")
    result = run_mutant(target, target.mutant(name), budget=600.0, seed=0, max_cases=60)
    assert result.detected and result.signature.startswith("mismatch:y"), name


def test_short_clean_run(vp: Any) -> None:
    target = get_target("scute")
    result = fuzz(target, target.implementations["vllm-punica"], budget=12.0, seed=1,
                  profile="ci", database_dir=None, shrink=False)
    assert result.cases >= 2  # about one case a second on one core
    assert not result.findings, [f.failure.message for f in result.findings]
