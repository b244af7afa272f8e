"""The IPPO job (`eqx-qd run ippo`): independent PPO with evaluation every few updates,
checkpoints, a progress table and a learning curve in a run folder, resumable from its latest
checkpoint; and `train_ippo`, the evaluate-and-checkpoint driver it runs on."""

import dataclasses
import os
import typing
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax.random as jr
import numpy as np

from .. import _validate as check
from .._compile import jit
from .._custom_types import PRNGKey
from .._validate import non_negative_int, positive_int
from ..envs._multi_agent import AbstractMultiAgentEnv, SingleAgentView
from ..envs._rollout import EpisodeStats, evaluate_episodes
from ..rl._base import TrainMetrics
from ..rl._ippo import IPPO
from ..rl._ppo import PPOHParams, PPORun
from ._checkpoints import (
    list_checkpoints,
    mean_return,
    records_of,
    restore_checkpoint,
    save_checkpoint,
)
from ._common import CONFIG_FILE, Job, register_job, RunResult, write_status
from ._config import JobConfig, option
from ._folder import RunFolder
from ._progress import Progress
from ._registry import ENVIRONMENTS, make_env
from ._resume import RunClock


@dataclasses.dataclass(frozen=True)
class IPPOConfig(JobConfig):
    """Settings of the IPPO job (`jobs.run`, `eqx-qd run ippo`). The defaults train 4 agents
    on `LineTargets` (a line of 16 cells, 40 steps per episode) to walk to their targets.

    `env` is any registered environment: a multi-agent one, or a single-agent one played by
    one agent (`SingleAgentView`). `num_agents` and `size` are options of `line_targets`
    (unset: its defaults, 4 and 16). `iterations` is the total a run trains to: resuming an
    interrupted run finishes the remaining updates.
    """

    JOB: ClassVar[str] = "ippo"

    env: str = option("line_targets", "registered environment", check=ENVIRONMENTS.check())
    num_agents: int | None = option(None, "agents (line_targets)", check=positive_int)
    size: int | None = option(None, "cells of the line (line_targets)", check=positive_int)
    episode_length: int = option(40, "time limit of every episode", check=positive_int)
    rollout_length: int = option(64, "steps per rollout", check=positive_int)
    num_envs: int = option(64, "parallel environments", check=positive_int)
    num_minibatches: int = option(8, "minibatches per epoch", check=positive_int)
    actor_epochs: int = option(4, "actor epochs per update (at most)", check=non_negative_int)
    critic_epochs: int = option(4, "critic epochs per update", check=non_negative_int)
    hidden: tuple[int, ...] = option((64, 64), "hidden layer widths (actors and critics)")
    shared_params: bool = option(False, "one actor and one critic shared by all agents")
    joint_network: bool = option(
        False, "one actor and one critic reading all agents' observations, a head per agent"
    )
    normalise_observations: bool = option(False, "running observation normalisation per agent")
    iterations: int = option(
        200, "total PPO iterations (a rollout and its epochs each)", check=non_negative_int
    )
    eval_frequency: int = option(10, "updates between evaluations", check=positive_int)
    eval_episodes: int = option(64, "episodes per evaluation", check=positive_int)
    gamma: float = option(0.99, "discount")
    gae_lambda: float = option(0.95, "GAE lambda")
    clip_eps: float = option(0.2, "PPO clip")
    ent_coef: float = option(0.01, "entropy bonus")
    vf_coef: float = option(0.5, "critic loss scale")
    kl_threshold: float = option(0.02, "approximate KL that stops the actor epochs")
    actor_lr: float = option(5e-4, "actor learning rate")
    critic_lr: float = option(1e-3, "critic learning rate")
    max_grad_norm: float = option(0.5, "gradient clipping by global norm")
    reward_scale: float = option(1.0, "rewards are multiplied by it before GAE")
    seed: int = option(0, "random seed")
    keep_checkpoints: int = option(
        0,
        "newest checkpoint states kept (0: all); every evaluation's record stays",
        check=non_negative_int,
    )

    def check(self) -> None:
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden must list positive layer widths, got {list(self.hidden)}")
        self.make_agent()  # names a bad environment option, size or minibatch split now
        self.hparams()  # names a hyperparameter outside its range now

    def make_env(self) -> AbstractMultiAgentEnv:
        """The registered environment with this config's options (a single-agent one seen as
        one agent)."""
        options = {"num_agents": self.num_agents, "size": self.size}
        env = make_env(
            self.env,
            episode_length=self.episode_length,
            **{k: v for k, v in options.items() if v is not None},
        )
        return env if isinstance(env, AbstractMultiAgentEnv) else SingleAgentView(env)

    def make_agent(self, env: AbstractMultiAgentEnv | None = None) -> IPPO:
        """The `IPPO` agent this config describes, for `env` (default: `make_env`)."""
        return IPPO.for_env(
            self.make_env() if env is None else env,
            rollout_length=self.rollout_length,
            num_envs=self.num_envs,
            num_minibatches=self.num_minibatches,
            actor_epochs=self.actor_epochs,
            critic_epochs=self.critic_epochs,
            actor_hidden=self.hidden,
            critic_hidden=self.hidden,
            shared_params=self.shared_params,
            joint_network=self.joint_network,
            normalise_observations=self.normalise_observations,
        )

    def hparams(self) -> PPOHParams:
        """The config's `PPOHParams`."""
        names = [f.name for f in dataclasses.fields(PPOHParams)]
        return PPOHParams(**{n: getattr(self, n) for n in names})


