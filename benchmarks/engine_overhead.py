"""What fuzzkit's engine costs over a bare Hypothesis ``@given`` loop doing the same work.

Both sides draw from the target's strategy and run reference + implementation + oracle +
properties on every case; fuzzkit adds its runner (input copies, crash capture, time limit),
budgeted chunking and bookkeeping.  Printed: cases per second of each, and the ratio.
Goal: fuzzkit at most 10 % slower.

    python benchmarks/engine_overhead.py [--target quant] [--impl numpy] [--seconds 10] [--rounds 3]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from fuzzkit.engines.hypothesis import fuzz  # noqa: E402
from fuzzkit.registry import get_target  # noqa: E402
from fuzzkit.target import Implementation, Target  # noqa: E402


def bare_rate(target: Target, impl: Implementation, examples: int, run_seed: int) -> float:
    """Cases per second of the loop a user would write by hand with Hypothesis alone."""

    @seed(run_seed)
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(target.strategy())
    def loop(inputs):  # type: ignore[no-untyped-def]
        expected = target.reference(inputs)
        actual = impl.fn(inputs)
        assert target.oracle(inputs, expected, actual) is None
        for prop in target.properties:
            assert prop.check(impl.fn, inputs) is None

    count = 0

    def counted(inputs):  # type: ignore[no-untyped-def]
        nonlocal count
        count += 1

    started = time.perf_counter()
    loop()
    return examples / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="quant")
    parser.add_argument("--impl", default="numpy")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    target = get_target(args.target)
    impl = target.implementation(args.impl)
    fuzzkit_rates, bare_rates = [], []
    for round_ in range(args.rounds):
        result = fuzz(target, impl, budget=args.seconds, seed=round_, profile="ci",
                      database_dir=None)
        assert result.finding is None, f"unexpected finding: {result.finding}"
        fuzzkit_rates.append(result.cases_per_second)
        bare_rates.append(bare_rate(target, impl, result.cases, round_))
        print(f"round {round_}: fuzzkit {fuzzkit_rates[-1]:8.1f} cases/s   "
              f"bare @given {bare_rates[-1]:8.1f} cases/s   ({result.cases} cases)")
    f, b = statistics.median(fuzzkit_rates), statistics.median(bare_rates)
    print(f"target {args.target}/{args.impl}: median fuzzkit {f:.1f} cases/s, "
          f"bare Hypothesis {b:.1f} cases/s")
    print(f"overhead ratio (bare / fuzzkit): {b / f:.3f}  "
          f"-> fuzzkit costs {100 * (b / f - 1):+.1f} % per case (goal: <= +10 %)")


if __name__ == "__main__":
    main()
