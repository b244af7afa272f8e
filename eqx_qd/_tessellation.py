"""Cells of a repertoire: how a descriptor maps to a cell index.

Two tessellations: a regular grid (index computed arithmetically) and a centroidal Voronoi
tessellation (CVT, index of the nearest centroid). CVT centroids come from k-means written in JAX.
"""

import abc
import math
import os
import typing
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Int, UInt32

from . import _validate as check
from ._compile import jit
from ._custom_types import Centroids, Descriptors, PRNGKey
from ._misc import f32


def _bounds(value: Any, num_descriptors: int, name: str) -> Float[Array, " num_descriptors"]:
    if isinstance(value, jax.core.Tracer):
        arr = jnp.broadcast_to(jnp.asarray(value, jnp.float32), (num_descriptors,))
    else:  # on the host: eager jnp operations would each compile a small program
        arr = jnp.asarray(np.broadcast_to(np.asarray(value, np.float32), (num_descriptors,)))
    check.finite(name, arr)
    return arr


class AbstractTessellation(eqx.Module):
    """Maps descriptors to cell indices in ``[0, num_cells)``."""

    centroids: eqx.AbstractVar[Centroids]

    @property
    def num_cells(self) -> int:
        return self.centroids.shape[0]

    @property
    def num_descriptors(self) -> int:
        return self.centroids.shape[1]

    @abc.abstractmethod
    def index(self, descriptors: Descriptors) -> Int[Array, " batch"]:
        """Cell index of each descriptor (shape ``(batch,)``, int32)."""


@typing.final
class GridTessellation(AbstractTessellation):
    """A regular grid: ``bins[i]`` equal bins between ``minval[i]`` and ``maxval[i]``.

    Descriptors outside the bounds fall in the nearest border cell (the same cell a
    nearest-centroid search would give on a grid).
    """

    bins: tuple[int, ...] = eqx.field(static=True)
    minval: Float[Array, " num_descriptors"]
    maxval: Float[Array, " num_descriptors"]
    centroids: Centroids

    def __init__(self, bins: Sequence[int], minval: Any = 0.0, maxval: Any = 1.0):
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

    def index(self, descriptors: Float[Array, "batch num_descriptors"]) -> Int[Array, " batch"]:
        bins = jnp.asarray(self.bins, jnp.float32)[None]
        scaled = (descriptors - self.minval[None]) / (self.maxval - self.minval)[None] * bins
        # NaN descriptors floor to an arbitrary cell; callers mask them (they are never inserted).
        return _flat_cell(scaled, self.bins)


def _flat_cell(scaled: Float[Array, "batch d"], bins: Sequence[int]) -> Int[Array, " batch"]:
    """Row-major index of the grid cell of each point, given in bin units (``scaled[:, i]`` in
    ``[0, bins[i])`` inside the grid; points outside go to the nearest border cell)."""
    top = jnp.asarray(bins, jnp.float32)[None] - 1.0
    coords = jnp.clip(jnp.floor(scaled), 0.0, top).astype(jnp.int32)
    strides = np.cumprod((1, *bins[::-1]))[:-1][::-1].astype(np.int32)
    return jnp.sum(coords * jnp.asarray(strides)[None], axis=-1)


def _exact_matmul(a: Float[Array, "n d"], b: Float[Array, "d k"]) -> Float[Array, "n k"]:
    """``a @ b`` in full float32 on every platform (GPUs default to TF32 for float32 matmuls)."""
    return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)


def _scores(points: Float[Array, "n d"], centroids: Float[Array, "k d"]) -> Float[Array, "n k"]:
    """Squared distances from each point to each centroid up to a per-point constant,
    ``|c|^2 - 2 p.c``: one matmul, at full float32 precision (`_exact_matmul`)."""
    return jnp.sum(centroids**2, axis=-1)[None] - 2.0 * _exact_matmul(points, centroids.T)


