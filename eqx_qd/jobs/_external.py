"""The external job (`eqx-qd run external`): MAP-Elites whose candidates are evaluated by a
Python function outside JAX, in this process, on local processes or on a Dask cluster.

Each iteration asks the emitter for a batch (`MAPElites.ask`, compiled), evaluates it with the
user's `evaluator(genotype) -> (fitness, descriptor)` on the pool, and tells the results
(`MAPElites.tell`, compiled). Every candidate's outcome is written to `evaluations.csv`, and,
as it arrives, to the run's journal (`journal/ITERATION.jsonl`), so that a run killed in the
middle of a batch resumes without evaluating again the candidates that had finished: a
resumed run tells exactly the results the killed one received, and ends as an uninterrupted
run would with the same results.
"""

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import warnings
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._compile import jit
from .._map_elites import Asked, MAPElites, MAPElitesState
from .._metrics import METRIC_NAMES
from .._repertoire import SampledExtra
from .._sampling import corrected_metrics, estimate, rebuilt, Samples, spread
from .._validate import positive_int
from ..external import (
    AbstractPool,
    DaskPool,
    Evaluations,
    ExternalTask,
    load_evaluator,
    Outcome,
    ProcessPool,
    SequentialPool,
    Status,
)
from ._blocks import CellOptions, EmitterOptions, NoiseOptions, RepertoireOptions, RunOptions
from ._config import option
from ._folder import RunFolder
from ._job import PROGRESS_FILE, register_job, RunResult
from ._loop import Chunk, LoopJob
from ._map_elites import build_map_elites, build_tessellation, iteration_keys, read_cells_run
from ._qd_outputs import (
    as_written,
    CORRECTED_NAMES,
    corrected_row,
    qd_summary,
    write_qd_outputs,
)
from ._resume import Checkpointer, RunClock


EVALUATIONS_FILE = "evaluations.csv"
"""Every candidate's outcome, one row each."""
JOURNAL = "journal"
"""The folder of outcomes as they arrive, one file per batch not yet checkpointed."""
REEVALUATION = "reevaluation-"
"""The journal's name of a logged row's re-evaluations, before its iteration."""


def _warn_of_negative_scores(fitnesses: np.ndarray, qd_offset: float) -> None:
    """Warn when the first batch's fitnesses go below `-qd_offset`: the QD-score (each
    elite's `fitness + qd_offset`, summed) can then be negative and fall as cells fill, which
    reads as a run getting worse."""
    finite = np.asarray(fitnesses)[np.isfinite(fitnesses)]
    if finite.size and float(finite.min()) + qd_offset < 0:
        lowest = float(finite.min())
        warnings.warn(
            f"the first batch's fitnesses reach {lowest:g}, below -qd_offset ({-qd_offset:g}): "
            "the QD-score sums fitness + qd_offset over the elites, so it can be negative and "
            f"fall as cells fill. Set --qd-offset (qd_offset) above {-lowest:g}, to a bound "
            "on how low a fitness can go",
            UserWarning,
            stacklevel=2,
        )


