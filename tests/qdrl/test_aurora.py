"""AURORA's parts: the insertion rule against QDax's written out in NumPy, the encoder's code
against an LSTM written out in NumPy, its training step against a plain gradient and Adam step,
learning, the re-encoding after a training, container-size control's rule, the schedule of
trainings and controls, the archive in the MAP-Elites loop, and bad input named."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqx_qd as q


def _reference_slots(stored_z, stored_f, z, f, valid, l):
    """QDax 0.5's `UnstructuredRepertoire.add`, step by step in NumPy, with the two differences
    `aurora_slots` documents: a novel candidate finding no free slot is refused (QDax writes it
    over the last slot), and an invalid candidate takes no free slot."""
    capacity, batch = len(stored_f), len(f)
    filled = np.isfinite(stored_f)
    d = np.linalg.norm(z[:, None, :] - stored_z[None, :, :], axis=-1)
    d[:, ~filled] = np.inf
    order = np.argsort(d, axis=1, kind="stable")
    nearest = order[:, 0]
    first = d[np.arange(batch), order[:, 0]]
    second = d[np.arange(batch), order[:, 1]]
    novel = first > l
    free = [i for i in range(capacity) if not filled[i]]
    target = np.full(batch, capacity)
    taken = 0
    for b in range(batch):
        if not novel[b]:
            target[b] = nearest[b]
        elif valid[b]:
            target[b] = free[taken] if taken < len(free) else capacity
            taken += 1
    score = np.where(valid, f, -np.inf)
    finite = valid & np.isfinite(f)
    if finite.any() and score[finite].max() == score[finite].min():
        score = score + np.linspace(0.0, 1.0, batch)
    keep = valid & ~(second <= l) & (target < capacity)
    for b in range(batch):
        for o in range(batch):
            if o != b and valid[o] and np.linalg.norm(z[b] - z[o]) < l and score[o] > score[b]:
                keep[b] = False
    out = np.full(batch, capacity)
    for slot in set(target[keep].tolist()):
        aiming = [b for b in range(batch) if target[b] == slot]
        best = max(np.where(valid, f, -np.inf)[b] for b in aiming)
        winners = [b for b in aiming if keep[b] and f[b] == best and f[b] > stored_f[slot]]
        if winners:
            out[winners[0]] = slot
    return out


_slots = jax.jit(q.internal.aurora_slots)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(1, 24),
    st.integers(2, 20),
    st.sampled_from([0.1, 0.3, 0.8]),
    st.booleans(),
)
def test_insertion_is_qdax_rule(seed, batch, capacity, l, equal_fitness):
    rng = np.random.default_rng(seed)
    stored_z = rng.uniform(-1, 1, (capacity, 2)).astype(np.float32)
    stored_f = rng.normal(size=capacity).astype(np.float32)
    stored_f[rng.random(capacity) < 0.5] = -np.inf
    z = rng.uniform(-1, 1, (batch, 2)).astype(np.float32)
    f = (np.zeros(batch) if equal_fitness else rng.normal(size=batch)).astype(np.float32)
    f[rng.random(batch) < 0.2] = stored_f[0] if np.isfinite(stored_f[0]) else 0.5  # ties
    valid = rng.random(batch) > 0.1
    got, first, nearest = _slots(stored_z, stored_f, z, np.where(valid, f, -np.inf), valid, l)
    want = _reference_slots(stored_z, stored_f, z, f, valid, l)
    np.testing.assert_array_equal(np.asarray(got), want)


def _numpy_lstm_code(cell, mean, std, xs):
    """The last cell state of an LSTM (input, forget, cell, output gates) over the normalised
    `xs`, in NumPy."""
    w_ih, w_hh, b = (np.asarray(a, np.float64) for a in (cell.weight_ih, cell.weight_hh, cell.bias))
    n = w_hh.shape[1]
    h, c = np.zeros(n), np.zeros(n)
    sig = lambda x: 1 / (1 + np.exp(-x))
    for x in (xs - np.asarray(mean)) / np.asarray(std):
        i, f, g, o = np.split(w_ih @ x + w_hh @ h + b, 4)
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
    return c


ENCODER = q.SequenceAutoencoder.for_episodes(
    3, 20, latent_size=4, every=5, width=3, batch_size=8, learning_rate=1e-2, key=jr.key(0)
)


def test_the_code_is_the_lstm_cell_state_over_normalised_observations():
    rng = np.random.default_rng(1)
    encoder = eqx.tree_at(
        lambda e: (e.mean, e.std),
        ENCODER,
        (jnp.array([0.5, -1.0, 2.0]), jnp.array([2.0, 1.0, 0.5])),
    )
    xs = rng.normal(size=(6, 4, 3)).astype(np.float32)
    got = np.asarray(encoder(jnp.asarray(xs)))
    want = [_numpy_lstm_code(encoder.encoder_cell, encoder.mean, encoder.std, x) for x in xs]
    np.testing.assert_allclose(got, np.array(want), rtol=1e-5, atol=1e-6)


def _plain_loss(nets, xs):
    """The teacher-forced reconstruction error, written as a Python loop."""
    enc, dec, readout = nets
    h = c = jnp.zeros(enc.hidden_size)
    for x in xs:
        h, c = enc(x, (h, c))
    total, previous = 0.0, jnp.zeros_like(xs[0])
    for x in xs:
        h, c = dec(previous, (h, c))
        total = total + jnp.mean((readout(h) - x) ** 2)
        previous = x
    return total / xs.shape[0]


def test_one_training_step_is_adams_first_step_on_the_reconstruction_error():
    """With every row the same sequence, any draw is that sequence: one epoch of one step
    (capacity = batch) is Adam's first step, `-lr * g / (|g| + eps)`, on its gradient, after
    the normalisation by the stored rows' statistics."""
    rng = np.random.default_rng(2)
    seq = rng.normal(size=(4, 3)).astype(np.float32)
    obs = np.repeat(seq[None], 8, axis=0)
    obs[-2:] = 99.0  # empty slots: not in the statistics
    filled = np.arange(8) < 6
    trained = ENCODER.retrained(
        jnp.asarray(obs), jnp.asarray(filled), jnp.asarray(1), key=jr.key(3)
    )
    mean, std = seq.mean(0), seq.std(0)
    np.testing.assert_allclose(trained.mean, mean, rtol=1e-5)
    np.testing.assert_allclose(trained.std, std, rtol=1e-5)
    nets = (ENCODER.encoder_cell, ENCODER.decoder_cell, ENCODER.readout)
    params, static = eqx.partition(nets, eqx.is_inexact_array)
    grad = jax.grad(lambda p: _plain_loss(eqx.combine(p, static), (seq - mean) / std))(params)
    want = jax.tree.map(lambda p, g: p - 1e-2 * g / (jnp.abs(g) + 1e-8), params, grad)
    got = eqx.filter(
        (trained.encoder_cell, trained.decoder_cell, trained.readout), eqx.is_inexact_array
    )
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6)


