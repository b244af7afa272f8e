"""The sliding-boundaries archive (Fontaine et al., 2019): a grid whose boundaries move to the
quantiles of the recent descriptors, so its cells follow where the solutions are."""

import math
import typing
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, ScalarLike

from .. import _validate as check
from .._custom_types import BoundsLike, Extra, Genotypes
from .._kmeans import _bounds
from .._misc import f32, i32, is_none, tree_zeros_batch
from ._base import AbstractRepertoire, AddInfo, AddStatus, pooled_rows, valid_candidates


@typing.final
class SlidingBoundariesRepertoire(AbstractRepertoire):
    """pyribs' `SlidingBoundariesArchive` in JAX: `dims[i]` cells along descriptor `i`, their
    boundaries first even over `lower` / `upper`, then, every `remap_frequency` candidates,
    moved to the quantiles of the last `buffer_capacity` candidates' descriptors.

    `add` takes the batch's candidates one after another, as pyribs does (the archive is not
    invariant to their order): each goes into the buffer (the oldest leaving a full one) and is
    inserted in its cell if the cell is empty or it is strictly fitter; on every
    `remap_frequency`-th candidate, instead, boundary `j` of dimension `i` becomes the
    `floor(j n / dims[i])`-th smallest of the buffer's `n` descriptors along `i` (the last, the
    largest), the archive is emptied, and its elites and then the buffer's candidates, oldest
    first, are inserted again (the best of each new cell kept, the earliest among equals),
    the newest candidate last. A descriptor is clipped into the boundaries (`+ epsilon`,
    below the top by `epsilon`) and its cell found by binary search. Candidates with a
    non-finite fitness or descriptor are refused before the buffer (pyribs raises on them) and
    do not count towards a remap.

    `AddInfo`: `status` and `delta` against the cell as the candidate found it; `value`,
    pyribs', the fitness minus the cell's elite (0 for an empty cell); `threshold_status` is
    `status`; `cell`, the cell it was judged in.

    **Fields:** the contract's four (`genotypes`, `fitnesses`, `descriptors`, `extra`: one
    slot per cell, row-major over `dims`); `boundaries`
    `(num_descriptors, max(dims) + 1)` (row `i` holds `dims[i] + 1` boundaries, NaN after);
    the buffer's `buffer_genotypes`, `buffer_fitnesses`, `buffer_descriptors`,
    `buffer_extra`, `buffer_count` (how many it holds) and `buffer_head` (its oldest slot);
    `seen`, the candidates counted so far; `initial_lower`, `initial_upper`; `epsilon`
    (float32 leaf); static `dims` and `remap_frequency`; `filled_order`, when each cell was
    filled (pyribs' store order, which decides between equal fitnesses at a remap). Build one
    with `empty`.
    """

    genotypes: Genotypes
    fitnesses: Float[Array, " capacity"]
    descriptors: Float[Array, "capacity num_descriptors"]
    extra: Extra
    boundaries: Float[Array, "num_descriptors edges"]
    filled_order: Int[Array, " capacity"]
    buffer_genotypes: Genotypes
    buffer_fitnesses: Float[Array, " buffer"]
    buffer_descriptors: Float[Array, "buffer num_descriptors"]
    buffer_extra: Extra
    buffer_count: Int[Array, ""]
    buffer_head: Int[Array, ""]
    seen: Int[Array, ""]
    initial_lower: Float[Array, " num_descriptors"]
    initial_upper: Float[Array, " num_descriptors"]
    epsilon: Float[Array, ""] = eqx.field(converter=f32)
    dims: tuple[int, ...] = eqx.field(static=True)
    remap_frequency: int = eqx.field(static=True)

    def __check_init__(self):
        self.check_layout()

    @classmethod
    def empty(
        cls,
        dims: Sequence[int],
        lower: BoundsLike,
        upper: BoundsLike,
        genotype: Genotypes,
        extra: Extra = None,
        *,
        remap_frequency: int = 100,
        buffer_capacity: int = 1000,
        epsilon: ScalarLike = 1e-6,
    ) -> "SlidingBoundariesRepertoire":
        """An empty archive of `dims` cells per descriptor, first even over `lower` /
        `upper`, with slots shaped like one unbatched `genotype` (and `extra`); pyribs'
        defaults `remap_frequency=100`, `buffer_capacity=1000`, `epsilon=1e-6`."""
        owner = "SlidingBoundariesRepertoire.empty"
        dims = tuple(int(d) for d in dims)
        if not dims or any(d < 1 for d in dims):
            raise ValueError(
                f"{owner}: dims must be a non-empty sequence of positive ints, got {dims}"
            )
        check.positive_int(f"{owner}: remap_frequency", remap_frequency)
        check.positive_int(f"{owner}: buffer_capacity", buffer_capacity)
        check.positive(f"{owner}: epsilon", epsilon)
        low, high = _bounds(lower, len(dims), "lower"), _bounds(upper, len(dims), "upper")
        check.ordered(f"{owner}: lower", low, f"{owner}: upper", high)
        # In jnp: `MAPElites.init` calls `emptied` under `jit`, with the bounds traced.
        edges = jnp.full((len(dims), max(dims) + 1), jnp.nan, jnp.float32)
        for i, d in enumerate(dims):
            edges = edges.at[i, : d + 1].set(jnp.linspace(low[i], high[i], d + 1))
        cells = math.prod(dims)
        return cls(
            genotypes=tree_zeros_batch(genotype, cells),
            fitnesses=jnp.full((cells,), -jnp.inf, jnp.float32),
            descriptors=jnp.zeros((cells, len(dims)), jnp.float32),
            extra=None if extra is None else tree_zeros_batch(extra, cells),
            boundaries=edges,
            filled_order=jnp.full((cells,), _NEVER, jnp.int32),
            buffer_genotypes=tree_zeros_batch(genotype, buffer_capacity),
            buffer_fitnesses=jnp.full((buffer_capacity,), -jnp.inf, jnp.float32),
            buffer_descriptors=jnp.zeros((buffer_capacity, len(dims)), jnp.float32),
            buffer_extra=None if extra is None else tree_zeros_batch(extra, buffer_capacity),
            buffer_count=i32(0),
            buffer_head=i32(0),
            seen=i32(0),
            initial_lower=low,
            initial_upper=high,
            epsilon=epsilon,
            dims=dims,
            remap_frequency=remap_frequency,
        )

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "SlidingBoundariesRepertoire":
        """An empty archive with this one's `dims`, initial bounds, remap frequency, buffer
        capacity and `epsilon`."""
        return SlidingBoundariesRepertoire.empty(
            self.dims,
            self.initial_lower,
            self.initial_upper,
            genotype,
            extra,
            remap_frequency=self.remap_frequency,
            buffer_capacity=self.buffer_capacity,
            epsilon=self.epsilon,
        )

    @property
    def buffer_capacity(self) -> int:
        """The most candidates the buffer holds."""
        return self.buffer_fitnesses.shape[0]

    @property
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """The outer boundaries of every dimension (`lower` / `upper` until the first
        remap, the buffer's smallest and largest descriptors after)."""
        return _extent(self.boundaries, self.dims)

    def cell_of(self, descriptors: Float[Array, "batch num_descriptors"]) -> Int[Array, " batch"]:
        """The cell `(batch,)` each descriptor falls in under the current boundaries."""
        return _cells(descriptors, self.boundaries, self.dims, self.epsilon)

    def add(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra = None,
    ) -> tuple["SlidingBoundariesRepertoire", AddInfo]:
        """Take the batch's candidates one after another (see the class)."""
        self.check_batch(genotypes, descriptors, fitnesses, extra)
        batch, cells, cap = fitnesses.shape[0], self.capacity, self.buffer_capacity
        if batch > cap:
            raise ValueError(
                f"SlidingBoundariesRepertoire.add: a batch of {batch} candidates is larger "
                f"than the buffer (buffer_capacity={cap}): the batch would push its own "
                "candidates out before a remap sees them; build the archive with a "
                "buffer_capacity of at least the batch size"
            )
        valid = valid_candidates(fitnesses, descriptors)
        offered_f = jnp.where(valid, fitnesses, -jnp.inf).astype(jnp.float32)
        offered_d = jnp.where(valid[:, None], descriptors, 0.0).astype(jnp.float32)
        dims, eps, freq = self.dims, self.epsilon, self.remap_frequency
        fresh = cells + cap  # pool rows: stored cells, then the buffer, then the batch

        def basic(store, clock, f, d, source, edges, clip_edges=None):
            fit, desc, src, since = store
            cell = _cells(d[None], edges, dims, eps, clip_edges)[0]
            current = fit[cell]
            occupied = jnp.isfinite(current)
            better = ~occupied | (f > current)
            status = jnp.where(
                occupied,
                jnp.where(better, AddStatus.IMPROVED, AddStatus.NOT_ADDED),
                AddStatus.NEW,
            ).astype(jnp.int32)
            store = (
                fit.at[cell].set(jnp.where(better, f, current)),
                desc.at[cell].set(jnp.where(better, d, desc[cell])),
                src.at[cell].set(jnp.where(better, source, src[cell])),
                since.at[cell].set(jnp.where(occupied, since[cell], clock)),
            )
            value = f - jnp.where(occupied, current, 0.0)
            clock = clock + (~occupied).astype(jnp.int32)
            return store, clock, (cell, status, f - current, value)

        def remapped(store, buf, count, head, old_edges):
            """New boundaries from the buffer, and the archive refilled from its elites and
            the buffer but its newest entry (the candidate being added). The elites go first in
            the order their cells were filled (pyribs' store order), then the buffer, oldest
            first: among equal fitnesses the first wins, as pyribs' one-by-one insertion."""
            fit, desc, src, since = store
            bfit, bdesc, bsrc = buf
            first = jnp.argsort(jnp.where(jnp.isfinite(fit), since, _NEVER), stable=True)
            order = (head + jnp.arange(cap)) % cap  # oldest first
            held = jnp.arange(cap) < count
            ranked = jnp.sort(jnp.where(held[:, None], bdesc, jnp.inf), axis=0)
            edges = _quantile_edges(ranked, count, dims)
            fs = jnp.concatenate([fit[first], bfit[order]])
            ds = jnp.concatenate([desc[first], bdesc[order]])
            ss = jnp.concatenate([src[first], bsrc[order]])
            ok = jnp.concatenate([jnp.isfinite(fit[first]), jnp.arange(cap) < count - 1])
            target = _cells(ds, edges, dims, eps, old_edges)
            best = jax.ops.segment_max(jnp.where(ok, fs, -jnp.inf), target, num_segments=cells)
            rank = jnp.arange(fs.shape[0], dtype=jnp.int32)
            top = ok & (fs == best[target])
            winner = jax.ops.segment_min(
                jnp.where(top, rank, fs.shape[0]), target, num_segments=cells
            )
            stored = winner < fs.shape[0]
            winner = jnp.minimum(winner, fs.shape[0] - 1)
            store = (
                jnp.where(stored, best, -jnp.inf),
                jnp.where(stored[:, None], ds[winner], 0.0),
                jnp.where(stored, ss[winner], 0),
                jax.ops.segment_min(jnp.where(ok, rank, _NEVER), target, num_segments=cells),
            )
            return store, i32(fs.shape[0]), edges

        def take(carry, row):
            store, clock, buf, count, head, seen, edges = carry
            f, d, b = row
            full = count >= cap
            slot = jnp.where(full, head, (head + count) % cap)
            head = jnp.where(full, (head + 1) % cap, head)
            count = jnp.minimum(count + 1, cap)
            bfit, bdesc, bsrc = buf
            buf = (bfit.at[slot].set(f), bdesc.at[slot].set(d), bsrc.at[slot].set(fresh + b))
            seen = seen + 1

            def remap(args):
                store, clock, old = args
                store, clock, edges = remapped(store, buf, count, head, old)
                return *basic(store, clock, f, d, fresh + b, edges, old), edges

            def plain(args):
                store, clock, edges = args
                return *basic(store, clock, f, d, fresh + b, edges), edges

            store, clock, info, edges = jax.lax.cond(
                seen % freq == 0, remap, plain, (store, clock, edges)
            )
            return (store, clock, buf, count, head, seen, edges), info

        def step(carry, row):
            f, d, ok, b = row

            def refuse(carry):
                nan = jnp.float32(jnp.nan)
                return carry, (i32(-1), i32(AddStatus.NOT_ADDED), nan, nan)

            return jax.lax.cond(ok, lambda c: take(c, (f, d, b)), refuse, carry)

        store = (
            self.fitnesses,
            self.descriptors,
            jnp.arange(cells, dtype=jnp.int32),
            self.filled_order,
        )
        buf = (
            self.buffer_fitnesses,
            self.buffer_descriptors,
            cells + jnp.arange(cap, dtype=jnp.int32),
        )
        clock = jnp.max(jnp.where(self.filled, self.filled_order + 1, 0)).astype(jnp.int32)
        carry = (store, clock, buf, self.buffer_count, self.buffer_head, self.seen, self.boundaries)
        rows = (offered_f, offered_d, valid, jnp.arange(batch, dtype=jnp.int32))
        (store, _, buf, count, head, seen, edges), info = jax.lax.scan(step, carry, rows)
        (fit, desc, src, since), (bfit, bdesc, bsrc) = store, buf
        cell, status, delta, value = info

        def pool(stored, held, offered):
            both = jax.tree.map(lambda a, c: jnp.concatenate([a, c]), stored, held)
            return pooled_rows(both, offered, jnp.concatenate([src, bsrc]))

        rows_all = pool(self.genotypes, self.buffer_genotypes, genotypes)
        extra_all = None if extra is None else pool(self.extra, self.buffer_extra, extra)
        cut = lambda tree, lo, hi: None if tree is None else jax.tree.map(lambda x: x[lo:hi], tree)
        archive = (cut(rows_all, 0, cells), fit, desc, cut(extra_all, 0, cells), edges)
        held = (cut(rows_all, cells, cells + cap), bfit, bdesc, cut(extra_all, cells, cells + cap))
        new = eqx.tree_at(
            lambda r: (
                r.genotypes,
                r.fitnesses,
                r.descriptors,
                r.extra,
                r.boundaries,
                r.filled_order,
                r.buffer_genotypes,
                r.buffer_fitnesses,
                r.buffer_descriptors,
                r.buffer_extra,
                r.buffer_count,
                r.buffer_head,
                r.seen,
            ),
            self,
            (*archive, since, *held, count, head, seen),
            is_leaf=is_none,
        )
        return new, AddInfo(
            cell=cell, status=status, delta=delta, threshold_status=status, value=value
        )


