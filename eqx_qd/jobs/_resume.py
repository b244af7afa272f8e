"""Checkpoint and resume for the jobs whose logs are CSV files with a step column (MAP-Elites,
PGA-ME, PBT, ME-PBT), and forks of any run folder.

A run checkpoints its whole state (algorithm and emitter state, replay buffers, keys, counters,
lineage ids) with `Checkpointer` after its logs are written, so the logs always reach at least
as far as the newest checkpoint. Resuming (`start_run` with `resume=True`) loads the newest
checkpoint, cuts every log back to the checkpoint's step (rows written after it would otherwise
appear twice) and hands the job its rows, so a resumed run writes what the uninterrupted run
writes. A folder killed before its first checkpoint resumes from the start.

Branches never mix: continuing from an earlier checkpoint (the best, say) goes through
`fork_run`, which copies the run up to that checkpoint into a new folder and records where it
came from; the source folder is left as it was.
"""

import csv
import dataclasses
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._sharded import place_sharded
from ._checkpoints import Checkpoint, CHECKPOINTS, list_checkpoints, save_checkpoint
from ._config import JobConfig
from ._distributed import is_writer, to_host
from ._folder import RunFolder
from ._job import (
    CONFIG_FILE,
    holds_run,
    Job,
    JOBS,
    new_run_folder,
    PROGRESS_FILE,
    read_config,
    run,
    RunResult,
)
from ._status import STATUS_FILE, write_status


ALWAYS_CHANGEABLE = ("checkpoint_every", "keep_checkpoints")
"""Config keys a resumed run may always change."""


def _typed(text: str) -> int | float | str:
    # A CSV cell as the jobs wrote it: Python writes an int without a point and a float with
    # one (or an exponent, inf, nan), so this gives back the value that wrote the same text.
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def read_log(
    folder: RunFolder, name: str, column: str, upto: int | None = None
) -> tuple[list[str], list[list[Any]]]:
    """The header and rows of the CSV log `name` of the run folder `folder` (cells as int,
    float or str), keeping the rows whose `column` is at most `upto` (all rows without
    it; none when the file is missing). Rewriting the rows with `RunFolder.write_csv` gives
    the same text back."""
    if not folder.exists(name):
        return [], []
    with open(folder.file(name), newline="") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        # A row of another length is a write killed midway (`RunFolder.append_csv`): dropped.
        rows = [[_typed(c) for c in r] for r in reader if len(r) == len(header)]
    if upto is not None and rows:
        if column not in header:
            raise ValueError(f"{folder.file(name)!r} has no column {column!r}")
        j = header.index(column)
        rows = [r for r in rows if r[j] <= upto]
    return header, rows


def _step_files(folder: RunFolder, patterns: Sequence[str]) -> list[tuple[str, int]]:
    out = []
    for name in sorted(os.listdir(folder.path)):
        for pattern in patterns:
            match = re.fullmatch(pattern, name)
            if match:
                out.append((name, int(match.group(1))))
    return out


def _cut_back(
    folder: RunFolder, job: Job, step: int | None, *, write: bool = True
) -> dict[str, tuple[list[str], list[list[Any]]]]:
    """The folder's logs cut back to `step` (`None`: no rows), header and rows by name;
    with `write`, the files too, and the step files past `step` removed."""
    logs = {}
    for name, column in job.logs.items():
        header, rows = read_log(folder, name, column, -1 if step is None else step)
        if header and write:
            folder.write_csv(name, header, rows)
        logs[name] = (header, rows)
    if write:
        for name, file_step in _step_files(folder, job.step_files):
            if step is None or file_step > step:
                os.remove(folder.file(name))
    return logs


@dataclasses.dataclass
class Resumed:
    """Where a resumed run starts: the checkpoint's `state`, its `step` (in the unit of the
    job's logs), its `metrics`, and each log's rows up to the step and header, by file name."""

    state: Any
    step: int
    metrics: dict[str, Any]
    logs: dict[str, list[list[Any]]]
    headers: dict[str, list[str]]

    def rows(self, name: str) -> list[dict[str, Any]]:
        """The rows of log `name` as dicts keyed by its header."""
        header = self.headers[name]
        return [dict(zip(header, r)) for r in self.logs[name]]

    @property
    def seconds(self) -> float:
        """The `wall_s` of the last progress row: the time the run had spent."""
        rows = self.rows(PROGRESS_FILE)
        return float(rows[-1]["wall_s"]) if rows and "wall_s" in rows[-1] else 0.0

    def state_on(self, mesh: Any) -> Any:
        """The checkpoint's state, laid out on `mesh` again (as it is without one)."""
        return self.state if mesh is None else place_sharded(self.state, mesh=mesh)


