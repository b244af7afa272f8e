"""The external job (`eqx-qd run external`): MAP-Elites over an evaluator outside JAX, its
per-candidate records, its journal and resume in the middle of a batch."""

import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import jax
import numpy as np
import pytest

import eqx_qd
from eqx_qd import jobs


TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TESTS)  # the evaluators' module, as a user's would be on the path

import external_evaluators as evs  # noqa: E402


SMALL = dict(
    evaluator="external_evaluators:counted_arm", batch_size=8, iterations=6, cells=16,
    cvt_samples=200, checkpoint_every=2,
)  # fmt: skip


def _rows(path, drop=("wall_s", "eval_s", "seconds")) -> list[list[str]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    keep = [j for j, name in enumerate(rows[0]) if name not in drop]
    return [[r[j] for j in keep] for r in rows]


def _same_repertoire(a, b) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)


@pytest.mark.e2e
def test_a_run_records_every_candidate_and_equals_itself_on_processes(tmp_path):
    config = jobs.ExternalConfig(**SMALL)
    here = jobs.run(config, tmp_path / "here", progress=False, plots=False)
    assert here.last["evaluations"] == 8 * 7 and here.last["failed"] == 0
    assert here.progress["qd_score"][-1] > here.progress["qd_score"][0]
    rows = _rows(tmp_path / "here" / "evaluations.csv")
    assert rows[0] == ["iteration", "candidate", "status", "fitness", "descriptor_0",
                       "descriptor_1", "attempts", "error"]  # fmt: skip
    assert len(rows) == 1 + 8 * 7 and {r[2] for r in rows[1:]} == {"ok"}
    assert [int(r[0]) for r in rows[1::8]] == list(range(7))
    assert os.listdir(tmp_path / "here" / "journal") == []  # all checkpointed
    # On two local processes: the same run (the order results arrive in does not matter).
    on_processes = jobs.ExternalConfig(**{**SMALL, "workers": 2})
    there = jobs.run(on_processes, tmp_path / "there", progress=False, plots=False)
    _same_repertoire(here.repertoire, there.repertoire)
    assert _rows(tmp_path / "here" / "progress.csv") == _rows(tmp_path / "there" / "progress.csv")
    again = jobs.load_run(tmp_path / "there")
    _same_repertoire(again.repertoire, there.repertoire)


@pytest.mark.e2e
def test_reevaluations_log_the_corrected_figures_and_leave_no_journal(tmp_path):
    # A deterministic evaluator: its elites re-evaluate to themselves, so the corrected
    # figures are the stored ones and the spreads 0. A noisy one: the corrected figures fall
    # below the stored ones. Neither counts its re-evaluations as the run's evaluations.
    small = dict(SMALL, evaluator="external_evaluators:sphere", iterations=2, reevaluations=3,
                 qd_offset=10.0)  # fmt: skip
    run = jobs.run(jobs.ExternalConfig(**small), tmp_path / "plain", progress=False, plots=False)
    p = run.progress
    np.testing.assert_allclose(p["corrected_qd_score"], p["qd_score"], rtol=1e-6)
    np.testing.assert_array_equal(p["corrected_coverage"], p["coverage"])
    assert np.all(p["fitness_reproducibility"] < 1e-6) and list(p["evaluations"]) == [8, 16, 24]
    assert os.listdir(tmp_path / "plain" / "journal") == []
    noisy = dict(small, evaluator="external_evaluators:noisy_sphere", iterations=4, cells=4)
    run = jobs.run(jobs.ExternalConfig(**noisy), tmp_path / "noisy", progress=False, plots=False)
    p = run.progress
    assert np.all(p["fitness_reproducibility"] > 0)
    assert p["corrected_qd_score"][-1] < p["qd_score"][-1]


