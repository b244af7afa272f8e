import functools
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest
from hypothesis import given, strategies as st

import eqx_qd as q
from eqx_qd import jobs
from eqx_qd.jobs._ippo import summarise


# Small sizes: every test below reuses the same few compiled programs.
FAST = dict(rollout_length=32, num_envs=32, num_minibatches=4, actor_epochs=4, critic_epochs=4)
FAST_HPARAMS = q.rl.PPOHParams(actor_lr=3e-3, critic_lr=3e-3)


LAYOUTS = {"independent": {}, "shared": dict(shared_params=True), "joint": dict(joint_network=True)}


LINE = q.envs.TimeLimit(q.envs.LineTargets(n=2, size=8), 16)


@functools.cache
def line_agent(layout: str = "independent") -> q.rl.IPPO:
    return q.rl.IPPO.for_env(LINE, **LAYOUTS[layout], **FAST)


def start(agent, env=LINE, hparams=None, *, key):
    init_key, run_key = jr.split(key)
    return agent.init_run(env, agent.init(hparams, key=init_key), key=run_key)


@functools.cache
def trained_line_run(layout: str = "independent"):
    agent = line_agent(layout)
    run = start(agent, hparams=FAST_HPARAMS, key=jr.key(0))
    return jobs.train_ippo(agent, LINE, run, 40, key=jr.key(1), eval_frequency=20, num_episodes=64)


def _mean_return(stats: q.envs.EpisodeStats) -> float:
    return float(np.mean(stats.returns))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.slow
def test_ippo_learns_the_discrete_task(layout):
    _, log = trained_line_run(layout)
    before, after = _mean_return(log.evals[0]), _mean_return(log.evals[-1])
    # Untrained agents wander for the whole 16 steps (about -8); trained ones walk straight
    # to their targets (the best possible mean is about +0.5).
    assert before < -4.0
    assert after > 0.3, (before, after)
    assert float(np.mean(log.evals[-1].terminated)) > 0.95
    assert log.iterations == [0, 20, 40]
    assert log.env_steps[-1] == 40 * 32 * 32
    # The rollouts' finished episodes are reported too, as the team's return (summed over the
    # two agents, whose reward is shared) and improving like the evaluations.
    first, last = log.metrics[1].episode_return, log.metrics[2].episode_return
    assert first.shape == (20,) and np.isfinite(first).all()
    assert np.mean(last) > np.mean(first[:5]) + 4.0, (first[:5], last[-5:])
    assert (log.metrics[2].episodes_done > 0).all()


@pytest.mark.slow  # (the fast tier's budget: issue 68)
def test_ippo_shapes_independent_shared_and_joint():
    state, _ = trained_line_run("independent")
    shared_state, _ = trained_line_run("shared")
    joint_state, _ = trained_line_run("joint")
    assert state.agent_state.actor.net.layers[0].weight.shape == (2, 3, 64)
    assert shared_state.agent_state.actor.net.layers[0].weight.shape == (3, 64)
    # jaxagents' layout: one network over both agents' observations, a head (3 logits) each.
    joint = joint_state.agent_state
    assert isinstance(joint.actor, q.rl.JointActor)
    assert joint.actor.net.layers[0].weight.shape == (6, 64)
    assert joint.actor.net.layers[-1].weight.shape == (64, 6)
    assert joint.critic.net.layers[-1].weight.shape == (64, 2)
    assert int(state.iterations) == 40 and int(state.env_steps) == 40 * 32 * 32


