"""The PBT job: its run folder through the command, QDax's same-start training and fixed
hyperparameters as the job builds them."""

import equinox as eqx
import jax.random as jr
import numpy as np
import pytest

import eqx_qd as q
from eqx_qd import jobs


@pytest.mark.e2e
def test_the_pbt_command_records_where_each_member_was_copied_from(tmp_path, capsys):
    from eqx_qd.cli import main

    out = tmp_path / "run"
    args = ["run", "pbt", "--population-size", "5", "--rounds", "3", "--agent", "td3",
            "--iterations-per-round", "5", "--explore", "perturb", "--out", str(out),
            "--no-progress"]  # fmt: skip
    assert main(args) == 0
    assert "final mean return" in capsys.readouterr().out
    run = jobs.load_run(out)
    config, states = run.config, run.state
    table = run.tables["hparams"]
    rows = [dict(zip(table, values)) for values in zip(*table.values())]
    assert config.population_size == 5 and config.agent == "td3"
    assert states.policy_opt_state is None and states.hparams.policy_lr.shape == (5,)
    assert len(rows) == 3 * 5
    # int(0.2 * 5) = 1 best, int(0.4 * 5) = 2 replaced per round (none after the last).
    for r in range(2):
        round_rows = [row for row in rows if int(row["round"]) == r]
        copied = [row for row in round_rows if int(row["next_copied_from"]) != int(row["member"])]
        assert len(copied) <= 2
        best = max(round_rows, key=lambda row: float(row["return"]))
        assert all(int(row["next_copied_from"]) == int(best["member"]) for row in copied)
    with pytest.raises(SystemExit) as e:
        main(["run", "pbt", "--population-size", "4", "--out", str(tmp_path / "bad")])
    assert e.value.code == 2
    assert "rounds to 0" in capsys.readouterr().err


def test_same_start_trains_on_qdax_s_random_first_states_and_scores_on_the_task(getkey):
    """`same_start`: the agent keeps each training environment's first state, the jobs train
    on the task with its reset noise (ME-PBT's emitter, PBT's training) and score on the task;
    an agent or environment that cannot do it is refused by name."""
    from eqx_qd.jobs._agent_options import training_env
    from eqx_qd.jobs._me_pbt import build_me_pbt
    from eqx_qd.jobs._pbt import build_pbt_run

    small = dict(agent="td3", hidden=(8,), num_envs=3, buffer_size=64, minibatch_size=8)
    config = jobs.PBTConfig(**small, same_start=True)
    env, agent, spaces, _ = build_pbt_run(config)
    train_env = training_env(config, env)
    assert agent.same_start and env.reset_noise == 0.0 and train_env.reset_noise > 0.0
    assert training_env(jobs.PBTConfig(**small), env) is env
    run = agent.init_run(train_env, agent.init(key=getkey()), key=getkey())
    starts = np.asarray(run.env_state.first.physics)
    assert len({tuple(p) for p in starts.tolist()}) == 3
    run, _ = eqx.filter_jit(agent.train)(train_env, run, train_env.episode_length + 1, key=getkey())
    np.testing.assert_array_equal(np.asarray(run.env_state.first.physics), starts)
    algo, emitter = build_me_pbt(
        jobs.MEPBTConfig(**small, same_start=True, cells=8, pg_population_size=10,
                         ga_population_size=2)
    )  # fmt: skip
    assert emitter.env.reset_noise > 0.0 and algo.scoring_fn.env.reset_noise == 0.0
    with pytest.raises(ValueError, match="takes no option same_start"):
        jobs.PBTConfig(agent="ppo", same_start=True)


def test_fixed_hparams_keep_qdax_s_discount_and_the_td3_option_reaches_the_agent(getkey):
    """QDax's PBT-TD3 keeps the discount at 0.99 whatever its space says: `fixed_hparams`
    leaves it out of the spaces, so no member draws or explores it; `critic_target_every_step`
    reaches the TD3 the job builds."""
    from eqx_qd.jobs._pbt import build_pbt_run

    config = jobs.PBTConfig(
        agent="td3", fixed_hparams="discount", critic_target_every_step=True, hidden=(8,),
        num_envs=2, buffer_size=64, minibatch_size=8, population_size=5,
    )  # fmt: skip
    env, agent, spaces, pbt = build_pbt_run(config)
    assert "discount" not in spaces and "policy_lr" in spaces
    assert agent.critic_target_every_step
    population = q.rl.init_population(agent, env, spaces, 5, key=getkey())
    np.testing.assert_array_equal(population.agent_state.hparams.discount, np.float32(0.99))
    lrs = np.asarray(population.agent_state.hparams.policy_lr)
    assert len(set(lrs.tolist())) == 5  # the others are still drawn
    resample = lambda s, k: agent.resample_hparams(s, spaces=spaces, key=k)  # noqa: E731
    explored = eqx.filter_vmap(resample)(population.agent_state, jr.split(getkey(), 5))
    np.testing.assert_array_equal(explored.hparams.discount, np.float32(0.99))
    # The paper's TD3 by default; a name the agent does not explore is an error listing them.
    assert not build_pbt_run(jobs.PBTConfig(agent="td3", hidden=(8,)))[1].critic_target_every_step
    with pytest.raises(ValueError, match="does not explore 'gamma'; it explores .*discount"):
        build_pbt_run(jobs.PBTConfig(agent="td3", fixed_hparams="gamma"))
    with pytest.raises(ValueError, match="takes no option critic_target_every_step"):
        jobs.PBTConfig(agent="sac", critic_target_every_step=True)
