"""Cells of a repertoire: how a descriptor maps to a cell index.

Three tessellations: a regular grid (index computed arithmetically), the cells of categorical
descriptors (each combination of categories a cell), and a centroidal Voronoi tessellation
(CVT, index of the nearest centroid, through a bucket index where one pays). CVT centroids
come from k-means written in JAX (`_kmeans.py`).
"""

import abc
import os
import typing
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from . import _validate as check
from ._custom_types import BoundsLike, Centroids, CentroidsLike, Descriptors, PRNGKey
from ._cvt_index import _bucket_index, _INDEX_MIN_CELLS, CVTIndex
from ._kmeans import _bounds, cvt_centroids
from ._misc import f32
from ._nearest import _check_points, _flat_cell, nearest_centroid


class AbstractTessellation(eqx.Module):
    """Maps descriptors to cell indices in `[0, num_cells)`."""

    centroids: eqx.AbstractVar[Centroids]

    @property
    def num_cells(self) -> int:
        return self.centroids.shape[0]

    @property
    def num_descriptors(self) -> int:
        return self.centroids.shape[1]

    @abc.abstractmethod
    def index(self, descriptors: Descriptors) -> Int[Array, " batch"]:
        """Cell index of each descriptor (shape `(batch,)`, int32)."""

    @property
    @abc.abstractmethod
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """`(lower, upper)` per descriptor: the box the cells cover (a grid's bounds, the
        centroids' box for a CVT). Random-direction rankers scale their directions by it."""


@typing.final
class GridTessellation(AbstractTessellation):
    """A regular grid: `bins[i]` equal bins between `minval[i]` and `maxval[i]`.

    Descriptors outside the bounds fall in the nearest border cell (the same cell a
    nearest-centroid search would give on a grid).
    """

    bins: tuple[int, ...] = eqx.field(static=True)
    minval: Float[Array, " num_descriptors"]
    maxval: Float[Array, " num_descriptors"]
    centroids: Centroids

    def __init__(self, bins: Sequence[int], minval: BoundsLike = 0.0, maxval: BoundsLike = 1.0):
        bins = tuple(int(b) for b in bins)
        if not bins or any(b < 1 for b in bins):
            raise ValueError(f"bins must be a non-empty sequence of positive ints, got {bins}")
        d = len(bins)
        self.bins = bins
        self.minval = _bounds(minval, d, "minval")
        self.maxval = _bounds(maxval, d, "maxval")
        check.ordered(
            "GridTessellation minval", self.minval, "GridTessellation maxval", self.maxval
        )
        axes = [
            lo + (jnp.arange(b, dtype=jnp.float32) + 0.5) * (hi - lo) / b
            for b, lo, hi in zip(bins, self.minval, self.maxval)
        ]
        mesh = jnp.meshgrid(*axes, indexing="ij")
        self.centroids = jnp.stack([m.reshape(-1) for m in mesh], axis=-1)

    @property
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """`(minval, maxval)`: the grid's bounds."""
        return self.minval, self.maxval

    def index(self, descriptors: Float[Array, "batch num_descriptors"]) -> Int[Array, " batch"]:
        bins = jnp.asarray(self.bins, jnp.float32)[None]
        scaled = (descriptors - self.minval[None]) / (self.maxval - self.minval)[None] * bins
        # NaN descriptors floor to an arbitrary cell; callers mask them (they are never inserted).
        return _flat_cell(scaled, self.bins)


