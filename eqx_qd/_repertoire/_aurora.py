"""AURORA's archive: elites kept apart in a descriptor space learned from what they did.

The encoder is an opaque module (`AbstractObservationEncoder`): the QD core stores what it
observes, encodes with it and asks it for a retrained copy, and never trains anything itself
(the sequence autoencoder and its optimiser live in `_qdrl/aurora.py`).
"""

import abc
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, ScalarLike

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._knn import k_nearest, squared_distances
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
from ._guided import StoredKey


class AbstractObservationEncoder(eqx.Module):
    """What AURORA learns its descriptors with: `observe` takes from a scoring's extra the
    observations stored for each candidate (an array per candidate, `observation_shape`),
    `__call__` encodes a batch of them into `latent_size` numbers each, and `retrained` returns
    a copy trained on the archive's stored observations. Stateless between calls: the trained
    parameters are the returned module's leaves (the repertoire holds it, so a checkpoint of
    the run holds the encoder)."""

    observation_shape: eqx.AbstractVar[tuple[int, ...]]
    latent_size: eqx.AbstractVar[int]

    @abc.abstractmethod
    def observe(self, extra: Extra) -> Float[Array, "batch ..."]:
        """The observations of each candidate of a batch, from the scoring's `extra`."""

    @abc.abstractmethod
    def __call__(self, observations: Float[Array, "batch ..."]) -> Float[Array, "batch latent"]:
        """The learned descriptors of a batch of observations."""

    @abc.abstractmethod
    def retrained(
        self,
        observations: Float[Array, "capacity ..."],
        filled: Bool[Array, " capacity"],
        epochs: Int[Array, ""],
        *,
        key: PRNGKey,
    ) -> "AbstractObservationEncoder":
        """A copy trained for `epochs` passes on the rows of `observations` where `filled`."""


class AuroraOffer(eqx.Module):
    """What `MAPElites` offers an `AuroraRepertoire` as `extra`: the candidates' ids (with
    `lineage`, else `None`) and the scoring's extra, which the encoder observes."""

    ids: Extra
    scoring: Extra


def aurora_slots(
    stored_latent: Float[Array, "capacity latent"],
    stored_fitnesses: Float[Array, " capacity"],
    latent: Float[Array, "batch latent"],
    fitnesses: Float[Array, " batch"],
    valid: Bool[Array, " batch"],
    l_value: Float[Array, ""],
) -> tuple[Int[Array, " batch"], Float[Array, " batch"], Int[Array, " batch"]]:
    """QDax's unstructured-archive insertion rule (AURORA's), judged on the whole batch at
    once: candidates' learned descriptors `latent`, `fitnesses` and `valid` mask against the
    archive's `stored_latent` and `stored_fitnesses` (`-inf`: an empty slot). A candidate
    whose nearest stored elite lies within `l_value` competes for that elite's slot, one
    farther away takes the next free slot (in batch order); it is refused when its
    second-nearest stored elite also lies within `l_value` (no clusters), when a fitter
    candidate of the batch lies closer than `l_value` (if all the batch's fitnesses are equal,
    a later candidate counts as fitter), or when it is not the fittest candidate aiming at its
    slot, or not fitter than the slot's elite. A novel candidate finding no free slot
    is refused (QDax writes it over the last slot), and an invalid candidate takes no free
    slot.

    **Returns:** each candidate's slot (`capacity` when refused), its distance to the nearest
    stored elite, and that elite's slot.
    """
    batch, capacity = fitnesses.shape[0], stored_fitnesses.shape[0]
    filled = jnp.isfinite(stored_fitnesses)
    near, idx = k_nearest(latent, stored_latent, lambda r: filled[None, :], 2, with_index=True)
    first, second, nearest = near[:, 0], near[:, 1], idx[:, 0]
    novel = first > l_value
    # Free slots in order, taken by the valid novel candidates in batch order.
    free = jnp.argsort(filled, stable=True).astype(jnp.int32)
    rank = jnp.cumsum(novel & valid) - 1
    num_free = capacity - jnp.sum(filled)
    free_slot = jnp.where(rank < num_free, free[jnp.clip(rank, 0, capacity - 1)], capacity)
    target = jnp.where(novel, free_slot, nearest)
    # Intra-batch competition: a fitter candidate within l_value removes this one.
    f = jnp.where(valid, fitnesses, -jnp.inf)
    finite = valid & jnp.isfinite(fitnesses)
    top = jnp.max(jnp.where(finite, f, -jnp.inf))
    low = jnp.min(jnp.where(finite, f, jnp.inf))
    virtual = jnp.where(top == low, jnp.linspace(0.0, 1.0, batch), 0.0)
    score = f + virtual
    d_batch = jnp.sqrt(jnp.maximum(squared_distances(latent, latent), 0.0))
    close = (d_batch < l_value) & ~jnp.eye(batch, dtype=bool) & valid[None, :]
    beaten = jnp.any(close & (score[None, :] > score[:, None]), axis=1)
    keep = valid & ~beaten & ~(second <= l_value) & (target < capacity)
    # The fittest candidate aiming at a slot (all candidates compete, as QDax's segment max),
    # the first of equals, and only if fitter than the slot's elite.
    best = jax.ops.segment_max(jnp.where(valid, f, -jnp.inf), target, num_segments=capacity + 1)
    wins = (
        keep
        & (f == best[target])
        & (f > stored_fitnesses.at[target].get(mode="fill", fill_value=jnp.inf))
    )
    first_of = jax.ops.segment_min(
        jnp.where(wins, jnp.arange(batch), batch), target, num_segments=capacity + 1
    )
    wins = wins & (first_of[target] == jnp.arange(batch))
    return jnp.where(wins, target, capacity), first, nearest


