import dataclasses
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, strategies as st
from user_agent import DDPG

import eqx_qd as q


ENV = q.envs.PointMaze(walls=False)
SIZES = dict(observation_size=2, action_size=2, policy_hidden=(64, 64), critic_hidden=(64, 64))
LOOP = dict(minibatch_size=128, num_envs=8, buffer_size=20_000, grad_updates_per_step=0.25)
AGENTS = {"td3": q.rl.TD3(**SIZES, **LOOP), "sac": q.rl.SAC(**SIZES, **LOOP)}


def _learn(agent, key):
    k0, k1, k2, k3, k4 = jr.split(key, 5)
    state = agent.init_run(ENV, agent.init(key=k0), key=k1)
    state = agent.warmup(ENV, state, 50, key=k2)
    state, metrics = agent.train(ENV, state, 1500, key=k3)
    evaluation = agent.evaluate(ENV, state.agent_state, 8, key=k4)
    return state, metrics, evaluation


@pytest.mark.parametrize("name", sorted(AGENTS))
@pytest.mark.slow
def test_agent_learns_the_point_maze(name):
    agent = AGENTS[name]
    state, metrics, evaluation = _learn(agent, jr.key(0))
    # Random play scores about -160; heading straight to the goal scores about -14.
    assert float(jnp.mean(evaluation.returns)) > -60.0
    assert int(state.env_steps) == 8 * (50 + 1500)
    assert int(state.agent_state.steps) == 1500 * 2
    assert int(state.buffer.size) == 8 * 1550
    late = np.nanmean(np.asarray(metrics.episode_return)[-300:])
    early = np.nanmean(np.asarray(metrics.episode_return)[:100])
    assert late > early + 30.0
    assert set(metrics.losses) >= {"critic_loss", "policy_loss"}


@pytest.mark.parametrize("name", sorted(AGENTS))
@pytest.mark.slow
def test_agent_learns_the_point_maze_with_bfloat16_products(name):
    agent = dataclasses.replace(AGENTS[name], matmul_dtype="bfloat16")
    state, metrics, evaluation = _learn(agent, jr.key(0))
    layers = state.agent_state.critic.nets[0].layers
    assert [layer.matmul_dtype for layer in layers] == ["float32", "bfloat16", "float32"]
    assert float(jnp.mean(evaluation.returns)) > -60.0  # as in float32 (random: about -160)


@pytest.mark.slow
def test_bfloat16_products_round_the_hidden_inputs_and_accumulate_in_float32(getkey):
    key = getkey()
    net32 = q.rl.MLP(5, 3, (64, 48, 32), key=key)
    net16 = q.rl.MLP(5, 3, (64, 48, 32), matmul_dtype="bfloat16", key=key)
    kinds = [layer.matmul_dtype for layer in net16.layers]
    assert kinds == ["float32", "bfloat16", "bfloat16", "float32"]  # first and last: float32
    x = jr.normal(getkey(), (32, 5))

    def by_hand(x):  # the float32 network with its hidden products' inputs rounded to bfloat16
        rounded = lambda a: np.asarray(jnp.asarray(a).astype(jnp.bfloat16).astype(jnp.float32))
        h = np.asarray(x, np.float64)
        for i, layer in enumerate(net32.layers):
            w = np.asarray(layer.weight, np.float64)
            if kinds[i] == "bfloat16":
                h, w = rounded(h).astype(np.float64), rounded(w).astype(np.float64)
            h = h @ w + np.asarray(layer.bias, np.float64)
            h = np.maximum(h, 0.0) if i < len(kinds) - 1 else h
        return h

    y16, y32 = jax.vmap(net16)(x), jax.vmap(net32)(x)
    assert y16.dtype == jnp.float32
    np.testing.assert_allclose(y16, by_hand(x), rtol=1e-5, atol=1e-5)
    assert np.max(np.abs(np.asarray(y16) - np.asarray(y32))) > 1e-4  # rounding did happen
    np.testing.assert_allclose(y16, y32, atol=0.05)
    assert "bf16" in jax.jit(jax.vmap(net16)).lower(x).as_text()
    assert "bf16" not in jax.jit(jax.vmap(net32)).lower(x).as_text()
    # Gradients: float32 leaves (the stored weights), close to the float32 network's.
    loss = lambda net: jnp.mean(jax.vmap(net)(x) ** 2)
    g16, g32 = eqx.filter_grad(loss)(net16), eqx.filter_grad(loss)(net32)
    for a, b in zip(jax.tree.leaves(g16), jax.tree.leaves(g32)):
        assert a.dtype == jnp.float32
        np.testing.assert_allclose(a, b, rtol=0.1, atol=0.02 * float(jnp.max(jnp.abs(b))))


