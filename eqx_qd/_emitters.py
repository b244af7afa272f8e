"""Emitters: where each iteration's candidate genotypes come from."""

import abc
import enum
import typing
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int

from ._custom_types import Extra, Genotypes, PRNGKey
from ._misc import tree_concatenate, tree_slice
from ._repertoire import Elites, MapElitesRepertoire
from ._selectors import AbstractSelector, UniformSelector
from ._variation import AbstractMutation, AbstractVariation


_State = TypeVar("_State")


class ActorType(enum.IntEnum):
    """How a candidate was made (the ``type`` column of PGA-ME's actors file)."""

    RANDOM = 0
    EVO = 1
    GRADIENT = 2
    GREEDY = 3


class Lineage(eqx.Module):
    """Per-candidate parents and origin, returned by emitters as their ``emit`` extra.

    Parent ids are those the repertoire stores per elite when `MAPElites` tracks lineage
    (``-1``: no such parent, or ids not tracked). ``kind`` holds `ActorType` values.
    """

    parent1: Int[Array, " batch"]
    parent2: Int[Array, " batch"]
    kind: Int[Array, " batch"]

    @classmethod
    def of(cls, parent1, parent2, kind: ActorType) -> "Lineage":
        return cls(
            parent1.astype(jnp.int32),
            parent2.astype(jnp.int32),
            jnp.full(parent1.shape, int(kind), jnp.int32),
        )


def parent_ids(elites: Elites) -> Int[Array, " batch"]:
    """The selected elites' ids when the repertoire stores them (int ``extra``), else ``-1``."""
    extra = elites.extra
    if (
        isinstance(extra, jax.Array)
        and extra.ndim == 1
        and jnp.issubdtype(extra.dtype, jnp.integer)
    ):
        return extra.astype(jnp.int32)
    return jnp.full(elites.fitnesses.shape, -1, jnp.int32)


