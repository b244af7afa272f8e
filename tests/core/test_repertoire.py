import itertools

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import numpy as np
import pytest
from hypothesis import given, strategies as st

import eqx_qd as q
from eqx_qd import jobs
from eqx_qd.testing import candidate_batches, CandidateBatch, repertoires


def _np(x):
    return np.asarray(x)


@given(rep=repertoires(), batch=candidate_batches())
def test_insertion_never_lowers_a_cell(jit_add, rep, batch):
    new, _ = jit_add(rep, batch.genotypes, batch.descriptors, batch.fitnesses)
    assert np.all(_np(new.fitnesses) >= _np(rep.fitnesses))
    old_qd = q.qd_metrics(rep, 200.0).qd_score
    assert float(q.qd_metrics(new, 200.0).qd_score) >= float(old_qd)


@given(rep=repertoires(), batch=candidate_batches())
def test_add_info_matches_the_change(jit_add, rep, batch):
    new, info = jit_add(rep, batch.genotypes, batch.descriptors, batch.fitnesses)
    status, cells = _np(info.status), _np(info.cell)
    fit, old_fit, new_fit = _np(batch.fitnesses), _np(rep.fitnesses), _np(new.fitnesses)
    inserted = status != q.AddStatus.NOT_ADDED
    # At most one winner per cell, and the winner's row is what the cell now holds.
    assert len(set(cells[inserted])) == inserted.sum()
    for i in np.flatnonzero(inserted):
        c = cells[i]
        assert new_fit[c] == fit[i] and fit[i] > old_fit[c]
        np.testing.assert_array_equal(_np(new.genotypes)[c], _np(batch.genotypes)[i])
        np.testing.assert_array_equal(_np(new.descriptors)[c], _np(batch.descriptors)[i])
        expected = q.AddStatus.NEW if np.isinf(old_fit[c]) else q.AddStatus.IMPROVED
        assert status[i] == expected
    # Cells nobody won are untouched.
    untouched = np.setdiff1d(np.arange(rep.num_cells), cells[inserted])
    np.testing.assert_array_equal(new_fit[untouched], old_fit[untouched])
    np.testing.assert_array_equal(_np(new.genotypes)[untouched], _np(rep.genotypes)[untouched])
    # Non-finite candidates are never inserted, and their AddInfo says so exactly: no cell, no
    # delta. Every valid candidate reports its own cell and its delta against the old elite.
    bad = ~np.isfinite(fit) | ~np.all(np.isfinite(_np(batch.descriptors)), axis=-1)
    assert not np.any(inserted & bad)
    assert np.all(cells[bad] == -1) and np.all(np.isnan(_np(info.delta)[bad]))
    ok = ~bad
    expected_cells = _np(rep.cell_of(jnp.nan_to_num(batch.descriptors)))
    np.testing.assert_array_equal(cells[ok], expected_cells[ok])
    np.testing.assert_array_equal(_np(info.delta)[ok], fit[ok] - old_fit[expected_cells[ok]])


@given(batches=st.lists(candidate_batches(), min_size=1, max_size=4))
def test_each_cell_holds_the_best_ever_offered(jit_add, batches):
    tess = q.GridTessellation((4, 4))
    rep = q.MAPElitesRepertoire.empty(tess, jnp.zeros(3))
    best = np.full(16, -np.inf, np.float32)
    for b in batches:
        rep, _ = jit_add(rep, b.genotypes, b.descriptors, b.fitnesses)
        fit, desc = _np(b.fitnesses), _np(b.descriptors)
        ok = np.isfinite(fit) & np.all(np.isfinite(desc), axis=-1)
        cells = _np(tess.index(jnp.asarray(np.where(ok[:, None], desc, 0.0))))
        for c, f in zip(cells[ok], fit[ok]):
            best[c] = max(best[c], f)
    np.testing.assert_array_equal(_np(rep.fitnesses), best)
    assert int(rep.num_filled) == int(np.isfinite(best).sum())