@dataclasses.dataclass(frozen=True)
class ExternalConfig(EmitterOptions, CellOptions, RepertoireOptions, NoiseOptions, RunOptions):
    """Settings of the external job (`jobs.run`, `eqx-qd run external`)."""

    JOB: ClassVar[str] = "external"

    evaluator: str = option(
        "eqx_qd.external:arm",
        "package.module:function that scores one genotype: f(genotype) -> (fitness, descriptor)",
    )
    genotype_dim: int = option(8, "genes per genotype", check=positive_int)
    genotype_min: float = option(0.0, "lower bound of the initial population's uniform genes")
    genotype_max: float = option(1.0, "upper bound of the initial population's uniform genes")
    num_descriptors: int = option(2, "values in each descriptor", check=positive_int)
    descriptor_min: float = option(0.0, "lower bound of every descriptor (the cells')")
    descriptor_max: float = option(1.0, "upper bound of every descriptor (the cells')")
    qd_offset: float = option(
        1.0,
        "added to every elite's fitness in the QD-score: above minus the lowest fitness your "
        "evaluator can return (the run warns when the first batch goes below)",
    )
    batch_size: int = option(
        64, "candidates per iteration", check=positive_int, aliases=("--batch",)
    )
    iterations: int = option(100, "iterations", check=positive_int, aliases=("--iters",))
    log_every: int = option(1, "iterations per logged row", check=positive_int)
    workers: int = option(
        0,
        "0: evaluate in this process; N: on N local processes, or a Dask LocalCluster of N "
        "with --scheduler local",
    )
    scheduler: str | None = option(
        None, "a Dask scheduler's address (tcp://host:8786), or local for a LocalCluster"
    )
    timeout: float | None = option(
        None, "seconds a candidate may run before it is stopped and recorded as timed out"
    )
    retries: int = option(1, "reruns of a candidate whose worker process died (local processes)")
    overlap: bool = option(
        False,
        "ask each batch before the previous one is told, so the workers never wait for the "
        "driver (the GA emitters; one batch behind the state, deterministic)",
    )
    checkpoint_every: int = option(
        10, "iterations between checkpoints (and one at the end)", check=positive_int
    )

    def check(self) -> None:
        super().check()
        if self.emitter in ("cma_mega", "cma_maega"):
            raise ValueError(
                f"emitter {self.emitter!r} follows the task's gradients: an evaluator outside "
                "JAX has none (use cma_me or cma_mae)"
            )
        for what, lo, hi in (
            ("genotype", self.genotype_min, self.genotype_max),
            ("descriptor", self.descriptor_min, self.descriptor_max),
        ):
            if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
                raise ValueError(f"{what}_min must be below {what}_max, got {lo} and {hi}")
        if not np.isfinite(self.qd_offset):
            raise ValueError(f"qd_offset must be finite, got {self.qd_offset}")
        if self.workers < 0:
            raise ValueError(f"workers must be 0 (this process) or more, got {self.workers}")
        if self.scheduler == "local" and self.workers < 1:
            raise ValueError(
                "scheduler local starts a LocalCluster of `workers` processes: give workers 1 "
                "or more"
            )
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {self.timeout}")
        if self.retries < 0:
            raise ValueError(f"retries must be non-negative, got {self.retries}")
        if self.overlap:
            if self.workers < 1:
                raise ValueError(
                    "overlap keeps workers busy while the driver tells a batch: give workers "
                    "1 or more (in this process there is nothing to overlap)"
                )
            if self.emitter.startswith("cma"):
                raise ValueError(
                    f"overlap asks from a state one batch behind: emitter {self.emitter!r} "
                    "adapts its distribution at each tell and needs its own batch told first"
                )
            if self.scheduler is not None and self.timeout is not None:
                raise ValueError(
                    "overlap with a Dask timeout: a candidate's clock would start while it "
                    "waits behind the previous batch; use local processes (workers) or no timeout"
                )
        _, sep, attr = self.evaluator.partition(":")
        if not sep or not attr:
            raise ValueError(f"evaluator {self.evaluator!r}: expected 'package.module:function'")

    def pool(self) -> AbstractPool:
        """Where the batches are evaluated: this process, local processes or Dask."""
        if self.scheduler is not None:
            address = None if self.scheduler == "local" else self.scheduler
            return DaskPool(address, workers=max(self.workers, 1))
        if self.workers == 0:
            return SequentialPool()
        return ProcessPool(self.workers, retries=self.retries)


ExternalConfig.RENAMED = {"log_period": "log_every"}  # an older folder's key


def _digest(row: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(row).tobytes()).hexdigest()[:16]


