"""A small tiled target that exercises reach: thresholds, planted bugs past them, state across cases.

``toy-tiles`` sums each row of a matrix in tiles of :data:`TILE` columns (the "kernel") and scales
the sums by a per-case factor through a cache.  Its implementation declares the tile as a
threshold, so the strategy draws widths at ``TILE±1`` and ``2·TILE±1``.  Its mutants:

* ``second-tile-dropped``: columns past the first tile are ignored (only past the threshold);
* ``zero-tile-nan``: a tile of only zeros sums to NaN (an extreme value: exact zeros);
* ``cache-keyed-by-width``: the scale cache is keyed by the width only, so a case with another
  scale but the same width reads a stale factor -- a bug that needs an earlier case (state).

They live in tests/ because they exist to test fuzzkit, not a component.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator
from unittest import mock

import numpy as np
from hypothesis import strategies as st

import fuzzkit.oracles
from fuzzkit import reach, values
from fuzzkit.target import Implementation, Mutant, Target

TILE = 8
THRESHOLDS = (reach.Threshold("width", TILE, "row-sum tile: a second tile starts at TILE + 1",
                              cap=4 * TILE),)
DOMAIN = values.Domain("float32", max_abs=1e6)

_cache: dict[Any, float] = {}


def _scale_of(width: int, scale: float) -> float:
    key = (width, scale)
    if key not in _cache:
        _cache[key] = float(scale)
    return _cache[key]


def _tile_sum(block: np.ndarray) -> np.ndarray:
    return block.astype(np.float64).sum(axis=1)


def _row_sums(x: np.ndarray) -> np.ndarray:
    out = np.zeros(x.shape[0], dtype=np.float64)
    for start in range(0, x.shape[1], TILE):
        out += _tile_sum(x[:, start:start + TILE])
    return out


def tiled(inputs: dict[str, Any]) -> dict[str, Any]:
    x = np.asarray(inputs["x"])
    factor = _scale_of(x.shape[1], inputs["scale"])
    return {"sums": (_row_sums(x) * factor).astype(np.float64)}


def reference(inputs: dict[str, Any]) -> dict[str, Any]:
    x = np.asarray(inputs["x"], dtype=np.float64)
    return {"sums": x.sum(axis=1) * inputs["scale"]}


def oracle(inputs: dict[str, Any], expected: dict[str, Any], actual: dict[str, Any]) -> Any:
    x = np.asarray(inputs["x"], dtype=np.float64)
    magnitude = np.abs(x).sum(axis=1) * abs(inputs["scale"])
    return fuzzkit.oracles.close(expected["sums"], actual["sums"], dtype="float64",
                         reduction_length=max(1, x.shape[1]), magnitude=magnitude, name="sums")


def strategy(thresholds: tuple[reach.Threshold, ...] = ()) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def inputs(draw: Callable[[Any], Any]) -> dict[str, Any]:
        width = reach.size(draw, "width", thresholds, lo=1, hi=4 * TILE,
                           base=st.integers(1, TILE - 2))
        rows = draw(st.integers(1, 3))
        return {"x": values.rows(draw, rows, width, DOMAIN),
                "scale": draw(st.sampled_from([1.0, 2.0, 0.5]))}

    return inputs()


def _second_tile_dropped(x: np.ndarray) -> np.ndarray:
    return _tile_sum(x[:, :TILE])


def _zero_tile_nan(block: np.ndarray) -> np.ndarray:
    """A normalisation that divides by the tile's largest magnitude: 0/0 on an all-zero tile."""
    top = np.abs(block.astype(np.float64)).max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (block.astype(np.float64) / top[:, None]).sum(axis=1) * top


def _keyed_by_width(width: int, scale: float) -> float:
    if width not in _cache:
        _cache[width] = float(scale)
    return _cache[width]


@contextlib.contextmanager
def _fresh_cache(patch: Any) -> Iterator[None]:
    _cache.clear()
    with patch:
        yield
    _cache.clear()


def target() -> Target:
    here = __name__
    return Target(
        name="toy-tiles",
        description="tiled row sums with a cached scale",
        strategy=strategy,
        reference=reference,
        implementations={"tiled": Implementation("tiled", tiled, thresholds=THRESHOLDS,
                                                 sources=(here,))},
        oracle=oracle,
        sizes={"width": reach.Size(lambda inputs: [np.asarray(inputs["x"]).shape[1]], lo=1)},
        mutants=[
            Mutant("second-tile-dropped", "tiled", "loop over tiles stops after the first",
                   "tile threshold", lambda: mock.patch(f"{here}._row_sums", _second_tile_dropped)),
            Mutant("zero-tile-nan", "tiled", "normalised by the tile's max: 0/0 on zeros",
                   "extreme value: exact zeros", lambda: mock.patch(f"{here}._tile_sum",
                                                                     _zero_tile_nan)),
            Mutant("cache-keyed-by-width", "tiled", "cache keyed too coarsely (width only)",
                   "state across cases", lambda: _fresh_cache(
                       mock.patch(f"{here}._scale_of", _keyed_by_width))),
        ],
        reducible=["x"],
    )