# ---------------------------------------------------------------------------- the driver


class TrainingLog(typing.NamedTuple):
    """Per-evaluation records of a `train_ippo` call: the iterations and environment steps
    counted since the very start, the evaluation, and the `TrainMetrics` of the iterations
    before it (`None` for the evaluation of a fresh run)."""

    iterations: list[int]
    env_steps: list[int]
    evals: list[EpisodeStats]
    metrics: list[TrainMetrics | None]


def agent_info(agent: IPPO, env: AbstractMultiAgentEnv) -> dict[str, Any]:
    """The agent's structure and its environment as JSON-able values (`agent.json`)."""
    fields = {n: getattr(agent, n) for n in agent.__dataclass_fields__ if n != "make_actor"}
    return {"env": repr(env), **fields}


class Summary(typing.NamedTuple):
    """Statistics of per-episode values over the episode axis."""

    mean: np.ndarray
    var: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    median: np.ndarray
    has_nans: np.ndarray


def summarise(values: Any, axis: int = 0) -> Summary:
    """Mean, variance, standard deviation, min, max, median and NaN flag of `values` along
    `axis` (the episodes axis of `EpisodeStats` fields by default)."""
    values = np.asarray(values)
    check.integer("summarise: axis", axis)
    if not -values.ndim <= axis < max(values.ndim, 1):
        raise ValueError(
            f"summarise: axis {axis} is out of range for values of shape {values.shape}"
        )
    if values.dtype == bool:
        values = values.astype(np.float32)
    stats = (np.mean, np.var, np.std, np.min, np.max, np.median)
    return Summary(*(f(values, axis) for f in stats), np.any(np.isnan(values), axis))


def _evaluate(agent: IPPO, env, state, num_episodes: int, deterministic: bool, key) -> EpisodeStats:
    """`num_episodes` full episodes of `env` played by `state`'s policies (their modes when
    `deterministic`): returns and final rewards per agent, how each episode ended."""
    policy = lambda obs, k: agent.act(state, obs, deterministic=deterministic, key=k)
    return evaluate_episodes(env, policy, num_episodes, key=key)


_evaluate_jit = jit(_evaluate)


