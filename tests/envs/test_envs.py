import base64
import json
import re
import typing
import zlib

import default_emitters
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import jobs, plotting
from eqx_qd._misc import batch_size_of
from eqx_qd.envs import _brax


def _constant_policy(action):
    class Constant(q.rl.AbstractPolicy):
        value: jax.Array

        def __call__(self, obs):
            return self.value

    return Constant(jnp.asarray(action, jnp.float32))


@pytest.fixture(scope="module")
def jit_rollout():
    return eqx.filter_jit(lambda env, policy, key: q.envs.rollout(env, policy, key=key))


def test_point_maze_walls_block_the_straight_path(jit_rollout, getkey):
    up = _constant_policy([0.0, 1.0])
    walled = jit_rollout(q.envs.PointMaze(), up, getkey())
    open_ = jit_rollout(q.envs.PointMaze(walls=False), up, getkey())
    # Blocked below the lower wall (y = -0.35) for the whole episode.
    assert float(jnp.max(walled.transitions.next_obs[:, 1])) < -0.35
    assert float(walled.lengths) == 100
    assert float(walled.transitions.truncated[-1]) == 1.0
    # Without walls the point reaches the goal and the episode terminates early.
    assert float(open_.lengths) < 20
    assert float(jnp.sum(open_.transitions.terminated * open_.valid)) == 1.0
    assert float(jnp.sum(open_.transitions.truncated)) == 0.0
    assert float(open_.returns) > float(walled.returns)


def test_rollout_masks_steps_after_termination(jit_rollout, getkey):
    ep = jit_rollout(q.envs.PointMaze(walls=False), _constant_policy([0.0, 1.0]), getkey())
    n = int(ep.lengths)
    valid = np.asarray(ep.valid)
    assert valid[:n].all() and not valid[n:].any()
    rewards = np.asarray(ep.transitions.reward)
    assert (rewards[n:] == 0).all()
    np.testing.assert_allclose(float(ep.returns), rewards[:n].sum(), rtol=1e-6)
    env = q.envs.PointMaze(walls=False)
    desc = env.descriptor(ep.transitions.next_state_desc, ep.valid)
    np.testing.assert_allclose(desc, ep.transitions.next_obs[n - 1], rtol=1e-6)


def test_noise_options_are_stochastic(jit_rollout):
    up = _constant_policy([0.3, 1.0])
    noisy = q.envs.PointMaze(reset_noise=0.05, obs_noise=0.01)
    a = jit_rollout(noisy, up, jr.key(0))
    b = jit_rollout(noisy, up, jr.key(1))
    assert not np.allclose(a.transitions.obs, b.transitions.obs)
    start = np.asarray(a.transitions.state_desc[0])
    assert np.all(np.abs(start - np.array([0.0, -0.85])) <= 0.05 + 1e-6)
    with pytest.raises(ValueError, match="obs_noise"):
        q.envs.PointMaze(obs_noise=-1.0)


def test_autoreset_truncates_and_restarts(getkey):
    env = q.envs.PointMaze(length=5)
    step = eqx.filter_jit(lambda s, a, k: q.envs.autoreset_step(env, s, a, key=k))
    state = q.envs.training_reset(env, key=getkey())
    rewards = []
    for t in range(5):
        out = step(state, jnp.array([1.0, 0.0]), getkey())
        rewards.append(float(out.reward))
        state = out.state
    assert float(out.truncated) == 1.0 and float(out.terminated) == 0.0
    np.testing.assert_allclose(float(out.finished_return), sum(rewards), rtol=1e-5)
    assert int(state.t) == 0 and float(state.episode_return) == 0.0
    np.testing.assert_allclose(state.env_state.obs, [0.0, -0.85])


