"""Two processes on 127.0.0.1 (``jax.distributed``, CPU collectives through gloo) running the
jobs over the four devices of both (MAP-Elites stopped and resumed): every process holds the same
results, only process 0 writes the folders, and the runs equal the same jobs in one process
(ME-PBT, MAP-Elites and MOME on four devices, bit for bit; PGA-ME and IPPO on four devices, PBT on
one, up to float rounding); the SLURM recipe; a dead process."""

import socket
import subprocess
import sys
import time

import equinox as eqx
import jax
import numpy as np
import pytest
from launched import launched_env
from test_jobs_on_devices import PGAME_TINY

from eqx_qd import jobs


TINY = dict(
    pg_population_size=4, ga_population_size=2, num_training_iterations=2, num_envs=2,
    buffer_size=200, hidden=(8,), minibatch_size=8, fraction_best_to_replace_from=0.25,
    fraction_to_replace_from_best=0.25, fraction_to_replace_from_samples=0.25, cells=16,
    cvt_samples=1000, episode_length=20, checkpoint_every=2,
)  # fmt: skip


JOBS = (
    "pbt",
    "map-elites",
    "pgame",
    "ippo",
    "mome",
)  # saved by the worker as OUT/<job>-<process>.npz, beside ME-PBT's

PBT_TINY = dict(
    population_size=4, agent="td3", iterations_per_round=3, num_envs=2, hidden=(8,),
    minibatch_size=8, buffer_size=200, episode_length=20, eval_episodes=2, best_fraction=0.25,
    worse_fraction=0.25,
)  # fmt: skip


def map_elites_config(iterations: int, devices: int = 4) -> jobs.MAPElitesConfig:
    """The tiny MAP-Elites run (rastrigin, 4 genes, 32 cells) of `iterations` batches of 8,
    every iteration logged (a run stopped early logs its last iteration too)."""
    return jobs.MAPElitesConfig(
        genotype_dim=4, cells=32, cvt_samples=1000, batch_size=8, iterations=iterations,
        log_every=1, devices=devices,
    )  # fmt: skip


def mome_config(iterations: int, devices: int = 4) -> jobs.MOMEConfig:
    """The tiny MOME run (bi-objective rastrigin, 4 genes, 8 cells, fronts of 3) of
    `iterations` batches of 4 per device, every iteration logged."""
    return jobs.MOMEConfig(
        genotype_dim=4, cells=8, cvt_samples=500, front_length=3, batch_size=4,
        iterations=iterations, log_every=1, checkpoint_every=1, devices=devices,
    )  # fmt: skip


def pgame_config(batches: int, devices: int = 4) -> jobs.PGAMEConfig:
    """The tiny PGA-ME run of `batches` batches after its random policies."""
    evaluations = PGAME_TINY["random_init"] + batches * PGAME_TINY["batch_size"]
    return jobs.PGAMEConfig(**{**PGAME_TINY, "evaluations": evaluations, "devices": devices})


def ippo_config(iterations: int, devices: int = 4) -> jobs.IPPOConfig:
    """The tiny IPPO run of `iterations` iterations, evaluated after each."""
    return jobs.IPPOConfig(
        num_envs=8, rollout_length=8, num_minibatches=2, hidden=(8,), iterations=iterations,
        eval_frequency=1, eval_episodes=4, devices=devices,
    )  # fmt: skip


def saved_run(result) -> dict[str, np.ndarray]:
    """A run's logs and final state as flat NumPy arrays (the worker saves them)."""
    out = {f"progress.{k}": np.asarray(v) for k, v in result.progress.items() if k != "wall_s"}
    for name, table in result.tables.items():
        out |= {f"{name}.{k}": np.asarray(v) for k, v in table.items()}
    leaves = jax.tree.leaves(eqx.filter(result.state, eqx.is_array))
    for i, leaf in enumerate(leaves):
        is_key = jax.numpy.issubdtype(leaf.dtype, jax.dtypes.prng_key)
        out[f"state.{i}"] = np.asarray(jax.random.key_data(leaf) if is_key else leaf)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(out, iterations, *extra):
    port = _free_port()
    env = launched_env(JAX_PLATFORMS="cpu")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "tests/jobs/distributed_worker.py",
                str(port),
                str(i),
                str(out),
                str(iterations),
                *extra,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        for i in range(2)
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=300)[0].decode())
    finally:
        for p in procs:
            p.kill()
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    views = None
    if (out / "process-0.npz").exists():
        views = [dict(np.load(out / f"process-{i}.npz")) for i in range(2)]
    saved = [job for job in JOBS if (out / f"{job}-0.npz").exists()]
    runs = {job: [dict(np.load(out / f"{job}-{i}.npz")) for i in range(2)] for job in saved}
    return views, runs


