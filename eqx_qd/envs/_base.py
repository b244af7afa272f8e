"""The environment protocol, single- and multi-agent, and the one auto-reset of training loops.

An environment is a stateless module: `reset(key=) -> state` and `step(state, action, key=)
-> state` on one (unbatched) environment; batch them with `jax.vmap`. `AbstractBaseEnv` is
what every environment shares (sizes, reset, step, and where a time limit cuts an episode);
`AbstractEnv` is the single-agent protocol (brax and pure-JAX tasks) and
`AbstractMultiAgentEnv` the multi-agent one (a leading `num_agents` axis on observations,
actions and rewards). `autoreset_step` drives both in training loops.

A QD environment also says how a trajectory of per-step *state descriptors* (feet contacts,
positions) becomes the descriptor of an episode, its descriptor bounds and its reward offset for
the QD-score.
"""

import abc
import typing
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PyTree

from .. import _validate as check
from .._custom_types import PRNGKey


class AbstractEnvState(eqx.Module):
    """What every environment state shows, single- or multi-agent.

    **Fields** others read: `obs` (`(obs_dim,)`, or `(num_agents, obs_dim)`), `reward`
    (the step's reward: a scalar, or `(num_agents,)`) and `terminated` (1.0 when the episode
    truly ended here: no bootstrap; one flag for all agents).
    """

    obs: eqx.AbstractVar[Float[Array, "*agents obs_dim"]]
    reward: eqx.AbstractVar[Float[Array, "*agents"]]
    terminated: eqx.AbstractVar[Float[Array, ""]]


_ES = TypeVar("_ES", bound=AbstractEnvState)


class AbstractBaseEnv(eqx.Module, Generic[_ES]):
    """What single- and multi-agent environments share: unbatched and pure, batched with
    `jax.vmap`. Agents, `autoreset_step` and `evaluate_episodes` are written against it.

    Subclass `AbstractEnv` or `AbstractMultiAgentEnv`, not this.
    """

    @property
    @abc.abstractmethod
    def observation_size(self) -> int:
        """Length of one agent's observation vector."""

    @property
    @abc.abstractmethod
    def action_size(self) -> int:
        """Length of one agent's action vector (or its number of discrete actions)."""

    @property
    @abc.abstractmethod
    def action_shape(self) -> tuple[int, ...]:
        """The shape of the action `step` takes (checked by `autoreset_step`, `rollout` and
        `evaluate_episodes`, at trace time)."""

    @abc.abstractmethod
    def reset(self, *, key: PRNGKey) -> _ES:
        """The first state of an episode."""

    @abc.abstractmethod
    def step(self, state: _ES, action: Array, *, key: PRNGKey) -> _ES:
        """The state after playing `action` in `state`."""

    @abc.abstractmethod
    def truncated(self, state: _ES, t: Int[Array, ""]) -> Float[Array, ""]:
        """1.0 when a time limit cuts the episode at `state`, reached `t` steps after its
        reset (0.0 when the episode terminated there: termination wins)."""


class EnvState(AbstractEnvState):
    """One single-agent environment after a reset or a step.

    **Fields:**

    - `physics`: the environment's own state (a brax state, a position...).
    - `obs`: the observation, `(obs_dim,)`.
    - `reward`: the reward of the step that led here (0 after a reset), a scalar; for a
      multi-objective task (`AbstractMultiObjectiveQDEnv`), one reward per objective,
      `(num_objectives,)`.
    - `terminated`: 1.0 when the episode truly ended here (no bootstrap), else 0.0.
    - `state_desc`: `(state_desc_dim,)`, what the episode descriptor is computed from
      (feet contacts, position...).
    """

    physics: PyTree
    obs: Float[Array, " obs_dim"]
    reward: Float[Array, ""] | Float[Array, " num_objectives"]
    terminated: Float[Array, ""]
    state_desc: Float[Array, " state_desc_dim"]


