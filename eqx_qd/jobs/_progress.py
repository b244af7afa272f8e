"""Progress reporting for jobs: a bar (tqdm: a widget in notebooks, a line in terminals), a
callback per logged row, both, or neither. One object per run: no module-level state."""

from collections.abc import Callable, Mapping
from typing import Any


LogCallback = Callable[[dict[str, float]], None]


class Progress:
    """What a running job reports to: `start` once, `advance` as work is done, `log` for
    each row the job records, `flush` once a chunk's rows are written (before its
    checkpoint), `close` at the end (also on errors: use it as a context).

    **Arguments:**

    - `show`: draw a progress bar.
    - `on_log`: called with each logged row (a dict of floats), e.g. to plot live in a notebook.
    - `on_flush`: called by `flush`, to make the rows logged so far durable (the run's sinks).
    """

    def __init__(
        self,
        show: bool = True,
        on_log: LogCallback | None = None,
        on_flush: Callable[[], None] | None = None,
    ):
        self.show = show
        self.on_log = on_log
        self.on_flush = on_flush
        self._bar: Any = None

    def start(self, total: int, desc: str, unit: str = "it", initial: int = 0) -> None:
        """Open the bar: `total` units of `unit`, labelled `desc`, `initial` done."""
        if self.show:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, initial=initial)

    def advance(self, n: int, **postfix: Any) -> None:
        """`n` more units done; `postfix` values are shown beside the bar."""
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix({k: f"{v:.4g}" for k, v in postfix.items()}, refresh=False)
            self._bar.update(n)

    def log(self, row: Mapping[str, Any]) -> None:
        """Pass one logged row to `on_log` (as floats)."""
        if self.on_log is not None:
            self.on_log({k: float(v) for k, v in row.items()})

    def flush(self) -> None:
        """Make the rows logged so far durable (`on_flush`)."""
        if self.on_flush is not None:
            self.on_flush()

    def close(self) -> None:
        """Close the bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def as_progress(
    progress: "bool | Progress",
    on_log: LogCallback | None = None,
    on_flush: Callable[[], None] | None = None,
) -> Progress:
    """A `Progress` from a job's `progress` argument (a bool, or a `Progress` to reuse)."""
    if isinstance(progress, Progress):
        if on_log is not None:
            progress.on_log = on_log
        if on_flush is not None:
            progress.on_flush = on_flush
        return progress
    return Progress(show=bool(progress), on_log=on_log, on_flush=on_flush)
