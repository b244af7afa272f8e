import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_qd as q


ENV = q.envs.PointMaze(length=30)
AGENT = q.rl.TD3(observation_size=2, action_size=2, policy_hidden=(16,), critic_hidden=(16,),
              minibatch_size=16, num_envs=2, buffer_size=500)  # fmt: skip
CONFIG = q.PBTEmitterConfig(
    pg_population_size=4, ga_population_size=4, num_training_iterations=3,
    fraction_best_to_replace_from=0.25, fraction_to_replace_from_best=0.25,
    fraction_to_replace_from_samples=0.25,
)  # fmt: skip


def test_config_counts_and_errors():
    assert CONFIG.counts() == (1, 1, 1)
    assert q.PBTEmitterConfig().counts() == (1, 2, 4)  # QDax's fractions with 10 agents
    with pytest.raises(ValueError, match="rounds to 0 agents"):
        q.PBTEmitterConfig(pg_population_size=4)  # 0.1 x 4 -> 0: QDax's opaque failure
    with pytest.raises(ValueError, match="12 agents, more than the 10 PBT agents"):
        q.PBTEmitterConfig(fraction_to_replace_from_best=0.7, fraction_to_replace_from_samples=0.5)
    # Counts are global, as QDax's: 4 devices x 10 agents draw copies from the best 4, not 1.
    assert q.PBTEmitterConfig(num_devices=4).counts() == (4, 8, 16)
    q.PBTEmitterConfig(pg_population_size=4, num_devices=4)  # 0.1 x 16 -> 1: fine over 4 devices
    # Copies from the best need a best set; with no copies from the best, none is needed.
    with pytest.raises(ValueError, match="fraction_best_to_replace_from must be positive"):
        q.PBTEmitterConfig(fraction_best_to_replace_from=0.0, fraction_to_replace_from_best=0.1)
    no_best = q.PBTEmitterConfig(
        fraction_best_to_replace_from=0.0, fraction_to_replace_from_best=0.0
    )
    assert no_best.counts() == (0, 0, 4)
    # The replaced bands may take every agent, and not one more.
    full = q.PBTEmitterConfig(
        fraction_to_replace_from_best=0.5, fraction_to_replace_from_samples=0.5
    )
    assert full.counts() == (1, 5, 5) and full.total_agents == 10


def test_the_emitter_checks_agent_environment_and_spaces_against_each_other():
    iso = q.IsoLineVariation(0.01, 0.1)
    wide = q.rl.TD3(observation_size=3, action_size=2, policy_hidden=(8,), critic_hidden=(8,))
    with pytest.raises(ValueError, match="observation_size is 3 but the environment's is 2"):
        q.PBTEmitter(wide, ENV, CONFIG, AGENT.hparam_spaces, iso)
    with pytest.raises(ValueError, match="PBTEmitter: the hyperparameter spaces are empty"):
        q.PBTEmitter(AGENT, ENV, CONFIG, {}, iso)
    with pytest.raises(
        ValueError, match=r"spaces name \['alpha_lr'\], which TD3HParams does not have"
    ):
        q.PBTEmitter(AGENT, ENV, CONFIG, {"alpha_lr": q.rl.Uniform(1e-4, 1e-3)}, iso)
    q.PBTEmitter(AGENT, ENV, CONFIG, {"policy_lr": q.rl.LogUniform(1e-4, 1e-3)}, iso)  # fine
    # A config for several devices needs the mesh axis it runs over.
    two = q.PBTEmitterConfig(num_devices=2)
    with pytest.raises(ValueError, match="config.num_devices is 2 but no axis_name"):
        q.PBTEmitter(AGENT, ENV, two, AGENT.hparam_spaces, iso)
    q.PBTEmitter(AGENT, ENV, two, AGENT.hparam_spaces, iso, axis_name="p")


