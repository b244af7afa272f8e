"""The ME-PBT job (`eqx-qd run me-pbt`): MAP-Elites with the PBT emitter, on one device or
sharded over several, with the PBT agents' hyperparameter trajectories."""

import dataclasses
import typing
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.random as jr
import numpy as np

from .._compile import jit
from .._custom_types import PRNGKey
from .._map_elites import MAPElites
from .._metrics import METRIC_NAMES
from .._misc import tree_take
from .._qdrl.me_pbt import BANDS, PBTEmitter, PBTEmitterConfig
from .._qdrl.scoring import PolicyScorer
from .._sampling import CorrectedMetrics
from .._sharded import init_sharded, scan_sharded
from .._tessellation import CVTTessellation
from .._validate import fraction, non_negative, non_negative_int, positive_int
from .._variation import IsoLineVariation
from ..rl._pbt import hparams_table
from ._agent_options import build_agent, training_env
from ._blocks import _one_of, AgentOptions, RepertoireOptions, RunOptions, search_spaces
from ._config import option
from ._distributed import job_mesh, to_host
from ._folder import RunFolder
from ._job import PROGRESS_FILE, register_job, RunResult
from ._loop import Chunk, LoopJob
from ._qd_outputs import (
    CORRECTED_NAMES,
    corrected_row,
    corrector,
    hparams_columns,
    qd_summary,
    read_qd_run,
    read_repertoire,
    repertoire_axes,
    write_qd_outputs,
)
from ._registry import make_env
from ._resume import RunClock


def _in_unit_interval(key: str, value: Any) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{key} must lie in (0, 1], got {value}")


@dataclasses.dataclass(frozen=True)
class MEPBTConfig(RepertoireOptions, AgentOptions, RunOptions):
    """Settings of the ME-PBT job (`jobs.run`, `eqx-qd run me-pbt`). The defaults (10
    PBT-TD3 agents + 10 GA children on the walled point maze, 128 cells) run in about a minute
    on a laptop CPU; `agent` takes any registered agent (`td3`, `sac`, `ppo` or yours).
    Fractions as in QDax's `PBTEmitterConfig`: with `devices > 1` the population sizes are
    per device and the counts from fractions are over all devices. `MEPBTConfig.preset("paper")`
    (`--preset paper`) is the paper's setting, `PAPER_PRESET`."""

    JOB: ClassVar[str] = "me-pbt"

    iterations: int = option(40, "MAP-Elites iterations", check=positive_int, aliases=("--iters",))
    corrected_reevaluations: int = option(
        0,
        "at each row, score every elite this many times again and log the corrected QD-score, "
        "coverage, max fitness and reproducibility (0: not)",
        check=non_negative_int,
    )
    pg_population_size: int = option(10, "PBT agents (per device)", check=positive_int)
    ga_population_size: int = option(
        10, "GA children per iteration (per device)", check=non_negative_int
    )
    num_training_iterations: int = option(
        25,
        "training iterations per generation (off-policy: one step of every environment; ppo: "
        "one rollout and its epochs)",
        check=positive_int,
    )
    fraction_best_to_replace_from: float = option(
        0.1, "fraction of agents copied from", check=fraction
    )
    fraction_to_replace_from_best: float = option(
        0.2, "fraction of agents replaced by the best", check=fraction
    )
    fraction_to_replace_from_samples: float = option(
        0.4, "fraction replaced by repertoire samples", check=fraction
    )
    fraction_sort_exchange: float = option(
        0.1,
        "share of each device's agents one step of the best-set exchange gathers (QDax's; "
        "memory only: the best set does not depend on it)",
        check=_in_unit_interval,
    )
    bands: str = option(
        "disjoint",
        "who is replaced: disjoint rank bands of exactly those counts, or qdax (QDax's "
        "thresholds: ties replace more, one agent in both bands)",
        check=_one_of(*BANDS),
    )
    iso_sigma: float = option(0.005, "iso+line-DD isotropic noise", check=non_negative)
    line_sigma: float = option(0.05, "iso+line-DD line noise", check=non_negative)
    cells: int = option(128, "CVT cells", check=positive_int)
    cvt_samples: int = option(50_000, "uniform samples for CVT k-means", check=positive_int)
    devices: int = option(
        1, "devices to shard over (on a CPU, host devices are made)", check=positive_int
    )
    checkpoint_every: int = option(
        10, "iterations between checkpoints (and one at the end)", check=positive_int
    )

    def check(self) -> None:
        super().check()  # the agent and repertoire options
        if self.repertoire == "grid":
            raise ValueError(
                "repertoire: ME-PBT's cells are a CVT; choose cvt, dns or unstructured"
            )
        if self.cvt_samples < self.cells:
            raise ValueError(f"cvt_samples ({self.cvt_samples}) must be at least cells")
        self.emitter_config()  # validates sizes and fractions, naming the one that is wrong

    def emitter_config(self) -> PBTEmitterConfig:
        """The `PBTEmitterConfig` of this config's sizes and fractions."""
        return PBTEmitterConfig(
            pg_population_size=self.pg_population_size,
            ga_population_size=self.ga_population_size,
            num_training_iterations=self.num_training_iterations,
            fraction_best_to_replace_from=self.fraction_best_to_replace_from,
            fraction_to_replace_from_best=self.fraction_to_replace_from_best,
            fraction_to_replace_from_samples=self.fraction_to_replace_from_samples,
            num_devices=self.devices,
            fraction_sort_exchange=self.fraction_sort_exchange,
            bands=self.bands,
        )


