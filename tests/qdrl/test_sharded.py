"""The QD x RL library over meshes of 1, 2 and 4 CPU devices, in-process (conftest asks JAX for
4 host devices before it starts): ME-PBT's emitter and its exchange of the best agents, a state
read back onto a mesh, population training and data-parallel TD3 and PPO steps. The jobs over
devices are in `tests/jobs/test_jobs_on_devices.py`."""

import dataclasses

import default_emitters
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import eqx_qd as q


ENV = q.envs.PointMaze(length=30)
AGENT = q.rl.TD3(
    observation_size=2,
    action_size=2,
    policy_hidden=(16,),
    critic_hidden=(16,),
    minibatch_size=16,
    num_envs=2,
    buffer_size=200,
)
CONFIG = q.PBTEmitterConfig(
    pg_population_size=4, ga_population_size=2, num_training_iterations=2,
    fraction_best_to_replace_from=0.25, fraction_to_replace_from_best=0.25,
    fraction_to_replace_from_samples=0.25,
)  # fmt: skip


# In the slow tier: `test_me_pbt.py` keeps ME-PBT's invariants in the fast one, and the
# population tests below keep a mesh there.
@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 4])
def test_me_pbt_over_a_mesh_keeps_its_invariants(devices):
    assert len(jax.devices()) >= devices, "conftest asks for 4 host devices"
    config = dataclasses.replace(CONFIG, num_devices=devices)
    emitter = q.PBTEmitter(
        AGENT, ENV, config, AGENT.hparam_spaces, q.IsoLineVariation(0.01, 0.1), axis_name="p"
    )
    scorer = q.PolicyScorer(ENV, agent=AGENT)
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, lineage=True, axis_name="p")
    mesh = q.device_mesh(devices)
    cells = q.GridTessellation((6, 6), minval=-1.0, maxval=1.0)
    genotypes = emitter.initial_genotypes(6 * devices, key=jr.key(1))
    state, first = q.init_sharded(algo, genotypes, cells, mesh=mesh, key=jr.key(2))
    state, hist = q.run_sharded(algo, state, 3, mesh=mesh, key=jr.key(3))
    with pytest.raises(ValueError, match="run_sharded: num_iterations must be a positive integer"):
        q.run_sharded(algo, state, 0, mesh=mesh, key=jr.key(3))
    # Population size kept, per device.
    assert state.emitter_state.population.env_steps.shape == (devices, 4)
    # The repertoire is the same on every device and never loses a cell.
    filled, qd = np.asarray(hist.num_filled), np.asarray(hist.qd_score)
    assert (filled == filled[0]).all() and (qd == qd[0]).all()
    steps = [int(first.num_filled), *filled[0].tolist()]
    assert steps == sorted(steps)
    # Every device ends with the same best set (global counts: 0.25 of 4 agents per device).
    assert state.emitter_state.best_returns.shape[-1] == devices
    best = np.asarray(state.emitter_state.best_returns)
    assert (best == best[0]).all()
    hp = state.emitter_state.population.agent_state.hparams
    for name, space in AGENT.hparam_spaces.items():
        assert bool(jnp.all(space.contains(getattr(hp, name)))), name
    # Each device scores 6 candidates per iteration and 6 at init; ids count them all.
    assert int(state.evaluations) == devices * 6 * 4
    fit = np.asarray(state.repertoire.fitnesses)
    assert np.asarray(state.repertoire.extra)[np.isfinite(fit)].max() < int(state.evaluations)


@pytest.mark.slow  # (the fast tier's budget: issue 68)
def test_a_state_read_back_goes_on_the_mesh_again_and_runs_on():
    """`place_sharded` lays a whole host state (a checkpoint) out on the mesh, and
    `scan_sharded` with `run_sharded`'s keys continues it to the same state."""
    config = dataclasses.replace(CONFIG, num_devices=2)
    emitter = q.PBTEmitter(
        AGENT, ENV, config, AGENT.hparam_spaces, q.IsoLineVariation(0.01, 0.1), axis_name="p"
    )
    scorer = q.PolicyScorer(ENV, agent=AGENT)
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, lineage=True, axis_name="p")
    mesh = q.device_mesh(2)
    cells = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)
    genotypes = emitter.initial_genotypes(12, key=jr.key(1))
    state, _ = q.init_sharded(algo, genotypes, cells, mesh=mesh, key=jr.key(2))
    host = jax.tree.map(
        lambda x: np.asarray(x) if eqx.is_array(x) and x.dtype != jax.dtypes.prng_key else x, state
    )
    placed = q.internal.place_sharded(host, mesh=mesh)
    assert placed.emitter_state.population.env_steps.sharding.spec == P("p")
    direct, _ = q.run_sharded(algo, state, 2, mesh=mesh, key=jr.key(3))
    again, _ = q.internal.scan_sharded(algo, placed, mesh=mesh, keys=jr.split(jr.key(3), 2))
    assert bool(jnp.array_equal(direct.repertoire.fitnesses, again.repertoire.fitnesses))
    jaxtyping.config.update("jaxtyping_disable", True)  # the library's own check, as users meet it
    try:
        with pytest.raises(ValueError, match="scan_sharded: keys must be a 1-D array"):
            q.internal.scan_sharded(algo, placed, mesh=mesh, keys=jr.key(3))
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)
    unstacked = eqx.tree_at(
        lambda s: s.emitter_state, host, jax.tree.map(lambda x: x[0], host.emitter_state)
    )
    with pytest.raises(ValueError, match="place_sharded: state.emitter_state needs a leading"):
        q.internal.place_sharded(unstacked, mesh=mesh)