def test_each_training_starts_from_the_first_weights_unless_warm_started():
    """QDax's rule: a second training on the same data with the same key ends where the first
    did (it starts again from the first weights); warm-started, it goes on from there."""
    rng = np.random.default_rng(9)
    obs = jnp.asarray(rng.normal(size=(16, 4, 3)), jnp.float32)
    filled, two = jnp.ones(16, bool), jnp.asarray(2)
    once = ENCODER.retrained(obs, filled, two, key=jr.key(1))
    twice = once.retrained(obs, filled, two, key=jr.key(1))
    assert bool(eqx.tree_equal(once, twice))
    warm = q.SequenceAutoencoder.for_episodes(
        3, 20, latent_size=4, every=5, width=3, batch_size=8, learning_rate=1e-2,
        warm_start=True, key=jr.key(0),
    )  # fmt: skip
    once = warm.retrained(obs, filled, two, key=jr.key(1))
    twice = once.retrained(obs, filled, two, key=jr.key(1))
    assert not np.allclose(once.readout.weight, twice.readout.weight)
    np.testing.assert_array_equal(once.start[2].weight, ENCODER.readout.weight)


def test_training_learns_to_reconstruct():
    """Sequences of two kinds (rising, falling) with noise: 60 epochs cut the reconstruction
    error at least in half, and the codes of the two kinds end farther apart than within each."""
    rng = np.random.default_rng(4)
    t = np.linspace(-1, 1, 4)[:, None]
    kind = np.arange(32) % 2
    obs = np.where(kind[:, None, None] == 0, t, -t) * np.array([1.0, 0.5, -0.3])
    obs = jnp.asarray(obs + 0.05 * rng.normal(size=obs.shape), jnp.float32)
    filled = jnp.ones(32, bool)
    start = ENCODER.retrained(obs, filled, jnp.asarray(0), key=jr.key(5))
    trained = ENCODER.retrained(obs, filled, jnp.asarray(60), key=jr.key(5))
    assert float(trained.loss(obs)) < 0.5 * float(start.loss(obs))
    codes = np.asarray(trained(obs))
    centres = [codes[kind == k].mean(0) for k in (0, 1)]
    spread = max(np.linalg.norm(codes[kind == k] - centres[k], axis=1).mean() for k in (0, 1))
    assert np.linalg.norm(centres[0] - centres[1]) > spread


