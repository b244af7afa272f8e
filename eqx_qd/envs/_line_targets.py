"""A fast discrete cooperative multi-agent task in pure JAX."""

import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Int

from .. import _validate as check
from .._custom_types import PRNGKey
from ._multi_agent import AbstractMultiAgentEnv, MultiAgentState


@typing.final
class LineTargets(AbstractMultiAgentEnv):
    """A fast discrete cooperative task: `num_agents` agents on a line of `size` cells,
    each with its own target cell drawn at reset. Actions: 0 left, 1 stay, 2 right.

    Each agent observes its position and target and the others' positions, scaled to [0, 1].
    The team reward, the same for every agent, is minus the mean distance to the targets
    (scaled by `size`), plus 1 on the step on which every agent stands on its target. That
    step terminates the episode.

    **Fields:** `n` (the number of agents), `size` (cells on the line).
    """

    n: int = eqx.field(default=2, static=True)
    size: int = eqx.field(default=8, static=True)

    def __check_init__(self):
        check.positive_int("LineTargets.n", self.n)
        check.integer("LineTargets.size", self.size, minimum=2)

    @property
    def num_agents(self) -> int:
        return self.n

    @property
    def observation_size(self) -> int:
        return 2 + (self.n - 1)

    @property
    def action_size(self) -> int:
        return 3

    @property
    def discrete(self) -> bool:
        return True

    def _observe(self, pos: Int[Array, " n"], targets: Int[Array, " n"]):
        scale = jnp.float32(self.size - 1)
        p, g = pos.astype(jnp.float32) / scale, targets.astype(jnp.float32) / scale
        others = jnp.stack([jnp.roll(p, -k) for k in range(1, self.n)], axis=-1)
        return jnp.concatenate([p[:, None], g[:, None], others.reshape(self.n, -1)], axis=-1)

    def reset(self, *, key: PRNGKey) -> MultiAgentState:
        pos_key, target_key = jr.split(key)
        pos = jr.randint(pos_key, (self.n,), 0, self.size)
        targets = jr.randint(target_key, (self.n,), 0, self.size)
        zero = jnp.zeros((), jnp.float32)
        return MultiAgentState(
            (pos, targets),
            self._observe(pos, targets),
            jnp.zeros(self.n, jnp.float32),
            zero,
            zero,
            jnp.zeros((), jnp.int32),
        )

    def step(self, state: MultiAgentState, actions: Array, *, key: PRNGKey) -> MultiAgentState:
        pos, targets = state.physics
        pos = jnp.clip(pos + actions.astype(pos.dtype) - 1, 0, self.size - 1)
        distance = jnp.mean(jnp.abs(pos - targets).astype(jnp.float32)) / (self.size - 1)
        done = jnp.all(pos == targets).astype(jnp.float32)
        reward = jnp.full((self.n,), -distance + done, jnp.float32)
        return MultiAgentState(
            (pos, targets),
            self._observe(pos, targets),
            reward,
            done,
            jnp.zeros((), jnp.float32),
            state.t + 1,
        )
