"""The unstructured archive of novelty search: elites kept for being far from the others."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, ScalarLike

from .. import _validate as check
from .._custom_types import Extra, Genotypes
from .._knn import mean_of_finite, squared_distances
from .._misc import f32, is_none
from ._base import (
    AbstractRepertoire,
    AddInfo,
    AddStatus,
    elites_box,
    empty_slots,
    pooled_rows,
    valid_candidates,
)


@typing.final
class UnstructuredRepertoire(AbstractRepertoire):
    """Novelty search's archive (Lehman and Stanley, 2011), with its local competition
    (NSLC), in a bounded number of slots: pyribs' `ProximityArchive`, in JAX.

    A candidate's novelty is its mean descriptor distance to its `k` nearest stored elites
    (fewer while fewer are stored; `novelty_threshold` itself while the archive is empty).
    `add` judges the batch's candidates one after another, so each sees the ones accepted
    before it (pyribs judges a whole batch against the archive as it was: two novel
    candidates side by side both enter there, and its issue 708 asks for this order):

    - novelty `>= novelty_threshold` and a free slot: it enters (`NEW`);
    - otherwise, with `local_competition`, it replaces its nearest stored elite if its
      fitness is strictly higher (`IMPROVED`);
    - otherwise it is not added.

    **When full**, a novel candidate has no free slot: it can enter only through local
    competition, by replacing its nearest elite (so without local competition a full archive
    refuses everything). Size `capacity` for the run, or watch `num_filled`.

    `AddInfo`: `novelty` and `local_competition` (how many of the `k` neighbours it beats)
    per candidate, what `NoveltyRanker` and `NSLCRanker` sort by; `value` is pyribs' (the
    fitness for a `NEW` candidate, else the fitness minus the nearest elite's); `delta` the
    fitness minus the nearest elite's (`+inf` in an empty archive); `cell` the slot.

    **Fields:** the contract's four (`genotypes`, `fitnesses`, `descriptors`, `extra`),
    `novelty_threshold` (float32 leaf), `k` (static) and `local_competition` (static).
    Build one with `UnstructuredRepertoire.empty`.
    """

    genotypes: Genotypes
    fitnesses: Float[Array, " capacity"]
    descriptors: Float[Array, "capacity num_descriptors"]
    extra: Extra
    novelty_threshold: Float[Array, ""] = eqx.field(converter=f32)
    k: int = eqx.field(static=True)
    local_competition: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        self.check_layout()
        check.positive_int("UnstructuredRepertoire.k", self.k)
        if check.is_concrete(self.novelty_threshold):
            check.positive("UnstructuredRepertoire.novelty_threshold", self.novelty_threshold)

    @classmethod
    def empty(
        cls,
        capacity: int,
        genotype: Genotypes,
        num_descriptors: int,
        extra: Extra = None,
        *,
        novelty_threshold: ScalarLike,
        k: int = 15,
        local_competition: bool = False,
    ) -> "UnstructuredRepertoire":
        """An empty archive of `capacity` slots shaped like one unbatched `genotype` (and
        `extra`), for descriptors of width `num_descriptors`; `k` neighbours (15 by default,
        the value of Lehman and Stanley's maze experiments), `novelty_threshold` (> 0) and
        `local_competition` as in the class."""
        check.positive_int("UnstructuredRepertoire.empty: k", k)
        owner = "UnstructuredRepertoire.empty"
        slots = empty_slots(owner, capacity, genotype, num_descriptors, extra)
        return cls(
            **slots,
            novelty_threshold=novelty_threshold,
            k=k,
            local_competition=local_competition,
        )

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "UnstructuredRepertoire":
        """An empty archive with the same capacity, width, threshold, `k` and rule."""
        return UnstructuredRepertoire.empty(
            self.capacity,
            genotype,
            self.num_descriptors,
            extra,
            novelty_threshold=self.novelty_threshold,
            k=self.k,
            local_competition=self.local_competition,
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
    ) -> tuple["UnstructuredRepertoire", AddInfo]:
        """Judge the batch's candidates in order (see the class). Candidates with a
        non-finite fitness or descriptor are never stored."""
        self.check_batch(genotypes, descriptors, fitnesses, extra)
        batch, capacity = fitnesses.shape[0], self.capacity
        valid = valid_candidates(fitnesses, descriptors)
        offered_f = jnp.where(valid, fitnesses, -jnp.inf).astype(jnp.float32)
        offered_d = jnp.where(valid[:, None], descriptors, 0.0).astype(jnp.float32)
        k = min(self.k, capacity)
        slots = jnp.arange(capacity, dtype=jnp.int32)

        def judge(carry, row):
            fit, desc, source = carry
            f, d, ok, b = row
            filled = jnp.isfinite(fit)
            sq = jnp.where(filled, squared_distances(d[None, :], desc)[0], jnp.inf)
            neg, idx = jax.lax.top_k(-sq, k)  # the k nearest, ties to the lower slot
            near = jnp.sqrt(-neg)
            mean, count = mean_of_finite(near[None])
            count = count[0]
            novelty = jnp.where(count > 0, mean[0], self.novelty_threshold)
            nearest = idx[0].astype(jnp.int32)
            near_f = jnp.where(count > 0, fit[nearest], -jnp.inf)
            beats = jnp.sum(jnp.isfinite(near) & (fit[idx] < f), dtype=jnp.int32)
            free = jnp.argmin(filled).astype(jnp.int32)
            has_free = ~filled[free]
            novel = ok & (novelty >= self.novelty_threshold) & has_free
            compete = ok & ~novel & (count > 0) & (f > near_f)
            if not self.local_competition:
                compete = jnp.zeros((), bool)
            slot = jnp.where(novel, free, jnp.where(compete, nearest, capacity))
            fit = fit.at[slot].set(f, mode="drop")
            desc = desc.at[slot].set(d, mode="drop")
            source = source.at[slot].set(capacity + b, mode="drop")
            status = jnp.where(
                novel, AddStatus.NEW, jnp.where(compete, AddStatus.IMPROVED, AddStatus.NOT_ADDED)
            ).astype(jnp.int32)
            value = jnp.where(novel, f, f - near_f)
            out = (slot, status, f - near_f, value, novelty, beats)
            return (fit, desc, source), out

        rows = (offered_f, offered_d, valid, jnp.arange(batch, dtype=jnp.int32))
        (fit, desc, source), out = jax.lax.scan(
            judge, (self.fitnesses, self.descriptors, slots), rows
        )
        slot, status, delta, value, novelty, beats = out

        new = eqx.tree_at(
            lambda r: (r.genotypes, r.fitnesses, r.descriptors, r.extra),
            self,
            (
                pooled_rows(self.genotypes, genotypes, source),
                fit,
                desc,
                None if extra is None else pooled_rows(self.extra, extra, source),
            ),
            is_leaf=is_none,
        )
        nan = jnp.float32(jnp.nan)
        info = AddInfo(
            cell=jnp.where(status != AddStatus.NOT_ADDED, slot, -1),
            status=status,
            delta=jnp.where(valid, delta, nan),
            threshold_status=status,
            value=jnp.where(valid, value, nan),
            novelty=jnp.where(valid, novelty, nan),
            local_competition=jnp.where(valid, beats, 0),
        )
        return new, info
