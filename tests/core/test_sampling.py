"""QD under noise: the sampling estimators and spreads against NumPy statements of QDax 0.5's
(`qdax/utils/sampling.py`), the noisy task against its definition, and the corrected repertoire
and its metrics against a direct reevaluation."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqx_qd as q
from eqx_qd import internal


# -- NumPy statements of QDax's extractors (axis 1 is the samples' axis) -------------------


def _np_mode(x: np.ndarray) -> np.ndarray:
    """QDax's `mode`: per row and coordinate, `np.unique`'s first value with the top count."""
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    out = np.empty((flat.shape[0], flat.shape[2]), x.dtype)
    for i in range(flat.shape[0]):
        for j in range(flat.shape[2]):
            values, counts = np.unique(flat[i, :, j], return_counts=True)
            out[i, j] = values[np.argmax(counts)]
    return out.reshape(x.shape[:1] + x.shape[2:])


def _np_closest(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(x.shape[0], x.shape[1], -1).astype(np.float64)
    picked = []
    for i in range(flat.shape[0]):
        d = np.linalg.norm(flat[i][:, None, :] - flat[i][None, :, :], axis=-1)
        picked.append(x[i, np.argmin(d.mean(axis=0))])
    return np.stack(picked)


NP_ESTIMATORS = {
    "mean": lambda x: x.mean(axis=1),
    "median": lambda x: np.median(x, axis=1),
    "mode": _np_mode,
    "closest": _np_closest,
}
NP_SPREADS = {
    "std": lambda x: x.std(axis=1),
    "mad": lambda x: np.median(np.abs(x - np.median(x, axis=1, keepdims=True)), axis=1),
    "iqr": lambda x: np.quantile(x, 0.75, axis=1) - np.quantile(x, 0.25, axis=1),
}


def _samples(seed: int, shape: tuple[int, ...], ties: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if ties:  # a few values only, so modes and medians meet ties
        return rng.integers(-2, 3, size=shape).astype(np.float32)
    return rng.normal(size=shape).astype(np.float32)


@settings(deadline=None, max_examples=12)
@given(
    seed=st.integers(0, 10_000),
    num_samples=st.sampled_from([1, 4, 7]),  # one, even (closest ties), odd
    trailing=st.sampled_from([(), (3,)]),
    ties=st.booleans(),
)
def test_estimators_and_spreads_match_numpy(seed, num_samples, trailing, ties):
    x = _samples(seed, (3, num_samples, *trailing), ties)
    for how, reference in NP_ESTIMATORS.items():
        got = np.asarray(internal.estimate(jnp.asarray(x), how))
        np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-5, err_msg=how)
    for how, reference in NP_SPREADS.items():
        got = np.asarray(internal.spread(jnp.asarray(x), how))
        np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-5, err_msg=how)


def test_mode_takes_the_most_frequent_value_and_the_smallest_on_ties():
    x = jnp.asarray([[3.0, 1.0, 3.0, 2.0], [5.0, 4.0, 4.0, 5.0]])
    np.testing.assert_array_equal(internal.estimate(x, "mode"), [3.0, 4.0])


def test_closest_returns_a_whole_sample():
    x = jnp.asarray([[[0.0, 0.0], [1.0, 1.0], [0.9, 1.1], [10.0, -5.0]]])
    np.testing.assert_array_equal(internal.estimate(x, "closest"), [[1.0, 1.0]])


def test_unknown_names_are_refused():
    x = jnp.zeros((2, 3))
    with pytest.raises(ValueError, match="how.*'average'"):
        internal.estimate(x, "average")
    with pytest.raises(ValueError, match="how.*'var'"):
        internal.spread(x, "var")


# -- The noisy task -----------------------------------------------------------------------


ARM = q.Arm(6)


def test_noisy_is_its_definition_with_qdax_s_keys():
    """`Noisy`'s draws are QDax's `noisy_arm_scoring_function`'s: the key splits into four,
    then genes, fitness and descriptor noise from the last three."""
    task = q.Noisy(ARM, fitness_noise=0.1, descriptor_noise=0.2, genotype_noise=0.05)
    genotypes = ARM.init_genotypes(9, key=jr.key(0))
    key = jr.key(7)
    fitnesses, descriptors, _ = task(genotypes, key=key)
    inner, f_key, d_key, g_key = jr.split(key, 4)
    clean_f, clean_d, _ = ARM(genotypes + 0.05 * jr.normal(g_key, genotypes.shape), key=inner)
    np.testing.assert_allclose(fitnesses, clean_f + 0.1 * jr.normal(f_key, (9,)), atol=1e-6)
    np.testing.assert_allclose(descriptors, clean_d + 0.2 * jr.normal(d_key, (9, 2)), atol=1e-6)


def test_noisy_without_noise_is_the_task_and_keeps_its_facts():
    task = q.Noisy(ARM)
    genotypes = ARM.init_genotypes(5, key=jr.key(1))
    for got, want in zip(task(genotypes, key=jr.key(2))[:2], ARM(genotypes, key=jr.key(2))[:2]):
        np.testing.assert_array_equal(got, want)
    assert (task.genotype_dim, task.num_descriptors, task.qd_offset) == (6, 2, 1.0)
    assert task.descriptor_bounds == ARM.descriptor_bounds


def test_noisy_refuses_negative_noise_and_a_non_task():
    with pytest.raises(ValueError, match="Noisy.fitness_noise"):
        q.Noisy(ARM, fitness_noise=-0.1)
    with pytest.raises(TypeError, match="task"):  # beartype or __check_init__
        q.Noisy(lambda g, key: g, 0.1)


# -- Sampling -----------------------------------------------------------------------------


NOISY = q.Noisy(ARM, fitness_noise=0.1, descriptor_noise=0.1, genotype_noise=0.05)


def test_sample_scores_uses_one_split_key_per_sample():
    genotypes = ARM.init_genotypes(4, key=jr.key(3))
    s = internal.sample_scores(NOISY, genotypes, 5, key=jr.key(4))
    assert s.fitnesses.shape == (4, 5) and s.descriptors.shape == (4, 5, 2)
    for i, k in enumerate(jr.split(jr.key(4), 5)):
        f, d, _ = NOISY(genotypes, key=k)
        np.testing.assert_allclose(s.fitnesses[:, i], f, atol=1e-6)
        np.testing.assert_allclose(s.descriptors[:, i], d, atol=1e-6)


@pytest.mark.parametrize("fitness_estimator", ["mean", "median", "mode", "closest"])
def test_sampled_returns_the_estimates_and_spreads_of_its_samples(fitness_estimator):
    task = q.Sampled(NOISY, 6, fitness_estimator=fitness_estimator, descriptor_estimator="median",
                     spread="mad")  # fmt: skip
    genotypes = ARM.init_genotypes(4, key=jr.key(5))
    fitnesses, descriptors, extra = task(genotypes, key=jr.key(6))
    s = internal.sample_scores(NOISY, genotypes, 6, key=jr.key(6))
    np.testing.assert_allclose(fitnesses, internal.estimate(s.fitnesses, fitness_estimator))
    np.testing.assert_allclose(descriptors, np.median(s.descriptors, axis=1), atol=1e-6)
    np.testing.assert_allclose(extra.fitness_spread, NP_SPREADS["mad"](np.asarray(s.fitnesses)),
                               atol=1e-6)  # fmt: skip
    assert extra.descriptor_spread.shape == (4, 2)
    assert (task.genotype_dim, task.num_descriptors, task.qd_offset) == (6, 2, 1.0)


def test_sampling_averages_the_noise_away():
    """The mean of 64 samples lies near the noiseless score (the noise's sd over 8), where
    one sample does not."""
    genotypes = ARM.init_genotypes(256, key=jr.key(7))
    clean, _, _ = ARM(genotypes, key=jr.key(0))
    noisy_f = q.Noisy(ARM, fitness_noise=0.1)
    one, _, _ = noisy_f(genotypes, key=jr.key(8))
    many, _, _ = q.Sampled(noisy_f, 64)(genotypes, key=jr.key(8))
    assert float(jnp.std(one - clean)) > 0.08
    assert float(jnp.std(many - clean)) < 0.02


def test_sampled_refuses_bad_settings():
    with pytest.raises(ValueError, match="Sampled.num_samples"):
        q.Sampled(NOISY, 0)
    with pytest.raises(ValueError, match="Sampled.fitness_estimator.*'average'"):
        q.Sampled(NOISY, 3, fitness_estimator="average")
    with pytest.raises(ValueError, match="Sampled.spread"):
        q.Sampled(NOISY, 3, spread="range")


# -- The corrected repertoire -------------------------------------------------------------


CELLS = q.GridTessellation((8, 8), 0.0, 1.0)


def _repertoire(task, seed: int = 0, n: int = 200):
    genotypes = ARM.init_genotypes(n, key=jr.key(seed))
    f, d, _ = task(genotypes, key=jr.key(seed + 1))
    rep, _ = q.MAPElitesRepertoire.empty(CELLS, genotypes[0]).add(genotypes, d, f)
    return rep


def test_a_deterministic_task_reevaluates_to_the_same_repertoire():
    rep = _repertoire(ARM)
    result = q.reevaluated(rep, ARM, 4, key=jr.key(3))
    np.testing.assert_allclose(result.repertoire.fitnesses, rep.fitnesses, atol=1e-6)
    filled = np.asarray(rep.filled)
    np.testing.assert_allclose(np.asarray(result.fitness_spread)[filled], 0.0, atol=1e-6)
    assert np.isnan(np.asarray(result.fitness_spread)[~filled]).all()
    m = q.corrected_metrics(result, ARM.qd_offset)
    plain = q.qd_metrics(rep, ARM.qd_offset)
    np.testing.assert_allclose(m.qd_score, plain.qd_score, rtol=1e-6)
    assert float(m.fitness_reproducibility) == pytest.approx(0.0, abs=1e-6)


def test_the_corrected_repertoire_is_a_direct_reevaluation():
    """Every elite scored again 16 times: its median fitness at the cell of its median
    descriptor, the best per cell kept, as a Python loop over the elites computes it."""
    rep = _repertoire(NOISY, seed=4)
    key = jr.key(9)
    result = q.reevaluated(rep, NOISY, 16, key=key)
    s = internal.sample_scores(NOISY, rep.genotypes, 16, key=key)
    f = np.median(np.asarray(s.fitnesses), axis=1)
    d = np.median(np.asarray(s.descriptors), axis=1)
    cells = np.asarray(CELLS.index(jnp.asarray(d)))
    best = np.full(CELLS.num_cells, -np.inf, np.float32)
    for i in np.flatnonzero(np.asarray(rep.filled)):
        best[cells[i]] = max(best[cells[i]], f[i])
    np.testing.assert_allclose(result.repertoire.fitnesses, best, rtol=1e-6)
    filled = np.asarray(rep.filled)
    spreads = np.asarray(s.fitnesses).std(axis=1)
    np.testing.assert_allclose(np.asarray(result.fitness_spread)[filled], spreads[filled],
                               rtol=1e-5)  # fmt: skip
    d_spread = np.asarray(s.descriptors).std(axis=1).mean(axis=-1)
    m = q.corrected_metrics(result, NOISY.qd_offset)
    assert float(m.descriptor_reproducibility) == pytest.approx(d_spread[filled].mean(), rel=1e-5)
    assert float(m.qd_score) == pytest.approx(np.sum(best[np.isfinite(best)] + 1.0), rel=1e-5)
    assert int(m.num_filled) == int(np.isfinite(best).sum())


@pytest.mark.slow  # the corrected repertoire's reference test stays in the fast tier
def test_noise_makes_the_stored_qd_score_overstate_the_corrected_one():
    """Elites kept for one lucky draw score lower when run again: the corrected QD-score of
    a noisy repertoire is below its stored QD-score."""
    rep = _repertoire(q.Noisy(ARM, fitness_noise=0.1), seed=5, n=1000)
    result = q.reevaluated(rep, q.Noisy(ARM, fitness_noise=0.1), 32, key=jr.key(6))
    stored = q.qd_metrics(rep, 1.0).qd_score
    corrected = q.corrected_metrics(result, 1.0).qd_score
    assert float(corrected) < float(stored) - 1.0


def test_reevaluated_refuses_bad_settings():
    rep = _repertoire(ARM)
    with pytest.raises(ValueError, match="num_reevaluations"):
        q.reevaluated(rep, ARM, 0, key=jr.key(0))
    with pytest.raises(ValueError, match="fitness_estimator"):
        q.reevaluated(rep, ARM, 2, fitness_estimator="best", key=jr.key(0))
    with pytest.raises(ValueError, match="samples.fitnesses must have shape"):
        internal.rebuilt(rep, internal.Samples(jnp.zeros((3, 2)), jnp.zeros((3, 2, 2)), None))


def test_rebuilt_from_outside_samples_is_reevaluated_and_drops_failed_elites():
    rep = _repertoire(NOISY, seed=4)
    key = jr.key(9)
    s = internal.sample_scores(NOISY, rep.genotypes, 5, key=key)
    direct = q.reevaluated(rep, NOISY, 5, key=key)
    again = internal.rebuilt(rep, s)
    np.testing.assert_array_equal(again.repertoire.fitnesses, direct.repertoire.fitnesses)
    # One failed re-evaluation (NaN) of an elite: it is not reproduced, so not stored.
    first = int(np.flatnonzero(np.asarray(rep.filled))[0])
    broken = internal.Samples(s.fitnesses.at[first, 0].set(jnp.nan), s.descriptors, None)
    out = internal.rebuilt(rep, broken)
    without = eqx.tree_at(lambda r: r.fitnesses, rep, rep.fitnesses.at[first].set(-jnp.inf))
    expected = internal.rebuilt(without, s)
    np.testing.assert_array_equal(out.repertoire.fitnesses, expected.repertoire.fitnesses)


def test_reevaluated_runs_under_jit():
    rep = _repertoire(NOISY, seed=8)
    run = jax.jit(lambda r, k: q.corrected_metrics(q.reevaluated(r, NOISY, 4, key=k), 1.0))
    m = run(rep, jr.key(1))
    assert np.isfinite(float(m.qd_score)) and 0 < int(m.num_filled) <= CELLS.num_cells


# -- MAP-Elites Low-Spread ----------------------------------------------------------------


def _np_low_spread_add(state, centroids, genotypes, fitness_samples, descriptor_samples):
    """QDax 0.5's `MELSRepertoire.add` in NumPy (nearest-centroid cells, the mode cell the
    smallest most frequent index, the mean fitness, the pairs' mean distance), with our rule
    for a batch's candidates that pass in one cell: the fittest, the lowest index on ties."""
    fit, desc, spreads, genes = (np.array(a) for a in state)
    b, n, _ = descriptor_samples.shape
    d2 = ((descriptor_samples[:, :, None, :] - centroids[None, None]) ** 2).sum(-1)
    sample_cells = d2.argmin(-1)
    winners = {}
    for i in range(b):
        values, counts = np.unique(sample_cells[i], return_counts=True)
        cell = values[np.argmax(counts)]
        f = fitness_samples[i].astype(np.float64).mean()
        pairs = [np.linalg.norm(descriptor_samples[i, a] - descriptor_samples[i, c])
                 for a in range(n) for c in range(a + 1, n)]  # fmt: skip
        s = float(np.mean(pairs)) if pairs else 0.0
        if f > fit[cell] and s <= spreads[cell] + 1e-6 * (s > 0):
            if cell not in winners or f > winners[cell][0]:
                winners[cell] = (f, s, i)
    for cell, (f, s, i) in winners.items():
        fit[cell], spreads[cell], genes[cell], desc[cell] = f, s, genotypes[i], centroids[cell]
    return fit, desc, spreads, genes


CENTROIDS = np.random.default_rng(3).uniform(size=(12, 2)).astype(np.float32)
SPREAD_CELLS = q.CVTTessellation(CENTROIDS)


@settings(deadline=None, max_examples=10)
@given(seed=st.integers(0, 10_000), num_samples=st.sampled_from([1, 4]), batches=st.integers(1, 3))
def test_low_spread_insertion_matches_a_numpy_reference(seed, num_samples, batches):
    rng = np.random.default_rng(seed)
    rep = q.LowSpreadRepertoire.empty(SPREAD_CELLS, jnp.zeros(3))
    state = (rep.fitnesses, rep.descriptors, rep.spreads, rep.genotypes)
    for _ in range(batches):
        b = 7
        genotypes = rng.normal(size=(b, 3)).astype(np.float32)
        centre = rng.uniform(size=(b, 1, 2))
        samples = (centre + rng.normal(scale=0.1, size=(b, num_samples, 2))).astype(np.float32)
        fits = rng.normal(size=(b, num_samples)).astype(np.float32)
        extra = q.SampledExtra(
            jnp.zeros(b), jnp.zeros((b, 2)), jnp.asarray(fits), jnp.asarray(samples), None
        )
        rep, info = rep.add(jnp.asarray(genotypes), jnp.asarray(samples.mean(1)),
                            jnp.asarray(fits.mean(1)), extra)  # fmt: skip
        state = _np_low_spread_add(state, CENTROIDS, genotypes, fits, samples)
        np.testing.assert_allclose(rep.fitnesses, state[0], rtol=1e-5)
        np.testing.assert_allclose(rep.descriptors, state[1], rtol=1e-6)
        np.testing.assert_allclose(rep.spreads, state[2], rtol=1e-5)
        np.testing.assert_allclose(rep.genotypes, state[3])
        assert int(jnp.sum(info.inserted)) <= b


def test_a_fitter_but_more_spread_candidate_does_not_enter():
    rep = q.LowSpreadRepertoire.empty(SPREAD_CELLS, jnp.zeros(3))
    c = CENTROIDS[0]

    def offer(rep, fitness, scale):
        samples = jnp.asarray(c + np.array([[-scale, 0.0], [scale, 0.0]]), jnp.float32)[None]
        extra = q.SampledExtra(jnp.zeros(1), jnp.zeros((1, 2)),
                               jnp.full((1, 2), fitness), samples, None)  # fmt: skip
        return rep.add(jnp.zeros((1, 3)), samples[:, 0], jnp.full((1,), fitness), extra)

    rep, info = offer(rep, 1.0, 0.001)
    assert bool(info.inserted[0]) and float(rep.spreads[0]) == pytest.approx(0.002, rel=1e-4)
    rep, info = offer(rep, 2.0, 0.002)  # fitter, but twice as spread
    assert not bool(info.inserted[0]) and float(rep.fitnesses[0]) == 1.0
    rep, info = offer(rep, 1.5, 0.0005)  # fitter and tighter
    assert bool(info.inserted[0]) and float(rep.fitnesses[0]) == 1.5


def test_low_spread_keeps_the_repertoire_laws():
    from eqx_qd.testing import check_repertoire

    # One sample each (no extra): spread 0 never loses to a stored spread, so the archive is
    # elitist; it stores its cells' centroids, not the candidates' descriptors, so the laws
    # that look for the offered rows ('from_candidates', 'reference') do not apply.
    rep = q.LowSpreadRepertoire.empty(SPREAD_CELLS, jnp.zeros(3))
    laws = ["finite", "elitist", "order", "select", "checkpoint"]
    check_repertoire(rep, elitist=True, laws=laws, max_examples=8)


@pytest.mark.slow  # the archive's reference test and laws stay in the fast tier
def test_me_ls_runs_in_map_elites_on_the_samples_and_refuses_lineage():
    noisy = q.Noisy(ARM, fitness_noise=0.1, descriptor_noise=0.1)
    cells = q.GridTessellation((6, 6), 0.0, 1.0)
    genotypes = ARM.init_genotypes(32, key=jr.key(0))
    emitter = q.MixingEmitter(32, 1.0, variation=q.IsoLineVariation(0.005, 0.05))
    algo = q.MAPElites(emitter, q.Sampled(noisy, 4))
    state, _ = algo.init(genotypes, q.LowSpreadRepertoire.empty(cells, genotypes[0]),
                         key=jr.key(1))  # fmt: skip
    first = int(state.repertoire.num_filled)
    state, history = q.run(algo, state, 20, key=jr.key(2))
    rep = state.repertoire
    assert int(rep.num_filled) > first
    filled = np.asarray(rep.filled)
    assert np.all(np.asarray(rep.spreads)[filled] > 0) and np.all(np.isinf(rep.spreads[~filled]))
    # Every stored descriptor is its cell's centroid.
    np.testing.assert_allclose(rep.descriptors[filled], cells.centroids[filled], atol=1e-6)
    with pytest.raises(ValueError, match="lineage=True cannot run on it"):
        q.MAPElites(emitter, q.Sampled(noisy, 4), lineage=True).init(
            genotypes, q.LowSpreadRepertoire.empty(cells, genotypes[0]), key=jr.key(1)
        )


def test_low_spread_refuses_an_extra_that_is_not_samples():
    rep = q.LowSpreadRepertoire.empty(SPREAD_CELLS, jnp.zeros(3))
    with pytest.raises(TypeError, match="extra"):  # beartype, or the message without it
        rep.add(jnp.zeros((2, 3)), jnp.zeros((2, 2)), jnp.zeros(2), jnp.arange(2))
