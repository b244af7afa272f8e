"""Two processes on 127.0.0.1 (``jax.distributed``, CPU collectives through gloo) running the
ME-PBT job over the four devices of both, then resuming it: every process holds the same
repertoire, only process 0 writes the folder, and the run equals the same job on four
devices of one process."""

import socket
import subprocess
import sys

import numpy as np
import pytest
from launched import launched_env

from eqx_qd import jobs


TINY = dict(
    pg_population_size=4, ga_population_size=2, num_training_iterations=2, num_envs=2,
    buffer_size=200, hidden=(8,), minibatch_size=8, fraction_best_to_replace_from=0.25,
    fraction_to_replace_from_best=0.25, fraction_to_replace_from_samples=0.25, cells=16,
    cvt_samples=1000, episode_length=20, checkpoint_every=2,
)  # fmt: skip


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
    return [dict(np.load(out / f"process-{i}.npz")) for i in range(2)]


@pytest.mark.slow
def test_two_processes_hold_one_repertoire_and_resume_to_the_one_process_run(tmp_path):
    """One test for both claims, as they read the same runs (about two minutes): split over
    two tests, a module-scoped fixture was built once per pytest-xdist worker."""
    out = tmp_path / "distributed"
    out.mkdir()
    first = _launch(out, 3)
    second = _launch(out, 4, "resume")  # killed after 3 iterations, say, and lengthened

    # Every process holds the same repertoire; only process 0 writes the folder.
    for views in (first, second):
        a, b = views
        assert int(a["processes"]) == 2 and int(a["devices"]) == 4
        for name in ("fitnesses", "descriptors", "ids"):
            np.testing.assert_array_equal(a[name], b[name])
        assert str(a["folder"]).endswith("run") and str(b["folder"]) == "None"
    # The invariants of any run: a filled cell has a finite fitness and a descriptor in bounds,
    # and the resumed run never lost a cell.
    fit = second[0]["fitnesses"]
    filled = np.isfinite(fit)
    assert filled.sum() >= np.isfinite(first[0]["fitnesses"]).sum() > 0
    assert np.all(np.abs(second[0]["descriptors"][filled]) <= 1.0 + 1e-6)

    # The resumed two-process run equals the same job on four devices of one process.
    folder = out / "run"
    assert jobs.run_status(folder)["status"] == "finished"
    assert [c.step for c in jobs.list_checkpoints(folder)] == [3, 4]  # the first run ended at 3
    progress = jobs.load_run(folder).progress
    assert progress["iteration"].tolist() == [0, 1, 2, 3, 4]
    config = jobs.MEPBTConfig(**{**TINY, "iterations": 4, "devices": 4})
    one = jobs.run(config, tmp_path / "one", progress=False, plots=False)
    np.testing.assert_array_equal(np.asarray(one.repertoire.fitnesses), second[0]["fitnesses"])
    for column in ("qd_score", "num_filled", "env_steps"):
        np.testing.assert_array_equal(one.progress[column], progress[column])
