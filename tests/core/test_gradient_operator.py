"""OG-MAP-Elites and OMG-MEGA (`GradientOperatorEmitter`): the points and their gradient steps
written out against the projected sphere's analytic gradients, the bounds, an empty archive,
learning, and bad input."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q


DIM = 10
SPHERE = q.ProjectedSphere(DIM)
CELLS = q.GridTessellation((10, 10), *SPHERE.descriptor_bounds)


def _emit(emitter, repertoire, key):
    return jax.jit(lambda r, k: emitter.emit(r, None, key=k))(repertoire, key)


def _repertoire(key, num=30):
    genotypes = jr.uniform(key, (num, DIM), minval=-3.0, maxval=3.0)
    fitnesses, descriptors, _ = SPHERE(genotypes, key=key)
    repertoire = q.MAPElitesRepertoire.empty(CELLS, genotypes[0])
    repertoire, _ = repertoire.add(genotypes, descriptors, fitnesses)
    return repertoire


def _jacobian(x):
    """The projected sphere's gradients, written out: the fitness's `-2 (x - 2.048) * 100 /
    worst`, and each descriptor's (the half's coordinates, folded outside `+-5.12`)."""
    x = np.asarray(x, np.float64)
    worst = DIM * (5.12 + 0.4 * 5.12) ** 2
    outside = np.abs(x) > 5.12
    folded = np.where(outside, -5.12 / np.where(outside, x, 1.0) ** 2, 1.0)
    first = np.arange(DIM) < DIM // 2
    return np.stack([-2 * (x - 2.048) * 100 / worst, folded * first, folded * ~first])


def test_og_map_elites_steps_each_point_along_its_fitness_gradient(getkey):
    """With `sigma = 0` the points are stored elites; each child is its point plus `sigma_g`
    times the fitness gradient there; the lineage names the elite for both."""
    repertoire = _repertoire(getkey())
    emitter = q.GradientOperatorEmitter(SPHERE, jnp.zeros(DIM), sigma=0.0, sigma_g=0.5,
                                        branches=8)  # fmt: skip
    batch, lineage = _emit(emitter, repertoire, getkey())
    assert batch.shape == (16, DIM) and emitter.batch_size == 16
    points, children = np.asarray(batch[:8]), np.asarray(batch[8:])
    stored = np.asarray(repertoire.genotypes)[np.asarray(repertoire.filled)]
    for point, child in zip(points, children):
        assert (stored == point).all(axis=1).any()
        np.testing.assert_allclose(child, point + 0.5 * _jacobian(point)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(lineage.kind, [q.Origin.EVO] * 8 + [q.Origin.GRADIENT] * 8)


def test_omg_mega_mixes_normalised_gradients_with_a_non_negative_fitness_weight(getkey):
    """Each child minus its point is `J^T c` for the normalised Jacobian at the point, with
    `c ~ N(0, sigma_g^2)` and the fitness's coefficient `|c_0|` (read back by least squares)."""
    repertoire = _repertoire(getkey())
    emitter = q.GradientOperatorEmitter(SPHERE, jnp.zeros(DIM), sigma=0.2, sigma_g=2.0,
                                        measure_gradients=True, normalize_grad=True,
                                        branches=200)  # fmt: skip
    batch, _ = _emit(emitter, repertoire, getkey())
    points, children = np.asarray(batch[:200]), np.asarray(batch[200:])
    coefficients = []
    for point, child in zip(points, children):
        jac = _jacobian(point)
        jac = jac / (np.linalg.norm(jac, axis=1, keepdims=True) + 1e-8)
        c, residual, *_ = np.linalg.lstsq(jac.T, child - point, rcond=None)
        assert float(np.sum(residual)) < 1e-8
        coefficients.append(c)
    c = np.asarray(coefficients)
    assert (c[:, 0] >= -1e-5).all()
    assert np.std(c[:, 1:]) == pytest.approx(2.0, rel=0.15)
    assert np.mean(np.abs(c[:, 0])) == pytest.approx(2.0 * np.sqrt(2 / np.pi), rel=0.15)


def test_iso_line_points_are_clipped_into_the_bounds_and_steps_are_not(getkey):
    repertoire = _repertoire(getkey())
    emitter = q.GradientOperatorEmitter(SPHERE, jnp.zeros(DIM), sigma=3.0, sigma_g=50.0,
                                        operator_type="iso_line_dd", line_sigma=0.5,
                                        lower=-1.0, upper=1.0, branches=32)  # fmt: skip
    batch, _ = _emit(emitter, repertoire, getkey())
    assert bool(jnp.all(jnp.abs(batch[:32]) <= 1.0))
    assert bool(jnp.any(jnp.abs(batch[32:]) > 1.0))  # pyribs clips the points only


def test_an_empty_archive_draws_points_around_x0(getkey):
    empty = q.MAPElitesRepertoire.empty(CELLS, jnp.zeros(DIM))
    x0 = jnp.full((DIM,), 0.3)
    emitter = q.GradientOperatorEmitter(SPHERE, x0, sigma=0.0, sigma_g=0.5, branches=4)
    batch, lineage = _emit(emitter, empty, getkey())
    np.testing.assert_array_equal(batch[:4], jnp.stack([x0] * 4))
    np.testing.assert_array_equal(lineage.parent1, [-1] * 8)


@pytest.mark.slow
def test_omg_mega_fills_the_sphere_far_ahead_of_og_map_elites(getkey):
    """The DQD paper's order on the sphere: stepping along the descriptors' gradients spreads
    the archive; stepping along the fitness's only climbs."""
    coverage = {}
    for name, kw in {
        "og": dict(sigma=0.5, sigma_g=0.5),
        "omg": dict(sigma=0.0, sigma_g=10.0, measure_gradients=True, normalize_grad=True),
    }.items():
        algo = q.MAPElites(q.GradientOperatorEmitter(SPHERE, jnp.zeros(DIM), branches=20, **kw),
                           SPHERE)  # fmt: skip
        key = getkey()
        state, _ = algo.init(jnp.zeros((1, DIM)), CELLS, key=key)
        _, metrics = q.run(algo, state, 40, key=jr.fold_in(key, 1))
        coverage[name] = float(metrics.coverage[-1])
    assert coverage["omg"] > 2 * coverage["og"], coverage


def test_bad_input_is_named():
    x0 = jnp.zeros(DIM)
    with pytest.raises(ValueError, match=r"GradientOperatorEmitter.operator_type must be one"):
        q.GradientOperatorEmitter(SPHERE, x0, sigma=0.1, sigma_g=0.1, operator_type="line")
    with pytest.raises(ValueError, match=r"GradientOperatorEmitter.sigma must be a scalar or of"):
        q.GradientOperatorEmitter(SPHERE, x0, sigma=jnp.ones(3), sigma_g=0.1)
    with pytest.raises(ValueError, match=r"GradientOperatorEmitter.sigma_g must be >= 0"):
        q.GradientOperatorEmitter(SPHERE, x0, sigma=0.1, sigma_g=-1.0)
    with pytest.raises(ValueError, match=r"GradientOperatorEmitter.branches"):
        q.GradientOperatorEmitter(SPHERE, x0, sigma=0.1, sigma_g=0.1, branches=0)
    emitter = q.GradientOperatorEmitter(SPHERE, jnp.zeros(4), sigma=0.1, sigma_g=0.1)
    with pytest.raises(ValueError, match=r"the repertoire's genotypes have shape \(10,\), x0"):
        emitter.emit(_repertoire(jr.key(0)), None, key=jr.key(1))
