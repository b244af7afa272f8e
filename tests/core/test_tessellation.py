import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import eqx_qd as q
from eqx_qd._kmeans import _weighted_draw


@pytest.fixture(scope="module")
def small_cvt():
    return q.cvt_centroids(64, 2, 0.0, 1.0, num_samples=4000, num_iterations=20, key=jr.key(0))


def test_cvt_is_deterministic_and_in_bounds(small_cvt):
    again = q.cvt_centroids(64, 2, 0.0, 1.0, num_samples=4000, num_iterations=20, key=jr.key(0))
    np.testing.assert_array_equal(small_cvt, again)
    assert small_cvt.shape == (64, 2)
    assert bool(jnp.all((small_cvt >= 0) & (small_cvt <= 1)))
    assert len(np.unique(np.asarray(small_cvt), axis=0)) == 64


def _distortion(c):
    """Mean squared distance of 20,000 fixed uniform points of the unit square to ``c``."""
    points = jr.uniform(jr.key(9), (20000, 2))
    return float(jnp.mean(jnp.sum((points - c[q.nearest_centroid(points, c)]) ** 2, -1)))


def test_cvt_beats_random_centroids(small_cvt):
    random_c = jr.uniform(jr.key(3), (64, 2))
    assert _distortion(small_cvt) < 0.75 * _distortion(random_c)
    # Near the hexagonal optimum: 2 * G * area per cell, G = 0.0802 (plus border effects). The
    # 20 Lloyd steps give 1.12x it; the k-means++ seeds alone 1.50x, 5 steps 1.16x.
    assert _distortion(small_cvt) < 1.14 * 2 * 0.0802 / 64


def test_cvt_respects_per_dimension_bounds():
    c = q.cvt_centroids(16, 2, [0.0, -5.0], [1.0, 5.0], num_samples=2000, key=jr.key(1))
    assert float(c[:, 0].max()) <= 1.0 and float(c[:, 1].min()) >= -5.0
    assert float(c[:, 1].max() - c[:, 1].min()) > 5.0


def test_nearest_centroid_matches_brute_force():
    pts = jr.uniform(jr.key(2), (500, 3))
    cents = jr.uniform(jr.key(4), (50, 3))
    brute = lambda p: np.argmin(
        ((np.asarray(p)[:, None] - np.asarray(cents)[None]) ** 2).sum(-1), -1
    )
    np.testing.assert_array_equal(q.nearest_centroid(pts, cents), brute(pts))
    few = pts[:3]  # fewer points than cells: the answer is not bounded by the batch size
    assert brute(few).max() > 3
    np.testing.assert_array_equal(q.nearest_centroid(few, cents), brute(few))


def _dot_precisions(fn, *args) -> list[str]:
    text = jax.jit(fn).lower(*args).as_text()
    return [line.split("precision = ")[-1] for line in text.splitlines() if "dot_general" in line]


def test_distances_are_exact_float32_on_every_platform():
    # CPU computes float32 matmuls exactly whatever the precision says; a GPU's default is TF32,
    # which put descriptors in the wrong cell. The lowered program must ask for full precision.
    pts, cents = jnp.zeros((8, 2)), jnp.zeros((64, 2))
    found = _dot_precisions(q.nearest_centroid, pts, cents)
    found += _dot_precisions(lambda k: q.cvt_centroids(32, 2, num_samples=64, key=k), jr.key(0))
    assert len(found) >= 2
    assert all(p.startswith("[HIGHEST, HIGHEST]") for p in found), found


def test_cluster_means_do_not_depend_on_the_order_of_the_samples():
    # A GPU adds floats in scatter-add in no fixed order; the k-means sums are integer sums, so
    # any order gives the same bits (float sums of these samples differ with the order on CPU).
    from eqx_qd._kmeans import _cluster_means

    codes = jr.randint(jr.key(0), (50_000, 2), 0, 2**23)
    cells = jr.randint(jr.key(1), (50_000,), 0, 64)
    perm = jr.permutation(jr.key(2), 50_000)
    means, counts = _cluster_means(codes, cells, 64)
    again, counts_again = _cluster_means(codes[perm], cells[perm], 64)
    np.testing.assert_array_equal(means, again)
    np.testing.assert_array_equal(counts, counts_again)
    ref = np.zeros((64, 2))
    np.add.at(ref, np.asarray(cells), np.asarray(codes, np.float64) * 2.0**-23)
    np.testing.assert_array_equal(counts, np.bincount(np.asarray(cells), minlength=64))
    np.testing.assert_allclose(means, ref / np.asarray(counts)[:, None], rtol=0, atol=2e-7)


