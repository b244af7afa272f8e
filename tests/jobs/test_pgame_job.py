import csv
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import jobs
from eqx_qd.cli import main


TINY = dict(
    env="point_maze", evaluations=544, random_init=64, init_batch_size=32, batch_size=32,
    cells=64, cvt_samples=5000, snapshot_every=160, critic_steps=20, pg_steps=5,
    hidden=(16,), critic_hidden=(32, 32), minibatch_size=32, buffer_size=10_000,
    episode_length=50, deterministic=True,
)  # fmt: skip


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """One tiny PGA-ME run through the command line, shared by the tests below."""
    folder = tmp_path_factory.mktemp("pgame")
    config = folder / "tiny.toml"
    jobs.PGAMEConfig(**TINY)  # the file must hold a valid config
    config.write_text(jobs.PGAMEConfig(**TINY).to_toml())
    out = folder / "run"
    assert main(["run", "pgame", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    return out


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.e2e
def test_the_progress_and_archives_are_the_repository_s(run_folder):
    names = set(os.listdir(run_folder))
    config = jobs.PGAMEConfig.from_toml(run_folder / "config.toml")
    assert config == jobs.PGAMEConfig(**TINY)
    progress = _rows(run_folder / "progress.csv")
    assert len(progress) == 1 + config.num_iterations
    evals = [int(r["evaluations"]) for r in progress]
    assert evals[0] == 64 and evals[-1] == 64 + 32 * config.num_iterations <= config.evaluations
    for column in ("coverage", "max_fitness", "p5_fitness", "p95_fitness",
                   "averaged_max_fitness", "averaged_max_descriptor_1"):  # fmt: skip
        assert column in progress[0]
    qd = [float(r["qd_score"]) for r in progress]
    assert all(b >= a for a, b in zip(qd, qd[1:]))
    # The paper's plain QD-score: the sum of the archive's fitnesses, without the offset.
    offset = q.PolicyScorer(q.envs.PointMaze(length=50)).qd_offset
    for r in progress:
        plain = float(r["plain_qd_score"])
        expected = float(r["qd_score"]) - offset * int(r["num_filled"])
        assert plain == pytest.approx(expected, rel=1e-4)
    last = _rows(run_folder / sorted(n for n in names if n.startswith("archive_"))[-1])
    assert float(progress[-1]["plain_qd_score"]) == pytest.approx(
        sum(float(a["fitness"]) for a in last), rel=1e-5
    )
    # Deterministic task: the re-evaluated best scores what the archive says.
    np.testing.assert_allclose(
        [float(r["averaged_max_fitness"]) for r in progress],
        [float(r["max_fitness"]) for r in progress],
        rtol=1e-5,
    )
    snapshots = sorted(n for n in names if n.startswith("archive_"))
    assert len(snapshots) >= 3


@pytest.mark.e2e
def test_actors_file_tracks_lineage(run_folder):
    actors = _rows(run_folder / "actors.csv")
    ids = [int(a["id"]) for a in actors]
    assert len(ids) == len(set(ids))
    types = {a["type"] for a in actors}
    assert (
        types <= {"random", "evo", "gradient", "greedy"} and {"random", "evo", "gradient"} <= types
    )
    for a in actors:
        evals, own = int(a["evaluations"]), int(a["id"])
        assert own < evals
        p1, p2 = int(a["parent_1"]), int(a["parent_2"])
        if a["type"] == "random":
            assert (p1, p2) == (-1, -1)
        elif a["type"] == "evo":
            assert 0 <= p1 < own and 0 <= p2 < own
        elif a["type"] == "gradient":
            assert 0 <= p1 < own and p2 == -1
        else:
            assert p1 == p2 == -1
    # Every actor of the final archive was reported when it entered, in its cell.
    final = sorted(n for n in os.listdir(run_folder) if n.startswith("archive_"))[-1]
    by_id = {int(a["id"]): a for a in actors}
    for row in _rows(run_folder / final):
        entry = by_id[int(row["id"])]
        assert int(entry["centroid"]) == int(row["centroid"])
        assert float(entry["fitness"]) == pytest.approx(float(row["fitness"]))


@pytest.mark.e2e
def test_final_actors_load_back_as_policies(run_folder):
    run = jobs.load_run(run_folder)
    config, repertoire, progress = run.config, run.repertoire, run.progress
    best = int(jnp.argmax(repertoire.fitnesses))
    actor_id = int(repertoire.extra[best])
    policy = jobs.policy_by_id(repertoire, actor_id)
    assert isinstance(policy, q.rl.DeterministicPolicy)
    env = q.envs.PointMaze(length=config.episode_length)
    replay = q.envs.rollout(env, policy, key=jr.key(0))
    np.testing.assert_allclose(float(replay.returns), float(repertoire.fitnesses[best]), rtol=1e-5)
    assert float(progress["max_fitness"][-1]) == pytest.approx(float(repertoire.fitnesses[best]))
    with pytest.raises(KeyError, match="no actor"):
        jobs.policy_by_id(repertoire, -5)


@pytest.mark.e2e
def test_replay_plays_an_elite_again_and_draws_its_path(run_folder, tmp_path, capsys):
    repertoire = jobs.load_run(run_folder).repertoire
    fitnesses = np.asarray(repertoire.fitnesses)
    best = jobs.replay(run_folder)  # without a choice: the best elite
    assert best.cell == int(np.nanargmax(np.where(np.isfinite(fitnesses), fitnesses, -np.inf)))
    assert best.id == int(repertoire.extra[best.cell])
    # A deterministic task: the replayed episode is the one scoring played.
    np.testing.assert_allclose(best.episode_return, best.stored_fitness, rtol=1e-5)
    np.testing.assert_allclose(best.descriptor, best.stored_descriptor, atol=1e-6)
    assert best.states.state_desc.shape == (best.steps + 1, 2)
    assert set(best.files) == {"png"}  # the point maze: a path in the plane, no brax viewer
    assert os.path.isfile(best.files["png"])
    # By id, through the command: another elite, its own file.
    others = np.isfinite(fitnesses) & (np.arange(fitnesses.size) != best.cell)
    other = int(np.flatnonzero(others)[0])
    other_id = int(repertoire.extra[other])
    assert main(["replay", str(run_folder), "--id", str(other_id)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"elite {other_id} (cell {other}): stored fitness")
    assert os.path.isfile(run_folder / f"replay_{other_id}.png")
    # Bad choices end in one line naming what is wrong.
    for args, message in (
        (["--id", "999999"], "actors.csv lists every id ever added"),
        (["--cell", str(fitnesses.size)], f"cell {fitnesses.size} of"),
        (["--id", "1", "--cell", "1"], "not allowed with argument"),
    ):
        with pytest.raises(SystemExit) as e:
            main(["replay", str(run_folder), *args])
        assert e.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["replay", str(tmp_path)])
    assert "is not a run folder" in capsys.readouterr().err


def test_config_validation_names_the_problem(tmp_path):
    with pytest.raises(ValueError, match="multiple of init_batch_size"):
        jobs.PGAMEConfig(random_init=50, init_batch_size=100)
    with pytest.raises(ValueError, match="ga_fraction"):
        jobs.PGAMEConfig(ga_fraction=1.5)
    with pytest.raises(ValueError, match="evaluations"):
        jobs.PGAMEConfig(evaluations=100)
    bad = tmp_path / "bad.toml"
    bad.write_text("n_niche = 10\n")
    with pytest.raises(ValueError, match="unknown config keys: n_niche"):
        jobs.PGAMEConfig.from_toml(bad)
    with pytest.raises(ValueError, match="num_descriptors"):
        cfg = jobs.PGAMEConfig(**{**TINY, "num_descriptors": 3})
        jobs._pgame.build_pgame(cfg, q.envs.PointMaze())
    # The paper's setting is a preset; the defaults are a local run.
    paper = jobs.PGAMEConfig.preset("paper")
    assert (paper.cells, paper.evaluations, paper.ga_fraction, paper.critic_steps) == (
        1024,
        1_000_000,
        0.5,
        300,
    )
    assert jobs.PGAMEConfig().evaluations == 10_000 and paper.episode_length == 1000
    # The repository's names are refused here, naming ours (its files are read: below).
    with pytest.raises(ValueError, match="n_niches is cells; nr_of_steps_crit is critic_steps"):
        jobs.PGAMEConfig.from_mapping({"n_niches": 64, "nr_of_steps_crit": 3})
    # ... but a run folder written with them (an earlier version's) is read, renamed.
    older = tmp_path / "older.toml"
    older.write_text("[pgame]\nn_niches = 64\nmax_evals = 4096\nneurons_list = [16]\n")
    assert jobs.PGAMEConfig.from_toml(older) == jobs.PGAMEConfig(
        cells=64, evaluations=4096, hidden=(16,)
    )


def test_cli_rejects_bad_pgame_input(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "pgame", "--evaluations", "100", "--out", str(tmp_path / "x")])
    assert e.value.code == 2
    assert "evaluations" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_tasks_are_stochastic_unless_deterministic():
    paper = jobs.PGAMEConfig(env="point_maze")
    assert paper.reset_noise and not paper.deterministic
    assert jobs._policy_qd.build_policy_env(paper).reset_noise > 0
    fixed = jobs.PGAMEConfig(env="point_maze", deterministic=True, reset_noise=True)
    env = jobs._policy_qd.build_policy_env(fixed)
    assert env.reset_noise == 0.0 and env.obs_noise == 0.0
    with pytest.raises(ValueError, match="deterministic and obs_noise"):
        jobs.PGAMEConfig(deterministic=True, obs_noise=0.1)


def _made(**overrides):
    config = jobs.PGAMEConfig(**{**TINY, **overrides})
    algo, td3 = jobs._pgame.build_pgame(config, jobs._policy_qd.build_policy_env(config))
    return config, algo, td3


def test_repository_arguments_build_the_emitter():
    _, algo, _ = _made(batch_size=100, random_init=100, init_batch_size=100, evaluations=1000)
    ga, pg = algo.emitter.emitters
    assert (ga.batch_size, pg.batch_size) == (49, 51)  # the original: 49 GA, 50 PG, 1 greedy
    assert pg.greedy_init == "best" and pg.critic_warmup
    _, algo, _ = _made(batch_size=100, random_init=100, init_batch_size=100,
                       evaluations=1000, convention="qdax")  # fmt: skip
    ga, pg = algo.emitter.emitters
    assert (ga.batch_size, pg.batch_size) == (50, 50) and pg.greedy_init == "first"
    _, algo, _ = _made(crossover_op="sbx", mutation_op="gaussian_mutation", eta_c=3.0,
                       crossover_rate=0.5, sigma=0.3, mutation_rate=0.2, min_genotype=-2.0,
                       max_genotype=2.0)  # fmt: skip
    variation = algo.emitter.emitters[0].variation
    assert variation == q.MutatedVariation(
        q.SBXCrossover(3.0, 0.5, -2.0, 2.0), q.GaussianMutation(0.3, 0.2, -2.0, 2.0)
    )
    _, algo, _ = _made(crossover_op="none", mutation_op="uniform_mutation", max_uniform=0.4)
    ga = algo.emitter.emitters[0]
    assert ga.variation is None and ga.mutation == q.UniformMutation(0.4, 0.05)
    _, algo, _ = _made(gradient_op=False, mutation_op="polynomial_mutation", min_genotype=-1.0,
                       max_genotype=1.0)  # fmt: skip
    assert algo.emitter.variation == q.MutatedVariation(
        q.IsoLineVariation(0.005, 0.05, -1.0, 1.0), q.PolynomialMutation(5.0, 0.05, -1.0, 1.0)
    )
    _, _, td3 = _made(normalise=True, affine=True)
    policy = td3.init_policy(key=jr.key(0))
    assert policy.net.norms is not None and policy.net.layers[0].bias is None
    assert policy.net.norms[0].weight is not None


@pytest.mark.parametrize(
    "values, match",
    [
        (dict(species=5), "species is 5: only 1"),
        (dict(crossover_op="none"), "both 'none'"),
        (dict(mutation_op="polynomial_mutation"), "needs min_genotype and max_genotype"),
        (dict(min_genotype=1.0, max_genotype=0.0), "min_genotype"),
        (dict(affine=True), "affine needs normalise"),
        (dict(crossover_op="blx"), "crossover_op"),
        (dict(mutation_op="cauchy"), "mutation_op"),
        (dict(convention="pytorch"), "convention"),
        (dict(use_cached_cvt=True, centroids="c.npy"), "give one"),
    ],
)
def test_repository_arguments_are_checked(values, match):
    with pytest.raises(ValueError, match=match):
        jobs.PGAMEConfig(**{**TINY, **values})


def test_repository_arguments_without_counterpart_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="'num_cpu' is not used by this job: evaluation is vec"):
        jobs.PGAMEConfig.from_mapping({**TINY, "num_cpu": 32})
    with pytest.raises(ValueError, match="'save_path' is not used by this job: the run folder"):
        jobs.PGAMEConfig.from_mapping({"save_path": "."})


