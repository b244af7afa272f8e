"""The ME-PBT job (``eqx-qd run me-pbt``), one device: a run folder like MAP-Elites' plus the
PBT agents' hyperparameter trajectories."""

import csv
import dataclasses
import os
from collections.abc import Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._emitters.pbt import PBTEmitter, PBTEmitterConfig
from .._envs.base import AbstractQDEnv
from .._io import load_repertoire, save_repertoire
from .._map_elites import MAPElites
from .._misc import tree_take
from .._repertoire import MapElitesRepertoire
from .._rl.base import AbstractAgent
from .._rl.pbt import hparams_table
from .._rl.sac import SAC
from .._rl.td3 import TD3
from .._scoring import PolicyScorer
from .._sharded import device_mesh, init_sharded, run_sharded
from .._tessellation import CVTTessellation
from .._variation import IsoLineVariation
from ._config import TomlConfig
from ._map_elites import _write_progress
from ._pbt import env_by_name, plot_hparams


@dataclasses.dataclass(frozen=True)
class MEPBTConfig(TomlConfig):
    """Settings of `run_me_pbt`. The defaults (10 PBT-TD3 agents + 10 GA children on the
    walled point maze, 128 cells) run here in about a minute. Fractions as in seed 000.
    With ``devices > 1`` the population sizes are per device (`run_sharded`)."""

    TABLE: ClassVar[str] = "me-pbt"

    agent: str = "td3"
    env: str = "point_maze"
    episode_length: int = 100
    iterations: int = 40
    pg_population_size: int = 10
    ga_population_size: int = 10
    num_training_iterations: int = 25
    env_batch_size: int = 16
    grad_updates_per_step: float = 1.0
    buffer_size: int = 100_000
    hidden: Sequence[int] = (64, 64)
    batch_size: int = 256
    fraction_best_to_replace_from: float = 0.1
    fraction_to_replace_from_best: float = 0.2
    fraction_to_replace_from_samples: float = 0.4
    iso_sigma: float = 0.005
    line_sigma: float = 0.05
    cells: int = 128
    cvt_samples: int = 50_000
    devices: int = 1
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if self.agent not in ("sac", "td3"):
            raise ValueError(f"agent must be 'sac' or 'td3', got {self.agent!r}")
        for name in ("episode_length", "iterations", "batch_size", "cells", "cvt_samples",
                     "devices"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.cvt_samples < self.cells:
            raise ValueError(f"cvt_samples ({self.cvt_samples}) must be at least cells")
        self.emitter_config()  # validates sizes and fractions, naming the one that is wrong

    def emitter_config(self) -> PBTEmitterConfig:
        return PBTEmitterConfig(
            pg_population_size=self.pg_population_size,
            ga_population_size=self.ga_population_size,
            num_training_iterations=self.num_training_iterations,
            env_batch_size=self.env_batch_size,
            grad_updates_per_step=self.grad_updates_per_step,
            buffer_size=self.buffer_size,
            fraction_best_to_replace_from=self.fraction_best_to_replace_from,
            fraction_to_replace_from_best=self.fraction_to_replace_from_best,
            fraction_to_replace_from_samples=self.fraction_to_replace_from_samples,
        )


def make_me_pbt(config: MEPBTConfig) -> tuple[MAPElites, PBTEmitter, AbstractAgent]:
    """The algorithm, its emitter and agent; with ``devices > 1`` both use the mesh axis ``p``
    (sizes are then per device)."""
    axis = "p" if config.devices > 1 else None
    env = env_by_name(config.env, config.episode_length)  # the PBT job's names
    if not isinstance(env, AbstractQDEnv):
        raise ValueError(f"ME-PBT needs a QD environment, {config.env!r} is not one")
    cls = SAC if config.agent == "sac" else TD3
    agent = cls(
        observation_size=env.observation_size, action_size=env.action_size,
        policy_hidden=config.hidden, critic_hidden=config.hidden, batch_size=config.batch_size,
    )  # fmt: skip
    emitter = PBTEmitter(
        agent, env, config.emitter_config(), agent.hparam_spaces,
        IsoLineVariation(config.iso_sigma, config.line_sigma), axis_name=axis,
    )  # fmt: skip
    scorer = PolicyScorer(env, agent=agent)
    algo = MAPElites(emitter, scorer, scorer.qd_offset, lineage=True, axis_name=axis)
    return algo, emitter, agent


@dataclasses.dataclass
class MEPBTResult:
    state: Any
    progress: dict[str, np.ndarray]
    hparams: dict[str, np.ndarray]  # name -> (iterations + 1, pg_population_size)
    folder: str | None


def run_me_pbt(
    config: MEPBTConfig,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
    plots: bool = True,
) -> MEPBTResult:
    """ME-PBT for ``config.iterations`` iterations. Writes ``config.toml``, ``progress.csv``
    (per iteration: evaluations and QD metrics), ``hparams.csv`` (the PBT agents'
    hyperparameters after each iteration), ``repertoire.eqx`` (agent states without optimiser
    states), ``centroids.npy`` and the plots ``repertoire.png``, ``progress.png``,
    ``hparams.png``."""
    from tqdm.auto import tqdm

    algo, emitter, agent = make_me_pbt(config)
    env = emitter.env
    key = jr.key(config.seed)
    cvt_key, pop_key, init_key, run_key = jr.split(key, 4)
    low, high = env.descriptor_bounds
    cells = CVTTessellation.from_kmeans(
        config.cells, env.descriptor_size, low, high, num_samples=config.cvt_samples, key=cvt_key
    )
    if config.devices > 1:
        mesh = device_mesh(config.devices)
        genotypes = emitter.initial_genotypes(config.devices * emitter.batch_size, key=pop_key)
        state, metrics = init_sharded(algo, genotypes, cells, key=init_key, mesh=mesh)

        def step(s, k):
            s, history = run_sharded(algo, s, 1, key=k, mesh=mesh)
            return s, jax.tree.map(lambda x: x[0, 0], history)  # identical on every device

    else:
        genotypes = emitter.initial_genotypes(emitter.batch_size, key=pop_key)
        state, metrics = eqx.filter_jit(algo.init)(genotypes, cells, key=init_key)
        step = eqx.filter_jit(lambda s, k: algo.update(s, key=k))
    rows: dict[str, list[float]] = {"iteration": [], "evaluations": []}
    hp_rows: list[dict[str, np.ndarray]] = []

    def log(iteration, metrics, state):
        rows["iteration"].append(iteration)
        rows["evaluations"].append(int(state.evaluations))
        for k, v in metrics.as_dict().items():
            rows.setdefault(k, []).append(float(v))
        table = hparams_table(state.emitter_state.population)  # (devices,) + (pg,) when sharded
        hp_rows.append({n: np.asarray(v).reshape(-1) for n, v in table.items()})

    log(0, metrics, state)
    bar = tqdm(total=config.iterations, disable=not progress, desc="me-pbt", unit="it")
    for i, k in enumerate(jr.split(run_key, config.iterations)):
        state, metrics = step(state, k)
        log(i + 1, metrics, state)
        bar.set_postfix(qd=f"{rows['qd_score'][-1]:.4g}", max=f"{rows['max_fitness'][-1]:.4g}")
        bar.update(1)
    bar.close()
    prog = {k: np.asarray(v) for k, v in rows.items()}
    hparams = {n: np.stack([h[n] for h in hp_rows]) for n in hp_rows[0]}
    folder = None if out_dir is None else os.fspath(out_dir)
    if folder is not None:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.toml"), "w") as f:
            f.write(config.to_toml())
        _write_progress(os.path.join(folder, "progress.csv"), prog)
        names = sorted(hparams)
        with open(os.path.join(folder, "hparams.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["iteration", "member", *names])
            for it in range(len(hp_rows)):
                for m in range(config.devices * config.pg_population_size):
                    w.writerow([it, m, *[float(hparams[n][it, m]) for n in names]])
        save_repertoire(os.path.join(folder, "repertoire.eqx"), state.repertoire)
        np.save(os.path.join(folder, "centroids.npy"), np.asarray(cells.centroids))
        if plots:
            _write_plots(folder, state.repertoire, prog, hparams)
    return MEPBTResult(state, prog, hparams, folder)


def _write_plots(folder, repertoire, prog, hparams) -> None:
    from ..plotting import plot_metrics, save_figure, save_repertoire_plot

    save_repertoire_plot(folder, repertoire)  # skipped beyond 2 descriptors (ant_uni: 4)
    save_figure(folder, "progress.png", plot_metrics(prog))
    save_figure(folder, "hparams.png", plot_hparams(hparams))


def load_me_pbt_run(folder: str | os.PathLike):
    """``(config, repertoire)`` of a run folder; the genotypes are agent states (no optimiser
    states) that ``PolicyScorer(env, agent=agent)`` or ``agent.act`` can play."""
    folder = os.fspath(folder)
    config = MEPBTConfig.from_toml(os.path.join(folder, "config.toml"))
    _, emitter, _ = make_me_pbt(config)
    tess = CVTTessellation.load(os.path.join(folder, "centroids.npy"))
    genotype = tree_take(emitter.initial_genotypes(1, key=jr.key(0)), 0)
    like = MapElitesRepertoire.empty(tess, genotype, jnp.zeros((), jnp.int32))
    return config, load_repertoire(os.path.join(folder, "repertoire.eqx"), like)
