"""The emitter contract: where each iteration's candidate genotypes come from, and the
per-candidate lineage emitters report."""

import abc
import enum
from typing import Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from .._custom_types import Extra, Genotypes, PRNGKey
from .._repertoire import AbstractRepertoire, AddInfo, Elites


_State = TypeVar("_State")


class Origin(enum.IntEnum):
    """How a candidate was made, per candidate in its `Lineage`: `RANDOM` (an initial
    genotype), `EVO` (GA variation of elites), `GRADIENT` (a policy-gradient step, PGA-ME's
    and ME-PBT's trained agents), `GREEDY` (PGA-ME's greedy actor itself), `ES` (sampled by
    an evolution strategy), `INJECTED` (DCRL-ME's conditioned actor specialised to a target
    descriptor), `DIVERSITY` and `DIVERSITY_GREEDY` (QDPG's policy-gradient steps on the
    diversity reward, and that learner's greedy actor). The jobs write it as the `type` column
    of their lineage files."""

    RANDOM = 0
    EVO = 1
    GRADIENT = 2
    GREEDY = 3
    ES = 4
    INJECTED = 5
    DIVERSITY = 6
    DIVERSITY_GREEDY = 7


class Lineage(eqx.Module):
    """Per-candidate parents and origin, returned by emitters as their `emit` extra.

    **Fields** (each `(batch,)` int32):

    - `parent1`, `parent2`: the ids the repertoire stores for the parents when `MAPElites`
      tracks lineage (`-1`: no such parent, or ids not tracked).
    - `kind`: how the candidate was made, an `Origin` value.
    """

    parent1: Int[Array, " batch"]
    parent2: Int[Array, " batch"]
    kind: Int[Array, " batch"]

    @classmethod
    def of(cls, parent1, parent2, kind: Origin) -> "Lineage":
        """A lineage whose candidates were all made the same way (`kind`)."""
        return cls(
            parent1.astype(jnp.int32),
            parent2.astype(jnp.int32),
            jnp.full(parent1.shape, int(kind), jnp.int32),
        )


def stored_ids(extra: object) -> Int[Array, " rows"] | None:
    """The ids a repertoire's (or a selection's) `extra` holds, one per row, when it holds
    them (a 1-D int array: `MAPElites(lineage=True)`), else `None`."""
    if (
        isinstance(extra, jax.Array)
        and extra.ndim == 1
        and jnp.issubdtype(extra.dtype, jnp.integer)
    ):
        return extra.astype(jnp.int32)
    return None


def parent_ids(elites: Elites) -> Int[Array, " batch"]:
    """The selected elites' ids when the repertoire stores them (int `extra`), else `-1`."""
    if not isinstance(elites, Elites):
        raise TypeError(f"parent_ids: elites must be an eqx_qd.Elites, got {type(elites).__name__}")
    ids = stored_ids(elites.extra)
    return jnp.full(elites.fitnesses.shape, -1, jnp.int32) if ids is None else ids


class AbstractEmitter(eqx.Module, Generic[_State]):
    """Proposes `batch_size` candidates per iteration and learns from their evaluations.

    Stateless: whatever an emitter learns lives in the state that `init` returns and
    `state_update` advances. Subclass it, implement the three methods and mark the subclass
    `typing.final`; an emitter that learns nothing subclasses `AbstractStatelessEmitter` and
    writes `emit` only. Two capabilities are types of their own: an emitter that restarts its
    search subclasses `AbstractRestartingEmitter` (and says how often it has), one that learns
    from a composed batch's every candidate subclasses `AbstractWholeBatchEmitter`.

    Candidate batches always come as `(genotypes, descriptors, fitnesses)`, the order of
    `AbstractRepertoire.add`; keys are keyword-only and last.
    """

    batch_size: eqx.AbstractVar[int]

    @abc.abstractmethod
    def init(
        self,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> _State:
        """The initial state.

        **Arguments:**

        - `repertoire`: the repertoire after the initial population was inserted.
        - `genotypes`, `descriptors`, `fitnesses`: the initial population and its scores
          (leading axis `batch`).
        - `extra`: what the scoring function returned beside them (e.g. `ScoringExtra`).
        - `key`: a PRNG key.
        """

    @abc.abstractmethod
    def emit(
        self, repertoire: AbstractRepertoire, state: _State, *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        """A batch of candidates, made from `repertoire` with the emitter's `state`.

        **Returns:** `batch_size` genotypes (a pytree with that leading axis) and
        per-candidate extra data: a `Lineage` to take part in lineage tracking and in
        `ComposedEmitter`'s concatenated lineage, or `None`.
        """

    @abc.abstractmethod
    def state_update(
        self,
        state: _State,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        add_info: AddInfo,
        key: PRNGKey,
    ) -> _State:
        """The state after the emitted batch was scored and offered to `repertoire`.

        **Arguments:**

        - `state`: the state `emit` used.
        - `repertoire`: the repertoire after the batch was inserted.
        - `genotypes`, `descriptors`, `fitnesses`: the emitted batch and its scores.
        - `extra`: what the scoring function returned (leaves with a leading batch axis).
        - `add_info`: the batch's `AddInfo` from the insertion (per candidate: its cell, its
          status and how far it passed or missed the cell's threshold): what CMA-ME's rankers
          sort by.
        - `key`: a PRNG key, for emitters whose update is random (critic training, PBT,
          restarts).
        """


class AbstractRestartingEmitter(AbstractEmitter[_State]):
    """An emitter that restarts its search (a CMA-ES that converged, a bandit's members):
    `restarts` says how often. `BanditEmitter(reselect="terminated")` reselects a member when
    its count grows, and every iteration a member that does not restart (pyribs' rule)."""

    @abc.abstractmethod
    def restarts(self, state: _State) -> Int[Array, ""]:
        """How many times the emitter has restarted its search so far."""


class AbstractWholeBatchEmitter(AbstractEmitter[_State]):
    """An emitter that learns from every evaluation: inside a `ComposedEmitter`, its
    `state_update` receives the whole evaluated batch (every member's candidates, in batch
    order) rather than its own slice, as PGA-ME's critic does (QDax's `use_all_data`)."""


class AbstractStatelessEmitter(AbstractEmitter[None]):
    """An emitter that learns nothing: its state is `None`. Subclass it and implement `emit`
    (plus the `batch_size` field) only."""

    def init(
        self,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> None:
        """`None`: there is nothing to learn."""
        return None

    def state_update(
        self,
        state: None,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        add_info: AddInfo,
        key: PRNGKey,
    ) -> None:
        """`None`, unchanged."""
        return None
