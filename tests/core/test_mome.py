"""MOME: the Pareto repertoire's insertion against a NumPy reference, the hypervolume against
a direct computation in 2 and 3 objectives, the metrics, selection, a learning run, bad
input."""

import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import eqx_qd as q
from eqx_qd._pareto import non_dominated


CENTROIDS = np.array([[0.1, 0.1], [0.9, 0.1], [0.5, 0.9]], np.float32)
CELLS = q.CVTTessellation(CENTROIDS)
LENGTH, BATCH = 3, 6

_add = eqx.filter_jit(lambda rep, g, d, f: rep.add(g, d, f))
_hv = jax.jit(q.hypervolume)


def _np_cell(d: np.ndarray) -> np.ndarray:
    return ((d[:, None, :] - CENTROIDS[None]) ** 2).sum(-1).argmin(-1)


def _np_dominates(a, b) -> bool:
    return bool(np.all(a >= b) and np.any(a > b))


def _np_insert(objectives, filled, genotypes, g, d, f):
    """The batch rule in NumPy, per cell: the candidates no member and no other candidate
    dominates compete for the places the members leave; those that dominate a member first,
    then the others, each in batch order; a member leaves only for a candidate that enters
    (the greatest such set: start from every candidate entering and drop the ones without a
    place until none changes)."""
    valid = np.isfinite(f).all(-1) & np.isfinite(d).all(-1)
    cells = _np_cell(np.where(valid[:, None], d, 0.0))
    out = []
    for c in range(len(CENTROIDS)):
        members = [j for j in range(LENGTH) if filled[c, j]]
        mine = [i for i in range(len(f)) if valid[i] and cells[i] == c]
        survivors = [
            i
            for i in mine
            if not any(_np_dominates(objectives[c, j], f[i]) for j in members)
            and not any(_np_dominates(f[k], f[i]) for k in mine)
        ]
        frees = {
            i for i in survivors if any(_np_dominates(f[i], objectives[c, j]) for j in members)
        }
        survivors.sort(key=lambda i: (i not in frees, i))
        entering = list(survivors)
        while True:
            kept = [
                j
                for j in members
                if not any(_np_dominates(f[i], objectives[c, j]) for i in entering)
            ]
            now = survivors[: LENGTH - len(kept)]
            if now == entering:
                break
            entering = now
        out.append(
            [(objectives[c, j], genotypes[c, j]) for j in kept] + [(f[i], g[i]) for i in entering]
        )
    return out


def _np_volume(points: np.ndarray, ref: np.ndarray) -> float:
    """The hypervolume by brute force: the grid of every point's coordinates, each box
    counted when some point dominates its upper corner."""
    points = points[np.all(points > ref, axis=1)]
    if len(points) == 0:
        return 0.0
    axes = [np.unique(np.concatenate([[r], points[:, j]])) for j, r in enumerate(ref)]
    volume = 0.0
    for idx in itertools.product(*[range(len(a) - 1) for a in axes]):
        upper = np.array([a[i + 1] for a, i in zip(axes, idx)])
        lower = np.array([a[i] for a, i in zip(axes, idx)])
        if np.any(np.all(points >= upper, axis=1)):
            volume += float(np.prod(upper - lower))
    return volume


objective = st.one_of(st.integers(0, 4).map(float), st.sampled_from([np.nan]))
row = st.tuples(objective, st.integers(0, 4).map(float))
place = st.tuples(st.floats(0.0, 1.0, width=32), st.floats(0.0, 1.0, width=32))
batches = st.lists(
    st.tuples(st.lists(row, min_size=BATCH, max_size=BATCH),
              st.lists(place, min_size=BATCH, max_size=BATCH)),
    min_size=1, max_size=3,
)  # fmt: skip


