"""The laws an agent and an environment must keep, run as hypothesis properties
(`eqx_qd.testing.check_agent`, `check_env`): the agent contract's storage and training forms,
its genome, its training under `jit` and `vmap`, PBT's copies; an environment's shapes,
determinism, episodes through the auto-reset and descriptor bounds."""

import dataclasses
import typing
from collections.abc import Callable, Sequence

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._misc import tree_take
from ..envs._base import (
    AbstractBaseEnv,
    AbstractEnv,
    AbstractMultiObjectiveQDEnv,
    AbstractQDEnv,
    autoreset_step,
    training_reset,
)
from ..envs._multi_agent import AbstractMultiAgentEnv
from ..envs._rollout import rollout
from ..rl._base import AbstractAgent, check_agent_shapes
from ..rl._pbt import init_population, PBT, train_population
from .runner import (
    Broken,
    keep_python_random,
    known_laws,
    leaf_shapes,
    one_at_a_time,
    run_laws,
    trees_close,
)


@dataclasses.dataclass(frozen=True)
class _Seed:
    seed: int

    def describe(self) -> str:
        return f"seed {self.seed}"


@st.composite
@typing.no_type_check  # a runtime type checker samples with `random`, which strategies must not
def _seeds(draw) -> _Seed:
    value = draw(st.integers(0, 2**31 - 1))
    with keep_python_random():
        return _Seed(value)


def _array_bytes(tree) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(tree) if eqx.is_array(x))


# ----------------------------------------------------------------------------------- agents


@eqx.filter_jit
def _population(agent, env, key):
    return init_population(agent, env, None, 2, key=key)


class _AgentContext:
    def __init__(self, agent: AbstractAgent, env: AbstractBaseEnv, case: _Seed):
        self.agent, self.env, self.case = agent, env, case
        self.key = jr.key(case.seed)
        pop_key, self.train_key, self.pbt_key = jr.split(self.key, 3)
        self.population = _population(agent, env, pop_key)  # two members, drawn hparams
        self.run = tree_take(self.population, 0)
        self.state = self.run.agent_state


def _law_agent_storage(ctx: _AgentContext) -> None:
    """`empty_optimiser_states` gives a smaller state (no optimiser states, no targets), and
    `init_optimiser_states` brings it back to the training form's structure, shapes and
    dtypes, for a fresh state and for one trained for an iteration."""
    agent = ctx.agent
    trained = _train(agent, ctx.env, ctx.run, ctx.train_key).agent_state
    for which, state in (("a fresh state", ctx.state), ("a trained state", trained)):
        stored = agent.empty_optimiser_states(state)
        if _array_bytes(stored) >= _array_bytes(state):
            raise Broken(
                f"the storage form of {which} holds {_array_bytes(stored)} bytes of arrays, the "
                f"training form {_array_bytes(state)}: empty_optimiser_states must drop "
                "optimiser states and targets"
            )
        back = agent.init_optimiser_states(stored)
        if jax.tree.structure(back) != jax.tree.structure(state) or leaf_shapes(
            back
        ) != leaf_shapes(state):
            raise Broken(
                f"init_optimiser_states does not give back the training form's structure, for "
                f"{which}"
            )


def _law_agent_genome(ctx: _AgentContext) -> None:
    """`with_genome(state, genome(state))` is `state`, for a fresh state and for one trained
    for an iteration (whose observation statistics, optimiser states and targets have moved
    from their start, so a `with_genome` that rebuilds any of them shows); a moved genome is
    read back as moved, and the hyperparameters stay."""
    agent = ctx.agent
    trained = _train(agent, ctx.env, ctx.run, ctx.train_key).agent_state
    for which, state in (("a fresh state", ctx.state), ("a trained state", trained)):
        back = agent.with_genome(state, agent.genome(state))
        if not bool(eqx.tree_equal(back, state)):
            changed = [
                jax.tree_util.keystr(path)
                for (path, a), b in zip(
                    jax.tree_util.tree_leaves_with_path(state), jax.tree.leaves(back)
                )
                if not bool(eqx.tree_equal(a, b))
            ]
            where = f" (first: {', '.join(changed[:3])})" if changed else ""
            raise Broken(f"with_genome(state, genome(state)) differs from {which}{where}")
        moved = jax.tree.map(
            lambda x: x + 1.0 if eqx.is_inexact_array(x) else x, agent.genome(state)
        )
        new = agent.with_genome(state, moved)
        if not bool(eqx.tree_equal(agent.genome(new), moved)):
            raise Broken(f"genome(with_genome(state, g)) differs from g, for {which}")
        if not bool(eqx.tree_equal(new.hparams, state.hparams)):
            raise Broken(f"with_genome changed the hyperparameters of {which}")


