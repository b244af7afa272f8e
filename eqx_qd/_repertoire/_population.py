"""The multi-objective GA baselines' populations: NSGA-II (Deb, Pratap, Agarwal, Meyarivan,
2002) and SPEA2 (Zitzler, Laumanns, Thiele, 2001), each a fixed-size population without cells
whose survivors of stored + batch are chosen by its own ranking."""

import abc
import math
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._misc import tree_zeros_batch
from .._pareto import dominates
from .._selectors import crowding_distance, pareto_fronts
from ._base import (
    AbstractMultiObjectiveRepertoire,
    AddInfo,
    AddStatus,
    elites_box,
    pooled_rows,
)


class AbstractPopulationRepertoire(AbstractMultiObjectiveRepertoire):
    """A fixed-size multi-objective population without cells: `add` pools the stored
    solutions (first, in slot order) with the batch's valid candidates, orders the pool by
    `survival_order` and keeps the first `capacity`, in that order. Parents are drawn
    uniformly among the stored solutions (QDax's GA), or with `tournament` by binary
    tournament, the papers' mating selection: of two stored solutions drawn uniformly, the
    one earlier in the survival order (NSGA-II's crowded comparison: lower front, then larger
    crowding distance; SPEA2's lower fitness `F`).

    **Fields:** `genotypes` (leading axis `capacity`), `objectives` `(capacity,
    num_objectives)` (`-inf` in an empty slot), `descriptors` `(capacity, num_descriptors)`,
    `extra` (always `None`), `tournament` (static).
    """

    genotypes: eqx.AbstractVar[Genotypes]
    objectives: eqx.AbstractVar[Float[Array, "capacity num_objectives"]]
    descriptors: eqx.AbstractVar[Float[Array, "capacity num_descriptors"]]
    extra: eqx.AbstractVar[None]
    tournament: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def survival_order(
        self, objectives: Float[Array, "pool num_objectives"], valid: Bool[Array, " pool"]
    ) -> Int[Array, " pool"]:
        """The pool's rows, survivors first, given the pool's `objectives` `(pool,
        num_objectives)` and which rows are `valid` (every invalid row after every valid
        one)."""

    def _check_shapes(self, owner: str) -> None:
        n = self.objectives.shape[0]
        if self.objectives.ndim != 2 or self.objectives.shape[1] < 2:
            raise ValueError(
                f"{owner}: objectives must have shape (capacity, num_objectives >= 2), got "
                f"{self.objectives.shape}"
            )
        if self.descriptors.ndim != 2 or self.descriptors.shape[0] != n:
            raise ValueError(
                f"{owner}: descriptors must have shape ({n}, num_descriptors), got "
                f"{self.descriptors.shape}"
            )
        self.check_layout()
        if self.extra is not None:
            raise ValueError(f"{owner} stores no extra (no lineage)")

    @property
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """The box around the stored descriptors (`elites_box`)."""
        return elites_box(self)

    def uniform_slots(self, num: int, *, key: PRNGKey) -> Int[Array, " num"]:
        """`num` slots drawn uniformly among the filled ones (any slot when none is), or with
        `tournament` the winners of `num` binary tournaments (the lower of two such draws:
        the slots hold the survival order)."""
        filled = jnp.all(jnp.isfinite(self.objectives), axis=-1)
        logits = jnp.where(filled, 0.0, -jnp.inf)
        logits = jnp.where(jnp.any(filled), logits, 0.0)
        if not self.tournament:
            return jr.categorical(key, logits, shape=(num,)).astype(jnp.int32)
        pairs = jr.categorical(key, logits, shape=(num, 2))
        return jnp.min(pairs, axis=-1).astype(jnp.int32)

    def _check_tournament(self, owner: str) -> None:
        if not isinstance(self.tournament, bool):
            raise TypeError(f"{owner}.tournament must be a bool, got {self.tournament!r}")

    def add(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, "batch num_objectives"],
        extra: Extra = None,
    ) -> tuple["AbstractPopulationRepertoire", AddInfo]:
        """Keep the `capacity` first of stored + batch by `survival_order`; a candidate with a
        non-finite objective or descriptor is never kept.

        **Arguments:** `genotypes` (leading axis `batch`), `descriptors` `(batch,
        num_descriptors)`, `fitnesses` `(batch, num_objectives)`, `extra` (must be `None`).

        **Returns:** the new population and an `AddInfo`: `cell` the slot a kept candidate
        took (`-1` otherwise), `status` `NEW` when kept, `delta` NaN (no elite to compare
        with), `value` the candidate's sum of objectives.
        """
        if extra is not None:
            raise ValueError(f"{type(self).__name__} stores no extra (no lineage)")
        self.check_objectives(fitnesses, where=f"{type(self).__name__}.add")
        self.check_candidates(genotypes, descriptors, fitnesses, where=f"{type(self).__name__}.add")
        fitnesses = fitnesses.astype(jnp.float32)
        n, batch = self.capacity, fitnesses.shape[0]
        filled = jnp.all(jnp.isfinite(self.objectives), axis=-1)
        valid = jnp.all(jnp.isfinite(fitnesses), axis=-1) & jnp.all(
            jnp.isfinite(descriptors), axis=-1
        )
        pool_valid = jnp.concatenate([filled, valid])
        pool = jnp.concatenate([self.objectives, fitnesses])
        pool = jnp.where(pool_valid[:, None], pool, -jnp.inf)
        order = self.survival_order(pool, pool_valid)[:n]
        kept = pool_valid[order]
        objectives = jnp.where(kept[:, None], pool[order], -jnp.inf)
        new_descriptors = jnp.concatenate([self.descriptors, descriptors.astype(jnp.float32)])
        new = eqx.tree_at(
            lambda r: (r.genotypes, r.objectives, r.descriptors),
            self,
            (
                pooled_rows(self.genotypes, genotypes, order),
                objectives,
                jnp.where(kept[:, None], new_descriptors[order], 0.0),
            ),
        )
        slot_of = (
            jnp.full((n + batch,), -1, jnp.int32)
            .at[order]
            .set(jnp.where(kept, jnp.arange(n, dtype=jnp.int32), -1))
        )
        slot = slot_of[n:]
        status = jnp.where(slot >= 0, AddStatus.NEW, AddStatus.NOT_ADDED).astype(jnp.int32)
        total = jnp.sum(jnp.where(valid[:, None], fitnesses, 0.0), axis=-1)
        info = AddInfo(
            cell=slot,
            status=status,
            delta=jnp.full((batch,), jnp.nan, jnp.float32),
            threshold_status=status,
            value=jnp.where(valid, total, jnp.nan),
        )
        return new, info


