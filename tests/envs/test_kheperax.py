"""Kheperax's mazes: equal to Kheperax 0.2.0 on a committed sample of its outputs
(`benchmarks/kheperax_maze.py` wrote it with Kheperax, and compares 1,000 policies per map), the
robot's rules against direct computations, and the tasks by name."""

import math
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import jobs


SAMPLE = Path(__file__).parent / "data" / "kheperax_sample.npz"
SAMPLED = ("standard", "snake_target", "pointmaze_quad_final_distance")
LENGTH = 100  # the sample's episode length


class _Policy(eqx.Module):  # Kheperax's MLP, the same product (x @ kernel + bias)
    kernels: tuple
    biases: tuple

    def __call__(self, obs):
        h = jax.nn.relu(obs @ self.kernels[0] + self.biases[0])
        return jnp.tanh(h @ self.kernels[1] + self.biases[1])


def _env(name: str, **more) -> q.envs.KheperaxMaze:
    parts = name.split("_")
    quad = len(parts) > 1 and parts[1] == "quad"
    kind = "_".join(parts[2 if quad else 1 :]) or "plain"
    return q.envs.KheperaxMaze(parts[0], kind, quad=quad, **more)


@pytest.mark.parametrize("name", SAMPLED)
def test_equal_to_kheperax_on_its_sample(name):
    """Kheperax's own random policies (its MLP, its init) on three of its tasks: the same
    fitnesses and final positions."""
    data = np.load(SAMPLE)
    policies = _Policy(
        tuple(jnp.asarray(data[f"{name}/kernel_{i}"]) for i in range(2)),
        tuple(jnp.asarray(data[f"{name}/bias_{i}"]) for i in range(2)),
    )
    scorer = q.PolicyScorer(_env(name, length=LENGTH))
    f, d, _ = eqx.filter_jit(lambda s, p: s(p, key=jr.key(2)))(scorer, policies)
    np.testing.assert_allclose(f, data[f"{name}/fitness"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d, data[f"{name}/descriptors"], rtol=1e-5, atol=1e-5)


def test_the_sample_covers_every_map_task_and_layout():
    names = {k.split("/")[0] for k in np.load(SAMPLE).files}
    assert names == set(SAMPLED)
    mazes = {n.split("_")[0] for n in names}
    assert mazes == set(q.envs.KHEPERAX_MAPS)


@eqx.filter_jit
def _step(env, state, action):
    return env.step(state, action, key=jr.key(1))


def _drive(env, actions, state=None):
    state = env.reset(key=jr.key(0)) if state is None else state
    states = []
    for a in actions:
        state = _step(env, state, jnp.asarray(a, jnp.float32))
        states.append(state)
    return states


def test_the_robot_drives_straight_and_turns_on_the_spot():
    env = q.envs.KheperaxMaze("pointmaze", quad=True)  # the centre: room in every direction
    (state,) = _drive(env, [[1.0, 1.0]])
    x, y, angle = np.asarray(state.physics[0])
    assert (x, y) == pytest.approx((0.0, 0.025), abs=1e-7) and angle == pytest.approx(math.pi / 2)
    assert float(state.reward) == pytest.approx(-2 * 0.025**2, rel=1e-5)
    # Opposite wheels: a turn of 2 * 0.025 / 0.03 radians about the robot's centre.
    (state,) = _drive(env, [[-1.0, 1.0]])
    x, y, angle = np.asarray(state.physics[0])
    assert (x, y) == pytest.approx((0.0, 0.0), abs=1e-6)
    turned = (math.pi / 2 + 0.05 / 0.03 + math.pi) % (2 * math.pi) - math.pi
    assert angle == pytest.approx(turned, abs=1e-5)


def test_lasers_and_bumpers_read_the_walls():
    env = q.envs.KheperaxMaze("pointmaze")
    obs = np.asarray(env.reset(key=jr.key(0)).obs)
    # From (0.15, 0.15) facing up, the wall y = 0.25 ahead: the lasers at 45 degrees right,
    # ahead and 45 degrees left meet it after 0.1 * sqrt(2), 0.1 and 0.1 * sqrt(2).
    assert obs[:3] == pytest.approx([0.1 * math.sqrt(2), 0.1, 0.1 * math.sqrt(2)], abs=1e-6)
    assert obs[3:].tolist() == [-1.0, -1.0]
    # A quarter turn to the left (wheels apart by pi / 2 * 0.03), then half speed ahead into
    # the border x = 0, 0.0125 a step.
    wheel = (math.pi / 2) * 0.03 / 2 / 0.025
    (turned,) = _drive(env, [[-wheel, wheel]])
    assert abs(float(turned.physics[0][2])) == pytest.approx(math.pi, abs=1e-5)
    assert float(turned.obs[1]) == pytest.approx(0.15, abs=1e-5)  # the border, ahead
    states = _drive(env, [[0.5, 0.5]] * 20, turned)
    x = [float(s.physics[0][0]) for s in states]
    # Kheperax's rule: the move that brings the robot within its radius of the wall is made;
    # from there it moves no more.
    assert x[10] == pytest.approx(0.0125, abs=1e-6) and x[-1] == x[10]
    # Head on: the wall dead ahead, so one bumper or both (the side is the rounding's).
    assert np.asarray(states[-1].obs)[3:].max() == 1.0
    assert np.asarray(states[8].obs)[3:].tolist() == [-1.0, -1.0]  # still clear


def test_a_laser_that_hits_nothing_reads_its_range_or_minus_one():
    far = q.envs.KheperaxMaze("pointmaze", quad=True)  # the centre: every wall beyond 0.2
    assert np.asarray(far.reset(key=jr.key(0)).obs)[:3].tolist() == pytest.approx([0.2] * 3)
    blind = q.envs.KheperaxMaze("pointmaze", quad=True, minus_one_out_of_range=True)
    assert np.asarray(blind.reset(key=jr.key(0)).obs)[:3].tolist() == [-1.0] * 3


def test_the_descriptor_is_the_position_before_the_last_step():
    env = q.envs.KheperaxMaze(length=5)
    descs = jnp.asarray(np.arange(10, dtype=np.float32).reshape(5, 2))
    assert env.descriptor(descs, jnp.ones(5)).tolist() == [6.0, 7.0]
    assert env.descriptor(descs, jnp.asarray([1.0, 1.0, 0, 0, 0])).tolist() == [0.0, 1.0]
    start = env.descriptor(descs, jnp.asarray([1.0, 0, 0, 0, 0]))
    assert start.tolist() == pytest.approx([0.15, 0.15])


def test_the_target_tasks_end_in_the_target():
    env = q.envs.KheperaxMaze("pointmaze", "final_distance", length=3)
    state = env.reset(key=jr.key(0))
    near = q.envs.EnvState(
        (jnp.asarray([0.9, 0.86, math.pi / 2], jnp.float32), jnp.int32(0)), state.obs,
        state.reward, state.terminated, state.state_desc,
    )  # fmt: skip
    (inside,) = _drive(env, [[1.0, 1.0]], near)
    assert float(inside.terminated) == 1.0 and float(inside.reward) == -1.0  # 0 - 1
    (outside,) = _drive(env, [[0.0, 0.0]], state)
    assert float(outside.terminated) == 0.0 and float(outside.reward) == -1.0  # not the last
    *_, last = _drive(env, [[0.0, 0.0]] * 3, state)
    d = math.dist((0.15, 0.15), (0.9, 0.9))
    assert float(last.reward) == pytest.approx(-100 * d - 1, rel=1e-5)


def test_the_quad_maze_mirrors_the_map_into_four_quadrants():
    env = q.envs.KheperaxMaze("snake", quad=True)
    walls = env.wall_segments()
    inside = np.asarray(q.envs.KHEPERAX_MAPS["snake"].walls, np.float32)
    n = len(inside)
    assert walls.shape == (4 * n + 4, 4)
    np.testing.assert_array_equal(walls[n : 2 * n, [0, 2]], -inside[:, [0, 2]])
    np.testing.assert_array_equal(walls[2 * n : 3 * n, [1, 3]], -inside[:, [1, 3]])
    assert env.descriptor_bounds == ((-1.0, -1.0), (1.0, 1.0)) and env.start == (0.0, 0.0)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="KheperaxMaze.maze must be one of"):
        q.envs.KheperaxMaze("labyrinth")
    with pytest.raises(ValueError, match="KheperaxMaze.task"):
        q.envs.KheperaxMaze("standard", "fastest")
    with pytest.raises(ValueError, match="KheperaxMaze.laser_noise"):
        q.envs.KheperaxMaze(laser_noise=-1.0)


def test_every_kheperax_task_is_registered():
    names = [n for n in jobs.ENVIRONMENTS.names("qd") if n.startswith("kheperax")]
    assert len(names) == 3 * 3 * 2
    env = jobs.make_env("kheperax_quad_snake_final_distance", episode_length=50)
    assert (env.maze, env.task, env.quad, env.episode_length) == (
        "snake", "final_distance", True, 50,
    )  # fmt: skip


def test_the_maze_is_drawn_with_its_walls_and_target():
    from eqx_qd import plotting

    env = q.envs.KheperaxMaze(task="target")
    path = np.stack([np.linspace(0.15, 0.2, 5), np.full(5, 0.15)], axis=-1)
    fig = plotting.plot_trajectories(env, path)
    walls = [line for line in fig.axes[0].lines if line.get_linewidth() == 3]
    assert len(walls) == len(env.wall_segments()) == 13
    assert any(line.get_label() == "goal" for line in fig.axes[0].lines)