def _law_agent_deterministic(ctx: _AgentContext) -> None:
    """`train` is a function of its run and key: the same run and key give the same run,
    bit for bit."""
    first = _train(ctx.agent, ctx.env, ctx.run, ctx.train_key)
    second = _train(ctx.agent, ctx.env, ctx.run, ctx.train_key)
    if not bool(eqx.tree_equal(first, second)):
        raise Broken("two trainings of one run with one key differ")


_TRACES: list[int] = []


@eqx.filter_jit
def _train(agent, env, run, key):
    _TRACES.append(1)
    return agent.train(env, run, 1, key=key)[0]


def _law_agent_retrace(ctx: _AgentContext) -> None:
    """A hyperparameter is a value, not a shape: training a member with other
    hyperparameters (`resample_hparams`) reuses the compiled program, and so does training
    the run a training returned (no leaf changes its dtype, weak type or structure). Training
    leaves the hyperparameters as they were: PBT reads and explores them, not the agent."""
    trained = _train(ctx.agent, ctx.env, ctx.run, ctx.train_key)  # compiled (or already)
    before = len(_TRACES)
    state = ctx.agent.resample_hparams(ctx.state, key=ctx.pbt_key)
    other = eqx.tree_at(lambda r: r.agent_state, ctx.run, state)
    _train(ctx.agent, ctx.env, other, ctx.train_key)
    if len(_TRACES) != before:
        raise Broken(
            "training with resampled hyperparameters traced the program again: a "
            "hyperparameter held as a static field or a Python number?"
        )
    _train(ctx.agent, ctx.env, trained, ctx.train_key)
    if len(_TRACES) != before:
        changed = [
            f"{jax.tree_util.keystr(path)}: {_spec(a)} -> {_spec(b)}"
            for (path, a), b in zip(
                jax.tree_util.tree_leaves_with_path(ctx.run), jax.tree.leaves(trained)
            )
            if _spec(a) != _spec(b)
        ]
        raise Broken(
            "training the run a training returned traced the program again: the trained run's "
            f"leaves differ from the run's ({', '.join(changed[:3]) or 'its structure'})"
        )
    if not bool(eqx.tree_equal(trained.agent_state.hparams, ctx.state.hparams)):
        raise Broken(
            "training changed the hyperparameters: they are PBT's to explore (a schedule "
            "belongs in the agent state, not in its hparams)"
        )


def _spec(leaf) -> str:
    """A leaf as a compiled program sees it: an array's dtype, weak type and shape, or a
    Python value (held static)."""
    if eqx.is_array(leaf):
        weak = " weak" if getattr(leaf, "weak_type", False) else ""
        return f"{leaf.dtype}{weak}{list(leaf.shape)}"
    return f"{type(leaf).__name__} {leaf!r}"


def _law_agent_population(ctx: _AgentContext) -> None:
    """A population trained together (`train_population`, `filter_vmap`) equals its members
    trained alone with the same keys, and trained in two groups side by side (its default on
    a CPU of two cores or more)."""
    train = lambda groups: train_population(
        ctx.agent, ctx.env, ctx.population, 1, groups=groups, key=ctx.train_key
    )[0]
    together = train(1)
    keys = jr.split(ctx.train_key, 2)
    for i in range(2):
        alone = _train(ctx.agent, ctx.env, tree_take(ctx.population, i), keys[i])
        mine = eqx.filter(tree_take(together, i), eqx.is_array)
        if not trees_close(mine, eqx.filter(alone, eqx.is_array)):
            raise Broken(f"member {i} trained in the population differs from it trained alone")
    if not trees_close(eqx.filter(train(2), eqx.is_array), eqx.filter(together, eqx.is_array)):
        raise Broken("the population trained in two groups differs from it trained together")


@eqx.filter_jit
def _pbt_update(pbt, population, returns, key):
    return pbt.update(population, returns, key=key)