def train_ippo(
    agent: IPPO,
    env: AbstractMultiAgentEnv,
    run: PPORun,
    num_iterations: int,
    *,
    eval_frequency: int,
    num_episodes: int = 16,
    checkpoint_dir: str | os.PathLike | RunFolder | None = None,
    progress: bool | Progress = True,
    deterministic_eval: bool = True,
    keep: int | None = None,
    clock: Callable[[], float] | None = None,
    key: PRNGKey,
) -> tuple[PPORun, TrainingLog]:
    """Train `run` on `env` for `num_iterations` more iterations, evaluating every
    `eval_frequency` iterations.

    Every evaluation plays `num_episodes` episodes (policy modes, unless
    `deterministic_eval=False`); `progress` shows a bar (or reports to a `Progress`). A
    fresh run (zero iterations) is evaluated first too. With `checkpoint_dir`, every
    evaluation is checkpointed there (`save_checkpoint`; the agent's structure and the
    hyperparameters go beside, as `agent.json` and `hparams.json`); with `keep`, only the
    newest `keep` runs stay, and every evaluation's metrics, with `wall_s`: `clock()`,
    the seconds the run has spent (default: since this call). Training and evaluation keys
    derive from `key` and the iteration count, so a run continued from a checkpoint sees the
    same keys as an uninterrupted one.

    **Returns:** the trained run and the `TrainingLog` of the evaluations.
    """
    from ._progress import as_progress

    check.non_negative_int("num_iterations", num_iterations)
    check.positive_int("eval_frequency", eval_frequency)
    check.positive_int("num_episodes", num_episodes)
    folder = None
    if checkpoint_dir is not None:
        folder = (
            checkpoint_dir if isinstance(checkpoint_dir, RunFolder) else RunFolder(checkpoint_dir)
        )
        folder.write_json("agent.json", agent_info(agent, env))
        folder.write_json("hparams.json", run.agent_state.hparams.to_dict())
    log = TrainingLog([], [], [], [])
    train_key, eval_key = jr.split(key)
    clock = clock or RunClock()

    def record(run, metrics):
        iterations = int(run.iterations)
        result = _evaluate_jit(
            agent,
            env,
            run.agent_state,
            num_episodes,
            deterministic_eval,
            jr.fold_in(eval_key, iterations),
        )
        log.iterations.append(iterations)
        log.env_steps.append(int(run.env_steps))
        log.evals.append(result)
        log.metrics.append(metrics)
        if folder is not None:
            saved = {**result.to_dict(), "env_steps": int(run.env_steps), "wall_s": clock()}
            save_checkpoint(folder, iterations, run, saved, keep=keep, records=True)

    if int(run.iterations) == 0:
        record(run, None)
    with as_progress(progress) as bar:
        bar.start(num_iterations, "ippo", unit="iteration")
        done = 0
        while done < num_iterations:
            chunk = min(eval_frequency, num_iterations - done)
            chunk_key = jr.fold_in(train_key, int(run.iterations))
            run, metrics = agent.train(env, run, chunk, key=chunk_key)
            done += chunk
            record(run, metrics)
            bar.advance(chunk, ret=float(np.mean(log.evals[-1].returns)))
    return run, log


# ------------------------------------------------------------------------------- the job


PROGRESS_COLUMNS = (
    "iterations",
    "env_steps",
    "mean_return",
    "std_return",
    "min_return",
    "max_return",
    "median_return",
    "terminated",
    "truncated",
    "mean_length",
    "wall_s",
)


def progress_table(folder: RunFolder) -> dict[str, np.ndarray]:
    """Per-evaluation statistics read back from a run folder's checkpoints."""
    rows: dict[str, list[Any]] = {c: [] for c in PROGRESS_COLUMNS}
    for step, m in records_of(folder):  # every evaluation, its run kept or not
        s = summarise(np.asarray(m["returns"], np.float32).reshape(-1))
        values = (
            step,
            m["env_steps"],
            s.mean,
            s.std,
            s.min,
            s.max,
            s.median,
            np.mean(m["terminated"]),
            np.mean(m["truncated"]),
            np.mean(m["lengths"]),
            m["wall_s"],
        )
        for column, value in zip(PROGRESS_COLUMNS, values):
            rows[column].append(float(value))
    return {c: np.asarray(v) for c, v in rows.items()}


def _progress_rows(table: dict[str, np.ndarray]) -> list[list]:
    return [
        [
            int(table[c][i]) if c in ("iterations", "env_steps") else f"{table[c][i]:.6g}"
            for c in PROGRESS_COLUMNS
        ]
        for i in range(len(table["iterations"]))
    ]


