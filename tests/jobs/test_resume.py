"""Every registered job, at a tiny size, through the command and through resume: the command
writes the folder the docs describe, a run interrupted between two chunks and resumed writes
what the uninterrupted run writes (state and logs, bit for bit on CPU), and a shorter run
lengthened on resume ends as the longer run, each job run once of each kind in one module
fixture. Then the driver's other resumes, once: forks leave their source alone, a folder killed
before its first checkpoint starts again, and ``kill -9`` of the command at random moments
leaves a resumable folder."""

import csv
import dataclasses
import filecmp
import logging
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time

import equinox as eqx
import jax
import numpy as np
import pytest

import eqx_qd
from eqx_qd import jobs
from eqx_qd.cli import main


DOCS = pathlib.Path(__file__).parents[2] / "docs"


ME = dict(
    task="sphere", genotype_dim=3, cells=16, cvt_samples=500, batch_size=8, iterations=12,
    log_every=2, checkpoint_every=4, keep_checkpoints=2,
)  # fmt: skip
PGAME = dict(
    env="point_maze", evaluations=544, random_init=64, init_batch_size=32, batch_size=32,
    cells=64, cvt_samples=5000, snapshot_every=160, checkpoint_every=160, critic_steps=20,
    pg_steps=5, hidden=(16,), critic_hidden=(32, 32), minibatch_size=32,
    buffer_size=10_000, episode_length=50, deterministic=True,
)  # fmt: skip
DCRL = dict(
    PGAME, pg_batch_size=8, ai_batch_size=8, actor_evals=2,
    reward_offset=2.83,
)  # fmt: skip
QDPG = dict(PGAME, archive_acceptance_threshold=0.05, archive_size=500)
# Loops of 2 iterations: the encoder trained at the start and at loops 2 and 6, size control
# at loops 1, 3, 5 and 7 (the run is 15 iterations).
AURORA = dict(
    PGAME, target_size=48, encoder_batch_size=16, encoder_epochs=3, later_epochs=2,
    aurora_loop=2, observe_every=5, l_value=0.05,
)  # fmt: skip
MEES = dict(
    env="point_maze", evaluations=1 + 12 * 9, sample_number=8, num_optimizer_steps=2,
    cells=16, cvt_samples=1000, snapshot_every=36, checkpoint_every=36, hidden=(8,),
    episode_length=30, novelty_archive_size=64, reevaluations=2,
)  # fmt: skip
MEPBT = dict(
    pg_population_size=4, ga_population_size=2, num_training_iterations=2, num_envs=2,
    buffer_size=200, hidden=(8,), minibatch_size=8, fraction_best_to_replace_from=0.25,
    fraction_to_replace_from_best=0.25, fraction_to_replace_from_samples=0.25, cells=16,
    cvt_samples=1000, episode_length=20, iterations=5, checkpoint_every=2,
    corrected_reevaluations=2,
)  # fmt: skip
PBT = dict(
    population_size=4, rounds=4, agent="td3", iterations_per_round=3, num_envs=2, hidden=(8,),
    minibatch_size=8, buffer_size=200, episode_length=20, eval_episodes=2, best_fraction=0.25,
    worse_fraction=0.25, checkpoint_every=2,
)  # fmt: skip
IPPO = dict(
    num_agents=2, size=6, episode_length=8, rollout_length=8, num_envs=4, num_minibatches=2,
    iterations=4, eval_frequency=2, eval_episodes=4,
)  # fmt: skip
MOME = dict(
    genotype_dim=4, cells=6, cvt_samples=300, front_length=4, batch_size=8, iterations=12,
    log_every=2, checkpoint_every=4, variation_percentage=0.5,
)  # fmt: skip

# tests/ is on the path: the evaluator's module, as a user's would be.
EXTERNAL = dict(
    evaluator="external_evaluators:counted_arm",
    batch_size=8,
    iterations=6,
    cells=16,
    cvt_samples=200,
    checkpoint_every=2,
)

# (config, the logged row's step column, the step after which the run is interrupted)
CASES = {
    "map-elites": (jobs.MAPElitesConfig(**ME), "iteration", 7),
    "external": (jobs.ExternalConfig(**EXTERNAL), "iteration", 3),
    # A noisy task, sampled twice, with its corrected figures at every snapshot: resumed equal.
    "pgame": (
        jobs.PGAMEConfig(
            **{
                **PGAME,
                "deterministic": False,
                "fitness_noise": 0.05,
                "descriptor_noise": 0.01,
                "corrected_reevaluations": 2,
                "samples": 2,
            }
        ),  # fmt: skip
        "evaluations",
        64 + 32 * 9,
    ),
    "dcrl-me": (jobs.DCRLMEConfig(**DCRL), "evaluations", 64 + 32 * 9),
    "me-pbt": (jobs.MEPBTConfig(**MEPBT), "iteration", 3),
    # A noisy start (reset noise): the ES samples' episodes resumed equal too.
    "mees": (jobs.MEESConfig(**MEES), "evaluations", 1 + 9 * 5),
    "qdpg": (jobs.QDPGConfig(**QDPG), "evaluations", 64 + 32 * 9),
    "aurora": (jobs.AuroraConfig(**AURORA), "evaluations", 64 + 32 * 9),
    "pbt": (jobs.PBTConfig(**PBT), "round", 2),
    "ippo": (jobs.IPPOConfig(**IPPO), "iterations", 2),
    "mome": (jobs.MOMEConfig(**MOME), "iteration", 7),
}

