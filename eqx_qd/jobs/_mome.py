"""The multi-objective job (`eqx-qd run mome`): MOME, NSGA-II or SPEA2 on a registered
multi-objective task, the MOQD metrics logged every `log_every` iterations."""

import dataclasses
import math
import typing
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Key

from .._emitters.mixing import MixingEmitter
from .._metrics import check_reference_point, MOQD_METRIC_NAMES, MOQDMetrics
from .._mome import MOME, MOMEState
from .._qdrl.mome_pgx import mome_pgx_emitter
from .._qdrl.scoring import PolicyScorer
from .._repertoire import NSGA2Repertoire, ParetoRepertoire, SPEA2Repertoire
from .._tasks import MultiObjectiveRastrigin, MultiObjectiveSphere
from .._validate import fraction, non_negative, non_negative_int, positive_int
from .._variation import IsoLineVariation, PolynomialMutation, UniformCrossover
from ..envs._brax import BraxMultiObjectiveEnv, MO_BRAX_TASKS
from ..rl._td3 import TD3, TD3HParams
from ._blocks import _one_of, CellOptions, RunOptions
from ._config import option
from ._distributed import to_host
from ._folder import RunFolder
from ._job import PROGRESS_FILE, register_job, RunResult
from ._loop import Chunk, LoopJob
from ._map_elites import build_tessellation, folder_cells, iteration_keys, loop_runners
from ._registry import Registry
from ._resume import RunClock


MO_TASKS: Registry[Callable[..., Any]] = Registry("multi-objective task")
"""Multi-objective tasks (objectives `(batch, num_objectives)`, a `reference_point`): the
`mome` job. A factory takes `genotype_dim`; those tagged `"policy"` are environments whose
genotypes are policies (`envs.AbstractMultiObjectiveQDEnv`), and take `episode_length`."""

POLICY = "policy"
"""The tag of the multi-objective tasks whose genotypes are policies."""

MO_TASKS.register(
    "mo_rastrigin",
    lambda *, genotype_dim=100: MultiObjectiveRastrigin(genotype_dim=genotype_dim),
    help="two Rastrigins centred on 0 and 2.2, genes in [-2, 4] (QDax's MOME example)",
)
MO_TASKS.register(
    "mo_rastrigin3",
    lambda *, genotype_dim=100: MultiObjectiveRastrigin(
        genotype_dim=genotype_dim, lags=(0.0, 1.1, 2.2)
    ),
    help="three Rastrigins centred on 0, 1.1 and 2.2, genes in [-2, 4]",
)
MO_TASKS.register(
    "mo_sphere",
    lambda *, genotype_dim=100: MultiObjectiveSphere(genotype_dim=genotype_dim),
    help="two spheres centred on 0 and 2.2, genes in [-2, 4]",
)


def _brax_mo(name: str) -> Callable[..., BraxMultiObjectiveEnv]:
    def make(*, episode_length: int = 100) -> BraxMultiObjectiveEnv:
        return BraxMultiObjectiveEnv(name, episode_length=episode_length)

    return make


for _name, _spec in MO_BRAX_TASKS.items():
    MO_TASKS.register(
        _name,
        _brax_mo(_name),
        help=f"brax {_spec.base.removesuffix('_uni')}: "
        + " / ".join(o for o, _ in _spec.objectives)
        + ", feet-contact descriptors (policies)",
        tags=(POLICY,),
    )

ALGORITHMS = {"mome": "MOME", "mome-pgx": "MOME-PGX", "nsga2": "NSGA-II", "spea2": "SPEA2"}


def _reference(key: str, value: Any) -> None:
    if value is not None and not all(math.isfinite(v) for v in value):
        raise ValueError(f"{key}: every coordinate must be finite, got {value}")


