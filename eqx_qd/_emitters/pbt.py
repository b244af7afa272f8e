"""ME-PBT: a PBT population of RL agents that also feeds a MAP-Elites repertoire (one device).

Genotypes are whole agent training states without optimiser states (policy, critic, targets,
normaliser, hyperparameters). Each iteration the emitter offers ``ga_population_size`` GA
children (iso+line-DD on the policies of two elites; every other field comes from the first
parent) and its ``pg_population_size`` PBT agents. Once the batch is scored, the PBT agents are
ranked by their fitness. The worst ``num_to_replace_from_best`` are replaced by copies of agents
drawn from the ``num_best_to_replace_from`` best, replay buffers included. The next
``num_to_replace_from_samples`` worst are replaced by elites sampled from the repertoire. Every
copy gets new hyperparameters drawn from its space. Then the agents train for
``num_training_iterations`` iterations with fresh optimiser states, and the optimiser states
are dropped again.
"""

import dataclasses
import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float

from .._custom_types import Extra, Genotypes, PRNGKey
from .._envs.base import AbstractEnv
from .._misc import tree_all_gather, tree_concatenate, tree_scatter, tree_slice, tree_take
from .._repertoire import MapElitesRepertoire
from .._rl.base import AbstractAgent
from .._rl.off_policy import OffPolicyState
from .._rl.pbt import copy_into, init_population, train_population
from .._rl.spaces import AbstractSpace, sample_hparams
from .._selectors import AbstractSelector, UniformSelector
from .._variation import IsoLineVariation
from .base import AbstractEmitter, ActorType, Lineage, parent_ids