# (the config's length key, a shorter length, off the logs' and checkpoints' grid where the
# job has one): the run of that length, lengthened on resume to the case's, is the case's run.
SHORTER = {
    "map-elites": ("iterations", 7),
    "external": ("iterations", 3),
    "pgame": ("evaluations", 64 + 32 * 9),
    "dcrl-me": ("evaluations", 64 + 32 * 9),
    "me-pbt": ("iterations", 3),
    "mees": ("evaluations", 1 + 9 * 5),
    # (QDPG lengthened from 64 + 32 * 9 first runs a chunk of one iteration, which XLA compiles
    # without its loop: the diversity learner's critic then differs from the longer run's by
    # float rounding, about 1e-8; from two iterations on it is the longer run bit for bit.)
    "qdpg": ("evaluations", 64 + 32 * 8),
    "aurora": ("evaluations", 64 + 32 * 8),
    "pbt": ("rounds", 3),
    "ippo": ("iterations", 3),
    "mome": ("iterations", 7),
}

# What each job's folder holds once the job has run with its figures drawn: every name in
# the guides (`docs/jobs.md`, `docs/algorithms.md`; an archive snapshot as `archive_<evals>.csv`).
QD = {"centroids.npy", "checkpoints", "config.toml", "progress.csv", "progress.png",
      "repertoire.eqx", "repertoire.png", "status.json"}  # fmt: skip
POLICY_QD = QD | {  # snapshots every 160 of 544 evaluations
    "actors.csv",
    "archive_224.csv",
    "archive_384.csv",
    "archive_544.csv",
    "fitness_density.png",
}
FOLDERS = {
    "map-elites": QD,
    "external": QD | {"evaluations.csv", "journal"},
    "pgame": POLICY_QD,
    "dcrl-me": POLICY_QD,
    "qdpg": POLICY_QD,
    "aurora": POLICY_QD,
    "me-pbt": QD | {"hparams.csv", "hparams.png", "repertoire_hparams.png"},
    "mees": QD | {  # snapshots every 36 of 109 evaluations (generations of 1 + 8)
        "actors.csv",
        "archive_37.csv",
        "archive_73.csv",
        "archive_109.csv",
        "fitness_density.png",
    },
    "pbt": {"checkpoints", "config.toml", "hparams.csv", "hparams.png", "population.eqx",
            "progress.csv", "returns.png", "status.json"},
    "ippo": {"agent.json", "checkpoints", "config.toml", "hparams.json", "learning_curve.png",
             "progress.csv", "status.json"},
    "mome": {"centroids.npy", "checkpoints", "config.toml", "fronts.png", "hypervolume.png",
             "progress.csv", "progress.png", "repertoire.eqx", "status.json"},
}  # fmt: skip


class _Interrupt(Exception):
    pass


def _stop_after(column, step):
    def on_log(row):
        if row[column] >= step:
            raise _Interrupt  # as a notebook's interrupt, between two chunks

    return on_log


def _same_arrays(a, b) -> bool:
    leaves = jax.tree.map(
        lambda x, y: bool(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)),
        eqx.filter(a, eqx.is_array),
        eqx.filter(b, eqx.is_array),
    )
    return jax.tree.structure(eqx.filter(a, eqx.is_array)) == jax.tree.structure(
        eqx.filter(b, eqx.is_array)
    ) and all(jax.tree.leaves(leaves))


def _key_data(tree):
    # Typed keys compare through their data.
    is_key = lambda x: (
        isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
    )
    return jax.tree.map(lambda x: jax.random.key_data(x) if is_key(x) else x, tree)


SECONDS = ("wall_s", "eval_s", "seconds")
"""The logs' columns of seconds spent (the run's; the external job's evaluations' in all and
each one's): their own in every run."""


def _without_wall_clock(path):
    """A CSV's text without its columns of seconds spent (`SECONDS`)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    drop = {j for j, name in enumerate(rows[0]) if name in SECONDS} if rows else ()
    return [[c for j, c in enumerate(r) if j not in drop] for r in rows]


def _same_files(a, b, names):
    """Byte for byte, CSVs but for their wall-clock column."""
    out = {}
    for n in names:
        pa, pb = os.path.join(a, n), os.path.join(b, n)
        if n.endswith(".csv"):
            out[n] = _without_wall_clock(pa) == _without_wall_clock(pb)
        else:
            out[n] = filecmp.cmp(pa, pb, shallow=False)
    return out


@pytest.fixture(scope="module", params=sorted(CASES))
def interrupted(request, tmp_path_factory):
    """The job run whole (``whole``, its figures drawn), then again interrupted after a logged
    row and resumed with `jobs.resume` (``cut``), in one process."""
    name = request.param
    config, column, step = CASES[name]
    root = tmp_path_factory.mktemp(name)
    whole = jobs.run(config, root / "whole", progress=False, plots=True)
    with pytest.raises(_Interrupt):
        jobs.run(
            config, root / "cut", progress=False, plots=False, on_log=_stop_after(column, step)
        )
    status = jobs.run_status(root / "cut")["status"]
    checkpoints = [c.step for c in jobs.list_checkpoints(root / "cut")]
    compiles = _Compiles()
    logging.getLogger("jax").addHandler(compiles)
    try:
        with jax.log_compiles(True):
            resumed = jobs.resume(root / "cut", progress=False, plots=False)
    finally:
        logging.getLogger("jax").removeHandler(compiles)
    length, shorter = SHORTER[name]
    short = jobs.run(
        dataclasses.replace(config, **{length: shorter}), root / "short", progress=False,
        plots=False,
    )  # fmt: skip
    lengthened = jobs.resume(
        root / "short", progress=False, plots=False, **{length: getattr(config, length)}
    )
    return name, root, whole, resumed, status, checkpoints, compiles.names, (short, lengthened)


def test_the_cases_are_every_registered_job():
    builtin = {n for n, job in jobs.JOBS.items() if type(job).__module__.startswith("eqx_qd.")}
    assert set(CASES) == builtin == set(FOLDERS)


@pytest.mark.e2e
def test_every_job_writes_its_documented_folder(interrupted):
    """A finished run's folder holds exactly the files the guides name for the job; it reads
    back as the config it ran, finished, and the job sums it up in a line."""
    name, root, whole, *_ = interrupted
    assert set(os.listdir(root / "whole")) == FOLDERS[name]
    guides = "".join((DOCS / page).read_text() for page in ("jobs.md", "algorithms.md"))
    named = {re.sub(r"^archive_\d+\.csv$", "archive_<evals>.csv", f) for f in FOLDERS[name]}
    assert [f for f in sorted(named) if f not in guides] == []
    back = jobs.load_run(root / "whole")
    assert back.config == whole.config == CASES[name][0]
    assert jobs.run_status(root / "whole")["status"] == "finished"
    assert jobs.JOBS[name].summary(back).strip()


class _Compiles(logging.Handler):
    """The names of the programs XLA compiles while it is installed (``jax.log_compiles``)."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def emit(self, record):
        found = re.match(r"Finished XLA compilation of jit\((.*?)\)", record.getMessage())
        if found:
            self.names.add(found.group(1))


