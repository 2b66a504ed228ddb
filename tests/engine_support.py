"""The one rule for tests of real-engine adapters: skip when the pinned wheel is not here and
cannot be fetched -- unless ``FUZZKIT_REQUIRE_ENGINES=1`` (CI sets it after fetching the pins),
where a missing engine is a failure, so a CI run can never pass by skipping the adapters."""

from __future__ import annotations

import os

import pytest

from fuzzkit import wheelsrc
from fuzzkit.errors import UsageError


def require_engine(pin: wheelsrc.PinnedWheel) -> None:
    """Skip (or, under ``FUZZKIT_REQUIRE_ENGINES=1``, fail) unless ``pin``'s wheel is usable."""
    try:
        wheelsrc.fetch(pin)
    except UsageError as exc:
        if os.environ.get("FUZZKIT_REQUIRE_ENGINES") == "1":
            pytest.fail(f"FUZZKIT_REQUIRE_ENGINES=1 but {exc}")
        pytest.skip(str(exc))
