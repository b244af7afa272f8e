"""The PGA-ME emitter's parts, checked exactly on small hand-made inputs (no whole runs): the
batch split of both conventions, the greedy actor's start, the critic warm-up, the lineage of
`emit`, one policy-gradient step against Adam computed by hand, and what `state_update` stores.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, strategies as st

import eqx_qd as q
from eqx_qd._qdrl import pga_me


TD3 = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(8,), critic_hidden=(16,),
            minibatch_size=16)  # fmt: skip
ENV = q.envs.PointMaze(walls=False, length=10)
SCORER = q.PolicyScorer(ENV)
CELLS = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)


def _emitter(**overrides):
    fields = dict(
        batch_size=4, td3=TD3, hparams=q.rl.TD3HParams(), critic_steps=3, pg_steps=2,
        buffer_size=500, pg_lr=1e-2, critic_warmup=False,
    )  # fmt: skip
    return q.QualityPGEmitter(**{**fields, **overrides})


@pytest.fixture(scope="module")
def scored():
    """Six random policies, their episodes, and a repertoire that holds them with ids 10..15.
    The hand-made descriptors put each policy in its own cell and make policy 3 the best."""
    policies = eqx.filter_vmap(lambda k: TD3.init_policy(key=k))(jr.split(jr.key(0), 6))
    _, _, extra = SCORER(policies, key=jr.key(1))
    descriptors = jnp.stack([jnp.linspace(-0.9, 0.9, 6), jnp.zeros(6)], axis=1)
    fitnesses = jnp.array([1.0, 2.0, 0.5, 7.0, 3.0, -1.0])
    ids = jnp.arange(10, 16, dtype=jnp.int32)
    repertoire, _ = q.init_repertoire(CELLS, policies, descriptors, fitnesses, ids)
    return policies, descriptors, fitnesses, extra, repertoire


def _init(emitter, scored, key):
    policies, descriptors, fitnesses, extra, repertoire = scored
    return emitter.init(repertoire, policies, descriptors, fitnesses, extra, key=key)


@pytest.mark.parametrize(
    "batch_size, ga_fraction, original, qdax",
    [(100, 0.5, (49, 51), (50, 50)), (64, 0.5, (31, 33), (32, 32)), (2, 0.5, (0, 2), (1, 1)),
     (2, 1.0, (1, 1), (1, 1)), (10, 0.0, (0, 10), (0, 10)), (10, 0.25, (2, 8), (2, 8))],
)  # fmt: skip
def test_batch_split_of_both_conventions(batch_size, ga_fraction, original, qdax):
    # (GA, PG with the greedy actor): the original's 49 / 50 + 1 and QDax's 50 / 49 + 1.
    assert pga_me.pgame_split(batch_size, ga_fraction, "original") == original
    assert pga_me.pgame_split(batch_size, ga_fraction, "qdax") == qdax


@given(st.integers(2, 300), st.floats(0.0, 1.0), st.sampled_from(["original", "qdax"]))
def test_batch_split_keeps_the_greedy_slot(batch_size, ga_fraction, convention):
    num_evo, pg_batch_size = pga_me.pgame_split(batch_size, ga_fraction, convention)
    assert num_evo + pg_batch_size == batch_size and pg_batch_size >= 1 and num_evo >= 0
    others = batch_size - 1 if convention == "original" else batch_size
    assert num_evo == min(int(ga_fraction * others), batch_size - 1)


def test_pgame_emitter_follows_its_convention():
    common = dict(td3=TD3, hparams=q.rl.TD3HParams(), critic_steps=1, pg_steps=1,
                  pg_lr=1e-3, buffer_size=100)  # fmt: skip
    ga, pg = q.pgame_emitter(batch_size=100, ga_fraction=0.5, **common).emitters
    assert (ga.batch_size, pg.batch_size) == (49, 51)
    assert pg.greedy_init == "best" and pg.critic_warmup is True
    ga, pg = q.pgame_emitter(batch_size=100, ga_fraction=0.5, convention="qdax", **common).emitters
    assert (ga.batch_size, pg.batch_size) == (50, 50)
    assert pg.greedy_init == "first" and pg.critic_warmup is False
    ga, pg = q.pgame_emitter(batch_size=2, ga_fraction=1.0, **common).emitters
    assert (ga.batch_size, pg.batch_size) == (1, 1)  # one GA slot beside the greedy actor
    (only_pg,) = q.pgame_emitter(batch_size=10, ga_fraction=0.0, **common).emitters
    assert isinstance(only_pg, q.QualityPGEmitter) and only_pg.batch_size == 10
    with pytest.raises(ValueError, match="pgame_emitter: convention"):
        q.pgame_emitter(batch_size=10, ga_fraction=0.5, convention="pytorch", **common)


def test_pgame_emitter_ga_operators():
    common = dict(td3=TD3, hparams=q.rl.TD3HParams(), critic_steps=1, pg_steps=1,
                  pg_lr=1e-3, buffer_size=100, batch_size=10, ga_fraction=0.5)  # fmt: skip
    ga = q.pgame_emitter(**common).emitters[0]
    assert isinstance(ga.variation, q.IsoLineVariation) and ga.mutation is None
    assert float(ga.variation.iso_sigma) == np.float32(0.005)
    assert float(ga.variation.line_sigma) == np.float32(0.05)
    sbx, gauss = q.SBXCrossover(eta_c=10.0), q.GaussianMutation(0.1)
    ga = q.pgame_emitter(mutation=gauss, **common).emitters[0]
    assert ga.variation_percentage == 0.0 and ga.mutation is gauss and ga.variation is None
    ga = q.pgame_emitter(variation=sbx, **common).emitters[0]
    assert ga.variation_percentage == 1.0 and ga.variation is sbx
    ga = q.pgame_emitter(variation=sbx, mutation=gauss, **common).emitters[0]
    assert ga.variation == q.MutatedVariation(sbx, gauss) and ga.variation_percentage == 1.0


def test_mutated_variation_mutates_the_children(getkey):
    x1, x2 = jr.normal(getkey(), (5, 3)), jr.normal(getkey(), (5, 3))
    sbx, gauss = q.SBXCrossover(eta_c=10.0), q.GaussianMutation(0.1)
    key = getkey()
    k1, k2 = jr.split(key)
    expected = gauss(sbx(x1, x2, key=k1), key=k2)
    np.testing.assert_array_equal(q.MutatedVariation(sbx, gauss)(x1, x2, key=key), expected)
    # (beartype, on under pytest, names the parameter first; the module's check otherwise)
    with pytest.raises(TypeError, match="parameter 'mutation'|MutatedVariation.mutation"):
        q.MutatedVariation(sbx, sbx)
    with pytest.raises(TypeError, match="parameter 'variation'|MutatedVariation.variation"):
        q.MutatedVariation(gauss, gauss)


def test_greedy_actor_starts_from_the_best_elite_or_the_first_genotype(scored):
    policies = scored[0]
    best = _init(_emitter(greedy_init="best"), scored, jr.key(2))
    first = _init(_emitter(greedy_init="first"), scored, jr.key(2))
    for state, row in ((best, 3), (first, 0)):  # policy 3 has the highest fitness
        expected = jax.tree.map(lambda x: x[row], policies)
        assert eqx.tree_equal(state.td3.policy, expected)
        assert eqx.tree_equal(state.td3.target_policy, expected)
        assert int(state.td3.steps) == 0
    assert eqx.tree_equal(best.td3.critic, first.td3.critic)  # the same key, the same critic
    # An empty repertoire has no best elite: the first genotype.
    policies, descriptors, fitnesses, extra, repertoire = scored
    empty = q.MAPElitesRepertoire.empty(CELLS, jax.tree.map(lambda x: x[5], policies))
    state = _emitter().init(empty, policies, descriptors, fitnesses, extra, key=jr.key(2))
    assert eqx.tree_equal(state.td3.policy, jax.tree.map(lambda x: x[0], policies))
    with pytest.raises(ValueError, match="QualityPGEmitter.greedy_init"):
        _emitter(greedy_init="random")
    with pytest.raises(TypeError, match="parameter 'critic_warmup'|QualityPGEmitter.critic_warmup"):
        _emitter(critic_warmup=1)


def test_critic_warmup_trains_before_the_first_batch(scored):
    cold_emitter, warm_emitter = _emitter(), _emitter(critic_warmup=True)
    key = jr.key(3)
    cold, warm = _init(cold_emitter, scored, key), _init(warm_emitter, scored, key)
    assert int(cold.td3.steps) == 0 and int(warm.td3.steps) == 3
    # Exactly the cold state after `critic_steps` TD3 steps, with init's second key.
    expected = cold_emitter._train_critic(cold, key=jr.split(key)[1])
    assert eqx.tree_equal(warm, expected)
    assert not eqx.tree_equal(warm.td3.critic, cold.td3.critic)


def test_emit_lineage_and_greedy_last(scored, getkey):
    repertoire = scored[4]
    emitter = _emitter(pg_steps=0)  # no steps: the offspring are the selected parents
    state = _init(emitter, scored, getkey())
    key = getkey()
    offspring, lineage = emitter.emit(repertoire, state, key=key)
    select_key, _ = jr.split(key)
    parents = repertoire.select(3, key=select_key)
    assert eqx.tree_equal(jax.tree.map(lambda x: x[:3], offspring), parents.genotypes)
    assert eqx.tree_equal(jax.tree.map(lambda x: x[3], offspring), state.td3.policy)
    np.testing.assert_array_equal(lineage.parent1, [*np.asarray(parents.extra), -1])
    np.testing.assert_array_equal(lineage.parent2, [-1, -1, -1, -1])
    gradient, greedy = int(q.Origin.GRADIENT), int(q.Origin.GREEDY)
    np.testing.assert_array_equal(lineage.kind, [gradient, gradient, gradient, greedy])
    # A batch of one is the greedy actor alone.
    one = _emitter(batch_size=1)
    genotypes, lineage = one.emit(repertoire, state, key=getkey())
    assert eqx.tree_equal(genotypes, jax.tree.map(lambda x: x[None], state.td3.policy))
    np.testing.assert_array_equal(lineage.kind, [greedy])
    np.testing.assert_array_equal(lineage.parent1, [-1])


def test_one_policy_gradient_step_is_adam_by_hand(scored, getkey):
    """One step from a fresh Adam: ``theta - lr * g / (|g| + eps)`` per parameter, where g is
    the gradient of ``-mean Q1(s, pi(s))`` on the one replay batch the step draws."""
    emitter = _emitter(pg_steps=1, pg_lr=0.05)
    state = _init(_emitter(critic_warmup=True), scored, getkey())  # a critic that has trained
    parents = jax.tree.map(lambda x: x[:2], scored[0])
    key = getkey()
    children = emitter.pg_variation(parents, state, key=key)
    batch = state.buffer.sample(TD3.minibatch_size, key=jr.split(key, 1)[0])
    critic = state.td3.critic

    def loss(policy):
        return -jnp.mean(jax.vmap(critic.q1)(batch.obs, jax.vmap(policy)(batch.obs)))

    for i in range(2):
        parent = jax.tree.map(lambda x: x[i], parents)
        grads = eqx.filter_grad(loss)(parent)
        step = jax.tree.map(lambda g: -0.05 * g / (jnp.abs(g) + 1e-8), grads)
        expected = eqx.apply_updates(parent, step)
        child = jax.tree.map(lambda x: x[i], children)
        for a, b in zip(jax.tree.leaves(child), jax.tree.leaves(expected)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert float(loss(child)) < float(loss(parent))  # the step raises Q1
    # Every parent takes its step on the same batch: equal parents give equal children.
    twins = jax.tree.map(lambda x: jnp.stack([x[0], x[0]]), parents)
    a, b = (jax.tree.map(lambda x, i=i: x[i], emitter.pg_variation(twins, state, key=key))
            for i in range(2))  # fmt: skip
    assert eqx.tree_equal(a, b)


def test_state_update_stores_valid_steps_then_trains(scored, getkey):
    policies, _, _, extra, repertoire = scored
    emitter = _emitter(batch_size=6, critic_steps=4)
    state = _init(emitter, scored, getkey())
    before = int(state.buffer.size)
    rows, valid = q.episode_transitions(extra)
    assert before == int(valid.sum()) > 0
    # A second batch whose valid mask drops the last half of every episode.
    half = extra.episodes.valid.at[:, 5:].set(0.0)
    extra2 = eqx.tree_at(lambda e: e.episodes.valid, extra, half)
    key = getkey()
    ids = None if repertoire.extra is None else jnp.zeros(scored[2].shape, jnp.int32)
    _, info = repertoire.add(policies, scored[1], scored[2], ids)
    new = emitter.state_update(
        state, repertoire, policies, scored[1], scored[2], extra2, add_info=info, key=key
    )
    added = int(half.sum())
    assert int(new.buffer.size) == before + added
    stored = jax.tree.map(lambda x: x[before : before + added], new.buffer.data)
    kept = np.flatnonzero(np.asarray(half).reshape(-1))
    for got, want in zip(jax.tree.leaves(stored), jax.tree.leaves(rows)):
        np.testing.assert_array_equal(got, np.asarray(want)[kept])
    assert int(new.td3.steps) == int(state.td3.steps) + 4
    inserted = eqx.tree_at(lambda s: s.buffer, state, new.buffer)
    assert eqx.tree_equal(new, emitter._train_critic(inserted, key=key))


def test_composed_pgame_buffer_takes_the_ga_offspring_transitions_too(scored, getkey):
    """Every evaluated policy feeds the replay buffer, the GA's offspring included (the
    original code's workers send every evaluation's transitions; QDax's `use_all_data`)."""
    policies, descriptors, fitnesses, extra, repertoire = scored
    emitter = q.pgame_emitter(
        batch_size=6, ga_fraction=0.5, td3=TD3, hparams=q.rl.TD3HParams(),
        critic_steps=1, pg_steps=1, pg_lr=1e-2, buffer_size=500, convention="qdax",
    )  # fmt: skip
    ga, pg = emitter.emitters
    assert (ga.batch_size, pg.batch_size) == (3, 3)
    assert isinstance(pg, q.AbstractWholeBatchEmitter)
    assert not isinstance(ga, q.AbstractWholeBatchEmitter)
    state = emitter.init(repertoire, policies, descriptors, fitnesses, extra, key=getkey())
    before = int(state[1].buffer.size)
    _, info = repertoire.add(policies, descriptors, fitnesses, jnp.zeros(6, jnp.int32))
    new = emitter.state_update(
        state, repertoire, policies, descriptors, fitnesses, extra, add_info=info, key=getkey()
    )
    rows, valid = q.episode_transitions(extra)
    assert int(new[1].buffer.size) == before + int(valid.sum())  # all six episodes
    stored = jax.tree.map(lambda x: x[before : before + int(valid.sum())], new[1].buffer.data)
    kept = np.flatnonzero(np.asarray(valid))
    for got, want in zip(jax.tree.leaves(stored), jax.tree.leaves(rows)):
        np.testing.assert_array_equal(got, np.asarray(want)[kept])