@pytest.mark.e2e
def test_a_resumed_run_equals_the_uninterrupted_run(interrupted):
    name, root, whole, resumed, status, checkpoints, compiled, _ = interrupted
    assert status == "failed" and checkpoints  # interrupted with a checkpoint to go on from
    # The resume, in the process of the runs before it, reuses their compiled programs: it
    # compiles only JAX's ``stage`` copies, which put the loaded arrays on the device.
    # (The ME-PBT job once made its jitted functions per run, and compiled them again.)
    assert compiled <= {"stage"}, compiled
    assert _same_arrays(_key_data(whole.state), _key_data(resumed.state)), name
    assert list(whole.progress) == list(resumed.progress)
    for column in whole.progress:
        if column not in SECONDS:
            np.testing.assert_array_equal(whole.progress[column], resumed.progress[column])
    wall = resumed.progress["wall_s"]  # goes on over the resume, never back
    assert np.all(np.diff(wall) >= 0) and wall[0] >= 0
    # Every CSV the same, byte for byte but for the seconds spent: each row exactly once.
    csvs = sorted(n for n in os.listdir(root / "whole") if n.endswith(".csv"))
    assert csvs and sorted(n for n in os.listdir(root / "cut") if n.endswith(".csv")) == csvs
    assert all(_same_files(root / "whole", root / "cut", csvs).values())
    assert jobs.run_status(root / "cut")["status"] == "finished"
    # The checkpoints kept: the newest `keep_checkpoints`, the last at the run's end.
    kept = jobs.list_checkpoints(root / "cut")
    keep, wholes = CASES[name][0].keep_checkpoints, jobs.list_checkpoints(root / "whole")
    assert len(kept) == len(wholes[-keep:] if keep else wholes)  # 0 keeps every one (IPPO's)
    assert [c.step for c in kept] == [c.step for c in jobs.list_checkpoints(root / "whole")]


@pytest.mark.e2e
def test_a_lengthened_run_equals_the_longer_run(interrupted):
    """Every job run to a shorter length (`SHORTER`), then resumed to the case's length, ends
    in the longer run's state, and logs the longer run's rows with the shorter run's last row
    kept (a notebook that ran a job, looked, and asked for more). An IPPO run of 3 iterations
    lengthened to 8 had evaluated at 3, 5, 7 and trained on other keys (issue 76, item 11)."""
    name, root, whole, *_, (short, lengthened) = interrupted
    step = CASES[name][1]
    assert _same_arrays(_key_data(whole.state), _key_data(lengthened.state)), name
    steps = lengthened.progress[step].tolist()
    short_end = short.progress[step][-1]
    assert sorted(set(whole.progress[step].tolist()) | {short_end}) == steps, (name, steps)
    rows = {s: j for j, s in enumerate(whole.progress[step].tolist())}
    for j, s in enumerate(steps):
        for column in whole.progress:
            if s in rows and column not in SECONDS:
                got, want = lengthened.progress[column][j], whole.progress[column][rows[s]]
                if column.startswith("corrected_") and np.isnan(want) and s == short_end:
                    continue  # the shorter run's end was a snapshot: its figures are logged
                assert got == want or (np.isnan(got) and np.isnan(want)), (name, s, column)
    wall = lengthened.progress["wall_s"]  # seconds spent, going on over the resume
    assert np.all(np.isfinite(wall)) and np.all(np.diff(wall) >= 0)


@pytest.mark.e2e
@pytest.mark.parametrize("interrupted", ["pgame"], indirect=True)  # the same run as above
def test_a_policy_run_logs_its_corrected_figures_at_the_snapshots(interrupted):
    # The first row (the random policies) and each iteration that passes a multiple of
    # snapshot_every (160 evaluations) carry the corrected figures; the other rows NaN. Each
    # candidate plays two episodes (env_steps counts both).
    name, root, whole, *_ = interrupted
    evals, corrected = whole.progress["evaluations"], whole.progress["corrected_qd_score"]
    assert list(evals[np.isfinite(corrected)]) == [64, 160, 320, 480]
    assert np.all(np.isfinite(whole.progress["fitness_reproducibility"][np.isfinite(corrected)]))
    assert jobs.group_of(whole) == "PGA-ME, 2 samples (mean) on point_maze"
    np.testing.assert_array_equal(whole.progress["env_steps"], evals * 2 * 50)  # 2 episodes each