@settings(deadline=None, max_examples=25)
@given(batches)
def test_insertion_matches_the_numpy_reference(batches):
    # Small integer objectives make ties and equal vectors common; NaN rows are refused.
    rep = q.ParetoRepertoire.empty(CELLS, jnp.zeros(2), num_objectives=2, front_length=LENGTH)
    for step, (rows, places) in enumerate(batches):
        f = np.asarray(rows, np.float32)
        d = np.asarray(places, np.float32)
        g = np.arange(BATCH * 2, dtype=np.float32).reshape(BATCH, 2) + 100 * step
        objectives_before = np.asarray(rep.front_objectives)
        filled_before = np.asarray(rep.front_filled)
        want = _np_insert(
            objectives_before, filled_before, np.asarray(rep.front_genotypes), g, d, f
        )
        rep, info = _add(rep, jnp.asarray(g), jnp.asarray(d), jnp.asarray(f))
        objectives, filled = np.asarray(rep.front_objectives), np.asarray(rep.front_filled)
        genotypes = np.asarray(rep.front_genotypes)
        for c, front in enumerate(want):
            n = len(front)
            assert filled[c, :n].all() and not filled[c, n:].any()
            for j, (o, gen) in enumerate(front):
                np.testing.assert_array_equal(objectives[c, j], o)
                np.testing.assert_array_equal(genotypes[c, j], gen)
        stored = {tuple(gen) for front in want for _, gen in front}
        inserted = np.asarray(info.inserted)
        assert [tuple(x) in stored for x in g] == inserted.tolist()
        # Never dominated away: a member that left is dominated by a solution now stored.
        before = [(c, objectives_before[c, j]) for c in range(len(CENTROIDS))
                  for j in range(LENGTH) if filled_before[c, j]]  # fmt: skip
        for c, o in before:
            now = objectives[c][filled[c]]
            if not any(np.array_equal(o, x) for x in now):
                assert any(_np_dominates(x, o) for x in now), (c, o, now)
        assert np.all(np.asarray(info.cell)[np.isnan(f[:, 0])] == -1)
    # Every front is mutually non-dominated.
    for c in range(len(CENTROIDS)):
        members = objectives[c][filled[c]]
        assert not any(_np_dominates(a, b) for a in members for b in members)


@settings(deadline=None, max_examples=30)
@given(
    st.integers(2, 4),
    st.lists(st.lists(st.integers(-2, 5), min_size=4, max_size=4), min_size=1, max_size=7),
)
def test_hypervolume_matches_a_direct_computation(m, rows):
    points = np.asarray(rows, np.float32)[:, :m]
    ref = np.full((m,), -1.0, np.float32)
    got = float(_hv(jnp.asarray(points), jnp.asarray(ref)))
    assert got == pytest.approx(_np_volume(points, ref), rel=1e-5, abs=1e-5)


def test_hypervolume_of_known_fronts():
    front = jnp.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]])
    assert float(q.hypervolume(front, jnp.zeros(2))) == pytest.approx(6.0)
    cube = jnp.array([[1.0, 1.0, 1.0]])
    assert float(q.hypervolume(cube, jnp.zeros(3))) == pytest.approx(1.0)
    # A point below the reference on one objective adds nothing; a masked one neither.
    assert float(q.hypervolume(jnp.array([[5.0, -1.0]]), jnp.zeros(2))) == 0.0
    mask = jnp.array([True, False, True])
    assert float(q.hypervolume(front, jnp.zeros(2), mask)) == pytest.approx(5.0)


def test_non_dominated_keeps_equal_rows():
    x = jnp.array([[1.0, 1.0], [1.0, 1.0], [0.0, 0.5], [2.0, 0.0]])
    assert np.asarray(non_dominated(x)).tolist() == [True, True, False, True]
    mask = jnp.array([False, True, True, True])
    assert np.asarray(non_dominated(x, mask)).tolist() == [False, True, False, True]


