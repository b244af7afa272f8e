"""CMA-MEGA's and CMA-MAEGA's emitter: gradient arborescence (Fontaine and Nikolaidis, 2021).

Each strategy keeps a point `theta`. Its batch is `theta` itself and `branches` around it:
`theta + c @ J`, where `J` stacks the (normalised) gradients of the fitness and of every
descriptor at `theta` and the coefficients `c` come from a CMA-ES over `num_descriptors + 1`
variables. The ranked branches move the CMA-ES and, through their recombined mean, `theta`
(gradient ascent or Adam, pyribs' optimisers). pyribs asks the user for the gradients; here they
come from JAX's autodiff of the scoring function.
"""

import typing
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, ScalarLike

from .. import _validate as check
from .._cma_es import CMAES, CMAESState, parent_weights
from .._custom_types import Extra, Genotypes, PRNGKey
from .._es_base import adam_ascent
from .._misc import f32
from .._repertoire import AbstractRepertoire, AddInfo
from .base import AbstractRestartingEmitter, Lineage, Origin
from .evolution_strategy import check_rules, ranked_generation, restart_points
from .rankers import AbstractRanker, ranker as _ranker


OPTIMISERS = ("adam", "gradient_ascent")


class GradientArborescenceEmitterState(eqx.Module):
    """The population's strategies (leading axis `num_emitters` on every field).

    **Fields:** `es`, the coefficients' `CMAESState`s; `theta` `(num_emitters, dim)`;
    `jacobian` `(num_emitters, num_descriptors + 1, dim)` at `theta` (normalised rows);
    `coefficients` `(num_emitters, branches, num_descriptors + 1)`, drawn for the next batch;
    Adam's `moment1`, `moment2` and `steps`; `direction`, `iterations`, `restarts` as in
    `EvolutionStrategyEmitterState`.
    """

    es: CMAESState
    theta: Float[Array, "num_emitters dim"]
    jacobian: Float[Array, "num_emitters m dim"]
    coefficients: Float[Array, "num_emitters branches m"]
    moment1: Float[Array, "num_emitters dim"]
    moment2: Float[Array, "num_emitters dim"]
    steps: Int[Array, " num_emitters"]
    direction: Float[Array, "num_emitters num_descriptors"]
    iterations: Int[Array, " num_emitters"]
    restarts: Int[Array, " num_emitters"]


def task_jacobian(
    scoring_fn: Callable,
    theta: Float[Array, " dim"],
    normalize_grad: bool,
    epsilon: Float[Array, ""],
    *,
    key: PRNGKey,
) -> Float[Array, "m dim"]:
    """`(1 + num_descriptors, dim)`: the gradients of the fitness and the descriptors of
    `scoring_fn` at `theta`, by reverse-mode autodiff; with `normalize_grad`, each row divided
    by its norm plus `epsilon` (pyribs' normalisation)."""

    def outputs(x):
        fitnesses, descriptors, _ = scoring_fn(x[None], key=key)
        return jnp.concatenate([fitnesses, descriptors[0]])

    jac = jax.jacrev(outputs)(theta)
    if normalize_grad:
        jac = jac / (jnp.linalg.norm(jac, axis=-1, keepdims=True) + epsilon)
    return jac