PAPER_PRESET: dict[str, object] = dict(
    env="anttrap",
    episode_length=1000,
    cells=1024,
    hidden=(256, 256),
    num_envs=250,
    num_training_iterations=20,
    grad_updates_per_step=1.0,
    buffer_size=100_000,
    minibatch_size=256,
    pg_population_size=10,
    ga_population_size=10,
    iterations=450,
)
"""The ME-PBT paper's setting as QDax's `me_td3_pbt` example runs it: the ant trap,
1000-step episodes, 1024 CVT cells, (256, 256) networks, per device 10 PBT-TD3 agents
(each training 20 x 250 environment steps per generation, one gradient step per environment
step, a 100k buffer) and 10 GA children, for 450 iterations: a GPU's run, not a laptop CPU's
(its time on an H100: `benchmarks/log/measurements-behind-the-code.md`)."""

MEPBTConfig.PRESETS = {"paper": PAPER_PRESET}


def build_me_pbt(config: MEPBTConfig) -> tuple[MAPElites, PBTEmitter]:
    """The algorithm and its emitter; with `devices > 1` both use the mesh axis `"p"`."""
    axis = "p" if config.devices > 1 else None
    env = make_env(config.env, episode_length=config.episode_length)
    agent = build_agent(config, env)
    emitter = PBTEmitter(
        agent,
        training_env(config, env),
        config.emitter_config(),
        search_spaces(config, agent),
        IsoLineVariation(config.iso_sigma, config.line_sigma),
        axis_name=axis,
    )
    scorer = PolicyScorer(env, agent=agent)
    return MAPElites(emitter, scorer, scorer.qd_offset, lineage=True, axis_name=axis), emitter


# Free jitted functions taking the algorithm as an argument, so that runs of equal configs in
# one process (a notebook's second run, a resume) reuse the compiled programs, where a lambda
# made per run compiled them again.
@jit
def _init(algo: MAPElites, genotypes: Any, repertoire: Any, result: Any, *, key: PRNGKey) -> Any:
    return algo.init(genotypes, repertoire, key=key, result=result)


@jit
def _step(algo: MAPElites, state: Any, *, key: PRNGKey) -> Any:
    return algo.update(state, key=key)


def _hparams_rows(iteration: int, table: dict[str, Any]) -> list[list[Any]]:
    """`hparams.csv`'s rows of one iteration: every agent's hyperparameters (all devices'
    agents, device-major)."""
    hparams = {n: np.asarray(v).reshape(1, -1) for n, v in table.items()}
    columns = hparams_columns("iteration", hparams, first=iteration)
    return [list(r) for r in zip(*[np.asarray(v).tolist() for v in columns.values()])]


def _hparams_header(names: Iterable[str]) -> list[str]:
    """`hparams.csv`'s header: the step, the agent, each hyperparameter by name."""
    return ["iteration", "member", *sorted(names)]


