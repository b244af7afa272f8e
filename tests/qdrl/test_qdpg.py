"""QDPG's parts: the state-descriptor archive against QDax's sequential rule written out in
NumPy, the diversity reward against its definition, the relabelled transitions, the emitter's
composition, and the diversity learner's state (what it archives, what its critic learns)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqx_qd as q


TD3 = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(8,), critic_hidden=(32, 32),
            minibatch_size=64)  # fmt: skip
ENV = q.envs.PointMaze(walls=False, length=10)
SCORER = q.PolicyScorer(ENV)
CELLS = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)
REWARD = q.DiversityReward(k=3, scaling=2.0, acceptance_threshold=0.05, archive_size=300)


def _reference_insert(data, position, size, rows, mask, threshold):
    """QDax's `Archive.insert` as a plain loop: a row is kept if it is farther than the
    threshold from every descriptor stored before the batch and from every row kept before it;
    kept rows are written one after another into the ring."""
    data = data.copy()
    before = data[:size].copy()
    kept = []
    for row, m in zip(rows, mask):
        if not m or not np.all(np.isfinite(row)):
            continue
        if len(before) and np.min(np.linalg.norm(before - row, axis=1)) <= threshold:
            continue
        if kept and np.min(np.linalg.norm(np.array(kept) - row, axis=1)) <= threshold:
            continue
        kept.append(row)
        data[position] = row
        position = (position + 1) % len(data)
        size = min(size + 1, len(data))
    return data, position, size


_insert = eqx.filter_jit(lambda archive, rows, mask: archive.insert(rows, mask=mask))


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(1, 70),
    st.integers(2, 40),
    st.sampled_from([0.05, 0.2, 0.6]),
)
def test_archive_insert_is_the_sequential_rule(seed, n, capacity, threshold):
    rng = np.random.default_rng(seed)
    archive = q.internal.StateArchive.empty(capacity, 2, threshold)
    for _ in range(3):  # three batches: the later ones meet a stored archive, then a wrapped one
        rows = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
        rows[rng.random(n) < 0.1] = np.nan
        mask = (rng.random(n) < 0.8).astype(np.float32)
        want = _reference_insert(
            np.asarray(archive.rows.data), int(archive.rows.position), int(archive.rows.size),
            rows, mask, np.float32(threshold),
        )  # fmt: skip
        archive = _insert(archive, jnp.asarray(rows), jnp.asarray(mask))
        np.testing.assert_array_equal(archive.rows.data, want[0])
        assert (int(archive.rows.position), int(archive.rows.size)) == want[1:]


def test_archive_keeps_one_of_a_cluster_and_refuses_bad_input():
    archive = q.internal.StateArchive.empty(10, 2, 0.1)
    rows = jnp.array([[0.0, 0.0], [0.05, 0.0], [0.3, 0.0], [0.0, 0.09], [0.3, 0.2]])
    archive = archive.insert(rows)
    np.testing.assert_array_equal(archive.stored, rows[jnp.array([0, 2, 4])])
    archive = archive.insert(jnp.array([[0.31, 0.0], [1.0, 1.0]]))
    np.testing.assert_array_equal(archive.stored[-1], [1.0, 1.0])
    assert archive.stored.shape == (4, 2)
    with pytest.raises(ValueError, match=r"StateArchive.insert: descriptors must be \(n, 2\)"):
        archive.insert(jnp.zeros((3, 3)))
    with pytest.raises(ValueError, match="StateArchive.acceptance_threshold"):
        q.internal.StateArchive.empty(10, 2, 0.0)
    with pytest.raises(ValueError, match="DiversityReward.k"):
        q.DiversityReward(k=0, scaling=1.0, acceptance_threshold=0.1, archive_size=10)


_reward = eqx.filter_jit(lambda reward, archive, x: reward(archive, x))


@given(st.integers(0, 2**31 - 1), st.integers(0, 12), st.sampled_from([1, 3, 6]))
@settings(max_examples=20, deadline=None)
def test_diversity_reward_is_its_definition(seed, stored, k):
    """`scaling * mean(|s - a_i|^2)` over the k nearest stored descriptors (over those stored
    while fewer than k are; 0 with none)."""
    rng = np.random.default_rng(seed)
    reward = q.DiversityReward(k=k, scaling=1.5, acceptance_threshold=1e-6, archive_size=16)
    points = rng.uniform(-1, 1, (12, 2)).astype(np.float32)
    mask = (np.arange(12) < stored).astype(np.float32)
    archive = _insert(reward.empty_archive(2), jnp.asarray(points), jnp.asarray(mask))
    points = points[:stored]
    assert int(archive.rows.size) == stored
    queries = rng.uniform(-1, 1, (9, 2)).astype(np.float32)
    got = np.asarray(_reward(reward, archive, jnp.asarray(queries)))
    for query, value in zip(queries, got):
        sq = np.sort(np.sum((points - query) ** 2, axis=1))[:k]
        want = 1.5 * sq.mean() if stored else 0.0
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-7)


def test_relabel_replaces_only_the_rewards():
    policies = eqx.filter_vmap(lambda k: TD3.init_policy(key=k))(jr.split(jr.key(0), 3))
    _, _, extra = SCORER(policies, key=jr.key(1))
    rows, valid = q.episode_transitions(extra, state_descriptors=True)
    assert isinstance(rows, q.envs.QDTransition) and rows.state_desc.shape == (30, 2)
    plain, _ = q.episode_transitions(extra)
    archive = REWARD.empty_archive(2).insert(rows.state_desc, mask=valid)
    out = REWARD.relabel(archive, rows)
    assert type(out) is q.envs.Transition
    np.testing.assert_array_equal(out.reward, REWARD(archive, rows.state_desc))
    for name in ("obs", "action", "next_obs", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(out, name), getattr(plain, name))


def _qdpg(**overrides):
    fields = dict(
        quality_batch_size=3, diversity_batch_size=3, ga_batch_size=2, diversity=REWARD,
        td3=TD3, hparams=q.rl.TD3HParams(), critic_steps=2, pg_steps=1, pg_lr=1e-3,
        buffer_size=500,
    )  # fmt: skip
    return q.qdpg_emitter(**{**fields, **overrides})


def test_qdpg_emitter_is_quality_diversity_then_ga():
    quality, diversity, ga = _qdpg().emitters
    assert (quality.batch_size, diversity.batch_size, ga.batch_size) == (3, 3, 2)
    assert quality.diversity is None and diversity.diversity is REWARD
    for learner in (quality, diversity):  # both start as QDax's
        assert learner.greedy_init == "first" and learner.critic_warmup is False
    assert len(_qdpg(ga_batch_size=0).emitters) == 2
    with pytest.raises(TypeError, match="parameter .diversity.|must be a DiversityReward"):
        _qdpg(diversity=None)
    with pytest.raises(ValueError, match="objective and diversity"):
        q.QualityPGEmitter(batch_size=2, td3=TD3, hparams=q.rl.TD3HParams(), critic_steps=1,
                           pg_steps=1, buffer_size=10, pg_lr=1e-3, objective=0,
                           diversity=REWARD)  # fmt: skip


def test_diversity_learner_archives_the_batch_and_its_critic_learns_the_reward():
    """The diversity learner's state holds every valid step's state descriptor through the
    archive, its buffer keeps them, and (discount 0) its critic's Q1 comes to follow the
    relabelled reward, not the task's."""
    policies = eqx.filter_vmap(lambda k: TD3.init_policy(key=k))(jr.split(jr.key(3), 8))
    fitnesses, descriptors, extra = SCORER(policies, key=jr.key(4))
    repertoire, info = q.init_repertoire(CELLS, policies, descriptors, fitnesses)
    hparams = q.rl.TD3HParams(discount=0.0, critic_lr=3e-3)
    emitter = _qdpg(hparams=hparams, critic_steps=300)
    state = eqx.filter_jit(emitter.init)(
        repertoire, policies, descriptors, fitnesses, extra, key=jr.key(5)
    )
    rows, valid = q.episode_transitions(extra, state_descriptors=True)
    archived = REWARD.empty_archive(2).insert(rows.state_desc, mask=valid)
    assert eqx.tree_equal(state[1].archive, archived)
    assert state[0].archive is None and int(state[1].buffer.size) == int(valid.sum())
    new = eqx.filter_jit(emitter.state_update)(
        state, repertoire, policies, descriptors, fitnesses, extra, add_info=info, key=jr.key(6)
    )
    assert eqx.tree_equal(new[1].archive, archived.insert(rows.state_desc, mask=valid))
    data = jax.tree.map(lambda x: x[: int(new[1].buffer.size)], new[1].buffer.data)
    target = np.asarray(REWARD(new[1].archive, data.state_desc))
    q_div = np.asarray(jax.vmap(new[1].td3.critic.q1)(data.obs, data.action))
    q_task = np.asarray(jax.vmap(new[0].td3.critic.q1)(data.obs, data.action))
    # (measured: 0.82, 0.99; the task critic against the diversity reward 0.19, the two
    # rewards against each other 0.22)
    assert np.corrcoef(q_div, target)[0, 1] > 0.7
    assert np.corrcoef(q_task, data.reward)[0, 1] > 0.9
    assert np.corrcoef(q_task, target)[0, 1] < 0.5


def test_the_qdpg_job_splits_its_batch_as_qdax_and_names_a_bad_one():
    from eqx_qd import jobs
    from eqx_qd.jobs._qdpg import qdpg_split

    assert qdpg_split(100, 0.33, 0.33) == (34, 33, 33)  # QDax's notebook
    config = jobs.QDPGConfig()
    assert config.split == (22, 21, 21) and config.env == "point_maze"
    qdax = jobs.QDPGConfig.preset("qdax")
    assert (qdax.env, qdax.split, qdax.episode_length, qdax.num_iterations) == (
        "walker2d_uni", (34, 33, 33), 250, 100,
    )  # fmt: skip
    with pytest.raises(ValueError, match="gives 1 quality and 1 diversity slots"):
        jobs.QDPGConfig(batch_size=4, ga_fraction=0.5, diversity_fraction=0.25)
    with pytest.raises(ValueError, match="archive_acceptance_threshold"):
        jobs.QDPGConfig(archive_acceptance_threshold=0.0)