def _filled_repertoire():
    rep = q.ParetoRepertoire.empty(CELLS, jnp.zeros(2), num_objectives=2, front_length=LENGTH)
    f = jnp.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0], [1.0, 1.0], [4.0, 4.0], [0.5, 0.5]])
    d = jnp.array([[0.1, 0.1]] * 3 + [[0.9, 0.1]] * 2 + [[0.1, 0.1]])
    return _add(rep, jnp.zeros((BATCH, 2)), d, f)


def test_metrics_of_a_known_archive():
    rep, info = _filled_repertoire()
    assert np.asarray(info.status).tolist() == [2, 2, 2, 0, 2, 0]
    m = q.moqd_metrics(rep, jnp.zeros(2))
    assert float(m.moqd_score) == pytest.approx(6.0 + 16.0)
    assert float(m.global_hypervolume) == pytest.approx(16.0)
    assert float(m.max_hypervolume) == pytest.approx(16.0)
    assert float(m.max_sum_scores) == pytest.approx(8.0)
    assert float(m.coverage) == pytest.approx(2 / 3)
    assert int(m.num_solutions) == 4
    assert rep.capacity == len(CENTROIDS) * LENGTH
    assert int(rep.num_filled) == 4
    np.testing.assert_allclose(np.sort(np.asarray(rep.fitnesses))[-4:], [4.0, 4.0, 4.0, 8.0])


def test_selection_draws_occupied_cells_uniformly_then_members():
    rep, _ = _filled_repertoire()
    elites = rep.select(3000, key=jr.key(0))
    slots = np.asarray(elites.cells)
    cells = slots // LENGTH
    assert set(cells.tolist()) == {0, 1}
    assert abs(np.mean(cells == 1) - 0.5) < 0.05  # cell 1's single member: half the draws
    assert np.all(np.asarray(rep.front_filled).reshape(-1)[slots])
    np.testing.assert_array_equal(np.asarray(elites.fitnesses), np.asarray(rep.fitnesses)[slots])


def test_uniform_crossover_swaps_the_given_share_of_genes():
    x1, x2 = jnp.zeros((200, 50)), jnp.ones((200, 50))
    child = q.UniformCrossover(0.3)(x1, x2, key=jr.key(1))
    assert set(np.unique(np.asarray(child)).tolist()) == {0.0, 1.0}
    assert float(jnp.mean(child)) == pytest.approx(0.3, abs=0.02)


@pytest.fixture(scope="module")
def mome_run():
    task = q.MultiObjectiveRastrigin(genotype_dim=8)
    emitter = q.MixingEmitter(
        batch_size=32, variation_percentage=0.5,
        variation=q.UniformCrossover(1.0 - math.exp(-0.5)),
        mutation=q.PolynomialMutation(eta_m=1.0, mutation_rate=0.3, min_genotype=-2.0,
                                      max_genotype=4.0),
    )  # fmt: skip
    algo = q.MOME(emitter, task, task.reference_point, front_length=8)
    tess = q.GridTessellation([4, 4], -2.0, 4.0)
    genotypes = task.init_genotypes(32, key=jr.key(0))
    state, first = eqx.filter_jit(lambda g: algo.init(g, tess, key=jr.key(1)))(genotypes)
    final, history = q.run_mome(algo, state, 60, key=jr.key(2))
    return task, algo, first, final, history


def test_mome_learns_on_rastrigin(mome_run):
    task, algo, first, final, history = mome_run
    assert float(history.moqd_score[-1]) > 1.5 * float(first.moqd_score)
    assert float(history.global_hypervolume[-1]) > float(first.global_hypervolume)
    assert np.all(np.diff(np.asarray(history.moqd_score)) >= 0)  # fronts are never worse
    assert int(final.iteration) == 60 and int(final.evaluations) == 32 * 61
    rep = final.repertoire
    q.check_reference_point(rep, task.reference_point)
    for c in range(rep.num_cells):
        members = np.asarray(rep.front_objectives[c])[np.asarray(rep.front_filled[c])]
        assert not any(_np_dominates(a, b) for a in members for b in members)
    assert int(jnp.sum(rep.front_filled)) > rep.num_cells  # fronts, not single elites