@typing.final
class AuroraRepertoire(AbstractRepertoire):
    """AURORA's archive (Grillotti and Cully, 2022), as QDax 0.5 runs it: an unstructured
    archive judged in a descriptor space learned by `encoder` from what each elite did.

    Each slot holds an elite's genotype, fitness, its task's descriptor (`descriptors`, what
    the task defines: for plots, the passive grid and measures), the observations its encoder
    reads (`observations`) and its learned descriptor (`latent`). `add` encodes the
    candidates' observations (`encoder.observe` on the scoring's extra, which `MAPElites`
    offers as `AuroraOffer`) and inserts by `aurora_slots` with the distance threshold
    `l_value`.

    Every `loop` additions after the first (QDax's `log_freq` iterations), the archive tends
    itself: at the `m(m + 1)`-th such loop (2, 6, 12, 20, ...: QDax's schedule) the encoder
    is retrained on the stored observations (`epochs`, `later_epochs` after loop 101) and
    every elite re-encoded and re-inserted; at other odd loops, container-size control moves
    `l_value` by `gain * (error + change)`, `error` being the number stored minus
    `target_size`, and every elite is re-inserted under it. The first addition (the initial
    population) trains the encoder too. Re-insertion keeps an elite only where no fitter one
    lies within `l_value` (QDax re-builds its archive from the stored rows).

    Differences from QDax: a novel candidate finding the archive full is refused (QDax writes
    it over the last slot); the trainings draw from the archive's own key
    (`stream`), so devices that share the archive train alike.

    `AddInfo`: `novelty` the learned distance to the nearest stored elite, `delta` the fitness
    minus that elite's, `value` pyribs' (the fitness when `NEW`).

    **Fields:** the contract's `genotypes`, `fitnesses`, `descriptors` (the task's) and `extra`
    (ids with lineage); `observations`, `latent` and `encoder` as above; `l_value` and
    `size_error` (the last control's error) as float32 leaves; `additions` (int32 leaf);
    `stream` (the trainings' key); the settings `target_size`, `loop`, `epochs`,
    `later_epochs` (int32 leaves) and `gain` (float32 leaf). Build one with
    `AuroraRepertoire.empty`.
    """

    genotypes: Genotypes
    fitnesses: Float[Array, " capacity"]
    descriptors: Float[Array, "capacity num_descriptors"]
    extra: Extra
    observations: Float[Array, "capacity ..."]
    latent: Float[Array, "capacity latent"]
    encoder: AbstractObservationEncoder
    l_value: Float[Array, ""] = eqx.field(converter=f32)
    size_error: Float[Array, ""] = eqx.field(converter=f32)
    additions: Int[Array, ""]
    stream: StoredKey
    target_size: Int[Array, ""]
    loop: Int[Array, ""]
    epochs: Int[Array, ""]
    later_epochs: Int[Array, ""]
    gain: Float[Array, ""] = eqx.field(converter=f32)

    def __check_init__(self):
        self.check_layout()
        n = self.capacity
        if self.latent.shape != (n, self.encoder.latent_size):
            raise ValueError(
                f"AuroraRepertoire.latent must have shape ({n}, {self.encoder.latent_size}), "
                f"got {self.latent.shape}"
            )
        if self.observations.shape != (n, *self.encoder.observation_shape):
            raise ValueError(
                f"AuroraRepertoire.observations must have shape "
                f"({n}, *{self.encoder.observation_shape}), got {self.observations.shape}"
            )
        if n < 2:
            raise ValueError(f"AuroraRepertoire needs a capacity of 2 or more, got {n}")
        if check.is_concrete(self.l_value):
            check.positive("AuroraRepertoire.l_value", self.l_value)

    @classmethod
    def empty(
        cls,
        capacity: int,
        genotype: Genotypes,
        num_descriptors: int,
        encoder: AbstractObservationEncoder,
        extra: Extra = None,
        *,
        l_value: ScalarLike = 0.2,
        target_size: int = 1024,
        loop: int = 5,
        epochs: int = 100,
        later_epochs: int = 25,
        gain: ScalarLike = 1e-5,
        key: PRNGKey,
    ) -> "AuroraRepertoire":
        """An empty archive of `capacity` slots shaped like one unbatched `genotype` (and
        `extra`), for task descriptors of width `num_descriptors`, with `encoder` (untrained:
        the first addition trains it) and the settings of the class (QDax's notebook's by
        default: `l_value` 0.2, `target_size` 1024, loops of 5 additions, 100 then 25 epochs,
        `gain` 1e-5). `key` seeds the encoder's trainings."""
        owner = "AuroraRepertoire.empty"
        if not isinstance(encoder, AbstractObservationEncoder):
            raise TypeError(
                f"{owner}: encoder must be an AbstractObservationEncoder, got {encoder!r}"
            )
        check.positive_int(f"{owner}: target_size", target_size)
        check.positive_int(f"{owner}: loop", loop)
        check.positive_int(f"{owner}: epochs", epochs)
        check.positive_int(f"{owner}: later_epochs", later_epochs)
        check.non_negative(f"{owner}: gain", gain)
        slots = empty_slots(owner, capacity, genotype, num_descriptors, extra)
        i32 = lambda x: jnp.asarray(x, jnp.int32)
        return cls(
            **slots,
            observations=jnp.zeros((capacity, *encoder.observation_shape), jnp.float32),
            latent=jnp.zeros((capacity, encoder.latent_size), jnp.float32),
            encoder=encoder,
            l_value=l_value,
            size_error=0.0,
            additions=i32(0),
            stream=StoredKey.of(key),
            target_size=i32(target_size),
            loop=i32(loop),
            epochs=i32(epochs),
            later_epochs=i32(later_epochs),
            gain=gain,
        )

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "AuroraRepertoire":
        """An empty archive with the same capacity, widths, encoder, threshold and settings."""
        new = AuroraRepertoire.empty(
            self.capacity,
            genotype,
            self.num_descriptors,
            self.encoder,
            extra,
            l_value=1.0,
            key=self.stream.key,
        )
        same = lambda r: (r.l_value, r.target_size, r.loop, r.epochs, r.later_epochs, r.gain)
        return eqx.tree_at(same, new, same(self))

    @property
    def extent(self) -> tuple[Float[Array, " num_descriptors"], Float[Array, " num_descriptors"]]:
        """No declared bounds: the box around the stored elites' task descriptors."""
        return elites_box(self)

    def _placed(
        self,
        slots,
        genotypes,
        descriptors,
        fitnesses,
        extra,
        observations,
        latent,
    ) -> "AuroraRepertoire":
        """This archive with the rows whose slot is below capacity written there."""
        capacity = self.capacity
        source = jnp.arange(capacity, dtype=jnp.int32)
        source = source.at[slots].set(
            capacity + jnp.arange(slots.shape[0], dtype=jnp.int32), mode="drop"
        )
        pick = lambda old, new: pooled_rows(old, new, source)
        fields = lambda r: (
            r.genotypes,
            r.fitnesses,
            r.descriptors,
            r.extra,
            r.observations,
            r.latent,
        )
        rows = (
            pick(self.genotypes, genotypes),
            pick(self.fitnesses, fitnesses),
            pick(self.descriptors, descriptors),
            None if extra is None else pick(self.extra, extra),
            pick(self.observations, observations),
            pick(self.latent, latent),
        )
        return eqx.tree_at(fields, self, rows, is_leaf=is_none)

    def reinserted(
        self, latent: Float[Array, "capacity latent"] | None = None
    ) -> "AuroraRepertoire":
        """The archive rebuilt from its own elites under `l_value`, with `latent` as their
        learned descriptors (default: the stored ones): QDax's re-initialisation after each
        retraining and size control. Elites keep their order from the first slot (one that is
        not kept leaves its slot empty)."""
        latent = self.latent if latent is None else latent
        empty_fit = jnp.full_like(self.fitnesses, -jnp.inf)
        slots, _, _ = aurora_slots(
            latent, empty_fit, latent, self.fitnesses, self.filled, self.l_value
        )
        base = eqx.tree_at(lambda r: r.fitnesses, self, empty_fit)
        return base._placed(
            slots,
            self.genotypes,
            self.descriptors,
            self.fitnesses,
            self.extra,
            self.observations,
            latent,
        )

    def retrained(self, epochs: Int[Array, ""] | int, *, key: PRNGKey) -> "AuroraRepertoire":
        """The encoder trained `epochs` passes on the stored observations, every elite
        re-encoded and the archive rebuilt (`reinserted`)."""
        encoder = self.encoder.retrained(
            self.observations, self.filled, jnp.asarray(epochs), key=key
        )
        new = eqx.tree_at(lambda r: r.encoder, self, encoder)
        return new.reinserted(encoder(self.observations))

    def size_controlled(self) -> "AuroraRepertoire":
        """Container-size control: `l_value` moved by `gain * (error + change)` (`error`: the
        number stored minus `target_size`; `change`: its change since the last control), then
        the archive rebuilt under it (`reinserted`)."""
        error = (self.num_filled - self.target_size).astype(jnp.float32)
        l_value = self.l_value + self.gain * error + self.gain * (error - self.size_error)
        new = eqx.tree_at(lambda r: (r.l_value, r.size_error), self, (l_value, error))
        return new.reinserted()

    def tended(self) -> "AuroraRepertoire":
        """What follows an addition (see the class): a retraining, a size control, or
        nothing, by the count of additions."""
        key, train_key = jr.split(self.stream.key)
        new = eqx.tree_at(
            lambda r: (r.additions, r.stream), self, (self.additions + 1, self.stream.replaced(key))
        )
        done = new.additions - 1  # iterations after the initial population's
        loop = done // self.loop
        at_loop_end = (done > 0) & (done % self.loop == 0)
        m = jnp.floor(jnp.sqrt(loop.astype(jnp.float32))).astype(jnp.int32)
        pronic = m * (m + 1) == loop
        train = (done == 0) | (at_loop_end & pronic)
        control = at_loop_end & ~pronic & (loop % 2 == 1)
        epochs = jnp.where(loop - 1 > 100, self.later_epochs, self.epochs)

        def trained(r):
            r = r.retrained(epochs, key=train_key)
            # QDax's first error: the initial archive's after its training, before any control.
            error = (r.num_filled - r.target_size).astype(jnp.float32)
            return eqx.tree_at(lambda s: s.size_error, r, jnp.where(done == 0, error, r.size_error))

        def rest(r):
            return jax.lax.cond(control, lambda s: s.size_controlled(), lambda s: s, r)

        return jax.lax.cond(train, trained, rest, new)

    def add(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra = None,
    ) -> tuple["AuroraRepertoire", AddInfo]:
        """Encode the candidates' observations, insert by `aurora_slots`, then tend the
        archive (see the class). `extra` is an `AuroraOffer` (the ids, the scoring's extra).
        Candidates with a non-finite fitness, descriptor or learned descriptor are never
        stored."""
        if not isinstance(extra, AuroraOffer):
            raise TypeError(
                "AuroraRepertoire.add: extra must be an AuroraOffer (the ids and the scoring's "
                f"extra, as MAPElites offers it), got {type(extra).__name__}"
            )
        self.check_batch(genotypes, descriptors, fitnesses, extra.ids)
        observations = self.encoder.observe(extra.scoring).astype(jnp.float32)
        batch = fitnesses.shape[0]
        if observations.shape != (batch, *self.encoder.observation_shape):
            raise ValueError(
                f"AuroraRepertoire.add: the encoder observed {observations.shape}, expected "
                f"({batch}, *{self.encoder.observation_shape})"
            )
        latent = self.encoder(observations).astype(jnp.float32)
        valid = valid_candidates(fitnesses, descriptors) & jnp.all(jnp.isfinite(latent), axis=-1)
        f = jnp.where(valid, fitnesses, -jnp.inf).astype(jnp.float32)
        latent = jnp.where(valid[:, None], latent, 0.0)
        slots, near, nearest = aurora_slots(
            self.latent, self.fitnesses, latent, f, valid, self.l_value
        )
        near_f = jnp.where(jnp.isfinite(near), self.fitnesses[nearest], -jnp.inf)
        placed = self._placed(
            slots,
            genotypes,
            descriptors.astype(jnp.float32),
            f,
            extra.ids,
            observations,
            latent,
        )
        new = placed.tended()
        capacity = self.capacity
        stored = slots < capacity
        was_filled = self.filled.at[slots].get(mode="fill", fill_value=False)
        status = jnp.where(
            stored, jnp.where(was_filled, AddStatus.IMPROVED, AddStatus.NEW), AddStatus.NOT_ADDED
        ).astype(jnp.int32)
        nan = jnp.float32(jnp.nan)
        delta = f - near_f
        info = AddInfo(
            cell=jnp.where(stored, slots, -1),
            status=status,
            delta=jnp.where(valid, delta, nan),
            threshold_status=status,
            value=jnp.where(valid, jnp.where(status == AddStatus.NEW, f, delta), nan),
            novelty=jnp.where(valid, near, nan),
        )
        return new, info