def test_bfloat16_gradients_are_bfloat16_products_of_rounded_operands(getkey):
    layer = q.rl.MLP(8, 4, (48, 32), matmul_dtype="bfloat16", key=getkey()).layers[1]  # 48 -> 32
    assert layer.matmul_dtype == "bfloat16"
    x, g = jr.normal(getkey(), (16, 48)), jr.normal(getkey(), (16, 32))
    rounded = lambda a: np.asarray(jnp.asarray(a).astype(jnp.bfloat16).astype(jnp.float32))
    y, pullback = jax.vjp(lambda lay, x: lay(x), layer, x)
    d_layer, dx = pullback(g)
    w = np.asarray(layer.weight, np.float64)
    bias = np.asarray(layer.bias)[None, :]
    np.testing.assert_allclose(y, rounded(x) @ rounded(w) + bias, rtol=1e-5, atol=1e-5)
    # The input's gradient: the cotangent and the weight rounded, accumulated in float32.
    np.testing.assert_allclose(dx, rounded(g) @ rounded(w).T, rtol=1e-5, atol=1e-5)
    # The weight's gradient: the input and the cotangent rounded, one product over the rows.
    np.testing.assert_allclose(d_layer.weight, rounded(x).T @ rounded(g), rtol=1e-5, atol=1e-5)
    assert not np.allclose(d_layer.weight, np.asarray(x).T @ np.asarray(g), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_layer.bias, np.sum(np.asarray(g), axis=0), rtol=1e-5)
    assert dx.dtype == d_layer.weight.dtype == jnp.float32

    # Every product of the differentiated program takes bfloat16 inputs: the forward one and
    # both gradients (the transposed weight and input as gathers).
    def forward_and_back(layer, x, g):
        y, pullback = jax.vjp(lambda lay, x: lay(x), layer, x)
        return y, pullback(g)

    text = jax.jit(forward_and_back).lower(layer, x, g).as_text()
    products = re.findall(r"dot_general.*: \((tensor<\S+>), (tensor<\S+>)\)", text)
    assert [a.endswith("bf16>") and b.endswith("bf16>") for a, b in products] == [True] * 3


