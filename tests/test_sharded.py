"""ME-PBT over meshes of 1, 2 and 4 CPU devices, in-process (conftest asks JAX for 4 host
devices before it starts), and the command's ``--devices`` in a fresh process (the one place a
subprocess is needed: the device count is fixed when JAX starts)."""

import dataclasses
import subprocess
import sys
from unittest import mock

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import numpy as np
import pytest
from hypothesis import given, strategies as st
from jax.sharding import PartitionSpec as P
from launched import launched_env

import eqx_qd as q
from eqx_qd.cli import main


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


PBT_JOB = dict(
    population_size=4, rounds=2, agent="td3", iterations_per_round=3, num_envs=2, hidden=(8,),
    minibatch_size=8, buffer_size=200, episode_length=20, eval_episodes=2, best_fraction=0.25,
    worse_fraction=0.25,
)  # fmt: skip


def test_the_pbt_job_over_four_devices_equals_one_device(tmp_path, monkeypatch):
    """`devices = 4`: one member per device, PBT over all of them (a copy moves its whole run);
    every logged number and the final population as on one device. The run, resumed for a
    third round with the device count left to the job on a machine of 2 cores (2 devices: the
    population splits anew), still is one device's."""
    from eqx_qd import jobs
    from eqx_qd.jobs import _distributed

    one = jobs.run(
        jobs.PBTConfig(**{**PBT_JOB, "rounds": 3}, devices=1),
        tmp_path / "one",
        progress=False,
        plots=False,
    )
    assert len(one.state.buffer.data.obs.sharding.device_set) == 1
    four = jobs.run(
        jobs.PBTConfig(**PBT_JOB, devices=4), tmp_path / "four", progress=False, plots=False
    )
    buffer = four.state.buffer.data.obs  # each member's replay buffer on its own device
    assert len(buffer.sharding.device_set) == 4
    assert len(four.progress["round"]) == 2
    monkeypatch.setattr(_distributed, "usable_cores", lambda: 2)
    two = jobs.run(
        jobs.PBTConfig(**{**PBT_JOB, "rounds": 3}),
        tmp_path / "four",
        progress=False,
        plots=False,
        resume=True,
    )
    assert two.config.devices is None
    assert len(two.state.buffer.data.obs.sharding.device_set) == 2
    for column in one.progress:
        if column != "wall_s":
            np.testing.assert_allclose(one.progress[column], two.progress[column], rtol=1e-5)
    for column in one.tables["hparams"]:
        np.testing.assert_allclose(
            one.tables["hparams"][column], two.tables["hparams"][column], rtol=1e-5
        )
    for a, b in zip(jax.tree.leaves(eqx.filter(one.state, eqx.is_array)),
                    jax.tree.leaves(eqx.filter(two.state, eqx.is_array))):  # fmt: skip
        if jnp.issubdtype(a.dtype, jnp.floating):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"devices \(3\) must divide population_size \(4\)"):
        jobs.PBTConfig(**PBT_JOB, devices=3)


@given(
    population=st.integers(1, 64), devices=st.integers(1, 8), cores=st.integers(1, 16),
    requested=st.none() | st.integers(1, 8),
)  # fmt: skip
def test_a_population_job_takes_the_most_devices_that_divide_it(
    population, devices, cores, requested
):
    """`population_devices`: a count given is kept; left to the job, the largest divisor of
    the population among the run's devices, at most one per core on a CPU."""
    from eqx_qd.jobs import _distributed

    with (
        mock.patch.object(_distributed, "usable_cores", lambda: cores),
        mock.patch.object(_distributed.jax, "device_count", lambda: devices),
    ):
        n = _distributed.population_devices(requested, population)
    if requested is not None:
        assert n == requested
    else:
        fits = [d for d in range(1, min(devices, cores) + 1) if population % d == 0]
        assert n == max(fits) and population % n == 0