def test_bad_input_is_named(mome_run):
    task, algo, _, final, _ = mome_run
    rep = final.repertoire
    with pytest.raises(ValueError, match=r"fitnesses must have shape \(batch, 2\)"):
        rep.add(jnp.zeros((4, 8)), jnp.zeros((4, 2)), jnp.zeros((4, 3)))
    with pytest.raises((ValueError, jaxtyping.TypeCheckError), match="fitnesses"):
        rep.add(jnp.zeros((4, 8)), jnp.zeros((4, 2)), jnp.zeros((4,)))
    with pytest.raises(ValueError, match="objective 1 has a stored value"):
        q.check_reference_point(rep, jnp.array([-1e9, 1e9]))
    with pytest.raises(ValueError, match="shape"):
        q.moqd_metrics(rep, jnp.zeros(3))
    three = q.MOME(algo.emitter, task, jnp.zeros(3))
    with pytest.raises(ValueError, match=r"objectives of shape \(batch, 3\)"):
        three.init(task.init_genotypes(4, key=jr.key(0)), CELLS, key=jr.key(0))
    with pytest.raises(ValueError, match="keeps 2 objectives"):
        three.init_scored(
            jnp.zeros((4, 8)), jnp.zeros((4, 2)), jnp.zeros((4, 3)), rep, key=jr.key(0)
        )
    with pytest.raises(ValueError, match="num_objectives"):
        q.ParetoRepertoire.empty(CELLS, jnp.zeros(2), num_objectives=1)
    with pytest.raises(ValueError, match="at least two objectives"):
        q.MultiObjectiveRastrigin(lags=(0.0,))
    with pytest.raises(ValueError, match="reference_point"):
        q.MOME(algo.emitter, task, jnp.zeros(()))
    with pytest.raises(ValueError, match="stores no extra"):
        rep.add(jnp.zeros((4, 8)), jnp.zeros((4, 2)), jnp.zeros((4, 2)), jnp.zeros(4))


def test_tasks_reference_point_bounds_every_genotype():
    for task in (q.MultiObjectiveRastrigin(genotype_dim=5), q.MultiObjectiveSphere(genotype_dim=5)):
        corners = jnp.array(list(itertools.product([-2.0, 4.0, 1.1, 0.0, 2.2], repeat=5)))
        f, d, _ = task(corners, key=jr.key(0))
        assert f.shape == (len(corners), 2) and d.shape == (len(corners), 2)
        assert bool(jnp.all(f > task.reference_point[None, :]))
        assert bool(jnp.all(f > -task.qd_offset))


# NSGA-II and SPEA2: survival against NumPy references of the papers' rules.


def _np_fronts(obj: np.ndarray) -> np.ndarray:
    n = len(obj)
    front = np.full(n, -1)
    remaining = set(range(n))
    t = 0
    while remaining:
        current = {
            i for i in remaining if not any(_np_dominates(obj[j], obj[i]) for j in remaining)
        }
        for i in current:
            front[i] = t
        remaining -= current
        t += 1
    return front


def _np_crowding(obj: np.ndarray, front: np.ndarray) -> np.ndarray:
    n, m = obj.shape
    dist = np.zeros(n)
    for f in np.unique(front):
        rows = np.flatnonzero(front == f)
        for j in range(m):
            order = sorted(rows, key=lambda i: (obj[i, j], i))
            spread = obj[order[-1], j] - obj[order[0], j]
            for pos, i in enumerate(order):
                if pos == 0 or pos == len(order) - 1:
                    dist[i] = np.inf
                elif spread > 0 and np.isfinite(dist[i]):
                    dist[i] += (obj[order[pos + 1], j] - obj[order[pos - 1], j]) / spread
    return dist