@pytest.mark.e2e
def test_two_processes_hold_one_run_and_resume_to_the_one_process_run(tmp_path):
    """One test for every claim, as they read the same runs (about two minutes): split over
    several tests, a module-scoped fixture was built once per pytest-xdist worker."""
    out = tmp_path / "distributed"
    out.mkdir()
    first, first_runs = _launch(out, 3)  # MAP-Elites alone, stopped after 2 iterations
    second, second_runs = _launch(out, 4, "resume")  # it resumes to 3; the others run afresh
    assert first is None and list(first_runs) == ["map-elites"]

    # Every process holds the same repertoire; only process 0 writes the folder.
    a, b = second
    assert int(a["processes"]) == 2 and int(a["devices"]) == 4
    for name in ("fitnesses", "descriptors", "ids"):
        np.testing.assert_array_equal(a[name], b[name])
    assert str(a["folder"]).endswith("run") and str(b["folder"]) == "None"
    # The invariants of any run: a filled cell has a finite fitness and a descriptor in bounds.
    fit = second[0]["fitnesses"]
    filled = np.isfinite(fit)
    assert filled.sum() > 0 and np.all(np.abs(second[0]["descriptors"][filled]) <= 1.0 + 1e-6)

    # The two-process ME-PBT run equals the same job on four devices of one process.
    folder = out / "run"
    assert jobs.run_status(folder)["status"] == "finished"
    progress = jobs.load_run(folder).progress
    assert progress["iteration"].tolist() == [0, 1, 2, 3, 4]
    config = jobs.MEPBTConfig(**{**TINY, "iterations": 4, "devices": 4})
    one = jobs.run(config, tmp_path / "one", progress=False, plots=False)
    np.testing.assert_array_equal(np.asarray(one.repertoire.fitnesses), second[0]["fitnesses"])
    for column in ("qd_score", "num_filled", "env_steps"):
        np.testing.assert_array_equal(one.progress[column], progress[column])
    with open(folder / "hparams.csv") as f:  # every iteration, 4 devices x 4 agents
        assert len(f.read().strip().splitlines()) == 1 + 5 * 16

    # PBT, MAP-Elites, PGA-ME and IPPO: both processes hold the whole run, the same on both.
    assert set(second_runs) == set(JOBS)
    for job in JOBS:
        for a, b in [runs[job] for runs in (first_runs, second_runs) if job in runs]:
            assert a.keys() == b.keys() and str(b["folder"]) == "None"
            for name in a:
                if name != "folder":
                    np.testing.assert_array_equal(a[name], b[name], err_msg=f"{job} {name}")
    # PBT's three rounds equal three rounds on one device of one process (every layout gives
    # one device's results, up to float rounding).
    single = jobs.run(
        jobs.PBTConfig(**PBT_TINY, rounds=3), tmp_path / "pbt", progress=False, plots=False
    )
    _assert_same_run(saved_run(single), second_runs["pbt"][0], rtol=1e-4, atol=1e-5)
    # MOME's three iterations equal three on four devices of one process, bit for bit.
    mome = jobs.run(mome_config(3), tmp_path / "mome", progress=False, plots=False)
    _assert_same_run(saved_run(mome), second_runs["mome"][0], rtol=0.0, atol=0.0)
    # PGA-ME's three batches equal three batches on four devices of one process (its
    # data-parallel critic makes the device count part of the run), up to float rounding: gloo
    # sums the averaged gradients in another order than one process.
    four = jobs.run(pgame_config(3), tmp_path / "pgame", progress=False, plots=False)
    _assert_same_run(saved_run(four), second_runs["pgame"][0], rtol=1e-5, atol=1e-6)
    # Its critic and greedy actor are equal on every device; each device's buffer (400 / 4
    # rows) holds its own episodes; the greedy actor is evaluated once per batch.
    pg = four.state.emitter_state[-1]  # (GA, policy gradient), each with a device axis
    learner = (pg.td3.critic, pg.td3.policy, pg.td3.target_critic, pg.td3.target_policy)
    for leaf in jax.tree.leaves(eqx.filter(learner, eqx.is_array)):
        leaf = np.asarray(leaf)
        assert leaf.shape[0] == 4 and all(np.array_equal(leaf[i], leaf[0]) for i in range(4))
    obs = np.asarray(pg.buffer.data.obs)
    assert obs.shape[:2] == (4, 100) and not np.array_equal(obs[0], obs[1])
    assert four.progress["evaluations"].tolist() == [8, 16, 24, 32]
    assert np.all(np.diff(four.progress["qd_score"]) >= 0)
    filled = np.isfinite(np.asarray(four.repertoire.fitnesses))
    assert filled.sum() == four.progress["num_filled"][-1]
    with open(tmp_path / "pgame" / "actors.csv") as f:
        kinds = [line.split(",")[8] for line in f.read().splitlines()[1:]]
    assert kinds.count("greedy") <= 3  # at most one per batch
    # MAP-Elites' run, stopped and resumed, equals four devices of one process bit for bit
    # (only gathers cross devices).
    assert jobs.run_status(out / "map-elites")["status"] == "finished"
    four = jobs.run(map_elites_config(3), tmp_path / "me", progress=False, plots=False)
    _assert_same_run(saved_run(four), second_runs["map-elites"][0], rtol=0, atol=0)
    # IPPO within float rounding, as PGA-ME (data parallel over the environments).
    four = jobs.run(ippo_config(3), tmp_path / "ippo", progress=False, plots=False)
    _assert_same_run(saved_run(four), second_runs["ippo"][0], rtol=1e-5, atol=1e-6)