@pytest.mark.parametrize("discrete", [True, False])
def test_joint_actor_is_one_distribution_per_agent_over_the_team_observation(discrete):
    n, obs_size, k = 3, 4, 2
    actor = q.rl.JointActor(n, obs_size, k, (16,), discrete=discrete, key=jr.key(0))
    actor = eqx.tree_at(lambda a: a.net, actor, q.rl.MLP(n * obs_size, n * k, (16,), key=jr.key(1)))
    obs = jr.normal(jr.key(2), (n, obs_size))
    heads = actor.net(obs.reshape(-1)).reshape(n, k)
    action = actor.sample(obs, key=jr.key(3))
    assert action.shape == ((n,) if discrete else (n, k))
    log_prob, entropy = actor.log_prob(obs, action), actor.entropy(obs)
    assert log_prob.shape == entropy.shape == (n,)
    if discrete:  # each agent's categorical over its own head's logits
        log_p = np.asarray(jax.nn.log_softmax(heads))
        np.testing.assert_allclose(log_prob, log_p[np.arange(n), action], rtol=1e-5)
        np.testing.assert_allclose(entropy, -(np.exp(log_p) * log_p).sum(-1), rtol=1e-5)
        np.testing.assert_array_equal(actor.mode(obs), np.argmax(heads, -1))
    else:  # each agent's diagonal gaussian around its head's means
        std = np.exp(np.asarray(actor.log_std))
        z = (np.asarray(action) - np.asarray(heads)) / std
        expected = (-0.5 * z**2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
        np.testing.assert_allclose(log_prob, expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(actor.mode(obs), heads, rtol=1e-6)
    # Agent 0's distribution reads agent 2's observation: the network is the team's.
    moved = obs.at[2].add(1.0)
    assert not np.isclose(actor.log_prob(moved, action)[0], log_prob[0])
    critic = q.rl.JointValueCritic(n, obs_size, (16,), key=jr.key(4))
    assert critic(obs).shape == (n,) and not np.allclose(critic(obs)[0], critic(moved)[0])
    with pytest.raises(ValueError, match="joint_network"):
        q.rl.IPPO.for_env(q.envs.LineTargets(n=2), joint_network=True, shared_params=True)


def _actors():
    obs1, obs3 = jr.normal(jr.key(5), (4,)), jr.normal(jr.key(6), (3, 4))
    return [
        (q.rl.CategoricalActor(4, 3, (16, 16), key=jr.key(0)), obs1),
        (q.rl.GaussianActor(4, 2, (16, 16), key=jr.key(1)), obs1),
        (q.rl.JointActor(3, 4, 3, (16,), discrete=True, key=jr.key(2)), obs3),
        (q.rl.JointActor(3, 4, 2, (16,), discrete=False, key=jr.key(3)), obs3),
    ]


def _dots(fn) -> int:
    return str(jax.make_jaxpr(fn)()).count("dot_general")


@pytest.mark.parametrize("index", range(4))
def test_actors_pair_their_methods_on_one_pass_of_the_network(index):
    actor, obs = _actors()[index]
    action, log_prob = actor.sample_and_log_prob(obs, key=jr.key(7))
    np.testing.assert_array_equal(action, actor.sample(obs, key=jr.key(7)))
    np.testing.assert_allclose(log_prob, actor.log_prob(obs, action), rtol=1e-6)
    both = actor.log_prob_and_entropy(obs, action)
    np.testing.assert_allclose(both[0], actor.log_prob(obs, action), rtol=1e-6)
    np.testing.assert_allclose(both[1], actor.entropy(obs), rtol=1e-6)
    # PPO's loss and its gradient run the network once, as log_prob alone does: computed
    # apart, the categorical's log-prob and entropy ran (and differentiated) it twice.
    loss = lambda a: jnp.sum(sum(a.log_prob_and_entropy(obs, action)))
    alone = lambda a: jnp.sum(a.log_prob(obs, action))
    assert _dots(lambda: jax.grad(loss)(actor)) == _dots(lambda: jax.grad(alone)(actor))
    sampled = lambda: actor.sample_and_log_prob(obs, key=jr.key(7))
    assert _dots(sampled) == _dots(lambda: actor.sample(obs, key=jr.key(7)))


@pytest.mark.slow
def test_ippo_learns_a_continuous_task():
    env = q.envs.SingleAgentView(q.envs.PointMaze(walls=False, length=50))
    agent = q.rl.IPPO.for_env(env, normalise_observations=True, **FAST)
    hparams = q.rl.PPOHParams(actor_lr=3e-3, critic_lr=3e-3, gamma=0.95)
    run = start(agent, env, hparams, key=jr.key(0))
    _, log = jobs.train_ippo(
        agent, env, run, 40, key=jr.key(1), eval_frequency=40, num_episodes=8, progress=False
    )
    # Standing still scores about -90; the straight walk to the goal scores about -13.6.
    assert _mean_return(log.evals[0]) < -60
    assert _mean_return(log.evals[-1]) > -20, _mean_return(log.evals[-1])
    assert bool(np.all(log.evals[-1].terminated))


@pytest.mark.slow
def test_ppo_learns_the_same_task_as_a_team_of_one():
    """`PPO` on the single-agent maze is the learner of `IPPO` with one agent: it learns the
    same task, and its state holds one actor and one critic (no agent axis)."""
    env = q.envs.PointMaze(walls=False, length=50)
    agent = q.rl.PPO(observation_size=2, action_size=2, normalise_observations=True, **FAST)
    hparams = q.rl.PPOHParams(actor_lr=3e-3, critic_lr=3e-3, gamma=0.95)
    run = start(agent, env, hparams, key=jr.key(0))
    before = agent.evaluate(env, run.agent_state, 8, key=jr.key(2))
    run, metrics = eqx.filter_jit(lambda r: agent.train(env, r, 40, key=jr.key(1)))(run)
    after = agent.evaluate(env, run.agent_state, 8, key=jr.key(2))
    assert float(np.mean(before.returns)) < -60
    assert float(np.mean(after.returns)) > -20, after.returns
    assert metrics.reward.shape == (40,) and int(run.iterations) == 40
    assert run.agent_state.actor.net.layers[0].weight.shape == (2, 64)
    assert run.agent_state.normaliser.mean.shape == (2,)
    with pytest.raises(TypeError, match="single-agent"):
        agent.init_run(q.envs.SingleAgentView(env), run.agent_state, key=jr.key(0))


@pytest.mark.slow
def test_observation_statistics_follow_the_rollouts():
    agent = q.rl.IPPO.for_env(LINE, normalise_observations=True, **FAST)
    run = start(agent, key=jr.key(2))
    assert run.agent_state.normaliser.mean.shape == (2, 3)  # per agent, like the actors
    rollout_key = jr.split(jr.key(3), 3)[0]  # the rollout key of `_iteration`'s split
    _, traj = eqx.filter_jit(lambda r: agent._rollout(LINE, r, rollout_key))(run)
    new, _ = eqx.filter_jit(lambda r: agent._iteration(LINE, r, jr.key(3)))(run)
    new = new.agent_state
    obs = np.asarray(traj.obs).reshape(-1, 2, 3)
    np.testing.assert_allclose(new.normaliser.mean, obs.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(new.normaliser.var, obs.var(axis=0), atol=1e-5)
    np.testing.assert_allclose(new.normaliser.count, [32 * 32, 32 * 32])
    # Stacked statistics apply per agent to the trailing (agents, obs_dim) axes.
    z = np.asarray(new.normaliser.normalise(traj.obs)).reshape(-1, 2, 3)
    expected = (obs - obs.mean(axis=0)) / np.sqrt(obs.var(axis=0) + 1e-6)
    np.testing.assert_allclose(z, np.clip(expected, -10, 10), atol=1e-4)


@functools.cache
def _one_update():
    agent = line_agent()
    return eqx.filter_jit(lambda r: agent._iteration(LINE, r, jr.key(4))), start(
        agent, key=jr.key(3)
    )


def test_kl_early_stop_triggers_with_a_tiny_threshold():
    step, state = _one_update()
    tiny = eqx.tree_at(lambda r: r.agent_state.hparams.kl_threshold, state, jnp.float32(1e-9))
    huge = eqx.tree_at(lambda r: r.agent_state.hparams.kl_threshold, state, jnp.float32(1e9))
    _, tiny_metrics = step(tiny)
    _, huge_metrics = step(huge)
    np.testing.assert_array_equal(tiny_metrics["actor_epochs"], [1.0, 1.0])
    np.testing.assert_array_equal(huge_metrics["actor_epochs"], [4.0, 4.0])
    assert bool(jnp.all(tiny_metrics["kl"] > 1e-9))
    assert {"actor_loss", "entropy", "kl", "actor_epochs"} <= set(huge_metrics)


@pytest.mark.slow  # the fast tier's budget; fast sibling: the PPO contract tests
def test_jaxagents_convention_is_its_minibatches_standardisation_and_kl():
    """`convention="jaxagents"` against jaxagents 0.2.5's `IPPO` update written out from its
    source: trajectories laid out `(env, time, agent)`, one fixed order of the environments
    (`jax.random.choice(PRNGKey(1), ...)`) cut into minibatches of whole environments,
    advantages standardised over the minibatch's environments (`mean(axis=0)`: per time step
    and agent), the surrogate in its simplified form, and `sum(-log ratio)` as its KL."""
    from eqx_qd.rl._ppo_losses import _actor_loss, _trajectory_minibatches

    agent = q.rl.IPPO.for_env(LINE, **FAST, joint_network=True, convention="jaxagents")
    run = start(agent, key=jr.key(7))
    _, traj = eqx.filter_jit(lambda r: agent._rollout(LINE, r, jr.key(8)))(run)
    samples = agent._samples(run.agent_state, traj)
    data = jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1), samples)  # (time * envs, agents, ...)
    h = eqx.tree_at(lambda h: h.clip_eps, FAST_HPARAMS, jnp.float32(0.1))
    # A policy a step away from the rollout's, so that ratios and clipping matter.
    actor = jax.tree.map(lambda x: x * 1.3 if eqx.is_inexact_array(x) else x, run.agent_state.actor)
    T, B, count = FAST["rollout_length"], FAST["num_envs"], FAST["num_minibatches"]
    mb = B // count
    ref = jax.tree.map(lambda x: jnp.swapaxes(x.reshape(T, B, *x.shape[1:]), 0, 1), data)
    order = jax.random.choice(jax.random.PRNGKey(1), jnp.arange(B), replace=False, shape=(B,))

    def reference_loss(actor, batch):  # batch: (mb, time, agents, ...)
        adv = batch.advantages
        adv = (adv - adv.mean(axis=0, keepdims=True)) / (adv.std(axis=0, keepdims=True) + 1e-8)
        flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731
        log_prob, entropy = jax.vmap(actor.log_prob_and_entropy)(
            flat(batch.obs), flat(batch.actions)
        )
        log_ratio = log_prob.reshape(adv.shape) - batch.log_probs
        clip = jnp.where(adv > 0, 1 + h.clip_eps, 1 - h.clip_eps)
        surrogate = jnp.minimum(jnp.exp(log_ratio) * adv, adv * clip)
        return -(surrogate.mean() + h.ent_coef * entropy.mean()), -jnp.sum(log_ratio)

    ours = lambda a, b: _actor_loss(a, b, h, normalise_advantages=True, group=mb)  # noqa: E731
    idx = _trajectory_minibatches(T, B, count)
    np.testing.assert_array_equal(idx, _trajectory_minibatches(T, B, count))  # fixed
    for c in range(count):
        theirs = jax.tree.map(lambda x: x[order[c * mb : (c + 1) * mb]], ref)
        mine = q.internal.tree_take(data, idx[c])
        (loss, (_, kl)), grads = eqx.filter_value_and_grad(ours, has_aux=True)(actor, mine)
        (ref_loss, ref_kl), ref_grads = eqx.filter_value_and_grad(reference_loss, has_aux=True)(
            actor, theirs
        )
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(kl, ref_kl, rtol=1e-4, atol=1e-4)
        assert abs(float(kl)) > 1e-3  # the policies differ
        for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)
    # Pooled agents (shared networks): every sample once, a minibatch is whole environments
    # of every agent, each run of `mb` samples one agent at one time step.
    pooled = np.asarray(_trajectory_minibatches(T, B, count, blocks=2))
    np.testing.assert_array_equal(np.sort(pooled.ravel()), np.arange(2 * T * B))
    for row in pooled:
        runs = row.reshape(-1, mb)
        assert len({tuple(r) for r in (runs % B).tolist()}) == 1  # the same environments
        assert all(len(set(r.tolist())) == 1 for r in runs // B)  # one (agent, time) each


def test_adam_eps_and_the_convention_reach_the_optimiser_and_are_checked():
    """`adam_eps` is the epsilon of optax's Adam after the clip (jaxagents' default is
    1e-8, ours 1e-5); bad values and a jaxagents minibatch that splits an environment are
    refused by name."""
    params = {"w": jnp.linspace(-1.0, 1.0, 6, dtype=jnp.float32)}
    grads = {"w": jnp.linspace(1e-6, 1e-5, 6, dtype=jnp.float32)}  # eps matters at this scale
    lr, clip = jnp.float32(1e-3), jnp.float32(0.5)
    for eps in (1e-8, 1e-5):
        tx = optax.chain(optax.clip_by_global_norm(clip), optax.adam(lr, eps=eps))
        with jax.numpy_dtype_promotion("standard"):  # optax mixes weak and strong types
            expected = optax.apply_updates(params, tx.update(grads, tx.init(params), params)[0])
        opt = q.rl.init_clipped_adam(params)
        got, _ = q.rl.apply_clipped_adam(params, grads, opt, lr, clip, eps)
        np.testing.assert_allclose(got["w"], expected["w"], rtol=1e-6)
    with pytest.raises(ValueError, match="IPPO.convention"):
        q.rl.IPPO.for_env(LINE, **FAST, convention="cleanrl")
    with pytest.raises(ValueError, match="whole environments: num_envs=6"):
        q.rl.IPPO.for_env(LINE, rollout_length=4, num_envs=6, num_minibatches=4,
                          convention="jaxagents")  # fmt: skip
    with pytest.raises(ValueError, match="PPO.adam_eps"):
        q.rl.PPO(observation_size=2, action_size=1, adam_eps=0.0)


@pytest.mark.slow
def test_ippo_learns_the_discrete_task_under_the_jaxagents_convention():
    agent = q.rl.IPPO.for_env(LINE, **FAST, joint_network=True, convention="jaxagents")
    run = start(agent, hparams=FAST_HPARAMS, key=jr.key(0))
    _, log = jobs.train_ippo(agent, LINE, run, 40, key=jr.key(1), eval_frequency=40,
                             num_episodes=64)  # fmt: skip
    before, after = _mean_return(log.evals[0]), _mean_return(log.evals[-1])
    assert before < -4.0 and after > 0.3, (before, after)


def test_reward_scale_enters_advantages_linearly():
    # GAE is linear in (rewards, values): with the same critic, A(2r) - A(r) = A(r) - A(0).
    _, run = _one_update()
    agent = line_agent()
    _, traj = eqx.filter_jit(lambda r: agent._rollout(LINE, r, jr.key(5)))(run)
    samples = eqx.filter_jit(agent._samples)

    def advantages(scale):
        scaled = eqx.tree_at(lambda s: s.hparams.reward_scale, run.agent_state, jnp.float32(scale))
        return np.asarray(samples(scaled, traj).advantages)

    a0, a1, a2 = advantages(0.0), advantages(1.0), advantages(2.0)
    np.testing.assert_allclose(a2 - a1, a1 - a0, atol=1e-4)
    assert np.abs(a1 - a0).max() > 0.1  # rewards do move the advantages


def test_zero_learning_rates_leave_networks_unchanged():
    step, run = _one_update()
    frozen = eqx.tree_at(
        lambda r: (r.agent_state.hparams.actor_lr, r.agent_state.hparams.critic_lr),
        run,
        (jnp.float32(0), jnp.float32(0)),
    )
    new, _ = step(frozen)
    assert bool(eqx.tree_equal(new.agent_state.actor, run.agent_state.actor))
    assert bool(eqx.tree_equal(new.agent_state.critic, run.agent_state.critic))
    assert int(new.iterations) == int(run.iterations) + 1


_TRAIN = eqx.filter_jit(lambda agent, run, n, key: agent.train(LINE, run, n, key=key))


@pytest.mark.slow
def test_training_in_two_calls_with_one_key_equals_one_call():
    """Iteration `i`'s key is the call's key folded with `i`: 1 + 2 iterations with one key
    are the 3-iteration run, and a second call with the first's key does not replay its noise
    (each chunk's key had been split from the call's key, so the IPPO job's chunks depended on
    where a run was cut; issue 76, item 11)."""
    agent, key = line_agent(), jr.key(6)
    run = start(agent, hparams=FAST_HPARAMS, key=jr.key(5))
    once, _ = _TRAIN(agent, run, 3, key)
    first, _ = _TRAIN(agent, run, 1, key)
    twice, _ = _TRAIN(agent, first, 2, key)
    assert int(twice.iterations) == 3
    assert bool(eqx.tree_equal(once, twice))
    other, _ = _TRAIN(agent, first, 2, jr.key(7))
    assert not bool(eqx.tree_equal(other.agent_state.actor, twice.agent_state.actor))


@pytest.mark.slow
def test_sweep_is_one_vmap_over_hyperparameters():
    agent = line_agent()
    grid = q.rl.PPOHParams.stack([FAST_HPARAMS, q.rl.PPOHParams(actor_lr=0.0, critic_lr=3e-3)])
    key = jr.key(5)
    runs = eqx.filter_vmap(lambda h: start(agent, hparams=h, key=key))(grid)
    train = lambda r: agent.train(LINE, r, 3, key=jr.key(6))
    trained, metrics = eqx.filter_jit(eqx.filter_vmap(train))(runs)
    assert metrics.losses["actor_loss"].shape == (2, 3)
    # Member 1 has a zero actor learning rate; member 0 equals its own unbatched run.
    first = q.internal.tree_take(runs, 1).agent_state
    member = q.internal.tree_take(trained, 1).agent_state
    assert bool(eqx.tree_equal(member.actor, first.actor))
    alone, _ = train(start(agent, hparams=FAST_HPARAMS, key=key))
    leaves = zip(
        jax.tree.leaves(
            eqx.filter(q.internal.tree_take(trained, 0).agent_state.actor, eqx.is_array)
        ),
        jax.tree.leaves(eqx.filter(alone.agent_state.actor, eqx.is_array)),
    )
    for swept, single in leaves:
        np.testing.assert_allclose(swept, single, rtol=1e-4, atol=1e-5)


@eqx.filter_jit
def _episodes(agent, run, num_episodes, deterministic=True, *, key):
    policy = lambda o, k: agent.act(run.agent_state, o, deterministic=deterministic, key=k)
    return q.envs.evaluate_episodes(LINE, policy, num_episodes, key=key)


@pytest.mark.slow
def test_evaluation_reports_full_episodes():
    state, _ = trained_line_run("independent")
    agent = line_agent()
    stats = _episodes(agent, state, 32, False, key=jr.key(7))
    assert stats.returns.shape == (32, 2) and stats.final_rewards.shape == (32, 2)
    ended = np.asarray(stats.terminated) | np.asarray(stats.truncated)
    assert ended.all()
    assert not (np.asarray(stats.terminated) & np.asarray(stats.truncated)).any()
    assert np.all(np.asarray(stats.lengths) <= 16)
    # An episode that terminated ended on the arrival bonus.
    arrived = np.asarray(stats.final_rewards)[np.asarray(stats.terminated)]
    np.testing.assert_allclose(arrived, 1.0)
    # A random untrained agent mostly runs into the time limit.
    fresh = start(agent, key=jr.key(8))
    stats = _episodes(agent, fresh, 32, key=jr.key(7))
    assert np.asarray(stats.truncated).any()
    assert np.all(np.asarray(stats.lengths)[np.asarray(stats.truncated)] == 16)


@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=12), st.booleans())
def test_summarise_matches_numpy(values, with_nan):
    x = np.asarray(values, np.float32)
    if with_nan:
        x = np.append(x, np.float32(np.nan))
    s = summarise(x)
    assert bool(s.has_nans) == with_nan
    if not with_nan:
        np.testing.assert_allclose(s.mean, np.mean(x), rtol=1e-5, atol=1e-3)
        np.testing.assert_allclose(s.std, np.std(x), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(s.var, np.var(x), rtol=1e-4, atol=1e-2)
        np.testing.assert_allclose(s.median, np.median(x), rtol=1e-6, atol=1e-6)
        assert float(s.min) == x.min() and float(s.max) == x.max()


def test_summarise_per_agent_returns():
    state, log = trained_line_run("independent")
    s = summarise(log.evals[-1].returns)
    assert s.mean.shape == (2,) and s.has_nans.shape == (2,)


# ----------------------------------------------------------------------------- checkpoints


@functools.cache
def _checkpointed_runs(root: str):
    agent = line_agent()
    fresh = start(agent, hparams=FAST_HPARAMS, key=jr.key(11))
    kwargs = dict(key=jr.key(12), eval_frequency=2, num_episodes=8, progress=False)
    whole_dir, split_dir = os.path.join(root, "whole"), os.path.join(root, "split")
    whole, whole_log = jobs.train_ippo(agent, LINE, fresh, 4, checkpoint_dir=whole_dir, **kwargs)
    half, _ = jobs.train_ippo(agent, LINE, fresh, 2, checkpoint_dir=split_dir, **kwargs)
    restored, chosen = jobs.restore_checkpoint(split_dir, start(agent, key=jr.key(0)))
    continued, continued_log = jobs.train_ippo(
        agent, LINE, restored, 2, checkpoint_dir=split_dir, **kwargs
    )
    return agent, half, restored, chosen, whole, whole_log, continued, continued_log, split_dir


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory):
    return _checkpointed_runs(str(tmp_path_factory.mktemp("ippo")))


