"""A run folder's `status.json`: written as the run starts and ends, renewed by a heartbeat while
it runs, and read back with the liveness of the process that wrote it."""

import datetime
import os
import socket
import threading
from typing import Any

from .._machine import machine
from ._checkpoints import list_checkpoints
from ._folder import RunFolder


STATUS_FILE = "status.json"


def timestamp() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


HEARTBEAT_S = 60.0
"""How often a running job stamps `heartbeat` (UTC) in its `status.json`: a folder whose
stamp is older than `STALE_S` reads as `interrupted` from any machine."""


STALE_S = 5 * HEARTBEAT_S


_STATUS_LOCK = threading.Lock()  # the job's thread and its heartbeat both write status.json


def _utc() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class Heartbeat:
    """Stamps `heartbeat` in `status.json` every `HEARTBEAT_S` while the folder says this
    process runs it (a daemon thread: it dies with the process, which is the point)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="eqx-qd heartbeat", daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            folder = RunFolder(self.path, create=False)
            with _STATUS_LOCK:
                try:
                    record = _read_status(folder) if os.path.isdir(self.path) else None
                except ValueError:  # status.json edited by hand: leave it
                    continue
                if (
                    record
                    and record.get("status") == "running"
                    and record.get("pid") == os.getpid()
                ):
                    folder.write_json(STATUS_FILE, {**record, "heartbeat": _utc()})

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def write_status(folder: RunFolder, status: str, **details: Any) -> None:
    """Record in `status.json` where the run stands: `running` (written with the folder and
    on resume, so a killed run never looks finished; with the process that runs it, so
    `run_status` tells a killed one, and the machine it runs on, `str(eqx_qd.internal.machine())`),
    `finished`, `failed` or `interrupted` (with the error). Earlier details are kept."""
    with _STATUS_LOCK:
        previous = _read_status(folder) or {}
        record = {**previous, **details, "status": status, "updated": timestamp()}
        record.setdefault("started", record["updated"])
        if status == "running":
            record.pop("error", None)
            record.update(
                host=socket.gethostname(),
                machine=str(machine()),
                pid=os.getpid(),
                pid_started=_started(os.getpid()),
                heartbeat=_utc(),
            )
        folder.write_json(STATUS_FILE, record)


def _read_status(folder: RunFolder) -> dict[str, Any] | None:
    return dict(folder.read_json(STATUS_FILE)) if folder.exists(STATUS_FILE) else None


def _started(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot; Linux), to tell a reused pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int, started: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process: it exists
        pass
    return started is None or _started(pid) in (None, started)


def run_status(folder: str | os.PathLike) -> dict[str, Any]:
    """The `status.json` of a run folder: `status` (`running`, `finished`, `failed`
    or `interrupted`), `job`, `started`, `updated` and, after a failure, `error`.

    A folder still `running` whose process is gone reads as `interrupted`, its `error`
    saying so: seen from the machine that ran it, the process is asked for; from another
    machine (a shared file system), the folder's `heartbeat` stamp, renewed every
    `HEARTBEAT_S` (60 s) by the running job, is older than `STALE_S` (5 minutes). An
    interrupted folder's `checkpoint` is the step a resume continues from (`None`: from the
    start). A folder written before status files existed reads as `{"status": "unknown"}`."""
    record = _read_status(RunFolder(folder, create=False))
    if record is None:
        return {"status": "unknown"}
    pid, host = record.get("pid"), record.get("host")
    if record.get("status") == "running":
        silent = _silent_for(record.get("heartbeat"))
        if isinstance(pid, int) and host == socket.gethostname():
            if not _alive(pid, record.get("pid_started")):
                record["status"] = "interrupted"
                record["error"] = f"its process (pid {pid}) ended without saying so: killed?"
        elif silent is not None and silent > STALE_S:
            record["status"] = "interrupted"
            record["error"] = (
                f"no heartbeat from its process (pid {pid} on {host}) for {silent / 60:.0f} "
                "minutes: it stopped, or its machine did"
            )
    if record.get("status") == "interrupted":
        checkpoints = list_checkpoints(folder)
        record["checkpoint"] = checkpoints[-1].step if checkpoints else None
        where = (
            f"its newest checkpoint (step {checkpoints[-1].step})"
            if checkpoints
            else "the start (no checkpoint yet)"
        )
        said = record.get("error", "interrupted")
        stop = " " if said.endswith(("?", ".", "!")) else ". "
        record["error"] = f"{said}{stop}Resuming continues from {where}"
    return record


def _silent_for(stamp: Any) -> float | None:
    """Seconds since a UTC `heartbeat` stamp (`None` without a readable one)."""
    try:
        then = datetime.datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    if then.tzinfo is None:
        return None
    return (datetime.datetime.now(datetime.UTC) - then).total_seconds()
