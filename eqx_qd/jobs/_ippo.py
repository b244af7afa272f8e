"""The IPPO job (`eqx-qd run ippo`): independent PPO with evaluation every few updates,
checkpoints, a progress table and a learning curve in a run folder, resumable from its latest
checkpoint; and `train_ippo`, the same chunks (train, evaluate, checkpoint) as a function for
a notebook's own loop."""

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
from .._validate import non_negative_int, positive, positive_int
from ..envs._multi_agent import AbstractMultiAgentEnv, SingleAgentView
from ..envs._rollout import EpisodeStats, evaluate_episodes
from ..rl._base import TrainMetrics
from ..rl._ippo import IPPO
from ..rl._ppo import PPO_CONVENTIONS, PPORun, train_data_parallel
from ..rl._ppo_losses import PPOHParams
from ._blocks import _one_of, RunOptions
from ._checkpoints import list_checkpoints, mean_return, restore_checkpoint, save_checkpoint
from ._config import option
from ._distributed import job_mesh, to_host
from ._folder import RunFolder
from ._job import register_job, RunResult
from ._loop import Chunk, LoopJob
from ._progress import Progress
from ._registry import ENVIRONMENTS, make_env
from ._resume import Checkpointer, RunClock


@dataclasses.dataclass(frozen=True)
class IPPOConfig(RunOptions):
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
    convention: str = option(
        "eqx_qd",
        "eqx_qd | jaxagents: jaxagents' minibatches (whole environments, one fixed order), "
        "advantage standardisation (per time step and agent) and KL statistic; its "
        "actor_epochs E runs E - 1 epochs: pass E - 1",
        check=_one_of(*PPO_CONVENTIONS),
    )
    adam_eps: float = option(1e-5, "Adam's epsilon (jaxagents' default: 1e-8)", check=positive)
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
    keep_checkpoints: int = option(
        0,
        "newest checkpoint states kept (0: all); every evaluation's record stays",
        check=non_negative_int,
    )
    devices: int = option(
        1,
        "devices to split the environments over, num_envs / devices each, with the gradients "
        "averaged (on a CPU, host devices are made)",
        check=positive_int,
    )

    def check(self) -> None:
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden must list positive layer widths, got {list(self.hidden)}")
        self.build_agent()  # names a bad environment option, size or minibatch split now
        self.hparams()  # names a hyperparameter outside its range now
        if self.num_envs % self.devices:
            raise ValueError(
                f"devices ({self.devices}) must divide num_envs ({self.num_envs}): every "
                "device steps as many environments"
            )
        if self.devices > 1:
            try:  # each device's share must split into the minibatches too
                dataclasses.replace(self.build_agent(), num_envs=self.num_envs // self.devices)
            except ValueError as e:
                raise ValueError(
                    f"devices ({self.devices}): each device's num_envs / {self.devices} = "
                    f"{self.num_envs // self.devices} environments: {e}"
                ) from None

    def build_env(self) -> AbstractMultiAgentEnv:
        """The registered environment with this config's options (a single-agent one seen as
        one agent)."""
        options = {"num_agents": self.num_agents, "size": self.size}
        env = make_env(
            self.env,
            episode_length=self.episode_length,
            **{k: v for k, v in options.items() if v is not None},
        )
        return env if isinstance(env, AbstractMultiAgentEnv) else SingleAgentView(env)

    def build_agent(self, env: AbstractMultiAgentEnv | None = None) -> IPPO:
        """The `IPPO` agent this config describes, for `env` (default: `make_env`)."""
        return IPPO.for_env(
            self.build_env() if env is None else env,
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
            convention=self.convention,
            adam_eps=self.adam_eps,
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


def _evaluation(agent: IPPO, env, run: PPORun, num_episodes: int, deterministic: bool, key):
    """The evaluation of `run` at its iteration count: its key is `key` folded with the
    count, so a resumed run evaluates as an uninterrupted one."""
    key = jr.fold_in(key, int(run.iterations))
    return _evaluate_jit(agent, env, run.agent_state, num_episodes, deterministic, key)


def _train_chunk(
    agent: IPPO, env, run: PPORun, n: int, key, mesh: Any = None
) -> tuple[PPORun, TrainMetrics]:
    """`n` iterations from `run` (one `agent.train` call, or `train_data_parallel` over
    `mesh`); each iteration's key is `key` folded with its count, however the run is cut."""
    if mesh is None:
        return agent.train(env, run, n, key=key)
    return train_data_parallel(agent, env, run, n, mesh=mesh, key=key)


def _record(result: EpisodeStats, run: PPORun, wall: float) -> dict[str, Any]:
    """What a checkpoint records of an evaluation (`records_of` reads it back)."""
    return {**result.to_dict(), "env_steps": int(run.env_steps), "wall_s": wall}


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
    """Train `run` on `env` for `num_iterations` more iterations, evaluating at every
    multiple of `eval_frequency` iterations and at the end: the IPPO job's chunks, for a
    notebook's own loop.

    Every evaluation plays `num_episodes` episodes (policy modes, unless
    `deterministic_eval=False`); `progress` shows a bar (or reports to a `Progress`). A
    fresh run (zero iterations) is evaluated first too. With `checkpoint_dir`, every
    evaluation is checkpointed there (`save_checkpoint`; the agent's structure and the
    hyperparameters go beside, as `agent.json` and `hparams.json`), a folder holding
    checkpoints past `run`'s iteration (another branch) being refused; with `keep`, only the
    newest `keep` runs stay, and every evaluation's metrics, with `wall_s`: `clock()`,
    the seconds the run has spent (default: since this call). Training and evaluation keys
    derive from `key` and the iteration count, so a run continued from a checkpoint sees the
    same keys as an uninterrupted one, and as the IPPO job's run of the same seed.

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
        later = [c.step for c in list_checkpoints(folder) if c.step > int(run.iterations)]
        if later:
            raise ValueError(
                f"checkpoint_dir {folder.path!r} holds checkpoints past iteration "
                f"{int(run.iterations)} (up to {max(later)}): another branch of the run, which "
                "'latest' would mix with this one. Continue into a new folder (jobs.fork_run "
                "copies the run up to a checkpoint), or remove them"
            )
        _write_agent(folder, agent, env, run.agent_state.hparams)
    log = TrainingLog([], [], [], [])
    train_key, eval_key = jr.split(key)
    clock = clock or RunClock()

    def record(run, metrics):
        result = _evaluation(agent, env, run, num_episodes, deterministic_eval, eval_key)
        log.iterations.append(int(run.iterations))
        log.env_steps.append(int(run.env_steps))
        log.evals.append(result)
        log.metrics.append(metrics)
        if folder is not None:
            record = _record(result, run, clock())
            save_checkpoint(folder, int(run.iterations), run, record, keep=keep, records=True)

    if int(run.iterations) == 0:
        record(run, None)
    with as_progress(progress) as bar:
        bar.start(num_iterations, "ippo", unit="iteration")
        done = 0
        while done < num_iterations:
            # To the next multiple of eval_frequency, as the job's chunks.
            at = int(run.iterations)
            chunk = min(eval_frequency - at % eval_frequency, num_iterations - done)
            run, metrics = _train_chunk(agent, env, run, chunk, train_key)
            done += chunk
            record(run, metrics)
            bar.advance(chunk, ret=float(np.mean(log.evals[-1].returns)))
    return run, log


def _write_agent(folder: RunFolder, agent: IPPO, env, hparams: PPOHParams) -> None:
    folder.write_json("agent.json", agent_info(agent, env))
    folder.write_json("hparams.json", hparams.to_dict())


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


def _progress_row(run: PPORun, result: EpisodeStats, wall: float) -> list[Any]:
    """`progress.csv`'s row of one evaluation: statistics over episodes and agents."""
    s = summarise(np.asarray(result.returns, np.float32).reshape(-1))
    stats = (s.mean, s.std, s.min, s.max, s.median)
    ends = (result.terminated, result.truncated, result.lengths)
    return [
        int(run.iterations),
        int(run.env_steps),
        *[float(v) for v in stats],
        *[float(np.mean(np.asarray(v, np.float64))) for v in ends],
        wall,
    ]


class _IPPOPlan(typing.NamedTuple):
    config: IPPOConfig
    env: AbstractMultiAgentEnv
    agent: IPPO
    init_key: PRNGKey
    train_key: PRNGKey
    eval_key: PRNGKey
    mesh: Any  # the devices the environments are split over (`None`: one device)


class _IPPOJob(LoopJob[_IPPOPlan, PPORun]):
    """Train to `config.iterations` iterations, evaluating and checkpointing every
    `eval_frequency` iterations.

    The folder holds `config.toml`, `agent.json`, `hparams.json`, `checkpoints/` (one
    run and its evaluation per evaluation), `progress.csv` (per evaluation: iterations, env
    steps, return statistics over episodes and agents, fractions terminated / truncated, mean
    length, `wall_s`: seconds spent running, summed over resumes) and
    `learning_curve.png`. With `resume`, training continues from the latest checkpoint in
    `out_dir` (the config must describe the same agent; its hyperparameters apply from there
    on). Without it, a folder that already holds a run is refused.

    With `devices > 1` the environments are split over the devices and the gradients
    averaged (`rl.train_data_parallel`); a checkpoint holds every environment, so a resumed
    run may take another device count (the environments split anew).
    """

    name = "ippo"
    config_cls = IPPOConfig
    logs = {"progress.csv": "iterations"}
    resume_may_change = None  # a resumed run takes the config's hyperparameters from there
    unit = "iteration"
    checkpoint_at_start = True  # the fresh run's evaluation is a checkpoint, as every other
    help = "independent PPO (default: 4 agents on the discrete LineTargets task)"
    multi_process = True

    def best(self, metrics) -> float:
        return mean_return(metrics)

    @staticmethod
    def _fresh(config: IPPOConfig, env, agent: IPPO, key) -> PPORun:
        init_key, run_key = jr.split(key)
        state = agent.init(config.hparams(), key=init_key)
        return agent.init_run(env, state, key=run_key)

    def plan(self, config: IPPOConfig) -> _IPPOPlan:
        env = config.build_env()
        agent = config.build_agent(env)
        init_key, key = jr.split(jr.key(config.seed))
        train_key, eval_key = jr.split(key)  # as `train_ippo` splits its key
        mesh = job_mesh(config.devices)
        return _IPPOPlan(config, env, agent, init_key, train_key, eval_key, mesh)

    def headers(self, plan: _IPPOPlan) -> dict[str, list[str]]:
        return {"progress.csv": list(PROGRESS_COLUMNS)}

    def like(self, plan: _IPPOPlan) -> PPORun:
        return eqx.filter_eval_shape(self._fresh, plan.config, plan.env, plan.agent, jr.key(0))

    def total(self, config: IPPOConfig) -> int:
        return config.iterations

    def checkpointer(self, config, folder, resumed, enabled: bool) -> Checkpointer:
        # Every evaluation, keeping every evaluation's record (the states: the newest
        # `keep_checkpoints`, or all).
        at = None if resumed is None else resumed.step
        keep = config.keep_checkpoints or None
        return Checkpointer(folder, 1, keep, at, enabled=enabled, records=True)

    def opened(self, plan: _IPPOPlan, folder: RunFolder) -> None:
        _write_agent(folder, plan.agent, plan.env, plan.config.hparams())

    def bar(self, row) -> dict[str, float]:
        return {"ret": row["mean_return"]}

    def _evaluated(self, plan: _IPPOPlan, run: PPORun, clock: RunClock) -> Chunk:
        config = plan.config
        # The counts on every process of a multi-process run (a collective), for the rows.
        counts = to_host((run.iterations, run.env_steps))
        seen = eqx.tree_at(lambda r: (r.iterations, r.env_steps), run, counts)
        result = _evaluation(plan.agent, plan.env, seen, config.eval_episodes, True, plan.eval_key)
        result, wall = to_host(result), clock()
        row = _progress_row(seen, result, wall)
        return Chunk(run, int(counts[0]), {"progress.csv": [row]}, _record(result, seen, wall))

    def start(self, plan: _IPPOPlan, clock: RunClock) -> Chunk:
        run = self._fresh(plan.config, plan.env, plan.agent, plan.init_key)
        return self._evaluated(plan, run, clock)

    def resumed_state(self, plan: _IPPOPlan, resumed) -> PPORun:
        # The config is the truth written beside the run: its hyperparameters apply.
        hparams = plan.config.hparams()
        return eqx.tree_at(lambda r: r.agent_state.hparams, resumed.state, hparams)

    def advance(self, plan: _IPPOPlan, run: PPORun, step: int, clock: RunClock) -> Chunk:
        # To the next multiple of eval_frequency: a run lengthened from an iteration off that
        # grid evaluates where the longer run does (and where the shorter one ended).
        frequency = plan.config.eval_frequency
        n = min(frequency - step % frequency, plan.config.iterations - step)
        run, _ = _train_chunk(plan.agent, plan.env, run, n, plan.train_key, plan.mesh)
        return self._evaluated(plan, run, clock)

    def finish(self, plan: _IPPOPlan, folder, run: PPORun, logs, plots: bool) -> RunResult:
        run = to_host(run)  # every process, in step
        rows = np.asarray(logs["progress.csv"], np.float64).reshape(-1, len(PROGRESS_COLUMNS))
        table = {c: rows[:, j] for j, c in enumerate(PROGRESS_COLUMNS)}
        if folder is not None and plots:
            from ..plotting import plot_learning_curve

            curve = plot_learning_curve(
                table["env_steps"], table["mean_return"], table["std_return"]
            )
            folder.write_figure("learning_curve.png", curve)
        return RunResult(plan.config, None if folder is None else folder.path, table, run)

    def load(self, folder: RunFolder, config) -> RunResult:
        env = config.build_env()
        like = eqx.filter_eval_shape(self._fresh, config, env, config.build_agent(env), jr.key(0))
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