def _assert_same_run(want: dict, got: dict, rtol: float, atol: float) -> None:
    assert want.keys() == {k for k in got if k != "folder"}
    for name, value in want.items():
        if np.issubdtype(value.dtype, np.floating):
            np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], value, err_msg=name)


def _cli(port: int, pid: int, *options: str) -> list[str]:
    return [
        sys.executable, "-m", "eqx_qd.cli", "--coordinator", f"127.0.0.1:{port}",
        "--num-processes", "2", "--process-id", str(pid), "--heartbeat-timeout", "5",
        "--no-compile-cache", *options,
    ]  # fmt: skip


ENDLESS = [  # (no --devices: a multi-process run takes every device of every process)
    "run", "map-elites", "--genotype-dim", "4", "--cells", "32",
    "--cvt-samples", "1000", "--batch-size", "8", "--iterations", "1000000", "--log-every", "5",
    "--checkpoint-every", "10", "--no-plots", "--no-progress",
]  # fmt: skip


@pytest.mark.e2e
@pytest.mark.parametrize("role", ["writer", "reader"])
def test_a_dead_process_stops_the_others_with_one_line_that_names_it_and_resumes(tmp_path, role):
    """Kill process 0 (the writer, which holds the coordination service) or process 1 (a
    reader) of a running two-process job: the survivor exits with status 75 within the
    heartbeat timeout and some seconds, its last line naming the dead process and the command
    that resumes the run; that command continues it from its last checkpoint."""
    folder = tmp_path / "run"
    victim = 0 if role == "writer" else 1
    port = _free_port()
    env = launched_env(JAX_PLATFORMS="cpu")
    logs = [open(tmp_path / f"process-{i}.log", "wb") for i in range(2)]  # noqa: SIM115
    procs = [
        subprocess.Popen(_cli(port, i, *ENDLESS, "--out", str(folder)), env=env, stderr=logs[i])
        for i in range(2)
    ]
    survivor = procs[1 - victim]
    try:
        deadline = time.monotonic() + 240
        while not (folder.exists() and jobs.list_checkpoints(folder)):
            assert time.monotonic() < deadline and survivor.poll() is None, "the run never ran"
            time.sleep(0.2)
        procs[victim].kill()
        survivor.wait(timeout=90)  # heartbeat 5 s: well within
    finally:
        for p, log in zip(procs, logs):
            p.kill()
            p.wait()
            log.close()
    err = (tmp_path / f"process-{1 - victim}.log").read_bytes()
    assert survivor.returncode == 75, err.decode()[-3000:]
    last = err.decode().strip().splitlines()[-1]
    named = (
        "process 0 of 2 (the coordinator) stopped or cannot be reached"
        if victim == 0
        else "process 1 of 2 stopped"
    )
    assert last.startswith(f"eqx-qd: error: {named}; process {1 - victim} stops too"), last
    command = last.split("To resume, run ", 1)[1].split(" on every process")[0]
    assert command.endswith(f"run map-elites --resume {folder}"), last
    # The folder says the run was interrupted (the writer wrote it, or its process is gone).
    assert jobs.run_status(folder)["status"] == "interrupted"

    # The command resumes the run on both processes (its port freed: a new one), lengthened to
    # just past its last checkpoint.
    step = jobs.list_checkpoints(folder)[-1].step
    args = command.split()[1:]
    args[args.index("--coordinator") + 1] = f"127.0.0.1:{_free_port()}"
    at = args.index("--process-id") + 1
    resumed, outs = [], [open(tmp_path / f"resumed-{i}.log", "wb") for i in range(2)]  # noqa: SIM115
    try:
        for i in range(2):
            args[at] = str(i)
            extra = ["--iterations", str(step + 5), "--no-plots", "--no-progress"]
            cmd = [sys.executable, "-m", "eqx_qd.cli", *args, *extra]
            resumed.append(subprocess.Popen(cmd, env=env, stdout=outs[i], stderr=outs[i]))
        for p in resumed:
            p.wait(timeout=240)
    finally:
        for p, out in zip(resumed, outs):
            p.kill()
            p.wait()
            out.close()
    logs = [(tmp_path / f"resumed-{i}.log").read_text() for i in range(2)]
    for p, log in zip(resumed, logs):
        assert p.returncode == 0, log[-3000:]
    assert f"from its newest checkpoint, iteration {step}" in logs[0]
    assert jobs.run_status(folder)["status"] == "finished"
    assert jobs.load_run(folder).progress["iteration"].tolist()[-1] == step + 5