class AbstractEnv(AbstractBaseEnv[EnvState]):
    """A single-agent environment: unbatched, pure, actions in `[-1, 1]^action_size`.

    Subclass it and implement the sizes, `reset` and `step`; batch environments with
    `jax.vmap`. Episodes are cut after `episode_length` steps (`truncated`). The sizes
    `observation_size` and `action_size` are `AbstractBaseEnv`'s.
    """

    @property
    @abc.abstractmethod
    def state_descriptor_size(self) -> int:
        """Length of the per-step state descriptor (`EnvState.state_desc`)."""

    @property
    @abc.abstractmethod
    def episode_length(self) -> int:
        """Steps in a full episode (truncation length of rollouts and training episodes)."""

    @abc.abstractmethod
    def reset(self, *, key: PRNGKey) -> EnvState:
        """The first state of an episode (`key` drives the initial-state and observation
        noise, if any)."""

    @abc.abstractmethod
    def step(
        self, state: EnvState, action: Float[Array, " action_size"], *, key: PRNGKey
    ) -> EnvState:
        """The state after playing `action` (`(action_size,)`) in `state`; `key`
        drives observation noise, if any."""

    @property
    def action_shape(self) -> tuple[int, ...]:
        """`(action_size,)`."""
        return (self.action_size,)

    def truncated(self, state: EnvState, t: Int[Array, ""]) -> Float[Array, ""]:
        """1.0 when `t` reached `episode_length` and `state` did not terminate."""
        return (t >= self.episode_length).astype(jnp.float32) * (1.0 - state.terminated)


class Arena(typing.NamedTuple):
    """A task whose state descriptor is a position in the plane, seen from above (trajectory
    plots draw it): `walls` as segments `(x0, y0, x1, y1)` of half-thickness `wall_radius`
    (0: thin walls), and the `goal`, if the task has one."""

    walls: tuple[tuple[float, float, float, float], ...] = ()
    wall_radius: float = 0.0
    goal: tuple[float, float] | None = None