class _Counting(q.AbstractObservationEncoder):
    """An encoder whose code is the mean observation scaled by its number of trainings plus
    one: what each retraining changes is visible, and each training is counted."""

    trainings: jax.Array
    observation_shape: tuple[int, ...] = eqx.field(static=True, default=(2,))
    latent_size: int = eqx.field(static=True, default=2)

    def observe(self, extra):
        return extra

    def __call__(self, observations):
        return observations * (1.0 + self.trainings)

    def retrained(self, observations, filled, epochs, *, key):
        return eqx.tree_at(lambda e: e.trainings, self, self.trainings + 1)


def _archive(capacity=16, **kw):
    settings = dict(l_value=0.05, target_size=6, loop=2, gain=0.01, key=jr.key(0))
    return q.AuroraRepertoire.empty(
        capacity, jnp.zeros(2), 2, _Counting(jnp.asarray(0)), None, **{**settings, **kw}
    )


_add = eqx.filter_jit(lambda r, g, d, f, o: r.add(g, d, f, q.internal.AuroraOffer(None, o)))


def test_the_schedule_trains_at_pronic_loops_and_controls_the_size_at_other_odd_ones():
    """Loops of 2 additions after the initial population: trainings after the initial
    population and at loops 2, 6 and 12; size control at loops 1, 3, 5, 7, 9, 11 and 13."""
    rng = np.random.default_rng(6)
    archive = _archive()
    trainings, l_values = [], []
    for _ in range(1 + 2 * 13):
        obs = rng.uniform(0, 1, (4, 2)).astype(np.float32)
        archive, _ = _add(archive, jnp.asarray(obs), jnp.asarray(obs), jnp.ones(4), obs)
        trainings.append(int(archive.encoder.trainings))
        l_values.append(float(archive.l_value))
    loops_done = [0] + [a // 2 for a in range(1, 27)]
    want = [1 + sum(1 for m in (2, 6, 12) if m <= done) for done in loops_done]
    assert trainings == want
    changed = [i for i in range(1, 27) if l_values[i] != l_values[i - 1]]
    assert changed == [2 * k for k in (1, 3, 5, 7, 9, 11, 13)]  # the ends of loops 1, 3, ...


def test_size_control_moves_the_threshold_by_error_and_change():
    rng = np.random.default_rng(7)
    archive = _archive(capacity=32, l_value=0.02)
    obs = rng.uniform(0, 1, (20, 2)).astype(np.float32)
    archive, _ = _add(archive, jnp.asarray(obs), jnp.asarray(obs), jnp.arange(20.0), obs)
    n0 = int(archive.num_filled)
    assert float(archive.size_error) == n0 - 6  # the initial error, as QDax's notebook's
    controlled = archive.size_controlled()
    error = n0 - 6
    np.testing.assert_allclose(
        float(controlled.l_value), 0.02 + 0.01 * error + 0.01 * (error - (n0 - 6)), rtol=1e-6
    )
    again = controlled.size_controlled()
    e2 = int(controlled.num_filled) - 6
    np.testing.assert_allclose(
        float(again.l_value),
        float(controlled.l_value) + 0.01 * e2 + 0.01 * (e2 - error),
        rtol=1e-6,
    )
    # Re-insertion under the larger threshold keeps only elites no fitter one lies near.
    z = np.asarray(archive.latent)[np.asarray(archive.filled)]
    f = np.asarray(archive.fitnesses)[np.asarray(archive.filled)]
    kept = _reference_slots(z, np.full(len(f), -np.inf, np.float32), z, f, np.ones(len(f), bool),
                            float(controlled.l_value))  # fmt: skip
    assert int(controlled.num_filled) == int(np.sum(kept < len(f)))


def test_a_retraining_re_encodes_every_elite_and_rebuilds_the_archive():
    rng = np.random.default_rng(8)
    archive = _archive(capacity=32, l_value=0.1)
    obs = rng.uniform(0, 1, (20, 2)).astype(np.float32)
    archive, _ = _add(archive, jnp.asarray(obs), jnp.asarray(obs), jnp.arange(20.0), obs)
    retrained = archive.retrained(1, key=jr.key(1))
    assert int(retrained.encoder.trainings) == int(archive.encoder.trainings) + 1
    stored = np.asarray(retrained.filled)
    np.testing.assert_allclose(
        np.asarray(retrained.latent)[stored],
        np.asarray(retrained.observations)[stored] * (1.0 + float(retrained.encoder.trainings)),
    )
    # The rebuilt archive is the rule applied to the old elites under their new codes.
    old = np.asarray(archive.filled)
    z = np.asarray(archive.observations)[old] * (1.0 + float(retrained.encoder.trainings))
    f = np.asarray(archive.fitnesses)[old]
    kept = _reference_slots(
        z, np.full(len(f), -np.inf, np.float32), z, f, np.ones(len(f), bool), 0.1
    )
    assert sorted(np.asarray(retrained.fitnesses)[stored].tolist()) == sorted(
        f[kept < len(f)].tolist()
    )


def test_add_reports_and_refuses_bad_input():
    archive = _archive()
    obs = np.array([[0.1, 0.1], [0.9, 0.9], [np.nan, 0.2]], np.float32)
    new, info = _add(archive, jnp.asarray(obs), jnp.asarray(obs), jnp.ones(3), obs)
    assert int(new.num_filled) == 2  # the NaN candidate is never stored
    assert list(np.asarray(info.status)) == [2, 2, 0] and int(info.cell[2]) == -1
    with pytest.raises(TypeError, match="extra must be an AuroraOffer"):
        archive.add(jnp.asarray(obs), jnp.asarray(obs), jnp.ones(3), obs)
    with pytest.raises(ValueError, match="the encoder observed"):
        archive.add(jnp.asarray(obs), jnp.asarray(obs), jnp.ones(3),
                    q.internal.AuroraOffer(None, jnp.zeros((3, 5))))  # fmt: skip
    with pytest.raises(TypeError, match="encoder"):  # (beartype names it first under pytest)
        q.AuroraRepertoire.empty(8, jnp.zeros(2), 2, lambda x: x, key=jr.key(0))
    with pytest.raises(ValueError, match="capacity of 2 or more"):
        _archive(capacity=1)
    with pytest.raises(ValueError, match="l_value"):
        _archive(l_value=0.0)
    with pytest.raises(TypeError, match="ScoringExtra"):
        ENCODER.observe(jnp.zeros((2, 20, 3)))


ENV = q.envs.PointMaze(walls=False, length=20)
TD3 = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(8,), critic_hidden=(8,),
               minibatch_size=8)  # fmt: skip


