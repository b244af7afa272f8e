"""The job layer: typed configs, run folders, registries, progress, the loader, and the command
generated from the configs."""

import dataclasses
import json
import os
import stat

import jax.numpy as jnp
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import jobs
from eqx_qd.cli import build_parser, main
from eqx_qd.jobs._map_elites import build_map_elites


TINY_ME = dict(
    task="sphere", genotype_dim=3, grid=True, cells=4, batch_size=8, iterations=4, log_every=2
)


# ------------------------------------------------------------------------------ configs


@pytest.mark.parametrize("name", sorted(jobs.JOBS))
def test_every_default_config_round_trips_through_toml(name, tmp_path):
    job = jobs.JOBS[name]
    config = job.default_config()
    path = tmp_path / "c.toml"
    path.write_text(config.to_toml())
    assert config.to_toml().startswith(f"[{name}]\n")
    assert job.config_cls.from_toml(path) == config


PAPER_SIZED = {"pgame", "dcrl-me", "me-pbt"}
"""The jobs with a published setting, `--preset paper`."""
SMOKE_SIZED = {"pgame", "dcrl-me", "mees", "qdpg", "aurora"}
"""The brax jobs, with `--preset smoke`."""


@pytest.mark.parametrize("name", sorted(jobs.JOBS))
def test_presets_run_one_way(name):
    """Every job's default is the laptop's size and the papers' setting a preset (DCRL-ME's
    default had been the paper's 1,024,256 evaluations, with `--preset local`); every brax
    job has a smoke preset, far below its default (issue 76, item 4)."""
    config_cls = jobs.JOBS[name].config_cls
    presets = config_cls.PRESETS
    assert "local" not in presets
    assert ("paper" in presets) == (name in PAPER_SIZED), sorted(presets)
    if name in PAPER_SIZED:
        paper, default = config_cls.preset("paper"), config_cls()
        budget = lambda c: getattr(c, "evaluations", 0) or getattr(c, "iterations", 0)  # noqa: E731
        assert budget(paper) > budget(default)
    if name in SMOKE_SIZED:
        smoke, default = config_cls.preset("smoke"), config_cls()
        assert smoke.evaluations * smoke.episode_length <= default.evaluations * 100 // 50
        assert smoke.cells < default.cells
        if name != "mees":  # (MAP-Elites-ES has no critic)
            assert smoke.critic_steps < default.critic_steps


def test_dcrl_me_papers_preset_is_the_former_default():
    """`--preset paper` holds what the default was: the TELO paper's setting."""
    paper = jobs.DCRLMEConfig.preset("paper")
    assert (paper.env, paper.episode_length, paper.cells) == ("ant_omni", 250, 1024)
    assert (paper.evaluations, paper.batch_size, paper.critic_steps, paper.pg_steps) == (
        256 + 4000 * 256, 256, 3000, 150,
    )  # fmt: skip
    assert (paper.hidden, paper.buffer_size, paper.snapshot_every) == (
        (128, 128),
        1_000_000,
        25_600,
    )


@pytest.mark.e2e
def test_the_dcrl_me_smoke_preset_runs_every_part(tmp_path):
    """DCRL-ME's smoke preset: GA, policy-gradient and injected children, snapshots,
    checkpoints; on the point maze (DCRL-ME's default on brax's walker runs in
    test_job_defaults and the notebook: the walker's compiles once are enough for the suite)."""
    config = jobs.DCRLMEConfig.preset("smoke", env="point_maze", reward_offset=2.83)
    result = jobs.run(config, tmp_path / "run", plots=False, progress=False)
    assert result.progress["evaluations"].tolist() == [64, 96, 128, 160, 192]
    assert [c.step for c in jobs.list_checkpoints(tmp_path / "run")] == [128, 192]
    assert {"archive_128.csv", "archive_192.csv", "actors.csv"} <= set(os.listdir(tmp_path / "run"))


