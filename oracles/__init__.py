"""Oracles: decide whether an implementation's output is right.

The contract: an oracle is a pure, deterministic function of plain data (NumPy arrays, JSON
values) that returns ``None`` when the output is acceptable and a
:class:`fuzzkit.failure.Failure` when it is not.  It knows nothing of engines, targets or files.
A failure's message says what differs and where (path, index, step); its ``details`` carry the
same facts for machines; its ``signature`` names only the *class* of the divergence -- never an
index, size or value -- so that shrinking keeps chasing the same bug and findings deduplicate.

- :func:`exact`   -- nested structures that must match exactly (codes, ids, block tables).
- :func:`close`   -- floats within a bound derived from the dtype and the reduction length.
- :func:`topk`    -- tie-aware top-k: any valid choice among equal scores passes.
- :func:`recall` / :func:`compare_recall` -- statistical claims about approximate search.
- :func:`trace`   -- stateful targets: the first diverging step of a program;
  :func:`program_trace` adds the driver's first invariant violation, naming its step.
"""

from fuzzkit.oracles.close import close, error_bound, ulp, unit_roundoff
from fuzzkit.oracles.exact import exact
from fuzzkit.oracles.recall import compare_recall, recall, recall_at_k
from fuzzkit.oracles.topk import topk
from fuzzkit.oracles.trace import program_trace, trace

__all__ = [
    "close",
    "compare_recall",
    "error_bound",
    "exact",
    "recall",
    "recall_at_k",
    "topk",
    "trace",
    "program_trace",
    "ulp",
    "unit_roundoff",
]
