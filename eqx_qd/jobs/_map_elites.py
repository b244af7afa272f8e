"""The MAP-Elites job (`eqx-qd run map-elites`): a registered pure-JAX task, a grid or CVT
repertoire, a registered emitter, logged every `log_every` iterations."""

import dataclasses
import os
import typing
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Key

from .._compile import jit
from .._custom_types import PRNGKey
from .._emitters.extraction import Extraction
from .._map_elites import MAPElites, MAPElitesState
from .._metrics import METRIC_NAMES, QDMetrics
from .._misc import filter_scan
from .._mome import MOME, MOMEState
from .._sampling import CorrectedMetrics, Sampled
from .._sharded import init_sharded, scan_sharded
from .._tasks import AbstractTask
from .._tessellation import AbstractTessellation, CVTTessellation, GridTessellation
from .._validate import positive_int
from ._blocks import CellOptions, EmitterOptions, NoiseOptions, RepertoireOptions, RunOptions
from ._config import JobConfig, option
from ._distributed import job_mesh, to_host
from ._folder import RunFolder
from ._job import PROGRESS_FILE, register_job, RunResult
from ._loop import Chunk, LoopJob
from ._qd_outputs import (
    as_written,
    CORRECTED_NAMES,
    corrector,
    qd_summary,
    read_qd_run,
    read_repertoire,
    write_qd_outputs,
)
from ._registry import EMITTERS, make_emitter, make_task, TASKS
from ._resume import RunClock


@dataclasses.dataclass(frozen=True)
class MAPElitesConfig(EmitterOptions, CellOptions, RepertoireOptions, NoiseOptions, RunOptions):
    """Settings of the MAP-Elites job (`jobs.run`, `eqx-qd run map-elites`)."""

    JOB: ClassVar[str] = "map-elites"

    task: str = option("rastrigin", "pure-JAX task", check=TASKS.check())
    genotype_dim: int | None = option(
        None, "genes per genotype (default: the task's own)", check=positive_int
    )
    batch_size: int = option(
        1024, "candidates per iteration", check=positive_int, aliases=("--batch",)
    )
    iterations: int = option(1000, "iterations", check=positive_int, aliases=("--iters",))
    log_every: int = option(10, "iterations per logged row (one jitted call)", check=positive_int)
    devices: int = option(
        1,
        "devices to shard over, batch_size candidates each (on a CPU, host devices are made)",
        check=positive_int,
    )
    checkpoint_every: int = option(
        100, "iterations between checkpoints (and one at the end)", check=positive_int
    )


def _sphere_protocol(emitter: str, **more: Any) -> dict[str, Any]:
    """pyribs' `examples/sphere.py` protocol: the 100-D projected sphere, a 100 x 100 grid,
    15 emitters x 36 candidates (the gradient-operator emitters: 270 points and their 270
    steps), 10,000 iterations."""
    return dict(
        task="projected_sphere",
        genotype_dim=100,
        grid=True,
        cells=100,
        batch_size=540,
        iterations=10_000,
        log_every=50,
        checkpoint_every=1000,
        emitter=emitter,
        num_emitters=15,
        **more,
    )


def _projected_10d(emitter: str, **more: Any) -> dict[str, Any]:
    """The DMS paper's 10-D linear-projection protocol: `_sphere_protocol` on
    `projected_sphere_10d` over a CVT of 10,000 cells, CMA restarts after 100 iterations
    without a new cell (its DDS: basic restarts)."""
    protocol = _sphere_protocol(emitter, restart_rule="100")
    protocol.update(
        task="projected_sphere_10d", grid=False, cells=10_000, cvt_samples=100_000, **more
    )
    return protocol


MAPElitesConfig.PRESETS = {
    "cma-me": _sphere_protocol("cma_me"),
    "cma-mae": _sphere_protocol("cma_mae", archive_learning_rate=0.01, threshold_min=0.0),
    "cma-mega": _sphere_protocol("cma_mega"),
    "cma-maega": _sphere_protocol("cma_maega", archive_learning_rate=0.01, threshold_min=0.0),
    # pyribs' example steps along the gradient of the sphere's raw objective, -2 (x - 2.048),
    # which is worst / 100 = 51.38 times the gradient of the fitness it reports (ours, by
    # autodiff): its sigma_g 0.5 is ours 25.69.
    "og-map-elites": _sphere_protocol("og_map_elites", gradient_sigma=0.5 * 7.168**2),
    "omg-mega": _sphere_protocol("omg_mega"),
    # Discount Model Search and Density Descent Search as pyribs' sphere example runs them.
    "dms": _sphere_protocol(
        "cma_mae",
        repertoire="discount",
        archive_learning_rate=0.1,
        threshold_min=0.0,
        discount_low=0.0,
        discount_high=100.0,
    ),
    "dds": _sphere_protocol("dds", repertoire="density", bandwidth=25.6),
    # The 10-D linear-projection task of the DMS paper: 10,000 CVT cells (k-means over
    # 100,000 uniform points), restarts after 100 iterations without a new cell.
    "cma-mae-10d": _projected_10d("cma_mae", archive_learning_rate=0.01, threshold_min=0.0),
    "dms-10d": _projected_10d(
        "cma_mae",
        repertoire="discount",
        archive_learning_rate=0.1,
        threshold_min=0.0,
        discount_low=0.0,
        discount_high=100.0,
    ),
    "dds-10d": _projected_10d("dds", repertoire="density", bandwidth=5.12, restart_rule="basic"),
}
MAPElitesConfig.RENAMED = {"log_period": "log_every"}  # an older folder's key


