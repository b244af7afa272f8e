"""Runs over several processes (`jax.distributed`): joining them, which process writes, and
host copies of arrays that span processes.

Every process runs the same job loop on its own devices; the mesh holds every process's
devices, so the repertoire is replicated on all of them and each process can read it. Only
process 0 writes the run folder. Reading what lies on other processes' devices (an emitter
state split over the mesh, to checkpoint it) is a collective: every process calls `to_host`
at the same point of the loop.

When one process stops (killed, out of memory, its host lost), the others cannot go on: a
collective fails at once (or the coordination service stops hearing the process's heartbeat
within `heartbeat_timeout` seconds, or process 0, which holds that service, cannot be reached).
Each survivor then finds which processes stopped, says so in one line with the command that
resumes the run, and exits with status 75 (`EX_TEMPFAIL`: try again), where JAX alone would end
it with a C++ abort naming nothing.
"""

import ctypes
import dataclasses
import os
import signal
import socket
import sys
import threading
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._machine import most_dividing as most_dividing, usable_cores as usable_cores


EXIT_PEER_STOPPED = os.EX_TEMPFAIL if hasattr(os, "EX_TEMPFAIL") else 75
"""The exit status of a process whose run stopped because another process of it stopped."""

_WATCH: dict[str, Any] = {"hint": None, "timeout": 30, "handler": None}
_STOPPING = threading.Lock()


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    heartbeat_timeout: int = 30,
) -> None:
    """Join a multi-process run before JAX starts its backends: `coordinator` (`host:port`
    of process 0), `num_processes` and this `process_id`; those left `None` come from the
    environment as JAX reads it (`JAX_COORDINATOR_ADDRESS`, or a SLURM / Open MPI / Kubernetes
    job). On CPUs the processes talk through gloo. A process silent for `heartbeat_timeout`
    seconds counts as stopped, and this process then stops as the module says (JAX's own
    default waits 100 s)."""
    for name, value in (
        ("num_processes", num_processes),
        ("process_id", process_id),
        ("heartbeat_timeout", heartbeat_timeout),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"num_processes must be at least 1, got {num_processes}")
    if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must lie in [0, {num_processes}), got {process_id}")
    if heartbeat_timeout < 1:
        raise ValueError(f"heartbeat_timeout must be at least 1 second, got {heartbeat_timeout}")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        heartbeat_timeout_seconds=heartbeat_timeout,
    )
    _WATCH["timeout"] = heartbeat_timeout
    _guard_aborts()


def set_resume_hint(text: str | None) -> None:
    """What a survivor's last line says resumes the run (the command line sets its own
    command; `None`: the Python form)."""
    _WATCH["hint"] = text


def _guard_aborts() -> None:
    """Catch the C++ abort by which JAX's coordination client ends a process when the
    service reports another process's failure, or cannot be reached: a C-level SIGABRT
    handler (Python's own handlers run too late, after `abort` has ended the process) that
    names the stopped process and exits, or aborts as before when no process stopped."""
    if _WATCH["handler"] is not None or os.name != "posix":
        return
    try:
        libc = ctypes.CDLL(None)
    except OSError:  # no C library to ask: JAX's own abort stays
        return
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    handler = ctypes.CFUNCTYPE(None, ctypes.c_int)(_on_abort)
    _WATCH["handler"] = handler  # kept alive as long as the process
    libc.signal(signal.SIGABRT, ctypes.cast(handler, ctypes.c_void_p))


def _on_abort(signum: int) -> None:
    # On the aborting C++ thread, maybe inside the coordination client: ask it briefly, from
    # another thread, and tell what cannot be known as such.
    stopped = stopped_processes(wait=5)
    if stopped != []:
        stop_run(stopped)
    signal.signal(signal.SIGABRT, signal.SIG_DFL)  # every process lives: an abort of our own
    os.abort()


def _coordination_state() -> Any:
    """JAX's private state of `jax.distributed` (its coordinator address and client), or
    `None` where a JAX release no longer has it there: no public API tells the live processes
    (`docs/design.md`). The package's one import from `jax._src`."""
    try:
        from jax._src import distributed
    except ImportError:
        return None
    return getattr(distributed, "global_state", None)


def _coordinator_reachable() -> bool:
    state = _coordination_state()
    address = getattr(state, "coordinator_address", None)
    if not address:
        return True
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5):
            return True
    except (OSError, ValueError):
        return False


def stopped_processes(*, wait: float | None = None) -> list[int] | None:
    """The processes of this run that stopped: process 0 when its coordination service
    cannot be reached, else those the service no longer hears (it answers once every survivor
    asks, within about the heartbeat timeout; `wait` seconds at most, by default that timeout
    and 10 s). Empty when every process lives (or in a run of one process); `None` when the
    service gave no answer in time after a failure (or JAX no longer has its private
    coordination state where this reads it: `docs/design.md`)."""
    state = _coordination_state()
    if state is None:
        return None
    count, me = jax.process_count(), jax.process_index()
    client = getattr(state, "client", None)
    if count == 1 or client is None:
        return []
    if me != 0 and not _coordinator_reachable():
        return [0]
    found: list[Any] = []

    def live() -> None:
        try:
            found.append(client.get_live_nodes(list(range(count))))
        except Exception as e:  # the service went away while we asked
            found.append(e)

    try:
        asking = threading.Thread(target=live, daemon=True)
        asking.start()
        asking.join(_WATCH["timeout"] + 10 if wait is None else wait)
    except RuntimeError:  # no new thread (the interpreter is finishing)
        return None
    if not found:  # no answer: maybe an error of this process's own (the others never ask)
        return [] if wait is None else None
    if isinstance(found[0], Exception):
        return [] if me == 0 else [0]
    return sorted(set(range(count)) - set(found[0]))