def test_population_training_splits_over_the_mesh():
    pop = q.rl.init_population(AGENT, ENV, None, 4, key=jr.key(5))
    pop, metrics = q.rl.train_population_sharded(
        AGENT, ENV, pop, 3, mesh=q.device_mesh(4), key=jr.key(6)
    )
    # A population of 4 agents split over the devices: each stepped 2 envs x 3 iterations.
    assert np.asarray(pop.env_steps).tolist() == [6, 6, 6, 6]
    assert metrics.reward.shape == (4, 3)
    # The population it returns meets the program the first call compiled (it is laid out on
    # the mesh the way the first call's input was put): no compile on the second call.
    compiles = []
    listen = lambda name, secs, **kw: compiles.append(name) if "backend_compile" in name else None
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        mesh = q.device_mesh(4)
        pop, _ = q.rl.train_population_sharded(AGENT, ENV, pop, 3, mesh=mesh, key=jr.key(7))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiles == [] and np.asarray(pop.env_steps).tolist() == [12, 12, 12, 12]
    with pytest.raises(ValueError, match="does not split"):
        q.rl.train_population_sharded(AGENT, ENV, pop, 1, mesh=q.device_mesh(3), key=jr.key(0))


@pytest.mark.slow
def test_population_training_does_not_depend_on_the_layout():
    """Each member trains with the key `train_population` gives it, wherever it lies: over 1,
    2 or 4 devices, the same population."""
    pop = q.rl.init_population(AGENT, ENV, None, 4, key=jr.key(5))
    one, _ = q.rl.train_population(AGENT, ENV, pop, 3, key=jr.key(6))
    for devices in (2, 4):
        split, _ = q.rl.train_population_sharded(
            AGENT, ENV, pop, 3, mesh=q.device_mesh(devices), key=jr.key(6)
        )
        for a, b in zip(jax.tree.leaves(eqx.filter(one, eqx.is_array)),
                        jax.tree.leaves(eqx.filter(split, eqx.is_array))):  # fmt: skip
            if jnp.issubdtype(a.dtype, jnp.floating):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(a, b)


def test_a_data_parallel_td3_step_is_the_whole_minibatch_s_step():
    """`TD3.update(axis_name=...)` under `shard_map`, each of 4 devices holding a quarter of a
    minibatch of 16, is the step on the whole minibatch (smoothing noise off: it is drawn per
    share) and leaves every device's state equal; without the axis each device steps alone."""
    h = q.rl.TD3HParams(policy_noise=0.0)
    state = AGENT.init(h, key=jr.key(0))
    k = jr.split(jr.key(1), 4)
    batch = q.envs.Transition(
        jr.normal(k[0], (16, 2)), jr.uniform(k[1], (16, 2), minval=-1.0, maxval=1.0),
        jr.normal(k[2], (16,)), jr.normal(k[3], (16, 2)),
        (jnp.arange(16) % 5 == 0).astype(jnp.float32), jnp.zeros(16),
    )  # fmt: skip
    whole, _ = AGENT.update(state, batch, key=jr.key(2))  # critic, policy and targets (step 0)
    mesh = q.device_mesh(4)

    def on_devices(axis_name):
        def body(share):
            s, _ = AGENT.update(state, share, axis_name=axis_name, key=jr.key(2))
            return jax.tree.map(lambda x: x[None], eqx.filter(s, eqx.is_array))

        mapped = jax.shard_map(body, mesh=mesh, in_specs=P("p"), out_specs=P("p"), check_vma=False)
        return jax.jit(mapped)(batch)

    synced, alone = on_devices("p"), on_devices(None)
    pairs = zip(jax.tree.leaves(eqx.filter(whole, eqx.is_array)), jax.tree.leaves(synced))
    for want, got in pairs:
        got = np.asarray(got)
        for device in range(1, 4):
            np.testing.assert_array_equal(got[device], got[0])
        np.testing.assert_allclose(got[0], np.asarray(want), rtol=1e-5, atol=1e-6)
    first_critic_layer = np.asarray(jax.tree.leaves(alone.critic)[0])
    assert not np.allclose(first_critic_layer[0], first_critic_layer[1])