def build_tessellation(config: JobConfig, task: Any, *, key: jnp.ndarray) -> AbstractTessellation:
    """The grid or CVT of `config` (its `CellOptions`) over the descriptor bounds of `task`
    (an `AbstractTask`, or anything with its `num_descriptors` and scalar
    `descriptor_bounds`: the `mome` job's policy tasks)."""
    lo, hi = task.descriptor_bounds
    if config.uses_grid:
        return GridTessellation((config.cells,) * task.num_descriptors, lo, hi)
    if config.centroids is not None:
        if not os.path.isfile(config.centroids):
            raise ValueError(f"centroids file {config.centroids!r} does not exist")
        try:
            tess = CVTTessellation.load(config.centroids)
        except (ValueError, TypeError) as e:
            raise ValueError(f"centroids: {e}") from e
        if tess.num_descriptors != task.num_descriptors:
            raise ValueError(
                f"centroids in {config.centroids!r} have {tess.num_descriptors} dimensions, "
                f"task {config.task!r} has {task.num_descriptors}"
            )
        return tess
    return CVTTessellation.from_kmeans(
        config.cells, task.num_descriptors, lo, hi, num_samples=config.cvt_samples, key=key
    )


def build_map_elites(
    config: JobConfig, task: AbstractTask | None = None
) -> tuple[MAPElites, AbstractTask]:
    """The algorithm (the task is its scoring function) and the task: `task`, or the
    config's registered one, `Sampled` with `samples` above 1 (`NoiseOptions`)."""
    if task is None:
        task = config_task(config)
    samples = getattr(config, "samples", 1)
    if samples > 1:
        task = Sampled(task, samples, config.estimator, config.estimator)
    entry = EMITTERS.get(config.emitter)
    params = {
        k: getattr(config, k)
        for k in entry.options()
        if k not in ("batch_size", "task") and getattr(config, k, None) is not None
    }
    if "task" in entry.options():
        # The CMA emitters start at the task's genotype; CMA-MEGA differentiates the task.
        params["task"] = task
    batch_size, extracted = config.batch_size, 0
    if getattr(config, "repertoire", None) == "extract":  # Extract-ME: the batch shared
        extracted = extracted_per_batch(config.batch_size, config.extraction)
        batch_size -= extracted
    emitter = make_emitter(config.emitter, batch_size=batch_size, **params)
    if extracted:
        emitter = Extraction(emitter, extracted)
    axis = "p" if getattr(config, "devices", 1) > 1 else None
    annealing = {}
    # A discount archive takes the learning rate and threshold_min itself (repertoire_for).
    if config.anneals and not getattr(config, "guided", False):
        annealing = dict(
            archive_learning_rate=config.archive_learning_rate,
            threshold_min=config.threshold_min,
        )
    return MAPElites(emitter, task, task.qd_offset, axis_name=axis, **annealing), task


def config_task(config: JobConfig) -> AbstractTask:
    """The registered task a config names, with its `genotype_dim` when it gives one (else
    the task's own size: 100 for rastrigin, 8 for the arm, 1 for the spiral...)."""
    size = config.genotype_dim
    return make_task(config.task, **({} if size is None else {"genotype_dim": size}))


def extracted_per_batch(batch_size: int, extraction: float) -> int:
    """How many of a batch of `batch_size` re-score elites under Extract-ME: the `extraction`
    share, rounded, at least one and leaving at least one offspring."""
    if batch_size < 2:
        raise ValueError(
            f"repertoire 'extract' shares the batch between offspring and re-scored elites: "
            f"batch_size must be at least 2, got {batch_size}"
        )
    return min(max(round(extraction * batch_size), 1), batch_size - 1)