def _empty_population(
    owner: str, capacity, genotype, num_objectives, num_descriptors, tournament: bool
) -> dict:
    check.positive_int(f"{owner}: capacity", capacity)
    check.integer(f"{owner}: num_objectives", num_objectives, minimum=2)
    check.positive_int(f"{owner}: num_descriptors", num_descriptors)
    return dict(
        genotypes=tree_zeros_batch(genotype, capacity),
        objectives=jnp.full((capacity, num_objectives), -jnp.inf, jnp.float32),
        descriptors=jnp.zeros((capacity, num_descriptors), jnp.float32),
        tournament=tournament,
    )


@typing.final
class NSGA2Repertoire(AbstractPopulationRepertoire):
    """NSGA-II's population of `capacity` solutions: stored + batch sorted into
    non-dominated fronts, whole fronts kept while they fit, the last one cut by crowding
    distance (the most isolated first; its ends always). QDax's `NSGA2Repertoire`; with
    `tournament`, parents by the paper's binary tournament (see
    `AbstractPopulationRepertoire`). Build one with `NSGA2Repertoire.empty`.

    **Fields:** `genotypes` (leading axis `capacity`), `objectives` `(capacity,
    num_objectives)` (`-inf` in an empty slot), `descriptors` `(capacity, num_descriptors)`,
    `extra` (always `None`), `tournament` (static).
    """

    genotypes: Genotypes
    objectives: Float[Array, "capacity num_objectives"]
    descriptors: Float[Array, "capacity num_descriptors"]
    extra: None = None
    tournament: bool = eqx.field(default=False, static=True)

    def __check_init__(self):
        self._check_shapes("NSGA2Repertoire")
        self._check_tournament("NSGA2Repertoire")

    @classmethod
    def empty(
        cls,
        capacity: int,
        genotype: Genotypes,
        num_objectives: int,
        num_descriptors: int,
        *,
        tournament: bool = False,
    ) -> "NSGA2Repertoire":
        """An empty population of `capacity` slots shaped like one unbatched `genotype`;
        `tournament` for the paper's parent choice."""
        return cls(
            **_empty_population(
                "NSGA2Repertoire.empty",
                capacity,
                genotype,
                num_objectives,
                num_descriptors,
                tournament,
            )
        )

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "NSGA2Repertoire":
        """An empty population of the same size and widths (`extra` must be `None`)."""
        if extra is not None:
            raise ValueError("NSGA2Repertoire stores no extra (no lineage)")
        return NSGA2Repertoire.empty(
            self.capacity,
            genotype,
            self.num_objectives,
            self.num_descriptors,
            tournament=self.tournament,
        )

    def survival_order(
        self, objectives: Float[Array, "pool num_objectives"], valid: Bool[Array, " pool"]
    ) -> Int[Array, " pool"]:
        """By front (non-dominated sorting), then crowding distance, largest first, then
        row; invalid rows last."""
        pool = objectives.shape[0]
        front = jnp.where(valid, pareto_fronts(jnp.where(valid[:, None], objectives, 0.0)), pool)
        front = jnp.where(valid, front, pool + 1)
        crowd = crowding_distance(jnp.where(valid[:, None], objectives, 0.0), front)
        return jnp.lexsort((jnp.arange(pool), -crowd, front)).astype(jnp.int32)