def is_collective_failure(error: BaseException) -> bool:
    """Whether `error` may come from a collective that another process left: an error of
    XLA's runtime (equinox's `filter_jit` re-raises those as `ValueError`), in a run of
    several processes."""
    if jax.process_count() == 1:
        return False
    if isinstance(error, jax.errors.JaxRuntimeError):
        return True
    codes = ("UNKNOWN:", "UNAVAILABLE:", "INTERNAL:", "ABORTED:", "DEADLINE_EXCEEDED:")
    return isinstance(error, (ValueError, RuntimeError)) and str(error).startswith(codes)


def describe_stop(stopped: list[int] | None) -> str:
    """One line: which processes stopped, and that this one stops too."""
    count, me = jax.process_count(), jax.process_index()
    if not stopped:
        which = f"a process of the {count} stopped, or this one failed (JAX's message above says)"
    else:
        names = ", ".join(map(str, stopped))
        which = f"process{'es' if len(stopped) > 1 else ''} {names} of {count}"
        which += " (the coordinator) stopped or cannot be reached" if stopped == [0] else " stopped"
    return f"{which}; process {me} stops too"


def stop_run(stopped: list[int] | None) -> NoReturn:
    """Say in one line on stderr which processes stopped and how the run resumes, then end
    this process with `EXIT_PEER_STOPPED` (no cleanup: JAX's shutdown would wait for the
    stopped process, then abort)."""
    if _STOPPING.acquire(timeout=_WATCH["timeout"] + 20):  # one survivor thread speaks
        hint = _WATCH["hint"] or (
            "run the same job again with resume=True on every process: it continues from its "
            "last checkpoint"
        )
        sys.stdout.flush()
        sys.stderr.write(f"eqx-qd: error: {describe_stop(stopped)}. To resume, {hint}\n")
        sys.stderr.flush()
    os._exit(EXIT_PEER_STOPPED)


def wants_distributed(coordinator: str | None, num_processes: int | None) -> bool:
    """Whether the options or the environment ask for a multi-process run."""
    return (
        coordinator is not None
        or num_processes is not None
        or ("JAX_COORDINATOR_ADDRESS" in os.environ)
    )


def process_count() -> int:
    """The processes of this run (1 unless it joined a multi-process run)."""
    return jax.process_count()


def is_writer() -> bool:
    """Whether this process writes the run folder (process 0)."""
    return jax.process_index() == 0


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _host(x: Any) -> Any:
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return x
    from jax.experimental import multihost_utils

    if _is_key(x):
        data = multihost_utils.process_allgather(jr.key_data(x), tiled=True)
        return jr.wrap_key_data(jnp.asarray(data), impl=jr.key_impl(x))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def to_host(tree: Any) -> Any:
    """`tree` with every array that spans processes gathered whole onto this process
    (replicated arrays give their value, split ones their concatenation along the split
    axis); other leaves as they are. A collective when more than one process runs: every
    process calls it at the same point, with the same structure."""
    if jax.process_count() == 1:
        return tree
    return jax.tree.map(_host, tree)


def population_devices(requested: int | None, population_size: int) -> int:
    """The device count a population job splits its members over: `requested` when given;
    else (`None`, automatic) every device of a multi-process run, or on one process the most
    devices, at most one per core on a CPU, that divide `population_size`.

    Why one per core on a CPU: XLA's CPU runtime runs one program's operations on a thread
    pool, and a training step's chains of small products leave those threads idle part of
    the time, time a busy machine's other processes take; one program per core keeps each
    core on its own members (`benchmarks/log/epyc-family26-model2.md`, "SAC on this kind")."""
    if requested is not None:
        return requested
    available = jax.device_count()
    if jax.process_count() > 1:
        if population_size % available:
            raise ValueError(
                f"population_size ({population_size}) must be a multiple of the run's "
                f"{available} devices: a run of several processes splits the members over "
                "every process's devices"
            )
        return available
    if jax.default_backend() == "cpu":
        available = min(available, usable_cores())
    return most_dividing(population_size, available)


def across_processes(config: Any) -> Any:
    """`config` for a run of several processes: a `devices` option left at its default taken
    as every device of every process (`jax.device_count()`), since such a run spans them all
    and any other count would be refused; unchanged on one process, or where the option was
    given."""
    if jax.process_count() == 1:
        return config
    field = next((f for f in dataclasses.fields(config) if f.name == "devices"), None)
    if field is None or field.default is None or config.devices != field.default:
        return config
    return dataclasses.replace(config, devices=jax.device_count())


def job_mesh(devices: int) -> Any:
    """The mesh of a job's `devices` option: `None` for one device; across processes it
    must hold every process's devices (`jax.device_count()`)."""
    from .._sharded import device_mesh

    if jax.process_count() > 1 and devices != jax.device_count():
        raise ValueError(
            f"devices must be {jax.device_count()} in this run of {jax.process_count()} "
            f"processes (every process's devices), got {devices}"
        )
    return device_mesh(devices) if devices > 1 else None
