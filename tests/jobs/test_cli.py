import json
import os
import subprocess
import sys

import numpy as np
import pytest
from launched import launched_env

import eqx_qd as q
from eqx_qd import jobs
from eqx_qd.cli import main
from eqx_qd.jobs._choices import machine_choices


SMALL = [
    "run", "map-elites", "--task", "sphere", "--genotype-dim", "4", "--grid", "--cells", "5",
    "--batch-size", "16", "--iterations", "20", "--log-every", "5", "--no-progress",
]  # fmt: skip


@pytest.mark.e2e
def test_cli_runs_map_elites_and_logs_what_its_repertoire_holds(tmp_path, capsys):
    """The command's options reach the config; the progress log agrees with the repertoire.
    (Every job's folder, listed: `test_resume.py::test_every_job_writes_its_documented_folder`.)"""
    out = tmp_path / "run"
    assert main(SMALL + ["--out", str(out)]) == 0
    run = jobs.load_run(out)
    config, rep, progress = run.config, run.repertoire, run.progress
    assert config.task == "sphere" and config.cells == 5 and config.grid
    assert list(progress["iteration"]) == [0, 5, 10, 15, 20]
    assert list(progress["evaluations"]) == [16 * (i + 1) for i in (0, 5, 10, 15, 20)]
    assert progress["num_filled"][-1] == int(rep.num_filled)
    np.testing.assert_allclose(
        progress["qd_score"][-1], float(q.qd_metrics(rep, 100.0).qd_score), rtol=1e-6
    )
    assert np.all(np.diff(progress["qd_score"]) >= 0)
    assert "run folder" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:  # a pure-JAX task: nothing to replay
        main(["replay", str(out)])
    assert e.value.code == 2
    assert "a map-elites run: its elites play no environment (replay reads the runs of " in (
        capsys.readouterr().err
    )


