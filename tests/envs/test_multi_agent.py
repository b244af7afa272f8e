import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q


def _play(env, policy, steps, key):
    """Python loop of jitted steps (small sizes): states and rewards per step."""
    step = eqx.filter_jit(lambda s, a, k: env.step(s, a, key=k))
    state = env.reset(key=key)
    out = []
    for k in jr.split(jr.fold_in(key, 1), steps):
        state = step(state, policy(state), k)
        out.append(state)
    return out


def _greedy(state):
    pos, targets = state.physics
    return (jnp.sign(targets - pos) + 1).astype(jnp.int32)


def test_line_targets_terminates_when_every_agent_is_home(getkey):
    env = q.envs.LineTargets(n=3, size=6)
    assert (env.num_agents, env.observation_size, env.action_size, env.discrete) == (3, 4, 3, True)
    states = _play(env, _greedy, 6, getkey())
    assert states[0].obs.shape == (3, 4) and states[0].reward.shape == (3,)
    done = [float(s.terminated) for s in states]
    assert 1.0 in done  # at most 5 moves apart on a line of 6 cells
    first = done.index(1.0)
    final = states[first]
    assert float(final.reward[0]) == pytest.approx(1.0)  # distance 0, arrival bonus
    assert np.all(np.asarray(final.reward) == np.asarray(final.reward)[0])  # a team reward
    assert bool(jnp.all(jnp.abs(final.obs[:, 0] - final.obs[:, 1]) < 1e-6))


def test_staying_put_is_penalised_and_truncated_by_the_time_limit(getkey):
    env = q.envs.TimeLimit(q.envs.LineTargets(n=2, size=8), max_steps=4)
    step = eqx.filter_jit(lambda s, a, k: env.step(s, a, key=k))
    state = env.reset(key=getkey())
    far = (jnp.array([0, 0], jnp.int32), jnp.array([5, 6], jnp.int32))  # nobody is home
    state = eqx.tree_at(lambda s: s.physics, state, far)
    states = []
    for _ in range(4):
        state = step(state, jnp.ones(2, jnp.int32), getkey())  # stay
        states.append(state)
    assert [float(s.truncated) for s in states] == [0.0, 0.0, 0.0, 1.0]
    assert [float(s.terminated) for s in states] == [0.0] * 4
    np.testing.assert_allclose([float(s.reward[0]) for s in states], [-(5 + 6) / 2 / 7] * 4)
    with pytest.raises(ValueError, match="max_steps"):
        q.envs.TimeLimit(q.envs.LineTargets(), max_steps=0)


def test_single_agent_view_is_the_one_agent_case(getkey):
    env = q.envs.SingleAgentView(q.envs.PointMaze(walls=False, length=5))
    assert (env.num_agents, env.observation_size, env.action_size, env.discrete) == (1, 2, 2, False)
    up = lambda s: jnp.array([[0.0, 1.0]], jnp.float32)
    states = _play(env, up, 5, getkey())
    assert states[0].obs.shape == (1, 2) and states[0].reward.shape == (1,)
    assert [float(s.truncated) for s in states] == [0.0, 0.0, 0.0, 0.0, 1.0]
    np.testing.assert_allclose(states[-1].obs[0], [0.0, -0.35], atol=1e-6)


def test_multi_agent_env_vmaps(getkey):
    env = q.envs.LineTargets(n=2, size=5)
    states = jax.vmap(lambda k: env.reset(key=k))(jr.split(getkey(), 16))
    nxt = jax.vmap(lambda s, k: env.step(s, jnp.full(2, 2, jnp.int32), key=k))(
        states, jr.split(getkey(), 16)
    )
    assert nxt.obs.shape == (16, 2, 3) and nxt.t.tolist() == [1] * 16


def test_autoreset_keeps_the_reached_observation_and_starts_afresh():
    # The one auto-reset of single-agent loops drives a multi-agent environment too.
    env = q.envs.TimeLimit(q.envs.LineTargets(n=2, size=4), 3)
    step = eqx.filter_jit(lambda s, a, k: q.envs.autoreset_step(env, s, a, key=k))
    # Agents at 0 and 3 with targets 3 and 0: staying put never arrives.
    pos, targets = jnp.asarray([0, 3], jnp.int32), jnp.asarray([3, 0], jnp.int32)
    start = q.envs.training_reset(env, key=jr.key(0))
    assert start.episode_return.shape == (2,)
    state = eqx.tree_at(lambda s: s.env_state.physics, start, (pos, targets))
    stay = jnp.ones((2,), jnp.int32)
    outs = []
    for k in range(3):
        outs.append(step(state, stay, jr.key(k)))
        state = outs[-1].state
    assert [float(o.truncated) for o in outs] == [0.0, 0.0, 1.0]
    assert [int(o.state.t) for o in outs] == [1, 2, 0]  # a fresh episode after the limit
    assert [int(o.state.env_state.t) for o in outs] == [1, 2, 0]
    last = outs[-1]
    assert float(last.terminated) == 0.0
    # next_obs is where the truncated step arrived (agents unmoved), not the reset state.
    np.testing.assert_allclose(last.next_obs[:, 0], [0.0, 1.0])
    np.testing.assert_allclose(last.reward, [-1.0, -1.0])
    # Each agent's return of the finished episode; NaN before it finished.
    assert np.isnan(np.asarray(outs[0].finished_return)).all()
    np.testing.assert_allclose(last.finished_return, [-3.0, -3.0])
    np.testing.assert_allclose(last.state.episode_return, [0.0, 0.0])
    # Reaching the targets terminates and resets too.
    home = eqx.tree_at(lambda s: s.env_state.physics, start, (targets, targets))
    arrived = step(home, stay, jr.key(9))
    assert float(arrived.terminated) == 1.0 and float(arrived.truncated) == 0.0
    assert int(arrived.state.t) == 0