@pytest.mark.parametrize(
    "text, message",
    [
        ('grid = "no"\n', "config key 'grid' must be bool, got 'no'"),
        ("cells = 2.5\n", "config key 'cells' must be int, got 2.5"),
        ("cells = true\n", "config key 'cells' must be int, got True"),
        ('iso_sigma = "big"\n', "config key 'iso_sigma' must be float"),
        ("centroids = 3\n", "config key 'centroids' must be str or none, got 3"),
        ("bogus = 1\n", "unknown config keys: bogus"),
        ("cells = -4\n", "cells must be a positive integer, got -4"),
        ('task = "nope"\n', "task: unknown task 'nope'; known: rastrigin, sphere, arm"),
        (
            "[map-elites]\ncells = 4\n[pbt]\nrounds = 2\n",
            "keys outside its [map-elites] table: pbt",
        ),
    ],
)
def test_toml_values_are_checked_against_the_field_types(tmp_path, text, message):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises((TypeError, ValueError)) as e:
        jobs.MAPElitesConfig.from_toml(path)
    assert message in str(e.value)


def test_list_fields_take_lists_of_ints_only(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("hidden = [32, 16]\n")
    assert jobs.PBTConfig.from_toml(path).hidden == (32, 16)
    path.write_text('hidden = ["wide"]\n')
    with pytest.raises(TypeError, match="config key 'hidden' must be list of int"):
        jobs.PBTConfig.from_toml(path)
    # An int where a float is expected is widened; the stored value is a float.
    assert jobs.PBTConfig.from_mapping({"grad_updates_per_step": 1}).grad_updates_per_step == 1.0


def test_the_command_has_an_option_for_every_config_field(capsys):
    parser = build_parser()
    for name, job in jobs.JOBS.items():
        with pytest.raises(SystemExit):
            parser.parse_args(["run", name, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for f in dataclasses.fields(job.config_cls):
            assert "--" + f.name.replace("_", "-") in text, (name, f.name)
        assert "(default: " in text


def test_a_toml_type_error_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text('[pgame]\nreset_noise = "yes"\n')
    with pytest.raises(SystemExit) as e:
        main(["run", "pgame", "--config", str(path), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.count("\n") == 0 and "'reset_noise' must be bool" in err
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- run folders


def test_run_folder_writes_atomically_with_the_users_umask(tmp_path):
    old = os.umask(0o027)
    try:
        folder = jobs.RunFolder(tmp_path / "run")
        folder.write_text("a.txt", "hello")
        folder.write_columns("t.csv", {"x": np.arange(3), "y": np.asarray([0.5, 1.5, 2.5])})
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(folder.file("a.txt")).st_mode) == 0o640
    columns = folder.read_columns("t.csv")
    np.testing.assert_array_equal(columns["y"], [0.5, 1.5, 2.5])

    def crash(f):
        f.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        jobs.atomic_write(folder.file("a.txt"), crash)
    assert folder.read_text("a.txt") == "hello"  # the old file is intact
    assert sorted(os.listdir(folder.path)) == ["a.txt", "t.csv"]  # and no litter


def test_opening_a_folder_removes_the_litter_of_a_killed_write(tmp_path):
    (tmp_path / ".tmp-abc123").write_text("a write that was killed")
    (tmp_path / "keep.txt").write_text("x")
    jobs.RunFolder(tmp_path, create=False)  # reading touches nothing
    assert (tmp_path / ".tmp-abc123").exists()
    jobs.RunFolder(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["keep.txt"]


@pytest.mark.e2e
def test_a_folder_holds_one_run_and_load_run_reads_it_back(tmp_path):
    config = jobs.MAPElitesConfig(**TINY_ME)
    rows = []
    result = jobs.run(config, tmp_path / "run", progress=False, plots=False, on_log=rows.append)
    assert [r["iteration"] for r in rows] == [0, 2, 4]  # every logged row, as floats
    assert isinstance(result.state, q.MAPElitesState)
    back = jobs.load_run(tmp_path / "run")
    assert back.config == config and back.state is None
    assert bool(jnp.all(back.repertoire.fitnesses == result.repertoire.fitnesses))
    np.testing.assert_allclose(back.progress["qd_score"], result.progress["qd_score"], rtol=1e-6)
    with pytest.raises(ValueError, match="already holds a run"):
        jobs.run(config, tmp_path / "run", progress=False)
    # Resuming a finished run continues from its last checkpoint: nothing is left to do.
    again = jobs.run(config, tmp_path / "run", progress=False, plots=False, resume=True)
    assert bool(jnp.all(again.repertoire.fitnesses == result.repertoire.fitnesses))
    assert again.progress["iteration"].tolist() == [0, 2, 4]
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        jobs.load_run(tmp_path)
    # In memory: no folder at all.
    assert jobs.run(config, progress=False).folder is None


# ---------------------------------------------------------------------------- registries


def test_unknown_names_and_options_are_named():
    with pytest.raises(ValueError, match="unknown environment 'pong'; known: point_maze, "):
        jobs.make_env("pong")
    with pytest.raises(ValueError, match="unknown qd environment 'line_targets'"):
        jobs.ENVIRONMENTS.get("line_targets", "qd")
    with pytest.raises(ValueError, match="takes no option num_agents; its options: episode_length"):
        jobs.make_env("walker2d_2x3", num_agents=3)
    assert set(jobs.ENVIRONMENTS.names("multi_agent")) >= {"line_targets", "ant_4x2"}
    assert (
        jobs.make_agent("td3", q.envs.PointMaze(), hidden=(8,), minibatch_size=4).minibatch_size
        == 4
    )


def test_the_cma_emitters_take_the_strategy_and_its_options():
    """`--es` and its options reach the emitter; an option of another strategy, or a
    strategy for an emitter that has none, is named before anything runs."""
    base = dict(task="sphere", genotype_dim=20, emitter="cma_mae", batch_size=20, num_emitters=2)
    lm = jobs.MAPElitesConfig(**base, es="lm_ma_es", es_vectors=3)
    algo, _ = build_map_elites(lm)
    assert isinstance(algo.emitter.es, q.LMMAES) and algo.emitter.es.n_vectors == 3
    openai = jobs.MAPElitesConfig(**base, es="openai_es", es_learning_rate=0.02)
    algo, _ = build_map_elites(openai)
    assert isinstance(algo.emitter.es, q.OpenAIES)
    assert float(algo.emitter.es.learning_rate) == pytest.approx(0.02)
    with pytest.raises(ValueError, match="es_vectors is an option of es 'lm_ma_es'; es is"):
        jobs.MAPElitesConfig(**base, es="sep_cma_es", es_vectors=3)
    with pytest.raises(ValueError, match="is a choice of the cma_me, cma_mae, dds emitters"):
        jobs.MAPElitesConfig(task="sphere", es="lm_ma_es")
    with pytest.raises(ValueError, match="es"):
        jobs.MAPElitesConfig(**base, es="pycma")


def test_the_agent_options_take_the_hidden_products_type():
    from eqx_qd.jobs._agent_options import build_agent

    env = q.envs.PointMaze()
    for agent in ("sac", "td3"):
        for dtype in q.rl.MATMUL_DTYPES:
            config = jobs.PBTConfig(agent=agent, matmul_dtype=dtype)
            assert build_agent(config, env).matmul_dtype == dtype
    assert jobs.PBTConfig().matmul_dtype == "float32"  # QDax's products
    with pytest.raises(ValueError, match="matmul_dtype: agent 'ppo' takes no option matmul_dtype"):
        jobs.PBTConfig(agent="ppo", matmul_dtype="auto")
    with pytest.raises(ValueError, match="matmul_dtype: unknown 'half'; choose one of float32, "):
        jobs.MEPBTConfig(matmul_dtype="half")


@pytest.mark.e2e
def test_a_run_with_auto_products_resumes_with_the_resuming_machines_pick(tmp_path, monkeypatch):
    # A run asked for "auto" on a CPU with AVX-512 BF16 continues, on a CPU without it, in
    # float32: the folder keeps "auto", each machine takes its own (docs/algorithms.md).
    import jax

    from eqx_qd import _machine
    from eqx_qd.jobs import _status

    real = _machine.machine()
    config = jobs.PBTConfig(
        population_size=4, agent="td3", rounds=1, iterations_per_round=3, num_envs=2,
        hidden=(8, 8), minibatch_size=8, buffer_size=200, episode_length=20, eval_episodes=2,
        best_fraction=0.25, worse_fraction=0.25, matmul_dtype="auto", devices=1,
    )  # fmt: skip

    def products(result):  # the matmul_dtype of every hidden product of every network
        dense = lambda x: isinstance(x, q.rl.Dense)  # noqa: E731
        layers = [x for x in jax.tree.leaves(result.state, is_leaf=dense) if dense(x)]
        return {layer.matmul_dtype for layer in layers if layer.weight.shape[-2:] == (8, 8)}

    bf16 = dataclasses.replace(real, backend="cpu", flags=("avx2", "avx512f", "avx512_bf16"))
    monkeypatch.setattr(_machine, "machine", lambda: bf16)
    first = jobs.run(config, tmp_path / "run", progress=False, plots=False)
    assert products(first) == {"bfloat16"}
    avx2 = dataclasses.replace(bf16, flags=("avx2",))
    monkeypatch.setattr(_machine, "machine", lambda: avx2)
    monkeypatch.setattr(_status, "machine", lambda: avx2)  # what status.json records
    # Another machine is another process: nothing compiled for the first one. ("auto" is
    # resolved when the networks are built, inside compiled programs: a program compiled
    # for the first machine would build its networks again.)
    import equinox as eqx

    eqx.clear_caches()
    jax.clear_caches()
    again = jobs.resume(tmp_path / "run", progress=False, plots=False, rounds=2)
    assert products(again) == {"float32"}
    assert again.progress["round"].tolist() == [0, 1]  # the second round ran on the "AVX2" CPU
    assert 'matmul_dtype = "auto"' in (tmp_path / "run" / "config.toml").read_text()
    assert jobs.run_status(tmp_path / "run")["machine"] == str(avx2)  # where it ran last


@pytest.mark.e2e
def test_a_registered_task_runs_through_the_job(tmp_path):
    @jobs.TASKS.register("ring", help="a ring of good genotypes")
    def _ring(*, genotype_dim: int = 4):
        return _Ring(genotype_dim=genotype_dim)

    try:
        config = jobs.MAPElitesConfig(**{**TINY_ME, "task": "ring", "genotype_dim": 4})
        result = jobs.run(config, tmp_path / "run", progress=False, plots=False)
        assert int(result.repertoire.num_filled) > 0
    finally:
        jobs.TASKS._entries.pop("ring")
    with pytest.raises(ValueError, match="unknown task 'ring'"):
        jobs.MAPElitesConfig(task="ring")


class _Ring(q.AbstractTask):
    genotype_dim: int = 4

    @property
    def num_descriptors(self) -> int:
        return 2

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        return (0.0, 1.0)

    @property
    def qd_offset(self) -> float:
        return 1.0

    def init_genotypes(self, num, *, key):
        return q.internal.uniform_genotypes(self, num, key=key)

    def __call__(self, genotypes, *, key):
        radius = jnp.linalg.norm(genotypes[:, :2] - 0.5, axis=-1)
        return -jnp.abs(radius - 0.3), jnp.clip(genotypes[:, :2], 0.0, 1.0), None


@pytest.mark.e2e
def test_load_run_reads_an_ippo_run_back(tmp_path):
    # With jaxagents' network layout and update (the CLI's --joint-network --convention
    # jaxagents --adam-eps 1e-8), recorded in agent.json.
    config = jobs.IPPOConfig(
        num_agents=2, size=6, episode_length=8, rollout_length=8, num_envs=4, num_minibatches=2,
        iterations=2, eval_frequency=2, eval_episodes=4, joint_network=True,
        convention="jaxagents", adam_eps=1e-8,
    )  # fmt: skip
    result = jobs.run(config, tmp_path / "run", progress=False, plots=False)
    back = jobs.load_run(tmp_path / "run")
    assert isinstance(back.state.agent_state.actor, q.rl.JointActor)
    recorded = json.loads((tmp_path / "run" / "agent.json").read_text())
    assert recorded["joint_network"] is True and recorded["convention"] == "jaxagents"
    assert recorded["adam_eps"] == 1e-8
    assert int(back.state.iterations) == 2 == int(result.state.iterations)
    assert back.progress["iterations"].tolist() == [0.0, 2.0]
    assert jobs.list_checkpoints(tmp_path / "run")[-1].step == 2


@pytest.mark.e2e
def test_a_run_folder_says_how_the_run_ended(tmp_path, monkeypatch, capsys):
    from eqx_qd.jobs import _map_elites

    config = jobs.MAPElitesConfig(iterations=2, batch_size=8, cells=16, cvt_samples=200)
    done = tmp_path / "done"
    jobs.run(config, done, progress=False, plots=False)
    status = jobs.run_status(done)
    assert status["status"] == "finished" and status["job"] == "map-elites"
    assert status["started"] <= status["updated"]
    assert status["machine"] == str(q.internal.machine())  # where it ran: CPU, vector features, JAX

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(_map_elites, "write_qd_outputs", broken)
    failed = tmp_path / "failed"
    with pytest.raises(RuntimeError, match="disk full"):
        jobs.run(config, failed, progress=False, plots=False)
    status = jobs.run_status(failed)
    assert status["status"] == "failed" and status["error"] == "RuntimeError: disk full"
    # `eqx-qd status` says the same, a line per folder; a folder that holds no run is refused.
    assert main(["status", str(done), str(failed)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{done}: map-elites finished, checkpoint 2",
        f"{failed}: map-elites failed, checkpoint 2: RuntimeError: disk full",
    ]
    with pytest.raises(SystemExit) as e:
        main(["status", str(tmp_path)])
    assert e.value.code == 2 and "is not a run folder" in capsys.readouterr().err
    # A folder holding another run is refused and left as it was.
    before = (done / "status.json").read_text()
    with pytest.raises(ValueError, match="already holds a run"):
        jobs.run(config, done, progress=False, plots=False)
    assert (done / "status.json").read_text() == before
    # Refused at validation: nothing written, not even the folder.
    with pytest.raises(ValueError):
        jobs.run(jobs.MAPElitesConfig(cells=16, cvt_samples=8), tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    assert jobs.run_status(tmp_path)["status"] == "unknown"  # no status file


def test_a_run_seen_from_another_machine_reads_interrupted_once_its_heartbeat_stops(
    tmp_path, monkeypatch
):
    """The pid of a run on another host cannot be asked: its heartbeat stamp tells."""
    import datetime
    import time

    from eqx_qd.jobs import _status

    folder = jobs.RunFolder(tmp_path / "run")
    _status.write_status(folder, "running", job="map-elites")
    assert jobs.run_status(folder.path)["status"] == "running"  # this process, alive

    def stamped(minutes_ago):
        then = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=minutes_ago)
        record = {**folder.read_json("status.json"), "host": "elsewhere", "pid": 1}
        folder.write_json("status.json", {**record, "heartbeat": then.isoformat()})
        return jobs.run_status(folder.path)

    assert stamped(1)["status"] == "running"
    status = stamped(30)
    assert status["status"] == "interrupted" and "no heartbeat" in status["error"]
    assert "pid 1 on elsewhere" in status["error"] and status["checkpoint"] is None

    # The running job's heartbeat thread stamps the folder while the folder says it runs it.
    monkeypatch.setattr(_status, "HEARTBEAT_S", 0.05)
    _status.write_status(folder, "running")
    folder.write_json("status.json", {**folder.read_json("status.json"), "heartbeat": "old"})
    beat = _status.Heartbeat(folder.path)
    try:
        deadline = time.monotonic() + 30
        while folder.read_json("status.json")["heartbeat"] == "old":
            assert time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.05)
    finally:
        beat.close()
    assert jobs.run_status(folder.path)["status"] == "running"


def test_a_multi_process_run_takes_every_device_unless_told(monkeypatch):
    """A job's `devices` left at its default means, in a run of several processes, every
    device of every process (it had stopped with "devices must be 4 in this run of 2
    processes ..., got 1"); a count given stays; one process is unchanged (issue 70)."""
    import jax

    from eqx_qd.jobs._distributed import across_processes

    default = jobs.MAPElitesConfig()
    assert across_processes(default) == default
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "device_count", lambda: 4)
    assert across_processes(default).devices == 4
    assert across_processes(jobs.MAPElitesConfig(devices=2)).devices == 2
    assert across_processes(jobs.PBTConfig()).devices is None  # (its own automatic choice)


def test_the_map_elites_job_runs_the_qd_suite_by_name_at_its_own_size(tmp_path):
    """No genotype_dim: each task's own (1 gene for the spiral, 2 for the others here); a
    size the task cannot take is named."""
    for task in ("archimedean_spiral_arc_length_euclidean", "deceptive_evolvability", "islands"):
        config = jobs.MAPElitesConfig(
            task=task, grid=True, cells=8, batch_size=16, iterations=4, log_every=2,
            emitter="gaussian",
        )  # fmt: skip
        result = jobs.run(config, tmp_path / task, progress=False, plots=False)
        assert result.repertoire.genotypes.shape[1:] == (jobs.make_task(task).genotype_dim,)
        assert result.progress["coverage"][-1] > 0
        back = jobs.load_run(tmp_path / task)
        assert back.repertoire.genotypes.shape == result.repertoire.genotypes.shape
    with pytest.raises(ValueError, match="'deceptive_evolvability' has 2 genes per genotype"):
        jobs.make_task("deceptive_evolvability", genotype_dim=5)
    with pytest.raises(ValueError, match="'archimedean_spiral_angle_geodesic' has 1 gene per"):
        jobs.make_task("archimedean_spiral_angle_geodesic", genotype_dim=100)


def test_the_aurora_job_refuses_other_archives_and_presets_qdax_notebook():
    """The aurora job's archive is AURORA's own: another `--repertoire`, fewer than 2 slots or
    several samples a candidate are refused with the key named; `--preset qdax` is QDax's
    example notebook, `--preset pga-qdax` its PGA-AURORA notebook."""
    with pytest.raises(ValueError, match="repertoire 'dns'.*AURORA's own"):
        jobs.AuroraConfig(repertoire="dns").check()
    with pytest.raises(ValueError, match="capacity 1"):
        jobs.AuroraConfig(capacity=1).check()
    with pytest.raises(ValueError, match="samples 2: the AURORA archive's encoder"):
        jobs.AuroraConfig(samples=2).check()
    qdax = jobs.AuroraConfig.preset("qdax")
    assert (qdax.env, qdax.episode_length, qdax.batch_size) == ("walker2d_uni", 250, 100)
    assert (qdax.evaluations - qdax.random_init) // qdax.batch_size == 250  # 50 loops of 5
    assert (qdax.latent_size, qdax.observe_every, qdax.observation_width) == (5, 10, 25)
    assert (qdax.l_value, qdax.target_size, qdax.aurora_loop) == (0.2, 1024, 5)
    assert not qdax.gradient_op and qdax.deterministic and qdax.policy_init == "lecun_uniform"
    pga = jobs.AuroraConfig.preset("pga-qdax")
    assert pga.gradient_op and pga.ga_fraction == 0.5
    assert (pga.pg_steps, pga.minibatch_size, pga.critic_steps) == (100, 256, 300)
    assert (pga.episode_length, pga.evaluations) == (qdax.episode_length, qdax.evaluations)
