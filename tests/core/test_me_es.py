"""MAP-Elites-ES's emitter: its ES estimate and novelty against NumPy, its optimiser against
optax, its schedule of parents and phases, its ring of recent offspring, learning on a
quadratic, and bad input named."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import eqx_qd as q
from eqx_qd._emitters.me_es import centred_ranks, novelty
from eqx_qd.testing import check_emitter


DIM = 6
CENTRE = jnp.linspace(-0.5, 0.5, DIM)


def quadratic(genotypes, *, key):
    """Fitness `-|x - c|^2`, descriptors the first two genes squashed into the unit square."""
    fitnesses = -jnp.sum(jnp.square(genotypes - CENTRE[None, :]), axis=-1)
    descriptors = jax.nn.sigmoid(genotypes[:, :2])
    return fitnesses, descriptors, None


def emitter(**options):
    options = {"num_descriptors": 2, "archive_size": 32, "sample_number": 8, **options}
    return q.MEESEmitter(quadratic, **options)


CELLS = q.GridTessellation((5, 5), 0.0, 1.0)


def np_novelty(queries, archive, k):
    d = np.sqrt(((queries[:, None, :] - archive[None, :, :]) ** 2).sum(-1))
    d.sort(axis=1)
    if not archive.shape[0]:
        return np.zeros(len(queries))
    return d[:, : min(k, archive.shape[0])].mean(axis=1)


def np_estimate(x, eps, scores, sigma, l2, mirror, rank_norm):
    """The ES estimate as QDax's `_es_emitter` computes it, in NumPy."""
    n = len(scores)
    if rank_norm:
        order = np.argsort(scores, kind="stable")
        ranks = np.empty(n)
        ranks[order] = np.arange(n)
        w = ranks / (n - 1) - 0.5
    else:
        w = np.asarray(scores, np.float64)
    if mirror:
        w = w[0::2] - w[1::2]
    return -(w @ eps) / (n * sigma) + l2 * x


