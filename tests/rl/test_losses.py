"""Every loss and update rule against a value computed by hand in NumPy, on small hand-made
inputs chosen so that each term matters (a clip that bites, a terminal step, twin critics that
disagree in both directions). The networks have no hidden layer and hand-set weights, so NumPy
can write their outputs down."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd.rl._ppo_losses import _actor_loss, _approx_kl, _critic_epochs, _Samples


F = np.float32


def linear_policy(w):
    """A `DeterministicPolicy` with no hidden layer: ``tanh(obs @ w)``."""
    policy = q.rl.DeterministicPolicy(2, 2, (), key=jr.key(0))
    layer = lambda p: p.net.layers[0]
    return eqx.tree_at(
        lambda p: (layer(p).weight, layer(p).bias), policy, (jnp.asarray(w), jnp.zeros(2, F))
    )


def linear_twin(a, b):
    """`QCritics` with no hidden layer: ``[obs, action] @ a`` and ``[obs, action] @ b``."""
    critics = q.rl.QCritics(2, 2, (), key=jr.key(0))
    layer = lambda c, i: c.nets[i].layers[0]
    zero = jnp.zeros(1, F)
    return eqx.tree_at(
        lambda c: (layer(c, 0).weight, layer(c, 0).bias, layer(c, 1).weight, layer(c, 1).bias),
        critics, (jnp.asarray(a)[:, None], zero, jnp.asarray(b)[:, None], zero),
    )  # fmt: skip


OBS = np.array([[0.5, -1.0], [2.0, 0.3], [-0.7, 0.8]], F)
ACTION = np.array([[0.2, -0.9], [-0.5, 0.4], [0.9, 0.1]], F)
NEXT_OBS = np.array([[1.5, 0.2], [-0.4, -2.0], [0.1, 1.1]], F)
REWARD = np.array([1.0, -2.0, 0.5], F)
TERMINATED = np.array([0.0, 1.0, 0.0], F)
W = np.array([[1.2, -0.8], [0.5, 2.0]], F)  # large enough that smoothing noise clips actions
QA = np.array([1.0, -0.5, 0.8, 0.3], F)
QB = np.array([-0.6, 0.9, 0.2, 1.1], F)  # Q1 < Q2 on some rows, Q1 > Q2 on others


def _batch(terminated=TERMINATED):
    zeros = np.zeros(3, F)
    return q.envs.Transition(*(jnp.asarray(x) for x in (OBS, ACTION, REWARD, NEXT_OBS, terminated,
                                                    zeros)))  # fmt: skip


def _q(w, obs, action):
    return np.concatenate([obs, action], axis=-1) @ w


def _td3_state(agent, hparams):
    state = agent.init(hparams, key=jr.key(0))
    policy, twin = linear_policy(W), linear_twin(QA, QB)
    target_policy, target_twin = linear_policy(W * F(0.5)), linear_twin(QB, QA)  # targets differ
    return eqx.tree_at(
        lambda s: (s.policy, s.critic, s.target_policy, s.target_critic),
        state, (policy, twin, target_policy, target_twin),
    )  # fmt: skip


@pytest.mark.parametrize("terminated", [TERMINATED, np.zeros(3, F)], ids=["terminal", "none"])
def test_td3_critic_loss_by_hand(terminated):
    agent = q.rl.TD3(observation_size=2, action_size=2, minibatch_size=3)
    hparams = q.rl.TD3HParams(discount=0.9, reward_scaling=2.0, policy_noise=0.6, noise_clip=0.5)
    state = _td3_state(agent, hparams)
    key = jr.key(7)
    loss = agent.critic_loss(state.critic, state, _batch(terminated), key=key)
    eps = np.asarray(jr.normal(key, ACTION.shape))
    noise = np.clip(0.6 * eps, -0.5, 0.5)
    assert np.any(np.abs(0.6 * eps) > 0.5), "the noise clip must bite for this test to mean it"
    raw = np.tanh(NEXT_OBS @ (W * 0.5)) + noise
    if not terminated.any():  # both action bounds bite on bootstrapped rows
        assert np.any(raw > 1.0) and np.any(raw < -1.0)
    next_action = np.clip(raw, -1.0, 1.0)
    next_q = np.minimum(_q(QB, NEXT_OBS, next_action), _q(QA, NEXT_OBS, next_action))
    target = 2.0 * REWARD + 0.9 * (1.0 - terminated) * next_q
    q1, q2 = _q(QA, OBS, ACTION), _q(QB, OBS, ACTION)
    expected = np.mean((q1 - target) ** 2 + (q2 - target) ** 2)
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_td3_policy_loss_by_hand():
    agent = q.rl.TD3(observation_size=2, action_size=2, minibatch_size=3)
    state = _td3_state(agent, q.rl.TD3HParams())
    loss = agent.policy_loss(state.policy, state, _batch())
    expected = -np.mean(_q(QA, OBS, np.tanh(OBS @ W)))  # Q1 only, at the policy's actions
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_td3_act_explores_with_clipped_gaussian_noise_by_default():
    agent = q.rl.TD3(observation_size=2, action_size=2, minibatch_size=3)
    state = _td3_state(agent, q.rl.TD3HParams(expl_noise=0.7))
    keys = jr.split(jr.key(5), 3)
    acts = jax.vmap(lambda o, k: agent.act(state, o, key=k))(jnp.asarray(OBS), keys)
    eps = np.stack([np.asarray(jr.normal(k, (2,))) for k in keys])
    raw = np.tanh(OBS @ W) + 0.7 * eps
    assert np.any(raw > 1.0) and np.any(raw < -1.0), "both bounds must bite"
    np.testing.assert_allclose(np.asarray(acts), np.clip(raw, -1.0, 1.0), rtol=1e-5, atol=1e-6)
    greedy = jax.vmap(lambda o, k: agent.act(state, o, key=k, deterministic=True))
    np.testing.assert_allclose(np.asarray(greedy(jnp.asarray(OBS), keys)), np.tanh(OBS @ W),
                               rtol=1e-5)  # fmt: skip


def test_sac_act_samples_by_default_and_its_entropy_target():
    agent = q.rl.SAC(observation_size=2, action_size=2, minibatch_size=3)
    state = _sac_state(agent, q.rl.SACHParams(), log_alpha=0.0)
    key = jr.key(4)
    sampled = agent.act(state, jnp.asarray(OBS[0]), key=key)
    eps = np.asarray(jr.normal(key, (2,)))
    np.testing.assert_allclose(
        np.asarray(sampled), _np_tanh_gaussian(OBS[:1], eps, W, LOG_STD)[0][0], rtol=1e-5
    )
    greedy = agent.act(state, jnp.asarray(OBS[0]), key=key, deterministic=True)
    np.testing.assert_allclose(np.asarray(greedy), np.tanh(OBS[0] @ W), rtol=1e-5)
    assert q.rl.SAC(observation_size=2, action_size=3).entropy_target == -3.0
    assert (
        q.rl.SAC(observation_size=2, action_size=4, target_entropy_scale=0.5).entropy_target == -2.0
    )
    assert q.rl.SAC(observation_size=2, action_size=4, target_entropy=-0.3).entropy_target == -0.3


def linear_gaussian(w, log_std):
    """A `TanhGaussianPolicy` with no hidden layer: mean ``obs @ w``, a fixed ``log_std``."""
    policy = q.rl.TanhGaussianPolicy(2, 2, (), key=jr.key(0))
    weight = np.concatenate([w, np.zeros_like(w)], axis=1)
    bias = np.concatenate([np.zeros(2, F), log_std])
    layer = lambda p: p.net.layers[0]
    return eqx.tree_at(
        lambda p: (layer(p).weight, layer(p).bias), policy, (jnp.asarray(weight), jnp.asarray(bias))
    )


def _np_tanh_gaussian(obs, eps, w, log_std):
    u = obs @ w + np.exp(log_std) * eps
    gauss = -0.5 * eps**2 - log_std - 0.5 * np.log(2.0 * np.pi)
    return np.tanh(u), np.sum(gauss - np.log(1.0 - np.tanh(u) ** 2), axis=-1)


LOG_STD = np.array([-0.3, 0.2], F)


def _sac_state(agent, hparams, log_alpha):
    state = agent.init(hparams, key=jr.key(0))
    return eqx.tree_at(
        lambda s: (s.policy, s.critic, s.target_critic, s.log_alpha),
        state,
        (linear_gaussian(W, LOG_STD), linear_twin(QA, QB), linear_twin(QB, QA),
         jnp.asarray(log_alpha, F)),
    )  # fmt: skip


def test_sac_critic_and_policy_losses_by_hand():
    agent = q.rl.SAC(observation_size=2, action_size=2, minibatch_size=3)
    hparams = q.rl.SACHParams(discount=0.8, reward_scaling=3.0)
    state = _sac_state(agent, hparams, log_alpha=np.log(0.4))
    key = jr.key(11)
    loss = agent.critic_loss(state.critic, state, _batch(), key=key)
    eps = np.asarray(jr.normal(key, ACTION.shape))
    next_action, next_logp = _np_tanh_gaussian(NEXT_OBS, eps, W, LOG_STD)
    next_q = np.minimum(_q(QB, NEXT_OBS, next_action), _q(QA, NEXT_OBS, next_action))
    target = 3.0 * REWARD + 0.8 * (1.0 - TERMINATED) * (next_q - 0.4 * next_logp)
    expected = 0.5 * np.mean(
        (_q(QA, OBS, ACTION) - target) ** 2 + (_q(QB, OBS, ACTION) - target) ** 2
    )
    assert float(loss) == pytest.approx(expected, rel=1e-4)

    policy_loss, logp = agent.policy_loss(state.policy, state, _batch(), key=key)
    action, np_logp = _np_tanh_gaussian(OBS, eps, W, LOG_STD)
    q_min = np.minimum(_q(QA, OBS, action), _q(QB, OBS, action))
    assert float(policy_loss) == pytest.approx(np.mean(0.4 * np_logp - q_min), rel=1e-4)
    np.testing.assert_allclose(np.asarray(logp), np_logp, rtol=1e-4)


def test_sac_temperature_moves_towards_the_entropy_target():
    """The temperature's gradient is -(mean log-prob + target): with the policy's entropy above
    the target, alpha falls; below it, alpha rises (SAC's automatic tuning)."""
    batch = _batch()
    for target, direction in ((-20.0, -1.0), (20.0, 1.0)):
        agent = q.rl.SAC(observation_size=2, action_size=2, minibatch_size=3, target_entropy=target)
        state = _sac_state(agent, q.rl.SACHParams(alpha_lr=0.1), log_alpha=0.0)
        state = agent.init_optimiser_states(state)  # for the linear modules
        new, metrics = agent.update(state, batch, key=jr.key(3))
        step = float(new.log_alpha - state.log_alpha)
        assert np.sign(step) == direction and abs(step) == pytest.approx(0.1, rel=1e-3)  # Adam
    # The reported metrics: the losses, the new temperature and the policy's entropy estimate.
    critic_key, policy_key = jr.split(jr.key(3))
    critic_loss = agent.critic_loss(state.critic, state, batch, key=critic_key)
    policy_loss, logp = agent.policy_loss(state.policy, state, batch, key=policy_key)
    assert sorted(metrics) == ["alpha", "critic_loss", "entropy", "policy_loss"]
    assert float(metrics["critic_loss"]) == pytest.approx(float(critic_loss), rel=1e-6)
    assert float(metrics["policy_loss"]) == pytest.approx(float(policy_loss), rel=1e-6)
    assert float(metrics["alpha"]) == pytest.approx(float(jnp.exp(new.log_alpha)), rel=1e-6)
    assert float(metrics["entropy"]) == pytest.approx(-float(jnp.mean(logp)), rel=1e-6)


def test_soft_update_by_hand():
    target = {"w": jnp.asarray([1.0, -2.0], F)}
    online = {"w": jnp.asarray([3.0, 4.0], F)}
    out = q.rl.soft_update(target, online, jnp.asarray(0.25, F))
    np.testing.assert_allclose(np.asarray(out["w"]), [1.5, -0.5])


def test_td3_delays_the_policy_and_the_targets():
    """Critic every step; policy and both targets (at rate tau) every ``policy_delay`` steps."""
    agent = q.rl.TD3(observation_size=2, action_size=2, minibatch_size=3, policy_delay=2)
    state = _td3_state(agent, q.rl.TD3HParams(tau=0.5))
    state = agent.init_optimiser_states(eqx.tree_at(lambda s: s.steps, state, jnp.asarray(1)))
    state = eqx.tree_at(  # targets apart from the online networks again
        lambda s: (s.target_policy, s.target_critic), state,
        (linear_policy(W * F(0.5)), linear_twin(QB, QA)),
    )  # fmt: skip
    batch = _batch()
    odd, metrics = agent.update(state, batch, key=jr.key(0))  # steps 1: no policy step
    assert bool(jnp.isnan(metrics["policy_loss"]))
    assert bool(eqx.tree_equal(odd.policy, state.policy))
    assert bool(eqx.tree_equal(odd.target_policy, state.target_policy))
    assert not bool(eqx.tree_equal(odd.critic, state.critic))
    even, metrics = agent.update(odd, batch, key=jr.key(1))  # steps 2: policy and targets
    assert bool(jnp.isfinite(metrics["policy_loss"]))
    assert not bool(eqx.tree_equal(even.policy, odd.policy))
    mix = lambda target, online: jax.tree.map(lambda t, o: 0.5 * t + 0.5 * o, target, online)
    expected = mix(odd.target_policy, even.policy)
    assert bool(eqx.tree_equal(even.target_policy, expected, rtol=1e-6, atol=1e-7))
    expected = mix(odd.target_critic, even.critic)
    assert bool(eqx.tree_equal(even.target_critic, expected, rtol=1e-6, atol=1e-7))


class FixedActor(q.rl.AbstractActor):
    """An actor whose log-probabilities and entropy are given per sample (through ``obs[0]``,
    an index into the tables)."""

    log_probs: jax.Array
    entropies: jax.Array

    def log_prob(self, obs, action):
        return self.log_probs[obs[0].astype(jnp.int32)]

    def entropy(self, obs):
        return self.entropies[obs[0].astype(jnp.int32)]

    def sample(self, obs, *, key):
        return jnp.zeros(1, F)

    def mode(self, obs):
        return jnp.zeros(1, F)

    def log_prob_and_entropy(self, obs, action):
        return self.log_prob(obs, action), self.entropy(obs)

    def sample_and_log_prob(self, obs, *, key):
        action = self.sample(obs, key=key)
        return action, self.log_prob(obs, action)


def _samples(old_log_probs, advantages, targets):
    n = len(advantages)
    obs = np.stack([np.arange(n, dtype=F), np.zeros(n, F)], axis=1)
    return _Samples(
        jnp.asarray(obs), jnp.zeros((n, 1), F), jnp.asarray(old_log_probs, F),
        jnp.asarray(advantages, F), jnp.asarray(targets, F),
    )  # fmt: skip


def test_ppo_surrogate_by_hand():
    # Ratios 1.5 (clipped above when the advantage is positive), 0.6 (clipped below when it is
    # negative), 1.5 with a negative advantage and 0.6 with a positive one (not clipped: the
    # minimum keeps the unclipped, more pessimistic term), and 1.0.
    new_lp = np.log(np.array([1.5, 0.6, 1.5, 0.6, 1.0], F))
    advantages = np.array([2.0, -1.0, -3.0, 0.5, 1.5], F)
    entropies = np.array([0.1, 0.2, 0.3, 0.4, 0.5], F)
    actor = FixedActor(jnp.asarray(new_lp), jnp.asarray(entropies))
    data = _samples(np.zeros(5, F), advantages, np.zeros(5, F))
    h = q.rl.PPOHParams(clip_eps=0.2, ent_coef=0.05)
    loss, (entropy, minus_log_ratio) = _actor_loss(actor, data, h, normalise_advantages=False)
    # jaxagents' KL statistic: the sum of -log ratio (old log-probabilities are 0 here).
    assert float(minus_log_ratio) == pytest.approx(-new_lp.sum(), rel=1e-5)
    ratio = np.exp(new_lp)
    surrogate = np.minimum(ratio * advantages, np.clip(ratio, 0.8, 1.2) * advantages)
    assert surrogate.tolist() == pytest.approx([2.4, -0.8, -4.5, 0.3, 1.5], rel=1e-5)
    assert float(loss) == pytest.approx(-surrogate.mean() - 0.05 * entropies.mean(), rel=1e-5)
    assert float(entropy) == pytest.approx(entropies.mean(), rel=1e-6)
    # Standardised advantages: the same formula on (a - mean) / (std + 1e-8), on advantages
    # whose mean is not zero (the ones above have mean 0, which would hide the centring).
    shifted = advantages + F(0.7)
    data = _samples(np.zeros(5, F), shifted, np.zeros(5, F))
    loss, _ = _actor_loss(actor, data, h, normalise_advantages=True)
    a = (shifted - shifted.mean()) / (shifted.std() + 1e-8)
    surrogate = np.minimum(ratio * a, np.clip(ratio, 0.8, 1.2) * a)
    assert float(loss) == pytest.approx(-surrogate.mean() - 0.05 * entropies.mean(), rel=1e-4)


def test_ppo_approximate_kl_by_hand():
    old = np.log(np.array([0.5, 0.2, 0.3], F))
    new = np.log(np.array([0.4, 0.3, 0.3], F))
    actor = FixedActor(jnp.asarray(new), jnp.zeros(3, F))
    kl = _approx_kl(actor, _samples(old, np.zeros(3, F), np.zeros(3, F)))
    r = np.exp(new - old)
    assert float(kl) == pytest.approx(np.mean((r - 1.0) - np.log(r)), rel=1e-5)
    assert float(kl) > 0.0


def test_ppo_critic_loss_by_hand():
    critic = q.rl.ValueCritic(2, (), key=jr.key(0))  # no hidden layer: obs @ w + b
    layer = lambda c: c.net.layers[0]
    critic = eqx.tree_at(lambda c: (layer(c).weight, layer(c).bias), critic,
                         (jnp.asarray([[0.5], [-1.0]], F), jnp.asarray([0.25], F)))  # fmt: skip
    targets = np.array([1.0, -0.5, 2.0, 0.0], F)
    data = _samples(np.zeros(4, F), np.zeros(4, F), targets)
    h = q.rl.PPOHParams(vf_coef=0.7, critic_lr=0.0)  # a zero rate reports the loss, moves nothing
    out, _, metrics = _critic_epochs(
        critic, q.rl.init_clipped_adam(critic), data, h, num_minibatches=1, epochs=1,
        key=jr.key(1),
    )  # fmt: skip
    values = np.asarray(data.obs) @ np.array([0.5, -1.0], F) + 0.25
    assert float(metrics["critic_loss"]) == pytest.approx(0.7 * np.mean((values - targets) ** 2))
    assert bool(eqx.tree_equal(out, critic))
    # With learning, the reported loss is the last epoch's: that of the critic two updates on.
    h = q.rl.PPOHParams(vf_coef=0.7, critic_lr=0.05)
    run = lambda epochs: _critic_epochs(
        critic, q.rl.init_clipped_adam(critic), data, h, num_minibatches=1, epochs=epochs,
        key=jr.key(1),
    )  # fmt: skip
    two_on, _, _ = run(2)
    _, _, metrics = run(3)
    w, b = (np.asarray(x) for x in (layer(two_on).weight, layer(two_on).bias))
    values = np.asarray(data.obs) @ w[:, 0] + b[0]
    expected = 0.7 * np.mean((values - targets) ** 2)
    assert float(metrics["critic_loss"]) == pytest.approx(expected, rel=1e-5)
    first = 0.7 * np.mean((np.asarray(data.obs) @ np.array([0.5, -1.0], F) + 0.25 - targets) ** 2)
    assert abs(expected - first) > 1e-3, "the epochs' losses must differ for this to mean it"