@pytest.mark.slow
def test_aurora_in_the_map_elites_loop_stores_what_it_observed():
    """MAPElites offers the archive the scoring's episodes: it stores each elite's observed
    positions and its code, trains at the initial population, and keeps a passive grid of the
    task's descriptors beside it."""
    encoder = q.SequenceAutoencoder.for_episodes(2, 20, every=4, batch_size=16, key=jr.key(1))
    archive = q.AuroraRepertoire.empty(
        64, jnp.zeros(()), 2, encoder, l_value=0.05, target_size=40, loop=2, epochs=5, key=jr.key(2)
    )
    emitter = q.MixingEmitter(16, 1.0, variation=q.IsoLineVariation(0.05, 0.5))
    algo = q.MAPElites(emitter, q.PolicyScorer(ENV))
    pop = eqx.filter_vmap(lambda k: TD3.init_policy(key=k))(jr.split(jr.key(3), 32))
    grid = q.GridTessellation((5, 5), minval=-1.0, maxval=1.0)
    state, _ = eqx.filter_jit(algo.init)(pop, archive, key=jr.key(4), result=grid)
    state, _ = q.run(algo, state, 4, key=jr.key(5))
    rep = state.repertoire
    assert int(rep.additions) == 5 and int(rep.num_filled) >= 2
    assert not np.array_equal(np.asarray(rep.encoder.std), np.ones(2))  # trained on the archive
    stored = np.asarray(rep.filled)
    np.testing.assert_allclose(
        np.asarray(rep.latent)[stored], np.asarray(rep.encoder(rep.observations))[stored],
        rtol=1e-4, atol=1e-5,
    )  # fmt: skip
    assert int(state.result.num_filled) >= 1


