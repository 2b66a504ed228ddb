"""``vllm-triton``: vLLM 0.33's own Triton write and unified-attention kernels (pinned wheel)
driven by the guarded paged_kv driver.  Right on hand-made batches that cross both attention
paths and every tile; the shims faithful to the wheel and gone after import; each planted
vLLM kernel bug caught by fuzzing from scratch; a short clean campaign.

Skips when the wheel is not here and cannot be fetched, fails instead under
``FUZZKIT_REQUIRE_ENGINES=1`` (CI).  Natively on a GPU, under ``TRITON_INTERPRET=1`` without
one (``scripts/gpu_check.sh`` runs the ``kernel`` marker).
"""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest

from fuzzkit import triton_support

pytestmark = pytest.mark.kernel
triton_support.prepare()
pytest.importorskip("torch")
pytest.importorskip("triton")

from fuzzkit.engines.hypothesis import fuzz  # noqa: E402
from fuzzkit.mutation import run_mutant  # noqa: E402
from fuzzkit.registry import get_target  # noqa: E402
from fuzzkit.targets.engine_pins import VLLM  # noqa: E402
from tests.engine_support import require_engine  # noqa: E402


@pytest.fixture(scope="module")
def vk() -> Any:
    """The adapter; its sources already extracted into the cache are enough (a GPU machine
    carries ``$FUZZKIT_CACHE/src`` rather than the 336 MB wheel), else the pinned wheel."""
    from fuzzkit.targets.paged_kv.adapters import vllm_kernels

    if vllm_kernels.unavailable() is not None:
        require_engine(VLLM)  # skips, or fails under FUZZKIT_REQUIRE_ENGINES=1
        assert vllm_kernels.unavailable() is None, vllm_kernels.unavailable()
    return vllm_kernels


def _program(first: int, second: int) -> list[dict[str, Any]]:
    """A mixed prefill batch (``first`` and ``second`` queries), then two decode steps."""
    program: list[dict[str, Any]] = [
        {"op": "add", "rid": 0, "tokens": list(range(first)), "adapter": None, "salt": None},
        {"op": "allocate", "rid": 0, "n": first},
        {"op": "add", "rid": 1, "tokens": list(range(100, 100 + second)), "adapter": None,
         "salt": None},
        {"op": "allocate", "rid": 1, "n": second},
        {"op": "forward"},
    ]
    for token in (7, 8):
        for rid in (0, 1):
            program += [{"op": "append", "rid": rid, "tokens": [token]},
                        {"op": "allocate", "rid": rid, "n": 1}]
        program.append({"op": "forward"})
    return program


class _Counted:
    """A JIT kernel whose launches are counted (which path the wrapper took)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid: Any) -> Any:
        self.launches += 1
        return self.kernel[grid]


@pytest.mark.parametrize("window", [None, 5])
def test_both_paths_and_every_tile_match_the_reference(vk: Any, window: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """2D: 41 queries (> BLOCK_Q = 8, > the 32-key tile); 3D split-K: two decodes over 41-42
    keys (> the 16-key segment tile), through reduce_segments; block size 4 crosses blocks."""
    prefill, decode = vk.tile_sizes()
    assert (vk.block_q(), prefill, decode) == (8, 32, 16)
    attention = vk.modules()[0]
    reduce = _Counted(attention.reduce_segments)
    monkeypatch.setattr(attention, "reduce_segments", reduce)
    inputs = {"config": {"num_blocks": 32, "block_size": 4, "sliding_window": window},
              "program": _program(41, 13)}
    out = get_target("paged_kv").implementations["vllm-triton"](inputs)
    assert out["violation"] is None, out["violation"]
    assert reduce.launches == 2  # the two decode steps took the split-K path


def test_padding_and_thresholds(vk: Any) -> None:
    assert [vk.padded_tokens(n) for n in (1, 2, 3, 4, 5, 8, 9, 17)] == [1, 2, 4, 4, 8, 8, 16, 24]
    sizes = {(t.size, t.value) for t in vk.thresholds()}
    assert {("query_len", 8), ("key_span", 16), ("key_span", 32), ("batch_tokens", 8)} <= sizes


def test_quant_mode_shim_matches_the_wheel(vk: Any) -> None:
    source = (vk._root() / "vllm/v1/kv_cache_interface.py").read_text()
    body = source[source.index("class KVQuantMode(IntEnum):"):]
    real = {name: int(value) for name, value in re.findall(r"^    ([A-Z0-9_]+) = (\d+)", body,
                                                             flags=re.M)}
    for member in vk.KVQuantMode:
        assert real[member.name] == member.value, member


def test_shims_are_gone_after_import(vk: Any) -> None:
    """Another adapter of the wheel keeps its own stand-ins: ours live only while importing."""
    names = ("vllm.envs", "vllm.logger", "vllm.platforms", "vllm.triton_utils",
             "vllm.v1.kv_cache_interface", *vk.SHIM_PARENTS)
    marker = object()
    previous = sys.modules.get("vllm.logger")
    sys.modules["vllm.logger"] = marker  # type: ignore[assignment]
    try:
        before = {name: sys.modules.get(name) for name in names}
        with vk.engine_imports():
            assert sys.modules["vllm.logger"] is not marker
            assert sys.modules["vllm.platforms"].current_platform.fp8_dtype() is not None
        assert {name: sys.modules.get(name) for name in names} == before
    finally:
        if previous is None:
            sys.modules.pop("vllm.logger", None)
        else:
            sys.modules["vllm.logger"] = previous


def test_unwritten_slot_reads_are_reported(vk: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel reading a slot the guard counts as unwritten gets NaN, reported as a read."""
    from fuzzkit.targets.paged_kv.adapters.vllm_kernel_mutants import v_tail_unmasked

    inputs = {"config": {"num_blocks": 16, "block_size": 4, "sliding_window": None},
              "program": _program(5, 3)}
    with v_tail_unmasked():
        out = get_target("paged_kv").implementations["vllm-triton"](inputs)
    assert out["violation"]["check"] == "read/unwritten", out["violation"]


@pytest.mark.parametrize("name", [
    "vllm-pad-slot-not-skipped", "vllm-block-table-stride-from-width", "vllm-v-tail-unmasked",
    "vllm-window-v-unmasked", "vllm-window-off-by-one"])
def test_each_mutant_is_caught(vk: Any, name: str) -> None:
    target = get_target("paged_kv")
    result = run_mutant(target, target.mutant(name), budget=40, seed=1)
    assert result.detected, (name, result.cases)


def test_short_clean_campaign(vk: Any) -> None:
    target = get_target("paged_kv")
    result = fuzz(target, target.implementations["vllm-triton"], budget=8, seed=3,
                  profile="ci", database_dir=None, max_findings=1)
    assert result.finding is None, result.finding
    assert result.cases >= 3
