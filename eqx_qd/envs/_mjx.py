"""What the brax and MuJoCo Playground tasks share about their MuJoCo-MJX models."""

import contextlib
from typing import Any

import jax


def step_traced_once(env: Any) -> Any:
    """`env` (a brax or Playground environment object) with its `step` and `reset` under
    `jax.jit(inline=True)`: a program with several rollouts (a batch scored, an ES's samples,
    the best re-evaluated) then traces the physics once per process, not once per rollout (JAX
    caches the nested `jit`'s trace and inlines its operations, so the compiled program is the
    same). It about halved the tracing of the policy jobs' programs
    (`benchmarks/log/suite-time.md`); a plain nested `jit`, a call XLA inlines later, ran
    3-4% slower."""
    env.step = jax.jit(env.step, inline=True)
    env.reset = jax.jit(env.reset, inline=True)
    return env


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
