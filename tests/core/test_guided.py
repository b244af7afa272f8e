"""Density Descent Search's and Discount Model Search's archives, the density ranker, the Soft
QD score and the k-descriptor projected sphere, each against a NumPy statement of what pyribs
0.12 (`DensityArchive`, `DiscountArchive`, `DiscountModelManager`) or the paper computes."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import internal
from eqx_qd._emitters.rankers import ranker
from eqx_qd.testing import check_repertoire


CELLS = q.GridTessellation((6, 5), (-1.0, 0.0), (1.0, 2.0))
GENOTYPE = jnp.zeros(3)


def _batch(seed: int, n: int = 12, spread: float = 1.0):
    rng = np.random.default_rng(seed)
    genotypes = rng.normal(size=(n, 3)).astype(np.float32)
    descriptors = np.stack([rng.uniform(-1, 1, n), rng.uniform(0, 2, n)], 1) * spread
    fitnesses = rng.normal(size=n).astype(np.float32)
    return jnp.asarray(genotypes), jnp.asarray(descriptors, jnp.float32), jnp.asarray(fitnesses)


def _np_kde(points, buffer, h):
    """pyribs' `gaussian_kde_measures`: cdist, a Gaussian kernel, divided by n h."""
    if len(buffer) == 0:
        return np.zeros(len(points))
    dist = np.linalg.norm(points[:, None, :] - buffer[None, :, :], axis=-1) / h
    return np.sum(np.exp(-0.5 * dist**2) / np.sqrt(2 * np.pi), axis=1) / (len(buffer) * h)


# -- Density Descent Search --------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 1, 7, 40])
def test_the_density_estimate_is_pyribs_kde_over_the_rows_held(count):
    rng = np.random.default_rng(count)
    buffer = rng.normal(size=(40, 3)).astype(np.float32) * 3
    points = rng.normal(size=(9, 3)).astype(np.float32) * 3
    got = internal.kde_density(jnp.asarray(points), jnp.asarray(buffer), count, 1.7)
    np.testing.assert_allclose(got, _np_kde(points, buffer[:count], 1.7), rtol=2e-4, atol=1e-7)


def test_the_reservoir_holds_the_stream_first_then_a_uniform_sample_of_it():
    capacity, stream, batch = 20, 400, 25

    def one(key):
        r = internal.Reservoir.start(capacity, 1, key=key)
        rows = jnp.arange(stream, dtype=jnp.float32).reshape(-1, batch, 1)
        keep = jnp.ones((batch,), bool)
        r, held = jax.lax.scan(lambda r, x: (r.offer(x, keep), r.count), r, rows)
        return r, held

    r, counts = jax.vmap(one)(jr.split(jr.key(0), 400))
    # The first batch fills it in order; the count stops at the capacity.
    assert np.array_equal(np.asarray(counts[0]), [0, 20] + [20] * 14)
    first = one(jr.key(1))[0]
    assert np.all(np.asarray(first.rows[:, 0]) < stream)
    # Every row of the stream is held at the end with probability capacity / stream: early
    # and late rows alike (a plain "replace at random" keeps too many late ones).
    held = np.zeros(stream)
    for rows in np.asarray(r.rows[..., 0]).astype(int):
        assert len(set(rows)) == capacity  # no row twice
        held[rows] += 1
    rate = held / 400
    for part in np.split(rate, 4):
        assert abs(part.mean() - capacity / stream) < 0.01, rate.reshape(4, -1).mean(1)


def test_the_reservoir_skips_rows_not_kept():
    r = internal.Reservoir.start(8, 1, key=jr.key(3))
    rows = jnp.arange(6, dtype=jnp.float32)[:, None]
    r = r.offer(rows, jnp.asarray([True, False, True, False, False, True]))
    assert int(r.count) == 3
    assert np.array_equal(np.asarray(r.rows[:3, 0]), [0.0, 2.0, 5.0])


