"""Repertoires without cells: DNS, the unstructured archive, the novelty rankers, and the
metrics that measure them, each against a NumPy reference."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import numpy as np
import pytest
from hypothesis import given, strategies as st

import eqx_qd as q


# --- References -------------------------------------------------------------------------------


def _np_competition(f, d, k, count_equal=True):
    """DNS's competition fitness by brute force (float32 distances, summed left to right)."""
    f = np.asarray(f, np.float32)
    d = np.asarray(d, np.float32)
    valid = np.isfinite(f) & np.all(np.isfinite(d), axis=1)
    out = np.full(len(f), -np.inf, np.float32)
    for i in np.flatnonzero(valid):
        others = [
            j
            for j in np.flatnonzero(valid)
            if j != i and (f[j] >= f[i] if count_equal else f[j] > f[i])
        ]
        if not others:
            out[i] = np.inf
            continue
        dist = sorted(np.float32(np.sqrt(np.sum(np.square(d[j] - d[i])))) for j in others)[:k]
        total = np.float32(0.0)
        for x in dist:
            total = np.float32(total + x)
        out[i] = total / np.float32(len(dist))
    return out


def _np_dns_add(stored_f, stored_d, f, d, k, count_equal=True):
    """Pool, score, keep the capacity best, ties to the lower pool index."""
    pool_f = np.concatenate([stored_f, f]).astype(np.float32)
    pool_d = np.concatenate([stored_d, d]).astype(np.float32)
    score = _np_competition(pool_f, pool_d, k, count_equal)
    order = sorted(range(len(pool_f)), key=lambda i: (-score[i], i))[: len(stored_f)]
    return [i for i in order if score[i] > -np.inf]


def _np_unstructured_add(stored_f, stored_d, f, d, k, threshold, local):
    """pyribs' ProximityArchive rules, one candidate after another."""
    fit, desc = np.array(stored_f, np.float32), np.array(stored_d, np.float32)
    statuses, novelties, beats = [], [], []
    for fi, di in zip(np.asarray(f, np.float32), np.asarray(d, np.float32)):
        filled = np.flatnonzero(np.isfinite(fit))
        if not (np.isfinite(fi) and np.all(np.isfinite(di))):
            statuses.append(0), novelties.append(np.nan), beats.append(0)
            continue
        if len(filled) == 0:
            novelty, nearest, near = np.float32(threshold), -1, []
        else:
            dist = np.sqrt(np.sum(np.square(desc[filled] - di), axis=1)).astype(np.float32)
            order = sorted(range(len(filled)), key=lambda j: (dist[j], filled[j]))[:k]
            near = [filled[j] for j in order]
            total = np.float32(0.0)
            for j in order:
                total = np.float32(total + dist[j])
            novelty = total / np.float32(len(order))
            nearest = near[0]
        novelties.append(novelty)
        beats.append(sum(fit[j] < fi for j in near))
        empty = np.flatnonzero(~np.isfinite(fit))
        if novelty >= threshold and len(empty):
            fit[empty[0]], desc[empty[0]] = fi, di
            statuses.append(2)
        elif local and nearest >= 0 and fi > fit[nearest]:
            fit[nearest], desc[nearest] = fi, di
            statuses.append(1)
        else:
            statuses.append(0)
    return fit, desc, np.array(statuses), np.array(novelties, np.float32), np.array(beats)


# Small integers: every distance is exact in float32, so ties are real ties on both sides.
_coords = st.integers(-3, 3).map(float)
_fits = st.one_of(st.integers(-2, 2).map(float), st.sampled_from([np.nan, np.inf, -np.inf]))


@st.composite
def _pool(draw, n_min=1, n_max=12, width=2):
    n = draw(st.integers(n_min, n_max))
    f = np.array(draw(st.lists(_fits, min_size=n, max_size=n)), np.float32)
    d = np.array(draw(st.lists(_coords, min_size=n * width, max_size=n * width)), np.float32)
    d = d.reshape(n, width)
    if draw(st.booleans()):
        d[draw(st.integers(0, n - 1)), 0] = np.nan
    return f, d


_competition = eqx.filter_jit(q.internal.competition_fitness)