@dataclasses.dataclass(frozen=True)
class MOMEConfig(CellOptions, RunOptions):
    """Settings of the multi-objective job (`jobs.run`, `eqx-qd run mome`). The defaults are
    QDax's MOME example: bi-objective Rastrigin on 100 genes, 64 CVT cells, fronts of 50,
    batch 100, every child by crossover."""

    JOB: ClassVar[str] = "mome"

    algorithm: str = option(
        "mome",
        "mome (Pareto fronts in cells), mome-pgx (policy tasks), nsga2 or spea2",
        check=_one_of(*ALGORITHMS),
    )
    task: str = option("mo_rastrigin", "multi-objective task", check=MO_TASKS.check())
    genotype_dim: int = option(100, "genes per genotype", check=positive_int)
    cells: int = option(64, "CVT cells, or bins per descriptor with --grid", check=positive_int)
    front_length: int = option(50, "solutions a cell's front holds", check=positive_int)
    population: int = option(1000, "NSGA-II / SPEA2 population size", check=positive_int)
    neighbours: int | None = option(None, "SPEA2's k (default: sqrt of the pool)")
    tournament: bool = option(
        False, "NSGA-II / SPEA2: parents by binary tournament (the papers'; QDax: uniform)"
    )
    batch_size: int = option(
        100, "candidates per iteration", check=positive_int, aliases=("--batch",)
    )
    variation_percentage: float = option(
        1.0, "share of the batch made by crossover, the rest by mutation", check=fraction
    )
    swap_rate: float = option(
        1.0 - math.exp(-0.5),
        "uniform crossover: share of genes from the second parent (QDax's 0.5 proportion)",
        check=fraction,
    )
    mutation_rate: float = option(
        0.6, "polynomial mutation: share of genes mutated", check=fraction
    )
    eta: float = option(1.0, "polynomial mutation's distribution index", check=non_negative)
    reference_point: tuple[float, ...] | None = option(
        None, "hypervolume reference point (default: the task's)", check=_reference
    )
    episode_length: int = option(100, "steps per episode (policy tasks)", check=positive_int)
    hidden: tuple[int, ...] = option((64, 64), "policy hidden layer widths (policy tasks)")
    iso_sigma: float = option(
        0.005, "policy tasks' GA: iso+line-DD isotropic noise", check=non_negative
    )
    line_sigma: float = option(0.05, "policy tasks' GA: iso+line-DD line noise", check=non_negative)
    pg_batch_size: int | None = option(
        None,
        "mome-pgx: candidates of each objective's policy-gradient emitter (default: half the "
        "batch shared among the objectives; the rest by the GA)",
    )
    critic_steps: int = option(300, "mome-pgx: critic steps per iteration", check=non_negative_int)
    pg_steps: int = option(
        100, "mome-pgx: policy-gradient steps per offspring", check=non_negative_int
    )
    pg_lr: float = option(1e-3, "mome-pgx: policy-gradient learning rate", check=non_negative)
    critic_lr: float = option(3e-4, "mome-pgx: critic learning rate", check=non_negative)
    greedy_lr: float = option(3e-4, "mome-pgx: greedy actor learning rate", check=non_negative)
    critic_hidden: tuple[int, ...] = option((256, 256), "mome-pgx: critic hidden layer widths")
    minibatch_size: int = option(
        256, "mome-pgx: transitions per critic / PG step", check=positive_int
    )
    buffer_size: int = option(
        1_000_000, "mome-pgx: each objective's replay buffer capacity", check=positive_int
    )
    iterations: int = option(1000, "iterations", check=positive_int, aliases=("--iters",))
    devices: int = option(
        1,
        "devices to shard over, batch_size candidates each (on a CPU, host devices are made)",
        check=positive_int,
    )
    log_every: int = option(10, "iterations per logged row (one jitted call)", check=positive_int)
    checkpoint_every: int = option(
        100, "iterations between checkpoints (and one at the end)", check=positive_int
    )

    @property
    def policy_task(self) -> bool:
        """Whether the task's genotypes are policies (a multi-objective environment)."""
        return POLICY in MO_TASKS.get(self.task).tags

    def _checked_pg_split(self, num_objectives: int) -> tuple[int, int]:
        """`pg_split(num_objectives)`, refused when the batch cannot hold one policy-gradient
        emitter per objective."""
        ga, pg = self.pg_split(num_objectives)
        if ga < 0 or pg < 1:
            raise ValueError(
                f"batch_size {self.batch_size} cannot hold {num_objectives} policy-gradient "
                f"emitters of {pg} candidates (pg_batch_size x objectives <= batch_size, at "
                "least 1 each)"
            )
        return ga, pg

    def pg_split(self, num_objectives: int) -> tuple[int, int]:
        """MOME-PGX's GA candidates and each objective's policy-gradient candidates, per
        device."""
        batch = self.batch_size
        pg = batch // (2 * num_objectives) if self.pg_batch_size is None else self.pg_batch_size
        return batch - num_objectives * pg, pg

    def check(self) -> None:
        super().check()
        if self.neighbours is not None and self.neighbours < 1:
            raise ValueError(f"neighbours must be at least 1, got {self.neighbours}")
        if self.algorithm == "mome-pgx" and not self.policy_task:
            raise ValueError(
                f"algorithm mome-pgx learns policies: task {self.task!r} has no environment; "
                f"choose one of {MO_TASKS.names(POLICY)}"
            )
        if self.pg_batch_size is not None and self.pg_batch_size < 1:
            raise ValueError(f"pg_batch_size must be at least 1, got {self.pg_batch_size}")
        if self.algorithm == "mome-pgx" and self.task in MO_BRAX_TASKS:
            # Known before any environment is built; a user's task is checked when built.
            self._checked_pg_split(len(MO_BRAX_TASKS[self.task].objectives))


