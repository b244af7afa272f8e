import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, strategies as st

import eqx_qd as q
from eqx_qd._selectors import filled_counts, uniform_filled


BATCH, DIM = 16, 5


def _parents(seed):
    k1, k2 = jr.split(jr.key(seed))
    return jr.uniform(k1, (BATCH, DIM)), jr.uniform(k2, (BATCH, DIM))


OPERATORS = {
    "isoline": lambda x1, x2, k: q.IsoLineVariation(
        iso_sigma=0.05, line_sigma=0.5, min_genotype=0.0, max_genotype=1.0
    )(x1, x2, key=k),
    "sbx": lambda x1, x2, k: q.SBXCrossover(
        eta_c=5.0, crossover_rate=0.7, min_genotype=0.0, max_genotype=1.0
    )(x1, x2, key=k),
    "polynomial": lambda x1, x2, k: q.PolynomialMutation(
        eta_m=5.0, mutation_rate=0.5, min_genotype=0.0, max_genotype=1.0
    )(x1, key=k),
    "gaussian": lambda x1, x2, k: q.GaussianMutation(sigma=0.3, min_genotype=0.0, max_genotype=1.0)(
        x1, key=k
    ),
    "uniform": lambda x1, x2, k: q.UniformMutation(
        max_uniform=0.3, mutation_rate=0.5, min_genotype=0.0, max_genotype=1.0
    )(x1, key=k),
}
JITTED = {name: eqx.filter_jit(fn) for name, fn in OPERATORS.items()}


@pytest.mark.parametrize("name", sorted(OPERATORS))
@given(seed=st.integers(0, 2**31 - 1))
def test_operators_keep_shape_and_bounds(name, seed):
    x1, x2 = _parents(seed)
    out = JITTED[name](x1, x2, jr.key(seed + 1))
    assert out.shape == (BATCH, DIM) and out.dtype == jnp.float32
    assert bool(jnp.all((out >= 0.0) & (out <= 1.0)))
    assert not bool(jnp.all(out == x1))  # it does vary


def test_isoline_without_noise_lies_on_the_line(getkey):
    x1, x2 = _parents(3)
    out = q.IsoLineVariation(iso_sigma=0.0, line_sigma=1.0)(x1, x2, key=getkey())
    t = (out - x1) / (x2 - x1)
    np.testing.assert_allclose(t, jnp.broadcast_to(t[:, :1], t.shape), rtol=1e-3, atol=1e-3)


def test_the_line_coefficient_has_the_line_sigma_as_its_spread():
    # (Mutation testing: dividing by line_sigma instead of multiplying passed with sigma 1.)
    x1 = jnp.zeros((4096, 1))
    x2 = jnp.ones((4096, 1))
    out = q.IsoLineVariation(iso_sigma=0.0, line_sigma=0.5)(x1, x2, key=jr.key(0))
    assert 0.47 < float(jnp.std(out)) < 0.53  # out = line * (x2 - x1), line ~ N(0, 0.5)


def test_one_sided_bounds_clip_one_side_only():
    # (Mutation testing: bounds were only ever given in pairs.)
    x = jnp.zeros((BATCH, DIM))
    up = q.GaussianMutation(sigma=1.0, max_genotype=0.1)(x, key=jr.key(0))
    assert float(jnp.max(up)) == np.float32(0.1) and float(jnp.min(up)) < -1.0
    down = q.GaussianMutation(sigma=1.0, min_genotype=-0.1)(x, key=jr.key(0))
    assert float(jnp.min(down)) == np.float32(-0.1) and float(jnp.max(down)) > 1.0


def test_operators_on_pytrees(getkey):
    tree = {"a": jnp.zeros((BATCH, 2)), "b": (jnp.ones((BATCH, 3, 2)), "static-leaf")}
    out = q.GaussianMutation(0.1)(tree, key=getkey())
    assert out["b"][1] == "static-leaf" and out["b"][0].shape == (BATCH, 3, 2)
    out = q.IsoLineVariation(0.01, 0.1)(tree, tree, key=getkey())
    assert jax_tree_shapes(out) == jax_tree_shapes(tree)


def jax_tree_shapes(tree):
    return [x.shape for x in (tree["a"], tree["b"][0])]


def test_zero_rates_are_identity(getkey):
    x1, x2 = _parents(5)
    np.testing.assert_array_equal(q.PolynomialMutation(5.0, 0.0, 0.0, 1.0)(x1, key=getkey()), x1)
    np.testing.assert_array_equal(q.SBXCrossover(5.0, 0.0)(x1, x2, key=getkey()), x1)