@given(pool=_pool(), k=st.integers(1, 4), count_equal=st.booleans())
def test_competition_fitness_is_the_brute_force_one(pool, k, count_equal):
    f, d = pool
    got = np.asarray(_competition(jnp.asarray(f), jnp.asarray(d), k, count_equal=count_equal))
    np.testing.assert_array_equal(got, _np_competition(f, d, k, count_equal))


@pytest.fixture(scope="module")
def jit_add_extra():
    return eqx.filter_jit(lambda rep, g, d, f, e: rep.add(g, d, f, e))


@given(first=_pool(n_max=6), second=_pool(n_max=6), k=st.integers(1, 3))
def test_dns_keeps_the_brute_force_survivors(jit_add_extra, first, second, k):
    rep = q.DNSRepertoire.empty(6, jnp.zeros(()), 2, jnp.zeros((), jnp.int32), k=k)
    stored_f, stored_d = np.asarray(rep.fitnesses), np.asarray(rep.descriptors)
    ids = 0
    for f, d in (first, second):
        b = len(f)
        batch_ids = jnp.arange(ids, ids + b, dtype=jnp.int32)
        expected = _np_dns_add(stored_f, stored_d, f, d, k)
        new, info = jit_add_extra(rep, batch_ids.astype(jnp.float32), d, f, batch_ids)
        pool_ids = np.concatenate([np.asarray(rep.extra), np.asarray(batch_ids)])
        got_f, got_d = np.asarray(new.fitnesses), np.asarray(new.descriptors)
        held = np.isfinite(got_f)
        # The same survivors, in the same order, each stored with its own data.
        np.testing.assert_array_equal(np.asarray(new.extra)[held], pool_ids[expected])
        pool_f = np.concatenate([stored_f, f])
        np.testing.assert_array_equal(got_f[held], pool_f[expected])
        np.testing.assert_array_equal(np.asarray(new.genotypes)[held], pool_ids[expected])
        assert held.sum() == len(expected) and np.all(held[: len(expected)])
        assert np.all(np.isfinite(got_d)) and np.all(np.asarray(new.genotypes)[~held] == 0)
        # AddInfo: the survivors of the batch, their slots, their competition fitness.
        status, cell = np.asarray(info.status), np.asarray(info.cell)
        survived = np.isin(np.arange(len(stored_f), len(pool_f)), expected)
        np.testing.assert_array_equal(status == q.AddStatus.NEW, survived)
        for i in np.flatnonzero(survived):
            assert np.asarray(new.extra)[cell[i]] == int(batch_ids[i])
        assert np.all(cell[~survived] == -1)
        stored_f, stored_d, rep, ids = got_f, got_d, new, ids + b


def test_dns_keeps_the_best_of_each_region_and_drops_crowded_copies():
    rep = q.DNSRepertoire.empty(3, jnp.zeros(()), 1, k=1)
    # Two regions: near 0 (fitnesses 5, 4, 3) and at 10 (fitness 1). Capacity 3.
    d = jnp.array([[0.0], [0.1], [0.2], [10.0]])
    f = jnp.array([5.0, 4.0, 3.0, 1.0])
    rep, info = rep.add(jnp.arange(4.0), d, f)
    kept = set(np.asarray(rep.genotypes)[np.isfinite(np.asarray(rep.fitnesses))].tolist())
    # 5 is unbeaten (+inf); 1 is beaten by all, but its nearest fitter solution is 9.8 away,
    # so it stays; 4 and 3 each have a fitter one 0.1 away: the tie goes to the lower index.
    assert kept == {0.0, 1.0, 3.0}
    np.testing.assert_allclose(np.asarray(info.value), [np.inf, 0.1, 0.1, 9.8], rtol=1e-6)


def test_dns_refuses_bad_input():
    rep = q.DNSRepertoire.empty(4, jnp.zeros(()), 2)
    with pytest.raises(ValueError, match="descriptors must have shape"):
        rep.add(jnp.zeros(2), jnp.zeros((2, 3)), jnp.zeros(2))
    with pytest.raises(ValueError, match="k must be a positive"):
        q.DNSRepertoire.empty(4, jnp.zeros(()), 2, k=0)
    with pytest.raises(ValueError, match="capacity must be a positive"):
        q.DNSRepertoire.empty(0, jnp.zeros(()), 2)