def _np_nsga2(obj: np.ndarray, capacity: int) -> list[int]:
    front, crowd = _np_fronts(obj), None
    crowd = _np_crowding(obj, front)
    return sorted(range(len(obj)), key=lambda i: (front[i], -crowd[i], i))[:capacity]


def _np_spea2(obj: np.ndarray, capacity: int, k: int) -> list[int]:
    n = len(obj)
    dom = np.array([[_np_dominates(obj[i], obj[j]) for j in range(n)] for i in range(n)])
    strength = dom.sum(1)
    raw = np.array([strength[dom[:, i]].sum() for i in range(n)], np.float64)
    gaps = np.sqrt(((obj[:, None] - obj[None]) ** 2).sum(-1))
    np.fill_diagonal(gaps, np.inf)
    sigma = np.sort(gaps, axis=1)[:, k - 1]
    fitness = raw + 1 / (sigma + 2)
    keep = [i for i in range(n) if raw[i] == 0]
    while len(keep) > capacity:
        rows = {i: sorted(gaps[i, j] for j in keep if j != i) for i in keep}
        keep.remove(min(keep, key=lambda i: (rows[i], i)))
    if len(keep) == capacity:
        return sorted(keep, key=lambda i: (fitness[i], i))
    rest = [i for i in range(n) if raw[i] > 0]
    return (
        sorted(keep, key=lambda i: (fitness[i], i))
        + sorted(rest, key=lambda i: (fitness[i], i))[: capacity - len(keep)]
    )


_POP, _POP_BATCH = 4, 5
_pop_add = eqx.filter_jit(lambda rep, g, d, f: rep.add(g, d, f))


@settings(deadline=None, max_examples=20)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=9, max_size=9))
def test_nsga2_and_spea2_keep_the_papers_survivors(rows):
    obj = np.asarray(rows, np.float32)
    for rep, reference in (
        (q.NSGA2Repertoire.empty(_POP, jnp.zeros(1), 2, 1), lambda o: _np_nsga2(o, _POP)),
        (q.SPEA2Repertoire.empty(_POP, jnp.zeros(1), 2, 1, num_neighbours=2),
         lambda o: _np_spea2(o, _POP, 2)),
    ):  # fmt: skip
        g = np.arange(9, dtype=np.float32)[:, None]
        first, _ = _pop_add(rep, jnp.asarray(g[:4]), jnp.zeros((4, 1)), jnp.asarray(obj[:4]))
        second, info = _pop_add(first, jnp.asarray(g[4:]), jnp.zeros((5, 1)), jnp.asarray(obj[4:]))
        kept = np.asarray(second.genotypes)[:, 0].astype(int)
        pool_ids = list(np.asarray(first.genotypes)[:, 0].astype(int)) + list(range(4, 9))
        pool = obj[pool_ids]
        want = [pool_ids[i] for i in reference(pool)]
        assert sorted(kept.tolist()) == sorted(want), (type(rep).__name__, kept, want)
        assert set(np.flatnonzero(np.asarray(info.inserted)) + 4) == set(kept) & set(range(4, 9))


def test_populations_refuse_nan_and_stay_full():
    rep = q.NSGA2Repertoire.empty(3, jnp.zeros(1), 2, 1)
    f = jnp.array([[1.0, 0.0], [jnp.nan, 5.0], [0.0, 1.0], [0.5, 0.5], [9.0, 9.0]])
    rep, info = _pop_add(rep, jnp.arange(5.0)[:, None], jnp.zeros((5, 1)), f)
    # (9, 9) dominates the rest; of the next front the ends (inf crowding) are kept.
    assert np.asarray(info.inserted).tolist() == [True, False, True, False, True]
    assert not bool(jnp.any(jnp.isnan(rep.objectives)))
    assert sorted(np.asarray(rep.genotypes)[:, 0].tolist()) == [0.0, 2.0, 4.0]