def test_data_parallel_ppo_epochs_are_the_whole_batch_s():
    """PPO's actor and critic epochs with `axis_name`, each of 4 devices holding a quarter of
    the samples (one minibatch, one epoch), take the step of the whole batch: gradients,
    losses, advantage statistics and KL averaged over the devices. The observation
    normaliser folds every device's batch in as one."""
    from eqx_qd.rl._ppo_losses import _actor_epochs, _critic_epochs, _Samples

    agent = q.rl.IPPO.for_env(
        q.envs.TimeLimit(q.envs.LineTargets(n=2, size=8), 16), shared_params=True,
        rollout_length=8, num_envs=4, num_minibatches=1, actor_epochs=1, critic_epochs=1,
    )  # fmt: skip
    state = agent.init(q.rl.PPOHParams(actor_lr=3e-2, critic_lr=3e-2), key=jr.key(0))
    k = jr.split(jr.key(1), 5)
    data = _Samples(
        jr.normal(k[0], (32, 3)), jr.randint(k[1], (32,), 0, 3), -jr.uniform(k[2], (32,)),
        jr.normal(k[3], (32,)), jr.normal(k[4], (32,)),
    )  # fmt: skip
    h, mesh = state.hparams, q.device_mesh(4)
    actor = lambda d, axis: _actor_epochs(
        state.actor, state.actor_opt_state, d, h, num_minibatches=1, max_epochs=1,
        normalise_advantages=True, axis_name=axis, key=jr.key(2),
    )[0]  # fmt: skip
    critic = lambda d, axis: _critic_epochs(
        state.critic, state.critic_opt_state, d, h, num_minibatches=1, epochs=1,
        axis_name=axis, key=jr.key(3),
    )[0]  # fmt: skip
    normaliser = q.rl.RunningNormaliser.create(3).update(jnp.ones((5, 3)))
    folded = lambda d, axis: normaliser.update(d.obs, axis_name=axis)

    for fn in (actor, critic, folded):
        whole = fn(data, None)

        def body(share, fn=fn):
            return jax.tree.map(lambda x: x[None], eqx.filter(fn(share, "p"), eqx.is_array))

        mapped = jax.shard_map(body, mesh=mesh, in_specs=P("p"), out_specs=P("p"), check_vma=False)
        split = jax.jit(mapped)(data)
        for want, got in zip(jax.tree.leaves(eqx.filter(whole, eqx.is_array)),
                             jax.tree.leaves(split)):  # fmt: skip
            got = np.asarray(got)
            for device in range(1, 4):
                np.testing.assert_array_equal(got[device], got[0])
            np.testing.assert_allclose(got[0], np.asarray(want), rtol=2e-5, atol=1e-6)


def _update_on_mesh(emitter, state, mesh, fitnesses, key, *, default_generator=False):
    """`emitter.state_update` of `state`'s emitter state on every device of `mesh`, with
    `fitnesses` (`(devices, batch)`: per device, the GA children then the agents) and
    stand-in candidates at descriptor 0 (unused by the update)."""
    dyn, static = eqx.partition(state.emitter_state, eqx.is_array)
    batch = fitnesses.shape[1]

    def body(d, repertoire, f, k):
        local = eqx.combine(jax.tree.map(lambda x: x[0], d), static)
        stand_ins = q.internal.tree_slice(repertoire.genotypes, 0, batch)
        descriptors = jnp.zeros((batch, 2), jnp.float32)
        info = repertoire.add(stand_ins, descriptors, f[0])[1]
        new = emitter.state_update(
            local, repertoire, stand_ins, descriptors, f[0], None, add_info=info, key=k
        )
        return jax.tree.map(lambda x: x[None], eqx.filter(new, eqx.is_array))

    specs = dict(in_specs=(P("p"), P(), P("p"), P()), out_specs=P("p"), check_vma=False)
    mapped = jax.shard_map(body, mesh=mesh, **specs)
    args = (dyn, state.repertoire, fitnesses, key)
    out = (
        default_emitters.call(mapped, *args) if default_generator else eqx.filter_jit(mapped)(*args)
    )
    return eqx.combine(out, static)


