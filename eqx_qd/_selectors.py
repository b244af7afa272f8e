"""Selectors: which filled cells a repertoire hands to an emitter as parents."""

import abc
import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int

from . import _validate as check
from ._custom_types import PRNGKey


class AbstractSelector(eqx.Module):
    """Chooses `num` cell indices among the filled cells (those with finite fitness).

    Subclass and implement `indices` to make a new selection rule. Sampling is with
    replacement. Selecting from an empty repertoire raises a runtime error.
    """

    @abc.abstractmethod
    def indices(
        self, fitnesses: Float[Array, " num_cells"], num: int, *, key: PRNGKey
    ) -> Int[Array, " {num}"]:
        """`num` indices of cells, drawn among the filled cells of `fitnesses`
        (`(num_cells,)`, `-inf` for empty cells)."""


def _check_args(owner: str, fitnesses: Array, num: int) -> None:
    check.positive_int(f"{owner}.indices: num", num)
    if np.ndim(fitnesses) != 1:
        raise ValueError(
            f"{owner}.indices: fitnesses must have shape (num_cells,), got {np.shape(fitnesses)}"
        )


def _check_nonempty(idx: Array, num_filled: Array) -> Array:
    return eqx.error_if(idx, num_filled == 0, "cannot select from an empty repertoire")


@typing.final
class UniformSelector(AbstractSelector):
    """Every filled cell is equally likely."""

    def indices(
        self, fitnesses: Float[Array, " num_cells"], num: int, *, key: PRNGKey
    ) -> Int[Array, " {num}"]:
        _check_args("UniformSelector", fitnesses, num)
        filled = jnp.isfinite(fitnesses)
        num_filled = jnp.sum(filled, dtype=jnp.int32)
        # Positions of the filled cells, packed at the front; a uniform draw over that prefix
        # costs O(num_cells + num) instead of a categorical over all cells per draw.
        (packed,) = jnp.nonzero(filled, size=fitnesses.shape[0], fill_value=0)
        draws = jr.randint(key, (num,), 0, jnp.maximum(num_filled, 1))
        return _check_nonempty(packed[draws].astype(jnp.int32), num_filled)


@typing.final
class FitnessProportionalSelector(AbstractSelector):
    """A filled cell is drawn with probability proportional to `fitness - min_fitness + eps`.

    Shifting by the lowest filled fitness makes the rule work for negative fitnesses; `eps`
    keeps the worst elite selectable.
    """

    eps: float = 1e-6

    def __check_init__(self):
        check.positive("FitnessProportionalSelector.eps", self.eps)

    def indices(
        self, fitnesses: Float[Array, " num_cells"], num: int, *, key: PRNGKey
    ) -> Int[Array, " {num}"]:
        _check_args("FitnessProportionalSelector", fitnesses, num)
        filled = jnp.isfinite(fitnesses)
        num_filled = jnp.sum(filled, dtype=jnp.int32)
        lowest = jnp.min(jnp.where(filled, fitnesses, jnp.inf))
        weights = jnp.where(filled, fitnesses - lowest + self.eps, 0.0)
        cumulative = jnp.cumsum(weights)
        targets = jr.uniform(key, (num,)) * cumulative[-1]
        idx = jnp.searchsorted(cumulative, targets, side="right")
        idx = jnp.minimum(idx, fitnesses.shape[0] - 1).astype(jnp.int32)
        return _check_nonempty(idx, num_filled)
