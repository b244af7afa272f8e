"""DCRL-ME's emitter checked on small hand-made inputs: the similarity and the normalisation,
the conditioned critic's loss and target against values computed by hand, actor injection, the
batch split and lineage, the targets every stored row carries, the policy-gradient step,
DCG-ME's actor episodes, bad input; and a learning test on the point maze (the injected actors
reach their target cells)."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q


ENV = q.envs.PointMaze(walls=False, length=10)
SCORER = q.PolicyScorer(ENV)
TD3 = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(8,), critic_hidden=(16,),
               minibatch_size=16, critic_target_every_step=True)  # fmt: skip
CELLS = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)
HP = q.rl.TD3HParams(discount=0.9, reward_scaling=2.0, policy_noise=0.3, noise_clip=0.2)


def _emitter(**overrides):
    fields = dict(
        td3=TD3, hparams=HP, descriptor_bounds=ENV.descriptor_bounds, ga_batch_size=3,
        pg_batch_size=2, ai_batch_size=2, critic_steps=3, pg_steps=2, buffer_size=500, pg_lr=1e-2,
        reward_offset=ENV.reward_offset,
    )  # fmt: skip
    return q.dcrl_emitter(**{**fields, **overrides})


@pytest.fixture(scope="module")
def scored():
    """Seven random policies, their episodes, and a repertoire that holds them with ids
    10..16 (hand-made descriptors: each policy in its own cell)."""
    return _scored(TD3)


def _scored(td3):
    policies = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(jr.split(jr.key(0), 7))
    _, _, extra = SCORER(policies, key=jr.key(1))
    descriptors = jnp.stack([jnp.linspace(-0.9, 0.9, 7), jnp.linspace(0.8, -0.8, 7)], axis=1)
    fitnesses = jnp.array([1.0, 2.0, 0.5, 7.0, 3.0, -1.0, 4.0])
    ids = jnp.arange(10, 17, dtype=jnp.int32)
    repertoire, _ = q.init_repertoire(CELLS, policies, descriptors, fitnesses, ids)
    return policies, descriptors, fitnesses, extra, repertoire


def _init(emitter, scored, key):
    policies, descriptors, fitnesses, extra, repertoire = scored
    return emitter.init(repertoire, policies, descriptors, fitnesses, extra, key=key)


def test_normalisation_and_similarity_by_hand():
    low, high = jnp.array([-1.0, 0.0]), jnp.array([1.0, 4.0])
    d = jnp.array([[0.0, 1.0], [1.0, 4.0]])
    np.testing.assert_allclose(q.normalise_descriptors(d, low, high), [[0, -0.5], [1, 1]])
    t = jnp.array([[0.3, -0.1], [1.0, 1.0]])
    got = q.internal.descriptor_similarity(jnp.array([[0.0, 0.3], [1.0, 1.0]]), t, jnp.float32(0.1))
    np.testing.assert_allclose(got, [np.exp(-0.5 / 0.1), 1.0], rtol=1e-6)


@pytest.mark.slow  # the fast tier's budget; fast sibling: the DCRL emitter's other tests
def test_conditioned_critic_loss_and_target_by_hand(scored, getkey):
    """The loss TD3 takes on `conditioned_transitions`: targets from the target actor and the
    twin target critics at `(next_obs, target)`, smoothing noise clipped, rewards
    `(r + offset) * exp(-|d - target| / l)`, no bootstrap after a terminal step."""
    emitter = _emitter(lengthscale=0.5, reward_offset=1.5)
    state = _init(emitter, scored, getkey()).td3
    # Targets unlike the online networks, so that using the wrong ones shows.
    bump = lambda m, c: jax.tree.map(lambda x: x + c if eqx.is_inexact_array(x) else x, m)
    state = eqx.tree_at(
        lambda s: (s.target_critic, s.target_policy),
        state,
        (bump(state.target_critic, 0.05), bump(state.target_policy, -0.1)),
    )
    rng = np.random.default_rng(0)
    n = 6
    f = lambda *shape: rng.uniform(-1, 1, shape).astype(np.float32)
    obs, action, next_obs, desc, target = f(n, 2), f(n, 2), f(n, 2), f(n, 2), f(n, 2)
    reward, terminated = f(n), np.array([0, 1, 0, 0, 1, 0], np.float32)
    rows = q.internal.DescriptorTransition(
        q.envs.Transition(
            *map(jnp.asarray, (obs, action, reward, next_obs, terminated, np.zeros(n, np.float32)))
        ),  # fmt: skip
        jnp.asarray(desc),
        jnp.asarray(target),
    )
    batch = q.internal.conditioned_transitions(rows, jnp.float32(0.5), 1.5)
    key = getkey()
    got = emitter.conditioned_agent.critic_loss(state.critic, state, batch, key=key)

    sim = np.exp(-np.linalg.norm(desc - target, axis=1) / 0.5)
    noise = np.clip(0.3 * np.asarray(jr.normal(key, (n, 2))), -0.2, 0.2)
    wide_next = np.concatenate([next_obs, target], 1)
    next_action = np.clip(np.asarray(state.target_policy(jnp.asarray(wide_next))) + noise, -1, 1)
    next_q = np.asarray(state.target_critic(jnp.asarray(wide_next), jnp.asarray(next_action)))
    y = 2.0 * sim * (reward + 1.5) + 0.9 * (1 - terminated) * next_q.min(axis=1)
    q_now = np.asarray(
        state.critic(jnp.asarray(np.concatenate([obs, target], 1)), jnp.asarray(action))
    )
    want = np.mean(np.sum((q_now - y[:, None]) ** 2, axis=1))
    np.testing.assert_allclose(float(got), want, rtol=1e-5)
    np.testing.assert_allclose(batch.reward, sim * (reward + 1.5), rtol=1e-6)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_injected_actor_acts_as_the_conditioned_actor(scored, getkey, layer_norm):
    td3 = dataclasses.replace(TD3, policy_layer_norm=layer_norm)
    emitter = _emitter(td3=td3)
    state = _init(emitter, _scored(td3) if layer_norm else scored, getkey())
    actor = state.td3.policy
    obs = jr.uniform(getkey(), (9, 2), minval=-1.0, maxval=1.0)
    descriptors = jr.uniform(getkey(), (3, 2), minval=-1.0, maxval=1.0)
    injected = emitter.inject(state, descriptors)
    for i in range(3):
        policy = jax.tree.map(lambda x, i=i: x[i] if eqx.is_array(x) else x, injected)
        assert policy.net.in_size == 2  # an ordinary policy of the population
        target = emitter.normalise(descriptors[i])
        wide = jnp.concatenate([obs, jnp.broadcast_to(target, (9, 2))], axis=1)
        np.testing.assert_allclose(policy(obs), actor(wide), rtol=1e-5, atol=1e-6)


def test_emit_splits_the_batch_with_its_lineage(scored, getkey):
    emitter = _emitter()
    state = _init(emitter, scored, getkey())
    repertoire = scored[4]
    genotypes, lineage = emitter.emit(repertoire, state, key=getkey())
    assert jax.tree.leaves(genotypes)[0].shape[0] == emitter.batch_size == 7
    O = q.Origin
    assert lineage.kind.tolist() == [O.EVO] * 3 + [O.GRADIENT] * 2 + [O.INJECTED] * 2
    # Policy-gradient parents: the slots drawn into the state, named by their stored ids.
    assert bool(jnp.all(jnp.isfinite(repertoire.fitnesses[state.pg_cells])))
    assert lineage.parent1[3:5].tolist() == repertoire.extra[state.pg_cells].tolist()
    np.testing.assert_array_equal(state.pg_targets, repertoire.descriptors[state.pg_cells])
    assert lineage.parent1[5:].tolist() == [-1, -1] == lineage.parent2[3:5].tolist()
    injected = jax.tree.map(lambda x: x[5:], genotypes)
    assert eqx.tree_equal(injected, emitter.inject(state, state.ai_targets))
    filled = repertoire.descriptors[jnp.isfinite(repertoire.fitnesses)]
    for t in np.asarray(state.ai_targets):  # targets are stored descriptors
        assert np.any(np.all(np.asarray(filled) == t, axis=1))


def test_policy_gradient_step_follows_its_target(scored, getkey):
    emitter = _emitter(pg_steps=1, pg_lr=0.05)
    state = _init(emitter, scored, getkey())
    state = emitter.train(state, key=getkey())  # a critic that has learnt something
    parent = jax.tree.map(lambda x: jnp.stack([x[0]] * 3), scored[0])
    targets = jnp.array([[0.5, 0.5], [0.5, 0.5], [-0.7, 0.2]])
    key = getkey()
    children = emitter.pg_variation(parent, targets, state, key=key)
    leaves = [np.asarray(x) for x in jax.tree.leaves(children)]
    assert all(np.array_equal(x[0], x[1]) for x in leaves)  # one batch, one target
    assert any(not np.allclose(x[0], x[2]) for x in leaves)  # another target, another child
    obs = state.buffer.sample(TD3.minibatch_size, key=jr.split(key, 1)[0]).transition.obs
    critic = state.td3.critic

    def q1(policy, target):
        wide = jnp.concatenate([obs, jnp.broadcast_to(target, obs.shape)], 1)
        return float(jnp.mean(critic.q1(wide, policy(obs))))

    one = lambda tree, i: jax.tree.map(lambda x: x[i], tree)
    for i in (0, 2):
        assert q1(one(children, i), targets[i]) > q1(one(parent, i), targets[i])


def test_state_update_labels_every_row_with_its_target(scored, getkey):
    policies, descriptors, fitnesses, extra, repertoire = scored
    emitter = _emitter(critic_steps=4)
    state = _init(emitter, scored, getkey())
    rows, valid = q.episode_transitions(extra)
    before = int(state.buffer.size)
    assert before == int(valid.sum()) > 0
    # The same seven episodes scored as the batch; the second GA child's descriptor is NaN.
    bad = descriptors.at[1, 0].set(jnp.nan)
    _, info = repertoire.add(policies, bad, fitnesses, jnp.zeros(7, jnp.int32))
    new = emitter.state_update(
        state, repertoire, policies, bad, fitnesses, extra, add_info=info, key=getkey()
    )
    steps = extra.episodes.valid.shape[1]
    kept = np.asarray(valid).reshape(7, steps).copy()
    kept[1] = 0
    assert int(new.buffer.size) == before + int(kept.sum())
    stored = jax.tree.map(lambda x: np.asarray(x[before : int(new.buffer.size)]), new.buffer.data)
    targets = np.concatenate([np.asarray(bad[:3]), state.pg_targets, state.ai_targets])
    which = np.repeat(np.arange(7), steps)[kept.reshape(-1) > 0]
    norm = lambda x: np.asarray(emitter.normalise(jnp.asarray(x)))
    np.testing.assert_allclose(stored.target, norm(targets)[which], rtol=1e-6)
    np.testing.assert_allclose(stored.descriptor, norm(bad)[which], rtol=1e-6)
    np.testing.assert_array_equal(stored.transition.obs, np.asarray(rows.obs)[kept.reshape(-1) > 0])
    assert int(new.td3.steps) == int(state.td3.steps) + 4
    # The next batch's targets come from the repertoire it will see.
    np.testing.assert_array_equal(new.pg_targets, repertoire.descriptors[new.pg_cells])


@pytest.mark.slow
def test_dcg_me_plays_the_conditioned_actor_for_data(scored, getkey):
    policies, descriptors, fitnesses, extra, repertoire = scored
    emitter = _emitter(pg_batch_size=4, ai_batch_size=0, actor_evals=3, scorer=SCORER)
    state = _init(emitter, scored, getkey())
    before = int(state.buffer.size)
    genotypes, lineage = emitter.emit(repertoire, state, key=getkey())
    assert int(q.Origin.INJECTED) not in lineage.kind.tolist()
    _, info = repertoire.add(policies, descriptors, fitnesses, jnp.zeros(7, jnp.int32))
    new = emitter.state_update(
        state, repertoire, policies, descriptors, fitnesses, extra, add_info=info, key=getkey()
    )
    # The batch's 7 episodes and 3 of the actor's (no wall, no early end: all steps valid).
    assert int(new.buffer.size) == before + 10 * ENV.length


@pytest.mark.parametrize(
    "overrides, error, match",
    [
        (dict(lengthscale=0.0), ValueError, "lengthscale"),
        (dict(descriptor_bounds=((0.0, 0.0), (1.0, 0.0))), ValueError, "descriptor_low must be"),
        (dict(descriptor_bounds=((0.0, 0.0, 0.0), (1.0, 1.0))), ValueError, "broadcast"),
        (dict(actor_evals=2), ValueError, "actor_evals > 0 needs a scorer"),
        (dict(ga_batch_size=0, variation=None), ValueError, None),
        (dict(pg_lr=-1.0), ValueError, "pg_lr"),
        (dict(reward_offset=float("inf")), ValueError, "reward_offset"),
        (
            dict(td3=dataclasses.replace(TD3, policy_layer_norm=True, policy_affine=True)),
            ValueError,
            "policy_affine",
        ),  # fmt: skip
        (
            dict(td3=dataclasses.replace(TD3, normalise_observations=True)),
            ValueError,
            "normalise_observations",
        ),  # fmt: skip
        (dict(pg_batch_size=-1), ValueError, "pg_batch_size"),
    ],
)
def test_bad_input_names_the_argument(overrides, error, match):
    if match is None:  # a valid split: no GA at all
        assert _emitter(**overrides).ga is None
        return
    with pytest.raises(error, match=match):
        _emitter(**overrides)


def test_bad_batches_are_refused_with_the_reason(scored, getkey):
    policies, descriptors, fitnesses, extra, repertoire = scored
    emitter = _emitter()
    with pytest.raises(TypeError, match="ScoringExtra"):
        emitter.init(repertoire, policies, descriptors, fitnesses, None, key=getkey())
    three = q.GridTessellation((2, 2, 2), minval=-1.0, maxval=1.0)
    wide, _ = q.init_repertoire(three, policies, jnp.zeros((7, 3)), fitnesses)
    with pytest.raises(ValueError, match="3 descriptors"):
        emitter.init(wide, policies, jnp.zeros((7, 3)), fitnesses, extra, key=getkey())
    wider = dataclasses.replace(TD3, policy_hidden=(9,))
    with pytest.raises(ValueError, match="shaped as td3.init_policy makes them"):
        _emitter(td3=wider).init(repertoire, policies, descriptors, fitnesses, extra, key=getkey())
    state = _init(emitter, scored, getkey())
    six = jax.tree.map(lambda x: x[:6], (policies, descriptors, fitnesses, extra))
    _, info = repertoire.add(*six[:3], jnp.zeros(6, jnp.int32))
    with pytest.raises(ValueError, match=r"\(7,\)"):
        emitter.state_update(state, repertoire, *six, add_info=info, key=getkey())


@pytest.mark.slow
def test_injected_actors_reach_their_target_cells():
    """On the open point maze, DCRL-ME's conditioned actor, injected at the descriptors of the
    repertoire's elites, ends its episodes near them: from about 1 (a fresh actor) to under
    0.15 on average, and within half a cell's width (an eighth of the arena's) for most."""
    env = q.envs.PointMaze(walls=False, length=30)
    td3 = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(32,), critic_hidden=(64, 64),
                   minibatch_size=64, critic_target_every_step=True)  # fmt: skip
    emitter = q.dcrl_emitter(
        td3=td3, hparams=q.rl.TD3HParams(policy_lr=1e-3, critic_lr=1e-3),
        descriptor_bounds=env.descriptor_bounds, ga_batch_size=16, pg_batch_size=8, ai_batch_size=8,
        critic_steps=100, pg_steps=5, pg_lr=5e-3, buffer_size=50_000, lengthscale=0.2,
        reward_offset=env.reward_offset,
    )  # fmt: skip
    scorer = q.PolicyScorer(env)
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, lineage=True)
    cells = q.GridTessellation((8, 8), minval=-1.0, maxval=1.0)
    population = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(jr.split(jr.key(1), 32))
    state, _ = algo.init(population, cells, key=jr.key(2))

    @eqx.filter_jit
    def reached(state):
        rep = state.repertoire
        _, got = scorer(emitter.inject(state.emitter_state, rep.descriptors), key=jr.key(5))[:2]
        filled = jnp.isfinite(rep.fitnesses)
        count = jnp.sum(filled.astype(jnp.float32))
        miss = jnp.linalg.norm(got - rep.descriptors, axis=-1)
        near = (miss < 0.125).astype(jnp.float32)  # within half a cell's width
        return jnp.sum(jnp.where(filled, miss, 0.0)) / count, jnp.sum(
            jnp.where(filled, near, 0.0)
        ) / count

    before, _ = reached(state)
    state = eqx.filter_jit(q.run)(algo, state, 30, key=jr.key(3))[0]
    after, near = reached(state)
    assert float(before) > 0.5
    assert float(after) < 0.15 and float(near) > 0.8, (float(after), float(near))


# ------------------------------------------------------------------------------ the job