@pytest.mark.slow  # (the fast tier's budget: issue 68)
def test_the_exchange_ranks_agents_over_all_devices():
    """Counts are global (QDax's): with 2 agents per device and 0.25 of 4 agents replaced from
    the best and 0.25 from samples, both replacements fall on the device holding the two worst
    agents, and the other device keeps its agents (learning rates pinned at 0, so the genomes
    show what was copied)."""
    frozen = {"policy_lr": q.rl.Uniform(0.0, 0.0), "critic_lr": q.rl.Uniform(0.0, 0.0),
              "expl_noise": q.rl.Uniform(0.0, 0.2)}  # fmt: skip
    config = dataclasses.replace(CONFIG, pg_population_size=2, ga_population_size=1, num_devices=2)
    assert config.counts() == (1, 1, 1)
    emitter = q.PBTEmitter(AGENT, ENV, config, frozen, q.IsoLineVariation(0.01, 0.1), axis_name="p")
    scorer = q.PolicyScorer(ENV, agent=AGENT)
    algo = q.MAPElites(emitter, scorer, scorer.qd_offset, axis_name="p")
    mesh = q.device_mesh(2)
    cells = q.GridTessellation((6, 6), minval=-1.0, maxval=1.0)
    genotypes = emitter.initial_genotypes(6, key=jr.key(1))
    state, _ = q.init_sharded(algo, genotypes, cells, mesh=mesh, key=jr.key(2))
    state, _ = q.run_sharded(algo, state, 1, mesh=mesh, key=jr.key(3))  # fill the buffers
    before = state.emitter_state
    # Per device: one GA child, then the 2 PBT agents. Global order: (1, 0) best, (1, 1),
    # (0, 1), and (0, 0) (NaN) worst.
    fitnesses = jnp.asarray([[0.0, jnp.nan, 1.0], [0.0, 5.0, 3.0]], jnp.float32)
    after = _update_on_mesh(emitter, state, mesh, fitnesses, jr.key(4))
    static = eqx.filter(before, eqx.is_array, inverse=True)

    def genome(es, device, i):
        agent_state = jax.tree.map(lambda x: x[device, i], es.population.agent_state)
        return AGENT.genome(eqx.combine(agent_state, static.population.agent_state))

    same = lambda a, b: bool(eqx.tree_equal(a, b))
    assert same(genome(after, 0, 0), genome(before, 1, 0))  # the worst took the best's weights
    assert not same(genome(after, 0, 1), genome(before, 0, 1))  # a repertoire sample
    assert same(genome(after, 1, 0), genome(before, 1, 0))  # device 1 keeps both agents
    assert same(genome(after, 1, 1), genome(before, 1, 1))
    assert np.asarray(after.best_returns).tolist() == [[5.0], [5.0]]


@pytest.mark.slow  # (the fast tier's budget: issue 68)
def test_the_chunked_exchange_finds_the_same_best_set_whatever_the_chunk():
    """QDax's `fraction_sort_exchange`: the best set gathered one local rank at a time (4
    steps of 2 devices x 1 agent, with ties in the returns) is the one-step gather's, in the
    same order, and the whole update after it is equal bit for bit."""
    results = []
    for fraction in (1.0, 0.25):
        config = dataclasses.replace(
            CONFIG, pg_population_size=4, ga_population_size=1, num_devices=2,
            fraction_best_to_replace_from=0.5, fraction_to_replace_from_best=0.25,
            fraction_to_replace_from_samples=0.25, fraction_sort_exchange=fraction,
        )  # fmt: skip
        assert config.counts() == (4, 2, 2)
        emitter = q.PBTEmitter(
            AGENT, ENV, config, AGENT.hparam_spaces, q.IsoLineVariation(0.01, 0.1), axis_name="p"
        )
        scorer = q.PolicyScorer(ENV, agent=AGENT)
        algo = q.MAPElites(emitter, scorer, scorer.qd_offset, axis_name="p")
        mesh = q.device_mesh(2)
        cells = q.GridTessellation((6, 6), minval=-1.0, maxval=1.0)
        genotypes = emitter.initial_genotypes(10, key=jr.key(1))
        state, _ = q.init_sharded(algo, genotypes, cells, mesh=mesh, key=jr.key(2))
        # Per device: a GA child, then 4 agents; ties at 3.0 across devices and within one.
        fitnesses = jnp.asarray(
            [[0.0, 3.0, 1.0, 3.0, 2.0], [0.0, 3.0, 7.0, jnp.nan, 3.0]], jnp.float32
        )
        # XLA's default fusion code generator: the chunked and one-step updates agree bit for
        # bit under it (under the older one, the suite's, the explored learning rates to rounding).
        update = _update_on_mesh(emitter, state, mesh, fitnesses, jr.key(4), default_generator=True)
        results.append(update)
    one_step, chunked = results
    assert np.asarray(one_step.best_returns).tolist() == [[7.0, 3.0, 3.0, 3.0]] * 2
    assert bool(eqx.tree_equal(one_step, chunked))
    with pytest.raises(ValueError, match="fraction_sort_exchange"):
        dataclasses.replace(CONFIG, fraction_sort_exchange=0.0)
