"""The real engines fuzzkit's adapters drive, pinned by version and wheel hash.

One place for the pins so that the vLLM KV-manager adapter and the vLLM kernel adapters load
the same release, and ``.ci/run`` downloads exactly these files (``python -m
targets.engine_pins`` prints the requirements).  Moving a pin means re-running each adapter's
clean campaign and mutant table (see the README section on real engines).
"""

from __future__ import annotations

from fuzzkit.wheelsrc import PinnedWheel

VLLM = PinnedWheel("vllm", "0.33.0", {
    "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl":
        "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa",
})

SGLANG = PinnedWheel("sglang", "0.5.23", {
    "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl":
        "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
})

PINS = (VLLM, SGLANG)

if __name__ == "__main__":  # pragma: no cover - used by .ci/run
    print("\n".join(pin.requirement for pin in PINS))
