"""What the package picked for this machine where the faster code path depends on it, in words
for a job's log (the command prints it as a run starts)."""

import jax

from .._cma_es import batched_decompositions
from .._compile import compiler_options, set_in_xla_flags
from .._machine import machine, resolve_matmul_dtype
from ..envs._playground import PLAYGROUND_QD_TASKS, task_impl


def machine_choices(*, matmul_auto: bool = False, env: str | None = None) -> str:
    """What the package picked for this machine where the faster code path depends on it, in
    words for a job's log: the XLA CPU fusion generator (`compiler_options`), how CMA-ES
    populations decompose (`batched_decompositions`), for a run that asks for
    `matmul_dtype="auto"` (`matmul_auto`) what it takes (`resolve_matmul_dtype`), and for a
    run on a MuJoCo Playground task (`env`, its registry name) which MJX physics it runs
    (`task_impl`)."""
    picks = []
    if env in PLAYGROUND_QD_TASKS:
        picks.append(f"MJX physics {task_impl(env)!r} for {env}")
    if jax.default_backend() == "cpu":
        if set_in_xla_flags():
            picks.append("CPU fusion emitters as XLA_FLAGS sets them")
        else:  # the installed XLA may no longer know the option
            picks.append(f"{'older' if compiler_options() else 'XLA default'} CPU fusion emitters")
    each = "batched" if batched_decompositions() else "one strategy at a time"
    picks.append(f"CMA eigendecompositions {each}")
    if matmul_auto:
        here = machine()
        why = (
            "AVX-512 BF16 / AMX-BF16" if here.fast_bfloat16 else "bfloat16 products not faster here"
        )
        picks.append(f"matmul_dtype auto takes {resolve_matmul_dtype('auto')} ({why})")
    return ", ".join(picks)
