"""ME-PBT: a PBT population of RL agents that also feeds a MAP-Elites repertoire.

Genotypes are agent states in storage form (no optimiser states, no target networks). Each
iteration the emitter offers `ga_population_size` GA children (its variation applied to the
`AbstractAgent.genome` of two elites: policy and critic jointly for TD3, and the temperature
for SAC, as QDax; every other field comes from the first parent) and its
`pg_population_size` PBT agents. Once the batch is scored, the PBT agents are ranked by their
fitness over all devices. The worst `num_to_replace_from_best` are replaced by copies of
agents drawn from the `num_best_to_replace_from` best, replay buffers included; the next
`num_to_replace_from_samples` worst by elites sampled from the repertoire. Every copy gets
new hyperparameters drawn from its space. Then every agent is brought to its training form
(fresh optimiser states, targets reset to the online networks), trains for
`num_training_iterations` iterations, and goes back to storage form.
"""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int

from .. import _validate as check
from .._compile import jit
from .._custom_types import Extra, Genotypes, PRNGKey
from .._emitters.base import AbstractEmitter, Lineage, Origin, parent_ids
from .._misc import (
    is_none,
    tree_all_gather,
    tree_concatenate,
    tree_scatter,
    tree_slice,
    tree_take,
    tree_top_k,
)
from .._repertoire import AbstractRepertoire, AddInfo
from .._selectors import AbstractSelector, UniformSelector
from .._variation import AbstractVariation
from ..envs._base import AbstractEnv
from ..rl._base import AbstractAgent, AbstractTrainingRun, check_agent_shapes, check_spaces
from ..rl._pbt import count_from_fraction, init_population, train_population
from ..rl._spaces import AbstractSpace


BANDS = ("disjoint", "qdax")
"""The replacement rules of `PBTEmitterConfig.bands`."""


@typing.final
class PBTEmitterConfig(eqx.Module):
    """The sizes and fractions of QDax's `PBTEmitterConfig`.

    Counts are global, as QDax computes them: `int(fraction * pg_population_size *
    num_devices)` (`count_from_fraction`); a positive fraction that rounds to zero agents is an
    error naming it. The agent's own fields say how it trains (environments, buffer, gradient
    steps). All fields are static (they set shapes and loop lengths).

    **Fields:**

    - `pg_population_size`: PBT agents per device; `ga_population_size`: GA children per
      iteration and device.
    - `num_training_iterations`: `agent.train` iterations of every agent per generation.
    - `fraction_best_to_replace_from`: the best set copies are drawn from;
      `fraction_to_replace_from_best`: the worst agents replaced by copies of the best;
      `fraction_to_replace_from_samples`: the next worst, replaced by repertoire elites.
    - `num_devices`: devices the emitter runs over (the mesh axis's size; 1 on one device).
    - `fraction_sort_exchange`: QDax's name for how much of each device's population one
      step of the best-set exchange gathers: the global best set is found in steps of
      `max(1, int(fraction_sort_exchange * pg_population_size))` agents per device (each with
      its replay buffer), so a device holds at most the best set plus `num_devices` times
      that many agents at once. 1 gathers every device's local best in one step (fastest,
      most memory). The result is the same whatever the fraction.
    - `bands`: which agents the two replacements take. `"disjoint"` (the default): the
      `fraction_to_replace_from_best` worst ranks take best copies and the next
      `fraction_to_replace_from_samples` ranks take repertoire samples, exactly those counts.
      `"qdax"`: QDax's threshold rule on fitness values: every agent at or below the
      from-best-th worst fitness takes a best copy, and every agent between that value and the
      (from-best + from-samples)-th worst, both included, takes a sample's agent state. The
      agent at the lower threshold is in both (a sample's weights with a best copy's buffer:
      so k - 1 best copies and one hybrid when fitnesses are distinct), and ties replace more.
    """

    pg_population_size: int = eqx.field(default=10, static=True)
    ga_population_size: int = eqx.field(default=10, static=True)
    num_training_iterations: int = eqx.field(default=25, static=True)
    fraction_best_to_replace_from: float = eqx.field(default=0.1, static=True)
    fraction_to_replace_from_best: float = eqx.field(default=0.2, static=True)
    fraction_to_replace_from_samples: float = eqx.field(default=0.4, static=True)
    num_devices: int = eqx.field(default=1, static=True)
    fraction_sort_exchange: float = eqx.field(default=0.1, static=True)
    bands: str = eqx.field(default="disjoint", static=True)

    def __check_init__(self):
        for name in ("pg_population_size", "num_training_iterations", "num_devices"):
            check.positive_int(name, getattr(self, name))
        check.one_of("PBTEmitterConfig.bands", self.bands, BANDS)
        if not 0.0 < self.fraction_sort_exchange <= 1.0:
            raise ValueError(
                f"fraction_sort_exchange must lie in (0, 1], got {self.fraction_sort_exchange}"
            )
        check.non_negative_int("ga_population_size", self.ga_population_size)
        best, from_best, from_samples = self.counts()
        if from_best + from_samples > self.total_agents:
            raise ValueError(
                f"fraction_to_replace_from_best + fraction_to_replace_from_samples replace "
                f"{from_best + from_samples} agents, more than the {self.total_agents} PBT agents"
            )

    @property
    def total_agents(self) -> int:
        """PBT agents over all devices."""
        return self.pg_population_size * self.num_devices

    def counts(self) -> tuple[int, int, int]:
        """(num_best_to_replace_from, num_to_replace_from_best, num_to_replace_from_samples),
        over all devices."""
        n = self.total_agents
        out = [
            count_from_fraction(name, getattr(self, name), n, "agents")
            for name in (
                "fraction_best_to_replace_from",
                "fraction_to_replace_from_best",
                "fraction_to_replace_from_samples",
            )
        ]
        if out[1] > 0 and out[0] == 0:
            raise ValueError("fraction_best_to_replace_from must be positive to replace from best")
        return out[0], out[1], out[2]