def read_cells_run(
    folder: RunFolder,
    config: JobConfig,
    num_descriptors: int,
    bounds: tuple[float, float],
    genotype_dim: int,
) -> RunResult:
    """The `RunResult` of a MAP-Elites-like folder (`config` with `CellOptions`): its
    repertoire of genotypes of `genotype_dim` genes read over the grid the config names
    (`num_descriptors` bins of `cells` within `bounds`), or over the CVT centroids the folder
    stores."""
    tess = folder_cells(folder, config, num_descriptors, bounds)
    genotype = lambda: jnp.zeros((genotype_dim,), jnp.float32)
    repertoire = read_repertoire(folder, genotype, tessellation=tess)
    return read_qd_run(folder, config, repertoire)


def folder_cells(
    folder: RunFolder, config: JobConfig, num_descriptors: int, bounds: tuple[float, float]
) -> AbstractTessellation:
    """The cells a QD run folder was written over: the grid its `config` names
    (`num_descriptors` bins of `cells` within `bounds`), or the CVT of its `centroids.npy`."""
    if config.uses_grid:
        return GridTessellation((config.cells,) * num_descriptors, *bounds)
    return CVTTessellation(folder.read_npy("centroids.npy"))


def _row(
    iteration: int,
    config: MAPElitesConfig,
    wall: float,
    metrics: QDMetrics,
    corrected: CorrectedMetrics | None = None,
) -> dict[str, float | int]:
    """A progress row: `metrics` holds scalars, or a history whose last entry is logged;
    `corrected`, the reevaluated figures of the same repertoire (`reevaluations`)."""
    evaluations = config.batch_size * config.devices * config.samples * (iteration + 1)
    row = {"iteration": iteration, "evaluations": evaluations, "wall_s": wall}
    for k, v in metrics.as_dict().items():
        row[k] = np.ravel(np.asarray(v))[-1].item()
    if corrected is not None:
        for k in CORRECTED_NAMES:
            row[k] = np.asarray(getattr(corrected, k.removeprefix("corrected_"))).item()
    return row


