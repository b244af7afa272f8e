"""The PBT job (`eqx-qd run pbt`): a population of a registered agent on a registered
environment, with a run folder and plots of what PBT chose for every member."""

import dataclasses
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._validate import fraction, positive, positive_int
from ..rl._pbt import (
    evaluate_population,
    hparams_table,
    init_population,
    PBT,
    population_without_optimiser_states,
    train_population,
)
from ..rl._spaces import log_uniform_learning_rates, Uniform
from ._common import (
    agent_options,
    build_agent,
    hparams_columns,
    Job,
    register_job,
    RunResult,
)
from ._config import JobConfig, option
from ._folder import RunFolder
from ._progress import Progress
from ._registry import AGENTS, ENVIRONMENTS, make_env
from ._resume import Checkpointer, RunClock, start_run


@dataclasses.dataclass(frozen=True)
class PBTConfig(JobConfig):
    """Settings of the PBT job (`jobs.run`, `eqx-qd run pbt`). The defaults train 8 SAC agents
    on the open point maze; `agent` takes any registered agent (`td3`, `sac`, `ppo` or
    yours). `best_fraction` / `worse_fraction` follow QDax (counts are
    `int(fraction * population_size)` and must not round to zero). The agent options are
    passed to the agent's factory; setting one it does not take is an error."""

    JOB: ClassVar[str] = "pbt"

    agent: str = option("sac", "registered agent", check=AGENTS.check())
    env: str = option(
        "point_maze_open", "registered QD environment", check=ENVIRONMENTS.check("qd")
    )
    episode_length: int = option(100, "steps per episode", check=positive_int)
    population_size: int = option(8, "PBT members", check=positive_int)
    rounds: int = option(10, "train / evaluate / exploit rounds", check=positive_int)
    iterations_per_round: int = option(
        200,
        "training iterations per round (off-policy: one step of every environment; ppo: one "
        "rollout and its epochs)",
        check=positive_int,
    )
    num_envs: int = option(8, "parallel environments per member", check=positive_int)
    grad_updates_per_step: float = option(
        0.25, "gradient steps per environment step (off-policy)", check=positive
    )
    buffer_size: int = option(
        50_000, "replay buffer capacity per member (off-policy)", check=positive_int
    )
    rollout_length: int = option(32, "steps per rollout (ppo)", check=positive_int)
    hidden: tuple[int, ...] = option((64, 64), "hidden layer widths (policy and critic)")
    minibatch_size: int = option(128, "transitions per gradient step", check=positive_int)
    target_entropy_scale: float = option(
        1.0, "sac: target entropy = -scale x action size (QDax's PBT-SAC: 0.5)", check=positive
    )
    best_fraction: float = option(0.2, "fraction of the population copied from", check=fraction)
    worse_fraction: float = option(0.4, "fraction of the population replaced", check=fraction)
    explore: str = option("resample", "resample or perturb the copies' hyperparameters")
    log_uniform_lr: bool = option(False, "draw learning rates log-uniformly")
    eval_episodes: int = option(4, "evaluation episodes per member and round", check=positive_int)
    seed: int = option(0, "random seed")
    checkpoint_every: int = option(
        1,
        "rounds between checkpoints (and one at the end); the logs are written then",
        check=positive_int,
    )
    keep_checkpoints: int = option(2, "newest checkpoints kept", check=positive_int)

    def check(self) -> None:
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden must list positive layer widths, got {list(self.hidden)}")
        self.make_pbt(None)  # the counts (and explore), with a message naming the fraction
        agent_options(self)  # options the chosen agent does not take

    def make_pbt(self, spaces) -> PBT:
        """The `PBT` of this config's counts over `spaces` (`None`: only the counts are
        checked, over a stand-in space)."""
        stand_in = {"_": Uniform(0.0, 1.0)}
        return PBT.from_fractions(
            self.population_size,
            self.best_fraction,
            self.worse_fraction,
            stand_in if spaces is None else spaces,
            self.explore,
        )


def make_pbt_run(config: PBTConfig):
    """The environment, the agent, its search spaces and the `PBT` the config describes."""
    env = make_env(config.env, episode_length=config.episode_length)
    agent = build_agent(config, env)
    spaces = agent.hparam_spaces
    if config.log_uniform_lr:
        spaces = log_uniform_learning_rates(spaces)
    return env, agent, spaces, config.make_pbt(spaces)


def _rounds_back(rows: list[dict], rounds: int) -> tuple[list, list, list]:
    """The returns, hyperparameters and sources of rounds `0 .. rounds - 1` back from
    `hparams.csv`'s rows (returns as the float32 they were computed in)."""
    names = [k for k in rows[0] if k not in ("round", "member", "return", "next_copied_from")]
    by_round = [[r for r in rows if r["round"] == i] for i in range(rounds)]
    returns = [np.asarray([r["return"] for r in rs], np.float32) for rs in by_round]
    hparams = [{n: np.asarray([r[n] for r in rs]) for n in names} for rs in by_round]
    sources = [np.asarray([r["next_copied_from"] for r in rs]) for rs in by_round]
    return returns, hparams, sources