def test_sbx_children_spread_around_parents(getkey):
    x1 = jnp.zeros((4000, 1))
    x2 = jnp.ones((4000, 1))
    near = q.SBXCrossover(eta_c=50.0, side_rate=0.0)(x1, x2, key=getkey())
    far = q.SBXCrossover(eta_c=1.0, side_rate=0.0)(x1, x2, key=getkey())
    # A large distribution index keeps children closer to the first parent.
    assert float(jnp.mean(jnp.abs(near))) < float(jnp.mean(jnp.abs(far)))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: q.IsoLineVariation(-0.1, 0.1), "iso_sigma"),
        (lambda: q.SBXCrossover(1.0, 1.5), "crossover_rate"),
        (lambda: q.PolynomialMutation(1.0, 0.5, 1.0, 0.0), "max_genotype"),
        (lambda: q.GaussianMutation(0.1, mutation_rate=-1.0), "mutation_rate"),
        (lambda: q.UniformMutation(-0.1), "UniformMutation.max_uniform"),
        (lambda: q.UniformMutation(0.1, mutation_rate=1.5), "UniformMutation.mutation_rate"),
        (lambda: q.UniformMutation(0.1, min_genotype=1.0, max_genotype=0.0), "max_genotype"),
    ],
)
def test_operator_config_is_validated(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_operator_hyperparameters_are_arrays_and_do_not_retrace(getkey):
    x1, x2 = _parents(1)

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def vary(op, k):
        return op(x1, x2, key=k)

    vary(q.IsoLineVariation(0.01, 0.1), getkey())
    vary(q.IsoLineVariation(0.02, 0.3), getkey())  # new values, same program


# Affine equivariance: moving the parents and the bounds by x -> s * x + t (and scaling the
# noise levels by s) moves the children the same way, with the same key. Operators that used
# their bounds wrongly (a hard-coded [0, 1], a range taken as the upper bound) break it; tests
# with bounds [0, 1] alone cannot see that.
SCALE, SHIFT = np.float32(3.5), np.float32(-2.0)
AFFINE = {
    "isoline": lambda x1, x2, lo, hi, s, k: q.IsoLineVariation(
        iso_sigma=0.05 * s, line_sigma=0.5, min_genotype=lo, max_genotype=hi
    )(x1, x2, key=k),
    "sbx": lambda x1, x2, lo, hi, s, k: q.SBXCrossover(
        eta_c=5.0, crossover_rate=0.7, min_genotype=lo, max_genotype=hi
    )(x1, x2, key=k),
    "polynomial": lambda x1, x2, lo, hi, s, k: q.PolynomialMutation(
        eta_m=5.0, mutation_rate=0.5, min_genotype=lo, max_genotype=hi
    )(x1, key=k),
    "gaussian": lambda x1, x2, lo, hi, s, k: q.GaussianMutation(
        sigma=0.3 * s, min_genotype=lo, max_genotype=hi
    )(x1, key=k),
    "uniform": lambda x1, x2, lo, hi, s, k: q.UniformMutation(
        max_uniform=0.3 * s, mutation_rate=0.5, min_genotype=lo, max_genotype=hi
    )(x1, key=k),
}


@pytest.mark.parametrize("name", sorted(AFFINE))
@given(seed=st.integers(0, 2**31 - 1))
def test_operators_are_affine_equivariant(name, seed):
    x1, x2 = _parents(seed)
    key = jr.key(seed + 1)
    op = AFFINE[name]
    unit = op(x1, x2, 0.0, 1.0, np.float32(1.0), key)
    moved = op(SCALE * x1 + SHIFT, SCALE * x2 + SHIFT, SHIFT, SCALE + SHIFT, SCALE, key)
    np.testing.assert_allclose(moved, SCALE * unit + SHIFT, rtol=1e-4, atol=2e-4)
    assert bool(jnp.all((moved >= SHIFT) & (moved <= SCALE + SHIFT)))


# ------------------------------------------------------- the operators' distributions, by hand
# Each draw maps one uniform number through a monotone formula, so the children's empirical CDF
# must match the CDF computed here from the papers' formulas (200,000 draws: sampling noise in
# the CDF is about 0.002).
N_DRAWS = 200_000


def _max_cdf_gap(samples, cdf, grid):
    samples = np.sort(np.asarray(samples, np.float64).ravel())
    empirical = np.searchsorted(samples, grid, side="right") / samples.size
    return float(np.max(np.abs(empirical - cdf(grid))))


def test_sbx_spread_factor_follows_deb_s_distribution():
    # Parents 0 and 1, no bounds: the child is (1 - beta) / 2, with P(beta <= b) = b^(eta+1) / 2
    # for b <= 1 and 1 - 1 / (2 b^(eta+1)) above.
    eta = 2.0
    child = q.SBXCrossover(eta_c=eta, side_rate=0.0)(
        jnp.zeros((N_DRAWS, 1)), jnp.ones((N_DRAWS, 1)), key=jr.key(0)
    )
    beta = 1.0 - 2.0 * np.asarray(child, np.float64)

    def cdf(b):
        return np.where(b <= 1.0, b ** (eta + 1) / 2, 1.0 - 1.0 / (2 * b ** (eta + 1)))

    assert _max_cdf_gap(beta, cdf, np.linspace(0.05, 3.0, 60)) < 0.01


def test_sbx_takes_either_child_as_the_original_does():
    """The original PGA-ME code returns SBX's first or second child at random for each crossed
    gene (`side_rate=0.5`): half the children on the second parent's side of the midpoint.
    The second child is the first child of the parents swapped, drawn from the same numbers."""
    x1, x2 = jnp.zeros((N_DRAWS, 1)), jnp.ones((N_DRAWS, 1))
    original = np.asarray(q.SBXCrossover(eta_c=2.0)(x1, x2, key=jr.key(3)))
    assert abs(np.mean(original > 0.5) - 0.5) < 0.02
    first = np.asarray(q.SBXCrossover(eta_c=2.0, side_rate=0.0)(x1, x2, key=jr.key(3)))
    assert np.all(first <= 0.5)  # beta >= 0: always on x1's side
    a, b = jr.normal(jr.key(4), (2, 64, 5))
    np.testing.assert_array_equal(
        q.SBXCrossover(eta_c=5.0, side_rate=1.0)(a, b, key=jr.key(5)),
        q.SBXCrossover(eta_c=5.0, side_rate=0.0)(b, a, key=jr.key(5)),
    )
    with pytest.raises(ValueError, match="side_rate"):
        q.SBXCrossover(2.0, side_rate=1.5)


@pytest.mark.parametrize("x, eta", [(0.3, 3.0), (0.8, 10.0), (0.95, 3.0)])
def test_polynomial_mutation_follows_deb_s_distribution(x, eta):
    # Bounds [0, 1], gene x: dq = child - x. From the two branches of the formula (r < 1/2
    # below x, r >= 1/2 above), P(dq <= q) = r(q):
    #   q <= 0: ((1 + q)^(e+1) - (1 - d1)^(e+1)) / (2 (1 - (1 - d1)^(e+1)))
    #   q >= 0: (2 - A - (1 - q)^(e+1)) / (2 (1 - A)),  A = (1 - d2)^(e+1)
    # with d1 = x and d2 = 1 - x (distances to the bounds) and e = eta.
    e1, d1, d2 = eta + 1.0, x, 1.0 - x
    a_below, a_above = (1 - d1) ** e1, (1 - d2) ** e1
    mutation = q.PolynomialMutation(
        eta_m=eta, mutation_rate=1.0, min_genotype=0.0, max_genotype=1.0
    )
    child = mutation(jnp.full((N_DRAWS, 1), x), key=jr.key(1))
    dq = np.asarray(child, np.float64) - x

    def cdf(v):
        below = ((1 + v) ** e1 - a_below) / (2 * (1 - a_below))
        above = (2 - a_above - (1 - v) ** e1) / (2 * (1 - a_above))
        return np.where(v <= 0, below, above)

    grid = np.linspace(-d1 + 1e-3, d2 - 1e-3, 80)
    assert _max_cdf_gap(dq, cdf, grid) < 0.01
    with pytest.raises(ValueError, match="PolynomialMutation.max_genotype is required"):
        q.PolynomialMutation(eta_m=eta, mutation_rate=1.0, min_genotype=0.0, max_genotype=None)


def test_uniform_mutation_draws_uniformly_at_its_rate():
    # The repository's uniform mutation: x + U(-max_uniform, max_uniform) on a fraction
    # ``mutation_rate`` of the genes, the others copied.
    x = jnp.full((N_DRAWS, 1), 2.0)
    out = np.asarray(q.UniformMutation(0.4, mutation_rate=0.25)(x, key=jr.key(0)))[:, 0]
    moved = out[out != 2.0]
    assert abs(moved.size / N_DRAWS - 0.25) < 0.005
    grid = np.linspace(1.6, 2.4, 81)
    assert _max_cdf_gap(moved, lambda g: np.clip((g - 1.6) / 0.8, 0.0, 1.0), grid) < 0.01
    assert moved.min() >= 1.6 and moved.max() <= 2.4


@given(
    size=st.sampled_from([1, 5, 127, 128, 129, 1000]),
    share=st.sampled_from([0.0, 0.01, 0.5, 1.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_uniform_draws_are_the_filled_cells_packed_positions(size, share, seed):
    """The d-th filled cell found by a search in the running counts is the one a packed list
    of the filled cells (`nonzero`) holds at d: the same draws as before the search, on any
    size around the counts' blocks of 128, empty and full included."""
    key = jr.key(seed)
    fitnesses = jnp.where(jr.uniform(jr.fold_in(key, 1), (size,)) < share, 1.0, -jnp.inf)
    cells, num_filled = _UNIFORM(fitnesses, key)
    filled = np.isfinite(np.asarray(fitnesses))
    np.testing.assert_array_equal(filled_counts(jnp.asarray(filled)), np.cumsum(filled))
    assert int(num_filled) == filled.sum()
    draws = np.asarray(jr.randint(key, (37,), 0, max(int(filled.sum()), 1)))
    packed = np.flatnonzero(filled)
    want = packed[draws] if filled.any() else np.zeros(37, np.int32)
    np.testing.assert_array_equal(cells, want)


_UNIFORM = eqx.filter_jit(lambda f, k: uniform_filled(f, 37, key=k))
