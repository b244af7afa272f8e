"""Runs over several processes (`jax.distributed`): joining them, which process writes, and
host copies of arrays that span processes.

Every process runs the same job loop on its own devices; the mesh holds every process's
devices, so the repertoire is replicated on all of them and each process can read it. Only
process 0 writes the run folder. Reading what lies on other processes' devices (an emitter
state split over the mesh, to checkpoint it) is a collective: every process calls `to_host`
at the same point of the loop.
"""

import os
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> None:
    """Join a multi-process run before JAX starts its backends: `coordinator` (`host:port`
    of process 0), `num_processes` and this `process_id`; those left `None` come from the
    environment as JAX reads it (`JAX_COORDINATOR_ADDRESS`, or a SLURM / Open MPI / Kubernetes
    job). On CPUs the processes talk through gloo."""
    for name, value in (("num_processes", num_processes), ("process_id", process_id)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"num_processes must be at least 1, got {num_processes}")
    if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must lie in [0, {num_processes}), got {process_id}")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=num_processes, process_id=process_id
    )


def wants_distributed(coordinator: str | None, num_processes: int | None) -> bool:
    """Whether the options or the environment ask for a multi-process run."""
    return (
        coordinator is not None
        or num_processes is not None
        or ("JAX_COORDINATOR_ADDRESS" in os.environ)
    )


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