def test_restore_gives_back_identical_state(checkpointed):
    _, half, restored, chosen, *_ = checkpointed
    assert chosen.step == 2
    assert bool(eqx.tree_equal(restored, half))


def test_continuing_from_a_checkpoint_equals_an_uninterrupted_run(checkpointed):
    agent, _, _, _, whole, whole_log, continued, continued_log, _ = checkpointed
    assert int(continued.iterations) == 4
    assert bool(eqx.tree_equal(continued, whole))
    assert continued_log.iterations == [4]  # no fresh evaluation of a continued run
    assert bool(eqx.tree_equal(continued_log.evals[-1], whole_log.evals[-1]))


def test_checkpoint_folder_contents_and_best_restore(checkpointed):
    agent, *_, split = checkpointed
    names = sorted(os.listdir(os.path.join(split, "checkpoints")))
    assert names == [f"{u:010d}.{ext}" for u in (0, 2, 4) for ext in ("eqx", "json")]
    assert {"agent.json", "hparams.json"} <= set(os.listdir(split))
    checkpoints = jobs.list_checkpoints(split)
    assert [c.step for c in checkpoints] == [0, 2, 4]
    # A user criterion: the checkpoint with the shortest mean episode.
    shortest = lambda m: -float(np.mean(m["lengths"]))  # noqa: E731
    expected = int(np.argmax([shortest(c.metrics) for c in checkpoints]))
    state, chosen = jobs.restore_checkpoint(
        split, start(agent, key=jr.key(0)), which="best", criterion=shortest
    )
    assert chosen.step == checkpoints[expected].step
    assert int(state.iterations) == chosen.step