MOMEConfig.PRESETS = {}


class _PolicyTask(typing.NamedTuple):
    """A multi-objective environment seen as the job's task: its scoring, sizes and the
    policies' initial genotypes."""

    env: Any
    td3: TD3
    scorer: PolicyScorer

    @property
    def num_objectives(self) -> int:
        return self.env.num_objectives

    @property
    def num_descriptors(self) -> int:
        return self.env.descriptor_size

    @property
    def descriptor_bounds(self) -> tuple[float, float]:
        low, high = self.env.descriptor_bounds
        return float(min(low)), float(max(high))

    @property
    def reference_point(self) -> Array:
        return jnp.asarray(self.env.reference_point, jnp.float32)

    def init_genotypes(self, num: int, *, key) -> Any:
        return eqx.filter_vmap(lambda k: self.td3.init_policy(key=k))(jr.split(key, num))

    def genotype(self) -> Any:
        """One policy (its values do not matter: what a loaded archive's slots look like)."""
        return self.td3.init_policy(key=jr.key(0))


def build_task(config: MOMEConfig) -> Any:
    """The config's task: a multi-objective function of genotypes, or a `_PolicyTask`."""
    if not config.policy_task:
        return MO_TASKS.make(config.task, genotype_dim=config.genotype_dim)
    env = MO_TASKS.make(config.task, episode_length=config.episode_length)
    td3 = TD3(
        observation_size=env.observation_size,
        action_size=env.action_size,
        policy_hidden=config.hidden,
        critic_hidden=config.critic_hidden,
        minibatch_size=config.minibatch_size,
    )
    return _PolicyTask(env, td3, PolicyScorer(env))


