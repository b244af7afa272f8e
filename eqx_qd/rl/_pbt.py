"""Population Based Training: hyperparameter spaces, exploit/explore, and population functions.

PBT (Jaderberg et al., 2017) trains a population of agents and, every so often, replaces the
worst members by copies of good ones (their networks, optimiser states and replay buffers)
whose hyperparameters are then explored: resampled from their space, or perturbed.
Hyperparameters are float32 array leaves of the training state, so all of this is one jitted,
vmapped program.
"""

import math
import typing
from concurrent.futures import ThreadPoolExecutor

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxtyping import Array, Float, Int, PyTree

from .. import _validate as check
from .._compile import jit
from .._custom_types import PRNGKey
from .._machine import most_dividing, usable_cores
from .._misc import is_none, place_on, tree_scatter, tree_take
from ._base import (
    AbstractAgent,
    AbstractBaseEnv,
    AbstractTrainingRun,
    check_agent_shapes,
    check_spaces,
    EvalMetrics,
    TrainMetrics,
)
from ._ppo import AbstractPPOLearner
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


class PBTRound(eqx.Module):
    """What one PBT round did (`PBT.round`), one entry per member.

    **Fields:** `hparams` (the hyperparameters each member trained with this round, by name),
    `returns` (its mean evaluation return after training, NaN-tolerant: `update` ranks NaN
    last), `env_steps` (its environment steps in training so far, before the exploit), and
    `sources` (where each member of the returned population comes from: its own index when it
    was kept, the copied member's when it was replaced).
    """

    hparams: dict[str, Float[Array, " population"]]
    returns: Float[Array, " population"]
    env_steps: Int[Array, " population"]
    sources: Int[Array, " population"]


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

    def round(
        self,
        agent: AbstractAgent,
        train_env: AbstractBaseEnv,
        eval_env: AbstractBaseEnv,
        population: AbstractTrainingRun,
        num_iterations: int,
        num_episodes: int,
        *,
        exploit: bool = True,
        groups: int | typing.Literal["auto"] = "auto",
        mesh: Mesh | None = None,
        key: PRNGKey,
    ) -> tuple[AbstractTrainingRun, PBTRound]:
        """One round of PBT: every member of `population` (stacked training runs of `agent`)
        trains `num_iterations` iterations on `train_env`, plays `num_episodes` evaluation
        episodes of `eval_env`, and, with `exploit`, the population goes through `update`,
        ranked by the mean evaluation returns. The loop over rounds is the caller's (what to
        log, when to stop, a last round without exploit).

        `key` splits into three, for training, evaluation and the exploit. `groups` as
        `train_population`'s and `evaluate_population`'s (`1`: one program, numbers that do
        not depend on the machine's cores); with `mesh`, the members are split over its
        devices for training (`train_population_sharded`) and the returned population is
        laid out so again. The exploit runs as one compiled program.

        **Returns:** the population after the round and its `PBTRound`.
        """
        train_key, eval_key, exploit_key = jr.split(key, 3)
        hparams = hparams_table(population)  # what this round trains with
        if mesh is None:
            population, _ = train_population(
                agent, train_env, population, num_iterations, groups=groups, key=train_key
            )
        else:
            population, _ = train_population_sharded(
                agent, train_env, population, num_iterations, mesh=mesh, key=train_key
            )
        evaluation = evaluate_population(
            agent, eval_env, population, num_episodes, groups=groups, key=eval_key
        )
        returns = jnp.mean(evaluation.returns, axis=1)
        env_steps = population.env_steps
        sources = jnp.arange(self.population_size, dtype=jnp.int32)
        if exploit:
            population, sources = self.exploit(population, returns, key=exploit_key)
            # Members copied across devices move back to their own.
            population = place_members(population, mesh)
        return population, PBTRound(hparams, returns, env_steps, sources)

    def exploit(
        self,
        population: AbstractTrainingRun,
        returns: Float[Array | np.ndarray, " population"],
        *,
        key: PRNGKey,
    ) -> tuple[AbstractTrainingRun, Int[Array, " population"]]:
        """`update(population, returns, key=key)` as one compiled program (run eagerly, its
        copies of whole runs, buffers included, are hundreds of small dispatches: most of a
        short round). **Returns:** the population and where each member comes from (its own
        index when kept)."""
        population, info = _update(self, population, jnp.asarray(returns), key=key)
        sources = jnp.arange(self.population_size, dtype=jnp.int32)
        return population, sources.at[info.replaced].set(info.sources)


@jit
def _update(pbt: PBT, population, returns, *, key):
    return pbt.update(population, returns, key=key)


