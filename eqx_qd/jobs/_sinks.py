"""Where a run's logged rows go beside its CSV logs: TensorBoard event files (tensorboardX) and
Weights & Biases. Both are optional extras (`pip install "eqx_qd[tensorboard]"`, `[wandb]`);
`jobs.run(..., log=["tensorboard"])` and `eqx-qd run JOB --log tensorboard` use them.

A sink receives what `on_log` receives, one row (a dict of floats) per logged step, is
flushed with each chunk's rows (before the chunk's checkpoint, as the CSV logs are written), and
is closed when the run ends, however it ends. The row's step column (the first log's, e.g.
`iteration`) is the x axis. A run's sinks leave a trace in its folder (`tensorboard/`,
`wandb_id.txt`), and its resume logs on into them without being told again.
"""

import abc
import importlib.util
import os
import time
from collections.abc import Callable, Mapping, Sequence

from ._folder import RunFolder


class LogSink(abc.ABC):
    """Receives a run's rows (`__call__`, as `on_log`); `flush` makes them durable (a process
    killed after it loses none of them); `close` ends it."""

    @abc.abstractmethod
    def __call__(self, row: Mapping[str, float]) -> None:
        """Log one row."""

    @abc.abstractmethod
    def flush(self) -> None:
        """Write out the rows logged so far."""

    @abc.abstractmethod
    def close(self) -> None:
        """Flush and release what the sink holds."""


class TensorBoardSink(LogSink):
    """Scalars in TensorBoard event files under `logdir` (`tensorboard --logdir RUN`): one
    tag per column, `prefix/column`, against the `step` column.

    Written synchronously with tensorboardX's event writer: `flush` puts every row logged so
    far on disk (tensorboardX's `SummaryWriter` queues rows to a thread whose own `flush` does
    not wait for it, so a killed run lost the rows of its last seconds, all of them in a short
    run). A resumed run logs again the steps after its checkpoint; `purge_step` (the first of
    them) writes TensorBoard's marker that hides what an earlier process logged from there
    on, so each step shows once.
    """

    def __init__(
        self,
        logdir: str | os.PathLike,
        *,
        step: str,
        prefix: str = "",
        purge_step: int | None = None,
    ):
        try:
            from tensorboardX.event_file_writer import EventsWriter
            from tensorboardX.proto import event_pb2, summary_pb2
            from tensorboardX.summary import scalar
        except ImportError:
            raise ImportError(
                "logging to TensorBoard needs tensorboardX: pip install 'eqx_qd[tensorboard]'"
            ) from None
        self.step, self.prefix = step, prefix
        self._event, self._summary, self._scalar = event_pb2, summary_pb2, scalar
        os.makedirs(logdir, exist_ok=True)
        # A suffix of its own: two writers in one second (a resume right after a stop) would
        # otherwise open the same file and the second would empty it.
        suffix = f".{time.time_ns()}"
        self._writer = EventsWriter(os.path.join(os.fspath(logdir), "events"), suffix)
        if purge_step is not None:
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self._write(event_pb2.Event(step=purge_step, session_log=start))

    def _write(self, event) -> None:
        event.wall_time = time.time()
        self._writer.write_event(event)

    def __call__(self, row: Mapping[str, float]) -> None:
        step = int(row[self.step])
        summary = self._summary.Summary()
        for name, value in row.items():
            if name != self.step:
                tag = f"{self.prefix}/{name}" if self.prefix else name
                summary.value.extend(self._scalar(tag, float(value)).value)
        self._write(self._event.Event(step=step, summary=summary))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink(LogSink):
    """A Weights & Biases run: the config, then each row against the `step` column.

    Its files go to the run folder's `wandb/`, and its id to `wandb_id.txt`, so a resumed run
    continues the same W&B run. `project` defaults to `$WANDB_PROJECT`, else `eqx-qd`;
    `mode` to W&B's own (`$WANDB_MODE`: `online`, `offline`, `disabled`); `name` is the
    W&B run's display name (the jobs: the run folder's). W&B keeps the
    first value it got for a step, so the steps a killed run logged past its checkpoint keep
    that run's values (the CSV logs and TensorBoard hold the resumed run's).
    """

    def __init__(
        self,
        folder: RunFolder | None,
        *,
        step: str,
        config: Mapping[str, object],
        name: str | None = None,
        project: str | None = None,
        mode: str | None = None,
    ):
        try:
            import wandb
        except ImportError:
            raise ImportError(
                "logging to Weights & Biases needs wandb: pip install 'eqx_qd[wandb]'"
            ) from None
        run_id = None
        if folder is not None and folder.exists("wandb_id.txt"):
            run_id = folder.read_text("wandb_id.txt").strip()
        self.step = step
        self._run = wandb.init(
            project=project or os.environ.get("WANDB_PROJECT") or "eqx-qd",
            name=name,
            id=run_id,
            resume="allow" if run_id else None,
            dir=None if folder is None else folder.path,
            config=dict(config),
            mode=mode,  # type: ignore[arg-type]
        )
        if folder is not None and run_id is None:
            folder.write_text("wandb_id.txt", self._run.id + "\n")
        self._run.define_metric(step)
        self._run.define_metric("*", step_metric=step)

    def __call__(self, row: Mapping[str, float]) -> None:
        self._run.log({k: float(v) for k, v in row.items()})

    def flush(self) -> None:
        """Nothing to do: `log` hands each row to W&B's own service process at once."""

    def close(self) -> None:
        self._run.finish()