def test_a_density_archive_reports_the_density_before_the_batch_and_keeps_elites():
    rep = q.DensityRepertoire.empty(CELLS, GENOTYPE, bandwidth=0.3, buffer_size=50, key=jr.key(0))
    plain = q.MAPElitesRepertoire.empty(CELLS, GENOTYPE)
    seen = []
    for seed in range(4):
        g, d, f = _batch(seed)
        d = d.at[0, 1].set(jnp.nan)  # a failed evaluation: no density, not in the reservoir
        rep, info = rep.add(g, d, f)
        plain, plain_info = plain.add(g, d, f)
        expected = _np_kde(np.asarray(d[1:]), np.asarray(seen).reshape(-1, 2), 0.3)
        np.testing.assert_allclose(info.density[1:], expected, rtol=2e-4, atol=1e-7)
        assert np.isnan(info.density[0]) and np.isnan(info.value[0])
        np.testing.assert_allclose(info.value[1:], -info.density[1:])
        assert list(np.asarray(info.threshold_status)) == [0] + [2] * 11
        assert np.array_equal(info.status, plain_info.status)
        seen.extend(np.asarray(d[1:]).tolist())
    assert int(rep.reservoir.count) == 44
    assert eqx.tree_equal(rep.result, plain)
    assert rep.fitnesses is rep.result.fitnesses and rep.capacity == 30


def test_the_density_ranker_puts_the_sparsest_first_and_failures_last():
    info = q.AddInfo(
        cell=jnp.zeros(4, jnp.int32),
        status=jnp.zeros(4, jnp.int32),
        delta=jnp.zeros(4),
        threshold_status=jnp.zeros(4, jnp.int32),
        value=jnp.zeros(4),
        density=jnp.asarray([0.3, 0.1, 0.2, 0.1]),
    )
    fitnesses = jnp.asarray([1.0, jnp.nan, 0.0, 2.0])
    order, values = ranker("density").rank(jnp.zeros(2), fitnesses, jnp.zeros((4, 2)), info)
    assert list(np.asarray(order)) == [3, 2, 0, 1]
    with pytest.raises(ValueError, match="AddInfo.density.*DensityRepertoire"):
        ranker("density").rank(jnp.zeros(2), fitnesses, jnp.zeros((4, 2)), info.__class__(
            info.cell, info.status, info.delta, info.threshold_status, info.value
        ))  # fmt: skip


# -- Discount Model Search ---------------------------------------------------------------


def _dms(**options):
    settings = dict(init_train_points=20, empty_points=8, key=jr.key(0))
    return q.DiscountModelRepertoire.empty(CELLS, GENOTYPE, **{**settings, **options})


def test_the_discount_targets_are_cma_mae_s_rule_and_empty_points_are_empty_centres():
    rep = _dms(learning_rate=0.25, threshold_min=-1.0)
    g, d, f = _batch(1)
    f = f.at[3].set(jnp.inf)
    discount = rep.discount(d)
    data = rep.targets(d, f, discount)
    lr, disc, fit = 0.25, np.asarray(discount), np.asarray(f)
    expected = np.where(fit > disc, (1 - lr) * disc + lr * fit, disc)
    ok = np.isfinite(fit)
    np.testing.assert_allclose(np.asarray(data.targets)[ok], expected[ok], rtol=1e-6)
    assert list(np.asarray(data.used)) == list(ok)
    # Empty points: distinct centres of cells holding no elite, threshold_min as target.
    rep, _ = rep.add(g, d, f)
    filled = set(np.flatnonzero(np.asarray(rep.filled)))
    centres = np.asarray(CELLS.centroids)
    for take in (5, 30):
        empty = rep.empty_centres(take, key=jr.key(take))
        used = np.asarray(empty.used)
        assert used.sum() == min(take, 30 - len(filled))
        rows = np.asarray(empty.descriptors)[used]
        cells = [int(np.flatnonzero((centres == row).all(1))[0]) for row in rows]
        assert len(set(cells)) == len(cells) and not set(cells) & filled
        assert np.all(np.asarray(empty.targets) == -1.0)


def test_the_discount_model_learns_its_targets_and_stops_at_the_cutoff():
    rep = _dms(train_epochs=40, train_cutoff_loss=0.0, discount_range=(0.0, 4.0))
    # The first training drew the model towards threshold_min (0) everywhere.
    assert abs(float(jnp.max(jnp.abs(rep.discount(CELLS.centroids))))) < 0.2
    centres = CELLS.centroids
    targets = 1.0 + centres[:, 0] ** 2 + centres[:, 1]  # within the range, smooth
    data = type(rep.targets(centres, targets, targets))(
        centres, targets, jnp.ones(30, bool)
    )  # fmt: skip
    before = float(jnp.mean((rep.discount(centres) - targets) ** 2))
    trained = rep.trained(data, key=jr.key(1))
    after = float(jnp.mean((trained.discount(centres) - targets) ** 2))
    assert int(trained.last_epochs) == 40 and after < 0.05 * before
    # With a cutoff the loss reaches, training stops after the first epoch.
    loose = eqx.tree_at(lambda r: r.train_cutoff_loss, rep, jnp.float32(1e6))
    assert int(loose.trained(data, key=jr.key(1)).last_epochs) == 1