def test_a_multi_process_population_job_takes_every_device_or_names_the_mismatch():
    from eqx_qd.jobs import _distributed

    with (
        mock.patch.object(_distributed.jax, "process_count", lambda: 2),
        mock.patch.object(_distributed.jax, "device_count", lambda: 3),
    ):
        assert _distributed.population_devices(None, 6) == 3
        assert _distributed.population_devices(2, 8) == 2  # given: job_mesh checks it
        with pytest.raises(ValueError, match=r"population_size \(8\) must be a multiple of "
                           r"the run's 3 devices: a run of several processes"):  # fmt: skip
            _distributed.population_devices(None, 8)


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
    from eqx_qd.rl._ppo import _actor_epochs, _critic_epochs, _Samples

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


IPPO_TINY = dict(
    num_agents=2,
    size=8,
    episode_length=16,
    num_envs=32,
    rollout_length=32,
    num_minibatches=4,
    iterations=40,
    eval_frequency=20,
    eval_episodes=32,
    actor_lr=3e-3,
    critic_lr=3e-3,
)  # fmt: skip (test_ppo.py's line task and sizes)


@pytest.mark.slow
def test_ippo_learns_data_parallel_over_four_devices_and_resumes_on_two(tmp_path):
    """The IPPO job with `devices = 4`: each device steps 8 of the 32 environments, the
    parameters stay equal on every device, and the agents learn (untrained ones wander, about
    -6; trained ones walk to their targets, about +0.5); a checkpoint holds every
    environment, so the run resumes on 2 devices."""
    from eqx_qd import jobs

    result = jobs.run(
        jobs.IPPOConfig(**IPPO_TINY, devices=4), tmp_path / "run", progress=False, plots=False
    )
    for leaf in jax.tree.leaves(eqx.filter(result.state.agent_state.actor, eqx.is_array)):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 4 and all(np.array_equal(shards[0], x) for x in shards[1:])
    returns = result.progress["mean_return"]
    assert result.progress["env_steps"].tolist() == [0, 20 * 32 * 32, 40 * 32 * 32]
    assert returns[0] < -4.0 and returns[-1] > 0.3, returns
    longer = jobs.IPPOConfig(**{**IPPO_TINY, "iterations": 60}, devices=2)
    resumed = jobs.run(longer, tmp_path / "run", progress=False, plots=False, resume=True)
    assert resumed.progress["iterations"].tolist() == [0, 20, 40, 60]
    with pytest.raises(ValueError, match=r"devices \(3\) must divide num_envs \(32\)"):
        jobs.IPPOConfig(**IPPO_TINY, devices=3)
    with pytest.raises(ValueError, match=r"each device's num_envs / 16 = 2 environments"):
        jobs.IPPOConfig(**IPPO_TINY, devices=16, convention="jaxagents")


PGAME_TINY = dict(
    env="point_maze_open", episode_length=20, evaluations=8 + 4 * 8, random_init=8,
    init_batch_size=2, batch_size=8, cells=16, cvt_samples=1000, hidden=(8,),
    critic_hidden=(8,), minibatch_size=8, buffer_size=400, critic_steps=4, pg_steps=2,
    snapshot_every=16, num_reevals=2,
)  # fmt: skip