@pytest.mark.e2e
def test_sampling_me_ls_and_extract_me_run_over_an_evaluator_outside_jax(tmp_path):
    # Each candidate evaluated 3 times on the pool (one evaluations.csv row per sample), its
    # estimates told; ME-LS inserts by those samples; Extract-ME shares the batch with the
    # elites it re-evaluates. The evaluations column counts every evaluation.
    small = dict(SMALL, evaluator="external_evaluators:noisy_sphere", iterations=3,
                 qd_offset=10.0, samples=3, estimator="median")  # fmt: skip
    me_ls = dict(small, repertoire="low_spread")
    run = jobs.run(jobs.ExternalConfig(**me_ls), tmp_path / "m", progress=False, plots=False)
    assert list(run.progress["evaluations"]) == [24, 48, 72, 96]
    assert len(_rows(tmp_path / "m" / "evaluations.csv")) == 1 + 96
    assert isinstance(run.state.repertoire, eqx_qd.LowSpreadRepertoire)
    assert int(run.repertoire.num_filled) > 0
    assert jobs.group_of(run) == "ME-LS, 3 samples on external_evaluators:noisy_sphere"
    sampled = dataclasses.replace(run, config=jobs.ExternalConfig(**small))  # plain sampling
    assert jobs.group_of(sampled) == (
        "MAP-Elites, 3 samples (median) on external_evaluators:noisy_sphere"
    )
    extract = dict(SMALL, evaluator="external_evaluators:noisy_sphere", iterations=3,
                   qd_offset=10.0, repertoire="extract", depth=2, reevaluations=2)  # fmt: skip
    run = jobs.run(jobs.ExternalConfig(**extract), tmp_path / "e", progress=False, plots=False)
    assert int(run.state.repertoire.counts.max()) > 1  # elites re-evaluated within the batch
    assert np.all(np.isfinite(run.progress["corrected_qd_score"]))


@pytest.mark.e2e
def test_a_run_killed_mid_batch_resumes_without_evaluating_again(tmp_path, monkeypatch):
    whole = jobs.run(jobs.ExternalConfig(**SMALL), tmp_path / "whole", progress=False)
    evs.CALLS.clear()
    # Killed at the 5th candidate of iteration 3 (after the first batch, iterations 0 to 2
    # and 4 candidates): iterations 2 and 3 are past the checkpoint at 2, and their 12
    # outcomes are in the journal.
    monkeypatch.setenv("EQX_QD_TEST_STOP_AT", str(8 * 4 + 5))
    out = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        jobs.run(jobs.ExternalConfig(**SMALL), out, progress=False, plots=False)
    assert jobs.list_checkpoints(out)[-1].step == 2
    assert sorted(os.listdir(out / "journal")) == ["00000002.jsonl", "00000003.jsonl"]
    monkeypatch.delenv("EQX_QD_TEST_STOP_AT")
    evs.CALLS.clear()
    resumed = jobs.run(jobs.ExternalConfig(**SMALL), out, progress=False, plots=False, resume=True)
    assert len(evs.CALLS) == 8 * 7 - (8 * 4 + 4)  # only what the killed run had not finished
    _same_repertoire(whole.repertoire, resumed.repertoire)
    assert _rows(out / "evaluations.csv") == _rows(tmp_path / "whole" / "evaluations.csv")
    assert _rows(out / "progress.csv") == _rows(tmp_path / "whole" / "progress.csv")


@pytest.mark.e2e
def test_the_cma_emitters_and_a_repertoire_without_cells_run_outside_jax():
    options = dict(emitter="cma_me", num_emitters=2, repertoire="dns", capacity=12, iterations=3)
    config = jobs.ExternalConfig(**{**SMALL, **options})
    result = jobs.run(config, None, progress=False)
    assert result.last["evaluations"] == 8 * 4 and result.last["failed"] == 0
    assert result.state.repertoire.capacity == 12  # the DNS population, beside the result grid
    assert np.isfinite(result.last["qd_score"]) and result.last["coverage"] > 0


