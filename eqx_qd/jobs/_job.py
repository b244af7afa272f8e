"""The job contract (`Job`, `RunResult`), the table of jobs by name, and running one: a run
folder started or resumed, its status kept, its config and results read back."""

import abc
import dataclasses
import datetime
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import jax
import numpy as np

from .._qdrl.scoring import PolicyScorer
from .._repertoire import AbstractRepertoire
from ._checkpoints import list_checkpoints
from ._config import job_of_toml, JobConfig
from ._distributed import (
    across_processes,
    describe_stop,
    is_collective_failure,
    is_writer,
    stop_run,
    stopped_processes,
)
from ._folder import RunFolder
from ._progress import as_progress, Progress
from ._sinks import check_sinks, logged_sinks, OpenedSinks
from ._status import Heartbeat, timestamp, write_status


CONFIG_FILE = "config.toml"


PROGRESS_FILE = "progress.csv"


@dataclasses.dataclass
class RunResult:
    """What a job returns, and what `load_run` reads back from its folder.

    **Fields:**

    - `config`: the job's config. In a run of several processes (`jax.distributed`), a
      `devices` option left at its default means every device of every process.
    - `folder`: the run folder (`None` for a run kept in memory).
    - `progress`: the columns of `progress.csv` (one row per logged step).
    - `state`: the run's final state: a `MAPElitesState` (QD jobs), the PBT population, or the
      IPPO `PPOState`. From `load_run`: the population (PBT) or the latest checkpoint (IPPO);
      `None` for the QD jobs, whose folder keeps the repertoire only.
    - `repertoire`: the final repertoire of the QD jobs (a `MAPElitesRepertoire`; the
      `mome` job's `ParetoRepertoire`).
    - `tables`: the job's other CSV files by name (`hparams`, `actors`), as columns.
    """

    config: JobConfig
    folder: str | None
    progress: dict[str, np.ndarray]
    state: Any = None
    repertoire: AbstractRepertoire | None = None
    tables: dict[str, dict[str, np.ndarray]] = dataclasses.field(default_factory=dict)

    @property
    def last(self) -> dict[str, float]:
        """The last row of `progress`."""
        return {
            k: float(v[-1]) for k, v in self.progress.items() if len(v) and v.dtype.kind in "biuf"
        }


def _field_defaults(config_cls: type[JobConfig]) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(config_cls)}  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class Translator:
    """A seed repository's own config files, read into a job's config keys.

    **Fields:**

    - `read`: `(path, over) -> (values, notes)`: the file's settings in the house's keys over
      `over`, and notes for the user (what stands in for what, what is not used). A file that
      cannot be read, or does not fit, is a `ValueError` naming it.
    - `over`: what a file leaves unsaid (usually the job's paper preset).
    - `help`: the `--config-file` help: which repository, which files.
    """

    read: Callable[[str, Mapping[str, Any]], tuple[dict[str, Any], list[str]]]
    over: Mapping[str, Any]
    help: str

    def __call__(self, path: str | os.PathLike) -> tuple[dict[str, Any], list[str]]:
        """The config keys the file at `path` sets (over `over`), and notes for the user."""
        return self.read(os.fspath(path), self.over)