@pytest.mark.slow  # ME-PBT's contract over an agent stays in the fast tier (test_contract)
def test_me_pbt_keeps_its_invariants(getkey):
    emitter = q.PBTEmitter(AGENT, ENV, CONFIG, AGENT.hparam_spaces, q.IsoLineVariation(0.01, 0.1))
    scorer = q.PolicyScorer(ENV, agent=AGENT)
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, lineage=True)
    cells = q.GridTessellation((6, 6), minval=-1.0, maxval=1.0)
    genotypes = emitter.initial_genotypes(8, key=getkey())
    assert genotypes.policy_opt_state is None
    # The initial population must hold the PBT agents: exactly pg_population_size is enough.
    first = lambda n: q.internal.tree_take(genotypes, jnp.arange(n))
    eqx.filter_eval_shape(algo.init, first(4), cells, key=getkey())
    with pytest.raises(ValueError, match=r"initial population \(3\) must hold at least"):
        eqx.filter_eval_shape(algo.init, first(3), cells, key=getkey())
    state, first = eqx.filter_jit(algo.init)(genotypes, cells, key=getkey())
    step = eqx.filter_jit(lambda s, k: algo.step(s, key=k))
    filled = [int(first.num_filled)]
    for _ in range(3):
        before = state.repertoire
        state, metrics, info = step(state, getkey())
        filled.append(int(metrics.num_filled))
        # A filled cell stays filled and never gets worse.
        was = np.isfinite(np.asarray(before.fitnesses))
        assert np.all(
            np.asarray(state.repertoire.fitnesses)[was] >= np.asarray(before.fitnesses)[was]
        )
    assert filled == sorted(filled) and filled[-1] >= 1
    assert int(state.emitter_state.training_env_steps) > 0
    pop = state.emitter_state.population
    assert pop.env_steps.shape == (4,)
    assert pop.agent_state.policy_opt_state is None  # stored without optimiser states
    for name, space in AGENT.hparam_spaces.items():
        assert bool(jnp.all(space.contains(getattr(pop.agent_state.hparams, name))))
    kinds = np.asarray(info.emit_extra.kind)
    assert kinds[:4].tolist() == [q.Origin.EVO] * 4
    assert kinds[4:].tolist() == [q.Origin.GRADIENT] * 4
    # Every agent (copies too) stepped 2 envs x 3 training iterations in each of 3 steps.
    assert pop.env_steps.tolist() == [2 * 3 * 3] * 4
    assert q.internal.bytes_per_cell(state.repertoire) > 0
    assert jax.tree.structure(state.repertoire.genotypes) == jax.tree.structure(genotypes)


# ----------------------------------------------------------------------------- the exchange step
# Learning rates pinned at 0 (a space of one value): training moves no network, so after
# `state_update` each slot's genome shows where it came from.
FROZEN = {
    "policy_lr": q.rl.Uniform(0.0, 0.0),
    "critic_lr": q.rl.Uniform(0.0, 0.0),
    "expl_noise": q.rl.Uniform(0.0, 0.2),
}


def _genome_of(population, i):
    return AGENT.genome(q.internal.tree_take(population.agent_state, i))