def iteration_keys(config: JobConfig, *, key: PRNGKey) -> Key[Array, " iterations"]:
    """The key of every iteration, `(iterations,)`: chunk `c` of `log_every` iterations
    splits `split(key, chunks)[c]`, as `run` splits its key. Splits keep their prefix as the
    count grows, so a longer run's first iterations get the same keys (a run extended on
    resume equals the uninterrupted longer run)."""
    period = config.log_every
    chunks = -(-config.iterations // period)
    per_chunk = jax.vmap(lambda k: jr.split(k, period))(jr.split(key, chunks))
    return per_chunk.reshape(-1)[: config.iterations]


@jit(donate="all-except-first")  # the old state's buffers are reused
def _run_keys(algo: MAPElites | MOME, state: MAPElitesState | MOMEState, keys: Key[Array, " n"]):
    return filter_scan(lambda s, k: algo.update(s, key=k), state, keys)


def loop_runners(
    algo: MAPElites | MOME, genotypes, repertoire, *, key: PRNGKey, result, devices: int
) -> tuple[Callable[[], Any], Callable[[Any, Key[Array, " n"]], Any], Any]:
    """`(init, chunk, mesh)` of a QD loop job: `init()` the algorithm's `init` of `genotypes`
    over `repertoire` (with its passive `result`), `chunk(state, keys)` the iterations of
    `keys` in one jitted scan returning the state and the metrics history; over `devices`
    devices (a mesh: `init_sharded` and `scan_sharded`, the history's first device row) or
    on one (`mesh` `None`)."""
    mesh = job_mesh(devices)
    if mesh is None:
        init = lambda: jit(algo.init)(genotypes, repertoire, key=key, result=result)
        chunk = lambda state, keys: _run_keys(algo, state, keys)
        return init, chunk, None
    init = lambda: init_sharded(algo, genotypes, repertoire, key=key, mesh=mesh, result=result)

    def chunk(state, keys):
        state, history = scan_sharded(algo, state, mesh=mesh, keys=keys)
        return state, jax.tree.map(lambda x: x[0], to_host(history))  # equal everywhere

    return init, chunk, mesh


class _MAPElitesPlan(typing.NamedTuple):
    config: MAPElitesConfig
    init: Callable[[], tuple[MAPElitesState, QDMetrics]]
    chunk: Callable[[MAPElitesState, Key[Array, " n"]], tuple[MAPElitesState, QDMetrics]]
    keys: Key[Array, " iterations"]
    mesh: Any
    corrected: Callable[[MAPElitesState, int], CorrectedMetrics] | None


_HEADER = ["iteration", "evaluations", "wall_s", *METRIC_NAMES]


def _header(config: MAPElitesConfig) -> list[str]:
    return _HEADER + list(CORRECTED_NAMES) * (config.reevaluations > 0)


def _corrector(
    config: MAPElitesConfig, task: AbstractTask, *, key: PRNGKey
) -> Callable[[MAPElitesState, int], CorrectedMetrics] | None:
    """`(state, iteration) -> CorrectedMetrics` of the state's elites, reevaluated
    `reevaluations` times by the task without sampling, with a key of the iteration; `None`
    without reevaluations."""
    if config.reevaluations == 0:
        return None
    inner = task.task if isinstance(task, Sampled) else task
    return corrector(inner, config.reevaluations, inner.qd_offset, key=key)


class _MAPElitesJob(LoopJob[_MAPElitesPlan, MAPElitesState]):
    """Run MAP-Elites as `config` says; with `out_dir`, write the run folder.

    The loop runs `log_every` iterations per jitted call (one compile), appending a row of
    metrics to `progress.csv` after each; the whole state is checkpointed every
    `checkpoint_every` iterations and at the end (`checkpoints/`; `resume` continues from
    the newest). The folder holds `config.toml`, `progress.csv` (iteration, evaluations,
    `wall_s`: seconds spent running, over resumes, and the `QDMetrics` columns),
    `repertoire.eqx`, `centroids.npy` and, with `plots`, `repertoire.png` and
    `progress.png`.
    """

    name = "map-elites"
    config_cls = MAPElitesConfig
    help = "MAP-Elites on a pure-JAX task (default: rastrigin, 100-D, CVT 1024 cells)"
    resume_may_change = ("iterations",)
    multi_process = True

    def plan(self, config: MAPElitesConfig) -> _MAPElitesPlan:
        tess_key, init_key, pop_key, run_key = jr.split(jr.key(config.seed), 4)
        algo, task = build_map_elites(config)
        tessellation = build_tessellation(config, task, key=tess_key)
        largest = config.batch_size * config.devices
        num_descriptors = task.num_descriptors
        repertoire = config.repertoire_for(
            tessellation, num_descriptors, largest_batch=largest, key=jr.fold_in(init_key, 1)
        )
        result = config.result_for(tessellation)
        genotypes = task.init_genotypes(config.batch_size * config.devices, key=pop_key)
        init, chunk, mesh = loop_runners(
            algo, genotypes, repertoire, key=init_key, result=result, devices=config.devices
        )
        corrected = _corrector(config, task, key=jr.fold_in(init_key, 2))
        keys = iteration_keys(config, key=run_key)
        return _MAPElitesPlan(config, init, chunk, keys, mesh, corrected)

    def headers(self, plan: _MAPElitesPlan) -> dict[str, list[str]]:
        return {PROGRESS_FILE: _header(plan.config)}

    def like(self, plan: _MAPElitesPlan) -> MAPElitesState:
        return eqx.filter_eval_shape(plan.init)[0]

    def total(self, config: MAPElitesConfig) -> int:
        return config.iterations

    def start(self, plan: _MAPElitesPlan, clock: RunClock) -> Chunk:
        state, metrics = plan.init()
        corrected = None if plan.corrected is None else plan.corrected(state, 0)
        row = _row(0, plan.config, clock(), to_host(metrics), corrected)
        return Chunk(state, 0, {PROGRESS_FILE: [list(row.values())]})

    def resumed_state(self, plan: _MAPElitesPlan, resumed) -> MAPElitesState:
        return resumed.state_on(plan.mesh)

    def advance(self, plan: _MAPElitesPlan, state, step: int, clock: RunClock) -> Chunk:
        config = plan.config
        # Chunks end on multiples of log_every, wherever the run (re)started.
        n = min(config.log_every - step % config.log_every, config.iterations - step)
        state, history = plan.chunk(state, plan.keys[step : step + n])
        corrected = None if plan.corrected is None else plan.corrected(state, step + n)
        row = _row(step + n, config, clock(), history, corrected)
        return Chunk(state, step + n, {PROGRESS_FILE: [list(row.values())]})

    def finish(self, plan: _MAPElitesPlan, folder, state, logs, plots: bool) -> RunResult:
        rows = logs[PROGRESS_FILE]
        header = _header(plan.config)
        columns = {k: np.asarray([r[j] for r in rows]) for j, k in enumerate(header)}
        repertoire = to_host(state.elites)  # every process, in step (CMA-MAE: its result)
        repertoire = as_written(repertoire)  # ME-LS, Extract-ME: the elites, their cells
        if folder is not None:
            write_qd_outputs(folder, repertoire, columns, plots=plots)
        return RunResult(
            plan.config, None if folder is None else folder.path, columns, state, repertoire
        )

    def load(self, folder: RunFolder, config) -> RunResult:
        task = config_task(config)
        return read_cells_run(
            folder, config, task.num_descriptors, task.descriptor_bounds, task.genotype_dim
        )

    def summary(self, result: RunResult) -> str:
        return qd_summary(result)


register_job(_MAPElitesJob())
