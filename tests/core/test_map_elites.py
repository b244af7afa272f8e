import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import jobs


TASK = q.Rastrigin(genotype_dim=6)
TESS = q.GridTessellation((6, 6))
EMITTER = q.MixingEmitter(
    batch_size=32,
    variation_percentage=0.5,
    variation=q.IsoLineVariation(0.01, 0.1),
    mutation=q.GaussianMutation(0.05),
)
ALGO = q.MAPElites(EMITTER, TASK, TASK.qd_offset)


@pytest.fixture(scope="module")
def jit_update():
    return eqx.filter_jit(
        eqx.debug.assert_max_traces(lambda a, s, k: a.update(s, key=k), max_traces=1)
    )


@pytest.fixture(scope="module")
def state0():
    genotypes = TASK.init_genotypes(32, key=jr.key(0))
    state, metrics = eqx.filter_jit(ALGO.init)(genotypes, TESS, key=jr.key(1))
    assert int(metrics.num_filled) > 0
    return state


def test_run_equals_repeated_updates(jit_update, state0):
    key = jr.key(7)
    ran, history = q.run(ALGO, state0, 5, key=key)
    state = state0
    for k in jr.split(key, 5):
        state, metrics = jit_update(ALGO, state, k)
    assert eqx.tree_equal(ran, state)
    assert history.qd_score.shape == (5,)
    np.testing.assert_array_equal(history.qd_score[-1], metrics.qd_score)
    assert int(state.iteration) == 5


def test_same_seed_same_result(state0):
    a, ha = q.run(ALGO, state0, 4, key=jr.key(3))
    b, hb = q.run(ALGO, state0, 4, key=jr.key(3))
    assert eqx.tree_equal(a, b) and eqx.tree_equal(ha, hb)
    c, _ = q.run(ALGO, state0, 4, key=jr.key(4))
    assert not bool(jnp.all(c.repertoire.fitnesses == a.repertoire.fitnesses))


def test_update_does_not_retrace(jit_update, state0):
    s, _ = jit_update(ALGO, state0, jr.key(0))
    s, _ = jit_update(ALGO, s, jr.key(1))  # assert_max_traces(1) would raise on a retrace
    # A new algorithm instance with other hyperparameter values reuses the program too.
    other = eqx.tree_at(lambda a: a.emitter.variation.iso_sigma, ALGO, jnp.float32(0.02))
    jit_update(other, s, jr.key(2))


@pytest.mark.slow
def test_map_elites_improves_the_repertoire(state0):
    final, history = q.run(ALGO, state0, 60, key=jr.key(11))
    start = q.qd_metrics(state0.repertoire, TASK.qd_offset)
    assert np.all(np.diff(np.asarray(history.qd_score)) >= 0)  # QD-score never drops
    assert float(history.qd_score[-1]) > float(start.qd_score) * 1.1
    assert float(history.max_fitness[-1]) > float(start.max_fitness) + 5.0
    assert int(history.num_filled[-1]) >= int(start.num_filled)


@pytest.mark.slow  # the fast tier's budget; fast sibling: kit/test_laws.py's emitter laws
def test_emitters_emit_batch_size(state0, getkey):
    composed = q.ComposedEmitter(
        [
            EMITTER,
            q.MixingEmitter(
                batch_size=7, variation_percentage=0.0, mutation=q.GaussianMutation(0.1)
            ),
        ]
    )
    assert composed.batch_size == 39
    g, extra = composed.emit(state0.repertoire, (None, None), key=getkey())
    assert g.shape == (39, 6)
    assert isinstance(extra, q.Lineage) and extra.kind.shape == (39,)
    assert bool(jnp.all(extra.kind == q.Origin.EVO))
    algo = q.MAPElites(composed, TASK, TASK.qd_offset)
    s, _ = algo.init(TASK.init_genotypes(5, key=getkey()), TESS, key=getkey())
    s, m = algo.update(s, key=getkey())
    assert s.emitter_state == (None, None)