def test_centroids_load_and_refuse_bad_ones(tmp_path, small_cvt):
    np.save(tmp_path / "c.npy", np.asarray(small_cvt))
    back = q.CVTTessellation.load(tmp_path / "c.npy")
    np.testing.assert_array_equal(back.centroids, small_cvt)
    (tmp_path / "bad.npy").write_text("not an array")
    with pytest.raises(ValueError, match="bad.npy"):
        q.CVTTessellation.load(tmp_path / "bad.npy")
    # A NaN centroid would send every descriptor to one cell: refused, by name.
    with pytest.raises(ValueError, match="CVTTessellation.centroids must be finite"):
        q.CVTTessellation(small_cvt.at[3, 1].set(jnp.nan))


def test_bad_tessellations_raise():
    with pytest.raises(ValueError, match="bins"):
        q.GridTessellation((4, 0))
    with pytest.raises(ValueError, match="maxval"):
        q.GridTessellation((4,), 1.0, 0.0)
    with pytest.raises(ValueError, match="minval must be finite"):
        q.GridTessellation((4,), jnp.nan, 1.0)
    with pytest.raises(ValueError, match="maxval must be finite"):
        q.GridTessellation((4,), 0.0, jnp.inf)
    for bad in (np.zeros(3), np.zeros((0, 2)), np.zeros((3, 0))):  # a vector, no cells, no axes
        with pytest.raises(ValueError, match=r"centroids must have shape \(num_cells"):
            q.CVTTessellation(bad)
    # One bin on an axis is allowed: that axis does not split the cells.
    flat = q.GridTessellation((1, 3))
    assert flat.num_cells == 3
    line = q.CVTTessellation(jnp.array([[0.2], [0.7]], jnp.float32))  # one descriptor is allowed
    np.testing.assert_array_equal(np.asarray(line.index(jnp.array([[0.1], [0.9]]))), [0, 1])
    cells = flat.index(jnp.array([[0.1, 0.1], [0.9, 0.5], [0.5, 0.9]], jnp.float32))
    np.testing.assert_array_equal(np.asarray(cells), [0, 1, 2])
    with pytest.raises(ValueError, match="num_samples"):
        q.cvt_centroids(100, 2, num_samples=10, key=jr.key(0))
    with pytest.raises(ValueError, match=r"num_samples must be at most 8388608, got 8388609"):
        q.cvt_centroids(100, 2, num_samples=2**23 + 1, key=jr.key(0))


# ----------------------------------------------------------------------------- the bucket index
def _nearest64(points, centroids):
    p, c = np.asarray(points, np.float64), np.asarray(centroids, np.float32).astype(np.float64)
    dist = ((p[:, None] - c[None]) ** 2).sum(-1)
    return dist, dist.argmin(axis=1)


@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**31 - 1),
    num_cells=st.integers(2, 120),
    dim=st.integers(1, 3),
    spread=st.sampled_from([1.0, 1e-3, 100.0]),
)
# The full search once sent 12 of these points to the last centroid: inside the lookup's
# ``cond``, XLA computed the one-descriptor scores twice with different roundings, so no
# score equalled the row's minimum.
@pytest.mark.slow  # (the fast tier's budget: issue 68)
@example(seed=0, num_cells=31, dim=1, spread=1.0)
def test_the_bucket_index_finds_the_nearest_centroid(seed, num_cells, dim, spread):
    # Forced on small tessellations; points inside the centroids' box, at its border, on
    # centroids, and far outside (the full search), in one batch and apart.
    rng = np.random.default_rng(seed)
    centroids = (rng.uniform(size=(num_cells, dim)) * spread).astype(np.float32)
    tess = q.CVTTessellation(centroids, index_min_cells=1)
    index = tess.bucket_index
    assert index is not None
    # The index's own box: its border boxes, centroids, and the edges themselves.
    top = index.lo + index.width * index.boxes
    inside = rng.uniform(index.lo, top, size=(64, dim))
    edges = np.stack([index.lo, top])[rng.integers(0, 2, size=(8, dim)), np.arange(dim)]
    points = np.concatenate([inside, centroids[:5], edges]).astype(np.float32)
    assert bool(index.inside(jnp.asarray(points)))
    # Around the centroids' bounds (partly outside the index's box), and far along each axis
    # from the middle: the nearest centroid is the outermost one that way, which need not be
    # a candidate of the border box the point would be clipped into.
    wide = rng.uniform(-0.05, 1.05, size=(64, dim)) * spread
    away = 0.5 * spread + 1e3 * spread * np.concatenate([np.eye(dim), -np.eye(dim)])
    outside = np.concatenate([points[:8], wide, away]).astype(np.float32)
    pad = lambda b: np.concatenate([b, np.repeat(b[:1], 80 - len(b), 0)])  # one compile
    for batch, by_index in ((pad(points), True), (pad(outside), False)):
        got = np.asarray(tess.index(jnp.asarray(batch)))
        dist, truth = _nearest64(batch, centroids)
        rows = np.arange(len(batch))
        excess = dist[rows, got] - dist[rows, truth]
        if by_index:  # distances by differences: exact but for float32 rounding of each
            slack = 1e-6 * np.maximum(dist[rows, truth], spread**2 * 1e-6)
        else:  # |c|^2 - 2 p.c: rounding relative to the squared norms, not the distance
            norms = (batch.astype(np.float64) ** 2).sum(-1) + (centroids**2).sum(-1).max()
            slack = 1e-6 * (dist[rows, truth] + norms)
        assert np.all(excess <= slack), excess


