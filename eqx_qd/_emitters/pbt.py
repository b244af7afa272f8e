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

import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._envs.base import AbstractEnv
from .._misc import tree_all_gather, tree_concatenate, tree_scatter, tree_slice, tree_take
from .._repertoire import MapElitesRepertoire
from .._rl.base import AbstractAgent
from .._rl.off_policy import OffPolicyState
from .._rl.pbt import copy_into, count_from_fraction, init_population, train_population
from .._rl.spaces import AbstractSpace, sample_hparams
from .._selectors import AbstractSelector, UniformSelector
from .._variation import AbstractVariation
from .base import AbstractEmitter, ActorType, Lineage, parent_ids


@typing.final
class PBTEmitterConfig(eqx.Module):
    """The sizes and fractions of QDax's ``PBTEmitterConfig`` (per device).

    Counts are ``int(fraction * pg_population_size)`` (`count_from_fraction`): a positive
    fraction that rounds to zero agents is an error naming it. All fields are static (they set
    shapes and loop lengths).

    **Fields:**

    - `pg_population_size`: PBT agents; `ga_population_size`: GA children per iteration.
    - `num_training_iterations`: training iterations of every agent per generation, each
      stepping `num_envs` environments with `grad_updates_per_step` gradient steps per
      environment step; `buffer_size`: each agent's replay buffer.
    - `fraction_best_to_replace_from`: the best set copies are drawn from;
      `fraction_to_replace_from_best`: the worst agents replaced by copies of the best;
      `fraction_to_replace_from_samples`: the next worst, replaced by repertoire elites.
    - `fraction_sort_exchange`: QDax's chunking of the multi-device exchange (unused: one
      gather suffices, see docs/design.md).
    """

    pg_population_size: int = eqx.field(default=10, static=True)
    ga_population_size: int = eqx.field(default=10, static=True)
    num_training_iterations: int = eqx.field(default=25, static=True)
    num_envs: int = eqx.field(default=16, static=True)
    grad_updates_per_step: float = eqx.field(default=1.0, static=True)
    buffer_size: int = eqx.field(default=100_000, static=True)
    fraction_best_to_replace_from: float = eqx.field(default=0.1, static=True)
    fraction_to_replace_from_best: float = eqx.field(default=0.2, static=True)
    fraction_to_replace_from_samples: float = eqx.field(default=0.4, static=True)
    fraction_sort_exchange: float = eqx.field(default=0.1, static=True)

    def __check_init__(self):
        for name in ("pg_population_size", "num_training_iterations", "num_envs",
                     "buffer_size"):  # fmt: skip
            check.positive_int(name, getattr(self, name))
        check.non_negative_int("ga_population_size", self.ga_population_size)
        check.positive("grad_updates_per_step", self.grad_updates_per_step)
        check.fraction("fraction_sort_exchange", self.fraction_sort_exchange)
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
        out = [
            count_from_fraction(name, getattr(self, name), n, "agents")
            for name in ("fraction_best_to_replace_from", "fraction_to_replace_from_best",
                         "fraction_to_replace_from_samples")
        ]  # fmt: skip
        if out[1] > 0 and out[0] == 0:
            raise ValueError("fraction_best_to_replace_from must be positive to replace from best")
        return out[0], out[1], out[2]


class PBTEmitterState(eqx.Module):
    """What the PBT emitter learns.

    **Fields:**

    - `population`: the PBT agents' training runs (agent states, replay buffers,
      environments), stacked on a leading ``pg_population_size`` axis.
    - `best_returns`: the returns of the best set the last replacement copied from (the same
      on every device when the emitter runs over a mesh axis).
    """

    population: OffPolicyState
    best_returns: Float[Array, " num_best"]


@typing.final
class PBTEmitter(AbstractEmitter[PBTEmitterState]):
    """The ME-PBT emitter (see the module docstring). Score its genotypes with
    ``PolicyScorer(env, agent=agent)``.

    **Fields:**

    - `agent`, `env`: the agent trained by PBT and its environment (sizes checked against each
      other).
    - `config`: the sizes and fractions (`PBTEmitterConfig`).
    - `spaces`: the hyperparameter spaces copies are resampled from (not empty; names must be
      fields of the agent's hyperparameters).
    - `variation`: the GA operator applied to two elites' policies.
    - `selector`: how elites are drawn from the repertoire.
    - `axis_name`: the mesh axis under ``shard_map`` (``None`` on one device).
    """

    agent: AbstractAgent
    env: AbstractEnv
    config: PBTEmitterConfig
    spaces: dict[str, AbstractSpace]
    variation: AbstractVariation
    selector: AbstractSelector = UniformSelector()
    axis_name: str | None = eqx.field(default=None, static=True)

    def __check_init__(self):
        for size in ("observation_size", "action_size"):
            ours, theirs = getattr(self.agent, size), getattr(self.env, size)
            if ours != theirs:
                raise ValueError(
                    f"PBTEmitter: the agent's {size} is {ours} but the environment's is {theirs}"
                )
        if not self.spaces:
            raise ValueError(
                "PBTEmitter.spaces is empty: PBT would only copy agents; give the spaces of the "
                "hyperparameters to explore (e.g. agent.hparam_spaces)"
            )
        # The hyperparameters module, by shape only (nothing is computed).
        hparams = eqx.filter_eval_shape(lambda: self.agent.init(key=jr.key(0))).hparams
        unknown = sorted(set(self.spaces) - set(hparams.__dataclass_fields__))
        if unknown:
            raise ValueError(
                f"PBTEmitter.spaces names {unknown}, which {type(hparams).__name__} does not "
                f"have; its fields are {sorted(hparams.__dataclass_fields__)}"
            )

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
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> PBTEmitterState:
        c = self.config
        if fitnesses.shape[0] < c.pg_population_size:
            raise ValueError(
                f"the initial population ({fitnesses.shape[0]}) must hold at least "
                f"pg_population_size={c.pg_population_size} agents"
            )
        population = init_population(
            self.agent, self.env, self.spaces, c.pg_population_size, key=key,
            num_envs=c.num_envs, buffer_size=c.buffer_size,
        )  # fmt: skip
        # The PBT agents start as the first initial genotypes (as in QDax), without optimisers.
        agents = tree_slice(genotypes, 0, c.pg_population_size)
        population = eqx.tree_at(lambda p: p.agent_state, population, agents)
        num_best = max(1, c.counts()[0])
        return PBTEmitterState(population, jnp.full((num_best,), -jnp.inf, jnp.float32))

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
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> PBTEmitterState:
        c = self.config
        num_best, from_best, from_samples = c.counts()
        num_best = max(1, num_best)
        returns = fitnesses[c.ga_population_size :]
        best_key, sample_key, hp_key, train_key = jr.split(key, 4)
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
        return PBTEmitterState(population, pool_returns)


def _none(x) -> bool:
    return x is None
