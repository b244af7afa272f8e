"""MuJoCo Playground: the QD tasks' feet contacts against MuJoCo's own collision detection, the
environment laws on the tasks and the generic adapter, and bad input named (the `playground`
extra; skipped without it)."""

import importlib.util
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import jobs
from eqx_qd.testing import check_env


pytest.importorskip("mujoco_playground")

# The hopper, whose foot meets the floor amid its own body's contacts, is the hard case; the
# walker and the cheetah (99.9% and 100% of 1,000 steps) are left to `benchmarks/playground.py`
# for the suite's time (the walker keeps the laws below, the cheetah's names are looked up in
# `test_tasks_by_name`).
UNI = ("playground_hopper_uni",)
LENGTH = 40


def _benchmark():
    """`benchmarks/playground.py`, whose `replay` steps MuJoCo itself beside an MJX episode."""
    path = Path(__file__).parents[2] / "benchmarks" / "playground.py"
    spec = importlib.util.spec_from_file_location("playground_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("name", UNI)
def test_feet_contacts_are_mujocos_own(name):
    """The `*_uni` state descriptor (each foot on the floor) equals what MuJoCo's own step
    finds from the same state with the same controls, on fixed-seed episodes of random linear
    policies; where the float32 MJX step and MuJoCo's float64 one part, the foot's floor
    contact is within 3 mm of touching on one side or the other, or MuJoCo touched on a pair
    that MJX's collision budget left out (`benchmarks/log/playground.md`: over 1,000 steps per
    task, 99.0-100% agree, every other step within 1.8 mm)."""
    env = jobs.make_env(name, episode_length=LENGTH)
    assert isinstance(env, q.envs.PlaygroundQDEnv) and env.impl == "jax"
    replay = _benchmark().replay

    @eqx.filter_jit
    def play(key):
        policy_key, key = jr.split(key)
        weights = 0.5 * jr.normal(policy_key, (env.observation_size, env.action_size))
        return q.envs.rollout_states(env, lambda obs: jnp.tanh(obs @ weights), key=key)

    agree, steps, touched = 0, 0, []
    for seed in range(2):
        episode, states = play(jr.key(seed))
        ours = np.asarray(states.state_desc)[1:]
        valid = np.asarray(episode.valid) > 0
        actions = np.asarray(episode.transitions.action)
        for t, theirs, gaps, unseen in replay(env, states.physics.data, actions, valid):
            for foot in np.flatnonzero(ours[t] != theirs):
                assert gaps[foot] < 3e-3 or unseen, (seed, t, foot, gaps[foot])
            agree += int((ours[t] == theirs).all())
            steps += 1
            touched.append(theirs)
        descriptor = np.asarray(env.descriptor(states.state_desc[1:], episode.valid))
        np.testing.assert_allclose(descriptor, ours[valid].mean(axis=0), atol=1e-6)
    assert steps > LENGTH  # the episodes ran
    assert agree / steps >= 0.9, f"{agree} of {steps} steps agree"
    assert 0 < np.mean(touched) < 1  # feet touched and left the floor


@pytest.mark.slow
def test_playground_environments_keep_every_law():
    check_env(q.envs.PlaygroundQDEnv("playground_walker_uni", episode_length=8), max_examples=2)
    omni = jobs.make_env("playground_humanoid_omni", episode_length=5)
    assert omni.descriptor_names == ("final x", "final y") and omni.arena is not None
    assert omni.descriptor_bounds == ((-10.0, -10.0), (10.0, 10.0)) and omni.impl == "jax"
    check_env(
        q.envs.PlaygroundEnv("CartpoleBalance", episode_length=8, obs_noise=0.01), max_examples=2
    )


def test_bad_input_is_named(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown Playground QD task 'walker_uni'"):
        q.envs.PlaygroundQDEnv("walker_uni")
    with pytest.raises(ValueError, match="unknown MuJoCo Playground environment 'Walker'"):
        q.envs.PlaygroundEnv("Walker")
    with pytest.raises(ValueError, match="impl='warp' cannot give them"):
        q.envs.PlaygroundQDEnv("playground_walker_uni", impl="warp")
    with pytest.raises(ValueError, match="impl"):
        q.envs.PlaygroundEnv("WalkerRun", impl="cuda")


def test_menagerie_robots_say_where_to_find_them(tmp_path, monkeypatch):
    """Playground clones the Menagerie from GitHub when a locomotion robot loads; offline that
    fails, so a missing clone is an error that says what to pass, and a folder that does not
    hold the robot's model names the folder."""
    from mujoco_playground._src import mjx_env

    monkeypatch.delenv(q.envs.MENAGERIE_ENV_VAR, raising=False)
    monkeypatch.setattr(mjx_env, "MENAGERIE_PATH", mjx_env.epath.Path(tmp_path / "absent"))
    with pytest.raises(ValueError, match=r"menagerie=PATH or in \$EQX_QD_MENAGERIE"):
        q.envs.PlaygroundEnv("Go1JoystickFlatTerrain")
    with pytest.raises(ValueError, match="no such folder"):
        q.envs.PlaygroundEnv("Go1JoystickFlatTerrain", menagerie=tmp_path / "nowhere")
    monkeypatch.setenv(q.envs.MENAGERIE_ENV_VAR, str(tmp_path))  # a folder without the robot
    with pytest.raises(ValueError, match=f"from the Menagerie folder {tmp_path}"):
        q.envs.PlaygroundEnv("Go1JoystickFlatTerrain")
    assert not (tmp_path / "unitree_go1").exists()  # nothing was cloned or written there
    # Playground's own constant is put back after the load.
    assert str(mjx_env.MENAGERIE_PATH) == str(tmp_path / "absent")


def test_tasks_by_name():
    """The tasks by name, their feet found in the models (the humanoid's two capsules a foot,
    the cheetah's floor named "ground"); the walker and the omni task are built in the slow
    tier's law test."""
    assert set(q.envs.PLAYGROUND_QD_TASKS) <= set(jobs.ENVIRONMENTS.names("qd"))
    cheetah = jobs.make_env("playground_cheetah_uni", episode_length=5)
    assert cheetah.descriptor_names == ("bfoot contact", "ffoot contact")
    assert cheetah._floor == 0 and len(cheetah._feet) == 2  # the ground, then a geom a foot
    humanoid = q.envs.PlaygroundQDEnv("playground_humanoid_uni", episode_length=5)
    assert humanoid.descriptor_names == ("right_foot contact", "left_foot contact")
    assert humanoid.descriptor_size == 2 and humanoid.reward_offset == 0.0
    assert [len(foot) for foot in humanoid._feet] == [2, 2]