@typing.final
class GradientArborescenceEmitter(AbstractRestartingEmitter[GradientArborescenceEmitterState]):
    """`num_emitters` gradient arborescences (pyribs' `GradientArborescenceEmitter`): each
    iteration a strategy emits `theta` and `branches` candidates `theta + c @ J`.

    CMA-MEGA: ranker `2imp`, selection `mu`, `optimizer="gradient_ascent"`, `lr=1`,
    `sigma0=10` (pyribs' sphere example). CMA-MAEGA: ranker `imp`, restart `basic`, in a
    `MAPElites` with `archive_learning_rate`. The batch is `num_emitters * (1 + branches)`:
    per strategy `theta` first, then its branches; only the branches are ranked (pyribs
    evaluates `theta` in a batch of its own, `ask_dqd`, just before; here it is inserted with
    its branches, which are judged against the archive without it).

    **Fields:**

    - `scoring_fn`: the differentiable task, `(genotypes, *, key) -> (fitnesses, descriptors,
      extra)`; `J` is the Jacobian of `(fitness, descriptors)` at `theta`.
    - `es`: the coefficients' `CMAES` (dim `num_descriptors + 1`, `branches` per batch,
      `sigma0`; refreshed by eigendecomposition, pyribs' way, the cheaper one at that size).
    - `x0`: `(dim,)`, the first `theta`.
    - `lr`, `beta1`, `beta2`, `adam_epsilon`: the optimiser's float32 hyperparameters.
    - `optimizer`: `"gradient_ascent"` (`theta += lr * step`) or `"adam"` (pyribs' Adam).
    - `normalize_grad`, `epsilon`: rows of `J` divided by their norm plus `epsilon`.
    - `ranker`, `selection_rule`, `restart_rule`, `num_emitters`: as `EvolutionStrategyEmitter`.
    """

    scoring_fn: Callable
    es: CMAES
    x0: Float[Array, " dim"]
    ranker: AbstractRanker
    lr: Float[Array, ""] = eqx.field(converter=f32)
    beta1: Float[Array, ""] = eqx.field(converter=f32)
    beta2: Float[Array, ""] = eqx.field(converter=f32)
    adam_epsilon: Float[Array, ""] = eqx.field(converter=f32)
    epsilon: Float[Array, ""] = eqx.field(converter=f32)
    num_emitters: int = eqx.field(static=True)
    num_descriptors: int = eqx.field(static=True)
    optimizer: str = eqx.field(static=True)
    normalize_grad: bool = eqx.field(static=True)
    selection_rule: str = eqx.field(static=True)
    restart_rule: str | int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)

    def __init__(
        self,
        scoring_fn: Callable,
        x0: Float[Array, " dim"],
        sigma0: ScalarLike,
        lr: ScalarLike,
        *,
        num_descriptors: int,
        num_emitters: int = 15,
        branches: int = 35,
        ranker: "str | AbstractRanker" = "2imp",
        selection_rule: str = "filter",
        restart_rule: "str | int" = "no_improvement",
        optimizer: str = "adam",
        normalize_grad: bool = True,
        epsilon: ScalarLike = 1e-8,
        beta1: ScalarLike = 0.9,
        beta2: ScalarLike = 0.999,
        adam_epsilon: ScalarLike = 1e-8,
    ):
        owner = "GradientArborescenceEmitter"
        if not callable(scoring_fn):
            raise TypeError(f"{owner}.scoring_fn must be callable, got {scoring_fn!r}")
        x0 = jnp.asarray(x0, jnp.float32)
        if x0.ndim != 1:
            raise ValueError(f"{owner}.x0 must have shape (dim,), got {x0.shape}")
        check.positive_int(f"{owner}.num_descriptors", num_descriptors)
        check.positive_int(f"{owner}.num_emitters", num_emitters)
        check_rules(owner, selection_rule, restart_rule)
        check.one_of(f"{owner}.optimizer", optimizer, OPTIMISERS)
        check.positive(f"{owner}.lr", lr)
        check.in_range(f"{owner}.beta1", beta1, 0.0, 1.0)
        check.in_range(f"{owner}.beta2", beta2, 0.0, 1.0)
        check.positive(f"{owner}.epsilon", epsilon)
        check.positive(f"{owner}.adam_epsilon", adam_epsilon)
        try:
            # A CMA-ES over num_descriptors + 1 coefficients: its decomposition is cheaper than
            # Newton steps would be, and it is refreshed inside the strategies' vmap.
            self.es = CMAES(num_descriptors + 1, branches, sigma0, square_roots="eigh")
        except ValueError as e:
            named = str(e).replace("CMAES.batch_size", "branches").replace("CMAES.", "")
            raise ValueError(f"{owner}: {named}") from None
        self.scoring_fn = scoring_fn
        self.x0 = x0
        self.ranker = _ranker(ranker)
        self.lr, self.beta1, self.beta2 = lr, beta1, beta2
        self.adam_epsilon, self.epsilon = adam_epsilon, epsilon
        self.num_emitters = num_emitters
        self.num_descriptors = num_descriptors
        self.optimizer = optimizer
        self.normalize_grad = normalize_grad
        self.selection_rule = selection_rule
        self.restart_rule = restart_rule
        self.batch_size = num_emitters * (1 + branches)

    @property
    def branches(self) -> int:
        """Branches per strategy and iteration."""
        return self.es.batch_size

    def restarts(self, state: GradientArborescenceEmitterState) -> Int[Array, ""]:
        """Restarts summed over the population."""
        return jnp.sum(state.restarts)

    def _jacobian(self, theta: Float[Array, " dim"], key: PRNGKey) -> Float[Array, "m dim"]:
        return task_jacobian(self.scoring_fn, theta, self.normalize_grad, self.epsilon, key=key)

    def _start(self, theta, direction, iterations, restarts, key) -> tuple:
        """A strategy (re)started at `theta`: fresh coefficients' CMA-ES at 0, fresh Adam."""
        jac_key, draw_key = jr.split(key)
        es = self.es.init(jnp.zeros(self.num_descriptors + 1, jnp.float32))
        zeros = jnp.zeros_like(theta)
        return (
            es,
            theta,
            self._jacobian(theta, jac_key),
            self.es.sample(es, key=draw_key),
            zeros,
            zeros,
            jnp.int32(0),
            direction,
            iterations,
            restarts,
        )

    def init(
        self,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> GradientArborescenceEmitterState:
        owner = "GradientArborescenceEmitter.init"
        check.same_rows(
            f"{owner}: the repertoire's genotypes",
            repertoire.genotypes,
            self.x0[None],
            owner=f"the emitter (x0 of dim {self.x0.shape[0]})",
        )
        if repertoire.num_descriptors != self.num_descriptors:
            raise ValueError(
                f"{owner}: num_descriptors is {self.num_descriptors}, the repertoire has "
                f"{repertoire.num_descriptors}"
            )
        lower, upper = repertoire.extent
        keys = jr.split(key, self.num_emitters)

        def one(k):
            direction_key, start_key = jr.split(k)
            direction = self.ranker.direction(lower, upper, key=direction_key)
            return self._start(self.x0, direction, jnp.int32(0), jnp.int32(0), start_key)

        return GradientArborescenceEmitterState(*jax.vmap(one)(keys))

    def emit(
        self,
        repertoire: AbstractRepertoire,
        state: GradientArborescenceEmitterState,
        *,
        key: PRNGKey,
    ) -> tuple[Genotypes, Extra]:
        branches = state.theta[:, None, :] + jnp.einsum(
            "ebm,emd->ebd", state.coefficients, state.jacobian
        )
        batch = jnp.concatenate([state.theta[:, None, :], branches], axis=1)
        none = jnp.full((self.batch_size,), -1, jnp.int32)
        kinds = jnp.tile(
            jnp.asarray([Origin.GRADIENT] + [Origin.ES] * self.branches, jnp.int32),
            self.num_emitters,
        )
        return batch.reshape(self.batch_size, -1), Lineage(none, none, kinds)

    def _optimiser_step(self, theta, moment1, moment2, steps, step):
        if self.optimizer == "gradient_ascent":
            return theta + self.lr * step, moment1, moment2, steps
        return adam_ascent(
            theta, moment1, moment2, steps, step, self.lr, self.beta1, self.beta2, self.adam_epsilon
        )

    def state_update(
        self,
        state: GradientArborescenceEmitterState,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        add_info: AddInfo,
        key: PRNGKey,
    ) -> GradientArborescenceEmitterState:
        repertoire.check_candidates(
            genotypes,
            descriptors,
            fitnesses,
            where="GradientArborescenceEmitter.state_update",
            batch_size=self.batch_size,
        )
        e, b = self.num_emitters, self.branches

        def branches_of(x):  # (batch, ...) -> (emitters, branches, ...), theta rows dropped
            return x.reshape((e, 1 + b) + x.shape[1:])[:, 1:]

        lower, upper = repertoire.extent

        def generation(s: GradientArborescenceEmitterState, g, d, f, info, k):
            es, order, parents, iterations, stop = ranked_generation(
                self.es,
                self.ranker,
                self.selection_rule,
                self.restart_rule,
                s.es,
                s.direction,
                s.iterations,
                s.coefficients,
                f,
                d,
                info,
            )
            # theta moves to the recombined mean of the parent branches.
            step = parent_weights(parents, b) @ g[order] - s.theta
            theta, moment1, moment2, steps = self._optimiser_step(
                s.theta, s.moment1, s.moment2, s.steps, step
            )
            pick_key, direction_key, next_key = jr.split(k, 3)
            direction = jnp.where(
                stop, self.ranker.direction(lower, upper, key=direction_key), s.direction
            )
            moved = (es, theta, moment1, moment2, steps, direction, iterations)
            return moved, stop, pick_key, next_key

        def restarted(moved, stop, elite, restarts, next_key):
            es, theta, moment1, moment2, steps, direction, iterations = moved
            theta = jnp.where(stop, elite, theta)
            fresh = self.es.init(jnp.zeros(self.num_descriptors + 1, jnp.float32))
            es = jax.tree.map(lambda a, c: jnp.where(stop, a, c), fresh, self.es.refresh(es))
            moment1, moment2 = (jnp.where(stop, 0.0, m) for m in (moment1, moment2))
            jac_key, draw_key = jr.split(next_key)
            return (
                es,
                theta,
                self._jacobian(theta, jac_key),
                self.es.sample(es, key=draw_key),
                moment1,
                moment2,
                jnp.where(stop, 0, steps),
                direction,
                iterations,
                restarts + stop.astype(jnp.int32),
            )

        moved, stop, pick_keys, next_keys = jax.vmap(generation)(
            state,
            branches_of(genotypes),
            branches_of(descriptors),
            branches_of(fitnesses),
            jax.tree.map(branches_of, add_info),
            jr.split(key, e),
        )
        elites = restart_points(repertoire, stop, pick_keys, self.x0)
        outs = jax.vmap(restarted)(moved, stop, elites, state.restarts, next_keys)
        return GradientArborescenceEmitterState(*outs)
