"""OpenAI-ES (Salimans et al., 2017): an isotropic Gaussian around a mean that Adam moves up a
rank-based estimate of the gradient, `O(dim)` state, with the update pyribs 0.12's
`OpenAIEvolutionStrategy` makes (mirrored sampling by default)."""

import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, ScalarLike

from . import _validate as check
from ._custom_types import PRNGKey
from ._es_base import (
    AbstractEvolutionStrategy,
    adam_ascent,
    check_bounds,
    check_sizes,
    default_batch_size,
    flat,
    resample_in_bounds,
)
from ._misc import f32, i32


UPDATE_RATIO_LIMIT = 1e-9
"""A strategy whose last step moved its mean by less than this fraction of the mean's norm
restarts (pyribs)."""


class OpenAIESState(eqx.Module):
    """One OpenAI-ES's distribution and its optimiser.

    **Fields:** `mean` `(dim,)` (pyribs' `theta`); Adam's `moment1`, `moment2` `(dim,)` and
    `steps`; `update_ratio`, `|step| / |mean|` of the last step (`inf` before the first).
    """

    mean: Float[Array, " dim"]
    moment1: Float[Array, " dim"]
    moment2: Float[Array, " dim"]
    steps: Int[Array, ""]
    update_ratio: Float[Array, ""]


