"""The one driver every job runs on: start or resume, a clock, chunks of work, rows appended to
the logs, checkpoints, the final outputs.

A job subclasses `LoopJob` and writes what is its own: how to build the run (`plan`), its
fresh start (`start`), one chunk of work (`advance`), and its final outputs (`finish`). The
driver does the rest the same way for every job, a user's included:

- **Start or resume.** A fresh run creates its folder (`config.toml`, `status.json`); a
  resumed one loads the newest checkpoint and cuts every log back to its step.
- **One flush policy.** After each chunk the chunk's rows are appended to the logs (each a CSV
  file with a step column); nothing is rewritten, so a log costs what it adds. The logs reach
  at least the newest checkpoint, which is written after them.
- **Checkpoints** every `checkpoint_every` steps and at the end (`Checkpointer`), keys derived
  from the seed and the step (the job's), so a resumed run equals an uninterrupted one.
"""

import abc
import os
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

from ._config import JobConfig
from ._folder import RunFolder
from ._job import Job, RunResult
from ._progress import Progress
from ._resume import Checkpointer, Resumed, RunClock, start_run


Rows = dict[str, list[list[Any]]]
"""New rows of a job's logs, by file name: each row a list of values in the header's order."""

PlanT = TypeVar("PlanT")
"""What a job's `plan` builds: the run's algorithm, environment, keys, mesh, pools."""
StateT = TypeVar("StateT")
"""A job's state between chunks, what its checkpoints hold."""


class Chunk(typing.NamedTuple):
    """What one chunk of work gives the driver: the `state` after it, the `step` it reached
    (in the unit of the logs' step columns), the new `rows` of each log, and what a
    checkpoint at this step records as its `metrics` (JSON-able; `None`: the last progress
    row)."""

    state: Any  # the job's StateT
    step: int
    rows: Rows
    metrics: dict[str, Any] | None = None