def place_members(tree: PyTree, mesh: Mesh | None) -> PyTree:
    """`tree` (leading axis: the members) with its members split over the one axis of
    `mesh`; as it is with `None` (one device)."""
    if mesh is None:
        return tree
    (axis,) = mesh.axis_names
    return place_on(tree, NamedSharding(mesh, P(axis)))


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
    shapes = check_agent_shapes(agent, env, where="init_population")
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
    groups: int | typing.Literal["auto"] = "auto",
    key: PRNGKey,
) -> tuple[AbstractTrainingRun, TrainMetrics]:
    """`agent.train` (on `env`, `num_iterations` iterations) of every member of
    `population`, vmapped; the metrics get a leading population axis. Member `i` trains with
    `jr.split(key, population_size)[i]` whatever the grouping.

    The members train as `groups` groups of consecutive members, each group one compiled
    program (all groups the same program), run side by side on threads; the groups' results
    are joined in order. `"auto"` (the default, `population_groups`): on a CPU, the most
    groups, at most one per usable core, that divide the population (8 members on 2 cores:
    2 groups of 4); one group on a GPU or TPU, inside a JAX transformation (the call is then
    part of the outer program) and for a population spread over several devices. `1`: the
    whole population in one program.

    Why on a CPU: XLA's CPU runtime runs a program's operations on a pool of threads, and a
    training step's chains of small products keep them busy only part of the time; a second
    program beside it fills those gaps (`benchmarks/log/epyc-family26-model2.md`, "The population
    in groups").
    The results do not depend on the threads' timing; they equal one program's up to float
    rounding (XLA's programs for two batch sizes can round apart, and training amplifies it),
    so a seed's numbers depend on the group count: pass `groups` for numbers that do not
    depend on the machine's cores. Memory: the groups' results are joined leaf by leaf, each
    group's leaf freed once joined, so the peak is one program's plus one leaf.

    Compiled with the package's XLA options (XLA's default options for a `PPO` or `IPPO`
    population: `eqx_qd._compile`).
    """
    check.same_sizes(agent, env, "train_population")
    check.positive_int("train_population: num_iterations", num_iterations)
    g = _groups(population, groups, "train_population")
    ppo = isinstance(agent, AbstractPPOLearner)
    if g == 1:
        train = _train_population_xla if ppo else _train_population
        return train(agent, env, population, num_iterations, key=key)
    train_group = _train_group_xla if ppo else _train_group
    size = _population_size(population) // g
    group = lambda start: train_group(agent, env, population, num_iterations, size, start, key=key)
    return _side_by_side(group, g, size)


def population_groups(
    population: AbstractTrainingRun, groups: int | typing.Literal["auto"] = "auto"
) -> int:
    """How many groups `train_population` (and `evaluate_population`) runs `population` in
    for `groups` (its argument): `groups` itself when an int (checked: positive, dividing
    the population, and 1 inside a JAX transformation); for `"auto"`, on a CPU backend,
    outside JAX transformations and for a population on one device, the most groups, at
    most one per usable core, that divide the population; 1 otherwise."""
    return _groups(population, groups, "population_groups")


def _groups(population: AbstractTrainingRun, groups: int | str, where: str) -> int:
    """`population_groups`, its errors naming `where`."""
    _check_population(where, population)
    n = _population_size(population)
    traced = not all(check.is_concrete(x) for x in jax.tree.leaves(population))
    if isinstance(groups, str):
        if groups != "auto":
            raise ValueError(f"{where}: groups must be a positive int or 'auto', got {groups!r}")
        devices = 1 if traced else _device_count(population)
        return _auto_groups(
            n, backend=jax.default_backend(), cores=usable_cores(), traced=traced, devices=devices
        )
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{where}: groups must be a positive int or 'auto', got {groups!r}")
    if n % groups:
        raise ValueError(
            f"{where}: groups={groups} does not divide the population of {n} members (each "
            "group must have as many)"
        )
    if traced and groups > 1:
        raise ValueError(
            f"{where}: groups={groups} runs programs side by side, which needs the "
            "population's arrays; inside jit, vmap or grad the call is part of the outer "
            "program: pass groups=1 (or 'auto')"
        )
    return groups


def _auto_groups(
    population_size: int, *, backend: str, cores: int, traced: bool = False, devices: int = 1
) -> int:
    """What `groups="auto"` takes: on the `"cpu"` backend, outside JAX transformations
    (`traced` false) and for a population on one device, the most groups, at most `cores`,
    that divide `population_size`; 1 otherwise."""
    if backend != "cpu" or traced or devices != 1:
        return 1
    return most_dividing(population_size, cores)


def _device_count(population: AbstractTrainingRun) -> int:
    """The devices the population's JAX arrays are on, together (NumPy arrays: none)."""
    found: set = set()
    for x in jax.tree.leaves(eqx.filter(population, eqx.is_array)):
        sharding = getattr(x, "sharding", None)
        if sharding is not None:
            found |= set(sharding.device_set)
    return max(len(found), 1)


def _train_members(agent, env, population, num_iterations, *, key):
    return _train_with_keys(
        agent, env, population, num_iterations, jr.split(key, _population_size(population))
    )


def _train_with_keys(agent, env, population, num_iterations, keys):
    """Every member trained with its own key (`keys`: one per member)."""
    run = lambda s, k: agent.train(env, s, num_iterations, key=k)
    return eqx.filter_vmap(run)(population, keys)