def _policy_heading(direction):
    """A policy whose action is ``tanh(5 * direction)`` everywhere (zero weights)."""
    policy = q.rl.DeterministicPolicy(2, 2, (4,), key=jr.key(0))
    policy = jax.tree.map(lambda x: jnp.zeros_like(x) if eqx.is_array(x) else x, policy)
    return eqx.tree_at(lambda p: p.net.layers[-1].bias, policy, 5.0 * jnp.asarray(direction))


def test_discard_dead_refuses_episodes_that_ended_early(getkey):
    scorer = q.PolicyScorer(q.envs.PointMaze(walls=False, length=40))
    policies = jax.tree.map(
        lambda *xs: jnp.stack(xs) if eqx.is_array(xs[0]) else xs[0],
        _policy_heading([0.0, 1.0]), _policy_heading([0.0, -1.0]),
    )  # fmt: skip
    key = getkey()
    plain, descriptors, extra = scorer(policies, key=key)
    # The first reaches the goal (it terminates), the second stays below and lives on.
    assert float(extra.episodes.lengths[0]) < 40 and float(extra.episodes.lengths[1]) == 40
    fitnesses, d2, extra2 = q._qdrl.scoring.DiscardDead(scorer)(policies, key=key)
    assert float(fitnesses[0]) == -np.inf and float(fitnesses[1]) == float(plain[1])
    assert eqx.tree_equal(d2, descriptors) and eqx.tree_equal(extra2, extra)
    assert q._qdrl.scoring.DiscardDead(scorer).qd_offset == scorer.qd_offset
    _, algo, _ = _made(insert_dead=False)
    assert isinstance(algo.scoring_fn, q._qdrl.scoring.DiscardDead)