def test_the_bucket_index_breaks_ties_towards_the_lowest_index_and_matches_the_full_search():
    rng = np.random.default_rng(0)
    centroids = rng.uniform(size=(600, 2)).astype(np.float32)
    centroids[400] = centroids[37]  # a duplicate: every point nearest to it must get 37
    indexed, full = (
        q.CVTTessellation(centroids),
        q.CVTTessellation(centroids, index_min_cells=10**6),
    )
    assert indexed.bucket_index is not None and full.bucket_index is None
    points = jnp.asarray(np.concatenate([rng.uniform(size=(2000, 2)), centroids[[37, 400]]]))
    got = np.asarray(jax.jit(lambda t, p: t.index(p))(indexed, points))
    np.testing.assert_array_equal(got, np.asarray(full.index(points)))
    assert 400 not in got and np.sum(got == 37) >= 2
    # Built by content: an equal tessellation is equal, and the index is array leaves (a
    # tessellation of other centroids of the same shapes reuses the compiled program).
    again = q.CVTTessellation(centroids.copy())
    assert bool(eqx.tree_equal(again, indexed))
    assert indexed.bucket_index.boxes == 28 and indexed.bucket_index.table.ndim == 2
    assert all(eqx.is_array(x) for x in jax.tree.leaves(indexed.bucket_index))


def test_tree_at_cannot_desynchronise_the_index():
    """The index is used only for the centroids it was built from: centroids replaced by
    ``eqx.tree_at`` (or an index from other centroids put in) take the exact full search."""
    rng = np.random.default_rng(1)
    centroids = rng.uniform(size=(600, 2)).astype(np.float32)
    tess = q.CVTTessellation(centroids)
    points = jnp.asarray(rng.uniform(size=(300, 2)), jnp.float32)
    index = eqx.filter_jit(lambda t, p: t.index(p))
    moved = jnp.asarray(np.roll(centroids, 1, axis=0))
    swapped = eqx.tree_at(lambda t: t.centroids, tess, moved)
    assert bool(swapped.bucket_index.matches(swapped.centroids)) is False
    np.testing.assert_array_equal(index(swapped, points), q.nearest_centroid(points, moved))
    other = q.CVTTessellation(moved).bucket_index  # a consistent pair again: the index is used
    relinked = eqx.tree_at(lambda t: t.bucket_index, swapped, other)
    assert bool(relinked.bucket_index.matches(relinked.centroids))
    np.testing.assert_array_equal(index(relinked, points), q.nearest_centroid(points, moved))


def test_no_bucket_index_inside_a_trace_for_clustered_centroids_or_many_descriptors():
    rng = np.random.default_rng(1)
    traced = jax.jit(lambda c: q.CVTTessellation(c).index(c[:4]))
    np.testing.assert_array_equal(traced(jnp.asarray(rng.uniform(size=(600, 2)))), np.arange(4))
    clustered = np.concatenate([rng.normal(size=(995, 2)) * 1e-3, rng.uniform(size=(5, 2))])
    assert q.CVTTessellation(clustered).bucket_index is None  # boxes would hold too many
    assert q.CVTTessellation(rng.uniform(size=(600, 4))).bucket_index is None
    assert q.CVTTessellation(rng.uniform(size=(200, 2))).bucket_index is None  # too few cells
    assert q.CVTTessellation(rng.uniform(size=(256, 2))).bucket_index is not None
    with pytest.raises(ValueError, match="index_min_cells must be a positive integer"):
        q.CVTTessellation(rng.uniform(size=(10, 2)), index_min_cells=0)