def _train_slice(agent, env, population, num_iterations, size, start, *, key):
    """Members `start` to `start + size` of `population` trained with their keys (those
    `_train_members` gives them): one group of `train_population`."""
    part, keys = _group_of(population, key, size, start)
    return _train_with_keys(agent, env, part, num_iterations, keys)


def _group_of(population, key, size, start):
    """Members `start` to `start + size` of `population` and their keys, `jr.split(key,
    population_size)`'s rows for them. Taken inside the group's program (`start` traced: one
    program for every group), so the population is not copied before the call."""
    take = lambda x: jax.lax.dynamic_slice_in_dim(x, start, size)
    dyn, static = eqx.partition(population, eqx.is_array)
    keys = take(jr.split(key, _population_size(population)))
    return eqx.combine(jax.tree.map(take, dyn), static), keys


def _side_by_side(group, groups: int, size: int):
    """`group(start)` for each group of `size` consecutive members (`start` its first, an
    int32 scalar), each call on its own thread, the results joined in order (`_joined`)."""

    def one(i: int):
        return jax.block_until_ready(group(jnp.asarray(i * size, jnp.int32)))

    with ThreadPoolExecutor(max_workers=groups, thread_name_prefix="eqx_qd-group") as pool:
        parts = list(pool.map(one, range(groups)))
    return _joined(parts)


def _joined(parts: list):
    """The groups' results (any pytree with the member axis first: a population and metrics,
    evaluation metrics) joined on the member axis. Takes them out of `parts` (emptied) and
    joins leaf by leaf, each group's leaf dropped once joined, so that the peak holds one
    joined leaf beside the groups' results rather than a second population."""
    trees = [eqx.filter(part, eqx.is_array) for part in parts]
    static = eqx.filter(parts[0], eqx.is_array, inverse=True)
    parts.clear()  # the caller's list too: its groups' arrays now live in `columns` only
    treedef = jax.tree.structure(trees[0])
    columns = [list(c) for c in zip(*(jax.tree.leaves(t) for t in trees))]
    del trees
    joined = []
    for i in range(len(columns)):
        joined.append(jnp.concatenate(columns[i]))
        columns[i] = None  # this leaf's groups freed
    return eqx.combine(jax.tree.unflatten(treedef, joined), static)


_train_population = jit(_train_members)
_train_population_xla = jit(_train_members, package_options=False)
_train_group = jit(_train_slice)
_train_group_xla = jit(_train_slice, package_options=False)


def evaluate_population(
    agent: AbstractAgent,
    env: AbstractBaseEnv,
    population: AbstractTrainingRun,
    num_episodes: int,
    *,
    groups: int | typing.Literal["auto"] = "auto",
    key: PRNGKey,
) -> EvalMetrics:
    """`agent.evaluate` (`num_episodes` episodes of `env` with the deterministic policy)
    of every member of `population`; with a QD environment the metrics also hold each
    episode's descriptor (QDax's `eval_qd`). Member `i` plays with `jr.split(key,
    population_size)[i]` whatever the grouping.

    `groups` as `train_population`'s (`population_groups`): on a CPU by default one group of
    members per usable core that divides the population, each group the same compiled
    program, run side by side on threads and joined in order; `1`: one program. A rollout's
    physics is many small element-wise operations that leave a CPU's second core idle, which
    a second program fills (`benchmarks/log/epyc-family26-model2.md`, "A second window,
    evaluations in groups"). The returns equal one program's up to float rounding.
    """
    check.same_sizes(agent, env, "evaluate_population")
    check.positive_int("evaluate_population: num_episodes", num_episodes)
    g = _groups(population, groups, "evaluate_population")
    if g == 1:
        return _evaluate_population(agent, env, population, num_episodes, key=key)
    size = _population_size(population) // g
    group = lambda start: _evaluate_group(
        agent, env, population, num_episodes, size, start, key=key
    )
    return _side_by_side(group, g, size)


def _evaluate_with_keys(agent, env, population, num_episodes, keys) -> EvalMetrics:
    run = lambda s, k: agent.evaluate(env, s.agent_state, num_episodes, key=k)
    return eqx.filter_vmap(run)(population, keys)


def _evaluate_members(agent, env, population, num_episodes, *, key) -> EvalMetrics:
    keys = jr.split(key, _population_size(population))
    return _evaluate_with_keys(agent, env, population, num_episodes, keys)


def _evaluate_slice(agent, env, population, num_episodes, size, start, *, key) -> EvalMetrics:
    """One group of `evaluate_population`: members `start` to `start + size`."""
    part, keys = _group_of(population, key, size, start)
    return _evaluate_with_keys(agent, env, part, num_episodes, keys)


_evaluate_population = jit(_evaluate_members)
_evaluate_group = jit(_evaluate_slice)


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
    processes (`benchmarks/log/epyc-family26-model2.md`)."""
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
    dyn = place_members(dyn, mesh)
    keys = place_members(jr.split(key, n), mesh)
    train = _train_mapped_xla if isinstance(agent, AbstractPPOLearner) else _train_mapped
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