@given(rep=repertoires(), batch=candidate_batches(), seed=st.integers(0, 2**31 - 1))
def test_batch_order_does_not_matter(jit_add, rep, batch, seed):
    perm = np.random.default_rng(seed).permutation(8)
    shuffled = CandidateBatch(batch.genotypes[perm], batch.descriptors[perm], batch.fitnesses[perm])
    a, _ = jit_add(rep, batch.genotypes, batch.descriptors, batch.fitnesses)
    b, _ = jit_add(rep, shuffled.genotypes, shuffled.descriptors, shuffled.fitnesses)
    np.testing.assert_array_equal(_np(a.fitnesses), _np(b.fitnesses))
    # Genotypes agree wherever the winning fitness was unique within its cell.
    fit = _np(batch.fitnesses)
    cells = _np(rep.tessellation.index(jnp.nan_to_num(batch.descriptors)))
    for c in range(rep.num_cells):
        offers = fit[(cells == c) & np.isfinite(fit)]
        if offers.size and (offers == offers.max()).sum() == 1:
            np.testing.assert_array_equal(_np(a.genotypes)[c], _np(b.genotypes)[c])


@given(rep=repertoires())
def test_coverage_counts_finite_cells(rep):
    m = q.qd_metrics(rep, 0.0)
    finite = int(np.isfinite(_np(rep.fitnesses)).sum())
    assert int(m.num_filled) == finite
    assert float(m.coverage) == pytest.approx(finite / rep.num_cells)
    filled = _np(rep.fitnesses)[np.isfinite(_np(rep.fitnesses))]
    if filled.size == 0:
        assert float(m.max_fitness) == -np.inf and np.isnan(float(m.median_fitness))
        assert float(m.qd_score) == 0.0
        return
    # Exact, but for a subnormal fitness (below 1.2e-38), which XLA's CPU code reads as 0.
    tiny = float(np.finfo(np.float32).tiny)
    assert float(m.max_fitness) == pytest.approx(float(filled.max()), rel=0.0, abs=tiny)
    assert float(m.median_fitness) == pytest.approx(np.median(filled), rel=1e-5, abs=1e-5)
    assert float(m.qd_score) == pytest.approx(filled.sum() + 0.0, rel=1e-5, abs=1e-4)


@given(
    values=st.lists(
        st.floats(width=32, allow_nan=False)
        | st.sampled_from([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 3.4e38, -3.4e38]),
        min_size=1,
        max_size=40,
    )
)
def test_the_metrics_sort_orders_floats_as_numpy_does(values):
    from eqx_qd._metrics import _sorted

    x = np.asarray(values, np.float32)
    got = _np(_sorted(jnp.asarray(x)))
    np.testing.assert_array_equal(got, np.sort(x))  # == on floats: -0.0 equals 0.0
    assert got.dtype == np.float32


@given(fit=st.lists(st.floats(-1e6, 1e6, width=32) | st.just(-np.inf), min_size=1, max_size=30))
def test_percentiles_match_numpy(fit):
    f = np.asarray(fit, np.float32)
    rep = q.MAPElitesRepertoire(
        genotypes=jnp.zeros((f.size, 1)),
        fitnesses=jnp.asarray(f),
        descriptors=jnp.zeros((f.size, 1)),
        tessellation=q.CVTTessellation(np.linspace(0, 1, f.size)[:, None]),
    )
    m = q.qd_metrics(rep, 0.0)
    filled = f[np.isfinite(f)].astype(np.float64)
    if filled.size == 0:
        assert np.isnan(float(m.p5_fitness)) and np.isnan(float(m.p95_fitness))
        return
    for got, p in ((m.p5_fitness, 5), (m.median_fitness, 50), (m.p95_fitness, 95)):
        assert float(got) == pytest.approx(np.percentile(filled, p), rel=1e-5, abs=1e-2)


def test_bytes_per_cell_counts_one_genotype():
    tess = q.GridTessellation((4,))
    genotypes = {"w": jnp.zeros((2, 3), jnp.float32), "b": jnp.zeros((2,), jnp.int16)}
    rep, _ = q.init_repertoire(tess, genotypes, jnp.full((2, 1), 0.3), jnp.zeros(2))
    assert q.internal.bytes_per_cell(rep) == 3 * 4 + 2 and isinstance(
        q.internal.bytes_per_cell(rep), int
    )


