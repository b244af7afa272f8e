"""Kheperax's mazes in pure JAX: a two-wheeled robot with three lasers and two bumpers in a
maze of segments (Grillotti and Cully's Kheperax 0.2.0, after libfastsim's Khepera robot),
written here without QDax or Kheperax.

The robot, its sensors and its moves compute what Kheperax computes, in the same float32
operations (`benchmarks/kheperax_maze.py` compares both on 1,000 random policies per map).
Kheperax's rules kept as they are:

- A move is cancelled when the robot *before* it touches a wall (its disk within `radius` of
  a segment): a robot pushed against a wall stays there for the rest of the episode.
- The bumpers read the robot before the move, the lasers the robot after it.
- The episode descriptor is the state descriptor of the last transition, the position
  *before* the last step (Kheperax's `get_final_state_desc` reads the transition's
  `state_desc`).
"""

import math
import typing

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as check
from .._custom_types import PRNGKey
from .._misc import f32
from ._base import AbstractQDEnv, Arena, EnvState


_Segment = tuple[float, float, float, float]


class KheperaxMap(typing.NamedTuple):
    """A maze: its inside walls as segments `(x0, y0, x1, y1)` in the unit square (the
    border is added), and the target of the target and final-distance tasks."""

    walls: tuple[_Segment, ...]
    target: tuple[float, float]
    target_radius: float


def _snake() -> tuple[_Segment, ...]:
    left = 0.2
    return (
        (left, 0.0, left, 0.8),
        (0.0, 0.2, 0.0, 1.0),
        (0.2, 0.0, 1.0, 0.0),
        *((left, y, 0.8, y) for y in (0.8, 0.4)),
        *((0.4, y, 1.0, y) for y in (0.6, 0.2)),
    )


KHEPERAX_MAPS: dict[str, KheperaxMap] = {
    # The walls near a border (x = 0 or y = 0) close the quad variants' mirrored copies.
    "standard": KheperaxMap(
        (
            (0.25, 0.25, 0.25, 0.75),
            (0.14, 0.45, 0.0, 0.65),
            (0.25, 0.75, 0.0, 0.8),
            (0.25, 0.75, 0.66, 0.875),
            (0.355, 0.0, 0.525, 0.185),
            (0.25, 0.5, 0.75, 0.215),
            (1.0, 0.25, 0.435, 0.55),
            (0.0, 0.8, 0.0, 1.0),
            (0.355, 0.0, 1.0, 0.0),
        ),
        (0.15, 0.9),
        0.05,
    ),
    "pointmaze": KheperaxMap(
        ((0.0, 0.25, 0.75, 0.25), (0.25, 0.6, 1.0, 0.6), (0.0, 0.25, 0.0, 1.0)),
        (0.9, 0.9),
        0.05,
    ),
    "snake": KheperaxMap(_snake(), (0.9, 0.1), 0.05),
}
"""Kheperax's three maps (its `maze_maps.py`): `standard` (the deceptive maze of novelty
search), `pointmaze` (two offset walls) and `snake` (a corridor folding four times)."""

KHEPERAX_TASKS = ("plain", "target", "final_distance")
LASER_ANGLES = (-math.pi / 4, 0.0, math.pi / 4)
START_ANGLE = math.pi / 2


def _norm(dx: Array, dy: Array) -> Array:
    return jnp.sqrt(dx * dx + dy * dy)


def _normalise(angle: Array) -> Array:
    return jnp.mod(angle + jnp.pi, 2 * jnp.pi) - jnp.pi


