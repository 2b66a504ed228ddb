"""The cases a run has judged already, by a fingerprint of their inputs.

Hypothesis caches a test's outcome by the *choices* behind a case, not by the case: two choice
sequences that build the same inputs (a clamped size, a filtered draw, the all-zero example that
opens every chunk) run twice.  Measured before this module, about a fifth of the paged_kv and
scheduling cases were exact repeats.  A repeat tells the oracle nothing new, so the engine
counts it apart and does not judge it again.

The fingerprint is a hash of ``pickle.dumps(inputs)`` -- only ever *dumped* in this process,
never loaded, so no untrusted data meets the unpickler.  Pickling is the cheapest lossless
encoding of the values inputs are made of (dicts, lists, numbers, strings, numpy arrays,
tensors) and runs in C.  It may tell two equal inputs apart (a dict built in another key order,
one object referenced twice instead of two equal ones): that costs a judged repeat, never a
skipped new case, since equal pickles need equal values.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any

#: How many fingerprints one run keeps (16 bytes each): past it, new cases are still judged,
#: only no longer remembered, so memory stays bounded on a days-long campaign.
MAX_REMEMBERED = 1 << 20


def fingerprint(inputs: Any) -> bytes | None:
    """A 16-byte digest that equal inputs share, or None when the inputs cannot be encoded
    (such a case is always judged)."""
    try:
        data = pickle.dumps(inputs, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an unpicklable value: never deduplicated, still judged
        return None
    return hashlib.blake2b(data, digest_size=16).digest()


class SeenSet:
    """Fingerprints of the cases judged so far in one run (bounded)."""

    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self._seen: set[bytes] = set()
        self.limit = limit

    def repeat(self, inputs: Any) -> bool:
        """True when equal inputs were judged before; otherwise remember them (while there is
        room) and return False."""
        key = fingerprint(inputs)
        if key is None:
            return False
        if key in self._seen:
            return True
        if len(self._seen) < self.limit:
            self._seen.add(key)
        return False

    def __len__(self) -> int:
        return len(self._seen)