@pytest.mark.slow
def test_devices_that_share_the_archive_keep_equal_copies():
    """On two devices (`axis_name`), each device scores its own half of every batch; the
    copies of the archive, its encoder (trained with the archive's own key on the gathered
    observations) and its threshold stay equal, device by device."""
    from jax.sharding import PartitionSpec as P

    encoder = q.SequenceAutoencoder.for_episodes(2, 20, every=4, batch_size=8, key=jr.key(1))
    archive = q.AuroraRepertoire.empty(
        32, jnp.zeros(()), 2, encoder, l_value=0.05, target_size=20, loop=1, epochs=2, key=jr.key(2)
    )
    emitter = q.MixingEmitter(8, 1.0, variation=q.IsoLineVariation(0.05, 0.5))
    algo = q.MAPElites(emitter, q.PolicyScorer(ENV), axis_name="p")
    pop = eqx.filter_vmap(lambda k: TD3.init_policy(key=k))(jr.split(jr.key(3), 16))
    pop_dyn, pop_static = eqx.partition(pop, eqx.is_array)
    mesh = jax.make_mesh((2,), ("p",), devices=jax.devices()[:2])

    def body(g, key):
        state, _ = algo.init(eqx.combine(g, pop_static), archive, key=key)
        for i in range(3):  # three loops: a training and two size controls
            state, _, _ = algo.step(state, key=jr.fold_in(key, i))
        kept = eqx.filter(state.repertoire, eqx.is_inexact_array)
        return jax.tree.map(lambda x: x[None], kept)

    mapped = jax.shard_map(
        body, mesh=mesh, in_specs=(P("p"), P()), out_specs=P("p"), check_vma=False
    )
    split = jax.sharding.NamedSharding(mesh, P("p"))
    pop_dyn = jax.tree.map(lambda x: jax.device_put(x, split), pop_dyn)
    copies = eqx.filter_jit(mapped)(pop_dyn, jr.key(4))
    copies = jax.tree.map(np.asarray, copies)
    for leaf in jax.tree.leaves(copies):
        np.testing.assert_array_equal(leaf[0], leaf[1])
    assert int(np.sum(np.isfinite(copies.fitnesses[0]))) >= 2