def test_a_discount_archive_ranks_by_the_model_before_training_and_keeps_elites():
    rep = _dms()
    plain = q.MAPElitesRepertoire.empty(CELLS, GENOTYPE)
    for seed in range(3):
        g, d, f = _batch(seed)
        before = rep.discount(d)
        rep, info = rep.add(g, d, f)
        plain, plain_info = plain.add(g, d, f)
        np.testing.assert_allclose(info.value, f - before, rtol=1e-5, atol=1e-6)
        assert np.array_equal(info.threshold_status, np.where(f > before, 2, 0))
        assert np.array_equal(info.status, plain_info.status)
        assert int(rep.last_epochs) >= 1 and np.isfinite(float(rep.last_loss))
    assert eqx.tree_equal(rep.result, plain)
    # emptied: the archive empty() builds, its model trained again from the initial one.
    again = rep.emptied(GENOTYPE)
    assert eqx.tree_equal(again.model, _dms().model)
    assert int(again.num_filled) == 0


# The fast tier keeps the discount archive's laws (the two share their result archive's add).
@pytest.mark.parametrize("which", [pytest.param("density", marks=pytest.mark.slow), "discount"])
def test_the_guided_archives_pass_the_repertoire_laws(which):
    if which == "density":
        rep = q.DensityRepertoire.empty(
            CELLS, GENOTYPE, bandwidth=0.3, buffer_size=9, key=jr.key(0)
        )
    else:
        rep = _dms()
    check_repertoire(rep, elitist=True, max_examples=8)


# The whole suite runs the learning tests; the fast tier keeps each archive's own checks above.
@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["dms", "dds"])
def test_dms_and_dds_learn_on_the_projected_sphere(algorithm):
    task = q.ProjectedSphere(10, descriptor_dim=3)
    cells = q.CVTTessellation.from_kmeans(64, 3, *task.descriptor_bounds, key=jr.key(0))
    x0 = jnp.zeros(10)
    if algorithm == "dms":
        rep = q.DiscountModelRepertoire.empty(
            cells, x0, discount_range=(0.0, 100.0), init_train_points=64, key=jr.key(1)
        )
        emitter_ranker, sigma0 = "imp", 0.5
    else:
        rep = q.DensityRepertoire.empty(cells, x0, bandwidth=1.0, buffer_size=200, key=jr.key(1))
        emitter_ranker, sigma0 = "density", 1.5
    emitter = q.EvolutionStrategyEmitter(
        x0, sigma0, num_emitters=2, emitter_batch_size=8, ranker=emitter_ranker,
        selection_rule="mu", restart_rule="basic",
    )  # fmt: skip
    algo = q.MAPElites(emitter, task)
    state, first = algo.init(x0[None], rep, key=jr.key(2))
    state, metrics = q.run(algo, state, 30, key=jr.key(3))
    assert int(first.num_filled) == 1
    assert int(metrics.num_filled[-1]) >= 10 and float(metrics.qd_score[-1]) > 5 * float(
        first.qd_score
    )
    assert state.elites is state.repertoire.result  # the metrics describe the result archive


# -- The Soft QD score ---------------------------------------------------------------------