def test_same_start_restarts_each_environment_where_it_first_began(getkey):
    """QDax's training environments (brax's `AutoResetWrapper`): each sub-environment draws a
    random first state and every later episode starts there again; without `same_start`,
    each episode draws a new one."""
    env = q.envs.PointMaze(length=3, reset_noise=0.05, obs_noise=0.01)
    keys = jr.split(getkey(), 4)
    kept = jax.vmap(lambda k: q.envs.training_reset(env, same_start=True, key=k))(keys)
    fresh = jax.vmap(lambda k: q.envs.training_reset(env, key=k))(keys)
    assert fresh.first is None
    firsts = np.asarray(kept.first.physics)
    assert len({tuple(p) for p in firsts.tolist()}) == 4  # one random start each
    step = eqx.filter_jit(
        jax.vmap(lambda s, a, k: q.envs.autoreset_step(env, s, a, key=k), in_axes=(0, None, 0))
    )
    for episode in range(2):
        for t in range(3):
            k = jr.split(getkey(), 4)
            out_kept = step(kept, jnp.array([1.0, 1.0]), k)
            out_fresh = step(fresh, jnp.array([1.0, 1.0]), k)
            kept, fresh = out_kept.state, out_fresh.state
        np.testing.assert_array_equal(np.asarray(out_kept.truncated), 1.0)
        # Restarted: the first state, bit for bit (its noisy observation included).
        for a, b in zip(jax.tree.leaves(kept.env_state), jax.tree.leaves(kept.first)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(np.asarray(kept.first.physics), firsts)
        assert not np.allclose(np.asarray(fresh.env_state.physics), firsts)


def test_actions_of_the_wrong_shape_are_named_by_every_driver(getkey):
    maze = q.envs.PointMaze(length=5)
    start = q.envs.training_reset(maze, key=getkey())
    message = r"autoreset_step: action must have shape \(2,\), got \(3,\)"
    with pytest.raises(ValueError, match=message):
        q.envs.autoreset_step(maze, start, jnp.zeros(3), key=getkey())
    with pytest.raises(ValueError, match=r"rollout: the policy's action must have shape \(2,\)"):
        q.envs.rollout(maze, lambda o: jnp.zeros(3), key=getkey())
    with pytest.raises(ValueError, match=r"rollout: the policy's action must have shape \(2,\)"):
        q.envs.rollout_states(maze, lambda o: jnp.zeros(3), key=getkey())
    team = q.envs.TimeLimit(q.envs.LineTargets(n=2, size=4), 5)
    assert team.action_shape == (2,) and q.envs.SingleAgentView(maze).action_shape == (1, 2)
    message = r"evaluate_episodes: the policy's action must have shape \(2,\), got \(\)"
    with pytest.raises(ValueError, match=message):
        q.envs.evaluate_episodes(team, lambda o, k: jnp.int32(1), 2, key=getkey())
    # A scorer's agent must fit its environment, and its environment must define descriptors.
    agent = q.rl.TD3(observation_size=3, action_size=2)
    message = "PolicyScorer: the agent's observation_size is 3 but the environment's is 2"
    with pytest.raises(ValueError, match=message):
        q.PolicyScorer(maze, agent=agent)
    # (Under pytest, jaxtyping's check of the field's annotation speaks first.)
    with pytest.raises(TypeError, match="AbstractQDEnv"):
        q.PolicyScorer(team)


@typing.final
class Drift(q.envs.AbstractQDEnv):
    """A user-defined 1-D environment: the action is added to the position."""

    @property
    def observation_size(self):
        return 1

    @property
    def action_size(self):
        return 1

    @property
    def state_descriptor_size(self):
        return 1

    @property
    def descriptor_size(self):
        return 1

    @property
    def episode_length(self):
        return 4

    @property
    def descriptor_bounds(self):
        return (-4.0,), (4.0,)

    @property
    def reward_offset(self):
        return 1.0

    @property
    def descriptor_names(self):
        return ("final position",)

    @property
    def arena(self):
        return None

    def descriptor(self, state_descs, valid):
        return q.envs.final_descriptor(state_descs, valid)

    def reset(self, *, key):
        zero = jnp.zeros((), jnp.float32)
        return q.envs.EnvState(jnp.zeros(1), jnp.zeros(1), zero, zero, jnp.zeros(1))

    def step(self, state, action, *, key):
        pos = state.physics + action
        zero = jnp.zeros((), jnp.float32)
        return q.envs.EnvState(pos, pos, -jnp.abs(pos[0]), zero, pos)


def test_user_environment_works_with_the_scorer(getkey):
    scorer = q.PolicyScorer(Drift())
    policies = eqx.filter_vmap(_constant_policy)(jnp.array([[0.5], [-1.0], [0.0]]))
    fitnesses, descriptors, extra = eqx.filter_jit(lambda p, k: scorer(p, key=k))(
        policies, getkey()
    )
    np.testing.assert_allclose(descriptors[:, 0], [2.0, -4.0, 0.0])
    np.testing.assert_allclose(fitnesses, [-5.0, -10.0, 0.0])
    assert extra.episodes.valid.shape == (3, 4)
    assert scorer.qd_offset == 4.0


def _rollout_of_each(scorer, policies, key):
    """`rollout` vmapped over the genotypes, each with its key: what scoring plays."""

    def play(genotype, k):
        policy = genotype
        if scorer.agent is not None:
            policy = lambda obs: scorer.agent.act(genotype, obs, key=k, deterministic=True)
        return q.envs.rollout(scorer.env, policy, key=k)

    return eqx.filter_vmap(play)(policies, jr.split(key, batch_size_of(policies)))


def _scoring_case(task, key):
    """The environment, 5 genotypes and the agent (or none) of each case below."""
    if task == "noisy maze":  # open and noisy (keys matter); the first two head for the goal
        env = q.envs.PointMaze(walls=False, length=30, reset_noise=0.01, obs_noise=0.01)
        actions = jnp.array([[0.0, 1.0], [0.1, 1.0], [1.0, 0.0], [-1.0, 0.2], [0.0, -1.0]])
        return env, eqx.filter_vmap(_constant_policy)(actions), None
    if task == "hopper_uni":
        env = q.envs.BraxQDEnv("hopper_uni", episode_length=8)
        size = (env.observation_size, env.action_size)
        make = lambda k: q.rl.DeterministicPolicy(*size, (8,), key=k)
        return env, eqx.filter_vmap(make)(jr.split(key, 5)), None
    env = q.envs.PointMaze(length=12)
    agent = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(8,), critic_hidden=(8,),
                     minibatch_size=4, num_envs=1, buffer_size=8)  # fmt: skip
    return env, eqx.filter_vmap(lambda k: agent.init(key=k))(jr.split(key, 5)), agent