def _free_slurm_job_id() -> int:
    """A job id whose port (JAX's SLURM rule: 61440 + id mod 4096) is free here."""
    for job_id in range(4096):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", 61440 + job_id))
            except OSError:
                continue
            return 1000 * 4096 + job_id
    raise RuntimeError("no free port in JAX's SLURM range")


@pytest.mark.e2e
def test_the_slurm_recipe_runs_two_processes_from_the_environment(tmp_path):
    """The cluster recipe of `docs/long-runs.md` (`srun eqx-qd --distributed run ...`) under
    a fake SLURM step: two local processes, each with the variables `srun` sets, joined by
    JAX's own SLURM detection; the devices are made per process from `SLURM_NTASKS`."""
    folder = tmp_path / "run"
    slurm = dict(SLURM_JOB_ID=str(_free_slurm_job_id()), SLURM_STEP_NODELIST="127.0.0.1",
                 SLURM_NTASKS="2", SLURM_STEP_NUM_NODES="1")  # fmt: skip
    command = [
        sys.executable, "-m", "eqx_qd.cli", "--distributed", "--heartbeat-timeout", "5",
        "--no-compile-cache", "run", "map-elites", "--devices", "4", "--genotype-dim", "4",
        "--cells", "32", "--cvt-samples", "1000", "--batch-size", "8", "--iterations", "3",
        "--no-plots", "--no-progress", "--out", str(folder),
    ]  # fmt: skip
    procs = [
        subprocess.Popen(
            command,
            env=launched_env(
                JAX_PLATFORMS="cpu", SLURM_PROCID=str(i), SLURM_LOCALID=str(i), **slurm
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]
    try:
        logs = [p.communicate(timeout=240)[0].decode() for p in procs]
    finally:
        for p in procs:
            p.kill()
    for i, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, log[-3000:]
        assert f"map-elites on 4 cpu devices, process {i} of 2" in log, log[-3000:]
    assert jobs.run_status(folder)["status"] == "finished"
    assert jobs.load_run(folder).progress["iteration"].tolist()[-1] == 3
