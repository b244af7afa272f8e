"""Population Based Training: hyperparameter spaces, exploit/explore, and population functions.

PBT (Jaderberg et al., 2017) trains a population of agents and, every so often, replaces the
worst members by copies of good ones (their networks, optimiser states and replay buffers)
whose hyperparameters are then explored: resampled from their space, or perturbed.
Hyperparameters are float32 array leaves of the training state, so all of this is one jitted,
vmapped program.
"""

import math
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxtyping import Array, Float, Int

from .. import _validate as check
from .._compile import jit
from .._custom_types import PRNGKey
from .._misc import is_none, place_on, tree_scatter, tree_take
from ._base import (
    AbstractAgent,
    AbstractBaseEnv,
    AbstractTrainingRun,
    check_agent,
    check_spaces,
    EvalMetrics,
    TrainMetrics,
)
from ._ppo import _PPOLearner
from ._spaces import AbstractSpace, perturb_hparams, sample_hparams, Spaces


def _check_population(where: str, population) -> None:
    if not isinstance(population, AbstractTrainingRun):
        raise TypeError(
            f"{where}: population must be a stacked eqx_qd.rl.AbstractTrainingRun (from "
            f"init_population), got {type(population).__name__}"
        )


def _hparams_of(run: AbstractTrainingRun):
    return run.agent_state.hparams


def _population_size(population: AbstractTrainingRun) -> int:
    return population.env_steps.shape[0]


def count_from_fraction(name: str, fraction: float, total: int, what: str = "members") -> int:
    """`int(fraction * total)` (QDax's rounding). A positive fraction that rounds to zero is an
    error naming it (QDax fails later, inside `jax.random.choice`)."""
    check.fraction(name, fraction)
    count = int(fraction * total)
    if fraction > 0 and count == 0:
        raise ValueError(
            f"{name}={fraction} of {total} {what} rounds to 0 {what}; use at least "
            f"{math.ceil(1 / fraction)} {what} or a larger fraction"
        )
    return count


class PBTInfo(eqx.Module):
    """Which members were replaced (`replaced`) by copies of which (`sources`)."""

    replaced: Int[Array, " num_worse"]
    sources: Int[Array, " num_worse"]


@typing.final
class PBT(eqx.Module):
    """Exploit and explore over a population of training runs (any `AbstractTrainingRun`,
    stacked by `filter_vmap`).

    `update` ranks members by `returns` (NaN ranks last), replaces the
    `num_worse_to_replace` worst by copies (the whole run: agent state, optimiser states,
    replay buffer) of members drawn uniformly from the `num_best_to_replace_from` best, then
    explores the copies' hyperparameters: `explore="resample"` draws them again from
    `spaces`; `"perturb"` multiplies them by 0.8 or 1.2 (clipped into the spaces).

    **Fields:** `population_size`, `num_best_to_replace_from`, `num_worse_to_replace` (counts;
    `from_fractions` computes them from fractions), `spaces` (hyperparameter name -> space;
    not empty) and `explore`.
    """

    population_size: int = eqx.field(static=True)
    num_best_to_replace_from: int = eqx.field(static=True)
    num_worse_to_replace: int = eqx.field(static=True)
    spaces: dict[str, AbstractSpace]
    explore: str = eqx.field(default="resample", static=True)

    def __check_init__(self):
        n, b, w = self.population_size, self.num_best_to_replace_from, self.num_worse_to_replace
        if n < 2:
            raise ValueError(f"PBT needs a population of at least 2, got {n}")
        if b < 1 or w < 1:
            raise ValueError(
                f"num_best_to_replace_from ({b}) and num_worse_to_replace ({w}) must be >= 1"
            )
        if b + w > n:
            raise ValueError(
                f"num_best_to_replace_from + num_worse_to_replace ({b} + {w}) exceeds the "
                f"population size {n}"
            )
        check.one_of("PBT.explore", self.explore, ("resample", "perturb"))
        if not self.spaces:
            raise ValueError(
                "PBT.spaces is empty, so PBT would only copy members; give the spaces of the "
                "hyperparameters to explore (agent.hparam_spaces, or a subset of them)"
            )

    @classmethod
    def from_fractions(
        cls,
        population_size: int,
        best_fraction: float,
        worse_fraction: float,
        spaces: Spaces,
        explore: str = "resample",
    ) -> "PBT":
        """Counts as `int(fraction * population_size)` (`count_from_fraction`)."""
        best = count_from_fraction("best_fraction", best_fraction, population_size)
        worse = count_from_fraction("worse_fraction", worse_fraction, population_size)
        return cls(population_size, best, worse, dict(spaces), explore)

    def explore_hparams(self, hparams: eqx.Module, *, key: PRNGKey) -> eqx.Module:
        """`hparams` resampled or perturbed within `spaces`, as `explore` says."""
        if self.explore == "resample":
            return sample_hparams(hparams, self.spaces, key=key)
        return perturb_hparams(hparams, self.spaces, key=key)

    def update(
        self,
        population: AbstractTrainingRun,
        returns: Float[Array, " population"],
        *,
        key: PRNGKey,
    ) -> tuple[AbstractTrainingRun, PBTInfo]:
        """One exploit / explore step on `population` (stacked training runs), ranked by
        `returns` (`(population_size,)`). Works eagerly and under `jit`.
        **Returns:** the new population and a `PBTInfo`.
        """
        if not isinstance(population, AbstractTrainingRun):
            raise TypeError(
                "PBT.update: population must be stacked training runs (an "
                f"AbstractTrainingRun), got {type(population).__name__}"
            )
        size = _population_size(population)
        if size != self.population_size:
            raise ValueError(
                f"PBT.update: population holds {size} members, PBT.population_size is "
                f"{self.population_size}"
            )
        if jnp.shape(returns) != (self.population_size,):
            raise ValueError(
                f"PBT.update: returns must have shape ({self.population_size},), got "
                f"{jnp.shape(returns)}"
            )
        order = jnp.argsort(-jnp.where(jnp.isnan(returns), -jnp.inf, returns))  # best first
        best = order[: self.num_best_to_replace_from]
        worst = order[self.population_size - self.num_worse_to_replace :]
        explore = lambda h, k: self.explore_hparams(h, key=k)
        population, picked = copy_into(
            population, tree_take(population, best), worst, explore, key=key
        )
        return population, PBTInfo(worst, best[picked])