@pytest.mark.parametrize(
    "task", ["noisy maze", pytest.param("hopper_uni", marks=pytest.mark.brax), "agent"]
)
def test_scoring_plays_each_genotype_as_rollout_does(task, getkey):
    """The scorer's time loop runs outside the batch (one scan of the batched step): its
    episodes are `rollout`'s of each genotype with its key, bit for bit under XLA's default
    fusion code generator: with noise and episodes that end early (the maze), brax's
    physics, an agent's training states. (Under the older generator, the package's own,
    brax's physics agrees to float rounding, not bit for bit.)"""
    env, policies, agent = _scoring_case(task, getkey())
    scorer = q.PolicyScorer(env, agent=agent)
    key = getkey()
    ours = default_emitters.call(lambda p, k: scorer.episodes(p, key=k), policies, key)
    each = default_emitters.call(lambda p, k: _rollout_of_each(scorer, p, k), policies, key)
    assert ours.valid.shape == (5, env.episode_length)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(each), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    if task == "noisy maze":  # not all the same episode, and some ended before the limit
        assert len(set(np.asarray(ours.returns).tolist())) == 5
        assert float(jnp.min(ours.lengths)) < env.episode_length


def test_reevaluation_statistics(getkey):
    env = q.envs.PointMaze(walls=False, obs_noise=0.0, reset_noise=0.1)
    scorer = q.PolicyScorer(env)
    policies = eqx.filter_vmap(_constant_policy)(jnp.array([[0.0, 1.0], [1.0, 0.0]]))
    re = eqx.filter_jit(lambda p, k: q.reevaluate(scorer, p, 10, key=k))(policies, getkey())
    assert re.fitnesses.shape == (10, 2) and re.descriptors.shape == (10, 2, 2)
    assert bool(jnp.all(re.fitness_std > 0))  # the start position is random
    np.testing.assert_allclose(re.fitness_mean, jnp.mean(re.fitnesses, axis=0))
    with pytest.raises(ValueError, match="num_evaluations"):
        q.reevaluate(scorer, policies, 0, key=getkey())


