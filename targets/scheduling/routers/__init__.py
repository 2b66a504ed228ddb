"""Routers: which instance a new request goes to.

Each router exists twice with identical decisions: ``reference`` (linear scans) and
``optimized`` (sorted ring with binary search, heaps).  The protocol is :mod:`.base`.
"""
