"""The real engines fuzzkit's adapters drive, pinned by version and wheel hash.

One place for the pins so that the vLLM KV-manager adapter and the vLLM kernel adapters load
the same release, and ``.ci/run`` downloads exactly these files once into the cache
(``python -m fuzzkit.targets.engine_pins --fetch``; without ``--fetch`` it prints the requirements).
Moving a pin means re-running each adapter's clean campaign and mutant table (see the README
section on real engines).
"""

from __future__ import annotations

import sys

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


def main(argv: list[str]) -> int:
    """Print the pinned requirements; with ``--fetch``, download each into the cache (checked
    against its pinned sha256) and print where it is.  Exit 2 with one line on failure."""
    from fuzzkit import wheelsrc
    from fuzzkit.errors import UsageError

    for pin in PINS:
        if "--fetch" not in argv:
            print(pin.requirement)
            continue
        try:
            print(f"{pin.requirement}: {wheelsrc.fetch(pin)}")
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":  # pragma: no cover - used by .ci/run
    sys.exit(main(sys.argv[1:]))
