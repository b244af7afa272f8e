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