def _argmin_rows(scores: Float[Array, "n k"]) -> Int[Array, " n"]:
    """Row-wise argmin of wide rows, lowest index among ties, via min + where: XLA's CPU
    argmin is 3x slower over 1,024 columns (2.5 against 0.8 ms for 1,024 rows).

    XLA may compute ``scores`` twice, once for the minimum and once for the comparison, and
    contract a multiply-add into one rounding in one copy only: a row can then hold no element
    equal to its minimum (seen with one descriptor, where the matmul becomes a multiply). Such
    rows would get no index; when any does, every row takes the argmin.
    """
    k = scores.shape[-1]
    best = jnp.min(scores, axis=-1, keepdims=True)
    idx = jnp.arange(k, dtype=jnp.int32)
    first = jnp.min(jnp.where(scores == best, idx, k), axis=-1)
    return jax.lax.cond(
        jnp.any(first == k),
        lambda s: jnp.argmin(s, axis=-1).astype(jnp.int32),
        lambda _: first,
        scores,
    )


def _argmin_few(scores: Float[Array, "n k"]) -> Int[Array, " n"]:
    """Row-wise argmin of narrow rows (tens of columns), lowest index among ties: one
    reduction, which over so few columns is faster than `_argmin_rows` (0.14-0.17 against
    0.19-0.25 ms for 1,024 rows of 15-20)."""
    return jnp.argmin(scores, axis=-1).astype(jnp.int32)


def _check_points(points: Any, dim: int) -> None:
    if jnp.ndim(points) != 2 or jnp.shape(points)[1] != dim:
        raise ValueError(
            f"nearest_centroid: points must have shape (batch, {dim}), got {jnp.shape(points)}"
        )


def nearest_centroid(
    points: Float[Array, "batch dim"], centroids: Float[Array, "num_cells dim"]
) -> Int[Array, " batch"]:
    """Index of the nearest of ``centroids`` (``(num_cells, dim)``) for each of ``points``
    (``(batch, dim)``); ties go to the lowest index.

    Squared distances up to a per-point constant are ``|c|^2 - 2 p.c`` (one matmul); the minimum
    is found with ``min`` + ``where`` because XLA's CPU ``argmin`` is several times slower
    (with an exact fallback, `_argmin_rows`). The matmul runs at full float32 precision: at
    the default precision a GPU multiplies in TF32 (10-bit mantissa), which on an H100 sent
    descriptors to the wrong cell (71.7% coverage with 4,096 cells where exact search reached
    100%).
    """
    if jnp.ndim(centroids) != 2:
        raise ValueError(
            f"nearest_centroid: centroids must have shape (num_cells, dim), got "
            f"{jnp.shape(centroids)}"
        )
    _check_points(points, jnp.shape(centroids)[1])
    return _argmin_rows(_scores(points, centroids))


class _NoIndex(Exception):
    """The centroids are too clustered for an index to pay: use the full search."""