_NEVER = 2**30
"""`filled_order` of a cell never filled."""


def _extent(edges, dims):
    lower = edges[:, 0]
    upper = jnp.stack([edges[i, d] for i, d in enumerate(dims)])
    return lower, upper


def _cells(descriptors, edges, dims, epsilon, clip_edges=None) -> Int[Array, " batch"]:
    """Row-major cell of each descriptor: clipped into `[lower, upper - epsilon]` after adding
    `epsilon`, then `searchsorted` (left) in the dimension's lower boundaries, minus one. The
    clip bounds are the outer `edges`, or those of `clip_edges`: pyribs re-inserts a remap's
    elites clipped to the bounds from before the remap, set anew only after it."""
    lower, upper = _extent(edges if clip_edges is None else clip_edges, dims)
    clipped = jnp.clip(descriptors + epsilon, lower[None, :], (upper - epsilon)[None, :])
    coords = []
    for i, d in enumerate(dims):
        found = jnp.searchsorted(edges[i, :d], clipped[:, i], side="left").astype(jnp.int32)
        coords.append(jnp.maximum(found - 1, 0))
    strides = np.cumprod((1, *dims[::-1]))[:-1][::-1].astype(np.int32)
    return jnp.sum(jnp.stack(coords, axis=1) * jnp.asarray(strides)[None, :], axis=1)


def _quantile_edges(ranked, count, dims) -> Float[Array, "num_descriptors edges"]:
    """pyribs' remap: boundary `j` of dimension `i` is the `floor(j count / dims[i])`-th
    smallest of the `count` held descriptors (`ranked`, sorted per column, the held first);
    the last boundary is the largest."""
    rows = []
    width = max(dims) + 1
    for i, d in enumerate(dims):
        j = jnp.arange(d, dtype=jnp.int32)
        picks = ranked[(j * count) // d, i]
        row = jnp.concatenate([picks, ranked[count - 1, i][None]])
        rows.append(jnp.concatenate([row, jnp.full((width - d - 1,), jnp.nan, jnp.float32)]))
    return jnp.stack(rows)