@pytest.mark.slow
def test_policy_gradient_variation_raises_the_critic_value(getkey):
    env = q.envs.PointMaze(walls=False, length=20)
    td3 = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(16,), critic_hidden=(32, 32),
                minibatch_size=32)  # fmt: skip
    emitter = q.QualityPGEmitter(
        batch_size=5, td3=td3, hparams=q.rl.TD3HParams(), critic_steps=30, pg_steps=20,
        buffer_size=2000, pg_lr=1e-2,
    )  # fmt: skip
    scorer = q.PolicyScorer(env)
    parents = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(jr.split(getkey(), 5))
    _, _, extra = scorer(parents, key=getkey())
    cells = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)
    rep = q.MAPElitesRepertoire.empty(cells, td3.init_policy(key=getkey()))
    state = emitter.init(rep, parents, jnp.zeros((5, 2)), jnp.zeros(5), extra, key=getkey())
    info = rep.add(parents, jnp.zeros((5, 2)), jnp.zeros(5))[1]
    state = emitter.state_update(
        state, rep, parents, jnp.zeros((5, 2)), jnp.zeros(5), extra, add_info=info, key=getkey()
    )
    assert int(state.td3.steps) == 60  # 30 in init (the warm-up), 30 after the batch
    obs = state.buffer.data.obs[: int(state.buffer.size)]

    def value(policies):
        q1 = lambda p: jnp.mean(jax.vmap(state.td3.critic.q1)(obs, jax.vmap(p)(obs)))
        return eqx.filter_vmap(q1)(policies)

    offspring = eqx.filter_jit(lambda p, k: emitter.pg_variation(p, state, key=k))(
        parents, getkey()
    )
    assert bool(jnp.all(value(offspring) > value(parents)))
    with pytest.raises(TypeError, match="ScoringExtra"):
        emitter.init(rep, parents, jnp.zeros((5, 2)), jnp.zeros(5), None, key=getkey())
