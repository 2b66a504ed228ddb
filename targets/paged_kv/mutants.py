"""Real-bug mutants of the optimized manager (filled in once the manager exists)."""

from __future__ import annotations

MUTANTS: list = []