@typing.final
class OpenAIES(AbstractEvolutionStrategy[OpenAIESState]):
    """OpenAI-ES over `dim` variables, `batch_size` candidates per generation.

    Candidates are `mean + sigma0 * noise`, the noise mirrored (`mirror_sampling`: the second
    half of the batch is the first half negated). After a generation each candidate's rank
    (the best `batch_size - 1`) is normalised to `[-1/2, 1/2]`, the gradient estimate is the
    rank-weighted noise over `batch_size * sigma0` (mirrored: the first half's noise weighted by
    the rank differences of the pairs, over `batch_size / 2 * sigma0`), and pyribs' Adam
    (`adam_ascent`) steps the mean up it. The number of parents is not used: every candidate
    counts by its rank. The noise is recovered from the samples, `(x - mean) / sigma0`. The
    step size does not adapt. Restarts when a step moved the mean by less than
    `UPDATE_RATIO_LIMIT` of its norm, or on a flat ranking.

    **Fields:** `dim`, `batch_size` (static; even with mirrored sampling; by default pyribs'
    `4 + floor(3 ln dim)` rounded up to even); `sigma0` (float32 leaf); `lower`, `upper`
    `(dim,)` (mirrored sampling takes no bounds, as in pyribs: a mirrored pair cannot be
    redrawn one side alone); `bounded`, `mirror_sampling` (static); Adam's `learning_rate`,
    `beta1`, `beta2`, `epsilon` and `l2_coeff` (float32 leaves; pyribs' defaults 0.001, 0.9,
    0.999, 1e-8, 0).
    """

    dim: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    sigma0: Float[Array, ""] = eqx.field(converter=f32)
    lower: Float[Array, " dim"]
    upper: Float[Array, " dim"]
    bounded: bool = eqx.field(static=True)
    mirror_sampling: bool = eqx.field(static=True)
    learning_rate: Float[Array, ""] = eqx.field(converter=f32)
    beta1: Float[Array, ""] = eqx.field(converter=f32)
    beta2: Float[Array, ""] = eqx.field(converter=f32)
    epsilon: Float[Array, ""] = eqx.field(converter=f32)
    l2_coeff: Float[Array, ""] = eqx.field(converter=f32)

    def __init__(
        self,
        dim: int,
        batch_size: int | None = None,
        sigma0: ScalarLike = 1.0,
        lower: ScalarLike | Float[Array, " dim"] = -jnp.inf,
        upper: ScalarLike | Float[Array, " dim"] = jnp.inf,
        mirror_sampling: bool = True,
        learning_rate: ScalarLike = 0.001,
        beta1: ScalarLike = 0.9,
        beta2: ScalarLike = 0.999,
        epsilon: ScalarLike = 1e-8,
        l2_coeff: ScalarLike = 0.0,
    ):
        check.positive_int("OpenAIES.dim", dim)
        if batch_size is None:
            batch_size = default_batch_size(dim)
            batch_size += batch_size % 2  # pyribs rounds its default up to even
        batch_size = check_sizes("OpenAIES", dim, batch_size, sigma0)
        if not isinstance(mirror_sampling, bool):
            raise ValueError(f"OpenAIES.mirror_sampling must be a bool, got {mirror_sampling!r}")
        if mirror_sampling and batch_size % 2:
            raise ValueError(
                f"OpenAIES.batch_size must be even with mirror_sampling, got {batch_size}"
            )
        check.positive("OpenAIES.learning_rate", learning_rate)
        for name, beta in (("beta1", beta1), ("beta2", beta2)):
            check.in_range(f"OpenAIES.{name}", beta, 0.0, 1.0)
            if check.is_concrete(beta) and float(beta) == 1.0:
                raise ValueError(f"OpenAIES.{name} must be below 1 (Adam divides by 1 - {name}^t)")
        check.positive("OpenAIES.epsilon", epsilon)
        check.non_negative("OpenAIES.l2_coeff", l2_coeff)
        self.lower, self.upper, self.bounded = check_bounds("OpenAIES", dim, lower, upper)
        if mirror_sampling and self.bounded:
            raise ValueError(
                "OpenAIES: mirror_sampling takes no bounds (a mirrored pair cannot be redrawn "
                "one side alone); pass mirror_sampling=False to sample within lower / upper"
            )
        self.dim, self.batch_size, self.sigma0 = dim, batch_size, sigma0
        self.mirror_sampling = mirror_sampling
        self.learning_rate, self.beta1, self.beta2 = learning_rate, beta1, beta2
        self.epsilon, self.l2_coeff = epsilon, l2_coeff

    def init(self, mean: Float[Array, " dim"]) -> OpenAIESState:
        """A fresh strategy at `mean` with zero Adam moments."""
        check.shape("OpenAIES.init: mean", mean, (self.dim,))
        zeros = jnp.zeros(self.dim, jnp.float32)
        return OpenAIESState(
            mean=jnp.asarray(mean, jnp.float32),
            moment1=zeros,
            moment2=zeros,
            steps=i32(0),
            update_ratio=jnp.float32(jnp.inf),
        )

    def sample(self, state: OpenAIESState, *, key: PRNGKey) -> Float[Array, "batch dim"]:
        """`batch_size` candidates `mean + sigma0 * noise` (mirrored pairs, or redrawn within
        the bounds)."""
        if self.mirror_sampling:
            half = jr.normal(key, (self.batch_size // 2, self.dim))
            noise = jnp.concatenate([half, -half])
            return state.mean[None, :] + self.sigma0 * noise

        def draw(k):
            return state.mean[None, :] + self.sigma0 * jr.normal(k, (self.batch_size, self.dim))

        return resample_in_bounds(draw, self.lower, self.upper, self.bounded, key=key)

    def tell(
        self,
        state: OpenAIESState,
        solutions: Float[Array, "batch dim"],
        order: Int[Array, " batch"],
        num_parents: Int[Array, ""],
    ) -> OpenAIESState:
        """`state` after one Adam step up the rank-weighted noise (see the class); the number
        of parents is not read."""
        check.shape("OpenAIES.tell: solutions", solutions, (self.batch_size, self.dim))
        b = self.batch_size
        noise = (solutions - state.mean[None, :]) / self.sigma0
        # The best candidate (order[0]) gets rank b - 1, the worst 0.
        descending = jnp.arange(b - 1, -1, -1, dtype=jnp.float32)
        ranks = jnp.zeros(b, jnp.float32).at[order].set(descending)
        ranks = ranks / (b - 1) - 0.5
        if self.mirror_sampling:
            h = b // 2
            gradient = (ranks[:h] - ranks[h:]) @ noise[:h] / (h * self.sigma0)
        else:
            gradient = ranks @ noise / (b * self.sigma0)
        mean, moment1, moment2, steps = adam_ascent(
            state.mean,
            state.moment1,
            state.moment2,
            state.steps,
            gradient,
            self.learning_rate,
            self.beta1,
            self.beta2,
            self.epsilon,
            self.l2_coeff,
        )
        ratio = jnp.linalg.norm(mean - state.mean) / jnp.linalg.norm(mean)
        return OpenAIESState(mean, moment1, moment2, steps, ratio)

    def should_stop(
        self, state: OpenAIESState, sorted_values: Float[Array, "batch ..."]
    ) -> Bool[Array, ""]:
        """Whether `state` should restart: its last step's `update_ratio` below
        `UPDATE_RATIO_LIMIT`, or a flat ranking (`sorted_values`)."""
        return (state.update_ratio < UPDATE_RATIO_LIMIT) | flat(sorted_values)

    def refresh_many(self, states: OpenAIESState, *, batched: bool | None = None) -> OpenAIESState:
        """`states` as they are (`batched` is not read): nothing is recomputed between
        generations."""
        return states