def test_score_noise_adds_its_standard_deviations_and_keeps_the_episodes(getkey):
    # On a deterministic maze every score is the same episode's; the scorer's noise is then
    # exactly a gaussian of its standard deviation on the return and on each descriptor
    # coordinate, and the episodes (their transitions) are the noiseless scorer's.
    env = q.envs.PointMaze(walls=False)
    policies = eqx.filter_vmap(_constant_policy)(jnp.tile(jnp.array([[0.3, 0.7]]), (400, 1)))
    key = getkey()
    plain_f, plain_d, plain_x = q.PolicyScorer(env)(policies, key=key)
    noisy = q.PolicyScorer(env, fitness_noise=0.5, descriptor_noise=0.05)
    f, d, x = eqx.filter_jit(noisy.__call__)(policies, key=key)
    np.testing.assert_array_equal(x.episodes.returns, plain_x.episodes.returns)
    assert float(jnp.std(f - plain_f)) == pytest.approx(0.5, rel=0.1)
    assert float(jnp.std(d - plain_d)) == pytest.approx(0.05, rel=0.1)
    assert abs(float(jnp.mean(f - plain_f))) < 0.1
    np.testing.assert_array_equal(
        q.PolicyScorer(env, fitness_noise=0.0)(policies, key=key)[0], plain_f
    )
    with pytest.raises(ValueError, match="fitness_noise"):
        q.PolicyScorer(env, fitness_noise=-1.0)
    with pytest.raises(ValueError, match="contradict each other"):
        jobs.PGAMEConfig(deterministic=True, descriptor_noise=0.1)