def test_the_soft_qd_score_is_the_integral_of_the_brightest_light():
    rep = q.MAPElitesRepertoire.empty(CELLS, GENOTYPE)
    assert float(q.soft_qd_score(rep, sigma=0.3, key=jr.key(0))) == 0.0
    g, d, f = _batch(5, n=5)
    rep, _ = rep.add(g, d, f)
    sigma, offset = 0.3, 1.5
    # The definition on a fine grid over the box [-1, 1] x [0, 2] (a midpoint rule).
    xs = np.linspace(-1, 1, 801)[:-1] + 1 / 800
    ys = np.linspace(0, 2, 801)[:-1] + 1 / 800
    grid = np.stack(np.meshgrid(xs, ys, indexing="ij"), -1).reshape(-1, 2)
    filled = np.asarray(rep.filled)
    quality = np.maximum(np.asarray(rep.fitnesses)[filled] + offset, 0.0)
    sq = ((grid[:, None, :] - np.asarray(rep.descriptors)[filled][None]) ** 2).sum(-1)
    light = np.max(quality[None] * np.exp(-sq / (2 * sigma**2)), axis=1)
    exact = light.mean() * 4.0
    got = q.soft_qd_score(rep, sigma=sigma, qd_offset=offset, num_samples=200_000, key=jr.key(1))
    assert float(got) == pytest.approx(exact, rel=0.02)
    # Monotone: an added or improved elite never lowers it (same sample points).
    better, _ = rep.add(g[:1], d[:1], f[:1] + 5.0)
    kw = dict(sigma=sigma, qd_offset=offset, num_samples=4096, key=jr.key(2))
    assert float(q.soft_qd_score(better, **kw)) >= float(q.soft_qd_score(rep, **kw))
    with pytest.raises(ValueError, match="soft_qd_score: sigma"):
        q.soft_qd_score(rep, sigma=0.0, key=jr.key(0))


# -- The k-descriptor projected sphere ---------------------------------------------------


@pytest.mark.parametrize("k", [2, 5, 10])
def test_the_projected_sphere_sums_k_blocks_of_folded_genes(k):
    task = q.ProjectedSphere(20, descriptor_dim=k)
    x = np.random.default_rng(k).normal(size=(6, 20)).astype(np.float32) * 6
    f, d, _ = task(jnp.asarray(x), key=jr.key(0))
    folded = np.where(np.abs(x) > 5.12, 5.12 / x, x)
    expected = np.stack([b.sum(1) for b in np.array_split(folded, k, axis=1)], 1)
    np.testing.assert_allclose(d, expected, rtol=1e-5, atol=1e-4)
    assert task.num_descriptors == k and task.descriptor_bounds == (-20 / k * 5.12, 20 / k * 5.12)
    with pytest.raises(ValueError, match="descriptor_dim .* at most genotype_dim"):
        q.ProjectedSphere(4, descriptor_dim=5)


# -- Bad input ---------------------------------------------------------------------------


def test_guided_archives_name_bad_settings():
    with pytest.raises(ValueError, match="DensityRepertoire.empty: bandwidth"):
        q.DensityRepertoire.empty(CELLS, GENOTYPE, bandwidth=0.0, key=jr.key(0))
    with pytest.raises(ValueError, match="DensityRepertoire.empty: buffer_size"):
        q.DensityRepertoire.empty(CELLS, GENOTYPE, bandwidth=1.0, buffer_size=0, key=jr.key(0))
    with pytest.raises(TypeError, match="tessellation"):
        q.DensityRepertoire.empty("grid", GENOTYPE, bandwidth=1.0, key=jr.key(0))
    with pytest.raises(ValueError, match="model must return a scalar or shape"):
        _dms(model=eqx.nn.Linear(2, 3, key=jr.key(0)))
    with pytest.raises(ValueError, match=r"model must map one descriptor of shape \(2,\)"):
        _dms(model=eqx.nn.Linear(4, 1, key=jr.key(0)))
    with pytest.raises(ValueError, match="discount_range low"):
        _dms(discount_range=(1.0, 1.0))
    with pytest.raises(ValueError, match="threshold_min"):
        _dms(threshold_min=-jnp.inf)
    with pytest.raises(ValueError, match="empty_points"):
        _dms(empty_points=0)


def test_the_discount_model_s_adam_is_pytorch_s():
    """PyTorch's `Adam` (betas 0.9, 0.999; epsilon on the bias-corrected root), written out;
    our steps agreed with `torch.optim.Adam` itself to 2e-7 on this case when written."""
    from eqx_qd._repertoire._discount import AdamState

    rng = np.random.default_rng(0)
    theta = rng.normal(size=5).astype(np.float32)
    grads = rng.normal(size=(4, 5)).astype(np.float32)
    ours, adam = jnp.asarray(theta), AdamState(jnp.zeros(5), jnp.zeros(5), 0)
    m = v = np.zeros(5)
    for t, g in enumerate(grads, start=1):
        ours, adam = adam.step(ours, jnp.asarray(g), jnp.float32(0.01))
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        denominator = np.sqrt(v) / np.sqrt(1 - 0.999**t) + 1e-8
        theta = theta - 0.01 / (1 - 0.9**t) * m / denominator
    np.testing.assert_allclose(ours, theta, rtol=1e-5, atol=1e-6)
    assert int(adam.steps) == 4