@dataclasses.dataclass(frozen=True)
class PBTEmitterConfig:
    """The sizes and fractions of seed 000's ``PBTEmitterConfig`` (per device).

    Counts are ``int(fraction * pg_population_size)``; `counts` raises an error naming the
    fraction when one rounds to zero although the fraction is positive.
    """

    pg_population_size: int = 10
    ga_population_size: int = 10
    num_training_iterations: int = 25
    env_batch_size: int = 16
    grad_updates_per_step: float = 1.0
    buffer_size: int = 100_000
    fraction_best_to_replace_from: float = 0.1
    fraction_to_replace_from_best: float = 0.2
    fraction_to_replace_from_samples: float = 0.4
    fraction_sort_exchange: float = 0.1  # used by the multi-device exchange

    def __post_init__(self):
        for name in ("pg_population_size", "num_training_iterations", "env_batch_size",
                     "buffer_size"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.ga_population_size < 0:
            raise ValueError(f"ga_population_size must be >= 0, got {self.ga_population_size}")
        if self.grad_updates_per_step <= 0:
            raise ValueError("grad_updates_per_step must be positive")
        fractions = ("fraction_best_to_replace_from", "fraction_to_replace_from_best",
                     "fraction_to_replace_from_samples", "fraction_sort_exchange")  # fmt: skip
        for name in fractions:
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        best, from_best, from_samples = self.counts()
        if from_best + from_samples > self.pg_population_size:
            raise ValueError(
                f"fraction_to_replace_from_best + fraction_to_replace_from_samples replace "
                f"{from_best + from_samples} agents, more than pg_population_size "
                f"{self.pg_population_size}"
            )

    def counts(self) -> tuple[int, int, int]:
        """(num_best_to_replace_from, num_to_replace_from_best, num_to_replace_from_samples)."""
        n = self.pg_population_size
        out = []
        for name in ("fraction_best_to_replace_from", "fraction_to_replace_from_best",
                     "fraction_to_replace_from_samples"):  # fmt: skip
            frac = getattr(self, name)
            count = int(frac * n)
            if frac > 0 and count == 0:
                raise ValueError(
                    f"{name}={frac} of pg_population_size={n} rounds to 0 agents; use a "
                    f"population of at least {int(-(-1 // frac))} or a larger fraction"
                )
            out.append(count)
        if out[1] > 0 and out[0] == 0:
            raise ValueError("fraction_best_to_replace_from must be positive to replace from best")
        return out[0], out[1], out[2]


class PBTEmitterState(eqx.Module):
    """The PBT agents (training runs with their buffers and environments), a key, and the
    returns of the best set that the last replacement copied from (identical on every device
    when the emitter runs over a mesh axis)."""

    population: OffPolicyState
    key: PRNGKey
    best_returns: Float[Array, " num_best"]


@typing.final
class PBTEmitter(AbstractEmitter[PBTEmitterState]):
    """The ME-PBT emitter (see the module docstring). Score its genotypes with
    ``PolicyScorer(env, agent=agent)``."""

    agent: AbstractAgent
    env: AbstractEnv
    config: PBTEmitterConfig = eqx.field(static=True)
    spaces: dict[str, AbstractSpace]
    variation: IsoLineVariation
    selector: AbstractSelector = UniformSelector()
    axis_name: str | None = eqx.field(default=None, static=True)

    @property
    def batch_size(self) -> int:
        return self.config.ga_population_size + self.config.pg_population_size

    def initial_genotypes(self, num: int, *, key: PRNGKey) -> Genotypes:
        """``num`` fresh agent states with hyperparameters drawn from the spaces and no
        optimiser states: the initial population of `MAPElites.init`."""

        def one(k):
            init_key, hp_key = jr.split(k)
            state = self.agent.init(key=init_key)
            state = eqx.tree_at(
                lambda s: s.hparams, state, sample_hparams(state.hparams, self.spaces, key=hp_key)
            )
            return self.agent.empty_optimizer_states(state)

        return eqx.filter_vmap(one)(jr.split(key, num))

    def init(
        self,
        repertoire: MapElitesRepertoire,
        genotypes: Genotypes,
        fitnesses: Float[Array, " batch"],
        descriptors: Float[Array, "batch num_descriptors"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> PBTEmitterState:
        pop_key, key = jr.split(key)
        c = self.config
        if fitnesses.shape[0] < c.pg_population_size:
            raise ValueError(
                f"the initial population ({fitnesses.shape[0]}) must hold at least "
                f"pg_population_size={c.pg_population_size} agents"
            )
        population = init_population(
            self.agent, self.env, self.spaces, c.pg_population_size, key=pop_key,
            env_batch_size=c.env_batch_size, buffer_size=c.buffer_size,
        )  # fmt: skip
        # The PBT agents start as the first initial genotypes (as in QDax), without optimisers.
        agents = tree_slice(genotypes, 0, c.pg_population_size)
        population = eqx.tree_at(lambda p: p.agent_state, population, agents)
        num_best = max(1, c.counts()[0])
        return PBTEmitterState(population, key, jnp.full((num_best,), -jnp.inf, jnp.float32))

    def emit(
        self, repertoire: MapElitesRepertoire, state: PBTEmitterState, *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        c = self.config
        pg = state.population.agent_state
        pg_lineage = Lineage.of(
            jnp.full((c.pg_population_size,), -1, jnp.int32),
            jnp.full((c.pg_population_size,), -1, jnp.int32),
            ActorType.GRADIENT,
        )
        if c.ga_population_size == 0:
            return pg, pg_lineage
        select_key, var_key = jr.split(key)
        elites = repertoire.select(2 * c.ga_population_size, key=select_key, selector=self.selector)
        first = tree_slice(elites.genotypes, 0, c.ga_population_size)
        second = tree_slice(elites.genotypes, c.ga_population_size, 2 * c.ga_population_size)
        policies = self.variation(first.policy, second.policy, key=var_key)
        children = eqx.tree_at(lambda s: s.policy, first, policies)
        ids = parent_ids(elites)
        ga_lineage = Lineage.of(
            ids[: c.ga_population_size], ids[c.ga_population_size :], ActorType.EVO
        )
        return tree_concatenate([children, pg]), tree_concatenate([ga_lineage, pg_lineage])

    def state_update(
        self,
        state: PBTEmitterState,
        repertoire: MapElitesRepertoire,
        genotypes: Genotypes,
        fitnesses: Float[Array, " batch"],
        descriptors: Float[Array, "batch num_descriptors"],
        extra: Extra,
    ) -> PBTEmitterState:
        c = self.config
        num_best, from_best, from_samples = c.counts()
        num_best = max(1, num_best)
        returns = fitnesses[c.ga_population_size :]
        key, best_key, sample_key, hp_key, train_key = jr.split(state.key, 5)
        population = state.population
        clean = jnp.where(jnp.isnan(returns), -jnp.inf, returns)
        order = jnp.argsort(-clean)  # best first
        # The best set: the local best, or over a mesh axis the best of every device's local best
        # (the global top-k lies in the union of the local top-k, so one gather suffices).
        pool = tree_take(population, order[:num_best])
        pool_returns = clean[order[:num_best]]
        if self.axis_name is not None:
            pool, pool_returns = tree_all_gather((pool, pool_returns), self.axis_name)
            top = jnp.argsort(-pool_returns)[:num_best]
            pool, pool_returns = tree_take(pool, top), pool_returns[top]
        if from_best > 0:
            worst = order[c.pg_population_size - from_best :]
            resample = lambda h, k: sample_hparams(h, self.spaces, key=k)
            population, _ = copy_into(population, pool, worst, resample, key=best_key)
        if from_samples > 0:
            slots = order[c.pg_population_size - from_best - from_samples :][:from_samples]
            samples = repertoire.select(from_samples, key=sample_key, selector=self.selector)
            agents = samples.genotypes
            hparams = eqx.filter_vmap(lambda h, k: sample_hparams(h, self.spaces, key=k))(
                agents.hparams, jr.split(hp_key, from_samples)
            )
            agents = eqx.tree_at(lambda s: s.hparams, agents, hparams)
            population = eqx.tree_at(
                lambda p: p.agent_state,
                population,
                tree_scatter(population.agent_state, slots, agents),
            )
        agents = eqx.filter_vmap(self.agent.init_optimizer_states)(population.agent_state)
        population = eqx.tree_at(lambda p: p.agent_state, population, agents, is_leaf=_none)
        population, _ = train_population(
            self.agent, self.env, population, c.num_training_iterations, key=train_key,
            grad_updates_per_step=c.grad_updates_per_step,
        )  # fmt: skip
        agents = eqx.filter_vmap(self.agent.empty_optimizer_states)(population.agent_state)
        population = eqx.tree_at(lambda p: p.agent_state, population, agents, is_leaf=_none)
        return PBTEmitterState(population, key, pool_returns)


def _none(x) -> bool:
    return x is None
