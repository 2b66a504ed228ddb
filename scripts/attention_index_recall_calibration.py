"""False-alarm rate of the attention_index recall claim on a correct implementation.

Draws ``--cases`` random HiSA / AttentionIndex cases (S 32..96, every data kind of the strategy,
random block / groups / probes / chunk / sink / local), runs the ``recall-claim`` property of
:mod:`fuzzkit.targets.attention_index.properties` on the NumPy implementation and counts how often it
fires (it is claimed for AttentionIndex only), with the smallest and mean margin
mean(recall@k) - mean(share of keys scored) per method (HiSA's margins shown for comparison).

Run: ``python scripts/attention_index_recall_calibration.py [--cases 1000] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzzkit.targets.attention_index import index, properties, strategies  # noqa: E402


def case(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    s = int(rng.integers(32, 97))
    h = int(rng.integers(1, 5))
    d = int(rng.integers(2, 17))
    kind = ["gaussian", "clustered", "integers", "negative"][seed % 4]
    q, w, k = strategies._arrays(kind, s, s, h, d, rng, float(rng.choice([0.0, 0.1])))
    groups, block = int(rng.integers(2, 12)), int(rng.integers(2, 16))
    return dict(q=q, w=w, k=k, topk=int(rng.integers(1, 17)),
                method="hisa" if seed % 2 else "attention_index", block=block,
                top_m=int(rng.integers(1, -(-s // block) + 1)), groups=groups,
                iters=int(rng.integers(0, 4)), chunk=int(rng.integers(1, s + 1)),
                top_g=int(rng.integers(1, groups + 1)), sink=int(rng.choice([0, 2])),
                local=int(rng.choice([0, 4])), seed=seed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    fails, margins, by_method = 0, [], {}
    for seed in range(args.seed, args.seed + args.cases):
        inputs = case(seed)
        got, share = properties.recall_pairs(index.run, inputs)
        margins.append(float(got.mean() - share.mean()))
        by_method.setdefault(inputs["method"], []).append(margins[-1])
        if properties.recall_claim(index.run, inputs) is not None:
            fails += 1
            print(f"false alarm: seed {seed} {inputs['method']} margin {margins[-1]:+.3f}")
    print(f"{args.cases} cases, {fails} false alarms (rate {fails / args.cases:.4f}), smallest "
          f"margin {min(margins):+.3f}, mean margin {np.mean(margins):+.3f}, "
          f"{time.perf_counter() - started:.0f} s")
    for method, values in sorted(by_method.items()):
        print(f"  {method}: {len(values)} cases, smallest margin {min(values):+.3f}, mean "
              f"{np.mean(values):+.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
