"""How eqx_qd compiles its programs: the one place that says which XLA options each program
gets, and `jit`, the decorator of every jitted entry point of the package.

XLA's CPU backend has two code generators for its fusions. On the package's programs the older
one (`compiler_options`) compiles brax rollouts about twice as fast and runs them faster, and
compiles the MAP-Elites loop faster in less memory for the same results bit for bit; the newer
one (XLA's default) runs the PPO training programs faster. Measurements:
`benchmarks/log/compare-and-tuning.md`, "XLA's CPU fusion emitters". So:

- every jitted entry point compiles with `compiler_options` (the older generator), except
- `PPO.train` / `IPPO.train` (`rl/_ppo.py`) and `train_population` of a `PPO` or `IPPO`
  population (`rl/_pbt.py`), which compile with XLA's defaults.

Options only reach an outermost `jax.jit` (JAX refuses them on a nested one), so a program
called inside another transformation (an argument is a tracer) runs as part of the outer
program, with its options; so does a call inside an outer `jit` on closed-over constants,
where JAX refuses them. Your own programs compile as you jit them (`eqx.filter_jit`);
`XLA_FLAGS=--xla_cpu_use_fusion_emitters=false` gives a whole process the older generator.
"""

import functools
import os
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp


_OPTIONS: dict[str, Any] = {"xla_cpu_use_fusion_emitters": False}


@functools.cache
def _accepted() -> bool:
    # Once per process: the installed XLA compiles a one-line program with the options.
    try:
        jax.jit(lambda x: x + 1).lower(jnp.zeros((), jnp.float32)).compile(dict(_OPTIONS))
    except jax.errors.JaxRuntimeError:
        return False
    return True


def compiler_options() -> dict[str, Any]:
    """The XLA options the package compiles its programs with (a fresh dict).

    `{"xla_cpu_use_fusion_emitters": False}`: the CPU backend's older fusion code generator
    (other backends ignore it). Empty where `XLA_FLAGS` sets the option (your choice stands)
    and where the installed XLA no longer knows it (found once per process by compiling a
    one-line program).
    """
    if set_in_xla_flags():
        return {}
    return dict(_OPTIONS) if _accepted() else {}


def set_in_xla_flags() -> bool:
    """Whether `XLA_FLAGS` names one of the package's options (the user's choice stands)."""
    return any(name in os.environ.get("XLA_FLAGS", "") for name in _OPTIONS)


def _traced(args: tuple, kwargs: dict) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs)))


class _Jit:
    """`eqx.filter_jit(fn, donate=donate)`, given `compiler_options` when it is called (or
    lowered) with no traced argument; called with one (inside `vmap`, `grad` or another
    `jit`), it is the plain program, part of the outer one. A call inside an outer `jit`
    whose arguments are all closed-over constants, where JAX refuses the options, takes the
    plain program too. Each variant is built on its first use (importing the package starts no
    backend) and is one jitted function whose programs are reused like `eqx.filter_jit`'s."""

    def __init__(self, fn: Callable, donate: str, package_options: bool):
        self._fn = fn
        self._donate = donate
        self._package_options = package_options
        self._variants: dict[bool, Any] = {}  # with the options or not
        functools.update_wrapper(self, fn)

    def _get(self, with_options: bool) -> Any:
        if with_options not in self._variants:
            options = compiler_options() if with_options else {}
            kwargs = {"compiler_options": options} if options else {}
            self._variants[with_options] = eqx.filter_jit(self._fn, donate=self._donate, **kwargs)
        return self._variants[with_options]

    def _call(self, method: str, args: tuple, kwargs: dict) -> Any:
        if not self._package_options or _traced(args, kwargs):
            return getattr(self._get(False), method)(*args, **kwargs)
        try:
            return getattr(self._get(True), method)(*args, **kwargs)
        except ValueError as e:  # inside an outer jit, on closed-over constants
            if "compiler_options" not in str(e):
                raise
            return getattr(self._get(False), method)(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        return self._call("__call__", args, kwargs)

    def lower(self, *args, **kwargs):
        """`eqx.filter_jit`'s `lower` (ahead-of-time compilation)."""
        return self._call("lower", args, kwargs)

    def __get__(self, instance, owner=None):
        # As a method decorator: bound to the instance, like `eqx.filter_jit`.
        return self if instance is None else functools.partial(self, instance)


def jit(fn: Callable | None = None, *, donate: str = "none", package_options: bool = True) -> Any:
    """`eqx.filter_jit` of `fn` (arrays traced, everything else static), compiled with
    `compiler_options` when called outside other JAX transformations (`package_options=False`:
    with XLA's defaults). `donate` is `eqx.filter_jit`'s. Use it as `@jit` or
    `@jit(package_options=False)`."""
    if fn is None:
        return lambda f: _Jit(f, donate, package_options)
    return _Jit(fn, donate, package_options)
