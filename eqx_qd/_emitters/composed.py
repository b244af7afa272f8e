"""Several emitters side by side in one batch."""

import typing
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax.random as jr
from jaxtyping import Array, Float

from .._custom_types import Extra, Genotypes, PRNGKey
from .._misc import tree_concatenate, tree_slice
from .._repertoire import AbstractRepertoire, AddInfo
from .base import AbstractEmitter, AbstractWholeBatchEmitter, Lineage


@typing.final
class ComposedEmitter(AbstractEmitter[tuple[Any, ...]]):
    """Runs several emitters side by side and concatenates their batches in order.

    Each member's state is updated with its own slice of the evaluated batch, or with the
    whole batch when the member is an `AbstractWholeBatchEmitter` (PGA-ME's policy-gradient emitter:
    its critic learns from the GA's evaluations too).
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
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> tuple[Any, ...]:
        repertoire.check_candidates(genotypes, descriptors, fitnesses, where="ComposedEmitter.init")
        keys = jr.split(key, len(self.emitters))
        return tuple(
            e.init(repertoire, genotypes, descriptors, fitnesses, extra, key=k)
            for e, k in zip(self.emitters, keys)
        )

    def emit(
        self, repertoire: AbstractRepertoire, state: tuple[Any, ...], *, key: PRNGKey
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
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        add_info: AddInfo,
        key: PRNGKey,
    ) -> tuple[Any, ...]:
        repertoire.check_candidates(
            genotypes,
            descriptors,
            fitnesses,
            where="ComposedEmitter.state_update",
            batch_size=self.batch_size,
        )
        keys = jr.split(key, len(self.emitters))
        everything = (genotypes, descriptors, fitnesses, extra, add_info)
        states = []
        for e, s, (a, b), k in zip(self.emitters, state, self._bounds(), keys):
            g, d, f, x, info = (
                everything
                if isinstance(e, AbstractWholeBatchEmitter)
                else tree_slice(everything, a, b)
            )
            states.append(e.state_update(s, repertoire, g, d, f, x, add_info=info, key=k))
        return tuple(states)
