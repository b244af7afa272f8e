"""The bucket index of a CVT: which centroids can be nearest to a point of each box of a grid
laid over the centroids, so the exact nearest-centroid search compares a point with tens of
candidates instead of thousands of centroids."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ._custom_types import CentroidsLike
from ._nearest import _argmin_few, _flat_cell


class _NoIndex(Exception):
    """The centroids are too clustered for an index to pay: use the full search."""


def _build(centroids: np.ndarray, boxes_per_axis: int) -> "CVTIndex":
    """The index of concrete `centroids` with `boxes_per_axis` boxes per axis (before the
    margins), built on the host. A box's candidates are the centroids within `R` of the box,
    `R` being the largest distance from the box's corners to the centroid nearest its centre:
    for any point `p` of the box, `|p - nn(p)| <= |p - c*| <= R`, so `nn(p)` lies within
    `R` of the box. Lists are sorted by index (ties go to the lowest index, as in
    `nearest_centroid`) and padded with `num_cells`. Raises `_NoIndex` when the centroids are
    too uneven for an index to pay."""
    c = np.asarray(centroids, np.float64)
    n, d = c.shape
    lo, hi = c.min(axis=0), c.max(axis=0)
    width = np.where(hi > lo, (hi - lo) / boxes_per_axis, 1.0)
    # Boxes past the outermost centroids on every side: descriptors usually reach beyond
    # them (to the bounds the centroids were fitted in, about half a cell away), and a
    # batch with a point outside the grid takes the full search.
    g, lo = boxes_per_axis + 2 * _MARGIN_BOXES, lo - _MARGIN_BOXES * width
    lo32, width32 = lo.astype(np.float32), width.astype(np.float32)
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
        """Centroid ids of the boxes within `r` boxes of each of `boxes`, padded with
        -1 (each centroid is in one box, so no id repeats)."""
        offsets = np.stack(np.meshgrid(*[np.arange(-r, r + 1)] * d, indexing="ij"), -1)
        other = grid[boxes][:, None] + offsets.reshape(1, -1, d)  # (boxes, offsets, d)
        valid = np.all((other >= 0) & (other < g), axis=-1)
        flat = (np.clip(other, 0, g - 1) * strides).sum(-1)
        ids = np.where(valid[..., None], members[flat], -1)  # (boxes, offsets, members)
        return ids.reshape(len(boxes), -1)

    def within(ids: np.ndarray, boxes: np.ndarray) -> np.ndarray:
        """`ids` within each box's reach, sorted, padded with `n`."""
        pts = c[np.maximum(ids, 0)]  # (boxes, m, d): float64, so the reach test is exact
        lows = box_lo[boxes][:, None]
        gap = np.maximum(np.maximum(lows - pts, pts - (lows + width)), 0)
        near = (ids >= 0) & ((gap**2).sum(-1) <= slack[boxes, None])
        return np.sort(np.where(near, ids, n), axis=1)

    # The reach of each box, from a centroid near its centre (any centroid would be safe).
    everywhere = np.arange(len(grid))
    near = around(1, everywhere)
    centre = box_lo + width / 2
    d_centre = np.where(
        near >= 0, ((c[np.maximum(near, 0)] - centre[:, None]) ** 2).sum(-1), np.inf
    )
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
    padded = np.concatenate([c, np.full((1, d), 1e30)], 0)  # the padding never wins
    return CVTIndex(
        jnp.asarray(lo32),
        jnp.asarray(width32),
        jnp.asarray(table),
        jnp.asarray(padded.astype(np.float32)),
        g,
    )


@typing.final
class CVTIndex(eqx.Module):
    """Which centroids can be nearest to a point of each box of a regular grid laid over the
    centroids (a CVT's bucket index, `CVTTessellation.bucket_index`): the exact nearest-centroid
    search then compares a point with its box's candidates (tens) instead of every centroid
    (thousands). Built on the host by `CVTTessellation` from concrete centroids.

    **Fields:** `lo` and `width` (the grid's corner and box width per axis), `table` (each
    box's candidates, sorted, padded with `num_cells`), `padded` (the centroids it was built
    from, and one far point the padding refers to) and the static `boxes` (boxes per axis). All
    arrays: the index is saved with its tessellation, and a tessellation uses it only for the
    centroids it was built from (`matches`).
    """

    lo: Float[Array, " dim"]
    width: Float[Array, " dim"]
    table: Int[Array, "num_boxes candidates"]
    padded: Float[Array, "num_cells_plus_one dim"]
    boxes: int = eqx.field(static=True)

    def matches(self, centroids: Float[Array, "num_cells dim"]) -> Bool[Array, ""]:
        """Whether the index was built from `centroids`."""
        if centroids.shape != self.padded[:-1].shape:
            return jnp.asarray(False)
        return jnp.all(self.padded[:-1] == centroids)

    def lookup(self, points: Float[Array, "batch dim"]) -> Int[Array, " batch"]:
        """Nearest centroid of each point, for points inside the grid's box."""
        box = _flat_cell((points - self.lo[None]) / self.width[None], (self.boxes,) * len(self.lo))
        candidates = self.table[box]  # (batch, k)
        cand = self.padded[candidates]  # (batch, k, dim)
        # Squared distances by differences: no cancellation, so nearer to exact than the
        # matmul form of the full search (the two can differ only where distances tie to ~1e-7).
        scores = jnp.sum((points[:, None, :] - cand) ** 2, -1)
        return jnp.take_along_axis(candidates, _argmin_few(scores)[:, None], axis=1)[:, 0]

    def inside(self, points: Float[Array, "batch dim"]) -> Bool[Array, ""]:
        """Whether every point lies in the grid's box (where `lookup` is exact)."""
        top = self.lo + self.width * self.boxes
        return jnp.all((points >= self.lo[None]) & (points <= top[None]))


# An index pays from about this many cells (measured on CPU at 2-D); it is built for up to 3
# descriptors, and dropped when a box would need more candidates than this (clustered
# centroids), where the full search is as fast.
_INDEX_MIN_CELLS = 256
_INDEX_MAX_DIM = 3
_INDEX_MAX_CANDIDATES = 256
# Boxes about as many as the centroids: a lookup then compares 10-20 candidates in 2-D (at 4
# centroids a box, 35-48), the fastest lookups for a build once per tessellation
# (benchmarks/log/measurements-behind-the-code.md).
_CENTROIDS_PER_BOX = 1
_MARGIN_BOXES = 2


def _bucket_index(centroids: CentroidsLike, min_cells: int = _INDEX_MIN_CELLS) -> CVTIndex | None:
    if isinstance(centroids, jax.core.Tracer):
        return None  # built inside a trace: no host values, use the full search
    c = np.asarray(centroids, np.float32)
    if c.ndim != 2 or c.shape[0] < min_cells or not 1 <= c.shape[1] <= _INDEX_MAX_DIM:
        return None
    if not np.all(np.isfinite(c)):
        return None  # the finiteness check reports it
    boxes = max(1, round((c.shape[0] / _CENTROIDS_PER_BOX) ** (1 / c.shape[1])))
    try:
        return _build(c, boxes)
    except _NoIndex:
        return None
