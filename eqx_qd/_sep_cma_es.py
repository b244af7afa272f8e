"""sep-CMA-ES (Ros and Hansen, 2008): CMA-ES with a diagonal covariance, `O(dim)` state and
work per candidate, with the update pyribs 0.12's `SeparableCMAEvolutionStrategy` makes (after
pycma's separable learning rates)."""

import typing

import equinox as eqx
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


SEP_CONDITION_LIMIT = 1e14
"""pycma's condition-number tolerance, kept: a diagonal covariance's condition number is the
ratio of two of its entries, exact in float32 (unlike full CMA-ES's, read from a float32
eigendecomposition: `CONDITION_LIMIT`)."""

SEP_AREA_LIMIT = 1e-11
"""A strategy whose extent `sigma * sqrt(max cov)` falls below this restarts (pycma)."""


class SepCMAESState(eqx.Module):
    """One sep-CMA-ES's distribution.

    **Fields:** `mean` `(dim,)`; step size `sigma`; evolution paths `pc` and `ps` `(dim,)`;
    `cov` `(dim,)`, the diagonal of the covariance; `evaluations`, the candidates told so far.
    """

    mean: Float[Array, " dim"]
    sigma: Float[Array, ""]
    pc: Float[Array, " dim"]
    ps: Float[Array, " dim"]
    cov: Float[Array, " dim"]
    evaluations: Int[Array, ""]


def _separable_rates(weights, dim: int):
    """pyribs' `_calc_strat_params` of sep-CMA-ES: `mueff`, `cc`, `cs`, `c1` and `cmu`, the
    last two pycma's separable learning rates (`rankmu_offset` 0, as pyribs)."""
    n = float(dim)
    mueff = jnp.sum(weights) ** 2 / jnp.maximum(jnp.sum(weights**2), 1e-30)
    cc = (1.0 + 1.0 / n + mueff / n) / (n**0.5 + 1.0 / n + 2.0 * mueff / n)
    cs = (mueff + 2.0) / (n + mueff + 5.0)
    c1 = 2.0 / ((n + 1.3) ** 2 + mueff)
    c1 = c1 / (n + 2.0 * n**0.5 + mueff / n)
    cmu = jnp.minimum(1.0 - c1, (mueff + 1.0 / mueff - 2.0) / (n + 4.0 * n**0.5 + mueff / 2.0))
    return mueff, cc, cs, c1, cmu