ORIGINAL_FILE = """--env=QDWalker2DBulletEnv-v0
--seed=3
--n_niches=64
--max_evals=1e4
--mutation_op=None
--crossover_op=iso_dd
--min_genotype=False
--neurons_list=16 16
--num_cpu=8
--use_cached_cvt
--not_discard_dead
--gradient_op
--lr
0.002
"""


def test_original_config_files_read_as_the_repository_reads_them(tmp_path):
    path = tmp_path / "QDWalker_config.txt"
    path.write_text(ORIGINAL_FILE)
    values, notes = jobs.JOBS["pgame"].translator(path)
    config = jobs.PGAMEConfig.from_mapping(values)
    assert (config.env, config.seed, config.cells, config.evaluations) == (
        "walker2d_uni", 3, 64, 10_000
    )  # fmt: skip
    assert config.hidden == (16, 16) and config.pg_lr == 0.002
    assert config.use_cached_cvt and config.insert_dead and config.gradient_op
    assert config.mutation_op == "none" and config.min_genotype is None
    # Arguments the file leaves out take the repository's defaults, flags are off.
    assert (config.iso_sigma, config.line_sigma, config.num_descriptors) == (0.01, 0.2, 4)
    # Ours that the repository has no argument for: the paper's setting.
    assert (config.episode_length, config.buffer_size) == (1000, 1_000_000)
    assert not config.normalise and not config.affine
    assert any(n.startswith("num_cpu: not used") for n in notes)
    assert any("QDWalker2DBulletEnv-v0 runs as walker2d_uni" in n for n in notes)
    bare = tmp_path / "bare.txt"
    bare.write_text("--env=walker2d_uni\n")
    assert not jobs.JOBS["pgame"].translator(bare)[0]["gradient_op"]  # a flag left out