def test_fitnesses_below_minus_the_qd_offset_are_warned_of():
    """The sphere's fitnesses go down to -2 on [0, 1]^8 where the default `qd_offset` is 1:
    the QD-score could be negative and fall, and the run says so and what to set (it had
    said nothing: issue 76, item 8); with `qd_offset` 8 it is silent."""
    config = dict(SMALL, evaluator="external_evaluators:sphere", iterations=1)
    with pytest.warns(UserWarning, match=r"reach -\d.*Set --qd-offset \(qd_offset\) above"):
        jobs.run(jobs.ExternalConfig(**config), None, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jobs.run(jobs.ExternalConfig(**config, qd_offset=8.0), None, progress=False)


def test_a_journal_line_cut_by_a_kill_is_skipped_and_the_next_starts_afresh(tmp_path):
    from eqx_qd.external import Outcome, Status
    from eqx_qd.jobs import _external

    path = str(tmp_path / "00000003.jsonl")
    ok = Outcome(Status.OK, -1.5, (0.25, 0.75), 0.01)
    record = {"candidate": 0, "digest": "d0", **ok.to_json()}
    with open(path, "w") as f:  # one whole line, then one cut midway
        f.write(json.dumps(record) + "\n" + json.dumps({**record, "candidate": 1})[:30])
    with _external._open_journal(path) as f:
        f.write(json.dumps({**record, "candidate": 2, "digest": "d2"}) + "\n")
    done = _external._read_journal(path, ["d0", "d1", "d2"])
    assert sorted(done) == [0, 2] and done[2] == ok


@pytest.mark.e2e
def test_failed_evaluations_are_recorded_and_never_stored(tmp_path):
    faulty = {"evaluator": "external_evaluators:faulty", "qd_offset": 8.0}  # (8 genes in [0, 1])
    config = jobs.ExternalConfig(**{**SMALL, **faulty})
    result = jobs.run(config, tmp_path / "run", progress=False, plots=False)
    rows = _rows(tmp_path / "run" / "evaluations.csv")[1:]
    failed = [r for r in rows if r[2] != "ok"]
    assert result.last["failed"] == len(failed) > 0
    assert {r[2] for r in failed} <= {"error", "invalid"}
    assert all(r[3] == "-inf" and r[-1] for r in failed)
    assert any("external_evaluators:faulty returned a descriptor of shape (3,)" in r[-1]
               for r in failed)  # fmt: skip
    fitnesses = np.asarray(result.repertoire.fitnesses)
    assert np.all(np.isfinite(fitnesses) | np.isneginf(fitnesses))


def test_bad_settings_are_named_before_anything_runs(tmp_path):
    every = jobs.ExternalConfig(**{**SMALL, "evaluator": "external_evaluators:three_descriptors"})
    with pytest.raises(ValueError, match="every candidate of the first batch failed.*three_desc"):
        jobs.run(every, tmp_path / "a", progress=False, plots=False)
    for bad, match in [
        (dict(emitter="cma_mega"), "has none"),
        (dict(scheduler="local"), "workers 1"),
        (dict(workers=-1), "workers"),
        (dict(timeout=0.0), "timeout"),
        (dict(genotype_min=1.0), "genotype_min must be below"),
        (dict(evaluator="external_evaluators.sphere"), "package.module:function"),
        (dict(overlap=True), "give workers 1 or more"),
        (dict(overlap=True, workers=2, emitter="cma_me"), "adapts its distribution"),
        (dict(overlap=True, workers=2, scheduler="local", timeout=5.0), "Dask timeout"),
    ]:
        with pytest.raises(ValueError, match=match):
            jobs.ExternalConfig(**{**SMALL, **bad})
    with pytest.raises(ValueError, match="cannot import"):
        jobs.run(jobs.ExternalConfig(**{**SMALL, "evaluator": "nowhere:f"}), None, progress=False)


@pytest.mark.e2e
def test_overlap_is_one_batch_ahead_deterministic_and_resumable(tmp_path):
    overlap = {**SMALL, "evaluator": "external_evaluators:sphere", "genotype_dim": 4,
               "qd_offset": 4.0, "overlap": True}  # fmt: skip
    whole = jobs.run(jobs.ExternalConfig(**{**overlap, "workers": 2}), tmp_path / "whole",
                     progress=False, plots=False)  # fmt: skip
    qd = whole.progress["qd_score"]
    assert whole.last["evaluations"] == 8 * 7 and qd[-1] > qd[0]
    # One worker or two, and a run lengthened on resume: the same run.
    short = {**overlap, "workers": 1, "iterations": 3}
    jobs.run(jobs.ExternalConfig(**short), tmp_path / "short", progress=False, plots=False)
    longer = jobs.ExternalConfig(**{**overlap, "workers": 1})
    resumed = jobs.run(longer, tmp_path / "short", progress=False, plots=False, resume=True)
    _same_repertoire(whole.repertoire, resumed.repertoire)
    assert _rows(tmp_path / "short" / "evaluations.csv") == _rows(
        tmp_path / "whole" / "evaluations.csv"
    )
    # The first two batches are asked from the same state; then each from the state one
    # batch behind: not the run without overlap.
    plain = jobs.run(jobs.ExternalConfig(**{**overlap, "overlap": False}), None, progress=False)
    assert not np.array_equal(
        np.asarray(plain.repertoire.genotypes), np.asarray(whole.repertoire.genotypes)
    )


@pytest.mark.e2e
def test_an_overlapped_run_killed_with_sigkill_resumes_equal(tmp_path):
    from launched import launched_env

    env = launched_env(PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    options = ["--evaluator", "external_evaluators:slow_sphere", "--genotype-dim", "4",
               "--qd-offset", "4", "--batch-size", "16", "--iterations", "8", "--cells", "16",
               "--cvt-samples", "200", "--checkpoint-every", "3", "--workers", "2", "--overlap",
               "--no-progress", "--no-plots"]  # fmt: skip
    command = [sys.executable, "-m", "eqx_qd.cli", "run", "external", *options]
    out = tmp_path / "killed"
    with open(tmp_path / "stderr", "wb") as err:
        proc = subprocess.Popen(
            [*command, "--out", str(out)],
            env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )  # fmt: skip
        journal = out / "journal" / "00000005.jsonl"  # batch 5 runs while 4 ends
        deadline = time.monotonic() + 240
        while not (journal.exists() and 0 < len(journal.read_text().splitlines()) < 16):
            assert proc.poll() is None, (tmp_path / "stderr").read_text()[-2000:]
            assert time.monotonic() < deadline, "the run never reached iteration 5"
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert jobs.list_checkpoints(out)[-1].step == 3
    done = subprocess.run(
        [*command[:5], "--resume", str(out), "--no-progress", "--no-plots"],
        env=env, capture_output=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    config = jobs.ExternalConfig.from_toml(out / "config.toml")
    whole = jobs.run(config, tmp_path / "whole", progress=False, plots=False)
    _same_repertoire(jobs.load_run(out).repertoire, whole.repertoire)
    assert _rows(out / "evaluations.csv") == _rows(tmp_path / "whole" / "evaluations.csv")


@pytest.mark.e2e
def test_a_dask_run_killed_with_sigkill_mid_batch_resumes_equal(tmp_path):
    from launched import launched_env

    env = launched_env(PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    options = ["--evaluator", "external_evaluators:slow_sphere", "--genotype-dim", "4",
               "--qd-offset", "4", "--batch-size", "16", "--iterations", "8", "--cells", "16",
               "--cvt-samples", "200", "--checkpoint-every", "3", "--no-progress",
               "--no-plots"]  # fmt: skip
    command = [sys.executable, "-m", "eqx_qd.cli", "run", "external", *options]
    out = tmp_path / "killed"
    with open(tmp_path / "stderr", "wb") as err:
        proc = subprocess.Popen(
            [*command, "--workers", "2", "--scheduler", "local", "--out", str(out)],
            env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )  # fmt: skip
        journal = out / "journal" / "00000004.jsonl"  # past the checkpoint at 3
        deadline = time.monotonic() + 240
        while not (journal.exists() and 0 < len(journal.read_text().splitlines()) < 16):
            assert proc.poll() is None, (tmp_path / "stderr").read_text()[-2000:]
            assert time.monotonic() < deadline, "the run never reached iteration 4"
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its cluster and its workers
        proc.wait(timeout=30)
    assert jobs.list_checkpoints(out)[-1].step == 3
    done = subprocess.run(
        [*command[:5], "--resume", str(out), "--workers", "2", "--scheduler", "local",
         "--no-progress", "--no-plots"],
        env=env, capture_output=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    # The uninterrupted run, in this process, one candidate after another.
    config = jobs.ExternalConfig.from_toml(out / "config.toml")
    import dataclasses

    whole = jobs.run(
        dataclasses.replace(config, workers=0, scheduler=None), tmp_path / "whole",
        progress=False, plots=False,
    )  # fmt: skip
    _same_repertoire(jobs.load_run(out).repertoire, whole.repertoire)
    assert _rows(out / "evaluations.csv") == _rows(tmp_path / "whole" / "evaluations.csv")