class _BucketIndex:
    """Which centroids can be nearest to a point of each box of a regular grid laid over the
    centroids: the exact nearest-centroid search then compares a point with its box's
    candidates (tens) instead of every centroid (thousands).

    Built once, on the host, from concrete centroids. A box's candidates are the centroids
    within ``R`` of the box, ``R`` being the largest distance from the box's corners to the
    centroid nearest its centre: for any point ``p`` of the box, ``|p - nn(p)| <= |p - c*| <=
    R``, so ``nn(p)`` lies within ``R`` of the box. Lists are sorted by index (ties go to the
    lowest index, as in `nearest_centroid`) and padded with ``num_cells``.

    Held as a static field of `CVTTessellation` (hashed by content), so it is a constant of
    the compiled program and not a leaf: saved repertoires keep their format.
    """

    def __init__(self, centroids: np.ndarray, boxes_per_axis: int):
        c = np.asarray(centroids, np.float64)
        n, d = c.shape
        lo, hi = c.min(axis=0), c.max(axis=0)
        width = np.where(hi > lo, (hi - lo) / boxes_per_axis, 1.0)
        # Boxes past the outermost centroids on every side: descriptors usually reach beyond
        # them (to the bounds the centroids were fitted in, about half a cell away), and a
        # batch with a point outside the grid takes the full search.
        g, lo = boxes_per_axis + 2 * _MARGIN_BOXES, lo - _MARGIN_BOXES * width
        self.lo, self.width, self.boxes = lo.astype(np.float32), width.astype(np.float32), g
        grid = np.stack(np.meshgrid(*[np.arange(g)] * d, indexing="ij"), -1).reshape(-1, d)
        strides = g ** np.arange(d - 1, -1, -1)
        box_lo = lo + grid * width
        corners = np.stack(np.meshgrid(*[[0.0, 1.0]] * d, indexing="ij"), -1).reshape(-1, d)
        # Each box's own centroids, padded with -1: neighbourhoods are gathered from these.
        home = (np.clip(np.floor((c - lo) / width), 0, g - 1).astype(np.int64) * strides).sum(-1)
        order = np.argsort(home, kind="stable")
        counts = np.bincount(home, minlength=g**d)
        if counts.max() > _INDEX_MAX_CANDIDATES:  # a box's own centroids are all candidates
            raise _NoIndex
        members = np.full((g**d, max(1, counts.max())), -1, np.int64)
        rank = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
        members[home[order], rank] = order

        def around(r: int, boxes: np.ndarray) -> np.ndarray:
            """Centroid ids of the boxes within ``r`` boxes of each of ``boxes``, padded with
            -1 (each centroid is in one box, so no id repeats)."""
            offsets = np.stack(np.meshgrid(*[np.arange(-r, r + 1)] * d, indexing="ij"), -1)
            other = grid[boxes][:, None] + offsets.reshape(1, -1, d)  # (boxes, offsets, d)
            valid = np.all((other >= 0) & (other < g), axis=-1)
            flat = (np.clip(other, 0, g - 1) * strides).sum(-1)
            ids = np.where(valid[..., None], members[flat], -1)  # (boxes, offsets, members)
            return ids.reshape(len(boxes), -1)

        def within(ids: np.ndarray, boxes: np.ndarray) -> np.ndarray:
            """``ids`` within each box's reach, sorted, padded with ``n``."""
            pts = c[np.maximum(ids, 0)]  # (boxes, m, d): float64, so the reach test is exact
            lows = box_lo[boxes][:, None]
            gap = np.maximum(np.maximum(lows - pts, pts - (lows + width)), 0)
            near = (ids >= 0) & ((gap**2).sum(-1) <= slack[boxes, None])
            return np.sort(np.where(near, ids, n), axis=1)

        # The reach of each box, from a centroid near its centre (any centroid would be safe).
        everywhere = np.arange(len(grid))
        near = around(1, everywhere)
        centre = box_lo + width / 2
        d_centre = np.where(near >= 0, ((c[np.maximum(near, 0)] - centre[:, None]) ** 2).sum(-1),
                            np.inf)  # fmt: skip
        best = near[everywhere, np.argmin(d_centre, axis=1)]
        empty = best < 0
        if np.any(empty):  # no centroid in the 3^d boxes around: search them all
            sq = (c**2).sum(-1)
            best[empty] = np.argmin(sq[None] - 2.0 * centre[empty] @ c.T, axis=1)
        pts = box_lo[:, None] + corners[None] * width
        reach2 = ((pts - c[best][:, None]) ** 2).sum(-1).max(axis=1)
        slack = reach2 * (1 + 2e-5) + (1e-6 * width.max()) ** 2
        # Every centroid within a box's reach lies within this many boxes of it: search each
        # group of boxes over its own neighbourhood (boxes past the centroids reach further).
        rings = np.ceil(np.sqrt(slack) / width.min()).astype(np.int64) + 1
        # Too far to look: the centroids are too uneven. Bounded over all boxes first (all on
        # a line, the boxes off the line reach across it: 1.3e10 here, where 20,000 uniform
        # 3-D centroids need 8e7; that once took a minute to give up), then per ring.
        if float(((2.0 * rings + 1) ** d).sum()) * members.shape[1] > 2e8:
            raise _NoIndex
        found = []  # (boxes, their candidates: sorted, padded with n)
        for r in np.unique(rings):
            boxes = np.flatnonzero(rings == r)
            size = (2 * r + 1) ** d * members.shape[1]
            if size * len(boxes) > 5e7:
                raise _NoIndex
            step = max(1, int(2e6 // size))  # blocks of boxes: a few MB at a time
            for start in range(0, len(boxes), step):
                block = boxes[start : start + step]
                ids = within(around(int(r), block), block)
                found.append((block, ids[:, : max(1, int((ids < n).sum(1).max()))]))
        k = max(ids.shape[1] for _, ids in found)
        if k > _INDEX_MAX_CANDIDATES:
            raise _NoIndex
        table = np.full((len(grid), k), n, np.int32)
        for block, ids in found:
            table[block, : ids.shape[1]] = ids
        self.table = table
        padded = np.concatenate([c, np.full((1, d), 1e30)], 0)  # the padding never wins
        self.padded = padded.astype(np.float32)
        self._key = (table.shape, self.lo.tobytes(), self.width.tobytes(), table.tobytes(),
                     self.padded.tobytes())  # fmt: skip
        self._hash = hash(self._key)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        boxes = "x".join([str(self.boxes)] * len(self.lo))
        return f"_BucketIndex(boxes={boxes}, candidates={self.table.shape[1]})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _BucketIndex) and self._key == other._key

    def lookup(self, points: Float[Array, "batch dim"]) -> Int[Array, " batch"]:
        """Nearest centroid of each point, for points inside the grid's box."""
        box = _flat_cell((points - self.lo[None]) / self.width[None], (self.boxes,) * len(self.lo))
        candidates = jnp.asarray(self.table)[box]  # (batch, k)
        cand = jnp.asarray(self.padded)[candidates]  # (batch, k, dim)
        # Squared distances by differences: no cancellation, so nearer to exact than the
        # matmul form of the full search (the two can differ only where distances tie to ~1e-7).
        scores = jnp.sum((points[:, None, :] - cand) ** 2, -1)
        return jnp.take_along_axis(candidates, _argmin_few(scores)[:, None], axis=1)[:, 0]

    def inside(self, points: Float[Array, "batch dim"]) -> Bool[Array, ""]:
        top = self.lo + self.width * self.boxes
        return jnp.all((points >= self.lo[None]) & (points <= top[None]))


# An index pays from about this many cells (measured on CPU at 2-D); it is built for up to 3
# descriptors, and dropped when a box would need more candidates than this (clustered
# centroids), where the full search is as fast.
_INDEX_MIN_CELLS = 256
_INDEX_MAX_DIM = 3
_INDEX_MAX_CANDIDATES = 256
# Boxes about as many as the centroids: a lookup then compares 10-20 candidates in 2-D (at 4
# centroids a box, 35-48), which took a 1,024-point lookup from 0.31 to 0.17-0.25 ms at 10,000
# cells and from 0.30 to 0.18 ms at 65,536 on a 2-core CPU; building costs more (0.4 s at
# 10,000 cells, 1.9 s at 65,536, once per tessellation).
_CENTROIDS_PER_BOX = 1
_MARGIN_BOXES = 2


def _bucket_index(centroids: Any, min_cells: int = _INDEX_MIN_CELLS) -> _BucketIndex | None:
    if isinstance(centroids, jax.core.Tracer):
        return None  # built inside a trace: no host values, use the full search
    c = np.asarray(centroids, np.float32)
    if c.ndim != 2 or c.shape[0] < min_cells or not 1 <= c.shape[1] <= _INDEX_MAX_DIM:
        return None
    if not np.all(np.isfinite(c)):
        return None  # the finiteness check reports it
    boxes = max(1, round((c.shape[0] / _CENTROIDS_PER_BOX) ** (1 / c.shape[1])))
    try:
        return _BucketIndex(c, boxes)
    except _NoIndex:
        return None


@typing.final
class CVTTessellation(AbstractTessellation):
    """A centroidal Voronoi tessellation: a descriptor belongs to its nearest centroid.

    With 256 cells or more and at most 3 descriptors, construction builds an index of which
    centroids can be nearest in each box of a grid laid over them (`_BucketIndex`), and
    `index` compares a descriptor with its box's candidates only; descriptors outside the
    centroids' box, and every case without an index, use the full search. Both are exact.
    Build a new tessellation to change the centroids (`eqx.tree_at` would keep the old index).

    **Arguments:** `centroids` ``(num_cells, num_descriptors)``; `index_min_cells`, the fewest
    cells that get an index (pass a huge number for the full search always).
    """

    centroids: Centroids = eqx.field(converter=f32)
    bucket_index: _BucketIndex | None = eqx.field(static=True)

    def __init__(self, centroids: Any, *, index_min_cells: int = _INDEX_MIN_CELLS):
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

    def index(self, descriptors: Float[Array, "batch num_descriptors"]) -> Int[Array, " batch"]:
        if self.bucket_index is None:
            return nearest_centroid(descriptors, self.centroids)
        _check_points(descriptors, self.num_descriptors)
        points = descriptors.astype(jnp.float32)
        return jax.lax.cond(
            self.bucket_index.inside(points),
            self.bucket_index.lookup,
            lambda p: nearest_centroid(p, self.centroids),
            points,
        )

    @classmethod
    def from_kmeans(
        cls,
        num_cells: int,
        num_descriptors: int,
        minval: Any = 0.0,
        maxval: Any = 1.0,
        num_samples: int = 50_000,
        num_iters: int = 20,
        *,
        key: PRNGKey,
    ) -> "CVTTessellation":
        """Centroids by k-means on uniform samples in the box ``[minval, maxval]``."""
        return cls(
            cvt_centroids(
                num_cells, num_descriptors, minval, maxval, num_samples, num_iters, key=key
            )
        )

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CVTTessellation":
        """Centroids from a ``.npy`` file of shape ``(num_cells, num_descriptors)``, or from a
        text file with one centroid per line (the PGA-MAP-Elites repository's
        ``CVT/centroids_K_D.dat``; any name not ending in ``.npy``)."""
        path = os.fspath(path)
        try:
            if path.endswith(".npy"):
                centroids = np.load(path)
            else:
                centroids = np.loadtxt(path, ndmin=2)
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read centroids from {path!r}: {e}") from e
        return cls(centroids)


def reindexed(tree: Any) -> Any:
    """``tree`` with every `CVTTessellation` whose bucket index was built from other centroids
    rebuilt from its own.

    The index is a static field: centroids read from a file into a template keep the
    template's index, and the template's centroids need not be the saved ones (centroids
    computed again by another version of `cvt_centroids`, say), which would send descriptors
    to wrong cells without a word. `jobs.deserialise` calls this on everything it reads.
    """

    def fix(x: Any) -> Any:
        if not isinstance(x, CVTTessellation) or x.bucket_index is None:
            return x
        c = x.centroids
        if isinstance(c, jax.core.Tracer) or not getattr(c, "is_fully_addressable", True):
            return x
        c = np.asarray(c, np.float32)
        if np.array_equal(x.bucket_index.padded[:-1], c):
            return x
        return CVTTessellation(c)

    return jax.tree.map(fix, tree, is_leaf=lambda x: isinstance(x, CVTTessellation))


def _weighted_draw(weights: Float[Array, " m"], u: Float[Array, ""]) -> Int[Array, ""]:
    """The index of the first cumulative weight above ``u`` (in [0, 1)) times the total: a draw
    with probability proportional to ``weights`` (non-negative).

    Through blocks of about sqrt(m) weights (at least 128): the block from the blocks'
    cumulative sums, then the index within it. One cumulative sum of all the weights took 60
    us for 8,192 on a 2-core CPU (XLA's CPU cumsum is slow), two short ones take 4; k-means++
    draws once per centroid. A count compiles faster than ``searchsorted`` and costs the same
    here.
    """
    m = weights.shape[0]
    width = max(128, 1 << math.ceil(math.log2(math.sqrt(m))))
    num_blocks = -(-m // width)
    blocks = jnp.pad(weights, (0, num_blocks * width - m)).reshape(num_blocks, width)
    ends = jnp.cumsum(jnp.sum(blocks, axis=1))
    target = u * ends[-1]
    b = jnp.minimum(jnp.sum(ends <= target, dtype=jnp.int32), num_blocks - 1)
    start = jnp.where(b > 0, ends[jnp.maximum(b - 1, 0)], 0.0)
    within = jnp.sum(start + jnp.cumsum(blocks[b]) <= target, dtype=jnp.int32)
    return jnp.minimum(b * width + within, m - 1)


def _kmeans_plus_plus(
    samples: Float[Array, "num_samples dim"], bits: UInt32[Array, " num_cells"], num_cells: int
) -> Float[Array, "num_cells dim"]:
    """k-means++ seeding: each next centroid is drawn with probability proportional to D^2.
    ``bits`` are the random words: the first picks the first centroid, each next one a draw."""
    m = samples.shape[0]
    uniforms = (bits >> 8).astype(jnp.float32) * 2.0**-24  # in [0, 1)
    first = samples[jnp.minimum(jnp.floor(uniforms[0] * m).astype(jnp.int32), m - 1)]
    centroids = jnp.zeros((num_cells, samples.shape[1]), samples.dtype).at[0].set(first)
    # Distances from the (dim, m) layout, summed over its leading axis: summing the short rows
    # of the (m, dim) layout took 85 us per centroid for 8,192 samples on a 2-core CPU, this 4.
    columns = samples.T
    sq_dist = lambda c: jnp.sum((columns - c[:, None]) ** 2, axis=0)
    dist = sq_dist(first)

    def pick(i, carry):
        centroids, dist = carry
        new = samples[_weighted_draw(dist, uniforms[i])]
        dist = jnp.minimum(dist, sq_dist(new))
        return centroids.at[i].set(new), dist

    centroids, _ = jax.lax.fori_loop(1, num_cells, pick, (centroids, dist))
    return centroids


_NEIGHBOUR_REFRESH = 5
# Samples are uniform float32 draws in [0, 1): integer codes of 23 bits. Cluster sums are taken
# over the codes in 8-bit parts, as int32, so at most 2**23 samples fit without overflow.
_CODE_BITS = 23
_PART_BITS = 8
_MAX_SAMPLES = 2 ** (31 - _PART_BITS)


def _cluster_means(
    codes: Int[Array, "num_samples dim"], cells: Int[Array, " num_samples"], num_cells: int
) -> tuple[Float[Array, "num_cells dim"], Int[Array, " num_cells"]]:
    """Mean code of each cluster, in [0, 1), and the cluster sizes.

    The sums are integer sums, so they do not depend on the order of the additions: a GPU's
    float scatter-add is unordered and made two calls with one key differ in the last bits.
    """
    d = codes.shape[1]
    shifts = list(range(0, _CODE_BITS, _PART_BITS))[::-1]
    # One scatter-add of every part and a column of ones (the counts).
    columns = [(codes >> shift) & (2**_PART_BITS - 1) for shift in shifts]
    stacked = jnp.concatenate([*columns, jnp.ones_like(codes[:, :1])], axis=1)
    sums = jax.ops.segment_sum(stacked, cells, num_segments=num_cells)
    counts = sums[:, -1]
    total = jnp.zeros((num_cells, d), jnp.float32)
    for i, shift in enumerate(shifts):
        total = total + sums[:, i * d : (i + 1) * d].astype(jnp.float32) * 2.0**shift
    means = total / jnp.maximum(counts, 1).astype(jnp.float32)[:, None] * 2.0**-_CODE_BITS
    return means, counts


# k-means++ seeds from the first max(8192, 4 num_cells) samples (the samples are independent,
# so these are a uniform subset): seeding costs O(num_cells x seeding samples), and from all
# 50,000 samples it was 0.53 of 0.58 s for 1,024 cells, at the same distortion after Lloyd.
_SEED_SAMPLES = 8192
_SEED_SAMPLES_PER_CELL = 4
_ASSIGN_CHUNK = 2048


@jit
def _kmeans(
    codes: Int[Array, "num_samples dim"],
    lo: Float[Array, " dim"],
    hi: Float[Array, " dim"],
    num_cells: int,
    num_iters: int,
    num_neighbours: int,
    seed_bits: UInt32[Array, " num_cells"],
) -> Float[Array, "num_cells dim"]:
    n, d = codes.shape
    samples = lo[None] + codes.astype(jnp.float32) * 2.0**-_CODE_BITS * (hi - lo)[None]
    seeding = min(n, max(_SEED_SAMPLES, _SEED_SAMPLES_PER_CELL * num_cells))
    init = _kmeans_plus_plus(samples[:seeding], seed_bits, num_cells)

    def lloyd(_, carry):
        centroids, cells, neighbours = carry
        means, counts = _cluster_means(codes, cells, num_cells)
        # An empty cluster keeps its previous centroid.
        centroids = jnp.where(counts[:, None] > 0, lo[None] + means * (hi - lo)[None], centroids)
        # Re-assign each sample among the centroids nearest to its current one: centroids move
        # little per step, so this matches a full search at a fraction of its cost.
        candidates = neighbours[cells]
        dist = jnp.sum((samples[:, None, :] - centroids[candidates]) ** 2, axis=-1)
        cells = jnp.take_along_axis(candidates, _argmin_few(dist)[:, None], axis=1)[:, 0]
        return centroids, cells, neighbours

    def refresh(_, carry):
        centroids, cells = carry
        _, neighbours = jax.lax.top_k(-_scores(centroids, centroids), num_neighbours)
        centroids, cells, _ = jax.lax.fori_loop(
            0, _NEIGHBOUR_REFRESH, lloyd, (centroids, cells, neighbours)
        )
        return centroids, cells

    # Exact first assignment, in chunks so the distance matrix stays small. One argmin over
    # scores computed once (not `nearest_centroid`'s min + where with its fallback branch):
    # 0.1-0.2 s less to compile, and no slower here.
    chunk = min(_ASSIGN_CHUNK, n)
    rows = jnp.concatenate([samples, jnp.broadcast_to(samples[:1], (-n % chunk, d))])
    chunks = rows.reshape(-1, chunk, d)
    nearest = lambda p: jnp.argmin(_scores(p, init), axis=-1)
    cells = jax.lax.map(nearest, chunks).reshape(-1)[:n].astype(jnp.int32)
    num_rounds = -(-num_iters // _NEIGHBOUR_REFRESH)
    centroids, _ = jax.lax.fori_loop(0, num_rounds, refresh, (init, cells))
    return centroids


def cvt_centroids(
    num_cells: int,
    num_descriptors: int,
    minval: Any = 0.0,
    maxval: Any = 1.0,
    num_samples: int = 50_000,
    num_iters: int = 20,
    *,
    key: PRNGKey,
) -> Float[Array, "{num_cells} {num_descriptors}"]:
    """``num_cells`` CVT centroids in ``num_descriptors`` dimensions: Lloyd's k-means on
    ``num_samples`` points drawn uniformly in the box ``[minval, maxval]`` (scalars or one
    bound per dimension), seeded by ``key``.

    Deterministic for a given key. Seeding is k-means++ on the first max(8192, 4 num_cells)
    samples; after one exact assignment, each Lloyd step re-assigns a sample among the 16
    centroids nearest to its current one (neighbour lists refreshed every 5 steps), which keeps
    a step linear in ``num_samples``. ``num_iters`` is rounded up to a multiple of 5. Cluster
    sums are integer sums over the samples' 23-bit codes, so the result is the same on every
    call on a GPU too (at most 2**23 samples). One compiled program draws the samples and
    runs the k-means: 1,024 cells from 50,000 samples take about 1 s on a 2-core CPU on the
    first call, compile included.
    """
    check.positive_int("num_cells", num_cells)
    check.positive_int("num_descriptors", num_descriptors)
    check.integer("num_samples", num_samples, minimum=num_cells, maximum=_MAX_SAMPLES)
    check.non_negative_int("num_iters", num_iters)
    lo = _bounds(minval, num_descriptors, "minval")
    hi = _bounds(maxval, num_descriptors, "maxval")
    return _cvt(key, lo, hi, num_cells, num_samples, num_iters, min(num_cells, 16))


@jit
def _cvt(
    key: PRNGKey,
    lo: Float[Array, " dim"],
    hi: Float[Array, " dim"],
    num_cells: int,
    num_samples: int,
    num_iters: int,
    num_neighbours: int,
) -> Float[Array, "num_cells dim"]:
    """Samples and seeding draws from one call of the key's generator, then `_kmeans`."""
    d = lo.shape[0]
    bits = jr.bits(key, (num_samples * d + num_cells,), jnp.uint32)
    # The top 23 bits of each word: a sample's integer code, uniform in [0, 2**23).
    codes = (bits[: num_samples * d] >> (32 - _CODE_BITS)).astype(jnp.int32)
    codes = codes.reshape(num_samples, d)
    return _kmeans(codes, lo, hi, num_cells, num_iters, num_neighbours, bits[num_samples * d :])
