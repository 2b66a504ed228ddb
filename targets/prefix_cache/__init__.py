"""Target ``prefix_cache``: token-level radix prefix caches (SGLang's RadixCache), driven by
scheduler programs and judged by a plain model of the policy plus a semantic KV oracle.

Why not ``paged_kv``: that protocol is vLLM's -- fixed blocks named by a chain hash, a free
queue whose order is the eviction order, and a request's blocks freed back into it.  A radix
cache differs in everything observable: keys are token sequences cut to pages (page size 1 is
per token), identical prefixes are deduplicated on insert (the duplicate slots go back to the
allocator), lookups split tree edges, requests lock a path rather than hold blocks, and eviction
drops whole unlocked *leaves* by last access.  So the case format, the model and the checks
are its own.

Inputs and the scheduler steps: :mod:`.program`.  Outputs: ``{"steps": [{"op", "result",
"state"}], "violation": null | {...}}`` -- each step's result and the cache's evictable /
protected / available / cached token counts (no slot ids: the allocator's order is its own
business), plus the implementation's first semantic violation.

Reference: :mod:`.reference` (SGLang's documented policy on a dict of node ends, a logical
clock, a page counter).  Implementations: ``sglang`` -- the real ``RadixCache`` and token /
paged allocators of the pinned ``sglang`` wheel (:mod:`.adapters.sglang_impl`; what is shimmed
and why: :mod:`.adapters.sglang_load`).  Mutants: planted in the real SGLang code
(:mod:`.adapters.sglang_mutants`).
"""

from __future__ import annotations

from fuzzkit.target import Implementation, Target, lazy
from fuzzkit.targets.prefix_cache import checks, reference


def _unavailable() -> str | None:
    from fuzzkit.targets.prefix_cache.adapters import sglang_load

    return sglang_load.unavailable()


def target() -> Target:
    """The ``prefix_cache`` target (entry point ``fuzzkit.targets.prefix_cache:target``)."""
    from fuzzkit.targets.prefix_cache.adapters.sglang_mutants import MUTANTS
    from fuzzkit.targets.prefix_cache.limits import LIMITS

    return Target(
        name="prefix_cache",
        description="radix prefix caches (SGLang RadixCache): dedup, splits, locks, leaf-LRU "
                    "eviction, KV slot allocation; policy model + semantic KV oracle",
        strategy=lazy("fuzzkit.targets.prefix_cache.strategies:inputs"),
        reference=reference.run,
        implementations={
            "sglang": Implementation(
                "sglang", lazy("fuzzkit.targets.prefix_cache.adapters.sglang_impl:run"),
                backend="external",
                description="SGLang 0.5.23 RadixCache + TokenToKVPool / Paged allocators (real "
                            "code from the pinned wheel, CPU)",
                unavailable=_unavailable,
                sources=("fuzzkit.targets.prefix_cache.adapters.sglang_impl",)),
        },
        oracle=checks.oracle,
        mutants=MUTANTS,
        reducible=("program",),
        validate=checks.validate,
        sources=("fuzzkit.targets.prefix_cache.program",),
        limits=LIMITS,
        schema=lazy("fuzzkit.targets.prefix_cache.schema:schema"),  # what describe shows
    )
