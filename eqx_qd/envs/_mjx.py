"""What the brax and MuJoCo Playground tasks share about their MuJoCo-MJX models."""

import contextlib

import jax


@contextlib.contextmanager
def models_on_this_process():
    """mujoco-mjx's `put_model` (which brax calls to build every system) places the model on
    `jax.devices()[0]`: in a run over several processes, process 0's device, whose arrays the
    other processes cannot use. While a system is built, `jax.devices()` lists this process's
    own devices first (nothing changes in a one-process run)."""
    if jax.process_count() == 1:
        yield
        return
    every = jax.devices

    def local_first(backend=None):
        devices = every(backend)
        mine = [d for d in devices if d.process_index == jax.process_index()]
        return mine + [d for d in devices if d.process_index != jax.process_index()]

    jax.devices = local_first
    try:
        yield
    finally:
        jax.devices = every
