"""Launching: what a process settles before JAX starts its backends (its host devices, the
processes it runs with, the compile cache) and the plugins that register jobs. The `eqx-qd`
command parses its options into these calls and reports their errors; a Python script calls
them the same way, then `jobs.run`.
"""

import dataclasses
import importlib
import os
import sys
from collections.abc import Sequence
from importlib import metadata

import jax

from .._machine import host_devices_per_core
from ._compile_cache import default_compile_cache, use_compile_cache
from ._distributed import initialize, wants_distributed
from ._job import JOBS


# What a scheduler's job says its process count is, as jax.distributed reads it.
_SCHEDULER_COUNTS = ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")


@dataclasses.dataclass(frozen=True)
class Launch:
    """How this process was launched (`launch`).

    **Fields:**

    - `devices`: the device count asked for (`None`: the job chooses).
    - `automatic`: whether one host device per usable core was made for a job that picks its
      device count itself (one process, no count given).
    - `processes`: the processes of the run as far as known before joining (`None`: taken
      from the environment when joining; 1: one process).
    - `compile_cache`: the compile cache folder in use, or `None`.
    """

    devices: int | None
    automatic: bool
    processes: int | None
    compile_cache: str | None


def load_plugins(modules: Sequence[str] = ()) -> None:
    """Load the installed `eqx_qd.plugins` entry points, then import `modules` (a module in
    the current folder is found, after the installed packages). A plugin registers its jobs,
    agents, environments... when imported, and computes nothing then, so it may load before
    `launch`. A plugin that fails to import is a `ValueError` naming it."""
    for entry in metadata.entry_points(group="eqx_qd.plugins"):
        try:
            entry.load()
        except Exception as e:  # a broken plugin names itself, not a traceback
            raise ValueError(
                f"plugin entry point {entry.name!r} ({entry.value}) failed to load: {e}"
            ) from e
    if modules and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:
            raise ValueError(f"plugin {name}: cannot import it: {type(e).__name__}: {e}") from e


def requested_processes(num_processes: int | None = None, distributed: bool = False) -> int | None:
    """The processes of the run asked for: `num_processes`, or with `distributed` the
    scheduler's count from the environment (`SLURM_NTASKS`, `OMPI_COMM_WORLD_SIZE`); `None`
    when unknown before joining."""
    if num_processes is not None:
        return num_processes
    if distributed:
        for name in _SCHEDULER_COUNTS:
            value = os.environ.get(name, "")
            if value.isdigit() and int(value) > 0:
                return int(value)
    return None


def launch(
    job: str | None = None,
    *,
    devices: int | None = None,
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    distributed: bool = False,
    heartbeat_timeout: int = 30,
    compile_cache: str | os.PathLike | bool = True,
) -> Launch:
    """Settle this process before JAX starts its backends, as `eqx-qd run` does: check the
    layout, make the host devices, join a multi-process run, turn the compile cache on. Call
    it once, first; then build the config and call `jobs.run` (on every process of a
    multi-process run, with the same arguments but `process_id`).

    **Arguments:**

    - `job`: the registered job to launch (its name: its layout is checked); `None` checks
      nothing job-specific.
    - `devices`: the devices of the run, every process's together (the job config's
      `devices`): on a CPU, this process makes its share as host devices. `None` on one
      process, for a job that picks its count: one host device per usable core.
    - `coordinator`, `num_processes`, `process_id`: join a run of several processes
      (`jax.distributed`: `host:port` of process 0, the count, this process's id); those left
      `None` come from the environment with `distributed` (SLURM, Open MPI,
      `JAX_COORDINATOR_ADDRESS`).
    - `heartbeat_timeout`: seconds of silence after which a process counts as stopped.
    - `compile_cache`: `True` (the default folder, `default_compile_cache()`, unless
      `$EQX_QD_COMPILE_CACHE` is `off`), a folder, or `False` for none.

    **Returns:** the `Launch`. A layout the processes cannot run (a one-process job, a device
    count they cannot share, a `process_id` without a run to join) is a `ValueError` naming
    the argument, raised before any process joins.

    ```python
    # run.py, once per process: python run.py 0 & python run.py 1
    import sys
    from eqx_qd import jobs

    where = dict(coordinator="127.0.0.1:4321", num_processes=2, process_id=int(sys.argv[1]))
    jobs.launch("map-elites", devices=4, **where)
    jobs.run(jobs.MAPElitesConfig(iterations=100), "runs/mp")  # (devices: all 4)
    ```
    """
    known = None if job is None else _job(job)
    multi = distributed or wants_distributed(coordinator, num_processes)
    if not multi and process_id is not None:
        raise ValueError(
            "process_id needs a multi-process run to join (num_processes and a coordinator)"
        )
    processes = requested_processes(num_processes, distributed) if multi else 1
    if multi and known is not None and not known.multi_process:
        several = ", ".join(n for n, j in JOBS.items() if j.multi_process)
        raise ValueError(f"{known.name} runs in one process; the multi-process jobs are {several}")
    if multi and devices is not None and processes is not None and devices % processes:
        by = (
            f"num_processes {processes}"
            if num_processes is not None
            else f"the scheduler's {processes} processes"
        )
        raise ValueError(
            f"devices {devices} cannot be shared by {by}: a run of several processes spans "
            "every process's devices, as many on each"
        )
    if devices is not None and devices > (processes or 1):
        _host_devices(-(-devices // (processes or 1)))
    automatic = devices is None and not multi and _picks_devices(known)
    if automatic:
        try:
            host_devices_per_core()
        except RuntimeError:  # backends already running (a notebook): use what is there
            pass
    if multi:
        try:
            initialize(coordinator, num_processes, process_id, heartbeat_timeout=heartbeat_timeout)
        except (ValueError, RuntimeError) as e:
            raise ValueError(f"cannot join the multi-process run: {e}") from e
    if compile_cache is True:
        cache = default_compile_cache()
    elif compile_cache is False:
        cache = None
    else:
        cache = os.fspath(compile_cache)
    if cache is not None:
        use_compile_cache(cache)
    return Launch(devices, automatic, processes, cache)


def _job(name: str):
    if name not in JOBS:
        raise ValueError(f"job {name!r} is not registered; the jobs are {', '.join(JOBS)}")
    return JOBS[name]


def _picks_devices(job) -> bool:
    """Whether `job` picks its device count itself (its config's `devices` defaults to
    `None`)."""
    if job is None:
        return False
    fields = {f.name: f for f in dataclasses.fields(job.config_cls)}
    return "devices" in fields and fields["devices"].default is None


def _host_devices(count: int) -> None:
    """`count` host devices on this process when the CPU is the platform (before JAX starts
    its backends); on a GPU machine this changes nothing."""
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # backends already running (a notebook): use what is there
        pass
