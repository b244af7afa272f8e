"""Extract-ME: the depth container and its estimation buffers against a NumPy reference, the
extraction and its budget, the loop, and bad input."""

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqx_qd as q
from eqx_qd import internal


_add = eqx.filter_jit(lambda rep, g, d, f, offer: rep.add(g, d, f, offer))
"""The insertion, compiled once per shape (the tests' batches share one)."""

CENTROIDS = np.random.default_rng(5).uniform(size=(6, 2)).astype(np.float32)
CELLS = q.CVTTessellation(CENTROIDS)
DEPTH = 3


def _np_cell(d: np.ndarray) -> np.ndarray:
    return ((d[:, None, :] - CENTROIDS[None]) ** 2).sum(-1).argmin(-1)


def _np_add(state, genotypes, descriptors, fitnesses, sources, samples):
    """The container's insertion in NumPy: extracted rows fold their scores into their
    buffers and leave their slots; per cell, the stored solutions then the batch's rows (by
    fitness, lower rows first on ties) compete for `DEPTH` slots, the stored first on ties."""
    f, d, c, g = (np.array(a, np.float64) for a in state)
    n = f.shape[1]
    valid = np.isfinite(fitnesses) & np.isfinite(descriptors).all(-1) & (sources != -2)
    mean_f = fitnesses.astype(np.float64).copy()
    mean_d = descriptors.astype(np.float64).copy()
    counts = samples.astype(np.float64).copy()
    for i in np.flatnonzero(valid & (sources >= 0)):
        layer, cell = divmod(int(sources[i]), n)
        if not np.isfinite(f[layer, cell]):
            continue
        k = c[layer, cell]
        counts[i] = k + samples[i]
        mean_f[i] = f[layer, cell] + samples[i] / counts[i] * (fitnesses[i] - f[layer, cell])
        mean_d[i] = d[layer, cell] + samples[i] / counts[i] * (descriptors[i] - d[layer, cell])
        f[layer, cell] = -np.inf
    cells = _np_cell(np.where(valid[:, None], mean_d, 0.0))
    out = [np.full_like(f, -np.inf), np.zeros_like(d), np.zeros_like(c), np.zeros_like(g)]
    for cell in range(n):
        pool = [(f[k, cell], d[k, cell], c[k, cell], g[k, cell]) for k in range(f.shape[0])]
        rows = [i for i in np.flatnonzero(valid & (cells == cell))]
        rows.sort(key=lambda i: -mean_f[i])  # stable: lower rows first on ties
        pool += [(mean_f[i], mean_d[i], counts[i], genotypes[i]) for i in rows]
        order = sorted(range(len(pool)), key=lambda j: -pool[j][0])  # stable
        for layer, j in enumerate(order[: f.shape[0]]):
            for a, v in zip(out, pool[j]):
                a[layer, cell] = v
    return out


