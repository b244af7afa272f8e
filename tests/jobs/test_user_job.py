"""A user's job (`user_job.py`, a plugin module) on the jobs' driver: registered with
`jobs.register_job`, run and lengthened through `eqx-qd` in a fresh process, listed, and read
back; and a user's agent (`user_plugin.py`) through the PBT and ME-PBT jobs."""

import csv
import os
import subprocess
import sys

import numpy as np
import pytest

from eqx_qd import jobs
from eqx_qd.cli import main


TESTS = os.path.dirname(os.path.abspath(__file__))
OPTIONS = ["--log-every", "2", "--checkpoint-every", "40", "--no-progress", "--no-plots"]


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "eqx_qd.cli", "--plugin", "user_job", *args]


def _rows(path) -> list[list[str]]:
    """A CSV's rows without its wall-clock column."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    drop = rows[0].index("wall_s")
    return [[v for j, v in enumerate(r) if j != drop] for r in rows]


@pytest.mark.e2e
def test_a_plugin_job_runs_and_resumes_through_the_command(tmp_path):
    """The command in a fresh process runs a plugin's job, then lengthens it with
    ``--resume``: the folder holds what the uninterrupted run writes in this process. (A kill
    and its resume are the driver's, tested once: `test_resume.py`.)"""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]),
    }
    out = tmp_path / "run"
    first = subprocess.run(
        _command("run", "hill-climb", *OPTIONS, "--iterations", "200", "--out", str(out)),
        env=env, capture_output=True, timeout=300,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr.decode()[-2000:]
    assert jobs.run_status(out)["status"] == "finished"
    done = subprocess.run(
        _command("run", "hill-climb", "--resume", str(out), "--iterations", "400",
                 "--no-progress", "--no-plots"),
        env=env, capture_output=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert f"resuming {out} (finished) from its newest checkpoint, iteration 200" in (
        done.stdout.decode()
    )
    assert jobs.run_status(out)["status"] == "finished"
    # What the uninterrupted run writes, in this process (the plugin imported here too).
    import user_job

    config = user_job.HillClimbConfig(iterations=400, log_every=2, checkpoint_every=40)
    whole = jobs.run(config, tmp_path / "whole", progress=False, plots=False)
    assert _rows(out / "progress.csv") == _rows(tmp_path / "whole" / "progress.csv")
    assert np.array_equal(np.load(out / "best.npy"), np.asarray(whole.state.best))
    again = jobs.load_run(out)  # read back through the registered job
    assert again.last["fitness"] == whole.last["fitness"] > whole.progress["fitness"][0]


@pytest.mark.e2e
def test_a_plugin_job_is_listed_and_its_folder_needs_the_plugin(tmp_path, capsys):
    assert main(["--plugin", "user_job", "list"]) == 0
    assert "hill-climb" in capsys.readouterr().out
    out = tmp_path / "run"
    small = ["--iterations", "6", "--log-every", "2", "--checkpoint-every", "2"]
    assert main(["--plugin", "user_job", "run", "hill-climb", *small, "--out", str(out)]) == 0
    assert jobs.run_status(out)["status"] == "finished"
    assert [c.step for c in jobs.list_checkpoints(out)] == [4, 6]
    # Read without the plugin (a fresh process, whose registry lacks it): the hint says so.
    done = subprocess.run(
        [sys.executable, "-c", f"from eqx_qd import jobs; jobs.load_run({str(out)!r})"],
        capture_output=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode != 0 and b"--plugin MODULE" in done.stderr


def test_a_users_option_with_a_ready_made_check_is_refused_by_name(tmp_path, capsys):
    """`jobs.checks` holds the checks the library's options use; with one, `--offspring -3`
    is refused naming the option, before the folder is made (without, it had reached an MLIR
    traceback and a `failed` folder: issue 76, item 8)."""
    out = tmp_path / "bad"
    with pytest.raises(SystemExit):
        main(["--plugin", "user_job", "run", "hill-climb", "--offspring", "-3", "--out", str(out)])
    assert "--offspring must be a positive integer, got -3" in capsys.readouterr().err
    assert not out.exists()
    for name, check, bad in [
        ("rate", jobs.checks.between(0.0, 1.0), 1.5),
        ("mode", jobs.checks.one_of("fast", "exact"), "slow"),
        ("scale", jobs.checks.positive, 0.0),
        ("offset", jobs.checks.non_negative, -1.0),
        ("count", jobs.checks.non_negative_int, 2.5),
    ]:
        with pytest.raises((ValueError, TypeError), match=name):
            check(name, bad)


def test_register_job_refuses_what_is_not_a_job():
    import user_job

    with pytest.raises(TypeError, match="Job"):
        jobs.register_job(user_job.HillClimbJob)  # the class, not an instance

    class Renamed(user_job.HillClimbJob):
        name = "climb"  # its config says hill-climb

    with pytest.raises(ValueError, match="JOB = 'hill-climb'"):
        jobs.register_job(Renamed())
    assert "climb" not in jobs.JOBS


@pytest.mark.e2e
def test_a_user_agent_gets_run_folders_through_a_plugin(tmp_path, capsys):
    from eqx_qd import jobs
    from eqx_qd.cli import main

    common = ["--population-size", "5", "--rounds", "2", "--iterations-per-round", "3",
              "--num-envs", "2", "--buffer-size", "64", "--hidden", "8", "--minibatch-size", "8",
              "--no-plots", "--no-progress"]  # fmt: skip
    out = tmp_path / "pbt"
    assert main(["--plugin", "user_plugin", "run", "pbt", "--agent", "ddpg", "--out", str(out),
                 *common]) == 0  # fmt: skip
    assert "final mean return" in capsys.readouterr().out
    run = jobs.load_run(out)
    assert run.config.agent == "ddpg" and run.state.policy_opt is None  # storage form
    config = tmp_path / "me.toml"
    config.write_text(
        "agent = 'ddpg'\npg_population_size = 4\nga_population_size = 2\n"
        "num_training_iterations = 1\nnum_envs = 2\nbuffer_size = 64\nhidden = [8]\n"
        "minibatch_size = 8\nfraction_best_to_replace_from = 0.25\n"
        "fraction_to_replace_from_best = 0.25\nfraction_to_replace_from_samples = 0.25\n"
        "cells = 16\ncvt_samples = 1000\nepisode_length = 20\niterations = 1\n"
    )
    me_out = tmp_path / "me"
    assert main(["--plugin", "user_plugin", "run", "me-pbt", "--config", str(config), "--out",
                 str(me_out), "--no-plots", "--no-progress"]) == 0  # fmt: skip
    assert jobs.load_run(me_out).repertoire.genotypes.target_critic is None
    # Options the agent does not take are refused by name; a missing plugin names itself.
    with pytest.raises(SystemExit):
        main(["--plugin", "user_plugin", "run", "pbt", "--agent", "ddpg", "--rollout-length",
              "8", "--out", str(tmp_path / "bad")])  # fmt: skip
    assert "takes no option --rollout-length" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--plugin", "no_such_plugin", "run", "pbt", "--out", str(tmp_path / "bad")])
    assert "--plugin no_such_plugin: cannot import it" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_the_driver_closes_a_run_s_plan_however_the_run_ends():
    """`LoopJob.close` hears of the run's end with its plan, once, after a finished run and
    after one whose chunk raised; the registered jobs keep nothing of a run on themselves."""
    import user_job

    from eqx_qd.jobs._progress import Progress

    class Closing(user_job.HillClimbJob):
        fail_at: int | None = None

        def __init__(self):
            self.closed = []

        def advance(self, plan, climber, step, clock):
            if step == self.fail_at:
                raise RuntimeError("the simulator diverged")
            return super().advance(plan, climber, step, clock)

        def close(self, plan):
            self.closed.append(plan)

    config = user_job.HillClimbConfig(iterations=6, log_every=2)
    job = Closing()
    result = job.run(config, None, progress=Progress(show=False), plots=False, resume=False)
    assert len(job.closed) == 1 and job.closed[0].config == config == result.config
    job.fail_at = 2
    with pytest.raises(RuntimeError, match="diverged"):
        job.run(config, None, progress=Progress(show=False), plots=False, resume=False)
    assert len(job.closed) == 2 and job.closed[1] is not job.closed[0]
    # A registered job holds its definition only (`PolicyQDJob`'s data), no run's state.
    definition = {"name", "config_cls", "make", "env_steps", "help", "description", "translator"}
    assert all(set(vars(registered)) <= definition for registered in jobs.JOBS.values())