class _ExternalPlan:
    """What the run needs; `pool` is started at the first batch, `folder` set once open."""

    def __init__(self, config: ExternalConfig):
        self.config = config
        evaluator = load_evaluator(config.evaluator)
        self.task = ExternalTask(
            evaluator,
            config.genotype_dim,
            config.num_descriptors,
            genotype_bounds=(config.genotype_min, config.genotype_max),
            descriptor_bounds=(config.descriptor_min, config.descriptor_max),
            qd_offset=config.qd_offset,
            timeout=config.timeout,
        )
        tess_key, self.init_key, pop_key, run_key = jr.split(jr.key(config.seed), 4)
        self.algorithm, _ = build_map_elites(config, self.task)
        tessellation = build_tessellation(config, self.task, key=tess_key)
        self.repertoire = config.repertoire_for(
            tessellation,
            config.num_descriptors,
            largest_batch=config.batch_size,
            key=jr.fold_in(self.init_key, 1),
        )
        self.result = config.result_for(tessellation)
        self.genotypes = self.task.init_genotypes(config.batch_size, key=pop_key)
        self.keys = iteration_keys(config, key=run_key)
        self.run_key = run_key
        self.pool: AbstractPool | None = None
        self.folder: RunFolder | None = None
        self.failed = 0  # over resumes, from the last progress row
        self.eval_s = 0.0
        self.ahead: concurrent.futures.Future | None = None  # overlap: the next batch's

    def init_scored(self, evaluations: Evaluations) -> tuple[MAPElitesState, Any]:
        return _init_scored(
            self.algorithm,
            self.genotypes,
            *self.scored(evaluations),
            self.repertoire,
            key=self.init_key,
            result=self.result,
        )

    def key_of(self, i: int) -> Any:
        """Iteration `i`'s key, also past the run's end (as a longer run has it)."""
        if i < self.keys.shape[0]:
            return self.keys[i]
        longer = dataclasses.replace(self.config, iterations=i + 1)
        return iteration_keys(longer, key=self.run_key)[i]

    def submit(self, genotypes: Any, label: str, repeat: int = 1) -> concurrent.futures.Future:
        """Start evaluating the batch on the pool, each row `repeat` times in a row (a
        sampled run's samples), journaling each outcome as it arrives and taking back those
        the journal holds for this batch (a resumed run's)."""
        if self.pool is None:
            self.pool = self.config.pool()
        rows = np.repeat(np.asarray(genotypes), repeat, axis=0)
        digests = [_digest(r) for r in rows]
        done: dict[int, Outcome] = {}
        journal = None
        if self.folder is not None:
            path = self.folder.subfolder(JOURNAL).file(f"{label}.jsonl")
            done = _read_journal(path, digests)
            journal = _open_journal(path)

        def on_result(i: int, outcome: Outcome) -> None:
            if journal is not None:
                record = {"candidate": i, "digest": digests[i], **outcome.to_json()}
                journal.write(json.dumps(record) + "\n")
                journal.flush()

        try:
            future = self.pool.submit(
                self.task.evaluator,
                rows,
                self.config.num_descriptors,
                timeout=self.config.timeout,
                done=done,
                on_result=on_result,
            )
        except BaseException:
            if journal is not None:
                journal.close()
            raise
        if journal is not None:
            future.add_done_callback(lambda _: journal.close())
        return future

    def wait(self, future: concurrent.futures.Future, clock: RunClock) -> Evaluations:
        """The batch's `Evaluations`, counting the seconds waited and the failures."""
        start = clock()
        evaluations = future.result()
        self.eval_s += clock() - start
        self.failed += evaluations.failed
        return evaluations

    def evaluate(self, genotypes: Any, label: str, clock: RunClock) -> Evaluations:
        """`submit` (each candidate `samples` times), then `wait`."""
        return self.wait(self.submit(genotypes, label, self.config.samples), clock)

    def scored(self, evaluations: Evaluations) -> tuple[Any, Any, Any]:
        """What `tell` takes from a batch's evaluations: its descriptors, fitnesses and
        extra; with `samples` above 1, each candidate's `estimator` estimates over its samples
        (a failed sample makes them NaN: the candidate is not stored) and a `SampledExtra`."""
        n = self.config.samples
        if n == 1:
            return jnp.asarray(evaluations.descriptors), jnp.asarray(evaluations.fitnesses), None
        fitnesses = np.where(np.isfinite(evaluations.fitnesses), evaluations.fitnesses, np.nan)
        d = self.config.num_descriptors
        return _estimates(
            jnp.asarray(fitnesses.reshape(-1, n)),
            jnp.asarray(evaluations.descriptors.reshape(-1, n, d)),
            self.config.estimator,
        )

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


def _open_journal(path: str) -> Any:
    """The journal at `path`, opened to append; a last line cut by a kill is ended first, so
    that the next record starts a line of its own."""
    journal = open(path, "a+b")
    if journal.tell() > 0:
        journal.seek(-1, os.SEEK_END)
        if journal.read(1) != b"\n":
            journal.write(b"\n")
    journal.close()
    return open(path, "a")