def test_add_status_codes_are_pinned():
    # The codes are stored in AddInfo and written to run files: they must not move or alias.
    codes = [(s.name, int(s)) for s in q.AddStatus]
    assert codes == [("NOT_ADDED", 0), ("IMPROVED", 1), ("NEW", 2)]


@given(rep=repertoires(), batch=candidate_batches())
def test_a_batch_of_nans_changes_nothing(jit_add, rep, batch):
    nan_fit = jnp.full_like(batch.fitnesses, jnp.nan)
    new, info = jit_add(rep, batch.genotypes, batch.descriptors, nan_fit)
    assert eqx.tree_equal(new, rep) is True or bool(eqx.tree_equal(new, rep))
    assert np.all(_np(info.status) == q.AddStatus.NOT_ADDED)
    nan_desc = jnp.full_like(batch.descriptors, jnp.nan)
    new, _ = jit_add(rep, batch.genotypes, nan_desc, batch.fitnesses)
    np.testing.assert_array_equal(_np(new.fitnesses), _np(rep.fitnesses))


def test_add_statuses_and_delta():
    tess = q.GridTessellation((2,))
    rep = q.MAPElitesRepertoire.empty(tess, jnp.zeros(1))
    g = jnp.arange(4.0)[:, None]
    d = jnp.array([[0.1], [0.2], [0.9], [0.3]])
    f = jnp.array([1.0, 3.0, 2.0, 3.0])
    rep, info = rep.add(g, d, f)
    # Cell 0 gets row 1 (the first of the tied best), cell 1 gets row 2.
    np.testing.assert_array_equal(info.status, [0, 2, 2, 0])
    np.testing.assert_array_equal(rep.fitnesses, [3.0, 2.0])
    np.testing.assert_array_equal(rep.genotypes[:, 0], [1.0, 2.0])
    assert np.all(np.isinf(info.delta))
    rep2, info2 = rep.add(g[:2], jnp.array([[0.4], [0.6]]), jnp.array([3.0, 2.5]))
    np.testing.assert_array_equal(info2.status, [0, 1])  # equal is not strictly better
    np.testing.assert_allclose(info2.delta, [0.0, 0.5])
    assert bool(info2.inserted[1]) and not bool(info2.novel[1])


def test_pytree_genotypes_with_non_array_leaves(getkey):
    mlp = eqx.nn.MLP(3, 2, 8, 1, key=getkey())
    pop = eqx.filter_vmap(lambda k: eqx.nn.MLP(3, 2, 8, 1, key=k))(jr.split(getkey(), 5))
    tess = q.GridTessellation((3, 3))
    rep = q.MAPElitesRepertoire.empty(tess, mlp)
    desc = jr.uniform(getkey(), (5, 2))
    rep, info = eqx.filter_jit(lambda r, g, d, f: r.add(g, d, f))(rep, pop, desc, jnp.arange(5.0))
    assert rep.genotypes.layers[0].weight.shape == (9, 8, 3)
    assert rep.genotypes.activation is mlp.activation
    elites = rep.select(4, key=getkey())
    out = eqx.filter_vmap(lambda m, x: m(x))(elites.genotypes, jnp.ones((4, 3)))
    assert out.shape == (4, 2)


def test_select_uniform_only_filled(getkey):
    tess = q.GridTessellation((10,))
    rep = q.MAPElitesRepertoire.empty(tess, jnp.zeros(1))
    rep, _ = rep.add(jnp.arange(3.0)[:, None], jnp.array([[0.05], [0.55], [0.95]]), jnp.ones(3))
    idx = rep.select(3000, key=getkey()).cells
    counts = np.bincount(_np(idx), minlength=10)
    assert set(np.flatnonzero(counts)) == {0, 5, 9}
    assert counts[[0, 5, 9]].min() > 850