class _IPPOJob(Job):
    """Train to `config.iterations` iterations, evaluating and checkpointing every
    `eval_frequency` iterations under `out_dir`.

    The folder holds `config.toml`, `agent.json`, `hparams.json`, `checkpoints/` (one
    run and its evaluation per evaluation), `progress.csv` (per evaluation: iterations, env
    steps, return statistics over episodes and agents, fractions terminated / truncated, mean
    length, `wall_s`: seconds spent running, summed over resumes) and
    `learning_curve.png`. With `resume`, training continues from the latest checkpoint in
    `out_dir` (the config must describe the same agent; its hyperparameters apply from there
    on). Without it, a folder that already holds a run is refused.
    """

    name = "ippo"
    config_cls = IPPOConfig
    logs = {"progress.csv": "iterations"}
    resume_may_change = None  # a resumed run takes the config's hyperparameters from there

    def best(self, metrics) -> float:
        return mean_return(metrics)

    help = "independent PPO (default: 4 agents on the discrete LineTargets task)"

    @staticmethod
    def _fresh(config: IPPOConfig, env, agent: IPPO, key) -> PPORun:
        init_key, run_key = jr.split(key)
        state = agent.init(config.hparams(), key=init_key)
        return agent.init_run(env, state, key=run_key)

    def run(self, config, out_dir, *, progress: Progress, plots: bool, resume: bool) -> RunResult:
        if out_dir is None:
            raise ValueError("the IPPO job needs a run folder (its checkpoints live there)")
        path = os.fspath(out_dir)
        env = config.make_env()
        agent = config.make_agent(env)
        init_key, train_key = jr.split(jr.key(config.seed))
        run = self._fresh(config, env, agent, init_key)
        seconds = 0.0  # spent by the run before this call
        if resume:
            if not os.path.exists(os.path.join(path, CONFIG_FILE)):
                raise ValueError(f"nothing to resume: {path!r} holds no run ({CONFIG_FILE})")
            folder = RunFolder(path)  # removes the litter of a killed write
            if list_checkpoints(folder):  # else killed before its first: start again
                run, last = restore_checkpoint(folder, run)
                seconds = float(last.metrics.get("wall_s", 0.0))
                # The config is the truth written beside the run: its hyperparameters apply.
                run = eqx.tree_at(lambda r: r.agent_state.hparams, run, config.hparams())
        elif list_checkpoints(path) or os.path.exists(os.path.join(path, CONFIG_FILE)):
            raise ValueError(
                f"{path!r} already holds checkpoints of a run; resume it or choose another folder"
            )
        else:
            folder = RunFolder(path)
        folder.write_text(CONFIG_FILE, config.to_toml())
        if not resume:
            write_status(folder, "running", job=config.JOB)
        remaining = max(config.iterations - int(run.iterations), 0)
        run, _ = train_ippo(
            agent,
            env,
            run,
            remaining,
            key=train_key,
            eval_frequency=config.eval_frequency,
            num_episodes=config.eval_episodes,
            checkpoint_dir=folder,
            progress=progress,
            keep=config.keep_checkpoints or None,
            clock=RunClock(seconds),
        )
        table = progress_table(folder)
        for i in range(len(table["iterations"])):
            progress.log({c: table[c][i] for c in PROGRESS_COLUMNS})
        folder.write_csv("progress.csv", PROGRESS_COLUMNS, _progress_rows(table))
        if plots:
            from ..plotting import plot_learning_curve

            curve = plot_learning_curve(
                table["env_steps"], table["mean_return"], table["std_return"]
            )
            folder.write_figure("learning_curve.png", curve)
        return RunResult(config, folder.path, table, run)

    def load(self, folder: RunFolder, config) -> RunResult:
        env = config.make_env()
        like = eqx.filter_eval_shape(self._fresh, config, env, config.make_agent(env), jr.key(0))
        run = restore_checkpoint(folder, like)[0] if list_checkpoints(folder) else None
        return RunResult(config, folder.path, folder.read_columns("progress.csv"), run)

    def summary(self, result: RunResult) -> str:
        last = result.last
        return (
            f"done: {int(last['iterations'])} iterations ({int(last['env_steps'])} env steps), "
            f"mean return {last['mean_return']:.4g} (std {last['std_return']:.3g}), "
            f"{100 * last['terminated']:.0f}% of evaluation episodes terminated"
        )


register_job(_IPPOJob())