@pytest.mark.parametrize("mirror", [True, False])
@pytest.mark.parametrize("explore", [False, True])
def test_es_estimate_matches_numpy(explore, mirror):
    em = emitter(sample_number=10, mirror=mirror, sample_sigma=0.1, l2_coefficient=0.3)
    x = jnp.linspace(-1.0, 1.0, DIM)
    archive = jnp.asarray(np.random.default_rng(0).uniform(size=(32, 2)), jnp.float32)
    count = jnp.asarray(7, jnp.int32)
    sample_key, score_key = jr.key(1), jr.key(2)
    got = em.gradient(x, lambda v: v, archive, count, jnp.asarray(explore),
                      sample_key=sample_key, score_key=score_key)  # fmt: skip
    half = 5 if mirror else 10
    eps = np.asarray(jr.normal(sample_key, (half, DIM)), np.float64)
    noise = np.stack([eps, -eps], axis=1).reshape(10, DIM) if mirror else eps
    samples = np.asarray(x)[None, :] + 0.1 * noise
    fit, desc, _ = quadratic(jnp.asarray(samples, jnp.float32), key=score_key)
    scores = np_novelty(np.asarray(desc), np.asarray(archive)[:7], 10) if explore else fit
    want = np_estimate(np.asarray(x), eps, np.asarray(scores), 0.1, 0.3, mirror, True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_raw_scores_estimate_the_gradient_of_a_quadratic():
    """Without ranks, `-sum_i f(x + s e_i) e_i / (n s)` estimates minus the gradient (here
    `2 (x - c)`), the ES's central fact; mirrored samples cancel the even terms."""
    em = emitter(sample_number=4000, rank_norm=False, sample_sigma=0.01, l2_coefficient=0.0)
    x = jnp.linspace(-1.0, 1.0, DIM)
    got = em.gradient(x, lambda v: v, jnp.zeros((32, 2)), jnp.asarray(0), jnp.asarray(False),
                      sample_key=jr.key(3), score_key=jr.key(4))  # fmt: skip
    # A mirrored pair's f(+) - f(-) is exactly 2 s grad f . e on a quadratic; summed over the
    # n / 2 pairs and divided by n s: grad f, the estimate being its opposite, 2 (x - c).
    want = 2.0 * (x - CENTRE)
    cosine = jnp.dot(got, want) / (jnp.linalg.norm(got) * jnp.linalg.norm(want))
    assert float(cosine) > 0.95
    np.testing.assert_allclose(jnp.linalg.norm(got), jnp.linalg.norm(want), rtol=0.15)


def test_novelty_counts_written_rows_only():
    rng = np.random.default_rng(1)
    archive, queries = rng.uniform(size=(20, 3)), rng.uniform(size=(9, 3))
    for count, k in ((0, 4), (3, 4), (12, 4), (20, 25), (33, 5)):  # 33: a ring that wrapped
        got = novelty(jnp.asarray(queries), jnp.asarray(archive), jnp.asarray(count), k)
        want = np_novelty(queries, archive[: min(count, 20)], k)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_centred_ranks():
    got = centred_ranks(jnp.asarray([3.0, -1.0, jnp.nan, 7.0, 3.0]))
    np.testing.assert_allclose(got, [0.0, -0.25, -0.5, 0.5, 0.25])


def test_adam_and_sgd_steps_match_optax():
    x = jnp.linspace(-1.0, 1.0, DIM)
    grads = [jnp.sin(jnp.arange(DIM, dtype=jnp.float32) + t) for t in range(4)]
    for name, opt in (("adam", optax.adam(0.05)), ("sgd", optax.sgd(0.05))):
        em = emitter(optimiser=name, learning_rate=0.05)
        ours, m1, m2, step = x, jnp.zeros(DIM), jnp.zeros(DIM), jnp.asarray(0)
        theirs, opt_state = x, opt.init(x)
        for g in grads:
            ours, m1, m2, step = em._step(ours, g, m1, m2, step)
            with jax.numpy_dtype_promotion("standard"):  # optax's own arithmetic
                update, opt_state = opt.update(g, opt_state)
                theirs = optax.apply_updates(theirs, update)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def _started(em, key):
    algo = q.MAPElites(em, quadratic, 0.0, lineage=True)
    genotypes = 0.3 * jr.normal(key, (4, DIM))
    return algo, algo.init(genotypes, CELLS, key=jr.fold_in(key, 1))[0]


def _info(n: int) -> q.AddInfo:
    """Every candidate refused (`NOT_ADDED`) at cell 0."""
    zeros = jnp.zeros(n, jnp.int32)
    return q.AddInfo(zeros, zeros, jnp.zeros(n), zeros, jnp.zeros(n))


def test_schedule_new_parents_optimiser_restarts_and_phases():
    em = emitter(num_optimizer_steps=3)
    algo, state = _started(em, jr.key(5))
    # The first offspring is the first initial genotype.
    initial = 0.3 * jr.normal(jr.key(5), (4, DIM))
    np.testing.assert_array_equal(state.emitter_state.offspring[0], initial[0])
    update = eqx.filter_jit(lambda s, k: algo.update(s, key=k))
    steps, kinds = [], []
    for i in range(7):
        state, _ = update(state, jr.fold_in(jr.key(6), i))
        steps.append(int(state.emitter_state.adam_step))
        kinds.append(bool(em._explores(jnp.asarray(i))))
    # A new parent (and a fresh optimiser) every 3 generations: Adam's count restarts at 1.
    assert steps == [1, 2, 3, 1, 2, 3, 1]
    assert kinds == [True] * 3 + [False] * 3 + [True]  # exploring first
    assert int(state.emitter_state.generation) == 7
    assert int(state.emitter_state.archive_count) == 7
    assert not bool(emitter(mode="exploit")._explores(jnp.asarray(0)))
    assert bool(emitter(mode="explore")._explores(jnp.asarray(3 * 10 + 10)))


def test_offspring_enter_the_ring_only_when_stored():
    em = emitter(last_updated_size=2)
    algo, state = _started(em, jr.key(7))
    s = state.emitter_state
    genotypes = jnp.full((1, DIM), 0.25)
    fit, desc, _ = quadratic(genotypes, key=jr.key(0))
    refused = _info(1)
    kept = em._remember(s, state.repertoire, genotypes, desc, fit, refused)
    assert not bool(jnp.any(jnp.isfinite(kept.last_fitnesses)))
    assert int(kept.archive_count) == 1
    np.testing.assert_allclose(kept.novelty_archive[0], desc[0])
    stored = eqx.tree_at(lambda i: i.status, refused, jnp.full(1, int(q.AddStatus.NEW), jnp.int32))
    ring = s
    for value in (0.1, 0.2, 0.3):  # three into two slots: the oldest goes
        g = jnp.full((1, DIM), value)
        f, d, _ = quadratic(g, key=jr.key(0))
        ring = em._remember(ring, state.repertoire, g, d, f, stored)
    np.testing.assert_allclose(ring.last_genotypes[:, 0], [0.3, 0.2])
    assert int(ring.last_position) == 1


def test_exploit_draws_among_the_fittest_and_explore_among_the_most_novel():
    em = emitter(exploit_num_cell_sample=2, explore_num_cell_sample=1)
    algo, state = _started(em, jr.key(8))
    rep, s = state.repertoire, state.emitter_state
    filled = np.flatnonzero(np.isfinite(np.asarray(rep.fitnesses)))
    assert filled.size >= 3
    best2 = filled[np.argsort(-np.asarray(rep.fitnesses)[filled])[:2]]
    draws = {
        tuple(np.asarray(em._draw_parent(s, rep, jnp.asarray(False), key=jr.key(i))[0][0]))
        for i in range(40)
    }
    assert draws == {tuple(np.asarray(rep.genotypes[c])) for c in best2}  # the ring is empty
    archive = s.novelty_archive.at[0].set(rep.descriptors[filled[0]])
    nov = novelty(rep.descriptors, archive, jnp.asarray(1), 10)
    s1 = eqx.tree_at(lambda t: (t.novelty_archive, t.archive_count), s, (archive, jnp.asarray(1)))
    most_novel = filled[np.argmax(np.asarray(nov)[filled])]
    parent, _ = em._draw_parent(s1, rep, jnp.asarray(True), key=jr.key(0))
    np.testing.assert_array_equal(parent[0], rep.genotypes[most_novel])


def test_mees_learns_on_a_quadratic():
    em = emitter(sample_number=64, num_optimizer_steps=5, learning_rate=0.05, mode="exploit")
    algo, state = _started(em, jr.key(9))
    start = float(jnp.max(state.repertoire.fitnesses))
    state, history = q.run(algo, state, 30, key=jr.key(10))
    assert float(history.max_fitness[-1]) > start + 0.5 * abs(start)
    assert int(state.evaluations) == 4 + 30  # the offspring only: samples are the emitter's


def test_mees_keeps_the_emitter_laws():
    population = 0.3 * jr.normal(jr.key(11), (6, DIM))
    check_emitter(emitter(), population, scoring_fn=quadratic, max_examples=3)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="sample_number must be at least 2 and even"):
        emitter(sample_number=7)
    with pytest.raises(ValueError, match="mode"):
        emitter(mode="both")
    with pytest.raises(ValueError, match="optimiser"):
        emitter(optimiser="rmsprop")
    with pytest.raises(TypeError, match="scoring_fn"):
        q.MEESEmitter(3, num_descriptors=2, archive_size=4)
    em = emitter()
    algo, state = _started(em, jr.key(12))
    ints = jnp.ones((2, DIM), jnp.int32)
    with pytest.raises(ValueError, match="must all be floating point"):
        em.init(state.repertoire, ints, jnp.zeros((2, 2)), jnp.zeros(2), None, key=jr.key(0))
    with pytest.raises(ValueError, match="descriptors have 3 dimensions, num_descriptors is 2"):
        em.init(state.repertoire, ints.astype(jnp.float32), jnp.zeros((2, 3)), jnp.zeros(2), None,
                key=jr.key(0))  # fmt: skip
    two = jnp.zeros((2, DIM))
    fit, desc, _ = quadratic(two, key=jr.key(0))
    info = _info(2)
    with pytest.raises(ValueError, match="one offspring per generation, got a batch of 2"):
        em.state_update(state.emitter_state, state.repertoire, two, desc, fit, None,
                        add_info=info, key=jr.key(0))  # fmt: skip