def check_resumable(job: Job, saved: JobConfig, config: JobConfig, path: str) -> None:
    """A resumed run must be the run in its folder: only the keys the job lists in
    `Job.resume_may_change` (its length) and `ALWAYS_CHANGEABLE` may differ."""
    if job.resume_may_change is None:
        return
    allowed = set(job.resume_may_change) | set(ALWAYS_CHANGEABLE)
    changed = [
        f"{f.name} ({getattr(saved, f.name)!r} in the run, {getattr(config, f.name)!r} now)"
        for f in dataclasses.fields(config)  # type: ignore[arg-type]
        if f.name not in allowed and getattr(saved, f.name) != getattr(config, f.name)
    ]
    if changed:
        may = ", ".join(sorted(allowed))
        raise ValueError(
            f"cannot resume {path!r} with another config: {'; '.join(changed)}; a resumed run "
            f"may change only {may} (fork it into a new folder to change more)"
        )


def start_run(
    job: Job,
    config: JobConfig,
    out_dir: str | os.PathLike | None,
    *,
    resume: bool,
    like: Callable[[], Any],
) -> tuple[RunFolder | None, Resumed | None]:
    """Open the run folder of a fresh run (as `new_run_folder`) or of a resumed one.

    Resuming checks that `config` is the folder's run (`check_resumable`), writes it as the
    folder's `config.toml`, loads the newest checkpoint into the structure `like()` gives
    (shapes are enough: `eqx.filter_eval_shape` of the job's init), and cuts the logs back to
    it. **Returns:** the folder and the `Resumed` start (`None`: start from the beginning,
    which a folder killed before its first checkpoint does too).
    """
    if not resume:
        return new_run_folder(out_dir, config), None
    if out_dir is None:
        raise ValueError(f"resuming a {job.name} run needs its run folder")
    path = os.fspath(out_dir)
    if not holds_run(path):
        raise ValueError(f"nothing to resume: {path!r} holds no run ({CONFIG_FILE})")
    writer = is_writer()  # other processes of a multi-process run only read the folder
    folder = RunFolder(path, create=writer)  # the writer removes the litter of a killed write
    saved = read_config(folder)
    if saved.JOB != config.JOB:
        raise ValueError(f"{path!r} holds a {saved.JOB} run, not a {config.JOB} run")
    check_resumable(job, saved, config, path)
    checkpoints = list_checkpoints(folder)
    if writer:
        folder.write_text(CONFIG_FILE, config.to_toml())
    if not checkpoints:
        if writer:
            _cut_back(folder, job, None)
        return (folder if writer else None), None
    latest = checkpoints[-1]
    ckpts = folder.subfolder(CHECKPOINTS, create=False)
    state = ckpts.read_eqx(os.path.basename(latest.path), like())
    logs = _cut_back(folder, job, latest.step, write=writer)  # others only read
    headers = {name: header for name, (header, _) in logs.items()}
    rows = {name: rows for name, (_, rows) in logs.items()}
    metrics = {k: v.tolist() for k, v in latest.metrics.items()}
    return (folder if writer else None), Resumed(state, latest.step, metrics, rows, headers)


class Checkpointer:
    """Checkpoints a run: `save` writes the state after the first step at or past each multiple
    of `every` counted from `origin` (and when forced: at the end), keeping the newest
    `keep` (`None`: all; with `records`, the pruned ones keep their metrics, as
    `save_checkpoint`). A run resumed at step `resumed_at` counts from there and does not
    write that checkpoint again."""

    def __init__(
        self,
        folder: RunFolder | None,
        every: int,
        keep: int | None,
        resumed_at: int | None = None,
        *,
        origin: int = 0,
        enabled: bool | None = None,
        records: bool = False,
    ):
        self.folder, self.every, self.keep, self.records = folder, every, keep, records
        self._last = origin if resumed_at is None else resumed_at
        self._saved = resumed_at
        # Off for a run kept in memory. On in every process of a multi-process run, where
        # only process 0 has the folder but all of them gather the state.
        self.enabled = folder is not None if enabled is None else enabled

    @classmethod
    def of(
        cls, config: Any, folder: RunFolder | None, resumed: "Resumed | None", **kwargs: Any
    ) -> "Checkpointer":
        """The checkpointer of a job's config (`checkpoint_every`, `keep_checkpoints`),
        counting from where `resumed` left off."""
        at = None if resumed is None else resumed.step
        return cls(folder, config.checkpoint_every, config.keep_checkpoints, at, **kwargs)

    def due(self, step: int, *, force: bool = False) -> bool:
        """Whether `save` at `step` writes a checkpoint (a job writes its logs first)."""
        if not self.enabled or step == self._saved:
            return False
        return force or step // self.every > self._last // self.every

    def save(self, step: int, state: Any, metrics: Mapping[str, Any], *, force: bool) -> bool:
        """Checkpoint `state` at `step` with `metrics` (JSON-able) if one is due, or with
        `force` (a run's end). **Returns:** whether it saved."""
        if not self.due(step, force=force):
            return False
        state = to_host(state)  # every process, in step
        if self.folder is not None:
            save_checkpoint(self.folder, step, state, metrics, keep=self.keep, records=self.records)
        self._last = self._saved = step
        return True