def test_composed_emitter_slices_state_updates(state0, getkey):
    class Counting(q.AbstractEmitter):
        batch_size: int = eqx.field(static=True)

        def init(self, repertoire, genotypes, descriptors, fitnesses, extra, *, key):
            return jnp.zeros((), jnp.int32)

        def emit(self, repertoire, state, *, key):
            return repertoire.select(self.batch_size, key=key).genotypes, None

        def state_update(
            self, state, repertoire, genotypes, descriptors, fitnesses, extra, *, add_info, key
        ):
            return state + fitnesses.shape[0]

    composed = q.ComposedEmitter([Counting(3), Counting(5)])
    algo = q.MAPElites(composed, TASK, TASK.qd_offset)
    s, _ = algo.init(TASK.init_genotypes(8, key=getkey()), TESS, key=getkey())
    s, _ = algo.update(s, key=getkey())
    assert [int(x) for x in s.emitter_state] == [3, 5]
    # A batch of another size than the emitters' 3 + 5 is named, not sliced wrong.
    genotypes = TASK.init_genotypes(7, key=getkey())
    fitnesses, descriptors, _ = TASK(genotypes, key=getkey())
    _, info7 = s.repertoire.add(genotypes, descriptors, fitnesses)
    message = r"ComposedEmitter.state_update: fitnesses must have shape \(8,\)"
    with pytest.raises(ValueError, match=message):
        composed.state_update(s.emitter_state, s.repertoire, genotypes, descriptors, fitnesses,
                              None, add_info=info7, key=getkey())  # fmt: skip
    with pytest.raises(ValueError, match=r"ComposedEmitter.init: genotypes have batch size 7"):
        composed.init(s.repertoire, genotypes, descriptors[:6], fitnesses[:6], None, key=getkey())


def test_mixing_emitter_is_validated():
    with pytest.raises(ValueError, match="mutation"):
        q.MixingEmitter(batch_size=4, variation_percentage=0.5, variation=q.IsoLineVariation(0, 0))
    with pytest.raises(ValueError, match="variation_percentage"):
        q.MixingEmitter(batch_size=4, variation_percentage=1.5)
    with pytest.raises(ValueError, match="batch_size"):
        q.MixingEmitter(batch_size=0, variation_percentage=1.0)


@pytest.mark.slow  # policy genotypes in the loop: test_envs' maze run stays fast
def test_policy_genotypes_run_in_scan(getkey):
    """Genotypes with non-array leaves (MLP activations) go through the scanned loop."""

    def scoring(policies, *, key):
        obs = jnp.linspace(-1, 1, 4)[:, None] * jnp.ones((4, 2))[None, :, :][0]
        out = eqx.filter_vmap(lambda p: jax.vmap(p)(obs))(policies)  # (batch, 4, 1)
        fitness = -jnp.mean((out[..., 0] - 0.5) ** 2, axis=-1)
        desc = jax.nn.sigmoid(out[:, :2, 0])
        return fitness, desc, None

    make = lambda k: eqx.nn.MLP(2, 1, 8, 1, activation=jax.nn.tanh, key=k)
    pop = eqx.filter_vmap(make)(jr.split(getkey(), 16))
    emitter = q.MixingEmitter(
        batch_size=16, variation_percentage=1.0, variation=q.IsoLineVariation(0.01, 0.1)
    )
    algo = q.MAPElites(emitter, scoring, 1.0)
    state, m0 = algo.init(pop, q.GridTessellation((5, 5)), key=getkey())
    state, history = q.run(algo, state, 10, key=getkey())
    assert state.repertoire.genotypes.activation is jax.nn.tanh
    assert float(history.qd_score[-1]) >= float(m0.qd_score)


def test_qd_offset_is_the_task_s_unless_given():
    assert float(q.MAPElites(EMITTER, TASK).qd_offset) == TASK.qd_offset == 50.0 * 6
    assert float(q.MAPElites(EMITTER, TASK, 0.0).qd_offset) == 0.0  # given: kept, even 0
    assert float(q.MAPElites(EMITTER, TASK, qd_offset=7).qd_offset) == 7.0
    plain = lambda g, *, key: TASK(g, key=key)  # a plain function has no offset of its own
    assert float(q.MAPElites(EMITTER, plain).qd_offset) == 0.0