@typing.final
class SPEA2Repertoire(AbstractPopulationRepertoire):
    """SPEA2's archive of `capacity` solutions, its environmental selection as the paper's.

    Over stored + batch: each solution's strength `S(i)` is how many it dominates, its raw
    fitness `R(i)` the sum of the strengths of those dominating it, its density `D(i) = 1 /
    (sigma_k + 2)` with `sigma_k` the objective-space distance to its `k`-th nearest neighbour
    (`num_neighbours`; the paper's `sqrt(pool)` by default); `F = R + D`. The non-dominated
    (`R = 0`) survive; when they are too many, the one closest to the others (the smallest
    distance to its nearest neighbour, ties by the next nearest) leaves, one at a time, until
    they fit; when too few, the rest by lowest `F`. QDax's `SPEA2Repertoire` keeps the lowest
    of a simpler score (how many dominate it strictly on every objective, plus a density of
    summed squared distances) without the truncation. With `tournament`, parents by the
    paper's binary tournament (see `AbstractPopulationRepertoire`). Build one with
    `SPEA2Repertoire.empty`.

    **Fields:** `genotypes` (leading axis `capacity`), `objectives` `(capacity,
    num_objectives)` (`-inf` in an empty slot), `descriptors` `(capacity, num_descriptors)`,
    `num_neighbours` (static: `k`, or `None` for the paper's default), `extra` (always
    `None`), `tournament` (static).
    """

    genotypes: Genotypes
    objectives: Float[Array, "capacity num_objectives"]
    descriptors: Float[Array, "capacity num_descriptors"]
    num_neighbours: int | None = eqx.field(default=None, static=True)
    extra: None = None
    tournament: bool = eqx.field(default=False, static=True)

    def __check_init__(self):
        self._check_shapes("SPEA2Repertoire")
        self._check_tournament("SPEA2Repertoire")
        if self.num_neighbours is not None:
            check.positive_int("SPEA2Repertoire.num_neighbours", self.num_neighbours)

    @classmethod
    def empty(
        cls,
        capacity: int,
        genotype: Genotypes,
        num_objectives: int,
        num_descriptors: int,
        num_neighbours: int | None = None,
        *,
        tournament: bool = False,
    ) -> "SPEA2Repertoire":
        """An empty archive of `capacity` slots shaped like one unbatched `genotype`;
        `num_neighbours` the `k` of its density (`None`: `sqrt` of the pool); `tournament`
        for the paper's parent choice."""
        return cls(
            **_empty_population(
                "SPEA2Repertoire.empty",
                capacity,
                genotype,
                num_objectives,
                num_descriptors,
                tournament,
            ),
            num_neighbours=num_neighbours,
        )

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "SPEA2Repertoire":
        """An empty archive of the same size, widths and `k` (`extra` must be `None`)."""
        if extra is not None:
            raise ValueError("SPEA2Repertoire stores no extra (no lineage)")
        return SPEA2Repertoire.empty(
            self.capacity,
            genotype,
            self.num_objectives,
            self.num_descriptors,
            self.num_neighbours,
            tournament=self.tournament,
        )

    def survival_order(
        self, objectives: Float[Array, "pool num_objectives"], valid: Bool[Array, " pool"]
    ) -> Int[Array, " pool"]:
        """The survivors (see the class) first, by `F`; then the rest by `F`; invalid rows
        last."""
        pool = objectives.shape[0]
        k = self.num_neighbours or max(1, int(round(math.sqrt(pool))))
        k = min(k, pool - 1)
        safe = jnp.where(valid[:, None], objectives, 0.0)
        beats = dominates(safe[:, None, :], safe[None, :, :]) & valid[:, None] & valid[None, :]
        strength = jnp.sum(beats, axis=1).astype(jnp.float32)
        raw = jnp.sum(jnp.where(beats, strength[:, None], 0.0), axis=0)
        gaps = jnp.sqrt(jnp.sum((safe[:, None, :] - safe[None, :, :]) ** 2, axis=-1))
        others = valid[None, :] & ~jnp.eye(pool, dtype=bool)
        gaps = jnp.where(others, gaps, jnp.inf)
        sigma = jnp.sort(gaps, axis=1)[:, k - 1]
        fitness = raw + 1.0 / (jnp.where(jnp.isfinite(sigma), sigma, 0.0) + 2.0)
        fitness = jnp.where(valid, fitness, jnp.inf)
        free = valid & (raw == 0)

        def too_many(keep):
            return jnp.sum(keep) > self.capacity

        def drop_closest(keep):
            d = jnp.where(keep[None, :] & ~jnp.eye(pool, dtype=bool), gaps, jnp.inf)
            d = jnp.sort(d, axis=1)

            def narrow(carry):  # the next nearest decides ties, until one is left
                j, candidates = carry
                column = jnp.where(candidates, d[:, j], jnp.inf)
                return j + 1, candidates & (column == jnp.min(column))

            def tied(carry):
                return (carry[0] < pool) & (jnp.sum(carry[1]) > 1)

            _, closest = jax.lax.while_loop(tied, narrow, (0, keep))
            first = jnp.argmax(closest)
            return keep.at[first].set(False)

        keep = jax.lax.while_loop(too_many, drop_closest, free)
        fitness = jnp.where(free & ~keep, jnp.inf, fitness)
        rank = jnp.where(valid, jnp.where(free & ~keep, 1, 0), 2)
        return jnp.lexsort((jnp.arange(pool), fitness, rank)).astype(jnp.int32)