def test_kmeans_seeds_are_distinct_samples_and_singleton_clusters_sit_on_them():
    # As many samples as cells: k-means++ must pick every sample once (a picked sample has
    # weight 0), and each cluster then holds one sample, its centroid.
    seeds = q.cvt_centroids(40, 2, num_samples=40, num_iterations=0, key=jr.key(7))
    final = q.cvt_centroids(40, 2, num_samples=40, num_iterations=20, key=jr.key(7))
    as_set = lambda c: sorted(map(tuple, np.asarray(c).tolist()))
    assert len(set(as_set(seeds))) == 40
    assert as_set(seeds) == as_set(final)


def test_an_empty_cluster_keeps_its_centroid():
    # Samples A, A, B and 3 cells: the third seed repeats a sample, the tie goes to the lower
    # index, and the other copy's cluster is empty: it stays where it is (not at the box's corner).
    from eqx_qd._kmeans import _kmeans

    a, b = 2**21, 3 * 2**21  # codes: 0.25 and 0.75
    codes = jnp.asarray([[a, a], [a, a], [b, b]], jnp.int32)
    lo, hi = jnp.zeros(2), jnp.ones(2)
    for seed in range(4):
        c = np.asarray(_kmeans(codes, lo, hi, 3, 5, 3, jr.bits(jr.key(seed), (3,), jnp.uint32)))
        assert {tuple(row) for row in c.tolist()} <= {(0.25, 0.25), (0.75, 0.75)}, c


def test_the_largest_sample_count_is_accepted():
    shape = jax.eval_shape(lambda k: q.cvt_centroids(4, 1, num_samples=2**23, key=k), jr.key(0))
    assert shape.shape == (4, 1)


# One shape (700 weights, zeros after the drawn ones: 6 blocks of 128; 18 draws): one compile
# for all examples.
_draw = jax.jit(jax.vmap(_weighted_draw, in_axes=(None, 0)))


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(1, 700),
    zeros=st.integers(0, 10),  # tenths of the weights that are 0 (picked samples)
    seed=st.integers(0, 2**32 - 1),
)
@example(length=700, zeros=0, seed=0)
@example(length=700, zeros=9, seed=1)
@example(length=129, zeros=5, seed=2)
def test_the_blocked_draw_is_the_first_cumulative_weight_above_the_target(length, zeros, seed):
    # k-means++ draws by blocks (`_weighted_draw`): the same index as one cumulative sum in
    # float64, unless the target sits within rounding of a boundary; never a zero weight.
    # (Weights and draws from numpy: hypothesis' float strategies refuse to run once XLA has
    # set the CPU's flush-to-zero mode.)
    rng = np.random.default_rng(seed)
    w = np.zeros(700, np.float32)
    w[:length] = rng.uniform(0.0, 1.0, length) ** 2 * (rng.uniform(size=length) >= zeros / 10)
    u24 = np.concatenate([[0, 2**24 - 1], rng.integers(0, 2**24, 16)])
    u = u24 * 2.0**-24  # in [0, 1), as k-means++ makes them
    draws = np.asarray(_draw(jnp.asarray(w), jnp.asarray(u, jnp.float32)))
    cumulative = np.cumsum(w.astype(np.float64))
    if cumulative[-1] == 0:
        return  # nothing to draw (k-means++ always has a sample it has not picked)
    for j, target in zip(draws.tolist(), u * cumulative[-1]):
        expected = int(np.searchsorted(cumulative, target, side="right"))
        near = np.abs(cumulative - target).min() <= 1e-5 * cumulative[-1]
        assert j == expected or near, (j, expected)
        assert w[j] > 0 or near, j


def test_kmeans_plus_plus_seeds_spread_like_kmeans_plus_plus():
    # D^2 sampling: seeds 1.49-1.61x the hexagonal optimum on keys 0-2; 64 uniform random
    # points 2.1-2.4x. A seeding that ignores the D^2 weights lands near the latter.
    seeds = [
        q.cvt_centroids(64, 2, num_samples=4000, num_iterations=0, key=jr.key(s)) for s in range(3)
    ]
    assert np.mean([_distortion(c) for c in seeds]) < 1.85 * 2 * 0.0802 / 64


