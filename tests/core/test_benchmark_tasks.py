"""The QD-suite and Mouret's hypervolume functions: equal to QDax 0.5's on a committed sample
of its outputs (`benchmarks/test_functions.py` wrote it from QDax, and checks 10,000 genotypes
per function), against direct NumPy computations, and usable by name from the jobs."""

import math
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, strategies as st

import eqx_qd as q


QDAX = Path(__file__).parent / "data" / "qdax_functions.npz"
SPIRALS = [(g, d) for g in ("angle", "arc_length") for d in ("euclidean", "geodesic")]
# The functions of benchmarks/test_functions.py's sample, by its names.
TASKS = {
    "rastrigin": q.Rastrigin(10),
    "sphere": q.Sphere(10),
    "arm": q.Arm(8),
    "noisy_arm": q.Noisy(q.Arm(8), 0.1, 0.1, 0.05),
    "square": q.Square(2),
    "checkered": q.Checkered(2),
    "empty_circle": q.EmptyCircle(2),
    "non_continous_islands": q.Islands(2),
    "continous_islands": q.Islands(2, continuous=True),
    "square_5d": q.Square(5),
    **{f"spiral_{g}_{d}": q.ArchimedeanSpiral(g, d) for g, d in SPIRALS},
    "ssf_1": q.SelfSimilar(1),
    "ssf_2": q.SelfSimilar(2),
    "deceptive_evolvability": q.DeceptiveEvolvability(),
}


@eqx.filter_jit
def _score(task, genotypes):
    return task(genotypes, key=jr.key(7))


