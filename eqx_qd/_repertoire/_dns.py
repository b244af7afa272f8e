"""Dominated Novelty Search's repertoire: a fixed-size population without cells."""

import typing

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _validate as check
from .._custom_types import Extra, Genotypes
from .._knn import k_nearest, mean_of_finite
from .._misc import is_none, tree_scatter, tree_take, tree_zeros_batch
from ._base import (
    AbstractRepertoire,
    AddInfo,
    AddStatus,
    elites_box,
    empty_slots,
    pooled_rows,
    valid_candidates,
)


def competition_fitness(
    fitnesses: Float[Array, " n"],
    descriptors: Float[Array, "n num_descriptors"],
    k: int,
    *,
    count_equal: bool = True,
) -> Float[Array, " n"]:
    """Dominated Novelty Search's competition fitness of each of `n` solutions (`fitnesses`
    `(n,)`, `descriptors` `(n, num_descriptors)`): the mean descriptor distance to its `k`
    nearest fitter solutions (fewer when fewer exist), `+inf`
    when none is fitter, `-inf` for a solution whose fitness or descriptor is not finite
    (which never counts as anyone's neighbour).

    `count_equal`: a solution of equal fitness counts as fitter (QDax's and pyribs' code, the
    default: exact copies then crowd each other out); `False` counts strictly fitter ones
    only (the paper's wording: copies of the best all keep `+inf`)."""
    valid = valid_candidates(fitnesses, descriptors)
    safe = jnp.where(valid[:, None], descriptors, 0.0).astype(jnp.float32)
    f = jnp.where(valid, fitnesses, -jnp.inf).astype(jnp.float32)
    n = f.shape[0]
    columns = jnp.arange(n, dtype=jnp.int32)

    def fitter(rows):
        better = f[None, :] >= f[rows, None] if count_equal else f[None, :] > f[rows, None]
        return better & valid[None, :] & (columns[None, :] != rows[:, None])

    distances = k_nearest(safe, safe, fitter, k)
    mean, count = mean_of_finite(distances)
    score = jnp.where(count > 0, mean, jnp.inf)
    return jnp.where(valid, score, -jnp.inf)


@typing.final
class DNSRepertoire(AbstractRepertoire):
    """Dominated Novelty Search's population (Bahlous-Boldi, Faldor, Grillotti, Cully,
    2025): `capacity` solutions without cells, kept by their competition fitness.

    `add` pools the stored solutions with the batch, gives each its competition fitness (the
    mean distance in descriptor space to its `k` nearest fitter solutions of the pool, `+inf`
    for a solution nothing beats: `eqx_qd.internal.competition_fitness`) and keeps the
    `capacity` highest, ties to the lower pool position (stored solutions first, then the
    batch in order). A solution survives by being good for where it is: the best of a region
    always does, a solution crowded by fitter neighbours does not. No descriptor bounds are
    needed, and the descriptor space may have many dimensions.

    Slots are rewritten in survivor order at every `add` (the best competition fitness
    first), so a slot index names an elite for one iteration only; store ids in `extra` to
    follow an elite. The search over neighbours is exact and blocked: `O((capacity +
    batch)^2 * num_descriptors)` time per `add`, bounded memory.

    **Fields:** the contract's four (`AbstractRepertoire`: `genotypes`, `fitnesses`,
    `descriptors`, `extra`), `k` (neighbours, static) and
    `count_equal` (ties count as fitter, as QDax's and pyribs' code do; static).

    Build one with `DNSRepertoire.empty`. `AddInfo`: `status` `NEW` for a candidate that
    survived, `cell` its slot, `value` its competition fitness (pyribs' `dns`), `delta` NaN.
    """

    genotypes: Genotypes
    fitnesses: Float[Array, " capacity"]
    descriptors: Float[Array, "capacity num_descriptors"]
    extra: Extra
    k: int = eqx.field(static=True)
    count_equal: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        self.check_layout()
        check.positive_int("DNSRepertoire.k", self.k)

    @classmethod
    def empty(
        cls,
        capacity: int,
        genotype: Genotypes,
        num_descriptors: int,
        extra: Extra = None,
        *,
        k: int = 3,
        count_equal: bool = True,
    ) -> "DNSRepertoire":
        """An empty population of `capacity` slots shaped like one unbatched `genotype` (and
        `extra`), for descriptors of width `num_descriptors`, with `k` neighbours (the
        value of QDax's DNS example)."""
        check.positive_int("DNSRepertoire.empty: k", k)
        slots = empty_slots("DNSRepertoire.empty", capacity, genotype, num_descriptors, extra)
        return cls(**slots, k=k, count_equal=count_equal)

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "DNSRepertoire":
        """An empty population with the same capacity, width, `k` and tie rule."""
        return DNSRepertoire.empty(
            self.capacity,
            genotype,
            self.num_descriptors,
            extra,
            k=self.k,
            count_equal=self.count_equal,
        )

    @property
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """No declared bounds: the box around the stored elites (`elites_box`)."""
        return elites_box(self)

    def add(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra = None,
    ) -> tuple["DNSRepertoire", AddInfo]:
        """Pool the batch with the population and keep the `capacity` solutions of highest
        competition fitness (see the class). Candidates with a non-finite fitness or
        descriptor are never kept. A batch may outnumber `capacity` (an initial population,
        say): the candidates that do not survive are reported `NOT_ADDED`, as always."""
        self.check_batch(genotypes, descriptors, fitnesses, extra)
        batch, capacity = fitnesses.shape[0], self.capacity
        valid_new = valid_candidates(fitnesses, descriptors)
        pool_f = jnp.concatenate([self.fitnesses, fitnesses.astype(jnp.float32)])
        pool_d = jnp.concatenate([self.descriptors, descriptors.astype(jnp.float32)])
        score = competition_fitness(pool_f, pool_d, self.k, count_equal=self.count_equal)
        order = jnp.argsort(-score, stable=True)[:capacity].astype(jnp.int32)
        kept = jnp.isfinite(pool_f[order]) & (score[order] > -jnp.inf)

        target = jnp.where(kept, jnp.arange(capacity, dtype=jnp.int32), capacity)

        def gather(stored, offered):
            # Survivors in order; a slot left empty holds zeros, never a rejected candidate.
            rows = pooled_rows(stored, offered, order)
            return tree_scatter(tree_zeros_batch(tree_take(stored, 0), capacity), target, rows)

        pool_size = capacity + batch
        slot = (
            jnp.full((pool_size,), -1, jnp.int32)
            .at[order]
            .set(jnp.where(kept, jnp.arange(capacity, dtype=jnp.int32), -1))[capacity:]
        )
        survived = valid_new & (slot >= 0)
        new = eqx.tree_at(
            lambda r: (r.genotypes, r.fitnesses, r.descriptors, r.extra),
            self,
            (
                gather(self.genotypes, genotypes),
                jnp.where(kept, pool_f[order], -jnp.inf),
                jnp.where(kept[:, None], pool_d[order], 0.0),
                None if extra is None else gather(self.extra, extra),
            ),
            is_leaf=is_none,
        )
        status = jnp.where(survived, AddStatus.NEW, AddStatus.NOT_ADDED).astype(jnp.int32)
        info = AddInfo(
            cell=jnp.where(survived, slot, -1),
            status=status,
            delta=jnp.full((batch,), jnp.nan, jnp.float32),
            threshold_status=status,
            value=jnp.where(valid_new, score[capacity:], jnp.nan),
        )
        return new, info
