"""The environment protocol shared by brax and pure-JAX tasks, and auto-reset for training loops.

An environment is a stateless module: ``reset(key=) -> EnvState`` and
``step(state, action, key=) -> EnvState`` on one (unbatched) environment; batch them with
``jax.vmap``. A QD environment also says how a trajectory of per-step *state descriptors*
(feet contacts, positions) becomes the descriptor of an episode, its descriptor bounds and its
reward offset for the QD-score.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PyTree

from .._custom_types import PRNGKey


class EnvState(eqx.Module):
    """One environment after a reset or a step.

    **Fields:**

    - `physics`: the environment's own state (a brax state, a position...).
    - `obs`: the observation, ``(obs_dim,)``.
    - `reward`: the reward of the step that led here (0 after a reset), a scalar.
    - `terminated`: 1.0 when the episode truly ended here (no bootstrap), else 0.0.
    - `state_desc`: ``(state_desc_dim,)``, what the episode descriptor is computed from
      (feet contacts, position...).
    """

    physics: PyTree
    obs: Float[Array, " obs_dim"]
    reward: Float[Array, ""]
    terminated: Float[Array, ""]
    state_desc: Float[Array, " state_desc_dim"]


class AbstractEnv(eqx.Module):
    """A single-agent environment: unbatched, pure, actions in ``[-1, 1]^action_size``.

    Subclass it and implement the sizes, `reset` and `step`; batch environments with
    ``jax.vmap``. Truncation at `episode_length` is the caller's (`rollout`,
    `autoreset_step`).
    """

    @property
    @abc.abstractmethod
    def observation_size(self) -> int:
        """Length of an observation vector."""

    @property
    @abc.abstractmethod
    def action_size(self) -> int:
        """Length of an action vector (each entry in [-1, 1])."""

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
        """The first state of an episode (``key`` drives the initial-state and observation
        noise, if any)."""

    @abc.abstractmethod
    def step(
        self, state: EnvState, action: Float[Array, " action_size"], *, key: PRNGKey
    ) -> EnvState:
        """The state after playing ``action`` (``(action_size,)``) in ``state``; ``key``
        drives observation noise, if any."""


class AbstractQDEnv(AbstractEnv):
    """An environment that also defines an episode descriptor (what MAP-Elites bins)."""

    @property
    @abc.abstractmethod
    def descriptor_size(self) -> int:
        """Length of the episode descriptor (the repertoire's ``num_descriptors``)."""

    @property
    @abc.abstractmethod
    def descriptor_bounds(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(lower, upper) per descriptor dimension."""

    @property
    @abc.abstractmethod
    def reward_offset(self) -> float:
        """A bound on minus the per-step reward; ``reward_offset * episode_length`` keeps every
        episode return positive in the QD-score."""

    @abc.abstractmethod
    def descriptor(
        self,
        state_descs: Float[Array, "time state_desc_dim"],
        valid: Float[Array, " time"],
    ) -> Float[Array, " descriptor_size"]:
        """The episode descriptor, ``(descriptor_size,)``.

        **Arguments:**

        - `state_descs`: the state descriptor after every step, ``(time, state_desc_dim)``.
        - `valid`: 1.0 for the steps of the episode, 0.0 for steps after it terminated.
        """

    @property
    def qd_offset(self) -> float:
        """Offset added to every elite's fitness in the QD-score."""
        return float(self.reward_offset) * self.episode_length


def mean_descriptor(
    state_descs: Float[Array, "time d"], valid: Float[Array, " time"]
) -> Float[Array, " d"]:
    """Average of ``state_descs`` (``(time, d)``) over the steps where ``valid`` is 1 (the
    feet-contact rates of the brax ``*_uni`` tasks)."""
    total = jnp.sum(state_descs * valid[:, None], axis=0)
    return total / jnp.maximum(jnp.sum(valid), 1.0)


def final_descriptor(
    state_descs: Float[Array, "time d"], valid: Float[Array, " time"]
) -> Float[Array, " d"]:
    """The row of ``state_descs`` (``(time, d)``) at the last step where ``valid`` is 1 (the
    final position of the maze and ``ant_omni``)."""
    last = jnp.maximum(jnp.sum(valid).astype(jnp.int32) - 1, 0)
    return state_descs[last]


# ---------------------------------------------------------------------------------------------
# Auto-reset for training loops


class TrainingEnvState(eqx.Module):
    """An `EnvState` plus the bookkeeping of a training loop.

    **Fields:**

    - `env_state`: the environment.
    - `t`: the step within the episode (a float scalar).
    - `episode_return`: the return so far (for logging finished episodes).
    """

    env_state: EnvState
    t: Float[Array, ""]
    episode_return: Float[Array, ""]


def training_reset(env: AbstractEnv, *, key: PRNGKey) -> TrainingEnvState:
    """``env.reset`` with the step count and return at zero."""
    zero = jnp.zeros((), jnp.float32)
    return TrainingEnvState(env.reset(key=key), zero, zero)


class AutoResetStep(eqx.Module):
    """What one auto-reset step produced: the next training state and, for the replay buffer,
    the transition's reward, next observation (before any reset), flags and finished return."""

    state: TrainingEnvState
    reward: Float[Array, ""]
    next_obs: Float[Array, " obs_dim"]
    next_state_desc: Float[Array, " state_desc_dim"]
    terminated: Float[Array, ""]
    truncated: Float[Array, ""]
    finished_return: Float[Array, ""]


def autoreset_step(
    env: AbstractEnv,
    state: TrainingEnvState,
    action: Float[Array, " action_size"],
    *,
    key: PRNGKey,
) -> AutoResetStep:
    """Step ``env`` with ``action`` (``(action_size,)``), and start a fresh episode (fresh
    key) when the episode terminated or reached ``env.episode_length`` steps.

    **Returns:** an `AutoResetStep`: the state the next step starts from, and the step's
    reward, reached observation (before any reset), flags (episodes cut by the time limit are
    ``truncated``) and the finished episode's return (NaN when none finished).
    """
    step_key, reset_key = jr.split(key)
    nxt = env.step(state.env_state, action, key=step_key)
    t = state.t + 1.0
    terminated = nxt.terminated
    truncated = (1.0 - terminated) * (t >= env.episode_length).astype(jnp.float32)
    done = (terminated + truncated) > 0
    episode_return = state.episode_return + nxt.reward
    fresh = env.reset(key=reset_key)
    env_state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, nxt)
    zero = jnp.zeros((), jnp.float32)
    new = TrainingEnvState(
        env_state, jnp.where(done, zero, t), jnp.where(done, zero, episode_return)
    )
    return AutoResetStep(
        new, nxt.reward, nxt.obs, nxt.state_desc, terminated, truncated,
        jnp.where(done, episode_return, jnp.nan),
    )  # fmt: skip


def finished_episodes(
    finished_return: Float[Array, "*steps"],
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """The mean return of the episodes that ended (NaN when none did) and how many ended, from
    `AutoResetStep.finished_return` values of any shape (NaN where no episode ended)."""
    finished = ~jnp.isnan(finished_return)
    count = jnp.sum(finished.astype(jnp.float32))
    total = jnp.sum(jnp.where(finished, finished_return, 0.0))
    return jnp.where(count > 0, total / jnp.maximum(count, 1.0), jnp.nan), count