@given(
    batches=st.lists(_pool(n_max=5), min_size=1, max_size=3),
    k=st.integers(1, 3),
    threshold=st.sampled_from([0.5, 1.0, 2.5]),
    local=st.booleans(),
)
def test_unstructured_archive_is_the_sequential_reference(jit_add, batches, k, threshold, local):
    rep = q.UnstructuredRepertoire.empty(
        5, jnp.zeros(()), 2, novelty_threshold=threshold, k=k, local_competition=local
    )
    fit, desc = np.asarray(rep.fitnesses), np.asarray(rep.descriptors)
    for f, d in batches:
        fit, desc, status, novelty, beats = _np_unstructured_add(
            fit, desc, f, d, k, threshold, local
        )
        rep, info = jit_add(rep, jnp.zeros(len(f)), d, f)
        np.testing.assert_array_equal(np.asarray(rep.fitnesses), fit)
        held = np.isfinite(fit)
        np.testing.assert_array_equal(np.asarray(rep.descriptors)[held], desc[held])
        np.testing.assert_array_equal(np.asarray(info.status), status)
        np.testing.assert_array_equal(np.asarray(info.novelty), novelty)
        ok = ~np.isnan(novelty)
        np.testing.assert_array_equal(np.asarray(info.local_competition)[ok], beats[ok])
        assert np.all(np.isfinite(np.asarray(rep.descriptors)))


def test_a_full_unstructured_archive_admits_only_by_local_competition():
    def full(local):
        rep = q.UnstructuredRepertoire.empty(
            2, jnp.zeros(()), 1, novelty_threshold=1.0, k=1, local_competition=local
        )
        rep, _ = rep.add(jnp.zeros(2), jnp.array([[0.0], [5.0]]), jnp.array([1.0, 1.0]))
        return rep

    # Far from both (novel), but no slot is free: refused without local competition...
    rep, info = full(False).add(jnp.ones(1), jnp.array([[20.0]]), jnp.array([9.0]))
    assert int(info.status[0]) == q.AddStatus.NOT_ADDED and int(rep.num_filled) == 2
    # ...and with it, it replaces its nearest elite (at 5) since it is better.
    rep, info = full(True).add(jnp.ones(1), jnp.array([[20.0]]), jnp.array([9.0]))
    assert int(info.status[0]) == q.AddStatus.IMPROVED and int(info.cell[0]) == 1
    np.testing.assert_array_equal(np.asarray(rep.descriptors)[:, 0], [0.0, 20.0])


def test_unstructured_refuses_bad_input():
    with pytest.raises(ValueError, match="novelty_threshold"):
        q.UnstructuredRepertoire.empty(4, jnp.zeros(()), 2, novelty_threshold=0.0)
    rep = q.UnstructuredRepertoire.empty(4, jnp.zeros(()), 2, novelty_threshold=1.0)
    with pytest.raises(ValueError, match="descriptors must have shape"):
        rep.add(jnp.zeros(2), jnp.zeros((2, 1)), jnp.zeros(2))


# --- Rankers ----------------------------------------------------------------------------------


def _np_front_crowd(novelty, beats):
    """NSGA-II's fronts and crowding distances of (novelty, local competition), as pyribs."""
    obj = np.stack([novelty, beats], axis=1).astype(np.float64)
    n = len(obj)
    dominated = [
        [j for j in range(n) if np.all(obj[j] >= obj[i]) and np.any(obj[j] > obj[i])]
        for i in range(n)
    ]
    front, remaining, level = np.full(n, -1), set(range(n)), 0
    while remaining:
        current = [i for i in remaining if not any(j in remaining for j in dominated[i])]
        front[current] = level
        remaining -= set(current)
        level += 1
    crowd = np.zeros(n)
    for lv in range(level):
        members = sorted(np.flatnonzero(front == lv))
        for m in range(2):
            ordered = sorted(members, key=lambda i: (obj[i, m], i))
            crowd[ordered[0]] = crowd[ordered[-1]] = np.inf
            spread = obj[ordered[-1], m] - obj[ordered[0], m]
            if spread == 0:
                continue
            for a in range(1, len(ordered) - 1):
                crowd[ordered[a]] += (obj[ordered[a + 1], m] - obj[ordered[a - 1], m]) / spread
    return front, crowd


def _np_nslc(novelty, beats):
    """pyribs' NSLC order (fronts, then crowding), ties to the lower index."""
    front, crowd = _np_front_crowd(novelty, beats)
    return sorted(range(len(front)), key=lambda i: (front[i], -crowd[i], i))