class AbstractEmitter(eqx.Module, Generic[_State]):
    """Proposes ``batch_size`` genotypes per iteration and learns from their evaluations.

    Stateless: whatever an emitter learns lives in the state returned by `init` and
    `state_update`. Subclass it (and mark the subclass `typing.final`) to add an emitter.
    """

    batch_size: eqx.AbstractVar[int]

    @abc.abstractmethod
    def init(
        self,
        repertoire: MapElitesRepertoire,
        genotypes: Genotypes,
        fitnesses: Float[Array, " batch"],
        descriptors: Float[Array, "batch num_descriptors"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> _State:
        """Initial state, given the repertoire and the evaluated initial population."""

    @abc.abstractmethod
    def emit(
        self, repertoire: MapElitesRepertoire, state: _State, *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        """A batch of ``batch_size`` candidates and per-candidate extra data (or ``None``)."""

    def state_update(
        self,
        state: _State,
        repertoire: MapElitesRepertoire,
        genotypes: Genotypes,
        fitnesses: Float[Array, " batch"],
        descriptors: Float[Array, "batch num_descriptors"],
        extra: Extra,
    ) -> _State:
        """State after the emitted batch was evaluated and offered to ``repertoire``.

        ``extra`` is what the scoring function returned (leaves with a leading batch axis).
        The default keeps the state unchanged.
        """
        del repertoire, genotypes, fitnesses, descriptors, extra
        return state


def _split_counts(batch_size: int, variation_percentage: float) -> tuple[int, int]:
    num_variation = int(round(batch_size * variation_percentage))
    return num_variation, batch_size - num_variation


@typing.final
class MixingEmitter(AbstractEmitter[None]):
    """The GA emitter: ``variation_percentage`` of the batch from a two-parent variation,
    the rest from a one-parent mutation, parents drawn from the repertoire by ``selector``.
    """

    batch_size: int = eqx.field(static=True)
    variation_percentage: float = eqx.field(static=True)
    mutation: AbstractMutation | None = None
    variation: AbstractVariation | None = None
    selector: AbstractSelector = UniformSelector()

    def __check_init__(self):
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")
        if not 0.0 <= self.variation_percentage <= 1.0:
            raise ValueError(
                f"variation_percentage must lie in [0, 1], got {self.variation_percentage}"
            )
        num_variation, num_mutation = _split_counts(self.batch_size, self.variation_percentage)
        if num_variation > 0 and self.variation is None:
            raise ValueError("variation_percentage > 0 needs a variation operator")
        if num_mutation > 0 and self.mutation is None:
            raise ValueError("variation_percentage < 1 needs a mutation operator")

    def init(
        self,
        repertoire: MapElitesRepertoire,
        genotypes: Genotypes,
        fitnesses: Float[Array, " batch"],
        descriptors: Float[Array, "batch num_descriptors"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> None:
        return None

    def emit(
        self, repertoire: MapElitesRepertoire, state: None, *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        num_variation, num_mutation = _split_counts(self.batch_size, self.variation_percentage)
        select_key, var_key, mut_key = jr.split(key, 3)
        # One selection call for all parents: the variation needs two per child.
        elites = repertoire.select(
            2 * num_variation + num_mutation, key=select_key, selector=self.selector
        )
        parents, ids = elites.genotypes, parent_ids(elites)
        parts, first, second = [], [], []
        if num_variation > 0:
            assert self.variation is not None
            x1 = tree_slice(parents, 0, num_variation)
            x2 = tree_slice(parents, num_variation, 2 * num_variation)
            parts.append(self.variation(x1, x2, key=var_key))
            first.append(ids[:num_variation])
            second.append(ids[num_variation : 2 * num_variation])
        if num_mutation > 0:
            assert self.mutation is not None
            x = tree_slice(parents, 2 * num_variation, 2 * num_variation + num_mutation)
            parts.append(self.mutation(x, key=mut_key))
            first.append(ids[2 * num_variation :])
            second.append(jnp.full((num_mutation,), -1, jnp.int32))
        lineage = Lineage.of(jnp.concatenate(first), jnp.concatenate(second), ActorType.EVO)
        return (parts[0] if len(parts) == 1 else tree_concatenate(parts)), lineage


@typing.final
class ComposedEmitter(AbstractEmitter[tuple[Any, ...]]):
    """Runs several emitters side by side and concatenates their batches in order.

    Each member's state is updated with its own slice of the evaluated batch.
    """

    emitters: tuple[AbstractEmitter, ...]
    batch_size: int = eqx.field(static=True)

    def __init__(self, emitters: Sequence[AbstractEmitter]):
        if not emitters:
            raise ValueError("ComposedEmitter needs at least one emitter")
        self.emitters = tuple(emitters)
        self.batch_size = sum(e.batch_size for e in self.emitters)

    def _bounds(self) -> list[tuple[int, int]]:
        out, start = [], 0
        for e in self.emitters:
            out.append((start, start + e.batch_size))
            start += e.batch_size
        return out

    def init(
        self,
        repertoire: MapElitesRepertoire,
        genotypes: Genotypes,
        fitnesses: Float[Array, " batch"],
        descriptors: Float[Array, "batch num_descriptors"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> tuple[Any, ...]:
        keys = jr.split(key, len(self.emitters))
        return tuple(
            e.init(repertoire, genotypes, fitnesses, descriptors, extra, key=k)
            for e, k in zip(self.emitters, keys)
        )

    def emit(
        self, repertoire: MapElitesRepertoire, state: tuple[Any, ...], *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        keys = jr.split(key, len(self.emitters))
        outs = [e.emit(repertoire, s, key=k) for e, s, k in zip(self.emitters, state, keys)]
        extras = [x for _, x in outs]
        if all(isinstance(x, Lineage) for x in extras):
            extra: Extra = tree_concatenate(extras)  # one per-candidate lineage for the batch
        else:
            extra = tuple(extras)
        return tree_concatenate([g for g, _ in outs]), extra

    def state_update(
        self,
        state: tuple[Any, ...],
        repertoire: MapElitesRepertoire,
        genotypes: Genotypes,
        fitnesses: Float[Array, " batch"],
        descriptors: Float[Array, "batch num_descriptors"],
        extra: Extra,
    ) -> tuple[Any, ...]:
        return tuple(
            e.state_update(
                s,
                repertoire,
                tree_slice(genotypes, a, b),
                fitnesses[a:b],
                descriptors[a:b],
                tree_slice(extra, a, b),
            )
            for e, s, (a, b) in zip(self.emitters, state, self._bounds())
        )