# The fast tier keeps the Pareto archive's laws (the populations' survivors have their
# reference test there); the whole suite all three.
@pytest.mark.parametrize(
    "kind", ["pareto", *(pytest.param(k, marks=pytest.mark.slow) for k in ("nsga2", "spea2"))]
)
def test_multi_objective_repertoires_keep_the_repertoire_laws(kind):
    from eqx_qd.testing import check_repertoire

    genotype = jnp.zeros(2)
    start = {
        "pareto": lambda: q.ParetoRepertoire.empty(CELLS, genotype, 2, front_length=2),
        "nsga2": lambda: q.NSGA2Repertoire.empty(4, genotype, 2, 2),
        "spea2": lambda: q.SPEA2Repertoire.empty(4, genotype, 3, 2, num_neighbours=2),
    }[kind]()
    check_repertoire(start, max_examples=10)


@pytest.mark.slow  # the fast tier's budget; fast siblings: MOME on one device, MAP-Elites' meshes
def test_mome_over_two_devices_keeps_one_archive():
    assert len(jax.devices()) >= 2, "conftest asks for 4 host devices"
    task = q.MultiObjectiveSphere(genotype_dim=4)
    emitter = q.MixingEmitter(
        batch_size=8, variation_percentage=1.0, variation=q.UniformCrossover()
    )
    algo = q.MOME(emitter, task, task.reference_point, front_length=4, axis_name="p")
    mesh = q.device_mesh(2)
    cells = q.GridTessellation([3, 3], -2.0, 4.0)
    genotypes = task.init_genotypes(16, key=jr.key(0))
    state, first = q.init_sharded(algo, genotypes, cells, mesh=mesh, key=jr.key(1))
    state, history = q.run_sharded(algo, state, 3, mesh=mesh, key=jr.key(2))
    scores = np.asarray(history.moqd_score)
    assert scores.shape == (2, 3) and (scores == scores[0]).all()  # one archive on both
    assert int(state.evaluations) == 16 + 3 * 16  # every device's batch, counted once
    assert float(scores[0, -1]) >= float(first.moqd_score)
    # The initial population of both devices is in the archive: it equals one device's init.
    single = q.MOME(emitter, task, task.reference_point, front_length=4)
    alone, _ = single.init_scored(
        genotypes, *task(genotypes, key=jr.key(0))[1::-1], cells, key=jr.key(1)
    )
    assert int(first.num_solutions) == int(
        q.moqd_metrics(alone.repertoire, task.reference_point).num_solutions
    )


def _improves(emitter, task):
    cells = q.GridTessellation([3, 3], -2.0, 4.0)
    algo = q.MOME(emitter, task, task.reference_point, front_length=4)
    state, first = algo.init(task.init_genotypes(8, key=jr.key(0)), cells, key=jr.key(1))
    _, history = q.run_mome(algo, state, 5, key=jr.key(2))
    assert float(history.moqd_score[-1]) > float(first.moqd_score)


def test_emitters_check_the_scalar_view_on_the_pareto_archive():
    """Emitters check what they learn from against the archive: the scalar view, each
    candidate's sum of objectives (a composed GA checks its members' batches)."""
    ga = q.MixingEmitter(batch_size=4, variation_percentage=1.0, variation=q.UniformCrossover())
    composed = q.ComposedEmitter([ga, ga])
    rep, info = _filled_repertoire()
    g, d = jnp.zeros((8, 2)), jnp.full((8, 2), 0.5)
    sums = jnp.arange(8.0)
    state = composed.init(rep, g, d, sums, None, key=jr.key(0))
    composed.state_update(state, rep, g, d, sums, None, add_info=_eight(info), key=jr.key(1))
    rep.check_candidates(g, d, jnp.zeros((8, 2)))  # objective vectors pass too
    with pytest.raises(ValueError, match=r"fitnesses must have shape \(batch, 2\)"):
        rep.check_candidates(g, d, jnp.zeros((8, 3)))


def _eight(info):
    return jax.tree.map(lambda x: jnp.concatenate([x, x[:2]]) if x is not None else None, info)


