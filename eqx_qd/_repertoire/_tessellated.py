"""The MAP-Elites repertoire: one elite per cell of a tessellation, and CMA-MAE's annealing."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PyTree, ScalarLike

from .. import _validate as check
from .._custom_types import Extra, Genotypes
from .._misc import batch_size_of, f32, is_none, tree_scatter, tree_take, tree_zeros_batch
from .._tessellation import AbstractTessellation
from ._base import AbstractCellRepertoire, AddInfo, cell_info, cell_winners, valid_candidates


class Annealing(eqx.Module):
    """The CMA-MAE archive's thresholds (Fontaine and Nikolaidis, 2023), one per cell.

    **Fields:** `thresholds` `(num_cells,)` (an empty cell's is `floor`); `learning_rate` in
    `[0, 1]` and `floor` (`threshold_min`), float32 leaves.

    A batch moves a cell's threshold `t` with the batch rule of the paper (pyribs'):
    `t <- (1 - lr)^k t + (1 - (1 - lr)^k) * mean` over the `k` candidates of the batch that
    passed `t` in that cell, `mean` their fitnesses' mean. With `floor = -inf` (then
    `learning_rate` must be 1) the threshold is the elite's fitness: the elitist archive.
    """

    thresholds: Float[Array, " num_cells"]
    learning_rate: Float[Array, ""] = eqx.field(converter=f32)
    floor: Float[Array, ""] = eqx.field(converter=f32)

    @classmethod
    def start(cls, num_cells: int, learning_rate: ScalarLike, threshold_min: ScalarLike):
        """Thresholds at `threshold_min` in every cell, after checking both values."""
        check.in_range("learning_rate", learning_rate, 0.0, 1.0)
        if check.is_concrete(threshold_min) and check.is_concrete(learning_rate):
            if float(threshold_min) == -float("inf") and float(learning_rate) != 1.0:
                raise ValueError(
                    "threshold_min can be -inf only with learning_rate 1 (the elitist archive); "
                    f"got learning_rate={float(learning_rate)}"
                )
            if jnp.isnan(threshold_min) or float(threshold_min) == float("inf"):
                raise ValueError(f"threshold_min must be a number or -inf, got {threshold_min}")
        floor = f32(threshold_min)
        return cls(jnp.full((num_cells,), floor, jnp.float32), learning_rate, floor)

    def update(self, cells, offered, passes, bar, target) -> "Annealing":
        """The thresholds after a batch: `cells` and `offered` fitnesses per candidate,
        `passes` (which passed `bar`, their cell's threshold), `target` (the winners' cells,
        out of range for the others)."""
        n = self.thresholds.shape[0]
        where_passed = jnp.where(passes, cells, n)
        count = jnp.zeros((n,), jnp.float32).at[where_passed].add(1.0, mode="drop")
        total = (
            jnp.zeros((n,), jnp.float32)
            .at[where_passed]
            .add(jnp.where(passes, offered, 0.0), mode="drop")
        )
        k = count[cells]
        mean = total[cells] / jnp.maximum(k, 1.0)
        ratio = (1.0 - self.learning_rate) ** k
        annealed = ratio * bar + (1.0 - ratio) * mean
        # The elitist rule (floor -inf): the threshold is the fitness of the elite that won.
        moved = jnp.where(jnp.isneginf(self.floor), offered, annealed)
        return eqx.tree_at(
            lambda a: a.thresholds, self, self.thresholds.at[target].set(moved, mode="drop")
        )


@typing.final
class MAPElitesRepertoire(AbstractCellRepertoire):
    """An archive of elites, one per cell of a tessellation (grid or CVT): the
    `AbstractRepertoire` of MAP-Elites, CMA-ME and CMA-MAE.

    **Fields:**

    - `genotypes`: any pytree whose array leaves have a leading `num_cells` axis. Non-array
      leaves (an MLP's activation, say) are shared by all cells.
    - `fitnesses`: `(num_cells,)` float32; `-inf` marks an empty cell.
    - `descriptors`: `(num_cells, num_descriptors)`; the elite's own descriptor.
    - `tessellation`: maps descriptors to cells and holds the centroids.
    - `extra`: optional per-cell data stored with each elite (ids, say), or `None`.
    - `annealing`: `None` for the elitist archive, or the CMA-MAE archive's per-cell thresholds
      and learning rate (`Annealing`): a candidate then replaces a cell's elite when its fitness
      passes the cell's threshold, not the elite's fitness.

    Immutable: `add` returns a new repertoire. Build one with `MAPElitesRepertoire.empty`.
    """

    genotypes: Genotypes
    fitnesses: Float[Array, " num_cells"]
    descriptors: Float[Array, "num_cells num_descriptors"]
    tessellation: AbstractTessellation
    extra: Extra = None
    annealing: Annealing | None = None

    def __check_init__(self):
        n, d = self.tessellation.num_cells, self.tessellation.num_descriptors
        if self.fitnesses.shape != (n,):
            raise ValueError(f"fitnesses must have shape ({n},), got {self.fitnesses.shape}")
        if self.descriptors.shape != (n, d):
            raise ValueError(
                f"descriptors must have shape ({n}, {d}), got {self.descriptors.shape}"
            )
        if batch_size_of(self.genotypes) != n:
            raise ValueError(f"genotypes must have a leading axis of {n} cells")
        if self.extra is not None and batch_size_of(self.extra) != n:
            raise ValueError(f"extra must have a leading axis of {n} cells")
        if self.annealing is not None and self.annealing.thresholds.shape != (n,):
            raise ValueError(
                f"annealing.thresholds must have shape ({n},), got "
                f"{self.annealing.thresholds.shape}"
            )

    @classmethod
    def empty(
        cls,
        tessellation: AbstractTessellation,
        genotype: Genotypes,
        extra: Extra = None,
        *,
        learning_rate: ScalarLike | None = None,
        threshold_min: ScalarLike = -jnp.inf,
    ) -> "MAPElitesRepertoire":
        """An empty repertoire whose cells hold zeros shaped like one (unbatched) `genotype`
        (and one unbatched `extra`, if given).

        With `learning_rate` (in `[0, 1]`) the archive anneals as CMA-MAE's: every cell's
        threshold starts at `threshold_min` (finite) and moves towards the fitnesses that pass
        it. `learning_rate=1` with `threshold_min=-inf` is the elitist archive (pyribs' rule).
        """
        n = tessellation.num_cells
        annealing = None
        if learning_rate is not None:
            annealing = Annealing.start(n, learning_rate, threshold_min)
        elif check.is_concrete(threshold_min) and float(threshold_min) != -float("inf"):
            raise ValueError(
                "MAPElitesRepertoire.empty: threshold_min is CMA-MAE's; give learning_rate too"
            )
        return cls(
            genotypes=tree_zeros_batch(genotype, n),
            fitnesses=jnp.full((n,), -jnp.inf, jnp.float32),
            descriptors=jnp.zeros((n, tessellation.num_descriptors), jnp.float32),
            tessellation=tessellation,
            extra=None if extra is None else tree_zeros_batch(extra, n),
            annealing=annealing,
        )

    @property
    def num_cells(self) -> int:
        """The number of cells of the tessellation."""
        return self.tessellation.num_cells

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "MAPElitesRepertoire":
        """An empty repertoire over the same tessellation, with the same annealing (learning
        rate and `threshold_min`, thresholds reset), shaped like one `genotype` / `extra`."""
        a = self.annealing
        return MAPElitesRepertoire.empty(
            self.tessellation,
            genotype,
            extra,
            learning_rate=None if a is None else a.learning_rate,
            threshold_min=-jnp.inf if a is None else a.floor,
        )

    @property
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """The tessellation's bounds (`AbstractTessellation.extent`)."""
        return self.tessellation.extent

    @property
    def centroids(self) -> Float[Array, "num_cells num_descriptors"]:
        """The cells' centroids."""
        return self.tessellation.centroids

    def add(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra = None,
    ) -> tuple["MAPElitesRepertoire", AddInfo]:
        """Insert a batch; returns the new repertoire and an `AddInfo` per candidate.

        Per cell, the best candidate of the batch (lowest batch index among ties) replaces the
        elite if it is strictly better. Candidates with a non-finite fitness or descriptor are
        never inserted, so a bad batch cannot overwrite what is stored.

        **Arguments:**

        - `genotypes`: a pytree shaped like the stored genotypes, with a leading `batch` axis.
        - `descriptors`: `(batch, num_descriptors)`.
        - `fitnesses`: `(batch,)`.
        - `extra`: per-candidate data to store beside each elite (ids), exactly when the
          repertoire stores extra.
        """
        self.check_batch(genotypes, descriptors, fitnesses, extra)
        fitnesses = fitnesses.astype(jnp.float32)
        n = self.num_cells
        valid = valid_candidates(fitnesses, descriptors)
        # A refused candidate is looked up at the first centroid, a point every tessellation
        # accepts (0.0 may not be a category of a CategoricalTessellation).
        stand_in = self.tessellation.centroids[0][None, :]
        cells = self.tessellation.index(jnp.where(valid[:, None], descriptors, stand_in))
        offered = jnp.where(valid, fitnesses, -jnp.inf)
        previous = self.fitnesses[cells]
        occupied = jnp.isfinite(previous)
        # The bar a candidate must pass: the elite's fitness, or the annealed threshold.
        if self.annealing is None:
            bar = previous
            empty_bar = jnp.float32(0.0)
        else:
            bar = jnp.where(occupied, self.annealing.thresholds[cells], self.annealing.floor)
            empty_bar = jnp.where(jnp.isneginf(self.annealing.floor), 0.0, self.annealing.floor)
        passes = valid & (offered > bar)
        # Best offer per cell (an offer is finite exactly when valid), if it passes.
        inserted = cell_winners(cells, offered, n) & passes
        target = jnp.where(inserted, cells, n)  # row n is out of range: dropped by the scatter

        annealing = self.annealing
        if annealing is not None:
            annealing = annealing.update(cells, offered, passes, bar, target)
        new = eqx.tree_at(
            lambda r: (r.genotypes, r.fitnesses, r.descriptors, r.extra, r.annealing),
            self,
            (
                tree_scatter(self.genotypes, target, genotypes),
                self.fitnesses.at[target].set(fitnesses, mode="drop"),
                self.descriptors.at[target].set(descriptors.astype(jnp.float32), mode="drop"),
                None if extra is None else tree_scatter(self.extra, target, extra),
                annealing,
            ),
            is_leaf=is_none,
        )

        # A rejected candidate (non-finite fitness or descriptor) has no cell and no delta.
        value = fitnesses - jnp.where(occupied, bar, empty_bar)
        info = cell_info(valid, cells, occupied, inserted, passes, fitnesses - previous, value)
        return new, info

    def cell_of(self, descriptors: Float[Array, "batch num_descriptors"]) -> Int[Array, " batch"]:
        """Cell index of each descriptor."""
        d = self.tessellation.num_descriptors
        if descriptors.shape[-1:] != (d,):
            raise ValueError(
                f"descriptors must have shape (batch, {d}) for this repertoire, got "
                f"{descriptors.shape}"
            )
        return self.tessellation.index(descriptors)


def init_repertoire(
    tessellation: AbstractTessellation,
    genotypes: Genotypes,
    descriptors: Float[Array, "batch num_descriptors"],
    fitnesses: Float[Array, " batch"],
    extra: Extra = None,
    *,
    learning_rate: ScalarLike | None = None,
    threshold_min: ScalarLike = -jnp.inf,
) -> tuple[MAPElitesRepertoire, AddInfo]:
    """An empty repertoire over `tessellation`, shaped after the batch (`genotypes`,
    `descriptors`, `fitnesses` and optional per-candidate `extra`, as for
    `MAPElitesRepertoire.add`), with the batch inserted. `learning_rate` and `threshold_min`
    make it a CMA-MAE archive (`MAPElitesRepertoire.empty`)."""
    first: PyTree = tree_take(genotypes, 0)
    empty = MAPElitesRepertoire.empty(
        tessellation,
        first,
        None if extra is None else tree_take(extra, 0),
        learning_rate=learning_rate,
        threshold_min=threshold_min,
    )
    return empty.add(genotypes, descriptors, fitnesses, extra)


def bytes_per_cell(repertoire: MAPElitesRepertoire) -> int:
    """Bytes the repertoire spends on one cell's genotype (array leaves only)."""
    if not isinstance(repertoire, MAPElitesRepertoire):
        raise TypeError(
            f"bytes_per_cell: repertoire must be a MAPElitesRepertoire, got "
            f"{type(repertoire).__name__}"
        )
    leaves = [x for x in jax.tree.leaves(repertoire.genotypes) if eqx.is_array(x)]
    return sum(x.nbytes for x in leaves) // repertoire.num_cells


class AbstractRepertoireOverCells(AbstractCellRepertoire):
    """A repertoire that keeps one elite per cell of a `tessellation` beside state of its own
    (ME-LS's spreads, Extract-ME's depth and estimation buffers): its cells are the
    tessellation's, and `to_map_elites` gives its elites as a `MAPElitesRepertoire`, what the
    jobs write, plot and read back. Subclasses declare `tessellation` and the contract's
    fields."""

    tessellation: eqx.AbstractVar[AbstractTessellation]

    @property
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """The tessellation's bounds."""
        return self.tessellation.extent

    @property
    def num_cells(self) -> int:
        """The number of cells of the tessellation."""
        return self.tessellation.num_cells

    def cell_of(self, descriptors: Float[Array, "batch num_descriptors"]) -> Int[Array, " batch"]:
        """The cell index of each descriptor."""
        return self.tessellation.index(descriptors)

    def to_map_elites(self) -> MAPElitesRepertoire:
        """The elites as a `MAPElitesRepertoire` over the same cells, the rest left out."""
        return MAPElitesRepertoire(
            genotypes=self.genotypes,
            fitnesses=self.fitnesses,
            descriptors=self.descriptors,
            tessellation=self.tessellation,
        )