def _law_agent_pbt(ctx: _AgentContext) -> None:
    """PBT copies whole runs: the member it replaces takes every leaf of its source's run
    (buffers, environments, networks, optimiser states), only its hyperparameters drawn
    again, inside the agent's spaces. Compiled, the update copies the same leaves and keeps the
    same record; what it computes, the explored hyperparameters, agrees to float rounding."""
    spaces = ctx.agent.hparam_spaces
    pbt = PBT(2, 1, 1, spaces)
    returns = jnp.asarray([1.0, 0.0], jnp.float32)
    new, info = pbt.update(ctx.population, returns, key=ctx.pbt_key)
    if np.asarray(info.replaced).tolist() != [1] or np.asarray(info.sources).tolist() != [0]:
        raise Broken(f"PBT replaced {info.replaced} from {info.sources}, not 1 from 0")
    copied = eqx.tree_at(
        lambda r: r.agent_state.hparams,
        tree_take(new, 1),
        tree_take(ctx.population, 0).agent_state.hparams,
    )
    if not bool(eqx.tree_equal(copied, tree_take(ctx.population, 0))):
        raise Broken("the replaced member's run differs from its source's beyond hparams")
    explored = tree_take(new, 1).agent_state.hparams
    outside = [n for n, space in spaces.items() if not bool(space.contains(getattr(explored, n)))]
    if outside:
        raise Broken(f"the explored hyperparameters {outside} lie outside the agent's spaces")
    jitted, jinfo = _pbt_update(pbt, ctx.population, returns, ctx.pbt_key)
    # What PBT copies and its record, bit for bit; what it computes (the explored
    # hyperparameters), to float rounding: a compiled program may fuse and round otherwise.
    hparams = lambda r: r.agent_state.hparams
    copies = eqx.tree_at(hparams, jitted, hparams(new))
    if not (
        bool(eqx.tree_equal(copies, new))
        and bool(eqx.tree_equal(jinfo, info))
        and trees_close(hparams(jitted), hparams(new), rtol=1e-6, atol=0.0)
    ):
        raise Broken("PBT's update compiled differs from it run eagerly on this run")


AGENT_LAWS: dict[str, Callable[[_AgentContext], None]] = {
    "storage": _law_agent_storage,
    "genome": _law_agent_genome,
    "deterministic": _law_agent_deterministic,
    "retrace": _law_agent_retrace,
    "population": _law_agent_population,
    "pbt": _law_agent_pbt,
}
"""The laws `check_agent` runs, by name (each function's docstring states its law)."""


def check_agent(
    agent: AbstractAgent,
    env: AbstractBaseEnv,
    *,
    laws: Sequence[str] | None = None,
    max_examples: int = 3,
) -> None:
    """Run `agent` through every law of `AGENT_LAWS` (or those named in `laws`) on `env`,
    from populations of two members whose hyperparameters are drawn from the agent's spaces,
    and raise `LawBroken` naming the first law broken with the case (its seed).

    **Arguments:**

    - `agent`: any `AbstractAgent` (its contract is checked first: `rl.check_agent_shapes`).
    - `env`: an environment of the agent's sizes; keep it small, every law trains.
    - `laws`: a subset of the law names.
    - `max_examples`: seeds tried per law.
    """
    check_agent_shapes(agent, env, where="check_agent")
    names = known_laws("check_agent", AGENT_LAWS, laws, list(AGENT_LAWS))
    context = one_at_a_time(lambda case: _AgentContext(agent, env, case))
    run_laws(AGENT_LAWS, names, context, _seeds(), max_examples)


# ----------------------------------------------------------------------------- environments


def _random_action(env: AbstractBaseEnv, key) -> jax.Array:
    if isinstance(env, AbstractMultiAgentEnv) and env.discrete:
        return jr.randint(key, env.action_shape, 0, env.action_size)
    return jr.uniform(key, env.action_shape, minval=-1.0, maxval=1.0)


_STEPS = 48


@eqx.filter_jit
def _autoreset_walk(env: AbstractBaseEnv, key):
    """`_STEPS` auto-reset steps of random actions from `training_reset`: per step, whether
    the step ended the episode (terminated or truncated), and where the next step starts
    (its step count, return and termination flag)."""
    reset_key, key = jr.split(key)
    state = training_reset(env, key=reset_key)

    def body(state, k):
        act_key, step_key = jr.split(k)
        out = autoreset_step(env, state, _random_action(env, act_key), key=step_key)
        ended = (out.terminated + out.truncated) > 0
        nxt = out.state
        return nxt, (ended, nxt.t, jnp.sum(nxt.episode_return), nxt.env_state.terminated)

    return state.env_state.terminated, jax.lax.scan(body, state, jr.split(key, _STEPS))[1]


@eqx.filter_jit
def _reset_and_step(env: AbstractBaseEnv, key):
    reset_key, act_key, step_key = jr.split(key, 3)
    first = env.reset(key=reset_key)
    return first, env.step(first, _random_action(env, act_key), key=step_key)


class _EnvContext:
    def __init__(self, env: AbstractBaseEnv, case: _Seed):
        self.env, self.case = env, case
        self.key = jr.key(case.seed)


def _expected_shapes(env: AbstractBaseEnv) -> dict[str, tuple[int, ...]]:
    if isinstance(env, AbstractMultiAgentEnv):
        n = env.num_agents
        return {"obs": (n, env.observation_size), "reward": (n,), "terminated": ()}
    if isinstance(env, AbstractMultiObjectiveQDEnv):  # a reward per objective
        reward: tuple[int, ...] = (env.num_objectives,)
        if len(env.reference_point) != env.num_objectives:
            raise Broken(
                f"reference_point has {len(env.reference_point)} coordinates for "
                f"{env.num_objectives} objectives"
            )
        return {"obs": (env.observation_size,), "reward": reward, "terminated": ()}
    return {"obs": (env.observation_size,), "reward": (), "terminated": ()}


