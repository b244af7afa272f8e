"""Population Based Training: hyperparameter spaces, exploit/explore, and population functions.

PBT (Jaderberg et al., 2017) trains a population of agents and, every so often, replaces the
worst members by copies of good ones (their networks, optimiser states and replay buffers)
whose hyperparameters are then explored: resampled from their space, or perturbed.
Hyperparameters are float32 array leaves of the training state, so all of this is one jitted,
vmapped program.
"""

import dataclasses
import math
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jax.sharding import Mesh, PartitionSpec as P
from jaxtyping import Array, Float, Int

from .. import _validate as check
from .._custom_types import PRNGKey
from .._envs.base import AbstractEnv
from .._misc import tree_scatter, tree_take
from .base import AbstractAgent
from .off_policy import EvalMetrics, evaluate, init_off_policy, OffPolicyState, train
from .spaces import AbstractSpace, perturb_hparams, sample_hparams, Spaces


def _hparams_of(state: OffPolicyState):
    return state.agent_state.hparams


def count_from_fraction(name: str, fraction: float, total: int, what: str = "members") -> int:
    """``int(fraction * total)`` (QDax's rounding). A positive fraction that rounds to zero is an
    error naming it (QDax fails later, inside ``jax.random.choice``)."""
    check.fraction(name, fraction)
    count = int(fraction * total)
    if fraction > 0 and count == 0:
        raise ValueError(
            f"{name}={fraction} of {total} {what} rounds to 0 {what}; use at least "
            f"{math.ceil(1 / fraction)} {what} or a larger fraction"
        )
    return count


class PBTInfo(eqx.Module):
    """Which members were replaced (``replaced``) by copies of which (``sources``)."""

    replaced: Int[Array, " num_worse"]
    sources: Int[Array, " num_worse"]