def test_the_bucket_index_grid_and_its_pruning_on_a_lattice():
    """On a 32 x 32 lattice (spacing h) the index lays 32 boxes per axis over the centroids
    (about one centroid a box) plus two on each side, and prunes: a box's candidates lie within
    its reach R <= sqrt(2) (w + h) / 2 of it (w the box width), at most ((w + 2R) / h + 1)^2
    lattice points. (Mutation testing: a wider box or reach stays exact but stops pruning.)"""
    h = 1 / 32
    axis = (np.arange(32) + 0.5) * h
    lattice = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    index = q.CVTTessellation(lattice).bucket_index
    w = (31 * h) / 32
    assert index.boxes == 36
    np.testing.assert_allclose(index.width, [w, w], rtol=1e-6)
    np.testing.assert_allclose(index.lo, [h / 2 - 2 * w] * 2, rtol=1e-6)
    reach = np.sqrt(2) * (w + h) / 2
    assert index.table.shape[0] == 36 * 36
    assert index.table.shape[1] <= ((w + 2 * reach) / h + 1) ** 2  # 23, of 1024 centroids


def test_the_bucket_index_on_centroids_sharing_a_coordinate():
    # Every centroid on the line y = 0.5: that axis has no extent (the index, if built, gives
    # it boxes of width 1), and lookups still match the full search.
    rng = np.random.default_rng(3)
    centroids = np.stack([rng.uniform(size=600), np.full(600, 0.5)], axis=1).astype(np.float32)
    indexed = q.CVTTessellation(centroids)
    # Boxes off the line reach across it: no index (given up at once; it once took a minute).
    assert indexed.bucket_index is None
    points = jnp.asarray(np.stack([rng.uniform(size=500), rng.uniform(0.0, 1.0, 500)], axis=1))
    full = q.CVTTessellation(centroids, index_min_cells=10**6)
    np.testing.assert_array_equal(indexed.index(points), full.index(points))


# --- Categorical descriptors ---------------------------------------------------------------------


CATEGORICAL = q.CategoricalTessellation([(0, 1, 2), (-1.0, 3.0)])


def test_each_combination_of_categories_is_a_cell_in_row_major_order():
    assert CATEGORICAL.num_cells == 6 and CATEGORICAL.num_descriptors == 2
    descriptors = jnp.asarray([[0, -1], [0, 3], [1, -1], [2, 3], [1, 3]], jnp.float32)
    np.testing.assert_array_equal(CATEGORICAL.index(descriptors), [0, 1, 2, 5, 3])
    # The centroids are the combinations themselves, in cell order.
    np.testing.assert_array_equal(CATEGORICAL.index(CATEGORICAL.centroids), np.arange(6))
    low, high = CATEGORICAL.extent
    np.testing.assert_array_equal(low, [0, -1]) and np.testing.assert_array_equal(high, [2, 3])


def test_a_categorical_repertoire_keeps_one_elite_per_combination():
    repertoire = q.MAPElitesRepertoire.empty(CATEGORICAL, jnp.zeros(3))
    descriptors = jnp.asarray([[1, 3], [1, 3], [2, -1], [jnp.nan, 3]], jnp.float32)
    fitnesses = jnp.asarray([1.0, 5.0, 2.0, 9.0])
    repertoire, _ = eqx.filter_jit(lambda r, g, d, f: r.add(g, d, f))(
        repertoire, jnp.arange(12.0).reshape(4, 3), descriptors, fitnesses
    )
    assert int(repertoire.num_filled) == 2  # the NaN descriptor is refused, not an error
    assert float(repertoire.fitnesses[3]) == 5.0 and float(repertoire.fitnesses[4]) == 2.0


def test_a_descriptor_outside_its_categories_is_named():
    with pytest.raises(Exception, match=r"a descriptor is not one of its dimension's categories"):
        index = eqx.filter_jit(lambda cells, d: cells.index(d))
        jax.block_until_ready(index(CATEGORICAL, jnp.asarray([[0.0, 3.0], [0.5, 3.0]])))
    with pytest.raises(ValueError, match=r"categories\[1\] repeats a value"):
        q.CategoricalTessellation([(0, 1), (2, 2)])
    with pytest.raises(ValueError, match=r"must be sequences of numbers"):
        q.CategoricalTessellation([("walk", "run")])
    with pytest.raises(ValueError, match=r"at least one dimension and one category"):
        q.CategoricalTessellation([(0, 1), ()])
    with pytest.raises(ValueError, match=r"categories\[0\] must be finite"):
        q.CategoricalTessellation([(0, float("inf"))])