@pytest.mark.parametrize(
    "text, match",
    [
        ("--n_niche=10\n", "line 1: unknown argument --n_niche"),
        ("--seed=1\n--gradient_op=True\n", "line 2: --gradient_op is a flag"),
        ("--max_evals=ten\n", "--max_evals='ten' is not a valid value"),
        ("--seed=1.5\n", "--seed='1.5' is not a valid value"),
        ("\n--lr\n", "line 2: --lr has no value"),
        ("seed=1\n", "line 1: expected --argument"),
    ],
)
def test_original_config_files_name_their_bad_lines(tmp_path, text, match):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        jobs.JOBS["pgame"].translator(path)


def test_cli_reads_original_config_files(tmp_path, capsys):
    path = tmp_path / "QDAnt_config.txt"
    path.write_text("--env=QDAntBulletEnv-v0\n--n_species=5\n--num_cpu=4\n")
    out = tmp_path / "x"
    with pytest.raises(SystemExit) as e:
        main(["run", "pgame", "--config-file", str(path), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "species is 5" in err and "num_cpu: not used" in err
    assert not out.exists()
    with pytest.raises(SystemExit) as e:
        main(["run", "pgame", "--config-file", str(path), "--config", str(path)])
    assert e.value.code == 2 and "use one" in capsys.readouterr().err


def test_centroids_from_a_file_or_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    env = q.envs.PointMaze()
    text = tmp_path / "centroids_4_2.dat"
    text.write_text("0.1 0.2\n-0.5 0.5\n0.9 -0.9\n0 0\n")
    config = jobs.PGAMEConfig(**{**TINY, "cells": 4, "centroids": str(text)})
    tess = jobs._policy_qd.policy_tessellation(config, env, key=jr.key(0))
    np.testing.assert_allclose(tess.centroids[1], [-0.5, 0.5])
    with pytest.raises(ValueError, match=r"shape \(4, 2\); cells 8"):
        config = jobs.PGAMEConfig(**{**TINY, "cells": 8, "centroids": str(text)})
        jobs._policy_qd.policy_tessellation(config, env, key=jr.key(0))
    # Cached: computed once with a fixed key, then read back by every seed.
    cached = jobs.PGAMEConfig(**{**TINY, "cells": 16, "cvt_samples": 500, "use_cached_cvt": True})
    a = jobs._policy_qd.policy_tessellation(cached, env, key=jr.key(1))
    files = os.listdir(tmp_path / "cache" / "eqx_qd" / "cvt")
    assert len(files) == 1 and files[0].startswith("centroids_16_2_500_")
    b = jobs._policy_qd.policy_tessellation(cached, env, key=jr.key(2))
    np.testing.assert_array_equal(a.centroids, b.centroids)
    fresh = jobs.PGAMEConfig(**{**TINY, "cells": 16, "cvt_samples": 500})
    c = jobs._policy_qd.policy_tessellation(fresh, env, key=jr.key(2))
    assert not np.array_equal(a.centroids, c.centroids)


def test_presets_start_the_command_from_the_paper_or_the_local_values(tmp_path, capsys):
    from eqx_qd.cli import _config, build_parser

    parser = build_parser()
    job = jobs.JOBS["pgame"]
    parse = lambda *a: _config(parser, parser.parse_args(["run", "pgame", *a]), job)
    assert parse("--preset", "paper") == jobs.PGAMEConfig.preset("paper")
    assert parse("--preset", "paper", "--seed", "4") == jobs.PGAMEConfig.preset("paper", seed=4)
    assert parse() == jobs.PGAMEConfig()  # without a config: the defaults, a local run
    path = tmp_path / "c.toml"
    path.write_text("seed = 1\n")
    with pytest.raises(SystemExit):
        parse("--preset", "paper", "--config", str(path))
    assert "--preset and a config file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse("--preset", "huge")
    main(["list"])
    assert "(presets: paper)" in capsys.readouterr().out