def build_mome(config: MOMEConfig):
    """The algorithm, the task and the reference point of `config`."""
    task = build_task(config)
    reference = task.reference_point
    if config.reference_point is not None:
        if len(config.reference_point) != task.num_objectives:
            raise ValueError(
                f"reference_point has {len(config.reference_point)} coordinates, task "
                f"{config.task!r} has {task.num_objectives} objectives"
            )
        reference = jnp.asarray(config.reference_point, jnp.float32)
    axis = "p" if config.devices > 1 else None
    if isinstance(task, _PolicyTask):
        variation = IsoLineVariation(iso_sigma=config.iso_sigma, line_sigma=config.line_sigma)
        if config.algorithm == "mome-pgx":
            ga, pg = config._checked_pg_split(task.num_objectives)
            emitter = mome_pgx_emitter(
                num_objectives=task.num_objectives,
                ga_batch_size=ga,
                pg_batch_size=pg,
                td3=task.td3,
                hparams=TD3HParams(policy_lr=config.greedy_lr, critic_lr=config.critic_lr),
                critic_steps=config.critic_steps,
                pg_steps=config.pg_steps,
                pg_lr=config.pg_lr,
                buffer_size=config.buffer_size,
                variation=variation,
                axis_name=axis,
            )
        else:
            emitter = MixingEmitter(
                batch_size=config.batch_size, variation_percentage=1.0, variation=variation
            )
        scoring = task.scorer
    else:
        emitter = MixingEmitter(
            batch_size=config.batch_size,
            variation_percentage=config.variation_percentage,
            variation=UniformCrossover(config.swap_rate),
            mutation=PolynomialMutation(config.eta, config.mutation_rate, task.minval, task.maxval),
        )
        scoring = task
    algo = MOME(emitter, scoring, reference, front_length=config.front_length, axis_name=axis)
    return algo, task


def _row(iteration: int, config: MOMEConfig, wall: float, metrics: MOQDMetrics) -> dict:
    evaluations = config.batch_size * config.devices * (iteration + 1)
    row = {"iteration": iteration, "evaluations": evaluations}
    row["wall_s"] = wall
    for k, v in metrics.as_dict().items():
        row[k] = np.ravel(np.asarray(v))[-1].item()
    return row


_HEADER = ["iteration", "evaluations", "wall_s", *MOQD_METRIC_NAMES]


class _Plan(typing.NamedTuple):
    config: MOMEConfig
    init: Callable[[], tuple[MOMEState, MOQDMetrics]]
    chunk: Callable[[MOMEState, Key[Array, " n"]], tuple[MOMEState, MOQDMetrics]]
    keys: Key[Array, " iterations"]
    mesh: Any
    reference: Array


