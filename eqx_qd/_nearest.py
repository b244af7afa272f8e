"""Exact nearest-cell searches: the row-major cell of a point on a grid, and the nearest of a
set of centroids (one matmul, then a fast row-wise argmin)."""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int


def _flat_cell(scaled: Float[Array, "batch d"], bins: Sequence[int]) -> Int[Array, " batch"]:
    """Row-major index of the grid cell of each point, given in bin units (`scaled[:, i]` in
    `[0, bins[i])` inside the grid; points outside go to the nearest border cell)."""
    top = jnp.asarray(bins, jnp.float32)[None] - 1.0
    coords = jnp.clip(jnp.floor(scaled), 0.0, top).astype(jnp.int32)
    strides = np.cumprod((1, *bins[::-1]))[:-1][::-1].astype(np.int32)
    return jnp.sum(coords * jnp.asarray(strides)[None], axis=-1)


def _exact_matmul(a: Float[Array, "n d"], b: Float[Array, "d k"]) -> Float[Array, "n k"]:
    """`a @ b` in full float32 on every platform (GPUs default to TF32 for float32 matmuls)."""
    return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)


def _scores(points: Float[Array, "n d"], centroids: Float[Array, "k d"]) -> Float[Array, "n k"]:
    """Squared distances from each point to each centroid up to a per-point constant,
    `|c|^2 - 2 p.c`: one matmul, at full float32 precision (`_exact_matmul`)."""
    return jnp.sum(centroids**2, axis=-1)[None] - 2.0 * _exact_matmul(points, centroids.T)


def _argmin_rows(scores: Float[Array, "n k"]) -> Int[Array, " n"]:
    """Row-wise argmin of wide rows, lowest index among ties, via min + where: XLA's CPU
    argmin is several times slower over wide rows
    (`benchmarks/log/measurements-behind-the-code.md`).

    XLA may compute `scores` twice, once for the minimum and once for the comparison, and
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
    reduction, which over so few columns is faster than `_argmin_rows`."""
    return jnp.argmin(scores, axis=-1).astype(jnp.int32)


def _check_points(points: ArrayLike, dim: int) -> None:
    if jnp.ndim(points) != 2 or jnp.shape(points)[1] != dim:
        raise ValueError(
            f"nearest_centroid: points must have shape (batch, {dim}), got {jnp.shape(points)}"
        )


def nearest_centroid(
    points: Float[Array, "batch dim"], centroids: Float[Array, "num_cells dim"]
) -> Int[Array, " batch"]:
    """Index of the nearest of `centroids` (`(num_cells, dim)`) for each of `points`
    (`(batch, dim)`); ties go to the lowest index.

    Squared distances up to a per-point constant are `|c|^2 - 2 p.c` (one matmul); the minimum
    is found with `min` + `where` because XLA's CPU `argmin` is several times slower
    (with an exact fallback, `_argmin_rows`). The matmul runs at full float32 precision: at
    the default precision a GPU multiplies in TF32 (10-bit mantissa), which sends descriptors
    to the wrong cell (seen on an H100: `benchmarks/log/gpu.md`).
    """
    if jnp.ndim(centroids) != 2:
        raise ValueError(
            f"nearest_centroid: centroids must have shape (num_cells, dim), got "
            f"{jnp.shape(centroids)}"
        )
    _check_points(points, jnp.shape(centroids)[1])
    return _argmin_rows(_scores(points, centroids))