@pytest.mark.e2e
@pytest.mark.parametrize("interrupted", ["dcrl-me"], indirect=True)  # the same run as above
def test_dcrl_me_folder_names_its_injected_actors_and_counts_the_actor_episodes(interrupted):
    name, root, whole, *_ = interrupted
    with open(root / "whole" / "actors.csv", newline="") as f:
        kinds = {row["type"] for row in csv.DictReader(f)}
    assert {"random", "evo", "gradient", "injected"} <= kinds
    evals, steps = whole.progress["evaluations"], whole.progress["env_steps"]
    iterations = (evals - 64) // 32  # each also plays the conditioned actor twice (DCG-ME's)
    np.testing.assert_array_equal(steps, (evals + 2 * iterations) * 50)
    assert jobs.group_of(whole) == "DCRL-ME on point_maze"
    dcg = dataclasses.replace(whole, config=dataclasses.replace(whole.config, ai_batch_size=0))
    assert jobs.group_of(dcg) == "DCG-ME on point_maze"
    best = jobs.replay(root / "whole")  # the deterministic maze plays the best elite again
    assert best.stored_fitness == pytest.approx(float(np.max(whole.repertoire.fitnesses)))
    assert best.episode_return == pytest.approx(best.stored_fitness, rel=1e-5)