@typing.final
class KheperaxMaze(AbstractQDEnv):
    """Kheperax's maze tasks (Grillotti and Cully): the robot, a disk of radius 0.015, turns
    its two wheels (actions in `[-1, 1]`, times `action_scale`, clipped to it) and reads three
    lasers of range 0.2 (at -45, 0 and 45 degrees; a laser that hits nothing reads its range)
    and two bumpers (+1 when a wall touches the left or right front quarter, else -1):
    observations `(laser_1, laser_2, laser_3, left_bumper, right_bumper)`.

    `task`: `"plain"` (Kheperax's main task: reward minus the squared norm of the wheel
    speeds, 1,000 steps), `"target"` (reward minus the distance to the map's target; the
    episode ends inside it) or `"final_distance"` (-1 per step, and at the last step minus 100
    times the distance to the target, 0 inside it, minus 1). `quad`: the map mirrored into
    the four quadrants of `[-1, 1]^2`, the robot starting at the centre (Kheperax's
    `make_quad_config`). State descriptor: the position; episode descriptor: the position
    before the last step (Kheperax's, see the module).

    **Fields:** `maze` ("standard", "pointmaze", "snake": `KHEPERAX_MAPS`), `task`
    ("plain"), `quad` (False), `length` (1,000 steps), `action_scale` (0.025),
    `laser_noise` (Kheperax's sensor noise, std on the lasers), `wheel_noise` (std on the
    wheel speeds), `reset_noise` (the start drawn uniformly within this distance of
    Kheperax's, in each coordinate; 0: Kheperax's fixed start), `minus_one_out_of_range`
    (False: a laser that hits nothing reads its range; True: -1, Kheperax's
    `lasers_return_minus_one_if_out_of_range`, which its examples turn on).
    """

    maze: str = eqx.field(default="standard", static=True)
    task: str = eqx.field(default="plain", static=True)
    quad: bool = eqx.field(default=False, static=True)
    length: int = eqx.field(default=1000, static=True)
    action_scale: Float[Array, ""] = eqx.field(default=0.025, converter=f32)
    laser_noise: float = eqx.field(default=0.0, static=True)
    wheel_noise: float = eqx.field(default=0.0, static=True)
    reset_noise: float = eqx.field(default=0.0, static=True)
    minus_one_out_of_range: bool = eqx.field(default=False, static=True)

    radius = 0.015
    laser_range = 0.2

    def __check_init__(self):
        check.one_of("KheperaxMaze.maze", self.maze, tuple(KHEPERAX_MAPS))
        check.one_of("KheperaxMaze.task", self.task, KHEPERAX_TASKS)
        check.positive_int("KheperaxMaze.length", self.length)
        check.positive("KheperaxMaze.action_scale", self.action_scale)
        check.non_negative("KheperaxMaze.laser_noise", self.laser_noise)
        check.non_negative("KheperaxMaze.wheel_noise", self.wheel_noise)
        check.non_negative("KheperaxMaze.reset_noise", self.reset_noise)

    # ------------------------------------------------------------------ the map

    @property
    def limits(self) -> tuple[float, float]:
        """The square the maze fills, `(low, high)` on both axes."""
        return (-1.0, 1.0) if self.quad else (0.0, 1.0)

    def wall_segments(self) -> np.ndarray:
        """Every wall, `(num_walls, 4)` float32 rows `(x0, y0, x1, y1)`: the inside walls (in
        the quad variant mirrored as Kheperax orders them), then the border."""
        inside = np.asarray(KHEPERAX_MAPS[self.maze].walls, np.float32)
        if self.quad:  # Kheperax's flips: (none, x -> -x, y -> -y, both), walls in that order
            signs = [(1, 1), (-1, 1), (1, -1), (-1, -1)]
            inside = np.concatenate([inside * np.float32([sx, sy, sx, sy]) for sx, sy in signs])
        lo, hi = self.limits
        border = np.asarray(
            [(lo, lo, hi, lo), (lo, lo, lo, hi), (lo, hi, hi, hi), (hi, hi, hi, lo)], np.float32
        )
        return np.concatenate([inside, border])

    @property
    def start(self) -> tuple[float, float]:
        """Where the robot starts (facing up): `(0.15, 0.15)`, the centre in the quad
        variant."""
        return (0.0, 0.0) if self.quad else (0.15, 0.15)

    @property
    def target(self) -> tuple[float, float]:
        """The map's target (the target and final-distance tasks' goal)."""
        return KHEPERAX_MAPS[self.maze].target

    # ------------------------------------------------------------------ the contract

    @property
    def descriptor_names(self) -> tuple[str, ...]:
        return ("final x", "final y")

    @property
    def arena(self) -> Arena:
        walls = tuple(tuple(float(v) for v in row) for row in self.wall_segments())
        goal = None if self.task == "plain" else self.target
        return Arena(walls, 0.0, goal)  # type: ignore[arg-type]

    @property
    def observation_size(self) -> int:
        return len(LASER_ANGLES) + 2

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
        lo, hi = self.limits
        return (lo, lo), (hi, hi)

    @property
    def reward_offset(self) -> float:
        """The most a step can take off: `2 * action_scale^2` (plain), the square's diagonal
        (target), `1 + 100 *` the diagonal (final distance)."""
        lo, hi = self.limits
        diagonal = math.sqrt(2.0) * (hi - lo)
        if self.task == "plain":
            return 2.0 * float(self.action_scale) ** 2
        return diagonal if self.task == "target" else 1.0 + 100.0 * diagonal

    def descriptor(
        self,
        state_descs: Float[Array, "time state_desc_dim"],
        valid: Float[Array, " time"],
    ) -> Float[Array, " descriptor_size"]:
        """The position before the last valid step (the start if the first step was the
        last), as Kheperax reads its episodes."""
        last = jnp.sum(valid).astype(jnp.int32) - 1
        before = state_descs[jnp.maximum(last - 1, 0)]
        return jnp.where(last > 0, before, jnp.asarray(self.start, jnp.float32))

    # ------------------------------------------------------------------ the robot

    def _projection(self, x, y, walls):
        """The closest point of each wall to `(x, y)` (Kheperax's projection on a segment)."""
        x3, y3, x4, y4 = walls[:, 0], walls[:, 1], walls[:, 2], walls[:, 3]
        u = ((x - x3) * (x4 - x3) + (y - y3) * (y4 - y3)) / ((x4 - x3) ** 2 + (y4 - y3) ** 2)
        u = jnp.clip(u, 0, 1)
        return x3 + u * (x4 - x3), y3 + u * (y4 - y3)

    def _collides(self, x, y, walls) -> Array:
        px, py = self._projection(x, y, walls)
        return jnp.any(_norm(px - x, py - y) <= self.radius)

    def _bumpers(self, x, y, angle, walls) -> Float[Array, "2"]:
        px, py = self._projection(x, y, walls)
        vx, vy = px - x, py - y
        diff = jnp.mod(jnp.arctan2(vy, vx) - angle + jnp.pi, 2 * jnp.pi) - jnp.pi
        near = _norm(vx, vy) < self.radius
        left = (diff <= 0.0) & (diff > -jnp.pi / 2) & near
        right = (diff >= 0.0) & (diff < jnp.pi / 2) & near
        measures = jnp.stack([jnp.where(left, 1.0, -1.0), jnp.where(right, 1.0, -1.0)], -1)
        return jnp.max(measures, axis=0)

    def _lasers(self, x, y, angle, walls, key: PRNGKey) -> Float[Array, " lasers"]:
        """Each laser's distance to the nearest wall it crosses (Kheperax's segment
        intersection: strict orientation tests, then the lines' crossing point)."""
        angles = angle + jnp.asarray(LASER_ANGLES, jnp.float32)
        r = self.laser_range
        x1, y1 = x, y
        x2 = (x + r * jnp.cos(angles))[:, None]
        y2 = (y + r * jnp.sin(angles))[:, None]
        x3, y3, x4, y4 = (walls[None, :, i] for i in range(4))

        def ccw(ax, ay, bx, by, cx, cy):
            return (cy - ay) * (bx - ax) > (by - ay) * (cx - ax)

        crosses = (ccw(x1, y1, x3, y3, x4, y4) != ccw(x2, y2, x3, y3, x4, y4)) & (
            ccw(x1, y1, x2, y2, x3, y3) != ccw(x1, y1, x2, y2, x4, y4)
        )
        d = (x1 - x2) * (y3 - y4) - (y1 - y2) * (x3 - x4)
        ix = ((x1 * y2 - y1 * x2) * (x3 - x4) - (x1 - x2) * (x3 * y4 - y3 * x4)) / d
        iy = ((x1 * y2 - y1 * x2) * (y3 - y4) - (y1 - y2) * (x3 * y4 - y3 * x4)) / d
        ix, iy = jnp.where(crosses, ix, jnp.inf), jnp.where(crosses, iy, jnp.inf)
        measure = jnp.min(_norm(x - ix, y - iy), axis=1)
        if self.laser_noise > 0:  # static: the noiseless task draws nothing
            measure = measure + jr.normal(key, measure.shape) * self.laser_noise
        measure = jnp.maximum(measure, 0.0)
        missed = -1.0 if self.minus_one_out_of_range else r
        measure = jnp.where(jnp.isinf(measure), missed, measure)
        return jnp.where(measure > r, missed, measure)

    def _move(self, x, y, angle, d_l, d_r):
        """Kheperax's differential drive: an arc of the wheels' turn, or a straight line when
        the turn is below 1e-10."""
        wheels = 2 * self.radius
        alpha = (d_r - d_l) / wheels
        # The arc, rotated into the robot's frame as Kheperax does it.
        r = (d_l / alpha) + (wheels / 2)
        ax, ay = (jnp.cos(alpha) - 1) * r, jnp.sin(alpha) * r
        turn = angle - jnp.pi / 2
        arc_x = ax * jnp.cos(turn) - ay * jnp.sin(turn)
        arc_y = ax * jnp.sin(turn) + ay * jnp.cos(turn)
        arc_angle = _normalise(alpha)
        line_x, line_y = d_l * jnp.cos(angle), d_l * jnp.sin(angle)
        arcs = jnp.abs(alpha) > 1e-10
        dx, dy = jnp.where(arcs, arc_x, line_x), jnp.where(arcs, arc_y, line_y)
        d_angle = jnp.where(arcs, arc_angle, 0.0)
        return x + dx, y + dy, _normalise(angle + d_angle)

    def _observe(self, x, y, angle, bumpers, walls, key: PRNGKey) -> Float[Array, " 5"]:
        return jnp.concatenate([self._lasers(x, y, angle, walls, key), bumpers])

    def reset(self, *, key: PRNGKey) -> EnvState:
        start_key, obs_key = jr.split(key)
        walls = jnp.asarray(self.wall_segments())
        x, y = (jnp.float32(v) for v in self.start)
        if self.reset_noise > 0:
            shift = jr.uniform(start_key, (2,), minval=-1.0, maxval=1.0) * self.reset_noise
            x, y = x + shift[0], y + shift[1]
        angle = jnp.float32(START_ANGLE)
        obs = self._observe(x, y, angle, self._bumpers(x, y, angle, walls), walls, obs_key)
        zero = jnp.zeros((), jnp.float32)
        physics = (jnp.stack([x, y, angle]), jnp.zeros((), jnp.int32))
        return EnvState(physics, obs, zero, zero, jnp.stack([x, y]))

    def step(
        self, state: EnvState, action: Float[Array, " action_size"], *, key: PRNGKey
    ) -> EnvState:
        wheel_key, obs_key = jr.split(key)
        walls = jnp.asarray(self.wall_segments())
        posture, t = state.physics
        x, y, angle = posture[0], posture[1], posture[2]
        scale = self.action_scale
        speeds = jnp.clip(action, -1.0, 1.0) * scale
        if self.wheel_noise > 0:
            speeds = speeds + jr.normal(wheel_key, speeds.shape) * self.wheel_noise
        speeds = jnp.clip(speeds, -scale, scale)
        nx, ny, na = self._move(x, y, angle, speeds[0], speeds[1])
        stuck = self._collides(x, y, walls)
        nx, ny, na = jnp.where(stuck, x, nx), jnp.where(stuck, y, ny), jnp.where(stuck, angle, na)
        bumpers = self._bumpers(x, y, angle, walls)
        obs = self._observe(nx, ny, na, bumpers, walls, obs_key)
        terminated = jnp.zeros((), jnp.float32)
        if self.task == "plain":
            reward = -1.0 * jnp.power(_norm(speeds[0], speeds[1]), 2.0)
        else:
            tx, ty = self.target
            distance = _norm(tx - nx, ty - ny)
            inside = distance < KHEPERAX_MAPS[self.maze].target_radius
            terminated = inside.astype(jnp.float32)
            if self.task == "target":
                reward = -1.0 * distance
            else:  # the distance counts at the episode's last step only
                last = inside | (t + 1 >= self.length)
                reward = jnp.where(last, jnp.where(inside, 0.0, -100 * distance) - 1, -1.0)
        physics = (jnp.stack([nx, ny, na]), t + 1)
        return EnvState(physics, obs, reward, terminated, jnp.stack([nx, ny]))