def test_select_fitness_proportional(getkey):
    tess = q.GridTessellation((4,))
    rep = q.MAPElitesRepertoire.empty(tess, jnp.zeros(1))
    d = jnp.array([[0.1], [0.3], [0.6]])
    rep, _ = rep.add(jnp.zeros((3, 1)), d, jnp.array([-5.0, -4.0, -2.0]))
    sel = q.FitnessProportionalSelector()
    counts = np.bincount(_np(rep.select(6000, key=getkey(), selector=sel).cells), minlength=4)
    assert counts[3] == 0 and counts[0] <= 5  # the worst keeps only its eps share
    assert counts[2] / counts[1] == pytest.approx(3.0, rel=0.15)


def test_select_from_empty_raises(getkey):
    """Eagerly a `ValueError`; compiled (no host callback: the program stays in JAX's
    persistent cache), NaN genotypes, whose offspring are never stored."""
    rep = q.MAPElitesRepertoire.empty(q.GridTessellation((4,)), jnp.zeros(1))
    for selector in (q.UniformSelector(), q.FitnessProportionalSelector()):
        with pytest.raises(ValueError, match="cannot select from an empty repertoire"):
            rep.select(2, key=getkey(), selector=selector)
    drawn = eqx.filter_jit(lambda r, k: r.select(2, key=k).genotypes)(rep, getkey())
    assert bool(jnp.all(jnp.isnan(drawn)))
    after, _ = rep.add(drawn, jnp.zeros((2, 1)), jnp.full((2,), jnp.nan))
    assert int(after.num_filled) == 0
    one, _ = rep.add(jnp.ones((1, 1)), jnp.zeros((1, 1)), jnp.zeros((1,)))
    drawn = eqx.filter_jit(lambda r, k: r.select(2, key=k).genotypes)(one, getkey())
    np.testing.assert_array_equal(drawn, np.ones((2, 1)))


def test_bad_shapes_are_named():
    rep = q.MAPElitesRepertoire.empty(q.GridTessellation((4, 4)), jnp.zeros(3))
    with pytest.raises(jaxtyping.TypeCheckError, match="fitnesses"):
        rep.add(jnp.zeros((5, 3)), jnp.zeros((5, 2)), jnp.zeros((4,)))
    with pytest.raises(ValueError, match="batch size"):
        rep.add(jnp.zeros((4, 3)), jnp.zeros((5, 2)), jnp.zeros((5,)))
    # Widths the repertoire holds are checked too (they used to broadcast silently).
    with pytest.raises(ValueError, match=r"descriptors must have shape \(batch, 2\) = \(5, 2\)"):
        rep.add(jnp.zeros((5, 3)), jnp.zeros((5, 3)), jnp.zeros((5,)))
    with pytest.raises(ValueError, match=r"descriptors must have shape \(batch, 2\)"):
        rep.add(jnp.zeros((5, 3)), jnp.zeros((5, 1)), jnp.zeros((5,)))
    with pytest.raises(ValueError, match=r"genotypes must have rows of shape \(3,\) as stored"):
        rep.add(jnp.zeros((5, 4)), jnp.zeros((5, 2)), jnp.zeros((5,)))
    with pytest.raises(ValueError, match=r"descriptors must have shape \(batch, 2\)"):
        rep.cell_of(jnp.zeros((5, 3)))
    # jaxtyping names the argument under pytest; __check_init__ does without the hook.
    with pytest.raises((ValueError, jaxtyping.TypeCheckError), match="descriptors|fitnesses"):
        q.MAPElitesRepertoire(
            jnp.zeros((16, 3)), jnp.zeros(15), jnp.zeros((16, 2)), rep.tessellation
        )


def test_save_load_roundtrip(tmp_path, getkey):
    rep = q.MAPElitesRepertoire.empty(q.GridTessellation((4, 4)), jnp.zeros(3))
    rep, _ = rep.add(jr.normal(getkey(), (8, 3)), jr.uniform(getkey(), (8, 2)), jnp.arange(8.0))
    jobs.save_repertoire(tmp_path / "r.eqx", rep)
    like = q.MAPElitesRepertoire.empty(q.GridTessellation((4, 4)), jnp.zeros(3))
    back = jobs.load_repertoire(tmp_path / "r.eqx", like)
    assert eqx.tree_equal(back, rep)
    assert [p.name for p in tmp_path.iterdir()] == ["r.eqx"]