@typing.final
class PBT(eqx.Module):
    """Exploit and explore over a population of `OffPolicyState` (stacked by ``filter_vmap``).

    `update` ranks members by ``returns`` (NaN ranks last), replaces the
    ``num_worse_to_replace`` worst by copies (agent state, optimiser states, replay buffer) of
    members drawn uniformly from the ``num_best_to_replace_from`` best, then explores the
    copies' hyperparameters: ``explore="resample"`` draws them again from ``spaces``;
    ``"perturb"`` multiplies them by 0.8 or 1.2 (clipped into the spaces).

    **Fields:** `population_size`, `num_best_to_replace_from`, `num_worse_to_replace` (counts;
    `from_fractions` computes them from fractions), `spaces` (hyperparameter name -> space)
    and `explore`.
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

    @classmethod
    def from_fractions(
        cls,
        population_size: int,
        best_fraction: float,
        worse_fraction: float,
        spaces: Spaces,
        explore: str = "resample",
    ) -> "PBT":
        """Counts as ``int(fraction * population_size)`` (`count_from_fraction`)."""
        best = count_from_fraction("best_fraction", best_fraction, population_size)
        worse = count_from_fraction("worse_fraction", worse_fraction, population_size)
        return cls(population_size, best, worse, dict(spaces), explore)

    def explore_hparams(self, hparams: eqx.Module, *, key: PRNGKey) -> eqx.Module:
        """``hparams`` resampled or perturbed within `spaces`, as `explore` says."""
        if self.explore == "resample":
            return sample_hparams(hparams, self.spaces, key=key)
        return perturb_hparams(hparams, self.spaces, key=key)

    def update(
        self,
        population: OffPolicyState,
        returns: Float[Array, " population"],
        *,
        key: PRNGKey,
    ) -> tuple[OffPolicyState, PBTInfo]:
        """One exploit / explore step on ``population`` (stacked `OffPolicyState`), ranked by
        ``returns`` (``(population_size,)``). **Returns:** the new population and a `PBTInfo`.
        """
        if returns.shape != (self.population_size,):
            raise ValueError(
                f"returns must have shape ({self.population_size},), got {returns.shape}"
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
    population: OffPolicyState,
    pool: OffPolicyState,
    slots: Int[Array, " num"],
    explore,
    *,
    key: PRNGKey,
) -> tuple[OffPolicyState, Int[Array, " num"]]:
    """Overwrite the members at ``slots`` with copies of members drawn uniformly (with
    replacement) from ``pool`` (whole training runs, buffers included), whose hyperparameters
    then go through ``explore(hparams, key)``. Returns the population and the pool indices."""
    choice_key, explore_key = jr.split(key)
    num = slots.shape[0]
    picked = jr.choice(choice_key, pool.env_steps.shape[0], (num,), replace=True)
    copies = tree_take(pool, picked)
    explored = eqx.filter_vmap(explore)(_hparams_of(copies), jr.split(explore_key, num))
    copies = eqx.tree_at(_hparams_of, copies, explored)
    return tree_scatter(population, slots, copies), picked


# ---------------------------------------------------------------------------------------------
# Population functions (QDax's PBT init / train / eval / eval-with-descriptors)


def init_population(
    agent: AbstractAgent,
    env: AbstractEnv,
    spaces: Spaces | None,
    population_size: int,
    *,
    num_envs: int,
    buffer_size: int,
    template=None,
    key: PRNGKey,
) -> OffPolicyState:
    """``population_size`` training runs of ``agent`` on ``env`` (agent states, replay buffers
    of ``buffer_size``, ``num_envs`` environments each), stacked on a leading axis.

    Hyperparameters are drawn from ``spaces`` (``None``: the agent's ``hparam_spaces``); the
    other fields come from ``template`` (a hyperparameters module) or the agent's defaults.
    """
    if template is None:
        template = agent.init(key=jr.key(0)).hparams
    spaces = agent.hparam_spaces if spaces is None else spaces

    def one(k):
        hp_key, run_key = jr.split(k)
        hparams = sample_hparams(template, spaces, key=hp_key)
        return init_off_policy(
            agent, env, key=run_key, num_envs=num_envs, buffer_size=buffer_size,
            hparams=hparams,
        )  # fmt: skip

    return eqx.filter_vmap(one)(jr.split(key, population_size))


@eqx.filter_jit
def train_population(
    agent: AbstractAgent,
    env: AbstractEnv,
    population: OffPolicyState,
    num_iterations: int,
    *,
    grad_updates_per_step: float = 1.0,
    key: PRNGKey,
):
    """`train` (``agent`` on ``env``, ``num_iterations`` iterations, ``grad_updates_per_step``)
    on every member of ``population``, vmapped; metrics get a leading population axis."""
    n = jax.tree.leaves(population.env_steps)[0].shape[0]
    run = lambda s, k: train(
        agent, env, s, num_iterations, key=k, grad_updates_per_step=grad_updates_per_step
    )
    return eqx.filter_vmap(run)(population, jr.split(key, n))


@eqx.filter_jit
def evaluate_population(
    agent: AbstractAgent,
    env: AbstractEnv,
    population: OffPolicyState,
    num_episodes: int,
    *,
    key: PRNGKey,
) -> EvalMetrics:
    """`evaluate` (``num_episodes`` episodes of ``env`` with ``agent``'s deterministic policy)
    on every member of ``population``; with a QD environment the metrics also hold each
    episode's descriptor (QDax's ``eval_qd``)."""
    n = population.env_steps.shape[0]
    run = lambda s, k: evaluate(agent, env, s.agent_state, num_episodes, key=k)
    return eqx.filter_vmap(run)(population, jr.split(key, n))


def population_without_optimizer_states(
    agent: AbstractAgent, population: OffPolicyState
) -> OffPolicyState:
    """``population`` with ``agent.empty_optimizer_states`` applied to every member (what a
    repertoire stores)."""
    states = eqx.filter_vmap(agent.empty_optimizer_states)(population.agent_state)
    return eqx.tree_at(lambda p: p.agent_state, population, states, is_leaf=lambda x: x is None)


def hparams_table(population: OffPolicyState) -> dict[str, Float[Array, "*population"]]:
    """Every member's hyperparameters, by name (for logs and plots); leading axes: the
    population's (devices, members when sharded)."""
    hp = _hparams_of(population)
    return {f.name: getattr(hp, f.name) for f in dataclasses.fields(hp)}


def train_population_sharded(
    agent,
    env,
    population,
    num_iterations: int,
    *,
    mesh: Mesh,
    grad_updates_per_step: float = 1.0,
    key: PRNGKey,
):
    """`train_population` (``agent``, ``env``, ``num_iterations``, ``grad_updates_per_step``)
    with the members of ``population`` split over the devices of ``mesh`` (the population size
    must be a multiple of the device count). On a CPU with ``n`` host devices this runs one
    shard per core, without XLA's intra-op threading between them."""
    n = population.env_steps.shape[0]
    devices = mesh.devices.size
    if n % devices:
        raise ValueError(f"population of {n} does not split over {devices} devices")
    dyn, static = eqx.partition(population, eqx.is_array)
    return _train_mapped(
        agent, env, dyn, static, jr.split(key, devices), num_iterations, mesh,
        grad_updates_per_step,
    )  # fmt: skip


@eqx.filter_jit
def _train_mapped(agent, env, dyn, static, keys, num_iterations, mesh, grad_updates_per_step):
    (axis,) = mesh.axis_names

    def body(d, k):
        pop, metrics = train_population(
            agent, env, eqx.combine(d, static), num_iterations, key=k[0],
            grad_updates_per_step=grad_updates_per_step,
        )  # fmt: skip
        return eqx.filter(pop, eqx.is_array), metrics

    mapped = jax.shard_map(
        body, mesh=mesh, in_specs=(P(axis), P(axis)), out_specs=(P(axis), P(axis)),
        check_vma=False,
    )  # fmt: skip
    new_dyn, metrics = mapped(dyn, keys)
    return eqx.combine(new_dyn, static), metrics
