"""MAP-Elites Low-Spread's archive (Mace, Flageat, Cully, 2023): cells whose elites are
placed by their samples, kept only while a newcomer is both fitter and less spread."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._custom_types import Extra, Genotypes
from .._knn import squared_distances
from .._misc import most_frequent, tree_scatter, tree_zeros_batch
from .._tessellation import AbstractTessellation
from ._base import AddInfo, cell_info, cell_winners
from ._sampled import AbstractSampledRepertoire, SampledExtra
from ._tessellated import AbstractRepertoireOverCells


def dispersion(samples: Float[Array, "batch n num_descriptors"]) -> Float[Array, " batch"]:
    """Per row, the mean Euclidean distance over the distinct pairs of its `n` descriptor
    samples (ME-LS's spread; 0 for one sample)."""
    n = samples.shape[1]
    if n == 1:
        return jnp.zeros(samples.shape[0], jnp.float32)
    distances = jnp.sqrt(jax.vmap(lambda s: squared_distances(s, s))(samples))
    upper = jnp.triu(jnp.ones((n, n), bool), k=1)
    return jnp.sum(jnp.where(upper, distances, 0.0), axis=(1, 2)) / (n * (n - 1) / 2)


@typing.final
class LowSpreadRepertoire(AbstractRepertoireOverCells, AbstractSampledRepertoire):
    """MAP-Elites Low-Spread's archive (QDax 0.5's `MELSRepertoire`): one elite per cell, the
    cell a candidate's most frequent over its descriptor samples, its stored descriptor that
    cell's centroid, its fitness the mean of its fitness samples, its spread the mean distance
    between its descriptor samples (`dispersion`). A candidate replaces a cell's elite when it
    is fitter and no more spread (an empty cell: any finite candidate). Among a batch's
    candidates that pass in one cell, the fittest enters (the lowest index on ties; QDax keeps
    whichever its scatter writes last).

    **Fields:** `genotypes`, `fitnesses` `(num_cells,)`, `descriptors` `(num_cells,
    num_descriptors)` (centroids), `spreads` `(num_cells,)` (`inf` in an empty cell),
    `tessellation`, `extra` (always `None`). Build one with `LowSpreadRepertoire.empty`.
    """

    genotypes: Genotypes
    fitnesses: Float[Array, " num_cells"]
    descriptors: Float[Array, "num_cells num_descriptors"]
    spreads: Float[Array, " num_cells"]
    tessellation: AbstractTessellation
    extra: None = None

    def __check_init__(self):
        self.check_layout()
        n, d = self.tessellation.num_cells, self.tessellation.num_descriptors
        if self.fitnesses.shape != (n,) or self.descriptors.shape != (n, d):
            raise ValueError(
                f"LowSpreadRepertoire: fitnesses and descriptors must have shapes ({n},) and "
                f"({n}, {d}) for its tessellation, got {self.fitnesses.shape} and "
                f"{self.descriptors.shape}"
            )
        if self.spreads.shape != (n,):
            raise ValueError(f"spreads must have shape ({n},), got {self.spreads.shape}")
        if self.extra is not None:
            raise ValueError("LowSpreadRepertoire stores no extra (no lineage)")

    @classmethod
    def empty(
        cls, tessellation: AbstractTessellation, genotype: Genotypes
    ) -> "LowSpreadRepertoire":
        """An empty archive over `tessellation`, its cells holding zeros shaped like one
        unbatched `genotype`."""
        n = tessellation.num_cells
        return cls(
            genotypes=tree_zeros_batch(genotype, n),
            fitnesses=jnp.full((n,), -jnp.inf, jnp.float32),
            descriptors=jnp.zeros((n, tessellation.num_descriptors), jnp.float32),
            spreads=jnp.full((n,), jnp.inf, jnp.float32),
            tessellation=tessellation,
        )

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "LowSpreadRepertoire":
        """An empty archive over the same cells (`extra` must be `None`)."""
        if extra is not None:
            raise ValueError("LowSpreadRepertoire stores no extra (no lineage)")
        return LowSpreadRepertoire.empty(self.tessellation, genotype)

    def add(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: SampledExtra | None = None,
    ) -> tuple["LowSpreadRepertoire", AddInfo]:
        """Insert a batch by its samples (see the class): `extra` is the `SampledExtra` of a
        `Sampled` task (its `fitness_samples` and `descriptor_samples` decide; `descriptors`
        and `fitnesses`, the task's estimates, are only checked), or `None`: one sample each,
        the given descriptor and fitness, spread 0."""
        self.check_candidates(genotypes, descriptors, fitnesses)
        batch = fitnesses.shape[0]
        if extra is None:
            fitness_samples = fitnesses[:, None]
            descriptor_samples = descriptors[:, None, :]
        elif isinstance(extra, SampledExtra):
            fitness_samples = extra.fitness_samples
            descriptor_samples = extra.descriptor_samples
            d = self.tessellation.num_descriptors
            if fitness_samples.ndim != 2 or fitness_samples.shape[0] != batch:
                raise ValueError(
                    f"extra.fitness_samples must have shape ({batch}, num_samples), got "
                    f"{fitness_samples.shape}"
                )
            n = fitness_samples.shape[1]
            if descriptor_samples.shape != (batch, n, d):
                raise ValueError(
                    f"extra.descriptor_samples must have shape ({batch}, {n}, {d}), got "
                    f"{descriptor_samples.shape}"
                )
        else:
            raise TypeError(
                "LowSpreadRepertoire.add: extra must be the SampledExtra of a Sampled task (or "
                f"None for one sample each), got {type(extra).__name__}"
            )
        fitness_samples = fitness_samples.astype(jnp.float32)
        descriptor_samples = descriptor_samples.astype(jnp.float32)
        valid = jnp.all(jnp.isfinite(fitness_samples), axis=1) & jnp.all(
            jnp.isfinite(descriptor_samples), axis=(1, 2)
        )
        safe = jnp.where(valid[:, None, None], descriptor_samples, self.tessellation.centroids[0])
        n = safe.shape[1]
        sample_cells = self.tessellation.index(safe.reshape(batch * n, -1)).reshape(batch, n)
        cells = most_frequent(sample_cells)  # QDax's mode: the smallest on ties
        fitness = jnp.mean(fitness_samples, axis=1)
        spread = dispersion(safe)
        offered = jnp.where(valid, fitness, -jnp.inf)
        previous = self.fitnesses[cells]
        occupied = jnp.isfinite(previous)
        passes = valid & (offered > previous) & (spread <= self.spreads[cells])
        num_cells = self.num_cells
        # The fittest of the candidates that pass in a cell (finite exactly where they pass).
        inserted = cell_winners(cells, jnp.where(passes, offered, -jnp.inf), num_cells)
        target = jnp.where(inserted, cells, num_cells)
        centroids = self.tessellation.centroids[cells]
        new = eqx.tree_at(
            lambda r: (r.genotypes, r.fitnesses, r.descriptors, r.spreads),
            self,
            (
                tree_scatter(self.genotypes, target, genotypes),
                self.fitnesses.at[target].set(fitness, mode="drop"),
                self.descriptors.at[target].set(centroids, mode="drop"),
                self.spreads.at[target].set(spread, mode="drop"),
            ),
        )

        value = fitness - jnp.where(occupied, previous, 0.0)
        info = cell_info(valid, cells, occupied, inserted, passes, fitness - previous, value)
        return new, info