def copy_into(
    population: AbstractTrainingRun,
    pool: AbstractTrainingRun,
    slots: Int[Array, " num"],
    explore,
    *,
    key: PRNGKey,
) -> tuple[AbstractTrainingRun, Int[Array, " num"]]:
    """Overwrite the members at `slots` with copies of members drawn uniformly (with
    replacement) from `pool` (whole training runs, buffers included), whose hyperparameters
    then go through `explore(hparams, key)`. Returns the population and the pool indices."""
    size = _population_size(population)
    if np.ndim(slots) != 1 or not jnp.issubdtype(jnp.result_type(slots), jnp.integer):
        raise ValueError(
            f"copy_into: slots must be a vector of integers, got shape {np.shape(slots)} "
            f"and dtype {jnp.result_type(slots)}"
        )
    if np.shape(slots)[0] > size:
        raise ValueError(
            f"copy_into: {np.shape(slots)[0]} slots for a population of {size} members"
        )
    check.same_rows("copy_into: pool", pool, population, owner="the population", noun="members")
    choice_key, explore_key = jr.split(key)
    num = slots.shape[0]
    picked = jr.choice(choice_key, _population_size(pool), (num,), replace=True)
    copies = tree_take(pool, picked)
    explored = eqx.filter_vmap(explore)(_hparams_of(copies), jr.split(explore_key, num))
    copies = eqx.tree_at(_hparams_of, copies, explored)
    return tree_scatter(population, slots, copies), picked


# ---------------------------------------------------------------------------------------------
# Population functions (QDax's PBT init / train / eval / eval-with-descriptors)


def init_population(
    agent: AbstractAgent,
    env: AbstractBaseEnv,
    spaces: Spaces | None,
    population_size: int,
    *,
    template=None,
    key: PRNGKey,
) -> AbstractTrainingRun:
    """`population_size` training runs of `agent` on `env` (`agent.init_run` of fresh
    states), stacked on a leading axis.

    Hyperparameters are drawn from `spaces` (`None`: the agent's `hparam_spaces`); the
    other fields come from `template` (a hyperparameters module) or the agent's defaults.
    """
    check.positive_int("population_size", population_size)
    shapes = check_agent(agent, env, where="init_population")
    spaces = agent.hparam_spaces if spaces is None else spaces
    check_spaces(agent, spaces, where="init_population", state=shapes)
    return _init_runs(agent, env, spaces, population_size, template, key=key)


# One compiled program: op by op, a population's init compiled some 100 small ones.
@jit
def _init_runs(
    agent: AbstractAgent,
    env: AbstractBaseEnv,
    spaces: Spaces,
    population_size: int,
    template: typing.Any,
    *,
    key: PRNGKey,
) -> AbstractTrainingRun:
    if template is None:
        template = agent.init(key=jr.key(0)).hparams

    def one(k):
        hp_key, init_key, run_key = jr.split(k, 3)
        hparams = sample_hparams(template, spaces, key=hp_key)
        return agent.init_run(env, agent.init(hparams, key=init_key), key=run_key)

    return eqx.filter_vmap(one)(jr.split(key, population_size))


def train_population(
    agent: AbstractAgent,
    env: AbstractBaseEnv,
    population: AbstractTrainingRun,
    num_iterations: int,
    *,
    key: PRNGKey,
) -> tuple[AbstractTrainingRun, TrainMetrics]:
    """`agent.train` (on `env`, `num_iterations` iterations) of every member of
    `population`, vmapped; the metrics get a leading population axis. One compiled program
    (with XLA's default options for a `PPO` or `IPPO` population: `eqx_qd._compile`)."""
    train = _train_population_xla if isinstance(agent, _PPOLearner) else _train_population
    return train(agent, env, population, num_iterations, key=key)