@given(  # one size (one compile of each ranker); few values, so ties come up
    novelty=st.lists(st.integers(0, 4).map(float), min_size=8, max_size=8),
    data=st.data(),
)
def test_nslc_ranker_is_the_reference(novelty, data):
    n = len(novelty)
    beats = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    info = q.AddInfo(
        cell=jnp.zeros(n, jnp.int32),
        status=jnp.zeros(n, jnp.int32),
        delta=jnp.zeros(n),
        threshold_status=jnp.zeros(n, jnp.int32),
        value=jnp.zeros(n),
        novelty=jnp.asarray(novelty, jnp.float32),
        local_competition=jnp.asarray(beats, jnp.int32),
    )
    order, values = q.ranker("nslc").rank(jnp.zeros(2), jnp.zeros(n), jnp.zeros((n, 2)), info)
    assert np.asarray(order).tolist() == _np_nslc(np.array(novelty), np.array(beats))
    assert values.shape == (n, 2)
    order, _ = q.ranker("novelty").rank(jnp.zeros(2), jnp.zeros(n), jnp.zeros((n, 2)), info)
    assert np.all(np.diff(np.asarray(novelty)[np.asarray(order)]) <= 0)


def test_novelty_rankers_name_the_missing_field():
    info = q.AddInfo(
        *(jnp.zeros(3, jnp.int32),) * 2, jnp.zeros(3), jnp.zeros(3, jnp.int32), jnp.zeros(3)
    )
    for name in ("novelty", "nslc"):
        with pytest.raises(ValueError, match="AddInfo.novelty"):
            q.ranker(name).rank(jnp.zeros(2), jnp.zeros(3), jnp.zeros((3, 2)), info)


# --- Metrics ----------------------------------------------------------------------------------


def test_cqd_score_is_the_numpy_one(getkey):
    rep = q.DNSRepertoire.empty(8, jnp.zeros(()), 2)
    d = jr.uniform(getkey(), (6, 2))
    f = jr.normal(getkey(), (6,))
    rep, _ = rep.add(jnp.zeros(6), d, f)
    targets = jr.uniform(getkey(), (3, 20, 2))
    penalties = jnp.linspace(0.0, 1.0, 5)
    got = q.cqd_score(rep, targets, penalties, fitness_bounds=(-3.0, 3.0), max_distance=2**0.5)
    held = np.isfinite(np.asarray(rep.fitnesses))
    fit, desc = np.asarray(rep.fitnesses, np.float64)[held], np.asarray(rep.descriptors)[held]
    scores = []
    for t in np.asarray(targets, np.float64):
        dist = np.linalg.norm(desc[:, None] - t[None], axis=-1) / 2**0.5
        quality = (fit + 3.0) / 6.0
        scores.append(sum(np.max(quality[:, None] - p * dist, axis=0).sum() for p in penalties))
    assert float(got) == pytest.approx(np.mean(scores), rel=1e-5)
    with pytest.raises((ValueError, jaxtyping.TypeCheckError), match="targets"):
        q.cqd_score(rep, targets[0], penalties, fitness_bounds=(0.0, 1.0), max_distance=1.0)


def test_qd_metrics_of_a_repertoire_without_cells(getkey):
    rep = q.DNSRepertoire.empty(10, jnp.zeros(()), 2)
    f = jnp.array([1.0, 2.0, jnp.nan, 4.0])
    rep, _ = rep.add(jnp.zeros(4), jr.uniform(getkey(), (4, 2)), f)
    m = q.qd_metrics(rep, 1.0)
    assert int(m.num_filled) == 3 and float(m.coverage) == pytest.approx(0.3)
    assert float(m.qd_score) == pytest.approx(10.0)
    assert float(q.norm_qd_score(rep, 1.0)) == pytest.approx(1.0)


# --- In the MAP-Elites loop ---------------------------------------------------------------------

TASK = q.Rastrigin(4)


def _ga(batch=16):
    return q.MixingEmitter(batch, 1.0, variation=q.IsoLineVariation(0.05, 0.1, 0.0, 1.0))


