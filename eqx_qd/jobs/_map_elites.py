"""The MAP-Elites main job: a validated config, a logged run, and its run folder."""

import csv
import dataclasses
import datetime
import os
from collections.abc import Callable, Mapping
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._emitters.mixing import MixingEmitter
from .._io import load_repertoire, save_repertoire
from .._map_elites import MAPElites, MAPElitesState, run
from .._metrics import METRIC_NAMES, QDMetrics
from .._repertoire import MapElitesRepertoire
from .._tasks import make_task, TASKS
from .._tessellation import AbstractTessellation, CVTTessellation, GridTessellation
from .._variation import IsoLineVariation
from ._config import TomlConfig


@dataclasses.dataclass(frozen=True)
class MapElitesConfig(TomlConfig):
    """Settings of `run_map_elites` (and of ``eqx-qd run map-elites``).

    ``cells`` is the number of CVT cells, or with ``grid`` the number of bins per descriptor.
    ``centroids`` names a ``.npy`` file of CVT centroids to use instead of k-means.
    """

    TABLE: ClassVar[str] = "map-elites"

    task: str = "rastrigin"
    genotype_dim: int = 100
    cells: int = 1024
    grid: bool = False
    centroids: str | None = None
    cvt_samples: int = 50_000
    batch_size: int = 1024
    iterations: int = 1000
    log_period: int = 10
    iso_sigma: float = 0.005
    line_sigma: float = 0.05
    seed: int = 0

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; choose one of {sorted(TASKS)}")
        for name in ("genotype_dim", "cells", "cvt_samples", "batch_size", "iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.log_period < 1:
            raise ValueError(f"log_period must be a positive integer, got {self.log_period}")
        if self.iso_sigma < 0 or self.line_sigma < 0:
            raise ValueError("iso_sigma and line_sigma must be non-negative")
        if not self.grid and self.centroids is None and self.cvt_samples < self.cells:
            raise ValueError(f"cvt_samples ({self.cvt_samples}) must be at least cells")


def _grid(config: MapElitesConfig) -> GridTessellation:
    task = make_task(config.task, config.genotype_dim)
    lo, hi = task.descriptor_bounds
    return GridTessellation((config.cells,) * task.num_descriptors, lo, hi)


def make_tessellation(config: MapElitesConfig, *, key: jax.Array) -> AbstractTessellation:
    if config.grid:
        return _grid(config)
    task = make_task(config.task, config.genotype_dim)
    lo, hi = task.descriptor_bounds
    if config.centroids is not None:
        tess = CVTTessellation.load(config.centroids)
        if tess.num_descriptors != task.num_descriptors:
            raise ValueError(
                f"centroids in {config.centroids!r} have {tess.num_descriptors} dimensions, "
                f"task {config.task!r} has {task.num_descriptors}"
            )
        return tess
    return CVTTessellation.from_kmeans(
        config.cells, task.num_descriptors, lo, hi, num_samples=config.cvt_samples, key=key
    )


def make_map_elites(config: MapElitesConfig) -> MAPElites:
    task = make_task(config.task, config.genotype_dim)
    emitter = MixingEmitter(
        batch_size=config.batch_size,
        variation_percentage=1.0,
        variation=IsoLineVariation(config.iso_sigma, config.line_sigma),
    )
    return MAPElites(emitter, task, task.qd_offset)


@dataclasses.dataclass
class RunResult:
    state: MAPElitesState
    history: dict[str, np.ndarray]
    folder: str | None


def run_map_elites(
    config: MapElitesConfig,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
    plots: bool = True,
    on_log: Callable[[dict[str, float]], None] | None = None,
) -> RunResult:
    """Run MAP-Elites as ``config`` says; with ``out_dir``, write the run folder.

    The loop runs ``log_period`` iterations per jitted call (one compile), logging the metrics
    after each call. The run folder holds ``config.toml``, ``progress.csv``, ``repertoire.eqx``,
    ``centroids.npy`` and, with ``plots``, ``repertoire.png`` and ``progress.png``.
    """
    from tqdm.auto import tqdm

    folder = None
    if out_dir is not None:
        folder = os.fspath(out_dir)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.toml"), "w") as f:
            f.write(config.to_toml())
    key = jr.key(config.seed)
    tess_key, init_key, pop_key, run_key = jr.split(key, 4)
    tessellation = make_tessellation(config, key=tess_key)
    algo = make_map_elites(config)
    genotypes = algo.scoring_fn.init_genotypes(config.batch_size, key=pop_key)
    state, metrics = eqx.filter_jit(algo.init)(genotypes, tessellation, key=init_key)

    history: dict[str, list[float]] = {k: [] for k in ("iteration", "evaluations", *METRIC_NAMES)}

    def log(iteration: int, metrics: QDMetrics) -> None:
        """Append one row: ``metrics`` holds scalars, or a history whose last entry is logged."""
        history["iteration"].append(iteration)
        history["evaluations"].append(config.batch_size * (iteration + 1))
        for k, v in metrics.as_dict().items():
            history[k].append(np.ravel(np.asarray(v))[-1].item())
        if on_log is not None:
            on_log({k: float(v[-1]) for k, v in history.items()})

    log(0, metrics)
    bar = tqdm(total=config.iterations, disable=not progress, desc="map-elites", unit="it")
    done = 0
    chunk_keys = jr.split(run_key, -(-config.iterations // config.log_period))
    for chunk_key in chunk_keys:
        n = min(config.log_period, config.iterations - done)
        state, chunk = run(algo, state, n, key=chunk_key)
        done += n
        log(done, chunk)
        bar.set_postfix(
            qd=f"{history['qd_score'][-1]:.4g}", max=f"{history['max_fitness'][-1]:.4g}"
        )
        bar.update(n)
    bar.close()
    hist = {k: np.asarray(v) for k, v in history.items()}
    if folder is not None:
        _write_progress(os.path.join(folder, "progress.csv"), hist)
        save_repertoire(os.path.join(folder, "repertoire.eqx"), state.repertoire)
        np.save(os.path.join(folder, "centroids.npy"), np.asarray(tessellation.centroids))
        if plots:
            _write_plots(folder, state.repertoire, hist)
    return RunResult(state, hist, folder)


def _write_progress(path: str, history: Mapping[str, np.ndarray]) -> None:
    keys = list(history)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(keys)
        for i in range(len(history[keys[0]])):
            writer.writerow([history[k][i].item() for k in keys])


def _write_plots(folder: str, repertoire: MapElitesRepertoire, history: Mapping) -> None:
    from ..plotting import plot_metrics, save_figure, save_repertoire_plot

    save_repertoire_plot(folder, repertoire)
    save_figure(folder, "progress.png", plot_metrics(history))


def read_progress(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Columns of a ``progress.csv`` as float arrays."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {k: np.asarray([float(r[k]) for r in rows]) for k in rows[0]} if rows else {}


def load_map_elites_run(
    folder: str | os.PathLike,
) -> tuple[MapElitesConfig, MapElitesRepertoire, dict[str, np.ndarray]]:
    """Config, final repertoire and progress of a run folder written by `run_map_elites`."""
    folder = os.fspath(folder)
    config = MapElitesConfig.from_toml(os.path.join(folder, "config.toml"))
    if config.grid:
        tess: AbstractTessellation = _grid(config)
    else:
        tess = CVTTessellation.load(os.path.join(folder, "centroids.npy"))
    like = MapElitesRepertoire.empty(tess, jnp.zeros((config.genotype_dim,), jnp.float32))
    repertoire = load_repertoire(os.path.join(folder, "repertoire.eqx"), like)
    return config, repertoire, read_progress(os.path.join(folder, "progress.csv"))


def default_run_folder(kind: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{kind}-{stamp}")
