"""The multi-objective job: MOME writes its folder and reads back; NSGA-II and SPEA2 run in
it with their Pareto grid; bad input named."""

import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import jobs


SMALL = dict(
    genotype_dim=6, cells=6, cvt_samples=600, front_length=4, batch_size=16, population=16,
    log_every=5, checkpoint_every=5, variation_percentage=0.5,
)  # fmt: skip


def test_mome_job_writes_and_reads_back(tmp_path):
    # Resumed equal to an uninterrupted run: tests/jobs/test_resume.py, as every job.
    whole = jobs.run(
        jobs.MOMEConfig(iterations=10, **SMALL), tmp_path / "whole", progress=False, plots=True
    )
    for name in ("progress.csv", "repertoire.eqx", "centroids.npy", "hypervolume.png",
                 "fronts.png", "progress.png"):  # fmt: skip
        assert (tmp_path / "whole" / name).is_file(), name
    progress = whole.progress
    assert progress["iteration"].tolist() == [0, 5, 10]
    assert progress["evaluations"].tolist() == [16, 96, 176]
    assert progress["moqd_score"][-1] > progress["moqd_score"][0]
    assert isinstance(whole.repertoire, q.ParetoRepertoire)
    back = jobs.load_run(tmp_path / "whole")
    np.testing.assert_array_equal(
        np.asarray(back.repertoire.front_objectives), np.asarray(whole.repertoire.front_objectives)
    )
    assert jobs.group_of(back) == "MOME on mo_rastrigin"
    assert "MOQD-score" in jobs.JOBS["mome"].summary(back)


@pytest.mark.parametrize("algorithm", ["nsga2", "spea2"])
def test_ga_baselines_run_in_the_job(algorithm):
    config = jobs.MOMEConfig(algorithm=algorithm, task="mo_sphere", iterations=10, **SMALL)
    result = jobs.run(config, None, progress=False, plots=False)
    assert isinstance(result.state.repertoire, (q.NSGA2Repertoire, q.SPEA2Repertoire))
    assert isinstance(result.repertoire, q.ParetoRepertoire)  # the grid the metrics read
    assert result.progress["global_hypervolume"][-1] > result.progress["global_hypervolume"][0]
    name = {"nsga2": "NSGA-II", "spea2": "SPEA2"}[algorithm]
    assert jobs.group_of(result) == f"{name} on mo_sphere"


def test_a_tri_objective_run_writes_its_folder(tmp_path):
    config = jobs.MOMEConfig(task="mo_rastrigin3", iterations=5, **SMALL)
    result = jobs.run(config, tmp_path / "run", progress=False, plots=True)
    assert result.repertoire.num_objectives == 3
    assert result.progress["moqd_score"][-1] > result.progress["moqd_score"][0]
    assert (tmp_path / "run" / "hypervolume.png").is_file()
    assert not (tmp_path / "run" / "fronts.png").exists()  # a plane of two objectives only


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="reference_point has 3 coordinates"):
        jobs.run(
            jobs.MOMEConfig(iterations=1, reference_point=(0.0, 0.0, 0.0), **SMALL),
            None, progress=False,
        )  # fmt: skip
    with pytest.raises(ValueError, match="does not bound the fronts"):
        jobs.run(
            jobs.MOMEConfig(iterations=1, reference_point=(0.0, 0.0), **SMALL),
            None, progress=False,
        )  # fmt: skip
    with pytest.raises(ValueError, match="algorithm"):
        jobs.MOMEConfig(algorithm="moead", **SMALL)
    with pytest.raises(ValueError, match="unknown multi-objective task"):
        jobs.MOMEConfig(task="rastrigin", **SMALL)


@pytest.mark.brax
def test_mome_pgx_runs_on_a_brax_task_resumes_equal_and_reads_back(tmp_path):
    import equinox as eqx
    import jax

    small = dict(
        task="hopper_multi", algorithm="mome-pgx", cells=4, cvt_samples=400, front_length=3,
        batch_size=6, pg_batch_size=2, episode_length=10, hidden=(8,), critic_hidden=(16,),
        critic_steps=2, pg_steps=2, minibatch_size=8, buffer_size=500, log_every=1,
        checkpoint_every=1,
    )  # fmt: skip
    config = jobs.MOMEConfig(iterations=2, **small)
    assert config.pg_split(2) == (2, 2)
    longer = jobs.run(config, tmp_path / "long", progress=False, plots=False)
    jobs.run(jobs.MOMEConfig(iterations=1, **small), tmp_path / "short", progress=False)
    again = jobs.resume(tmp_path / "short", iterations=2, progress=False, plots=False)
    same = jax.tree.map(
        lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))),
        eqx.filter(longer.state, eqx.is_array),
        eqx.filter(again.state, eqx.is_array),
        is_leaf=lambda x: x is None,
    )
    assert all(jax.tree.leaves(same))
    assert longer.repertoire.crowding and longer.repertoire.num_objectives == 2
    assert longer.progress["evaluations"].tolist() == [6, 12, 18]
    back = jobs.load_run(tmp_path / "long")
    np.testing.assert_array_equal(
        np.asarray(back.repertoire.front_objectives), np.asarray(longer.repertoire.front_objectives)
    )
    assert jobs.group_of(back) == "MOME-PGX on hopper_multi"
    with pytest.raises(ValueError, match="mome-pgx learns policies: task 'mo_sphere'"):
        jobs.MOMEConfig(algorithm="mome-pgx", task="mo_sphere")
    with pytest.raises(ValueError, match="cannot hold 2 policy-gradient emitters of 4"):
        jobs.MOMEConfig(**{**small, "pg_batch_size": 4})


@pytest.mark.brax
def test_a_users_policy_task_is_checked_for_its_own_objective_count(monkeypatch):
    """MOME-PGX needs one policy-gradient emitter per objective: the config checks the
    split for the built-in brax tasks before anything is built, and the job checks a user's
    task, whose objective count only its environment knows, when it builds it (the config's
    check had assumed two)."""
    from eqx_qd.jobs._mome import MO_TASKS, POLICY

    monkeypatch.setattr(MO_TASKS, "_entries", dict(MO_TASKS._entries))
    MO_TASKS.register(
        "my_hopper3",
        lambda *, episode_length=100: q.envs.BraxMultiObjectiveEnv(
            "hopper_multi3", episode_length=episode_length
        ),
        tags=(POLICY,),
    )
    config = jobs.MOMEConfig(
        algorithm="mome-pgx", task="my_hopper3", batch_size=8, pg_batch_size=3,
        episode_length=5, iterations=1,
    )  # fmt: skip
    with pytest.raises(ValueError, match="batch_size 8 cannot hold 3 policy-gradient emitters"):
        jobs.run(config, None, progress=False, plots=False)
