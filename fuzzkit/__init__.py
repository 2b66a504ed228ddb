"""fuzzkit: differential fuzzing of LLM-inference components against float64 references."""

from __future__ import annotations

__version__ = "0.1.0"

# First: makes fuzzkit.targets / fuzzkit.oracles importable from a bare source checkout.
from fuzzkit import _layout  # noqa: F401
from fuzzkit.failure import Failure
from fuzzkit.target import Implementation, Mutant, Property, Target

__all__ = ["Failure", "Implementation", "Mutant", "Property", "Target", "__version__"]