def test_over_two_devices_the_step_is_the_one_devices():
    """Spread over a mesh, every device takes the first device's inputs and key, scores its
    half of the samples and gathers the rest: the next offspring (and state) is the one
    device's, the same on both devices; the second device emits a NaN placeholder."""
    from jax.sharding import Mesh, PartitionSpec as P

    one, two = emitter(sample_number=8), emitter(sample_number=8, axis_name="d")
    algo, state = _started(one, jr.key(13))
    genotypes = state.emitter_state.offspring
    fit, desc, _ = quadratic(genotypes, key=jr.key(0))
    info = _info(1)
    args = (state.emitter_state, state.repertoire, genotypes, desc, fit)
    want = one.state_update(*args, None, add_info=info, key=jr.key(14))
    mesh = Mesh(np.asarray(jax.devices()[:2]), ("d",))

    def on_device(a, k):
        s = two.state_update(*a, None, add_info=info, key=jr.wrap_key_data(k[0]))
        emitted, lineage = two.emit(state.repertoire, s, key=jr.key(0))
        return s.offspring[None], emitted[None], lineage.parent1[None]

    # Each device gets another key: only the first device's is used.
    keys = jnp.stack([jr.key_data(jr.key(14)), jr.key_data(jr.key(99))])
    got, emitted, parents = jax.shard_map(
        on_device, mesh=mesh, in_specs=(P(), P("d")), out_specs=P("d"), check_vma=False
    )(args, keys)
    np.testing.assert_allclose(got[0], want.offspring, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got[0], got[1])
    assert bool(jnp.all(jnp.isfinite(emitted[0]))) and bool(jnp.all(jnp.isnan(emitted[1])))
    assert int(parents[1][0]) == -1
    with pytest.raises(ValueError, match="sample_number \\(6\\) must split evenly over the 4"):
        bad = emitter(sample_number=6, axis_name="d")
        mesh4 = Mesh(np.asarray(jax.devices()[:4]), ("d",))

        def update(a, k):
            s = bad.state_update(*a, None, add_info=info, key=jr.wrap_key_data(k[0]))
            return s.generation[None]

        keys4 = jnp.stack([jr.key_data(jr.key(i)) for i in range(4)])
        jax.shard_map(update, mesh=mesh4, in_specs=(P(), P("d")), out_specs=P("d"),
                      check_vma=False)(args, keys4)  # fmt: skip