@pytest.mark.slow  # DNS's brute-force reference stays in the fast tier
def test_dns_in_the_loop_reports_a_passive_grid_and_learns(getkey):
    grid = q.GridTessellation((8, 8), *TASK.descriptor_bounds)
    algo = q.MAPElites(_ga(), TASK, lineage=True)
    key = getkey()
    genotypes = TASK.init_genotypes(16, key=key)
    empty = q.DNSRepertoire.empty(64, genotypes[0], 2, k=3)
    state, first = algo.init(genotypes, empty, key=key, result=grid)
    state, history = q.run(algo, state, 30, key=getkey())
    assert isinstance(state.repertoire, q.DNSRepertoire) and state.result is not None
    assert state.repertoire.extra is not None  # lineage: ids stored beside each elite
    assert int(state.repertoire.num_filled) == 64
    # The metrics are the grid's: QD-score grows, coverage is of the grid's 64 cells.
    assert float(history.qd_score[-1]) > 1.5 * float(first.qd_score)
    assert float(history.coverage[-1]) == pytest.approx(float(state.result.num_filled) / 64)


@pytest.mark.slow
def test_novelty_search_with_an_es_emitter(getkey):
    es = q.EvolutionStrategyEmitter(
        jnp.zeros(4),
        0.5,
        num_emitters=2,
        emitter_batch_size=8,
        ranker="nslc",
        selection_rule="mu",
        restart_rule="basic",
    )
    algo = q.MAPElites(es, TASK)
    key = getkey()
    genotypes = TASK.init_genotypes(4, key=key)
    empty = q.UnstructuredRepertoire.empty(
        128, genotypes[0], 2, novelty_threshold=0.05, k=5, local_competition=True
    )
    state, first = algo.init(genotypes, empty, key=key)
    state, history = q.run(algo, state, 20, key=getkey())
    assert int(state.repertoire.num_filled) > int(first.num_filled) + 10
    spread = np.ptp(
        np.asarray(state.repertoire.descriptors)[np.asarray(state.repertoire.filled)], axis=0
    )
    assert np.all(spread > 0.5)


def test_a_built_repertoire_refuses_cma_mae_annealing(getkey):
    algo = q.MAPElites(_ga(), TASK, archive_learning_rate=0.1, threshold_min=0.0)
    genotypes = TASK.init_genotypes(4, key=getkey())
    with pytest.raises(ValueError, match="give the tessellation"):
        algo.init(genotypes, q.DNSRepertoire.empty(8, genotypes[0], 2), key=getkey())
    with pytest.raises((TypeError, jaxtyping.TypeCheckError), match="repertoire"):
        q.MAPElites(_ga(), TASK).init(genotypes, "grid", key=getkey())


def test_dns_vmaps_over_seeds(getkey):
    rep = q.DNSRepertoire.empty(8, jnp.zeros(()), 2)
    d = jr.uniform(getkey(), (3, 4, 2))
    f = jr.normal(getkey(), (3, 4))
    new, info = jax.vmap(lambda dd, ff: rep.add(jnp.zeros(4), dd, ff))(d, f)
    assert new.fitnesses.shape == (3, 8) and info.status.shape == (3, 4)


def test_any_repertoire_exports_pyribs_columns():
    rep = q.DNSRepertoire.empty(5, {"w": jnp.zeros((2, 2)), "b": jnp.zeros(1)}, 2, jnp.int32(0))
    genotypes = {"w": jnp.arange(12.0).reshape(3, 2, 2), "b": jnp.array([[7.0], [8.0], [9.0]])}
    fit = jnp.array([1.0, jnp.nan, 3.0])
    rep, _ = rep.add(genotypes, jnp.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]), fit, jnp.arange(3))
    frame = q.to_dataframe(rep)
    assert list(frame.columns) == [
        "index", "objective", "measures_0", "measures_1",
        *[f"solution_{i}" for i in range(5)], "extra",
    ]  # fmt: skip
    assert len(frame) == 2 and sorted(frame["extra"]) == [0, 2]
    row = frame[frame["extra"] == 2].iloc[0]
    # ravel_pytree order: the dict's keys sorted ("b" before "w").
    assert [row[f"solution_{i}"] for i in range(5)] == [9.0, 8.0, 9.0, 10.0, 11.0]
    assert (row["measures_0"], row["measures_1"], row["objective"]) == (4.0, 5.0, 3.0)
    grid = q.MAPElitesRepertoire.empty(q.GridTessellation((2, 2)), jnp.zeros(3))
    grid, _ = grid.add(jnp.ones((1, 3)), jnp.array([[0.9, 0.9]]), jnp.array([2.0]))
    assert q.to_dataframe(grid)["index"].tolist() == [3]


