"""The ME-PBT job: its run folder through the command, its plots of repertoires of any
dimension, and the paper's preset."""

import os

import jax.numpy as jnp
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import _metrics, jobs


@pytest.mark.e2e
def test_the_me_pbt_command_s_run_replays_its_elites_and_reports(tmp_path, capsys):
    from eqx_qd.cli import main

    config = tmp_path / "tiny.toml"
    config.write_text(
        "pg_population_size = 4\nga_population_size = 2\nnum_training_iterations = 2\n"
        "num_envs = 2\nbuffer_size = 200\nhidden = [8]\nminibatch_size = 8\n"
        "fraction_best_to_replace_from = 0.25\nfraction_to_replace_from_best = 0.25\n"
        "fraction_to_replace_from_samples = 0.25\ncells = 16\ncvt_samples = 1000\n"
        "episode_length = 20\n"
    )
    out = tmp_path / "run"
    args = ["run", "me-pbt", "--config", str(config), "--iterations", "2", "--out", str(out),
            "--no-progress"]  # fmt: skip
    assert main(args) == 0
    assert "QD-score" in capsys.readouterr().out
    run = jobs.load_run(out)
    cfg, repertoire = run.config, run.repertoire
    assert cfg.iterations == 2 and repertoire.genotypes.policy_opt_state is None
    assert int(repertoire.num_filled) > 0
    # An elite (an agent's training state) replays as scoring played it: the task is
    # deterministic, so to its stored fitness.
    replayed = jobs.replay(out, write=False)
    np.testing.assert_allclose(replayed.episode_return, replayed.stored_fitness, rtol=1e-5)
    assert replayed.files == {} and replayed.stored_fitness == float(np.nanmax(
        np.where(np.isfinite(repertoire.fitnesses), repertoire.fitnesses, -np.inf)))  # fmt: skip
    # A wrong id's hint says where ME-PBT keeps its ids (it writes no actors.csv).
    with pytest.raises(ValueError, match=r"no elite with id 999999 .*repertoire\.extra"):
        jobs.replay(out, id=999999, write=False)
    with open(out / "hparams.csv") as f:
        assert len(f.read().strip().splitlines()) == 1 + 3 * 4  # header + (init + 2 iters) x 4
    # The multi-seed report reads ME-PBT folders too.
    (group,) = jobs.report([str(out)], plots=False).groups
    assert group.name == f"ME-PBT on {cfg.env}" and "qd_score" in group.finals
    # ... against environment steps too, as QDax plots ME-PBT.
    (by_steps,) = jobs.report([str(out)], x="env_steps", plots=False).groups
    assert by_steps.x_name == "env_steps"
    np.testing.assert_array_equal(by_steps.x, run.progress["env_steps"])
    np.testing.assert_array_equal(by_steps.median["qd_score"], run.progress["qd_score"])
    with pytest.raises(SystemExit) as e:
        main(["run", "me-pbt", "--pg-population-size", "4", "--out", str(tmp_path / "bad")])
    assert e.value.code == 2
    assert "rounds to 0 agents" in capsys.readouterr().err


@pytest.mark.slow
def test_run_folders_plot_repertoires_of_any_dimension(tmp_path):
    from eqx_qd.jobs._qd_outputs import write_qd_outputs

    flat = q.MAPElitesRepertoire.empty(q.GridTessellation((3, 3)), jnp.zeros(2))
    cube = q.MAPElitesRepertoire.empty(q.GridTessellation((2, 2, 2)), jnp.zeros(3))
    progress = {"evaluations": np.arange(2.0), **{k: np.zeros(2) for k in _metrics.METRIC_NAMES}}
    # ant_uni has 4 descriptors: one panel per pair of descriptors.
    write_qd_outputs(jobs.RunFolder(tmp_path / "cube"), cube, progress, plots=True)
    assert (tmp_path / "cube" / "repertoire.png").exists()
    assert (tmp_path / "cube" / "progress.png").exists()
    write_qd_outputs(jobs.RunFolder(tmp_path / "flat"), flat, progress, plots=True)
    assert (tmp_path / "flat" / "repertoire.png").exists()
    # PGA-ME's folder too, with the task's axes (ant_uni: four feet).
    ant = q.envs.BraxQDEnv("ant_uni")
    four, _ = q.init_repertoire(
        q.GridTessellation((2, 2, 2, 2), minval=0.0, maxval=1.0), jnp.zeros((3, 2)),
        jnp.asarray([[0.1] * 4, [0.9] * 4, [0.1, 0.9, 0.1, 0.9]]), jnp.asarray([1.0, 2.0, 3.0]),
    )  # fmt: skip
    prog = {**progress, "env_steps": np.arange(2.0), "averaged_max_fitness": np.zeros(2)}
    jobs._policy_qd._write_plots(jobs.RunFolder(tmp_path / "ant"), four, prog, ant)
    assert {"repertoire.png", "progress.png"} <= set(os.listdir(tmp_path / "ant"))


def test_the_paper_preset_runs_the_ant_trap_at_qdax_s_sizes(capsys):
    from eqx_qd.cli import _config, build_parser, main

    parser = build_parser()
    args = parser.parse_args(["run", "me-pbt", "--preset", "paper", "--seed", "3"])
    config = _config(parser, args, jobs.JOBS["me-pbt"])
    assert config == jobs.MEPBTConfig.preset("paper", seed=3)  # the same from Python
    assert (config.env, config.episode_length, config.cells) == ("anttrap", 1000, 1024)
    assert (config.hidden, config.iterations, config.seed) == ((256, 256), 450, 3)
    # QDax's example: num_training_steps = 5000 environment steps per agent and generation.
    assert config.num_envs * config.num_training_iterations == 5000
    algo, emitter = jobs._me_pbt.build_me_pbt(config)  # the agent is built for the ant trap
    assert emitter.env.name == "anttrap" and emitter.batch_size == 20
    assert emitter.agent.observation_size == emitter.env.observation_size == 29
    main(["list"])
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("me-pbt")]
    assert line.endswith("(presets: paper)")