def test_a_folder_of_a_later_branch_and_a_nan_criterion_are_refused(checkpointed):
    agent, half, *_, split = checkpointed
    # Going on from iteration 2 into the folder that holds iteration 4 would mix two branches.
    with pytest.raises(ValueError, match="past iteration 2 \\(up to 4\\): another branch"):
        jobs.train_ippo(agent, LINE, half, 2, checkpoint_dir=split, key=jr.key(12),
                        eval_frequency=2, num_episodes=8, progress=False)  # fmt: skip
    assert [c.step for c in jobs.list_checkpoints(split)] == [0, 2, 4]  # untouched

    def nothing(metrics):
        return float("nan")

    with pytest.raises(ValueError, match="has a finite nothing"):
        jobs.restore_checkpoint(split, start(agent, key=jr.key(0)), which="best", criterion=nothing)


def test_a_crash_while_saving_leaves_no_partial_file(tmp_path, monkeypatch):
    agent = line_agent()
    state, log = trained_line_run("independent")
    jobs.save_checkpoint(tmp_path, 40, state, log.evals[-1].to_dict())

    def crash(f, tree):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt

    later = eqx.tree_at(lambda s: s.iterations, state, state.iterations + 1)
    monkeypatch.setattr(jobs._folder, "serialise", crash)
    with pytest.raises(KeyboardInterrupt):
        jobs.save_checkpoint(tmp_path, 41, later, log.evals[-1].to_dict())
    monkeypatch.undo()
    eqx_files = [n for n in os.listdir(tmp_path / "checkpoints") if n.endswith(".eqx")]
    assert eqx_files == ["0000000040.eqx"]
    assert not [n for n in os.listdir(tmp_path / "checkpoints") if n.startswith(".tmp")]
    restored, chosen = jobs.restore_checkpoint(tmp_path, start(agent, key=jr.key(0)))
    assert chosen.step == 40 and bool(eqx.tree_equal(restored, state))