@pytest.mark.e2e
@pytest.mark.parametrize("interrupted", ["mees"], indirect=True)  # the same run as above
def test_mees_folder_counts_the_es_samples_and_names_the_offsprings_roots(interrupted):
    name, root, whole, *_ = interrupted
    evals, steps = whole.progress["evaluations"], whole.progress["env_steps"]
    np.testing.assert_array_equal(evals, 1 + 9 * np.arange(13))  # 1 + 8 samples a generation
    np.testing.assert_array_equal(steps, evals * 30)  # one episode each, offspring or sample
    with open(root / "whole" / "actors.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["type"] for r in rows} == {"random", "es"}
    ids = {r["id"] for r in rows}
    # Every stored offspring's root is an elite that was stored (-1 only before the first
    # parent was drawn: the first offspring is the random policy itself).
    assert all(r["parent_1"] in ids for r in rows if r["type"] == "es" and r["parent_1"] != "-1")
    assert any(r["parent_1"] != "-1" for r in rows if r["type"] == "es")
    assert jobs.group_of(whole) == "ME-ES on point_maze"


@pytest.mark.e2e
@pytest.mark.parametrize("interrupted", ["qdpg"], indirect=True)  # the same run as above
def test_qdpg_folder_names_both_learners_children_and_keeps_the_state_archive(interrupted):
    name, root, whole, *_ = interrupted
    with open(root / "whole" / "actors.csv", newline="") as f:
        kinds = {row["type"] for row in csv.DictReader(f)}
    # (the stored elites' types: a greedy actor is stored only when it improves a cell)
    assert {"random", "evo", "gradient", "diversity"} <= kinds
    assert kinds <= {"random", "evo", "gradient", "greedy", "diversity", "diversity_greedy"}
    assert jobs.group_of(whole) == "QDPG on point_maze"
    quality, diversity, _ = whole.state.emitter_state
    assert quality.archive is None
    archive = diversity.archive  # the maze's positions, kept 0.05 apart
    stored = np.asarray(archive.stored)
    assert 10 < len(stored) <= 500
    gaps = np.linalg.norm(stored[:, None] - stored[None], axis=-1) + np.eye(len(stored))
    assert gaps.min() > 0.05


@pytest.mark.e2e
@pytest.mark.parametrize("interrupted", ["aurora"], indirect=True)  # the same run as above
def test_aurora_folder_reports_the_passive_grid_and_keeps_the_archive_in_the_state(interrupted):
    """The state holds AURORA's archive (its encoder trained at the start and at loops 2 and
    6 of the 15 iterations, its threshold steered at loops 1, 3, 5 and 7); the folder reports
    the passive CVT over the task's descriptors; `report` names the group."""
    name, root, whole, *_ = interrupted
    assert jobs.group_of(whole) == "AURORA on point_maze"
    archive = whole.state.repertoire
    assert isinstance(archive, eqx_qd.AuroraRepertoire) and int(archive.additions) == 16
    assert float(archive.l_value) != 0.05 and int(archive.num_filled) >= 2
    stored = np.asarray(archive.filled)
    np.testing.assert_allclose(
        np.asarray(archive.latent)[stored],
        np.asarray(archive.encoder(archive.observations))[stored],
        rtol=1e-4, atol=1e-5,
    )  # fmt: skip
    figures = jobs.aurora_figures(archive, 0.0)
    assert figures["size"] == int(archive.num_filled) and figures["l_value"] > 0
    assert int(whole.repertoire.num_filled) == int(whole.progress["num_filled"][-1])


@pytest.mark.e2e
def test_a_lengthened_pbt_run_takes_the_pbt_step_its_last_round_skipped(tmp_path):
    # A run's last round has no PBT step; lengthened, the resumed run takes it first and
    # records where each member came from in that round's rows.
    whole = jobs.run(jobs.PBTConfig(**PBT), tmp_path / "whole", progress=False, plots=False)
    jobs.run(jobs.PBTConfig(**{**PBT, "rounds": 2}), tmp_path / "half", progress=False, plots=False)
    with open(tmp_path / "half" / "hparams.csv") as f:
        before = list(csv.DictReader(f))
    assert [r["next_copied_from"] for r in before if r["round"] == "1"] == ["0", "1", "2", "3"]
    again = jobs.resume(tmp_path / "half", rounds=4, progress=False, plots=False)
    assert _same_arrays(_key_data(whole.state), _key_data(again.state))
    names = ["progress.csv", "hparams.csv", "population.eqx"]
    assert all(_same_files(tmp_path / "whole", tmp_path / "half", names).values())


@pytest.mark.e2e
def test_ippo_keeps_its_newest_states_and_every_evaluation(tmp_path):
    config = jobs.IPPOConfig(**{**IPPO, "keep_checkpoints": 1})
    jobs.run(config, tmp_path / "run", progress=False, plots=False)
    assert [c.step for c in jobs.list_checkpoints(tmp_path / "run")] == [4]
    names = sorted(os.listdir(tmp_path / "run" / "checkpoints"))
    assert names == ["0000000000.json", "0000000002.json", "0000000004.eqx", "0000000004.json"]
    assert jobs.load_run(tmp_path / "run").progress["iterations"].tolist() == [0.0, 2.0, 4.0]
    # A fork carries the record along; the run goes on from the kept state.
    jobs.fork_run(tmp_path / "run", tmp_path / "fork")
    longer = jobs.resume(tmp_path / "fork", iterations=6, progress=False, plots=False)
    assert longer.progress["iterations"].tolist() == [0.0, 2.0, 4.0, 6.0]
    assert [c.step for c in jobs.list_checkpoints(tmp_path / "fork")] == [6]


@pytest.mark.e2e
def test_resuming_with_another_config_is_refused_by_name(tmp_path):
    config = jobs.MAPElitesConfig(**{**ME, "iterations": 4})
    jobs.run(config, tmp_path / "run", progress=False, plots=False)
    before = (tmp_path / "run" / "config.toml").read_text()
    changed = jobs.MAPElitesConfig(**{**ME, "iterations": 4, "batch_size": 16})
    with pytest.raises(ValueError, match=r"batch_size \(8 in the run, 16 now\).*iterations"):
        jobs.run(changed, tmp_path / "run", progress=False, resume=True)
    assert (tmp_path / "run" / "config.toml").read_text() == before
    with pytest.raises(ValueError, match="nothing to resume"):
        jobs.run(config, tmp_path / "empty", progress=False, resume=True)
    other = jobs.PBTConfig(**PBT)
    with pytest.raises(ValueError, match="holds a map-elites run, not a pbt run"):
        jobs.run(other, tmp_path / "run", progress=False, resume=True)


@pytest.mark.e2e
def test_a_folder_killed_before_its_first_checkpoint_starts_again(tmp_path):
    config = jobs.MAPElitesConfig(**ME)
    whole = jobs.run(config, tmp_path / "whole", progress=False, plots=False)
    with pytest.raises(_Interrupt):
        jobs.run(
            config, tmp_path / "cut", progress=False, plots=False,
            on_log=_stop_after("iteration", 2),
        )  # fmt: skip
    assert not jobs.list_checkpoints(tmp_path / "cut")
    # Litter of killed writes, in the folder and among the checkpoints.
    (tmp_path / "cut" / ".tmp-abc").write_bytes(b"half a file")
    (tmp_path / "cut" / "checkpoints").mkdir()
    (tmp_path / "cut" / "checkpoints" / ".tmp-0000000004.eqx").write_bytes(b"half")
    assert not jobs.list_checkpoints(tmp_path / "cut")
    again = jobs.resume(tmp_path / "cut", progress=False, plots=False)
    assert _same_arrays(_key_data(whole.state), _key_data(again.state))
    assert _same_files(tmp_path / "whole", tmp_path / "cut", ["progress.csv"])["progress.csv"]
    left = os.listdir(tmp_path / "cut") + os.listdir(tmp_path / "cut" / "checkpoints")
    assert not [n for n in left if n.startswith(".tmp")]


@pytest.mark.e2e
def test_a_fork_continues_a_chosen_checkpoint_and_leaves_its_source(tmp_path):
    config = jobs.MAPElitesConfig(**{**ME, "keep_checkpoints": 5})
    jobs.run(config, tmp_path / "src", progress=False, plots=False)
    listing = {p: (tmp_path / "src" / p).read_bytes() for p in ("progress.csv", "config.toml")}
    assert [c.step for c in jobs.list_checkpoints(tmp_path / "src")] == [4, 8, 12]
    chosen = jobs.fork_run(tmp_path / "src", tmp_path / "fork", 4)
    assert chosen.step == 4
    assert [c.step for c in jobs.list_checkpoints(tmp_path / "fork")] == [4]
    status = jobs.run_status(tmp_path / "fork")
    assert status["status"] == "forked" and status["forked_from"]["step"] == 4
    assert (
        jobs.read_log(jobs.RunFolder(tmp_path / "fork"), "progress.csv", "iteration")[1][-1][0] == 4
    )
    assert not (tmp_path / "fork" / "repertoire.eqx").exists()  # the fork writes its own
    # The branch, continued, is the uninterrupted run again; the source is untouched.
    branch = jobs.resume(tmp_path / "fork", progress=False, plots=False)
    whole = jobs.load_run(tmp_path / "src")
    assert bool(np.array_equal(branch.repertoire.fitnesses, whole.repertoire.fitnesses))
    assert {p: (tmp_path / "src" / p).read_bytes() for p in listing} == listing
    assert [c.step for c in jobs.list_checkpoints(tmp_path / "src")] == [4, 8, 12]
    # "best" is the job's criterion (the QD-score for the QD jobs): the latest here.
    assert jobs.fork_run(tmp_path / "src", tmp_path / "best", "best").step == 12
    with pytest.raises(ValueError, match="no checkpoint at step 5; the run has 4, 8, 12"):
        jobs.fork_run(tmp_path / "src", tmp_path / "five", 5)
    with pytest.raises(ValueError, match="is not empty"):
        jobs.fork_run(tmp_path / "src", tmp_path / "fork", 8)


@pytest.mark.e2e
def test_cli_resumes_and_forks(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["run", "map-elites", "--task", "sphere", "--genotype-dim", "3", "--cells", "16",
            "--cvt-samples", "500", "--batch-size", "8", "--log-every", "2",
            "--checkpoint-every", "4", "--no-progress", "--no-plots"]  # fmt: skip
    assert main([*base, "--iterations", "8", "--out", str(out)]) == 0
    assert main(["run", "map-elites", "--resume", str(out), "--iterations", "12",
                 "--no-progress", "--no-plots"]) == 0  # fmt: skip
    assert "240 evaluations" not in capsys.readouterr().out
    assert jobs.load_run(out).progress["iteration"].tolist()[-1] == 12
    fork = tmp_path / "fork"
    assert main(["run", "map-elites", "--resume", str(out), "--from", "8", "--out", str(fork),
                 "--no-progress", "--no-plots"]) == 0  # fmt: skip
    assert f"forked {out} at checkpoint 8" in capsys.readouterr().out
    assert jobs.run_status(fork)["status"] == "finished"
    for args, message in (
        (["--resume", str(out), "--from", "9", "--out", str(tmp_path / "x")], "no checkpoint at"),
        (["--from", "8"], "--from STEP forks a run"),
        (["--resume", str(out), "--batch-size", "4"], "cannot resume"),
        # A layout change: the emitter states are per device (PBT and IPPO may re-split).
        (["--resume", str(out), "--devices", "2"], "devices (1 in the run, 2 now)"),
    ):
        with pytest.raises(SystemExit) as e:
            main(["run", "map-elites", *args, "--no-progress"])
        assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.slow
def _last_logged(folder) -> int:
    """The iteration of the newest row of a running job's progress log (-1 before any)."""
    try:
        with open(folder / "progress.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        return int(rows[-1]["iteration"]) if rows else -1
    except (FileNotFoundError, KeyError, ValueError):  # not yet written, or a row half read
        return -1


@pytest.mark.e2e
def test_kill_at_random_moments_leaves_a_resumable_folder(tmp_path):
    """``kill -9`` of the command three times at iterations drawn at random (in the middle
    of a chunk), then a resume to the end: after each kill the folder says it was
    interrupted and where a resume continues, and the result equals an uninterrupted run's."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = [sys.executable, "-m", "eqx_qd.cli", "run", "map-elites", "--task", "sphere",
            "--genotype-dim", "3", "--cells", "16", "--cvt-samples", "500", "--batch-size", "8",
            "--iterations", "400", "--log-every", "2", "--checkpoint-every", "4",
            "--no-progress", "--no-plots"]  # fmt: skip
    out = tmp_path / "run"
    rng = random.Random(0)
    resume = [*args[:5], "--resume", str(out), "--no-progress", "--no-plots"]
    for attempt, moment in enumerate(sorted(rng.sample(range(2, 390), 3))):
        proc = subprocess.Popen([*args, "--out", str(out)] if attempt == 0 else resume, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 180
        while _last_logged(out) < moment:
            assert proc.poll() is None, f"the run ended before iteration {moment}"
            assert time.monotonic() < deadline, f"no iteration {moment} in 180 s"
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.01))  # somewhere in the next chunk
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        newest = jobs.list_checkpoints(out)  # always readable
        status = jobs.run_status(out)
        assert status["status"] == "interrupted" and "killed" in status["error"], status
        assert status["checkpoint"] == (newest[-1].step if newest else None), status
        if newest:
            assert f"(step {newest[-1].step})" in status["error"], status
    done = subprocess.run(resume, env=env, capture_output=True, timeout=240)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert f"resuming {out} (interrupted) from its newest checkpoint" in done.stdout.decode()
    assert jobs.run_status(out)["status"] == "finished"
    whole = jobs.run(
        jobs.MAPElitesConfig(**{**ME, "iterations": 400}), tmp_path / "whole", progress=False,
        plots=False,
    )  # fmt: skip
    assert _same_files(tmp_path / "whole", out, ["progress.csv"])["progress.csv"]
    assert bool(np.array_equal(jobs.load_run(out).repertoire.fitnesses, whole.repertoire.fitnesses))


@pytest.mark.e2e
@pytest.mark.parametrize("preset", ["cma-mae", "cma-mega"])
def test_a_cma_run_lengthened_equals_the_longer_run(tmp_path, preset):
    # Chunks of 2 on both sides: the same compiled programs. (At the suite's XLA optimisation
    # level 0, CMA-MEGA's scans of other lengths differ in the last bits; level 3 agrees.)
    small = dict(genotype_dim=10, cells=10, batch_size=16, num_emitters=2, log_every=2)
    config = jobs.MAPElitesConfig.preset(preset, iterations=8, **small)
    longer = jobs.run(config, tmp_path / "long", progress=False, plots=False)
    short = jobs.MAPElitesConfig.preset(preset, iterations=4, **small)
    jobs.run(short, tmp_path / "short", progress=False, plots=False)
    again = jobs.resume(tmp_path / "short", iterations=8, progress=False, plots=False)
    assert _same_arrays(_key_data(longer.state), _key_data(again.state))
    assert again.progress["qd_score"][-1] == longer.progress["qd_score"][-1] > 0
    # CMA-MAE reports its elitist result archive; its annealed archive is in the state.
    if preset == "cma-mae":
        assert longer.state.result is not None
        assert eqx.tree_equal(longer.repertoire.fitnesses, longer.state.result.fitnesses)


@pytest.mark.e2e
@pytest.mark.parametrize("repertoire", ["dns", "unstructured", "sliding"])
def test_a_run_without_cells_resumes_equal_and_reports_its_result_grid(tmp_path, repertoire):
    small = dict(
        genotype_dim=6, cells=4, grid=True, batch_size=8, log_every=2, repertoire=repertoire,
        capacity=24, novelty_threshold=0.05, remap_frequency=10,  # sliding remaps 5 times
    )  # fmt: skip
    config = jobs.MAPElitesConfig(iterations=6, **small)
    longer = jobs.run(config, tmp_path / "long", progress=False, plots=False)
    jobs.run(jobs.MAPElitesConfig(iterations=2, **small), tmp_path / "short", progress=False)
    again = jobs.resume(tmp_path / "short", iterations=6, progress=False, plots=False)
    assert _same_arrays(_key_data(longer.state), _key_data(again.state))
    kind = {
        "dns": eqx_qd.DNSRepertoire,
        "unstructured": eqx_qd.UnstructuredRepertoire,
        "sliding": eqx_qd.SlidingBoundariesRepertoire,
    }
    assert isinstance(longer.state.repertoire, kind[repertoire])
    assert longer.state.repertoire.capacity == (16 if repertoire == "sliding" else 24)
    # What the folder holds and reports is the passive 4 x 4 grid, as for any grid run.
    assert longer.repertoire.num_cells == 16
    loaded = jobs.load_run(tmp_path / "long")
    assert np.array_equal(loaded.repertoire.fitnesses, longer.repertoire.fitnesses)
    assert longer.progress["coverage"][-1] == pytest.approx(
        float(longer.repertoire.num_filled) / 16
    )


@pytest.mark.e2e
@pytest.mark.parametrize("preset", ["dms", "dds"])
def test_a_guided_run_resumes_equal_and_reports_its_result_grid(tmp_path, preset):
    # The discount model (its weights, Adam's moments, the archive's own random stream) and
    # the density reservoir travel in the checkpoints.
    small = dict(
        genotype_dim=6, cells=4, batch_size=8, num_emitters=2, log_every=2, empty_points=4,
        density_buffer=20,
    )  # fmt: skip
    config = jobs.MAPElitesConfig.preset(preset, iterations=6, **small)
    longer = jobs.run(config, tmp_path / "long", progress=False, plots=False)
    short = jobs.MAPElitesConfig.preset(preset, iterations=2, **small)
    jobs.run(short, tmp_path / "short", progress=False, plots=False)
    again = jobs.resume(tmp_path / "short", iterations=6, progress=False, plots=False)
    assert _same_arrays(_key_data(longer.state), _key_data(again.state))
    kind = {"dms": eqx_qd.DiscountModelRepertoire, "dds": eqx_qd.DensityRepertoire}[preset]
    assert isinstance(longer.state.repertoire, kind)
    assert isinstance(longer.repertoire, eqx_qd.MAPElitesRepertoire)  # the result grid
    assert longer.repertoire.num_cells == 16 and int(longer.repertoire.num_filled) > 1
    loaded = jobs.load_run(tmp_path / "long")
    assert np.array_equal(loaded.repertoire.fitnesses, longer.repertoire.fitnesses)
    name = {"dms": "DMS", "dds": "DDS"}[preset]
    assert jobs.group_of(longer) == f"{name} on projected_sphere"


@pytest.mark.e2e
def test_a_sampled_run_with_corrected_figures_resumes_equal(tmp_path):
    # Sampling scores every candidate 3 times (the evaluations column counts them); each
    # logged row reevaluates the elites with a key of its iteration, so a resumed run logs the
    # same corrected figures.
    small = dict(
        task="noisy_arm", batch_size=8, cells=8, cvt_samples=200, log_every=2, samples=3,
        estimator="median", reevaluations=5,
    )  # fmt: skip
    longer = jobs.run(jobs.MAPElitesConfig(iterations=6, **small), tmp_path / "long",
                      progress=False, plots=False)  # fmt: skip
    jobs.run(jobs.MAPElitesConfig(iterations=2, **small), tmp_path / "short", progress=False,
             plots=False)  # fmt: skip
    jobs.resume(tmp_path / "short", iterations=6, progress=False, plots=False)
    assert _same_files(tmp_path / "long", tmp_path / "short", ["progress.csv"]) == {
        "progress.csv": True
    }
    progress = longer.progress
    assert list(progress["evaluations"]) == [24 * (i + 1) for i in range(0, 7, 2)]
    assert np.all(progress["corrected_qd_score"] <= progress["qd_score"] + 1e-6)
    assert np.all(np.isfinite(progress["fitness_reproducibility"]))
    assert jobs.group_of(longer) == "MAP-Elites, 3 samples (median) on noisy_arm"


@pytest.mark.e2e
def test_an_me_ls_run_resumes_equal_and_writes_its_cells(tmp_path):
    # The low-spread archive (its spreads too) travels in the checkpoints; the folder holds
    # its elites as a MAP-Elites repertoire over the same cells.
    small = dict(
        task="noisy_arm", batch_size=8, cells=8, cvt_samples=200, log_every=2, samples=3,
        repertoire="low_spread",
    )  # fmt: skip
    longer = jobs.run(jobs.MAPElitesConfig(iterations=4, **small), tmp_path / "long",
                      progress=False, plots=False)  # fmt: skip
    jobs.run(jobs.MAPElitesConfig(iterations=2, **small), tmp_path / "short", progress=False,
             plots=False)  # fmt: skip
    again = jobs.resume(tmp_path / "short", iterations=4, progress=False, plots=False)
    assert _same_arrays(_key_data(longer.state), _key_data(again.state))
    assert isinstance(longer.state.repertoire, eqx_qd.LowSpreadRepertoire)
    loaded = jobs.load_run(tmp_path / "long")
    assert np.array_equal(loaded.repertoire.fitnesses, longer.repertoire.fitnesses)
    assert jobs.group_of(longer) == "ME-LS, 3 samples on noisy_arm"


@pytest.mark.e2e
def test_an_extract_me_run_resumes_equal_and_spends_its_batch(tmp_path):
    # The depth, the buffers and the extraction's draws travel in the checkpoints; a quarter of
    # each batch of 8 re-scores elites, so the evaluations column still counts 8 per iteration.
    small = dict(
        task="noisy_arm", batch_size=8, cells=8, cvt_samples=200, log_every=2,
        repertoire="extract", depth=3, extraction=0.25, reevaluations=3,
    )  # fmt: skip
    longer = jobs.run(jobs.MAPElitesConfig(iterations=4, **small), tmp_path / "long",
                      progress=False, plots=False)  # fmt: skip
    jobs.run(jobs.MAPElitesConfig(iterations=2, **small), tmp_path / "short", progress=False,
             plots=False)  # fmt: skip
    again = jobs.resume(tmp_path / "short", iterations=4, progress=False, plots=False)
    assert _same_arrays(_key_data(longer.state), _key_data(again.state))
    state = longer.state
    assert isinstance(state.repertoire, eqx_qd.ExtractRepertoire)
    assert state.repertoire.depth == 3 and int(state.repertoire.counts.max()) > 1
    assert list(longer.progress["evaluations"]) == [8, 24, 40]
    loaded = jobs.load_run(tmp_path / "long")
    assert np.array_equal(loaded.repertoire.fitnesses, longer.repertoire.fitnesses)
    assert jobs.group_of(longer) == "Extract-ME, depth 3, 0.25 extracted on noisy_arm"


def test_noise_options_refuse_what_they_cannot_run():
    with pytest.raises(ValueError, match="estimator 'median' chooses among a candidate's sampl"):
        jobs.MAPElitesConfig(estimator="median")
    with pytest.raises(ValueError, match="estimator: unknown 'average'"):
        jobs.MAPElitesConfig(samples=2, estimator="average")
    with pytest.raises(ValueError, match="samples"):
        jobs.MAPElitesConfig(samples=0)
    with pytest.raises(ValueError, match="reevaluations"):
        jobs.MAPElitesConfig(reevaluations=-1)
    with pytest.raises(ValueError, match="judges a candidate by the spread of its samples"):
        jobs.MAPElitesConfig(repertoire="low_spread")
    with pytest.raises(ValueError, match="low_spread' keeps the elites themselves"):
        jobs.MAPElitesConfig(repertoire="low_spread", samples=3, emitter="cma_mae",
                             archive_learning_rate=0.1, threshold_min=0.0)  # fmt: skip
    with pytest.raises(ValueError, match="a job with samples \\(map-elites, external\\) runs it"):
        jobs.PGAMEConfig(repertoire="low_spread")
    with pytest.raises(ValueError, match="Extract-ME\\) re-scores elites within the batch"):
        jobs.PGAMEConfig(repertoire="extract")
    with pytest.raises(ValueError, match="depth is an option of repertoire 'extract'"):
        jobs.MAPElitesConfig(depth=4)
    with pytest.raises(ValueError, match="extraction must be a share of the batch"):
        jobs.MAPElitesConfig(repertoire="extract", extraction=1.0)
    with pytest.raises(ValueError, match="runs on one device"):
        jobs.MAPElitesConfig(repertoire="extract", devices=2)
    with pytest.raises(ValueError, match="'extract' keeps the elites themselves"):
        jobs.MAPElitesConfig(repertoire="extract", emitter="cma_mae",
                             archive_learning_rate=0.1, threshold_min=0.0)  # fmt: skip


def test_guided_repertoires_refuse_what_they_cannot_run():
    with pytest.raises(ValueError, match="give a finite threshold_min"):
        jobs.MAPElitesConfig(repertoire="discount", emitter="cma_mae")
    with pytest.raises(ValueError, match="guides the CMA emitters' rankings: take emitter"):
        jobs.MAPElitesConfig(repertoire="density", emitter="iso_line")
    with pytest.raises(ValueError, match="emitter 'dds' ranks by the density estimate"):
        jobs.MAPElitesConfig(emitter="dds")
    with pytest.raises(ValueError, match="keeps no thresholds"):
        jobs.MAPElitesConfig.preset("dds", archive_learning_rate=0.1, threshold_min=0.0)
    with pytest.raises(ValueError, match="a job with an emitter"):
        jobs.PGAMEConfig(repertoire="discount")
    with pytest.raises(ValueError, match="discount_low and discount_high go together"):
        jobs.MAPElitesConfig.preset("dms", discount_high=None)
    with pytest.raises(ValueError, match="restart_rule must be basic, no_improvement or a"):
        jobs.MAPElitesConfig.preset("dms", restart_rule="sometimes")
    with pytest.raises(ValueError, match="restart_rule is an option of the"):
        jobs.MAPElitesConfig(restart_rule="basic")


def test_a_run_without_cells_refuses_annealing():
    with pytest.raises(ValueError, match="no cells to anneal"):
        jobs.MAPElitesConfig(repertoire="dns", archive_learning_rate=0.1, threshold_min=0.0)
    with pytest.raises(ValueError, match="repertoire: unknown 'tree'"):
        jobs.MAPElitesConfig(repertoire="tree")


def test_a_checkpoint_of_another_structure_is_refused_by_name(tmp_path):
    # A file written when the state had other fields (as CMA-ES states had before their
    # square roots replaced the eigensystem): an error naming the file and that cause.
    folder = jobs.RunFolder(tmp_path)
    older = eqx_qd.CMAES(3, 4).init(jax.numpy.zeros(3))
    older = (older.cov, older.sqrt[0], older.condition)  # a matrix, a vector, a scalar
    folder.write_eqx("state.eqx", older)
    like = eqx_qd.CMAES(3, 4).init(jax.numpy.zeros(3))
    with pytest.raises(ValueError, match=r"state.eqx' is truncated or corrupt .* an eqx_qd whose"):
        folder.read_eqx("state.eqx", like)