class LoopJob(Job, Generic[PlanT, StateT]):
    """A job run by the one driver (module docstring), typed by what its `plan` builds
    (`PlanT`) and the state it carries between chunks (`StateT`): implement `plan`,
    `headers`, `like`, `total`, `start`, `advance` and `finish` (and `load`, `summary` of
    `Job`); override the others where the job differs, `close` to release what a plan holds.
    The registered instance keeps nothing of a run: what a run needs is in its plan. Register
    an instance with `jobs.register_job`.

    `logs` (a `Job` attribute) names each log and its step column; the first is the progress
    log, whose rows go to `progress.log` (the bar, `on_log`) and whose last row is a
    checkpoint's metrics.
    """

    unit: ClassVar[str] = "it"
    """The progress bar's unit."""
    checkpoint_at_start: ClassVar[bool] = False
    """Whether the fresh start is checkpointed (PGA-ME's costly random initialisation is)."""
    step_offset: ClassVar[int] = 0
    """How the logs' step column and the checkpoints number a step, less the steps done: PBT
    numbers its rounds from 0, so the rows and checkpoint after `n` rounds say `n - 1`."""

    # -- what every loop job writes ---------------------------------------------------------

    @abc.abstractmethod
    def plan(self, config: JobConfig) -> PlanT:
        """Build what the run needs (algorithm, environment, keys, mesh): any object the other
        methods receive as `plan`. Nothing is written yet: a config that fails here leaves no
        folder."""

    @abc.abstractmethod
    def headers(self, plan: PlanT) -> dict[str, list[str]]:
        """The header of each log, by file name (the names of `logs`)."""

    @abc.abstractmethod
    def like(self, plan: PlanT) -> StateT:
        """The state's structure and shapes, to read a checkpoint into
        (`eqx.filter_eval_shape` of the job's start is enough)."""

    @abc.abstractmethod
    def total(self, config: JobConfig) -> int:
        """The run's length, in steps of the logs' step column."""

    @abc.abstractmethod
    def start(self, plan: PlanT, clock: RunClock) -> Chunk:
        """The fresh run built from `plan` (what `plan()` returned): its state, its step
        and its first rows; `clock()` gives the seconds spent, for a `wall_s` column."""

    @abc.abstractmethod
    def advance(self, plan: PlanT, state: StateT, step: int, clock: RunClock) -> Chunk:
        """One chunk of work on `state` from `step` (at most to `total`), with the `plan`
        and the run's `clock`: the state, step and rows after it."""

    @abc.abstractmethod
    def finish(
        self, plan: PlanT, folder: RunFolder | None, state: StateT, logs: Rows, plots: bool
    ) -> RunResult:
        """The run's outputs (repertoire, figures when `plots`, ...) written to `folder`
        (`None` for a run kept in memory) and its `RunResult`, from the `plan`, the final
        `state` and every row of the `logs` (the resumed run's earlier rows included)."""

    # -- what a job may override ------------------------------------------------------------

    def resumed_state(self, plan: PlanT, resumed: Resumed) -> StateT:
        """The state the checkpoint `resumed` resumes, for the `plan` (default: as read). It
        may amend the rows of `resumed.logs` (PBT completes a last round lengthened past); the
        driver writes the logs it changed."""
        return resumed.state

    def checkpointer(
        self, config: JobConfig, folder: RunFolder | None, resumed: Resumed | None, enabled: bool
    ) -> Checkpointer:
        """When the run checkpoints into `folder` (default: every `config.checkpoint_every`
        steps and at the end, keeping `config.keep_checkpoints`), counting from `resumed`
        (`None`: a fresh run); `enabled` is false for a run kept in memory."""
        return Checkpointer.of(config, folder, resumed, origin=self.step_offset, enabled=enabled)

    def opened(self, plan: PlanT, folder: RunFolder) -> None:
        """Called once the run `folder` is open, fresh or resumed, before any work, with the
        `plan`: files written once (PGA-ME's `centroids.npy`)."""

    def after_chunk(
        self, plan: PlanT, folder: RunFolder | None, state: StateT, before: int, step: int
    ) -> None:
        """Called after each chunk's rows are written to `folder` (`None` in memory), with
        the `plan` and the `state` after the chunk, which went from step `before` to `step`
        (PGA-ME writes its archive snapshots)."""

    def close(self, plan: PlanT) -> None:
        """Called once the run with this `plan` ends, however it ends (finished, failed,
        interrupted): release what the plan holds (the external job's process pool or
        cluster). Nothing by default."""

    def caption(self, config: JobConfig, folder: RunFolder) -> str:
        """The figures' title: the job, what `config` ran on, the run `folder`'s name."""
        on = getattr(config, "task", None) or getattr(config, "env", None)
        run = os.path.basename(os.path.abspath(folder.path))
        return " · ".join(str(p) for p in (self.name, on, run) if p)

    def bar(self, row: Mapping[str, Any]) -> dict[str, float]:
        """What the progress bar shows of the last progress row."""
        shown = {"qd": "qd_score", "max": "max_fitness"}
        return {k: row[c] for k, c in shown.items() if c in row}

    # -- the driver -------------------------------------------------------------------------

    def run(self, config, out_dir, *, progress: Progress, plots: bool, resume: bool) -> RunResult:
        plan = self.plan(config)
        try:
            return self._drive(plan, config, out_dir, progress=progress, plots=plots, resume=resume)
        finally:  # (what the plan holds ends with the run, whatever ends it)
            self.close(plan)

    def _drive(
        self, plan: PlanT, config, out_dir, *, progress: Progress, plots: bool, resume: bool
    ) -> RunResult:
        folder, resumed = start_run(
            self, config, out_dir, resume=resume, like=lambda: self.like(plan)
        )
        headers = self.headers(plan)
        if folder is not None:
            folder.caption = self.caption(config, folder)
            self.opened(plan, folder)
        progress_log = next(iter(self.logs))
        clock = RunClock(0.0 if resumed is None else resumed.seconds)  # over resumes
        logs: Rows = {name: [] for name in self.logs}

        def record(rows: Rows) -> None:
            for name, new in rows.items():
                logs[name].extend(new)
                if folder is not None and (new or not folder.exists(name)):
                    folder.append_csv(name, headers[name], new)
            for row in rows.get(progress_log, []):
                progress.log(dict(zip(headers[progress_log], row)))
            progress.flush()  # the sinks, as the CSV logs, hold what a checkpoint covers

        def checkpoint(chunk: Chunk, force: bool) -> None:
            metrics = chunk.metrics
            if metrics is None:
                metrics = dict(zip(headers[progress_log], logs[progress_log][-1]))
            checkpoints.save(chunk.step + self.step_offset, chunk.state, metrics, force=force)

        total = self.total(config)
        checkpoints = self.checkpointer(config, folder, resumed, out_dir is not None)
        if resumed is None:
            chunk = self.start(plan, clock)
            record(chunk.rows)
            if self.checkpoint_at_start:
                checkpoint(chunk, force=True)
        else:  # (a resumed start is its checkpoint: nothing is saved)
            read = {name: [list(r) for r in resumed.logs[name]] for name in self.logs}
            state = self.resumed_state(plan, resumed)
            chunk = Chunk(state, resumed.step - self.step_offset, {})
            for name in self.logs:
                logs[name] = list(resumed.logs[name])
                if folder is not None and logs[name] != read[name]:
                    folder.write_csv(name, headers[name], logs[name])
        progress.start(total, self.name, unit=self.unit, initial=min(chunk.step, total))
        while chunk.step < total:
            before = chunk.step
            chunk = self.advance(plan, chunk.state, before, clock)
            record(chunk.rows)
            self.after_chunk(plan, folder, chunk.state, before, chunk.step)
            last = dict(zip(headers[progress_log], logs[progress_log][-1]))
            progress.advance(chunk.step - before, **self.bar(last))
            checkpoint(chunk, force=chunk.step >= total)
        return self.finish(plan, folder, chunk.state, logs, plots)