def _read_journal(path: str, digests: list[str]) -> dict[int, Outcome]:
    """The outcomes a journal holds for the batch whose rows have `digests` (a line cut by a
    kill, or of another batch, is skipped)."""
    done: dict[int, Outcome] = {}
    if not os.path.exists(path):
        return done
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
                i = int(record["candidate"])
                if 0 <= i < len(digests) and record["digest"] == digests[i]:
                    done[i] = Outcome.from_json(record)
            except (ValueError, KeyError, TypeError):
                continue
    return done


@jit
def _init_scored(algorithm, genotypes, descriptors, fitnesses, extra, repertoire, *, key, result):
    return algorithm.init_scored(
        genotypes, descriptors, fitnesses, repertoire, extra, key=key, result=result
    )


@jit
def _estimates(fitnesses, descriptors, estimator: str):
    """A sampled batch's estimates and `SampledExtra` (what `Sampled` returns in JAX)."""
    extra = SampledExtra(
        spread(fitnesses, "std"),
        spread(descriptors, "std"),
        fitnesses,
        descriptors,
        None,
    )
    return estimate(descriptors, estimator), estimate(fitnesses, estimator), extra


@jit
def _ask(algorithm: MAPElites, state: MAPElitesState, *, key):
    return algorithm.ask(state, key=key)


@jit
def _tell(
    algorithm: MAPElites, state: MAPElitesState, asked, genotypes, descriptors, fitnesses, extra
):
    state, metrics, _ = algorithm.tell(state, asked, genotypes, descriptors, fitnesses, extra)
    return state, metrics


class _Ahead(eqx.Module):
    """An overlapped run's state: MAP-Elites' state and the batch asked ahead of it (its
    `genotypes` and what `tell` needs), being evaluated while the previous batch ends."""

    state: MAPElitesState
    genotypes: Any
    asked: Asked


def _ahead(plan: _ExternalPlan, state: MAPElitesState, i: int) -> _Ahead:
    """Batch `i`, asked from `state` with iteration `i`'s key (past the run's end, the key a
    longer run gives it: a lengthened resume goes on as the longer run)."""
    genotypes, asked = _ask(plan.algorithm, state, key=plan.key_of(i))
    return _Ahead(state, genotypes, asked)


class _JournalCheckpointer(Checkpointer):
    """Checkpoints as usual, then drops the journal of the batches the checkpoint holds."""

    def save(self, step: int, state: Any, metrics: Any, *, force: bool) -> bool:
        saved = super().save(step, state, metrics, force=force)
        if saved and self.folder is not None and self.folder.exists(JOURNAL):
            journal = self.folder.subfolder(JOURNAL, create=False)
            for name in os.listdir(journal.path):
                stem = name.removesuffix(".jsonl")
                again = stem.removeprefix(REEVALUATION)  # a logged row's re-evaluations
                if (
                    stem == "init"
                    or (stem.isdigit() and int(stem) < step)
                    or (stem.startswith(REEVALUATION) and again.isdigit() and int(again) <= step)
                ):
                    os.remove(journal.file(name))
        return saved


_HEADER = ["iteration", "evaluations", "wall_s", *METRIC_NAMES, "failed", "eval_s"]


def _header(config: ExternalConfig) -> list[str]:
    return _HEADER + list(CORRECTED_NAMES) * (config.reevaluations > 0)


@jit
def _corrected(repertoire, fitnesses, descriptors, qd_offset):
    samples = Samples(fitnesses, descriptors, None)
    return corrected_metrics(rebuilt(repertoire, samples), qd_offset)


def _reevaluation(plan: _ExternalPlan, state: MAPElitesState, step: int) -> list[float]:
    """The corrected figures of `state`'s elites, each evaluated `reevaluations` more times
    on the pool (journaled under `REEVALUATION` and the row's iteration: a resumed run takes
    them back); neither the failures nor the seconds count in the run's columns."""
    k = plan.config.reevaluations
    elites = state.elites
    filled = np.flatnonzero(np.asarray(elites.filled))
    rows = np.repeat(np.asarray(elites.genotypes)[filled], k, axis=0)
    n, d = elites.capacity, elites.num_descriptors
    fitnesses = np.full((n, k), np.nan, np.float32)
    descriptors = np.full((n, k, d), np.nan, np.float32)
    if filled.size:
        out = plan.submit(rows, f"{REEVALUATION}{step:08d}").result()
        f = np.where(np.isfinite(out.fitnesses), out.fitnesses, np.nan)
        fitnesses[filled] = f.reshape(filled.size, k)
        descriptors[filled] = out.descriptors.reshape(filled.size, k, d)
    figures = _corrected(
        elites, jnp.asarray(fitnesses), jnp.asarray(descriptors), plan.config.qd_offset
    )
    return corrected_row(figures)


