"""Prefill-ordering policies: which waiting request an instance prefills next.

Every policy exists twice, with identical decisions: ``reference`` (a plain O(n) scan over the
waiting list, written to be obviously right) and ``optimized`` (heaps / indexed structures).
The protocol both follow is :mod:`.base`.
"""
