"""Programs compiled with XLA's default CPU fusion code generator, for the tests that compare
two programs bit for bit (not a test module).

The suite compiles every program with the older generator (the top-level `conftest.py`, for
compile time; the package's own programs ask for it too: `eqx_qd/_compile.py`). Two different
programs of the same arithmetic agree bit for bit under one generator when XLA fuses them
alike, and the tests that claim it were written and checked under the default one, where they
hold; under the older generator brax's physics and a log-uniform draw agree only to float
rounding."""

import equinox as eqx


def call(fn, *args):
    """`fn(*args)`, compiled (as `eqx.filter_jit` would) with the default generator."""
    lowered = eqx.filter_jit(fn).lower(*args)
    return lowered.compile({"xla_cpu_use_fusion_emitters": True})(*args)