SINKS = {"tensorboard": "tensorboardX", "wandb": "wandb"}
"""The sinks `jobs.run(log=...)` and `--log` name, and the package each needs."""

TRACES = {"tensorboard": "tensorboard", "wandb": "wandb_id.txt"}
"""What each sink leaves in a run folder, by which a resume knows the run logged there."""


def logged_sinks(folder: str | os.PathLike) -> list[str]:
    """The sinks the run in `folder` logged to, from their traces (`TRACES`): a resume logs
    on into them."""
    return [name for name, trace in TRACES.items() if os.path.exists(os.path.join(folder, trace))]


def check_sinks(names: Sequence[str], out_dir: str | os.PathLike | None) -> None:
    """Refuse, before anything runs, a sink that is unknown, whose package is missing, or
    that needs a run folder the run does not have."""
    for name in names:
        if name not in SINKS:
            raise ValueError(f"log: unknown sink {name!r}; known: {', '.join(SINKS)}")
        if importlib.util.find_spec(SINKS[name]) is None:
            raise ValueError(
                f"log: {name} needs the package {SINKS[name]}: pip install 'eqx_qd[{name}]'"
            )
    if "tensorboard" in names and out_dir is None:
        raise ValueError("log: tensorboard writes into the run folder; give the run one")


class OpenedSinks:
    """The sinks `names` of one run, opened at its first row (once its folder exists: a
    config refused at the start leaves no folder), each called with every row after
    `on_log`. `purge_step`: the first step a resumed run logs again."""

    def __init__(
        self,
        names: Sequence[str],
        *,
        step: str,
        job: str,
        folder: str | os.PathLike | None,
        config: Mapping[str, object],
        purge_step: int | None,
        on_log: Callable[[dict[str, float]], None] | None = None,
    ):
        self.names, self.step, self.job, self.folder = list(names), step, job, folder
        self.config, self.purge_step, self.on_log = config, purge_step, on_log
        self._sinks: list[LogSink] | None = None

    def _open(self) -> list[LogSink]:
        folder = None if self.folder is None else RunFolder(self.folder)
        sinks: list[LogSink] = []
        for name in self.names:
            if name == "tensorboard":
                logdir = os.path.join(os.fspath(self.folder), "tensorboard")  # type: ignore[arg-type]
                sinks.append(
                    TensorBoardSink(
                        logdir, step=self.step, prefix=self.job, purge_step=self.purge_step
                    )
                )
            else:
                name_ = None if folder is None else os.path.basename(os.path.abspath(folder.path))
                sinks.append(
                    WandbSink(
                        folder, step=self.step, config={"job": self.job, **self.config}, name=name_
                    )
                )
        return sinks

    def __call__(self, row: dict[str, float]) -> None:
        if self.on_log is not None:
            self.on_log(row)
        if self._sinks is None:
            self._sinks = self._open()
        for sink in self._sinks:
            sink(row)

    def flush(self) -> None:
        for sink in self._sinks or []:
            sink.flush()

    def close(self) -> None:
        for sink in self._sinks or []:
            sink.close()
        self._sinks = None