def test_a_sampled_policy_scorer_estimates_over_its_episodes(getkey):
    # Sample i is the one-episode scorer's call with jr.split(key, n)[i]; the fitness and
    # descriptor are the samples' estimates; the extra holds the episodes side by side.
    env = q.envs.PointMaze(walls=False, reset_noise=0.1)
    policies = eqx.filter_vmap(_constant_policy)(jnp.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]]))
    key, n = getkey(), 4
    single = q.PolicyScorer(env)
    each = [single(policies, key=k) for k in jr.split(key, n)]
    for estimator, reduce in (("mean", np.mean), ("median", np.median)):
        sampled = q.PolicyScorer(env, num_samples=n, estimator=estimator)
        f, d, extra = sampled(policies, key=key)
        want_f = reduce(np.stack([np.asarray(e[0]) for e in each]), axis=0)
        want_d = reduce(np.stack([np.asarray(e[1]) for e in each]), axis=0)
        np.testing.assert_allclose(f, want_f, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(d, want_d, rtol=1e-5, atol=1e-6)
    assert extra.episodes.valid.shape == (3, n * env.episode_length)
    np.testing.assert_array_equal(
        extra.episodes.transitions.reward[:, : env.episode_length],
        each[0][2].episodes.transitions.reward,
    )
    assert sampled.one_sample.num_samples == 1 and single.one_sample is single
    with pytest.raises(ValueError, match="num_samples"):
        q.PolicyScorer(env, num_samples=0)
    with pytest.raises(ValueError, match="estimator"):
        q.PolicyScorer(env, num_samples=2, estimator="best")
    with pytest.raises(ValueError, match="chooses among a candidate's samples"):
        jobs.PGAMEConfig(estimator="median")


def test_reward_offsets_are_qdax_s():
    # QDax 0.5.0, qdax/tasks/brax/v2/__init__.py (and v1): `reward_offset`, the minimum reward
    # per step, times the episode length is the QD-score offset. The same table here keeps
    # QD-scores comparable with published QDax results.
    qdax = {"ant_omni": 3.0, "ant_uni": 3.24, "halfcheetah_uni": 9.231, "hopper_uni": 0.9,
            "walker2d_uni": 1.413, "humanoid_omni": 0.0, "humanoid_uni": 0.0,
            # QDax 0.4 (brax v1): the deceptive tasks of the ME-PBT paper.
            "anttrap": 3.38, "antmaze": 40.32, "humanoidtrap": 0.0}  # fmt: skip
    ours = {name: spec.reward_offset for name, spec in _brax.QD_BRAX_TASKS.items()}
    assert ours == qdax
    # QDax v1's descriptor boxes of the deceptive tasks.
    bounds = {"anttrap": ((0.0, -8.0), (30.0, 8.0)), "humanoidtrap": ((0.0, -8.0), (30.0, 8.0)),
              "antmaze": ((-5.0, -5.0), (40.0, 40.0))}  # fmt: skip
    assert {n: _brax.QD_BRAX_TASKS[n].bounds for n in bounds} == bounds


@pytest.mark.brax
@pytest.mark.parametrize("name", sorted(_brax.QD_BRAX_TASKS))
def test_brax_task_smoke(name, getkey):
    env = q.envs.BraxQDEnv(name, episode_length=6)
    make = lambda k: q.rl.DeterministicPolicy(env.observation_size, env.action_size, (8,), key=k)
    policies = eqx.filter_vmap(make)(jr.split(getkey(), 3))
    scorer = q.PolicyScorer(env)
    fitnesses, descriptors, extra = eqx.filter_jit(lambda p, k: scorer(p, key=k))(
        policies, getkey()
    )
    assert fitnesses.shape == (3,)
    assert descriptors.shape == (3, env.descriptor_size)
    assert bool(jnp.all(jnp.isfinite(fitnesses)))
    low, high = (np.asarray(b) for b in env.descriptor_bounds)
    assert np.all(np.asarray(descriptors) >= low) and np.all(np.asarray(descriptors) <= high)
    spec = _brax.QD_BRAX_TASKS[name]
    assert env.descriptor_names == (("final x", "final y") if spec.omni else env.descriptor_names)
    assert len(env.descriptor_names) == env.descriptor_size  # the plots' axis labels
    if name.endswith("_uni"):
        assert env.descriptor_size == len(spec.feet)
        assert all(n.endswith(" contact") and "_geom" not in n for n in env.descriptor_names)
        contacts = np.asarray(extra.episodes.transitions.next_state_desc)
        assert set(np.unique(contacts).tolist()) <= {0.0, 1.0}
    elif name.endswith("_omni"):
        assert env.descriptor_bounds == ((-30.0, -30.0), (30.0, 30.0))
    transitions = extra.episodes.transitions
    assert transitions.obs.shape == (3, 6, env.observation_size)
    if spec.xy_obs is not None:  # the normalised torso (x, y) leads the observation
        (sx, sy), (dx, dy) = spec.xy_obs
        xy = np.asarray(transitions.next_state_desc)  # final-position tasks: the torso's (x, y)
        np.testing.assert_allclose(
            np.asarray(transitions.next_obs)[..., :2], (xy - [sx, sy]) / [dx, dy], atol=1e-5
        )
    if spec.reward == "to_target":  # minus the torso's distance to the target
        xy = np.asarray(transitions.next_state_desc)
        distance = np.linalg.norm(xy - np.asarray(spec.target), axis=-1)
        np.testing.assert_allclose(np.asarray(transitions.reward), -distance, rtol=1e-5)


def _push_into(name, x, speed, steps):
    """The torso's largest x when the ant starts at ``x`` running at ``speed`` along +x."""
    env = q.envs.BraxQDEnv(name).brax_env
    with q.envs._brax._brax_numerics():
        state = env.reset(jr.key_data(jr.key(0)))
        pipeline = env.pipeline_init(
            state.pipeline_state.q.at[0].set(x), state.pipeline_state.qd.at[0].set(speed)
        )

        def body(s, _):
            s = env.pipeline_step(s, jnp.zeros(env.action_size))
            return s, s.x.pos[0, 0]

        return float(jnp.max(jax.jit(lambda s: jax.lax.scan(body, s, None, steps)[1])(pipeline)))


@pytest.mark.brax
def test_trap_walls_are_brax_geometry():
    # The ant thrown at the trap's back wall (at x = 12, radius 0.5) stops against it, where the
    # same throw without walls carries it well past: the walls are bodies brax collides with.
    assert _push_into("ant_omni", 10.5, 8.0, 30) > 12.5
    assert _push_into("anttrap", 10.5, 8.0, 30) < 11.5 - 0.25 + 0.05  # wall face - torso radius
    # The humanoid's trap: three world capsules that its shins and feet collide with.
    import mujoco

    model = q.envs.BraxQDEnv("humanoidtrap").brax_env.sys.mj_model
    world = [i for i in range(model.ngeom) if model.geom_bodyid[i] == 0]
    walls = [i for i in world if model.geom_type[i] == mujoco.mjtGeom.mjGEOM_CAPSULE]
    assert len(walls) == 3 and all(model.geom_conaffinity[i] == 3 for i in walls)
    for name in ("left_shin1", "right_shin1", "left_foot", "right_foot"):
        geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)
        assert model.geom_contype[geom] & 3