def _train_members(agent, env, population, num_iterations, *, key):
    check.same_sizes(agent, env, "train_population")
    check.positive_int("train_population: num_iterations", num_iterations)
    return _train_with_keys(
        agent, env, population, num_iterations, jr.split(key, _population_size(population))
    )


def _train_with_keys(agent, env, population, num_iterations, keys):
    """Every member trained with its own key (`keys`: one per member)."""
    run = lambda s, k: agent.train(env, s, num_iterations, key=k)
    return eqx.filter_vmap(run)(population, keys)


_train_population = jit(_train_members)
_train_population_xla = jit(_train_members, package_options=False)


@jit
def evaluate_population(
    agent: AbstractAgent,
    env: AbstractBaseEnv,
    population: AbstractTrainingRun,
    num_episodes: int,
    *,
    key: PRNGKey,
) -> EvalMetrics:
    """`agent.evaluate` (`num_episodes` episodes of `env` with the deterministic policy)
    of every member of `population`; with a QD environment the metrics also hold each
    episode's descriptor (QDax's `eval_qd`)."""
    check.same_sizes(agent, env, "evaluate_population")
    check.positive_int("evaluate_population: num_episodes", num_episodes)
    run = lambda s, k: agent.evaluate(env, s.agent_state, num_episodes, key=k)
    return eqx.filter_vmap(run)(population, jr.split(key, _population_size(population)))


def population_without_optimiser_states(
    agent: AbstractAgent, population: AbstractTrainingRun
) -> AbstractTrainingRun:
    """`population` with `agent.empty_optimiser_states` applied to every member (what a
    repertoire stores: no optimiser states, no target networks)."""
    _check_population("population_without_optimiser_states", population)
    states = eqx.filter_vmap(agent.empty_optimiser_states)(population.agent_state)
    return eqx.tree_at(lambda p: p.agent_state, population, states, is_leaf=is_none)


def hparams_table(population: AbstractTrainingRun) -> dict[str, Float[Array, "*population"]]:
    """Every member's hyperparameters, by name (for logs and plots); leading axes: the
    population's (devices, members when sharded)."""
    _check_population("hparams_table", population)
    return dict(_hparams_of(population).as_dict())


def train_population_sharded(
    agent: AbstractAgent,
    env: AbstractBaseEnv,
    population: AbstractTrainingRun,
    num_iterations: int,
    *,
    mesh: Mesh,
    key: PRNGKey,
) -> tuple[AbstractTrainingRun, TrainMetrics]:
    """`train_population` (`agent`, `env`, `num_iterations`, `key`) with the members of
    `population` split over the devices of `mesh` (the population size must be a multiple
    of the device count). Each member trains with the key `train_population` gives it, on the
    device that holds it (its replay buffer stays there), so the result does not depend on the
    layout (up to float rounding where XLA's programs for two batch sizes round apart); the
    program compiles with `train_population`'s options (XLA's own for a `PPO` or `IPPO`
    population). On a CPU, `n` host devices (`jax_num_cpu_devices`) run one shard per core,
    which can beat one device's multi-threaded products and keeps its pace beside other
    processes (`benchmarks/README.md`)."""
    n = _population_size(population)
    devices = mesh.devices.size
    if n % devices:
        raise ValueError(
            f"population of {n} does not split over {devices} devices (a multiple of the "
            "device count is needed)"
        )
    check.same_sizes(agent, env, "train_population_sharded")
    check.positive_int("train_population_sharded: num_iterations", num_iterations)
    dyn, static = eqx.partition(population, eqx.is_array)
    # Laid out as the call returns it, so that a population from `init_population` (on one
    # device) and one returned by this function meet the same compiled program: otherwise
    # the second call compiled it again (`benchmarks/sac.py --devices 2`: 73-75 s, steady
    # calls 29-33 s).
    (axis,) = mesh.axis_names
    members = NamedSharding(mesh, P(axis))
    dyn = place_on(dyn, members)
    keys = place_on(jr.split(key, n), members)
    train = _train_mapped_xla if isinstance(agent, _PPOLearner) else _train_mapped
    return train(agent, env, dyn, static, keys, num_iterations, mesh)


def _train_shards(agent, env, dyn, static, keys, num_iterations, mesh):
    (axis,) = mesh.axis_names

    def body(d, k):
        pop, metrics = _train_with_keys(agent, env, eqx.combine(d, static), num_iterations, k)
        return eqx.filter(pop, eqx.is_array), metrics

    mapped = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(P(axis), P(axis)),
        out_specs=(P(axis), P(axis)),
        check_vma=False,
    )
    new_dyn, metrics = mapped(dyn, keys)
    return eqx.combine(new_dyn, static), metrics


# The compile options of `train_population`'s two programs (a PPO population: XLA's own).
_train_mapped = jit(_train_shards)
_train_mapped_xla = jit(_train_shards, package_options=False)