def test_novelty_selector_draws_in_proportion_to_novelty(getkey):
    rep = q.UnstructuredRepertoire.empty(8, jnp.zeros(()), 1, novelty_threshold=0.1, k=2)
    d = jnp.array([[0.0], [0.2], [0.4], [3.0], [9.0]])
    rep, info = rep.add(jnp.zeros(5), d, jnp.zeros(5))
    assert bool(jnp.all(info.inserted))
    stored = np.asarray(rep.descriptors)[:5, 0]
    # The reference: mean distance to the 2 nearest other elites.
    novelty = np.array(
        [np.mean(np.sort(np.abs(np.delete(stored, i) - stored[i]))[:2]) for i in range(5)]
    )
    expected = novelty / novelty.sum()
    picks = np.asarray(rep.select(20_000, selector=q.NoveltySelector(k=2), key=getkey()).cells)
    counts = np.bincount(picks, minlength=8)
    assert counts[5:].sum() == 0  # never an empty slot
    np.testing.assert_allclose(counts[:5] / 20_000, expected, atol=0.012)
    assert not isinstance(
        q.NoveltySelector(), q.AbstractFitnessSelector
    )  # it reads the descriptors


@pytest.mark.parametrize("selector", [q.NoveltySelector(k=5), q.NSLCSelector(k=5)])
def test_novelty_search_with_the_ga(selector, getkey):
    emitter = q.MixingEmitter(
        16, 1.0, variation=q.IsoLineVariation(0.05, 0.1, 0.0, 1.0), selector=selector
    )
    algo = q.MAPElites(emitter, TASK)
    key = getkey()
    genotypes = TASK.init_genotypes(16, key=key)
    empty = q.UnstructuredRepertoire.empty(96, genotypes[0], 2, novelty_threshold=0.03, k=5)
    state, first = algo.init(genotypes, empty, key=key)
    state, _ = q.run(algo, state, 15, key=getkey())
    assert int(state.repertoire.num_filled) > int(first.num_filled) + 20


@pytest.mark.slow  # the fast tier's budget; fast sibling: test_nslc_ranker_is_the_reference
def test_nslc_selector_is_the_crowded_tournament(getkey):
    rep = q.UnstructuredRepertoire.empty(24, jnp.zeros(()), 2, novelty_threshold=0.01, k=3)
    d = jr.uniform(getkey(), (18, 2))
    f = jnp.round(jr.normal(getkey(), (18,)), 1)  # ties in fitness on purpose
    rep, _ = rep.add(jnp.zeros(18), d, f)
    fit, desc = np.asarray(rep.fitnesses), np.asarray(rep.descriptors)
    held = np.flatnonzero(np.isfinite(fit))
    # The reference: novelty and local competition against the 3 nearest other elites.
    novelty, beats = np.zeros(24), np.zeros(24)
    for i in held:
        others = [j for j in held if j != i]
        dist = np.float32(np.sqrt(np.sum(np.square(desc[others] - desc[i]), axis=1)))
        near = [
            others[j] for j in sorted(range(len(others)), key=lambda j: (dist[j], others[j]))[:3]
        ]
        d0, d1, d2 = np.sort(dist)[:3]
        novelty[i] = np.float32(np.float32(d0 + d1) + d2) / np.float32(3)
        beats[i] = sum(fit[j] < fit[i] for j in near)
    front, crowd = _np_front_crowd(novelty[held], beats[held])
    where = {c: i for i, c in enumerate(held)}
    key = getkey()
    picks = np.asarray(q.NSLCSelector(k=3).choose(rep.fitnesses, rep.descriptors, 500, key=key))
    draws = np.asarray(held)[np.asarray(jr.randint(key, (2, 500), 0, len(held)))]
    for a, b, got in zip(draws[0], draws[1], picks):
        i, j = where[a], where[b]
        a_wins = front[i] < front[j] or (front[i] == front[j] and crowd[i] >= crowd[j])
        assert got == (a if a_wins else b)
    assert len(set(picks.tolist())) > 1
    assert not isinstance(q.NSLCSelector(), q.AbstractFitnessSelector)  # it reads the descriptors