class AbstractQDEnv(AbstractEnv):
    """An environment that also defines an episode descriptor (what MAP-Elites bins)."""

    @property
    @abc.abstractmethod
    def descriptor_names(self) -> tuple[str, ...]:
        """What each descriptor dimension measures, for plots' axes (e.g. `("final x",
        "final y")`, or `descriptor 1`, `descriptor 2`... where they have no better name)."""

    @property
    @abc.abstractmethod
    def arena(self) -> Arena | None:
        """The plane the state descriptor moves in, for tasks whose state descriptor is an
        (x, y) position (mazes, traps, omni tasks); `None` for the others."""

    @property
    @abc.abstractmethod
    def descriptor_size(self) -> int:
        """Length of the episode descriptor (the repertoire's `num_descriptors`)."""

    @property
    @abc.abstractmethod
    def descriptor_bounds(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(lower, upper) per descriptor dimension."""

    @property
    @abc.abstractmethod
    def reward_offset(self) -> float:
        """A bound on minus the per-step reward; `reward_offset * episode_length` keeps every
        episode return positive in the QD-score."""

    @abc.abstractmethod
    def descriptor(
        self,
        state_descs: Float[Array, "time state_desc_dim"],
        valid: Float[Array, " time"],
    ) -> Float[Array, " descriptor_size"]:
        """The episode descriptor, `(descriptor_size,)`.

        **Arguments:**

        - `state_descs`: the state descriptor after every step, `(time, state_desc_dim)`.
        - `valid`: 1.0 for the steps of the episode, 0.0 for steps after it terminated.
        """

    @property
    def qd_offset(self) -> float:
        """Offset added to every elite's fitness in the QD-score."""
        return float(self.reward_offset) * self.episode_length


class AbstractMultiObjectiveQDEnv(AbstractQDEnv):
    """A QD environment scored on several objectives, every one higher-is-better: its
    `EnvState.reward` is a vector `(num_objectives,)` (one reward per objective each step), so
    an episode's return, what `PolicyScorer` gives MOME, is a vector too.

    Agents that learn from one reward (TD3, SAC, PPO, PBT) do not take it: the
    policy-gradient emitter of MOME-PGX learns objective `i` from column `i`
    (`QualityPGEmitter(objective=i)`). `reward_offset` bounds minus the per-step sum of the
    objectives (the repertoire's scalar view).
    """

    @property
    @abc.abstractmethod
    def objective_names(self) -> tuple[str, ...]:
        """What each objective measures (`("forward", "energy")`), for plots and tables; one
        name per objective."""

    @property
    @abc.abstractmethod
    def reference_point(self) -> tuple[float, ...]:
        """The point the hypervolumes are measured from, one coordinate per objective: a
        bound below every episode's return vector (the MOQD metrics' reference point)."""

    @property
    def num_objectives(self) -> int:
        """The number of objectives (the length of the reward vector)."""
        return len(self.objective_names)


def _check_descriptor_args(where: str, state_descs: Array, valid: Array) -> None:
    if jnp.ndim(state_descs) != 2:
        raise ValueError(
            f"{where}: state_descs must have shape (time, d), got {jnp.shape(state_descs)}"
        )
    check.shape(f"{where}: valid", valid, jnp.shape(state_descs)[:1])


def mean_descriptor(
    state_descs: Float[Array, "time d"], valid: Float[Array, " time"]
) -> Float[Array, " d"]:
    """Average of `state_descs` (`(time, d)`) over the steps where `valid` is 1 (the
    feet-contact rates of the brax `*_uni` tasks)."""
    _check_descriptor_args("mean_descriptor", state_descs, valid)
    total = jnp.sum(state_descs * valid[:, None], axis=0)
    return total / jnp.maximum(jnp.sum(valid), 1.0)


def final_descriptor(
    state_descs: Float[Array, "time d"], valid: Float[Array, " time"]
) -> Float[Array, " d"]:
    """The row of `state_descs` (`(time, d)`) at the last step where `valid` is 1 (the
    final position of the maze and `ant_omni`)."""
    _check_descriptor_args("final_descriptor", state_descs, valid)
    last = jnp.maximum(jnp.sum(valid).astype(jnp.int32) - 1, 0)
    return state_descs[last]


def locomotion_descriptor(
    state_descs: Float[Array, "time d"],
    valid: Float[Array, " time"],
    *,
    feet: bool,
    bounds: tuple[tuple[float, ...], tuple[float, ...]],
) -> Float[Array, " d"]:
    """The locomotion tasks' episode descriptor (brax's and Playground's): with `feet`, the
    feet-contact rates (`mean_descriptor`); else the final position (`final_descriptor`)
    clipped to `bounds` `(low, high)`."""
    if feet:
        return mean_descriptor(state_descs, valid)
    low, high = bounds
    return jnp.clip(final_descriptor(state_descs, valid), jnp.asarray(low), jnp.asarray(high))


# ---------------------------------------------------------------------------------------------
# Auto-reset for training loops, single- and multi-agent


class TrainingEnvState(eqx.Module):
    """An environment state plus the bookkeeping of a training loop.

    **Fields:**

    - `env_state`: the environment (an `EnvState`, a `MultiAgentState`, ...).
    - `t`: steps since the episode's reset (int32).
    - `episode_return`: the return so far, shaped like the reward (a scalar, or one per agent).
    - `first`: the state every episode of this environment restarts from (`training_reset`
      with `same_start`), or `None`: each episode starts from a fresh `env.reset`.
    """

    env_state: AbstractEnvState
    t: Int[Array, ""]
    episode_return: Float[Array, "*agents"]
    first: AbstractEnvState | None = None


def training_reset(
    env: AbstractBaseEnv, *, same_start: bool = False, key: PRNGKey
) -> TrainingEnvState:
    """`env.reset` with the step count and return at zero.

    With `same_start`, the state keeps this first state and `autoreset_step` restarts every
    later episode from it, instead of calling `env.reset` again: brax's `AutoResetWrapper`,
    which QDax's PBT and ME-PBT training environments use. Batched over a key per
    environment, each environment then keeps its own first state (random where `env.reset`
    is); without it, each episode draws a fresh one (one constant state for a deterministic
    task).
    """
    if not isinstance(env, AbstractBaseEnv):
        raise TypeError(
            f"training_reset: env must be an eqx_qd.envs.AbstractBaseEnv, got {type(env).__name__}"
        )
    first = env.reset(key=key)
    zeros = jnp.zeros_like(first.reward)
    return TrainingEnvState(first, jnp.zeros((), jnp.int32), zeros, first if same_start else None)


class AutoResetStep(eqx.Module):
    """What one auto-reset step produced.

    **Fields:**

    - `state`: where the next step starts (a fresh episode when this one ended).
    - `reached`: the environment state the step reached, before any reset (a truncated step
      bootstraps from its observation; an off-policy buffer stores it as `next_obs`).
    - `truncated`: 1.0 when the time limit cut the episode at this step.
    - `finished_return`: the finished episode's return, shaped like the reward (NaN when no
      episode finished).

    `reward`, `next_obs` and `terminated` read through to `reached` (batched like it, when
    the step was vmapped).
    """

    state: TrainingEnvState
    reached: AbstractEnvState
    truncated: Float[Array, ""]
    finished_return: Float[Array, "*agents"]

    @property
    def reward(self) -> Float[Array, "..."]:
        return self.reached.reward

    @property
    def next_obs(self) -> Float[Array, "..."]:
        return self.reached.obs

    @property
    def terminated(self) -> Float[Array, "..."]:
        return self.reached.terminated


def autoreset_step(
    env: AbstractBaseEnv, state: TrainingEnvState, action: Array, *, key: PRNGKey
) -> AutoResetStep:
    """Step `env` (single- or multi-agent) with `action`, and start a fresh episode (a fresh
    `env.reset`, or the state's `first` where `training_reset` kept one) when the reached
    state terminated or the time limit cut it (`AbstractBaseEnv.truncated`).

    **Returns:** an `AutoResetStep`: the state the next step starts from, the state reached
    before any reset, whether the time limit cut the episode, and the finished episode's
    return (NaN when none finished).
    """
    check.shape("autoreset_step: action", action, env.action_shape)
    step_key, reset_key = jr.split(key)
    nxt = env.step(state.env_state, action, key=step_key)
    t = state.t + 1
    truncated = env.truncated(nxt, t)
    done = (nxt.terminated + truncated) > 0
    episode_return = state.episode_return + nxt.reward
    # static: a kept first state is a structural choice of the training loop
    fresh = env.reset(key=reset_key) if state.first is None else state.first
    env_state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, nxt)
    new = TrainingEnvState(
        env_state,
        jnp.where(done, jnp.zeros_like(t), t),
        jnp.where(done, jnp.zeros_like(episode_return), episode_return),
        state.first,
    )
    return AutoResetStep(new, nxt, truncated, jnp.where(done, episode_return, jnp.nan))


def finished_episodes(
    finished_return: Float[Array, "*steps"],
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """The mean return of the episodes that ended (NaN when none did) and how many ended, from
    `AutoResetStep.finished_return` values of any shape (NaN where no episode ended)."""
    finished = ~jnp.isnan(finished_return)
    count = jnp.sum(finished.astype(jnp.float32))
    total = jnp.sum(jnp.where(finished, finished_return, 0.0))
    return jnp.where(count > 0, total / jnp.maximum(count, 1.0), jnp.nan), count


class AbstractRenderable(eqx.Module):
    """An environment that draws an episode as a web page (`render_html`): the replay of an
    elite (`eqx-qd replay`) writes one for it. brax's tasks are; a pure-JAX one is drawn by
    `eqx_qd.plotting.plot_trajectories` instead."""

    @abc.abstractmethod
    def render_html(self, states: Any, *, height: int = 480) -> str:
        """An HTML page showing `states`, an episode's states stacked on a leading time axis,
        `height` pixels high."""