@typing.final
class CategoricalTessellation(AbstractTessellation):
    """Descriptors from finite sets: dimension `i` takes one of `categories[i]` (numbers; give
    names a code each, `0, 1, ...`), and each combination is a cell, in row-major order over
    the dimensions (pyribs' `CategoricalArchive`). A `MAPElitesRepertoire` over it is that
    archive, annealing included.

    A finite descriptor outside its dimension's set is an error naming it, at run time
    (`eqx.error_if`: the program stops before the candidate is stored). A failed evaluation's
    NaN descriptor is not an error: the repertoire refuses it as it refuses any.

    **Arguments:** `categories`, one sequence of distinct numbers per descriptor dimension.
    """

    categories: tuple[tuple[float, ...], ...] = eqx.field(static=True)
    centroids: Centroids

    def __init__(self, categories: Sequence[Any]):
        try:
            cats = tuple(tuple(float(c) for c in dim) for dim in categories)
        except (TypeError, ValueError):
            raise ValueError(
                "CategoricalTessellation.categories must be sequences of numbers (give named "
                f"categories a code each), got {categories!r}"
            ) from None
        if not cats or any(len(dim) == 0 for dim in cats):
            raise ValueError(
                "CategoricalTessellation.categories needs at least one dimension and one "
                f"category per dimension, got {categories!r}"
            )
        for i, dim in enumerate(cats):
            if not all(np.isfinite(dim)):
                raise ValueError(f"CategoricalTessellation.categories[{i}] must be finite: {dim}")
            if len(set(dim)) != len(dim):
                raise ValueError(f"CategoricalTessellation.categories[{i}] repeats a value: {dim}")
        self.categories = cats
        mesh = jnp.meshgrid(*[jnp.asarray(dim, jnp.float32) for dim in cats], indexing="ij")
        self.centroids = jnp.stack([m.reshape(-1) for m in mesh], axis=-1)

    @property
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """The smallest and largest category of each dimension."""
        low = jnp.asarray([min(dim) for dim in self.categories], jnp.float32)
        high = jnp.asarray([max(dim) for dim in self.categories], jnp.float32)
        return low, high

    def index(self, descriptors: Float[Array, "batch num_descriptors"]) -> Int[Array, " batch"]:
        _check_points(descriptors, self.num_descriptors)
        coords, unknown = [], jnp.zeros(descriptors.shape[:1], bool)
        for i, dim in enumerate(self.categories):
            column = descriptors[:, i].astype(jnp.float32)
            matches = column[:, None] == jnp.asarray(dim, jnp.float32)[None, :]
            coords.append(jnp.argmax(matches, axis=1).astype(jnp.int32))
            unknown = unknown | (~jnp.any(matches, axis=1) & jnp.isfinite(column))
        sizes = tuple(len(dim) for dim in self.categories)
        strides = np.cumprod((1, *sizes[::-1]))[:-1][::-1].astype(np.int32)
        cells = jnp.sum(jnp.stack(coords, axis=1) * jnp.asarray(strides)[None], axis=1)
        return eqx.error_if(
            cells,
            jnp.any(unknown),
            "CategoricalTessellation.index: a descriptor is not one of its dimension's "
            f"categories {self.categories}",
        )


@typing.final
class CVTTessellation(AbstractTessellation):
    """A centroidal Voronoi tessellation: a descriptor belongs to its nearest centroid.

    With 256 cells or more and at most 3 descriptors, construction builds an index of which
    centroids can be nearest in each box of a grid laid over them (`bucket_index`, a module of
    arrays), and `index` compares a descriptor with its box's candidates only; descriptors
    outside the centroids' box, and every case without an index, use the full search. Both are
    exact. The index is used only for the centroids it was built from: centroids changed by
    `eqx.tree_at` take the full search (build a new tessellation to index them).

    **Arguments:** `centroids` `(num_cells, num_descriptors)`; `index_min_cells`, the fewest
    cells that get an index (pass a huge number for the full search always).
    """

    centroids: Centroids = eqx.field(converter=f32)
    bucket_index: CVTIndex | None

    def __init__(self, centroids: CentroidsLike, *, index_min_cells: int = _INDEX_MIN_CELLS):
        check.positive_int("index_min_cells", index_min_cells)
        self.centroids = centroids
        self.bucket_index = _bucket_index(centroids, index_min_cells)

    def __check_init__(self):
        if self.centroids.ndim != 2 or 0 in self.centroids.shape:
            raise ValueError(
                "CVTTessellation.centroids must have shape (num_cells, num_descriptors), "
                f"got {self.centroids.shape}"
            )
        # A NaN centroid would send every descriptor to one cell without a word.
        check.finite("CVTTessellation.centroids", self.centroids)

    @property
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """The centroids' box."""
        return jnp.min(self.centroids, axis=0), jnp.max(self.centroids, axis=0)

    def index(self, descriptors: Float[Array, "batch num_descriptors"]) -> Int[Array, " batch"]:
        if self.bucket_index is None:
            return nearest_centroid(descriptors, self.centroids)
        _check_points(descriptors, self.num_descriptors)
        points = descriptors.astype(jnp.float32)
        index = self.bucket_index
        return jax.lax.cond(
            index.inside(points) & index.matches(self.centroids),
            lambda p: index.lookup(p),
            lambda p: nearest_centroid(p, self.centroids),
            points,
        )

    @classmethod
    def from_kmeans(
        cls,
        num_cells: int,
        num_descriptors: int,
        minval: BoundsLike = 0.0,
        maxval: BoundsLike = 1.0,
        num_samples: int = 50_000,
        num_iterations: int = 20,
        *,
        key: PRNGKey,
    ) -> "CVTTessellation":
        """Centroids by k-means on uniform samples in the box `[minval, maxval]`."""
        return cls(
            cvt_centroids(
                num_cells, num_descriptors, minval, maxval, num_samples, num_iterations, key=key
            )
        )

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CVTTessellation":
        """Centroids from a `.npy` file of shape `(num_cells, num_descriptors)`, or from a
        text file with one centroid per line (the PGA-MAP-Elites repository's
        `CVT/centroids_K_D.dat`; any name not ending in `.npy`)."""
        path = os.fspath(path)
        try:
            if path.endswith(".npy"):
                centroids = np.load(path)
            else:
                centroids = np.loadtxt(path, ndmin=2)
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read centroids from {path!r}: {e}") from e
        return cls(centroids)
