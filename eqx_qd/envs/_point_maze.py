"""A fast 2-D point-mass maze in pure JAX (deceptive with its walls, easy without)."""

import math
import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float

from .. import _validate as check
from .._custom_types import PRNGKey
from ._base import AbstractQDEnv, Arena, EnvState, final_descriptor


class _Walls(typing.NamedTuple):
    y: tuple[float, ...]
    x_min: tuple[float, ...]
    x_max: tuple[float, ...]


_DEFAULT_WALLS = _Walls(y=(-0.35, 0.35), x_min=(-1.0, -0.5), x_max=(0.5, 1.0))


@typing.final
class PointMaze(AbstractQDEnv):
    """A point mass in `[-1, 1]^2` that must reach a goal past two walls (pure JAX, fast).

    The action moves the point by `0.1 * clip(action, -1, 1)`; a move that would cross a
    wall keeps its horizontal part only. The default walls leave a gap on the right of the
    lower wall and on the left of the upper one, so heading straight to the goal gets stuck
    (a deceptive task). Reward: minus the distance to the goal; the episode terminates within
    0.05 of the goal. Observation and state descriptor: the position. Episode descriptor: the
    final position.

    **Fields:**

    - `walls`: `False` removes the walls (an easy task for learning tests).
    - `length`: steps per episode (`episode_length`).
    - `reset_noise`: the start is drawn uniformly within this distance of `(0, -0.85)`.
    - `obs_noise`: std of the gaussian noise added to observations (stochastic variants).
    """

    walls: bool = eqx.field(default=True, static=True)
    length: int = eqx.field(default=100, static=True)
    reset_noise: float = eqx.field(default=0.0, static=True)
    obs_noise: float = eqx.field(default=0.0, static=True)

    def __check_init__(self):
        check.positive_int("PointMaze.length", self.length)
        check.non_negative("PointMaze.reset_noise", self.reset_noise)
        check.non_negative("PointMaze.obs_noise", self.obs_noise)

    start = (0.0, -0.85)
    goal = (0.0, 0.85)

    @property
    def descriptor_names(self) -> tuple[str, ...]:
        return ("final x", "final y")

    @property
    def arena(self) -> Arena:
        w = _DEFAULT_WALLS if self.walls else _Walls((), (), ())
        return Arena(tuple(zip(w.x_min, w.y, w.x_max, w.y)), 0.0, self.goal)

    @property
    def observation_size(self) -> int:
        return 2

    @property
    def action_size(self) -> int:
        return 2

    @property
    def state_descriptor_size(self) -> int:
        return 2

    @property
    def descriptor_size(self) -> int:
        return 2

    @property
    def episode_length(self) -> int:
        return self.length

    @property
    def descriptor_bounds(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return (-1.0, -1.0), (1.0, 1.0)

    @property
    def reward_offset(self) -> float:
        return math.sqrt(8.0)

    def descriptor(
        self,
        state_descs: Float[Array, "time state_desc_dim"],
        valid: Float[Array, " time"],
    ) -> Float[Array, " descriptor_size"]:
        return final_descriptor(state_descs, valid)

    def _observe(self, pos: Float[Array, " 2"], key: PRNGKey) -> Float[Array, " 2"]:
        if self.obs_noise == 0:  # static: deterministic tasks draw no random numbers
            return pos
        return pos + self.obs_noise * jr.normal(key, (2,))

    def reset(self, *, key: PRNGKey) -> EnvState:
        pos_key, obs_key = jr.split(key)
        pos = jnp.asarray(self.start, jnp.float32)
        if self.reset_noise > 0:
            pos = pos + jr.uniform(pos_key, (2,), minval=-1.0, maxval=1.0) * self.reset_noise
        zero = jnp.zeros((), jnp.float32)
        return EnvState(pos, self._observe(pos, obs_key), zero, zero, pos)

    def step(
        self, state: EnvState, action: Float[Array, " action_size"], *, key: PRNGKey
    ) -> EnvState:
        pos = state.physics
        target = jnp.clip(pos + 0.1 * jnp.clip(action, -1.0, 1.0), -1.0, 1.0)
        if self.walls:
            target = _block_walls(pos, target, _DEFAULT_WALLS)
        distance = jnp.linalg.norm(target - jnp.asarray(self.goal, jnp.float32))
        terminated = (distance < 0.05).astype(jnp.float32)
        return EnvState(target, self._observe(target, key), -distance, terminated, target)


def _block_walls(
    pos: Float[Array, " 2"], target: Float[Array, " 2"], walls: _Walls
) -> Float[Array, " 2"]:
    """Cancel the vertical part of a move that crosses a horizontal wall segment."""
    wy = jnp.asarray(walls.y, jnp.float32)
    x0 = jnp.asarray(walls.x_min, jnp.float32)
    x1 = jnp.asarray(walls.x_max, jnp.float32)
    below_before = pos[1] < wy
    below_after = target[1] < wy
    dy = target[1] - pos[1]
    frac = jnp.where(dy == 0, 0.0, (wy - pos[1]) / jnp.where(dy == 0, 1.0, dy))
    x_cross = pos[0] + frac * (target[0] - pos[0])
    crossed = (below_before != below_after) & (x_cross >= x0) & (x_cross <= x1)
    blocked = jnp.any(crossed)
    return jnp.where(blocked, jnp.stack([target[0], pos[1]]), target)
