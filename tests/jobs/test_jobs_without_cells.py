"""PGA-ME and ME-PBT on repertoires without cells: they run, report their passive CVT, read
back and resume like any run."""

import csv

import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import jobs


PGAME = dict(
    env="point_maze", evaluations=160, random_init=32, init_batch_size=32, batch_size=32,
    cells=16, cvt_samples=1000, snapshot_every=160, critic_steps=4, pg_steps=2,
    hidden=(8,), critic_hidden=(16,), minibatch_size=16, buffer_size=2_000,
    episode_length=20, deterministic=True, repertoire="dns", capacity=48,
)  # fmt: skip

MEPBT = dict(
    pg_population_size=4, ga_population_size=2, num_training_iterations=2, num_envs=2,
    buffer_size=200, hidden=(8,), minibatch_size=8, fraction_best_to_replace_from=0.25,
    fraction_to_replace_from_best=0.25, fraction_to_replace_from_samples=0.25, cells=16,
    cvt_samples=1000, episode_length=20, repertoire="unstructured", capacity=12,
    novelty_threshold=0.05,
)  # fmt: skip


@pytest.mark.e2e
def test_pgame_on_dns_reports_its_cvt_and_resumes_equal(tmp_path):
    whole = jobs.run(jobs.PGAMEConfig(**PGAME), tmp_path / "whole", progress=False, plots=False)
    assert isinstance(whole.state.repertoire, q.DNSRepertoire)
    assert whole.state.repertoire.capacity == 48
    assert whole.repertoire.num_cells == 16  # the passive CVT is what the folder holds
    assert int(whole.repertoire.num_filled) > 0
    # Every id the CVT stores is an actor of the actors file.
    with open(tmp_path / "whole" / "actors.csv", newline="") as f:
        ids = {int(row["id"]) for row in csv.DictReader(f)}
    stored = np.asarray(whole.repertoire.extra)[np.asarray(whole.repertoire.filled)]
    assert set(stored.tolist()) <= ids
    half = dict(PGAME, evaluations=96)
    jobs.run(jobs.PGAMEConfig(**half), tmp_path / "half", progress=False, plots=False)
    again = jobs.resume(tmp_path / "half", evaluations=160, progress=False, plots=False)
    assert np.array_equal(
        np.asarray(again.state.repertoire.fitnesses), np.asarray(whole.state.repertoire.fitnesses)
    )
    loaded = jobs.load_run(tmp_path / "whole")
    assert np.array_equal(loaded.repertoire.fitnesses, whole.repertoire.fitnesses)


@pytest.mark.e2e
def test_me_pbt_on_an_unstructured_archive(tmp_path):
    result = jobs.run(
        jobs.MEPBTConfig(iterations=3, **MEPBT), tmp_path / "run", progress=False, plots=False
    )
    assert isinstance(result.state.repertoire, q.UnstructuredRepertoire)
    assert result.repertoire.num_cells == 16
    assert 0 < int(result.state.repertoire.num_filled) <= 12
    assert result.progress["qd_score"][-1] > 0
    jobs.run(jobs.MEPBTConfig(iterations=1, **MEPBT), tmp_path / "short", progress=False)
    again = jobs.resume(tmp_path / "short", iterations=3, progress=False, plots=False)
    assert np.array_equal(
        np.asarray(again.state.repertoire.fitnesses), np.asarray(result.state.repertoire.fitnesses)
    )
    assert np.array_equal(again.progress["qd_score"], result.progress["qd_score"])


def test_jobs_with_a_cvt_refuse_a_grid():
    with pytest.raises(ValueError, match="pgame's cells are a CVT"):
        jobs.PGAMEConfig(repertoire="grid")
    with pytest.raises(ValueError, match="ME-PBT's cells are a CVT"):
        jobs.MEPBTConfig(repertoire="grid")