@pytest.mark.brax
def test_an_elite_replays_with_its_states_and_renders_in_brax_s_viewer(getkey):
    env = q.envs.BraxQDEnv("anttrap", episode_length=5)
    policy = q.rl.DeterministicPolicy(env.observation_size, env.action_size, (8,), key=getkey())
    scorer = q.PolicyScorer(env)
    episode, states = eqx.filter_jit(lambda p, k: scorer.replay(p, key=k))(policy, getkey())
    assert states.obs.shape == (6, env.observation_size)  # the reset, then every step
    np.testing.assert_array_equal(states.state_desc[1:], episode.transitions.next_state_desc)
    np.testing.assert_array_equal(states.obs[:-1], episode.transitions.obs)
    html = env.render_html(states)
    assert "<title>Brax visualizer</title>" in html
    # The viewer's scene: brax's JSON, zlib-compressed and base64-encoded into the page.
    encoded = re.search(r'var system = "([^"]+)"', html).group(1)
    scene = json.loads(zlib.decompress(base64.b64decode(encoded)))
    assert len(scene["states"]["x"]) == 6  # one frame per state
    world = [g["name"] for g in scene["geoms"]["world"]]
    assert world.count("Capsule") == 3  # the trap's walls, drawn with the floor
    with pytest.raises(ValueError, match="number of states"):
        env.render_html(jax.tree.map(lambda x: x[:0], states))
    fig = plotting.plot_trajectories(env, states.state_desc, colors=[1.0], color_label="return")
    assert len(fig.axes) == 2  # the arena, and the colour bar
    with pytest.raises(ValueError, match="no arena"):
        plotting.plot_trajectories(q.envs.BraxQDEnv("hopper_uni"), states.state_desc)