@pytest.mark.slow  # the fast tier's budget; fast sibling: the composed GA above
def test_a_cma_me_emitter_improves_the_fronts():
    from eqx_qd import jobs

    task = q.MultiObjectiveSphere(genotype_dim=4)
    _improves(jobs.make_emitter("cma_me", batch_size=8, task=task, num_emitters=2), task)


# ------------------------------------------------------------------ MOME-PGX's crowding rules


def _np_crowded_insert(objectives, filled, genotypes, g, d, f):
    """MOME-PGX's rule in NumPy, per cell: the non-dominated set of members and candidates;
    when it exceeds the front, the `LENGTH` with the largest NSGA-II crowding distance within
    the cell (members before candidates, then in order, among equals); members keep their
    order, then the entering candidates in batch order."""
    valid = np.isfinite(f).all(-1) & np.isfinite(d).all(-1)
    cells = _np_cell(np.where(valid[:, None], d, 0.0))
    out = []
    for c in range(len(CENTROIDS)):
        members = [j for j in range(LENGTH) if filled[c, j]]
        mine = [i for i in range(len(f)) if valid[i] and cells[i] == c]
        pool = [("m", j, objectives[c, j], genotypes[c, j]) for j in members] + [
            ("c", i, f[i], g[i]) for i in mine
        ]
        inside = [p for p in pool if not any(_np_dominates(o[2], p[2]) for o in pool if o is not p)]
        if len(inside) > LENGTH:
            obj = np.array([p[2] for p in inside])
            crowd = _np_crowding(obj, np.zeros(len(inside), int))
            ranked = sorted(range(len(inside)), key=lambda k: (-crowd[k], k))[:LENGTH]
            inside = [inside[k] for k in sorted(ranked)]
        out.append([(p[2], p[3]) for p in inside])
    return out


@settings(deadline=None, max_examples=25)
@given(batches)
def test_crowding_insertion_matches_the_numpy_reference(batches):
    rep = q.ParetoRepertoire.empty(CELLS, jnp.zeros(2), 2, front_length=LENGTH, crowding=True)
    for step, (rows, places) in enumerate(batches):
        f = np.asarray(rows, np.float32)
        d = np.asarray(places, np.float32)
        g = np.arange(BATCH * 2, dtype=np.float32).reshape(BATCH, 2) + 100 * step
        want = _np_crowded_insert(
            np.asarray(rep.front_objectives),
            np.asarray(rep.front_filled),
            np.asarray(rep.front_genotypes),
            g,
            d,
            f,
        )
        rep, info = _add(rep, jnp.asarray(g), jnp.asarray(d), jnp.asarray(f))
        objectives, filled = np.asarray(rep.front_objectives), np.asarray(rep.front_filled)
        genotypes = np.asarray(rep.front_genotypes)
        for c, front in enumerate(want):
            n = len(front)
            assert filled[c, :n].all() and not filled[c, n:].any(), (c, front, objectives[c])
            for j, (o, gen) in enumerate(front):
                np.testing.assert_array_equal(objectives[c, j], o)
                np.testing.assert_array_equal(genotypes[c, j], gen)
        stored = {tuple(gen) for front in want for _, gen in front}
        assert [tuple(x) in stored for x in g] == np.asarray(info.inserted).tolist()


def _np_front_weights(obj: np.ndarray) -> np.ndarray:
    """MOME-PGX's selection weights of one front, written out."""
    n, m = obj.shape
    if n <= 2:
        return np.ones(n)
    total = np.zeros(n)
    for j in range(m):
        order = sorted(range(n), key=lambda i: (obj[i, j], i))
        spread = obj[order[-1], j] - obj[order[0], j]
        for pos, i in enumerate(order):
            before = obj[i, j] - obj[order[pos - 1], j] if pos > 0 else None
            after = obj[order[pos + 1], j] - obj[i, j] if pos < n - 1 else None
            before = after if before is None else before
            after = before if after is None else after
            total[i] += (before + after) / spread if spread > 0 else 0.0
    return total / m


