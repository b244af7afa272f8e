"""Extract-ME's archive (Flageat, Huber, Helenon, Doncieux, Cully, 2025: the Extract-QD
Framework, arXiv 2502.06585): cells with depth, each solution carrying an estimation buffer
(the running mean of every score it has had, and how many), from which elites are extracted
to be scored again and re-inserted."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._misc import tree_concatenate, tree_take, tree_zeros_batch
from .._tessellation import AbstractTessellation
from ._base import AddInfo, cell_info, valid_candidates
from ._sampled import SampledExtra
from ._tessellated import AbstractRepertoireOverCells


NEW = -1
"""An `ExtractOffer.sources` value: a new candidate, inserted with its own scores."""
VOID = -2
"""An `ExtractOffer.sources` value: an extraction row with nothing extracted (fewer elites than
extraction rows); scored, counted, never inserted."""


class Extracted(eqx.Module):
    """What `ExtractRepertoire.extract` takes out to be scored again: `genotypes` (leading
    axis `num`) and `sources` `(num,)`, each the flat slot (`layer * num_cells + cell`) it
    came from, or `VOID` where there was no elite left to extract."""

    genotypes: Genotypes
    sources: Int[Array, " num"]


class ExtractOffer(eqx.Module):
    """What `ExtractRepertoire.add` takes beside a scored batch: per candidate its `sources`
    (the flat slot an extracted elite came from, `NEW` for a new candidate, `VOID` for an empty
    extraction row) and `samples`, how many scorings its fitness and descriptor summarise (1,
    or a `Sampled` task's `num_samples`)."""

    sources: Int[Array, " batch"]
    samples: Int[Array, " batch"]

    @classmethod
    def of(cls, sources: Int[Array, " batch"] | None, scoring_extra: Extra, batch: int):
        """The offer for a batch of `batch` candidates: `sources` (all `NEW` when `None`) and
        the sample count read from the scoring's extra (a `Sampled` task's `SampledExtra`;
        anything else: one sample each)."""
        if sources is None:
            sources = jnp.full((batch,), NEW, jnp.int32)
        n = 1
        if isinstance(scoring_extra, SampledExtra):
            n = scoring_extra.fitness_samples.shape[1]
        return cls(sources.astype(jnp.int32), jnp.full((batch,), n, jnp.int32))


@typing.final
class ExtractRepertoire(AbstractRepertoireOverCells):
    """The container of Extract-ME: every cell keeps its `depth` best solutions by estimated
    fitness (the depth-ordering operator), layer 0 holding the cell's elite; each solution
    keeps an estimation buffer, its `counts` of scorings and the running means of their
    fitnesses and descriptors, which are its stored fitness and descriptor (the cell follows
    the mean descriptor). The contract's `genotypes`, `fitnesses` and `descriptors` are layer 0,
    the elites: what emitters select from and what the metrics and plots report.

    `extract` takes elites out to be scored again; `add` with an `ExtractOffer` that names
    their slots folds the new scores into their buffers (`count` scorings of mean `f` and `m`
    new ones of mean `x` make `count + m` of mean `f + m (x - f) / (count + m)`), removes them
    from their slots and inserts them again beside the new candidates: a lucky elite whose
    estimate falls is overtaken by the next solution of its depth. A re-scoring that fails
    (a non-finite fitness or descriptor) leaves the elite where and as it was.

    **Fields:** `layer_genotypes` (leading axes `(depth, num_cells)`), `layer_fitnesses`
    `(depth, num_cells)` (`-inf` for an empty slot), `layer_descriptors` `(depth, num_cells,
    num_descriptors)`, `layer_counts` `(depth, num_cells)` int32, `tessellation`, `extra`
    (always `None`: no lineage). Build one with `ExtractRepertoire.empty`.
    """

    layer_genotypes: Genotypes
    layer_fitnesses: Float[Array, "depth num_cells"]
    layer_descriptors: Float[Array, "depth num_cells num_descriptors"]
    layer_counts: Int[Array, "depth num_cells"]
    tessellation: AbstractTessellation
    extra: None = None

    def __check_init__(self):
        n, d = self.tessellation.num_cells, self.tessellation.num_descriptors
        depth = self.layer_fitnesses.shape[0]
        if self.layer_fitnesses.shape != (depth, n) or self.layer_counts.shape != (depth, n):
            raise ValueError(
                f"ExtractRepertoire: layer_fitnesses and layer_counts must have shape "
                f"(depth, {n}) for its tessellation, got {self.layer_fitnesses.shape} and "
                f"{self.layer_counts.shape}"
            )
        if self.layer_descriptors.shape != (depth, n, d):
            raise ValueError(
                f"ExtractRepertoire: layer_descriptors must have shape ({depth}, {n}, {d}), "
                f"got {self.layer_descriptors.shape}"
            )
        for leaf in jax.tree.leaves(eqx.filter(self.layer_genotypes, eqx.is_array)):
            if jnp.shape(leaf)[:2] != (depth, n):
                raise ValueError(
                    f"ExtractRepertoire: layer_genotypes must have leading axes ({depth}, {n}), "
                    f"got {jnp.shape(leaf)}"
                )
        if self.extra is not None:
            raise ValueError("ExtractRepertoire stores no extra (no lineage)")

    @classmethod
    def empty(
        cls, tessellation: AbstractTessellation, genotype: Genotypes, depth: int = 8
    ) -> "ExtractRepertoire":
        """An empty archive of `depth` layers over `tessellation`, its slots holding zeros
        shaped like one unbatched `genotype`."""
        check.positive_int("ExtractRepertoire.empty: depth", depth)
        n = tessellation.num_cells
        zeros = tree_zeros_batch(tree_zeros_batch(genotype, n), depth)
        return cls(
            layer_genotypes=zeros,
            layer_fitnesses=jnp.full((depth, n), -jnp.inf, jnp.float32),
            layer_descriptors=jnp.zeros((depth, n, tessellation.num_descriptors), jnp.float32),
            layer_counts=jnp.zeros((depth, n), jnp.int32),
            tessellation=tessellation,
        )

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "ExtractRepertoire":
        """An empty archive with the same cells and depth (`extra` must be `None`)."""
        if extra is not None:
            raise ValueError("ExtractRepertoire stores no extra (no lineage)")
        return ExtractRepertoire.empty(self.tessellation, genotype, self.depth)

    @property
    def depth(self) -> int:
        """How many solutions a cell keeps."""
        return self.layer_fitnesses.shape[0]

    @property
    def genotypes(self) -> Genotypes:
        """The elites' genotypes (layer 0), leading axis `num_cells`."""
        return tree_take(self.layer_genotypes, 0)

    @property
    def fitnesses(self) -> Float[Array, " num_cells"]:
        """The elites' estimated fitnesses (layer 0; `-inf` in an empty cell)."""
        return self.layer_fitnesses[0]

    @property
    def descriptors(self) -> Float[Array, "num_cells num_descriptors"]:
        """The elites' estimated descriptors (layer 0)."""
        return self.layer_descriptors[0]

    @property
    def counts(self) -> Int[Array, " num_cells"]:
        """How many scorings each elite's estimates average (0 in an empty cell)."""
        return self.layer_counts[0]

    def extract(self, num: int, *, key: PRNGKey) -> Extracted:
        """`num` distinct elites drawn uniformly among the filled cells (layer 0), to be scored
        again: their genotypes and slots. When fewer cells are filled, the remaining rows are
        `VOID` (an empty cell's zeros, never inserted). The repertoire is unchanged: `add`
        removes an elite from its slot when its new scores come back."""
        check.positive_int("ExtractRepertoire.extract: num", num)
        if num > self.num_cells:
            raise ValueError(
                f"ExtractRepertoire.extract: num ({num}) exceeds the number of cells "
                f"({self.num_cells})"
            )
        filled = self.filled
        noise = jr.gumbel(key, (self.num_cells,))
        _, cells = jax.lax.top_k(jnp.where(filled, noise, -jnp.inf), num)
        sources = jnp.where(filled[cells], cells, VOID).astype(jnp.int32)
        return Extracted(tree_take(self.genotypes, cells), sources)

    def add(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: ExtractOffer | None = None,
    ) -> tuple["ExtractRepertoire", AddInfo]:
        """Insert a scored batch (see the class). `extra` is an `ExtractOffer` (which rows are
        extracted elites, and how many scorings each row's scores summarise), or `None`: all
        new, one scoring each.

        **Returns:** the new archive and an `AddInfo` about layer 0: a candidate's `status`
        says whether it is its cell's elite after the batch, judged against the cell's elite
        before it (`delta`, `value`); a candidate kept deeper in its cell reports
        `NOT_ADDED`."""
        self.check_candidates(genotypes, descriptors, fitnesses)
        batch = fitnesses.shape[0]
        if extra is None:
            extra = ExtractOffer.of(None, None, batch)
        if not isinstance(extra, ExtractOffer):
            raise TypeError(
                "ExtractRepertoire.add: extra must be an ExtractOffer (or None: new candidates "
                f"scored once), got {type(extra).__name__}"
            )
        if extra.sources.shape != (batch,) or extra.samples.shape != (batch,):
            raise ValueError(
                f"ExtractRepertoire.add: the offer's sources and samples must have shape "
                f"({batch},), got {extra.sources.shape} and {extra.samples.shape}"
            )
        depth, n = self.depth, self.num_cells
        slots = depth * n
        flat_f = self.layer_fitnesses.reshape(slots)
        flat_d = self.layer_descriptors.reshape(slots, -1)
        flat_c = self.layer_counts.reshape(slots)
        sources = extra.sources
        fitnesses = fitnesses.astype(jnp.float32)
        descriptors = descriptors.astype(jnp.float32)
        scored = valid_candidates(fitnesses, descriptors)
        src = jnp.clip(sources, 0, slots - 1)
        extracted = (sources >= 0) & jnp.isfinite(flat_f[src])
        valid = scored & (sources != VOID)
        # The estimation buffers: an extracted elite's means take its new scorings in.
        m = jnp.maximum(extra.samples, 1)
        prior = jnp.where(extracted, flat_c[src], 0)
        total = prior + m
        weight = (m / total).astype(jnp.float32)
        prior_f = jnp.where(extracted, flat_f[src], 0.0)
        prior_d = jnp.where(extracted[:, None], flat_d[src], 0.0)
        mean_f = jnp.where(extracted, prior_f + weight * (fitnesses - prior_f), fitnesses)
        mean_d = jnp.where(
            extracted[:, None], prior_d + weight[:, None] * (descriptors - prior_d), descriptors
        )
        mean_f = jnp.where(valid, mean_f, -jnp.inf)
        safe_d = jnp.where(valid[:, None], mean_d, self.tessellation.centroids[0])
        cells = self.tessellation.index(safe_d)
        previous = self.fitnesses[cells]  # the cell's elite before the batch
        occupied = jnp.isfinite(previous)
        # The extracted elites leave their slots (a failed re-scoring leaves its elite in place).
        leaving = jnp.where(extracted & valid, src, slots)
        stored_f = flat_f.at[leaving].set(-jnp.inf, mode="drop")
        # Each cell's contenders: its best `depth` candidates of the batch (stable: lower rows
        # first on ties), in a (num_cells, depth) table of batch rows (`batch`: none).
        order = jnp.lexsort((-mean_f, cells))
        sorted_cells = cells[order]
        starts = jnp.searchsorted(sorted_cells, sorted_cells, side="left")
        rank = jnp.arange(batch) - starts
        keep = (rank < depth) & jnp.isfinite(mean_f[order])
        table = jnp.full((n, depth), batch, jnp.int32)
        table = table.at[jnp.where(keep, sorted_cells, n), jnp.where(keep, rank, 0)].set(
            order.astype(jnp.int32), mode="drop"
        )
        # The pool per cell: its stored solutions, then its contenders; the best `depth` stay
        # (stable: a stored solution stays ahead of a newcomer of equal fitness).
        stored_rows = jnp.arange(depth)[None, :] * n + jnp.arange(n)[:, None]  # (n, depth)
        pool = jnp.concatenate([stored_rows, slots + table], axis=1)  # rows of stored ++ batch
        pool_f = jnp.concatenate([stored_f, mean_f, jnp.full((1,), -jnp.inf, jnp.float32)])
        _, best = jax.lax.top_k(pool_f[pool], depth)  # equal values: the lower index first
        chosen = jnp.take_along_axis(pool, best, axis=1).T  # (depth, n)
        every_f = pool_f
        every_d = jnp.concatenate([flat_d, mean_d, jnp.zeros((1, mean_d.shape[1]))])
        every_c = jnp.concatenate([flat_c, total.astype(jnp.int32), jnp.zeros((1,), jnp.int32)])
        flat_g = jax.tree.map(
            lambda x: x.reshape((slots,) + x.shape[2:]) if eqx.is_array(x) else x,
            self.layer_genotypes,
        )
        offered_g = jax.tree.map(
            lambda x, v: v.astype(x.dtype) if eqx.is_array(x) else x, flat_g, genotypes
        )
        every_g = tree_concatenate([flat_g, offered_g, tree_take(offered_g, jnp.array([0]))])
        new = eqx.tree_at(
            lambda r: (r.layer_genotypes, r.layer_fitnesses, r.layer_descriptors, r.layer_counts),
            self,
            (
                tree_take(every_g, chosen),
                every_f[chosen],
                every_d[chosen].astype(jnp.float32),
                every_c[chosen],
            ),
        )
        elite_row = chosen[0][cells]
        inserted = valid & (elite_row == slots + jnp.arange(batch))
        passes = valid & (mean_f > previous)
        delta = mean_f - previous
        value = mean_f - jnp.where(occupied, previous, 0.0)
        return new, cell_info(valid, cells, occupied, inserted, passes, delta, value)