@typing.final
class SepCMAES(AbstractEvolutionStrategy[SepCMAESState]):
    """sep-CMA-ES over `dim` variables, `batch_size` candidates per generation.

    The covariance is diagonal: sampling scales standard normal draws by `sigma * sqrt(cov)`,
    the path update divides by `sqrt(cov)`, and the rank-mu update keeps the diagonal of
    CMA-ES's (the squares of the parents' steps). Weights and learning rates come from the
    generation's number of parents, and the rank-one term carries pyribs' doubled `c1`, as in
    `CMAES`. Candidates outside `lower` / `upper` are redrawn (`RESAMPLE_TRIES` times, then
    clipped). It restarts on a condition number above `SEP_CONDITION_LIMIT`, an extent below
    `SEP_AREA_LIMIT` or a flat ranking.

    **Fields:** `dim`, `batch_size` (static); `sigma0`, the initial step size (float32 leaf);
    `lower`, `upper` `(dim,)`; `bounded` (static: whether any bound is finite).
    """

    dim: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
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
    ):
        batch_size = check_sizes("SepCMAES", dim, batch_size, sigma0)
        self.dim, self.batch_size, self.sigma0 = dim, batch_size, sigma0
        self.lower, self.upper, self.bounded = check_bounds("SepCMAES", dim, lower, upper)

    def init(self, mean: Float[Array, " dim"]) -> SepCMAESState:
        """A fresh distribution at `mean`: step size `sigma0`, unit diagonal."""
        check.shape("SepCMAES.init: mean", mean, (self.dim,))
        zeros = jnp.zeros(self.dim, jnp.float32)
        return SepCMAESState(
            mean=jnp.asarray(mean, jnp.float32),
            sigma=self.sigma0,
            pc=zeros,
            ps=zeros,
            cov=jnp.ones(self.dim, jnp.float32),
            evaluations=i32(0),
        )

    def sample(self, state: SepCMAESState, *, key: PRNGKey) -> Float[Array, "batch dim"]:
        """`batch_size` candidates from N(mean, sigma^2 diag(cov)), within the bounds."""
        scale = state.sigma * jnp.sqrt(state.cov)

        def draw(k):
            return jr.normal(k, (self.batch_size, self.dim)) * scale[None, :] + state.mean[None, :]

        return resample_in_bounds(draw, self.lower, self.upper, self.bounded, key=key)

    def tell(
        self,
        state: SepCMAESState,
        solutions: Float[Array, "batch dim"],
        order: Int[Array, " batch"],
        num_parents: Int[Array, ""],
    ) -> SepCMAESState:
        """`state` after a generation (see `AbstractEvolutionStrategy.tell`); with no parent
        only the evaluation count moves (pyribs)."""
        check.shape("SepCMAES.tell: solutions", solutions, (self.batch_size, self.dim))
        n = self.dim
        num_parents = jnp.asarray(num_parents, jnp.int32)
        evaluations = state.evaluations + self.batch_size
        weights = parent_weights(num_parents, self.batch_size)
        mueff, cc, cs, c1, cmu = _separable_rates(weights, n)
        damps = 1.0 + 2.0 * jnp.maximum(0.0, jnp.sqrt((mueff - 1.0) / (n + 1.0)) - 1.0) + cs
        ranked = solutions[order]
        mean = weights @ ranked
        y = mean - state.mean
        z = y / jnp.sqrt(state.cov)
        ps = (1.0 - cs) * state.ps + jnp.sqrt(cs * (2.0 - cs) * mueff) / state.sigma * z
        generations = evaluations.astype(jnp.float32) / self.batch_size
        left = jnp.sum(ps**2) / n / (1.0 - (1.0 - cs) ** (2.0 * generations))
        hsig = (left < 2.0 + 4.0 / (n + 1.0)).astype(jnp.float32)
        pc = (1.0 - cc) * state.pc + hsig * jnp.sqrt(cc * (2.0 - cc) * mueff) * y
        ys = ranked - state.mean[None, :]
        rank_mu = weights @ (ys * ys)
        c1a = c1 * (1.0 - (1.0 - hsig**2) * cc * (2.0 - cc))
        cov = (
            state.cov * (1.0 - c1a - cmu * jnp.sum(weights))
            + c1 * c1 * pc**2  # pyribs' doubled c1, as in `CMAES`
            + rank_mu * cmu / state.sigma**2
        )
        sigma = state.sigma * jnp.exp(
            jnp.minimum(1.0, cs / damps * (jnp.sum(ps**2) / n - 1.0) / 2.0)
        )
        told = SepCMAESState(mean, sigma, pc, ps, cov, evaluations)
        counted = eqx.tree_at(lambda s: s.evaluations, state, evaluations)
        return if_parents(num_parents, told, counted)

    def should_stop(
        self, state: SepCMAESState, sorted_values: Float[Array, "batch ..."]
    ) -> Bool[Array, ""]:
        """Whether `state` should restart: condition number above `SEP_CONDITION_LIMIT`,
        extent below `SEP_AREA_LIMIT`, or a flat ranking (`sorted_values`)."""
        top = jnp.max(state.cov)
        condition = top / jnp.min(state.cov)
        area = state.sigma * jnp.sqrt(top)
        return (condition > SEP_CONDITION_LIMIT) | (area < SEP_AREA_LIMIT) | flat(sorted_values)

    def refresh_many(self, states: SepCMAESState, *, batched: bool | None = None) -> SepCMAESState:
        """`states` as they are (`batched` is not read): a diagonal needs no square root
        recomputed."""
        return states
