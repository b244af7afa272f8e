"""Multi-agent environments: the protocol, a time limit and a single-agent view.

A multi-agent environment is unbatched and pure like `AbstractEnv` (both subclass
`AbstractBaseEnv`, and `autoreset_step` drives both), with a leading `num_agents` axis on
observations, actions and rewards. `terminated` and `truncated` are kept apart: the episode
ends for all agents together.
"""

import abc
import typing

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PyTree

from .. import _validate as check
from .._custom_types import PRNGKey
from ._base import AbstractBaseEnv, AbstractEnv, AbstractEnvState


class MultiAgentState(AbstractEnvState):
    """One multi-agent environment after a reset or a step.

    **Fields:**

    - `physics`: the environment's own state.
    - `obs`: every agent's observation, `(num_agents, obs_dim)`.
    - `reward`: every agent's reward for the step that led here, `(num_agents,)`.
    - `terminated`, `truncated`: 1.0 when the episode ended here for all agents, by a true end
      or by a time limit (kept apart so that truncated steps can bootstrap).
    - `t`: steps since the reset (int32).
    """

    physics: PyTree
    obs: Float[Array, "num_agents obs_dim"]
    reward: Float[Array, " num_agents"]
    terminated: Float[Array, ""]
    truncated: Float[Array, ""]
    t: Int[Array, ""]


class AbstractMultiAgentEnv(AbstractBaseEnv[MultiAgentState]):
    """`num_agents` agents acting together, unbatched and pure like `AbstractEnv`. With
    `discrete`, an action is an int in `[0, action_size)`; otherwise a vector in
    `[-1, 1]^action_size`. `observation_size` and `action_size` (`AbstractBaseEnv`'s) are
    one agent's; `action_size` is the number of discrete actions when `discrete`."""

    @property
    @abc.abstractmethod
    def num_agents(self) -> int:
        """How many agents act at every step."""

    @property
    @abc.abstractmethod
    def discrete(self) -> bool:
        """Whether actions are ints (else vectors in [-1, 1])."""

    @abc.abstractmethod
    def reset(self, *, key: PRNGKey) -> MultiAgentState:
        """The first state of an episode."""

    @abc.abstractmethod
    def step(self, state: MultiAgentState, actions: Array, *, key: PRNGKey) -> MultiAgentState:
        """The state after every agent played its action in `state`: `actions` is
        `(num_agents,)` ints when discrete, else `(num_agents, action_size)`."""

    @property
    def action_shape(self) -> tuple[int, ...]:
        """`(num_agents,)` when discrete, else `(num_agents, action_size)`."""
        if self.discrete:
            return (self.num_agents,)
        return (self.num_agents, self.action_size)

    def truncated(self, state: MultiAgentState, t: Int[Array, ""]) -> Float[Array, ""]:
        """The state's own flag (`TimeLimit` and the environments set it)."""
        return state.truncated


@typing.final
class TimeLimit(AbstractMultiAgentEnv):
    """Truncates the episodes of `env` after `max_steps` steps (unless they terminated on
    that step)."""

    env: AbstractMultiAgentEnv
    max_steps: int = eqx.field(static=True)

    def __check_init__(self):
        if not isinstance(self.env, AbstractMultiAgentEnv):
            raise TypeError(
                f"TimeLimit.env must be an eqx_qd.envs.AbstractMultiAgentEnv, got "
                f"{type(self.env).__name__}"
            )
        check.positive_int("TimeLimit.max_steps", self.max_steps)

    @property
    def num_agents(self) -> int:
        return self.env.num_agents

    @property
    def observation_size(self) -> int:
        return self.env.observation_size

    @property
    def action_size(self) -> int:
        return self.env.action_size

    @property
    def discrete(self) -> bool:
        return self.env.discrete

    def reset(self, *, key: PRNGKey) -> MultiAgentState:
        return self.env.reset(key=key)

    def step(self, state: MultiAgentState, actions: Array, *, key: PRNGKey) -> MultiAgentState:
        nxt = self.env.step(state, actions, key=key)
        limit = (nxt.t >= self.max_steps).astype(jnp.float32)
        truncated = jnp.maximum(nxt.truncated, limit * (1.0 - nxt.terminated))
        return eqx.tree_at(lambda s: s.truncated, nxt, truncated)


@typing.final
class SingleAgentView(AbstractMultiAgentEnv):
    """A single-agent `AbstractEnv` `env` seen as a one-agent environment (PPO = IPPO with
    n = 1).
    Truncation comes from the wrapped environment's `episode_length`."""

    env: AbstractEnv

    def __check_init__(self):
        if not isinstance(self.env, AbstractEnv):
            raise TypeError(
                f"SingleAgentView.env must be a single-agent eqx_qd.envs.AbstractEnv, got "
                f"{type(self.env).__name__}"
            )

    @property
    def num_agents(self) -> int:
        return 1

    @property
    def observation_size(self) -> int:
        return self.env.observation_size

    @property
    def action_size(self) -> int:
        return self.env.action_size

    @property
    def discrete(self) -> bool:
        return False

    def _wrap(self, inner, t) -> MultiAgentState:
        return MultiAgentState(
            inner,
            inner.obs[None],
            inner.reward[None],
            inner.terminated,
            self.env.truncated(inner, t),
            t,
        )

    def reset(self, *, key: PRNGKey) -> MultiAgentState:
        return self._wrap(self.env.reset(key=key), jnp.zeros((), jnp.int32))

    def step(self, state: MultiAgentState, actions: Array, *, key: PRNGKey) -> MultiAgentState:
        inner = self.env.step(state.physics, actions[0], key=key)
        return self._wrap(inner, state.t + 1)
