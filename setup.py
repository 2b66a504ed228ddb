"""Package layout: ``targets/`` and ``oracles/`` install as ``fuzzkit.targets`` and
``fuzzkit.oracles``.

The folders stay at the top of the repository (where contributors look for them), but generic
top-level packages named ``targets`` and ``oracles`` in a user's site-packages would collide with
their own; ``package_dir`` maps each folder under the ``fuzzkit`` name.  Everything else is in
``pyproject.toml``; this file exists only because the mapped sub-packages have to be listed, and
listing them by hand would drop the next new one silently.
"""

from setuptools import find_packages, setup

MAPPED = ("targets", "oracles")

setup(
    packages=[
        *find_packages(include=["fuzzkit", "fuzzkit.*"]),
        *(f"fuzzkit.{name}" for name in find_packages(include=[f"{m}*" for m in MAPPED])),
    ],
    package_dir={f"fuzzkit.{m}": m for m in MAPPED},
)