def _hparams_by_iteration(header: list[str], rows: list[list]) -> dict[str, np.ndarray]:
    """The hyperparameters back from `hparams.csv`'s rows, `(iterations, agents)` each."""
    names = header[2:]
    iterations = sorted({r[0] for r in rows})
    return {
        n: np.stack([np.asarray([r[j] for r in rows if r[0] == i]) for i in iterations])
        for j, n in enumerate(names, start=2)
    }


_PROGRESS_HEADER = [
    "iteration",
    "evaluations",
    "env_steps",
    "eval_env_steps",
    "train_env_steps",
    "wall_s",
    *METRIC_NAMES,
]


class _MEPBTPlan(typing.NamedTuple):
    config: "MEPBTConfig"
    emitter: PBTEmitter
    init: Callable[[], Any]
    step: Callable[[Any, Any], Any]
    keys: Any
    mesh: Any
    hparams_header: list[str]
    corrected: Callable[[Any, int], CorrectedMetrics] | None = None

    @property
    def progress_header(self) -> list[str]:
        return _PROGRESS_HEADER + list(CORRECTED_NAMES) * (self.corrected is not None)


class _MEPBTJob(LoopJob[_MEPBTPlan, Any]):
    """ME-PBT for `config.iterations` iterations.

    The folder holds `config.toml`, `progress.csv` (per iteration: evaluations, environment
    steps as QDax's notebooks count them (`eval_env_steps`: evaluations x episode length;
    `train_env_steps`; `env_steps`: both), `wall_s` (seconds spent running, over resumes)
    and the QD metrics), `hparams.csv` (the PBT
    agents' hyperparameters after each iteration), `repertoire.eqx` (agent states in storage
    form), `centroids.npy` and the plots `repertoire.png`, `progress.png`,
    `hparams.png` (the population's explored hyperparameters over environment steps: median,
    quartiles, range) and `repertoire_hparams.png` (the repertoire coloured by each explored
    hyperparameter of its elites).
    """

    name = "me-pbt"
    config_cls = MEPBTConfig
    logs = {PROGRESS_FILE: "iteration", "hparams.csv": "iteration"}
    multi_process = True
    resume_may_change = ("iterations",)
    elite_ids = "every elite's id is in jobs.load_run(FOLDER).repertoire.extra, by cell"
    help = "ME-PBT (default: 10 PBT-TD3 + 10 GA agents on the point maze, 40 iterations)"

    def plan(self, config: "MEPBTConfig") -> _MEPBTPlan:
        algo, emitter = build_me_pbt(config)
        mesh = job_mesh(config.devices)  # before the folder
        env = emitter.env
        cvt_key, pop_key, init_key, run_key = jr.split(jr.key(config.seed), 4)
        low, high = env.descriptor_bounds
        cells = CVTTessellation.from_kmeans(
            config.cells,
            env.descriptor_size,
            low,
            high,
            num_samples=config.cvt_samples,
            key=cvt_key,
        )
        largest = config.devices * emitter.batch_size
        repertoire = config.repertoire_for(cells, env.descriptor_size, largest_batch=largest)
        result = config.result_for(cells)
        if mesh is not None:
            genotypes = emitter.initial_genotypes(config.devices * emitter.batch_size, key=pop_key)
            init = lambda: init_sharded(
                algo, genotypes, repertoire, key=init_key, mesh=mesh, result=result
            )

            def step(s, k):
                s, history = scan_sharded(algo, s, mesh=mesh, keys=k[None])
                return s, jax.tree.map(lambda x: x[0, 0], to_host(history))  # equal everywhere

        else:
            genotypes = emitter.initial_genotypes(emitter.batch_size, key=pop_key)
            init = lambda: _init(algo, genotypes, repertoire, result, key=init_key)
            step = lambda s, k: _step(algo, s, key=k)
        keys = jr.split(run_key, config.iterations)  # a longer run's first keys are the same
        names = eqx.filter_eval_shape(lambda: emitter.agent.init(key=jr.key(0))).hparams.names()
        corrected = None
        if config.corrected_reevaluations > 0:  # keys of their own: the run's are unchanged
            corrected = corrector(
                algo.scoring_fn,
                config.corrected_reevaluations,
                algo.qd_offset,
                key=jr.fold_in(jr.key(config.seed), 0xC0),
            )
        header = _hparams_header(names)
        return _MEPBTPlan(config, emitter, init, step, keys, mesh, header, corrected)

    def headers(self, plan: _MEPBTPlan) -> dict[str, list[str]]:
        return {PROGRESS_FILE: plan.progress_header, "hparams.csv": plan.hparams_header}

    def like(self, plan: _MEPBTPlan) -> Any:
        return eqx.filter_eval_shape(plan.init)[0]

    def total(self, config: "MEPBTConfig") -> int:
        return config.iterations

    def _rows(self, plan: _MEPBTPlan, iteration: int, metrics, state, clock: RunClock):
        # What the rows need, gathered from every process's devices in a multi-process run.
        evaluations, trained, table, metrics = to_host(
            (
                state.evaluations,
                state.emitter_state.training_env_steps,
                hparams_table(state.emitter_state.population),  # (devices, pg) if sharded
                metrics,
            )
        )
        evaluations, trained = int(evaluations), int(np.sum(np.asarray(trained)))
        played = evaluations * plan.config.episode_length  # QDax's accounting: full episodes
        row = [iteration, evaluations, played + trained, played, trained, clock()]
        row += [float(v) for v in metrics.as_dict().values()]
        if plan.corrected is not None:
            row += corrected_row(plan.corrected(state, iteration))
        return {PROGRESS_FILE: [row], "hparams.csv": _hparams_rows(iteration, table)}

    def start(self, plan: _MEPBTPlan, clock: RunClock) -> Chunk:
        state, metrics = plan.init()
        return Chunk(state, 0, self._rows(plan, 0, metrics, state, clock))

    def resumed_state(self, plan: _MEPBTPlan, resumed) -> Any:
        return resumed.state_on(plan.mesh)

    def advance(self, plan: _MEPBTPlan, state, step: int, clock: RunClock) -> Chunk:
        state, metrics = plan.step(state, plan.keys[step])
        return Chunk(state, step + 1, self._rows(plan, step + 1, metrics, state, clock))

    def finish(self, plan: _MEPBTPlan, folder, state, logs, plots: bool) -> RunResult:
        env = plan.emitter.env
        rows = logs[PROGRESS_FILE]
        header = plan.progress_header
        columns = {k: np.asarray([r[j] for r in rows]) for j, k in enumerate(header)}
        header = plan.hparams_header
        table = {k: np.asarray([r[j] for r in logs["hparams.csv"]]) for j, k in enumerate(header)}
        repertoire = to_host(state.elites)  # every process, in step (without cells: the CVT)
        if folder is not None:
            # Against environment steps (training and evaluation), as QDax's ME-PBT notebook.
            write_qd_outputs(
                folder,
                repertoire,
                columns,
                plots=plots,
                x_key="env_steps",
                top_key="evaluations",
                env=env,
            )
            if plots:
                from ..plotting import plot_hparams_distribution, plot_repertoire_hparams

                hparams = _hparams_by_iteration(header, logs["hparams.csv"])
                figure = plot_hparams_distribution(hparams, x=columns["env_steps"])
                folder.write_figure("hparams.png", figure)
                if repertoire.tessellation.num_descriptors <= 2:
                    elites = repertoire.genotypes.hparams.as_dict()
                    explored = {n: elites[n] for n in sorted(plan.emitter.spaces)}
                    figure = plot_repertoire_hparams(repertoire, explored, **repertoire_axes(env))
                    folder.write_figure("repertoire_hparams.png", figure)
        return RunResult(
            plan.config,
            None if folder is None else folder.path,
            columns,
            state,
            repertoire,
            {"hparams": table},
        )

    def scorer(self, config) -> PolicyScorer:
        _, emitter = build_me_pbt(config)
        return PolicyScorer(emitter.env, agent=emitter.agent)

    def load(self, folder: RunFolder, config) -> RunResult:
        _, emitter = build_me_pbt(config)
        genotype = lambda: tree_take(emitter.initial_genotypes(1, key=jr.key(0)), 0)
        repertoire = read_repertoire(folder, genotype, with_ids=True)
        return read_qd_run(folder, config, repertoire, ("hparams",))

    def summary(self, result: RunResult) -> str:
        return qd_summary(result)


register_job(_MEPBTJob())