def test_a_cvt_repertoire_is_read_back_with_its_own_index(tmp_path):
    # The index is saved with its centroids: read into a template of the same shapes, even of
    # other centroids (a shape template, or centroids computed again), the repertoire read
    # holds the saved centroids and the index built from them; nothing is rebuilt.
    rng = np.random.default_rng(0)
    saved = rng.uniform(size=(300, 2)).astype(np.float32)
    rep = q.MAPElitesRepertoire.empty(q.CVTTessellation(saved), jnp.zeros(1))
    jobs.save_repertoire(tmp_path / "r.eqx", rep)
    like = eqx.filter_eval_shape(lambda: rep)
    back = jobs.load_repertoire(tmp_path / "r.eqx", like)
    assert bool(eqx.tree_equal(back, rep))
    assert bool(back.tessellation.bucket_index.matches(back.centroids))
    points = jnp.asarray(rng.uniform(size=(500, 2)), jnp.float32)
    np.testing.assert_array_equal(back.cell_of(points), q.nearest_centroid(points, back.centroids))
    # A template whose index has other shapes (a 20 x 15 lattice's: fewer candidates a box)
    # is refused, naming the leaf, rather than read into the wrong shapes.
    axes = np.meshgrid((np.arange(20) + 0.5) / 20, (np.arange(15) + 0.5) / 15, indexing="ij")
    lattice = np.stack(axes, -1).reshape(-1, 2).astype(np.float32)
    other = q.MAPElitesRepertoire.empty(q.CVTTessellation(lattice), jnp.zeros(1))
    assert other.tessellation.bucket_index.table.shape != rep.tessellation.bucket_index.table.shape
    with pytest.raises(RuntimeError, match="bucket_index.*changed shape"):
        jobs.load_repertoire(tmp_path / "r.eqx", other)


def test_grid_index_equals_nearest_centroid():
    tess = q.GridTessellation((3, 5), [0.0, -1.0], [1.0, 2.0])
    pts = jnp.asarray(
        list(itertools.product(np.linspace(-0.3, 1.3, 23), np.linspace(-1.5, 2.5, 29)))
    )
    pts = pts + 1e-4  # keep away from exact bin edges
    np.testing.assert_array_equal(tess.index(pts), q.nearest_centroid(pts, tess.centroids))


def test_extra_is_stored_with_its_elite(getkey):
    tess = q.GridTessellation((4,))
    rep = q.MAPElitesRepertoire.empty(tess, jnp.zeros(2), extra={"id": jnp.zeros((), jnp.int32)})
    ids = {"id": jnp.arange(10, 14, dtype=jnp.int32)}
    d = jnp.array([[0.1], [0.15], [0.6], [0.9]])
    rep, info = rep.add(jnp.zeros((4, 2)), d, jnp.array([1.0, 2.0, 3.0, 4.0]), ids)
    np.testing.assert_array_equal(rep.extra["id"], [11, 0, 12, 13])
    assert rep.select(3, key=getkey()).extra["id"].shape == (3,)
    with pytest.raises(ValueError, match="extra"):
        rep.add(jnp.zeros((4, 2)), d, jnp.ones(4))
    # init_repertoire shapes the store after the first batch, extra included.
    first, _ = q.init_repertoire(tess, jnp.zeros((4, 2)), d, jnp.array([1.0, 2.0, 3.0, 4.0]), ids)
    np.testing.assert_array_equal(first.extra["id"], [11, 0, 12, 13])


def test_strategies_register_for_from_type():
    from hypothesis import find

    from eqx_qd.testing import register_strategies

    register_strategies()
    rep = find(st.from_type(q.MAPElitesRepertoire), lambda r: int(r.num_filled) > 3)
    assert isinstance(rep, q.MAPElitesRepertoire) and rep.num_cells == 16