class Job(abc.ABC):
    """One `eqx-qd run NAME` job: its config class, how to run it, read its folder back, and
    summarise a result in one line. Subclasses are registered in `JOBS`."""

    name: str
    config_cls: type[JobConfig]
    help: str
    description: str = ""
    logs: ClassVar[Mapping[str, str]] = {PROGRESS_FILE: "iteration"}
    """The job's CSV logs and the step column of each; a resumed run cuts them back to the
    checkpoint's step (`jobs._resume`)."""
    step_files: ClassVar[tuple[str, ...]] = ()
    """Patterns of files named after a step (one group), removed past a resumed checkpoint."""
    multi_process: ClassVar[bool] = False
    """Whether the job runs over the devices of several processes (`jax.distributed`)."""
    resume_may_change: ClassVar[tuple[str, ...] | None] = ()
    """Config keys a resumed run may change beside the checkpoint settings (`None`: any)."""

    def best(self, metrics: Mapping[str, Any]) -> float:
        """How good a checkpoint is, from its metrics (`fork_run(..., "best")`)."""
        return float(np.mean(metrics["qd_score"]))

    @property
    def presets(self) -> dict[str, dict[str, Any]]:
        """The config's presets (`JobConfig.PRESETS`): `--preset NAME`."""
        return self.config_cls.PRESETS

    translator: "Translator | None" = None
    """How the job reads a seed repository's own config files (`--config-file`); `None`: it
    reads none."""

    def default_values(self) -> dict[str, Any]:
        """The config's defaults (not validated, so nothing is built: the command's `--help`
        shows them)."""
        return _field_defaults(self.config_cls)

    def preset_values(self, name: str) -> dict[str, Any]:
        """The config's defaults with preset `name` (one of `presets`) over them."""
        return {**_field_defaults(self.config_cls), **self.presets[name]}

    def default_config(self, **values: Any) -> JobConfig:
        """The config the command runs without `--config` (options applied)."""
        return self.config_cls.from_mapping({**self.default_values(), **values})

    @abc.abstractmethod
    def run(
        self,
        config: Any,
        out_dir: str | os.PathLike | None,
        *,
        progress: Progress,
        plots: bool,
        resume: bool,
    ) -> RunResult:
        """Run `config`; write the run folder `out_dir` unless it is `None`, report to
        `progress`, draw the figures when `plots`, continue the run in `out_dir` when
        `resume`."""

    def scorer(self, config: Any) -> PolicyScorer | None:
        """How the job's elites play their environment (`replay`); None (the default): its
        genotypes play none."""
        return None

    @abc.abstractmethod
    def load(self, folder: RunFolder, config: Any) -> RunResult:
        """Read back a run folder this job wrote, given its `config`."""

    @abc.abstractmethod
    def summary(self, result: RunResult) -> str:
        """One line for the command to print at the end."""


JOBS: dict[str, Job] = {}
"""The jobs by command name (filled as the job modules are imported)."""


def register_job(job: Job) -> Job:
    """Add `job` (an instance of a `Job` subclass, usually a `LoopJob`) to `JOBS`: `jobs.run`
    runs its config class, `eqx-qd run NAME` gets a command generated from the config's
    fields, and `load_run`, `resume`, `report` and `replay` read its folders. A plugin module
    registers its jobs when imported (`eqx-qd --plugin MODULE run NAME`). Registering a name
    again replaces the job (a notebook's re-run cell). **Returns:** `job`."""
    if not isinstance(job, Job):
        raise TypeError(f"register_job takes a Job instance, got {type(job).__name__}")
    name = getattr(job, "name", None)
    if not isinstance(name, str) or not name or name.startswith("-") or " " in name:
        raise ValueError(f"a job's name is a command word (like 'my-job'), got {name!r}")
    config_cls = getattr(job, "config_cls", None)
    if not (isinstance(config_cls, type) and issubclass(config_cls, JobConfig)):
        raise TypeError(f"job {name!r}: config_cls must be a JobConfig dataclass")
    if config_cls.JOB != name:
        raise ValueError(
            f"job {name!r}: its config class {config_cls.__name__} says JOB = {config_cls.JOB!r}"
            " (the table its config.toml is written under); they must be equal"
        )
    JOBS[name] = job
    return job


