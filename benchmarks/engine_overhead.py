"""What fuzzkit's engine costs over a bare Hypothesis ``@given`` loop doing the same work.

Both sides run reference + implementation + oracle + properties on the *same* inputs: the bare
loop replays fuzzkit's chunk plan (the Hypothesis seed and example count of every ``@given``
chunk), so Hypothesis generates identical cases on both sides.  What remains is fuzzkit's own
cost: its runner (input copies, crash capture, time limit), budgeted chunking and bookkeeping.
Printed: cases per second of each, and the ratio.  Goal: fuzzkit at most 10 % slower.

    python benchmarks/engine_overhead.py [--target quant] [--impl numpy] [--seconds 10] [--rounds 5]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from fuzzkit.engines.hypothesis import fuzz  # noqa: E402
from fuzzkit.registry import get_target  # noqa: E402
from fuzzkit.target import Implementation, Target  # noqa: E402


def bare_seconds(target: Target, impl: Implementation, chunks: list[tuple[int, int]]) -> float:
    """Seconds the loop a user would write with Hypothesis alone takes over the same chunks."""
    strategy = target.strategy_for(impl)

    def check(inputs):  # type: ignore[no-untyped-def]
        expected = target.reference(inputs)
        actual = impl.fn(inputs)
        assert target.oracle(inputs, expected, actual) is None
        for prop in target.properties:
            assert prop.check(impl.fn, inputs) is None

    started = time.perf_counter()
    for chunk_seed, examples in chunks:
        loop = given(strategy)(check)
        loop = settings(max_examples=examples, deadline=None, database=None,
                        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                        suppress_health_check=list(HealthCheck))(loop)
        seed(chunk_seed)(loop)()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="quant")
    parser.add_argument("--impl", default="numpy")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    target = get_target(args.target)
    impl = target.implementation(args.impl)
    # Warm-up, discarded: first-call costs (imports, codebook tables, kernel set-up) would
    # otherwise land on whichever side runs first.
    warm = fuzz(target, impl, budget=1.0, seed=10_000, profile="ci", database_dir=None)
    bare_seconds(target, impl, warm.chunks)
    ratios = []
    for round_ in range(args.rounds):
        result = fuzz(target, impl, budget=args.seconds, seed=round_, profile="ci",
                      database_dir=None)
        assert result.finding is None, f"unexpected finding: {result.finding}"
        bare = result.cases / bare_seconds(target, impl, result.chunks)
        ratios.append(bare / result.cases_per_second)
        print(f"round {round_}: {result.cases} cases in {len(result.chunks)} chunks   "
              f"fuzzkit {result.cases_per_second:8.1f} cases/s   bare @given {bare:8.1f} cases/s"
              f"   ratio {ratios[-1]:.3f}")
    ratio = statistics.median(ratios)
    print(f"target {args.target}/{args.impl}: overhead ratio (bare / fuzzkit cases per second), "
          f"median of {args.rounds}: {ratio:.3f} -> fuzzkit costs {100 * (ratio - 1):+.1f} % "
          "per case (goal: <= +10 %)")


if __name__ == "__main__":
    main()