@pytest.mark.e2e
def test_cli_runs_several_seeds_into_one_folder(tmp_path, capsys, monkeypatch):
    out = tmp_path / "seeds"
    assert main(SMALL + ["--no-plots", "--seeds", "3,1", "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["seed-1", "seed-3"]
    runs = {s: jobs.load_run(out / f"seed-{s}") for s in (1, 3)}
    assert [runs[s].config.seed for s in (1, 3)] == [1, 3]
    assert runs[1].progress["qd_score"][-1] != runs[3].progress["qd_score"][-1]
    assert f"eqx-qd report {out}/seed-*" in capsys.readouterr().out
    # Checked before the first run starts: a taken folder or a repeated seed stops everything.
    for seeds, message in (("1,4", "seed-1' already holds a run"), ("4,4", "distinct seeds")):
        with pytest.raises(SystemExit) as e:
            main(SMALL + ["--seeds", seeds, "--out", str(out)])
        assert e.value.code == 2 and message in capsys.readouterr().err
        assert not (out / "seed-4").exists()
    # Without --out, one run goes to runs/<job>-seed<S>-<time>.
    monkeypatch.chdir(tmp_path)
    assert main(SMALL + ["--no-plots", "--seed", "7", "--iterations", "5"]) == 0
    (folder,) = os.listdir(tmp_path / "runs")
    assert folder.startswith("map-elites-seed7-")


@pytest.mark.e2e
def test_cli_config_file_and_overrides(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[map-elites]\ntask = "arm"\ngenotype_dim = 3\niterations = 2\ncells = 16\n'
        "cvt_samples = 500\nbatch_size = 8\nlog_period = 1\n"  # (an older key: log_every)
    )
    out = tmp_path / "run"
    assert main(["run", "map-elites", "--config", str(cfg), "--seed", "3", "--no-plots",
                 "--no-progress", "--out", str(out)]) == 0  # fmt: skip
    run = jobs.load_run(out)
    config, rep, progress = run.config, run.repertoire, run.progress
    assert (config.task, config.seed, config.cells, config.log_every) == ("arm", 3, 16, 1)
    assert isinstance(rep.tessellation, q.CVTTessellation) and rep.num_cells == 16
    assert len(progress["iteration"]) == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--task", "nope"], "unknown task"),
        (["--cells", "-3"], "positive integer"),
        (["--config", "/nonexistent/c.toml"], "cannot read config"),
        (["--iso-sigma", "abc"], "expected a number"),
        (["--centroids", "/nonexistent/c.npy"], "does not exist"),
        # Errors name the options as typed; keys from a file keep their names.
        (["--batch-size", "0"], "--batch-size must be a positive integer, got 0"),
        (["--cells", "16", "--cvt-samples", "8"], "--cvt-samples (8) must be at least cells"),
        (["--config", "BAD_TOML"], "error: batch_size must be a positive integer, got 0"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, args, message):
    if "BAD_TOML" in args:
        (tmp_path / "bad.toml").write_text("[map-elites]\nbatch_size = 0\n")
        args = [str(tmp_path / "bad.toml") if a == "BAD_TOML" else a for a in args]
    with pytest.raises(SystemExit) as exc:
        main(["run", "map-elites", "--out", str(tmp_path / "r")] + args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and err.startswith("eqx-qd: error:")


def test_cli_rejects_unknown_config_keys(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("bogus = 1\n")
    with pytest.raises(SystemExit) as exc:
        main(["run", "map-elites", "--config", str(cfg)])
    assert exc.value.code == 2 and "bogus" in capsys.readouterr().err
    cfg.write_text("this is not toml")
    with pytest.raises(SystemExit):
        main(["run", "map-elites", "--config", str(cfg)])
    assert "not valid TOML" in capsys.readouterr().err


IPPO_TOML = """[ippo]
num_agents = 2
size = 6
episode_length = 12
rollout_length = 16
num_envs = 8
num_minibatches = 2
iterations = 4
eval_frequency = 2
eval_episodes = 4
"""


@pytest.mark.e2e
def test_cli_ippo_run_and_resume(tmp_path, capsys):
    cfg = tmp_path / "ippo.toml"
    cfg.write_text(IPPO_TOML)
    out = tmp_path / "run"
    assert main(["run", "ippo", "--config", str(cfg), "--out", str(out), "--no-progress"]) == 0
    assert "done: 4 iterations (512 env steps)" in capsys.readouterr().out
    # Resuming reads the run's own config and trains on to the new total.
    assert main(["run", "ippo", "--resume", str(out), "--iterations", "6", "--no-plots",
                 "--no-progress"]) == 0  # fmt: skip
    said = capsys.readouterr().out
    assert "from its newest checkpoint, iterations 4" in said and "done: 6 iterations" in said
    rows = (out / "progress.csv").read_text().strip().splitlines()
    assert rows[0].startswith("iterations,env_steps,mean_return")
    assert [int(r.split(",")[0]) for r in rows[1:]] == [0, 2, 4, 6]
    saved = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert saved[-1] == "0000000006.json" and len(saved) == 8
    # A fresh run never writes over another run's checkpoints.
    with pytest.raises(SystemExit) as e:
        main(["run", "ippo", "--config", str(cfg), "--out", str(out), "--no-progress"])
    assert e.value.code == 2 and "already holds a run" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == saved
    # Resuming with another config: its hyperparameters apply from the checkpoint on.
    changed = tmp_path / "changed.toml"
    changed.write_text(IPPO_TOML + "actor_lr = 0.0125\n")
    assert main(["run", "ippo", "--resume", str(out), "--config", str(changed), "--iterations",
                 "8", "--no-plots", "--no-progress"]) == 0  # fmt: skip
    assert json.loads((out / "hparams.json").read_text())["actor_lr"] == pytest.approx(0.0125)
    assert "actor_lr = 0.0125" in (out / "config.toml").read_text()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env", "pong"], "unknown environment 'pong'"),
        (["--iterations", "-1"], "iterations must be >= 0"),
        (["--resume", "/nonexistent"], "cannot resume"),
        (["--num-envs", "3", "--rollout-length", "5"], "num_minibatches"),
        (["--env", "walker2d_2x3", "--num-agents", "3"], "takes no option --num-agents"),
    ],
)
def test_cli_ippo_bad_input(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        main(["run", "ippo", "--no-progress"] + args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_a_plugin_in_the_current_folder_is_found(tmp_path, monkeypatch, capsys):
    """`eqx-qd --plugin NAME` finds `NAME.py` in the folder it runs in, as `python -m` would
    (it had needed `PYTHONPATH=.`: issue 76, item 8)."""
    (tmp_path / "folder_plugin.py").write_text(
        "from eqx_qd import jobs\n"
        "jobs.TASKS.register('folder_sphere', help='a sphere from the current folder')("
        "lambda genotype_dim=3: jobs.make_task('sphere', genotype_dim=genotype_dim))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert main(["--plugin", "folder_plugin", "list"]) == 0
    assert "folder_sphere" in capsys.readouterr().out


def test_a_mistyped_option_is_refused_with_the_closest_one(capsys):
    """No prefix matching: `--iteration 3` had run as `--iterations 3` (issue 76, item 8)."""
    with pytest.raises(SystemExit):
        main(["run", "map-elites", "--iteration", "3"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --iteration 3 (--iteration: did you mean --iterations?)" in err


def test_list_prints_every_job_and_registered_name_with_its_options(capsys):
    assert main(["--plugin", "user_plugin", "list"]) == 0
    out = capsys.readouterr().out
    for name in [*jobs.JOBS, *jobs.TASKS.names(), *jobs.ENVIRONMENTS.names(),
                 *jobs.AGENTS.names(), *jobs.EMITTERS.names()]:  # fmt: skip
        assert f"  {name} " in out, name
    assert "ddpg" in out  # the plugin's agent
    assert "walker2d_uni       brax walker2d, feet contacts descriptor [qd]; options: " in out
    assert "_cls" not in out  # private factory arguments are not options


@pytest.mark.e2e
def test_the_compile_cache_is_filled_once_and_reused(tmp_path):
    # Each run is a fresh process (JAX reads its cache folder once); every program is kept
    # (min compile time 0). The second run finds them all: it stores nothing new.
    cache = tmp_path / "cache"
    env = {**os.environ, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    env.pop("EQX_QD_COMPILE_CACHE")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the suite's own (conftest.py)
    # The command's own pick of the CPU fusion generator, not the suite's (conftest.py):
    # XLA_FLAGS naming the option would be the user's choice, and the command says so.
    env["XLA_FLAGS"] = " ".join(
        f for f in env.get("XLA_FLAGS", "").split() if "xla_cpu_use_fusion_emitters" not in f
    )

    def run(*options, out):
        cmd = [sys.executable, "-m", "eqx_qd.cli", *options, *SMALL, "--no-plots",
               "--out", str(tmp_path / out)]  # fmt: skip
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert f"(compile cache {cache})" in run("--compile-cache", str(cache), out="first")
    stored = sorted(p.name for p in cache.iterdir())
    assert stored
    run("--compile-cache", str(cache), out="second")
    assert sorted(p.name for p in cache.iterdir()) == stored
    env["EQX_QD_COMPILE_CACHE"] = str(tmp_path / "from_env")
    third = run("--no-compile-cache", out="third")
    assert "(no compile cache)" in third
    # The machine (a CPU here), then the code paths picked for it; the matmul dtype only for a
    # run that asks for "auto" (every command had said what auto takes, whatever it ran).
    assert third.splitlines()[1] == f"eqx-qd: machine: {q.internal.machine()}"
    assert third.splitlines()[2] == (
        "eqx-qd: for this machine: older CPU fusion emitters, "
        "CMA eigendecompositions one strategy at a time"
    )
    auto = (
        "bfloat16 (AVX-512 BF16 / AMX-BF16)"
        if q.internal.machine().fast_bfloat16
        else ("float32 (bfloat16 products not faster here)")
    )
    assert machine_choices(matmul_auto=True).endswith(f", matmul_dtype auto takes {auto}")
    assert not (tmp_path / "from_env").exists()


@pytest.mark.parametrize(
    "job, options, message",
    [
        (["map-elites", "--devices", "3"], [], "--devices 3 cannot be shared by --num-processes 2"),
        (["external"], [], "external runs in one process; the multi-process jobs are"),
        (["map-elites", "--devices", "2"], ["--heartbeat-timeout", "0"],
         "--heartbeat-timeout must be at least 1 second, got 0"),
    ],
)  # fmt: skip
def test_a_multi_process_layout_is_refused_before_any_process_joins(capsys, job, options, message):
    """Before joining (no coordinator listens at port 1, so joining would hang, then fail)."""
    join = ["--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "0"]
    with pytest.raises(SystemExit) as exc:
        main([*join, *options, "run", *job])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.count("\n") == 0 and message in err, err


@pytest.mark.parametrize(
    "job, arguments, message",
    [
        ("map-elites", dict(devices=3), "devices 3 cannot be shared by num_processes 2"),
        ("external", dict(devices=2), "external runs in one process; the multi-process jobs are"),
        ("no-such-job", {}, "job 'no-such-job' is not registered"),
    ],
)
def test_launching_from_python_checks_the_layout_before_joining(job, arguments, message):
    """`jobs.launch`, the command's launching as a Python call: the same checks, as
    `ValueError`s naming the argument, before anything joins (nothing listens at port 1)."""
    join = dict(coordinator="127.0.0.1:1", num_processes=2, process_id=0)
    with pytest.raises(ValueError, match=message):
        jobs.launch(job, **arguments, **join)
    with pytest.raises(ValueError, match="process_id needs a multi-process run"):
        jobs.launch("map-elites", process_id=1)


def test_a_scheduler_s_process_count_is_checked_before_joining(capsys, monkeypatch):
    """`--distributed` under SLURM: the count comes from `SLURM_NTASKS`, checked before JAX
    tries to join (nothing listens at the port this job id would give)."""
    monkeypatch.setenv("SLURM_NTASKS", "2")
    for name, value in (("SLURM_JOB_ID", "1"), ("SLURM_STEP_NODELIST", "127.0.0.1"),
                        ("SLURM_PROCID", "0"), ("SLURM_LOCALID", "0")):  # fmt: skip
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exc:
        main(["--distributed", "run", "map-elites", "--devices", "3"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2, err
    assert "--devices 3 cannot be shared by the scheduler's 2 processes" in err, err


PBT_TINY = [
    "run", "pbt", "--population-size", "4", "--rounds", "1", "--agent", "td3",
    "--iterations-per-round", "3", "--num-envs", "2", "--hidden", "8", "--minibatch-size", "8",
    "--buffer-size", "200", "--episode-length", "20", "--eval-episodes", "2",
    "--best-fraction", "0.25", "--worse-fraction", "0.25", "--no-progress", "--no-plots",
]  # fmt: skip


@pytest.mark.e2e
def test_the_pbt_job_takes_one_host_device_per_core_unless_told(tmp_path):
    """`eqx-qd run pbt` without `--devices` on a CPU: one host device per core, the
    population split over as many as divide it, said in the log; the run folder's config
    leaves the count to the machine it resumes on. `XLA_FLAGS` naming a host device count
    keeps it."""
    cores = len(os.sched_getaffinity(0))
    split = max(d for d in range(1, min(cores, 4) + 1) if 4 % d == 0)

    def run(out, flags=""):
        cmd = [sys.executable, "-m", "eqx_qd.cli", *PBT_TINY, "--out", str(tmp_path / out)]
        env = launched_env()
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flags}".strip()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return [line for line in done.stdout.splitlines() if line.startswith("eqx-qd:")]

    lines = run("auto")
    assert lines[0].startswith(f"eqx-qd: pbt on {cores} cpu device"), lines
    assert lines[3].startswith(f"eqx-qd: population of 4 split over {split} cpu device"), lines
    assert f"at most one per core of {cores};" in lines[3]
    assert "devices" not in (tmp_path / "auto" / "config.toml").read_text()
    lines = run("flag", "--xla_force_host_platform_device_count=3")
    assert lines[0].startswith("eqx-qd: pbt on 3 cpu devices"), lines
    assert lines[3].startswith(f"eqx-qd: population of 4 split over {min(split, 2)} cpu"), lines