@settings(deadline=None, max_examples=8)
@given(seed=st.integers(0, 10_000), samples=st.sampled_from([1, 3]), batches=st.integers(1, 3))
def test_insertion_and_buffers_match_a_numpy_reference(seed, samples, batches):
    rng = np.random.default_rng(seed)
    rep = q.ExtractRepertoire.empty(CELLS, jnp.zeros(2), DEPTH)
    state = (rep.layer_fitnesses, rep.layer_descriptors, rep.layer_counts, rep.layer_genotypes)
    for t in range(batches):
        b = 8
        genotypes = rng.normal(size=(b, 2)).astype(np.float32)
        descriptors = rng.uniform(size=(b, 2)).astype(np.float32)
        fitnesses = rng.integers(-2, 3, size=b).astype(np.float32)  # ties on purpose
        fitnesses[rng.uniform(size=b) < 0.1] = np.nan
        sources = np.full(b, -1, np.int32)
        if t:  # re-score some stored solutions, any layer, and one void row
            filled = np.flatnonzero(np.isfinite(np.asarray(state[0]).ravel()))
            picked = rng.choice(filled, size=min(3, filled.size), replace=False)
            sources[: picked.size] = picked
            sources[-1] = -2
        offer = internal.ExtractOffer(jnp.asarray(sources), jnp.full((b,), samples, jnp.int32))
        rep, info = _add(rep, jnp.asarray(genotypes), jnp.asarray(descriptors),
                         jnp.asarray(fitnesses), offer)  # fmt: skip
        state = _np_add(state, genotypes, descriptors, fitnesses, sources, np.full(b, samples))
        np.testing.assert_allclose(rep.layer_fitnesses, state[0], rtol=1e-5, atol=1e-6)
        filled = np.isfinite(state[0])
        np.testing.assert_array_equal(np.asarray(rep.layer_counts)[filled], state[2][filled])
        np.testing.assert_allclose(
            np.asarray(rep.layer_descriptors)[filled], state[1][filled], rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(
            np.asarray(rep.layer_genotypes)[filled], state[3][filled], rtol=1e-6
        )
        # Each cell's solutions are ordered by estimated fitness.
        layers = np.asarray(rep.layer_fitnesses)
        assert np.all(np.diff(np.where(np.isfinite(layers), layers, -1e30), axis=0) <= 0)
        # The contract's view is layer 0.
        np.testing.assert_array_equal(rep.fitnesses, rep.layer_fitnesses[0])
        assert info.status.shape == (b,)


def test_a_lucky_elite_falls_behind_the_next_solution_of_its_cell():
    rep = q.ExtractRepertoire.empty(CELLS, jnp.zeros(2), DEPTH)
    d = jnp.asarray(np.repeat(CENTROIDS[:1], 2, axis=0))
    rep, _ = rep.add(jnp.asarray([[1.0, 0.0], [2.0, 0.0]]), d, jnp.asarray([5.0, 3.0]))
    assert float(rep.fitnesses[0]) == 5.0 and float(rep.layer_fitnesses[1, 0]) == 3.0
    # The elite is re-scored at 0: its estimate (5 + 0) / 2 = 2.5 drops below the runner-up.
    offer = internal.ExtractOffer(jnp.asarray([0]), jnp.asarray([1]))
    rep, info = rep.add(jnp.asarray([[1.0, 0.0]]), d[:1], jnp.asarray([0.0]), offer)
    np.testing.assert_allclose(rep.layer_fitnesses[:2, 0], [3.0, 2.5])
    np.testing.assert_array_equal(rep.layer_counts[:2, 0], [1, 2])
    np.testing.assert_allclose(rep.genotypes[0], [2.0, 0.0])
    assert int(info.status[0]) == q.AddStatus.NOT_ADDED  # kept, but no longer the elite
    # A failed re-scoring leaves the solution where and as it was.
    offer = internal.ExtractOffer(jnp.asarray([0]), jnp.asarray([1]))
    again, _ = rep.add(jnp.asarray([[2.0, 0.0]]), d[:1], jnp.asarray([jnp.nan]), offer)
    np.testing.assert_array_equal(again.layer_fitnesses, rep.layer_fitnesses)
    np.testing.assert_array_equal(again.layer_counts, rep.layer_counts)


def test_extract_draws_distinct_filled_elites_and_marks_the_rest_void():
    rep = q.ExtractRepertoire.empty(CELLS, jnp.zeros(2), DEPTH)
    rep, _ = rep.add(jnp.ones((3, 2)), jnp.asarray(CENTROIDS[:3]), jnp.arange(3.0))
    out = rep.extract(5, key=jr.key(0))
    sources = np.asarray(out.sources)
    assert sorted(sources[sources >= 0]) == [0, 1, 2]
    assert np.sum(sources == -2) == 2
    seen = set()
    for k in range(20):
        s = np.asarray(rep.extract(2, key=jr.key(k)).sources)
        assert len(set(s)) == 2 and set(s) <= {0, 1, 2}
        seen |= set(s)
    assert seen == {0, 1, 2}


def test_the_container_keeps_the_repertoire_laws():
    from eqx_qd.testing import check_repertoire

    # New candidates scored once: layer 0 is an elitist MAP-Elites archive of their rows.
    check_repertoire(q.ExtractRepertoire.empty(CELLS, jnp.zeros(3), 2), elitist=True,
                     max_examples=8)  # fmt: skip


ARM = q.Noisy(q.Arm(4), fitness_noise=0.1, descriptor_noise=0.1)
GRID = q.GridTessellation((5, 5), 0.0, 1.0)


@pytest.mark.slow  # the fast tier's budget; fast sibling: test_a_lucky_elite_falls_behind_...
def test_every_iteration_spends_exactly_the_batch_on_offspring_and_extraction():
    genotypes = ARM.init_genotypes(16, key=jr.key(0))
    emitter = q.Extraction(q.MixingEmitter(12, 1.0, variation=q.IsoLineVariation(0.01, 0.1)), 4)
    assert emitter.batch_size == 16
    algo = q.MAPElites(emitter, ARM)
    rep = q.ExtractRepertoire.empty(GRID, genotypes[0], 2)
    state, _ = algo.init(genotypes, rep, key=jr.key(1))
    counts0 = int(jnp.sum(state.repertoire.layer_counts))
    step = eqx.filter_jit(algo.step)
    for k in range(2):
        before = int(state.evaluations)
        new, _, info = step(state, key=jr.key(10 + k))
        assert int(new.evaluations) - before == 16
        sources = np.asarray(info.emit_extra.sources)
        assert np.all(sources[:12] == -1) and np.all(sources[12:] != -1)
        extracted = sources[sources >= 0]
        assert len(set(extracted)) == extracted.size == 4  # the grid is filled enough
        # Every scoring lands in a buffer or is dropped with its solution: the stored counts
        # grow by at most the batch, and by exactly the extracted rows' re-scorings when no
        # solution is pushed out.
        grown = int(jnp.sum(new.repertoire.layer_counts)) - int(
            jnp.sum(state.repertoire.layer_counts)
        )
        assert grown <= 16
        state = new
    assert int(jnp.sum(state.repertoire.layer_counts)) >= counts0


def test_extract_me_refuses_bad_settings():
    genotypes = ARM.init_genotypes(8, key=jr.key(0))
    inner = q.MixingEmitter(6, 1.0, variation=q.IsoLineVariation(0.01, 0.1))
    with pytest.raises(ValueError, match="num_extracted"):
        q.Extraction(inner, 0)
    with pytest.raises(ValueError, match="depth"):
        q.ExtractRepertoire.empty(GRID, genotypes[0], 0)
    rep = q.ExtractRepertoire.empty(GRID, genotypes[0], 2)
    with pytest.raises(ValueError, match="exceeds the number of cells"):
        rep.extract(26, key=jr.key(0))
    with pytest.raises(TypeError, match="ExtractRepertoire"):
        q.MAPElites(q.Extraction(inner, 2), ARM).init(genotypes, GRID, key=jr.key(1))
    with pytest.raises(ValueError, match="exceeds the archive's 25 cells"):
        q.MAPElites(q.Extraction(inner, 26), ARM).init(genotypes, rep, key=jr.key(1))
    with pytest.raises(ValueError, match="lineage=True cannot run on it"):
        q.MAPElites(q.Extraction(inner, 2), ARM, lineage=True).init(genotypes, rep, key=jr.key(1))
    with pytest.raises(TypeError, match="extra"):  # beartype, or the message without it
        rep.add(genotypes[:2], jnp.zeros((2, 2)), jnp.zeros(2), jnp.arange(2))
    with pytest.raises(ValueError, match="shape"):
        offer = internal.ExtractOffer(jnp.full((3,), -1), jnp.ones(3, jnp.int32))
        rep.add(genotypes[:2], jnp.zeros((2, 2)), jnp.zeros(2), offer)


@pytest.mark.slow  # the fast tier's budget; fast sibling: test_repertoire.py's non-array leaves
def test_policy_genotypes_with_functions_as_leaves_are_stored():
    # An MLP's activation is a leaf that is not an array: kept as it is in every slot.
    mlps = eqx.filter_vmap(lambda k: eqx.nn.MLP(2, 2, 4, 1, key=k))(jr.split(jr.key(0), 5))
    one = internal.tree_take(mlps, 0)
    rep = q.ExtractRepertoire.empty(GRID, one, 2)
    rep, _ = rep.add(mlps, jnp.asarray(np.linspace(0.05, 0.95, 10).reshape(5, 2)), jnp.arange(5.0))
    assert int(rep.num_filled) == 5 and isinstance(rep.genotypes, eqx.nn.MLP)
    out = rep.extract(2, key=jr.key(1))
    assert out.genotypes.activation is one.activation