@pytest.mark.slow
def test_networks_called_on_a_batch_match_their_vmapped_calls(getkey):
    obs, action = jr.normal(getkey(), (2, 5, 3)), jnp.tanh(jr.normal(getkey(), (2, 5, 2)))
    eps = jr.normal(getkey(), (2, 5, 2))
    for dtype in ("float32", "bfloat16"):
        critic = q.rl.QCritics(3, 2, (32, 16), matmul_dtype=dtype, key=getkey())
        sac_policy = q.rl.TanhGaussianPolicy(3, 2, (32, 16), matmul_dtype=dtype, key=getkey())
        td3_policy = q.rl.DeterministicPolicy(3, 2, (32, 16), matmul_dtype=dtype, key=getkey())
        normed = q.rl.DeterministicPolicy(3, 2, (32,), layer_norm=True, affine=True, key=getkey())
        twice = lambda f: jax.vmap(jax.vmap(f))
        close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        close(critic(obs, action), twice(critic)(obs, action))
        close(critic.q1(obs, action), twice(critic.q1)(obs, action))
        sampled = sac_policy.sample_from_noise(obs, eps)
        for a, b in zip(sampled, twice(sac_policy.sample_from_noise)(obs, eps)):
            close(a, b)
        close(sac_policy(obs), twice(sac_policy)(obs))
        close(td3_policy(obs), twice(td3_policy)(obs))
        close(normed(obs), twice(normed)(obs))
        # The gradients agree too (per input: a sum of outer products; batched: one product).
        loss = lambda c, f: jnp.mean(f(c)(obs, action) ** 2)
        g_batch = eqx.filter_grad(loss)(critic, lambda c: c)
        g_vmap = eqx.filter_grad(loss)(critic, lambda c: twice(c))
        for a, b in zip(jax.tree.leaves(g_batch), jax.tree.leaves(g_vmap)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    # Mismatched leading axes: jaxtyping's check under pytest, ours (ValueError) without it.
    with pytest.raises((ValueError, TypeError), match="action"):
        critic(obs, action[0])
    with pytest.raises(ValueError, match="same leading axes"):
        critic._check(obs, action[0])
    with pytest.raises((ValueError, TypeError), match="eps"):
        sac_policy.sample_from_noise(obs, eps[0])
    with pytest.raises(ValueError, match=r"MLP: x must have shape \(3,\) or \(..., 3\)"):
        q.rl.MLP(3, 1, (4,), key=getkey())(jnp.zeros((5, 4)))


def test_bfloat16_networks_take_per_input_gradients_but_not_forward_mode(getkey):
    net = q.rl.MLP(3, 1, (16, 16), matmul_dtype="bfloat16", key=getkey())
    x = jr.normal(getkey(), (4, 3))
    per_input = jax.vmap(eqx.filter_grad(lambda n, xi: n(xi)[0]), in_axes=(None, 0))(net, x)
    mean = eqx.filter_grad(lambda n: jnp.mean(n(x)))(net)
    for a, b in zip(jax.tree.leaves(per_input), jax.tree.leaves(mean)):
        np.testing.assert_allclose(jnp.mean(a, axis=0), b, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jvp(net, (x,), (x,))


def test_matmul_dtype_is_validated():
    with pytest.raises(ValueError, match="SAC.matmul_dtype must be one of"):
        q.rl.SAC(observation_size=2, action_size=2, matmul_dtype="float16")
    with pytest.raises(ValueError, match="TD3.matmul_dtype must be one of"):
        q.rl.TD3(observation_size=2, action_size=2, matmul_dtype="bf16")
    with pytest.raises(ValueError, match="MLP: matmul_dtype must be one of"):
        q.rl.MLP(2, 2, (4,), matmul_dtype="half", key=jr.key(0))


def test_a_policy_that_never_moves_scores_minus_170():
    class Still(q.rl.AbstractPolicy):
        def __call__(self, obs):
            return jnp.zeros(2)

    # 100 steps at distance 1.7 from the goal: the floor the learning test is measured against.
    ep = q.envs.rollout(ENV, Still(), key=jr.key(0))
    np.testing.assert_allclose(float(ep.returns), -170.0, rtol=1e-5)


def test_population_trains_with_per_member_hyperparameters(getkey):
    agent = q.rl.TD3(**SIZES, minibatch_size=32, num_envs=4, buffer_size=256)
    lrs = jnp.array([1e-4, 1e-3, 1e-2], jnp.float32)

    def make(lr, key):
        init_key, run_key = jr.split(key)
        state = agent.init(q.rl.TD3HParams(policy_lr=lr, critic_lr=lr), key=init_key)
        return agent.init_run(ENV, state, key=run_key)

    pop0 = eqx.filter_vmap(make)(lrs, jr.split(getkey(), 3))
    train = eqx.filter_jit(eqx.filter_vmap(lambda s, k: agent.train(ENV, s, 5, key=k)))
    pop, metrics = train(pop0, jr.split(getkey(), 3))
    np.testing.assert_allclose(pop.agent_state.hparams.policy_lr, lrs)
    assert pop.buffer.size.tolist() == [20, 20, 20]
    assert metrics.reward.shape == (3, 5)
    # Each member used its own learning rate: larger rates moved the critic further.
    moved = sum(
        jnp.sum((a - b) ** 2, axis=tuple(range(1, a.ndim)))
        for a, b in zip(
            jax.tree.leaves(eqx.filter(pop.agent_state.critic, eqx.is_array)),
            jax.tree.leaves(eqx.filter(pop0.agent_state.critic, eqx.is_array)),
        )
    )
    assert moved[0] < moved[1] < moved[2]


def test_targets_are_the_online_networks_after_a_reset(getkey):
    """`reset_targets`, and the training form rebuilt from the storage form, set each target
    network to its online network; the storage form holds no optimiser state and no target.
    (The laws check the storage form's size and structure for every agent, but cannot name
    an agent's targets: they are named here.)"""
    small = dict(observation_size=2, action_size=2, minibatch_size=8, num_envs=2, buffer_size=8)
    nets = dict(policy_hidden=(8,), critic_hidden=(8,))
    agents = {  # the agent, its networks with targets, its optimiser states
        "td3": (
            q.rl.TD3(**small, **nets),
            ("policy", "critic"),
            ("policy_opt_state", "critic_opt_state"),
        ),
        "sac": (
            q.rl.SAC(**small, **nets),
            ("critic",),
            ("policy_opt_state", "critic_opt_state", "alpha_opt_state"),
        ),
        "ddpg": (DDPG(**small, hidden=8), ("policy", "critic"), ("policy_opt", "critic_opt")),
    }
    for name, (agent, online, opt_states) in agents.items():
        state = agent.init(key=getkey())
        genome = agent.genome(state)
        moved = jax.tree.map(lambda x: x + 1.0 if eqx.is_inexact_array(x) else x, genome)
        state = agent.with_genome(state, moved)  # the online networks moved, not the targets
        target = lambda s, n: getattr(s, f"target_{n}")  # noqa: E731
        for n in online:
            assert not bool(eqx.tree_equal(target(state, n), getattr(state, n))), (name, n)
        reset = agent.reset_targets(state)
        stored = agent.empty_optimiser_states(state)
        back = agent.init_optimiser_states(stored)
        for n in online:
            assert bool(eqx.tree_equal(target(reset, n), getattr(state, n))), (name, n)
            assert bool(eqx.tree_equal(target(back, n), getattr(state, n))), (name, n)
            assert target(stored, n) is None, (name, n)
        kept = lambda s: eqx.tree_at(  # noqa: E731
            lambda s: [target(s, n) for n in online], s, replace_fn=lambda _: None
        )
        assert bool(eqx.tree_equal(kept(reset), kept(state))), name  # only the targets changed
        assert all(getattr(stored, f) is None for f in opt_states), name
        assert all(getattr(back, f) is not None for f in opt_states), name


def test_hyperparameters_are_validated():
    with pytest.raises(ValueError, match="discount"):
        q.rl.TD3HParams(discount=1.5)
    with pytest.raises(ValueError, match="tau"):
        q.rl.SACHParams(tau=-0.1)
    with pytest.raises(ValueError, match="minibatch_size"):
        q.rl.TD3(observation_size=2, action_size=2, minibatch_size=0)
    with pytest.raises(ValueError, match="observation_size is 3 but the environment's is 2"):
        agent = q.rl.TD3(observation_size=3, action_size=2, num_envs=2, buffer_size=8)
        agent.init_run(ENV, agent.init(key=jr.key(0)), key=jr.key(1))


@given(splits=st.lists(st.integers(1, 6), min_size=1, max_size=4), seed=st.integers(0, 2**31 - 1))
def test_normaliser_matches_the_statistics_of_all_data(splits, seed):
    data = np.asarray(jr.normal(jr.key(seed), (sum(splits), 3))) * 3.0 + 1.0
    norm = q.rl.RunningNormaliser.create(3)
    start = 0
    for n in splits:
        norm = norm.update(jnp.asarray(data[start : start + n]))
        start += n
    np.testing.assert_allclose(norm.mean, data.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(norm.var, data.var(0), rtol=1e-3, atol=1e-4)
    assert float(norm.count) == len(data)


def test_tanh_gaussian_log_prob_matches_a_monte_carlo_density(getkey):
    policy = q.rl.TanhGaussianPolicy(3, 1, (8,), key=getkey())
    obs = jnp.ones(3)
    keys = jr.split(getkey(), 200_000)
    actions, logps = jax.vmap(lambda k: policy.sample(obs, key=k))(keys)
    # Histogram density of the squashed samples against exp(log_prob) at the same points.
    hist, edges = np.histogram(np.asarray(actions[:, 0]), bins=40, range=(-0.95, 0.95))
    width = edges[1] - edges[0]
    density = hist / (len(keys) * width)
    centres = (edges[:-1] + edges[1:]) / 2
    order = np.argsort(np.asarray(actions[:, 0]))
    model = np.interp(centres, np.asarray(actions[order, 0]), np.exp(np.asarray(logps[order])))
    mask = density > 0.05
    np.testing.assert_allclose(density[mask], model[mask], rtol=0.1)


def test_observation_normaliser_follows_the_training_observations(getkey):
    agent = q.rl.TD3(
        **SIZES, minibatch_size=16, normalise_observations=True, num_envs=4, buffer_size=64
    )
    state = agent.init_run(ENV, agent.init(key=getkey()), key=getkey())
    state, _ = agent.train(ENV, state, 3, key=getkey())
    norm = state.agent_state.normaliser
    assert float(norm.count) == 12.0
    # Every observation so far lies near the start (0, -0.85): the mean is there too.
    np.testing.assert_allclose(norm.mean, [0.0, -0.85], atol=0.35)


def test_td3_target_critic_every_step_is_qdax_pbt_td3s_soft_update(getkey):
    """`critic_target_every_step`: after each critic step the target critic moves by tau
    towards the new critic (QDax's PBT-TD3); by default it moves only on policy steps."""
    small = dict(observation_size=2, action_size=2, policy_hidden=(8,), critic_hidden=(8,))
    batch = q.envs.Transition(
        obs=jr.normal(getkey(), (16, 2)), next_obs=jr.normal(getkey(), (16, 2)),
        action=jr.uniform(getkey(), (16, 2), minval=-1, maxval=1),
        reward=jr.normal(getkey(), (16,)), terminated=jnp.zeros(16), truncated=jnp.zeros(16),
    )  # fmt: skip
    paper = q.rl.TD3(**small, minibatch_size=16)
    qdax = q.rl.TD3(**small, minibatch_size=16, critic_target_every_step=True)
    state = paper.init(key=getkey())
    state = eqx.tree_at(
        lambda s: s.steps, state, jnp.asarray(1, state.steps.dtype)
    )  # no policy step
    key = getkey()
    after_paper, _ = paper.update(state, batch, key=key)
    after_qdax, _ = qdax.update(state, batch, key=key)
    leaves = lambda m: jax.tree.leaves(eqx.filter(m, eqx.is_array))  # noqa: E731
    for a, b in zip(leaves(after_paper.target_critic), leaves(state.target_critic)):
        np.testing.assert_array_equal(a, b)  # the paper's: unchanged on a critic-only step
    tau = float(state.hparams.tau)
    for t, old, new in zip(
        leaves(after_qdax.target_critic), leaves(state.target_critic), leaves(after_qdax.critic)
    ):
        np.testing.assert_allclose(t, (1 - tau) * old + tau * new, rtol=1e-6, atol=1e-7)
    # The critics themselves took the same step; the policies were not touched.
    for a, b in zip(leaves(after_paper.critic), leaves(after_qdax.critic)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "init, weight_limit, zero_bias",
    [
        ("uniform", lambda i, o: 1 / np.sqrt(i), False),
        ("lecun_uniform", lambda i, o: np.sqrt(3 / i), True),
        ("xavier_uniform", lambda i, o: np.sqrt(6 / (i + o)), False),
    ],
)
def test_reinitialise_draws_each_layer_as_its_reference_does(init, weight_limit, zero_bias):
    """QDax's lecun-uniform with zero biases, the PGA-ME repository's Xavier actors (PyTorch's
    biases), the layers' own U(+-1/sqrt(fan_in)): each weight matrix spans its reference's
    interval (the extremes of hundreds of draws come within 2% of the limit), never leaving it."""
    policy = q.rl.TD3(observation_size=64, action_size=3, policy_hidden=(128,), policy_init=init)
    net = policy.init_policy(key=jr.key(0)).net
    for layer in net.layers:
        fan_in, fan_out = layer.weight.shape
        w, b = np.abs(np.asarray(layer.weight)), np.abs(np.asarray(layer.bias))
        assert 0.98 * weight_limit(fan_in, fan_out) < w.max() <= weight_limit(fan_in, fan_out)
        assert (b.max() == 0.0) if zero_bias else (0 < b.max() <= 1 / np.sqrt(fan_in))
    # Shapes and structure are those of the default draw; a bad name is refused.
    default = q.rl.TD3(observation_size=64, action_size=3, policy_hidden=(128,))
    assert eqx.tree_equal(
        jax.tree.map(np.shape, net), jax.tree.map(np.shape, default.init_policy(key=jr.key(0)).net)
    )
    with pytest.raises(ValueError, match="policy_init"):
        q.rl.TD3(observation_size=2, action_size=2, policy_init="he")