def default_run_folder(job: str, seed: int | None = None) -> str:
    """`runs/<job>-seed<S>-<date>-<time>` (without `seed`: `runs/<job>-<date>-<time>`):
    where the command writes when `--out` is not given."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = job if seed is None else f"{job}-seed{seed}"
    return os.path.join("runs", f"{name}-{stamp}")


def holds_run(folder: str | os.PathLike) -> bool:
    """Whether `folder` already holds a run (its `config.toml`)."""
    return os.path.exists(os.path.join(folder, CONFIG_FILE))


def new_run_folder(out_dir: str | os.PathLike | None, config: JobConfig) -> RunFolder | None:
    """Create the run folder and write `config.toml`; `None` when `out_dir` is `None`.

    A folder that already holds a run is refused, so runs never mix (resume it instead, or
    choose another folder).
    """
    if out_dir is None or not is_writer():  # other processes of a run write nothing
        return None
    path = os.fspath(out_dir)
    if holds_run(path):
        raise ValueError(
            f"{path!r} already holds a run ({CONFIG_FILE}); choose another folder or resume it"
        )
    folder = RunFolder(path)
    folder.write_text(CONFIG_FILE, config.to_toml())
    write_status(folder, "running", job=config.JOB)
    return folder


def read_config(folder: RunFolder) -> JobConfig:
    """The config of a run folder; its table names the job."""
    path = folder.file(CONFIG_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{folder.path!r} is not a run folder: it has no {CONFIG_FILE}")
    job = job_of_toml(path)
    if job not in JOBS:
        raise ValueError(
            f"{path!r} names no known job (tables: one of {sorted(JOBS)}); a plugin's job? "
            "import the module that registers it (eqx-qd --plugin MODULE ...)"
        )
    return JOBS[job].config_cls.from_toml(path)


def load_run(folder: str | os.PathLike) -> RunResult:
    """Read back any run folder written by a job: config, progress, the repertoire of the QD
    jobs, the population or latest checkpoint of the RL jobs, and the other tables."""
    run_folder = RunFolder(folder, create=False)
    config = read_config(run_folder)
    return JOBS[config.JOB].load(run_folder, config)


def run(
    config: JobConfig,
    out_dir: str | os.PathLike | None = None,
    *,
    progress: bool | Progress = True,
    plots: bool = True,
    on_log: Callable[[dict[str, float]], None] | None = None,
    resume: bool = False,
    log: Sequence[str] = (),
) -> RunResult:
    """Run the job `config` belongs to (a `MAPElitesConfig` runs MAP-Elites, ...).

    **Arguments:**

    - `config`: the job's config.
    - `out_dir`: the run folder to write (`None`: keep everything in memory, without
      checkpoints). A folder that already holds a run is refused.
    - `progress`: show a progress bar (or a `Progress` to report to).
    - `plots`: write the PNG figures.
    - `on_log`: called with every row the job logs (a dict of floats), e.g. to plot live.
    - `resume`: continue the run in `out_dir` from its newest checkpoint (`resume` does it
      with the folder's own config; `fork_run` branches from an earlier one).
    - `log`: where else the rows go: `"tensorboard"` (event files in the folder's
      `tensorboard/`) and `"wandb"` (a Weights & Biases run), optional extras
      (`jobs.TensorBoardSink`, `jobs.WandbSink`), flushed with each chunk's rows. A resume
      logs on into the sinks the run logged to, and into `log`.

    **Returns:** the `RunResult`; each job's class docstring says what its folder holds.
    Every folder also holds `status.json` (`run_status`): `running` from its creation,
    `finished` once the job returned, `failed` or `interrupted` (with the error) when it
    raised, so a folder never looks finished when it is not.
    """
    job = JOBS[config.JOB]
    if jax.process_count() > 1 and not job.multi_process:
        several = ", ".join(n for n, j in JOBS.items() if j.multi_process)
        raise ValueError(f"{job.name} runs on one process; {several} run over several")
    config = across_processes(config)  # (every device of every process, unless told)
    # The folder is this run's when it creates it, or when it resumes it; a folder that already
    # held another run is refused untouched. In a multi-process run only process 0 writes.
    ours = (
        out_dir is not None
        and is_writer()
        and (resume or not os.path.exists(os.path.join(out_dir, CONFIG_FILE)))
    )
    if resume and out_dir is not None:  # a resume logs on into the run's own sinks
        log = [*log, *(name for name in logged_sinks(out_dir) if name not in log)]
    check_sinks(log, out_dir)
    sinks = None
    if log and is_writer():  # (process 0 logs for a multi-process run)
        checkpoints = list_checkpoints(out_dir) if resume and out_dir is not None else []
        sinks = OpenedSinks(
            log,
            step=next(iter(job.logs.values())),
            job=job.name,
            folder=out_dir,
            config=dataclasses.asdict(config),
            purge_step=checkpoints[-1].step + 1 if checkpoints else None,
            on_log=on_log,
        )
    if ours and resume and os.path.exists(os.path.join(out_dir, CONFIG_FILE)):  # type: ignore[arg-type]
        write_status(RunFolder(out_dir), "running", job=config.JOB, resumed=timestamp())
    heartbeat = Heartbeat(os.fspath(out_dir)) if out_dir is not None and is_writer() else None
    try:
        logged = (on_log, None) if sinks is None else (sinks, sinks.flush)
        with as_progress(progress, *logged) as reporter:
            result = job.run(config, out_dir, progress=reporter, plots=plots, resume=resume)
    except BaseException as e:
        # Another process of the run stopped: a collective failed here.
        stopped = stopped_processes() if is_collective_failure(e) else []
        if ours and os.path.exists(os.path.join(out_dir, CONFIG_FILE)):  # type: ignore[arg-type]
            status = "failed" if isinstance(e, Exception) and not stopped else "interrupted"
            error = describe_stop(stopped) if stopped else f"{type(e).__name__}: {e}"
            write_status(RunFolder(out_dir), status, error=error)
        if stopped:
            stop_run(stopped)
        raise
    finally:
        if heartbeat is not None:
            heartbeat.close()
        if sinks is not None:
            sinks.close()
    if result.folder is not None and is_writer():
        write_status(RunFolder(result.folder), "finished")
    return result