@settings(deadline=None, max_examples=30)
@given(
    st.integers(2, 3).flatmap(
        lambda m: st.lists(st.lists(st.integers(0, 6).map(float), min_size=m, max_size=m),
                           min_size=1, max_size=5)
    ),
)  # fmt: skip
def test_front_crowding_weights_match_their_definition(rows):
    from eqx_qd.internal import front_crowding

    obj = np.asarray(rows, np.float32)
    padded = np.concatenate([obj, np.full((2, obj.shape[1]), 7.0, np.float32)])
    filled = np.arange(len(padded)) < len(obj)
    got = np.asarray(jax.jit(front_crowding)(jnp.asarray(padded), jnp.asarray(filled)))
    np.testing.assert_allclose(got[: len(obj)], _np_front_weights(obj), rtol=1e-5, atol=1e-6)
    assert np.all(got[len(obj) :] == 0.0)


def test_crowding_selection_draws_members_by_their_weights():
    from eqx_qd.internal import front_crowding

    rep = q.ParetoRepertoire.empty(CELLS, jnp.zeros(2), 2, front_length=4, crowding=True)
    f = jnp.asarray([[0.0, 6.0], [1.0, 5.0], [5.0, 1.0], [6.0, 0.0]])
    d = jnp.full((4, 2), 0.1)
    rep, _ = rep.add(jnp.arange(8.0).reshape(4, 2), d, f)
    slots = np.asarray(rep.select(6000, key=jr.key(1)).cells)
    weights = np.asarray(front_crowding(rep.front_objectives[0], rep.front_filled[0]))
    share = np.bincount(slots, minlength=4)[:4] / len(slots)
    np.testing.assert_allclose(share, weights / weights.sum(), atol=0.02)
    assert weights[1] > weights[0]  # (1, 5) has the wider gap to its next neighbour


def test_crowding_archive_keeps_the_fronts_law():
    from eqx_qd.testing import check_repertoire

    start = q.ParetoRepertoire.empty(CELLS, jnp.zeros(2), 2, front_length=2, crowding=True)
    check_repertoire(start, max_examples=10)


def test_a_tournament_population_draws_the_winner_of_two_uniform_draws():
    # NSGA-II's binary tournament: the slots hold the survival order, so of two uniform draws
    # the lower slot wins; slot i of n then comes up with probability (2 (n - i) - 1) / n^2.
    rep = q.NSGA2Repertoire.empty(4, jnp.zeros(2), 2, 2, tournament=True)
    f = jnp.asarray([[0.0, 0.0], [3.0, 1.0], [1.0, 3.0], [2.0, 2.0]])  # fronts 1, 0, 0, 0
    rep, _ = rep.add(jnp.arange(8.0).reshape(4, 2), jnp.zeros((4, 2)), f)
    assert np.asarray(rep.objectives)[-1].tolist() == [0.0, 0.0]  # the dominated one last
    slots = np.asarray(rep.select(20_000, key=jr.key(0)).cells)
    share = np.bincount(slots, minlength=4) / len(slots)
    np.testing.assert_allclose(share, [7 / 16, 5 / 16, 3 / 16, 1 / 16], atol=0.015)
    assert rep.emptied(jnp.zeros(2)).tournament
    spea2 = q.SPEA2Repertoire.empty(4, jnp.zeros(2), 2, 2, tournament=True)
    assert spea2.emptied(jnp.zeros(2)).tournament
    uniform = q.NSGA2Repertoire.empty(4, jnp.zeros(2), 2, 2)
    uniform, _ = uniform.add(jnp.arange(8.0).reshape(4, 2), jnp.zeros((4, 2)), f)
    share = np.bincount(np.asarray(uniform.select(20_000, key=jr.key(0)).cells), minlength=4)
    np.testing.assert_allclose(share / 20_000, 0.25, atol=0.015)