class _PBTJob(Job):
    """Train the population for `rounds` rounds; after each, evaluate every member and apply
    PBT (not after the last).

    The folder holds `config.toml`, `progress.csv` (per round: env steps, `wall_s`
    (seconds spent running, over resumes), mean / max / min return), `hparams.csv` (per
    round and member: its hyperparameters, return, and the member it was copied from next),
    `population.eqx` (the final agent states without optimiser states), `returns.png` and
    `hparams.png`. `RunResult.state` is the final population.
    """

    name = "pbt"
    config_cls = PBTConfig
    logs = {"progress.csv": "round", "hparams.csv": "round"}
    resume_may_change = ("rounds",)

    def best(self, metrics) -> float:
        return float(np.mean(metrics["mean_return"]))

    help = "PBT over any registered agent (default: 8 SAC agents on the open point maze)"

    def run(self, config, out_dir, *, progress: Progress, plots: bool, resume: bool) -> RunResult:
        env, agent, spaces, pbt = make_pbt_run(config)
        init_key, loop_key = jr.split(jr.key(config.seed))
        init = lambda: init_population(agent, env, spaces, config.population_size, key=init_key)
        folder, resumed = start_run(
            self, config, out_dir, resume=resume, like=lambda: eqx.filter_eval_shape(init)
        )
        # A longer run's first round keys are the same (splits keep their prefix).
        round_keys = [jr.split(k, 3) for k in jr.split(loop_key, config.rounds)]
        returns_log, hp_log, source_log, steps_log, wall_log = [], [], [], [], []

        def exploit(pop, r, returns):  # PBT after round r; every round but the last
            source = np.arange(config.population_size)
            if r < config.rounds - 1:
                pop, info = pbt.update(pop, jnp.asarray(returns), key=round_keys[r][2])
                source[np.asarray(info.replaced)] = np.asarray(info.sources)
            return pop, source

        def tables():
            returns_arr = np.stack(returns_log)
            hparams = {n: np.stack([h[n] for h in hp_log]) for n in hp_log[0]}
            progress_columns = {
                "round": np.arange(len(returns_log)),
                "env_steps": np.asarray(steps_log),
                "wall_s": np.asarray(wall_log),
                "mean_return": returns_arr.mean(axis=1),
                "max_return": returns_arr.max(axis=1),
                "min_return": returns_arr.min(axis=1),
            }
            extra = {"return": returns_arr, "next_copied_from": np.stack(source_log)}
            table = hparams_columns("round", hparams, **extra)
            return returns_arr, hparams, progress_columns, table

        clock = RunClock(0.0 if resumed is None else resumed.seconds)  # over resumes
        if resumed is None:
            pop, start = init(), 0
        else:
            pop, start = resumed.state, resumed.step + 1
            steps_log = [r["env_steps"] for r in resumed.rows("progress.csv")]
            wall_log = [r["wall_s"] for r in resumed.rows("progress.csv")]
            returns_log, hp_log, source_log = _rounds_back(resumed.rows("hparams.csv"), start)
            if not resumed.metrics["exploited"] and start < config.rounds:
                # The run was lengthened after its last round, which had no PBT step: take it.
                pop, source_log[-1] = exploit(pop, start - 1, returns_log[-1])
        checkpoints = Checkpointer.of(config, folder, resumed, origin=-1)
        progress.start(config.rounds, "pbt", unit="round", initial=min(start, config.rounds))
        for r in range(start, config.rounds):
            train_key, eval_key, _ = round_keys[r]
            hp_log.append({n: np.asarray(v) for n, v in hparams_table(pop).items()})
            pop, _ = train_population(agent, env, pop, config.iterations_per_round, key=train_key)
            ev = evaluate_population(agent, env, pop, config.eval_episodes, key=eval_key)
            returns = np.asarray(jnp.mean(ev.returns, axis=1))
            returns_log.append(returns)
            steps_log.append(int(np.sum(np.asarray(pop.env_steps))))
            wall_log.append(clock())
            pop, source = exploit(pop, r, returns)
            source_log.append(source)
            row = {
                "round": r,
                "env_steps": steps_log[-1],
                "mean_return": returns.mean(),
                "max_return": returns.max(),
                "min_return": returns.min(),
            }
            progress.log(row)
            progress.advance(1, mean=row["mean_return"], max=row["max_return"])
            last = r == config.rounds - 1
            if checkpoints.due(r, force=last):
                _, _, progress_columns, table = tables()
                folder.write_columns("progress.csv", progress_columns)  # type: ignore[union-attr]
                folder.write_columns("hparams.csv", table)  # type: ignore[union-attr]
                metrics = {k: float(v) for k, v in row.items()} | {"exploited": not last}
                checkpoints.save(r, pop, metrics, force=last)
        returns_arr, hparams, progress_columns, table = tables()
        if folder is not None:
            folder.write_columns("progress.csv", progress_columns)
            folder.write_columns("hparams.csv", table)
            stored = population_without_optimiser_states(agent, pop).agent_state
            folder.write_eqx("population.eqx", stored)
            if plots:
                from ..plotting import plot_hparams, plot_population_returns

                folder.write_figure("returns.png", plot_population_returns(returns_arr))
                folder.write_figure("hparams.png", plot_hparams(hparams))
        return RunResult(
            config,
            None if folder is None else folder.path,
            progress_columns,
            pop,
            tables={"hparams": table},
        )

    def load(self, folder: RunFolder, config) -> RunResult:
        _, agent, _, _ = make_pbt_run(config)
        like = eqx.filter_eval_shape(
            lambda: eqx.filter_vmap(lambda k: agent.empty_optimiser_states(agent.init(key=k)))(
                jr.split(jr.key(0), config.population_size)
            )
        )
        states = folder.read_eqx("population.eqx", like)
        return RunResult(
            config,
            folder.path,
            folder.read_columns("progress.csv"),
            states,
            tables={"hparams": folder.read_columns("hparams.csv")},
        )

    def summary(self, result: RunResult) -> str:
        last = result.last
        return (
            f"done: {result.config.rounds} rounds, final mean return {last['mean_return']:.6g} "
            f"(max {last['max_return']:.6g})"
        )


register_job(_PBTJob())
