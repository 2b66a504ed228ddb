"""fuzzkit: differential fuzzing of LLM-inference components against float64 references."""

from __future__ import annotations

__version__ = "0.1.0"

from fuzzkit.failure import Failure
from fuzzkit.target import Implementation, Mutant, Property, Target

__all__ = ["Failure", "Implementation", "Mutant", "Property", "Target", "__version__"]
