"""The GA emitter: children of elites by a two-parent variation and a one-parent mutation."""

import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._misc import tree_concatenate, tree_slice
from .._repertoire import AbstractRepertoire
from .._selectors import AbstractSelector, UniformSelector
from .._variation import AbstractMutation, AbstractVariation, MutatedVariation
from .base import AbstractStatelessEmitter, Lineage, Origin, parent_ids


def _split_counts(batch_size: int, variation_percentage: float) -> tuple[int, int]:
    num_variation = int(round(batch_size * variation_percentage))
    return num_variation, batch_size - num_variation


@typing.final
class MixingEmitter(AbstractStatelessEmitter):
    """The GA emitter: `variation_percentage` of the batch from a two-parent variation,
    the rest from a one-parent mutation, parents drawn from the repertoire by `selector`.

    **Fields:**

    - `batch_size`: candidates per iteration.
    - `variation_percentage`: the fraction made by `variation` (rounded to a count; static,
      as it sets the split).
    - `mutation`, `variation`: the operators (each required when its share is positive).
    - `selector`: how parents are drawn (uniformly by default).
    """

    batch_size: int = eqx.field(static=True)
    variation_percentage: float = eqx.field(static=True)
    mutation: AbstractMutation | None = None
    variation: AbstractVariation | None = None
    selector: AbstractSelector = UniformSelector()

    def __check_init__(self):
        check.positive_int("MixingEmitter.batch_size", self.batch_size)
        check.fraction("MixingEmitter.variation_percentage", self.variation_percentage)
        num_variation, num_mutation = _split_counts(self.batch_size, self.variation_percentage)
        if num_variation > 0 and self.variation is None:
            raise ValueError("variation_percentage > 0 needs a variation operator")
        if num_mutation > 0 and self.mutation is None:
            raise ValueError("variation_percentage < 1 needs a mutation operator")

    def emit(
        self, repertoire: AbstractRepertoire, state: None, *, key: PRNGKey
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
        lineage = Lineage.of(jnp.concatenate(first), jnp.concatenate(second), Origin.EVO)
        return (parts[0] if len(parts) == 1 else tree_concatenate(parts)), lineage


def ga_emitter(
    batch_size: int,
    *,
    variation: AbstractVariation | None = None,
    mutation: AbstractMutation | None = None,
    selector: AbstractSelector = UniformSelector(),
) -> MixingEmitter:
    """A `MixingEmitter` whose children all come the same way: from `variation`, from
    `mutation`, or, with both, from `variation` and then `mutation` (`MutatedVariation`:
    the PGA-MAP-Elites repository's GA with a `crossover_op` and a `mutation_op`)."""
    if variation is not None and mutation is not None:
        variation, mutation = MutatedVariation(variation, mutation), None
    return MixingEmitter(
        batch_size=batch_size,
        variation_percentage=0.0 if variation is None else 1.0,
        variation=variation,
        mutation=mutation,
        selector=selector,
    )