def test_dcg_me_over_four_devices_keeps_one_conditioned_agent(tmp_path):
    """DCRL-ME's job on 4 devices, with DCG-ME's actor episodes too: each device takes a
    quarter of the GA, policy-gradient and injected parts and of the actor episodes; the
    conditioned critic and actor stay equal on every device."""
    from eqx_qd import jobs

    config = jobs.DCRLMEConfig(
        **{k: v for k, v in PGAME_TINY.items() if k != "num_reevals"},
        pg_batch_size=4, ai_batch_size=0, actor_evals=4, reward_offset=2.83, devices=4,
    )  # fmt: skip
    result = jobs.run(config, tmp_path / "run", progress=False, plots=False)
    state = result.state.emitter_state  # a DCRLState with a device axis
    for leaf in jax.tree.leaves(eqx.filter((state.td3.critic, state.td3.policy), eqx.is_array)):
        leaf = np.asarray(leaf)
        assert leaf.shape[0] == 4
        for device in range(1, 4):
            np.testing.assert_array_equal(leaf[device], leaf[0])
    assert np.asarray(state.buffer.data.transition.obs).shape[:2] == (4, 100)
    # 8 random policies and 4 batches of 8, and 4 actor episodes after each batch, 20 steps each
    assert result.progress["env_steps"][-1] == (8 + 4 * 8 + 4 * 4) * 20
    with pytest.raises(ValueError, match=r"devices \(4\) must divide actor_evals \(2\)"):
        dataclasses.replace(config, actor_evals=2)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(batch_size=6), r"devices \(4\) must divide batch_size \(6\)"),
        (dict(minibatch_size=6), r"devices \(4\) must divide minibatch_size \(6\)"),
        (dict(buffer_size=402), r"devices \(4\) must divide buffer_size \(402\)"),
        (dict(batch_size=4, evaluations=40), "2 slots or more on each of the 4 devices"),
        (dict(init_batch_size=4), r"init_batch_size \(4\) must divide each device's"),
    ],
)
def test_the_pgame_job_refuses_a_batch_the_devices_cannot_share(change, message):
    from eqx_qd import jobs

    with pytest.raises(ValueError, match=message):
        jobs.PGAMEConfig(**{**PGAME_TINY, **change}, devices=4)


TINY = (
    "pg_population_size = 4\nga_population_size = 2\nnum_training_iterations = 2\n"
    "num_envs = 2\nbuffer_size = 200\nhidden = [8]\nminibatch_size = 8\n"
    "fraction_best_to_replace_from = 0.25\nfraction_to_replace_from_best = 0.25\n"
    "fraction_to_replace_from_samples = 0.25\ncells = 16\ncvt_samples = 1000\n"
    "episode_length = 20\niterations = 2\n"
)


def test_the_command_refuses_more_devices_than_exist(tmp_path, capsys):
    """Before anything is built or written (the ME-PBT job on two devices is run, in two
    processes, by `tests/jobs/test_distributed.py`)."""
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    with pytest.raises(SystemExit) as e:
        main(["run", "me-pbt", "--config", str(config), "--devices", "64", "--out",
              str(tmp_path / "too-many"), "--no-progress"])  # fmt: skip
    assert e.value.code == 2 and "asked for 64 devices, 4 available" in capsys.readouterr().err
    assert not (tmp_path / "too-many").exists()


@pytest.mark.slow
def test_the_command_makes_host_devices_and_never_picks_the_platform(tmp_path):
    """A fresh process without JAX_PLATFORMS: ``--devices 2`` gets its devices on a CPU-only
    machine, and the command leaves the environment variable unset."""
    env = launched_env()
    env.pop("JAX_PLATFORMS", None)
    script = (
        "import os, sys; from eqx_qd.cli import main; code = main(sys.argv[1:]); "
        "print('JAX_PLATFORMS' in os.environ); sys.exit(code)"
    )
    out = str(tmp_path / "run")
    cmd = [sys.executable, "-c", script, "run", "map-elites", "--genotype-dim", "4", "--cells",
           "32", "--cvt-samples", "1000", "--batch-size", "8", "--iterations", "2", "--devices",
           "2", "--out", out, "--no-progress", "--no-plots"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("eqx-qd: map-elites on 2 cpu devices"), lines
    assert "done: 48 evaluations" in done.stdout, done.stdout  # 2 devices x 8 x (1 + 2)
    assert lines[-1] == "False"  # the command set no JAX_PLATFORMS


def _update_on_mesh(emitter, state, mesh, fitnesses, key):
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
    return eqx.combine(eqx.filter_jit(mapped)(dyn, state.repertoire, fitnesses, key), static)


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
        results.append(_update_on_mesh(emitter, state, mesh, fitnesses, jr.key(4)))
    one_step, chunked = results
    assert np.asarray(one_step.best_returns).tolist() == [[7.0, 3.0, 3.0, 3.0]] * 2
    assert bool(eqx.tree_equal(one_step, chunked))
    with pytest.raises(ValueError, match="fraction_sort_exchange"):
        dataclasses.replace(CONFIG, fraction_sort_exchange=0.0)
