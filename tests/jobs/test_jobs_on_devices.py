"""The jobs over several devices in one process (conftest asks JAX for 4 host devices before it
starts): PBT, IPPO and DCRL-ME runs over meshes, the devices a population job takes, the
batches a PGA-ME job refuses, and the command's ``--devices`` (in a fresh process where the
device count must be fixed when JAX starts)."""

import dataclasses
import subprocess
import sys
from unittest import mock

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from launched import launched_env

from eqx_qd.cli import main


PBT_JOB = dict(
    population_size=4, rounds=2, agent="td3", iterations_per_round=3, num_envs=2, hidden=(8,),
    minibatch_size=8, buffer_size=200, episode_length=20, eval_episodes=2, best_fraction=0.25,
    worse_fraction=0.25,
)  # fmt: skip


@pytest.mark.e2e
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


@pytest.mark.e2e
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
    snapshot_every=16, reevaluations=2,
)  # fmt: skip


@pytest.mark.e2e
def test_dcg_me_over_four_devices_keeps_one_conditioned_agent(tmp_path):
    """DCRL-ME's job on 4 devices, with DCG-ME's actor episodes too: each device takes a
    quarter of the GA, policy-gradient and injected parts and of the actor episodes; the
    conditioned critic and actor stay equal on every device."""
    from eqx_qd import jobs

    config = jobs.DCRLMEConfig(
        **{k: v for k, v in PGAME_TINY.items() if k != "reevaluations"},
        pg_batch_size=4, ai_batch_size=0, actor_evals=4, reward_offset=2.83, devices=4,
    )  # fmt: skip
    result = jobs.run(config, tmp_path / "run", progress=False, plots=False)
    state = result.state.emitter_state  # a DCRLEmitterState with a device axis
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


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_mees_over_two_devices_runs_one_es_and_stores_no_placeholder(tmp_path):
    """`devices = 2`: each device scores half of every generation's samples, both hold the same
    emitter state, the second device's placeholder (NaN genes) is never stored, and the
    budget counts one offspring and its samples a generation."""
    from eqx_qd import jobs

    config = jobs.MEESConfig(
        env="point_maze", devices=2, random_init=2, init_batch_size=1, sample_number=8,
        num_optimizer_steps=2, evaluations=2 + 6 * 9, cells=16, cvt_samples=1000,
        hidden=(8,), episode_length=30, novelty_archive_size=64, reevaluations=2,
        snapshot_every=18, checkpoint_every=18, deterministic=True,
    )  # fmt: skip
    run = jobs.run(config, tmp_path / "two", progress=False, plots=False)
    np.testing.assert_array_equal(run.progress["evaluations"], 2 + 9 * np.arange(7))
    es = run.state.emitter_state  # a device axis first
    for leaf in jax.tree.leaves(eqx.filter(es, eqx.is_array)):
        np.testing.assert_array_equal(np.asarray(leaf[0]), np.asarray(leaf[1]))
    assert int(es.generation[0]) == 6
    fit = np.asarray(run.repertoire.fitnesses)
    stored = np.asarray(jax.tree.leaves(eqx.filter(run.repertoire.genotypes, eqx.is_array))[0])
    assert np.isfinite(stored[np.isfinite(fit)]).all() and np.isfinite(fit).sum() >= 2
    with pytest.raises(ValueError, match="devices \\(2\\) must divide sample_number \\(7\\)"):
        dataclasses.replace(config, sample_number=7, sample_mirror=False).check()


@pytest.mark.e2e
def test_qdpg_over_two_devices_keeps_one_state_archive(tmp_path):
    """`devices = 2`: each device takes half of the quality, diversity and GA parts; both
    critics stay equal over the devices, and so does the diversity learner's archive, which
    reads every device's state descriptors."""
    from eqx_qd import jobs

    config = jobs.QDPGConfig(
        **{k: v for k, v in PGAME_TINY.items() if k != "reevaluations"},
        ga_fraction=0.25, diversity_fraction=0.25, archive_acceptance_threshold=0.05,
        devices=2,
    )  # fmt: skip
    assert config.split == (4, 2, 2)
    result = jobs.run(config, tmp_path / "run", progress=False, plots=False)
    quality, diversity, _ = result.state.emitter_state  # a device axis first
    learned = (quality.td3.critic, diversity.td3.critic, diversity.td3.policy, diversity.archive)
    for leaf in jax.tree.leaves(eqx.filter(learned, eqx.is_array)):
        np.testing.assert_array_equal(np.asarray(leaf[0]), np.asarray(leaf[1]))
    stored = int(diversity.archive.rows.size[0])
    assert stored > 10
    with pytest.raises(ValueError, match=r"devices \(2\) must divide diversity slots \(3\)"):
        dataclasses.replace(config, batch_size=12).check()


@pytest.mark.e2e
def test_aurora_over_two_devices_runs_whole(tmp_path):
    """`devices = 2`: each device varies half of each batch and inserts the whole gathered
    batch, with every device's episodes (that the copies stay equal is
    `tests/qdrl/test_aurora.py`'s)."""
    from eqx_qd import jobs

    config = jobs.AuroraConfig(
        **{k: v for k, v in PGAME_TINY.items() if k != "reevaluations"},
        target_size=24, encoder_batch_size=8, encoder_epochs=2, aurora_loop=1,
        observe_every=5, l_value=0.05, devices=2,
    )  # fmt: skip
    result = jobs.run(config, tmp_path / "run", progress=False, plots=False)
    archive = result.state.repertoire  # replicated: one copy
    assert int(archive.additions) == 5 and int(archive.num_filled) >= 2
    assert np.all(np.isfinite(np.asarray(archive.latent)[np.asarray(archive.filled)]))
