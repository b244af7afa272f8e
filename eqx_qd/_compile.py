"""How the package compiles its programs: `compiler_options` and the `jit` decorator every
jitted entry point of the package uses.

XLA's CPU backend has two code generators for its fusions. The newer one (the default in jax
0.10) took twice as long to compile a brax rollout here and ran it slower (walker2d, 64 policies
x 100 steps, AMD EPYC with 2 cores: compile 11.4 s against 5.5 s, run 157 against 113 ms); on
the MAP-Elites loop it compiled in 2.1 s against 1.4 s for the same results bit for bit
(``benchmarks/README.md``, "XLA's CPU fusion emitters"). The package's programs are compiled
with the older one, where the installed XLA still has it, except the PPO / IPPO training
programs (and `train_population` of an agent whose ``package_compiler_options`` is False): on
an AVX-512 machine the older generator ran them at half the speed (cart-pole PPO 75-84k
against 149-173k env steps/s) and their pure-JAX tasks compile about as fast either way.
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

    ``{"xla_cpu_use_fusion_emitters": False}``: the CPU backend's older fusion code generator,
    which compiles brax programs about twice as fast and runs them no slower (other backends
    ignore it). Empty where ``XLA_FLAGS`` sets the option (your choice stands) and where the
    installed XLA no longer knows it (found once per process by compiling a one-line program).
    For your own programs use `jit`, which passes them only where JAX accepts them.
    """
    if any(name in os.environ.get("XLA_FLAGS", "") for name in _OPTIONS):
        return {}
    return dict(_OPTIONS) if _accepted() else {}


try:  # JAX-internal: whether no transformation is tracing
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # pragma: no cover - a JAX without it: no options anywhere
    _trace_state_clean = None


def _at_top_level() -> bool:
    """Whether no JAX transformation is tracing (XLA options may only go to an outermost
    ``jax.jit``). False where the installed JAX no longer has the check: no options then."""
    return _trace_state_clean is not None and bool(_trace_state_clean())


class _Jit:
    """``eqx.filter_jit(fn, donate=donate)``, given the package's `compiler_options` when it
    is called (or lowered) outside any JAX transformation; inside one (an outer jit, vmap,
    grad, ...) the outer program's options rule, as JAX only takes options at the top. Each
    variant is built on its first call (so importing the package starts no backend, and the
    options are read once), and is one jitted function whose compiled programs are reused
    like ``eqx.filter_jit``'s."""

    def __init__(self, fn: Callable, donate: str, package_options: bool = True):
        self._fn = fn
        self._donate = donate
        self._package_options = package_options
        self._variants: dict[bool, Any] = {}  # at the top level or not
        functools.update_wrapper(self, fn)

    def _get(self) -> Any:
        top = _at_top_level()
        if top not in self._variants:
            options = compiler_options() if top and self._package_options else {}
            kwargs = {"compiler_options": options} if options else {}
            self._variants[top] = eqx.filter_jit(self._fn, donate=self._donate, **kwargs)
        return self._variants[top]

    def __call__(self, *args, **kwargs):
        return self._get()(*args, **kwargs)

    def lower(self, *args, **kwargs):
        """``eqx.filter_jit``'s ``lower`` (ahead-of-time compilation)."""
        return self._get().lower(*args, **kwargs)

    def __get__(self, instance, owner=None):
        # As a method decorator: bound to the instance, like ``eqx.filter_jit``.
        return self if instance is None else functools.partial(self, instance)


def jit(fn: Callable | None = None, *, donate: str = "none", package_options: bool = True) -> Any:
    """`eqx.filter_jit` of ``fn`` (arrays traced, everything else static) compiled with the
    package's `compiler_options` when called outside other JAX transformations (inside one, the
    outer program's options rule). ``donate`` is ``eqx.filter_jit``'s; ``package_options=False``
    compiles with XLA's own defaults (the PPO / IPPO training programs do). Use it as
    ``jit(fn)``, ``@jit`` or ``@jit(donate="all")``: ``q.jit(algo.init)(genotypes, cells,
    key=key)``."""
    if fn is None:
        return lambda f: _Jit(f, donate, package_options)
    return _Jit(fn, donate, package_options)