@pytest.mark.brax
def test_a_deterministic_brax_task_starts_from_one_stored_state(getkey):
    # Every episode starts where brax's reset with key 0 puts the robot. That state is computed
    # once per process (here first inside a trace) and enters programs as a constant: a program
    # that plays episodes holds no copy of brax's reset.
    env = q.envs.BraxQDEnv("anttrap", episode_length=5)
    q.envs._brax._first_state.cache_clear()
    first = jax.jit(lambda k: env.reset(key=k))(getkey())
    again = env.reset(key=getkey())
    with q.envs._brax._brax_numerics():
        reference = jax.jit(env.brax_env.reset)(jr.key_data(jr.key(0)))
    for ours, again_, brax_s in zip(
        *map(jax.tree.leaves, (first.physics, again.physics, reference))
    ):
        np.testing.assert_array_equal(ours, again_)
        np.testing.assert_allclose(ours, brax_s, rtol=1e-5, atol=1e-6)
    noisy = q.envs.BraxQDEnv("anttrap", episode_length=5, reset_noise=True)
    program = lambda e: str(jax.make_jaxpr(lambda k: e.reset(key=k))(getkey()))
    assert 20 * len(program(env)) < len(program(noisy))


def test_brax_task_errors():
    with pytest.raises(ValueError, match="unknown brax QD task"):
        q.envs.BraxQDEnv("walker3d_uni")
    with pytest.raises(ValueError, match="backend"):
        q.envs.BraxQDEnv("hopper_uni", backend="warp")
    with pytest.raises(ValueError, match="unknown environment"):
        jobs.make_env("maze")


@pytest.mark.slow  # the fast tier's budget; fast sibling: the policy-QD jobs on the maze
def test_map_elites_over_policies_on_the_maze(getkey):
    env = q.envs.PointMaze(length=50)
    scorer = q.PolicyScorer(env)
    make = lambda k: q.rl.DeterministicPolicy(2, 2, (16,), key=k)
    policies = eqx.filter_vmap(make)(jr.split(getkey(), 32))
    emitter = q.MixingEmitter(
        batch_size=32, variation_percentage=0.5,
        variation=q.IsoLineVariation(iso_sigma=0.01, line_sigma=0.1),
        mutation=q.GaussianMutation(sigma=0.05),
    )  # fmt: skip
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset)
    cells = q.GridTessellation((8, 8), minval=-1.0, maxval=1.0)
    state, first = eqx.filter_jit(algo.init)(policies, cells, key=getkey())
    state, history = q.run(algo, state, 10, key=getkey())
    assert int(history.num_filled[-1]) > int(first.num_filled)
    assert bool(jnp.all(jnp.diff(history.qd_score) >= 0))
    # The stored genotypes are policies: the best one replays to its stored fitness.
    best = int(jnp.argmax(state.repertoire.fitnesses))
    policy = q.internal.tree_take(state.repertoire.genotypes, best)
    replay = q.envs.rollout(env, policy, key=getkey())
    np.testing.assert_allclose(
        float(replay.returns), float(state.repertoire.fitnesses[best]), rtol=1e-5
    )


@pytest.mark.brax
def test_a_program_with_several_rollouts_traces_brax_once(monkeypatch):
    """A brax task's `step` and `reset` are traced once per process: a program that steps two
    batches of other sizes (as a policy job's chunk scores its batch and re-evaluates its best)
    runs brax's Python code once, and a second program none (the physics' trace is cached).
    A fresh robot (the tasks share one per process, which other tests may have traced)."""
    hopper = _brax._import_brax_envs()._envs["hopper"]  # (brax's import warnings muted)
    steps, resets = [], []
    step, reset = hopper.step, hopper.reset
    monkeypatch.setattr(hopper, "step", lambda *a: steps.append(1) or step(*a))
    monkeypatch.setattr(hopper, "reset", lambda *a: resets.append(1) or reset(*a))
    env = _brax._task_env.__wrapped__("hopper_uni", "spring")  # not the cached one

    def play(n, key):
        states = jax.vmap(env.reset)(jax.vmap(jr.key_data)(jr.split(key, n)))
        return jax.vmap(env.step)(states, jnp.zeros((n, env.action_size))).reward

    with _brax._brax_numerics():  # (brax's own promotions, as the task calls it)
        jax.make_jaxpr(lambda k: (play(2, k), play(3, k)))(jr.key(0))
        assert (len(steps), len(resets)) == (1, 1)
        jax.make_jaxpr(lambda k: play(5, k))(jr.key(1))
    assert (len(steps), len(resets)) == (1, 1)