class RunClock:
    """Seconds a run has spent running: from its start, plus what the rows it resumed from
    had (`start`), so a resumed run's `wall_s` column goes on from there."""

    def __init__(self, start: float = 0.0):
        self._origin = time.perf_counter() - float(start)

    def __call__(self) -> float:
        return round(time.perf_counter() - self._origin, 3)


def _choose(checkpoints: list[Checkpoint], which: int | str, best: Callable) -> Checkpoint:
    if which == "latest":
        return checkpoints[-1]
    if which == "best":
        return checkpoints[int(np.nanargmax([best(c.metrics) for c in checkpoints]))]
    if isinstance(which, int) and not isinstance(which, bool):
        for c in checkpoints:
            if c.step == which:
                return c
        steps = ", ".join(str(c.step) for c in checkpoints)
        raise ValueError(f"no checkpoint at step {which}; the run has {steps}")
    raise ValueError(f"which must be 'latest', 'best' or a checkpoint's step, got {which!r}")


_NOT_COPIED = re.compile(r".*\.(png|eqx)$")  # final outputs: the fork writes its own


def fork_run(
    source: str | os.PathLike, dest: str | os.PathLike, which: int | str = "latest"
) -> Checkpoint:
    """Copy the run in `source` up to one of its checkpoints into the new folder `dest`,
    to continue it there with `resume` (`eqx-qd run JOB --resume SOURCE --from WHICH --out
    DEST`): the config, the checkpoints up to the chosen one, the logs cut back to its step,
    and `status.json` recording `forked_from` (folder and step). `source` is not touched.

    `which`: `"latest"`, `"best"` (the job's `Job.best` of the checkpoint's metrics) or a
    checkpoint's step. **Returns:** the chosen `Checkpoint`.
    """
    src = RunFolder(source, create=False)
    config = read_config(src)
    job = JOBS[config.JOB]
    checkpoints = list_checkpoints(src)
    if not checkpoints:
        raise ValueError(f"{src.path!r} has no checkpoint to fork from")
    chosen = _choose(checkpoints, which, job.best)
    path = os.fspath(dest)
    if os.path.exists(path) and os.listdir(path):
        raise ValueError(f"fork destination {path!r} is not empty; choose a new folder")
    if os.path.abspath(path) == os.path.abspath(src.path):
        raise ValueError("a fork needs a folder of its own")
    out = RunFolder(path)
    for name in sorted(os.listdir(src.path)):
        skipped = name in (CONFIG_FILE, STATUS_FILE, CHECKPOINTS) or name in job.logs
        if skipped or name.startswith(".") or _NOT_COPIED.match(name):
            continue
        if os.path.isfile(src.file(name)):
            with open(src.file(name), "rb") as f:
                out.write_bytes(name, f.read())
    for name, column in job.logs.items():
        header, rows = read_log(src, name, column, chosen.step)
        if header:
            out.write_csv(name, header, rows)
    for name, step in _step_files(out, job.step_files):
        if step > chosen.step:
            os.remove(out.file(name))
    ckpts, src_ckpts = out.subfolder(CHECKPOINTS), src.subfolder(CHECKPOINTS, create=False)
    # Every checkpoint up to the chosen one: metrics first, as `save_checkpoint` writes them,
    # those whose state was pruned (an IPPO run's evaluation record) included.
    for suffix in (".json", ".eqx"):
        for name in sorted(os.listdir(src_ckpts.path)):
            if re.fullmatch(r"\d{10}" + re.escape(suffix), name) and int(name[:10]) <= chosen.step:
                with open(src_ckpts.file(name), "rb") as f:
                    ckpts.write_bytes(name, f.read())
    out.write_text(CONFIG_FILE, src.read_text(CONFIG_FILE))
    write_status(
        out,
        "forked",
        job=config.JOB,
        forked_from={"folder": os.path.abspath(src.path), "step": chosen.step},
    )
    return chosen


def resume(
    folder: str | os.PathLike,
    *,
    progress: Any = True,
    plots: bool = True,
    on_log: Callable[[dict[str, float]], None] | None = None,
    log: Sequence[str] = (),
    **changes: Any,
) -> RunResult:
    """Continue the run in `folder` from its newest checkpoint, with its own config and
    `changes` (its length, say `iterations=2000`, or `ALWAYS_CHANGEABLE` keys). A notebook
    stops a run by interrupting it, and continues it with this; a run extended this way equals
    the uninterrupted longer run. `progress`, `plots`, `on_log` and `log` are `run`'s.
    """
    config = read_config(RunFolder(folder, create=False))
    if changes:
        config = dataclasses.replace(config, **changes)
    return run(config, folder, progress=progress, plots=plots, on_log=on_log, resume=True, log=log)