class PBTEmitterState(eqx.Module):
    """What the PBT emitter learns.

    **Fields:**

    - `population`: the PBT agents' training runs (agent states in storage form, replay
      buffers, environments), stacked on a leading `pg_population_size` axis.
    - `best_returns`: the returns of the best set the last replacement copied from (the same
      on every device when the emitter runs over a mesh axis).
    - `training_env_steps`: environment steps this device's agents took in training so far.
    """

    population: AbstractTrainingRun
    best_returns: Float[Array, " num_best"]
    training_env_steps: Int[Array, ""]


@jit
def _initial_genotypes(emitter: "PBTEmitter", num: int, *, key: PRNGKey) -> Genotypes:
    def one(k):
        init_key, hp_key = jr.split(k)
        state = emitter.agent.init(key=init_key)
        state = emitter.agent.resample_hparams(state, spaces=emitter.spaces, key=hp_key)
        return emitter.agent.empty_optimiser_states(state)

    return eqx.filter_vmap(one)(jr.split(key, num))


@typing.final
class PBTEmitter(AbstractEmitter[PBTEmitterState]):
    """The ME-PBT emitter (see the module docstring). Score its genotypes with
    `PolicyScorer(env, agent=agent)`.

    **Fields:**

    - `agent`, `env`: any `AbstractAgent` and its environment (sizes checked against each
      other, the agent's state against the contract).
    - `config`: the sizes and fractions (`PBTEmitterConfig`).
    - `spaces`: the hyperparameter spaces copies are resampled from (not empty; names must be
      fields of the agent's hyperparameters).
    - `variation`: the GA operator applied to two elites' genomes (`AbstractAgent.genome`).
    - `selector`: how elites are drawn from the repertoire.
    - `axis_name`: the mesh axis under `shard_map` (`None` on one device; its size must be
      `config.num_devices`).

    **Ranking.** NaN fitness ranks last; ties rank the earlier agent (device-major order)
    first. Replacement bands are disjoint ranks by default; `config.bands = "qdax"` gives
    QDax's threshold rule (see `PBTEmitterConfig`).
    """

    agent: AbstractAgent
    env: AbstractEnv
    config: PBTEmitterConfig
    spaces: dict[str, AbstractSpace]
    variation: AbstractVariation
    selector: AbstractSelector = UniformSelector()
    axis_name: str | None = eqx.field(default=None, static=True)

    def __check_init__(self):
        shapes = check_agent_shapes(self.agent, self.env, where="PBTEmitter")
        check_spaces(self.agent, self.spaces, where="PBTEmitter", state=shapes)
        if self.axis_name is None and self.config.num_devices != 1:
            raise ValueError(
                f"PBTEmitter: config.num_devices is {self.config.num_devices} but no axis_name "
                "is given (one device)"
            )

    @property
    def batch_size(self) -> int:
        return self.config.ga_population_size + self.config.pg_population_size

    def initial_genotypes(self, num: int, *, key: PRNGKey) -> Genotypes:
        """`num` fresh agent states in storage form with hyperparameters drawn from the
        spaces: the initial population of `MAPElites.init`. One compiled program (op by op,
        it was some 100 small ones: seconds on a CPU)."""
        return _initial_genotypes(self, num, key=key)

    def init(
        self,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        key: PRNGKey,
    ) -> PBTEmitterState:
        c = self.config
        repertoire.check_candidates(genotypes, descriptors, fitnesses, where="PBTEmitter.init")
        if fitnesses.shape[0] < c.pg_population_size:
            raise ValueError(
                f"the initial population ({fitnesses.shape[0]}) must hold at least "
                f"pg_population_size={c.pg_population_size} agents"
            )
        population = init_population(
            self.agent, self.env, self.spaces, c.pg_population_size, key=key
        )
        # The PBT agents start as the first initial genotypes (as in QDax), in storage form.
        agents = tree_slice(genotypes, 0, c.pg_population_size)
        population = eqx.tree_at(lambda p: p.agent_state, population, agents, is_leaf=is_none)
        num_best = max(1, c.counts()[0])
        return PBTEmitterState(
            population, jnp.full((num_best,), -jnp.inf, jnp.float32), jnp.zeros((), jnp.int32)
        )

    def emit(
        self, repertoire: AbstractRepertoire, state: PBTEmitterState, *, key: PRNGKey
    ) -> tuple[Genotypes, Extra]:
        c = self.config
        pg = state.population.agent_state
        pg_lineage = Lineage.of(
            jnp.full((c.pg_population_size,), -1, jnp.int32),
            jnp.full((c.pg_population_size,), -1, jnp.int32),
            Origin.GRADIENT,
        )
        if c.ga_population_size == 0:
            return pg, pg_lineage
        select_key, var_key = jr.split(key)
        elites = repertoire.select(2 * c.ga_population_size, key=select_key, selector=self.selector)
        first = tree_slice(elites.genotypes, 0, c.ga_population_size)
        second = tree_slice(elites.genotypes, c.ga_population_size, 2 * c.ga_population_size)
        genome = eqx.filter_vmap(self.agent.genome)
        varied = self.variation(genome(first), genome(second), key=var_key)
        children = eqx.filter_vmap(self.agent.with_genome)(first, varied)
        ids = parent_ids(elites)
        ga_lineage = Lineage.of(
            ids[: c.ga_population_size], ids[c.ga_population_size :], Origin.EVO
        )
        return tree_concatenate([children, pg]), tree_concatenate([ga_lineage, pg_lineage])

    def _device_index(self):
        if self.axis_name is None:
            return 0
        size = jax.lax.axis_size(self.axis_name)
        if size != self.config.num_devices:
            raise ValueError(
                f"PBTEmitter runs over {size} devices but config.num_devices is "
                f"{self.config.num_devices}"
            )
        return jax.lax.axis_index(self.axis_name)

    def state_update(
        self,
        state: PBTEmitterState,
        repertoire: AbstractRepertoire,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra,
        *,
        add_info: AddInfo,
        key: PRNGKey,
    ) -> PBTEmitterState:
        repertoire.check_candidates(
            genotypes,
            descriptors,
            fitnesses,
            where="PBTEmitter.state_update",
            batch_size=self.batch_size,
        )
        c = self.config
        pg = c.pg_population_size
        num_best, from_best, from_samples = c.counts()
        num_best = max(1, num_best)
        best_key, sample_key, hp_key, train_key = jr.split(key, 4)
        population = state.population
        clean = fitnesses[c.ga_population_size :]
        clean = jnp.where(jnp.isnan(clean), -jnp.inf, clean)
        # Global ranks (0 = best) of this device's agents among all devices' agents.
        everyone = tree_all_gather(clean, self.axis_name)
        total = everyone.shape[0]
        order = jnp.argsort(-everyone, stable=True)
        rank = jnp.zeros(total, jnp.int32).at[order].set(jnp.arange(total, dtype=jnp.int32))
        rank = jax.lax.dynamic_slice(rank, (self._device_index() * pg,), (pg,))
        if c.bands == "qdax":  # thresholds on the sorted values: ties, and one agent in both
            ranked = -jnp.sort(-everyone)
            lower = ranked[total - from_best] if from_best > 0 else -jnp.inf
            upper = ranked[total - from_best - from_samples] if from_samples > 0 else lower
            from_best_mask = (clean <= lower) if from_best > 0 else jnp.zeros(pg, bool)
            from_samples_mask = (
                (clean <= upper) & (clean >= lower) if from_samples > 0 else jnp.zeros(pg, bool)
            )
            best_slots = samples_slots = pg  # as many as ties give, up to every agent
        else:
            from_best_mask = rank >= total - from_best
            from_samples_mask = (rank >= total - from_best - from_samples) & ~from_best_mask
            best_slots, samples_slots = min(from_best, pg), min(from_samples, pg)
        # The best set over every device's agents (the same on every device).
        pool, pool_returns = tree_top_k(
            population,
            clean,
            num_best,
            chunk=max(1, int(c.fraction_sort_exchange * pg)),
            axis_name=self.axis_name,
        )
        # How many of this device's agents fall in a band varies, up to the band's size: scatter
        # that many rows (in place; padding slots are out of range and dropped) rather than
        # rebuild every buffer.
        if from_best > 0:  # whole runs, buffers included, drawn uniformly from the best set
            count = best_slots
            slots = jnp.nonzero(from_best_mask, size=count, fill_value=pg)[0]
            picks = jr.choice(best_key, num_best, (count,), replace=True)
            population = tree_scatter(population, slots, tree_take(pool, picks))
        if from_samples > 0:  # agent states only: the slot keeps its buffer and environments
            count = samples_slots
            slots = jnp.nonzero(from_samples_mask, size=count, fill_value=pg)[0]
            samples = repertoire.select(count, key=sample_key, selector=self.selector).genotypes
            agents = tree_scatter(population.agent_state, slots, samples)
            population = eqx.tree_at(lambda p: p.agent_state, population, agents, is_leaf=is_none)
        replaced = from_best_mask | from_samples_mask
        agents = population.agent_state
        resampled = eqx.filter_vmap(
            lambda s, k: self.agent.resample_hparams(s, spaces=self.spaces, key=k)
        )(agents, jr.split(hp_key, pg))
        hparams = jax.tree.map(
            lambda new, old: jnp.where(replaced, new, old), resampled.hparams, agents.hparams
        )
        agents = eqx.tree_at(lambda s: s.hparams, agents, hparams)
        agents = eqx.filter_vmap(self.agent.init_optimiser_states)(agents)
        population = eqx.tree_at(lambda p: p.agent_state, population, agents, is_leaf=is_none)
        steps_before = jnp.sum(population.env_steps)
        population, _ = train_population(
            self.agent, self.env, population, c.num_training_iterations, key=train_key
        )
        trained = jnp.sum(population.env_steps) - steps_before
        agents = eqx.filter_vmap(self.agent.empty_optimiser_states)(population.agent_state)
        population = eqx.tree_at(lambda p: p.agent_state, population, agents, is_leaf=is_none)
        return PBTEmitterState(population, pool_returns, state.training_env_steps + trained)