def _law_env_shapes(ctx: _EnvContext) -> None:
    """`reset` and `step` give states whose observation, reward and termination have the
    environment's declared shapes, float32, and `step` keeps the state's structure and
    shapes (what `lax.scan` needs)."""
    first, second = _reset_and_step(ctx.env, ctx.key)
    for where, state in (("reset", first), ("step", second)):
        for field, shape in _expected_shapes(ctx.env).items():
            value = getattr(state, field)
            if value.shape != shape or value.dtype != jnp.float32:
                raise Broken(
                    f"{where}'s {field} has shape {value.shape} and dtype {value.dtype}; the "
                    f"environment declares {shape} float32"
                )
    if jax.tree.structure(first) != jax.tree.structure(second) or leaf_shapes(first) != leaf_shapes(
        second
    ):
        raise Broken("step changed the state's structure or shapes from reset's")


def _law_env_deterministic(ctx: _EnvContext) -> None:
    """`reset` and `step` are functions of their inputs and key: called twice, the same
    states, bit for bit."""
    a, b = _reset_and_step(ctx.env, ctx.key), _reset_and_step(ctx.env, ctx.key)
    if not bool(eqx.tree_equal(a, b)):
        raise Broken("reset then step with the same keys gave different states")


def _law_env_autoreset(ctx: _EnvContext) -> None:
    """An episode starts unterminated (`reset`), and through `autoreset_step` every step that
    terminates or is truncated is followed by a fresh episode: step count 0, return 0, not
    terminated; other steps count on."""
    first, (ended, t, returns, terminated) = _autoreset_walk(ctx.env, ctx.key)
    ended, t, returns, terminated = (np.asarray(x) for x in (ended, t, returns, terminated))
    if float(first) != 0.0 or (terminated[ended] != 0).any():
        raise Broken("reset gave a state that is already terminated")
    if (t[ended] != 0).any() or (returns[ended] != 0).any():
        raise Broken("a step that ended its episode was not followed by a fresh one")
    previous = np.concatenate([[0], t[:-1]])
    if (t[~ended] != previous[~ended] + 1).any():
        raise Broken("the step count did not count on within an episode")


def _law_env_bounds(ctx: _EnvContext) -> None:
    """(QD environments.) The descriptor of an episode of random actions lies within
    `descriptor_bounds`."""
    env = ctx.env
    if not isinstance(env, AbstractQDEnv):
        return
    descriptor = np.asarray(_episode_descriptor(env, ctx.key))
    low, high = (np.asarray(b, np.float32) for b in env.descriptor_bounds)
    tolerance = 1e-5 * np.maximum(1.0, np.abs(high - low))
    if (
        not np.isfinite(descriptor).all()
        or (descriptor < low - tolerance).any()
        or (descriptor > high + tolerance).any()
    ):
        raise Broken(
            f"an episode's descriptor {descriptor.tolist()} leaves descriptor_bounds "
            f"({low.tolist()}, {high.tolist()})"
        )


@eqx.filter_jit
def _episode_descriptor(env: AbstractQDEnv, key):
    policy_key, key = jr.split(key)
    weights = jr.normal(policy_key, (env.observation_size, env.action_size))
    episode = rollout(env, lambda obs: jnp.tanh(obs @ weights), key=key)
    return env.descriptor(episode.transitions.next_state_desc, episode.valid)


ENV_LAWS: dict[str, Callable[[_EnvContext], None]] = {
    "shapes": _law_env_shapes,
    "deterministic": _law_env_deterministic,
    "autoreset": _law_env_autoreset,
    "bounds": _law_env_bounds,
}
"""The laws `check_env` runs, by name (each function's docstring states its law)."""


def check_env(
    env: AbstractBaseEnv, *, laws: Sequence[str] | None = None, max_examples: int = 10
) -> None:
    """Run `env` through every law of `ENV_LAWS` (or those named in `laws`) with random
    actions and drawn keys, and raise `LawBroken` naming the first law broken with the case
    (its seed).

    **Arguments:**

    - `env`: an `AbstractEnv` (its episodes played by a random linear policy for `bounds`,
      when it is an `AbstractQDEnv`) or an `AbstractMultiAgentEnv`.
    - `laws`: a subset of the law names.
    - `max_examples`: seeds tried per law.
    """
    if not isinstance(env, AbstractEnv | AbstractMultiAgentEnv):
        raise TypeError(
            "check_env: env must be an eqx_qd.envs.AbstractEnv or AbstractMultiAgentEnv, got "
            f"{type(env).__name__}"
        )
    names = known_laws("check_env", ENV_LAWS, laws, list(ENV_LAWS))
    run_laws(ENV_LAWS, names, lambda case: _EnvContext(env, case), _seeds(), max_examples)