def test_bad_input_is_named(checkpointed):
    env = q.envs.TimeLimit(q.envs.LineTargets(), 16)
    with pytest.raises(ValueError, match="num_minibatches"):
        q.rl.IPPO.for_env(env, rollout_length=10, num_envs=3, num_minibatches=4)
    with pytest.raises(ValueError, match="the agent's num_agents is 2 but the environment's is 4"):
        line_agent().init_run(q.envs.LineTargets(n=4), _one_update()[1].agent_state, key=jr.key(0))
    with pytest.raises(ValueError, match="gamma"):
        q.rl.PPOHParams(gamma=1.5)
    with pytest.raises(ValueError, match="eval_frequency"):
        jobs.train_ippo(line_agent(), LINE, _one_update()[1], 4, key=jr.key(0), eval_frequency=0)
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        jobs.restore_checkpoint("/nonexistent/run", _one_update()[1])
    with pytest.raises(ValueError, match="latest"):
        jobs.restore_checkpoint(checkpointed[-1], _one_update()[1], which="first")
    with pytest.raises(ValueError, match="does not fit the template"):
        jobs.restore_checkpoint(checkpointed[-1], start(line_agent("shared"), key=jr.key(0)))
    with pytest.raises(ValueError, match="stack"):
        q.rl.PPOHParams.stack([])