@pytest.mark.slow  # (the fast tier's budget: issue 68)
def test_the_exchange_copies_the_best_and_samples_the_repertoire(getkey):
    emitter = q.PBTEmitter(AGENT, ENV, CONFIG, FROZEN, q.IsoLineVariation(0.01, 0.1))
    scorer = q.PolicyScorer(ENV, agent=AGENT)
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, lineage=True)
    cells = q.GridTessellation((6, 6), minval=-1.0, maxval=1.0)
    genotypes = emitter.initial_genotypes(8, key=getkey())
    state, _ = eqx.filter_jit(algo.init)(genotypes, cells, key=getkey())
    # No replacement has happened yet: an empty best set of the configured size (1 agent).
    best = np.asarray(state.emitter_state.best_returns)
    assert best.shape == (1,) and np.all(np.isneginf(best))
    state, _ = eqx.filter_jit(lambda s, k: algo.update(s, key=k))(state, getkey())  # fill buffers
    before = state.emitter_state
    # GA children first, then the 4 PBT agents: best 2, then 3, then 0, and 1 (NaN) worst.
    fitnesses = jnp.asarray([0.0, 0.0, 0.0, 0.0, 1.0, jnp.nan, 5.0, 3.0], jnp.float32)
    descriptors = jnp.zeros((8, 2), jnp.float32)
    emit = eqx.filter_jit(lambda r, s, k: emitter.emit(r, s, key=k))  # eagerly: 100 compiles
    genotypes, extra = emit(state.repertoire, before, getkey())
    # GA children name their two parents (repertoire ids); PBT agents have none (-1).
    np.testing.assert_array_equal(np.asarray(extra.parent1)[4:], [-1] * 4)
    np.testing.assert_array_equal(np.asarray(extra.parent2)[4:], [-1] * 4)
    assert np.all(np.asarray(extra.parent1)[:4] >= 0) and np.all(np.asarray(extra.parent2)[:4] >= 0)
    np.testing.assert_array_equal(
        np.asarray(extra.kind), [int(q.Origin.EVO)] * 4 + [int(q.Origin.GRADIENT)] * 4
    )
    ids = jnp.zeros((8,), jnp.int32)  # the repertoire stores lineage ids
    info = state.repertoire.add(genotypes, descriptors, fitnesses, ids)[1]
    update = eqx.filter_jit(
        lambda s, r, g, d, f, e, k: emitter.state_update(s, r, g, d, f, e, add_info=info, key=k)
    )
    after = update(before, state.repertoire, genotypes, descriptors, fitnesses, extra, getkey())
    old, new = before.population, after.population
    same = lambda a, b: bool(eqx.tree_equal(a, b))
    # Agent 1 (the worst) is a copy of agent 2 (the best), its replay buffer included.
    assert same(_genome_of(new, 1), _genome_of(old, 2))
    n = int(old.buffer.size[0])
    assert n > 0
    assert same(
        jax.tree.map(lambda x: x[1, :n], new.buffer.data),
        jax.tree.map(lambda x: x[2, :n], old.buffer.data),
    )
    # Agent 0 (second worst) took a repertoire elite's agent state and kept its own buffer.
    filled = np.flatnonzero(np.isfinite(np.asarray(state.repertoire.fitnesses)))
    elites = [
        AGENT.genome(q.internal.tree_take(state.repertoire.genotypes, int(c))) for c in filled
    ]
    assert any(same(_genome_of(new, 0), e) for e in elites)
    assert not same(_genome_of(new, 0), _genome_of(old, 0))
    assert same(
        jax.tree.map(lambda x: x[0, :n], new.buffer.data),
        jax.tree.map(lambda x: x[0, :n], old.buffer.data),
    )
    # The best and the third are kept, hyperparameters included; the replaced are redrawn.
    noise_old = np.asarray(old.agent_state.hparams.expl_noise)
    noise_new = np.asarray(new.agent_state.hparams.expl_noise)
    for i in (2, 3):
        assert same(_genome_of(new, i), _genome_of(old, i)) and noise_new[i] == noise_old[i]
    assert noise_new[1] != noise_old[2] and noise_new[0] != noise_old[0]
    np.testing.assert_array_equal(np.asarray(after.best_returns), [5.0])  # one slot, as configured
    # Storage form before and after; every agent trained 3 iterations of 2 environments.
    assert new.agent_state.target_policy is None and new.agent_state.policy_opt_state is None
    assert int(after.training_env_steps) == int(before.training_env_steps) + 4 * 3 * 2
    # A scored batch that does not fit is refused at trace time, naming the argument.
    bad = [
        (fitnesses[:7], descriptors[:7], r"state_update: fitnesses must have shape \(8,\)"),
        (fitnesses, jnp.zeros((8, 3)), r"state_update: descriptors must have shape \(batch, 2\)"),
        # (jaxtyping, on under pytest, names this one first, as a TypeError.)
        (fitnesses[:, None], descriptors, r"fitnesses"),
    ]  # fmt: skip
    for f, d, message in bad:
        with pytest.raises((ValueError, TypeError), match=message):
            update(before, state.repertoire, genotypes, d, f, extra, getkey())
    with pytest.raises(ValueError, match=r"PBTEmitter.init: descriptors"):
        emitter.init(state.repertoire, genotypes, jnp.zeros((8, 3)), fitnesses, None, key=getkey())