def test_arm_and_sphere_tasks(getkey):
    for task in (q.Arm(4), q.Sphere(4)):
        g = task.init_genotypes(10, key=getkey())
        f, d, _ = task(g, key=getkey())
        assert f.shape == (10,) and d.shape == (10, task.num_descriptors)
        lo, hi = task.descriptor_bounds
        assert bool(jnp.all((d >= lo) & (d <= hi)))
        assert bool(jnp.all(f + task.qd_offset >= 0))
    f, _, _ = q.Arm(4)(jnp.full((1, 4), 0.5), key=getkey())
    assert float(f[0]) == 0.0  # straight arm: all angles equal
    with pytest.raises(ValueError, match="unknown task"):
        jobs.make_task("nope")


def test_mixing_emitter_splits_parents_and_lineage(getkey):
    """Noise-free operators return their first parent, so each child shows which selected
    parent it came from: variation children take parents [0, n_var) (second parents
    [n_var, 2 n_var)), mutation children the rest, and the lineage names them."""
    genotypes = TASK.init_genotypes(32, key=getkey())
    fitnesses, descriptors, _ = TASK(genotypes, key=getkey())
    ids = jnp.arange(100, 132, dtype=jnp.int32)
    rep, _ = q.init_repertoire(TESS, genotypes, descriptors, fitnesses, ids)
    exact = dict(variation=q.IsoLineVariation(0.0, 0.0), mutation=q.GaussianMutation(0.0))
    for num_var, num_mut in ((1, 2), (2, 1), (0, 3), (3, 0)):
        emitter = q.MixingEmitter(batch_size=3, variation_percentage=num_var / 3, **exact)
        key = getkey()
        children, lineage = emitter.emit(rep, None, key=key)
        parents = rep.select(2 * num_var + num_mut, key=jr.split(key, 3)[0])
        rows = [*range(num_var), *range(2 * num_var, 2 * num_var + num_mut)]
        np.testing.assert_array_equal(children, parents.genotypes[np.asarray(rows, int)])
        pid = np.asarray(parents.extra)
        np.testing.assert_array_equal(lineage.parent1, pid[rows])
        second = [*pid[num_var : 2 * num_var], *[-1] * num_mut]
        np.testing.assert_array_equal(lineage.parent2, second)
        assert bool(jnp.all(lineage.kind == q.Origin.EVO))


def test_mixing_emitter_needs_an_operator_for_a_single_slot():
    # One variation slot (2 * 0.5 = 1) and no variation operator, or one mutation slot.
    with pytest.raises(ValueError, match="variation operator"):
        q.MixingEmitter(batch_size=2, variation_percentage=0.5, mutation=q.GaussianMutation(0.1))
    with pytest.raises(ValueError, match="mutation operator"):
        q.MixingEmitter(
            batch_size=2, variation_percentage=0.5, variation=q.IsoLineVariation(0.01, 0.1)
        )


def test_composed_emitter_gives_each_member_its_own_slice(getkey):
    class Recording(q.AbstractEmitter):
        """Its state is the fitness slice it was last given; its emit extra is its size."""

        batch_size: int = eqx.field(static=True)

        def init(self, repertoire, genotypes, descriptors, fitnesses, extra, *, key):
            return jnp.zeros((self.batch_size,))

        def emit(self, repertoire, state, *, key):
            return repertoire.select(self.batch_size, key=key).genotypes, self.batch_size

        def state_update(
            self, state, repertoire, genotypes, descriptors, fitnesses, extra, *, add_info, key
        ):
            return fitnesses

    composed = q.ComposedEmitter([Recording(2), Recording(3), Recording(4)])
    genotypes = TASK.init_genotypes(9, key=getkey())
    _, descriptors, _ = TASK(genotypes, key=getkey())
    rep, _ = q.init_repertoire(TESS, genotypes, descriptors, jnp.zeros(9))
    state = composed.init(rep, genotypes, descriptors, jnp.zeros(9), None, key=getkey())
    fitnesses = jnp.arange(9.0)
    _, info = rep.add(genotypes, descriptors, fitnesses)
    state = composed.state_update(
        state, rep, genotypes, descriptors, fitnesses, None, add_info=info, key=getkey()
    )
    for got, want in zip(state, ([0, 1], [2, 3, 4], [5, 6, 7, 8])):
        np.testing.assert_array_equal(got, want)
    # Extras other than lineages are kept per member, in order.
    children, extra = composed.emit(rep, state, key=getkey())
    assert extra == (2, 3, 4) and children.shape == (9, 6)
