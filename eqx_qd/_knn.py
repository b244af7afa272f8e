"""Exact k-nearest-neighbour distances under a mask, blocked so memory stays bounded: what DNS,
the unstructured archive and the novelty selector share."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int


# Rows per block: a block's distance matrix holds at most this many entries (64 MiB).
_BLOCK_ENTRIES = 1 << 24


def squared_distances(a: Float[Array, "m d"], b: Float[Array, "n d"]) -> Float[Array, "m n"]:
    """Squared Euclidean distances. Few descriptor dimensions: the differences themselves,
    one coordinate at a time (exact, no cancellation; XLA's CPU code reduces a short last axis
    of a 3-D array many times slower than it adds 2-D arrays); many: through a matrix
    product, clipped at 0."""
    if a.shape[-1] <= 16:
        total = jnp.zeros((a.shape[0], b.shape[0]), jnp.result_type(a, b))
        for j in range(a.shape[-1]):
            total = total + jnp.square(a[:, j, None] - b[None, :, j])
        return total
    cross = a @ b.T
    sq = jnp.sum(a * a, axis=-1)[:, None] + jnp.sum(b * b, axis=-1)[None, :] - 2.0 * cross
    return jnp.maximum(sq, 0.0)


def mean_of_finite(d: Float[Array, "m k"]) -> tuple[Float[Array, " m"], Int[Array, " m"]]:
    """Per row, the mean of the finite entries (summed left to right: the result depends on
    the values only, never on a reduction order) and how many there are."""
    finite = jnp.isfinite(d)
    total = jnp.zeros(d.shape[:1], d.dtype)
    for j in range(d.shape[1]):
        total = total + jnp.where(finite[:, j], d[:, j], 0.0)
    count = jnp.sum(finite, axis=1, dtype=jnp.int32)
    return total / jnp.maximum(count, 1).astype(d.dtype), count


def smallest(x: Float[Array, "m n"], k: int) -> tuple[Float[Array, "m k"], Int[Array, "m k"]]:
    """The `k` smallest entries of each row, ascending (a repeated value counts as often as it
    occurs, ties to the lower column), and their columns. Small `k`: `k` passes of row minimum
    and masking of its first occurrence, which XLA's CPU code runs several times faster than
    `lax.top_k`; larger `k`: `top_k`."""
    if k > 4:
        values, columns = jax.lax.top_k(-x, k)
        return -values, columns.astype(jnp.int32)
    columns = jnp.arange(x.shape[1], dtype=jnp.int32)
    out, where = [], []
    for _ in range(k):
        low = jnp.min(x, axis=1, keepdims=True)
        first = jnp.min(jnp.where(x == low, columns[None, :], x.shape[1]), axis=1, keepdims=True)
        out.append(low[:, 0])
        where.append(jnp.minimum(first[:, 0], x.shape[1] - 1))
        x = jnp.where(columns[None, :] == first, jnp.inf, x)
    return jnp.stack(out, axis=1), jnp.stack(where, axis=1)


def k_nearest(
    queries: Float[Array, "m d"],
    points: Float[Array, "n d"],
    allowed: Callable[[Int[Array, " r"]], Bool[Array, "r n"]],
    k: int,
    *,
    with_index: bool = False,
    squared: bool = False,
) -> Float[Array, "m k"] | tuple[Float[Array, "m k"], Int[Array, "m k"]]:
    """For each query row `i`, the distances to its `k` nearest points among those that
    `allowed(rows)[.., j]` permits, ascending; `+inf` where fewer than `k` are allowed. With
    `with_index`, also the points' indices (meaningless where the distance is `+inf`). With
    `squared`, the squared distances themselves (no square root taken: a caller that squares
    the distances again would get another rounding, which XLA may or may not simplify away
    depending on the program around it).

    The queries go through in blocks (`lax.map`), so memory is `O(block * n)`, not
    `O(m * n)`. `k` is clamped to `n`."""
    m, n = queries.shape[0], points.shape[0]
    k_eff = min(k, n)
    rows = max(1, min(m, _BLOCK_ENTRIES // max(n, 1)))
    blocks = -(-m // rows)
    padded = blocks * rows
    q = jnp.pad(queries, ((0, padded - m), (0, 0)))
    index = jnp.arange(padded, dtype=jnp.int32)

    def block(args):
        qb, ib = args
        sq = jnp.where(allowed(jnp.minimum(ib, m - 1)), squared_distances(qb, points), jnp.inf)
        values, columns = smallest(sq, k_eff)
        return (values if squared else jnp.sqrt(values)), columns

    out, columns = jax.lax.map(block, (q.reshape(blocks, rows, -1), index.reshape(blocks, rows)))
    out, columns = out.reshape(padded, k_eff)[:m], columns.reshape(padded, k_eff)[:m]
    if k_eff < k:
        out = jnp.pad(out, ((0, 0), (0, k - k_eff)), constant_values=jnp.inf)
        columns = jnp.pad(columns, ((0, 0), (0, k - k_eff)))
    return (out, columns) if with_index else out
