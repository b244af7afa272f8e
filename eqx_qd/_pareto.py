"""Pareto dominance and the hypervolume, every objective higher-is-better: what the
multi-objective repertoire inserts by and what its metrics measure."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from . import _validate as check


def dominates(a: Float[Array, "*#batch m"], b: Float[Array, "*#batch m"]) -> Bool[Array, "..."]:
    """Whether `a` Pareto-dominates `b` (broadcast over leading axes): no objective worse and
    at least one better. Equal vectors dominate neither way; a NaN compares false, so a
    vector with a NaN dominates nothing and nothing dominates it."""
    return jnp.all(a >= b, axis=-1) & jnp.any(a > b, axis=-1)


def non_dominated(
    objectives: Float[Array, "n m"], mask: Bool[Array, " n"] | None = None
) -> Bool[Array, " n"]:
    """Which rows of `objectives` `(n, m)` no other row dominates, among the rows `mask`
    keeps (all by default); rows outside the mask are `False`. Equal rows are all kept.
    `O(n^2 m)`."""
    n = objectives.shape[0]
    keep = jnp.ones((n,), bool) if mask is None else mask
    beaten = dominates(objectives[None, :, :], objectives[:, None, :]) & keep[None, :]
    return keep & ~jnp.any(beaten, axis=1)


def front_crowding(
    objectives: Float[Array, "n m"], filled: Bool[Array, " n"]
) -> Float[Array, " n"]:
    """MOME-PGX's selection weight of each solution of one front (the rows `filled` keeps;
    0 elsewhere): the mean over objectives of its gaps to the previous and the next solution
    along that objective, divided by the front's range on it; a front's end, which has one
    neighbour, counts that gap twice. A flat objective adds nothing. Fronts of one or two
    solutions weigh theirs equally."""
    n, m = objectives.shape
    count = jnp.sum(filled)
    total = jnp.zeros((n,), objectives.dtype)
    for j in range(m):
        values = jnp.where(filled, objectives[:, j], jnp.inf)  # the empty rows last
        order = jnp.argsort(values, stable=True)
        position = jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
        sorted_values = values[order]
        low = jnp.min(jnp.where(filled, objectives[:, j], jnp.inf))
        high = jnp.max(jnp.where(filled, objectives[:, j], -jnp.inf))
        spread = high - low
        prev = sorted_values[jnp.maximum(position - 1, 0)]
        nxt = sorted_values[jnp.minimum(position + 1, n - 1)]
        before = jnp.where(position > 0, values - prev, jnp.nan)
        after = jnp.where(position < count - 1, nxt - values, jnp.nan)
        before = jnp.where(jnp.isnan(before), after, before)
        after = jnp.where(jnp.isnan(after), before, after)
        gap = jnp.where(spread > 0, (before + after) / jnp.where(spread > 0, spread, 1.0), 0.0)
        total = total + jnp.where(filled, gap, 0.0)
    weights = total / m
    return jnp.where(count <= 2, filled.astype(objectives.dtype), weights)


def _volume_above(q: Float[Array, "n m"]) -> Float[Array, ""]:
    """The volume of the union of the boxes `[0, q_i]` (every entry of `q` non-negative; a
    zero row adds nothing), by slicing along the last objective: its values in descending
    order cut the union into slabs, each the last objective's gap times the volume, in the
    remaining objectives, of the rows at or above it. `O(n log n)` for two objectives,
    `O(n^2)` for three, `O(n^(m-1) log n)` beyond."""
    n, m = q.shape
    if m == 1:
        return jnp.max(q[:, 0], initial=0.0)
    order = jnp.argsort(-q[:, -1], stable=True)
    q = q[order]
    heights = q[:, -1]
    gaps = heights - jnp.concatenate([heights[1:], jnp.zeros((1,), q.dtype)])
    if m == 2:
        widths = jax.lax.cummax(q[:, 0])
        return jnp.sum(gaps * widths)
    rows = jnp.arange(n)
    if m == 3:
        # Each slab's area is the 2-D volume of the rows at or above it: with the rows sorted
        # once by the first objective, a row left out of a slab takes height 0 and the
        # staircase over the others is a running max, so every slab costs O(n), not a sort.
        by_x = jnp.argsort(-q[:, 0], stable=True)
        xs, ys, level = q[by_x, 0], q[by_x, 1], rows[by_x]
        widths = xs - jnp.concatenate([xs[1:], jnp.zeros((1,), q.dtype)])

        def area(k):
            return jnp.sum(widths * jax.lax.cummax(jnp.where(level <= k, ys, 0.0)))

        return jnp.sum(gaps * jax.lax.map(area, rows, batch_size=256))

    def slab(k):
        kept = jnp.where((rows <= k)[:, None], q[:, :-1], 0.0)
        return _volume_above(kept)

    return jnp.sum(gaps * jax.vmap(slab)(rows))


def hypervolume(
    points: Float[Array, "n m"],
    reference_point: Float[Array, " m"],
    mask: Bool[Array, " n"] | None = None,
) -> Float[Array, ""]:
    """The hypervolume of `points` (the rows `mask` keeps, every finite row by default) with
    respect to `reference_point`: the volume of the region that some point dominates and that
    dominates the reference point. Dominated points add nothing, so it is the hypervolume of
    their Pareto front; a point not strictly above the reference point on every objective
    adds nothing either (QDax's `compute_hypervolume` gives such points signed areas; on a
    front that the reference point bounds the two agree). Exact in any number of objectives,
    `O(n log n)` for two, `O(n^2)` for three.

    **Arguments:** `points` `(n, m)`, `reference_point` `(m,)`, `mask` `(n,)` or `None`.
    """
    check.shape("hypervolume: reference_point", reference_point, (points.shape[-1],))
    if mask is None:
        mask = jnp.all(jnp.isfinite(points), axis=-1)
    q = jnp.maximum(points - reference_point[None, :], 0.0)
    q = jnp.where(mask[:, None] & jnp.all(jnp.isfinite(q), axis=-1, keepdims=True), q, 0.0)
    return _volume_above(q.astype(jnp.float32))
