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
    env="point_maze", max_evals=544, random_init=64, init_batch_size=32, eval_batch_size=32,
    n_niches=64, cvt_samples=5000, save_period=160, nr_of_steps_crit=20, nr_of_steps_act=5,
    neurons_list=(16,), critic_hidden=(32, 32), train_batch_size=32, buffer_size=10_000,
    episode_length=50,
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


def test_run_folder_has_the_repo_outputs(run_folder):
    names = set(os.listdir(run_folder))
    assert {"config.toml", "progress.csv", "actors.csv", "repertoire.eqx", "centroids.npy"} <= names
    assert {"repertoire.png", "progress.png", "fitness_density.png"} <= names
    config = jobs.PGAMEConfig.from_toml(run_folder / "config.toml")
    assert config == jobs.PGAMEConfig(**TINY)
    progress = _rows(run_folder / "progress.csv")
    assert len(progress) == 1 + config.num_iterations
    evals = [int(r["evaluations"]) for r in progress]
    assert evals[0] == 64 and evals[-1] == 64 + 32 * config.num_iterations <= config.max_evals
    for column in ("coverage", "max_fitness", "p5_fitness", "p95_fitness",
                   "averaged_max_fitness", "averaged_max_descriptor_1"):  # fmt: skip
        assert column in progress[0]
    qd = [float(r["qd_score"]) for r in progress]
    assert all(b >= a for a, b in zip(qd, qd[1:]))
    # Deterministic task: the re-evaluated best scores what the archive says.
    np.testing.assert_allclose(
        [float(r["averaged_max_fitness"]) for r in progress],
        [float(r["max_fitness"]) for r in progress],
        rtol=1e-5,
    )
    snapshots = sorted(n for n in names if n.startswith("archive_"))
    assert len(snapshots) >= 3


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


def test_final_actors_load_back_as_policies(run_folder):
    run = jobs.load_run(run_folder)
    config, repertoire, progress = run.config, run.repertoire, run.progress
    best = int(jnp.argmax(repertoire.fitnesses))
    actor_id = int(repertoire.extra[best])
    policy = jobs.policy_by_id(repertoire, actor_id)
    assert isinstance(policy, q.DeterministicPolicy)
    env = q.PointMaze(length=config.episode_length)
    replay = q.rollout(env, policy, key=jr.key(0))
    np.testing.assert_allclose(float(replay.returns), float(repertoire.fitnesses[best]), rtol=1e-5)
    assert float(progress["max_fitness"][-1]) == pytest.approx(float(repertoire.fitnesses[best]))
    with pytest.raises(KeyError, match="no actor"):
        jobs.policy_by_id(repertoire, -5)


def test_config_validation_names_the_problem(tmp_path):
    with pytest.raises(ValueError, match="multiple of init_batch_size"):
        jobs.PGAMEConfig(random_init=50, init_batch_size=100)
    with pytest.raises(ValueError, match="proportion_evo"):
        jobs.PGAMEConfig(proportion_evo=1.5)
    with pytest.raises(ValueError, match="max_evals"):
        jobs.PGAMEConfig(max_evals=100)
    bad = tmp_path / "bad.toml"
    bad.write_text("n_niche = 10\n")
    with pytest.raises(ValueError, match="unknown config keys: n_niche"):
        jobs.PGAMEConfig.from_toml(bad)
    with pytest.raises(ValueError, match="dim_map"):
        cfg = jobs.PGAMEConfig(**{**TINY, "dim_map": 3})
        jobs._pgame.make_pgame(cfg, q.PointMaze())
    # Paper defaults, and the preset the command runs.
    paper = jobs.PGAMEConfig()
    assert (paper.n_niches, paper.max_evals, paper.proportion_evo, paper.nr_of_steps_crit) == (
        1024,
        1_000_000,
        0.5,
        300,
    )
    assert jobs.PGAMEConfig.local().max_evals == 10_000


def test_cli_rejects_bad_pgame_input(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "pgame", "--max-evals", "100", "--out", str(tmp_path / "x")])
    assert e.value.code == 2
    assert "max_evals" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_policy_gradient_variation_raises_the_critic_value(getkey):
    env = q.PointMaze(walls=False, length=20)
    td3 = q.TD3(observation_size=2, action_size=2, policy_hidden=(16,), critic_hidden=(32, 32),
                minibatch_size=32)  # fmt: skip
    emitter = q.QualityPGEmitter(
        batch_size=5, td3=td3, hparams=q.TD3HParams(), num_critic_steps=30, num_pg_steps=20,
        buffer_size=2000, pg_lr=1e-2,
    )  # fmt: skip
    scorer = q.PolicyScorer(env)
    parents = eqx.filter_vmap(lambda k: td3.init_policy(key=k))(jr.split(getkey(), 5))
    _, _, extra = scorer(parents, key=getkey())
    cells = q.GridTessellation((4, 4), minval=-1.0, maxval=1.0)
    rep = q.MapElitesRepertoire.empty(cells, td3.init_policy(key=getkey()))
    state = emitter.init(rep, parents, jnp.zeros((5, 2)), jnp.zeros(5), extra, key=getkey())
    state = emitter.state_update(
        state, rep, parents, jnp.zeros((5, 2)), jnp.zeros(5), extra, key=getkey()
    )
    assert int(state.td3.steps) == 30
    obs = state.buffer.data.obs[: int(state.buffer.size)]

    def value(policies):
        q1 = lambda p: jnp.mean(jax.vmap(state.td3.critic.q1)(obs, jax.vmap(p)(obs)))
        return eqx.filter_vmap(q1)(policies)

    offspring = eqx.filter_jit(lambda p, k: emitter.pg_variation(p, state, key=k))(
        parents, getkey()
    )
    assert bool(jnp.all(value(offspring) > value(parents)))
    with pytest.raises(TypeError, match="ScoringExtra"):
        emitter.init(rep, parents, jnp.zeros((5, 2)), jnp.zeros(5), None, key=getkey())
