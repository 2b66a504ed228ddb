"""Measure the false-alarm rate of the ``ann`` recall oracle on clean code.

Generates ``--cases`` inputs from the target's own strategy (derandomized: the same cases on
every run), runs the reference and an implementation, and applies the two recall claims of
:func:`fuzzkit.targets.ann.checks.check_recall` separately:

* ``paired``: the implementation loses no recall against the reference (``compare_recall``);
* ``absolute``: where :func:`fuzzkit.targets.ann.checks.recall_claim` states a bound, mean recall@k on
  the ``recall-claim`` property's seeded in-distribution queries reaches it (``recall``).

Prints how many cases each claim applied to, how many raised an alarm (a false alarm: the code
is clean), the recall distribution where the absolute claim applies, and the lowest
``mean + Hoeffding radius`` seen there (the margin left under the bound)::

    OMP_NUM_THREADS=1 python scripts/ann_recall_calibration.py --cases 2000 [--seed N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzzkit.oracles.recall import compare_recall, hoeffding_radius, recall  # noqa: E402
from fuzzkit.targets.ann import brute, checks, index, properties, reference, strategies  # noqa: E402
from fuzzkit.targets.ann.model import Params  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=None,
                        help="Hypothesis seed for another set of cases (default: derandomized)")
    args = parser.parse_args()
    stats = {"cases": 0, "claimed": 0, "paired_alarms": 0, "absolute_alarms": 0}
    means: list[float] = []
    margins: list[float] = []
    started = time.time()

    @settings(max_examples=args.cases, deadline=None, derandomize=args.seed is None,
              database=None, suppress_health_check=list(HealthCheck))
    @seed(args.seed or 0)
    @given(strategies.inputs())
    def one(inputs: dict) -> None:
        expected = reference.run(inputs)
        actual = index.run(inputs)
        p = Params.from_inputs(inputs)
        exact = expected["aux"]["exact"]
        got = brute.recall(exact, actual["ids"], p.k)
        want = brute.recall(exact, expected["ids"], p.k)
        stats["cases"] += 1
        if compare_recall(got, want, confidence=checks.RECALL_CONFIDENCE) is not None:
            stats["paired_alarms"] += 1
        x = reference.all_vectors(inputs)
        covered = np.unique(actual["cell_members"]).size == x.shape[0]
        bound = checks.recall_claim(p, covered)
        if bound is None:
            return
        stats["claimed"] += 1
        queries = properties.in_distribution_queries(x, checks.RECALL_QUERIES, p.seed,
                                                     checks.RECALL_NOISE, p.w)
        found = index.run({**inputs, "queries": queries})
        r = brute.recall(brute.distances(x, queries, p.metric), found["ids"], p.k)
        means.append(float(r.mean()))
        margins.append(float(r.mean()) + hoeffding_radius(r.size, checks.RECALL_CONFIDENCE)
                       - bound)
        if recall(r, bound=bound, confidence=checks.RECALL_CONFIDENCE) is not None:
            stats["absolute_alarms"] += 1

    one()
    print(f"cases {stats['cases']} in {time.time() - started:.0f} s; "
          f"paired claim: {stats['paired_alarms']} alarms; "
          f"absolute claim (bound {checks.RECALL_BOUND}, confidence "
          f"{checks.RECALL_CONFIDENCE}) applied to {stats['claimed']}: "
          f"{stats['absolute_alarms']} alarms")
    if means:
        m = np.array(means)
        print(f"mean recall where claimed: min {m.min():.3f}, 1% {np.quantile(m, 0.01):.3f}, "
              f"median {np.median(m):.3f}; smallest (mean + radius - bound) "
              f"{min(margins):+.3f}")
    return 1 if stats["paired_alarms"] or stats["absolute_alarms"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
