"""``vllm``: vLLM 0.33's real v1 KVCacheManager (pinned wheel) behind the paged_kv protocol.

Shown here: the code that runs is the wheel's (module names and files); hand-made programs
through every variant vLLM implements agree with the reference, also under KVGuard through the
block-pool event shim; each planted bug of vLLM's code is caught on a minimal program and by
fuzzing from scratch; short clean campaigns, plain and ``--guarded``; ``--guarded`` is refused
for a class without ``guard=``; a crash inside vLLM is signed with vLLM's file.

Skips when the wheel is not here and cannot be fetched, fails instead under
``FUZZKIT_REQUIRE_ENGINES=1`` (CI).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from fuzzkit.engines.hypothesis import fuzz
from fuzzkit.errors import UsageError
from fuzzkit.mutants import patch
from fuzzkit.mutation import run_mutant
from fuzzkit.registry import get_target, resolve_implementation
from fuzzkit.runner import check_case
from fuzzkit.target import Unsupported
from fuzzkit.targets.engine_pins import VLLM
from fuzzkit.targets.paged_kv import checks
from fuzzkit.targets.paged_kv.driver import run_program
from fuzzkit.targets.paged_kv.reference import ReferenceManager
from tests.engine_support import require_engine

MUTANT_NAMES = ("vllm-free-head-first", "vllm-evict-keeps-map-entry", "vllm-touch-keeps-hit-free",
                "vllm-hit-past-last-token", "vllm-lora-not-hashed", "vllm-window-frees-first-key")


@pytest.fixture(scope="module")
def vm() -> Any:
    require_engine(VLLM)
    from fuzzkit.targets.paged_kv.adapters import vllm_manager

    assert vllm_manager.unavailable() is None
    vllm_manager.modules()
    return vllm_manager


def _add(rid: int, tokens: list[int], adapter: Any = None, salt: Any = None) -> dict[str, Any]:
    return {"op": "add", "rid": rid, "tokens": tokens, "adapter": adapter, "salt": salt}


def _run(rid: int, n: int, publish: bool = True) -> list[dict[str, Any]]:
    steps = [{"op": "allocate", "rid": rid, "n": n}, {"op": "write", "rid": rid}]
    return steps + ([{"op": "publish", "rid": rid}] if publish else [])


def _inputs(program: list[dict[str, Any]], num_blocks: int = 9, block_size: int = 2,
            window: Any = None, hashing: str = "publish") -> dict[str, Any]:
    return {"config": {"num_blocks": num_blocks, "block_size": block_size,
                       "sliding_window": window, "eviction": "lru",
                       "window_mode": "eager", "hashing": hashing},
            "program": program}


def _judge(inputs: dict[str, Any], guarded: bool = False) -> Any:
    from fuzzkit.targets.paged_kv.adapters.vllm_manager import VLLMManager

    out = run_program(VLLMManager, inputs, guarded=guarded)
    return out["violation"] or checks.oracle(inputs, run_program(ReferenceManager, inputs), out)


#: Shared prefixes, an eviction, a preemption and re-admission, LoRA and salt, reset.
MIXED = [
    _add(0, list(range(10))), *_run(0, 10),
    _add(1, [*range(9), 7, 7, 7]), {"op": "allocate", "rid": 1, "n": 4}, {"op": "forward"},
    {"op": "finish", "rid": 0}, *_run(1, 4), {"op": "preempt", "rid": 1},
    _add(2, list(range(12)), adapter=1, salt=3), *_run(2, 12),
    _add(3, list(range(12)), adapter=1, salt=0), *_run(3, 5),
    *_run(1, 12), {"op": "append", "rid": 1, "tokens": [5, 6, 7]}, *_run(1, 3),
    {"op": "finish", "rid": 1}, {"op": "finish", "rid": 2}, {"op": "finish", "rid": 3},
    {"op": "reset"}, _add(4, list(range(10))), *_run(4, 10),
]


def test_the_code_under_test_is_the_wheels(vm: Any) -> None:
    v = vm.modules()
    for module in (v.kv_cache_manager, v.block_pool, v.kv_cache_utils, v.request):
        assert module.__name__.startswith("vllm.v1.")
        assert module.__file__.replace("\\", "/").endswith(
            module.__name__.replace(".", "/") + ".py")
    manager = vm.VLLMManager(vm.Config(6, 2))
    assert type(manager.manager) is v.kv_cache_manager.KVCacheManager
    assert type(manager.pool) is v.block_pool.BlockPool
    assert type(manager.group).__name__ == "FullAttentionManager"
    assert vm.VLLMManager.capabilities.fork is False
    assert set(vm.VLLMManager.capabilities.hashing) == {"allocate", "publish"}


@pytest.mark.parametrize("hashing", ["publish", "allocate"])
@pytest.mark.parametrize("window", [None, 3, 1])
def test_hand_programs_agree_with_the_reference(vm: Any, hashing: str, window: Any) -> None:
    assert _judge(_inputs(MIXED, window=window, hashing=hashing)) is None


def test_inspect_reports_int_hashes_and_the_null_block(vm: Any) -> None:
    manager = vm.VLLMManager(vm.Config(6, 2, sliding_window=2, window_mode="eager"))
    manager.add_request(0, list(range(7)))
    manager.allocate(0, 5)
    manager.commit(0)
    manager.publish(0)
    manager.allocate(0, 2)  # eager: the blocks below the window become the null block
    state = manager.inspect()
    assert state["tables"][0][:1] == [0] and 0 not in state["free_queue"]
    assert all(isinstance(h, int) for h in state["cached"])
    with pytest.raises(Unsupported):
        manager.fork(0, 1)


# ------------------------------------------------------------------ planted bugs of vLLM's code

#: Request 0's three blocks cached and freed, then an allocation that evicts one of them, then a
#: lookup of request 0's prefix: vLLM evicts the tail, so the head still hits.
EVICTION = [
    _add(0, [1, 2, 3, 4, 5, 6]), *_run(0, 6), {"op": "finish", "rid": 0},
    _add(1, [9, 9, 9, 9]), *_run(1, 4, publish=False),
    _add(2, [1, 2, 3, 4, 5, 6]), *_run(2, 6),
]
MINIMAL = {
    "vllm-free-head-first": _inputs(EVICTION, num_blocks=5),
    "vllm-evict-keeps-map-entry": _inputs(EVICTION, num_blocks=5),
    "vllm-touch-keeps-hit-free": _inputs(
        [_add(0, [1, 2, 3, 4, 5, 6]), *_run(0, 6), {"op": "finish", "rid": 0},
         _add(1, [1, 2, 3, 4, 5, 6, 7]), *_run(1, 7)], num_blocks=6),
    "vllm-hit-past-last-token": _inputs(
        [_add(0, [1, 2, 3, 4]), *_run(0, 4), {"op": "finish", "rid": 0},
         _add(1, [1, 2, 3, 4]), *_run(1, 4)]),
    "vllm-lora-not-hashed": _inputs(
        [_add(0, [1, 2, 3, 4], adapter=0), *_run(0, 4),
         _add(1, [1, 2, 3, 4, 5], adapter=1), *_run(1, 5)]),
    "vllm-window-frees-first-key": _inputs(
        [_add(0, list(range(8))), *_run(0, 5, publish=False), *_run(0, 3, publish=False)],
        window=3),
}


@pytest.mark.parametrize("name", MUTANT_NAMES)
def test_each_mutant_fails_its_minimal_program(vm: Any, name: str) -> None:
    inputs = MINIMAL[name]
    assert _judge(inputs) is None
    with get_target("paged_kv").mutant(name).applied():
        assert _judge(inputs) is not None


@pytest.mark.parametrize("name", MUTANT_NAMES)
def test_each_mutant_is_found_by_fuzzing(vm: Any, name: str) -> None:
    target = get_target("paged_kv")
    # bounded by cases, not seconds: the slowest needs 24
    result = run_mutant(target, target.mutant(name), budget=900, seed=1, max_cases=100)
    assert result.detected, (name, result.cases)


def test_every_vllm_mutant_is_registered(vm: Any) -> None:
    from fuzzkit.targets.paged_kv.adapters.vllm_mutants import MUTANTS

    assert tuple(m.name for m in MUTANTS) == MUTANT_NAMES
    assert all(m.implementation == "vllm" for m in MUTANTS)


# ------------------------------------------------------------------ campaigns


def test_short_clean_campaign(vm: Any) -> None:
    target = get_target("paged_kv")
    result = fuzz(target, target.implementation("vllm"), budget=8, seed=3, profile="ci",
                  database_dir=None, max_findings=1)
    assert result.finding is None, result.finding
    assert result.cases >= 50


# ------------------------------------------------------------------ KVGuard for any manager

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="the guarded driver runs Triton kernels")


@needs_triton
def test_guarded_hand_program_is_clean(vm: Any) -> None:
    assert _judge(_inputs(MIXED), guarded=True) is None


@needs_triton
def test_the_event_shim_lets_kvguard_see_a_vllm_bug(vm: Any) -> None:
    """The touch bug leaves a pinned hit in the free queue: KVGuard's allocation check names
    it from the events alone."""
    with get_target("paged_kv").mutant("vllm-touch-keeps-hit-free").applied():
        found = _judge(MINIMAL["vllm-touch-keeps-hit-free"], guarded=True)
    assert found is not None and found["kind"] == "guard", found
    assert found["check"].startswith("allocation/"), found


@needs_triton
def test_short_guarded_campaign(vm: Any) -> None:
    target = get_target("paged_kv")
    impl = resolve_implementation(target, "vllm[guarded]")
    assert impl.name == "vllm[guarded]" and impl.unavailable() is None
    # bounded by cases, not seconds: a loaded machine ran 2 cases in 8 s
    result = fuzz(target, impl, budget=300, seed=3, profile="ci", database_dir=None,
                  max_findings=1, max_cases=4)
    assert result.finding is None, result.finding
    assert result.cases >= 3


def test_guarded_option_works_for_any_manager_and_refuses_without_guard() -> None:
    target = get_target("paged_kv")
    spec = "fuzzkit.targets.paged_kv.optimized:OptimizedManager[guarded]"
    assert resolve_implementation(target, spec).name == spec
    with pytest.raises(UsageError, match="does not accept guard="):
        resolve_implementation(target, "fuzzkit.targets.paged_kv.reference:ReferenceManager[guarded]")
    with pytest.raises(UsageError, match="unknown option"):
        resolve_implementation(target, "fuzzkit.targets.paged_kv.optimized:OptimizedManager[fast]")
    with pytest.raises(UsageError, match="takes no options"):
        resolve_implementation(target, "optimized[guarded]")


def test_cli_guarded_refusal_is_one_line_exit_2(tmp_path: Any,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from fuzzkit.cli import main

    code = main(["run", "paged_kv", "--impl", "fuzzkit.targets.paged_kv.reference:ReferenceManager",
                 "--guarded", "--budget", "1", "--report-dir", str(tmp_path / "r"),
                 "--corpus", str(tmp_path / "c")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "does not accept guard=" in err[0], err


# ------------------------------------------------------------------ crash signatures


def test_crash_inside_vllm_is_signed_with_vllms_file(vm: Any) -> None:
    """An over-committing pool (it reports more free blocks than its queue holds): vLLM's own
    ``FreeKVCacheBlockQueue.popleft_n`` asserts, and the signature names that file, not the
    adapter or the driver."""
    target = get_target("paged_kv")
    pool = vm.modules().block_pool.BlockPool
    inputs = _inputs([_add(0, list(range(40))), {"op": "allocate", "rid": 0, "n": 40}],
                     num_blocks=4)
    with patch(pool, get_num_free_blocks=lambda self: 10**6)():
        failure = check_case(target, target.implementation("vllm"), inputs,
                             confirm=False).failure
    assert failure is not None and failure.kind == "crash", failure
    assert "@vllm/v1/core/kv_cache_utils.py:popleft_n" in failure.signature, failure.signature


def test_adapters_of_one_wheel_load_in_either_order(vm: Any) -> None:
    """The kernel adapters register their stand-ins only while importing: loading vLLM's Punica
    and attention kernels first must leave the KV-manager adapter its real modules (and the
    other way round), as in one ``fuzzkit run --all`` process."""
    import subprocess
    import sys

    pytest.importorskip("triton")
    loads = {"manager": "from fuzzkit.targets.paged_kv.adapters import vllm_manager as m; m.modules()",
             "punica": "from fuzzkit.targets.scute.adapters import vllm_punica as p; p.modules()",
             "kernels": "from fuzzkit.targets.paged_kv.adapters import vllm_kernels as k; k.modules()"}
    for order in (("punica", "kernels", "manager"), ("manager", "punica", "kernels")):
        script = "; ".join(loads[name] for name in order)
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env={**__import__("os").environ, "TRITON_INTERPRET": "1"},
                              timeout=300)
        assert done.returncode == 0, (order, done.stderr[-2000:])