def test_one_evaluator_plays_single_and_multi_agent_episodes_to_their_end():
    # A single-agent task (its time limit from episode_length) and a multi-agent one (from
    # TimeLimit) through the same evaluate_episodes; the cap counts as a truncation.
    maze = q.envs.PointMaze(length=7)
    stats = q.envs.evaluate_episodes(maze, lambda o, k: jnp.zeros(2), 3, key=jr.key(0))
    assert stats.returns.shape == (3,) and stats.lengths.tolist() == [7, 7, 7]
    assert stats.truncated.all() and not stats.terminated.any()
    team = q.envs.TimeLimit(q.envs.LineTargets(n=2, size=4), 5)
    stay = lambda o, k: jnp.ones((2,), jnp.int32)
    stats = q.envs.evaluate_episodes(team, stay, 4, key=jr.key(1))
    assert stats.returns.shape == (4, 2) and stats.final_rewards.shape == (4, 2)
    # An episode ends at its limit (5) or earlier when it starts on its targets.
    assert (stats.lengths <= 5).all() and (stats.terminated | stats.truncated).all()
    capped = q.envs.evaluate_episodes(
        q.envs.LineTargets(n=2, size=4), stay, 4, max_steps=3, key=jr.key(1)
    )
    assert (capped.lengths <= 3).all() and (capped.terminated | capped.truncated).all()


@pytest.mark.brax
@pytest.mark.parametrize(
    "name, agents, obs, act", [("walker2d_2x3", 2, 11, 3), ("ant_4x2", 4, 15, 2)]
)
def test_multi_agent_brax_shapes(name, agents, obs, act):
    env = q.envs.BraxMultiAgentEnv(name, episode_length=10)
    assert (env.num_agents, env.observation_size, env.action_size, env.discrete) == (
        agents, obs, act, False,
    )  # fmt: skip
    state = jax.eval_shape(lambda k: env.reset(key=k), jr.key(0))
    nxt = jax.eval_shape(
        lambda s, a: env.step(s, a, key=jr.key(0)), state, jnp.zeros((agents, act))
    )
    assert nxt.obs.shape == (agents, obs) and nxt.reward.shape == (agents,)


@pytest.mark.brax
def test_walker2d_2x3_splits_actuators_and_shares_the_reward():
    env = q.envs.BraxMultiAgentEnv("walker2d_2x3", episode_length=2)
    actions = jnp.asarray([[0.5, -0.3, 0.9], [-1.0, 0.2, 0.0]], jnp.float32)

    @jax.jit
    def run(key):
        start = env.reset(key=key)
        ma = env.step(start, actions, key=key)
        with q.envs._brax._brax_numerics():
            raw = env.brax_env.step(start.physics, actions.reshape(-1))
        return start, ma, env.step(ma, actions, key=key), raw

    start, ma, last, raw = run(jr.key(0))
    # Agent 0 drives the right leg (actuators 0-2), agent 1 the left one (3-5).
    np.testing.assert_allclose(ma.physics.pipeline_state.q, raw.pipeline_state.q, atol=1e-6)
    np.testing.assert_allclose(ma.reward, jnp.full(2, raw.reward), atol=1e-6)
    q_pos, q_vel = ma.physics.pipeline_state.q, ma.physics.pipeline_state.qd
    # Local observations: root height and angle, root velocities, then the agent's own joints.
    np.testing.assert_allclose(
        ma.obs[0], np.concatenate([q_pos[1:3], q_vel[:3], q_pos[3:6], q_vel[3:6]])
    )
    np.testing.assert_allclose(
        ma.obs[1], np.concatenate([q_pos[1:3], q_vel[:3], q_pos[6:9], q_vel[6:9]])
    )
    assert float(ma.truncated) == 0.0 and float(last.truncated) == 1.0 - float(last.terminated)
