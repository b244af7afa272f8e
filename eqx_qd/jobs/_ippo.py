"""The IPPO job (``eqx-qd run ippo``): independent PPO with evaluation, checkpoints, a progress
table and a learning curve in a run folder, resumable from its latest checkpoint."""

import csv
import dataclasses
import os
from typing import Any, ClassVar

import equinox as eqx
import jax.random as jr
import numpy as np

from .._envs.brax_multi_agent import BraxMultiAgentEnv, MA_BRAX_TASKS
from .._envs.line_targets import LineTargets
from .._envs.multi_agent import AbstractMultiAgentEnv, SingleAgentView, TimeLimit
from .._envs.point_maze import PointMaze
from .._rl.on_policy import list_checkpoints, restore_checkpoint, summarize, train_ippo
from .._rl.ppo import IPPO, PPOHParams, PPOState
from ._config import TomlConfig


IPPO_ENVS = ("line_targets", "point_maze_open", *MA_BRAX_TASKS)


@dataclasses.dataclass(frozen=True)
class IPPOConfig(TomlConfig):
    """Settings of `run_ippo`. The defaults train 4 agents on `LineTargets` (a line of 16
    cells, 40 steps per episode) to walk to their targets, in under a minute here.

    ``env``: ``line_targets`` (``num_agents``, ``size``), ``point_maze_open`` (one agent,
    continuous actions) or a multi-agent brax task (`MA_BRAX_TASKS`). ``episode_length`` is
    the time limit of every environment. ``num_updates`` is the total a run trains to: resuming
    an interrupted run finishes the remaining updates.
    """

    TABLE: ClassVar[str] = "ippo"

    env: str = "line_targets"
    num_agents: int = 4
    size: int = 16
    episode_length: int = 40
    rollout_length: int = 64
    batch_size: int = 64
    num_minibatches: int = 8
    actor_epochs: int = 4
    critic_epochs: int = 4
    hidden: tuple[int, ...] | list[int] = (64, 64)
    shared_params: bool = False
    normalise_observations: bool = False
    num_updates: int = 200
    eval_frequency: int = 10
    n_evals: int = 64
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    kl_threshold: float = 0.02
    actor_lr: float = 5e-4
    critic_lr: float = 1e-3
    max_grad_norm: float = 0.5
    reward_scale: float = 1.0
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if self.env not in IPPO_ENVS:
            raise ValueError(f"env must be one of {list(IPPO_ENVS)}, got {self.env!r}")
        for name in ("num_agents", "episode_length", "rollout_length", "batch_size",
                     "num_minibatches", "eval_frequency", "n_evals"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.num_updates < 0:
            raise ValueError(f"num_updates must be >= 0, got {self.num_updates}")
        if not self.hidden:
            raise ValueError("hidden needs at least one layer")
        self.make_agent()  # names a bad size / minibatch split now
        self.hparams()  # names a hyperparameter outside its range now

    def make_env(self) -> AbstractMultiAgentEnv:
        if self.env == "line_targets":
            return TimeLimit(LineTargets(n=self.num_agents, size=self.size), self.episode_length)
        if self.env == "point_maze_open":
            return SingleAgentView(PointMaze(walls=False, length=self.episode_length))
        return BraxMultiAgentEnv(self.env, episode_length=self.episode_length)

    def make_agent(self) -> IPPO:
        return IPPO(
            self.make_env(), rollout_length=self.rollout_length, batch_size=self.batch_size,
            num_minibatches=self.num_minibatches, actor_epochs=self.actor_epochs,
            critic_epochs=self.critic_epochs, actor_hidden=self.hidden, critic_hidden=self.hidden,
            shared_params=self.shared_params, normalise_observations=self.normalise_observations,
        )  # fmt: skip

    def hparams(self) -> PPOHParams:
        names = [f.name for f in dataclasses.fields(PPOHParams)]
        return PPOHParams(**{n: getattr(self, n) for n in names})


@dataclasses.dataclass
class IPPOResult:
    agent: IPPO
    state: PPOState
    progress: dict[str, np.ndarray]  # per evaluation, from every checkpoint of the run
    folder: str


PROGRESS_COLUMNS = (
    "updates", "env_steps", "mean_return", "std_return", "min_return", "max_return",
    "median_return", "terminated", "truncated", "mean_length",
)  # fmt: skip


def run_ippo(
    config: IPPOConfig,
    out_dir: str | os.PathLike,
    progress: bool = True,
    plots: bool = True,
    resume: bool = False,
) -> IPPOResult:
    """Train to ``config.num_updates`` updates, evaluating and checkpointing every
    ``eval_frequency`` updates under ``out_dir``.

    Writes ``config.toml``, ``agent.json``, ``hparams.json``, ``checkpoints/`` (one state and its
    evaluation per evaluation), ``progress.csv`` (per evaluation: updates, env steps, return
    statistics over episodes and agents, fractions terminated / truncated, mean length) and
    ``learning_curve.png``. With ``resume``, training continues from the latest checkpoint in
    ``out_dir`` (the config must describe the same agent; its hyperparameters apply from there
    on). Without it, a folder that already holds checkpoints is refused.
    """
    folder = os.fspath(out_dir)
    agent = config.make_agent()
    init_key, train_key = jr.split(jr.key(config.seed))
    state = agent.init(config.hparams(), key=init_key)
    if resume:
        if not list_checkpoints(folder):
            raise ValueError(f"nothing to resume: no checkpoints under {folder!r}")
        state, _ = restore_checkpoint(folder, state)
        # The config is the truth written beside the run: its hyperparameters apply from here.
        state = eqx.tree_at(lambda s: s.hparams, state, config.hparams())
    elif list_checkpoints(folder):
        raise ValueError(
            f"{folder!r} already holds checkpoints of a run; resume it or choose another folder"
        )
    remaining = max(config.num_updates - int(state.updates), 0)
    state, _ = train_ippo(
        agent, state, remaining, key=train_key, eval_frequency=config.eval_frequency,
        n_evals=config.n_evals, checkpoint_dir=folder, config_text=config.to_toml(),
        progress=progress,
    )  # fmt: skip
    table = progress_table(folder, agent)
    _write_progress(folder, table)
    if plots:
        _write_learning_curve(folder, table)
    return IPPOResult(agent, state, table, folder)


def progress_table(folder: str | os.PathLike, agent: IPPO) -> dict[str, np.ndarray]:
    """Per-evaluation statistics read back from a run folder's checkpoints."""
    rows: dict[str, list[Any]] = {c: [] for c in PROGRESS_COLUMNS}
    for ckpt in list_checkpoints(folder):
        m = ckpt.metrics
        s = summarize(np.asarray(m["returns"], np.float32).reshape(-1))
        values = (
            ckpt.updates, ckpt.updates * agent.rollout_length * agent.batch_size, s.mean, s.std,
            s.min, s.max, s.median, np.mean(m["terminated"]), np.mean(m["truncated"]),
            np.mean(m["lengths"]),
        )  # fmt: skip
        for column, value in zip(PROGRESS_COLUMNS, values):
            rows[column].append(float(value))
    return {c: np.asarray(v) for c, v in rows.items()}


def _write_progress(folder: str, table: dict[str, np.ndarray]) -> None:
    with open(os.path.join(folder, "progress.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(PROGRESS_COLUMNS)
        for i in range(len(table["updates"])):
            w.writerow(
                [int(table[c][i]) if c in ("updates", "env_steps") else f"{table[c][i]:.6g}"
                 for c in PROGRESS_COLUMNS]
            )  # fmt: skip


def _write_learning_curve(folder: str, table: dict[str, np.ndarray]) -> None:
    import matplotlib.pyplot as plt

    from ..plotting import save_figure

    fig, ax = plt.subplots(figsize=(6, 3.5))
    x, mean, std = table["env_steps"], table["mean_return"], table["std_return"]
    ax.plot(x, mean, color="C0", lw=2, label="mean return")
    ax.fill_between(x, mean - std, mean + std, color="C0", alpha=0.2, label="+- 1 std")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("evaluation return")
    ax.legend()
    fig.tight_layout()
    save_figure(folder, "learning_curve.png", fig)
