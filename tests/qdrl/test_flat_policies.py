"""`FlatPolicyTask`: policies as flat parameter vectors, for the ES emitters."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q


ENV = q.envs.PointMaze(length=20)
POLICY = q.rl.DeterministicPolicy(ENV.observation_size, ENV.action_size, (8, 8), key=jr.key(0))
TASK = q.FlatPolicyTask(ENV, POLICY)
SCORE = eqx.filter_jit(lambda task, g, k: task(g, key=k))


def test_a_genotype_is_the_policy_s_parameters_and_scores_as_the_policy(getkey):
    sizes = [x.size for x in jax.tree.leaves(eqx.filter(POLICY, eqx.is_array))]
    assert TASK.genotype_dim == sum(sizes)
    assert TASK.num_descriptors == ENV.descriptor_size
    assert TASK.qd_offset == q.PolicyScorer(ENV).qd_offset
    policies = eqx.filter_vmap(
        lambda k: q.rl.DeterministicPolicy(ENV.observation_size, ENV.action_size, (8, 8), key=k)
    )(jr.split(getkey(), 3))
    genotypes = jax.vmap(TASK.flatten)(policies)
    assert genotypes.shape == (3, TASK.genotype_dim)
    # Unravelled, the rows are the same policies, which score as the PolicyScorer scores them.
    assert eqx.tree_equal(TASK.policies(genotypes), policies)
    key = getkey()
    fitnesses, descriptors, _ = SCORE(TASK, genotypes, key)
    want_f, want_d, _ = eqx.filter_jit(lambda p, k: q.PolicyScorer(ENV)(p, key=k))(policies, key)
    np.testing.assert_allclose(fitnesses, want_f, rtol=1e-6)
    np.testing.assert_allclose(descriptors, want_d, rtol=1e-6)
    start = TASK.init_genotypes(2, key=getkey())
    np.testing.assert_array_equal(start, jnp.stack([TASK.flatten(POLICY)] * 2))


@pytest.mark.slow
def test_the_es_emitters_search_policies_through_it(getkey):
    emitter = q.EvolutionStrategyEmitter(
        jnp.zeros(TASK.genotype_dim), 0.2, num_emitters=2, emitter_batch_size=8,
        ranker="imp", selection_rule="mu", restart_rule="basic", es="lm_ma_es",
    )  # fmt: skip
    algo = q.MAPElites(emitter, TASK, archive_learning_rate=0.1, threshold_min=0.0)
    cells = q.GridTessellation((5, 5), *TASK.descriptor_bounds)
    state, _ = algo.init(TASK.init_genotypes(1, key=getkey()), cells, key=getkey())
    state, metrics = q.run(algo, state, 8, key=getkey())
    assert int(state.elites.num_filled) > 1
    assert bool(jnp.all(jnp.isfinite(metrics.qd_score)))


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"FlatPolicyTask: genotypes"):
        TASK.policies(jnp.zeros((2, TASK.genotype_dim + 1)))
    with pytest.raises(ValueError, match=r"template policy has no array parameters"):
        q.FlatPolicyTask(ENV, eqx.nn.Lambda(jnp.tanh))
