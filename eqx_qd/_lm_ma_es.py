"""LM-MA-ES (Loshchilov, Glasmachers and Beyer, 2018): a limited-memory matrix adaptation ES
whose search distribution is shaped by `n_vectors` direction vectors, `O(n_vectors * dim)` state
and work per candidate, with the update pyribs 0.12's `LMMAEvolutionStrategy` makes (no mirrored
sampling, as pyribs)."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, ScalarLike

from . import _validate as check
from ._custom_types import PRNGKey
from ._es_base import (
    AbstractEvolutionStrategy,
    check_bounds,
    check_sizes,
    flat,
    if_parents,
    parent_weights,
    resample_in_bounds,
)
from ._misc import f32, i32


SIGMA_LIMIT = 1e-12
"""A strategy whose step size falls below this restarts (pyribs; the paper's code had
1e-20, below float32's reach)."""


class LMMAESState(eqx.Module):
    """One LM-MA-ES's distribution.

    **Fields:** `mean` `(dim,)`; step size `sigma`; evolution path `ps` `(dim,)`; `vectors`
    `(n_vectors, dim)`, the direction vectors (pyribs' `m`); `generations`, the generations
    told so far (every `tell` counts, with or without parents: the first `min(generations,
    n_vectors)` vectors shape the samples).
    """

    mean: Float[Array, " dim"]
    sigma: Float[Array, ""]
    ps: Float[Array, " dim"]
    vectors: Float[Array, "n_vectors dim"]
    generations: Int[Array, ""]


@typing.final
class LMMAES(AbstractEvolutionStrategy[LMMAESState]):
    """LM-MA-ES over `dim` variables, `batch_size` candidates per generation.

    A candidate is `mean + sigma * d`, where `d` is a standard normal `z` passed through the
    rank-one maps `d <- (1 - cd_j) d + cd_j v_j (v_j . d)` of the first `min(generations,
    n_vectors)` vectors `v_j` in turn, with `cd_j = 1 / (1.5^j dim)`. After a generation the
    mean is the weighted parents, and the path `ps` and each vector `v_j` move toward the
    weighted parents' `z` at rates `cs = 2 batch_size / dim` and `cc_j = batch_size /
    (4^j dim)`; `sigma` follows `exp(cs / 2 (|ps|^2 / dim - 1))`. That `z` is recovered from
    the new mean (the weights sum to one, so the weighted `z` is the inverse of the maps applied
    to the mean's move over `sigma`; each map inverts in closed form), since `tell` is given
    the samples, not their noise. Restarts on `sigma` below `SIGMA_LIMIT` or a flat ranking.

    **Fields:** `dim`, `batch_size`, `n_vectors` (static; `batch_size` at most `dim`, as
    pyribs requires, `n_vectors` the batch size by default); `sigma0` (float32 leaf);
    `lower`, `upper` `(dim,)`; `bounded` (static).
    """

    dim: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    n_vectors: int = eqx.field(static=True)
    sigma0: Float[Array, ""] = eqx.field(converter=f32)
    lower: Float[Array, " dim"]
    upper: Float[Array, " dim"]
    bounded: bool = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        batch_size: int | None = None,
        sigma0: ScalarLike = 1.0,
        lower: ScalarLike | Float[Array, " dim"] = -jnp.inf,
        upper: ScalarLike | Float[Array, " dim"] = jnp.inf,
        n_vectors: int | None = None,
    ):
        batch_size = check_sizes("LMMAES", dim, batch_size, sigma0)
        if batch_size > dim:
            raise ValueError(
                f"LMMAES.batch_size ({batch_size}) must not exceed dim ({dim}): its path rate "
                "2 batch_size / dim would pass 2"
            )
        n_vectors = batch_size if n_vectors is None else n_vectors
        check.positive_int("LMMAES.n_vectors", n_vectors)
        self.dim, self.batch_size, self.n_vectors, self.sigma0 = dim, batch_size, n_vectors, sigma0
        self.lower, self.upper, self.bounded = check_bounds("LMMAES", dim, lower, upper)

    @property
    def _rates(self) -> tuple[float, Float[Array, " n_vectors"], Float[Array, " n_vectors"]]:
        """`cs`, and `cd` and `cc` per vector (pyribs' `csigma`, `cd`, `cc`)."""
        j = jnp.arange(self.n_vectors, dtype=jnp.float32)
        cs = 2.0 * self.batch_size / self.dim
        return cs, 1.0 / (1.5**j * self.dim), self.batch_size / (4.0**j * self.dim)

    def init(self, mean: Float[Array, " dim"]) -> LMMAESState:
        """A fresh distribution at `mean`: step size `sigma0`, zero path and vectors."""
        check.shape("LMMAES.init: mean", mean, (self.dim,))
        return LMMAESState(
            mean=jnp.asarray(mean, jnp.float32),
            sigma=self.sigma0,
            ps=jnp.zeros(self.dim, jnp.float32),
            vectors=jnp.zeros((self.n_vectors, self.dim), jnp.float32),
            generations=i32(0),
        )

    def _shape(self, state: LMMAESState, z: Float[Array, "batch dim"]) -> Float[Array, "batch dim"]:
        """The rank-one maps of the used vectors applied to `z`, first vector first."""
        _, cd, _ = self._rates
        used = jnp.minimum(state.generations, self.n_vectors)

        def step(d, j):
            v = state.vectors[j]
            mapped = (1.0 - cd[j]) * d + cd[j] * (d @ v)[:, None] * v[None, :]
            return jnp.where(j < used, mapped, d), None

        d, _ = jax.lax.scan(step, z, jnp.arange(self.n_vectors))
        return d

    def _unshape(self, state: LMMAESState, d: Float[Array, " dim"]) -> Float[Array, " dim"]:
        """`_shape`'s inverse on one vector: the maps undone last first, each by
        `((1 - c) I + c v v^T)^-1 = (I - c / (1 - c + c |v|^2) v v^T) / (1 - c)`."""
        _, cd, _ = self._rates
        used = jnp.minimum(state.generations, self.n_vectors)

        def step(z, j):
            v, c = state.vectors[j], cd[j]
            undone = (z - c / (1.0 - c + c * (v @ v)) * (v @ z) * v) / (1.0 - c)
            return jnp.where(j < used, undone, z), None

        z, _ = jax.lax.scan(step, d, jnp.arange(self.n_vectors), reverse=True)
        return z

    def sample(self, state: LMMAESState, *, key: PRNGKey) -> Float[Array, "batch dim"]:
        """`batch_size` candidates `mean + sigma * d`, within the bounds."""

        def draw(k):
            d = self._shape(state, jr.normal(k, (self.batch_size, self.dim)))
            return state.mean[None, :] + state.sigma * d

        return resample_in_bounds(draw, self.lower, self.upper, self.bounded, key=key)

    def tell(
        self,
        state: LMMAESState,
        solutions: Float[Array, "batch dim"],
        order: Int[Array, " batch"],
        num_parents: Int[Array, ""],
    ) -> LMMAESState:
        """`state` after a generation (see `AbstractEvolutionStrategy.tell`); with no parent
        only the generation count moves (pyribs)."""
        check.shape("LMMAES.tell: solutions", solutions, (self.batch_size, self.dim))
        num_parents = jnp.asarray(num_parents, jnp.int32)
        generations = state.generations + 1
        cs, _, cc = self._rates
        weights = parent_weights(num_parents, self.batch_size)
        mueff = jnp.sum(weights) ** 2 / jnp.maximum(jnp.sum(weights**2), 1e-30)
        mean = weights @ solutions[order]
        z_mean = self._unshape(state, (mean - state.mean) / state.sigma)
        ps = (1.0 - cs) * state.ps + jnp.sqrt(mueff * cs * (2.0 - cs)) * z_mean
        vectors = (1.0 - cc[:, None]) * state.vectors + jnp.sqrt(mueff * cc * (2.0 - cc))[
            :, None
        ] * z_mean[None, :]
        sigma = state.sigma * jnp.exp(cs / 2.0 * (jnp.sum(ps**2) / self.dim - 1.0))
        told = LMMAESState(mean, sigma, ps, vectors, generations)
        counted = eqx.tree_at(lambda s: s.generations, state, generations)
        return if_parents(num_parents, told, counted)

    def should_stop(
        self, state: LMMAESState, sorted_values: Float[Array, "batch ..."]
    ) -> Bool[Array, ""]:
        """Whether `state` should restart: `sigma` below `SIGMA_LIMIT`, or a flat ranking
        (`sorted_values`)."""
        return (state.sigma < SIGMA_LIMIT) | flat(sorted_values)

    def refresh_many(self, states: LMMAESState, *, batched: bool | None = None) -> LMMAESState:
        """`states` as they are (`batched` is not read): nothing is recomputed between
        generations."""
        return states