class _MOMEJob(LoopJob[_Plan, MOMEState]):
    """Run MOME (or NSGA-II / SPEA2, with a passive Pareto grid for the metrics) as `config`
    says; with `out_dir`, write the run folder: `config.toml`, `progress.csv` (iteration,
    evaluations, `wall_s` and the `MOQDMetrics` columns), `repertoire.eqx` (the Pareto
    archive the metrics read), `centroids.npy` and, with `plots`, `hypervolume.png` (each
    cell's hypervolume), `fronts.png` (the fronts and the global front, two objectives) and
    `progress.png`.
    Checkpoints every `checkpoint_every` iterations and at the end; `resume` continues."""

    name = "mome"
    config_cls = MOMEConfig
    help = "MOME, NSGA-II or SPEA2 on a multi-objective task (default: QDax's MOME example)"
    resume_may_change = ("iterations",)
    multi_process = True

    def best(self, metrics) -> float:
        return float(np.mean(metrics["moqd_score"]))

    def bar(self, row) -> dict[str, float]:
        shown = {"moqd": "moqd_score", "hv": "global_hypervolume"}
        return {k: row[c] for k, c in shown.items() if c in row}

    def plan(self, config: MOMEConfig) -> _Plan:
        tess_key, init_key, pop_key, run_key = jr.split(jr.key(config.seed), 4)
        algo, task = build_mome(config)
        tessellation = build_tessellation(config, task, key=tess_key)
        genotypes = task.init_genotypes(config.batch_size * config.devices, key=pop_key)
        first = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, genotypes)
        m, d = task.num_objectives, task.num_descriptors
        result = None
        if config.algorithm in ("mome", "mome-pgx"):
            repertoire = ParetoRepertoire.empty(
                tessellation,
                first,
                m,
                config.front_length,
                crowding=config.algorithm == "mome-pgx",
            )
        else:
            result = tessellation
            if config.algorithm == "nsga2":
                repertoire = NSGA2Repertoire.empty(
                    config.population, first, m, d, tournament=config.tournament
                )
            else:
                repertoire = SPEA2Repertoire.empty(
                    config.population, first, m, d, config.neighbours, tournament=config.tournament
                )
        init, chunk, mesh = loop_runners(
            algo, genotypes, repertoire, key=init_key, result=result, devices=config.devices
        )
        keys = iteration_keys(config, key=run_key)
        return _Plan(config, init, chunk, keys, mesh, algo.reference_point)

    def headers(self, plan: _Plan) -> dict[str, list[str]]:
        return {PROGRESS_FILE: _HEADER}

    def like(self, plan: _Plan) -> MOMEState:
        return eqx.filter_eval_shape(plan.init)[0]

    def total(self, config: MOMEConfig) -> int:
        return config.iterations

    def start(self, plan: _Plan, clock: RunClock) -> Chunk:
        state, metrics = plan.init()
        if plan.config.reference_point is not None:
            check_reference_point(to_host(state.elites), plan.reference)
        row = _row(0, plan.config, clock(), to_host(metrics))
        return Chunk(state, 0, {PROGRESS_FILE: [list(row.values())]})

    def resumed_state(self, plan: _Plan, resumed) -> MOMEState:
        return resumed.state_on(plan.mesh)

    def advance(self, plan: _Plan, state, step: int, clock: RunClock) -> Chunk:
        config = plan.config
        n = min(config.log_every - step % config.log_every, config.iterations - step)
        state, history = plan.chunk(state, plan.keys[step : step + n])
        row = _row(step + n, config, clock(), to_host(history))
        return Chunk(state, step + n, {PROGRESS_FILE: [list(row.values())]})

    def finish(self, plan: _Plan, folder, state, logs, plots: bool) -> RunResult:
        rows = logs[PROGRESS_FILE]
        columns = {k: np.asarray([r[j] for r in rows]) for j, k in enumerate(_HEADER)}
        repertoire = to_host(state.elites)
        if folder is not None:
            folder.write_columns(PROGRESS_FILE, columns)
            folder.write_eqx("repertoire.eqx", repertoire)
            folder.write_npy("centroids.npy", np.asarray(repertoire.tessellation.centroids))
            if plots:
                from ..plotting import plot_hypervolume_map, plot_metrics, plot_pareto_fronts

                folder.write_figure(
                    "hypervolume.png", plot_hypervolume_map(repertoire, plan.reference)
                )
                if repertoire.num_objectives == 2:  # a plane of two objectives
                    folder.write_figure("fronts.png", plot_pareto_fronts(repertoire))
                folder.write_figure("progress.png", plot_metrics(columns, "evaluations"))
        return RunResult(
            plan.config, None if folder is None else folder.path, columns, state, repertoire
        )

    def load(self, folder: RunFolder, config: MOMEConfig) -> RunResult:
        task = build_task(config)
        tess = folder_cells(folder, config, task.num_descriptors, task.descriptor_bounds)

        def genotype():
            if isinstance(task, _PolicyTask):
                return task.genotype()
            return jnp.zeros((config.genotype_dim,), jnp.float32)

        like = eqx.filter_eval_shape(
            lambda: ParetoRepertoire.empty(
                tess,
                genotype(),
                task.num_objectives,
                config.front_length,
                crowding=config.algorithm == "mome-pgx",
            )
        )
        repertoire = folder.read_eqx("repertoire.eqx", like)
        return RunResult(config, folder.path, folder.read_columns(PROGRESS_FILE), None, repertoire)

    def summary(self, result: RunResult) -> str:
        last = result.last
        return (
            f"done: {int(last['evaluations'])} evaluations, MOQD-score "
            f"{last['moqd_score']:.6g}, global hypervolume {last['global_hypervolume']:.6g}, "
            f"coverage {100 * last['coverage']:.1f}%, {int(last['num_solutions'])} solutions"
        )


register_job(_MOMEJob())