def test_the_sample_names_every_function():
    names = {k.split("/")[0] for k in np.load(QDAX).files}
    assert names == set(TASKS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_equal_to_qdax_on_its_sample(name):
    """Every function on QDax's sample: equal to 1e-5 (noisy_arm: with QDax's keys and
    noise; the draws of JAX 0.4.28, QDax's pin, and ours agree)."""
    sample = np.load(QDAX)
    genotypes = sample[f"{name}/genotypes"]
    fitnesses, descriptors, _ = _score(TASKS[name], jnp.asarray(genotypes))
    np.testing.assert_allclose(fitnesses, sample[f"{name}/fitness"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(descriptors, sample[f"{name}/descriptors"], rtol=1e-5, atol=1e-5)


GENES = st.lists(st.floats(0.0, 1.0, width=32), min_size=6, max_size=6)


@given(GENES)
def test_hypervolume_functions_against_numpy(genes):
    x = np.asarray(genes, np.float64).reshape(3, 2)
    cases = {
        q.Square(2): (1 - x.prod(-1), np.sin(5 * x)),
        q.Checkered(2): (np.sin(50 * x).prod(-1), np.sin(5 * x)),
        q.EmptyCircle(2): (
            np.exp(-((np.linalg.norm(x - 0.5, axis=-1) - 0.5) ** 2) / 0.18),
            np.sin(40 * x),
        ),
        q.Islands(2, continuous=True): (x.prod(-1), x - np.sin(20 * np.pi * x) / (20 * np.pi)),
    }
    for task, (fitness, descriptors) in cases.items():
        f, d, _ = _score(task, jnp.asarray(x, jnp.float32))
        np.testing.assert_allclose(f, fitness, atol=2e-5)
        np.testing.assert_allclose(d, descriptors, atol=2e-5)
    # Islands: every descriptor a tenth, the nearest one (ties either way).
    _, d, _ = _score(q.Islands(2), jnp.asarray(x, jnp.float32))
    tenths = np.asarray(d) * 10
    assert np.allclose(tenths, np.round(tenths), atol=1e-4)
    assert np.all(np.abs(np.asarray(d) - x) <= 0.05 + 1e-6)


def _radii(up_to: float) -> list[float]:
    radii, k = [0.0], 0
    while radii[-1] <= up_to:
        radii += [radii[-1] + 2 * k**3 + 1, radii[-1] + 2 * (2 * k**3 + 1)]
        k += 1
    return radii


@given(st.lists(st.floats(-800.0, 800.0, width=32), min_size=2, max_size=2))
def test_the_self_similar_function_freezes_the_norm_on_its_plateaus(genes):
    x = np.asarray(genes, np.float32)[None, :]
    _, d, _ = _score(q.SelfSimilar(2), jnp.asarray(x))
    norm = float(np.linalg.norm(x.astype(np.float64)))
    radii = _radii(norm)
    i = max(j for j, r in enumerate(radii) if r <= norm)  # the shell holding the norm
    # An odd radius starts a plateau up to the next even one; between an even radius and the
    # next odd one the descriptor is the norm itself.
    expected = radii[i] if i % 2 == 1 else norm
    assert float(d[0, 0]) == pytest.approx(expected, rel=1e-5, abs=1e-4)


def test_the_self_similar_radii():
    r = q.SelfSimilar.plateau_start
    assert [float(r(jnp.float32(n))) for n in (0.5, 1.5, 2.0, 2.5, 6.0, 8.0, 9.0)] == [
        1.0, 1.0, 1.0, 5.0, 5.0, 5.0, 25.0,
    ]  # fmt: skip


@given(st.floats(0.0, float(np.float32(40 * math.pi) - 1e-5), width=32))
def test_the_spiral_s_arc_length_and_its_inverse(angle):
    spiral = q.ArchimedeanSpiral("arc_length", "euclidean")
    a, t = 0.01, float(angle)
    length = a / 2 * (t * math.sqrt(1 + t * t) + math.asinh(t))
    assert float(spiral.arc_length(jnp.float32(t))) == pytest.approx(length, rel=1e-5, abs=1e-6)
    # The bisection finds the angle of a length to its precision (and float32 rounding).
    back = float(spiral.angle_at(jnp.float32(length)))
    assert abs(back - t) <= 4e-5 * max(1.0, t / 20)
    _, d, _ = _score(spiral, jnp.asarray([[length]], jnp.float32))
    expected = [a * back * math.cos(back), a * back * math.sin(back)]
    np.testing.assert_allclose(d[0], expected, atol=2e-5)  # float32 cos of up to 126 rad
    # With the arc length as gene and descriptor, the descriptor is the gene.
    g = jnp.asarray([[length]], jnp.float32)
    geodesic = _score(q.ArchimedeanSpiral("arc_length", "geodesic"), g)[1]
    assert float(geodesic[0, 0]) == float(g[0, 0])


def test_the_qd_suite_starts_where_qdax_starts():
    spiral = q.ArchimedeanSpiral()
    start = spiral.init_genotypes(3, key=jr.key(0))
    assert start.shape == (3, 1) and float(start[0, 0]) == pytest.approx(22 * math.pi)  # 11 turns
    length = q.ArchimedeanSpiral("arc_length").init_genotypes(1, key=jr.key(0))
    assert float(length[0, 0]) == pytest.approx(float(spiral.arc_length(start[0, 0])))
    deceptive = q.DeceptiveEvolvability()
    saddle = np.asarray(deceptive.init_genotypes(2, key=jr.key(0)))
    assert saddle.shape == (2, 2) and np.all(saddle[0] == saddle[1])
    # The lowest point of the segment between the two means.
    t = np.linspace(0, 1, 1000)[:, None]
    points = (1 - t) * np.array([50.0, 125.0]) + t * np.array([150.0, 125.0])
    d = np.asarray(deceptive.density(jnp.asarray(points, jnp.float32)))
    assert saddle[0] == pytest.approx(points[np.argmin(d)], abs=1e-4)
    assert np.all(q.SelfSimilar(3).init_genotypes(2, key=jr.key(0)) == 0)


@given(st.lists(st.floats(-50.0, 250.0, width=32), min_size=2, max_size=2))
def test_deceptive_evolvability_against_numpy(genes):
    x = np.asarray(genes, np.float64)

    def density(mu, var):
        return np.exp(-0.5 * np.sum((x - mu) ** 2) / var) / (2 * np.pi * var)

    expected = density(np.array([50.0, 125.0]), 70.0) + 20 * density(np.array([150.0, 125.0]), 1e3)
    _, d, _ = _score(q.DeceptiveEvolvability(), jnp.asarray(x[None, :], jnp.float32))
    assert float(d[0, 0]) == pytest.approx(expected, rel=1e-4, abs=1e-9)


def test_bounds_hold_what_the_functions_return():
    key = jr.key(3)
    for name, task in TASKS.items():
        if name in ("rastrigin", "sphere", "arm", "noisy_arm"):
            continue
        lo, hi = task.descriptor_bounds
        genotypes = task.init_genotypes(64, key=key)
        if name.startswith("spiral"):  # the whole spiral, not only its start
            top = task.max_angle if task.genes == "angle" else float(
                task.arc_length(jnp.float32(task.max_angle))
            )  # fmt: skip
            genotypes = jnp.linspace(0.0, top, 64)[:, None]
        _, d, _ = _score(task, genotypes)
        assert np.all(np.asarray(d) >= lo - 1e-5) and np.all(np.asarray(d) <= hi + 1e-5), name


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="ArchimedeanSpiral.genes"):
        q.ArchimedeanSpiral("radius")
    with pytest.raises(ValueError, match="ArchimedeanSpiral.descriptor"):
        q.ArchimedeanSpiral("angle", "polar")
    with pytest.raises(ValueError, match="mu_1 must be a point of the plane"):
        q.DeceptiveEvolvability(mu_1=jnp.zeros(3))
    with pytest.raises(ValueError, match="genotypes"):
        q.Square(3)(jnp.zeros((4, 2)), key=jr.key(0))
