"""Ask / tell: the two halves of an iteration, with any evaluation in between."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import numpy as np
import pytest

import eqx_qd as q


TASK = q.Rastrigin(6)
CELLS = q.GridTessellation((6, 6), *TASK.descriptor_bounds)


def _algorithms():
    ga = q.MixingEmitter(16, 0.5, q.GaussianMutation(0.05), q.IsoLineVariation(0.01, 0.1))
    es = q.EvolutionStrategyEmitter(jnp.full(6, 0.5), 0.2, num_emitters=2, emitter_batch_size=8)
    return {"ga": q.MAPElites(ga, TASK, lineage=True), "cma": q.MAPElites(es, TASK)}


def _floats(tree):
    return jax.tree.leaves(eqx.filter(tree, eqx.is_inexact_array))


# The CMA emitter's case in the fast tier (the same law, a cheaper compile); both in the suite.
@pytest.mark.parametrize("name", [pytest.param("ga", marks=pytest.mark.slow), "cma"])
def test_ask_then_tell_is_exactly_step(name, getkey):
    algo = _algorithms()[name]
    key = getkey()
    start, _ = algo.init(TASK.init_genotypes(16, key=key), CELLS, key=key)
    run_key = getkey()
    ask, tell, update = (eqx.filter_jit(f) for f in (algo.ask, algo.tell, algo.update))
    score = eqx.filter_jit(TASK.__call__)
    state, stepped = start, start
    for k in jr.split(run_key, 5):
        genotypes, asked = ask(state, key=k)
        fitnesses, descriptors, extra = score(genotypes, key=asked.score_key)
        state, metrics, info = tell(state, asked, genotypes, descriptors, fitnesses, extra)
        stepped, _ = update(stepped, key=k)
    for a, b in zip(_floats(state), _floats(stepped), strict=True):
        assert bool(jnp.array_equal(a, b, equal_nan=True))
    # The whole run in one compiled scan: the GA's states equal to the bit. (A CMA emitter's
    # matrix algebra rounds differently in its last bit once fused into the scan, and its
    # search amplifies that, so a Python loop of `step` and `run` part ways for it too.)
    if name == "ga":
        expected, history = q.run(algo, start, 5, key=run_key)
        for a, b in zip(_floats(expected), _floats(state), strict=True):
            assert bool(jnp.array_equal(a, b, equal_nan=True))
        assert float(metrics.qd_score) == float(history.qd_score[-1])


def test_an_evaluation_outside_jax_with_failures(getkey):
    algo = _algorithms()["ga"]
    key = getkey()
    state, _ = algo.init(TASK.init_genotypes(16, key=key), CELLS, key=key)
    before = np.asarray(state.repertoire.fitnesses).copy()
    genotypes, asked = algo.ask(state, key=getkey())
    x = np.asarray(genotypes, np.float64)  # evaluated in NumPy, as a simulator would
    y = 10.0 * x - 5.0
    fitnesses = -(10.0 * x.shape[1] + np.sum(y**2 - 10.0 * np.cos(2.0 * np.pi * y), axis=1))
    descriptors = np.clip(x[:, :2], 0.0, 1.0)
    fitnesses[:4] = np.nan  # four evaluations failed
    state, _, info = algo.tell(
        state, asked, genotypes, jnp.asarray(descriptors, jnp.float32),
        jnp.asarray(fitnesses, jnp.float32),
    )  # fmt: skip
    assert not np.any(np.asarray(info.add_info.inserted)[:4])
    assert np.all(np.asarray(info.add_info.cell)[:4] == -1)
    assert np.all(np.asarray(state.repertoire.fitnesses) >= before)
    assert int(state.evaluations) == 32 and int(state.iteration) == 1


def test_tell_names_what_does_not_fit(getkey):
    algo = _algorithms()["ga"]
    key = getkey()
    state, _ = algo.init(TASK.init_genotypes(16, key=key), CELLS, key=key)
    genotypes, asked = algo.ask(state, key=getkey())
    with pytest.raises((ValueError, jaxtyping.TypeCheckError), match="descriptors"):
        algo.tell(state, asked, genotypes, jnp.zeros((16, 3)), jnp.zeros(16))
    with pytest.raises((TypeError, jaxtyping.TypeCheckError), match="asked"):
        algo.tell(state, None, genotypes, jnp.zeros((16, 2)), jnp.zeros(16))