@pytest.mark.parametrize(
    "pg, ga, fractions",
    [(10, 0, (0.1, 0.2, 0.4)), (10, 1, (0.1, 0.2, 0.4)), (4, 3, (0.5, 0.25, 0.25))],
)
def test_state_and_batch_shapes_follow_the_config(pg, ga, fractions):
    # Abstract evaluation (traced, never compiled): the best set holds counts()[0] returns from
    # init through state_update, and emit returns ga children + pg agents, for ga = 0 and 1 too.
    config = q.PBTEmitterConfig(
        pg_population_size=pg, ga_population_size=ga, num_training_iterations=1,
        fraction_best_to_replace_from=fractions[0], fraction_to_replace_from_best=fractions[1],
        fraction_to_replace_from_samples=fractions[2],
    )  # fmt: skip
    emitter = q.PBTEmitter(AGENT, ENV, config, FROZEN, q.IsoLineVariation(0.01, 0.1))
    cells = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)
    n = pg + ga

    def round_trip(key):
        init_key, emit_key, update_key = jax.random.split(key, 3)
        genotypes = emitter.initial_genotypes(n, key=init_key)
        rep = q.MAPElitesRepertoire.empty(cells, q.internal.tree_take(genotypes, 0))
        scores = jnp.zeros((n, 2)), jnp.zeros((n,))
        state = emitter.init(rep, genotypes, *scores, None, key=init_key)
        batch, extra = emitter.emit(rep, state, key=emit_key)
        info = rep.add(batch, *scores)[1]
        after = emitter.state_update(
            state, rep, batch, *scores, extra, add_info=info, key=update_key
        )
        return state, batch, after

    state, batch, after = eqx.filter_eval_shape(round_trip, jax.random.key(0))
    num_best = config.counts()[0]
    assert state.best_returns.shape == after.best_returns.shape == (num_best,)
    assert {x.shape[0] for x in jax.tree.leaves(batch)} == {n}


@pytest.mark.slow  # (the fast tier's budget: issue 68)
def test_qdax_bands_give_the_agent_at_the_threshold_a_sample_and_the_best_s_buffer(getkey):
    """QDax's rule (`bands="qdax"`): with one best copy and one sample of 4 agents, the worst
    agent is in both bands (a repertoire sample's weights with the best's replay buffer: k - 1
    = 0 pure best copies and one hybrid), the next worst takes a sample and keeps its buffer."""
    config = q.PBTEmitterConfig(
        pg_population_size=4, ga_population_size=4, num_training_iterations=3,
        fraction_best_to_replace_from=0.25, fraction_to_replace_from_best=0.25,
        fraction_to_replace_from_samples=0.25, bands="qdax",
    )  # fmt: skip
    emitter = q.PBTEmitter(AGENT, ENV, config, FROZEN, q.IsoLineVariation(0.01, 0.1))
    scorer = q.PolicyScorer(ENV, agent=AGENT)
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, lineage=True)
    cells = q.GridTessellation((6, 6), minval=-1.0, maxval=1.0)
    state, _ = eqx.filter_jit(algo.init)(
        emitter.initial_genotypes(8, key=getkey()), cells, key=getkey()
    )
    state, _ = eqx.filter_jit(lambda s, k: algo.update(s, key=k))(state, getkey())
    before = state.emitter_state
    fitnesses = jnp.asarray([0.0, 0.0, 0.0, 0.0, 1.0, -2.0, 5.0, 3.0], jnp.float32)
    genotypes, extra = eqx.filter_jit(lambda r, s, k: emitter.emit(r, s, key=k))(
        state.repertoire, before, getkey()
    )
    descriptors = jnp.zeros((8, 2), jnp.float32)
    info = state.repertoire.add(genotypes, descriptors, fitnesses, jnp.zeros((8,), jnp.int32))[1]
    after = eqx.filter_jit(
        lambda s, r, g, d, f, e, k: emitter.state_update(s, r, g, d, f, e, add_info=info, key=k)
    )(before, state.repertoire, genotypes, descriptors, fitnesses, extra, getkey())
    old, new = before.population, after.population
    same = lambda a, b: bool(eqx.tree_equal(a, b))  # noqa: E731
    filled = np.flatnonzero(np.isfinite(np.asarray(state.repertoire.fitnesses)))
    elites = [
        AGENT.genome(q.internal.tree_take(state.repertoire.genotypes, int(c))) for c in filled
    ]
    n = int(old.buffer.size[0])
    buffer = lambda p, i: jax.tree.map(lambda x: x[i, :n], p.buffer.data)  # noqa: E731
    # Agent 1 (-2, the worst): a sample's weights, the best's (agent 2's) buffer.
    assert any(same(_genome_of(new, 1), e) for e in elites)
    assert not same(_genome_of(new, 1), _genome_of(old, 2))  # not the whole best copy
    assert same(buffer(new, 1), buffer(old, 2))
    # Agent 0 (1.0): a sample's weights, its own buffer. Agents 2 and 3 are kept.
    assert any(same(_genome_of(new, 0), e) for e in elites)
    assert same(buffer(new, 0), buffer(old, 0))
    for i in (2, 3):
        assert same(_genome_of(new, i), _genome_of(old, i))
    with pytest.raises(ValueError, match="bands"):
        q.PBTEmitterConfig(bands="overlapping")