def _evaluation_header(num_descriptors: int) -> list[str]:
    descriptors = [f"descriptor_{j}" for j in range(num_descriptors)]
    return [
        "iteration",
        "candidate",
        "status",
        "fitness",
        *descriptors,
        "seconds",
        "attempts",
        "error",
    ]


def _evaluation_rows(iteration: int, evaluations: Evaluations) -> list[list[Any]]:
    rows = []
    for i in range(evaluations.fitnesses.shape[0]):
        o = evaluations.outcome(i)
        rows.append(
            [
                iteration,
                i,
                o.status.label,
                o.fitness,
                *o.descriptor,
                round(o.seconds, 6),
                o.attempts,
                o.error,
            ]
        )
    return rows


class _ExternalJob(LoopJob[_ExternalPlan, MAPElitesState | _Ahead]):
    """Run MAP-Elites over an evaluator outside JAX as `config` says; with `out_dir`, write
    the run folder: `config.toml`, `progress.csv` (the MAP-Elites job's columns, plus
    `failed`, the candidates whose evaluation failed so far, and `eval_s`, the seconds spent
    waiting for evaluations), `evaluations.csv` (every candidate: its iteration, index,
    status, fitness, descriptor, seconds, attempts and error), `journal/`, checkpoints,
    `repertoire.eqx` and, with `plots`, its figures. Resume continues from the newest
    checkpoint and takes back from the journal the outcomes of the batch it was in."""

    name = "external"
    config_cls = ExternalConfig
    help = "MAP-Elites over a Python evaluator outside JAX (default: a NumPy planar arm)"
    resume_may_change = ("iterations", "workers", "scheduler", "timeout", "retries")
    # (not overlap: its checkpoints hold the batch asked ahead)
    logs = {PROGRESS_FILE: "iteration", EVALUATIONS_FILE: "iteration"}
    checkpoint_at_start = True  # the first batch's evaluations may be costly

    def plan(self, config: ExternalConfig) -> _ExternalPlan:
        return _ExternalPlan(config)

    def close(self, plan: _ExternalPlan) -> None:
        plan.close()  # the pool's processes or cluster end with the run, whatever ends it

    def headers(self, plan: _ExternalPlan) -> dict[str, list[str]]:
        return {
            PROGRESS_FILE: _header(plan.config),
            EVALUATIONS_FILE: _evaluation_header(plan.config.num_descriptors),
        }

    def like(self, plan: _ExternalPlan) -> "MAPElitesState | _Ahead":
        n, d = plan.config.batch_size * plan.config.samples, plan.config.num_descriptors
        scored = Evaluations.of(
            [Outcome(Status.OK, 0.0, (0.0,) * d, 0.0)] * n, d
        )  # shapes only: nothing is evaluated
        state = eqx.filter_eval_shape(plan.init_scored, scored)[0]
        if not plan.config.overlap:
            return state
        return eqx.filter_eval_shape(lambda s: _ahead(plan, s, 0), state)

    def total(self, config: ExternalConfig) -> int:
        return config.iterations

    def opened(self, plan: _ExternalPlan, folder: RunFolder) -> None:
        plan.folder = folder

    def checkpointer(self, config, folder, resumed, enabled) -> Checkpointer:
        return _JournalCheckpointer.of(
            config, folder, resumed, origin=self.step_offset, enabled=enabled
        )

    def _row(self, plan: _ExternalPlan, step: int, clock: RunClock, metrics, state) -> list[Any]:
        config = plan.config
        row = [step, config.batch_size * config.samples * (step + 1), clock()]
        row += [np.ravel(np.asarray(v))[-1].item() for v in metrics.as_dict().values()]
        row += [plan.failed, round(plan.eval_s, 3)]
        if plan.config.reevaluations > 0:
            row += _reevaluation(plan, state.state if isinstance(state, _Ahead) else state, step)
        return row

    def start(self, plan: _ExternalPlan, clock: RunClock) -> Chunk:
        evaluations = plan.evaluate(plan.genotypes, "init", clock)
        if evaluations.failed == evaluations.status.shape[0]:
            raise ValueError(
                f"every candidate of the first batch failed; evaluator {plan.config.evaluator}: "
                f"{evaluations.errors[0]}"
            )
        _warn_of_negative_scores(evaluations.fitnesses, plan.config.qd_offset)
        state, metrics = plan.init_scored(evaluations)
        rows = {
            PROGRESS_FILE: [self._row(plan, 0, clock, metrics, state)],
            EVALUATIONS_FILE: _evaluation_rows(0, evaluations),
        }
        if plan.config.overlap:  # the first batch, asked from the first state
            state = _ahead(plan, state, 0)
        return Chunk(state, 0, rows)

    def resumed_state(self, plan: _ExternalPlan, resumed) -> "MAPElitesState | _Ahead":
        last = dict(zip(_HEADER, resumed.logs[PROGRESS_FILE][-1]))
        plan.failed, plan.eval_s = int(last["failed"]), float(last["eval_s"])
        return resumed.state

    def advance(self, plan: _ExternalPlan, state, step: int, clock: RunClock) -> Chunk:
        config = plan.config
        n = min(config.log_every - step % config.log_every, config.iterations - step)
        evaluated = []
        for i in range(step, step + n):
            if config.overlap:
                state, evaluations, metrics = self._overlapped(plan, state, i, clock)
            else:
                genotypes, asked = _ask(plan.algorithm, state, key=plan.keys[i])
                evaluations = plan.evaluate(genotypes, f"{i:08d}", clock)
                state, metrics = _tell(
                    plan.algorithm, state, asked, genotypes, *plan.scored(evaluations)
                )
            evaluated += _evaluation_rows(i + 1, evaluations)
        rows = {
            PROGRESS_FILE: [self._row(plan, step + n, clock, metrics, state)],
            EVALUATIONS_FILE: evaluated,
        }
        return Chunk(state, step + n, rows)

    def _overlapped(self, plan: _ExternalPlan, ahead: "_Ahead", i: int, clock: RunClock):
        """Iteration `i` one batch ahead: batch `i` (asked before the last tell) is being
        evaluated; batch `i + 1` is asked from the state before batch `i` is told, and
        queued behind it, so the workers never wait for the driver."""
        samples = plan.config.samples
        current = plan.ahead or plan.submit(ahead.genotypes, f"{i:08d}", samples)  # (resumed)
        plan.ahead = None
        following = _ahead(plan, ahead.state, i + 1)
        if i + 1 < plan.config.iterations:  # the last batch asked is kept, not evaluated
            plan.ahead = plan.submit(following.genotypes, f"{i + 1:08d}", samples)
        evaluations = plan.wait(current, clock)
        state, metrics = _tell(
            plan.algorithm, ahead.state, ahead.asked, ahead.genotypes, *plan.scored(evaluations)
        )
        return _Ahead(state, following.genotypes, following.asked), evaluations, metrics

    def finish(self, plan: _ExternalPlan, folder, state, logs, plots: bool) -> RunResult:
        plan.close()
        rows = logs[PROGRESS_FILE]
        header = _header(plan.config)
        columns = {k: np.asarray([r[j] for r in rows]) for j, k in enumerate(header)}
        state = state.state if isinstance(state, _Ahead) else state
        repertoire = as_written(state.elites)  # ME-LS, Extract-ME: the elites, their cells
        if folder is not None:
            write_qd_outputs(folder, repertoire, columns, plots=plots)
        return RunResult(
            plan.config, None if folder is None else folder.path, columns, state, repertoire
        )

    def load(self, folder: RunFolder, config) -> RunResult:
        bounds = (config.descriptor_min, config.descriptor_max)
        return read_cells_run(folder, config, config.num_descriptors, bounds, config.genotype_dim)

    def summary(self, result: RunResult) -> str:
        failed = int(result.last["failed"])
        return qd_summary(result) + (f", {failed} failed evaluations" if failed else "")


register_job(_ExternalJob())
