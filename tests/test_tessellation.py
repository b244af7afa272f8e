import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q


@pytest.fixture(scope="module")
def small_cvt():
    return q.cvt_centroids(64, 2, 0.0, 1.0, num_samples=4000, num_iters=20, key=jr.key(0))


def test_cvt_is_deterministic_and_in_bounds(small_cvt):
    again = q.cvt_centroids(64, 2, 0.0, 1.0, num_samples=4000, num_iters=20, key=jr.key(0))
    np.testing.assert_array_equal(small_cvt, again)
    assert small_cvt.shape == (64, 2)
    assert bool(jnp.all((small_cvt >= 0) & (small_cvt <= 1)))
    assert len(np.unique(np.asarray(small_cvt), axis=0)) == 64


def test_cvt_beats_random_centroids(small_cvt):
    points = jr.uniform(jr.key(9), (20000, 2))

    def distortion(c):
        i = q.nearest_centroid(points, c)
        return float(jnp.mean(jnp.sum((points - c[i]) ** 2, -1)))

    random_c = jr.uniform(jr.key(3), (64, 2))
    assert distortion(small_cvt) < 0.75 * distortion(random_c)
    # Near the hexagonal optimum: 2 * G * area per cell, G = 0.0802 (plus border effects). The
    # 20 Lloyd steps give 1.12x it; the k-means++ seeds alone 1.50x, 5 steps 1.16x.
    assert distortion(small_cvt) < 1.14 * 2 * 0.0802 / 64


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
    from eqx_qd._tessellation import _cluster_means

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
