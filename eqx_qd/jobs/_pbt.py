"""The PBT job (``eqx-qd run pbt``): PBT-SAC or PBT-TD3 with a run folder and plots of what PBT
chose for every member."""

import csv
import dataclasses
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._envs.base import AbstractEnv
from .._envs.brax import make_env
from .._rl.base import AbstractAgent
from .._rl.pbt import (
    evaluate_population,
    hparams_table,
    init_population,
    PBT,
    population_without_optimizer_states,
    train_population,
)
from .._rl.sac import SAC
from .._rl.spaces import log_uniform_learning_rates
from .._rl.td3 import TD3
from ._config import TomlConfig


@dataclasses.dataclass(frozen=True)
class PBTConfig(TomlConfig):
    """Settings of `run_pbt`. The defaults train 8 SAC agents on the open point maze in about a
    minute here. ``best_fraction`` / ``worse_fraction`` follow QDax (counts are
    ``int(fraction * population_size)`` and must not round to zero)."""

    TABLE: ClassVar[str] = "pbt"

    agent: str = "sac"
    env: str = "point_maze_open"
    episode_length: int = 100
    population_size: int = 8
    rounds: int = 10
    iterations_per_round: int = 200
    env_batch_size: int = 8
    grad_updates_per_step: float = 0.25
    buffer_size: int = 50_000
    hidden: tuple[int, ...] | list[int] = (64, 64)
    batch_size: int = 128
    best_fraction: float = 0.2
    worse_fraction: float = 0.4
    explore: str = "resample"
    log_uniform_lr: bool = False
    eval_episodes: int = 4
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if self.agent not in ("sac", "td3"):
            raise ValueError(f"agent must be 'sac' or 'td3', got {self.agent!r}")
        for name in ("episode_length", "population_size", "rounds", "iterations_per_round",
                     "env_batch_size", "buffer_size", "batch_size", "eval_episodes"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.grad_updates_per_step <= 0:
            raise ValueError("grad_updates_per_step must be positive")
        if not self.hidden:
            raise ValueError("hidden needs at least one layer")
        # Validates the counts (and explore) now, with a message naming the fraction.
        self.make_pbt({})

    def make_pbt(self, spaces) -> PBT:
        return PBT.from_fractions(
            self.population_size, self.best_fraction, self.worse_fraction, spaces, self.explore
        )


def env_by_name(name: str, episode_length: int) -> AbstractEnv:
    """``point_maze_open`` (no walls), ``point_maze``, or a brax QD task, with that length."""
    if name == "point_maze_open":
        return make_env("point_maze", walls=False, length=episode_length)
    if name == "point_maze":
        return make_env("point_maze", length=episode_length)
    return make_env(name, episode_length=episode_length)


def make_pbt_agent(config: PBTConfig, env: AbstractEnv) -> AbstractAgent:
    cls = SAC if config.agent == "sac" else TD3
    return cls(
        observation_size=env.observation_size,
        action_size=env.action_size,
        policy_hidden=config.hidden,
        critic_hidden=config.hidden,
        batch_size=config.batch_size,
    )


@dataclasses.dataclass
class PBTResult:
    population: Any
    returns: np.ndarray  # (rounds, population) evaluation returns
    hparams: dict[str, np.ndarray]  # name -> (rounds, population), values used in each round
    folder: str | None


def run_pbt(
    config: PBTConfig,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
    plots: bool = True,
) -> PBTResult:
    """Train the population for ``rounds`` rounds; after each, evaluate every member and apply
    PBT (not after the last). Writes ``config.toml``, ``progress.csv`` (per round: env steps,
    mean / max / min return), ``hparams.csv`` (per round and member: its hyperparameters during
    the round, its return, and the member it was copied from next), ``population.eqx`` (final
    agent states without optimiser states), ``returns.png`` and ``hparams.png``."""
    from tqdm.auto import tqdm

    env = env_by_name(config.env, config.episode_length)
    agent = make_pbt_agent(config, env)
    spaces = agent.hparam_spaces
    if config.log_uniform_lr:
        spaces = log_uniform_learning_rates(spaces)
    pbt = config.make_pbt(spaces)
    init_key, loop_key = jr.split(jr.key(config.seed))
    pop = init_population(
        agent, env, spaces, config.population_size, key=init_key,
        env_batch_size=config.env_batch_size, buffer_size=config.buffer_size,
    )  # fmt: skip
    folder = None if out_dir is None else os.fspath(out_dir)
    if folder is not None:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.toml"), "w") as f:
            f.write(config.to_toml())
    returns_log, hp_log, source_log, steps_log = [], [], [], []
    bar = tqdm(total=config.rounds, disable=not progress, desc="pbt", unit="round")
    for r, k in enumerate(jr.split(loop_key, config.rounds)):
        train_key, eval_key, pbt_key = jr.split(k, 3)
        hp_log.append({n: np.asarray(v) for n, v in hparams_table(pop).items()})
        pop, _ = train_population(
            agent, env, pop, config.iterations_per_round, key=train_key,
            grad_updates_per_step=config.grad_updates_per_step,
        )  # fmt: skip
        ev = evaluate_population(agent, env, pop, config.eval_episodes, key=eval_key)
        returns = jnp.mean(ev.returns, axis=1)
        returns_log.append(np.asarray(returns))
        steps_log.append(int(np.sum(np.asarray(pop.env_steps))))
        source = np.arange(config.population_size)
        if r < config.rounds - 1:
            pop, info = pbt.update(pop, returns, key=pbt_key)
            source[np.asarray(info.replaced)] = np.asarray(info.sources)
        source_log.append(source)
        bar.set_postfix(
            mean=f"{float(jnp.mean(returns)):.4g}", max=f"{float(jnp.max(returns)):.4g}"
        )
        bar.update(1)
    bar.close()
    returns_arr = np.stack(returns_log)
    hparams = {n: np.stack([h[n] for h in hp_log]) for n in hp_log[0]}
    if folder is not None:
        _write_csvs(folder, config, returns_arr, hparams, np.stack(source_log), steps_log)
        eqx.tree_serialise_leaves(
            os.path.join(folder, "population.eqx"),
            population_without_optimizer_states(agent, pop).agent_state,
        )
        if plots:
            _write_plots(folder, returns_arr, hparams)
    return PBTResult(pop, returns_arr, hparams, folder)


def _write_csvs(folder, config, returns, hparams, sources, steps) -> None:
    with open(os.path.join(folder, "progress.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "env_steps", "mean_return", "max_return", "min_return"])
        for r in range(returns.shape[0]):
            w.writerow([r, steps[r], returns[r].mean(), returns[r].max(), returns[r].min()])
    names = sorted(hparams)
    with open(os.path.join(folder, "hparams.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "member", *names, "return", "next_copied_from"])
        for r in range(returns.shape[0]):
            for m in range(config.population_size):
                w.writerow([r, m, *[float(hparams[n][r, m]) for n in names],
                            float(returns[r, m]), int(sources[r, m])])  # fmt: skip


def _write_plots(folder, returns, hparams) -> None:
    import matplotlib.pyplot as plt

    from ..plotting import save_figure

    rounds = np.arange(returns.shape[0])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for m in range(returns.shape[1]):
        ax.plot(rounds, returns[:, m], color="grey", alpha=0.4, lw=1)
    ax.plot(rounds, returns.mean(axis=1), color="C0", lw=2, label="population mean")
    ax.set_xlabel("round")
    ax.set_ylabel("evaluation return")
    ax.legend()
    fig.tight_layout()
    save_figure(folder, "returns.png", fig)
    save_figure(folder, "hparams.png", plot_hparams(hparams))


def plot_hparams(hparams: Mapping[str, np.ndarray]):
    """One panel per explored hyperparameter: each member's value per round (what PBT chose).
    ``hparams`` maps names to ``(rounds, population)`` arrays (`PBTResult.hparams`)."""
    import matplotlib.pyplot as plt

    varying = [n for n in sorted(hparams) if np.ptp(np.asarray(hparams[n])) > 0]
    names = varying or sorted(hparams)  # constant ones (never explored) are left out
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.ravel(), names):
        values = np.asarray(hparams[name])
        ax.plot(np.arange(values.shape[0]), values, marker=".", lw=1)
        ax.set_title(name)
        ax.set_xlabel("round")
        if name.endswith("_lr"):
            ax.set_yscale("log")
    for ax in axes.ravel()[len(names) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def load_pbt_run(folder: str | os.PathLike):
    """``(config, agent states, hparams rows)`` of a run folder written by `run_pbt`; the agent
    states are stacked (one per member) and carry no optimiser states."""
    folder = os.fspath(folder)
    config = PBTConfig.from_toml(os.path.join(folder, "config.toml"))
    env = env_by_name(config.env, config.episode_length)
    agent = make_pbt_agent(config, env)
    like = eqx.filter_vmap(lambda k: agent.empty_optimizer_states(agent.init(key=k)))(
        jr.split(jr.key(0), config.population_size)
    )
    states = eqx.tree_deserialise_leaves(os.path.join(folder, "population.eqx"), like)
    with open(os.path.join(folder, "hparams.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    return config, states, rows
